//! Tests of the configuration: defaults, every key read, Antrea's messages for every check, and
//! problems reported together with their dotted paths.

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
    let c = parse_ok(include_str!("../../deploy/antrea-agent.conf.sample"));
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

    let p = only_problem(
        "nodeType: ExternalNode\nfeatureGates: {ExternalNode: true}\nstandalone: {externalNodeFile: /x}\n",
    );
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
    let p = only_problem(
        "nodeType: externalNode\nfeatureGates: {ExternalNode: false}\nstandalone: {externalNodeFile: /x}\n",
    );
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
            format!("policyBypassRules configuration is invalid: cidr {bad} for policyBypassRule is invalid")
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
            format!("policyBypassRules configuration is invalid: port {bad} for policyBypassRule is invalid")
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
        "fd00:99::/64".parse::<ipnet::IpNet>().unwrap()
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
    parse_ok(
        "nodeType: externalNode\nfeatureGates: {ExternalNode: true}\nclientConnection: {kubeconfig: /k}\n",
    );
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

#[test]
fn gates_antrea_turns_on_by_default_are_on_unless_false() {
    let config = parse_ok(MINIMAL);
    assert!(config.gate_on_by_default("AntreaPolicy"));
    assert!(config.gate_on_by_default("NetworkPolicyStats"));
    assert!(!config.feature_enabled("NetworkPolicyStats"), "explicit only");
    let config = parse_ok(&format!(
        "{MINIMAL}  NetworkPolicyStats: false\n  AntreaPolicy: true\n"
    ));
    assert!(!config.gate_on_by_default("NetworkPolicyStats"));
    assert!(config.gate_on_by_default("AntreaPolicy"));
}

#[test]
fn known_config_keys_are_the_keys_the_parser_reads() {
    let keys = known_config_keys();
    for key in [
        "nodeType",
        "auditLogging.maxSize",
        "standalone.inputLimits",
        "standalone.inputLimits.maxFileBytes",
        "externalNode.policyBypassRules",
        "externalNode.policyBypassRules[].direction",
        "externalNode.policyBypassRules[].port",
        "metricsServer.tlsCertFile",
        "metricsServer.bearerTokenFile",
        "agentAPI.socket",
        "tlsMinVersion",
    ] {
        assert!(keys.iter().any(|k| k == key), "{key} missing from {keys:?}");
    }
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "sorted, no duplicates");
    // Every listed key of a mapping is read, not ignored: set to null (absent for the parser)
    // beside a minimal valid config, it is not reported as ignored. The refused keys are not in
    // the walk's sections: they are ignored unless set.
    for key in keys.iter().filter(|k| !k.contains("[]")) {
        let mut doc: Value = serde_norway::from_str(MINIMAL).expect("minimal");
        let mut at = &mut doc;
        let parts: Vec<&str> = key.split('.').collect();
        for (i, part) in parts.iter().enumerate() {
            let Value::Mapping(m) = at else {
                panic!("{key}: {part} is under a non-mapping in {doc:?}")
            };
            let leaf = i + 1 == parts.len();
            at = m.entry(Value::String(part.to_string())).or_insert_with(|| {
                if leaf {
                    Value::Null
                } else {
                    Value::Mapping(Mapping::new())
                }
            });
        }
        let yaml = serde_norway::to_string(&doc).expect("yaml");
        let c = parse_ok(&yaml);
        let refused = [
            "kubeAPIServerOverride",
            "tlsMinVersion",
            "tlsCipherSuites",
            "enablePrometheusMetrics",
        ];
        assert_eq!(
            c.ignored_keys.contains(key),
            refused.contains(&key.as_str()),
            "{key}: ignored {:?}",
            c.ignored_keys
        );
    }
    // A key no section lists is ignored, with its full path (nested sections included).
    let c =
        parse_ok(
            &format!("{MINIMAL}standalone:\n  externalNodeFile: /e\n  inputLimits:\n    bogus: 1\n")
                .replacen("standalone:\n  externalNodeFile: /etc/antrea/en.yaml\n", "", 1),
        );
    assert_eq!(c.ignored_keys, ["standalone.inputLimits.bogus"]);
}
