//! The `antrea-vm-agent` binary: command line, logging, and wiring of the real adapters into the
//! supervisor. Accepts the Go agent's `--config`, `--log_file`, `--logtostderr` and `--v` so its
//! systemd unit works unchanged.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use actix::Actor;
use clap::{Parser, Subcommand};
use tracing::{error, info, warn};

use antrea_vm_agent::actors::interface_manager::offline::{self, AgentLock, LockError};
use antrea_vm_agent::actors::supervisor::Shutdown;
use antrea_vm_agent::actors::{Deps, Supervisor, Timing};
use antrea_vm_agent::api::handlers::ApiState;
use antrea_vm_agent::api::metrics::AgentMetrics;
use antrea_vm_agent::api::server::{self as api_server, ServerOptions};
use antrea_vm_agent::cli::{run_get, GetArgs, OutputFormat, Resource};
use antrea_vm_agent::config::{node_name, Config};
use antrea_vm_agent::host::netlink::NetlinkHost;
use antrea_vm_agent::ovs::openflow::conn::OfConnector;
use antrea_vm_agent::ovs::ovsdb::client::OvsdbClient;
use antrea_vm_agent::policy::pipeline::CONTROLLER_ID;
use antrea_vm_agent::policy::state_file::compile_state;
use antrea_vm_agent::sources;

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
    /// Restore every interface the agent attached, with no agent running (refused while one
    /// runs): NIC renamed back with its MAC, MTU, addresses and routes; its OVS ports deleted.
    DetachAll {
        /// Path of antrea-agent.conf.
        #[arg(long)]
        config: PathBuf,
    },
    /// Show what the running agent holds, through its agent API socket (like `antctl get`).
    Get {
        #[arg(value_enum)]
        resource: Resource,
        /// A policy, group or interface name (for ovsflows: the policy, like --policy).
        name: Option<String>,
        #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
        output: OutputFormat,
        /// ovsflows: only the flows of this NetworkPolicy (name, UID or namespace/name).
        #[arg(long)]
        policy: Option<String>,
        /// The agent API socket (`agentAPI.socket` in the configuration).
        #[arg(long, default_value = antrea_vm_agent::config::DEFAULT_AGENT_API_SOCKET)]
        socket: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::CheckConfig { config } => check_config(&config),
        Command::Run { config, log } => run(&config, &log),
        Command::Compile { state } => compile(&state),
        Command::DetachAll { config } => offline::command(&config),
        Command::Get {
            resource,
            name,
            output,
            policy,
            socket,
        } => match run_get(&GetArgs {
            resource,
            name,
            output,
            policy,
            socket,
        }) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("Error: {e}");
                ExitCode::FAILURE
            }
        },
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
    // Held until `run` returns; tells `detach-all` (and a second agent) that this one runs.
    let _lock = match AgentLock::acquire(&config.state_dir, "run") {
        Ok(lock) => Some(lock),
        Err(e @ LockError::Held { .. }) => {
            error!("{e}; refusing to start a second agent on the same state");
            return ExitCode::FAILURE;
        }
        Err(e) => {
            warn!("{e}; running without it (detach-all cannot tell that this agent runs)");
            None
        }
    };
    if !config.ignored_keys.is_empty() {
        info!(keys = %config.ignored_keys.join(", "), "configuration keys not used by this agent are ignored");
    }
    let node = node_name();
    info!(node = %node, bridge = %config.ovs_bridge, datapath = %config.ovs_datapath_type.as_str(),
        run_dir = %config.ovs_run_dir.display(), "starting antrea-vm-agent {}", env!("CARGO_PKG_VERSION"));

    let api_options = ServerOptions::from_config(&config);
    let metrics = AgentMetrics::new();
    let system = actix::System::new();
    let result = system.block_on(async move {
        let host = match NetlinkHost::new() {
            Ok(h) => Arc::new(h),
            Err(e) => return Err(format!("cannot open netlink: {e}")),
        };
        let selected = sources::select::select(&config, &node)?;
        let timing = Timing::from_env()?;
        let switch: Arc<dyn antrea_vm_agent::ovs::openflow::SwitchConnector> = Arc::new(OfConnector {
            path: config.openflow_socket(),
            controller_id: CONTROLLER_ID,
        });
        // The FQDN controller runs on a thread of its own with its own OpenFlow connection, so
        // paused DNS responses never wait behind the actors' work.
        let fqdn = antrea_vm_agent::fqdn::FqdnHandle::default();
        let fqdn_config = antrea_vm_agent::fqdn::controller::ControllerConfig {
            min_ttl_secs: config.fqdn_cache_min_ttl,
            state_dir: config.state_dir.clone(),
            reconnect_min: timing.reconnect_min,
            reconnect_max: timing.reconnect_max,
        };
        if let Err(e) = antrea_vm_agent::fqdn::controller::spawn(fqdn.clone(), switch.clone(), fqdn_config) {
            return Err(format!("cannot start the FQDN controller thread: {e}"));
        }
        let fqdn_handle = fqdn.clone();
        let deps = Deps {
            node_name: node,
            ovsdb: Arc::new(OvsdbClient::new(config.ovsdb_socket())),
            host,
            switch,
            source: selected.external_node,
            policy_source: selected.policies,
            cluster: selected.cluster,
            metrics: metrics.clone(),
            agent_info_path: Some(config.state_dir.join("agent-info.json")),
            fqdn,
            timing,
            config: Arc::new(config),
        };
        let (node_name, namespace, ovs_bridge) = (
            deps.node_name.clone(),
            deps.config.external_node_namespace.clone(),
            deps.config.ovs_bridge.clone(),
        );
        let supervisor = Supervisor::new(deps).start();
        let api = api_server::serve(
            &api_options,
            ApiState {
                supervisor: supervisor.clone(),
                metrics,
                node_name,
                namespace,
                ovs_bridge,
                fqdn: fqdn_handle,
            },
        );
        api_server::start_systemd_notifier(supervisor.clone());
        let signal = wait_for_signal().await;
        info!("received {signal}; stopping (attached interfaces and flows stay in place)");
        if supervisor.send(Shutdown).await.is_err() {
            warn!("supervisor already gone");
        }
        api.stop().await;
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
