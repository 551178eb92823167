//! FQDN egress rules: DNS responses to the VM are intercepted (paused in the switch), the
//! addresses they give are added to the rules selecting their names, and only once the flows
//! are committed is the response released, so the first connection never races the flows.
//!
//! | file | what it owns |
//! |---|---|
//! | `dns.rs` | DNS responses in packet-in frames: UDP, TCP reassembly, answers and CNAME chains (pure) |
//! | `cache.rs` | name → addresses with expiry, limits and LRU eviction, save/load (pure) |
//! | `flows.rs` | the FQDN clause flows and their incremental delta (pure) |
//! | `requery.rs` | when each cached name is asked again, before it expires (pure) |
//! | `resolver.rs` | the re-query worker: its own thread, the server from `dnsServerOverride` or `/etc/resolv.conf` |
//! | `controller.rs` | the runtime: its own thread and OpenFlow connection, pause → commit → resume |
//!
//! The selectors themselves (validation, normalization, Antrea's wildcard matching) are part of
//! the policy language and live in `policy::fqdn_selector`; they are re-exported here as
//! `selector`.

pub mod cache;
pub mod controller;
pub mod dns;
pub mod flows;
pub mod requery;
pub mod resolver;

pub use crate::policy::fqdn_selector::{self as selector, normalize};
pub use controller::{FqdnCounts, FqdnHandle, FqdnStats, Hold};
