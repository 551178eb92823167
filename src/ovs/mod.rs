//! Open vSwitch adapters: the OVSDB client (`ovsdb`) and the OpenFlow codec and connection
//! (`openflow`), and ovs-vswitchd's control socket (`vswitchd`: the datapath flow cache). Each
//! sits behind a small trait with a fake beside it.

pub mod openflow;
pub mod ovsdb;
pub mod vswitchd;
