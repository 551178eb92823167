//! Issue 41, scope 4: strictness like a cluster's. Table tests, each naming the CRD schema
//! field (antrea-io/antrea `build/charts/antrea/crds/*.yaml`, v1beta1) or the webhook function
//! (`pkg/controller/networkpolicy/validate.go`) whose refusal it pins, with the apiserver's or
//! the webhook's message.

use serde_json::{json, Value};

use super::controller::Entity;
use super::*;

/// An ACNP (`cluster`) or ANNP applied through `appliedTo` (ExternalEntities of `role: db` by
/// default), with `ingress` and `egress` rules.
fn policy_at(cluster: bool, applied_to: Value, ingress: Value, egress: Value) -> Value {
    let (kind, meta) = if cluster {
        ("ClusterNetworkPolicy", json!({"name": "p"}))
    } else {
        ("NetworkPolicy", json!({"name": "p", "namespace": "vm-ns"}))
    };
    json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": kind, "metadata": meta,
           "spec": {"priority": 5, "appliedTo": applied_to, "ingress": ingress, "egress": egress}})
}

fn ee_db() -> Value {
    json!([{"externalEntitySelector": {"matchLabels": {"role": "db"}}}])
}

fn policy(cluster: bool, ingress: Value, egress: Value) -> Value {
    policy_at(cluster, ee_db(), ingress, egress)
}

fn ingress_rule(extra: Value) -> Value {
    let mut rule = json!({"action": "Drop", "name": "r", "from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]});
    if let (Some(rule), Some(extra)) = (rule.as_object_mut(), extra.as_object()) {
        rule.extend(extra.clone());
    }
    json!([rule])
}

fn egress_rule(extra: Value) -> Value {
    let mut rule = json!({"action": "Drop", "name": "r", "to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]});
    if let (Some(rule), Some(extra)) = (rule.as_object_mut(), extra.as_object()) {
        rule.extend(extra.clone());
    }
    json!([rule])
}

fn tier(spec: Value) -> Value {
    json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "Tier", "metadata": {"name": "t"}, "spec": spec})
}

/// Objects a cluster refuses at apply time are refused, with the cluster's message: they never
/// exist in a cluster, so refusing them lifts no deny that Antrea would enforce.
#[test]
fn schema_and_webhook_refusals_use_the_clusters_messages() {
    let label = "a".repeat(64);
    let cases: Vec<(&str, Value, String)> = vec![
        // clusternetworkpolicy.yaml / networkpolicy.yaml: rules[].logLabel pattern.
        (
            "logLabel with a space (schema pattern)",
            policy(true, ingress_rule(json!({"enableLogging": true, "logLabel": "bad label"})), json!([])),
            format!(
                "ClusterNetworkPolicy p: spec.ingress[0].logLabel: Invalid value: \"bad label\": \
                 spec.ingress[0].logLabel in body should match '{}'",
                schema::LOG_LABEL_PATTERN
            ),
        ),
        (
            "logLabel of 64 characters (schema pattern, {0,61} plus two ends)",
            policy(false, json!([]), egress_rule(json!({"logLabel": label}))),
            format!(
                "NetworkPolicy vm-ns/p: spec.egress[0].logLabel: Invalid value: \"{label}\": \
                 spec.egress[0].logLabel in body should match '{}'",
                schema::LOG_LABEL_PATTERN
            ),
        ),
        (
            "logLabel ending in '-' (schema pattern)",
            policy(true, json!([]), egress_rule(json!({"logLabel": "audit-"}))),
            "spec.egress[0].logLabel: Invalid value: \"audit-\"".into(),
        ),
        // rules[].protocols[].icmp.icmpType / icmpCode: minimum 0, maximum 255.
        (
            "ICMP type 256 (schema maximum)",
            policy(true, ingress_rule(json!({"protocols": [{"icmp": {"icmpType": 256}}]})), json!([])),
            "ClusterNetworkPolicy p: spec.ingress[0].protocols[0].icmp.icmpType: Invalid value: 256: \
             spec.ingress[0].protocols[0].icmp.icmpType in body should be less than or equal to 255"
                .into(),
        ),
        (
            "ICMP code -1 (schema minimum)",
            policy(false, json!([]), egress_rule(json!({"protocols": [{"icmp": {"icmpType": 3, "icmpCode": -1}}]}))),
            "NetworkPolicy vm-ns/p: spec.egress[0].protocols[0].icmp.icmpCode: Invalid value: -1: \
             spec.egress[0].protocols[0].icmp.icmpCode in body should be greater than or equal to 0"
                .into(),
        ),
        // protocols[]: oneOf required icmp / required igmp.
        (
            "a protocols entry with neither icmp nor igmp (schema oneOf)",
            policy(true, ingress_rule(json!({"protocols": [{}]})), json!([])),
            "spec.ingress[0].protocols[0] must validate one and only one schema (oneOf)".into(),
        ),
        // igmp.igmpType: enum [0x11] in ingress rules, [0x12, 0x16, 0x22] in egress rules.
        (
            "IGMP report type in an ingress rule (schema enum)",
            policy(
                true,
                json!([{"action": "Allow", "name": "r", "protocols": [{"igmp": {"igmpType": 0x12}}]}]),
                json!([]),
            ),
            "spec.ingress[0].protocols[0].igmp.igmpType: Unsupported value: 18: supported values: \"17\"".into(),
        ),
        (
            "IGMP query type in an egress rule (schema enum)",
            policy(
                true,
                json!([]),
                json!([{"action": "Allow", "name": "r", "protocols": [{"igmp": {"igmpType": 0x11}}]}]),
            ),
            "spec.egress[0].protocols[0].igmp.igmpType: Unsupported value: 17: supported values: \
             \"18\", \"22\", \"34\""
                .into(),
        ),
        // l7Protocols[]: oneOf http / tls; http.method enum.
        (
            "HTTP method in lowercase (schema enum)",
            policy(
                true,
                json!([{"action": "Allow", "name": "r", "l7Protocols": [{"http": {"method": "get"}}]}]),
                json!([]),
            ),
            "spec.ingress[0].l7Protocols[0].http.method: Unsupported value: \"get\": supported values: \
             \"GET\", \"POST\""
                .into(),
        ),
        // spec.priority: required, minimum 1.0, maximum 10000.0.
        (
            "policy without priority (schema required)",
            json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterNetworkPolicy",
                   "metadata": {"name": "p"}, "spec": {"appliedTo": ee_db()}}),
            "ClusterNetworkPolicy p: spec.priority: Required value".into(),
        ),
        (
            "policy priority 10000.5 (schema maximum)",
            {
                let mut p = policy(true, ingress_rule(json!({})), json!([]));
                p["spec"]["priority"] = json!(10000.5);
                p
            },
            "spec.priority: Invalid value: 10000.5: spec.priority in body should be less than or equal to 10000.0"
                .into(),
        ),
        // tier.yaml: spec.priority required, minimum 0, maximum 255.
        (
            "Tier without priority (schema required; it is not priority 0)",
            tier(json!({"description": "x"})),
            "Tier t: spec.priority: Required value".into(),
        ),
        (
            "Tier priority 256 (schema maximum)",
            tier(json!({"priority": 256})),
            "Tier t: spec.priority: Invalid value: 256: spec.priority in body should be less than or equal to 255"
                .into(),
        ),
        // clusternetworkpolicy.yaml: from[].namespaces minProperties/maxProperties 1, match enum.
        (
            "namespaces: {} (schema minProperties)",
            policy(true, json!([{"action": "Drop", "name": "r", "from": [{"namespaces": {}}]}]), json!([])),
            "spec.ingress[0].from[0].namespaces: Invalid value: 0: spec.ingress[0].from[0].namespaces in \
             body should have at least 1 properties"
                .into(),
        ),
        (
            "namespaces.match other than Self (schema enum)",
            policy(true, json!([{"action": "Drop", "name": "r", "from": [{"namespaces": {"match": "Others"}}]}]), json!([])),
            "spec.ingress[0].from[0].namespaces.match: Unsupported value: \"Others\": supported values: \"Self\"".into(),
        ),
        // validatePeers: sameLabels keys are qualified names.
        (
            "sameLabels with an invalid key (validatePeers)",
            policy(true, json!([{"action": "Drop", "name": "r", "from": [{"namespaces": {"sameLabels": ["-bad"]}}]}]), json!([])),
            "spec.ingress[0].from[0]: namespaces: Invalid label key in sameLabels rule: -bad".into(),
        ),
        // toServices[]: required name and namespace (ACNP), name (ANNP); serviceAccount required.
        (
            "ACNP toServices without namespace (schema required)",
            policy(true, json!([]), json!([{"action": "Drop", "name": "r", "toServices": [{"name": "svc"}]}])),
            "spec.egress[0].toServices[0].namespace: Required value".into(),
        ),
        (
            "ANNP toServices without name (schema required)",
            policy(false, json!([]), json!([{"action": "Drop", "name": "r", "toServices": [{"namespace": "x"}]}])),
            "spec.egress[0].toServices[0].name: Required value".into(),
        ),
        (
            "serviceAccount peer without namespace (schema required)",
            policy(true, json!([{"action": "Drop", "name": "r", "from": [{"serviceAccount": {"name": "sa"}}]}]), json!([])),
            "spec.ingress[0].from[0].serviceAccount.namespace: Required value".into(),
        ),
        // clustergroup.yaml v1beta1: no `ipBlock` (only `ipBlocks`), nor in the Go type.
        (
            "ClusterGroup ipBlock (not in the v1beta1 schema)",
            json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterGroup", "metadata": {"name": "cg"},
                   "spec": {"ipBlock": {"cidr": "10.0.0.0/8"}}}),
            "ClusterGroup cg: strict decoding error: unknown field \"spec.ipBlock\"".into(),
        ),
        // externalentity.yaml: ports[].protocol enum.
        (
            "ExternalEntity port protocol ICMP (schema enum)",
            json!({"apiVersion": "crd.antrea.io/v1alpha2", "kind": "ExternalEntity",
                   "metadata": {"name": "ee", "namespace": "vm-ns"},
                   "spec": {"endpoints": [{"ip": "10.0.0.1"}], "ports": [{"protocol": "ICMP", "port": 1}]}}),
            "spec.ports[0].protocol: Unsupported value: \"ICMP\": supported values: \"TCP\", \"UDP\", \"SCTP\"".into(),
        ),
        // validateAppliedTo: Services take no egress rule, and no other appliedTo beside them.
        (
            "policy applied to a Service with an egress rule (validateAppliedTo)",
            policy_at(true, json!([{"service": {"name": "s", "namespace": "n"}}]), json!([]), egress_rule(json!({}))),
            "spec.appliedTo[0]: egress rule cannot be applied to Services".into(),
        ),
        (
            "a Service beside other appliedTo entries (validateAppliedTo)",
            policy_at(
                true,
                json!([{"service": {"name": "s", "namespace": "n"}}, {"namespaceSelector": {}}]),
                ingress_rule(json!({})),
                json!([]),
            ),
            "spec.appliedTo: a rule/policy cannot be applied to Services and other peers at the same time".into(),
        ),
        // validateAppliedToServiceIngressPeer.
        (
            "applied to a Service, ingress from a selector (validateAppliedToServiceIngressPeer)",
            policy_at(
                true,
                json!([{"service": {"name": "s", "namespace": "n"}}]),
                json!([{"action": "Drop", "name": "r", "from": [{"namespaceSelector": {}}]}]),
                json!([]),
            ),
            "spec.ingress[0].from[0]: a rule/policy that is applied to Services can only use ipBlock to select workloads"
                .into(),
        ),
        // validateL7Protocols.
        (
            "l7Protocols with toServices (validateL7Protocols)",
            policy(
                true,
                json!([]),
                json!([{"action": "Allow", "name": "r", "toServices": [{"name": "s", "namespace": "n"}],
                        "l7Protocols": [{"http": {}}]}]),
            ),
            "spec.egress[0].l7Protocols: layer 7 protocols can not be used with toServices".into(),
        ),
        (
            "HTTP over UDP (validateL7Protocols)",
            policy(
                true,
                json!([{"action": "Allow", "name": "r", "ports": [{"protocol": "UDP", "port": 80}],
                        "l7Protocols": [{"http": {}}]}]),
                json!([]),
            ),
            "spec.ingress[0].l7Protocols: HTTP protocol can only be used when layer 4 protocol is TCP or unset".into(),
        ),
        (
            "HTTP with ICMP (validateL7Protocols)",
            policy(
                true,
                json!([{"action": "Allow", "name": "r", "protocols": [{"icmp": {}}],
                        "l7Protocols": [{"http": {}}]}]),
                json!([]),
            ),
            "spec.ingress[0].l7Protocols: HTTP protocol can not be used with protocol IGMP or ICMP".into(),
        ),
        // validateTierForPassAction, for the old static name of the baseline tier.
        (
            "Pass in tier Baseline (validateTierForPassAction)",
            {
                let mut p = policy(true, json!([{"action": "Pass", "name": "r"}]), json!([]));
                p["spec"]["tier"] = json!("Baseline");
                p
            },
            "spec.ingress[0].action: `Pass` action should not be set for Baseline Tier policy rules".into(),
        ),
    ];
    for (case, object, want) in cases {
        match decode(object) {
            Ok(_) => panic!("{case}: accepted, want {want:?}"),
            Err(e) => assert!(e.to_string().contains(&want), "{case}:\n got {e}\nwant {want:?}"),
        }
    }
}

/// The edges of the ranges and patterns are accepted.
#[test]
fn the_edges_the_schema_allows_are_accepted() {
    let cases: Vec<(&str, Value)> = vec![
        (
            "logLabel of 63 characters, with '-', '_' and '.' inside",
            policy(
                true,
                ingress_rule(json!({"logLabel": format!("a-_.{}", "b".repeat(59))})),
                json!([]),
            ),
        ),
        (
            "logLabel of one character",
            policy(true, ingress_rule(json!({"logLabel": "x"})), json!([])),
        ),
        (
            "ICMP type and code 255 and 0",
            policy(
                true,
                ingress_rule(json!({"protocols": [{"icmp": {"icmpType": 255, "icmpCode": 0}}]})),
                json!([]),
            ),
        ),
        (
            "IGMP v3 report in an egress rule",
            policy(
                true,
                json!([]),
                json!([{"action": "Allow", "name": "r", "protocols": [{"igmp": {"igmpType": 0x22}}]}]),
            ),
        ),
        ("Tier priority 0", tier(json!({"priority": 0}))),
        (
            "ANNP toServices with a name only",
            policy(
                false,
                json!([]),
                json!([{"action": "Drop", "name": "r", "toServices": [{"name": "svc"}]}]),
            ),
        ),
    ];
    for (case, object) in cases {
        if let Err(e) = decode(object) {
            panic!("{case}: refused: {e}");
        }
    }
}

/// `validateTierForPolicy` accepts an empty tier, a Tier's own name and the exact static names
/// of Antrea 0.9 (`staticTierSet`); `getTierPriority` lowercases only those. Any other spelling
/// names no Tier: the webhook refuses the policy; the agent translates it fail-closed.
#[test]
fn default_tier_names_are_matched_as_get_tier_priority_does() {
    let local = vec![Entity {
        namespace: "vm-ns".into(),
        name: "vm1".into(),
        labels: [("role".to_string(), "db".to_string())].into(),
        ips: vec!["10.99.0.2".parse().expect("ip")],
        ports: Vec::new(),
        local: true,
    }];
    let cases: [(&str, Result<i64, &str>); 9] = [
        ("", Ok(250)),
        ("application", Ok(250)),
        ("Application", Ok(250)),
        ("NetworkOps", Ok(150)),
        ("networkops", Ok(150)),
        ("APPLICATION", Err("spec.tier: tier APPLICATION does not exist")),
        ("networkOps", Err("spec.tier: tier networkOps does not exist")),
        ("Securityops", Err("spec.tier: tier Securityops does not exist")),
        // Pass is judged after the tier exists: this one does not.
        ("BASELINE", Err("spec.tier: tier BASELINE does not exist")),
    ];
    for (name, want) in cases {
        let mut object = policy(true, json!([{"action": "Pass", "name": "r"}]), json!([]));
        object["spec"]["tier"] = json!(name);
        let object = decode(object).unwrap_or_else(|e| panic!("tier {name:?}: {e}"));
        let t = translate(&Inputs {
            objects: vec![("test.yaml".into(), object)],
            local_entities: local.clone(),
        });
        match want {
            Ok(priority) => {
                assert_eq!(t.errors, Vec::<String>::new(), "tier {name:?}");
                let p = serde_json::to_value(&t.network_policies[0]).expect("encodes");
                assert_eq!(p["tierPriority"], json!(priority), "tier {name:?}");
            }
            Err(message) => {
                // Translated fail-closed: the Pass rule is a Drop ahead of every Tier.
                let p = serde_json::to_value(&t.network_policies[0]).expect("encodes");
                assert_eq!(p["tierPriority"], json!(-1), "tier {name:?}");
                assert_eq!(p["rules"][0]["action"], json!("Drop"), "tier {name:?}");
                assert!(
                    t.errors.iter().any(|e| e.contains(message)),
                    "tier {name:?}: {:?}",
                    t.errors
                );
            }
        }
    }
}

/// Fields the Go types have and the CRD schemas do not: strict field validation refuses them
/// (`strict decoding error: unknown field`), the agent enforces them as antrea-controller's code
/// reads them and `translate` warns. An ACNP has no `externalEntitySelector` anywhere; an ANNP
/// has it in `spec.appliedTo` and peers, not in a rule's `appliedTo`.
#[test]
fn fields_missing_from_the_crd_schema_are_enforced_with_a_warning() {
    let ee = json!({"matchLabels": {"role": "db"}});
    let cases: Vec<(&str, Value, Vec<&str>)> = vec![
        ("ANNP spec.appliedTo externalEntitySelector", policy(false, ingress_rule(json!({})), json!([])), vec![]),
        (
            "ACNP spec.appliedTo externalEntitySelector",
            policy(true, ingress_rule(json!({})), json!([])),
            vec!["ClusterNetworkPolicy p: a cluster would refuse this object: strict decoding error: \
                  unknown field \"spec.appliedTo[0].externalEntitySelector\""],
        ),
        (
            "ACNP peers externalEntitySelector",
            policy(
                true,
                json!([{"action": "Drop", "name": "i", "from": [{"externalEntitySelector": ee}]}]),
                json!([{"action": "Drop", "name": "e", "to": [{"externalEntitySelector": ee}]}]),
            ),
            vec![
                "unknown field \"spec.appliedTo[0].externalEntitySelector\"",
                "unknown field \"spec.ingress[0].from[0].externalEntitySelector\"",
                "unknown field \"spec.egress[0].to[0].externalEntitySelector\"",
            ],
        ),
        (
            "ANNP rule-level appliedTo externalEntitySelector",
            policy_at(
                false,
                json!([]),
                json!([{"action": "Drop", "name": "i", "appliedTo": [{"externalEntitySelector": ee}]}]),
                json!([]),
            ),
            vec!["NetworkPolicy vm-ns/p: a cluster would refuse this object: strict decoding error: \
                  unknown field \"spec.ingress[0].appliedTo[0].externalEntitySelector\""],
        ),
        (
            "ANNP egress to scope",
            policy(false, json!([]), json!([{"action": "Drop", "name": "e", "to": [{"externalEntitySelector": ee, "scope": "Cluster"}]}])),
            vec!["unknown field \"spec.egress[0].to[0].scope\""],
        ),
        (
            "a name in camelCase (ValidateObjectMeta)",
            json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterGroup", "metadata": {"name": "cgLeaf"},
                   "spec": {"externalEntitySelector": ee}}),
            vec!["ClusterGroup cgLeaf: a cluster would refuse this object: metadata.name: Invalid value: \"cgLeaf\": \
                  a lowercase RFC 1123 subdomain"],
        ),
    ];
    for (case, object, want) in cases {
        let warnings = cluster_warnings(&object);
        decode(object).unwrap_or_else(|e| panic!("{case}: refused: {e}"));
        assert_eq!(warnings.len(), want.len(), "{case}: {warnings:#?}");
        for (w, want) in warnings.iter().zip(want) {
            assert!(w.contains(want), "{case}:\n got {w:?}\nwant {want:?}");
        }
    }
}
