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

mod defaults;
mod parse;
mod reader;
mod rules;
#[cfg(test)]
mod tests;

use std::{
    collections::BTreeMap,
    fmt,
    net::SocketAddr,
    path::{Path, PathBuf},
};

use serde_norway::{Mapping, Value};

pub use defaults::{
    DEFAULT_AGENT_API_SOCKET, DEFAULT_API_PORT, DEFAULT_EXTERNAL_NODE_NAMESPACE,
    DEFAULT_METRICS_BIND_ADDRESS, DEFAULT_OVS_BRIDGE, DEFAULT_OVS_RUN_DIR, DEFAULT_PACKET_IN_RATE,
    DEFAULT_STATE_DIR, REFUSED_FEATURE_GATES, SUPPORTED_FEATURES_ON_EXTERNAL_NODE,
};
use parse::parse;

// The bypass rules are plain data the pure policy core turns into flows: they live there
// (crates/policy), under their old names here.
pub use antrea_policy::bypass::{BypassProtocol, BypassRule, Direction};

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

    /// Whether a feature gate that Antrea turns on by default (`AntreaPolicy`,
    /// `NetworkPolicyStats`) is on: unless `featureGates` says `false`.
    pub fn gate_on_by_default(&self, gate: &str) -> bool {
        self.feature_gates.get(gate).copied().unwrap_or(true)
    }
}

/// Every configuration key this agent reads or refuses, as full dotted paths (`auditLogging.maxSize`,
/// `standalone.inputLimits`, `externalNode.policyBypassRules[].cidr` for the keys of a list item),
/// sorted. Taken from the parser's own walk, so the reference documentation can be checked
/// against it. `featureGates` is a map of gate names: see [`SUPPORTED_FEATURES_ON_EXTERNAL_NODE`]
/// and [`REFUSED_FEATURE_GATES`] for those.
pub fn known_config_keys() -> Vec<String> {
    parse::known_keys()
}

/// A key path written with list indexes (`a.list[3].b`, `a.list[*].b`) in the form
/// [`known_config_keys`] uses for the keys of any list item (`a.list[].b`).
pub fn any_list_item_path(path: &str) -> String {
    reader::any_item(path)
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
