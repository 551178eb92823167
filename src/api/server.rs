//! The agent's HTTP listeners, run by actix-web inside the actix System of the actors:
//!
//! * the **metrics listener** on `metricsServer.bindAddress` (default `127.0.0.1:10351`, next to
//!   upstream's agent API port 10350): `/metrics`, `/livez`, `/readyz`, `/healthz`; HTTPS when
//!   `tlsCertFile`/`tlsKeyFile` are set (rustls, ring provider, TLS 1.2 and 1.3); with
//!   `bearerTokenFile`, `/metrics` requires `Authorization: Bearer <token>` (health stays open);
//! * the **agent API** on the unix socket `agentAPI.socket` (default
//!   `/var/run/antrea/antrea-vm-agent.sock`), mode 0600 so only root can use it: the same paths
//!   plus the JSON endpoints of `antrea-vm-agent get` (see [`super::handlers`]).
//!
//! The socket is created under a private temporary name and renamed into place once its mode is
//! 0600, so there is no moment when another user could connect. A stale socket left by a dead
//! agent is replaced; a live one (another agent answering) is left alone and reported.
//!
//! Each listener starts independently: a failure (address in use, unreadable certificate) is
//! returned for the caller to log, and the other listener and the agent keep running.

use std::fs::File;
use std::io::BufReader;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use actix_web::dev::ServerHandle;
use actix_web::{web, App, HttpServer};
use tracing::{info, warn};

use super::handlers::{self, ApiState, MetricsAuth};
use crate::config::{Config, TlsFiles};

/// Why a listener could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("metrics listener: cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("metrics listener: TLS file {path}: {message}")]
    Tls { path: PathBuf, message: String },
    #[error("metrics listener: bearer token file {path}: {message}")]
    Token { path: PathBuf, message: String },
    #[error("agent API socket {path}: {message}")]
    Socket { path: PathBuf, message: String },
}

/// What to serve, from the configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerOptions {
    /// `None`: no metrics listener.
    pub metrics_address: Option<SocketAddr>,
    pub tls: Option<TlsFiles>,
    pub bearer_token_file: Option<PathBuf>,
    /// `None`: no agent API socket.
    pub api_socket: Option<PathBuf>,
}

impl ServerOptions {
    pub fn from_config(config: &Config) -> Self {
        ServerOptions {
            metrics_address: config.metrics_server.bind_address,
            tls: config.metrics_server.tls.clone(),
            bearer_token_file: config.metrics_server.bearer_token_file.clone(),
            api_socket: Some(config.agent_api_socket.clone()),
        }
    }
}

/// The running listeners.
pub struct ApiServer {
    handles: Vec<ServerHandle>,
    /// The metrics listener's address (with the real port when 0 was asked for).
    pub metrics_address: Option<SocketAddr>,
    /// Whether the metrics listener speaks TLS.
    pub metrics_tls: bool,
    /// The agent API socket, when it is served.
    pub api_socket: Option<PathBuf>,
}

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServer")
            .field("metrics_address", &self.metrics_address)
            .field("metrics_tls", &self.metrics_tls)
            .field("api_socket", &self.api_socket)
            .finish()
    }
}

fn tls_error(path: &Path, message: impl std::fmt::Display) -> ServerError {
    ServerError::Tls {
        path: path.to_path_buf(),
        message: message.to_string(),
    }
}

/// A rustls server configuration from PEM files (ring provider; TLS 1.2 and 1.3).
pub fn tls_config(files: &TlsFiles) -> Result<rustls::ServerConfig, ServerError> {
    let cert_path = &files.cert_file;
    let key_path = &files.key_file;
    let mut certs_in = BufReader::new(File::open(cert_path).map_err(|e| tls_error(cert_path, e))?);
    let certs = rustls_pemfile::certs(&mut certs_in)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls_error(cert_path, e))?;
    if certs.is_empty() {
        return Err(tls_error(cert_path, "no PEM certificate in it"));
    }
    let mut key_in = BufReader::new(File::open(key_path).map_err(|e| tls_error(key_path, e))?);
    let key = rustls_pemfile::private_key(&mut key_in)
        .map_err(|e| tls_error(key_path, e))?
        .ok_or_else(|| tls_error(key_path, "no PEM private key in it"))?;
    // An explicit provider: the process default may be ambiguous when several are compiled in.
    rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error(cert_path, e))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| tls_error(key_path, e))
}

fn read_token(path: &Path) -> Result<String, ServerError> {
    let err = |message: String| ServerError::Token {
        path: path.to_path_buf(),
        message,
    };
    let token = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let token = token.trim().to_string();
    if token.is_empty() {
        return Err(err("it is empty".into()));
    }
    Ok(token)
}

fn socket_error(path: &Path, message: impl std::fmt::Display) -> ServerError {
    ServerError::Socket {
        path: path.to_path_buf(),
        message: message.to_string(),
    }
}

/// Binds `path` with mode 0600: bound under a temporary name in the same directory, restricted,
/// then renamed over `path` (atomic; replaces a stale socket).
fn bind_private_socket(path: &Path) -> Result<UnixListener, ServerError> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)
        .map_err(|e| socket_error(path, format!("cannot create {}: {e}", dir.display())))?;
    // A socket nobody answers on was left by an agent that died: the rename below replaces it.
    if path.exists() && UnixStream::connect(path).is_ok() {
        return Err(socket_error(
            path,
            "another process is serving it (another agent running?)",
        ));
    }
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "agent.sock".into());
    let tmp = dir.join(format!(".{file_name}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let listener = UnixListener::bind(&tmp).map_err(|e| socket_error(path, e))?;
    let finish = || -> std::io::Result<()> {
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
        std::fs::rename(&tmp, path)
    };
    if let Err(e) = finish() {
        let _ = std::fs::remove_file(&tmp);
        return Err(socket_error(path, e));
    }
    Ok(listener)
}

impl ApiServer {
    /// Starts the listeners `opts` asks for on the current actix System. Returns what runs and
    /// the errors of what could not start.
    pub fn start(opts: &ServerOptions, state: ApiState) -> (ApiServer, Vec<ServerError>) {
        let mut server = ApiServer {
            handles: Vec::new(),
            metrics_address: None,
            metrics_tls: false,
            api_socket: None,
        };
        let mut errors = Vec::new();
        if let Some(addr) = opts.metrics_address {
            match start_metrics(addr, opts, state.clone()) {
                Ok((handle, bound, tls)) => {
                    info!(address = %bound, tls, token = opts.bearer_token_file.is_some(),
                        "serving /metrics, /livez and /readyz");
                    server.handles.push(handle);
                    server.metrics_address = Some(bound);
                    server.metrics_tls = tls;
                }
                Err(e) => errors.push(e),
            }
        }
        if let Some(path) = &opts.api_socket {
            match start_api(path, state) {
                Ok(handle) => {
                    info!(socket = %path.display(), "serving the agent API");
                    server.handles.push(handle);
                    server.api_socket = Some(path.clone());
                }
                Err(e) => errors.push(e),
            }
        }
        (server, errors)
    }

    /// Stops the listeners (in-flight requests get a second to finish) and removes the socket.
    pub async fn stop(self) {
        for h in &self.handles {
            h.stop(true).await;
        }
        if let Some(p) = &self.api_socket {
            if let Err(e) = std::fs::remove_file(p) {
                warn!(socket = %p.display(), "cannot remove the agent API socket: {e}");
            }
        }
    }
}

/// Starts what `opts` asks for, logging what could not start (the agent runs on without it).
pub fn serve(opts: &ServerOptions, state: ApiState) -> ApiServer {
    let (server, errors) = ApiServer::start(opts, state);
    for e in errors {
        tracing::error!("{e}; continuing without it");
    }
    server
}

/// When systemd started the agent with `Type=notify` (`NOTIFY_SOCKET` set), reports readiness
/// (`READY=1` once `/readyz` would pass), status lines and watchdog pings, checking every second.
pub fn start_systemd_notifier(supervisor: actix::Addr<crate::actors::Supervisor>) {
    use super::collect::{self, Depth};
    use super::notify::{run_notifier, Health, Notifier};
    let Some(notifier) = Notifier::from_env() else {
        return;
    };
    info!(watchdog = ?notifier.watchdog_interval(), "notifying systemd of readiness");
    actix_rt::spawn(run_notifier(
        notifier,
        std::time::Duration::from_secs(1),
        move || {
            let supervisor = supervisor.clone();
            async move {
                let c = collect::collect(&supervisor, Depth::Status).await;
                let ready = collect::readiness(&c);
                Health {
                    ready: ready.ok(),
                    responsive: c.report.is_some(),
                    status: collect::status_line(&c, &ready),
                }
            }
        },
    ));
}

fn start_metrics(
    addr: SocketAddr,
    opts: &ServerOptions,
    state: ApiState,
) -> Result<(ServerHandle, SocketAddr, bool), ServerError> {
    let tls = opts.tls.as_ref().map(tls_config).transpose()?;
    let token = opts.bearer_token_file.as_deref().map(read_token).transpose()?;
    let listener = TcpListener::bind(addr).map_err(|source| ServerError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| ServerError::Bind { addr, source })?;
    let data = web::Data::new(state);
    let auth = web::Data::new(MetricsAuth(token));
    let http = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .app_data(auth.clone())
            .configure(handlers::metrics_routes)
    })
    .workers(1)
    .disable_signals()
    .shutdown_timeout(1);
    let is_tls = tls.is_some();
    let http = match tls {
        Some(cfg) => http.listen_rustls_0_23(listener, cfg),
        None => http.listen(listener),
    }
    .map_err(|source| ServerError::Bind { addr, source })?;
    let running = http.run();
    let handle = running.handle();
    actix_rt::spawn(async move {
        if let Err(e) = running.await {
            warn!("metrics listener stopped: {e}");
        }
    });
    Ok((handle, bound, is_tls))
}

fn start_api(path: &Path, state: ApiState) -> Result<ServerHandle, ServerError> {
    let listener = bind_private_socket(path)?;
    let data = web::Data::new(state);
    let auth = web::Data::new(MetricsAuth(None));
    let http = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .app_data(auth.clone())
            .configure(handlers::api_routes)
    })
    .workers(1)
    .disable_signals()
    .shutdown_timeout(1)
    .listen_uds(listener)
    .map_err(|e| socket_error(path, e))?;
    let running = http.run();
    let handle = running.handle();
    actix_rt::spawn(async move {
        if let Err(e) = running.await {
            warn!("agent API stopped: {e}");
        }
    });
    Ok(handle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_is_private_and_a_stale_one_is_replaced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sub/agent.sock");
        let first = bind_private_socket(&path).expect("bind");
        let mode = std::fs::metadata(&path).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // A live socket is not taken over.
        let err = bind_private_socket(&path).expect_err("in use");
        assert!(err.to_string().contains("another process is serving it"), "{err}");
        drop(first);
        // Nobody listens any more: the stale file is replaced.
        let _second = bind_private_socket(&path).expect("rebind");
        let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("sub"))
            .expect("ls")
            .filter_map(Result::ok)
            .map(|e| e.file_name())
            .collect();
        assert_eq!(leftovers, vec![std::ffi::OsString::from("agent.sock")]);
    }

    #[test]
    fn tls_and_token_problems_name_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = TlsFiles {
            cert_file: dir.path().join("missing.crt"),
            key_file: dir.path().join("missing.key"),
        };
        let e = tls_config(&files).expect_err("missing");
        assert!(e.to_string().contains("missing.crt"), "{e}");
        std::fs::write(&files.cert_file, "not pem").expect("write");
        let e = tls_config(&files).expect_err("empty");
        assert!(e.to_string().contains("no PEM certificate"), "{e}");
        let token = dir.path().join("token");
        std::fs::write(&token, "  \n").expect("write");
        let e = read_token(&token).expect_err("empty token");
        assert!(e.to_string().contains("it is empty"), "{e}");
        std::fs::write(&token, "s3cret\n").expect("write");
        assert_eq!(read_token(&token).expect("token"), "s3cret");
    }

    #[test]
    fn a_generated_certificate_loads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("cert");
        let files = TlsFiles {
            cert_file: dir.path().join("m.crt"),
            key_file: dir.path().join("m.key"),
        };
        std::fs::write(&files.cert_file, cert.cert.pem()).expect("write");
        std::fs::write(&files.key_file, cert.signing_key.serialize_pem()).expect("write");
        tls_config(&files).expect("loads");
    }
}
