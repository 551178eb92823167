//! Open vSwitch adapters: the OVSDB client (`ovsdb`) and the OpenFlow codec and connection
//! (`openflow`). Each sits behind a small trait with a fake beside it.

pub mod openflow;
pub mod ovsdb;
