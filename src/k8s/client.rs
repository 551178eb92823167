//! The real [`ApiClient`]: a kube-rs client (hyper + rustls with the ring provider, no OpenSSL)
//! built from a kubeconfig file. Owns kubeconfig loading (bearer token or token file, client
//! certificate and key as data or files, CA as data or file), the TLS policy (verified unless the
//! kubeconfig itself says `insecure-skip-tls-verify: true`), JSON requests with Kubernetes
//! `Status` error mapping, and line-split streaming watches.
//!
//! Timeouts: connecting is bounded ([`CONNECT_TIMEOUT`]); an ordinary request is bounded as a
//! whole ([`REQUEST_TIMEOUT`]); a watch is bounded only until its response headers arrive
//! ([`WATCH_OPEN_TIMEOUT`]) because its body legitimately lasts for hours.
//!
//! Liveness ([`Liveness`]): a watch body is silent for as long as nothing changes, so a peer
//! that vanished (host down, load balancer dropping the flow, a black hole) cannot be told from
//! an idle one by reading. kube-rs 5 builds an HTTP/1.1-only client (its hyper and hyper-rustls
//! have no `http2` feature, so no HTTP/2 PING), and its own `HttpConnector` sets no TCP options.
//! This client therefore builds kube's stack itself around a connector with TCP keepalive and
//! `TCP_USER_TIMEOUT`: the kernel probes an idle connection and aborts it when the peer stops
//! acknowledging, the watch body then fails, and the watcher reconnects.

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use futures::{AsyncBufReadExt, StreamExt, TryStreamExt};
use http::header::{ACCEPT, CONTENT_TYPE};
use serde_json::Value;
use tracing::warn;

use super::api::{ApiClient, ApiError, Method, WatchLines};

/// Bound on establishing a TCP connection (and on kube's write side).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on a whole non-watch request, answer body included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Bound on getting the response headers of a watch.
pub const WATCH_OPEN_TIMEOUT: Duration = Duration::from_secs(30);

/// Environment variable overriding [`Liveness::DEFAULT_TIMEOUT`] (e.g. `6s`): lab tests use it to
/// see a dead connection quickly; operators keep the default.
pub const LIVENESS_TIMEOUT_ENV: &str = "ANTREA_VM_AGENT_LIVENESS_TIMEOUT";

/// TCP-level liveness of the API connections: keepalive probes on an idle connection and a bound
/// on unacknowledged data (`TCP_USER_TIMEOUT`, which on Linux also ends keepalive probing once it
/// has elapsed since the peer last answered). A silent peer is detected within
/// [`Liveness::detection_bound`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Liveness {
    /// Idle time before the first keepalive probe.
    pub keepalive_idle: Duration,
    /// Time between unanswered probes.
    pub keepalive_interval: Duration,
    /// Unanswered probes before the connection is dropped (when no user timeout ends it first).
    pub keepalive_probes: u32,
    /// How long sent data (or probes) may stay unacknowledged before the connection is dropped.
    pub user_timeout: Duration,
}

impl Default for Liveness {
    fn default() -> Self {
        Liveness::within(Liveness::DEFAULT_TIMEOUT)
    }
}

impl Liveness {
    /// The Go agent's HTTP/2 health check is a 30 s PING with a 15 s timeout (45 s); ours aborts a
    /// silent connection 30 s after the peer last answered, and the detection bound stays under
    /// the 60 s the agent promises.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

    /// Settings that drop a connection whose peer stopped answering `timeout` ago: first probe at
    /// half of it, then probes every sixth (at least 1 s, the kernel's granularity).
    pub fn within(timeout: Duration) -> Liveness {
        let timeout = timeout.max(Duration::from_secs(2));
        Liveness {
            keepalive_idle: (timeout / 2).max(Duration::from_secs(1)),
            keepalive_interval: (timeout / 6).max(Duration::from_secs(1)),
            keepalive_probes: 3,
            user_timeout: timeout,
        }
    }

    /// [`Liveness::DEFAULT_TIMEOUT`], or the period in [`LIVENESS_TIMEOUT_ENV`] (`500ms`, `6s`,
    /// `1m`); an unparsable value is an error naming the variable.
    pub fn from_env() -> Result<Liveness, LivenessEnvError> {
        match std::env::var(LIVENESS_TIMEOUT_ENV) {
            Err(_) => Ok(Liveness::default()),
            Ok(text) => crate::config::parse_period(&text)
                .map(Liveness::within)
                .ok_or(LivenessEnvError { text }),
        }
    }

    /// The longest time from the peer's last answer to the connection being dropped: the user
    /// timeout or the keepalive probing, whichever ends first (the kernel checks at each probe
    /// interval, hence the extra interval).
    pub fn detection_bound(&self) -> Duration {
        let probing = self.keepalive_idle + self.keepalive_interval * self.keepalive_probes;
        self.user_timeout.min(probing).max(self.keepalive_idle) + self.keepalive_interval
    }
}

/// kube's client stack (base URI, authentication, extra headers, JSON) over a hyper client whose
/// TCP connector carries the [`Liveness`] options; the TLS setup is kube's own (`ConfigExt`).
fn live_kube_client(config: kube::Config, liveness: Liveness) -> Result<kube::Client, kube::Error> {
    use kube::client::ConfigExt;
    use tower::ServiceBuilder;

    let mut tcp = hyper_util::client::legacy::connect::HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_connect_timeout(config.connect_timeout);
    tcp.set_keepalive(Some(liveness.keepalive_idle));
    tcp.set_keepalive_interval(Some(liveness.keepalive_interval));
    tcp.set_keepalive_retries(Some(liveness.keepalive_probes));
    tcp.set_tcp_user_timeout(Some(liveness.user_timeout));
    let https = config.rustls_https_connector_with_connector(tcp)?;
    let hyper =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build(https);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(tower::BoxError::from)
        .service(hyper);
    Ok(kube::Client::new(service, config.default_namespace))
}

/// Longest piece of a non-JSON error body quoted in an error message.
const MAX_QUOTED_BODY: usize = 300;

/// [`LIVENESS_TIMEOUT_ENV`] holds something that is not a period.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{LIVENESS_TIMEOUT_ENV}={text:?} is not a period such as 30s, 500ms or 1m")]
pub struct LivenessEnvError {
    pub text: String,
}

/// Why a client could not be built from a kubeconfig.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The kubeconfig file (or a file it points to) is missing, unreadable or inconsistent.
    #[error("kubeconfig {path} ({purpose}): {message}")]
    Kubeconfig {
        path: PathBuf,
        purpose: String,
        message: String,
    },
    /// The kubeconfig was read but the HTTPS client could not be set up from it (bad
    /// certificate or key, unreadable token file ...).
    #[error("kubeconfig {path} ({purpose}): cannot set up the client: {message}")]
    Client {
        path: PathBuf,
        purpose: String,
        message: String,
    },
}

/// An [`ApiClient`] over one kube-rs connection pool.
#[derive(Clone)]
pub struct KubeApiClient {
    client: kube::Client,
    server: String,
    purpose: String,
    kubeconfig: PathBuf,
    tls_verified: bool,
}

impl std::fmt::Debug for KubeApiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeApiClient")
            .field("server", &self.server)
            .field("purpose", &self.purpose)
            .field("kubeconfig", &self.kubeconfig)
            .field("tls_verified", &self.tls_verified)
            .finish()
    }
}

/// Makes ring the process-wide rustls provider unless one is already installed. kube builds its
/// `rustls::ClientConfig` with the process default, which rustls can only pick by itself when
/// exactly one provider feature is compiled in anywhere in the dependency graph.
pub fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race with another installer is fine: some provider is then installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// `error: cause: cause ...`, because hyper and rustls put the useful part (e.g. "invalid peer
/// certificate: UnknownIssuer") in the source chain, not in the top-level message.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let s = cause.to_string();
        if !text.contains(&s) {
            text.push_str(": ");
            text.push_str(&s);
        }
        source = cause.source();
    }
    text
}

fn kubeconfig_message(e: &kube::config::KubeconfigError) -> String {
    use kube::config::KubeconfigError as K;
    match e {
        K::CurrentContextNotSet => "no current-context is set".to_string(),
        K::LoadContext(name) => format!("current-context {name:?} is not defined under contexts"),
        K::LoadClusterOfContext(name) => {
            format!("the cluster {name:?} of the current context is not defined under clusters")
        }
        K::MissingClusterUrl => "the cluster of the current context has no server URL".to_string(),
        K::Parse(_) => format!("not a valid kubeconfig: {}", error_chain(e)),
        _ => error_chain(e),
    }
}

/// kube-rs sends a token file's content verbatim, so a file ending in a newline (as
/// `echo $TOKEN > file` writes) would make every request fail with an invalid header; client-go
/// trims it. For the current context's user, such a token is read once, trimmed and used inline
/// (a clean file stays a file, which kube re-reads every minute to follow rotation).
fn inline_padded_token_file(kubeconfig: &mut kube::config::Kubeconfig) {
    let Some(context) = kubeconfig.current_context.as_ref() else {
        return;
    };
    let user = kubeconfig
        .contexts
        .iter()
        .find(|c| &c.name == context)
        .and_then(|c| c.context.as_ref())
        .and_then(|c| c.user.clone());
    let Some(user) = user else { return };
    for named in kubeconfig.auth_infos.iter_mut().filter(|a| a.name == user) {
        let Some(auth) = named.auth_info.as_mut() else {
            continue;
        };
        if auth.token.is_some() {
            continue;
        }
        let Some(file) = auth.token_file.as_ref() else {
            continue;
        };
        // Unreadable files are left to kube, whose error names the file.
        if let Ok(text) = std::fs::read_to_string(file) {
            let trimmed = text.trim();
            if trimmed.len() != text.len() && !trimmed.is_empty() {
                auth.token = Some(trimmed.to_string().into());
                auth.token_file = None;
            }
        }
    }
}

impl KubeApiClient {
    /// Builds a client from the kubeconfig at `path`; `purpose` (e.g. `kube-apiserver`,
    /// `antrea-controller`) names the connection in logs and errors. Relative file references
    /// in the kubeconfig are resolved against its directory. Must be called inside a tokio
    /// runtime (kube spawns its request-buffer task there), and that runtime must outlive the
    /// client.
    pub fn from_kubeconfig(path: &Path, purpose: &str) -> Result<KubeApiClient, ClientError> {
        Self::from_kubeconfig_with(path, purpose, Liveness::default())
    }

    /// [`KubeApiClient::from_kubeconfig`] with explicit connection [`Liveness`] settings.
    pub fn from_kubeconfig_with(
        path: &Path,
        purpose: &str,
        liveness: Liveness,
    ) -> Result<KubeApiClient, ClientError> {
        let bad = |message: String| ClientError::Kubeconfig {
            path: path.to_path_buf(),
            purpose: purpose.to_string(),
            message,
        };
        match std::fs::metadata(path) {
            Ok(m) if m.is_file() => {}
            Ok(_) => return Err(bad("is not a regular file".into())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(bad("file does not exist".into()))
            }
            Err(e) => return Err(bad(format!("cannot read: {e}"))),
        }
        let mut kubeconfig =
            kube::config::Kubeconfig::read_from(path).map_err(|e| bad(kubeconfig_message(&e)))?;
        inline_padded_token_file(&mut kubeconfig);
        if kubeconfig.current_context.as_deref().unwrap_or("").is_empty() {
            return Err(bad("no current-context is set".into()));
        }
        let mut config = kube::Config::try_from(kubeconfig).map_err(|e| bad(kubeconfig_message(&e)))?;
        config.connect_timeout = Some(CONNECT_TIMEOUT);
        // No read timeout: it would cut long watches. Requests are bounded in `request()`.
        config.read_timeout = None;
        // The callers own retrying (with their own backoff, and reporting what failed); kube's
        // built-in retry of 429/503/504 would hide a failing server behind long silent waits.
        config.default_retry = false;
        let https = config.cluster_url.scheme() == Some(&http::uri::Scheme::HTTPS);
        let tls_verified = https && !config.accept_invalid_certs;
        if config.accept_invalid_certs {
            warn!(kubeconfig = %path.display(), purpose,
                "the kubeconfig sets insecure-skip-tls-verify: the server's certificate is NOT verified");
        } else if !https {
            warn!(kubeconfig = %path.display(), purpose, server = %config.cluster_url,
                "the kubeconfig's server is plain HTTP: no TLS");
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(ClientError::Client {
                path: path.to_path_buf(),
                purpose: purpose.to_string(),
                message: "must be created inside a tokio runtime".into(),
            });
        }
        install_crypto_provider();
        let server = config.cluster_url.to_string().trim_end_matches('/').to_string();
        let client = live_kube_client(config, liveness).map_err(|e| ClientError::Client {
            path: path.to_path_buf(),
            purpose: purpose.to_string(),
            message: error_chain(&e),
        })?;
        Ok(KubeApiClient {
            client,
            server,
            purpose: purpose.to_string(),
            kubeconfig: path.to_path_buf(),
            tls_verified,
        })
    }

    /// Whether the server's certificate is verified (false with `insecure-skip-tls-verify` or a
    /// plain `http://` server).
    pub fn tls_verified(&self) -> bool {
        self.tls_verified
    }

    /// The server URL from the kubeconfig, without a trailing slash.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// What this connection is for, as given to [`KubeApiClient::from_kubeconfig`].
    pub fn purpose(&self) -> &str {
        &self.purpose
    }

    fn build(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<http::Request<Vec<u8>>, ApiError> {
        let http_method = match method {
            Method::Get => http::Method::GET,
            Method::Put => http::Method::PUT,
            Method::Post => http::Method::POST,
        };
        let mut builder = http::Request::builder()
            .method(http_method)
            .uri(path)
            .header(ACCEPT, "application/json");
        let bytes = match body {
            Some(v) => {
                builder = builder.header(CONTENT_TYPE, "application/json");
                serde_json::to_vec(v).map_err(|e| ApiError::Transport {
                    method: method.as_str(),
                    path: path.to_string(),
                    message: format!("cannot encode the request body: {e}"),
                })?
            }
            None => Vec::new(),
        };
        builder.body(bytes).map_err(|e| ApiError::Transport {
            method: method.as_str(),
            path: path.to_string(),
            message: format!("invalid request: {e}"),
        })
    }

    fn transport(&self, method: Method, path: &str, e: &dyn std::error::Error) -> ApiError {
        ApiError::Transport {
            method: method.as_str(),
            path: path.to_string(),
            message: format!("{} ({}): {}", self.server, self.purpose, error_chain(e)),
        }
    }

    fn timed_out(&self, method: Method, path: &str, what: &str, after: Duration) -> ApiError {
        ApiError::Transport {
            method: method.as_str(),
            path: path.to_string(),
            message: format!("{} ({}): no {what} within {after:?}", self.server, self.purpose),
        }
    }
}

/// The error for a non-2xx answer: the Kubernetes `Status` body's reason and message when the
/// body is one, else the HTTP reason phrase and the start of the body.
pub fn status_error(method: Method, path: &str, code: u16, body: &[u8]) -> ApiError {
    let status: Option<Value> = serde_json::from_slice(body).ok();
    let field = |name: &str| {
        status
            .as_ref()
            .and_then(|v| v.get(name))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (mut reason, mut message) = (field("reason"), field("message"));
    if reason.is_empty() {
        reason = http::StatusCode::from_u16(code)
            .ok()
            .and_then(|c| c.canonical_reason())
            .unwrap_or("")
            .to_string();
    }
    if message.is_empty() && status.is_none() {
        let text = String::from_utf8_lossy(body);
        let text = text.trim();
        message = match text.char_indices().nth(MAX_QUOTED_BODY) {
            Some((cut, _)) => format!("{}...", &text[..cut]),
            None => text.to_string(),
        };
    }
    ApiError::Status {
        method: method.as_str(),
        path: path.to_string(),
        code,
        reason,
        message,
    }
}

#[async_trait]
impl ApiClient for KubeApiClient {
    async fn request(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Value, ApiError> {
        let request = self.build(method, path, body)?;
        let exchange = async {
            let response = self
                .client
                .send(request.map(kube::client::Body::from))
                .await
                .map_err(|e| self.transport(method, path, &e))?;
            let code = response.status().as_u16();
            let bytes = response
                .into_body()
                .collect_bytes()
                .await
                .map_err(|e| self.transport(method, path, &e))?;
            Ok::<_, ApiError>((code, bytes))
        };
        let (code, bytes) = tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .map_err(|_| self.timed_out(method, path, "answer", REQUEST_TIMEOUT))??;
        if !(200..300).contains(&code) {
            return Err(status_error(method, path, code, &bytes));
        }
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&bytes).map_err(|e| ApiError::Decode {
            method: method.as_str(),
            path: path.to_string(),
            message: e.to_string(),
        })
    }

    async fn watch(&self, path: &str) -> Result<WatchLines, ApiError> {
        let method = Method::Get;
        let request = self.build(method, path, None)?;
        let opened = tokio::time::timeout(WATCH_OPEN_TIMEOUT, self.client.request_stream(request))
            .await
            .map_err(|_| self.timed_out(method, path, "response headers", WATCH_OPEN_TIMEOUT))?;
        let reader = match opened {
            Ok(reader) => reader,
            // kube has already decoded the error body into a `Status`; an undecodable body was
            // turned into one carrying the HTTP code and the text.
            Err(kube::Error::Api(status)) => {
                return Err(ApiError::Status {
                    method: method.as_str(),
                    path: path.to_string(),
                    code: status.code,
                    reason: status.reason.clone(),
                    message: status.message.clone(),
                })
            }
            Err(e) => return Err(self.transport(method, path, &e)),
        };
        let owned_path = path.to_string();
        let describe = format!("{} ({})", self.server, self.purpose);
        let lines = reader
            .lines()
            .try_filter(|line| futures::future::ready(!line.trim().is_empty()))
            .map_err(move |e| ApiError::Transport {
                method: "GET",
                path: owned_path.clone(),
                message: format!("{describe}: watch stream broken: {}", error_chain(&e)),
            });
        Ok(lines.boxed())
    }

    fn describe(&self) -> String {
        self.server.clone()
    }
}

#[cfg(test)]
/// Also lends its HTTPS test server to `sources::kube_external_node`'s test over TLS.
pub(crate) mod tests {
    use super::*;
    use crate::config::parse_period;
    use std::sync::{Arc, Mutex};

    use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
    use base64::Engine;
    use bytes::Bytes;
    use futures::channel::mpsc;
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

    /// A test CA, and certificates it signed, in PEM.
    pub(crate) struct Pki {
        ca_pem: String,
        server_cert: CertificateDer<'static>,
        server_key: Vec<u8>,
        client_cert_pem: String,
        client_key_pem: String,
    }

    fn ca() -> CertifiedIssuer<'static, KeyPair> {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        CertifiedIssuer::self_signed(params, KeyPair::generate().expect("key")).expect("ca")
    }

    pub(crate) fn pki() -> Pki {
        let ca = ca();
        let server_key = KeyPair::generate().expect("key");
        let server = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .expect("params")
            .signed_by(&server_key, &ca)
            .expect("server cert");
        let client_key = KeyPair::generate().expect("key");
        let mut client_params = CertificateParams::new(Vec::<String>::new()).expect("params");
        client_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "vm-agent");
        let client = client_params.signed_by(&client_key, &ca).expect("client cert");
        Pki {
            ca_pem: ca.pem(),
            server_cert: server.der().clone(),
            server_key: server_key.serialize_der(),
            client_cert_pem: client.pem(),
            client_key_pem: client_key.serialize_pem(),
        }
    }

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    /// Writes a kubeconfig; `cluster` and `user` are extra YAML lines for those sections.
    pub(crate) fn kubeconfig(dir: &Path, server: &str, cluster: &[String], user: &[String]) -> PathBuf {
        let indent = |lines: &[String], n: usize| {
            lines
                .iter()
                .map(|l| format!("{}{l}\n", " ".repeat(n)))
                .collect::<String>()
        };
        let text = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: ctx\nclusters:\n- name: c\n  cluster:\n    \
             server: {server}\n{}contexts:\n- name: ctx\n  context:\n    cluster: c\n    user: u\n\
             users:\n- name: u\n  user:\n{}",
            indent(cluster, 4),
            if user.is_empty() {
                "    {}\n".to_string()
            } else {
                indent(user, 4)
            }
        );
        let path = dir.join("agent.kubeconfig");
        std::fs::write(&path, text).expect("write kubeconfig");
        path
    }

    pub(crate) fn ca_data(pki: &Pki) -> Vec<String> {
        vec![format!("certificate-authority-data: {}", b64(&pki.ca_pem))]
    }

    pub(crate) fn token(t: &str) -> Vec<String> {
        vec![format!("token: {t}")]
    }

    #[test]
    fn default_liveness_detects_a_silent_peer_within_a_minute() {
        let l = Liveness::default();
        assert_eq!(l.keepalive_idle, Duration::from_secs(15));
        assert_eq!(l.keepalive_interval, Duration::from_secs(5));
        assert_eq!(l.keepalive_probes, 3);
        assert_eq!(l.user_timeout, Duration::from_secs(30));
        assert_eq!(l.detection_bound(), Duration::from_secs(35));
        assert!(l.detection_bound() < Duration::from_secs(60));
        // Scaled down for tests, never below the kernel's one-second granularity.
        let fast = Liveness::within(Duration::from_secs(6));
        assert_eq!(
            (fast.keepalive_idle, fast.keepalive_interval, fast.user_timeout),
            (
                Duration::from_secs(3),
                Duration::from_secs(1),
                Duration::from_secs(6)
            )
        );
        let tiny = Liveness::within(Duration::from_millis(10));
        assert!(
            tiny.keepalive_idle >= Duration::from_secs(1)
                && tiny.keepalive_interval >= Duration::from_secs(1)
        );
    }

    #[test]
    fn liveness_periods_parse() {
        assert_eq!(parse_period("6s"), Some(Duration::from_secs(6)));
        assert_eq!(parse_period("1m"), Some(Duration::from_secs(60)));
        assert_eq!(parse_period("1500ms"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_period("0s"), None);
        assert_eq!(parse_period("soon"), None);
    }

    #[tokio::test]
    async fn kubeconfig_with_token_and_ca_data_verifies_tls() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = pki();
        let path = kubeconfig(dir.path(), "https://10.0.0.1:6443", &ca_data(&pki), &token("abc"));
        let client = KubeApiClient::from_kubeconfig(&path, "kube-apiserver").expect("client");
        assert!(client.tls_verified());
        assert_eq!(client.server(), "https://10.0.0.1:6443");
        assert_eq!(client.describe(), "https://10.0.0.1:6443");
        assert_eq!(client.purpose(), "kube-apiserver");
    }

    #[tokio::test]
    async fn kubeconfig_with_relative_ca_file_and_token_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = pki();
        std::fs::write(dir.path().join("ca.crt"), &pki.ca_pem).expect("ca");
        std::fs::write(dir.path().join("token"), "abc\n").expect("token");
        let path = kubeconfig(
            dir.path(),
            "https://10.0.0.1:6443",
            &["certificate-authority: ca.crt".to_string()],
            &["tokenFile: token".to_string()],
        );
        let client = KubeApiClient::from_kubeconfig(&path, "kube-apiserver").expect("client");
        assert!(client.tls_verified());

        // A CA file that does not exist is named in the error.
        let path = kubeconfig(
            dir.path(),
            "https://10.0.0.1:6443",
            &["certificate-authority: missing-ca.crt".to_string()],
            &token("abc"),
        );
        let err = KubeApiClient::from_kubeconfig(&path, "kube-apiserver").expect_err("missing CA");
        let msg = err.to_string();
        assert!(
            msg.contains("agent.kubeconfig") && msg.contains("missing-ca.crt"),
            "{msg}"
        );

        // So is a token file that does not exist.
        let path = kubeconfig(
            dir.path(),
            "https://10.0.0.1:6443",
            &ca_data(&pki),
            &["tokenFile: no-token".to_string()],
        );
        let err = KubeApiClient::from_kubeconfig(&path, "kube-apiserver").expect_err("no token");
        assert!(err.to_string().contains("no-token"), "{err}");
    }

    #[tokio::test]
    async fn kubeconfig_with_client_certificate_data_and_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = pki();
        let data = vec![
            format!("client-certificate-data: {}", b64(&pki.client_cert_pem)),
            format!("client-key-data: {}", b64(&pki.client_key_pem)),
        ];
        let path = kubeconfig(dir.path(), "https://10.0.0.1:6443", &ca_data(&pki), &data);
        KubeApiClient::from_kubeconfig(&path, "antrea-controller").expect("client from data");

        std::fs::write(dir.path().join("client.crt"), &pki.client_cert_pem).expect("crt");
        std::fs::write(dir.path().join("client.key"), &pki.client_key_pem).expect("key");
        let files = vec![
            "client-certificate: client.crt".to_string(),
            "client-key: client.key".to_string(),
        ];
        let path = kubeconfig(dir.path(), "https://10.0.0.1:6443", &ca_data(&pki), &files);
        KubeApiClient::from_kubeconfig(&path, "antrea-controller").expect("client from files");

        // A certificate that is not one fails with the file named.
        std::fs::write(dir.path().join("client.crt"), "not a certificate\n").expect("crt");
        let err = KubeApiClient::from_kubeconfig(&path, "antrea-controller").expect_err("bad cert");
        let msg = err.to_string();
        assert!(
            msg.contains("agent.kubeconfig") && msg.contains("antrea-controller"),
            "{msg}"
        );
    }

    #[tokio::test]
    async fn insecure_kubeconfig_is_reported_as_unverified() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = kubeconfig(
            dir.path(),
            "https://10.0.0.1:6443",
            &["insecure-skip-tls-verify: true".to_string()],
            &token("abc"),
        );
        let client = KubeApiClient::from_kubeconfig(&path, "kube-apiserver").expect("client");
        assert!(!client.tls_verified());
    }

    #[tokio::test]
    async fn broken_kubeconfigs_are_named_and_explained() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("nope.kubeconfig");
        let err = KubeApiClient::from_kubeconfig(&missing, "kube-apiserver").expect_err("missing");
        let msg = err.to_string();
        assert!(
            msg.contains("nope.kubeconfig") && msg.contains("does not exist"),
            "{msg}"
        );

        let path = dir.path().join("no-context.kubeconfig");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: https://h}\n",
        )
        .expect("write");
        let err = KubeApiClient::from_kubeconfig(&path, "kube-apiserver").expect_err("no context");
        assert!(err.to_string().contains("no current-context"), "{err}");

        let path = dir.path().join("garbage.kubeconfig");
        std::fs::write(&path, "clusters: [unclosed\n").expect("write");
        let err = KubeApiClient::from_kubeconfig(&path, "kube-apiserver").expect_err("garbage");
        assert!(err.to_string().contains("garbage.kubeconfig"), "{err}");
    }

    #[test]
    fn outside_a_runtime_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = kubeconfig(dir.path(), "https://10.0.0.1:6443", &[], &token("abc"));
        let err = KubeApiClient::from_kubeconfig(&path, "kube-apiserver").expect_err("no runtime");
        assert!(err.to_string().contains("tokio runtime"), "{err}");
    }

    #[test]
    fn status_bodies_and_plain_bodies_map_to_status_errors() {
        let body = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"externalnodes.crd.antrea.io \"vm1\" not found","reason":"NotFound","code":404}"#;
        match status_error(Method::Get, "/x", 404, body) {
            ApiError::Status {
                code,
                reason,
                message,
                ..
            } => {
                assert_eq!(code, 404);
                assert_eq!(reason, "NotFound");
                assert!(message.contains("not found"));
            }
            other => panic!("{other:?}"),
        }
        match status_error(Method::Post, "/y", 503, b"upstream down\n") {
            ApiError::Status {
                code,
                reason,
                message,
                method,
                ..
            } => {
                assert_eq!((code, method), (503, "POST"));
                assert_eq!(reason, "Service Unavailable");
                assert_eq!(message, "upstream down");
            }
            other => panic!("{other:?}"),
        }
    }

    // === against a real HTTPS server ===

    /// Feeds the body of the next `/watch` answer, line by line, from the test.
    pub(crate) type WatchFeed = Arc<Mutex<Option<mpsc::UnboundedReceiver<Bytes>>>>;

    fn authorization(req: &HttpRequest) -> String {
        req.headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    }

    async fn who(req: HttpRequest) -> HttpResponse {
        HttpResponse::Ok().json(serde_json::json!({
            "authorization": authorization(&req),
            "accept": req.headers().get("accept").and_then(|v| v.to_str().ok()),
        }))
    }

    async fn echo(req: HttpRequest, body: Bytes) -> HttpResponse {
        let content_type = req
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        HttpResponse::Ok().json(serde_json::json!({"contentType": content_type, "body": body}))
    }

    async fn missing() -> HttpResponse {
        HttpResponse::NotFound().json(serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "externalnodes.crd.antrea.io \"vm1\" not found",
            "reason": "NotFound", "details": {"name": "vm1", "group": "crd.antrea.io", "kind": "externalnodes"},
            "code": 404
        }))
    }

    async fn watch(feed: web::Data<WatchFeed>) -> HttpResponse {
        let receiver = feed.lock().ok().and_then(|mut r| r.take());
        match receiver {
            Some(rx) => HttpResponse::Ok()
                .content_type("application/json")
                .streaming(rx.map(Ok::<_, actix_web::Error>)),
            None => HttpResponse::Gone().json(serde_json::json!({
                "kind": "Status", "status": "Failure", "reason": "Expired", "message": "too old", "code": 410
            })),
        }
    }

    const EN_COLLECTION: &str = "/apis/crd.antrea.io/v1alpha1/namespaces/vm-ns/externalnodes";

    /// The ExternalNode collection: a LIST (empty), or a WATCH fed by the test.
    async fn en_collection(req: HttpRequest, feed: web::Data<WatchFeed>) -> HttpResponse {
        if req.query_string().contains("watch=true") {
            watch(feed).await
        } else {
            HttpResponse::Ok().json(serde_json::json!({
                "apiVersion": "crd.antrea.io/v1alpha1", "kind": "ExternalNodeList",
                "metadata": {"resourceVersion": "41"}, "items": []
            }))
        }
    }

    /// A running HTTPS test server; stops when dropped.
    pub(crate) struct Server {
        pub(crate) url: String,
        handle: actix_web::dev::ServerHandle,
        pub(crate) feed: WatchFeed,
    }

    impl Drop for Server {
        fn drop(&mut self) {
            // Stopping is asynchronous; the runtime ending with the test finishes it.
            drop(self.handle.stop(false));
        }
    }

    pub(crate) fn start_server(pki: &Pki, require_client_cert: bool) -> Server {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("protocols");
        let builder = if require_client_cert {
            let mut roots = rustls::RootCertStore::empty();
            for cert in rustls_pemfile::certs(&mut pki.ca_pem.as_bytes()) {
                roots.add(cert.expect("ca pem")).expect("root");
            }
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                    .build()
                    .expect("client verifier");
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        let tls = builder
            .with_single_cert(
                vec![pki.server_cert.clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pki.server_key.clone())),
            )
            .expect("server tls");
        let feed: WatchFeed = Arc::new(Mutex::new(None));
        let data = web::Data::new(feed.clone());
        let server = HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                .route("/api/who", web::get().to(who))
                .route("/api/echo", web::put().to(echo))
                .route("/api/missing", web::get().to(missing))
                .route(
                    "/api/plain",
                    web::get().to(|| async { HttpResponse::ServiceUnavailable().body("try later") }),
                )
                .route("/watch", web::get().to(watch))
                .route(EN_COLLECTION, web::get().to(en_collection))
                .route(&format!("{EN_COLLECTION}/{{name}}"), web::get().to(missing))
        })
        .workers(1)
        .disable_signals()
        .bind_rustls_0_23(("127.0.0.1", 0), tls)
        .expect("bind");
        let addr = server.addrs()[0];
        let server = server.run();
        let handle = server.handle();
        actix_rt::spawn(server);
        Server {
            url: format!("https://{addr}"),
            handle,
            feed,
        }
    }

    async fn next_line(lines: &mut WatchLines) -> Option<Result<String, ApiError>> {
        tokio::time::timeout(Duration::from_secs(10), lines.next())
            .await
            .expect("watch line in time")
    }

    #[actix_rt::test]
    async fn talks_https_with_ca_token_status_errors_and_streaming_watch() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = pki();
        let server = start_server(&pki, false);
        let path = kubeconfig(dir.path(), &server.url, &ca_data(&pki), &token("s3cret"));
        let client = KubeApiClient::from_kubeconfig(&path, "kube-apiserver").expect("client");
        assert!(client.tls_verified());

        let who = client.request(Method::Get, "/api/who", None).await.expect("who");
        assert_eq!(who["authorization"], "Bearer s3cret");
        assert_eq!(who["accept"], "application/json");

        let sent = serde_json::json!({"metadata": {"name": "vm1"}});
        let echoed = client
            .request(Method::Put, "/api/echo", Some(&sent))
            .await
            .expect("echo");
        assert_eq!(echoed["contentType"], "application/json");
        assert_eq!(echoed["body"], sent);

        let err = client
            .request(Method::Get, "/api/missing", None)
            .await
            .expect_err("404");
        assert!(err.is_not_found(), "{err:?}");
        match &err {
            ApiError::Status { reason, message, .. } => {
                assert_eq!(reason, "NotFound");
                assert!(message.contains("\"vm1\" not found"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        let err = client
            .request(Method::Get, "/api/plain", None)
            .await
            .expect_err("503");
        assert_eq!(err.code(), Some(503), "{err:?}");

        // A watch delivers each line as it is written, not when the body ends.
        let (tx, rx) = mpsc::unbounded();
        *server.feed.lock().expect("feed") = Some(rx);
        let mut lines = client.watch("/watch").await.expect("watch");
        tx.unbounded_send(Bytes::from_static(b"{\"type\":\"ADDED\"}\n"))
            .expect("send");
        assert_eq!(
            next_line(&mut lines).await.expect("line").expect("ok"),
            "{\"type\":\"ADDED\"}"
        );
        // The second line is written only after the first one was received; it arrives in
        // two chunks, and blank keep-alive lines are skipped.
        tx.unbounded_send(Bytes::from_static(b"\n{\"type\":\"MOD"))
            .expect("send");
        tx.unbounded_send(Bytes::from_static(b"IFIED\"}\n"))
            .expect("send");
        assert_eq!(
            next_line(&mut lines).await.expect("line").expect("ok"),
            "{\"type\":\"MODIFIED\"}"
        );
        drop(tx);
        assert!(next_line(&mut lines).await.is_none(), "stream ends with the body");

        // A watch refused with a Status is an error with its code.
        let err = client.watch("/watch").await.err().expect("410");
        assert_eq!(err.code(), Some(410), "{err:?}");
    }

    #[actix_rt::test]
    async fn refuses_a_server_not_signed_by_the_ca_unless_insecure() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = pki();
        let server = start_server(&pki, false);
        let other_ca = ca();
        let cluster = vec![format!("certificate-authority-data: {}", b64(&other_ca.pem()))];
        let path = kubeconfig(dir.path(), &server.url, &cluster, &token("s3cret"));
        let client = KubeApiClient::from_kubeconfig(&path, "kube-apiserver").expect("client");
        let err = client
            .request(Method::Get, "/api/who", None)
            .await
            .expect_err("untrusted server");
        match &err {
            ApiError::Transport { message, .. } => {
                assert!(message.to_lowercase().contains("certificate"), "{message}")
            }
            other => panic!("expected a transport error, got {other:?}"),
        }
        let err = client.watch("/watch").await.err().expect("untrusted watch");
        assert!(matches!(err, ApiError::Transport { .. }), "{err:?}");

        let path = kubeconfig(
            dir.path(),
            &server.url,
            &["insecure-skip-tls-verify: true".to_string()],
            &token("s3cret"),
        );
        let client = KubeApiClient::from_kubeconfig(&path, "kube-apiserver").expect("client");
        assert!(!client.tls_verified());
        let who = client
            .request(Method::Get, "/api/who", None)
            .await
            .expect("insecure");
        assert_eq!(who["authorization"], "Bearer s3cret");
    }

    #[actix_rt::test]
    async fn presents_the_client_certificate_to_a_server_that_requires_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = pki();
        let server = start_server(&pki, true);
        let user = vec![
            format!("client-certificate-data: {}", b64(&pki.client_cert_pem)),
            format!("client-key-data: {}", b64(&pki.client_key_pem)),
        ];
        let path = kubeconfig(dir.path(), &server.url, &ca_data(&pki), &user);
        let client = KubeApiClient::from_kubeconfig(&path, "antrea-controller").expect("client");
        let who = client.request(Method::Get, "/api/who", None).await.expect("mTLS");
        assert_eq!(who["authorization"], "");

        // Without a certificate the handshake is refused.
        std::fs::write(dir.path().join("token"), "tok").expect("token");
        let path = kubeconfig(
            dir.path(),
            &server.url,
            &ca_data(&pki),
            &["tokenFile: token".to_string()],
        );
        let client = KubeApiClient::from_kubeconfig(&path, "antrea-controller").expect("client");
        let err = client
            .request(Method::Get, "/api/who", None)
            .await
            .expect_err("no client cert");
        assert!(matches!(err, ApiError::Transport { .. }), "{err:?}");
    }
}
