//! FQDN egress rules: DNS responses to the VM are intercepted (paused in the switch), the
//! addresses they give are added to the rules selecting their names, and only once the flows
//! are committed is the response released, so the first connection never races the flows.
//!
//! | file | what it owns |
//! |---|---|
//! | `selector.rs` | FQDN selectors: validation, Antrea's wildcard matching (pure) |
//! | `dns.rs` | DNS responses in packet-in frames: UDP, TCP reassembly, answers and CNAME chains (pure) |
//! | `cache.rs` | name → addresses with expiry, limits and LRU eviction, save/load (pure) |
//! | `flows.rs` | the FQDN clause flows and their incremental delta (pure) |
//! | `requery.rs` | when each cached name is asked again, before it expires (pure) |
//! | `resolver.rs` | the re-query worker: its own thread, the server from `dnsServerOverride` or `/etc/resolv.conf` |
//! | `controller.rs` | the runtime: its own thread and OpenFlow connection, pause → commit → resume |

pub mod cache;
pub mod controller;
pub mod dns;
pub mod flows;
pub mod requery;
pub mod resolver;
pub mod selector;

pub use controller::{FqdnCounts, FqdnHandle, FqdnStats, Hold};
pub use selector::normalize;
