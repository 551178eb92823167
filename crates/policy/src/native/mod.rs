//! Standalone mode's local controller: what antrea-controller does for Antrea-native policies,
//! done on the VM with no cluster. Objects of `crd.antrea.io` (NetworkPolicy,
//! ClusterNetworkPolicy, Tier, ClusterGroup, Group, ExternalEntity) and core Namespaces are
//! decoded and checked (`objects`, `types`, `selector`, `schema`), then translated into the controlplane
//! objects the agent enforces (`controller`), kept running between changes so that a change
//! costs what it touches (`incremental`). Pure: no I/O.

pub mod controller;
pub mod incremental;
pub mod objects;
pub mod schema;
pub mod selector;
pub mod types;

pub use controller::{translate, Entity, Inputs, Translation};
pub use incremental::{native_key, Change, Delta, NativeKey, NativeState};
pub use objects::{cluster_warnings, decode, is_native, NativeKind, NativeObject};

#[cfg(test)]
mod incremental_tests;
#[cfg(test)]
mod strict_tests;
#[cfg(test)]
mod tests;
