//! The local controller against antrea-controller's expectations. Each test names the upstream
//! case (antrea-io/antrea `pkg/controller/networkpolicy/*_test.go`) whose expectations it
//! mirrors; Pod selectors there become ExternalEntity selectors here (standalone mode has no
//! Pods), which changes the normalized group names exactly as `GenerateNormalizedName` does.

use serde_json::{json, Value};

use super::controller::{generated_rule_name, uuid_v5, Entity};
use super::types::Rule;
use super::*;
use crate::controlplane::types as cp;
use crate::controlplane::Validate as _;

fn inputs(yaml: &str) -> Inputs {
    let mut objects = Vec::new();
    for doc in serde_norway::Deserializer::from_str(yaml) {
        let value: Value = serde::Deserialize::deserialize(doc).unwrap();
        if value.is_null() {
            continue;
        }
        objects.push(("test.yaml".to_string(), decode(value).unwrap()));
    }
    Inputs {
        objects,
        local_entities: vec![Entity {
            namespace: "vm-ns".into(),
            name: "vm1-3e616".into(),
            labels: [("role".to_string(), "db".to_string())].into(),
            ips: vec!["10.99.0.2".parse().unwrap()],
            ports: Vec::new(),
            local: true,
        }],
    }
}

fn decode_err(yaml: &str) -> String {
    let value: Value = serde_norway::from_str(yaml).unwrap();
    decode(value).unwrap_err().to_string()
}

fn group_name(normalized: &str) -> String {
    uuid_v5(normalized)
}

fn rule_json(rule: &cp::NetworkPolicyRule) -> Value {
    serde_json::to_value(rule).unwrap()
}

#[test]
fn uuid_v5_matches_the_go_library() {
    // Python's uuid.uuid5 with antrea-controller's namespace gives the same value.
    assert_eq!(
        uuid_v5("eeSelector=role=db And namespace=vm-ns"),
        "9a47b91d-76f1-5b82-a456-3816a3514090"
    );
}

/// mutate_test.go TestMutateAntreaNetworkPolicy/annp-create-mutate: the generated rule names
/// (the hashes are upstream's literals).
#[test]
fn unnamed_rules_get_the_webhook_names() {
    let rule = |v: Value| -> Rule { serde_json::from_value(v).unwrap() };
    let r0 = rule(json!({"action": "Allow", "from": [{"podSelector": {"matchLabels": {"foo1": "bar1"}}}]}));
    let r1 = rule(json!({"action": "Allow", "from": [{"podSelector": {"matchLabels": {"foo2": "bar2"}}}]}));
    let e0 = rule(json!({"action": "Allow", "to": [{"podSelector": {"matchLabels": {"foo2": "bar2"}}}]}));
    assert_eq!(generated_rule_name("ingress", &r0), "ingress-allow-c4f16d3");
    assert_eq!(generated_rule_name("ingress", &r1), "ingress-allow-be87b58");
    assert_eq!(generated_rule_name("egress", &e0), "egress-allow-44b2575");
}

/// antreanetworkpolicy_test.go TestProcessAntreaNetworkPolicy/rules-with-same-selectors: one
/// AddressGroup for the same selector in two rules, each rule priority its index in its list,
/// TCP when no protocol is given, the default tier's priority, sourceRef, name = UID.
#[test]
fn rules_with_same_selectors() {
    let t = translate(&inputs(
        "apiVersion: crd.antrea.io/v1beta1
kind: NetworkPolicy
metadata: {namespace: ns1, name: npA, uid: uidA}
spec:
  priority: 10
  appliedTo: [{externalEntitySelector: {matchLabels: {role: db}}}]
  ingress:
  - action: Allow
    ports: [{port: 80}]
    from: [{externalEntitySelector: {matchLabels: {app: b}}, namespaceSelector: {matchLabels: {ns: c}}}]
  egress:
  - action: Allow
    ports: [{port: 81}]
    to: [{externalEntitySelector: {matchLabels: {app: b}}, namespaceSelector: {matchLabels: {ns: c}}}]
",
    ));
    assert_eq!(t.errors, Vec::<String>::new());
    let ag = group_name("eeSelector=app=b And namespaceSelector=ns=c");
    let atg = group_name("eeSelector=role=db And namespace=ns1");
    assert_eq!(t.address_groups.len(), 1);
    assert_eq!(t.address_groups[0].metadata.name, ag);
    assert_eq!(t.applied_to_groups.len(), 1);
    assert_eq!(t.applied_to_groups[0].metadata.name, atg);
    let np = &t.network_policies[0];
    assert_eq!(np.metadata.name, "uidA");
    assert_eq!(np.metadata.uid, "uidA");
    assert_eq!(np.priority, Some(10.0));
    assert_eq!(np.tier_priority, Some(250));
    assert_eq!(np.applied_to_groups, vec![atg]);
    assert_eq!(
        serde_json::to_value(np.source_ref.as_ref().unwrap()).unwrap(),
        json!({"type": "AntreaNetworkPolicy", "namespace": "ns1", "name": "npA", "uid": "uidA"})
    );
    let mut r0 = rule_json(&np.rules[0]);
    let mut r1 = rule_json(&np.rules[1]);
    // Upstream's case bypasses the mutating webhook; here the webhook's names are given.
    assert!(r0["name"].as_str().unwrap().starts_with("ingress-allow-"));
    assert!(r1["name"].as_str().unwrap().starts_with("egress-allow-"));
    r0.as_object_mut().unwrap().remove("name");
    r1.as_object_mut().unwrap().remove("name");
    assert_eq!(
        r0,
        json!({"direction": "In", "from": {"addressGroups": [ag]}, "to": {}, "action": "Allow",
               "services": [{"protocol": "TCP", "port": 80}], "enableLogging": false})
    );
    assert_eq!(
        r1,
        json!({"direction": "Out", "from": {}, "to": {"addressGroups": [ag]}, "action": "Allow",
               "services": [{"protocol": "TCP", "port": 81}], "enableLogging": false})
    );
}

/// TestProcessAntreaNetworkPolicy/appliedTo-per-rule: per-rule AppliedToGroups, no
/// policy-level list on the wire (`AppliedToPerRule`), rule priorities 0 and 1, a selector
/// without namespaceSelector in the policy's namespace.
#[test]
fn applied_to_per_rule() {
    let t = translate(&inputs(
        "apiVersion: crd.antrea.io/v1beta1
kind: NetworkPolicy
metadata: {namespace: ns3, name: npC, uid: uidC}
spec:
  priority: 10
  ingress:
  - action: Allow
    appliedTo: [{externalEntitySelector: {matchLabels: {a: a}}}]
    ports: [{port: 80}]
    from: [{externalEntitySelector: {matchLabels: {b: b}}}]
  - action: Allow
    appliedTo: [{externalEntitySelector: {matchLabels: {b: b}}}]
    ports: [{port: 81}]
    from: [{externalEntitySelector: {}, namespaceSelector: {matchLabels: {c: c}}}]
",
    ));
    assert_eq!(t.errors, Vec::<String>::new());
    let np = &t.network_policies[0];
    assert!(np.applied_to_groups.is_empty());
    assert_eq!(np.rules[0].priority, 0);
    assert_eq!(np.rules[1].priority, 1);
    assert_eq!(
        np.rules[0].applied_to_groups,
        vec![group_name("eeSelector=a=a And namespace=ns3")]
    );
    assert_eq!(
        np.rules[1].applied_to_groups,
        vec![group_name("eeSelector=b=b And namespace=ns3")]
    );
    assert_eq!(
        np.rules[0].from.address_groups,
        vec![group_name("eeSelector=b=b And namespace=ns3")]
    );
    assert_eq!(
        np.rules[1].from.address_groups,
        vec![group_name("eeSelector= And namespaceSelector=c=c")]
    );
    assert_eq!(t.applied_to_groups.len(), 2);
    assert_eq!(t.address_groups.len(), 2);
}

/// TestProcessAntreaNetworkPolicy/with-port-range and /rules-with-icmp-protocol and
/// /with-log-label: endPort, an ICMP type and code, enableLogging and logLabel carried over.
#[test]
fn port_range_icmp_and_logging() {
    let t = translate(&inputs(
        "apiVersion: crd.antrea.io/v1beta1
kind: NetworkPolicy
metadata: {namespace: ns4, name: npD, uid: uidD}
spec:
  priority: 10
  appliedTo: [{externalEntitySelector: {matchLabels: {a: a}}}]
  ingress:
  - action: Allow
    name: range
    ports: [{protocol: TCP, port: 1000, endPort: 1999}]
    enableLogging: true
    logLabel: audit
  egress:
  - action: Allow
    name: ping
    protocols: [{icmp: {icmpType: 8, icmpCode: 0}}]
",
    ));
    assert_eq!(t.errors, Vec::<String>::new());
    let np = &t.network_policies[0];
    assert_eq!(
        serde_json::to_value(&np.rules[0].services).unwrap(),
        json!([{"protocol": "TCP", "port": 1000, "endPort": 1999}])
    );
    assert!(np.rules[0].enable_logging);
    assert_eq!(np.rules[0].log_label, "audit");
    assert_eq!(np.rules[0].name, "range");
    // An empty `from` is every address (matchAllPeer: both families).
    assert_eq!(np.rules[0].from.ip_blocks.len(), 2);
    assert_eq!(
        serde_json::to_value(&np.rules[1].services).unwrap(),
        json!([{"protocol": "ICMP", "icmpType": 8, "icmpCode": 0}])
    );
    assert_eq!(np.rules[1].to.ip_blocks.len(), 2);
}

/// antreaclusternetworkpolicy_test.go TestGetTierPriority: no tier is the application tier
/// (250), a static tier's old capitalized name still resolves, a user Tier gives its priority.
/// A tier that does not exist (`validateTierForPolicy` refuses such a policy when it is
/// created) is translated fail-closed ahead of every Tier: see corner_tests.
#[test]
fn tier_priorities() {
    let yaml = "apiVersion: crd.antrea.io/v1beta1
kind: Tier
metadata: {name: mytier}
spec: {priority: 10}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: a, uid: a}
spec: {priority: 1, appliedTo: [{externalEntitySelector: {}}], ingress: [{action: Drop}]}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: b, uid: b}
spec: {tier: Emergency, priority: 1, appliedTo: [{externalEntitySelector: {}}], ingress: [{action: Drop}]}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: c, uid: c}
spec: {tier: mytier, priority: 1, appliedTo: [{externalEntitySelector: {}}], ingress: [{action: Drop}]}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: d, uid: d}
spec: {tier: nosuch, priority: 1, appliedTo: [{externalEntitySelector: {}}], ingress: [{action: Drop}]}
";
    let t = translate(&inputs(yaml));
    let prio: Vec<(String, Option<i32>)> = t
        .network_policies
        .iter()
        .map(|p| (p.metadata.name.clone(), p.tier_priority))
        .collect();
    assert_eq!(
        prio,
        [
            ("a".into(), Some(250)),
            ("b".into(), Some(50)),
            ("c".into(), Some(10)),
            ("d".into(), Some(-1))
        ]
    );
    assert_eq!(
        t.errors,
        [
            "test.yaml: ClusterNetworkPolicy d: spec.ingress[0] (rule \"ingress-drop-742ade5\"): enforced \
          fail-closed: the rule drops what it matches ahead of every Tier (tier priority -1), where no \
          rule of another policy precedes it, because spec.tier: tier nosuch does not exist"
        ]
    );
    // An ACNP's selectors look in every namespace.
    assert_eq!(
        t.network_policies[0].applied_to_groups,
        vec![group_name("eeSelector=")]
    );
}

/// tier_test.go / validate_test.go (Tier cases): a reserved priority, and one that overlaps.
#[test]
fn tiers_with_reserved_or_taken_priorities_are_refused() {
    let e = decode_err(
        "apiVersion: crd.antrea.io/v1beta1\nkind: Tier\nmetadata: {name: t}\nspec: {priority: 251}\n",
    );
    assert_eq!(e, "Tier t: spec.priority: tier t priority 251 is reserved");
    let t = translate(&inputs(
        "apiVersion: crd.antrea.io/v1beta1\nkind: Tier\nmetadata: {name: t}\nspec: {priority: 250}\n",
    ));
    assert_eq!(
        t.errors,
        ["test.yaml: Tier t: spec.priority: tier t priority 250 overlaps with existing Tier; the policies in \
          it are enforced fail-closed (their Drop and Reject rules ahead of every Tier, their Allow rules \
          not enforced, their Pass rules as Drops)"]
    );
}

/// antreaclusternetworkpolicy_test.go TestProcessRefGroupOrClusterGroup: a ClusterGroup with
/// selectors becomes an AddressGroup named after it; one with ipBlocks puts them in the peer;
/// one whose children mix both gives both.
#[test]
fn cluster_group_references() {
    let t = translate(&inputs(
        "apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: cgA}
spec: {externalEntitySelector: {matchLabels: {role: front}}}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: cgB}
spec: {ipBlocks: [{cidr: 192.168.1.0/24}]}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: cgC}
spec: {childGroups: [cgA, cgB]}
---
apiVersion: crd.antrea.io/v1alpha2
kind: ExternalEntity
metadata: {name: front1, namespace: other, labels: {role: front}}
spec: {endpoints: [{ip: 172.16.100.4}]}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: p, uid: p}
spec:
  priority: 1
  appliedTo: [{externalEntitySelector: {matchLabels: {role: db}}}]
  ingress:
  - {action: Allow, name: a, from: [{group: cgA}]}
  - {action: Allow, name: b, from: [{group: cgB}]}
  - {action: Allow, name: c, from: [{group: cgC}]}
",
    ));
    assert_eq!(t.errors, Vec::<String>::new());
    let rules = &t.network_policies[0].rules;
    assert_eq!(rules[0].from.address_groups, ["cgA"]);
    assert!(rules[0].from.ip_blocks.is_empty());
    assert!(rules[1].from.address_groups.is_empty());
    assert_eq!(
        rules[1].from.ip_blocks[0].cidr.to_net().unwrap().to_string(),
        "192.168.1.0/24"
    );
    assert_eq!(rules[2].from.address_groups, ["cgC"]);
    assert_eq!(rules[2].from.ip_blocks.len(), 1);
    let groups: Vec<(&str, usize)> = t
        .address_groups
        .iter()
        .map(|g| (g.metadata.name.as_str(), g.group_members.len()))
        .collect();
    assert_eq!(groups, [("cgA", 1), ("cgC", 1)]);
    let member = &t.address_groups[0].group_members[0];
    assert_eq!(
        serde_json::to_value(member).unwrap(),
        json!({"externalEntity": {"name": "front1", "namespace": "other"}, "ips": ["AAAAAAAAAAAAAP//rBBkBA=="]})
    );
    // The AppliedToGroup carries this agent's ExternalEntity only, without IPs.
    assert_eq!(
        serde_json::to_value(&t.applied_to_groups[0].group_members).unwrap(),
        json!([{"externalEntity": {"name": "vm1-3e616", "namespace": "vm-ns"}}])
    );
}

/// The seed example, verbatim (shared with the CLI and lab tests).
const SEED_ANNP: &str = include_str!("../../../../tests/fixtures/seed-annp.yaml");
/// The `role: front` host the seed example's rule selects.
const SEED_INVENTORY: &str = include_str!("../../../../tests/fixtures/seed-inventory.yaml");

/// The seed example: an ANNP with a Reject rule from an inventory host and an ipBlock.
#[test]
fn seed_example_translates() {
    assert!(
        include_str!("../../../../docs/policies.md").contains(SEED_ANNP),
        "docs/policies.md shows the seed example as the fixture holds it"
    );
    let t = translate(&inputs(&format!("{SEED_ANNP}---\n{SEED_INVENTORY}")));
    assert_eq!(t.errors, Vec::<String>::new());
    for object in t.objects() {
        object.validate().unwrap();
    }
    let np = &t.network_policies[0];
    assert_eq!(np.source_ref.as_ref().unwrap().name, "annp1");
    assert_eq!(np.rules[0].action.as_deref(), Some("Reject"));
    assert_eq!(
        np.rules[0].from.address_groups,
        [group_name("eeSelector=role=front And namespace=vm-ns")]
    );
    assert_eq!(t.address_groups[0].group_members.len(), 1);
    assert_eq!(t.applied_to_groups[0].group_members.len(), 1);
}

/// validate_test.go TestValidateAntreaPolicy cases, with the webhook's messages.
#[test]
fn webhook_checks_with_upstream_messages() {
    let policy = |spec: &str| {
        decode_err(&format!(
            "apiVersion: crd.antrea.io/v1beta1\nkind: NetworkPolicy\nmetadata: {{name: p, namespace: n}}\nspec: {spec}\n"
        ))
    };
    // "acnp-appliedto-not-set" / "annp-appliedto-set-in-both-spec-and-rules".
    assert_eq!(
        policy("{priority: 1, ingress: [{action: Allow}]}"),
        "NetworkPolicy n/p: appliedTo needs to be set in either spec or rules"
    );
    assert_eq!(
        policy("{priority: 1, appliedTo: [{externalEntitySelector: {}}], ingress: [{action: Allow, appliedTo: [{externalEntitySelector: {}}]}]}"),
        "NetworkPolicy n/p: appliedTo should not be set in both spec and rules"
    );
    // "acnp-rule-group-set-with-psel".
    assert_eq!(
        policy("{priority: 1, appliedTo: [{externalEntitySelector: {}}], ingress: [{action: Allow, from: [{group: g, externalEntitySelector: {}}]}]}"),
        "NetworkPolicy n/p: spec.ingress[0].from[0]: group cannot be set with other peers in rules"
    );
    // "annp-endport-without-port" / "endport-smaller-than-port".
    assert_eq!(
        policy("{priority: 1, appliedTo: [{externalEntitySelector: {}}], ingress: [{action: Allow, ports: [{endPort: 10}]}]}"),
        "NetworkPolicy n/p: spec.ingress[0].ports: if `endPort` is specified `port` must be specified"
    );
    assert_eq!(
        policy("{priority: 1, appliedTo: [{externalEntitySelector: {}}], ingress: [{action: Allow, ports: [{port: 20, endPort: 10}]}]}"),
        "NetworkPolicy n/p: spec.ingress[0].ports: `endPort` should be greater than or equal to `port`"
    );
    // "annp-rule-names-not-unique" (two rules named alike).
    assert_eq!(
        policy("{priority: 1, appliedTo: [{externalEntitySelector: {}}], ingress: [{action: Allow, name: x}, {action: Drop, name: x}]}"),
        "NetworkPolicy n/p: spec.ingress[1].name: rules names must be unique within the policy"
    );
    // "acnp-ipblock-except-not-subset".
    assert_eq!(
        policy("{priority: 1, appliedTo: [{externalEntitySelector: {}}], ingress: [{action: Allow, from: [{ipBlock: {cidr: 10.0.0.0/16, except: [10.1.0.0/24]}}]}]}"),
        "NetworkPolicy n/p: spec.ingress[0].from[0]: ipBlock: except CIDR 10.1.0.0/24 is not a strict subset of CIDR 10.0.0.0/16"
    );
    // "acnp-baseline-tier-pass-action" (on an ANNP here: the webhook checks both kinds).
    assert_eq!(
        policy("{tier: baseline, priority: 1, appliedTo: [{externalEntitySelector: {}}], ingress: [{action: Pass}]}"),
        "NetworkPolicy n/p: spec.ingress[0].action: `Pass` action should not be set for Baseline Tier policy rules"
    );
    // "annp-igmp-with-reject".
    assert_eq!(
        policy("{priority: 1, appliedTo: [{externalEntitySelector: {}}], ingress: [{action: Reject, protocols: [{igmp: {igmpType: 17}}]}]}"),
        "NetworkPolicy n/p: spec.ingress[0]: protocol IGMP does not support Pass or Reject"
    );
    // "acnp-invalid-label-key-applied-to".
    assert!(policy("{priority: 1, appliedTo: [{externalEntitySelector: {matchLabels: {'foo=': bar}}}], ingress: [{action: Allow}]}")
        .starts_with("NetworkPolicy n/p: spec.appliedTo[0].externalEntitySelector: Invalid label key: foo=:"));
    // "annp-egress-fqdn-invalid-characters".
    assert_eq!(
        policy("{priority: 1, appliedTo: [{externalEntitySelector: {}}], egress: [{action: Allow, to: [{fqdn: 'a b.com'}]}]}"),
        "NetworkPolicy n/p: spec.egress[0].to[0]: invalid characters in egress rule fqdn field: a b.com"
    );
    // What Antrea accepts and a VM cannot honour (a podSelector, ...) is not refused here: the
    // rule is translated fail-closed (corner_tests, `a_rule_the_agent_cannot_honour_...`).
    // A peer scope outside the CRD's enum is refused.
    assert_eq!(
        policy("{priority: 1, appliedTo: [{externalEntitySelector: {}}], ingress: [{action: Allow, from: [{externalEntitySelector: {}, scope: Galaxy}]}]}"),
        "NetworkPolicy n/p: spec.ingress[0].from[0]: scope: Unsupported value: \"Galaxy\": supported values: \"Cluster\", \"ClusterSet\""
    );
    // Unknown fields are refused (a typo is not silently dropped).
    assert!(policy(
        "{priority: 1, appliedTo: [{externalEntitySelector: {}}], ingress: [{action: Allow, fromm: []}]}"
    )
    .contains("unknown field `fromm`"));
}

/// validate_test.go TestValidateAntreaClusterGroup / TestValidateAntreaGroup cases.
#[test]
fn group_checks_with_upstream_messages() {
    let cg = |spec: &str| {
        decode_err(&format!(
            "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterGroup\nmetadata: {{name: cg}}\nspec: {spec}\n"
        ))
    };
    assert_eq!(
        cg("{externalEntitySelector: {}, ipBlocks: [{cidr: 10.0.0.0/8}]}"),
        "ClusterGroup cg: spec: At most one of podSelector, nodeSelector, externalEntitySelector, serviceReference, ipBlock, ipBlocks or childGroups can be set for a ClusterGroup"
    );
    assert_eq!(
        cg("{ipBlocks: [{cidr: 10.0.0.0/8}, {cidr: 224.0.0.1/32}]}"),
        "ClusterGroup cg: spec.ipBlocks: can not set multicast groupAddress together with unicast ip address"
    );
    assert_eq!(
        cg("{childGroups: [cg]}"),
        "ClusterGroup cg: spec.childGroups: cannot set ClusterGroup cg as its own childGroup"
    );
}

/// A Group (namespaced) used by an ANNP: its key is `namespace/name`; its selector looks in its
/// own namespace only.
#[test]
fn namespaced_group_selects_in_its_namespace() {
    let t = translate(&inputs(
        "apiVersion: crd.antrea.io/v1beta1
kind: Group
metadata: {name: g, namespace: vm-ns}
spec: {externalEntitySelector: {matchLabels: {role: front}}}
---
apiVersion: crd.antrea.io/v1alpha2
kind: ExternalEntity
metadata: {name: in-ns, namespace: vm-ns, labels: {role: front}}
spec: {endpoints: [{ip: 172.16.100.4}]}
---
apiVersion: crd.antrea.io/v1alpha2
kind: ExternalEntity
metadata: {name: elsewhere, namespace: other, labels: {role: front}}
spec: {endpoints: [{ip: 172.16.100.6}]}
---
apiVersion: crd.antrea.io/v1beta1
kind: NetworkPolicy
metadata: {name: p, namespace: vm-ns, uid: p}
spec:
  priority: 1
  appliedTo: [{group: g}]
  ingress: [{action: Drop, name: d, from: [{group: g}]}]
",
    ));
    assert_eq!(t.errors, Vec::<String>::new());
    assert_eq!(t.network_policies[0].applied_to_groups, ["vm-ns/g"]);
    assert_eq!(t.address_groups[0].metadata.name, "vm-ns/g");
    assert_eq!(t.address_groups[0].group_members.len(), 1);
    // Applied to the group: no local ExternalEntity has role=front.
    assert!(t.applied_to_groups[0].group_members.is_empty());
}

/// A policy naming a group that does not exist is translated with that peer matching nothing
/// (`processRefGroupOrClusterGroup` gives no AddressGroup and no ipBlock for it), and says so:
/// its Drop rule still drops through its other peers, where refusing the whole policy would
/// lift it.
#[test]
fn a_peer_naming_a_missing_group_matches_nothing_and_the_policy_stands() {
    let t = translate(&inputs(
        "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: bad, uid: bad}
spec: {priority: 1, appliedTo: [{externalEntitySelector: {}}], ingress: [{action: Drop, from: [{group: nosuch}, {ipBlock: {cidr: 10.0.0.0/8}}]}]}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: good, uid: good}
spec: {priority: 1, appliedTo: [{externalEntitySelector: {}}], ingress: [{action: Drop}]}
",
    ));
    let names: Vec<&str> = t
        .network_policies
        .iter()
        .map(|p| p.metadata.name.as_str())
        .collect();
    assert_eq!(names, ["bad", "good"]);
    let from = &t.network_policies[0].rules[0].from;
    assert!(from.address_groups.is_empty());
    assert_eq!(from.ip_blocks.len(), 1, "only the ipBlock: {from:?}");
    assert_eq!(
        t.errors,
        [
            "test.yaml: ClusterNetworkPolicy bad: spec.ingress[0].from[0].group: ClusterGroup nosuch does \
          not exist: this peer matches nothing (the policy is enforced without it)"
        ]
    );
}
