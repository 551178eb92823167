//! The `antrea-vm-agent` binary: command line, logging, and wiring of the real adapters into the
//! supervisor. Accepts the Go agent's `--config`, `--log_file`, `--logtostderr` and `--v` so its
//! systemd unit works unchanged.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use actix::Actor;
use clap::{Parser, Subcommand};
use tracing::{error, info, warn};

use antrea_vm_agent::actors::supervisor::Shutdown;
use antrea_vm_agent::actors::{Deps, Supervisor, Timing};
use antrea_vm_agent::api::metrics::AgentMetrics;
use antrea_vm_agent::config::{node_name, Config};
use antrea_vm_agent::host::netlink::NetlinkHost;
use antrea_vm_agent::ovs::openflow::conn::OfConnector;
use antrea_vm_agent::ovs::ovsdb::client::OvsdbClient;
use antrea_vm_agent::policy::pipeline::CONTROLLER_ID;
use antrea_vm_agent::policy::state_file::compile_state;
use antrea_vm_agent::sources::file::FileSource;
use antrea_vm_agent::sources::policy_dir::PolicyDirSource;
use antrea_vm_agent::sources::PolicySource;

#[derive(Parser, Debug)]
#[command(
    name = "antrea-vm-agent",
    version,
    about = "Antrea NetworkPolicy for VMs and bare-metal servers"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Debug)]
struct LogArgs {
    /// Write logs to this file (appended).
    #[arg(long = "log_file", alias = "log-file")]
    log_file: Option<PathBuf>,
    /// Log to standard error instead of a file (klog syntax: --logtostderr=false).
    #[arg(long = "logtostderr", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    logtostderr: Option<bool>,
    /// klog verbosity; 0-1 = info, 2-3 = debug, 4+ = trace. RUST_LOG overrides it.
    #[arg(long = "v")]
    verbosity: Option<u8>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the agent.
    Run {
        /// Path of antrea-agent.conf.
        #[arg(long)]
        config: PathBuf,
        #[command(flatten)]
        log: LogArgs,
    },
    /// Validate a configuration file and print every problem with its key path.
    CheckConfig {
        #[arg(long)]
        config: PathBuf,
    },
    /// Print the flows the agent would own for a given state (interfaces, policyBypassRules and
    /// controlplane objects), one per line in `ovs-ofctl dump-flows --names --no-stats` syntax,
    /// sorted by table then priority. No OVS needed.
    Compile {
        /// YAML or JSON with `interfaces`, `policyBypassRules`, `networkPolicies`,
        /// `addressGroups` and `appliedToGroups`.
        #[arg(long)]
        state: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::CheckConfig { config } => check_config(&config),
        Command::Run { config, log } => run(&config, &log),
        Command::Compile { state } => compile(&state),
    }
}

fn compile(path: &Path) -> ExitCode {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    };
    match compile_state(&text) {
        Ok(out) => {
            for w in &out.warnings {
                eprintln!("warning: {w}");
            }
            for flow in &out.flows {
                println!("{flow}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{}: invalid state:\n{e}", path.display());
            ExitCode::FAILURE
        }
    }
}

fn check_config(path: &Path) -> ExitCode {
    match Config::load(path) {
        Ok(cfg) => {
            println!("{}: OK", path.display());
            for key in &cfg.ignored_keys {
                println!("note: {key}: not used by antrea-vm-agent, ignored");
            }
            ExitCode::SUCCESS
        }
        Err(problems) => {
            eprintln!("{}: invalid configuration", path.display());
            eprintln!("{problems}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(log: &LogArgs) -> Result<(), String> {
    use tracing_subscriber::EnvFilter;
    let level = match log.verbosity.unwrap_or(0) {
        0 | 1 => "info",
        2 | 3 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    let to_stderr = log.logtostderr.unwrap_or(log.log_file.is_none());
    match (&log.log_file, to_stderr) {
        (Some(path), false) => {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(|e| format!("log directory {}: {e}", dir.display()))?;
            }
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| format!("log file {}: {e}", path.display()))?;
            builder
                .with_ansi(false)
                .with_writer(std::sync::Mutex::new(file))
                .init();
        }
        _ => {
            use std::io::IsTerminal;
            builder
                .with_ansi(std::io::stderr().is_terminal())
                .with_writer(std::io::stderr)
                .init()
        }
    }
    // Panics are caught by the supervisor; make sure they are in the log, not only on stderr.
    std::panic::set_hook(Box::new(|info| {
        error!("panic: {info}");
    }));
    Ok(())
}

fn run(config_path: &Path, log: &LogArgs) -> ExitCode {
    if let Err(e) = init_logging(log) {
        eprintln!("antrea-vm-agent: {e}");
        return ExitCode::FAILURE;
    }
    let config = match Config::load(config_path) {
        Ok(c) => c,
        Err(problems) => {
            error!("invalid configuration {}:\n{problems}", config_path.display());
            return ExitCode::FAILURE;
        }
    };
    if !config.ignored_keys.is_empty() {
        info!(keys = %config.ignored_keys.join(", "), "configuration keys not used by this agent are ignored");
    }
    let Some(standalone) = config.standalone.clone() else {
        error!(
            "Kubernetes mode (clientConnection.kubeconfig) is not available in this build yet; \
             set standalone.externalNodeFile to run with a local ExternalNode"
        );
        return ExitCode::from(2);
    };
    let node = node_name();
    info!(node = %node, bridge = %config.ovs_bridge, datapath = %config.ovs_datapath_type.as_str(),
        run_dir = %config.ovs_run_dir.display(), "starting antrea-vm-agent {}", env!("CARGO_PKG_VERSION"));

    let system = actix::System::new();
    let result = system.block_on(async move {
        let host = match NetlinkHost::new() {
            Ok(h) => Arc::new(h),
            Err(e) => return Err(format!("cannot open netlink: {e}")),
        };
        let deps = Deps {
            node_name: node,
            ovsdb: Arc::new(OvsdbClient::new(config.ovsdb_socket())),
            host,
            switch: Arc::new(OfConnector {
                path: config.openflow_socket(),
                controller_id: CONTROLLER_ID,
            }),
            source: Arc::new(FileSource::new(
                &standalone.external_node_file,
                Duration::from_millis(500),
            )),
            policy_source: standalone.policy_dir.clone().map(|dir| {
                Arc::new(PolicyDirSource::new(dir, Duration::from_millis(500))) as Arc<dyn PolicySource>
            }),
            cluster: None,
            metrics: AgentMetrics::new(),
            agent_info_path: Some(config.state_dir.join("agent-info.json")),
            timing: Timing::default(),
            config: Arc::new(config),
        };
        let supervisor = Supervisor::new(deps).start();
        let signal = wait_for_signal().await;
        info!("received {signal}; stopping (attached interfaces and flows stay in place)");
        if supervisor.send(Shutdown).await.is_err() {
            warn!("supervisor already gone");
        }
        Ok(())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!("{e}");
            ExitCode::FAILURE
        }
    }
}

async fn wait_for_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    else {
        error!("cannot install signal handlers; running until killed");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}
