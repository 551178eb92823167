//! The defaults of `antrea-agent.conf` keys and the feature gates an external Node accepts or
//! refuses: the constants [`super::Config`] falls back on, in one place.

/// Default OVS bridge (`ovsBridge`).
pub const DEFAULT_OVS_BRIDGE: &str = "br-int";
/// Default OVS run directory (`ovsRunDir`), where `db.sock` and `<bridge>.mgmt` live.
pub const DEFAULT_OVS_RUN_DIR: &str = "/var/run/openvswitch";
/// Default Namespace of the ExternalNode (`externalNode.externalNodeNamespace`).
pub const DEFAULT_EXTERNAL_NODE_NAMESPACE: &str = "default";
/// Default port of the agent API (`apiPort`).
pub const DEFAULT_API_PORT: u16 = 10350;
/// Default packet-in rate limit per category, in packets per second (`packetInRate`).
pub const DEFAULT_PACKET_IN_RATE: u32 = 5000;
/// Default directory for the agent's own persistent state (`stateDir`).
pub const DEFAULT_STATE_DIR: &str = "/var/lib/antrea-vm-agent";
/// Default address of the metrics and health listener (`metricsServer.bindAddress`): loopback,
/// next to upstream's agent API port 10350 (which we leave free for it).
pub const DEFAULT_METRICS_BIND_ADDRESS: &str = "127.0.0.1:10351";
/// Default unix socket of the agent API used by `antrea-vm-agent get` (`agentAPI.socket`).
pub const DEFAULT_AGENT_API_SOCKET: &str = "/var/run/antrea/antrea-vm-agent.sock";

/// Feature gates that Antrea supports on external Nodes (`supportedFeaturesOnExternalNode`).
pub const SUPPORTED_FEATURES_ON_EXTERNAL_NODE: [&str; 6] = [
    "ExternalNode",
    "AntreaPolicy",
    "NetworkPolicyStats",
    "SupportBundleCollection",
    "L7NetworkPolicy",
    "AdminNetworkPolicy",
];

/// Feature gates Antrea supports on external Nodes that this agent does not implement: enabling
/// one is a configuration error (enforce or refuse), with the reason.
pub const REFUSED_FEATURE_GATES: [(&str, &str); 2] = [
    (
        "SupportBundleCollection",
        "SupportBundleCollection is not implemented by antrea-vm-agent: a SupportBundleCollection \
         aimed at this VM would never complete; set it to false (write a bundle on the VM with \
         `antrea-vm-agent supportbundle` instead)",
    ),
    (
        "L7NetworkPolicy",
        "L7NetworkPolicy is not implemented by antrea-vm-agent (there is no L7 engine on the VM): \
         set it to false; rules with l7Protocols are then installed fail-closed (they drop the \
         traffic they match) and reported as not realized",
    ),
];

/// The only `trafficEncapMode` accepted on an external Node (exact, case-sensitive).
pub(super) const NO_ENCAP: &str = "noEncap";
