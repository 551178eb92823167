//! Tests of the kube-apiserver + antrea-controller emulator itself, through HTTPS clients built
//! from the kubeconfigs it writes (kube-rs, TLS verified against the emulator's CA).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

mod support;

use std::time::Duration;

use serde_json::{json, Value};

use support::emulator::*;

const T: Duration = Duration::from_secs(10);
const CP: &str = "/apis/controlplane.antrea.io/v1beta2";

#[tokio::test]
async fn tls_is_verified_and_tokens_and_rbac_are_enforced() {
    let env = EmulatorEnv::start().await;
    let agent = env.agent_client().await;
    let controller = env.controller_client().await;

    // TLS verified with the written CA: the request reaches the server (404: no ExternalNode yet).
    let (code, status) = send_json(&agent, "GET", &external_node_path(VM_NS, "vm1"), None).await;
    assert_eq!(code, 404, "{status}");
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "NotFound");
    assert_eq!(status["message"], "externalnodes.crd.antrea.io \"vm1\" not found");

    // A kubeconfig whose CA did not sign the server certificate fails the handshake.
    let other = Emulator::start(EmulatorOptions::default()).await.unwrap();
    let bad_dir = tempfile::tempdir().unwrap();
    let bad_path = bad_dir.path().join("bad.kubeconfig");
    let yaml = other
        .kubeconfig_yaml(env.emu.agent_token(), "x")
        .replace(&other.url(), &env.emu.url());
    std::fs::write(&bad_path, yaml).unwrap();
    let bad = client_from_kubeconfig(&bad_path).await;
    let req = http::Request::get(external_node_path(VM_NS, "vm1"))
        .body(Vec::new())
        .unwrap();
    let err = bad.request_text(req).await.expect_err("untrusted CA must fail");
    assert!(
        !matches!(err, kube::Error::Api(_)),
        "TLS error expected, got {err:?}"
    );

    // Unknown token: 401.
    let stranger_path = bad_dir.path().join("stranger.kubeconfig");
    std::fs::write(&stranger_path, env.emu.kubeconfig_yaml("not-a-token", "x")).unwrap();
    let stranger = client_from_kubeconfig(&stranger_path).await;
    let (code, status) = send_json(&stranger, "GET", &external_node_path(VM_NS, "vm1"), None).await;
    assert_eq!((code, status["reason"].as_str()), (401, Some("Unauthorized")));

    // RBAC: the agent may not create AntreaAgentInfos, delete ExternalNodes, read other
    // namespaces or use the control API.
    let (code, status) = send_json(
        &agent,
        "POST",
        "/apis/crd.antrea.io/v1beta1/antreaagentinfos",
        Some(&json!({"metadata": {"name": "vm1"}})),
    )
    .await;
    assert_eq!(code, 403);
    assert_eq!(
        status["message"],
        "antreaagentinfos.crd.antrea.io is forbidden: User \"system:serviceaccount:vm-ns:vm-agent\" cannot create resource \"antreaagentinfos\" in API group \"crd.antrea.io\" at the cluster scope"
    );
    let (code, status) = send_json(&agent, "DELETE", &external_node_path(VM_NS, "vm1"), None).await;
    assert_eq!(code, 403);
    assert!(status["message"].as_str().unwrap().contains("cannot delete resource \"externalnodes\" in API group \"crd.antrea.io\" in the namespace \"vm-ns\""), "{status}");
    assert_eq!(
        send_json(&agent, "GET", &external_node_path("default", "vm1"), None)
            .await
            .0,
        403
    );
    assert_eq!(send_json(&agent, "GET", "/emulator/v1/calls", None).await.0, 403);
    assert_eq!(
        send_json(
            &controller,
            "POST",
            &format!("{CP}/networkpolicies"),
            Some(&json!({}))
        )
        .await
        .0,
        403
    );

    // Every call was recorded with identity and status.
    let calls = env.emu.calls();
    let agent_user = env.emu.agent_user();
    assert!(calls.iter().any(|c| c.status == 401 && c.identity.is_none()));
    assert!(calls.iter().any(|c| c.method == "DELETE"
        && c.status == 403
        && c.identity.as_deref() == Some(agent_user.as_str())));
}

#[tokio::test]
async fn external_node_get_list_watch_and_controller_side_effects() {
    let env = EmulatorEnv::start_with(EmulatorOptions {
        kube_bookmark_interval: Duration::from_millis(300),
        ..EmulatorOptions::default()
    })
    .await;
    let agent = env.agent_client().await;
    let admin = env.admin_client().await;
    let collection = format!("/apis/crd.antrea.io/v1alpha1/namespaces/{VM_NS}/externalnodes");

    // 404 before the ExternalNode and its AntreaAgentInfo exist.
    assert_eq!(
        send_json(&agent, "GET", &external_node_path(VM_NS, "vm1"), None)
            .await
            .0,
        404
    );
    assert_eq!(
        send_json(&agent, "GET", &agent_info_path("vm1"), None).await.0,
        404
    );

    let en = external_node(VM_NS, "vm1", "eth0", &["172.16.100.3"], &[("role", "db")]);
    let (code, created) = send_json(&admin, "POST", &collection, Some(&en)).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(send_json(&admin, "POST", &collection, Some(&en)).await.0, 409);

    let (code, got) = send_json(&agent, "GET", &external_node_path(VM_NS, "vm1"), None).await;
    assert_eq!(code, 200);
    assert_eq!(got["spec"], en["spec"]);
    assert!(got["metadata"]["uid"].is_string() && got["metadata"]["resourceVersion"].is_string());

    // Controller side: ExternalEntity named per §4.2, empty AntreaAgentInfo.
    let ees = env.emu.external_entities();
    assert_eq!(ees.len(), 1);
    assert_eq!(ees[0]["metadata"]["name"], "vm1-3e616");
    assert_eq!(ees[0]["spec"]["externalNode"], "vm1");
    assert_eq!(
        ees[0]["metadata"]["ownerReferences"][0]["uid"],
        got["metadata"]["uid"]
    );
    let (code, aai) = send_json(&agent, "GET", &agent_info_path("vm1"), None).await;
    assert_eq!(code, 200);
    assert_eq!(aai["kind"], "AntreaAgentInfo");
    assert_eq!(aai["nodeRef"], json!({}));

    // LIST with the informer's field selector, then WATCH from its resourceVersion.
    let sel = "fieldSelector=metadata.name%3Dvm1";
    let (code, list) = send_json(
        &agent,
        "GET",
        &format!("{collection}?{sel}&resourceVersion=0"),
        None,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(list["kind"], "ExternalNodeList");
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    let rv = list["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let (code, _) = send_json(
        &agent,
        "GET",
        &format!("{collection}?fieldSelector=spec.x%3Dy"),
        None,
    )
    .await;
    assert_eq!(code, 400);

    let mut watch = WatchStream::open(
        &agent,
        &format!(
            "{collection}?{sel}&watch=true&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds=60"
        ),
    )
    .await;
    // Another node's change is not seen; ours is.
    env.emu
        .create_external_node(external_node(VM_NS, "vm2", "", &["172.16.100.4"], &[]))
        .unwrap();
    let mut changed = en.clone();
    changed["spec"]["interfaces"][0]["ips"] = json!(["172.16.100.3", "172.16.100.9"]);
    changed["metadata"]["resourceVersion"] = got["metadata"]["resourceVersion"].clone();
    let (code, updated) = send_json(&admin, "PUT", &external_node_path(VM_NS, "vm1"), Some(&changed)).await;
    assert_eq!(code, 200, "{updated}");
    // A second PUT with the now-stale resourceVersion conflicts.
    assert_eq!(
        send_json(&admin, "PUT", &external_node_path(VM_NS, "vm1"), Some(&changed))
            .await
            .0,
        409
    );
    let ev = loop {
        let ev = watch.next().await;
        if ev["type"] != "BOOKMARK" {
            break ev;
        }
    };
    assert_eq!(ev["type"], "MODIFIED");
    assert_eq!(ev["object"]["spec"]["interfaces"][0]["ips"][1], "172.16.100.9");
    assert_eq!(
        ev["object"]["metadata"]["resourceVersion"],
        updated["metadata"]["resourceVersion"]
    );
    // Periodic BOOKMARK carries the last resourceVersion sent.
    let bm = watch.next().await;
    assert_eq!(bm["type"], "BOOKMARK");
    assert_eq!(bm["object"]["kind"], "ExternalNode");
    assert_eq!(
        bm["object"]["metadata"]["resourceVersion"],
        updated["metadata"]["resourceVersion"]
    );

    // Delete: DELETED event, ExternalEntity and AntreaAgentInfo gone.
    let (code, _) = send_json(&admin, "DELETE", &external_node_path(VM_NS, "vm1"), None).await;
    assert_eq!(code, 200);
    let ev = loop {
        let ev = watch.next().await;
        if ev["type"] != "BOOKMARK" {
            break ev;
        }
    };
    assert_eq!(ev["type"], "DELETED");
    assert_eq!(ev["object"]["metadata"]["name"], "vm1");
    assert!(env.emu.agent_info("vm1").is_none());
    assert!(env
        .emu
        .external_entities()
        .iter()
        .all(|e| e["metadata"]["name"] != "vm1-3e616"));

    // Resuming from the old resourceVersion replays what happened since.
    let mut replay = WatchStream::open(
        &agent,
        &format!("{collection}?{sel}&watch=true&resourceVersion={rv}"),
    )
    .await;
    let types: Vec<Value> = vec![
        replay.next().await["type"].clone(),
        replay.next().await["type"].clone(),
    ];
    assert_eq!(types, vec![json!("MODIFIED"), json!("DELETED")]);

    // Too old after compaction: 410 Gone as an ERROR event, then the stream ends.
    env.emu.compact_kube_history();
    let mut gone = WatchStream::open(
        &agent,
        &format!("{collection}?{sel}&watch=true&resourceVersion={rv}"),
    )
    .await;
    let ev = gone.next().await;
    assert_eq!(ev["type"], "ERROR");
    assert_eq!(ev["object"]["code"], 410);
    assert_eq!(ev["object"]["reason"], "Expired");
    assert_eq!(gone.ends_within(T).await, Some(0));

    // timeoutSeconds ends the stream.
    let mut short =
        WatchStream::open(&agent, &format!("{collection}?{sel}&watch=true&timeoutSeconds=1")).await;
    assert!(short.ends_within(T).await.is_some());
}

#[tokio::test]
async fn agent_info_put_uses_optimistic_concurrency() {
    let env = EmulatorEnv::start().await;
    let agent = env.agent_client().await;
    env.emu
        .create_external_node(external_node(VM_NS, "vm1", "", &["10.0.0.1"], &[]))
        .unwrap();
    let (_, mut aai) = send_json(&agent, "GET", &agent_info_path("vm1"), None).await;
    aai["version"] = json!("v2.8.0-dev");
    aai["nodeRef"] = json!({"kind": "Node", "name": "vm1"});
    let (code, stored) = send_json(&agent, "PUT", &agent_info_path("vm1"), Some(&aai)).await;
    assert_eq!(code, 200, "{stored}");
    assert_ne!(
        stored["metadata"]["resourceVersion"],
        aai["metadata"]["resourceVersion"]
    );
    assert_eq!(env.emu.agent_info("vm1").unwrap()["version"], "v2.8.0-dev");
    // Stale resourceVersion: 409 Conflict.
    let (code, status) = send_json(&agent, "PUT", &agent_info_path("vm1"), Some(&aai)).await;
    assert_eq!((code, status["reason"].as_str()), (409, Some("Conflict")));
    // Absent object: 404; name mismatch: 400.
    let other = json!({"metadata": {"name": "vm9"}});
    assert_eq!(
        send_json(&agent, "PUT", &agent_info_path("vm9"), Some(&other))
            .await
            .0,
        404
    );
    assert_eq!(
        send_json(&agent, "PUT", &agent_info_path("vm1"), Some(&other))
            .await
            .0,
        400
    );
}

/// vm1 (labels role=db) and vm2, one AppliedToGroup with both, an AddressGroup of front VMs and
/// a policy: the setup of antrea-apis.md §2.5.
fn policy_fixture(emu: &Emulator) {
    emu.create_external_node(external_node(
        VM_NS,
        "vm1",
        "",
        &["172.16.100.3"],
        &[("role", "db")],
    ))
    .unwrap();
    emu.create_external_node(external_node(
        VM_NS,
        "vm2",
        "ens192",
        &["172.16.100.4"],
        &[("role", "front")],
    ))
    .unwrap();
    emu.upsert_controlplane(json!([
        applied_to_group("atg-db", vec![ee_member(VM_NS, "vm1", &[])]),
        address_group("ag-front", vec![ee_member(VM_NS, "vm2-e8be5", &["172.16.100.4"])]),
        network_policy(
            "uid-1",
            1,
            &["atg-db"],
            vec![ingress_rule(&["ag-front"], 22, "Reject")]
        ),
    ]))
    .unwrap();
}

#[tokio::test]
async fn controlplane_watch_snapshot_bookmark_and_live_events() {
    let env = EmulatorEnv::start().await;
    policy_fixture(&env.emu);
    let controller = env.controller_client().await;
    let node = "vm-ns/vm1";

    let mut atg = WatchStream::open(&controller, &controlplane_watch_path("appliedtogroups", node)).await;
    let mut ag = WatchStream::open(&controller, &controlplane_watch_path("addressgroups", node)).await;
    let mut np = WatchStream::open(&controller, &controlplane_watch_path("networkpolicies", node)).await;
    // Byte-exact lines, keys in Go's order (antrea-apis.md §3.3).
    let mut raw = WatchStream::open(&controller, &controlplane_watch_path("appliedtogroups", node)).await;
    assert_eq!(
        raw.next_raw().await,
        r#"{"type":"ADDED","object":{"kind":"AppliedToGroup","apiVersion":"controlplane.antrea.io/v1beta2","metadata":{"name":"atg-db","uid":"atg-db"},"groupMembers":[{"externalEntity":{"name":"vm1","namespace":"vm-ns"}}]}}"#
    );
    assert_eq!(
        raw.next_raw().await,
        r#"{"type":"BOOKMARK","object":{"kind":"AppliedToGroup","apiVersion":"controlplane.antrea.io/v1beta2","metadata":{"resourceVersion":"1"}}}"#
    );
    drop(raw);
    let (atgs, bookmark) = atg.snapshot().await;
    assert_eq!(
        atgs,
        vec![
            json!({"kind": "AppliedToGroup", "apiVersion": "controlplane.antrea.io/v1beta2",
                     "metadata": {"name": "atg-db", "uid": "atg-db"},
                     "groupMembers": [{"externalEntity": {"name": "vm1", "namespace": "vm-ns"}}]})
        ]
    );
    assert_eq!(
        bookmark,
        json!({"kind": "AppliedToGroup", "apiVersion": "controlplane.antrea.io/v1beta2",
               "metadata": {"resourceVersion": "1"}})
    );
    let (ags, _) = ag.snapshot().await;
    assert_eq!(
        ags[0]["groupMembers"][0]["ips"],
        json!(["AAAAAAAAAAAAAP//rBBkBA=="])
    );
    let (nps, _) = np.snapshot().await;
    assert_eq!(nps.len(), 1);
    assert_eq!(
        nps[0]["rules"][0],
        json!({"direction": "In", "from": {"addressGroups": ["ag-front"]}, "to": {},
               "services": [{"protocol": "TCP", "port": 22}], "action": "Reject", "enableLogging": false})
    );
    wait_for("the raw watch to go away", T, || {
        env.emu.controlplane_watches(node).len() == 3
    })
    .await;

    // vm2 sees nothing: its entity is in no AppliedToGroup.
    let mut ag2 = WatchStream::open(
        &controller,
        &controlplane_watch_path("addressgroups", "vm-ns/vm2"),
    )
    .await;
    assert!(ag2.snapshot().await.0.is_empty());

    // AddressGroup membership change: a global patch.
    env.emu
        .upsert_controlplane(address_group(
            "ag-front",
            vec![ee_member(VM_NS, "vm3", &["172.16.100.6"])],
        ))
        .unwrap();
    let ev = ag.next().await;
    assert_eq!(
        ev,
        json!({"type": "MODIFIED", "object": {"kind": "AddressGroupPatch", "apiVersion": "controlplane.antrea.io/v1beta2",
            "metadata": {"name": "ag-front", "uid": "ag-front"},
            "addedGroupMembers": [{"externalEntity": {"name": "vm3", "namespace": "vm-ns"}, "ips": ["AAAAAAAAAAAAAP//rBBkBg=="]}],
            "removedGroupMembers": [{"externalEntity": {"name": "vm2-e8be5", "namespace": "vm-ns"}, "ips": ["AAAAAAAAAAAAAP//rBBkBA=="]}]}})
    );

    // vm2 joins the AppliedToGroup: vm1 gets nothing on the ATG stream but a MODIFIED policy
    // (span changed); vm2 gets ADDED with only its own member.
    let mut atg2 = WatchStream::open(
        &controller,
        &controlplane_watch_path("appliedtogroups", "vm-ns/vm2"),
    )
    .await;
    assert!(atg2.snapshot().await.0.is_empty());
    env.emu
        .upsert_controlplane(applied_to_group(
            "atg-db",
            vec![ee_member(VM_NS, "vm1", &[]), ee_member(VM_NS, "vm2-e8be5", &[])],
        ))
        .unwrap();
    let ev = atg2.next().await;
    assert_eq!(ev["type"], "ADDED");
    assert_eq!(
        ev["object"]["groupMembers"],
        json!([{"externalEntity": {"name": "vm2-e8be5", "namespace": "vm-ns"}}])
    );
    assert_eq!(np.next().await["type"], "MODIFIED");
    let ev = ag2.next().await;
    assert_eq!(ev["type"], "ADDED", "vm2 now needs the peer group: {ev}");

    // Policy update: MODIFIED with the full object.
    let mut updated = network_policy(
        "uid-1",
        2,
        &["atg-db"],
        vec![ingress_rule(&["ag-front"], 2222, "Drop")],
    );
    updated["rules"][0]["name"] = json!("ingress-drop");
    env.emu.upsert_controlplane(updated).unwrap();
    let ev = np.next().await;
    assert_eq!(ev["type"], "MODIFIED");
    assert_eq!(ev["object"]["metadata"]["generation"], 2);
    assert_eq!(ev["object"]["rules"][0]["services"][0]["port"], 2222);

    // vm1's entity is renamed: an AppliedToGroupPatch for vm1 only.
    env.emu
        .apply_external_node(external_node(
            VM_NS,
            "vm1",
            "eth0",
            &["172.16.100.3"],
            &[("role", "db")],
        ))
        .unwrap();
    env.emu
        .upsert_controlplane(applied_to_group(
            "atg-db",
            vec![
                ee_member(VM_NS, "vm1-3e616", &[]),
                ee_member(VM_NS, "vm2-e8be5", &[]),
            ],
        ))
        .unwrap();
    // The rename first took vm1 out of the span (entity vm1 vanished), then back in.
    let ev = atg.next().await;
    assert_eq!(ev["type"], "DELETED");
    assert_eq!(
        ev["object"],
        json!({"kind": "AppliedToGroup", "apiVersion": "controlplane.antrea.io/v1beta2",
               "metadata": {"name": "atg-db", "uid": "atg-db"}})
    );
    let ev = atg.next().await;
    assert_eq!(ev["type"], "ADDED");
    assert_eq!(
        ev["object"]["groupMembers"],
        json!([{"externalEntity": {"name": "vm1-3e616", "namespace": "vm-ns"}}])
    );
    // The policy and its peer group left vm1's span and came back with it.
    for stream in [&mut np, &mut ag] {
        assert_eq!(stream.next().await["type"], "DELETED");
        assert_eq!(stream.next().await["type"], "ADDED");
    }
    env.emu
        .upsert_controlplane(applied_to_group(
            "atg-db",
            vec![
                ee_member(VM_NS, "vm1-3e616", &[]),
                ee_member(VM_NS, "vm1", &[]),
                ee_member(VM_NS, "vm2-e8be5", &[]),
            ],
        ))
        .unwrap();
    // Member `vm1` has no entity any more: no host, no change for vm1: nothing sent. Then a
    // hand-made entity for `vm1` hosted on vm-ns/vm1 shows up as a patch.
    env.emu
        .apply_external_entity(json!({"metadata": {"name": "vm1", "namespace": VM_NS},
                                      "spec": {"externalNode": "vm-ns/vm1"}}))
        .unwrap();
    let ev = atg.next().await;
    assert_eq!(
        ev,
        json!({"type": "MODIFIED", "object": {"kind": "AppliedToGroupPatch", "apiVersion": "controlplane.antrea.io/v1beta2",
            "metadata": {"name": "atg-db", "uid": "atg-db"},
            "addedGroupMembers": [{"externalEntity": {"name": "vm1", "namespace": "vm-ns"}}]}})
    );

    // Policy deletion: DELETED metadata-only with sourceRef.
    env.emu
        .delete_controlplane(CpResource::NetworkPolicies, "uid-1")
        .unwrap();
    let ev = np.next().await;
    assert_eq!(
        ev,
        json!({"type": "DELETED", "object": {"kind": "NetworkPolicy", "apiVersion": "controlplane.antrea.io/v1beta2",
            "metadata": {"name": "uid-1", "uid": "uid-1", "generation": 2},
            "sourceRef": {"type": "AntreaNetworkPolicy", "namespace": "vm-ns", "name": "annp-uid-1", "uid": "uid-1"}}})
    );
    // The AddressGroup left vm1's span with it.
    let ev = ag.next().await;
    assert_eq!(ev["type"], "DELETED");
    assert_eq!(
        ev["object"]["metadata"],
        json!({"name": "ag-front", "uid": "ag-front"})
    );

    // Selectors other than nodeName/metadata.name: 400. LIST is unfiltered.
    let (code, _) = send_json(
        &controller,
        "GET",
        &format!("{CP}/addressgroups?fieldSelector=spec.x%3Dy&watch=true"),
        None,
    )
    .await;
    assert_eq!(code, 400);
    let (code, list) = send_json(
        &controller,
        "GET",
        &format!("{CP}/appliedtogroups?fieldSelector=nodeName%3Dvm-ns%2Fvm1"),
        None,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(list["kind"], "AppliedToGroupList");
    assert_eq!(list["items"][0]["groupMembers"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn statuses_and_stats_are_recorded() {
    let env = EmulatorEnv::start().await;
    let controller = env.controller_client().await;
    let status = json!({"kind": "NetworkPolicyStatus", "apiVersion": "controlplane.antrea.io/v1beta2",
        "metadata": {"name": "uid-1"}, "nodes": [{"nodeName": "vm-ns/vm1", "generation": 1, "realizationFailure": false}]});
    let (code, body) = send_json(
        &controller,
        "POST",
        &format!("{CP}/networkpolicies/uid-1/status"),
        Some(&status),
    )
    .await;
    assert_eq!((code, body["status"].as_str()), (201, Some("Success")));
    let (code, _) = send_json(
        &controller,
        "POST",
        &format!("{CP}/networkpolicies/other/status"),
        Some(&status),
    )
    .await;
    assert_eq!(code, 400, "name mismatch");
    let rec = env.emu.status("uid-1", "vm-ns/vm1").expect("status recorded");
    assert_eq!(
        (rec.generation, rec.realization_failure, rec.count),
        (1, false, 1)
    );

    let summary = json!({"kind": "NodeStatsSummary", "apiVersion": "controlplane.antrea.io/v1beta2",
        "metadata": {"name": "vm1"}, "antreaNetworkPolicies": [{"networkPolicy": {"uid": "uid-1"}, "trafficStats": {},
        "ruleTrafficStats": [{"name": "r", "trafficStats": {"packets": 12, "bytes": 720, "sessions": 3}}]}]});
    let (code, body) = send_json(
        &controller,
        "POST",
        &format!("{CP}/nodestatssummaries"),
        Some(&summary),
    )
    .await;
    assert_eq!((code, body["kind"].as_str()), (201, Some("NodeStatsSummary")));
    assert_eq!(env.emu.stats_summaries(), vec![summary]);

    // The same through the control API.
    let admin = env.admin_client().await;
    let (code, statuses) = send_json(&admin, "GET", "/emulator/v1/statuses", None).await;
    assert_eq!(code, 200);
    assert_eq!(statuses[0]["nodeName"], "vm-ns/vm1");
    let (_, summaries) = send_json(&admin, "GET", "/emulator/v1/statssummaries", None).await;
    assert_eq!(summaries[0]["metadata"]["name"], "vm1");
}

#[tokio::test]
async fn slow_reader_is_cut_off() {
    let env = EmulatorEnv::start_with(EmulatorOptions {
        watch_buffer: 4,
        ..EmulatorOptions::default()
    })
    .await;
    policy_fixture(&env.emu);
    let controller = env.controller_client().await;
    let mut ag = WatchStream::open(
        &controller,
        &controlplane_watch_path("addressgroups", "vm-ns/vm1"),
    )
    .await;
    ag.snapshot().await;
    // The reader stops reading; big patches fill the socket buffers, then the 4-event buffer.
    let big = |tag: u32| -> Value {
        let members = (0..2000)
            .map(|i| {
                ee_member(
                    VM_NS,
                    &format!("vm-{tag}-{i}-with-a-long-name-to-fill-buffers"),
                    &["10.1.2.3"],
                )
            })
            .collect();
        address_group("ag-front", members)
    };
    let mut sent = 0;
    for tag in 0..400 {
        env.emu.upsert_controlplane(big(tag)).unwrap();
        sent += 1;
        if env.emu.slow_watch_stops() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    wait_for("slow watcher force-stopped", T, || {
        env.emu.slow_watch_stops() == 1
    })
    .await;
    assert!(env.emu.controlplane_watches("vm-ns/vm1").is_empty());
    // The stream ends after what was already in flight, well before every update was delivered.
    let delivered = ag.ends_within(T).await.expect("stream must end");
    assert!(delivered < sent, "delivered {delivered} of {sent}");
}

#[tokio::test]
async fn injected_failures_then_recovery() {
    let env = EmulatorEnv::start().await;
    let agent = env.agent_client().await;
    let controller = env.controller_client().await;
    env.emu.fail_next("/apis/controlplane.antrea.io/", 2);
    let path = format!("{CP}/addressgroups");
    let (code, status) = send_json(&controller, "GET", &path, None).await;
    assert_eq!((code, status["reason"].as_str()), (500, Some("InternalError")));
    assert_eq!(send_json(&controller, "GET", &path, None).await.0, 500);
    assert_eq!(send_json(&controller, "GET", &path, None).await.0, 200);
    // Other prefixes are unaffected; the control API too.
    let statuses: Vec<u16> = env
        .emu
        .calls()
        .iter()
        .filter(|c| c.path == path)
        .map(|c| c.status)
        .collect();
    assert_eq!(statuses, vec![500, 500, 200]);

    let admin = env.admin_client().await;
    let (code, _) = send_json(
        &admin,
        "POST",
        "/emulator/v1/faults",
        Some(&json!({"pathPrefix": "/apis/crd.antrea.io/", "count": 1})),
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(
        send_json(&agent, "GET", &agent_info_path("vm1"), None).await.0,
        500
    );
    assert_eq!(
        send_json(&agent, "GET", &agent_info_path("vm1"), None).await.0,
        404
    );
}

#[tokio::test]
async fn controller_restart_and_forced_close() {
    let env = EmulatorEnv::start().await;
    policy_fixture(&env.emu);
    let agent = env.agent_client().await;
    let controller = env.controller_client().await;
    let node = "vm-ns/vm1";
    let mut np = WatchStream::open(&controller, &controlplane_watch_path("networkpolicies", node)).await;
    np.snapshot().await;
    for i in 0..3 {
        let p = network_policy(
            "uid-1",
            2 + i,
            &["atg-db"],
            vec![ingress_rule(&["ag-front"], 22, "Reject")],
        );
        env.emu.upsert_controlplane(p).unwrap();
        assert_eq!(np.next().await["type"], "MODIFIED");
    }
    let status = json!({"metadata": {"name": "uid-1"}, "nodes": [{"nodeName": node, "generation": 4}]});
    send_json(
        &controller,
        "POST",
        &format!("{CP}/networkpolicies/uid-1/status"),
        Some(&status),
    )
    .await;
    assert!(env.emu.status("uid-1", node).is_some());

    // Restart: the stream ends, statuses are forgotten, counters restart (1 object → rv 1).
    env.emu.restart_controller();
    assert!(np.ends_within(T).await.is_some());
    assert!(env.emu.statuses().is_empty());
    let mut np = WatchStream::open(&controller, &controlplane_watch_path("networkpolicies", node)).await;
    let (objects, bookmark) = np.snapshot().await;
    assert_eq!(objects[0]["metadata"]["generation"], 4);
    assert_eq!(bookmark["metadata"]["resourceVersion"], "1");

    // Forced close of every watch (both APIs), through the control API.
    let mut en_watch = WatchStream::open(
        &agent,
        &format!("/apis/crd.antrea.io/v1alpha1/namespaces/{VM_NS}/externalnodes?fieldSelector=metadata.name%3Dvm1&watch=true"),
    )
    .await;
    assert_eq!(en_watch.next().await["type"], "ADDED");
    let admin = env.admin_client().await;
    let (code, closed) = send_json(&admin, "POST", "/emulator/v1/watches/close", None).await;
    assert_eq!((code, closed["closed"].as_u64()), (200, Some(2)));
    assert!(np.ends_within(T).await.is_some());
    assert!(en_watch.ends_within(T).await.is_some());
    assert!(env.emu.watches().is_empty());
}

#[tokio::test]
async fn control_api_over_https() {
    let env = EmulatorEnv::start().await;
    let admin = env.admin_client().await;
    let en = external_node(VM_NS, "vm1", "", &["10.0.0.1"], &[]);
    let (code, stored) = send_json(&admin, "POST", "/emulator/v1/externalnodes", Some(&en)).await;
    assert_eq!(code, 200, "{stored}");
    let objects = json!({"items": [
        applied_to_group("atg", vec![ee_member(VM_NS, "vm1", &[])]),
        network_policy("p1", 1, &["atg"], vec![]),
    ]});
    assert_eq!(
        send_json(&admin, "POST", "/emulator/v1/controlplane", Some(&objects))
            .await
            .0,
        200
    );
    let (_, nps) = send_json(&admin, "GET", "/emulator/v1/controlplane/networkpolicies", None).await;
    assert_eq!(nps[0]["span"], json!(["vm-ns/vm1"]));
    let (code, aai) = send_json(&admin, "GET", "/emulator/v1/antreaagentinfos/vm1", None).await;
    assert_eq!((code, aai["metadata"]["name"].as_str()), (200, Some("vm1")));
    assert_eq!(
        send_json(
            &admin,
            "DELETE",
            "/emulator/v1/controlplane/networkpolicies/p1",
            None
        )
        .await
        .0,
        200
    );
    assert_eq!(
        send_json(
            &admin,
            "DELETE",
            "/emulator/v1/controlplane/networkpolicies/p1",
            None
        )
        .await
        .0,
        404
    );
    assert_eq!(
        send_json(&admin, "DELETE", "/emulator/v1/externalnodes/vm-ns/vm1", None)
            .await
            .0,
        200
    );
    assert!(env.emu.agent_info("vm1").is_none());
    let (_, calls) = send_json(&admin, "GET", "/emulator/v1/calls", None).await;
    assert!(calls
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["path"] == "/emulator/v1/controlplane" && c["status"] == 200));
}

/// A request with explicit `Accept` and `Content-Type` (None = header absent); status and body.
async fn send_raw(
    client: &kube::Client,
    method: &str,
    path: &str,
    accept: Option<&str>,
    content_type: Option<&str>,
    body: &str,
) -> (u16, String) {
    let mut b = http::Request::builder().method(method).uri(path);
    if let Some(a) = accept {
        b = b.header("Accept", a);
    }
    if let Some(c) = content_type {
        b = b.header("Content-Type", c);
    }
    let request = b.body(body.as_bytes().to_vec()).expect("request");
    let resp = client
        .send(request.map(kube::client::Body::from))
        .await
        .expect("request failed");
    let code = resp.status().as_u16();
    let bytes = resp.into_body().collect_bytes().await.expect("body");
    (code, String::from_utf8_lossy(&bytes).to_string())
}

#[tokio::test]
async fn each_server_serves_only_its_own_api_as_the_real_ones_do() {
    let env = EmulatorEnv::start().await;
    let emu = &env.emu;
    let agent = env.agent_client().await;
    let controller = env.controller_client().await;
    let admin = env.admin_client().await;
    emu.create_external_node(external_node(VM_NS, "vm1", "eth0", &["10.0.0.1"], &[]))
        .unwrap();
    emu.create_external_node(external_node(VM_NS, "vm2", "eth0", &["10.0.0.2"], &[]))
        .unwrap();
    emu.upsert_controlplane(json!([
        address_group("ag-a", vec![ee_member(VM_NS, "vm1-3e616", &["10.0.0.1"])]),
        address_group("ag-b", vec![ee_member(VM_NS, "vm2-3e616", &["10.0.0.2"])]),
    ]))
    .unwrap();

    // Two servers, each with its own API only; the other's paths get the generic 404.
    assert_ne!(emu.url(), emu.controller_url());
    let (code, status) = send_json(&controller, "GET", &external_node_path(VM_NS, "vm1"), None).await;
    assert_eq!(code, 404, "{status}");
    assert_eq!(
        status["message"],
        "the server could not find the requested resource"
    );
    let (code, _) = send_json(&agent, "GET", &format!("{CP}/addressgroups"), None).await;
    assert_eq!(code, 404, "kube-apiserver without the controller's APIService");
    assert_eq!(
        send_json(&controller, "GET", &format!("{CP}/addressgroups"), None)
            .await
            .0,
        200
    );
    assert_eq!(
        send_json(&agent, "GET", &external_node_path(VM_NS, "vm1"), None)
            .await
            .0,
        200
    );
    // Discovery: kube-apiserver has the core API, antrea-controller does not.
    let (code, versions) = send_json(&agent, "GET", "/api", None).await;
    assert_eq!((code, versions["kind"].as_str()), (200, Some("APIVersions")));
    assert_eq!(send_json(&controller, "GET", "/api", None).await.0, 404);
    let (_, groups) = send_json(&controller, "GET", "/apis", None).await;
    assert_eq!(groups["groups"][0]["name"], "controlplane.antrea.io");
    // The control API lives on kube-apiserver's side only.
    assert_eq!(send_json(&admin, "GET", "/emulator/v1/calls", None).await.0, 200);

    // Custom resources allow no unconditional update (422) and no stale one (409).
    let (_, mut aai) = send_json(&agent, "GET", &agent_info_path("vm1"), None).await;
    let rv = aai["metadata"]["resourceVersion"].clone();
    aai["metadata"].as_object_mut().unwrap().remove("resourceVersion");
    let (code, status) = send_json(&agent, "PUT", &agent_info_path("vm1"), Some(&aai)).await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (422, Some("Invalid")),
        "{status}"
    );
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .ends_with("metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"),
        "{status}"
    );
    // The AntreaAgentInfo CRD preserves unknown fields (x-kubernetes-preserve-unknown-fields).
    aai["metadata"]["resourceVersion"] = rv;
    aai["someFutureField"] = json!({"x": 1});
    let (code, stored) = send_json(&agent, "PUT", &agent_info_path("vm1"), Some(&aai)).await;
    assert_eq!(code, 200, "{stored}");
    assert_eq!(stored["someFutureField"], json!({"x": 1}));
    let (code, _) = send_json(&agent, "PUT", &agent_info_path("vm1"), Some(&aai)).await;
    assert_eq!(code, 409);
    let (_, mut en) = send_json(&admin, "GET", &external_node_path(VM_NS, "vm2"), None).await;
    en["metadata"].as_object_mut().unwrap().remove("resourceVersion");
    let (code, _) = send_json(&admin, "PUT", &external_node_path(VM_NS, "vm2"), Some(&en)).await;
    assert_eq!(code, 422);
    en["metadata"]["resourceVersion"] = json!("1");
    let (code, _) = send_json(&admin, "PUT", &external_node_path(VM_NS, "vm2"), Some(&en)).await;
    assert_eq!(code, 409);

    // An interface without `ips` is valid for the CRD.
    let no_ips = json!({"apiVersion": "crd.antrea.io/v1alpha1", "kind": "ExternalNode",
        "metadata": {"name": "vm3", "namespace": VM_NS},
        "spec": {"interfaces": [{"name": "eth0"}]}});
    let (code, created) = send_json(
        &admin,
        "POST",
        &format!("/apis/crd.antrea.io/v1alpha1/namespaces/{VM_NS}/externalnodes"),
        Some(&no_ips),
    )
    .await;
    assert_eq!(code, 201, "{created}");

    // Content negotiation: JSON only, protobuf refused (documented), bodies must be JSON.
    let cp_list = format!("{CP}/addressgroups");
    for (accept, expected) in [
        (None, 200),
        (Some("application/json"), 200),
        (Some("application/json;stream=watch"), 200),
        (Some("application/vnd.kubernetes.protobuf, */*;q=0.5"), 200),
        (Some("*/*"), 200),
        (Some("application/vnd.kubernetes.protobuf"), 406),
        (Some("application/yaml"), 406),
    ] {
        let (code, body) = send_raw(&controller, "GET", &cp_list, accept, None, "").await;
        assert_eq!(code, expected, "Accept {accept:?}: {body}");
        let (code, _) = send_raw(&agent, "GET", &agent_info_path("vm1"), accept, None, "").await;
        assert_eq!(code, expected, "Accept {accept:?} on kube-apiserver");
    }
    let status_body = json!({"kind": "NetworkPolicyStatus", "apiVersion": "controlplane.antrea.io/v1beta2",
        "metadata": {"name": "p"}, "nodes": []})
    .to_string();
    let status_path = format!("{CP}/networkpolicies/p/status");
    let (code, _) = send_raw(
        &controller,
        "POST",
        &status_path,
        Some("application/json"),
        Some("application/vnd.kubernetes.protobuf"),
        &status_body,
    )
    .await;
    assert_eq!(code, 415);
    let (code, body) = send_raw(
        &controller,
        "POST",
        &status_path,
        Some("application/json"),
        Some("application/json; charset=utf-8"),
        &status_body,
    )
    .await;
    assert_eq!(code, 201, "{body}");

    // Field selectors: antrea-controller's LIST applies none (metadata.name neither), a
    // custom resource LIST applies metadata.name; unsupported labels are 400 on both.
    let (_, list) = send_json(
        &controller,
        "GET",
        &format!("{cp_list}?fieldSelector=metadata.name%3Dag-a"),
        None,
    )
    .await;
    assert_eq!(list["items"].as_array().unwrap().len(), 2, "{list}");
    let (code, _) = send_json(
        &controller,
        "GET",
        &format!("{cp_list}?fieldSelector=spec.x%3Dy"),
        None,
    )
    .await;
    assert_eq!(code, 400);
    let en_list = format!("/apis/crd.antrea.io/v1alpha1/namespaces/{VM_NS}/externalnodes");
    let (_, list) = send_json(
        &admin,
        "GET",
        &format!("{en_list}?fieldSelector=metadata.name%3Dvm1"),
        None,
    )
    .await;
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["vm1"]);
    let (code, _) = send_json(
        &admin,
        "GET",
        &format!("{en_list}?fieldSelector=spec.x%3Dy"),
        None,
    )
    .await;
    assert_eq!(code, 400);

    // No `creationTimestamp: null` anywhere.
    for (client, path) in [
        (&controller, cp_list.clone()),
        (&agent, agent_info_path("vm1")),
        (&admin, en_list.clone()),
    ] {
        let (_, body) = send_raw(client, "GET", &path, Some("application/json"), None, "").await;
        assert!(!body.contains("\"creationTimestamp\":null"), "{path}: {body}");
    }
    let mut watch = WatchStream::open(
        &controller,
        &controlplane_watch_path("addressgroups", "vm-ns/vm1"),
    )
    .await;
    let line = watch.next_raw().await;
    assert!(!line.contains("null"), "{line}");
}

/// Antrea's own example (docs/external-node.md): the ExternalNode is accepted as written, the
/// controller side derives the ExternalEntity the docs show, and the agent's parser reads the
/// ExternalNode the server returns.
#[tokio::test]
async fn antreas_documented_external_node_and_its_entity() {
    use serde::Deserialize;
    let text = include_str!("fixtures/antrea-docs-external-node.yaml");
    let docs: Vec<Value> = serde_norway::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).expect("fixture YAML"))
        .collect();
    let (en, expected_ee) = (&docs[0], &docs[1]);
    let env = EmulatorEnv::start().await;
    let admin = env.admin_client().await;
    let (code, stored) = send_json(
        &admin,
        "POST",
        "/apis/crd.antrea.io/v1alpha1/namespaces/vm-ns/externalnodes",
        Some(en),
    )
    .await;
    assert_eq!(code, 201, "{stored}");
    let ee = env
        .emu
        .external_entities()
        .into_iter()
        .find(|e| e["metadata"]["name"] == "vm1")
        .expect("the ExternalEntity the docs show");
    for field in [
        "/metadata/name",
        "/metadata/namespace",
        "/metadata/labels",
        "/spec",
    ] {
        assert_eq!(ee.pointer(field), expected_ee.pointer(field), "{field}: {ee}");
    }
    let owner = &ee["metadata"]["ownerReferences"][0];
    assert_eq!(
        (&owner["kind"], &owner["name"]),
        (&json!("ExternalNode"), &json!("vm1"))
    );
    // The agent reads what the server returns.
    let agent = env.agent_client().await;
    let (_, got) = send_json(&agent, "GET", &external_node_path("vm-ns", "vm1"), None).await;
    let parsed: antrea_vm_agent::k8s::external_node::ExternalNodeObject =
        serde_json::from_value(got).expect("the agent decodes it");
    let node = parsed.validate("vm1", "vm-ns").expect("the agent accepts it");
    assert_eq!(node.interfaces[0].entity_name, "vm1");
}
