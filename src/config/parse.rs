//! From YAML to a validated [`Config`]: the keys this agent reads, the Antrea keys it refuses,
//! and `parse`, which reads every section (through [`Parser`]) and then validates the values in
//! Antrea's order, collecting every problem.

use std::path::{Path, PathBuf};

use serde_norway::{Mapping, Value};

use super::defaults::{
    DEFAULT_AGENT_API_SOCKET, DEFAULT_API_PORT, DEFAULT_EXTERNAL_NODE_NAMESPACE, DEFAULT_OVS_BRIDGE,
    DEFAULT_OVS_RUN_DIR, DEFAULT_PACKET_IN_RATE, DEFAULT_STATE_DIR, NO_ENCAP, REFUSED_FEATURE_GATES,
    SUPPORTED_FEATURES_ON_EXTERNAL_NODE,
};
use super::reader::{describe, untag, Parser};
use super::rules::{check_dns1123_label, check_interface_name, dns_server_host_port};
use super::{AuditLogging, Config, ConfigErrors, DatapathType, NodeType, Standalone};

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

pub(super) fn parse(yaml: &str, base: &Path, source: &str) -> Result<Config, ConfigErrors> {
    read(&mut Parser::new(base), yaml, source)
}

/// Every key path the walk below reads or refuses, sorted: the keys of every section (sections
/// included), list items' keys as `list[].key`, and the [`UNIMPLEMENTED_KEYS`]. Found by walking
/// an empty document, in which every section reads as empty but is still looked up with its
/// keys, so a key added to the walk is listed without another list to update.
pub(super) fn known_keys() -> Vec<String> {
    let mut p = Parser::new(Path::new("/"));
    // The empty document is invalid (no nodeType); only the walk matters here.
    let _ = read(&mut p, "{}", "known keys");
    p.declared
        .extend(UNIMPLEMENTED_KEYS.iter().map(|(key, _, _)| key.to_string()));
    p.declared.into_iter().collect()
}

fn read(p: &mut Parser<'_>, yaml: &str, source: &str) -> Result<Config, ConfigErrors> {
    let doc: Value = serde_norway::from_str(yaml)
        .map_err(|e| ConfigErrors::single(source, format!("failed to decode config file {source}: {e}")))?;
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
    refuse_unimplemented_keys(p, root);

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
        return Err(ConfigErrors {
            problems: std::mem::take(&mut p.problems),
        });
    }
    let mut ignored_keys = std::mem::take(&mut p.ignored);
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
