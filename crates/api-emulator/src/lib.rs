//! An HTTPS emulator of kube-apiserver and antrea-controller, as far as an ExternalNode agent
//! uses them (antrea-apis.md §0-§8): ExternalNode GET/LIST/WATCH, AntreaAgentInfo GET/PUT with
//! optimistic concurrency, the controller's ExternalEntity and AntreaAgentInfo management, the
//! three node-filtered controlplane watches with exact JSON events, status and stats POSTs, bearer
//! token authentication and RBAC from `deploy/kubernetes/vm-agent-rbac.yml`, call recording,
//! failure injection and controller restarts. No real cluster can run in tests; this is what
//! proves the agent's Kubernetes mode.
//!
//! Two endpoints, as in a cluster: kube-apiserver on `listen` (crd.antrea.io, discovery, the
//! control API) and antrea-controller on `controller_listen` (controlplane.antrea.io only). Each
//! answers a path of the other with the generic 404 "the server could not find the requested
//! resource", so an agent whose two kubeconfigs are swapped fails as it would in a cluster
//! (unless `kube_aggregates_controlplane`, which models the controller's APIService: kube-apiserver
//! then also serves the controlplane paths, as the Go agent uses without antreaClientConnection).
//!
//! Answers are JSON only (`Accept` must allow it, else 406; request bodies must be JSON, else
//! 415); custom resources need `resourceVersion` on update (422 without, 409 stale); see the
//! README's "How strict the emulator is".
//!
//! The server runs on its own thread (an actix system), so it works under any test runtime.
//! [`Emulator`] is the handle: in-process control methods, the control API (`control.rs`) offers
//! the same over HTTPS with the admin token. Dropping the handle stops the server.

pub mod certs;
pub mod control;
pub mod rbac;
pub mod server;
pub mod store;
pub mod watch;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use actix_web::{web, App, HttpServer};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

pub use rbac::{Identity, Rbac, VM_AGENT_RBAC_YAML};
pub use server::RecordedCall;
pub use store::{CpResource, PolicyStatusRecord, StatusError};
pub use watch::{WatchInfo, WatchTarget};

use server::{Core, ServeOptions};
use store::State;

/// Why the emulator could not start or do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum EmulatorError {
    #[error(transparent)]
    Cert(#[from] certs::CertError),
    #[error(transparent)]
    Rbac(#[from] rbac::RbacError),
    #[error("RBAC manifests define no ServiceAccount token Secret for the agent")]
    NoAgentAccount,
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("emulator thread: {0}")]
    Thread(String),
    /// What kube-apiserver / antrea-controller would have answered.
    #[error(transparent)]
    Api(#[from] StatusError),
}

/// How to run the emulator.
#[derive(Clone, Debug)]
pub struct EmulatorOptions {
    /// kube-apiserver's listen address (tests: `127.0.0.1:0`).
    pub listen: SocketAddr,
    /// antrea-controller's listen address (tests: `127.0.0.1:0`).
    pub controller_listen: SocketAddr,
    /// kube-apiserver also serves controlplane.antrea.io (the controller's APIService).
    pub kube_aggregates_controlplane: bool,
    /// After [`Emulator::restart_controller`], antrea-controller answers 503 for this long.
    pub controller_restart_downtime: Duration,
    /// RBAC manifests; the bundled `deploy/kubernetes/vm-agent-rbac.yml` by default.
    pub rbac_yaml: String,
    /// Token of the agent's ServiceAccount (random when None).
    pub agent_token: Option<String>,
    /// Token of the admin identity (random when None).
    pub admin_token: Option<String>,
    /// Events buffered per watch before the slow-reader rule applies (Antrea: 1000).
    pub watch_buffer: usize,
    /// How long a dispatch may wait on a full buffer before force-stopping the watch (50 ms).
    pub slow_watcher_timeout: Duration,
    /// Every watch ends after this (antrea-controller: 2-4 h), or earlier with `timeoutSeconds`.
    pub max_watch_duration: Duration,
    /// Period of BOOKMARKs on ExternalNode watches with `allowWatchBookmarks=true`.
    pub kube_bookmark_interval: Duration,
    /// ExternalNode events kept for `resourceVersion` resumption; older ones answer 410.
    pub kube_history: usize,
    /// Extra DNS names or IPs for the server certificate.
    pub extra_server_names: Vec<String>,
    /// HTTP worker threads.
    pub workers: usize,
}

impl Default for EmulatorOptions {
    fn default() -> Self {
        EmulatorOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            controller_listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            kube_aggregates_controlplane: false,
            controller_restart_downtime: Duration::from_millis(500),
            rbac_yaml: VM_AGENT_RBAC_YAML.to_string(),
            agent_token: None,
            admin_token: None,
            watch_buffer: 1000,
            slow_watcher_timeout: Duration::from_millis(50),
            max_watch_duration: Duration::from_secs(2 * 3600),
            kube_bookmark_interval: Duration::from_secs(60),
            kube_history: 1000,
            extra_server_names: Vec::new(),
            workers: 2,
        }
    }
}

fn random_token() -> String {
    let a: u128 = rand::random();
    let b: u64 = rand::random();
    format!("emu.{a:032x}{b:016x}")
}

/// A running emulator. Dropping it stops the server and ends every connection.
pub struct Emulator {
    core: Arc<Core>,
    addr: SocketAddr,
    controller_addr: SocketAddr,
    ca_pem: String,
    agent_token: String,
    admin_token: String,
    agent_namespace: String,
    agent_account: String,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Emulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emulator").field("url", &self.url()).finish()
    }
}

impl Emulator {
    /// Generates the PKI, binds the listener and starts serving on a dedicated thread.
    pub async fn start(options: EmulatorOptions) -> Result<Emulator, EmulatorError> {
        let rbac = Rbac::parse(&options.rbac_yaml)?;
        let secret = rbac
            .token_secrets
            .first()
            .cloned()
            .ok_or(EmulatorError::NoAgentAccount)?;
        let pki = certs::Pki::generate(&options.extra_server_names)?;
        let tls = pki.server_config()?;
        let agent_token = options.agent_token.clone().unwrap_or_else(random_token);
        let admin_token = options.admin_token.clone().unwrap_or_else(random_token);
        let (dispatch_tx, dispatch_rx) = mpsc::unbounded_channel();
        let core = Arc::new(Core::new(
            State::new(options.kube_history),
            rbac,
            ServeOptions {
                watch_buffer: options.watch_buffer,
                max_watch_duration: options.max_watch_duration,
                kube_bookmark_interval: options.kube_bookmark_interval,
                kube_aggregates_controlplane: options.kube_aggregates_controlplane,
                controller_restart_downtime: options.controller_restart_downtime,
            },
            dispatch_tx,
        ));
        core.add_token(
            &agent_token,
            Identity::service_account(&secret.namespace, &secret.service_account),
        );
        core.add_token(&admin_token, Identity::admin());

        type Bound = Result<(SocketAddr, SocketAddr), std::io::Error>;
        let (ready_tx, ready_rx) = oneshot::channel::<Bound>();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let thread_core = core.clone();
        let listen = options.listen;
        let controller_listen = options.controller_listen;
        let workers = options.workers.max(1);
        let slow = options.slow_watcher_timeout;
        let thread = std::thread::Builder::new()
            .name("antrea-api-emulator".into())
            .spawn(move || {
                let system = actix_rt::System::new();
                system.block_on(async move {
                    let data = web::Data::new(thread_core.clone());
                    let server = HttpServer::new(move || {
                        App::new()
                            .app_data(data.clone())
                            .app_data(web::PayloadConfig::new(64 << 20))
                            .default_service(web::to(server::handle))
                    })
                    .workers(workers)
                    // A client closing its side ends its watch at once, as Go's server cancels
                    // the request context (otherwise idle watches would linger until written to).
                    .h1_allow_half_closed(false)
                    .disable_signals()
                    .shutdown_timeout(1)
                    .bind_rustls_0_23(listen, tls.clone())
                    .and_then(|s| s.bind_rustls_0_23(controller_listen, tls));
                    let server = match server {
                        Ok(s) => s,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    // In bind order: kube-apiserver, then antrea-controller.
                    let addrs = server.addrs();
                    let bound = match addrs.as_slice() {
                        [kube, controller] => {
                            thread_core.set_controller_addr(*controller);
                            Ok((*kube, *controller))
                        }
                        _ => Err(std::io::Error::other(format!(
                            "unexpected listening addresses {addrs:?}"
                        ))),
                    };
                    let server = server.run();
                    let handle = server.handle();
                    actix_rt::spawn(watch::dispatch_loop(
                        dispatch_rx,
                        thread_core.registry.clone(),
                        slow,
                    ));
                    let running = actix_rt::spawn(server);
                    let _ = ready_tx.send(bound);
                    let _ = stop_rx.await;
                    thread_core.close_watches();
                    handle.stop(false).await;
                    let _ = running.await;
                });
            })?;
        let (addr, controller_addr) = ready_rx
            .await
            .map_err(|_| EmulatorError::Thread("the emulator thread ended before listening".into()))??;
        Ok(Emulator {
            core,
            addr,
            controller_addr,
            ca_pem: pki.ca_pem,
            agent_token,
            admin_token,
            agent_namespace: secret.namespace,
            agent_account: secret.service_account,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    // --- connection facts ---

    /// kube-apiserver's `https://127.0.0.1:<port>` (IP of the listen address).
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// antrea-controller's `https://127.0.0.1:<port>`.
    pub fn controller_url(&self) -> String {
        format!("https://{}", self.controller_addr)
    }

    pub fn controller_addr(&self) -> SocketAddr {
        self.controller_addr
    }

    /// PEM of the CA that signed the server certificate.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// Bearer token of the agent's ServiceAccount (`vm-ns/vm-agent` with the bundled RBAC).
    pub fn agent_token(&self) -> &str {
        &self.agent_token
    }

    /// Bearer token of the admin identity (control API, any resource).
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// Namespace of the agent's ServiceAccount (`vm-ns`), where its ExternalNodes belong.
    pub fn agent_namespace(&self) -> &str {
        &self.agent_namespace
    }

    /// User name the agent's token authenticates as.
    pub fn agent_user(&self) -> String {
        format!(
            "system:serviceaccount:{}:{}",
            self.agent_namespace, self.agent_account
        )
    }

    /// Accepts `token` as `identity` from now on.
    pub fn add_token(&self, token: &str, identity: Identity) {
        self.core.add_token(token, identity);
    }

    /// A kubeconfig (YAML) for kube-apiserver with the CA embedded and `token`.
    pub fn kubeconfig_yaml(&self, token: &str, user: &str) -> String {
        self.kubeconfig_yaml_for(&self.url(), token, user)
    }

    /// A kubeconfig (YAML) for the server at `url` (one of the two endpoints) with the CA
    /// embedded and `token`.
    pub fn kubeconfig_yaml_for(&self, url: &str, token: &str, user: &str) -> String {
        let ca = antrea_controlplane::ip::base64_encode(self.ca_pem.as_bytes());
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: emulator\n  cluster:\n    server: {url}\n    certificate-authority-data: {ca}\nusers:\n- name: {user}\n  user:\n    token: {token}\ncontexts:\n- name: {user}@emulator\n  context:\n    cluster: emulator\n    user: {user}\ncurrent-context: {user}@emulator\n"
        )
    }

    /// Writes `ca.crt` and the agent's two kubeconfigs into `dir`: `antrea-agent.kubeconfig`
    /// (kube-apiserver's URL) and `antrea-agent.antrea.kubeconfig` (antrea-controller's URL),
    /// both with the agent token. Returns `(kube_path, antrea_path)`.
    pub fn write_agent_kubeconfigs(&self, dir: &Path) -> std::io::Result<(PathBuf, PathBuf)> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("ca.crt"), &self.ca_pem)?;
        let kube = dir.join("antrea-agent.kubeconfig");
        let antrea = dir.join("antrea-agent.antrea.kubeconfig");
        std::fs::write(&kube, self.kubeconfig_yaml(&self.agent_token, "vm-agent"))?;
        std::fs::write(
            &antrea,
            self.kubeconfig_yaml_for(&self.controller_url(), &self.agent_token, "vm-agent"),
        )?;
        Ok((kube, antrea))
    }

    /// Writes `admin.kubeconfig` (admin token) into `dir` and returns its path.
    pub fn write_admin_kubeconfig(&self, dir: &Path) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("admin.kubeconfig");
        std::fs::write(&path, self.kubeconfig_yaml(&self.admin_token, "admin"))?;
        Ok(path)
    }

    // --- kube-apiserver objects ---

    /// Creates an ExternalNode (namespace from `metadata.namespace`, default `default`), as
    /// `kubectl create` would; the controller then creates its ExternalEntity and an empty
    /// AntreaAgentInfo. Returns the stored object.
    pub fn create_external_node(&self, object: Value) -> Result<Value, EmulatorError> {
        Ok(self.core.mutate(|s| s.create_external_node(&object, None))?)
    }

    /// Creates or replaces an ExternalNode (no resourceVersion check).
    pub fn apply_external_node(&self, object: Value) -> Result<Value, EmulatorError> {
        Ok(self.core.mutate(|s| s.apply_external_node(&object))?)
    }

    /// Deletes an ExternalNode, its ExternalEntity and its AntreaAgentInfo.
    pub fn delete_external_node(&self, namespace: &str, name: &str) -> Result<(), EmulatorError> {
        self.core
            .mutate(|s| s.delete_external_node(namespace, name).map(|(_, i)| ((), i)))?;
        Ok(())
    }

    pub fn external_node(&self, namespace: &str, name: &str) -> Option<Value> {
        self.core.read(|s| s.get_external_node(namespace, name).ok())
    }

    /// Every ExternalEntity (the controller's and hand-made ones).
    pub fn external_entities(&self) -> Vec<Value> {
        self.core.read(|s| s.list_external_entities())
    }

    /// Creates or replaces a hand-made ExternalEntity.
    pub fn apply_external_entity(&self, object: Value) -> Result<Value, EmulatorError> {
        Ok(self.core.mutate(|s| s.apply_external_entity(&object))?)
    }

    pub fn delete_external_entity(&self, namespace: &str, name: &str) -> Result<(), EmulatorError> {
        self.core
            .mutate(|s| Ok(((), s.delete_external_entity(namespace, name)?)))?;
        Ok(())
    }

    /// The AntreaAgentInfo named `name` (the agent's plain node name), if it exists.
    pub fn agent_info(&self, name: &str) -> Option<Value> {
        self.core.read(|s| s.get_agent_info(name).ok())
    }

    pub fn agent_infos(&self) -> Vec<Value> {
        self.core.read(|s| s.list_agent_infos())
    }

    /// Makes every ExternalNode watch from an older resourceVersion answer 410 Gone.
    pub fn compact_kube_history(&self) {
        let _ = self.core.mutate(|s| {
            s.compact_kube_history();
            Ok(((), vec![]))
        });
    }

    // --- antrea-controller objects ---

    /// Creates or replaces controlplane objects: one object (`kind` NetworkPolicy,
    /// AppliedToGroup or AddressGroup), an array of them, or `{"items": [...]}`. IPs may be
    /// base64 or text; they are stored in the controller's 16-byte form. Events and patches for
    /// every watcher follow from old vs new versions and spans.
    pub fn upsert_controlplane(&self, objects: Value) -> Result<(), EmulatorError> {
        let objects = control::controlplane_objects(objects)?;
        self.core.mutate(|s| Ok(((), s.upsert_controlplane(objects))))?;
        Ok(())
    }

    /// Deletes a controlplane object by name.
    pub fn delete_controlplane(&self, resource: CpResource, name: &str) -> Result<(), EmulatorError> {
        self.core
            .mutate(|s| Ok(((), s.delete_controlplane(resource, name)?)))?;
        Ok(())
    }

    /// A controlplane object as GET returns it (unfiltered).
    pub fn controlplane_object(&self, resource: CpResource, name: &str) -> Option<Value> {
        self.core
            .read(|s| s.cp_get(resource, name).ok())
            .and_then(|raw| serde_json::from_str(&raw).ok())
    }

    /// The nodes (`ns/name` keys) an object is sent to.
    pub fn span(&self, resource: CpResource, name: &str) -> Vec<String> {
        self.core
            .read(|s| s.cp_span(resource, name))
            .map(|s| s.into_iter().collect())
            .unwrap_or_default()
    }

    /// The last status per (policy, node) since the last controller restart.
    pub fn statuses(&self) -> Vec<PolicyStatusRecord> {
        self.core.read(|s| s.statuses())
    }

    /// The last status posted for `policy` by node `node_name` (`ns/name`).
    pub fn status(&self, policy: &str, node_name: &str) -> Option<PolicyStatusRecord> {
        self.statuses()
            .into_iter()
            .find(|s| s.policy == policy && s.node_name == node_name)
    }

    /// Every NodeStatsSummary posted, oldest first.
    pub fn stats_summaries(&self) -> Vec<Value> {
        self.core.read(|s| s.summaries())
    }

    // --- calls, watches, faults ---

    /// Every request received so far, oldest first.
    pub fn calls(&self) -> Vec<RecordedCall> {
        self.core.calls()
    }

    pub fn clear_calls(&self) {
        self.core.clear_calls();
    }

    /// The open watches.
    pub fn watches(&self) -> Vec<WatchInfo> {
        self.core.registry.list()
    }

    /// Open controlplane watches for `node` (`ns/name`), by resource.
    pub fn controlplane_watches(&self, node: &str) -> Vec<CpResource> {
        self.watches()
            .into_iter()
            .filter_map(|w| match w.target {
                WatchTarget::Controlplane {
                    resource,
                    node: Some(n),
                    ..
                } if n == node => Some(resource),
                _ => None,
            })
            .collect()
    }

    /// How many watches were force-stopped because their reader fell behind.
    pub fn slow_watch_stops(&self) -> u64 {
        self.core.registry.slow_stops()
    }

    /// Ends every open watch now (both APIs); returns how many.
    pub fn close_watches(&self) -> usize {
        self.core.close_watches()
    }

    /// The next `count` requests whose path starts with `path_prefix` fail with 500.
    pub fn fail_next(&self, path_prefix: &str, count: u32) {
        self.core.fail_next(path_prefix, count);
    }

    /// Restarts the emulated antrea-controller: controlplane watches dropped, resourceVersion
    /// counters restarted, statuses forgotten, 503 for `controller_restart_downtime`
    /// (kube-apiserver objects are untouched).
    pub fn restart_controller(&self) {
        self.core.restart_controller();
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
