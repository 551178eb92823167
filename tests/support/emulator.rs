//! Test helpers around the in-process kube-apiserver + antrea-controller emulator
//! (`antrea_api_emulator`): start one with its kubeconfigs in a temp dir, build kube-rs
//! clients from kubeconfigs, send raw requests, read JSON watch streams line by line with
//! timeouts, and build ExternalNode / controlplane objects in the exact wire shape.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::io::{AsyncBufReadExt, Lines};
use futures::{AsyncBufRead, StreamExt};
use serde_json::{json, Value};

pub use antrea_api_emulator::{CpResource, Emulator, EmulatorOptions, RecordedCall};

/// Namespace of the agent's ServiceAccount in the bundled RBAC manifests.
pub const VM_NS: &str = "vm-ns";

/// A started emulator plus the temp dir holding the agent's kubeconfigs.
pub struct EmulatorEnv {
    pub emu: Emulator,
    pub dir: tempfile::TempDir,
    /// `antrea-agent.kubeconfig` (kube-apiserver).
    pub kube_kubeconfig: PathBuf,
    /// `antrea-agent.antrea.kubeconfig` (antrea-controller).
    pub antrea_kubeconfig: PathBuf,
    /// `admin.kubeconfig`.
    pub admin_kubeconfig: PathBuf,
}

impl EmulatorEnv {
    pub async fn start() -> EmulatorEnv {
        Self::start_with(EmulatorOptions::default()).await
    }

    pub async fn start_with(options: EmulatorOptions) -> EmulatorEnv {
        let emu = Emulator::start(options).await.expect("start emulator");
        let dir = tempfile::tempdir().expect("temp dir");
        let (kube_kubeconfig, antrea_kubeconfig) = emu
            .write_agent_kubeconfigs(dir.path())
            .expect("write kubeconfigs");
        let admin_kubeconfig = emu
            .write_admin_kubeconfig(dir.path())
            .expect("write admin kubeconfig");
        EmulatorEnv {
            emu,
            dir,
            kube_kubeconfig,
            antrea_kubeconfig,
            admin_kubeconfig,
        }
    }

    /// A kube-rs client with the agent's identity (from `antrea-agent.kubeconfig`).
    pub async fn agent_client(&self) -> kube::Client {
        client_from_kubeconfig(&self.kube_kubeconfig).await
    }

    /// A kube-rs client with the agent's identity for antrea-controller (from
    /// `antrea-agent.antrea.kubeconfig`).
    pub async fn controller_client(&self) -> kube::Client {
        client_from_kubeconfig(&self.antrea_kubeconfig).await
    }

    /// A kube-rs client with the admin identity.
    pub async fn admin_client(&self) -> kube::Client {
        client_from_kubeconfig(&self.admin_kubeconfig).await
    }
}

/// A kube-rs client built from a kubeconfig file (TLS verified against its CA).
pub async fn client_from_kubeconfig(path: &Path) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).expect("read kubeconfig");
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
            .await
            .expect("kubeconfig");
    kube::Client::try_from(config).expect("client")
}

fn request(method: &str, path: &str, body: Option<&Value>) -> http::Request<Vec<u8>> {
    let mut b = http::Request::builder().method(method).uri(path);
    if body.is_some() {
        b = b.header("Content-Type", "application/json");
    }
    b.header("Accept", "application/json")
        .body(body.map(|v| v.to_string().into_bytes()).unwrap_or_default())
        .expect("request")
}

/// Sends a request and returns the status code and the JSON body (Null if empty or not JSON).
pub async fn send_json(
    client: &kube::Client,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let resp = tokio::time::timeout(
        Duration::from_secs(20),
        client.send(request(method, path, body).map(kube::client::Body::from)),
    )
    .await
    .expect("request timed out")
    .expect("request failed");
    let code = resp.status().as_u16();
    let bytes = tokio::time::timeout(Duration::from_secs(20), resp.into_body().collect_bytes())
        .await
        .expect("body timed out")
        .expect("body");
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// A JSON watch stream read line by line.
pub struct WatchStream {
    lines: Lines<Box<dyn AsyncBufRead + Unpin + Send>>,
}

impl WatchStream {
    /// Opens a watch (`path` with its query, e.g. `...?watch=true&fieldSelector=...`).
    pub async fn open(client: &kube::Client, path: &str) -> WatchStream {
        let reader = tokio::time::timeout(
            Duration::from_secs(20),
            client.request_stream(request("GET", path, None)),
        )
        .await
        .expect("watch open timed out")
        .expect("watch open failed");
        let boxed: Box<dyn AsyncBufRead + Unpin + Send> = Box::new(Box::pin(reader));
        WatchStream { lines: boxed.lines() }
    }

    /// The next event, None when the stream ended; panics after `timeout`.
    pub async fn next_within(&mut self, timeout: Duration) -> Option<Value> {
        match tokio::time::timeout(timeout, self.lines.next()).await {
            Err(_) => panic!("no watch event within {timeout:?}"),
            Ok(None) | Ok(Some(Err(_))) => None,
            Ok(Some(Ok(line))) => Some(serde_json::from_str(&line).expect("watch line is JSON")),
        }
    }

    /// The next line exactly as sent (10 s bound); panics if the stream ended.
    pub async fn next_raw(&mut self) -> String {
        match tokio::time::timeout(Duration::from_secs(10), self.lines.next()).await {
            Ok(Some(Ok(line))) => line,
            Ok(_) => panic!("watch stream ended"),
            Err(_) => panic!("no watch event within 10s"),
        }
    }

    /// The next event (10 s bound); panics if the stream ended.
    pub async fn next(&mut self) -> Value {
        self.next_within(Duration::from_secs(10))
            .await
            .expect("watch stream ended")
    }

    /// Whether the stream ends within `timeout` (events before the end are skipped and counted).
    pub async fn ends_within(&mut self, timeout: Duration) -> Option<usize> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut skipped = 0;
        loop {
            match tokio::time::timeout_at(deadline, self.lines.next()).await {
                Err(_) => return None,
                Ok(None) | Ok(Some(Err(_))) => return Some(skipped),
                Ok(Some(Ok(_))) => skipped += 1,
            }
        }
    }

    /// Reads the initial ADDED events up to the first BOOKMARK; returns (objects, bookmark).
    pub async fn snapshot(&mut self) -> (Vec<Value>, Value) {
        let mut added = Vec::new();
        loop {
            let ev = self.next().await;
            match ev["type"].as_str() {
                Some("ADDED") => added.push(ev["object"].clone()),
                Some("BOOKMARK") => return (added, ev["object"].clone()),
                other => panic!("unexpected {other:?} before BOOKMARK: {ev}"),
            }
        }
    }
}

/// Path of a controlplane watch for node `ns/name`.
pub fn controlplane_watch_path(resource: &str, node: &str) -> String {
    format!(
        "/apis/controlplane.antrea.io/v1beta2/{resource}?{}",
        serde_urlencoded::to_string([
            ("fieldSelector", format!("nodeName={node}")),
            ("watch", "true".into())
        ])
        .expect("query")
    )
}

/// Path of the ExternalNode item.
pub fn external_node_path(ns: &str, name: &str) -> String {
    format!("/apis/crd.antrea.io/v1alpha1/namespaces/{ns}/externalnodes/{name}")
}

/// Path of an AntreaAgentInfo.
pub fn agent_info_path(name: &str) -> String {
    format!("/apis/crd.antrea.io/v1beta1/antreaagentinfos/{name}")
}

/// Polls `cond` every 20 ms until it holds; panics after `timeout`.
pub async fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + timeout;
    while !cond() {
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// === object builders (exact wire shapes) ===

/// An ExternalNode with one interface.
pub fn external_node(ns: &str, name: &str, iface: &str, ips: &[&str], labels: &[(&str, &str)]) -> Value {
    let labels: serde_json::Map<String, Value> =
        labels.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
    json!({
        "apiVersion": "crd.antrea.io/v1alpha1", "kind": "ExternalNode",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"interfaces": [{"name": iface, "ips": ips}]}
    })
}

/// An AppliedToGroup / AddressGroup member for an ExternalEntity (IPs as text; stored as
/// 16-byte base64).
pub fn ee_member(ns: &str, name: &str, ips: &[&str]) -> Value {
    let mut m = json!({"externalEntity": {"name": name, "namespace": ns}});
    if !ips.is_empty() {
        m["ips"] = json!(ips);
    }
    m
}

pub fn applied_to_group(name: &str, members: Vec<Value>) -> Value {
    json!({"kind": "AppliedToGroup", "apiVersion": "controlplane.antrea.io/v1beta2",
           "metadata": {"name": name}, "groupMembers": members})
}

pub fn address_group(name: &str, members: Vec<Value>) -> Value {
    json!({"kind": "AddressGroup", "apiVersion": "controlplane.antrea.io/v1beta2",
           "metadata": {"name": name}, "groupMembers": members})
}

/// An ingress rule from AddressGroups on a TCP port, with an action.
pub fn ingress_rule(address_groups: &[&str], tcp_port: i32, action: &str) -> Value {
    json!({"direction": "In", "from": {"addressGroups": address_groups}, "to": {},
           "services": [{"protocol": "TCP", "port": tcp_port}], "action": action, "enableLogging": false})
}

/// An Antrea-native NetworkPolicy (name = uid) applied to `applied_to` groups.
pub fn network_policy(uid: &str, generation: i64, applied_to: &[&str], rules: Vec<Value>) -> Value {
    json!({
        "kind": "NetworkPolicy", "apiVersion": "controlplane.antrea.io/v1beta2",
        "metadata": {"name": uid, "uid": uid, "generation": generation},
        "rules": rules, "appliedToGroups": applied_to, "priority": 9000, "tierPriority": 250,
        "sourceRef": {"type": "AntreaNetworkPolicy", "namespace": VM_NS, "name": format!("annp-{uid}"), "uid": uid}
    })
}

/// Where the lab's emulator serves kube-apiserver, in the outside host's namespace.
pub const LAB_KUBE_PORT: u16 = 16443;
/// Where it serves antrea-controller (a separate server, as in a cluster).
pub const LAB_CONTROLLER_PORT: u16 = 16444;

/// Starts the emulator inside the lab's outside-host namespace, kube-apiserver on
/// [`LAB_KUBE_PORT`] and antrea-controller on [`LAB_CONTROLLER_PORT`] of the outside host's
/// address: a thread enters the namespace and starts it there, and the emulator's own server
/// threads inherit the namespace.
pub fn start_in_outside_host(lab: &super::Lab) -> Emulator {
    let ns = lab.ext_ns().to_string();
    let host = super::EXT_IP4;
    std::thread::spawn(move || {
        let handle = std::fs::File::open(format!("/var/run/netns/{ns}")).expect("open the netns");
        nix::sched::setns(handle, nix::sched::CloneFlags::CLONE_NEWNET).expect("enter the netns");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let listen = format!("{host}:{LAB_KUBE_PORT}").parse().expect("address");
        let controller_listen = format!("{host}:{LAB_CONTROLLER_PORT}").parse().expect("address");
        runtime.block_on(Emulator::start(EmulatorOptions {
            listen,
            controller_listen,
            extra_server_names: vec![host.to_string()],
            ..EmulatorOptions::default()
        }))
    })
    .join()
    .expect("the emulator thread")
    .expect("start the emulator")
}

/// An agent config for Kubernetes mode against `emu` (its kubeconfigs written under the lab),
/// with `extra` YAML (a `metricsServer` section) and the agent API socket `<lab dir>/agent.sock`.
pub fn lab_agent_config(lab: &super::Lab, emu: &Emulator, extra: &str) -> PathBuf {
    let dir = lab.dir().join("kube");
    let (kube, antrea) = emu.write_agent_kubeconfigs(&dir).expect("write the kubeconfigs");
    let text = format!(
        "nodeType: externalNode\n\
         featureGates:\n  ExternalNode: true\n\
         ovsDatapathType: netdev\n\
         ovsRunDir: {run}\n\
         stateDir: {state}\n\
         {extra}\
         agentAPI:\n  socket: {sock}\n\
         externalNode:\n  externalNodeNamespace: {ns}\n\
         clientConnection:\n  kubeconfig: {kube}\n\
         antreaClientConnection:\n  kubeconfig: {antrea}\n",
        run = lab.run_dir().display(),
        state = lab.state_dir().display(),
        sock = lab.dir().join("agent.sock").display(),
        ns = super::EN_NAMESPACE,
        kube = kube.display(),
        antrea = antrea.display(),
    );
    let path = lab.unique_path("antrea-agent-k8s", "conf");
    std::fs::write(&path, text).expect("write the config");
    path
}
