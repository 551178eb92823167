//! Tests of `controlplane_watch`.
use super::*;
use crate::k8s::fake_api::{FakeApi, WatchFeed};
use antrea_controlplane::testdata;
use serde_json::json;

const T: Duration = Duration::from_secs(10);
const NP: &str = testdata::NP_ANNP1;
const ATG: &str = testdata::ATG;
const ATG_PATCH: &str = testdata::ATG_PATCH;
const AG: &str = testdata::AG;
const AG_PATCH: &str = testdata::AG_PATCH;
const NPS: &str = "/apis/controlplane.antrea.io/v1beta2/networkpolicies";
const ATGS: &str = "/apis/controlplane.antrea.io/v1beta2/appliedtogroups";
const AGS: &str = "/apis/controlplane.antrea.io/v1beta2/addressgroups";

fn obj(text: &str, name: &str) -> Value {
    let mut v: Value = serde_json::from_str(text).unwrap();
    v["metadata"]["name"] = json!(name);
    v["metadata"]["uid"] = json!(name);
    v
}

fn valid(v: &Value) -> ValidObject {
    ControlplaneObject::from_value(v.clone())
        .unwrap()
        .validate()
        .unwrap()
}

fn line(kind: &str, object: &Value) -> String {
    json!({"type": kind, "object": object}).to_string()
}

fn bookmark(kind: &str) -> String {
    line(
        "BOOKMARK",
        &json!({"kind": kind, "apiVersion": API_VERSION, "metadata": {"resourceVersion": "7"}}),
    )
}

fn send(feed: &WatchFeed, lines: &[String]) {
    for l in lines {
        feed.send(Ok(l.clone())).unwrap();
    }
}

fn source(api: &FakeApi, fallback: Option<FallbackStore>) -> ControlplaneSource {
    let mut s = ControlplaneSource::new(Arc::new(api.clone()), "vm-ns/vm1").with_timing(ControlplaneTiming {
        retry_period: Duration::from_millis(20),
        ..ControlplaneTiming::default()
    });
    s.fallback = fallback;
    s
}

/// A subscription whose updates tests read per kind.
struct Updates {
    stream: BoxStream<'static, PolicyUpdate>,
    /// Updates about other kinds than the one last waited for, in arrival order.
    held: Vec<PolicyUpdate>,
}

fn updates(src: &ControlplaneSource) -> Updates {
    Updates {
        stream: src.subscribe(),
        held: Vec::new(),
    }
}

/// The next update about `kind` (the three watches are concurrent: updates about other kinds
/// are held for later), bounded.
async fn next(updates: &mut Updates, kind: Kind) -> PolicyUpdate {
    if let Some(i) = updates.held.iter().position(|u| update_kind(u) == Some(kind)) {
        return updates.held.remove(i);
    }
    let wait = async {
        loop {
            let u = updates.stream.next().await.expect("the stream ended");
            if update_kind(&u) == Some(kind) {
                return u;
            }
            updates.held.push(u);
        }
    };
    tokio::time::timeout(T, wait)
        .await
        .unwrap_or_else(|_| panic!("no update about {kind} within {T:?}"))
}

fn connection(kind: Kind, connected: bool) -> PolicyUpdate {
    PolicyUpdate::Connection { kind, connected }
}

#[test]
fn watch_paths_filter_on_the_urlencoded_node_key() {
    assert_eq!(
        watch_path(Kind::NetworkPolicy, "vm-ns/vm1"),
        "/apis/controlplane.antrea.io/v1beta2/networkpolicies?fieldSelector=nodeName%3Dvm-ns%2Fvm1&watch=true"
    );
    assert_eq!(
        watch_path(Kind::AppliedToGroup, "vm-ns/vm1"),
        "/apis/controlplane.antrea.io/v1beta2/appliedtogroups?fieldSelector=nodeName%3Dvm-ns%2Fvm1&watch=true"
    );
    assert_eq!(
        watch_path(Kind::AddressGroup, "a&b/c=d"),
        "/apis/controlplane.antrea.io/v1beta2/addressgroups?fieldSelector=nodeName%3Da%26b%2Fc%3Dd&watch=true"
    );
}

#[tokio::test]
async fn opens_the_three_node_filtered_watches() {
    let api = FakeApi::named("https://10.0.0.1:443");
    let src = source(&api, None);
    assert_eq!(
        src.describe(),
        "antrea-controller https://10.0.0.1:443 (node vm-ns/vm1)"
    );
    let mut stream = updates(&src);
    // Nothing answers: each kind reports "not connected" once.
    for kind in WATCHED_KINDS {
        assert_eq!(next(&mut stream, kind).await, connection(kind, false));
    }
    for (prefix, kind) in [
        (NPS, Kind::NetworkPolicy),
        (ATGS, Kind::AppliedToGroup),
        (AGS, Kind::AddressGroup),
    ] {
        let paths = api.wait_for_watches(prefix, 2, T).await.unwrap();
        assert!(
            paths.iter().all(|p| *p == watch_path(kind, "vm-ns/vm1")),
            "{paths:?}"
        );
    }
    assert!(api
        .calls()
        .iter()
        .all(|c| c.watch && c.method == crate::k8s::api::Method::Get));
}

#[tokio::test]
async fn a_watch_is_reopened_at_its_safety_deadline_whether_busy_or_silent() {
    // Hours by default, past antrea-controller's own 2-4 h: silence alone never reopens.
    assert!(ControlplaneTiming::default().max_watch_lifetime >= Duration::from_secs(4 * 3600));
    let api = FakeApi::new();
    // The first watch delivers its snapshot, then a live event, and its body stays open.
    let atgs = api.watch_stream(ATGS);
    let _second = api.watch_stream(ATGS);
    let mut src = source(&api, None);
    src.timing.max_watch_lifetime = Duration::from_millis(400);
    let mut stream = updates(&src);
    send(&atgs, &[bookmark("AppliedToGroup")]);
    assert_eq!(
        next(&mut stream, Kind::AppliedToGroup).await,
        PolicyUpdate::Replace {
            kind: Kind::AppliedToGroup,
            objects: vec![]
        }
    );
    assert_eq!(
        next(&mut stream, Kind::AppliedToGroup).await,
        connection(Kind::AppliedToGroup, true)
    );
    send(&atgs, &[line("ADDED", &obj(ATG, "a"))]);
    assert!(matches!(
        next(&mut stream, Kind::AppliedToGroup).await,
        PolicyUpdate::Upsert(_)
    ));
    // The deadline counts from the open, not from the last event: the watch is reported
    // down and reopened, though the server never closed it.
    assert_eq!(
        next(&mut stream, Kind::AppliedToGroup).await,
        connection(Kind::AppliedToGroup, false)
    );
    api.wait_for_watches(ATGS, 2, T).await.unwrap();
    assert!(atgs.is_closed(), "the silent body was dropped");
}

#[tokio::test]
async fn snapshot_is_buffered_until_the_bookmark_then_live_events_apply() {
    let api = FakeApi::new();
    let atgs = api.watch_stream(ATGS);
    let nps = api.watch_stream(NPS);
    let mut stream = updates(&source(&api, None));

    let (atg_a, atg_b) = (obj(ATG, "atg-a"), obj(ATG, "ns/atg-b"));
    let patch_a = obj(ATG_PATCH, "atg-a");
    send(
        &atgs,
        &[
            // Before the bookmark only ADDED counts.
            line("MODIFIED", &patch_a),
            line("DELETED", &atg_a),
            line("ADDED", &atg_b),
            line("ADDED", &atg_a),
        ],
    );
    tokio::task::yield_now().await;
    send(&atgs, &[bookmark("AppliedToGroup")]);
    assert_eq!(
        next(&mut stream, Kind::AppliedToGroup).await,
        PolicyUpdate::Replace {
            kind: Kind::AppliedToGroup,
            objects: vec![valid(&atg_a), valid(&atg_b)]
        }
    );
    assert_eq!(
        next(&mut stream, Kind::AppliedToGroup).await,
        connection(Kind::AppliedToGroup, true)
    );

    // Live: patch, add, full modify, delete.
    let atg_c = obj(ATG, "atg-c");
    let mut atg_b2 = atg_b.clone();
    atg_b2["groupMembers"] = json!([{"externalEntity": {"name": "vm9", "namespace": "vm-ns"}}]);
    send(
        &atgs,
        &[
            line("MODIFIED", &patch_a),
            line("ADDED", &atg_c),
            line("MODIFIED", &atg_b2),
            line(
                "DELETED",
                &json!({"kind": "AppliedToGroup", "metadata": {"name": "atg-c"}}),
            ),
        ],
    );
    let ValidObject::AppliedToGroupPatch(p) = valid(&patch_a) else {
        panic!()
    };
    assert_eq!(
        next(&mut stream, Kind::AppliedToGroup).await,
        PolicyUpdate::Patch {
            kind: Kind::AppliedToGroup,
            patch: p
        }
    );
    assert_eq!(
        next(&mut stream, Kind::AppliedToGroup).await,
        PolicyUpdate::Upsert(valid(&atg_c))
    );
    assert_eq!(
        next(&mut stream, Kind::AppliedToGroup).await,
        PolicyUpdate::Upsert(valid(&atg_b2))
    );
    assert_eq!(
        next(&mut stream, Kind::AppliedToGroup).await,
        PolicyUpdate::Delete {
            kind: Kind::AppliedToGroup,
            name: "atg-c".into()
        }
    );

    // NetworkPolicies: empty snapshot, then ADDED, MODIFIED (full object), DELETED.
    let np: Value = serde_json::from_str(NP).unwrap();
    let mut np2 = np.clone();
    np2["metadata"]["generation"] = json!(2);
    let deleted: Value = serde_json::from_str(testdata::WATCH_EVENTS.lines().nth(5).unwrap()).unwrap();
    send(
        &nps,
        &[
            bookmark("NetworkPolicy"),
            line("ADDED", &np),
            line("MODIFIED", &np2),
            deleted.to_string(),
        ],
    );
    assert_eq!(
        next(&mut stream, Kind::NetworkPolicy).await,
        PolicyUpdate::Replace {
            kind: Kind::NetworkPolicy,
            objects: vec![]
        }
    );
    assert_eq!(
        next(&mut stream, Kind::NetworkPolicy).await,
        connection(Kind::NetworkPolicy, true)
    );
    assert_eq!(
        next(&mut stream, Kind::NetworkPolicy).await,
        PolicyUpdate::Upsert(valid(&np))
    );
    assert_eq!(
        next(&mut stream, Kind::NetworkPolicy).await,
        PolicyUpdate::Upsert(valid(&np2))
    );
    assert_eq!(
        next(&mut stream, Kind::NetworkPolicy).await,
        PolicyUpdate::Delete {
            kind: Kind::NetworkPolicy,
            name: "5d5b6c7e-0f0a-4c43-9d61-2a1f9e3c4b10".into()
        }
    );
    // Still the first session of each watch.
    assert_eq!(api.watch_paths(ATGS).len(), 1);
    assert_eq!(api.watch_paths(NPS).len(), 1);
}

#[tokio::test]
async fn a_closed_body_reconnects_with_a_full_resync() {
    let api = FakeApi::new();
    let first = api.watch_stream(AGS);
    let (ag1, ag2) = (obj(AG, "ag1"), obj(AG, "ag2"));
    send(
        &first,
        &[line("ADDED", &ag1), line("ADDED", &ag2), bookmark("AddressGroup")],
    );
    let mut stream = updates(&source(&api, None));
    assert!(
        matches!(next(&mut stream, Kind::AddressGroup).await, PolicyUpdate::Replace { ref objects, .. } if objects.len() == 2)
    );
    assert_eq!(
        next(&mut stream, Kind::AddressGroup).await,
        connection(Kind::AddressGroup, true)
    );

    // The controller restarts: the body ends; the next snapshot lacks ag1, so the cache's
    // Replace deletes it.
    let second = api.watch_stream(AGS);
    send(&second, &[line("ADDED", &ag2), bookmark("AddressGroup")]);
    drop(first);
    assert_eq!(
        next(&mut stream, Kind::AddressGroup).await,
        connection(Kind::AddressGroup, false)
    );
    assert_eq!(
        next(&mut stream, Kind::AddressGroup).await,
        PolicyUpdate::Replace {
            kind: Kind::AddressGroup,
            objects: vec![valid(&ag2)]
        }
    );
    assert_eq!(
        next(&mut stream, Kind::AddressGroup).await,
        connection(Kind::AddressGroup, true)
    );
    assert_eq!(api.watch_paths(AGS).len(), 2);

    // A transport error ends the body the same way; a body that ends before its bookmark
    // gives nothing and is retried.
    let third = api.watch_stream(AGS);
    send(&third, &[line("ADDED", &ag1)]);
    drop(third);
    let fourth = api.watch_stream(AGS);
    send(&fourth, &[line("ADDED", &ag1), bookmark("AddressGroup")]);
    second.send(Err(FakeApi::transport("connection reset"))).unwrap();
    assert_eq!(
        next(&mut stream, Kind::AddressGroup).await,
        connection(Kind::AddressGroup, false)
    );
    assert_eq!(
        next(&mut stream, Kind::AddressGroup).await,
        PolicyUpdate::Replace {
            kind: Kind::AddressGroup,
            objects: vec![valid(&ag1)]
        }
    );
    assert_eq!(
        next(&mut stream, Kind::AddressGroup).await,
        connection(Kind::AddressGroup, true)
    );
    assert_eq!(api.watch_paths(AGS).len(), 4);
}

#[tokio::test]
async fn a_patch_for_an_unknown_group_reopens_the_watch() {
    let api = FakeApi::new();
    let first = api.watch_stream(AGS);
    let ag1 = obj(AG, "ag1");
    send(
        &first,
        &[
            line("ADDED", &ag1),
            bookmark("AddressGroup"),
            line("MODIFIED", &obj(AG_PATCH, "nope")),
        ],
    );
    let second = api.watch_stream(AGS);
    send(&second, &[line("ADDED", &ag1), bookmark("AddressGroup")]);
    let mut stream = updates(&source(&api, None));
    assert!(matches!(
        next(&mut stream, Kind::AddressGroup).await,
        PolicyUpdate::Replace { .. }
    ));
    assert_eq!(
        next(&mut stream, Kind::AddressGroup).await,
        connection(Kind::AddressGroup, true)
    );
    let PolicyUpdate::Error(e) = next(&mut stream, Kind::AddressGroup).await else {
        panic!()
    };
    let e = e.to_string();
    assert_eq!(e, "antrea-controller AddressGroup watch: patch for unknown AddressGroup \"nope\"; reopening the watch to resync");
    assert_eq!(
        next(&mut stream, Kind::AddressGroup).await,
        connection(Kind::AddressGroup, false)
    );
    assert!(matches!(
        next(&mut stream, Kind::AddressGroup).await,
        PolicyUpdate::Replace { .. }
    ));
    assert_eq!(
        next(&mut stream, Kind::AddressGroup).await,
        connection(Kind::AddressGroup, true)
    );
    assert_eq!(api.watch_paths(AGS).len(), 2);
    // The first body was dropped by the watcher.
    assert!(first.is_closed());
}

#[tokio::test]
async fn error_and_late_bookmark_events_reopen_the_watch() {
    let api = FakeApi::new();
    let status = json!({"kind": "Status", "status": "Failure", "message": "too old", "code": 410});
    for end in [
        line("ERROR", &status),
        bookmark("NetworkPolicy"),
        line("SURPRISE", &json!({})),
    ] {
        let feed = api.watch_stream(NPS);
        send(&feed, &[bookmark("NetworkPolicy"), end]);
    }
    let last = api.watch_stream(NPS);
    send(&last, &[bookmark("NetworkPolicy")]);
    let mut stream = updates(&source(&api, None));
    for i in 0..3 {
        if i > 0 {
            // Each of these ends is abnormal: the controller may have lost the statuses.
            assert_eq!(
                next(&mut stream, Kind::NetworkPolicy).await,
                PolicyUpdate::ServerMayHaveRestarted
            );
        }
        assert!(matches!(
            next(&mut stream, Kind::NetworkPolicy).await,
            PolicyUpdate::Replace { .. }
        ));
        assert_eq!(
            next(&mut stream, Kind::NetworkPolicy).await,
            connection(Kind::NetworkPolicy, true)
        );
        assert_eq!(
            next(&mut stream, Kind::NetworkPolicy).await,
            connection(Kind::NetworkPolicy, false)
        );
    }
    assert_eq!(
        next(&mut stream, Kind::NetworkPolicy).await,
        PolicyUpdate::ServerMayHaveRestarted
    );
    assert!(matches!(
        next(&mut stream, Kind::NetworkPolicy).await,
        PolicyUpdate::Replace { .. }
    ));
    assert_eq!(
        next(&mut stream, Kind::NetworkPolicy).await,
        connection(Kind::NetworkPolicy, true)
    );
    assert_eq!(api.watch_paths(NPS).len(), 4);
}

fn bookmark_at(kind: &str, rv: &str) -> String {
    line(
        "BOOKMARK",
        &json!({"kind": kind, "apiVersion": API_VERSION, "metadata": {"resourceVersion": rv}}),
    )
}

#[tokio::test]
async fn only_a_broken_watch_or_a_new_server_incarnation_says_statuses_may_be_lost() {
    let api = FakeApi::new();
    // 1: synced at rv 7, then closed cleanly by the server.
    let first = api.watch_stream(NPS);
    // 2: rv 9 (still the same server), then the connection breaks.
    let second = api.watch_stream(NPS);
    // 3: rv 9 again after the break; closed cleanly.
    let third = api.watch_stream(NPS);
    // 4: rv 2, lower than before: a restarted controller.
    let fourth = api.watch_stream(NPS);
    send(&first, &[bookmark_at("NetworkPolicy", "7")]);
    send(&second, &[bookmark_at("NetworkPolicy", "9")]);
    send(&third, &[bookmark_at("NetworkPolicy", "9")]);
    send(&fourth, &[bookmark_at("NetworkPolicy", "2")]);
    let mut stream = updates(&source(&api, None));
    let mut seen = Vec::new();
    let mut feeds = vec![first, second, third];
    let ends: [Option<&str>; 3] = [None, Some("connection reset"), None];
    for end in ends {
        loop {
            let u = next(&mut stream, Kind::NetworkPolicy).await;
            let synced = matches!(u, PolicyUpdate::Connection { connected: true, .. });
            seen.push(u);
            if synced {
                break;
            }
        }
        let feed = feeds.remove(0);
        if let Some(message) = end {
            feed.send(Err(crate::k8s::api::ApiError::Transport {
                method: "GET",
                path: NPS.into(),
                message: message.into(),
            }))
            .unwrap();
        }
        drop(feed);
    }
    loop {
        let u = next(&mut stream, Kind::NetworkPolicy).await;
        let synced = matches!(u, PolicyUpdate::Connection { connected: true, .. });
        seen.push(u);
        if synced {
            break;
        }
    }
    let marks: Vec<&str> = seen
        .iter()
        .filter_map(|u| match u {
            PolicyUpdate::Replace { .. } => Some("replace"),
            PolicyUpdate::ServerMayHaveRestarted => Some("restart?"),
            _ => None,
        })
        .collect();
    assert_eq!(
        marks,
        ["replace", "replace", "restart?", "replace", "restart?", "replace"],
        "{seen:#?}"
    );
    drop(fourth);
}

#[tokio::test]
async fn a_failed_open_is_retried() {
    let api = FakeApi::new();
    api.watch_fails(ATGS, FakeApi::status(500, "InternalError", "etcd down"));
    let feed = api.watch_stream(ATGS);
    send(
        &feed,
        &[line("ADDED", &obj(ATG, "a")), bookmark("AppliedToGroup")],
    );
    let mut stream = updates(&source(&api, None));
    assert_eq!(
        next(&mut stream, Kind::AppliedToGroup).await,
        connection(Kind::AppliedToGroup, false)
    );
    assert_eq!(
        next(&mut stream, Kind::AppliedToGroup).await,
        PolicyUpdate::Replace {
            kind: Kind::AppliedToGroup,
            objects: vec![valid(&obj(ATG, "a"))]
        }
    );
    assert_eq!(
        next(&mut stream, Kind::AppliedToGroup).await,
        connection(Kind::AppliedToGroup, true)
    );
    assert_eq!(api.watch_paths(ATGS).len(), 2);
}

#[tokio::test]
async fn bad_lines_and_objects_are_reported_and_skipped() {
    let api = FakeApi::new();
    let first = api.watch_stream(AGS);
    let good = obj(AG, "good");
    // Not a group at all (a bad member alone would only be left out: see below).
    let mut bad = obj(AG, "bad");
    bad["groupMembers"] = json!("oops");
    send(
        &first,
        &[
            "not json".into(),
            line("ADDED", &bad),
            line("ADDED", &good),
            bookmark("AddressGroup"),
            r#"{"object": {}}"#.into(),
            line(
                "ADDED",
                &json!({"kind": "NetworkPolicy", "apiVersion": API_VERSION, "metadata": {"name": "np"}}),
            ),
            line("MODIFIED", &bad),
            line("ADDED", &obj(AG, "after")),
        ],
    );
    let mut stream = updates(&source(&api, None));
    let mut errors = Vec::new();
    let mut updates = Vec::new();
    while updates.len() < 3 {
        match next(&mut stream, Kind::AddressGroup).await {
            PolicyUpdate::Error(e) => errors.push(e.to_string()),
            u => updates.push(u),
        }
    }
    assert_eq!(
        updates,
        [
            PolicyUpdate::Replace {
                kind: Kind::AddressGroup,
                objects: vec![valid(&good)]
            },
            connection(Kind::AddressGroup, true),
            PolicyUpdate::Upsert(valid(&obj(AG, "after")))
        ]
    );
    assert_eq!(errors.len(), 5, "{errors:#?}");
    assert!(
        errors[0].starts_with("antrea-controller AddressGroup watch: event is not JSON"),
        "{}",
        errors[0]
    );
    assert!(
        errors[1].starts_with("antrea-controller AddressGroup watch: AddressGroup \"bad\": invalid type"),
        "{}",
        errors[1]
    );
    assert!(errors[2].contains("event without a type"), "{}", errors[2]);
    assert!(
        errors[3].contains("NetworkPolicy \"np\" does not belong on this watch"),
        "{}",
        errors[3]
    );
    assert!(
        errors[4].contains("AddressGroup \"bad\": invalid type"),
        "{}",
        errors[4]
    );

    // A resync where a known object turned bad keeps its last good version.
    let second = api.watch_stream(AGS);
    let mut good_now_bad = bad.clone();
    good_now_bad["metadata"]["name"] = json!("good");
    send(&second, &[line("ADDED", &good_now_bad), bookmark("AddressGroup")]);
    drop(first);
    assert_eq!(
        next(&mut stream, Kind::AddressGroup).await,
        connection(Kind::AddressGroup, false)
    );
    let PolicyUpdate::Error(e) = next(&mut stream, Kind::AddressGroup).await else {
        panic!()
    };
    let e = e.to_string();
    assert!(
        e.contains("AddressGroup \"good\":") && e.ends_with("keeping its last good version"),
        "{e}"
    );
    assert_eq!(
        next(&mut stream, Kind::AddressGroup).await,
        PolicyUpdate::Replace {
            kind: Kind::AddressGroup,
            objects: vec![valid(&good)]
        }
    );
}

#[tokio::test]
async fn a_bad_member_is_left_out_and_named_and_its_group_stands() {
    let api = FakeApi::new();
    let feed = api.watch_stream(AGS);
    let mut mixed = obj(AG, "mixed");
    let members = mixed["groupMembers"].as_array().unwrap().len();
    assert!(members >= 2, "the fixture has several members");
    mixed["groupMembers"][0]["ips"] = json!(["AAE="]);
    // An unnamed port of port 0, as the controller copies it from an ExternalEntity.
    mixed["groupMembers"][1]["ports"] = json!([{"port": 0, "protocol": "TCP"}]);
    let mut patch = obj(AG_PATCH, "mixed");
    patch["addedGroupMembers"] = json!([
        {"externalEntity": {"name": "vm9", "namespace": "vm-ns"}, "ips": ["AAAAAAAAAAAAAP//rBBkCQ=="]},
        {"externalEntity": {"name": "vm8"}, "ips": ["AAAAAAAAAAAAAP//rBBkCA=="]}
    ]);
    patch["removedGroupMembers"] = json!([]);
    send(
        &feed,
        &[
            line("ADDED", &mixed),
            bookmark("AddressGroup"),
            line("MODIFIED", &patch),
        ],
    );
    let mut stream = updates(&source(&api, None));
    let PolicyUpdate::Error(e) = next(&mut stream, Kind::AddressGroup).await else {
        panic!("the dropped member is named")
    };
    let e = e.to_string();
    assert!(
        e.contains("AddressGroup mixed: groupMembers[0] (") && e.contains("dropped: groupMembers[0].ips[0]"),
        "{e}"
    );
    let PolicyUpdate::Replace { objects, .. } = next(&mut stream, Kind::AddressGroup).await else {
        panic!("the group is delivered")
    };
    let ValidObject::AddressGroup(g) = &objects[0] else {
        panic!()
    };
    assert_eq!(g.members.len(), members - 1);
    assert_eq!(
        next(&mut stream, Kind::AddressGroup).await,
        connection(Kind::AddressGroup, true)
    );
    let PolicyUpdate::Error(e) = next(&mut stream, Kind::AddressGroup).await else {
        panic!("the patch's bad member is named")
    };
    let e = e.to_string();
    assert!(
        e.contains("addedGroupMembers[1] (externalEntity /vm8) dropped"),
        "{e}"
    );
    let PolicyUpdate::Patch { patch, .. } = next(&mut stream, Kind::AddressGroup).await else {
        panic!("the rest of the patch applies")
    };
    assert_eq!(patch.added.len(), 1);
}

#[tokio::test]
async fn dropping_the_stream_stops_the_watches() {
    let api = FakeApi::new();
    let feeds: Vec<WatchFeed> = [NPS, ATGS, AGS].iter().map(|p| api.watch_stream(p)).collect();
    let mut stream = updates(&source(&api, None));
    send(&feeds[0], &[bookmark("NetworkPolicy")]);
    assert!(matches!(
        next(&mut stream, Kind::NetworkPolicy).await,
        PolicyUpdate::Replace { .. }
    ));
    api.wait_for_watches("/apis/controlplane.antrea.io/", 3, T)
        .await
        .unwrap();
    drop(stream);
    for feed in &feeds {
        tokio::time::timeout(T, feed.closed())
            .await
            .expect("a watch body stayed open");
    }
    // And no watch is opened again.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(api.watch_paths("/apis/controlplane.antrea.io/").len(), 3);
}

fn dir_files(store: &FallbackStore, kind: Kind) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(store.kind_dir(kind).unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn the_fallback_store_is_written_and_used_when_the_controller_is_down_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let store = FallbackStore::in_state_dir(tmp.path());
    let api = FakeApi::new();
    let (nps, atgs, ags) = (
        api.watch_stream(NPS),
        api.watch_stream(ATGS),
        api.watch_stream(AGS),
    );
    let np: Value = serde_json::from_str(NP).unwrap();
    let np_name = np["metadata"]["name"].as_str().unwrap().to_owned();
    let np_gone = obj(NP, "gone");
    let (atg, ag, ag_old) = (obj(ATG, "ns/atg"), obj(AG, "ag"), obj(AG, "ag-old"));
    let mut stream = updates(&source(&api, Some(store.clone())));
    send(
        &nps,
        &[
            line("ADDED", &np),
            line("ADDED", &np_gone),
            bookmark("NetworkPolicy"),
        ],
    );
    send(&atgs, &[line("ADDED", &atg), bookmark("AppliedToGroup")]);
    send(
        &ags,
        &[
            line("ADDED", &ag),
            line("ADDED", &ag_old),
            bookmark("AddressGroup"),
        ],
    );
    for kind in WATCHED_KINDS {
        assert!(matches!(
            next(&mut stream, kind).await,
            PolicyUpdate::Replace { .. }
        ));
        assert_eq!(next(&mut stream, kind).await, connection(kind, true));
    }
    // Changes: a policy and a group deleted, a group patched.
    send(
        &nps,
        &[line(
            "DELETED",
            &json!({"kind": "NetworkPolicy", "metadata": {"name": "gone"}}),
        )],
    );
    send(
        &ags,
        &[line(
            "DELETED",
            &json!({"kind": "AddressGroup", "metadata": {"name": "ag-old"}}),
        )],
    );
    send(&ags, &[line("MODIFIED", &obj(AG_PATCH, "ag"))]);
    send(&atgs, &[line("MODIFIED", &obj(ATG_PATCH, "ns/atg"))]);
    assert!(matches!(
        next(&mut stream, Kind::NetworkPolicy).await,
        PolicyUpdate::Delete { .. }
    ));
    assert!(matches!(
        next(&mut stream, Kind::AddressGroup).await,
        PolicyUpdate::Delete { .. }
    ));
    assert!(matches!(
        next(&mut stream, Kind::AddressGroup).await,
        PolicyUpdate::Patch { .. }
    ));
    assert!(matches!(
        next(&mut stream, Kind::AppliedToGroup).await,
        PolicyUpdate::Patch { .. }
    ));
    // Writes follow their update; one more round trip on each watch makes sure they are done.
    for (feed, kind, k) in [
        (&nps, "NetworkPolicy", Kind::NetworkPolicy),
        (&ags, "AddressGroup", Kind::AddressGroup),
        (&atgs, "AppliedToGroup", Kind::AppliedToGroup),
    ] {
        send(feed, &["garbage".to_string()]);
        assert!(
            matches!(next(&mut stream, k).await, PolicyUpdate::Error(_)),
            "{kind}"
        );
    }
    drop(stream);
    assert_eq!(
        dir_files(&store, Kind::NetworkPolicy),
        [format!("{np_name}.json")]
    );
    assert_eq!(dir_files(&store, Kind::AppliedToGroup), ["ns%2Fatg.json"]);
    assert_eq!(dir_files(&store, Kind::AddressGroup), ["ag.json"]);

    // Restart with the controller down: each kind's Replace comes from the store, patched.
    let down = FakeApi::new();
    down.set_default_error(|m, p| crate::k8s::api::ApiError::Transport {
        method: m.as_str(),
        path: p.into(),
        message: "connection refused".into(),
    });
    let mut stream = updates(&source(&down, Some(store.clone())));
    let patched_ag = json!({
        "kind": "AddressGroup", "apiVersion": API_VERSION,
        "metadata": {"name": "ag", "uid": "ag"},
        "groupMembers": [
            {"externalEntity": {"name": "vm2-e8be5", "namespace": "vm-ns"}, "ips": ["AAAAAAAAAAAAAP//rBBkBA=="]},
            {"pod": {"name": "front-7d9f", "namespace": "vm-ns"}, "ips": ["AAAAAAAAAAAAAP//CgoBBQ=="]}
        ]
    });
    let patched_atg = json!({
        "kind": "AppliedToGroup", "apiVersion": API_VERSION,
        "metadata": {"name": "ns/atg", "uid": "ns/atg"},
        "groupMembers": [{"externalEntity": {"name": "vm1-3e616", "namespace": "vm-ns"}}]
    });
    for (kind, expected) in [
        (Kind::NetworkPolicy, vec![valid(&np)]),
        (Kind::AppliedToGroup, vec![valid(&patched_atg)]),
        (Kind::AddressGroup, vec![valid(&patched_ag)]),
    ] {
        assert_eq!(
            next(&mut stream, kind).await,
            PolicyUpdate::Replace {
                kind,
                objects: expected
            }
        );
        assert_eq!(next(&mut stream, kind).await, connection(kind, false));
    }
    // The files hold the controller's JSON (members in identity order).
    let saved: Value = serde_json::from_slice(
        &std::fs::read(store.kind_dir(Kind::AddressGroup).unwrap().join("ag.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(saved["groupMembers"].as_array().unwrap().len(), 2);
    // The fallback is read once: later failures do not replay it.
    down.wait_for_watches(AGS, 3, T).await.unwrap();
    let replays = down.watch_paths(AGS).len();
    assert!(replays >= 3);
    // A connection that comes back replaces the fallback view.
    let back = down.watch_stream(AGS);
    send(&back, &[bookmark("AddressGroup")]);
    assert_eq!(
        next(&mut stream, Kind::AddressGroup).await,
        PolicyUpdate::Replace {
            kind: Kind::AddressGroup,
            objects: vec![]
        }
    );
    assert_eq!(
        next(&mut stream, Kind::AddressGroup).await,
        connection(Kind::AddressGroup, true)
    );
}

#[tokio::test]
async fn a_corrupt_fallback_file_is_reported_and_the_rest_loads() {
    let tmp = tempfile::tempdir().unwrap();
    let store = FallbackStore::new(tmp.path());
    let np: Value = serde_json::from_str(NP).unwrap();
    store.replace(Kind::NetworkPolicy, [("p", &np)]).unwrap();
    let corrupt = store.kind_dir(Kind::NetworkPolicy).unwrap().join("torn.json");
    std::fs::write(&corrupt, "{\"kind\":").unwrap();
    let api = FakeApi::new();
    let mut stream = updates(&source(&api, Some(store)));
    let PolicyUpdate::Error(e) = next(&mut stream, Kind::NetworkPolicy).await else {
        panic!()
    };
    let e = e.to_string();
    assert!(
        e.starts_with(&format!(
            "antrea-controller NetworkPolicy watch: fallback file {}: not JSON",
            corrupt.display()
        )),
        "{e}"
    );
    assert_eq!(
        next(&mut stream, Kind::NetworkPolicy).await,
        PolicyUpdate::Replace {
            kind: Kind::NetworkPolicy,
            objects: vec![valid(&np)]
        }
    );
    assert_eq!(
        next(&mut stream, Kind::NetworkPolicy).await,
        connection(Kind::NetworkPolicy, false)
    );
    // Kinds never saved give no Replace (nothing to enforce from), only "not connected".
    assert_eq!(
        next(&mut stream, Kind::AddressGroup).await,
        connection(Kind::AddressGroup, false)
    );
}
