//! antrea-vm-agent: Antrea NetworkPolicy for virtual machines and bare-metal servers.
//!
//! The library behind the `antrea-vm-agent` binary. Five actors own the state (`actors`), they
//! exchange the facts in `messages`, pure modules compute (`policy`), adapters talk to the
//! outside world (`ovs`, `host`), and `uplink` holds the procedures that move a NIC behind OVS and
//! back. See docs/architecture.md for the map.
#![deny(unsafe_code)]

pub mod actors;
pub mod api;
pub mod attachment;
pub mod cli;
pub mod config;
pub mod error_kind;
pub mod failpoint;
pub mod fqdn;
pub mod host;
pub mod k8s;
pub mod memory;
pub mod messages;
pub mod ovs;
pub mod packetin;
pub mod parallel;
pub mod parallel_jobs;
pub mod policy;
pub mod retry;
pub mod sources;
pub mod supportbundle;
pub mod telemetry;
pub mod uplink;
pub mod version;
pub mod views;
