//! Shared by tests/api.rs and tests/cli_get.rs: the five actors under the supervisor on fakes
//! (host, OVSDB, OpenFlow switch, ExternalNode source) with policies from a temporary policy
//! directory, plus the agent's HTTP listeners (metrics on 127.0.0.1:0, the agent API on a socket
//! in the temporary directory), and small HTTP helpers. The fakes come from tests/fake_world/.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, Addr};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use antrea_vm_agent::actors::flow_installer::query::GetFlowDump;
use antrea_vm_agent::actors::supervisor::{GetPeers, Shutdown};
use antrea_vm_agent::actors::{Deps, Supervisor, Timing};
use antrea_vm_agent::api::handlers::ApiState;
use antrea_vm_agent::api::server::{ApiServer, ServerError, ServerOptions};
use antrea_vm_agent::cli::client::parse_response;
use antrea_vm_agent::config::Config;
use antrea_vm_agent::host::fake::FakeHost;
use antrea_vm_agent::k8s::external_node::external_entity_name;
use antrea_vm_agent::ovs::openflow::fake::FakeConnector;
use antrea_vm_agent::ovs::ovsdb::fake::FakeOvsdb;
use antrea_vm_agent::policy::pipeline::table;
use antrea_vm_agent::sources::fake::FakeSource;
use antrea_vm_agent::sources::policy_dir::PolicyDirSource;
use antrea_vm_agent::sources::{PolicySource, SourceEvent};
use antrea_vm_agent::telemetry::AgentMetrics;

#[path = "../fake_world/mod.rs"]
mod fake_world;

pub use fake_world::eventually;
use fake_world::Fakes;

/// The policy used by the tests: one AntreaNetworkPolicy `vm-ns/web` applied to the VM's
/// ExternalEntity, with an Allow rule from an AddressGroup and a Drop rule from a CIDR.
pub fn policy_yaml(with_drop_rule: bool) -> String {
    let ee = external_entity_name("vm1", "eth0");
    let drop = if with_drop_rule {
        "- {direction: In, name: drop-ssh, from: {ipBlocks: [{cidr: 10.0.0.0/8}]}, \
         services: [{protocol: TCP, port: 22}], action: Drop, priority: 1}\n"
    } else {
        ""
    };
    format!(
        "apiVersion: controlplane.antrea.io/v1beta2\nkind: AppliedToGroup\nmetadata: {{name: atg-vm1}}\n\
         groupMembers: [{{externalEntity: {{name: {ee}, namespace: vm-ns}}}}]\n---\n\
         apiVersion: controlplane.antrea.io/v1beta2\nkind: AddressGroup\nmetadata: {{name: ag-clients}}\n\
         groupMembers: [{{externalEntity: {{name: client-1, namespace: vm-ns}}, ips: [\"10.0.0.9\"]}}]\n---\n\
         apiVersion: controlplane.antrea.io/v1beta2\nkind: NetworkPolicy\nmetadata: {{name: uid-web, uid: uid-web}}\n\
         sourceRef: {{type: AntreaNetworkPolicy, namespace: vm-ns, name: web, uid: uid-web}}\n\
         appliedToGroups: [atg-vm1]\npriority: 5\ntierPriority: 250\nrules:\n\
         - {{direction: In, name: allow-http, from: {{addressGroups: [ag-clients]}}, \
         services: [{{protocol: TCP, port: 80}}], action: Allow, priority: 0}}\n{drop}"
    )
}

/// The ExternalNode `vm-ns/vm1` with eth0 at 10.0.0.2.
pub fn external_node() -> SourceEvent {
    fake_world::external_node(&["10.0.0.2"])
}

/// Extra configuration of the metrics listener.
#[derive(Default)]
pub struct ListenerSetup {
    pub token: Option<String>,
    /// Serve TLS with a fresh self-signed certificate for `localhost`; its DER is kept.
    pub tls: bool,
}

pub struct World {
    pub dir: tempfile::TempDir,
    pub host: Arc<FakeHost>,
    pub ovsdb: Arc<FakeOvsdb>,
    pub switch: Arc<FakeConnector>,
    pub source: FakeSource,
    pub supervisor: Addr<Supervisor>,
    pub server: Option<ApiServer>,
    pub server_errors: Vec<ServerError>,
    pub metrics: AgentMetrics,
    pub socket: PathBuf,
    /// DER of the metrics listener's certificate when TLS is on.
    pub cert_der: Option<Vec<u8>>,
}

/// Starts the actors and the listeners. Policies are read from `<dir>/policies` (written by
/// the caller with [`World::write_policies`]).
pub fn start(setup: ListenerSetup) -> World {
    let dir = tempfile::tempdir().expect("tempdir");
    let policies = dir.path().join("policies");
    std::fs::create_dir_all(&policies).expect("policy dir");
    let socket = dir.path().join("run/agent.sock");
    let mut metrics_server = "  bindAddress: 127.0.0.1:0\n".to_string();
    let mut cert_der = None;
    if let Some(token) = &setup.token {
        let path = dir.path().join("token");
        std::fs::write(&path, format!("{token}\n")).expect("token file");
        metrics_server.push_str(&format!("  bearerTokenFile: {}\n", path.display()));
    }
    if setup.tls {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("cert");
        let (crt, key) = (dir.path().join("m.crt"), dir.path().join("m.key"));
        std::fs::write(&crt, cert.cert.pem()).expect("write cert");
        std::fs::write(&key, cert.signing_key.serialize_pem()).expect("write key");
        cert_der = Some(cert.cert.der().to_vec());
        metrics_server.push_str(&format!(
            "  tlsCertFile: {}\n  tlsKeyFile: {}\n",
            crt.display(),
            key.display()
        ));
    }
    let d = dir.path().display();
    let yaml = format!(
        "nodeType: externalNode\nfeatureGates: {{ExternalNode: true}}\novsDatapathType: netdev\n\
         externalNode: {{externalNodeNamespace: vm-ns}}\n\
         standalone: {{externalNodeFile: {d}/en.yaml, policyDir: {d}/policies}}\nstateDir: {d}\n\
         auditLogging: {{logDir: {d}/audit}}\nmetricsServer:\n{metrics_server}agentAPI: {{socket: {}}}\n",
        socket.display()
    );
    let config = Config::from_yaml_str(&yaml).expect("test config");
    let options = ServerOptions::from_config(&config);
    let host = fake_world::vm_host();
    let ovsdb = fake_world::joined_ovsdb(&host);
    let fakes = Fakes::new(host, ovsdb);
    let deps = Deps {
        policy_source: Some(
            Arc::new(PolicyDirSource::new(&policies, Duration::from_millis(50))) as Arc<dyn PolicySource>,
        ),
        ..fakes.deps(
            config,
            Timing {
                report_interval: Duration::from_millis(200),
                ..fake_world::fast_timing()
            },
        )
    };
    let Fakes {
        host,
        ovsdb,
        switch,
        source,
        metrics,
        ..
    } = fakes;
    let supervisor = Supervisor::new(deps).start();
    let (server, server_errors) = ApiServer::start(
        &options,
        ApiState {
            supervisor: supervisor.clone(),
            metrics: metrics.clone(),
            node_name: "vm1".into(),
            namespace: "vm-ns".into(),
            ovs_bridge: "br-int".into(),
            fqdn: Default::default(),
            vswitchd: None,
        },
    );
    World {
        dir,
        host,
        ovsdb,
        switch,
        source,
        supervisor,
        server: Some(server),
        server_errors,
        metrics,
        socket,
        cert_der,
    }
}

/// A GET answer.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub body: String,
}

impl Answer {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

async fn exchange<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut s: S,
    path: &str,
    headers: &[(&str, &str)],
) -> Answer {
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let io = async {
        s.write_all(req.as_bytes()).await?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    let raw = tokio::time::timeout(Duration::from_secs(20), io)
        .await
        .expect("HTTP answer within 20 s")
        .expect("HTTP exchange");
    let r = parse_response(&raw).expect("HTTP response");
    Answer {
        status: r.status,
        body: String::from_utf8_lossy(&r.body).into_owned(),
    }
}

impl World {
    pub fn metrics_address(&self) -> SocketAddr {
        self.server
            .as_ref()
            .and_then(|s| s.metrics_address)
            .expect("metrics listener running")
    }

    pub fn write_policies(&self, yaml: &str) {
        let dir = self.dir.path().join("policies");
        let tmp = dir.join(".web.yaml.tmp");
        std::fs::write(&tmp, yaml).expect("write policy");
        std::fs::rename(&tmp, dir.join("web.yaml")).expect("rename policy");
    }

    /// GET over plain HTTP on the metrics listener.
    pub async fn get_tcp(&self, path: &str, headers: &[(&str, &str)]) -> Answer {
        let s = tokio::net::TcpStream::connect(self.metrics_address())
            .await
            .expect("connect");
        exchange(s, path, headers).await
    }

    /// GET on the agent API socket.
    pub async fn get_api(&self, path: &str) -> Answer {
        let s = tokio::net::UnixStream::connect(&self.socket)
            .await
            .expect("connect to the API socket");
        exchange(s, path, &[]).await
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Attached, policies known and flows committed.
    pub async fn ready(&self) -> bool {
        self.get_api("/readyz").await.status == 200
    }

    /// Announces eth0, writes [`policy_yaml`] with both rules and waits until the agent is
    /// ready and the policy's two rules are effective.
    pub async fn sync_policy(&self) {
        self.source.set(external_node());
        self.write_policies(&policy_yaml(true));
        eventually("ready", || self.ready()).await;
        eventually("both rules effective", || async {
            let a = self.get_api("/networkpolicies").await;
            a.status == 200 && a.json()[0]["effectiveRules"] == 2
        })
        .await;
    }

    /// The metric flows of the rule named `rule` (from the installer's conjunctions).
    pub async fn metric_flows_of(&self, rule: &str) -> Vec<antrea_vm_agent::ovs::openflow::Flow> {
        let peers = self.supervisor.send(GetPeers).await.expect("supervisor");
        let dump = peers
            .flows
            .expect("flow installer")
            .send(GetFlowDump::default())
            .await
            .expect("dump");
        let ids: std::collections::BTreeSet<u32> = dump
            .conjunctions
            .iter()
            .filter(|c| c.rule_name == rule)
            .map(|c| c.conj_id)
            .collect();
        assert!(!ids.is_empty(), "rule {rule} has a conjunction");
        self.switch
            .flows()
            .into_iter()
            .filter(|f| f.table == table::INGRESS_METRIC || f.table == table::EGRESS_METRIC)
            .filter(|f| antrea_vm_agent::api::handlers::is_rule_flow(f, &ids))
            .collect()
    }

    pub async fn shutdown(mut self) {
        if let Some(s) = self.server.take() {
            s.stop().await;
        }
        let _ = self.supervisor.send(Shutdown).await;
    }
}

/// Parses the Prometheus text: series (`name{labels}`) → value.
pub fn series(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
