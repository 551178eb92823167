//! `antrea-agent.conf` for external nodes: parsing, defaults and validation.
//!
//! Owns the translation of Antrea's agent configuration file (YAML) into a validated, typed
//! [`Config`]. The file is read once at start-up; nothing else in the crate looks at YAML keys.
//!
//! Compatibility rules:
//! - Keys and their meaning follow Antrea's `antrea-agent.conf` for `nodeType: externalNode`, with the
//!   same defaults and, where Antrea validates, the same messages (`policyBypassRules`, feature gates,
//!   datapath type, `apiPort`, `fqdnCacheMinTTL`).
//! - Unknown keys (at any level) and Antrea keys this agent does not use are accepted and collected in
//!   [`Config::ignored_keys`] so that the caller can log them in one line; a config written for the Go
//!   agent therefore works unchanged.
//! - Every problem in the file is reported, each with the dotted path of the offending key
//!   ([`ConfigErrors`]); for one `policyBypassRules` entry the reported message is Antrea's first
//!   failing check.
//!
//! Deliberate differences from Antrea: only `nodeType: externalNode` is accepted; `ovsDatapathType:
//! netdev` is accepted (the userspace datapath, used by the lab); IPv6 CIDRs in `policyBypassRules` are
//! kept and produce IPv6 flows. Our additions: `standalone.externalNodeFile`, `standalone.policyDir`,
//! `stateDir`, `metricsServer` (the TCP listener of `/metrics`, `/livez`, `/readyz`) and
//! `agentAPI.socket` (the unix socket of the `get` commands).

use std::{
    collections::BTreeMap,
    fmt,
    net::SocketAddr,
    path::{Path, PathBuf},
};

use ipnet::IpNet;
use serde_norway::{Mapping, Value};

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
         aimed at this VM would never complete; set it to false (collect the agent's log, \
         `antrea-vm-agent get agentinfo` and `get ovsflows` instead)",
    ),
    (
        "L7NetworkPolicy",
        "L7NetworkPolicy is not implemented by antrea-vm-agent (there is no L7 engine on the VM): \
         set it to false; rules with l7Protocols are then installed fail-closed (they drop the \
         traffic they match) and reported as not realized",
    ),
];

/// The only `trafficEncapMode` accepted on an external Node (exact, case-sensitive).
const NO_ENCAP: &str = "noEncap";

/// One problem found in the configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Dotted path of the offending key, e.g. `externalNode.policyBypassRules[1].cidr`; for a file
    /// that cannot be read or decoded, the file's path.
    pub path: String,
    /// What is wrong, in Antrea's words where Antrea has a message for it.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Every problem found in a configuration file. Displays one line per problem, `path: message`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", render_problems(.problems))]
pub struct ConfigErrors {
    pub problems: Vec<Problem>,
}

fn render_problems(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(Problem::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

impl ConfigErrors {
    fn single(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigErrors {
            problems: vec![Problem {
                path: path.into(),
                message: message.into(),
            }],
        }
    }
}

/// `nodeType`. This agent only runs on external Nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeType {
    ExternalNode,
}

impl NodeType {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeType::ExternalNode => "externalNode",
        }
    }
}

/// `ovsDatapathType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DatapathType {
    /// The kernel datapath (production).
    System,
    /// The userspace datapath (no kernel module; the lab).
    Netdev,
}

impl DatapathType {
    /// The value of the OVSDB `Bridge.datapath_type` column.
    pub fn as_str(self) -> &'static str {
        match self {
            DatapathType::System => "system",
            DatapathType::Netdev => "netdev",
        }
    }
}

/// Direction of a policy bypass rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Direction {
    Ingress,
    Egress,
}

/// Protocol of a policy bypass rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BypassProtocol {
    Tcp,
    Udp,
    Icmp,
    /// Any IP protocol.
    Ip,
}

/// One `externalNode.policyBypassRules` entry: traffic that skips NetworkPolicy enforcement.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BypassRule {
    pub direction: Direction,
    pub protocol: BypassProtocol,
    /// The remote peer, normalised to its network address (as Go's `net.ParseCIDR` returns it).
    /// IPv4 or IPv6.
    pub cidr: IpNet,
    /// Destination port; meaningful for TCP and UDP only (never 0 for those), 0 otherwise unless set.
    pub port: u16,
}

/// `auditLogging`: rotation of the NetworkPolicy audit log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditLogging {
    /// Maximum size of a log file before rotation, in MB (default 500).
    pub max_size_mb: u32,
    /// Rotated files to keep; 0 keeps all (default 3).
    pub max_backups: u32,
    /// Days to keep rotated files; 0 means no age limit (default 28).
    pub max_age_days: u32,
    /// gzip the rotated files (default true).
    pub compress: bool,
    /// Directory of `np.log` (our addition, key `logDir`; default Antrea's
    /// `/var/log/antrea/networkpolicy`).
    pub log_dir: PathBuf,
}

impl Default for AuditLogging {
    fn default() -> Self {
        AuditLogging {
            max_size_mb: 500,
            max_backups: 3,
            max_age_days: 28,
            compress: true,
            log_dir: PathBuf::from("/var/log/antrea/networkpolicy"),
        }
    }
}

/// `standalone`: run without Kubernetes, from local files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Standalone {
    /// An ExternalNode object (YAML) standing in for the one normally read from the API server; its
    /// removal means the ExternalNode was deleted.
    pub external_node_file: PathBuf,
    /// Directory of local policy files.
    pub policy_dir: Option<PathBuf>,
    /// Limits on reading and parsing both.
    pub input_limits: InputLimits,
}

/// `standalone.inputLimits`: what one policy file or the ExternalNode file may cost to parse.
/// The defaults are far above real files (a 10,000-rule policy set is about 2 MB over many
/// files, nested 8 levels deep); larger or deeper input is refused with an error naming the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputLimits {
    /// `maxFileBytes`: the largest file read (default 8 MiB).
    pub max_file_bytes: u64,
    /// `maxNestingDepth`: the deepest nesting of lists and mappings (default 64, at most 128).
    pub max_nesting_depth: usize,
    /// `maxElements`: the most values (scalars, lists, mappings) in one file (default 200,000; a
    /// policy with ten rules has about 60, an AddressGroup of 10,000 IPs about 40,000).
    pub max_elements: usize,
}

impl Default for InputLimits {
    fn default() -> Self {
        InputLimits {
            max_file_bytes: 8 << 20,
            max_nesting_depth: 64,
            max_elements: 200_000,
        }
    }
}

/// The YAML parser's own recursion limit: a deeper `maxNestingDepth` could never be reached.
pub const MAX_NESTING_DEPTH_LIMIT: usize = 128;

/// A certificate chain and its private key, both PEM files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

/// `metricsServer` (our addition): the TCP listener serving `/metrics`, `/livez` and `/readyz`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricsServer {
    /// `bindAddress` (`IP:port`); `None` when set to `""` (no listener).
    pub bind_address: Option<SocketAddr>,
    /// `tlsCertFile` + `tlsKeyFile`: serve HTTPS instead of HTTP.
    pub tls: Option<TlsFiles>,
    /// `bearerTokenFile`: `/metrics` then requires `Authorization: Bearer <file contents>`
    /// (the health paths stay open, as upstream's always-allow paths).
    pub bearer_token_file: Option<PathBuf>,
}

impl Default for MetricsServer {
    fn default() -> Self {
        MetricsServer {
            bind_address: DEFAULT_METRICS_BIND_ADDRESS.parse().ok(),
            tls: None,
            bearer_token_file: None,
        }
    }
}

/// The validated agent configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub node_type: NodeType,
    /// The user's `featureGates` map, as written.
    pub feature_gates: BTreeMap<String, bool>,
    pub ovs_bridge: String,
    pub ovs_datapath_type: DatapathType,
    /// Directory holding the OVSDB socket and the bridge's OpenFlow management socket.
    pub ovs_run_dir: PathBuf,
    pub external_node_namespace: String,
    pub policy_bypass_rules: Vec<BypassRule>,
    /// `clientConnection.kubeconfig` (kube-apiserver), absolute.
    pub kubeconfig: Option<PathBuf>,
    /// `antreaClientConnection.kubeconfig` (antrea-controller), absolute.
    pub antrea_kubeconfig: Option<PathBuf>,
    pub audit_logging: AuditLogging,
    /// Port of the agent API, bound to 127.0.0.1.
    pub api_port: u16,
    /// Lower bound applied to DNS TTLs by the FQDN controller, in seconds (default 0).
    pub fqdn_cache_min_ttl: u32,
    /// `dnsServerOverride`: where the FQDN controller re-queries names before they expire
    /// (`host:port`, port 53 added when missing); `None` means the VM's `/etc/resolv.conf`.
    /// Upstream ignores this key on external Nodes; this agent honours it.
    pub dns_server_override: Option<String>,
    pub disable_tx_checksum_offload: bool,
    /// Packet-in rate limit per category, packets per second (burst and queue are twice this).
    pub packet_in_rate: u32,
    /// Set when `standalone.externalNodeFile` is given: run without Kubernetes.
    pub standalone: Option<Standalone>,
    /// Directory for the agent's persistent state (journals, round number).
    pub state_dir: PathBuf,
    pub metrics_server: MetricsServer,
    /// `agentAPI.socket`: the unix socket of the agent API (mode 0600).
    pub agent_api_socket: PathBuf,
    /// Dotted paths of the keys that were accepted but are not used, sorted.
    pub ignored_keys: Vec<String>,
}

impl Config {
    /// Parses and validates a configuration. Relative paths resolve against the working directory.
    pub fn from_yaml_str(yaml: &str) -> Result<Config, ConfigErrors> {
        let base = std::env::current_dir().unwrap_or_default();
        parse(yaml, &base, "config")
    }

    /// Reads, parses and validates the configuration file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigErrors::single(&shown, format!("failed to read config file: {e}")))?;
        let base = std::env::current_dir().unwrap_or_default();
        parse(&text, &base, &shown)
    }

    /// [`Config::load`] with `feature_gates` (the command line's `--feature-gates`) set over the
    /// file's `featureGates`, then validated as if written there.
    pub fn load_with_feature_gates(
        path: &Path,
        feature_gates: &BTreeMap<String, bool>,
    ) -> Result<Config, ConfigErrors> {
        if feature_gates.is_empty() {
            return Config::load(path);
        }
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigErrors::single(&shown, format!("failed to read config file: {e}")))?;
        let mut doc: Value = serde_norway::from_str(&text).map_err(|e| {
            ConfigErrors::single(&shown, format!("failed to decode config file {shown}: {e}"))
        })?;
        if doc.is_null() {
            doc = Value::Mapping(Mapping::new());
        }
        let base = std::env::current_dir().unwrap_or_default();
        let Value::Mapping(root) = &mut doc else {
            return parse(&text, &base, &shown);
        };
        let key = Value::String("featureGates".into());
        if root.get(&key).is_some_and(|g| !g.is_mapping() && !g.is_null()) {
            // The file's own problem, reported as such.
            return parse(&text, &base, &shown);
        }
        let gates = root.entry(key).or_insert_with(|| Value::Mapping(Mapping::new()));
        if gates.is_null() {
            *gates = Value::Mapping(Mapping::new());
        }
        if let Value::Mapping(gates) = gates {
            for (name, on) in feature_gates {
                gates.insert(Value::String(name.clone()), Value::Bool(*on));
            }
        }
        let merged = serde_norway::to_string(&doc)
            .map_err(|e| ConfigErrors::single(&shown, format!("cannot apply --feature-gates: {e}")))?;
        parse(&merged, &base, &format!("{shown} with --feature-gates"))
    }

    /// The OVSDB server socket, `<ovsRunDir>/db.sock`.
    pub fn ovsdb_socket(&self) -> PathBuf {
        self.ovs_run_dir.join("db.sock")
    }

    /// The bridge's OpenFlow management socket, `<ovsRunDir>/<ovsBridge>.mgmt`.
    pub fn openflow_socket(&self) -> PathBuf {
        self.ovs_run_dir.join(format!("{}.mgmt", self.ovs_bridge))
    }

    /// Whether the feature gate is explicitly enabled in `featureGates`.
    pub fn feature_enabled(&self, gate: &str) -> bool {
        self.feature_gates.get(gate).copied().unwrap_or(false)
    }
}

/// The name of this ExternalNode: `NODE_NAME` if set and non-empty, else the kernel host name.
pub fn node_name() -> String {
    if let Ok(name) = std::env::var("NODE_NAME") {
        if !name.is_empty() {
            return name;
        }
    }
    for file in ["/proc/sys/kernel/hostname", "/etc/hostname"] {
        if let Ok(text) = std::fs::read_to_string(file) {
            let name = text.trim();
            if !name.is_empty() {
                return name.to_string();
            }
        }
    }
    "localhost".to_string()
}

/// A period from an environment override (`ANTREA_VM_AGENT_*`): `500ms`, `30s` or `5m`, greater
/// than zero; anything else is `None`.
pub fn parse_period(text: &str) -> Option<std::time::Duration> {
    let text = text.trim();
    let (number, unit): (&str, fn(u64) -> std::time::Duration) = if let Some(n) = text.strip_suffix("ms") {
        (n, std::time::Duration::from_millis)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, std::time::Duration::from_secs)
    } else if let Some(n) = text.strip_suffix('m') {
        (n, |m| std::time::Duration::from_secs(m.saturating_mul(60)))
    } else {
        return None;
    };
    number.parse::<u64>().ok().filter(|n| *n > 0).map(unit)
}

// === parsing ===

/// Antrea keys that mean something on a VM but that this agent does not implement: set to anything
/// but their default they are refused, each with the reason (enforce or refuse: a config key is
/// implemented or refused, never silently dropped). `value_is_default` says when the key asks
/// for nothing the agent does not already do.
/// A key, whether its value asks for nothing the agent does not do, and the refusal's message.
type UnimplementedKey = (&'static str, fn(&Value) -> bool, &'static str);

const UNIMPLEMENTED_KEYS: &[UnimplementedKey] = &[
    (
        "kubeAPIServerOverride",
        is_empty_value,
        "kubeAPIServerOverride is not implemented by antrea-vm-agent: it reaches kube-apiserver only \
         through clientConnection.kubeconfig; put the server's address in that kubeconfig",
    ),
    (
        "tlsMinVersion",
        is_empty_value,
        "tlsMinVersion is not implemented by antrea-vm-agent: it serves no Antrea API port (its \
         agent API is a unix socket, and metricsServer has its own TLS settings)",
    ),
    (
        "tlsCipherSuites",
        is_empty_value,
        "tlsCipherSuites is not implemented by antrea-vm-agent: it serves no Antrea API port (its \
         agent API is a unix socket, and metricsServer has its own TLS settings)",
    ),
    (
        "enablePrometheusMetrics",
        is_true_or_empty,
        "enablePrometheusMetrics: false is not implemented as such: antrea-vm-agent serves /metrics \
         on metricsServer.bindAddress; set metricsServer.bindAddress: \"\" to turn the listener off",
    ),
];

fn is_empty_value(v: &Value) -> bool {
    match untag(v) {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Sequence(seq) => seq.is_empty(),
        _ => false,
    }
}

fn is_true_or_empty(v: &Value) -> bool {
    matches!(untag(v), Value::Null | Value::Bool(true))
}

/// Records a problem for every [`UNIMPLEMENTED_KEYS`] entry set to something the agent would not do.
fn refuse_unimplemented_keys(p: &mut Parser<'_>, root: &Mapping) {
    for (key, value_is_default, message) in UNIMPLEMENTED_KEYS {
        if let Some(v) = root.get(*key) {
            if !value_is_default(v) {
                p.problem(*key, *message);
            }
        }
    }
}

/// Top-level keys this agent reads. Anything else is ignored (and reported as such).
const TOP_LEVEL_KEYS: &[&str] = &[
    "nodeType",
    "featureGates",
    "ovsBridge",
    "ovsDatapathType",
    "ovsRunDir",
    "externalNode",
    "clientConnection",
    "antreaClientConnection",
    "auditLogging",
    "apiPort",
    "trafficEncapMode",
    "nodePortLocal",
    "fqdnCacheMinTTL",
    "dnsServerOverride",
    "disableTXChecksumOffload",
    "packetInRate",
    "standalone",
    "stateDir",
    "metricsServer",
    "agentAPI",
];

fn parse(yaml: &str, base: &Path, source: &str) -> Result<Config, ConfigErrors> {
    let doc: Value = serde_norway::from_str(yaml)
        .map_err(|e| ConfigErrors::single(source, format!("failed to decode config file {source}: {e}")))?;
    let mut p = Parser {
        problems: Vec::new(),
        ignored: Vec::new(),
        base,
    };
    let empty = Mapping::new();
    let root = match untag(&doc) {
        Value::Null => &empty,
        Value::Mapping(m) => m,
        other => {
            return Err(ConfigErrors::single(
                source,
                format!(
                    "the configuration must be a YAML mapping, got {}",
                    describe(other)
                ),
            ))
        }
    };
    let top = p.fields(root, "", TOP_LEVEL_KEYS);
    refuse_unimplemented_keys(&mut p, root);

    // Structural reading: types and defaults. Problems are recorded in file order.
    let node_type_raw = p.string(&top, "nodeType", "");
    let feature_gates = p.feature_gates(top.get("featureGates"));
    let ovs_bridge = p
        .string(&top, "ovsBridge", "")
        .unwrap_or_else(|| DEFAULT_OVS_BRIDGE.to_string());
    let datapath_raw = p.string(&top, "ovsDatapathType", "");
    let ovs_run_dir = p
        .path(&top, "ovsRunDir", "")
        .unwrap_or_else(|| PathBuf::from(DEFAULT_OVS_RUN_DIR));

    let ext = p.section(
        &top,
        "externalNode",
        &["externalNodeNamespace", "policyBypassRules"],
    );
    let namespace = p
        .string(&ext, "externalNodeNamespace", "externalNode")
        .unwrap_or_else(|| DEFAULT_EXTERNAL_NODE_NAMESPACE.to_string());
    let raw_rules = p.bypass_rules(ext.get("policyBypassRules"));

    let client = p.section(&top, "clientConnection", &["kubeconfig"]);
    let kubeconfig = p.path(&client, "kubeconfig", "clientConnection");
    let antrea_client = p.section(&top, "antreaClientConnection", &["kubeconfig"]);
    let antrea_kubeconfig = p.path(&antrea_client, "kubeconfig", "antreaClientConnection");

    let audit = p.section(
        &top,
        "auditLogging",
        &["maxSize", "maxBackups", "maxAge", "compress", "logDir"],
    );
    let defaults = AuditLogging::default();
    let audit_logging = AuditLogging {
        // Antrea treats 0 as "use the default" for maxSize only; 0 is meaningful for the others.
        max_size_mb: match p.unsigned(&audit, "maxSize", "auditLogging") {
            Some(0) | None => defaults.max_size_mb,
            Some(v) => v,
        },
        max_backups: p
            .unsigned(&audit, "maxBackups", "auditLogging")
            .unwrap_or(defaults.max_backups),
        max_age_days: p
            .unsigned(&audit, "maxAge", "auditLogging")
            .unwrap_or(defaults.max_age_days),
        compress: p
            .boolean(&audit, "compress", "auditLogging")
            .unwrap_or(defaults.compress),
        log_dir: p
            .path(&audit, "logDir", "auditLogging")
            .unwrap_or(defaults.log_dir),
    };

    let api_port_raw = p.integer(&top, "apiPort", "");
    let traffic_encap_mode = p.string(&top, "trafficEncapMode", "");
    let npl = p.section(&top, "nodePortLocal", &["enable"]);
    let npl_enable = p.boolean(&npl, "enable", "nodePortLocal").unwrap_or(false);
    let fqdn_min_ttl_raw = p.integer(&top, "fqdnCacheMinTTL", "");
    let dns_server_override_raw = p.string(&top, "dnsServerOverride", "");
    let disable_tx_checksum_offload = p.boolean(&top, "disableTXChecksumOffload", "").unwrap_or(false);
    let packet_in_rate_raw = p.integer(&top, "packetInRate", "");

    let sa = p.section(
        &top,
        "standalone",
        &["externalNodeFile", "policyDir", "inputLimits"],
    );
    let en_file = p.path(&sa, "externalNodeFile", "standalone");
    let policy_dir = p.path(&sa, "policyDir", "standalone");
    let input_limits = p.input_limits(&sa);
    let state_dir = p
        .path(&top, "stateDir", "")
        .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR));
    let metrics_server = p.metrics_server(&top);
    let agent_api = p.section(&top, "agentAPI", &["socket"]);
    let agent_api_socket = p
        .path(&agent_api, "socket", "agentAPI")
        .unwrap_or_else(|| PathBuf::from(DEFAULT_AGENT_API_SOCKET));

    // Validation, in Antrea's order where Antrea validates.
    let node_type = match node_type_raw.as_deref() {
        Some("externalNode") => Some(NodeType::ExternalNode),
        None | Some("") => {
            p.problem(
                "nodeType",
                "nodeType is not set (Antrea's default is k8sNode); this agent only runs on external Nodes: \
                 set nodeType: externalNode",
            );
            None
        }
        Some("k8sNode") => {
            p.problem(
                "nodeType",
                "nodeType k8sNode is not supported: this agent only runs on external Nodes \
                 (nodeType: externalNode)",
            );
            None
        }
        Some(other) => {
            p.problem(
                "nodeType",
                format!(
                    "unsupported nodeType {other}: this agent only runs on external Nodes \
                     (nodeType: externalNode)"
                ),
            );
            None
        }
    };

    let ovs_datapath_type = match datapath_raw.as_deref() {
        None | Some("") | Some("system") => DatapathType::System,
        Some("netdev") => DatapathType::Netdev,
        Some(other) => {
            p.problem(
                "ovsDatapathType",
                format!("OVS datapath type {other} is not supported"),
            );
            DatapathType::System
        }
    };

    if let Err(why) = check_interface_name(&ovs_bridge) {
        p.problem(
            "ovsBridge",
            format!("bridge name {ovs_bridge:?} is invalid: {why}"),
        );
    }

    if !feature_gates.get("ExternalNode").copied().unwrap_or(false) {
        p.problem(
            "featureGates.ExternalNode",
            "nodeType externalNode requires feature gate ExternalNode to be enabled",
        );
    }

    let fqdn_cache_min_ttl = match fqdn_min_ttl_raw {
        None => 0,
        Some(v) if v < 0 => {
            p.problem(
                "fqdnCacheMinTTL",
                "fqdnCacheMinTTL must be greater than or equal to 0",
            );
            0
        }
        Some(v) => match u32::try_from(v) {
            Ok(v) => v,
            Err(_) => {
                p.problem("fqdnCacheMinTTL", format!("fqdnCacheMinTTL {v} is too large"));
                0
            }
        },
    };

    let dns_server_override = match dns_server_override_raw.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(v) => match dns_server_host_port(v) {
            Ok(hp) => Some(hp),
            Err(why) => {
                p.problem(
                    "dnsServerOverride",
                    format!("dnsServerOverride {v} is invalid: {why}"),
                );
                None
            }
        },
    };

    let api_port = match api_port_raw {
        // Antrea replaces an unset (zero) apiPort with the default.
        None | Some(0) => DEFAULT_API_PORT,
        Some(v) => match u16::try_from(v) {
            Ok(port) => port,
            Err(_) => {
                p.problem(
                    "apiPort",
                    format!("apiPort is invalid: {v}: must be between 1 and 65535, inclusive"),
                );
                DEFAULT_API_PORT
            }
        },
    };

    // Unsupported features (Antrea's validateExternalNodeOptions): gates in sorted order (Antrea's is
    // map order, i.e. random), then the encap mode, then NodePortLocal.
    let mut unsupported: Vec<String> = Vec::new();
    let mut unsupported_paths: Vec<String> = Vec::new();
    for (gate, enabled) in &feature_gates {
        if *enabled && !SUPPORTED_FEATURES_ON_EXTERNAL_NODE.contains(&gate.as_str()) {
            unsupported.push(gate.clone());
            unsupported_paths.push(format!("featureGates.{gate}"));
        }
    }
    if let Some(mode) = traffic_encap_mode.as_deref() {
        if !mode.is_empty() && mode != NO_ENCAP {
            unsupported.push(mode.to_string());
            unsupported_paths.push("trafficEncapMode".to_string());
        }
    }
    if npl_enable {
        unsupported.push("NodePortLocal".to_string());
        unsupported_paths.push("nodePortLocal.enable".to_string());
    }
    if !unsupported.is_empty() {
        p.problem(
            unsupported_paths.join(", "),
            format!(
                "unsupported features on Virtual Machine: {{{}}}",
                unsupported.join(", ")
            ),
        );
    }
    // Supported by Antrea on VMs, but not implemented here: refused, each with its reason.
    for (gate, why) in REFUSED_FEATURE_GATES {
        if feature_gates.get(gate).copied().unwrap_or(false) {
            p.problem(format!("featureGates.{gate}"), why);
        }
    }

    let mut policy_bypass_rules = Vec::new();
    for (i, raw) in raw_rules.iter().enumerate() {
        match raw.validate() {
            Ok(rule) => policy_bypass_rules.push(rule),
            Err((field, inner)) => p.problem(
                format!("externalNode.policyBypassRules[{i}].{field}"),
                format!("policyBypassRules configuration is invalid: {inner}"),
            ),
        }
    }

    let packet_in_rate = match packet_in_rate_raw {
        None | Some(0) => DEFAULT_PACKET_IN_RATE,
        Some(v) => match u32::try_from(v) {
            Ok(v) => v,
            Err(_) => {
                p.problem(
                    "packetInRate",
                    format!("packetInRate {v} is invalid: must be a positive number"),
                );
                DEFAULT_PACKET_IN_RATE
            }
        },
    };

    if let Err(why) = check_dns1123_label(&namespace) {
        p.problem(
            "externalNode.externalNodeNamespace",
            format!("{namespace:?} is not a valid Namespace name: {why}"),
        );
    }

    let standalone = match (en_file, policy_dir) {
        (Some(external_node_file), policy_dir) => Some(Standalone {
            external_node_file,
            policy_dir,
            input_limits,
        }),
        (None, Some(_)) => {
            p.problem(
                "standalone.policyDir",
                "standalone.policyDir requires standalone.externalNodeFile",
            );
            None
        }
        (None, None) => None,
    };
    if standalone.is_none() && kubeconfig.is_none() {
        p.problem(
            "clientConnection.kubeconfig",
            "a kubeconfig for the Kubernetes API is required on an external Node \
             (or set standalone.externalNodeFile to run without Kubernetes)",
        );
    }

    if !p.problems.is_empty() {
        return Err(ConfigErrors { problems: p.problems });
    }
    let mut ignored_keys = p.ignored;
    ignored_keys.sort();
    ignored_keys.dedup();
    let Some(node_type) = node_type else {
        // Unreachable: a missing node type always records a problem.
        return Err(ConfigErrors::single("nodeType", "nodeType is not set"));
    };
    Ok(Config {
        node_type,
        feature_gates,
        ovs_bridge,
        ovs_datapath_type,
        ovs_run_dir,
        external_node_namespace: namespace,
        policy_bypass_rules,
        kubeconfig,
        antrea_kubeconfig,
        audit_logging,
        api_port,
        fqdn_cache_min_ttl,
        dns_server_override,
        disable_tx_checksum_offload,
        packet_in_rate,
        standalone,
        state_dir,
        metrics_server,
        agent_api_socket,
        ignored_keys,
    })
}

/// `dnsServerOverride` as `host:port`: an IP address or host name, with an optional port (53
/// when missing, as upstream's `AppendPortIfMissing`); IPv6 with a port needs brackets.
fn dns_server_host_port(v: &str) -> Result<String, String> {
    if let Ok(ip) = v.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, 53).to_string());
    }
    let (host, port) = match v.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') || (h.starts_with('[') && h.ends_with(']')) => (h, Some(p)),
        Some(_) => return Err("an IPv6 address with a port needs brackets ([addr]:port)".into()),
        None => (v, None),
    };
    let port = match port {
        None => 53,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => n,
            _ => return Err(format!("port {p:?} must be a number between 1 and 65535")),
        },
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<std::net::IpAddr>() {
        if host.starts_with('[') != ip.is_ipv6() {
            return Err("only an IPv6 address goes between brackets".into());
        }
        return Ok(SocketAddr::new(ip, port).to_string());
    }
    let name_ok = !bare.is_empty()
        && bare.len() <= 253
        && !host.starts_with('[')
        && bare.split('.').all(|l| {
            !l.is_empty() && l.len() <= 63 && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        });
    if !name_ok {
        return Err("expected an IP address or a host name, with an optional :port".into());
    }
    Ok(format!("{bare}:{port}"))
}

/// A policy bypass rule as written, before Antrea's checks. Scalars are kept as text (Go's yaml
/// decodes any scalar into a string field); `port` is an integer.
#[derive(Debug, Default)]
struct RawBypassRule {
    direction: String,
    protocol: String,
    cidr: String,
    port: i64,
}

impl RawBypassRule {
    /// Antrea's checks in Antrea's order; the first failure wins. On error returns the field at
    /// fault and Antrea's message.
    fn validate(&self) -> Result<BypassRule, (&'static str, String)> {
        let direction = match self.direction.as_str() {
            "ingress" => Direction::Ingress,
            "egress" => Direction::Egress,
            d => {
                return Err((
                    "direction",
                    format!("direction {d} for policyBypassRule is invalid"),
                ))
            }
        };
        let protocol = match self.protocol.as_str() {
            "tcp" => BypassProtocol::Tcp,
            "udp" => BypassProtocol::Udp,
            "icmp" => BypassProtocol::Icmp,
            "ip" => BypassProtocol::Ip,
            p => {
                return Err((
                    "protocol",
                    format!("protocol {p} for policyBypassRule is invalid"),
                ))
            }
        };
        let cidr = match self.cidr.parse::<IpNet>() {
            Ok(net) => net.trunc(),
            Err(_) => {
                return Err((
                    "cidr",
                    format!("cidr {} for policyBypassRule is invalid", self.cidr),
                ))
            }
        };
        if self.port == 0 && matches!(protocol, BypassProtocol::Tcp | BypassProtocol::Udp) {
            return Err((
                "port",
                format!(
                    "missing port for policyBypassRule when protocol is {}",
                    self.protocol
                ),
            ));
        }
        let port = u16::try_from(self.port).map_err(|_| {
            (
                "port",
                format!("port {} for policyBypassRule is invalid", self.port),
            )
        })?;
        // Not an Antrea check: upstream builds a flow OVS refuses (a port match without L4), and
        // installing the rule without its port would bypass more than written.
        if port != 0 && matches!(protocol, BypassProtocol::Icmp | BypassProtocol::Ip) {
            return Err((
                "port",
                format!(
                    "port {port} for policyBypassRule is not allowed when protocol is {} \
                     (only tcp and udp have ports)",
                    self.protocol
                ),
            ));
        }
        Ok(BypassRule {
            direction,
            protocol,
            cidr,
            port,
        })
    }
}

/// Walks the YAML document, recording type problems and ignored keys.
struct Parser<'b> {
    problems: Vec<Problem>,
    ignored: Vec<String>,
    base: &'b Path,
}

type Fields<'a> = BTreeMap<String, &'a Value>;

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

fn untag(v: &Value) -> &Value {
    match v {
        Value::Tagged(t) => untag(&t.value),
        other => other,
    }
}

fn describe(v: &Value) -> String {
    match untag(v) {
        Value::Null => "null".to_string(),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) => format!("string {s:?}"),
        Value::Sequence(_) => "a list".to_string(),
        Value::Mapping(_) => "a mapping".to_string(),
        Value::Tagged(_) => "a tagged value".to_string(),
    }
}

fn key_text(k: &Value) -> String {
    match untag(k) {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Null => "null".to_string(),
        other => describe(other),
    }
}

/// Text of a scalar, as Go's yaml decodes a scalar into a string field.
fn scalar_text(v: &Value) -> Option<String> {
    match untag(v) {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Bool, accepting the YAML 1.1 spellings Go's yaml accepts for bool fields.
fn as_bool(v: &Value) -> Option<bool> {
    match untag(v) {
        Value::Bool(b) => Some(*b),
        Value::String(s) => match s.to_ascii_lowercase().as_str() {
            "true" | "yes" | "on" | "y" => Some(true),
            "false" | "no" | "off" | "n" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

impl Parser<'_> {
    fn problem(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem {
            path: path.into(),
            message: message.into(),
        });
    }

    /// Splits a mapping into the known keys (returned) and the rest (recorded as ignored).
    fn fields<'a>(&mut self, map: &'a Mapping, parent: &str, known: &[&str]) -> Fields<'a> {
        let mut out = Fields::new();
        for (k, v) in map {
            let key = key_text(k);
            if known.contains(&key.as_str()) {
                out.insert(key, v);
            } else {
                self.ignored.push(join(parent, &key));
            }
        }
        out
    }

    /// A nested mapping `parent.key`; absent or null gives an empty set of fields.
    fn section<'a>(&mut self, fields: &Fields<'a>, key: &str, known: &[&str]) -> Fields<'a> {
        match fields.get(key).map(|v| untag(v)) {
            None | Some(Value::Null) => Fields::new(),
            Some(Value::Mapping(m)) => self.fields(m, key, known),
            Some(other) => {
                self.problem(key, format!("expected a mapping, got {}", describe(other)));
                Fields::new()
            }
        }
    }

    /// A present, non-null value.
    fn value<'a>(fields: &Fields<'a>, key: &str) -> Option<&'a Value> {
        fields
            .get(key)
            .copied()
            .filter(|v| !matches!(untag(v), Value::Null))
    }

    fn string(&mut self, fields: &Fields<'_>, key: &str, parent: &str) -> Option<String> {
        let v = Self::value(fields, key)?;
        let text = scalar_text(v);
        if text.is_none() {
            self.problem(
                join(parent, key),
                format!("expected a string, got {}", describe(v)),
            );
        }
        text
    }

    fn path(&mut self, fields: &Fields<'_>, key: &str, parent: &str) -> Option<PathBuf> {
        let s = self.string(fields, key, parent)?;
        if s.is_empty() {
            return None;
        }
        Some(self.base.join(s))
    }

    fn boolean(&mut self, fields: &Fields<'_>, key: &str, parent: &str) -> Option<bool> {
        let v = Self::value(fields, key)?;
        let b = as_bool(v);
        if b.is_none() {
            self.problem(
                join(parent, key),
                format!("expected true or false, got {}", describe(v)),
            );
        }
        b
    }

    fn integer(&mut self, fields: &Fields<'_>, key: &str, parent: &str) -> Option<i64> {
        let v = Self::value(fields, key)?;
        let n = match untag(v) {
            Value::Number(n) => n.as_i64(),
            _ => None,
        };
        if n.is_none() {
            self.problem(
                join(parent, key),
                format!("expected an integer, got {}", describe(v)),
            );
        }
        n
    }

    fn unsigned(&mut self, fields: &Fields<'_>, key: &str, parent: &str) -> Option<u32> {
        let n = self.integer(fields, key, parent)?;
        match u32::try_from(n) {
            Ok(v) => Some(v),
            Err(_) => {
                self.problem(
                    join(parent, key),
                    format!("{n} is invalid: must be 0 or a positive number"),
                );
                None
            }
        }
    }

    /// `standalone.inputLimits`; every value must be positive.
    fn input_limits(&mut self, standalone: &Fields<'_>) -> InputLimits {
        const PARENT: &str = "standalone.inputLimits";
        let fields = self.section(
            standalone,
            "inputLimits",
            &["maxFileBytes", "maxNestingDepth", "maxElements"],
        );
        let defaults = InputLimits::default();
        let mut positive = |key: &str, max: i64| -> Option<i64> {
            let n = self.integer(&fields, key, PARENT)?;
            if n < 1 || n > max {
                self.problem(
                    join(PARENT, key),
                    format!("{n} is invalid: must be between 1 and {max}"),
                );
                return None;
            }
            Some(n)
        };
        let max_file_bytes = positive("maxFileBytes", 1 << 40);
        let max_nesting_depth = positive("maxNestingDepth", MAX_NESTING_DEPTH_LIMIT as i64);
        let max_elements = positive("maxElements", 1 << 40);
        InputLimits {
            max_file_bytes: max_file_bytes
                .and_then(|n| u64::try_from(n).ok())
                .unwrap_or(defaults.max_file_bytes),
            max_nesting_depth: max_nesting_depth
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or(defaults.max_nesting_depth),
            max_elements: max_elements
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or(defaults.max_elements),
        }
    }

    fn feature_gates(&mut self, v: Option<&&Value>) -> BTreeMap<String, bool> {
        let mut gates = BTreeMap::new();
        let map = match v.map(|v| untag(v)) {
            None | Some(Value::Null) => return gates,
            Some(Value::Mapping(m)) => m,
            Some(other) => {
                self.problem(
                    "featureGates",
                    format!(
                        "expected a mapping of gate names to booleans, got {}",
                        describe(other)
                    ),
                );
                return gates;
            }
        };
        for (k, v) in map {
            let name = key_text(k);
            match as_bool(v) {
                Some(b) => {
                    gates.insert(name, b);
                }
                None => self.problem(
                    format!("featureGates.{name}"),
                    format!("expected true or false, got {}", describe(v)),
                ),
            }
        }
        gates
    }

    /// The `metricsServer` section: types, the address syntax, and cert and key given together.
    fn metrics_server(&mut self, top: &Fields<'_>) -> MetricsServer {
        const SECTION: &str = "metricsServer";
        let f = self.section(
            top,
            SECTION,
            &["bindAddress", "tlsCertFile", "tlsKeyFile", "bearerTokenFile"],
        );
        let mut server = MetricsServer::default();
        if let Some(text) = self.string(&f, "bindAddress", SECTION) {
            let text = text.trim();
            server.bind_address = if text.is_empty() {
                None
            } else {
                match text.parse::<SocketAddr>() {
                    Ok(addr) => Some(addr),
                    Err(_) => {
                        self.problem(
                            "metricsServer.bindAddress",
                            format!(
                                "{text:?} is not an address: expected IP:port, e.g. 127.0.0.1:10351 or [::1]:10351, \
                                 or \"\" for no listener"
                            ),
                        );
                        None
                    }
                }
            };
        }
        let cert = self.path(&f, "tlsCertFile", SECTION);
        let key = self.path(&f, "tlsKeyFile", SECTION);
        server.tls = match (cert, key) {
            (Some(cert_file), Some(key_file)) => Some(TlsFiles { cert_file, key_file }),
            (None, None) => None,
            (Some(_), None) => {
                self.problem(
                    "metricsServer.tlsKeyFile",
                    "metricsServer.tlsCertFile is set: tlsKeyFile is required too",
                );
                None
            }
            (None, Some(_)) => {
                self.problem(
                    "metricsServer.tlsCertFile",
                    "metricsServer.tlsKeyFile is set: tlsCertFile is required too",
                );
                None
            }
        };
        server.bearer_token_file = self.path(&f, "bearerTokenFile", SECTION);
        server
    }

    fn bypass_rules(&mut self, v: Option<&&Value>) -> Vec<RawBypassRule> {
        const BASE: &str = "externalNode.policyBypassRules";
        let seq = match v.map(|v| untag(v)) {
            None | Some(Value::Null) => return Vec::new(),
            Some(Value::Sequence(s)) => s,
            Some(other) => {
                self.problem(BASE, format!("expected a list of rules, got {}", describe(other)));
                return Vec::new();
            }
        };
        let mut rules = Vec::new();
        for (i, item) in seq.iter().enumerate() {
            let path = format!("{BASE}[{i}]");
            let map = match untag(item) {
                Value::Mapping(m) => m,
                other => {
                    self.problem(
                        path,
                        format!(
                            "expected a rule (a mapping with direction, protocol, cidr and port), got {}",
                            describe(other)
                        ),
                    );
                    continue;
                }
            };
            let f = self.fields(map, &path, &["direction", "protocol", "cidr", "port"]);
            let before = self.problems.len();
            let rule = RawBypassRule {
                direction: self.string(&f, "direction", &path).unwrap_or_default(),
                protocol: self.string(&f, "protocol", &path).unwrap_or_default(),
                cidr: self.string(&f, "cidr", &path).unwrap_or_default(),
                port: self.integer(&f, "port", &path).unwrap_or(0),
            };
            // A rule with a mistyped field is reported as such and not checked further.
            if self.problems.len() == before {
                rules.push(rule);
            }
        }
        rules
    }
}

/// Linux interface name rules (IFNAMSIZ): 1 to 15 bytes, no `/`, no whitespace, not `.`/`..`.
fn check_interface_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("it must not be empty");
    }
    if name.len() > 15 {
        return Err("it must be at most 15 characters long");
    }
    if name == "." || name == ".." || name.contains('/') || name.chars().any(char::is_whitespace) {
        return Err("it must not contain '/' or whitespace");
    }
    Ok(())
}

fn check_dns1123_label(s: &str) -> Result<(), &'static str> {
    const WHY: &str =
        "a DNS-1123 label must consist of lower case alphanumeric characters or '-', start and end with \
         an alphanumeric character, and be at most 63 characters long";
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(WHY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Valid and minimal; ends inside `featureGates` so that tests can append gates.
    const MINIMAL: &str = "nodeType: externalNode\nstandalone:\n  externalNodeFile: /etc/antrea/en.yaml\n\
                           featureGates:\n  ExternalNode: true\n";

    fn parse_ok(yaml: &str) -> Config {
        match parse(yaml, Path::new("/base"), "test.conf") {
            Ok(c) => c,
            Err(e) => panic!("unexpected errors:\n{e}"),
        }
    }

    fn parse_err(yaml: &str) -> Vec<Problem> {
        match parse(yaml, Path::new("/base"), "test.conf") {
            Ok(c) => panic!("expected errors, got {c:?}"),
            Err(e) => e.problems,
        }
    }

    /// The single problem of a config, asserting there is exactly one.
    fn only_problem(yaml: &str) -> Problem {
        let mut problems = parse_err(yaml);
        assert_eq!(problems.len(), 1, "expected one problem, got {problems:?}");
        problems.remove(0)
    }

    #[test]
    fn input_limits_default_and_are_validated() {
        let c = parse_ok(MINIMAL);
        let limits = c.standalone.expect("standalone").input_limits;
        assert_eq!(limits, InputLimits::default());
        let yaml = "nodeType: externalNode\nfeatureGates: {ExternalNode: true}\nstandalone:\n  \
                    externalNodeFile: /x\n  inputLimits: {maxFileBytes: 1024, maxNestingDepth: 16, maxElements: 50}\n";
        let limits = parse_ok(yaml).standalone.expect("standalone").input_limits;
        assert_eq!(
            limits,
            InputLimits {
                max_file_bytes: 1024,
                max_nesting_depth: 16,
                max_elements: 50
            }
        );
        let p = only_problem(&yaml.replace("maxNestingDepth: 16", "maxNestingDepth: 500"));
        assert_eq!(p.path, "standalone.inputLimits.maxNestingDepth");
        assert_eq!(p.message, "500 is invalid: must be between 1 and 128");
        let p = only_problem(&yaml.replace("maxFileBytes: 1024", "maxFileBytes: 0"));
        assert_eq!(p.path, "standalone.inputLimits.maxFileBytes");
    }

    fn with_rules(rules: &str) -> String {
        format!("{MINIMAL}externalNode:\n  policyBypassRules:\n{rules}")
    }

    fn rule_problem(rule: &str) -> Problem {
        only_problem(&with_rules(rule))
    }

    #[test]
    fn defaults() {
        let c = parse_ok(MINIMAL);
        assert_eq!(c.node_type, NodeType::ExternalNode);
        assert_eq!(c.ovs_bridge, "br-int");
        assert_eq!(c.ovs_datapath_type, DatapathType::System);
        assert_eq!(c.ovs_run_dir, PathBuf::from("/var/run/openvswitch"));
        assert_eq!(c.external_node_namespace, "default");
        assert!(c.policy_bypass_rules.is_empty());
        assert_eq!(c.kubeconfig, None);
        assert_eq!(c.antrea_kubeconfig, None);
        assert_eq!(
            c.audit_logging,
            AuditLogging {
                max_size_mb: 500,
                max_backups: 3,
                max_age_days: 28,
                compress: true,
                log_dir: PathBuf::from("/var/log/antrea/networkpolicy"),
            }
        );
        assert_eq!(c.api_port, 10350);
        assert_eq!(c.fqdn_cache_min_ttl, 0);
        assert!(!c.disable_tx_checksum_offload);
        assert_eq!(c.packet_in_rate, 5000);
        assert_eq!(
            c.standalone,
            Some(Standalone {
                external_node_file: PathBuf::from("/etc/antrea/en.yaml"),
                policy_dir: None,
                input_limits: InputLimits::default(),
            })
        );
        assert_eq!(c.state_dir, PathBuf::from("/var/lib/antrea-vm-agent"));
        assert!(c.ignored_keys.is_empty());
        assert_eq!(c.ovsdb_socket(), PathBuf::from("/var/run/openvswitch/db.sock"));
        assert_eq!(
            c.openflow_socket(),
            PathBuf::from("/var/run/openvswitch/br-int.mgmt")
        );
        assert!(c.feature_enabled("ExternalNode"));
        assert!(!c.feature_enabled("AntreaPolicy"));
    }

    #[test]
    fn antrea_sample_config_is_accepted_once_support_bundles_are_off() {
        // The shape of build/yamls/externalnode/conf/antrea-agent.conf, with relative kubeconfigs.
        // Upstream's sample enables SupportBundleCollection, which this agent refuses (it does
        // not implement support bundles): with it, the only problem is that gate.
        let upstream = "\
featureGates:
  ExternalNode: true
  AntreaPolicy: true
  NetworkPolicyStats: true
  SupportBundleCollection: true
auditLogging:
  maxSize: 500
  maxBackups: 3
  maxAge: 28
  compress: true
nodeType: externalNode
clientConnection:
  kubeconfig: antrea-agent.kubeconfig
antreaClientConnection:
  kubeconfig: antrea-agent.antrea.kubeconfig
#ovsBridge: br-int
";
        let p = only_problem(upstream);
        assert_eq!(p.path, "featureGates.SupportBundleCollection");
        let yaml = upstream.replace("SupportBundleCollection: true", "SupportBundleCollection: false");
        let c = parse_ok(&yaml);
        assert_eq!(c.kubeconfig, Some(PathBuf::from("/base/antrea-agent.kubeconfig")));
        assert_eq!(
            c.antrea_kubeconfig,
            Some(PathBuf::from("/base/antrea-agent.antrea.kubeconfig"))
        );
        assert_eq!(c.standalone, None);
        assert_eq!(c.feature_gates.len(), 4);
    }

    #[test]
    fn shipped_sample_parses() {
        let c = parse_ok(include_str!("../deploy/antrea-agent.conf.sample"));
        assert_eq!(c.kubeconfig, Some(PathBuf::from("/base/antrea-agent.kubeconfig")));
        assert!(!c.feature_enabled("SupportBundleCollection"));
        assert!(c.ignored_keys.is_empty(), "{:?}", c.ignored_keys);
    }

    #[test]
    fn all_fields_are_read() {
        let yaml = "\
nodeType: externalNode
featureGates: {ExternalNode: true, L7NetworkPolicy: false, Egress: false}
ovsBridge: br-vm
ovsDatapathType: netdev
ovsRunDir: run/ovs
externalNode:
  externalNodeNamespace: vm-ns
  policyBypassRules:
  - {direction: ingress, protocol: tcp, cidr: 10.0.0.1/24, port: 22}
  - {direction: egress, protocol: icmp, cidr: 0.0.0.0/0}
clientConnection: {kubeconfig: /etc/antrea/k.kubeconfig}
auditLogging: {maxSize: 10, maxBackups: 0, maxAge: 0, compress: false}
apiPort: 10351
trafficEncapMode: noEncap
nodePortLocal: {enable: false}
fqdnCacheMinTTL: 30
disableTXChecksumOffload: true
packetInRate: 100
standalone: {externalNodeFile: en.yaml, policyDir: policies}
stateDir: /tmp/state
";
        let c = parse_ok(yaml);
        assert_eq!(c.ovs_bridge, "br-vm");
        assert_eq!(c.ovs_datapath_type, DatapathType::Netdev);
        assert_eq!(c.ovs_run_dir, PathBuf::from("/base/run/ovs"));
        assert_eq!(c.openflow_socket(), PathBuf::from("/base/run/ovs/br-vm.mgmt"));
        assert_eq!(c.external_node_namespace, "vm-ns");
        assert_eq!(
            c.policy_bypass_rules,
            vec![
                BypassRule {
                    direction: Direction::Ingress,
                    protocol: BypassProtocol::Tcp,
                    cidr: "10.0.0.0/24".parse().unwrap(),
                    port: 22
                },
                BypassRule {
                    direction: Direction::Egress,
                    protocol: BypassProtocol::Icmp,
                    cidr: "0.0.0.0/0".parse().unwrap(),
                    port: 0
                },
            ]
        );
        assert_eq!(c.kubeconfig, Some(PathBuf::from("/etc/antrea/k.kubeconfig")));
        assert_eq!(
            c.audit_logging,
            AuditLogging {
                max_size_mb: 10,
                max_backups: 0,
                max_age_days: 0,
                compress: false,
                log_dir: PathBuf::from("/var/log/antrea/networkpolicy"),
            }
        );
        assert_eq!(c.api_port, 10351);
        assert_eq!(c.fqdn_cache_min_ttl, 30);
        assert!(c.disable_tx_checksum_offload);
        assert_eq!(c.packet_in_rate, 100);
        assert_eq!(
            c.standalone,
            Some(Standalone {
                external_node_file: PathBuf::from("/base/en.yaml"),
                policy_dir: Some(PathBuf::from("/base/policies")),
                input_limits: InputLimits::default(),
            })
        );
        assert_eq!(c.state_dir, PathBuf::from("/tmp/state"));
        assert!(c.ignored_keys.is_empty(), "{:?}", c.ignored_keys);
    }

    #[test]
    fn zero_means_default_for_api_port_packet_in_rate_and_max_size() {
        let c = parse_ok(&format!(
            "{MINIMAL}apiPort: 0\npacketInRate: 0\nauditLogging: {{maxSize: 0}}\n"
        ));
        assert_eq!(c.api_port, 10350);
        assert_eq!(c.packet_in_rate, 5000);
        assert_eq!(c.audit_logging.max_size_mb, 500);
    }

    #[test]
    fn node_type_must_be_external_node() {
        let p = only_problem(
            "nodeType: k8sNode\nfeatureGates: {ExternalNode: true}\nstandalone: {externalNodeFile: /x}\n",
        );
        assert_eq!(p.path, "nodeType");
        assert!(p.message.contains("only runs on external Nodes"), "{p}");

        let p = only_problem("nodeType: ExternalNode\nfeatureGates: {ExternalNode: true}\nstandalone: {externalNodeFile: /x}\n");
        assert!(p.message.starts_with("unsupported nodeType ExternalNode"), "{p}");

        let p = only_problem("featureGates: {ExternalNode: true}\nstandalone: {externalNodeFile: /x}\n");
        assert_eq!(p.path, "nodeType");
        assert!(p.message.contains("nodeType: externalNode"), "{p}");
    }

    #[test]
    fn external_node_gate_is_required() {
        let msg = "nodeType externalNode requires feature gate ExternalNode to be enabled";
        let p = only_problem("nodeType: externalNode\nstandalone: {externalNodeFile: /x}\n");
        assert_eq!(
            (p.path.as_str(), p.message.as_str()),
            ("featureGates.ExternalNode", msg)
        );
        let p = only_problem("nodeType: externalNode\nfeatureGates: {ExternalNode: false}\nstandalone: {externalNodeFile: /x}\n");
        assert_eq!(p.message, msg);
    }

    #[test]
    fn unsupported_features_message() {
        let p = only_problem(&format!(
            "{MINIMAL}  Egress: true\n  AntreaProxy: true\n  Multicast: false\n"
        ));
        assert_eq!(
            p.message,
            "unsupported features on Virtual Machine: {AntreaProxy, Egress}"
        );
        assert_eq!(p.path, "featureGates.AntreaProxy, featureGates.Egress");

        let p = only_problem(&format!(
            "{MINIMAL}  Traceflow: true\ntrafficEncapMode: encap\nnodePortLocal:\n  enable: true\n"
        ));
        assert_eq!(
            p.message,
            "unsupported features on Virtual Machine: {Traceflow, encap, NodePortLocal}"
        );

        // The comparison is exact, as in Antrea.
        let p = only_problem(&format!("{MINIMAL}trafficEncapMode: noencap\n"));
        assert_eq!(p.message, "unsupported features on Virtual Machine: {noencap}");
        assert_eq!(p.path, "trafficEncapMode");

        // Implemented gates pass (and AdminNetworkPolicy, a controller-only gate). The two gates
        // Antrea supports on VMs but this agent does not implement are refused, each with its
        // reason, and not as "unsupported features".
        parse_ok(&format!(
            "{MINIMAL}  AntreaPolicy: true\n  NetworkPolicyStats: true\n  AdminNetworkPolicy: true\n"
        ));
        let p = parse_err(&format!(
            "{MINIMAL}  SupportBundleCollection: true\n  L7NetworkPolicy: true\n"
        ));
        let paths: Vec<&str> = p.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "featureGates.SupportBundleCollection",
                "featureGates.L7NetworkPolicy"
            ]
        );
    }

    #[test]
    fn datapath_type() {
        let p = only_problem(&format!("{MINIMAL}ovsDatapathType: dpdk\n"));
        assert_eq!(
            (p.path.as_str(), p.message.as_str()),
            ("ovsDatapathType", "OVS datapath type dpdk is not supported")
        );
        assert_eq!(
            parse_ok(&format!("{MINIMAL}ovsDatapathType: system\n")).ovs_datapath_type,
            DatapathType::System
        );
    }

    #[test]
    fn api_port_range() {
        for bad in ["65536", "-1", "100000"] {
            let p = only_problem(&format!("{MINIMAL}apiPort: {bad}\n"));
            assert_eq!(p.path, "apiPort");
            assert!(p.message.starts_with("apiPort is invalid: "), "{p}");
        }
        assert_eq!(parse_ok(&format!("{MINIMAL}apiPort: 65535\n")).api_port, 65535);
        assert_eq!(parse_ok(&format!("{MINIMAL}apiPort: 1\n")).api_port, 1);
        let p = only_problem(&format!("{MINIMAL}apiPort: abc\n"));
        assert_eq!(p.message, "expected an integer, got string \"abc\"");
    }

    #[test]
    fn dns_server_override_is_host_and_port_with_53_by_default() {
        assert_eq!(parse_ok(MINIMAL).dns_server_override, None);
        for (given, kept) in [
            ("10.0.0.10", "10.0.0.10:53"),
            ("10.0.0.10:5353", "10.0.0.10:5353"),
            ("fd00::a", "[fd00::a]:53"),
            ("[fd00::a]:54", "[fd00::a]:54"),
            ("dns.example.com", "dns.example.com:53"),
            ("dns.example.com:5300", "dns.example.com:5300"),
        ] {
            let c = parse_ok(&format!("{MINIMAL}dnsServerOverride: \"{given}\"\n"));
            assert_eq!(c.dns_server_override.as_deref(), Some(kept), "{given}");
        }
        assert_eq!(
            parse_ok(&format!("{MINIMAL}dnsServerOverride: \"\"\n")).dns_server_override,
            None
        );
        for bad in [
            "10.0.0.10:0",
            "10.0.0.10:99999",
            "fd00::a:53:x",
            "bad name:53",
            "[10.0.0.1]:53",
            ":53",
        ] {
            let p = only_problem(&format!("{MINIMAL}dnsServerOverride: \"{bad}\"\n"));
            assert_eq!(p.path, "dnsServerOverride", "{bad}");
            assert!(
                p.message
                    .starts_with(&format!("dnsServerOverride {bad} is invalid: ")),
                "{p:?}"
            );
        }
    }

    #[test]
    fn fqdn_cache_min_ttl_must_not_be_negative() {
        let p = only_problem(&format!("{MINIMAL}fqdnCacheMinTTL: -1\n"));
        assert_eq!(p.message, "fqdnCacheMinTTL must be greater than or equal to 0");
    }

    #[test]
    fn bypass_rule_direction() {
        let p = rule_problem("  - {direction: Ingress, protocol: tcp, cidr: 10.0.0.0/8, port: 22}\n");
        assert_eq!(p.path, "externalNode.policyBypassRules[0].direction");
        assert_eq!(
            p.message,
            "policyBypassRules configuration is invalid: direction Ingress for policyBypassRule is invalid"
        );
        // Missing: Go's zero value, an empty string.
        let p = rule_problem("  - {protocol: tcp, cidr: 10.0.0.0/8, port: 22}\n");
        assert_eq!(
            p.message,
            "policyBypassRules configuration is invalid: direction  for policyBypassRule is invalid"
        );
    }

    #[test]
    fn bypass_rule_protocol() {
        let p = rule_problem("  - {direction: egress, protocol: TCP, cidr: 10.0.0.0/8, port: 22}\n");
        assert_eq!(p.path, "externalNode.policyBypassRules[0].protocol");
        assert_eq!(
            p.message,
            "policyBypassRules configuration is invalid: protocol TCP for policyBypassRule is invalid"
        );
        let p = rule_problem("  - {direction: egress, protocol: sctp, cidr: 10.0.0.0/8, port: 22}\n");
        assert_eq!(
            p.message,
            "policyBypassRules configuration is invalid: protocol sctp for policyBypassRule is invalid"
        );
    }

    #[test]
    fn bypass_rule_cidr() {
        for bad in ["10.0.0.1", "10.0.0.0/33", "not-a-cidr", "10.0.0.256/24"] {
            let p = rule_problem(&format!(
                "  - {{direction: egress, protocol: tcp, cidr: \"{bad}\", port: 22}}\n"
            ));
            assert_eq!(p.path, "externalNode.policyBypassRules[0].cidr");
            assert_eq!(
                p.message,
                format!(
                    "policyBypassRules configuration is invalid: cidr {bad} for policyBypassRule is invalid"
                )
            );
        }
        let p = rule_problem("  - {direction: egress, protocol: ip}\n");
        assert_eq!(
            p.message,
            "policyBypassRules configuration is invalid: cidr  for policyBypassRule is invalid"
        );
    }

    #[test]
    fn bypass_rule_missing_port() {
        for proto in ["tcp", "udp"] {
            let p = rule_problem(&format!(
                "  - {{direction: ingress, protocol: {proto}, cidr: 10.0.0.0/8}}\n"
            ));
            assert_eq!(p.path, "externalNode.policyBypassRules[0].port");
            assert_eq!(
                p.message,
                format!("policyBypassRules configuration is invalid: missing port for policyBypassRule when protocol is {proto}")
            );
        }
        // No port needed for icmp and ip.
        let c = parse_ok(&with_rules(
            "  - {direction: ingress, protocol: icmp, cidr: 10.0.0.0/8}\n  - {direction: ingress, protocol: ip, cidr: 10.0.0.0/8}\n",
        ));
        assert_eq!(c.policy_bypass_rules.len(), 2);
    }

    #[test]
    fn bypass_rule_port_range() {
        for bad in ["65536", "-1"] {
            let p = rule_problem(&format!(
                "  - {{direction: ingress, protocol: tcp, cidr: 10.0.0.0/8, port: {bad}}}\n"
            ));
            assert_eq!(p.path, "externalNode.policyBypassRules[0].port");
            assert_eq!(
                p.message,
                format!(
                    "policyBypassRules configuration is invalid: port {bad} for policyBypassRule is invalid"
                )
            );
        }
        let p = rule_problem("  - {direction: ingress, protocol: icmp, cidr: 10.0.0.0/8, port: 70000}\n");
        assert_eq!(
            p.message,
            "policyBypassRules configuration is invalid: port 70000 for policyBypassRule is invalid"
        );
    }

    #[test]
    fn bypass_rule_port_with_icmp_or_ip_is_refused() {
        for proto in ["icmp", "ip"] {
            let p = rule_problem(&format!(
                "  - {{direction: egress, protocol: {proto}, cidr: 10.0.0.0/8, port: 53}}\n"
            ));
            assert_eq!(p.path, "externalNode.policyBypassRules[0].port");
            assert_eq!(
                p.message,
                format!(
                    "policyBypassRules configuration is invalid: port 53 for policyBypassRule is not \
                     allowed when protocol is {proto} (only tcp and udp have ports)"
                )
            );
        }
    }

    #[test]
    fn gates_antrea_supports_on_vms_but_this_agent_does_not_implement_are_refused() {
        for (gate, why) in REFUSED_FEATURE_GATES {
            let p = only_problem(&format!("{MINIMAL}  {gate}: true\n"));
            assert_eq!(p.path, format!("featureGates.{gate}"));
            assert_eq!(p.message, why);
            assert!(p.message.contains("not implemented by antrea-vm-agent"), "{p}");
            // Off is fine.
            parse_ok(&format!("{MINIMAL}  {gate}: false\n"));
        }
        // AdminNetworkPolicy is a controller-only gate: no effect on an agent, accepted.
        parse_ok(&format!("{MINIMAL}  AdminNetworkPolicy: true\n"));
    }

    #[test]
    fn bypass_rule_first_failing_check_wins() {
        // Everything wrong: direction is reported.
        let p = rule_problem("  - {direction: up, protocol: sctp, cidr: bad, port: -1}\n");
        assert!(
            p.message
                .ends_with("direction up for policyBypassRule is invalid"),
            "{p}"
        );
        // Protocol before cidr.
        let p = rule_problem("  - {direction: ingress, protocol: sctp, cidr: bad, port: -1}\n");
        assert!(
            p.message
                .ends_with("protocol sctp for policyBypassRule is invalid"),
            "{p}"
        );
        // Cidr before port.
        let p = rule_problem("  - {direction: ingress, protocol: tcp, cidr: bad}\n");
        assert!(
            p.message.ends_with("cidr bad for policyBypassRule is invalid"),
            "{p}"
        );
        // Missing port before range (0 is "missing", not "invalid").
        let p = rule_problem("  - {direction: ingress, protocol: udp, cidr: 10.0.0.0/8, port: 0}\n");
        assert!(
            p.message
                .ends_with("missing port for policyBypassRule when protocol is udp"),
            "{p}"
        );
    }

    #[test]
    fn every_bad_rule_is_reported() {
        let problems = parse_err(&with_rules(
            "  - {direction: ingress, protocol: tcp, cidr: 10.0.0.0/8, port: 22}\n\
             \x20 - {direction: ingress, protocol: tcp, cidr: nope, port: 22}\n\
             \x20 - {direction: out, protocol: tcp, cidr: 10.0.0.0/8, port: 22}\n",
        ));
        let paths: Vec<_> = problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "externalNode.policyBypassRules[1].cidr",
                "externalNode.policyBypassRules[2].direction"
            ]
        );
    }

    #[test]
    fn ipv6_cidr_is_kept() {
        let c = parse_ok(&with_rules(
            "  - {direction: ingress, protocol: tcp, cidr: \"fd00:99::1/64\", port: 22}\n",
        ));
        assert_eq!(
            c.policy_bypass_rules[0].cidr,
            "fd00:99::/64".parse::<IpNet>().unwrap()
        );
    }

    #[test]
    fn antrea_keys_the_agent_does_not_implement_are_refused_when_set() {
        for (line, key) in [
            (
                "kubeAPIServerOverride: https://10.0.0.1:6443\n",
                "kubeAPIServerOverride",
            ),
            ("tlsMinVersion: VersionTLS13\n", "tlsMinVersion"),
            ("tlsCipherSuites: TLS_AES_128_GCM_SHA256\n", "tlsCipherSuites"),
            ("enablePrometheusMetrics: false\n", "enablePrometheusMetrics"),
        ] {
            let p = only_problem(&format!("{line}{MINIMAL}"));
            assert_eq!(p.path, key, "{line}");
            assert!(p.message.contains("not implemented"), "{}", p.message);
        }
        // Their defaults ask for nothing the agent does not do.
        parse_ok(&format!(
            "kubeAPIServerOverride: \"\"\ntlsCipherSuites: \"\"\nenablePrometheusMetrics: true\n{MINIMAL}"
        ));
    }

    #[test]
    fn unknown_keys_are_collected() {
        let yaml = format!(
            "{MINIMAL}enablePrometheusMetrics: true\nclientConnection:\n  kubeconfig: /k\n  qps: 5\n\
             externalNode:\n  foo: 1\n  policyBypassRules:\n  - {{direction: ingress, protocol: ip, cidr: 1.2.3.4/32, extra: x}}\n\
             nodePortLocal: {{enable: false, portRange: 61000-62000}}\ntlsMinVersion: \"\"\n"
        );
        let c = parse_ok(&yaml);
        assert_eq!(
            c.ignored_keys,
            [
                "clientConnection.qps",
                "enablePrometheusMetrics",
                "externalNode.foo",
                "externalNode.policyBypassRules[0].extra",
                "nodePortLocal.portRange",
                "tlsMinVersion"
            ]
        );
    }

    #[test]
    fn multiple_problems_are_reported_together() {
        let yaml = "\
nodeType: externalNode
ovsDatapathType: dpdk
apiPort: 70000
fqdnCacheMinTTL: -5
disableTXChecksumOffload: maybe
featureGates: {Egress: true}
externalNode:
  externalNodeNamespace: Bad_NS
  policyBypassRules:
  - {direction: ingress, protocol: tcp, cidr: 10.0.0.0/8}
";
        let problems = parse_err(yaml);
        let paths: Vec<_> = problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "disableTXChecksumOffload",
                "ovsDatapathType",
                "featureGates.ExternalNode",
                "fqdnCacheMinTTL",
                "apiPort",
                "featureGates.Egress",
                "externalNode.policyBypassRules[0].port",
                "externalNode.externalNodeNamespace",
                "clientConnection.kubeconfig",
            ]
        );
        let text = ConfigErrors { problems }.to_string();
        assert_eq!(text.lines().count(), 9);
        assert!(
            text.contains("ovsDatapathType: OVS datapath type dpdk is not supported\n"),
            "{text}"
        );
    }

    #[test]
    fn type_errors_name_the_key() {
        let problems = parse_err(&format!(
            "{MINIMAL}externalNode:\n  policyBypassRules:\n  - {{direction: ingress, protocol: tcp, cidr: 10.0.0.0/8, port: \"22\"}}\n\
             auditLogging: {{maxBackups: -1}}\nfeatureGates2: 1\nnodePortLocal: [1]\n"
        ));
        let paths: Vec<_> = problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "externalNode.policyBypassRules[0].port",
                "auditLogging.maxBackups",
                "nodePortLocal"
            ]
        );
    }

    #[test]
    fn kubeconfig_required_without_standalone() {
        let p = only_problem("nodeType: externalNode\nfeatureGates: {ExternalNode: true}\n");
        assert_eq!(p.path, "clientConnection.kubeconfig");
        parse_ok("nodeType: externalNode\nfeatureGates: {ExternalNode: true}\nclientConnection: {kubeconfig: /k}\n");
    }

    #[test]
    fn malformed_yaml_names_file_and_line() {
        let p = only_problem("nodeType: externalNode\nfeatureGates: [\n  ExternalNode: true\n");
        assert_eq!(p.path, "test.conf");
        assert!(
            p.message.starts_with("failed to decode config file test.conf: "),
            "{p}"
        );
        assert!(p.message.contains("line"), "{p}");
        let p = only_problem("- a\n- b\n");
        assert!(p.message.contains("must be a YAML mapping"), "{p}");
    }

    #[test]
    fn load_reads_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("antrea-agent.conf");
        std::fs::write(&path, MINIMAL).unwrap();
        assert_eq!(Config::load(&path).unwrap().ovs_bridge, "br-int");
        let missing = dir.path().join("missing.conf");
        let e = Config::load(&missing).unwrap_err();
        assert_eq!(e.problems[0].path, missing.display().to_string());
        assert!(e.to_string().contains("failed to read config file"));
    }

    #[test]
    fn yaml_11_booleans_are_accepted_for_bool_fields() {
        let c = parse_ok(&format!("{MINIMAL}disableTXChecksumOffload: yes\n"));
        assert!(c.disable_tx_checksum_offload);
    }

    #[test]
    fn metrics_server_and_agent_api_defaults() {
        let c = parse_ok(MINIMAL);
        assert_eq!(
            c.metrics_server.bind_address,
            Some("127.0.0.1:10351".parse().expect("addr"))
        );
        assert_eq!(c.metrics_server.tls, None);
        assert_eq!(c.metrics_server.bearer_token_file, None);
        assert_eq!(
            c.agent_api_socket,
            PathBuf::from("/var/run/antrea/antrea-vm-agent.sock")
        );
    }

    #[test]
    fn metrics_server_and_agent_api_are_read() {
        let c = parse_ok(&format!(
            "{MINIMAL}metricsServer:\n  bindAddress: \"[::1]:9100\"\n  tlsCertFile: tls/m.crt\n  \
             tlsKeyFile: /etc/m.key\n  bearerTokenFile: token\nagentAPI:\n  socket: run/a.sock\n"
        ));
        assert_eq!(
            c.metrics_server.bind_address,
            Some("[::1]:9100".parse().expect("addr"))
        );
        assert_eq!(
            c.metrics_server.tls,
            Some(TlsFiles {
                cert_file: PathBuf::from("/base/tls/m.crt"),
                key_file: PathBuf::from("/etc/m.key"),
            })
        );
        assert_eq!(
            c.metrics_server.bearer_token_file,
            Some(PathBuf::from("/base/token"))
        );
        assert_eq!(c.agent_api_socket, PathBuf::from("/base/run/a.sock"));
        assert!(c.ignored_keys.is_empty(), "{:?}", c.ignored_keys);
    }

    #[test]
    fn metrics_server_empty_address_means_no_listener() {
        let c = parse_ok(&format!("{MINIMAL}metricsServer: {{bindAddress: \"\"}}\n"));
        assert_eq!(c.metrics_server.bind_address, None);
    }

    #[test]
    fn metrics_server_problems_name_the_key() {
        let p = only_problem(&format!("{MINIMAL}metricsServer: {{bindAddress: localhost}}\n"));
        assert_eq!(p.path, "metricsServer.bindAddress");
        assert!(
            p.message.contains("\"localhost\" is not an address"),
            "{}",
            p.message
        );
        let p = only_problem(&format!("{MINIMAL}metricsServer: {{tlsCertFile: /c.pem}}\n"));
        assert_eq!(p.path, "metricsServer.tlsKeyFile");
        let p = only_problem(&format!("{MINIMAL}metricsServer: {{tlsKeyFile: /k.pem}}\n"));
        assert_eq!(p.path, "metricsServer.tlsCertFile");
        let p = only_problem(&format!("{MINIMAL}agentAPI: [x]\n"));
        assert_eq!(p.path, "agentAPI");
        let p = only_problem(&format!("{MINIMAL}metricsServer: {{bindAddress: [1]}}\n"));
        assert_eq!(p.path, "metricsServer.bindAddress");
    }

    #[test]
    fn bridge_name_must_fit_ifnamsiz() {
        let p = only_problem(&format!("{MINIMAL}ovsBridge: a-very-long-bridge-name\n"));
        assert_eq!(p.path, "ovsBridge");
    }

    #[test]
    fn node_name_prefers_env() {
        // Reads the environment without changing it (set_var races with other tests).
        let name = node_name();
        assert!(!name.is_empty());
        if let Ok(env) = std::env::var("NODE_NAME") {
            if !env.is_empty() {
                assert_eq!(name, env);
            }
        }
    }
}
