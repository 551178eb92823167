//! Uplinks: the procedures that move a host NIC behind OVS (the NIC renamed to `<name>~` as the
//! uplink port, an internal port taking its name, MTU, addresses and routes) and put it back
//! exactly, written over the [`crate::host::HostNet`] and [`crate::ovs::ovsdb::Ovsdb`] traits
//! so that they run the same against the kernel and OVSDB or against their fakes.
//!
//! - [`procedures`]: attach, detach, identity updates, recovery at start, healing;
//! - [`store`]: the per-interface records under `<stateDir>/interfaces/`, with the phase/step
//!   journal a start after a crash resumes from;
//! - [`repair`]: re-creating a bridge, ports or uplink removed under attached interfaces;
//! - [`stale`]: the pure decision which leftover kernel device may be deleted;
//! - [`offline`]: `antrea-vm-agent detach-all` (the same roll back without an agent);
//! - [`lock`]: the state-dir lock that tells whether an agent (or a `detach-all`) runs.
//!
//! The interface manager actor (`actors::interface_manager`) decides what to attach or detach
//! and calls in here; nothing here keeps state between calls except the records on disk.

pub mod lock;
pub mod offline;
pub mod procedures;
pub mod repair;
pub mod stale;
pub mod store;
