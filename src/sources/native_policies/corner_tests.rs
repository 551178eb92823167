//! The corners where the local controller must mean exactly what antrea-controller makes of a
//! policy: table tests, each naming the antrea-io/antrea function whose behaviour it pins
//! (`pkg/controller/networkpolicy/`), with inputs rewritten for ExternalEntities. The Tier
//! corners are in `tier_tests.rs`, which shares this file's helpers.

use serde_json::{json, Value};

use crate::policy::native::controller::{generated_rule_name, Entity};
use crate::policy::native::types::Rule;
use crate::policy::native::*;

pub(super) fn local() -> Vec<Entity> {
    vec![Entity {
        namespace: "vm-ns".into(),
        name: "vm1-3e616".into(),
        labels: [("role".to_string(), "db".to_string())].into(),
        ips: vec!["10.99.0.2".parse().expect("ip")],
        ports: Vec::new(),
        local: true,
    }]
}

/// An ANNP (`cluster` false) or ACNP applied to `role: db`, with `egress` and `ingress` rules.
pub(super) fn policy(cluster: bool, ingress: Value, egress: Value) -> Value {
    let (kind, meta) = if cluster {
        ("ClusterNetworkPolicy", json!({"name": "p", "uid": "uid-p"}))
    } else {
        (
            "NetworkPolicy",
            json!({"name": "p", "namespace": "vm-ns", "uid": "uid-p"}),
        )
    };
    json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": kind, "metadata": meta,
           "spec": {"priority": 5,
                    "appliedTo": [{"externalEntitySelector": {"matchLabels": {"role": "db"}}}],
                    "ingress": ingress, "egress": egress}})
}

/// The translated rules of one policy object (which must decode and translate cleanly).
pub(super) fn rules(object: Value) -> Vec<Value> {
    let object = decode(object).expect("decodes");
    let t = translate(&Inputs {
        objects: vec![("test.yaml".into(), object)],
        local_entities: local(),
    });
    assert_eq!(t.errors, Vec::<String>::new());
    assert_eq!(t.network_policies.len(), 1);
    t.network_policies[0]
        .rules
        .iter()
        .map(|r| serde_json::to_value(r).expect("encodes"))
        .collect()
}

/// `matchAllPeer` (0.0.0.0/0 and ::/0) in wire form: IPv4-mapped and IPv6 zero addresses with
/// prefix length 0 (left out, as Go's `omitempty` does).
pub(super) fn match_all() -> Value {
    json!({"ipBlocks": [{"cidr": {"ip": "AAAAAAAAAAAAAP//AAAAAA=="}},
                        {"cidr": {"ip": "AAAAAAAAAAAAAAAAAAAAAA=="}}]})
}

/// `toServices: []` is present, not absent. antrea-controller picks the Service peer whenever
/// `ToServices != nil` (`processAntreaNetworkPolicy`, `processAntreaClusterNetworkPolicy`,
/// then `svcRefToPeerForCRD`), and an empty list gives a peer with no Service: the rule
/// matches nothing (a Drop with it drops nothing, rather than all egress). An ANNP reads the
/// field on egress rules only; an ACNP on both directions.
#[test]
fn to_services_present_but_empty_matches_nothing_as_svc_ref_to_peer_for_crd() {
    let drop_empty = json!([{"action": "Drop", "name": "r", "toServices": []}]);
    let drop_absent = json!([{"action": "Drop", "name": "r"}]);
    let cases: [(&str, Value, Value); 5] = [
        // (case, policy, the `to`/`from` of its only rule)
        (
            "ANNP egress, toServices: []",
            policy(false, json!([]), drop_empty.clone()),
            json!({}),
        ),
        (
            "ANNP egress, absent",
            policy(false, json!([]), drop_absent),
            match_all(),
        ),
        (
            "ACNP egress, toServices: []",
            policy(true, json!([]), drop_empty.clone()),
            json!({}),
        ),
        // Ingress: the ANNP processing never reads it (the rule is as if absent); the ACNP
        // processing loops over both directions with the same `ToServices != nil` test.
        (
            "ANNP ingress, toServices: []",
            policy(false, drop_empty.clone(), json!([])),
            match_all(),
        ),
        (
            "ACNP ingress, toServices: []",
            policy(true, drop_empty, json!([])),
            json!({}),
        ),
    ];
    for (case, object, want) in cases {
        let ingress = case.contains("ingress");
        let rules = rules(object);
        assert_eq!(rules.len(), 1, "{case}");
        let peer = if ingress {
            &rules[0]["from"]
        } else {
            &rules[0]["to"]
        };
        assert_eq!(*peer, want, "{case}");
        assert_eq!(rules[0]["action"], "Drop", "{case}");
        // Any port: no `services`.
        assert!(rules[0].get("services").is_none(), "{case}: {}", rules[0]);
    }
}

/// A peer with nothing in it matches nothing on the agent too: the controlplane form above
/// compiles to a conjunction whose destination clause has no flow (it never completes), where
/// the same Drop without `toServices` compiles both clauses and drops all egress.
#[test]
fn an_empty_to_services_drop_blocks_nothing_once_compiled() {
    let object = decode(policy(
        false,
        json!([]),
        json!([{"action": "Drop", "name": "r", "toServices": []}]),
    ))
    .expect("decodes");
    let t = translate(&Inputs {
        objects: vec![("test.yaml".into(), object)],
        local_entities: local(),
    });
    let state = "interfaces:\n- {name: eth0, ofport: 3, uplinkOfport: 2, ips: [10.99.0.2], \
                 externalEntity: {namespace: vm-ns, name: vm1-3e616}}\n";
    let out = crate::cli::compile::compile_state_with(state, t.objects()).expect("compiles");
    let egress = |flows: &[String], clause: &str| {
        flows
            .iter()
            .any(|f| f.contains("table=AntreaPolicyEgressRule") && f.contains(clause))
    };
    assert!(egress(&out.flows, ",1/2)"), "{:#?}", out.flows);
    assert!(!egress(&out.flows, ",2/2)"), "{:#?}", out.flows);
    // The same rule without `toServices` drops all egress.
    let object = decode(policy(false, json!([]), json!([{"action": "Drop", "name": "r"}]))).expect("decodes");
    let t = translate(&Inputs {
        objects: vec![("test.yaml".into(), object)],
        local_entities: local(),
    });
    let out = crate::cli::compile::compile_state_with(state, t.objects()).expect("compiles");
    assert!(
        egress(&out.flows, ",1/2)") && egress(&out.flows, ",2/2)"),
        "{:#?}",
        out.flows
    );
}

/// `validatePeers`: on an egress rule, `toServices` that is not nil beside `to`, or beside
/// `ports`/`protocols` that are not nil (an empty list counts), refuses the policy; `ports: []`
/// alone is any port (`toAntreaServicesForCRD` gives no service).
#[test]
fn to_services_beside_ports_is_refused_as_validate_peers_does() {
    let refused = "NetworkPolicy vm-ns/p: spec.egress[0]: `toServices` cannot be used with `to`, `ports` or `protocols`";
    let cases: [(&str, Value, Option<&str>); 7] = [
        (
            "toServices: [] and ports",
            json!({"toServices": [], "ports": [{"port": 80}]}),
            Some(refused),
        ),
        (
            "toServices: [] and ports: []",
            json!({"toServices": [], "ports": []}),
            Some(refused),
        ),
        (
            "toServices and ports: []",
            json!({"toServices": [{"name": "db"}], "ports": []}),
            Some(refused),
        ),
        (
            "toServices: [] and protocols: []",
            json!({"toServices": [], "protocols": []}),
            Some(refused),
        ),
        (
            "toServices: [] and to",
            json!({"toServices": [], "to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}),
            Some(refused),
        ),
        ("ports: [] alone", json!({"ports": []}), None),
        ("toServices: [] alone", json!({"toServices": []}), None),
    ];
    for (case, fields, want) in cases {
        let mut rule = json!({"action": "Drop", "name": "r"});
        for (k, v) in fields.as_object().expect("object") {
            rule[k] = v.clone();
        }
        let result = decode(policy(false, json!([]), json!([rule])));
        match want {
            Some(message) => assert_eq!(result.expect_err(case).to_string(), message, "{case}"),
            None => {
                assert!(result.is_ok(), "{case}: {result:?}");
            }
        }
    }
    // `ports: []` alone: any port, the peer as written.
    let rules = rules(policy(
        false,
        json!([]),
        json!([{"action": "Drop", "name": "r", "ports": []}]),
    ));
    assert!(rules[0].get("services").is_none(), "{}", rules[0]);
    assert_eq!(rules[0]["to"], match_all());
}

/// Go's `omitempty` leaves an empty list out of the JSON the mutating webhook hashes
/// (`generateRuleName`): `toServices: []` and `ports: []` name a rule as their absence does.
#[test]
fn empty_lists_do_not_change_the_generated_rule_name() {
    let rule = |v: Value| -> Rule { serde_json::from_value(v).expect("rule") };
    let bare = generated_rule_name("egress", &rule(json!({"action": "Drop"})));
    for with in [
        json!({"action": "Drop", "toServices": []}),
        json!({"action": "Drop", "ports": []}),
        json!({"action": "Drop", "protocols": []}),
        json!({"action": "Drop", "toServices": null}),
    ] {
        assert_eq!(generated_rule_name("egress", &rule(with.clone())), bare, "{with}");
    }
}

/// The `security.antrea.io` group (and the other old Antrea groups) is served by no
/// antrea-controller today: its chart installs every CRD of these kinds in `crd.antrea.io`
/// only. Such an object goes to `decode` (never read as a controlplane object) and is refused
/// there, naming the object and its apiVersion: one message for the agent, `translate` and
/// `compile`.
#[test]
fn old_api_groups_are_refused_with_one_message() {
    let cases = [
        (
            json!({"apiVersion": "security.antrea.io/v1alpha1", "kind": "ClusterNetworkPolicy",
                   "metadata": {"name": "acnp"}, "spec": {"priority": 5}}),
            "ClusterNetworkPolicy acnp: apiVersion: \"security.antrea.io/v1alpha1\" is not served by \
             Antrea (Antrea-native policies are crd.antrea.io/v1beta1, ExternalEntities \
             crd.antrea.io/v1alpha2); refused, not enforced",
        ),
        (
            json!({"apiVersion": "security.antrea.tanzu.vmware.com/v1alpha1", "kind": "NetworkPolicy",
                   "metadata": {"name": "annp", "namespace": "ns"}, "spec": {"unknown": 1}}),
            "NetworkPolicy ns/annp: apiVersion: \"security.antrea.tanzu.vmware.com/v1alpha1\" is not \
             served by Antrea (Antrea-native policies are crd.antrea.io/v1beta1, ExternalEntities \
             crd.antrea.io/v1alpha2); refused, not enforced",
        ),
        (
            json!({"apiVersion": "core.antrea.io/v1alpha2", "kind": "ExternalEntity",
                   "metadata": {"name": "e", "namespace": "ns"}}),
            "ExternalEntity ns/e: apiVersion: \"core.antrea.io/v1alpha2\" is not served by Antrea \
             (Antrea-native policies are crd.antrea.io/v1beta1, ExternalEntities \
             crd.antrea.io/v1alpha2); refused, not enforced",
        ),
        // An old version of the served group keeps its own message.
        (
            json!({"apiVersion": "crd.antrea.io/v1alpha1", "kind": "ClusterNetworkPolicy",
                   "metadata": {"name": "acnp"}, "spec": {"priority": 5}}),
            "ClusterNetworkPolicy acnp: apiVersion: \"crd.antrea.io/v1alpha1\" is not \
             crd.antrea.io/v1beta1 (the version this agent reads)",
        ),
    ];
    for (object, message) in cases {
        assert!(is_native(&object), "{object}");
        assert_eq!(decode(object.clone()).expect_err("refused").to_string(), message);
    }
    // The controlplane group and foreign groups are not the local controller's.
    for api in [
        "controlplane.antrea.io/v1beta2",
        "networking.k8s.io/v1",
        "example.com/v1",
    ] {
        assert!(
            !is_native(&json!({"apiVersion": api, "kind": "NetworkPolicy"})),
            "{api}"
        );
    }
}

/// ClusterGroups for the nesting cases of clustergroup_test.go `TestChildGroupsNestingExceeded`
/// and `TestOverNestedGroupNotRealized`, plus `cgMixed`, whose other child (an ipBlock) must not
/// be kept either.
const NESTED: &str = "
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: cgLeaf}
spec: {externalEntitySelector: {matchLabels: {app: web}}}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: cgLeafIp}
spec: {ipBlocks: [{cidr: 10.0.0.0/24}]}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: cgParent}
spec: {childGroups: [cgLeaf, cgLeafIp]}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: cgDuplicate}
spec: {childGroups: [cgLeaf, cgLeaf]}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: cgGrandParent}
spec: {childGroups: [cgParent]}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: cgMixed}
spec: {childGroups: [cgLeafIp, cgParent]}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: cgMissingChild}
spec: {childGroups: [cgDoesNotExist]}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: cgDeclaresMissingChild}
spec: {childGroups: [cgDoesNotExist]}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: cgMissingGrandChild}
spec: {childGroups: [cgDeclaresMissingChild]}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: cgCycle1}
spec: {childGroups: [cgCycle2]}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: cgCycle2}
spec: {childGroups: [cgCycle1]}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: cgOutside}
spec: {childGroups: [cgCycle1]}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: cgLocal}
spec: {externalEntitySelector: {matchLabels: {role: db}}}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: cgLocalParent}
spec: {childGroups: [cgLocal]}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: cgLocalGrandParent}
spec: {childGroups: [cgLocalParent]}
---
apiVersion: crd.antrea.io/v1alpha2
kind: ExternalEntity
metadata: {name: web1, namespace: other, labels: {app: web}}
spec: {endpoints: [{ip: 172.16.0.1}]}
";

pub(super) fn translate_yaml(yaml: &str) -> Translation {
    let mut objects = Vec::new();
    for doc in serde_norway::Deserializer::from_str(yaml) {
        let value: Value = serde::Deserialize::deserialize(doc).expect("yaml");
        if !value.is_null() {
            objects.push(("test.yaml".to_string(), decode(value).expect("decodes")));
        }
    }
    translate(&Inputs {
        objects,
        local_entities: local(),
    })
}

/// `childGroupsNestingExceeded` (exceeded when an existing child lists childGroups, a cycle
/// included), then `processRefGroupOrClusterGroup`/`processInternalGroupForRuleAtLevel` and
/// `getInternalGroupMembersAtLevel`: a group not realized gives a rule peer neither an
/// AddressGroup nor an ipBlock, however valid its other children are; a realized one gives
/// its children's members and ipBlocks.
#[test]
fn nested_groups_beyond_one_level_match_nothing_as_child_groups_nesting_exceeded() {
    // (group, realized as a peer: AddressGroup members, ipBlocks)
    let cases: [(&str, Option<usize>, usize); 11] = [
        ("cgLeaf", Some(1), 0),
        ("cgParent", Some(1), 1),
        // A child listed twice adds no level.
        ("cgDuplicate", Some(1), 0),
        ("cgGrandParent", None, 0),
        ("cgMixed", None, 0),
        // A missing child is no nesting: the group is realized, with nothing from it.
        ("cgMissingChild", None, 0),
        // A child declaring a child that does not exist yet already exceeds.
        ("cgMissingGrandChild", None, 0),
        ("cgCycle1", None, 0),
        ("cgCycle2", None, 0),
        ("cgOutside", None, 0),
        ("cgLeafIp", None, 1),
    ];
    let rules: Vec<String> = cases
        .iter()
        .map(|(g, _, _)| format!("  - {{action: Drop, name: {g}, from: [{{group: {g}}}]}}\n"))
        .collect();
    let t = translate_yaml(&format!(
        "{NESTED}---\napiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\n\
         metadata: {{name: p, uid: p}}\nspec:\n  priority: 1\n  \
         appliedTo: [{{externalEntitySelector: {{matchLabels: {{role: db}}}}}}]\n  ingress:\n{}",
        rules.concat()
    ));
    assert_eq!(t.network_policies.len(), 1, "{:#?}", t.errors);
    for ((group, members, blocks), rule) in cases.iter().zip(&t.network_policies[0].rules) {
        assert_eq!(rule.name, *group);
        let ag: Vec<usize> = t
            .address_groups
            .iter()
            .filter(|g| rule.from.address_groups.contains(&g.metadata.name))
            .map(|g| g.group_members.len())
            .collect();
        assert_eq!(ag, members.iter().copied().collect::<Vec<_>>(), "{group}");
        assert_eq!(rule.from.ip_blocks.len(), *blocks, "{group}");
        // A peer that matches nothing is not the match-all of an empty `from`.
        if members.is_none() && *blocks == 0 {
            assert_eq!(
                serde_json::to_value(&rule.from).expect("json"),
                json!({}),
                "{group}"
            );
        }
    }
    // Each group not realized is reported (once per child at fault), and nothing else.
    let reported: std::collections::BTreeSet<&str> = t
        .errors
        .iter()
        .filter_map(|e| e.strip_prefix("test.yaml: ClusterGroup "))
        .filter_map(|e| e.split(':').next())
        .collect();
    let expected: std::collections::BTreeSet<&str> = [
        "cgCycle1",
        "cgCycle2",
        "cgGrandParent",
        "cgLocalGrandParent",
        "cgMissingGrandChild",
        "cgMixed",
        "cgOutside",
    ]
    .into();
    assert_eq!(reported, expected);
    assert_eq!(t.errors.len(), expected.len(), "{:#?}", t.errors);
    assert!(
        t.errors.contains(
            &"test.yaml: ClusterGroup cgGrandParent: spec.childGroups: cannot set ClusterGroup cgParent as \
              childGroup, who has 2 childGroups itself; the childGroups of this ClusterGroup must not \
              have childGroups of their own: it is not realized and matches nothing"
                .to_string()
        ),
        "{:#?}",
        t.errors
    );
}

/// `getInternalGroupWorkloads` (clustergroup_test.go `TestOverNestedGroupNotAppliedTo`): a
/// group not realized for its nesting selects nothing as an appliedTo, where its realized
/// child selects this agent's ExternalEntity.
#[test]
fn an_over_nested_group_applies_to_nothing() {
    let policy = |name: &str, group: &str| {
        format!(
            "---\napiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\n\
             metadata: {{name: {name}, uid: {name}}}\n\
             spec: {{priority: 1, appliedTo: [{{group: {group}}}], ingress: [{{action: Drop}}]}}\n"
        )
    };
    let t = translate_yaml(&format!(
        "{NESTED}{}{}",
        policy("realized", "cgLocalParent"),
        policy("nested", "cgLocalGrandParent")
    ));
    let members: Vec<(&str, usize)> = t
        .applied_to_groups
        .iter()
        .map(|g| (g.metadata.name.as_str(), g.group_members.len()))
        .collect();
    assert_eq!(members, [("cgLocalGrandParent", 0), ("cgLocalParent", 1)]);
    assert_eq!(t.network_policies.len(), 2);
}

/// `createAppliedToGroupForGroup` gives no AppliedToGroup for a group that does not exist or
/// that holds ipBlocks: that appliedTo entry is skipped, the policy stands on the others (and
/// on nothing when none is left), with a note naming the entry.
#[test]
fn an_applied_to_group_that_is_missing_or_holds_ip_blocks_is_skipped_alone() {
    let t = translate_yaml(&format!(
        "{NESTED}---\napiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\n\
         metadata: {{name: p, uid: p}}\n\
         spec: {{priority: 1, appliedTo: [{{group: cgLeafIp}}, {{group: nosuch}}, \
         {{externalEntitySelector: {{matchLabels: {{role: db}}}}}}], ingress: [{{action: Drop}}]}}\n"
    ));
    assert_eq!(t.network_policies.len(), 1);
    let np = &t.network_policies[0];
    assert_eq!(
        np.applied_to_groups.len(),
        1,
        "only the selector: {:?}",
        np.applied_to_groups
    );
    assert_eq!(t.applied_to_groups[0].group_members.len(), 1);
    let notes: Vec<&String> = t
        .errors
        .iter()
        .filter(|e| e.contains("ClusterNetworkPolicy p:"))
        .collect();
    assert_eq!(
        notes,
        [
            "test.yaml: ClusterNetworkPolicy p: spec.appliedTo[0].group: ClusterGroup cgLeafIp has \
             ipBlocks and cannot be used as appliedTo: this appliedTo selects nothing (the policy is \
             enforced without it)",
            "test.yaml: ClusterNetworkPolicy p: spec.appliedTo[1].group: ClusterGroup nosuch does not \
             exist: this appliedTo selects nothing (the policy is enforced without it)"
        ]
    );
}

/// The translation of one policy object with its notes (which must decode and translate).
pub(super) fn translate_one(object: Value) -> Translation {
    translate(&Inputs {
        objects: vec![("test.yaml".into(), decode(object).expect("decodes"))],
        local_entities: local(),
    })
}

/// Refusal is never weaker than Antrea. antrea-controller accepts a peer that selects Pods,
/// Nodes or ServiceAccounts (`toAntreaPeerForCRD`), `namespaces: {match: Self}`
/// (`processAntreaPeerNamespaces`) and `scope: ClusterSet`; the agent cannot know their
/// addresses. Antrea-native policies have no implicit isolation, so refusing the policy would
/// lift its other rules' Drops. The policy is translated: its other rules as written, the rule
/// at fault fail-closed (an Allow without that peer, a Drop/Reject of any address, a Pass as a
/// Drop of any address), with one note per such rule.
#[test]
fn a_rule_the_agent_cannot_honour_is_fail_closed_and_the_others_stand() {
    let pods = json!({"podSelector": {"matchLabels": {"app": "x"}}});
    let net = json!({"ipBlock": {"cidr": "10.1.0.0/16"}});
    let net_peer = json!({"ipBlocks": [{"cidr": {"ip": "AAAAAAAAAAAAAP//CgEAAA==", "prefixLength": 16}}]});
    let tcp22 = json!([{"protocol": "TCP", "port": 22}]);
    // (case, ingress rule, its translated `from`, its installed action, the note's verdict)
    let cases: Vec<(&str, Value, Value, &str, &str)> = vec![
        (
            "Allow from Pods only: allows nothing",
            json!({"action": "Allow", "name": "r", "from": [pods]}),
            json!({}),
            "Allow",
            "not enforced: the rule allows nothing",
        ),
        (
            "Allow from Pods and a CIDR: allows the CIDR",
            json!({"action": "Allow", "name": "r", "from": [pods, net]}),
            net_peer.clone(),
            "Allow",
            "enforced fail-closed: the rule allows only its other peers",
        ),
        (
            "Allow from namespaces match Self and a CIDR",
            json!({"action": "Allow", "name": "r",
                   "from": [{"namespaces": {"match": "Self"}}, net]}),
            net_peer,
            "Allow",
            "enforced fail-closed: the rule allows only its other peers",
        ),
        (
            "Drop from Pods and a CIDR on TCP 22: drops any address on TCP 22",
            json!({"action": "Drop", "name": "r", "from": [pods, net], "ports": tcp22}),
            match_all(),
            "Drop",
            "enforced fail-closed: the rule drops all traffic from any address on its ports and protocols",
        ),
        (
            "Reject from a nodeSelector",
            json!({"action": "Reject", "name": "r", "from": [{"nodeSelector": {}}]}),
            match_all(),
            "Reject",
            "enforced fail-closed: the rule rejects all traffic from any address",
        ),
        (
            "Drop from a ClusterSet scope",
            json!({"action": "Drop", "name": "r",
                   "from": [{"externalEntitySelector": {}, "scope": "ClusterSet"}]}),
            match_all(),
            "Drop",
            "enforced fail-closed: the rule drops all traffic from any address",
        ),
        (
            "Pass from a serviceAccount: a Drop of any address",
            json!({"action": "Pass", "name": "r",
                   "from": [{"serviceAccount": {"name": "sa", "namespace": "ns"}}]}),
            match_all(),
            "Drop",
            "enforced fail-closed: the Pass rule is installed as a Drop of all traffic from any address",
        ),
    ];
    for (case, rule, from, action, verdict) in cases {
        // The policy's other rules: an ingress and an egress Drop, which must stand.
        let t = translate_one(policy(
            true,
            json!([rule, {"action": "Drop", "name": "deny-in", "from": [{"ipBlock": {"cidr": "10.9.0.0/16"}}]}]),
            json!([{"action": "Drop", "name": "deny-out", "to": [{"ipBlock": {"cidr": "10.8.0.0/16"}}]}]),
        ));
        assert_eq!(t.network_policies.len(), 1, "{case}: {:#?}", t.errors);
        let rules: Vec<Value> = t.network_policies[0]
            .rules
            .iter()
            .map(|r| serde_json::to_value(r).expect("encodes"))
            .collect();
        assert_eq!(rules.len(), 3, "{case}");
        assert_eq!(rules[0]["from"], from, "{case}");
        assert_eq!(rules[0]["action"], action, "{case}");
        assert_eq!(rules[0]["name"], "r", "{case}");
        for (i, name, cidr) in [(1, "deny-in", "CgkAAA=="), (2, "deny-out", "CggAAA==")] {
            assert_eq!(rules[i]["name"], name, "{case}");
            assert_eq!(rules[i]["action"], "Drop", "{case}");
            let side = if i == 1 { "from" } else { "to" };
            assert_eq!(
                rules[i][side]["ipBlocks"][0]["cidr"]["ip"],
                format!("AAAAAAAAAAAAAP//{cidr}"),
                "{case}: {} stands as written",
                name
            );
        }
        // Ports and protocols are kept: the fail-closed match is broader, never other.
        assert_eq!(
            rules[0].get("services").is_some(),
            case.contains("TCP 22"),
            "{case}"
        );
        assert_eq!(t.errors.len(), 1, "{case}: {:#?}", t.errors);
        let note = &t.errors[0];
        assert!(
            note.starts_with(&format!(
                "test.yaml: ClusterNetworkPolicy p: spec.ingress[0] (rule \"r\"): {verdict}"
            )),
            "{case}: {note}"
        );
        assert!(note.contains(", because spec.ingress[0].from["), "{case}: {note}");
    }
}

/// Once compiled, the fail-closed Drop drops: a Drop from Pods (whose addresses the agent
/// cannot know) is installed as a Drop from any address, next to the policy's Allow.
#[test]
fn a_fail_closed_drop_is_installed_from_any_address() {
    let t = translate_one(policy(
        false,
        json!([{"action": "Drop", "name": "r", "from": [{"podSelector": {}}]}]),
        json!([]),
    ));
    assert_eq!(t.network_policies.len(), 1, "{:#?}", t.errors);
    let state = "interfaces:\n- {name: eth0, ofport: 3, uplinkOfport: 2, ips: [10.99.0.2], \
                 externalEntity: {namespace: vm-ns, name: vm1-3e616}}\n";
    let out = crate::cli::compile::compile_state_with(state, t.objects()).expect("compiles");
    let ingress = |clause: &str| {
        out.flows
            .iter()
            .any(|f| f.contains("table=AntreaPolicyIngressRule") && f.contains(clause))
    };
    // Both clauses of the conjunction (source: any address; destination: this VM) have flows.
    assert!(ingress(",1/2)") && ingress(",2/2)"), "{:#?}", out.flows);
}

/// An appliedTo entry that selects Pods, Nodes or Services (`createAppliedToGroup` resolves it
/// to Pods or Nodes, never ExternalEntities) selects nothing on this VM, as in a cluster: the
/// policy stands on its other entries, and a rule whose only appliedTo is such an entry
/// applies to nothing here, while the other rules stand.
#[test]
fn an_applied_to_of_pods_or_nodes_selects_nothing_here_and_the_policy_stands() {
    let ee = json!({"externalEntitySelector": {"matchLabels": {"role": "db"}}});
    let mut spec_level = policy(true, json!([{"action": "Drop", "name": "d"}]), json!([]));
    spec_level["spec"]["appliedTo"] = json!([{"podSelector": {}}, {"nodeSelector": {}}, ee]);
    let t = translate_one(spec_level);
    assert_eq!(t.network_policies.len(), 1, "{:#?}", t.errors);
    assert_eq!(t.network_policies[0].applied_to_groups.len(), 1);
    assert_eq!(t.applied_to_groups[0].group_members.len(), 1);
    assert_eq!(
        t.errors,
        [
            "test.yaml: ClusterNetworkPolicy p: spec.appliedTo[0].podSelector: selects Pods, never an \
             ExternalEntity: this appliedTo selects nothing on this VM (the policy is enforced without it)",
            "test.yaml: ClusterNetworkPolicy p: spec.appliedTo[1].nodeSelector: selects Nodes, never an \
             ExternalEntity: this appliedTo selects nothing on this VM (the policy is enforced without it)",
        ]
    );
    // Per rule: the rule applied to a Service applies to nothing, the Drop applied here stands.
    let mut per_rule = policy(
        true,
        json!([{"action": "Drop", "name": "svc", "appliedTo": [{"service": {"name": "s", "namespace": "n"}}]},
               {"action": "Drop", "name": "here", "appliedTo": [ee]}]),
        json!([]),
    );
    per_rule["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("appliedTo");
    let t = translate_one(per_rule);
    assert_eq!(t.network_policies.len(), 1, "{:#?}", t.errors);
    let rules = &t.network_policies[0].rules;
    assert!(rules[0].applied_to_groups.is_empty());
    assert_eq!(rules[1].applied_to_groups.len(), 1);
    assert_eq!(t.errors.len(), 1, "{:#?}", t.errors);
    assert!(t.errors[0].contains("spec.ingress[0].appliedTo[0].service: selects the Pods of a Service"));
}

/// Groups for the appliedTo-namespace cases: the local entity `vm-ns/vm1-3e616` has
/// `role: db`; `other/db2` too, in another namespace.
const NAMESPACED: &str = "
apiVersion: v1
kind: Namespace
metadata: {name: other, labels: {env: prod}}
---
apiVersion: crd.antrea.io/v1alpha2
kind: ExternalEntity
metadata: {name: db2, namespace: other, labels: {role: db}}
spec: {endpoints: [{ip: 172.16.0.2}]}
---
apiVersion: crd.antrea.io/v1alpha2
kind: ExternalEntity
metadata: {name: web3, namespace: vm-ns, labels: {role: web}}
spec: {endpoints: [{ip: 172.16.0.3}]}
---
apiVersion: crd.antrea.io/v1beta1
kind: Group
metadata: {name: gOwn, namespace: vm-ns}
spec: {externalEntitySelector: {matchLabels: {role: db}}}
---
apiVersion: crd.antrea.io/v1beta1
kind: Group
metadata: {name: gEverywhere, namespace: vm-ns}
spec: {namespaceSelector: {}, externalEntitySelector: {matchLabels: {role: db}}}
---
apiVersion: crd.antrea.io/v1beta1
kind: Group
metadata: {name: gEverywhereOnlyHere, namespace: vm-ns}
spec: {namespaceSelector: {}, externalEntitySelector: {matchLabels: {role: web}}}
---
apiVersion: crd.antrea.io/v1beta1
kind: Group
metadata: {name: gOwnByLabel, namespace: vm-ns}
spec: {namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: vm-ns}},
       externalEntitySelector: {matchLabels: {role: db}}}
---
apiVersion: crd.antrea.io/v1beta1
kind: Group
metadata: {name: gParent, namespace: vm-ns}
spec: {childGroups: [gOwn, gEverywhere]}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: cgEverywhere}
spec: {externalEntitySelector: {matchLabels: {role: db}}}
";

/// `getInternalGroupWorkloads` (the `validateNamespace` check and
/// `ErrNetworkPolicyAppliedToUnsupportedGroup`), then `syncInternalNetworkPolicy` and
/// `GenerateNetworkPolicyCondition`: a Group used as an AntreaNetworkPolicy's appliedTo (the
/// policy's or a rule's) whose members include an ExternalEntity of another namespace, directly
/// or through a child, makes the policy unrealizable: it spans no Node, so no agent enforces
/// it. The check is on the members, not the selector (a namespaceSelector that happens to
/// select only the Group's namespace is fine); as a rule peer the same Group is fine; a
/// ClusterGroup may select every namespace; other policies are not affected.
#[test]
fn a_group_selecting_other_namespaces_as_applied_to_is_an_error_as_get_internal_group_workloads() {
    // (case, policy kind, appliedTo, rule appliedTo, peer, enforced)
    let cases: [(&str, &str, &str, &str, &str, bool); 9] = [
        ("own namespace", "NetworkPolicy", "gOwn", "", "", true),
        (
            "every namespace, a member elsewhere",
            "NetworkPolicy",
            "gEverywhere",
            "",
            "",
            false,
        ),
        (
            "every namespace, members only here",
            "NetworkPolicy",
            "gEverywhereOnlyHere",
            "",
            "",
            true,
        ),
        (
            "namespaceSelector naming its own",
            "NetworkPolicy",
            "gOwnByLabel",
            "",
            "",
            true,
        ),
        ("through a child", "NetworkPolicy", "gParent", "", "", false),
        (
            "in a rule's appliedTo",
            "NetworkPolicy",
            "",
            "gEverywhere",
            "",
            false,
        ),
        ("as a rule peer", "NetworkPolicy", "gOwn", "", "gEverywhere", true),
        (
            "ClusterGroup in an ACNP",
            "ClusterNetworkPolicy",
            "cgEverywhere",
            "",
            "",
            true,
        ),
        ("missing Group", "NetworkPolicy", "gNoSuch", "", "", true),
    ];
    let mut yaml = NAMESPACED.to_string();
    for (i, (_, kind, applied_to, rule_applied_to, peer, _)) in cases.iter().enumerate() {
        let namespace = if *kind == "NetworkPolicy" {
            ", namespace: vm-ns"
        } else {
            ""
        };
        let spec_applied_to = if applied_to.is_empty() {
            String::new()
        } else {
            format!(", appliedTo: [{{group: {applied_to}}}]")
        };
        let rule_applied_to = if rule_applied_to.is_empty() {
            String::new()
        } else {
            format!(", appliedTo: [{{group: {rule_applied_to}}}]")
        };
        let from = if peer.is_empty() {
            String::new()
        } else {
            format!(", from: [{{group: {peer}}}]")
        };
        yaml.push_str(&format!(
            "---\napiVersion: crd.antrea.io/v1beta1\nkind: {kind}\n\
             metadata: {{name: p{i}, uid: p{i}{namespace}}}\n\
             spec: {{priority: 1{spec_applied_to}, ingress: [{{action: Drop, name: d{rule_applied_to}{from}}}]}}\n"
        ));
    }
    let t = translate_yaml(&yaml);
    for (i, (case, _, applied_to, rule_applied_to, _, enforced)) in cases.iter().enumerate() {
        let name = format!("p{i}");
        let present = t.network_policies.iter().any(|p| p.metadata.name == name);
        assert_eq!(present, *enforced, "{case}: {:#?}", t.errors);
        let error = t
            .errors
            .iter()
            .find(|e| e.contains(&format!("NetworkPolicy vm-ns/{name}:")));
        if !enforced {
            let (at, group) = if applied_to.is_empty() {
                ("spec.ingress[0].appliedTo[0]", *rule_applied_to)
            } else {
                ("spec.appliedTo[0]", *applied_to)
            };
            assert_eq!(
                error.map(String::as_str),
                Some(
                    format!(
                        "test.yaml: NetworkPolicy vm-ns/{name}: {at}.group: Group vm-ns/{group} with \
                         ExternalEntities in other Namespaces can not be used as AppliedTo \
                         (antrea-controller's NetworkPolicyAppliedToUnsupportedGroup): the policy is \
                         in error and sent to no agent; not enforced"
                    )
                    .as_str()
                ),
                "{case}"
            );
        }
    }
    // A policy in error creates no group: its AppliedToGroup is not sent either.
    assert!(t
        .applied_to_groups
        .iter()
        .all(|g| g.metadata.name != "vm-ns/gEverywhere" && g.metadata.name != "vm-ns/gParent"));
    // The peer case keeps the Group, with its member elsewhere, as an AddressGroup.
    let peer = t
        .address_groups
        .iter()
        .find(|g| g.metadata.name == "vm-ns/gEverywhere")
        .expect("the peer's AddressGroup");
    assert_eq!(peer.group_members.len(), 2);
}

/// The running controller follows the members: an ExternalEntity moving into another namespace
/// puts the policies applied to its Group in error (deleted from the agent's view, as
/// antrea-controller stops sending them), moving back restores them; each step equals the full
/// translation of the same objects.
#[test]
fn a_member_moving_namespace_puts_the_policy_in_error_and_back() {
    let objects = |db2_namespace: &str| -> Vec<(String, NativeObject)> {
        let yaml = format!(
            "{NAMESPACED}---\napiVersion: crd.antrea.io/v1alpha2\nkind: ExternalEntity\n\
             metadata: {{name: db4, namespace: {db2_namespace}, labels: {{role: api}}}}\n\
             spec: {{endpoints: [{{ip: 172.16.0.4}}]}}\n---\n\
             apiVersion: crd.antrea.io/v1beta1\nkind: Group\n\
             metadata: {{name: gApi, namespace: vm-ns}}\n\
             spec: {{namespaceSelector: {{}}, externalEntitySelector: {{matchExpressions: \
             [{{key: role, operator: In, values: [api, db]}}]}}}}\n---\n\
             apiVersion: crd.antrea.io/v1beta1\nkind: Group\n\
             metadata: {{name: gApiHere, namespace: vm-ns}}\n\
             spec: {{namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: vm-ns}}}}, \
             externalEntitySelector: {{matchExpressions: [{{key: role, operator: In, values: [api, db]}}]}}}}\n---\n\
             apiVersion: crd.antrea.io/v1beta1\nkind: NetworkPolicy\n\
             metadata: {{name: p, namespace: vm-ns, uid: p}}\n\
             spec: {{priority: 1, appliedTo: [{{group: gApiHere}}], ingress: [{{action: Drop}}]}}\n"
        );
        serde_norway::Deserializer::from_str(&yaml)
            .filter_map(|doc| {
                let value: Value = serde::Deserialize::deserialize(doc).expect("yaml");
                (!value.is_null()).then(|| ("test.yaml".to_string(), decode(value).expect("decodes")))
            })
            .collect()
    };
    let mut state = NativeState::new(objects("vm-ns"), local());
    assert_eq!(state.translation().network_policies.len(), 1);
    // gApiHere never selects elsewhere: its policy stays. Now point the policy at gApi, whose
    // namespaceSelector is every namespace but whose members are all in vm-ns while db4 is.
    let mut with_api = objects("vm-ns");
    let policy = with_api.pop().expect("policy");
    let repointed = |o: &NativeObject| {
        let NativeObject::Policy { kind, meta, spec } = o else {
            panic!("policy")
        };
        let mut spec = spec.clone();
        spec.applied_to[0].group = "gApi".into();
        NativeObject::Policy {
            kind: *kind,
            meta: meta.clone(),
            spec,
        }
    };
    state.apply([Change::Upsert {
        origin: "test.yaml".into(),
        object: std::sync::Arc::new(repointed(&policy.1)),
    }]);
    // db2 (role db, namespace other) is already a member elsewhere: the policy is in error.
    assert!(state.translation().network_policies.is_empty());
    with_api.push(("test.yaml".into(), repointed(&policy.1)));
    assert_eq!(
        state.translation(),
        translate(&Inputs {
            objects: with_api.clone(),
            local_entities: local(),
        })
    );
    // db2 leaves: only vm-ns members remain, the policy comes back.
    let delta = state.apply([Change::Delete((
        NativeKind::ExternalEntity,
        "other".into(),
        "db2".into(),
    ))]);
    assert!(
        delta
            .upserted
            .iter()
            .any(|o| matches!(o, crate::policy::controlplane::types::ControlplaneObject::NetworkPolicy(p) if p.metadata.name == "p")),
        "{delta:?}"
    );
    with_api.retain(|(_, o)| o.meta().name != "db2");
    assert_eq!(
        state.translation(),
        translate(&Inputs {
            objects: with_api.clone(),
            local_entities: local(),
        })
    );
    assert_eq!(state.translation().network_policies.len(), 1);
    // db4 moves to `other`: in error again, the policy is deleted.
    let moved = objects("other")
        .into_iter()
        .find(|(_, o)| o.meta().name == "db4")
        .expect("db4");
    let delta = state.apply([
        Change::Delete((NativeKind::ExternalEntity, "vm-ns".into(), "db4".into())),
        Change::Upsert {
            origin: moved.0.clone(),
            object: std::sync::Arc::new(moved.1.clone()),
        },
    ]);
    assert!(
        delta
            .deleted
            .contains(&(crate::policy::controlplane::Kind::NetworkPolicy, "p".to_string())),
        "{delta:?}"
    );
    with_api.retain(|(_, o)| o.meta().name != "db4");
    with_api.push(moved);
    assert_eq!(
        state.translation(),
        translate(&Inputs {
            objects: with_api,
            local_entities: local(),
        })
    );
}

/// `validateFQDNSelectors` checks an FQDN's characters only, so `fqdn: "*"` is accepted; the
/// agent's `fqdnToSelectorItem` makes it a pattern matching every name. The policy is
/// translated with it as written (the FQDN selector tests pin the matching).
#[test]
fn fqdn_star_is_accepted_as_validate_fqdn_selectors() {
    for fqdn in ["*", "*.*"] {
        let rules = rules(policy(
            false,
            json!([]),
            json!([{"action": "Drop", "name": "r", "to": [{"fqdn": fqdn}]}]),
        ));
        assert_eq!(rules[0]["to"], json!({"fqdns": [fqdn]}), "{fqdn}");
    }
    // The webhook's character check still refuses what it refuses.
    let e = decode(policy(
        false,
        json!([]),
        json!([{"action": "Drop", "name": "r", "to": [{"fqdn": "*/x"}]}]),
    ))
    .expect_err("refused");
    assert_eq!(
        e.to_string(),
        "NetworkPolicy vm-ns/p: spec.egress[0].to[0]: invalid characters in egress rule fqdn field: */x"
    );
}

/// Groups of Pods, Nodes and a Service, as antrea-controller accepts them, next to a group of
/// ExternalEntities (`ees`, which selects the local entity) and parents of both kinds.
pub(super) fn unresolvable_groups() -> Vec<Value> {
    let cg = |name: &str, spec: Value| {
        json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterGroup",
               "metadata": {"name": name}, "spec": spec})
    };
    vec![
        cg(
            "web-pods",
            json!({"podSelector": {"matchLabels": {"app": "web"}}}),
        ),
        cg("nodes", json!({"nodeSelector": {}})),
        cg(
            "svc",
            json!({"serviceReference": {"name": "s", "namespace": "n"}}),
        ),
        cg(
            "ns-pods",
            json!({"namespaceSelector": {"matchLabels": {"env": "prod"}}}),
        ),
        cg(
            "ees",
            json!({"externalEntitySelector": {"matchLabels": {"role": "db"}}}),
        ),
        cg("parent", json!({"childGroups": ["ees", "web-pods"]})),
        json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "Group",
               "metadata": {"name": "g-pods", "namespace": "vm-ns"},
               "spec": {"podSelector": {}}}),
    ]
}

/// The translation of `policy` with [`unresolvable_groups`] (which must all decode).
pub(super) fn translate_with_groups(policy: Value) -> Translation {
    let mut objects: Vec<(String, NativeObject)> = unresolvable_groups()
        .into_iter()
        .map(|g| {
            (
                "groups.yaml".to_string(),
                decode(g).expect("a group of Pods decodes"),
            )
        })
        .collect();
    objects.push(("test.yaml".into(), decode(policy).expect("decodes")));
    translate(&Inputs {
        objects,
        local_entities: local(),
    })
}

/// (case, ACNP or ANNP, action, `from` of its rule, translated `from`, installed action,
/// verdict, because).
type GroupPeerCase = (
    &'static str,
    bool,
    &'static str,
    Value,
    Value,
    &'static str,
    &'static str,
    String,
);

/// A rule peer naming a ClusterGroup or Group of Pods, Nodes or a Service, directly or
/// through a child. antrea-controller accepts such a group (`processClusterGroup`,
/// `processGroup`, `processServiceReference`) and gives a rule naming it an AddressGroup
/// (`processRefGroupOrClusterGroup`, `processInternalGroupForRuleAtLevel`: a child with
/// selectors is enough) whose members are Pods or Nodes (`getAddressGroupMemberSet`,
/// `getMemberSetForGroupType`). The agent cannot know those addresses: the peer is
/// unsupported, and the rule takes the fail-closed path of an inline `podSelector` peer. It
/// must never match nothing, which would lift a Drop that a cluster enforces.
#[test]
fn a_peer_group_of_pods_is_fail_closed_as_process_ref_group_or_cluster_group() {
    let net = json!({"ipBlock": {"cidr": "10.1.0.0/16"}});
    let net_peer = json!({"ipBlocks": [{"cidr": {"ip": "AAAAAAAAAAAAAP//CgEAAA==", "prefixLength": 16}}]});
    let because = |i: usize, path: &str| format!("because spec.ingress[0].from[{i}].group: {path}");
    let pods = "ClusterGroup web-pods: spec.podSelector: is not supported in standalone mode";
    let child = "ClusterGroup parent: spec.childGroups: ClusterGroup web-pods: spec.podSelector:";
    let cases: Vec<GroupPeerCase> = vec![
        (
            "Drop from a podSelector ClusterGroup: drops from any address",
            true,
            "Drop",
            json!([{"group": "web-pods"}]),
            match_all(),
            "Drop",
            "enforced fail-closed: the rule drops all traffic from any address",
            because(0, pods),
        ),
        (
            "Drop from a parent with a podSelector child: drops from any address",
            true,
            "Drop",
            json!([{"group": "parent"}]),
            match_all(),
            "Drop",
            "enforced fail-closed: the rule drops all traffic from any address",
            because(0, child),
        ),
        (
            "Reject from a serviceReference ClusterGroup",
            true,
            "Reject",
            json!([{"group": "svc"}]),
            match_all(),
            "Reject",
            "enforced fail-closed: the rule rejects all traffic from any address",
            because(0, "ClusterGroup svc: spec.serviceReference:"),
        ),
        (
            "Drop from a namespaceSelector-only ClusterGroup (Pods)",
            true,
            "Drop",
            json!([{"group": "ns-pods"}]),
            match_all(),
            "Drop",
            "enforced fail-closed: the rule drops all traffic from any address",
            because(
                0,
                "ClusterGroup ns-pods: spec.namespaceSelector: without externalEntitySelector",
            ),
        ),
        (
            "Pass from a nodeSelector ClusterGroup: a Drop of any address",
            true,
            "Pass",
            json!([{"group": "nodes"}]),
            match_all(),
            "Drop",
            "enforced fail-closed: the Pass rule is installed as a Drop of all traffic from any address",
            because(0, "ClusterGroup nodes: spec.nodeSelector:"),
        ),
        (
            "Allow from a podSelector ClusterGroup and a CIDR: allows the CIDR",
            true,
            "Allow",
            json!([{"group": "web-pods"}, net]),
            net_peer,
            "Allow",
            "enforced fail-closed: the rule allows only its other peers",
            because(0, pods),
        ),
        (
            "Allow from a parent with a podSelector child and the ExternalEntity group",
            true,
            "Allow",
            json!([{"group": "parent"}, {"group": "ees"}]),
            json!({"addressGroups": ["ees"]}),
            "Allow",
            "enforced fail-closed: the rule allows only its other peers",
            because(0, child),
        ),
        (
            "Allow from a podSelector ClusterGroup only: allows nothing",
            true,
            "Allow",
            json!([{"group": "web-pods"}]),
            json!({}),
            "Allow",
            "not enforced: the rule allows nothing",
            because(0, pods),
        ),
        (
            "ANNP: Drop from a podSelector Group",
            false,
            "Drop",
            json!([{"ipBlock": {"cidr": "10.1.0.0/16"}}, {"group": "g-pods"}]),
            match_all(),
            "Drop",
            "enforced fail-closed: the rule drops all traffic from any address",
            because(1, "Group vm-ns/g-pods: spec.podSelector:"),
        ),
    ];
    for (case, cluster, written, from, translated, action, verdict, because) in cases {
        let t = translate_with_groups(policy(
            cluster,
            json!([{"action": written, "name": "r", "from": from},
                   {"action": "Drop", "name": "deny-in", "from": [{"ipBlock": {"cidr": "10.9.0.0/16"}}]}]),
            json!([]),
        ));
        assert_eq!(t.network_policies.len(), 1, "{case}: {:#?}", t.errors);
        let rules: Vec<Value> = t.network_policies[0]
            .rules
            .iter()
            .map(|r| serde_json::to_value(r).expect("encodes"))
            .collect();
        assert_eq!(rules[0]["from"], translated, "{case}");
        assert_eq!(rules[0]["action"], action, "{case}");
        // The other rule stands as written.
        assert_eq!(
            rules[1]["from"]["ipBlocks"][0]["cidr"]["ip"], "AAAAAAAAAAAAAP//CgkAAA==",
            "{case}"
        );
        assert_eq!(t.errors.len(), 1, "{case}: {:#?}", t.errors);
        let kind = if cluster {
            "ClusterNetworkPolicy p"
        } else {
            "NetworkPolicy vm-ns/p"
        };
        let note = &t.errors[0];
        assert!(
            note.starts_with(&format!(
                "test.yaml: {kind}: spec.ingress[0] (rule \"r\"): {verdict}"
            )),
            "{case}: {note}"
        );
        assert!(note.contains(&because), "{case}: {note}");
        // No AddressGroup is made for a group whose members cannot be known.
        assert!(
            t.address_groups.iter().all(|g| g.metadata.name == "ees"),
            "{case}: {:?}",
            t.address_groups
        );
    }
}

/// An appliedTo naming a group of Pods, Nodes or a Service: its AppliedToGroup
/// (`createAppliedToGroupForGroup`) spans Pods or Nodes (`getAppliedToWorkloads`), never an
/// ExternalEntity, so on this VM it selects nothing, and the policy stands on its other
/// entries. A parent with such a child keeps its other members.
#[test]
fn an_applied_to_group_of_pods_selects_nothing_as_create_applied_to_group_for_group() {
    let mut p = policy(true, json!([{"action": "Drop", "name": "d"}]), json!([]));
    p["spec"]["appliedTo"] = json!([{"group": "web-pods"}, {"group": "nodes"}, {"group": "parent"}]);
    let t = translate_with_groups(p);
    assert_eq!(t.network_policies.len(), 1, "{:#?}", t.errors);
    assert_eq!(t.network_policies[0].applied_to_groups, ["parent"]);
    assert_eq!(t.applied_to_groups.len(), 1);
    assert_eq!(
        t.applied_to_groups[0].group_members.len(),
        1,
        "the local entity, through ees"
    );
    assert_eq!(
        t.errors,
        [
            "test.yaml: ClusterNetworkPolicy p: spec.appliedTo[0].group: ClusterGroup web-pods selects \
             Pods (spec.podSelector), never an ExternalEntity: this appliedTo selects nothing on this VM \
             (the policy is enforced without it)",
            "test.yaml: ClusterNetworkPolicy p: spec.appliedTo[1].group: ClusterGroup nodes selects \
             Nodes (spec.nodeSelector), never an ExternalEntity: this appliedTo selects nothing on this \
             VM (the policy is enforced without it)",
            "test.yaml: ClusterNetworkPolicy p: spec.appliedTo[2].group: ClusterGroup parent: \
             spec.childGroups: ClusterGroup web-pods selects Pods (spec.podSelector), never an \
             ExternalEntity: it adds nothing to this appliedTo on this VM (the group's other members \
             stand)",
        ]
    );
    // Per rule: the rule applied to the Service's group applies to nothing; the other stands.
    let mut per_rule = policy(
        true,
        json!([{"action": "Drop", "name": "svc", "appliedTo": [{"group": "svc"}]},
               {"action": "Drop", "name": "here", "appliedTo": [{"group": "ees"}]}]),
        json!([]),
    );
    per_rule["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("appliedTo");
    let t = translate_with_groups(per_rule);
    assert_eq!(t.network_policies.len(), 1, "{:#?}", t.errors);
    let rules = &t.network_policies[0].rules;
    assert!(rules[0].applied_to_groups.is_empty());
    assert_eq!(rules[1].applied_to_groups, ["ees"]);
    assert_eq!(t.errors.len(), 1, "{:#?}", t.errors);
    assert!(t.errors[0].contains(
        "spec.ingress[0].appliedTo[0].group: ClusterGroup svc selects the Pods of a Service \
         (spec.serviceReference)"
    ));
}
