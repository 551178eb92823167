//! Tests of `validate`.
use super::*;
use antrea_controlplane::testdata;
use serde_json::{json, Value};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}

fn decode(text: &str) -> ControlplaneObject {
    ControlplaneObject::from_value(serde_json::from_str(text).unwrap()).unwrap()
}

fn policy(v: Value) -> Result<Policy, InvalidObject> {
    serde_json::from_value::<NetworkPolicy>(v).unwrap().validate()
}

/// A valid ANNP-derived policy with one In rule; `rules` replaces its rules.
fn np_with_rules(rules: Value) -> Value {
    json!({
        "kind": "NetworkPolicy",
        "metadata": {"name": "uid-1", "uid": "uid-1", "generation": 2},
        "appliedToGroups": ["atg"],
        "priority": 10,
        "tierPriority": 250,
        "sourceRef": {"type": "AntreaNetworkPolicy", "namespace": "vm-ns", "name": "annp1", "uid": "uid-1"},
        "rules": rules,
    })
}

fn in_rule(extra: Value) -> Value {
    let mut r =
        json!({"direction": "In", "from": {"addressGroups": ["ag"]}, "to": {}, "enableLogging": false});
    if let (Value::Object(r), Value::Object(extra)) = (&mut r, extra) {
        r.extend(extra);
    }
    r
}

/// The problems of a policy whose second rule has `extra` merged in.
fn problems(extra: Value) -> Vec<String> {
    let err = policy(np_with_rules(json!([in_rule(json!({})), in_rule(extra)]))).unwrap_err();
    err.problems.iter().map(ToString::to_string).collect()
}

fn one_problem(extra: Value) -> String {
    let p = problems(extra.clone());
    assert_eq!(p.len(), 1, "{extra}: {p:?}");
    p[0].clone()
}

#[test]
fn annp_example_validates_into_its_view() {
    let ValidObject::NetworkPolicy(p) = decode(testdata::NP_ANNP1).validate().unwrap() else {
        panic!("kind");
    };
    assert_eq!(p.name, "5d5b6c7e-0f0a-4c43-9d61-2a1f9e3c4b10");
    assert_eq!(p.generation, 1);
    assert_eq!(p.priority, Some(9000.0));
    assert_eq!(p.tier_priority, Some(250));
    let src = p.source_ref.as_ref().unwrap();
    assert_eq!(src.policy_type, PolicyType::AntreaNetworkPolicy);
    assert!(src.policy_type.is_antrea_native());
    assert_eq!(src.to_string(), "AntreaNetworkPolicy vm-ns/annp1");
    assert!(!p.applied_to_per_rule());
    assert_eq!(
        p.rules,
        vec![Rule {
            name: "ingress-reject-3f2a1b9".into(),
            direction: Direction::In,
            peer: Peer {
                address_groups: vec!["cacccce8-595f-5250-b361-a0ca752b2c72".into()],
                ip_blocks: vec![CidrBlock {
                    cidr: net("172.16.100.5/32"),
                    except: vec![]
                }],
                ..Peer::default()
            },
            services: vec![ServiceMatch {
                protocol: Some(Protocol::Tcp),
                port: Some(PortMatch::Range(PortRange { start: 22, end: 22 })),
                src_ports: None,
                icmp_type: None,
                icmp_code: None,
                igmp_type: None,
                group_address: None,
            }],
            priority: 0,
            action: Action::Reject,
            enable_logging: false,
            log_label: String::new(),
            applied_to_groups: vec![],
            l7_protocols: vec![],
        }]
    );
    assert_eq!(
        p.rule_applied_to_groups(&p.rules[0]),
        ["9a47b91d-76f1-5b82-a456-3816a3514090".to_string()]
    );
}

#[test]
fn acnp_example_validates_into_its_view() {
    let ValidObject::NetworkPolicy(p) = decode(testdata::NP_ACNP).validate().unwrap() else {
        panic!("kind");
    };
    assert!(p.applied_to_per_rule());
    assert_eq!(p.applied_to_group_names(), BTreeSet::from(["cg-db"]));
    assert!(p.address_group_names().is_empty());
    let [allow_web, allow_fqdn, drop] = &p.rules[..] else {
        panic!("3 rules");
    };
    assert_eq!(
        allow_web.peer.ip_blocks,
        [CidrBlock {
            cidr: net("10.0.0.0/8"),
            except: vec![net("10.10.0.0/16")]
        }]
    );
    assert_eq!(
        allow_web.services[0].port,
        Some(PortMatch::Range(PortRange {
            start: 8000,
            end: 9000
        }))
    );
    assert_eq!(allow_web.services[1].protocol, Some(Protocol::Icmp));
    assert_eq!(
        (allow_web.services[1].icmp_type, allow_web.services[1].icmp_code),
        (Some(8), Some(0))
    );
    assert!(allow_web.enable_logging);
    assert_eq!(allow_web.log_label, "vm-ingress");
    assert_eq!(p.rule_applied_to_groups(allow_web), ["cg-db".to_string()]);
    assert_eq!(allow_fqdn.direction, Direction::Out);
    assert_eq!(allow_fqdn.peer.fqdns, ["*.example.com"]);
    assert_eq!(
        allow_fqdn.l7_protocols,
        [L7Protocol::Tls {
            sni: "api.example.com".into()
        }]
    );
    assert_eq!(drop.action, Action::Drop);
    assert_eq!(drop.priority, 1);
    assert!(drop.services.is_empty());
    assert_eq!(
        drop.peer.ip_blocks.iter().map(|b| b.cidr).collect::<Vec<_>>(),
        [net("0.0.0.0/0"), net("::/0")]
    );
}

#[test]
fn group_examples_validate_into_member_sets() {
    let ValidObject::AddressGroup(g) = decode(testdata::AG).validate().unwrap() else {
        panic!("kind");
    };
    let members: Vec<_> = g.members.values().cloned().collect();
    assert_eq!(
        members,
        [
            Member {
                entity: MemberRef::ExternalEntity {
                    namespace: "vm-ns".into(),
                    name: "vm2-e8be5".into()
                },
                ips: vec![ip("172.16.100.4")],
                ports: vec![],
            },
            Member {
                entity: MemberRef::ExternalEntity {
                    namespace: "vm-ns".into(),
                    name: "vm3".into()
                },
                ips: vec![ip("172.16.100.6")],
                ports: vec![],
            },
        ]
    );
    let ValidObject::AppliedToGroup(g) = decode(testdata::ATG).validate().unwrap() else {
        panic!("kind");
    };
    assert_eq!(g.members.len(), 1);
    let ValidObject::AddressGroupPatch(p) = decode(testdata::AG_PATCH).validate().unwrap() else {
        panic!("kind");
    };
    assert_eq!(p.name, "cacccce8-595f-5250-b361-a0ca752b2c72");
    assert_eq!(
        p.added[0].entity,
        MemberRef::Pod {
            namespace: "vm-ns".into(),
            name: "front-7d9f".into()
        }
    );
    assert_eq!(p.added[0].ips, [ip("10.10.1.5")]);
    assert_eq!(p.removed[0].ips, [ip("172.16.100.6")]);
    let ValidObject::AppliedToGroupPatch(p) = decode(testdata::ATG_PATCH).validate().unwrap() else {
        panic!("kind");
    };
    assert_eq!(p.added.len() + p.removed.len(), 2);
}

#[test]
fn error_names_object_source_and_field_path() {
    let err = policy(np_with_rules(json!([
        in_rule(json!({})),
        in_rule(json!({"services": [{"protocol": "TCP", "port": 90, "endPort": 80}]})),
    ])))
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "NetworkPolicy uid-1 (AntreaNetworkPolicy vm-ns/annp1): rules[1].services[0].endPort: 80 is less than port 90"
    );
    assert_eq!(err.object.kind, Kind::NetworkPolicy);
    assert_eq!(err.problems[0].path, "rules[1].services[0].endPort");
}

#[test]
fn every_problem_is_reported() {
    let p = problems(json!({"direction": "Up", "action": "Deny", "services": [{"protocol": "XTP"}]}));
    assert_eq!(p.len(), 3, "{p:?}");
    assert!(p[0].starts_with("rules[1].direction: \"Up\""), "{p:?}");
    assert!(p[1].starts_with("rules[1].action: \"Deny\""), "{p:?}");
    assert!(
        p[2].starts_with("rules[1].services[0].protocol: \"XTP\""),
        "{p:?}"
    );
}

#[test]
fn bad_cidrs_and_ip_bytes() {
    let block = |b: Value| json!({"from": {"ipBlocks": [b]}});
    assert_eq!(
        one_problem(block(json!({"cidr": {"ip": "AQID", "prefixLength": 8}}))),
        "rules[1].from.ipBlocks[0].cidr: 3 bytes is not an IP address (want 4 or 16)"
    );
    assert_eq!(
        one_problem(block(
            json!({"cidr": {"ip": "AAAAAAAAAAAAAP//CgAAAA==", "prefixLength": 33}})
        )),
        "rules[1].from.ipBlocks[0].cidr: prefix length 33 is out of range for IPv4 (0-32)"
    );
    assert_eq!(
        one_problem(block(json!({"cidr": {"prefixLength": 8}}))),
        "rules[1].from.ipBlocks[0].cidr: missing IP address"
    );
    assert_eq!(
        one_problem(block(
            json!({"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16", "11.0.0.0/16"]})
        )),
        "rules[1].from.ipBlocks[0].except[1]: 11.0.0.0/16 is not inside cidr 10.0.0.0/8"
    );
    assert_eq!(
        one_problem(block(json!({"cidr": "10.0.0.0/8", "except": ["fd00::/64"]}))),
        "rules[1].from.ipBlocks[0].except[0]: fd00::/64 is not inside cidr 10.0.0.0/8"
    );
    // A 16-byte non-mapped address is IPv6 and may use 128 bits; host bits are cleared.
    let ok = policy(np_with_rules(json!([in_rule(block(
        json!({"cidr": "fd00::5/120"})
    ))])))
    .unwrap();
    assert_eq!(ok.rules[0].peer.ip_blocks[0].cidr, net("fd00::/120"));
}

#[test]
fn bad_ports() {
    let svc = |s: Value| json!({"services": [s]});
    assert_eq!(
        one_problem(svc(json!({"protocol": "TCP", "port": 0}))),
        "rules[1].services[0].port: 0 is out of range (1-65535)"
    );
    assert_eq!(
        one_problem(svc(json!({"protocol": "UDP", "port": 70000}))),
        "rules[1].services[0].port: 70000 is out of range (1-65535)"
    );
    assert_eq!(
        one_problem(svc(json!({"port": 80, "endPort": 65536}))),
        "rules[1].services[0].endPort: 65536 is out of range (1-65535)"
    );
    assert_eq!(
        one_problem(svc(json!({"endPort": 80}))),
        "rules[1].services[0].endPort: set without port"
    );
    assert_eq!(
        one_problem(svc(json!({"port": "http", "endPort": 90}))),
        "rules[1].services[0].endPort: only allowed with a numbered port"
    );
    assert_eq!(
        one_problem(svc(json!({"port": "Not_A_Name"}))),
        "rules[1].services[0].port: \"Not_A_Name\" is not a valid port name"
    );
    assert_eq!(
        one_problem(svc(json!({"srcPort": 1000, "srcEndPort": 999}))),
        "rules[1].services[0].srcEndPort: 999 is less than srcPort 1000"
    );
    assert_eq!(
        one_problem(svc(json!({"srcEndPort": 999}))),
        "rules[1].services[0].srcEndPort: set without srcPort"
    );
    assert_eq!(
        one_problem(svc(json!({"protocol": "ICMP", "port": 22}))),
        "rules[1].services[0].port: not allowed with protocol ICMP (only for TCP, UDP and SCTP)"
    );
    assert_eq!(
        one_problem(svc(json!({"protocol": "TCP", "icmpType": 8}))),
        "rules[1].services[0].icmpType: not allowed with protocol TCP (only for ICMP)"
    );
    assert_eq!(
        one_problem(svc(json!({"protocol": "ICMP", "icmpType": 8, "icmpCode": 256}))),
        "rules[1].services[0].icmpCode: 256 is out of range (0-255)"
    );
    assert_eq!(
        one_problem(svc(json!({"protocol": "UDP", "igmpType": 22}))),
        "rules[1].services[0].igmpType: not allowed with protocol UDP (only for IGMP)"
    );
    assert_eq!(
        one_problem(svc(json!({"protocol": "IGMP", "groupAddress": "10.0.0.1"}))),
        "rules[1].services[0].groupAddress: 10.0.0.1 is not a multicast address"
    );
    // Valid: named port, range, source range, IGMP.
    let ok = policy(np_with_rules(json!([in_rule(json!({"services": [
        {"port": "http"},
        {"protocol": "SCTP", "port": 1, "endPort": 65535, "srcPort": 1024, "srcEndPort": 2048},
        {"protocol": "IGMP", "igmpType": 22, "groupAddress": "224.0.0.251"},
        {"port": 22},
    ]}))])))
    .unwrap();
    let s = &ok.rules[0].services;
    // A named port without a protocol takes the member's; a numbered one is TCP.
    assert_eq!(s[0].protocol, None);
    assert_eq!(s[3].protocol, Some(Protocol::Tcp));
    assert_eq!(s[0].port, Some(PortMatch::Named("http".into())));
    assert_eq!(
        s[1].port,
        Some(PortMatch::Range(PortRange { start: 1, end: 65535 }))
    );
    assert_eq!(
        s[1].src_ports,
        Some(PortRange {
            start: 1024,
            end: 2048
        })
    );
    assert_eq!(
        (s[2].igmp_type, s[2].group_address),
        (Some(22), Some(ip("224.0.0.251")))
    );
}

#[test]
fn bad_protocol_action_direction() {
    assert_eq!(
        one_problem(json!({"services": [{"protocol": "tcp"}]})),
        "rules[1].services[0].protocol: \"tcp\" is not one of TCP, UDP, SCTP, ICMP, IGMP"
    );
    assert_eq!(
        one_problem(json!({"action": "Deny"})),
        "rules[1].action: \"Deny\" is not one of Allow, Drop, Reject, Pass"
    );
    assert_eq!(
        one_problem(json!({"direction": "Both"})),
        "rules[1].direction: \"Both\" is not In or Out"
    );
    assert_eq!(
        one_problem(json!({"direction": ""})),
        "rules[1].direction: missing (want In or Out)"
    );
    // Absent action is Allow; Pass is known.
    let ok = policy(np_with_rules(json!([
        in_rule(json!({})),
        in_rule(json!({"action": "Pass"}))
    ])))
    .unwrap();
    assert_eq!(
        (ok.rules[0].action, ok.rules[1].action),
        (Action::Allow, Action::Pass)
    );
}

#[test]
fn rule_shape_problems() {
    assert_eq!(
        one_problem(json!({"to": {"ipBlocks": [{"cidr": "10.0.0.0/8"}]}})),
        "rules[1].to: must be empty for direction In (its peer is from)"
    );
    assert_eq!(
        one_problem(json!({"from": {"fqdns": ["a.example.com"]}})),
        "rules[1].from.fqdns: only allowed in egress (Out) rules"
    );
    assert_eq!(
        one_problem(json!({"direction": "Out", "from": {}, "to": {"fqdns": ["a b.com"]}})),
        "rules[1].to.fqdns[0]: \"a b.com\" is not a DNS name: only letters, digits, '-', '_', '.' \
         and '*' are allowed"
    );
    assert_eq!(
        one_problem(json!({"direction": "Out", "from": {}, "to": {"fqdns": [""]}})),
        "rules[1].to.fqdns[0]: empty name"
    );
    let err = policy(np_with_rules(json!([
        in_rule(json!({})),
        in_rule(json!({"direction": "Out", "from": {}, "to": {"fqdns": ["ok.example.com", "a b"]}}))
    ])))
    .unwrap_err();
    assert!(
        err.to_string().starts_with("NetworkPolicy ") && err.to_string().contains("rules[1].to.fqdns[1]"),
        "the error names the policy and the field: {err}"
    );
    assert_eq!(
        one_problem(json!({"priority": -1})),
        "rules[1].priority: -1 is negative"
    );
    assert_eq!(
        one_problem(json!({"appliedToGroups": ["other"]})),
        "rules[1].appliedToGroups: set together with the policy's appliedToGroups (use one or the other)"
    );
    assert_eq!(
        one_problem(json!({"from": {"addressGroups": [""]}})),
        "rules[1].from.addressGroups[0]: empty group name"
    );
    assert_eq!(
        one_problem(json!({"l7Protocols": [{"http": {"method": "FETCH"}}]})),
        "rules[1].l7Protocols[0].http.method: \"FETCH\" is not one of GET, POST, PUT, HEAD, DELETE, TRACE, OPTIONS, CONNECT, PATCH"
    );
    assert_eq!(
        one_problem(json!({"l7Protocols": [{}]})),
        "rules[1].l7Protocols[0]: neither http nor tls is set (want exactly one)"
    );
    let err = policy(json!({"metadata": {}, "priority": 1})).unwrap_err();
    assert_eq!(err.to_string(), "NetworkPolicy <unnamed>: metadata.name: missing");
    // Out rule: `to` is the peer and `from` must be empty.
    let ok = policy(np_with_rules(
        json!([{"direction": "Out", "from": {}, "to": {"addressGroups": ["ag"]},
                                           "enableLogging": true}]),
    ))
    .unwrap();
    assert_eq!(ok.rules[0].peer.address_groups, ["ag"]);
    assert_eq!(ok.uid, "uid-1");
    let no_uid = policy(json!({"metadata": {"name": "local"}})).unwrap();
    assert_eq!(no_uid.uid, "local");
    assert!(no_uid.source_ref.is_none());
}

#[test]
fn bad_group_members() {
    let object = |members: Value| {
        ControlplaneObject::from_value(json!({"kind": "AddressGroup", "metadata": {"name": "g"},
            "groupMembers": members}))
        .unwrap()
    };
    let group = |members: Value| {
        serde_json::from_value::<AddressGroup>(json!({"metadata": {"name": "g"}, "groupMembers": members}))
            .unwrap()
            .validate()
    };
    // One bad member never hides the group: it is dropped, the others stay, and one note
    // names it.
    let good = json!({"externalEntity": {"name": "vm2", "namespace": "ns"}, "ips": ["CgAAAg=="]});
    for (bad, note) in [
        (
            json!({"ips": ["AAAAAAAAAAAAAP//CgAAAQ=="]}),
            "AddressGroup g: groupMembers[0] (a member without a reference) dropped: groupMembers[0]: \
             0 of pod, externalEntity, node, service are set (want exactly one)",
        ),
        (
            json!({"pod": {"name": "a", "namespace": "n"}, "node": {"name": "x"}}),
            "AddressGroup g: groupMembers[0] (pod n/a + node x) dropped: groupMembers[0]: \
             2 of pod, externalEntity, node, service are set (want exactly one)",
        ),
        (
            json!({"externalEntity": {"name": "vm1", "namespace": "ns"}, "ips": ["AQIDBAU="]}),
            "AddressGroup g: groupMembers[0] (externalEntity ns/vm1) dropped: groupMembers[0].ips[0]: \
             5 bytes is not an IP address (want 4 or 16)",
        ),
        (
            json!({"externalEntity": {"name": "vm1"}}),
            "AddressGroup g: groupMembers[0] (externalEntity /vm1) dropped: \
             groupMembers[0].externalEntity.namespace: missing",
        ),
    ] {
        let list = json!([bad, good]);
        let g = group(list.clone()).unwrap();
        assert_eq!(g.members.len(), 1, "{bad}");
        assert_eq!(dropped_members(&object(list)), [note.to_string()]);
    }
    // Ports as the controller copies them from an ExternalEntity: an unnamed port is skipped
    // without a word (nothing can name it), a named one that cannot be enforced is left out
    // with a note, and the member keeps its addresses and its good ports.
    let list = json!([{"externalEntity": {"name": "vm1", "namespace": "ns"}, "ips": ["CgAAAQ=="],
                "ports": [{"port": 22}, {"name": "", "port": 0, "protocol": "TCP"},
                          {"name": "http", "port": 80, "protocol": "ICMP"}, {"name": "x", "port": 0},
                          {"name": "https", "port": 443, "protocol": "TCP"}]}]);
    let g = group(list.clone()).unwrap();
    let m = g.members.values().next().unwrap();
    assert_eq!(m.ips.len(), 1);
    assert_eq!(
        m.ports,
        [MemberPort {
            name: "https".into(),
            port: 443,
            protocol: Protocol::Tcp
        }]
    );
    assert_eq!(
        dropped_members(&object(list)),
        [
            "AddressGroup g: groupMembers[0] (externalEntity ns/vm1): named port \"http\" left out \
             (groupMembers[0].ports[2].protocol: \"ICMP\" is not one of TCP, UDP, SCTP)",
            "AddressGroup g: groupMembers[0] (externalEntity ns/vm1): named port \"x\" left out \
             (groupMembers[0].ports[3].port: 0 is out of range (1-65535))"
        ]
    );
    // Duplicates collapse; a node member has no namespace; 4-byte IPv4 is accepted.
    let g = group(json!([
        {"node": {"name": "n1"}, "ips": ["CgAAAQ=="]},
        {"node": {"name": "n1"}, "ips": ["AAAAAAAAAAAAAP//CgAAAQ=="]},
        {"pod": {"name": "p", "namespace": "n"}, "ports": [{"name": "http", "port": 8080}]},
    ]))
    .unwrap();
    assert_eq!(g.members.len(), 2);
    let pod = g
        .members
        .values()
        .find(|m| matches!(m.entity, MemberRef::Pod { .. }))
        .unwrap();
    assert_eq!(
        pod.ports,
        [MemberPort {
            name: "http".into(),
            port: 8080,
            protocol: Protocol::Tcp
        }]
    );
    let wire = json!({"kind": "AppliedToGroupPatch", "metadata": {"name": "g"},
        "removedGroupMembers": [{"service": {"name": "s"}}]});
    let patch = serde_json::from_value::<GroupPatch>(wire.clone())
        .unwrap()
        .validate(Kind::AppliedToGroupPatch)
        .unwrap();
    assert!(patch.removed.is_empty());
    assert_eq!(
        dropped_members(&ControlplaneObject::from_value(wire).unwrap()),
        [
            "AppliedToGroupPatch g: removedGroupMembers[0] (service /s) dropped: \
          removedGroupMembers[0].service.namespace: missing"
        ]
    );
}

#[test]
fn port_names_follow_iana_rules() {
    for good in ["http", "h2c", "web-8080", "a", "abcdefghijklmno"] {
        assert!(is_valid_port_name(good), "{good}");
    }
    for bad in [
        "",
        "8080",
        "HTTP",
        "-http",
        "http-",
        "we--b",
        "abcdefghijklmnop",
        "a_b",
    ] {
        assert!(!is_valid_port_name(bad), "{bad}");
    }
}
