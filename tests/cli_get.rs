//! `antrea-vm-agent get ...` (the built binary) against an agent API served in this process by
//! the real actors on fakes: every resource in table, JSON and YAML, ExternalEntity members, a
//! policy's rules with their counters, and the errors (unknown policy, no agent).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

mod api_support;

use std::process::Output;
use std::time::Duration;

use api_support::{eventually, start, ListenerSetup, World};

/// Runs the binary without blocking the actors (they run on this thread).
async fn get(w: &World, args: &[&str]) -> Output {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_antrea-vm-agent"));
    cmd.arg("get").args(args).arg("--socket").arg(w.socket());
    cmd.kill_on_drop(true);
    tokio::time::timeout(Duration::from_secs(30), cmd.output())
        .await
        .expect("get finished within 30 s")
        .expect("get ran")
}

async fn ok(w: &World, args: &[&str]) -> String {
    let out = get(w, args).await;
    assert!(
        out.status.success(),
        "get {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

async fn json(w: &World, args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let text = ok(w, &all).await;
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("get {args:?} -o json: {e}\n{text}"))
}

async fn yaml(w: &World, args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.extend(["-o", "yaml"]);
    let text = ok(w, &all).await;
    serde_norway::from_str(&text).unwrap_or_else(|e| panic!("get {args:?} -o yaml: {e}\n{text}"))
}

#[actix_rt::test]
async fn get_every_resource_in_every_format() {
    let w = start(ListenerSetup::default());
    w.sync_policy().await;
    eventually("metric flows installed", || async {
        w.metric_flows_of("drop-ssh").await.len() == 1
    })
    .await;
    let sw = w.switch.switch();
    for f in w.metric_flows_of("drop-ssh").await {
        sw.set_counters(&f.key(), 3, 180);
    }
    let ee = antrea_vm_agent::k8s::external_node::external_entity_name("vm1", "eth0");

    // networkpolicy
    let table = ok(&w, &["networkpolicy"]).await;
    let mut lines = table.lines();
    let header = lines.next().expect("header");
    for col in [
        "NAME",
        "APPLIED-TO",
        "RULES",
        "SOURCE",
        "TIER-PRIORITY",
        "PRIORITY",
    ] {
        assert!(header.contains(col), "{table}");
    }
    let row = lines.next().expect("row");
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells,
        [
            "uid-web",
            "atg-vm1",
            "2",
            "AntreaNetworkPolicy:vm-ns/web",
            "250",
            "5"
        ],
        "{table}"
    );
    let detail = ok(&w, &["networkpolicy", "web"]).await;
    let drop_row = detail
        .lines()
        .find(|l| l.starts_with("drop-ssh"))
        .unwrap_or_else(|| panic!("{detail}"));
    let cells: Vec<&str> = drop_row.split_whitespace().collect();
    assert_eq!(
        cells,
        [
            "drop-ssh",
            "In",
            "Drop",
            "10.0.0.0/8",
            "TCP/22",
            "Enforced",
            "3",
            "180",
            "3"
        ],
        "{detail}"
    );
    let allow_row = detail
        .lines()
        .find(|l| l.starts_with("allow-http"))
        .unwrap_or_else(|| panic!("{detail}"));
    assert!(
        allow_row.contains("AddressGroup:ag-clients") && allow_row.contains("TCP/80"),
        "{detail}"
    );
    let j = json(&w, &["networkpolicy", "web"]).await;
    assert_eq!(j[0]["rules"][1]["stats"]["packets"], 3);
    assert_eq!(j[0]["rules"][1]["state"], "Enforced");
    let y = yaml(&w, &["networkpolicy"]).await;
    assert_eq!(y[0]["sourceRef"]["name"], "web");
    let y = yaml(&w, &["np", "uid-web"]).await;
    assert_eq!(y[0]["rules"][1]["stats"]["bytes"], 180);

    // appliedtogroup: ExternalEntity members in every format (upstream antctl panics on them).
    let table = ok(&w, &["appliedtogroup"]).await;
    assert!(table.starts_with("NAME"), "{table}");
    assert!(
        table.contains(&format!("atg-vm1   ExternalEntity vm-ns/{ee}")),
        "{table}"
    );
    let j = json(&w, &["appliedtogroup", "atg-vm1"]).await;
    assert_eq!(j[0]["members"][0]["kind"], "ExternalEntity");
    assert_eq!(j[0]["members"][0]["name"], ee.as_str());
    let y = yaml(&w, &["appliedtogroup"]).await;
    assert_eq!(y[0]["members"][0]["namespace"], "vm-ns");

    // addressgroup
    let table = ok(&w, &["addressgroup"]).await;
    let row = table.lines().nth(1).expect("row");
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>(),
        ["ag-clients", "10.0.0.9", "ExternalEntity", "vm-ns/client-1"],
        "{table}"
    );
    assert_eq!(
        json(&w, &["addressgroup"]).await[0]["members"][0]["ips"][0],
        "10.0.0.9"
    );
    assert_eq!(yaml(&w, &["ag", "ag-clients"]).await[0]["name"], "ag-clients");

    // ovsflows, all and one policy's.
    let all = ok(&w, &["ovsflows"]).await;
    assert_eq!(all.lines().count(), w.switch.flows().len());
    let web = ok(&w, &["ovsflows", "--policy", "web"]).await;
    assert!(web.lines().count() > 0 && web.lines().count() < all.lines().count());
    assert!(web.lines().all(|l| all.lines().any(|a| a == l)));
    assert_eq!(ok(&w, &["ovsflows", "web"]).await, web);
    let j = json(&w, &["ovsflows", "--policy", "web"]).await;
    assert_eq!(j["flows"].as_array().map(Vec::len), Some(web.lines().count()));
    assert_eq!(yaml(&w, &["ovsflows", "--policy", "web"]).await["policy"], "web");

    // agentinfo
    let table = ok(&w, &["agentinfo"]).await;
    let row = table.lines().nth(1).expect("row");
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        &cells[..7],
        ["vm1", "Healthy", "true", "1", "1", "1", "1"],
        "{table}"
    );
    assert!(table.contains("flow-installer"), "{table}");
    assert_eq!(json(&w, &["agentinfo"]).await["status"], "Healthy");
    assert_eq!(yaml(&w, &["agentinfo"]).await["nodeName"], "vm1");

    // interfaces
    let table = ok(&w, &["interfaces"]).await;
    let row = table.lines().nth(1).expect("row");
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[0], "eth0");
    assert_eq!(cells[2], "eth0~");
    assert_eq!(cells[4], "10.0.0.2");
    assert_eq!(cells[5], format!("vm-ns/{ee}"));
    assert_eq!(json(&w, &["interfaces"]).await[0]["uplinkName"], "eth0~");
    assert_eq!(yaml(&w, &["interfaces", "eth0"]).await[0]["name"], "eth0");

    // Errors: exit code 1 with a clear message.
    let out = get(&w, &["networkpolicy", "nope"]).await;
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("NetworkPolicy \"nope\" not found"), "{err}");
    assert!(out.stdout.is_empty());
    let out = get(&w, &["ovsflows", "--policy", "nope", "-o", "json"]).await;
    assert_eq!(out.status.code(), Some(1));
    let out = get(&w, &["appliedtogroup", "nope"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("AppliedToGroup \"nope\" not found"));
    w.shutdown().await;
}

#[test]
fn get_without_an_agent_fails_clearly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("none.sock");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_antrea-vm-agent"))
        .args(["get", "agentinfo", "--socket"])
        .arg(&socket)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot connect to the agent API at"), "{err}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_antrea-vm-agent"))
        .args(["get", "bogus"])
        .output()
        .expect("run");
    assert!(!out.status.success());
}
