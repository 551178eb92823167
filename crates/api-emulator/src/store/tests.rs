//! Tests of `emulator::store` (kept beside it, in their own file so the module stays readable).

use super::*;

fn en(name: &str, iface: &str, ip: &str, labels: Value) -> Value {
    json!({"metadata": {"name": name, "namespace": "vm-ns", "labels": labels},
           "spec": {"interfaces": [{"name": iface, "ips": [ip]}]}})
}

fn cp(v: Value) -> CpObject {
    CpObject::from_json(v).unwrap()
}

fn events(items: &[DispatchItem], resource: CpResource, node: &str) -> Vec<(&'static str, Value)> {
    items
        .iter()
        .filter_map(|i| match i {
            DispatchItem::Cp(e) if e.resource == resource => e.event_for(Some(node)),
            _ => None,
        })
        .map(|(t, raw)| (t, serde_json::from_str(&raw).unwrap()))
        .collect()
}

#[test]
fn external_node_creates_entity_and_agent_info() {
    let mut s = State::new(100);
    s.create_external_node(
        &en("vm2", "ens192", "172.16.100.4", json!({"role": "front"})),
        None,
    )
    .unwrap();
    let ee = &s.list_external_entities()[0];
    assert_eq!(ee["metadata"]["name"], "vm2-e8be5");
    assert_eq!(ee["metadata"]["labels"], json!({"role": "front"}));
    assert_eq!(ee["metadata"]["ownerReferences"][0]["kind"], "ExternalNode");
    assert_eq!(
        ee["spec"],
        json!({"endpoints": [{"ip": "172.16.100.4", "name": "ens192"}], "externalNode": "vm2"})
    );
    assert_eq!(s.entity_host("vm-ns", "vm2-e8be5").as_deref(), Some("vm-ns/vm2"));
    let aai = s.get_agent_info("vm2").unwrap();
    assert_eq!(aai["podRef"], json!({}));
    assert!(aai["metadata"]["resourceVersion"].is_string());
    // Renaming the interface renames the entity.
    // (An API update must carry the current resourceVersion.)
    let mut renamed = en("vm2", "eth0", "172.16.100.4", json!({}));
    let current = s.get_external_node("vm-ns", "vm2").unwrap();
    renamed["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
    s.update_external_node(&renamed, None, true).unwrap();
    let names: Vec<Value> = s
        .list_external_entities()
        .iter()
        .map(|e| e["metadata"]["name"].clone())
        .collect();
    assert_eq!(names, vec![json!("vm2-3e616")]);
    s.delete_external_node("vm-ns", "vm2").unwrap();
    assert!(s.list_external_entities().is_empty());
    assert_eq!(s.get_agent_info("vm2").unwrap_err().code, 404);
}

#[test]
fn schema_and_concurrency_errors() {
    let mut s = State::new(100);
    let bad = json!({"metadata": {"name": "x"}, "spec": {"interfaces": [{"ips": ["nope"]}]}});
    assert_eq!(s.create_external_node(&bad, None).unwrap_err().code, 422);
    let (obj, _) = s
        .create_external_node(&en("vm1", "", "10.0.0.1", json!({})), None)
        .unwrap();
    assert_eq!(
        s.create_external_node(&obj, None).unwrap_err().reason,
        "AlreadyExists"
    );
    let mut aai = s.get_agent_info("vm1").unwrap();
    aai["version"] = json!("v1");
    let updated = s.update_agent_info("vm1", &aai).unwrap();
    assert_eq!(s.update_agent_info("vm1", &aai).unwrap_err().code, 409);
    assert_eq!(updated["metadata"]["generation"], 2);
    assert_eq!(
        s.update_agent_info("vm9", &json!({"metadata": {"name": "vm9"}}))
            .unwrap_err()
            .code,
        404
    );
}

#[test]
fn spans_and_per_node_events() {
    let mut s = State::new(100);
    s.create_external_node(&en("vm1", "", "10.0.0.1", json!({})), None)
        .unwrap();
    s.create_external_node(&en("vm2", "", "10.0.0.2", json!({})), None)
        .unwrap();
    let atg = |members: Value| {
        cp(json!({"kind": "AppliedToGroup", "metadata": {"name": "atg"}, "groupMembers": members}))
    };
    let vm1 = json!({"externalEntity": {"name": "vm1", "namespace": "vm-ns"}});
    let vm2 = json!({"externalEntity": {"name": "vm2", "namespace": "vm-ns"}});
    let np = cp(
        json!({"kind": "NetworkPolicy", "metadata": {"name": "p", "generation": 1},
        "appliedToGroups": ["atg"], "sourceRef": {"type": "AntreaNetworkPolicy", "name": "a", "namespace": "vm-ns", "uid": "p"},
        "rules": [{"direction": "In", "from": {"addressGroups": ["ag"]}, "to": {}, "enableLogging": false}]}),
    );
    let ag = cp(json!({"kind": "AddressGroup", "metadata": {"name": "ag"},
        "groupMembers": [{"externalEntity": {"name": "vm2", "namespace": "vm-ns"}, "ips": ["10.0.0.2"]}]}));
    let items = s.upsert_controlplane(vec![atg(json!([vm1.clone()])), np, ag]);
    let atg_ev = events(&items, CpResource::AppliedToGroups, "vm-ns/vm1");
    assert_eq!(atg_ev[0].0, "ADDED");
    assert_eq!(atg_ev[0].1["groupMembers"], json!([vm1]));
    assert_eq!(
        events(&items, CpResource::AddressGroups, "vm-ns/vm1")[0].1["groupMembers"][0]["ips"][0],
        "AAAAAAAAAAAAAP//CgAAAg=="
    );
    assert!(events(&items, CpResource::NetworkPolicies, "vm-ns/vm2").is_empty());
    // vm2 joins: vm1 sees nothing for the ATG, vm2 gets ADDED for all three.
    let items = s.upsert_controlplane(vec![atg(json!([vm1.clone(), vm2.clone()]))]);
    assert!(events(&items, CpResource::AppliedToGroups, "vm-ns/vm1").is_empty());
    let ev2 = events(&items, CpResource::AppliedToGroups, "vm-ns/vm2");
    assert_eq!((ev2[0].0, &ev2[0].1["groupMembers"]), ("ADDED", &json!([vm2])));
    assert_eq!(
        events(&items, CpResource::NetworkPolicies, "vm-ns/vm1")[0].0,
        "MODIFIED"
    );
    assert_eq!(
        events(&items, CpResource::AddressGroups, "vm-ns/vm2")[0].0,
        "ADDED"
    );
    assert!(
        events(&items, CpResource::AddressGroups, "vm-ns/vm1").is_empty(),
        "span-only change suppressed"
    );
    // vm1 leaves: DELETED metadata-only for vm1.
    let items = s.upsert_controlplane(vec![atg(json!([vm2]))]);
    let np_del = events(&items, CpResource::NetworkPolicies, "vm-ns/vm1");
    assert_eq!(np_del[0].0, "DELETED");
    assert_eq!(
        np_del[0].1,
        json!({"kind": "NetworkPolicy", "apiVersion": CP_API_VERSION,
               "metadata": {"name": "p", "uid": "p", "generation": 1},
               "sourceRef": {"type": "AntreaNetworkPolicy", "namespace": "vm-ns", "name": "a", "uid": "p"}})
    );
    assert_eq!(
        events(&items, CpResource::AppliedToGroups, "vm-ns/vm1")[0].1,
        json!({"kind": "AppliedToGroup", "apiVersion": CP_API_VERSION,
               "metadata": {"name": "atg", "uid": "atg"}})
    );
    // AddressGroup patch is global.
    let items = s.upsert_controlplane(vec![cp(
        json!({"kind": "AddressGroup", "metadata": {"name": "ag"},
        "groupMembers": [{"pod": {"name": "p1", "namespace": "x"}, "ips": ["10.1.1.5"]}]}),
    )]);
    let patch = &events(&items, CpResource::AddressGroups, "vm-ns/vm2")[0];
    assert_eq!(patch.0, "MODIFIED");
    assert_eq!(patch.1["kind"], "AddressGroupPatch");
    assert_eq!(patch.1["addedGroupMembers"][0]["pod"]["name"], "p1");
    assert_eq!(patch.1["removedGroupMembers"][0]["externalEntity"]["name"], "vm2");
}

#[test]
fn kube_history_resume_and_expiry() {
    let mut s = State::new(2);
    for i in 0..3 {
        s.create_external_node(&en(&format!("vm{i}"), "", "10.0.0.1", json!({})), None)
            .unwrap();
    }
    let rv = s.kube_rv();
    assert!(s.en_events_since(rv, "vm-ns", None).unwrap().is_empty());
    assert_eq!(s.en_events_since(0, "vm-ns", None).unwrap_err().code, 410);
    s.delete_external_node("vm-ns", "vm2").unwrap();
    let evs = s.en_events_since(rv, "vm-ns", Some("vm2")).unwrap();
    assert_eq!(evs.len(), 1);
    assert_eq!(evs[0].event_type, "DELETED");
}
