//! The agent's HTTP side against the real actors on fakes: `/livez`, `/readyz` before and after
//! the first sync, `/metrics` (exact per-rule series from faked switch counters, series gone
//! after the rule is deleted, bearer token, TLS), and every agent API endpoint on the unix socket.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

mod api_support;

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

use antrea_vm_agent::actors::supervisor::GetPeers;
use antrea_vm_agent::messages::Crash;
use antrea_vm_agent::ovs::openflow::ct_state;
use antrea_vm_agent::sources::{SourceError, SourceEvent};
use api_support::{eventually, external_node, policy_yaml, series, start, ListenerSetup, World};

const ALLOW_LABELS: &str = "{policy_type=\"AntreaNetworkPolicy\",policy_namespace=\"vm-ns\",policy_name=\"web\",\
     policy_uid=\"uid-web\",rule_name=\"allow-http\",direction=\"Ingress\",action=\"Allow\",tier=\"Application\"}";
const DROP_LABELS: &str = "{policy_type=\"AntreaNetworkPolicy\",policy_namespace=\"vm-ns\",policy_name=\"web\",\
     policy_uid=\"uid-web\",rule_name=\"drop-ssh\",direction=\"Ingress\",action=\"Drop\",tier=\"Application\"}";

/// Attaches eth0, installs the policy and fakes counters on its metric flows: allow-http gets
/// 5 packets/500 bytes on its `+new` flow and 7/700 on its `-new` flow (so 12 packets, 1200
/// bytes, 5 sessions), drop-ssh 3/180 (3 sessions).
async fn synced_world_with_counters(w: &World) {
    w.sync_policy().await;
    // Allow rules have a `+new` and a `-new` metric flow per IP family, Drop rules one flow.
    eventually("metric flows of both rules installed", || async {
        w.metric_flows_of("allow-http").await.len() >= 2 && w.metric_flows_of("drop-ssh").await.len() == 1
    })
    .await;
    let sw = w.switch.switch();
    let ipv4 = |f: &antrea_vm_agent::ovs::openflow::Flow| f.matches.eth_type == Some(0x0800);
    for f in w.metric_flows_of("allow-http").await.into_iter().filter(ipv4) {
        let new = f.matches.ct_state.is_some_and(|s| s.value & ct_state::NEW != 0);
        if new {
            sw.set_counters(&f.key(), 5, 500);
        } else {
            sw.set_counters(&f.key(), 7, 700);
        }
    }
    for f in w.metric_flows_of("drop-ssh").await {
        sw.set_counters(&f.key(), 3, 180);
    }
}

#[actix_rt::test]
async fn health_metrics_and_agent_api() {
    let w = start(ListenerSetup::default());
    assert!(w.server_errors.is_empty(), "{:?}", w.server_errors);
    // The ExternalNode cannot be read yet: alive, not ready.
    w.source.set(SourceEvent::Error(SourceError::ExternalNodeFile {
        path: "en.yaml".into(),
        problem: "not yet".into(),
    }));
    eventually("live", || async { w.get_tcp("/livez", &[]).await.status == 200 }).await;
    let live = w.get_tcp("/livez", &[]).await;
    for actor in [
        "supervisor",
        "flow-installer",
        "policy-cache",
        "interface-manager",
        "external-node-watcher",
    ] {
        assert!(live.body.contains(&format!("[+]{actor} ok")), "{}", live.body);
    }
    assert!(live.body.ends_with("livez check passed\n"));
    let not_ready = w.get_tcp("/readyz", &[]).await;
    assert_eq!(not_ready.status, 503, "{}", not_ready.body);
    assert!(
        not_ready
            .body
            .contains("[-]external-node failed: the ExternalNode has not been read yet"),
        "{}",
        not_ready.body
    );
    let m = series(&w.get_tcp("/metrics", &[]).await.body);
    assert_eq!(m.get("antrea_vm_agent_ready").map(String::as_str), Some("0"));

    synced_world_with_counters(&w).await;
    let ready = w.get_tcp("/readyz", &[]).await;
    assert_eq!(ready.status, 200, "{}", ready.body);
    assert!(ready.body.contains("[+]flows ok"));

    // /metrics: exact per-rule series, upstream's gauges, ours.
    let page = w.get_tcp("/metrics", &[]).await;
    assert_eq!(page.status, 200);
    let m = series(&page.body);
    let get = |k: &str| {
        m.get(k)
            .cloned()
            .unwrap_or_else(|| panic!("no series {k} in\n{}", page.body))
    };
    assert_eq!(
        get(&format!("antrea_vm_agent_rule_packets_total{ALLOW_LABELS}")),
        "12"
    );
    assert_eq!(
        get(&format!("antrea_vm_agent_rule_bytes_total{ALLOW_LABELS}")),
        "1200"
    );
    assert_eq!(
        get(&format!("antrea_vm_agent_rule_sessions_total{ALLOW_LABELS}")),
        "5"
    );
    assert_eq!(
        get(&format!("antrea_vm_agent_rule_packets_total{DROP_LABELS}")),
        "3"
    );
    assert_eq!(
        get(&format!("antrea_vm_agent_rule_bytes_total{DROP_LABELS}")),
        "180"
    );
    assert_eq!(
        get(&format!("antrea_vm_agent_rule_sessions_total{DROP_LABELS}")),
        "3"
    );
    assert_eq!(get("antrea_agent_denied_connection_count"), "3");
    assert_eq!(get("antrea_agent_networkpolicy_count"), "1");
    assert_eq!(get("antrea_agent_ingress_networkpolicy_rule_count"), "2");
    assert_eq!(get("antrea_agent_egress_networkpolicy_rule_count"), "0");
    assert_eq!(get("antrea_vm_agent_networkpolicy_effective_rule_count"), "2");
    assert_eq!(get("antrea_vm_agent_interfaces_attached"), "1");
    assert_eq!(get("antrea_vm_agent_ready"), "1");
    assert_eq!(get("antrea_agent_local_pod_count"), "0");
    assert_eq!(get("antrea_vm_agent_actor_up{actor=\"flow-installer\"}"), "1");
    assert_eq!(
        get("antrea_vm_agent_actor_restarts_total{actor=\"policy-cache\"}"),
        "0"
    );
    let total: u64 = get("antrea_agent_ovs_total_flow_count").parse().expect("number");
    let per_table: u64 = m
        .iter()
        .filter(|(k, _)| k.starts_with("antrea_agent_ovs_flow_count{"))
        .map(|(_, v)| v.parse::<u64>().expect("number"))
        .sum();
    assert_eq!(
        total,
        per_table,
        "{}",
        page.body
            .lines()
            .filter(|l| l.contains("ovs_flow_count"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let installed = {
        let peers = w.supervisor.send(GetPeers).await.expect("supervisor");
        let flows = peers.flows.expect("flow installer");
        flows
            .send(antrea_vm_agent::actors::flow_installer::GetInstalledFlows)
            .await
            .expect("installed flows")
    };
    assert_eq!(total as usize, installed.len());
    assert_eq!(total as usize, w.switch.flows().len());
    assert!(m.contains_key("antrea_agent_ovs_flow_count{table_id=\"13\",table_name=\"IngressMetric\"}"));
    assert!(
        !m.contains_key("antrea_vm_agent_controller_connected"),
        "standalone: no controller"
    );
    assert!(page
        .body
        .contains("# TYPE antrea_agent_ovs_flow_ops_count counter"));

    // The agent API.
    let list = w.get_api("/networkpolicies").await;
    assert_eq!(list.status, 200);
    let list = list.json();
    assert_eq!(list[0]["name"], "uid-web");
    assert_eq!(list[0]["sourceRef"]["name"], "web");
    assert!(
        list[0]["rules"][0].get("stats").is_none(),
        "the list has no counters"
    );
    let one = w.get_api("/networkpolicies?name=vm-ns/web").await.json();
    assert_eq!(one.as_array().map(Vec::len), Some(1));
    assert_eq!(one[0]["rules"][0]["name"], "allow-http");
    assert_eq!(one[0]["rules"][0]["services"][0], "TCP/80");
    assert_eq!(one[0]["rules"][0]["from"]["addressGroups"][0], "ag-clients");
    assert_eq!(
        one[0]["rules"][0]["stats"],
        serde_json::json!({"packets": 12, "bytes": 1200, "sessions": 5})
    );
    assert_eq!(
        one[0]["rules"][1]["stats"],
        serde_json::json!({"packets": 3, "bytes": 180, "sessions": 3})
    );
    let missing = w.get_api("/networkpolicies?name=nope").await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.json()["error"], "NetworkPolicy \"nope\" not found");

    let ee = antrea_vm_agent::k8s::external_node::external_entity_name("vm1", "eth0");
    let atg = w.get_api("/appliedtogroups").await.json();
    assert_eq!(atg[0]["name"], "atg-vm1");
    assert_eq!(
        atg[0]["members"][0],
        serde_json::json!({"kind": "ExternalEntity", "namespace": "vm-ns", "name": ee})
    );
    let ag = w.get_api("/addressgroups?name=ag-clients").await.json();
    assert_eq!(ag[0]["members"][0]["ips"][0], "10.0.0.9");
    assert_eq!(w.get_api("/addressgroups?name=nope").await.status, 404);

    let all = w.get_api("/ovsflows").await.json();
    let all_flows = all["flows"].as_array().expect("flows").len();
    assert_eq!(
        all_flows,
        w.switch.flows().len(),
        "{all:#}\n{:#?}",
        w.switch
            .flows()
            .iter()
            .map(|f| (f.table, f.priority))
            .collect::<Vec<_>>()
    );
    let web = w.get_api("/ovsflows?policy=web").await.json();
    let ids = web["conjunctionIds"].as_array().expect("ids").clone();
    assert_eq!(ids.len(), 2, "{web}");
    let web_flows: Vec<String> = web["flows"]
        .as_array()
        .expect("flows")
        .iter()
        .filter_map(|f| f.as_str().map(str::to_string))
        .collect();
    assert!(!web_flows.is_empty() && web_flows.len() < all_flows);
    // Built from the policy's flow groups only, yet each flow exactly as in the full dump (a
    // shared clause flow names the group's other rules too).
    let all_rendered: std::collections::BTreeSet<&str> = all["flows"]
        .as_array()
        .expect("flows")
        .iter()
        .filter_map(|f| f.as_str())
        .collect();
    for f in &web_flows {
        assert!(all_rendered.contains(f.as_str()), "{f} not in the full dump");
    }
    for id in &ids {
        assert!(
            web_flows.iter().any(|f| f.contains(&format!("conj_id={id}"))),
            "action flow of conjunction {id} in {web_flows:#?}"
        );
    }
    assert!(
        web_flows.iter().any(|f| f.contains("table=IngressMetric")),
        "{web_flows:#?}"
    );
    assert_eq!(w.get_api("/ovsflows?policy=nope").await.status, 404);

    let info = w.get_api("/agentinfo").await.json();
    assert_eq!(info["nodeName"], "vm1");
    assert_eq!(info["status"], "Healthy", "{info}");
    assert_eq!(info["ready"], true);
    assert_eq!(info["networkPolicies"], 1);
    assert_eq!(info["interfaces"], 1);
    assert_eq!(info["actors"].as_array().map(Vec::len), Some(5));

    let ifs = w.get_api("/interfaces").await.json();
    assert_eq!(ifs[0]["name"], "eth0");
    assert_eq!(ifs[0]["uplinkName"], "eth0~");
    assert_eq!(ifs[0]["ips"][0], "10.0.0.2");
    assert_eq!(ifs[0]["externalEntity"]["name"], ee);

    // The API is root-only.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(w.socket())
        .expect("socket")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);

    // A rule deleted: its series disappear, the other rule's stay.
    w.write_policies(&policy_yaml(false));
    eventually("drop-ssh series gone", || async {
        let body = w.get_tcp("/metrics", &[]).await.body;
        !body.contains("rule_name=\"drop-ssh\"") && body.contains("rule_name=\"allow-http\"")
    })
    .await;
    let m = series(&w.get_tcp("/metrics", &[]).await.body);
    assert_eq!(
        m.get(&format!("antrea_vm_agent_rule_packets_total{ALLOW_LABELS}"))
            .map(String::as_str),
        Some("12")
    );
    assert_eq!(
        m.get("antrea_agent_denied_connection_count").map(String::as_str),
        Some("0")
    );

    // An actor restarting: scrapes still answer, and the restart is counted.
    let peers = w.supervisor.send(GetPeers).await.expect("supervisor");
    peers.policy.expect("policy cache").do_send(Crash("test".into()));
    let during = w.get_tcp("/metrics", &[]).await;
    assert_eq!(during.status, 200);
    eventually("restart counted", || async {
        let m = series(&w.get_tcp("/metrics", &[]).await.body);
        m.get("antrea_vm_agent_actor_restarts_total{actor=\"policy-cache\"}")
            .map(String::as_str)
            == Some("1")
    })
    .await;
    eventually("live again", || async {
        w.get_tcp("/livez", &[]).await.status == 200
    })
    .await;
    w.shutdown().await;
}

/// A blocking HTTPS GET trusting only `cert_der`.
fn https_get(
    addr: std::net::SocketAddr,
    cert_der: Vec<u8>,
    path: &str,
    token: Option<&str>,
) -> (u16, String) {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from(cert_der))
        .expect("root");
    let config =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let conn = rustls::ClientConnection::new(Arc::new(config), name).expect("client");
    let tcp = std::net::TcpStream::connect(addr).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n");
    tls.write_all(req.as_bytes()).expect("write");
    let mut raw = Vec::new();
    // The server may close without close_notify; what was read is the answer.
    let _ = tls.read_to_end(&mut raw);
    let r = antrea_vm_agent::cli::client::parse_response(&raw).expect("response");
    (r.status, String::from_utf8_lossy(&r.body).into_owned())
}

#[actix_rt::test]
async fn metrics_over_tls_require_the_bearer_token() {
    let w = start(ListenerSetup {
        token: Some("s3cret-token".into()),
        tls: true,
    });
    assert!(w.server_errors.is_empty(), "{:?}", w.server_errors);
    assert!(w.server.as_ref().is_some_and(|s| s.metrics_tls));
    w.source.set(external_node());
    let addr = w.metrics_address();
    let cert = w.cert_der.clone().expect("cert");
    let ask = |path: &'static str, token: Option<&'static str>| {
        let cert = cert.clone();
        tokio::task::spawn_blocking(move || https_get(addr, cert, path, token))
    };
    let (status, _) = ask("/metrics", None).await.expect("join");
    assert_eq!(status, 401);
    let (status, _) = ask("/metrics", Some("wrong")).await.expect("join");
    assert_eq!(status, 401);
    let (status, body) = ask("/metrics", Some("s3cret-token")).await.expect("join");
    assert_eq!(status, 200);
    assert!(body.contains("antrea_agent_local_pod_count 0"), "{body}");
    // Health stays open, like upstream's always-allow paths.
    let (status, body) = ask("/livez", None).await.expect("join");
    assert_eq!(status, 200, "{body}");
    // Plain HTTP is not served on a TLS listener.
    let plain = tokio::time::timeout(Duration::from_secs(10), async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw).await;
        Some(raw)
    })
    .await
    .expect("answer or close within 10 s")
    .unwrap_or_default();
    assert!(
        !String::from_utf8_lossy(&plain).contains("livez check"),
        "plain HTTP answered"
    );
    // The unix socket's API needs no token.
    assert_eq!(w.get_api("/metrics").await.status, 200);
    w.shutdown().await;
}

/// Enforce or refuse through the real policy cache: rules it cannot enforce as written are
/// installed fail-closed, shown per rule on `/networkpolicies`, counted by reason on `/metrics`,
/// and a change of them reaches the API at once; a named port without a protocol takes the
/// member's.
#[actix_rt::test]
async fn rules_not_enforced_as_written_are_reported_by_the_policy_cache() {
    let w = start(ListenerSetup::default());
    w.source.set(external_node());
    let ee = antrea_vm_agent::k8s::external_node::external_entity_name("vm1", "eth0");
    let policy = |extra_rule: &str| {
        format!(
            "apiVersion: controlplane.antrea.io/v1beta2\nkind: AppliedToGroup\nmetadata: {{name: atg-vm1}}\n\
             groupMembers: [{{externalEntity: {{name: {ee}, namespace: vm-ns}}, \
             ports: [{{name: mdns, port: 5353, protocol: UDP}}]}}]\n---\n\
             apiVersion: controlplane.antrea.io/v1beta2\nkind: NetworkPolicy\nmetadata: {{name: uid-web, uid: uid-web}}\n\
             sourceRef: {{type: AntreaNetworkPolicy, namespace: vm-ns, name: web, uid: uid-web}}\n\
             appliedToGroups: [atg-vm1]\npriority: 5\ntierPriority: 250\nrules:\n\
             - {{direction: In, name: allow-ok, from: {{ipBlocks: [{{cidr: 10.0.0.0/8}}]}}, \
             services: [{{protocol: TCP, port: 8080}}], l7Protocols: [{{http: {{method: GET, path: /ok}}}}], action: Allow, priority: 0}}\n\
             - {{direction: In, name: drop-mdns, from: {{ipBlocks: [{{cidr: 10.0.0.0/8}}]}}, \
             services: [{{port: mdns}}], action: Drop, priority: 1}}\n{extra_rule}"
        )
    };
    w.write_policies(&policy(
        "- {direction: Out, name: to-db, to: {toServices: [{namespace: vm-ns, name: db}]}, action: Allow, priority: 0}\n",
    ));
    eventually("ready", || w.ready()).await;
    eventually("three rules effective", || async {
        let a = w.get_api("/networkpolicies").await;
        a.status == 200 && a.json()[0]["effectiveRules"] == 3
    })
    .await;
    let j = w.get_api("/networkpolicies").await.json();
    let rules = &j[0]["rules"];
    assert_eq!(rules[0]["state"], "NotEnforcedAsWritten", "{j}");
    assert_eq!(rules[0]["l7Protocols"][0], "HTTP method=GET path=/ok", "{j}");
    assert_eq!(rules[1]["state"], "Enforced", "{j}");
    assert_eq!(rules[1]["services"][0], "ANY/mdns", "{j}");
    assert_eq!(rules[2]["state"], "NotEnforcedAsWritten", "{j}");
    assert!(
        rules[2]["notEnforced"][0]
            .as_str()
            .is_some_and(|m| m.starts_with("rule \"to-db\" (rules[2]): toServices peers (vm-ns/db)")),
        "{j}"
    );
    let metrics = series(&w.get_tcp("/metrics", &[]).await.body);
    assert_eq!(
        metrics
            .get("antrea_vm_agent_rules_not_enforced{reason=\"l7_protocols\"}")
            .map(String::as_str),
        Some("1")
    );
    assert_eq!(
        metrics
            .get("antrea_vm_agent_rules_not_enforced{reason=\"to_services\"}")
            .map(String::as_str),
        Some("1")
    );
    // The switch: the named port is UDP 5353, not TCP.
    let port_5353 = |proto: u8| {
        w.switch
            .flows()
            .iter()
            .any(|f| f.matches.ip_proto == Some(proto) && f.matches.tp_dst.is_some_and(|p| p.value == 5353))
    };
    eventually("the UDP 5353 flow", || async { port_5353(17) }).await;
    assert!(!port_5353(6), "no TCP 5353");

    // The toServices rule removed: only the L7 rule is left not enforced as written. A second policy
    // applied to an ExternalEntity with no attached interface here gets no flows (no inert rule)
    // and its rule shows `NotApplied`.
    let elsewhere = "---\napiVersion: controlplane.antrea.io/v1beta2\nkind: AppliedToGroup\n\
                     metadata: {name: atg-other}\ngroupMembers: [{externalEntity: {name: other-vm, namespace: vm-ns}}]\n\
                     ---\napiVersion: controlplane.antrea.io/v1beta2\nkind: NetworkPolicy\n\
                     metadata: {name: uid-other, uid: uid-other}\nappliedToGroups: [atg-other]\n\
                     rules: [{direction: In, name: deny-all, action: Drop, l7Protocols: [{tls: {sni: x.example.com}}]}]\n";
    w.write_policies(&format!("{}{elsewhere}", policy("")));
    eventually("the other policy is held", || async {
        w.get_api("/networkpolicies")
            .await
            .json()
            .as_array()
            .is_some_and(|a| a.len() == 2)
    })
    .await;
    let j = w.get_api("/networkpolicies").await.json();
    let other = j
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == "uid-other"))
        .expect("uid-other");
    assert_eq!(other["effectiveRules"], 0, "{j}");
    assert_eq!(other["rules"][0]["state"], "NotApplied", "{j}");
    assert!(
        other["rules"][0].get("notEnforced").is_none(),
        "not applied here: {j}"
    );
    eventually("the toServices rule is gone from the gauge", || async {
        let m = series(&w.get_tcp("/metrics", &[]).await.body);
        m.get("antrea_vm_agent_rules_not_enforced{reason=\"to_services\"}")
            .map(String::as_str)
            == Some("0")
    })
    .await;
    let metrics = series(&w.get_tcp("/metrics", &[]).await.body);
    assert_eq!(
        metrics
            .get("antrea_vm_agent_rules_not_enforced{reason=\"l7_protocols\"}")
            .map(String::as_str),
        Some("1")
    );
    w.shutdown().await;
}
