//! Test support shared by the end-to-end tests (`mod support;` in `tests/*.rs`).
//!
//! Owns the lab: a "VM" and an "outside host" as two network namespaces joined by a veth pair, a
//! private Open vSwitch (userspace datapath) running inside the VM namespace, helpers to run commands
//! and generate traffic there, and the agent process under test. See `lab.rs` for the topology.
//!
//! Every test binary compiles this module but uses only part of it. `source_scan.rs` beside it is
//! not part of it: the tests that read the agent's sources include that file by its path.
#![allow(dead_code, unused_imports)]

mod agent;
mod dnsmasq;
pub mod emulator;
mod lab;
mod probe;
mod traffic;
mod util;

pub use agent::{agent_binary, AgentProcess};
pub use dnsmasq::Dnsmasq;
pub use lab::*;
pub use probe::{ConnProbe, Recovery};
pub use traffic::{PingFlood, PingResult};
pub use util::{in_netns, poll_until, wait_until, CommandOutputExt};
