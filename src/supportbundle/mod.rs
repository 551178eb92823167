//! The support bundle: one tar.gz with what an operator (or Antrea's support) needs to tell why
//! the agent does what it does — the agent's logs, its configuration and the kubeconfigs it
//! names with every credential removed ([`redact`]), its state files, every `get` output, the
//! bridge's flows, groups and meters, the OVSDB content, ovs-vswitchd's log, coverage and
//! datapath, the host's addresses, routes, rules, links and nftables ruleset, and versions.
//!
//! [`collect`] gathers it (concurrently, each collector under a timeout and drawing from one
//! byte budget as it reads, so memory stays near the total bound: [`collectors`]), scrubs every
//! file of the secrets it learned, and bounds each file and the whole ([`archive`]);
//! [`Bundle::write_to`] writes the archive to any writer, [`Bundle::write_file`] to a path. A
//! collector that fails (a tool missing, OVS down, the agent stopped) is an entry of the
//! manifest with its reason, never the end of the bundle. `antrea-vm-agent supportbundle` is
//! [`command`]; a SupportBundleCollection can call [`collect`] and [`Bundle::write_to`] the same
//! way.
//!
//! Layout, under `antrea-vm-agent-supportbundle-<node>-<time>/`: `manifest.json`,
//! `versions.txt`, `agent/config/` (redacted), `agent/get/<resource>.{txt,json}`,
//! `agent/logs/` (the log file and its rotated copies, the journal, `audit/`),
//! `agent/state/`, `ovs/` (`flows.txt`, `groups.txt`, `meters.txt`, `ofctl-show.txt`,
//! `ovsdb-dump.txt`, `vsctl-show.txt`, `vswitchd/*.txt`, `logs/`), `host/` (ip, nft).

pub mod archive;
pub mod collectors;
pub mod redact;

use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt};

use archive::{bound_items, write_tar_gz, ArchiveError};
pub use archive::{Budget, Entry, Item, Keep, Limits, Manifest, Status, MANIFEST};
use collectors::{log_files, run_command, tree};
use redact::Secrets;

use crate::config::{
    Config, DEFAULT_AGENT_API_SOCKET, DEFAULT_OVS_BRIDGE, DEFAULT_OVS_RUN_DIR, DEFAULT_STATE_DIR,
};
use crate::ovs::vswitchd::Vswitchd;

/// Where the packaged systemd unit writes the agent's log (`--log_file`), used when no agent
/// runs to say where its log is and `--log-file` is not given.
pub const DEFAULT_AGENT_LOG: &str = "/var/log/antrea/antrea-agent.log";
/// Collectors running at once: the machine keeps enforcing policies meanwhile.
const PARALLEL: usize = 4;
/// The largest configuration file or kubeconfig read (they are a few kilobytes).
pub const MAX_CONFIG_BYTES: u64 = 4 * 1024 * 1024;

/// What to collect and within which bounds.
#[derive(Clone, Debug)]
pub struct Options {
    /// `antrea-agent.conf`.
    pub config: PathBuf,
    /// The agent's log files; empty: the running agent's `--log_file`, else
    /// [`DEFAULT_AGENT_LOG`].
    pub log_files: Vec<PathBuf>,
    /// Only the logs (rotated copies, journal, audit logs) of this last period.
    pub since: Option<Duration>,
    pub limits: Limits,
}

impl Options {
    pub fn new(config: PathBuf) -> Options {
        Options {
            config,
            log_files: Vec::new(),
            since: None,
            limits: Limits::default(),
        }
    }
}

/// A collected bundle, bounded and scrubbed, ready to be written.
#[derive(Debug)]
pub struct Bundle {
    /// The directory every file of the archive is under.
    pub root: String,
    pub items: Vec<Item>,
    pub manifest: Manifest,
}

/// Why the bundle could not be written (collecting never fails: see the manifest).
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    #[error("{path}: {source}")]
    Output { path: String, source: std::io::Error },
}

impl Bundle {
    /// Writes the tar.gz to `out` and returns it.
    pub fn write_to<W: Write>(&self, out: W) -> Result<W, BundleError> {
        Ok(write_tar_gz(out, &self.root, &self.items, &self.manifest)?)
    }

    /// Writes the tar.gz to `path` (through a temporary file beside it, renamed when complete, so
    /// a reader never sees half an archive); returns its size.
    pub fn write_file(&self, path: &Path) -> Result<u64, BundleError> {
        let err = |source| BundleError::Output {
            path: path.display().to_string(),
            source,
        };
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = path.with_file_name(format!(".{name}.{}.partial", std::process::id()));
        let written = (|| -> Result<u64, BundleError> {
            let f = std::fs::File::create(&tmp).map_err(err)?;
            let f = self.write_to(std::io::BufWriter::new(f))?;
            let f = f.into_inner().map_err(|e| err(e.into_error()))?;
            f.sync_all().map_err(err)?;
            let size = f.metadata().map_err(err)?.len();
            std::fs::rename(&tmp, path).map_err(err)?;
            Ok(size)
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        let size = written?;
        Ok(size)
    }
}

/// What the collectors need to know, from the configuration (or its defaults when it cannot be
/// loaded: a broken configuration is a reason to want a bundle).
struct Context {
    ovs_run_dir: PathBuf,
    bridge: String,
    datapath_type: String,
    state_dir: PathBuf,
    agent_api_socket: PathBuf,
    audit_log_dir: PathBuf,
    kubeconfigs: Vec<(&'static str, PathBuf)>,
    /// The files the configuration names whose contents are secret (`metricsServer`'s
    /// `bearerTokenFile` and `tlsKeyFile`), resolved as the agent resolves them.
    secret_files: Vec<PathBuf>,
}

impl Context {
    fn from_config(config: Option<&Config>) -> Context {
        match config {
            Some(c) => Context {
                ovs_run_dir: c.ovs_run_dir.clone(),
                bridge: c.ovs_bridge.clone(),
                datapath_type: c.ovs_datapath_type.as_str().to_string(),
                state_dir: c.state_dir.clone(),
                agent_api_socket: c.agent_api_socket.clone(),
                audit_log_dir: c.audit_logging.log_dir.clone(),
                kubeconfigs: [
                    ("clientConnection", c.kubeconfig.clone()),
                    ("antreaClientConnection", c.antrea_kubeconfig.clone()),
                ]
                .into_iter()
                .filter_map(|(k, p)| Some((k, p?)))
                .collect(),
                secret_files: c
                    .metrics_server
                    .bearer_token_file
                    .iter()
                    .chain(c.metrics_server.tls.as_ref().map(|t| &t.key_file))
                    .cloned()
                    .collect(),
            },
            None => Context {
                ovs_run_dir: PathBuf::from(DEFAULT_OVS_RUN_DIR),
                bridge: DEFAULT_OVS_BRIDGE.to_string(),
                datapath_type: "system".to_string(),
                state_dir: PathBuf::from(DEFAULT_STATE_DIR),
                agent_api_socket: PathBuf::from(DEFAULT_AGENT_API_SOCKET),
                audit_log_dir: crate::config::AuditLogging::default().log_dir,
                kubeconfigs: Vec::new(),
                secret_files: Vec::new(),
            },
        }
    }
}

/// A collector: where its files go (what a timeout is filed as) and the work.
type Job = (String, Pin<Box<dyn Future<Output = Vec<Item>> + Send>>);

fn job<F: Future<Output = Vec<Item>> + Send + 'static>(path: &str, f: F) -> Job {
    (path.to_string(), Box::pin(f))
}

fn one<F: Future<Output = Item> + Send + 'static>(path: &str, f: F) -> Job {
    (path.to_string(), Box::pin(async move { vec![f.await] }))
}

fn blocking<F: FnOnce() -> Vec<Item> + Send + 'static>(path: &str, f: F) -> Job {
    let what = path.to_string();
    (
        path.to_string(),
        Box::pin(async move {
            tokio::task::spawn_blocking(f)
                .await
                .unwrap_or_else(|e| vec![Item::failed(what.clone(), what, e.to_string())])
        }),
    )
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// Reads a configuration file or kubeconfig: a regular file of at most [`MAX_CONFIG_BYTES`]
/// (a FIFO or a device is refused, never opened for a blocking read).
fn read_config_file(path: &Path) -> Result<String, String> {
    use crate::sources::bounded::{read_regular_file, FileRead};
    match read_regular_file(path, MAX_CONFIG_BYTES) {
        Ok(FileRead::Text(t)) => Ok(t),
        Ok(FileRead::Missing) => Err("no such file".to_string()),
        Ok(FileRead::NotRegular(what)) => Err(format!("refused: it is {what}, not a regular file")),
        Err(e) => Err(format!("refused: {e}")),
    }
}

/// Learns the secret in each file of `files`; a refusal is a note of the manifest.
fn learn_files(files: &[PathBuf], secrets: &mut Secrets, notes: &mut Vec<String>) {
    for f in files {
        if let Err(why) = secrets.add_file(f) {
            notes.push(format!(
                "secret file {} not read, so not scrubbed from the other files: {why}",
                f.display()
            ));
        }
    }
}

/// The configuration's files, redacted, and the secrets they hold or name.
fn config_items(
    options: &Options,
    config_text: &Result<String, String>,
    ctx: &Context,
    secrets: &mut Secrets,
    notes: &mut Vec<String>,
) -> Vec<Item> {
    let mut items = Vec::new();
    let source = options.config.display().to_string();
    learn_files(&ctx.secret_files, secrets, notes);
    match config_text {
        Ok(text) => {
            if ctx.secret_files.is_empty() {
                // Not loaded: the paths as written, resolved as the agent does (Config::load).
                let base = std::env::current_dir().unwrap_or_default();
                learn_files(&redact::config_secret_files(text, &base), secrets, notes);
            }
            items.push(match redact::redact_config(text, secrets) {
                Ok(red) => Item::ok("agent/config/antrea-agent.conf", &source, red.into_bytes())
                    .note("secret-named keys redacted"),
                Err(e) => Item::failed("agent/config/antrea-agent.conf", &source, e.to_string()),
            });
        }
        Err(e) => items.push(Item::failed("agent/config/antrea-agent.conf", &source, e.clone())),
    }
    for (key, path) in &ctx.kubeconfigs {
        let bundle_path = format!("agent/config/{key}.kubeconfig");
        let source = path.display().to_string();
        match read_config_file(path) {
            Ok(text) => {
                let base = path.parent().unwrap_or(Path::new("/"));
                learn_files(&redact::kubeconfig_secret_files(&text, base), secrets, notes);
                items.push(match redact::redact_kubeconfig(&text, secrets) {
                    Ok(red) => Item::ok(bundle_path, source, red.into_bytes())
                        .note("credentials redacted; files named by path not copied"),
                    Err(e) => Item::failed(bundle_path, source, e.to_string()),
                });
            }
            Err(e) => items.push(Item::failed(bundle_path, source, e)),
        }
    }
    items
}

/// The jobs, in the order of the bundle (the total bound cuts the last ones first).
fn jobs(
    options: &Options,
    ctx: &Context,
    notes: &mut Vec<String>,
    api_down: Option<String>,
    budget: &Budget,
) -> Vec<Job> {
    let max = options.limits.max_file_bytes;
    let since = options.since;
    let run = ctx.ovs_run_dir.clone();
    let vswitchd = Arc::new(Vswitchd::new(run.clone(), &ctx.datapath_type));
    let mgmt = format!("unix:{}", run.join(format!("{}.mgmt", ctx.bridge)).display());
    let db = format!("unix:{}", run.join("db.sock").display());
    let mut jobs: Vec<Job> = vec![one(
        "versions.txt",
        collectors::versions(vswitchd.clone(), run.clone()),
    )];
    let b = budget.clone();

    jobs.push(job(
        "agent/get",
        collectors::agent_api(ctx.agent_api_socket.clone(), api_down, max, b.clone()),
    ));

    for (path, args) in [
        ("host/ip-addr.txt", &["-d", "-4", "addr", "show"][..]),
        ("host/ip-6-addr.txt", &["-d", "-6", "addr", "show"]),
        (
            "host/ip-route.txt",
            &["-d", "-4", "route", "show", "table", "all"],
        ),
        (
            "host/ip-6-route.txt",
            &["-d", "-6", "route", "show", "table", "all"],
        ),
        ("host/ip-rule.txt", &["-4", "rule", "show"]),
        ("host/ip-6-rule.txt", &["-6", "rule", "show"]),
        ("host/ip-link.txt", &["-d", "-s", "link", "show"]),
        ("host/ip-neigh.txt", &["neigh", "show"]),
    ] {
        let b = b.clone();
        jobs.push(one(path, async move {
            run_command(path, "ip", &strings(args), Keep::Head, max, &b).await
        }));
    }
    let b2 = b.clone();
    jobs.push(one("host/nft-ruleset.txt", async move {
        run_command(
            "host/nft-ruleset.txt",
            "nft",
            &strings(&["list", "ruleset"]),
            Keep::Head,
            max,
            &b2,
        )
        .await
    }));

    for (path, method, args) in [
        ("ovs/vswitchd/coverage.txt", "coverage/show", vec![]),
        ("ovs/vswitchd/dpif.txt", "dpif/show", vec![]),
        ("ovs/vswitchd/memory.txt", "memory/show", vec![]),
        ("ovs/vswitchd/upcall.txt", "upcall/show", vec![]),
        ("ovs/vswitchd/vlog.txt", "vlog/list", vec![]),
        (
            "ovs/vswitchd/datapath-flows.txt",
            "dpctl/dump-flows",
            vec![format!("{0}@ovs-{0}", ctx.datapath_type)],
        ),
    ] {
        let v = vswitchd.clone();
        let b = b.clone();
        jobs.push(one(path, async move {
            collectors::unixctl(v, path, method, &args, max, b).await
        }));
    }
    let ofctl = |path: &'static str, verb: &'static str, names: bool| {
        let mut args = strings(&["-O", "OpenFlow15", "--timeout=15", verb]);
        if names {
            args.push("--names".to_string());
        }
        args.push(mgmt.clone());
        let b = b.clone();
        one(path, async move {
            run_command(path, "ovs-ofctl", &args, Keep::Head, max, &b).await
        })
    };
    jobs.push(ofctl("ovs/ofctl-show.txt", "show", false));
    jobs.push(ofctl("ovs/groups.txt", "dump-groups", true));
    jobs.push(ofctl("ovs/meters.txt", "dump-meters", false));
    jobs.push(ofctl("ovs/flows.txt", "dump-flows", true));
    let vsctl = vec![
        format!("--db={db}"),
        "--timeout=10".to_string(),
        "show".to_string(),
    ];
    let b2 = b.clone();
    jobs.push(one("ovs/vsctl-show.txt", async move {
        run_command("ovs/vsctl-show.txt", "ovs-vsctl", &vsctl, Keep::Head, max, &b2).await
    }));
    let dump = vec!["--timeout=10".to_string(), "dump".to_string(), db.clone()];
    let b2 = b.clone();
    jobs.push(one("ovs/ovsdb-dump.txt", async move {
        run_command("ovs/ovsdb-dump.txt", "ovsdb-client", &dump, Keep::Head, max, &b2).await
    }));

    let state_dir = ctx.state_dir.clone();
    let b2 = b.clone();
    jobs.push(blocking("agent/state", move || {
        tree("agent/state", &state_dir, Keep::Head, None, max, &b2)
    }));

    let logs = if options.log_files.is_empty() {
        match collectors::running_agent_log(&ctx.state_dir) {
            Ok(Some(f)) => vec![f],
            Ok(None) => {
                notes.push("the running agent logs to standard error: see agent/logs/journal.txt".into());
                Vec::new()
            }
            Err(why) => {
                notes.push(format!(
                    "no running agent says where it logs ({why}); collected {DEFAULT_AGENT_LOG}"
                ));
                vec![PathBuf::from(DEFAULT_AGENT_LOG)]
            }
        }
    } else {
        options.log_files.clone()
    };
    for log in logs {
        let b = b.clone();
        jobs.push(blocking("agent/logs", move || {
            log_files("agent/logs", &log, since, max, &b)
        }));
    }
    jobs.push(one(
        "agent/logs/journal.txt",
        collectors::journal("agent/logs/journal.txt", since, max, b.clone()),
    ));
    let audit = ctx.audit_log_dir.clone();
    let b2 = b.clone();
    jobs.push(blocking("agent/logs/audit", move || {
        match std::fs::metadata(&audit) {
            Ok(_) => tree("agent/logs/audit", &audit, Keep::Tail, since, max, &b2),
            Err(_) => vec![Item::skipped(
                "agent/logs/audit",
                audit.display().to_string(),
                "no audit log directory (no policy with enableLogging has logged yet)",
            )],
        }
    }));
    for daemon in ["ovs-vswitchd", "ovsdb-server"] {
        let run = run.clone();
        let b = b.clone();
        jobs.push(blocking(
            &format!("ovs/logs/{daemon}.log"),
            move || match collectors::ovs_daemon_log(&run, daemon) {
                Ok(log) => log_files("ovs/logs", &log, since, max, &b),
                Err(why) => vec![Item::failed(format!("ovs/logs/{daemon}.log"), daemon, why)],
            },
        ));
    }
    jobs
}

/// Collects the bundle described by `options`. Never fails: what could not be collected is in
/// the manifest, with why.
pub async fn collect(options: &Options) -> Bundle {
    let started = Instant::now();
    let created = chrono::Utc::now();
    let mut notes = Vec::new();
    let config_text = read_config_file(&options.config);
    // Parsed as Config::load would (relative paths against the working directory), from the
    // text read within bounds.
    let config = match config_text.as_deref().map(Config::from_yaml_str) {
        Ok(Ok(c)) => Some(c),
        Ok(Err(e)) => {
            notes.push(format!(
                "the configuration does not load ({e}); the defaults' paths were used"
            ));
            None
        }
        Err(why) => {
            notes.push(format!(
                "the configuration {} cannot be read ({why}); the defaults' paths were used",
                options.config.display()
            ));
            None
        }
    };
    let ctx = Context::from_config(config.as_ref());
    let mut secrets = Secrets::default();
    let mut items = config_items(options, &config_text, &ctx, &mut secrets, &mut notes);
    let budget = Budget::new(options.limits.max_total_bytes);
    for item in &items {
        if let Ok(d) = &item.data {
            budget.take(d.len() as u64);
        }
    }

    let socket = ctx.agent_api_socket.clone();
    let api_down = tokio::task::spawn_blocking(move || collectors::probe_agent_api(&socket).err())
        .await
        .unwrap_or_else(|e| Some(e.to_string()));
    if let Some(why) = &api_down {
        notes.push(why.clone());
    }

    let timeout = options.limits.collector_timeout;
    let secrets = Arc::new(secrets);
    let jobs = jobs(options, &ctx, &mut notes, api_down, &budget);
    let collected: Vec<Vec<Item>> = stream::iter(jobs.into_iter().map(|(path, job)| {
        let secrets = secrets.clone();
        async move {
            let t0 = Instant::now();
            let mut items = match tokio::time::timeout(timeout, job).await {
                Ok(items) => items,
                Err(_) => vec![Item::failed(
                    path,
                    "collector",
                    format!("timed out after {} ms", timeout.as_millis()),
                )],
            };
            let elapsed = t0.elapsed();
            tokio::task::spawn_blocking(move || {
                for item in &mut items {
                    item.elapsed = elapsed;
                    if let Ok(data) = &mut item.data {
                        item.scrubbed = secrets.scrub(data);
                    }
                }
                items
            })
            .await
            .unwrap_or_default()
        }
    }))
    .buffered(PARALLEL)
    .collect()
    .await;
    items.extend(collected.into_iter().flatten());

    let entries = bound_items(&mut items, &options.limits);
    let count = |s: Status| entries.iter().filter(|e| e.status == s).count();
    let node = crate::config::node_name();
    let manifest = Manifest {
        format: 1,
        agent_version: crate::version::VERSION.to_string(),
        node: node.clone(),
        created: created.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        since_seconds: options.since.map(|s| s.as_secs()),
        limits: options.limits,
        notes,
        total_bytes: entries.iter().map(|e| e.bytes).sum(),
        collected: count(Status::Collected),
        truncated: count(Status::Truncated),
        failed: count(Status::Failed),
        skipped: count(Status::Skipped),
        elapsed_millis: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        entries,
    };
    Bundle {
        root: format!(
            "antrea-vm-agent-supportbundle-{node}-{}",
            created.format("%Y%m%dT%H%M%SZ")
        ),
        items,
        manifest,
    }
}

/// `antrea-vm-agent supportbundle`: collects and writes the bundle to `output` (by default
/// `<bundle root>.tar.gz` in the working directory); returns the line to print.
pub fn command(options: &Options, output: Option<&Path>) -> Result<String, BundleError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|source| BundleError::Output {
            path: "tokio runtime".into(),
            source,
        })?;
    let bundle = runtime.block_on(collect(options));
    // A blocking read stuck past its collector's timeout must not hold the command.
    runtime.shutdown_timeout(Duration::from_secs(1));
    let path = output.map_or_else(
        || PathBuf::from(format!("{}.tar.gz", bundle.root)),
        Path::to_path_buf,
    );
    let size = bundle.write_file(&path)?;
    let m = &bundle.manifest;
    Ok(format!(
        "{}: {size} bytes; {} files collected, {} truncated, {} failed, {} skipped (see {}/{MANIFEST})\n",
        path.display(),
        m.collected,
        m.truncated,
        m.failed,
        m.skipped,
        bundle.root
    ))
}

#[cfg(test)]
mod tests;
