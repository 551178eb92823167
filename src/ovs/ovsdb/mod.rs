//! The agent's OVSDB edge: the RFC 7047 client is the `ovs-ovsdb` crate (`crates/ovsdb`: the
//! [`Ovsdb`] trait, [`OvsdbClient`], JSON-RPC and protocol helpers), re-exported here under its
//! module names so `crate::ovs::ovsdb::...` paths keep meaning what they did. Beside it, the
//! in-process fake for actor tests (`fake.rs`) and, for tests only, a private OVS
//! (`testutil.rs`) with the client's lab tests (`lab_tests.rs`).

pub use ovs_ovsdb::{
    client, jsonrpc, proto, BridgeSpec, Ovsdb, OvsdbClient, OvsdbError, PortRecord, PortSpec,
};

#[cfg(any(test, feature = "test-util"))]
pub mod fake;
#[cfg(test)]
#[cfg(feature = "lab")]
mod lab_tests;
#[cfg(test)]
#[cfg(feature = "lab")]
mod testutil;

#[cfg(any(test, feature = "test-util"))]
pub use fake::FakeOvsdb;
