//! The `antrea-vm-agent` binary: command line, logging, and wiring of the real adapters into the
//! supervisor. `antrea-vm-agent --config F [klog flags]` with no subcommand runs the agent, as the
//! Go `antrea-agent` does, so its systemd unit works with only the binary path changed
//! (`cli::klog` has the flags); `run` is the same with a subcommand name. The command line is
//! defined in `cli::args`, where the documentation test reads it too.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use actix::Actor;
use clap::Parser;
use tracing::{error, info, warn};

use antrea_vm_agent::actors::supervisor::Shutdown;
use antrea_vm_agent::actors::{Deps, Supervisor, Timing};
use antrea_vm_agent::api::handlers::ApiState;
use antrea_vm_agent::api::server::{self as api_server, ServerOptions};
use antrea_vm_agent::cli::args::{Cli, Command};
use antrea_vm_agent::cli::compile::compile_state_with;
use antrea_vm_agent::cli::klog::{LogArgs, RotatingFile};
use antrea_vm_agent::cli::translate::{to_yaml, translate_paths};
use antrea_vm_agent::cli::{run_get, GetArgs};
use antrea_vm_agent::config::{node_name, Config};
use antrea_vm_agent::ovs::openflow::conn::OfConnector;
use antrea_vm_agent::ovs::ovsdb::client::OvsdbClient;
use antrea_vm_agent::policy::pipeline::CONTROLLER_ID;
use antrea_vm_agent::sources;
use antrea_vm_agent::telemetry::AgentMetrics;
use antrea_vm_agent::uplink::lock::{AgentLock, LockError};
use antrea_vm_agent::uplink::offline;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let Some(command) = cli.command else {
        return match cli.config {
            Some(config) => run(&config, &cli.log),
            None => {
                use clap::CommandFactory;
                Cli::command()
                    .error(
                        clap::error::ErrorKind::MissingRequiredArgument,
                        "--config is required to run the agent (or give a subcommand; see --help)",
                    )
                    .exit()
            }
        };
    };
    match command {
        Command::CheckConfig { config } => check_config(&config),
        Command::Run { config, log } => run(&config, &log),
        Command::Compile {
            state,
            policies,
            external_node,
        } => compile(&state, &policies, external_node.as_deref()),
        Command::Translate { paths, external_node } => translate(&paths, external_node.as_deref()),
        Command::DetachAll { config } => offline::command(&config),
        Command::GenDocs { out } => gen_docs(&out),
        Command::Trace(args) => match antrea_vm_agent::cli::trace::run_trace(&args) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("Error: {e}");
                ExitCode::FAILURE
            }
        },
        Command::SupportBundle {
            config,
            output,
            since,
            log_file,
        } => supportbundle(config, output, since, log_file),
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

fn supportbundle(
    config: PathBuf,
    output: Option<PathBuf>,
    since: Option<std::time::Duration>,
    log_files: Vec<PathBuf>,
) -> ExitCode {
    use antrea_vm_agent::supportbundle;
    let mut options = supportbundle::Options::new(config);
    options.since = since;
    options.log_files = log_files;
    match supportbundle::command(&options, output.as_deref()) {
        Ok(line) => {
            print!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("Error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn gen_docs(out: &Path) -> ExitCode {
    use clap::CommandFactory;
    match antrea_vm_agent::cli::docs::write_docs(&Cli::command(), out) {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("Error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn translate(paths: &[PathBuf], external_node: Option<&Path>) -> ExitCode {
    let translated = translate_paths(paths, external_node);
    let errors = translated.all_errors();
    for e in &errors {
        eprintln!("error: {e}");
    }
    for w in translated.warnings.iter().chain(&translated.cluster_warnings) {
        eprintln!("warning: {w}");
    }
    if translated.controlplane_objects > 0 {
        eprintln!(
            "note: {} controlplane objects in the input are already in that form and are not printed",
            translated.controlplane_objects
        );
    }
    match to_yaml(&translated.translation.objects()) {
        Ok(text) => print!("{text}"),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    }
    if errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn compile(path: &Path, policies: &[PathBuf], external_node: Option<&Path>) -> ExitCode {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    };
    let mut extra = Vec::new();
    if !policies.is_empty() {
        let translated = translate_paths(policies, external_node);
        for w in translated.warnings.iter().chain(&translated.cluster_warnings) {
            eprintln!("warning: {w}");
        }
        let errors = translated.all_errors();
        if !errors.is_empty() {
            for e in &errors {
                eprintln!("error: {e}");
            }
            return ExitCode::FAILURE;
        }
        extra = translated.translation.objects();
    }
    match compile_state_with(&text, extra) {
        Ok(out) => {
            for w in &out.warnings {
                eprintln!("warning: {w}");
            }
            for n in &out.not_enforced {
                eprintln!("not enforced as written: {n}");
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
    use tracing_subscriber::fmt::writer::MakeWriterExt;
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
    match log.file() {
        Some(path) => {
            let file = RotatingFile::open(path, log.max_bytes(), log.max_num())
                .map_err(|e| format!("log file {}: {e}", path.display()))?;
            let file = std::sync::Mutex::new(file);
            if log.also_stderr() {
                builder
                    .with_ansi(false)
                    .with_writer(file.and(std::io::stderr))
                    .init();
            } else {
                builder.with_ansi(false).with_writer(file).init();
            }
        }
        None => {
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
    let gates = log.feature_gates.clone().unwrap_or_default().0;
    let config = match Config::load_with_feature_gates(config_path, &gates) {
        Ok(c) => c,
        Err(problems) => {
            let with_gates = if gates.is_empty() {
                ""
            } else {
                " with --feature-gates"
            };
            error!(
                "invalid configuration {}{with_gates}:\n{problems}",
                config_path.display()
            );
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
        run_dir = %config.ovs_run_dir.display(), "starting antrea-vm-agent {}", antrea_vm_agent::version::VERSION);

    let api_options = ServerOptions::from_config(&config);
    let metrics = AgentMetrics::new();
    let system = actix::System::new();
    let result = system.block_on(async move {
        let host = match antrea_vm_agent::host::open_system() {
            Ok(h) => h,
            Err(e) => return Err(format!("cannot open netlink: {e}")),
        };
        let selected = sources::select::select(&config, &node).map_err(|e| e.to_string())?;
        let timing = Timing::from_env()?;
        // The packet-in responder (Reject, audit) has a connection of its own announcing the id
        // its flows name, so its packet-outs never queue behind the flow installer's bundles;
        // the installer's connection announces an id no flow names.
        let packet_in_switch: Arc<dyn antrea_vm_agent::ovs::openflow::SwitchConnector> =
            Arc::new(OfConnector {
                path: config.openflow_socket(),
                controller_id: CONTROLLER_ID,
            });
        let switch: Arc<dyn antrea_vm_agent::ovs::openflow::SwitchConnector> = Arc::new(OfConnector {
            path: config.openflow_socket(),
            controller_id: antrea_vm_agent::policy::pipeline::INSTALLER_CONTROLLER_ID,
        });
        let packet_ins = Some(packet_in_switch);
        // The FQDN controller runs on a thread of its own with its own OpenFlow connection, so
        // paused DNS responses never wait behind the actors' work.
        let fqdn = antrea_vm_agent::fqdn::FqdnHandle::default();
        let fqdn_config = antrea_vm_agent::fqdn::controller::ControllerConfig {
            min_ttl_secs: config.fqdn_cache_min_ttl,
            // Names are asked again before they expire: at dnsServerOverride when set (upstream
            // ignores it on VMs), else at the VM's resolver.
            dns_server: match &config.dns_server_override {
                Some(host_port) => antrea_vm_agent::fqdn::resolver::ServerSource::Override(host_port.clone()),
                None => antrea_vm_agent::fqdn::resolver::ServerSource::ResolvConf("/etc/resolv.conf".into()),
            },
            state_dir: config.state_dir.clone(),
            // Retried more quickly than the actors' OVS connections: at start the bridge appears
            // a moment after the agent, and after an OVS restart (see the policy's comment).
            reconnect: antrea_vm_agent::retry::RetryPolicy::FQDN_RECONNECT,
            datapath: Arc::new(antrea_vm_agent::ovs::vswitchd::Vswitchd::new(
                config.ovs_run_dir.clone(),
                config.ovs_datapath_type.as_str(),
            )),
        };
        // Its connection announces a controller id of its own, the one the DNS interception
        // names: DNS packet-ins go to it only, and the others to the flow installer only.
        let fqdn_switch: Arc<dyn antrea_vm_agent::ovs::openflow::SwitchConnector> = Arc::new(OfConnector {
            path: config.openflow_socket(),
            controller_id: antrea_vm_agent::policy::pipeline::FQDN_CONTROLLER_ID,
        });
        if let Err(e) = antrea_vm_agent::fqdn::controller::spawn(fqdn.clone(), fqdn_switch, fqdn_config) {
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
            state_files: Arc::new(antrea_vm_agent::host::files::DiskFiles::default()),
            // Its own connection to the control socket (the FQDN controller's lives on its thread).
            datapath: Arc::new(antrea_vm_agent::ovs::vswitchd::Vswitchd::new(
                config.ovs_run_dir.clone(),
                config.ovs_datapath_type.as_str(),
            )),
            fqdn,
            packet_ins,
            timing,
            config: Arc::new(config),
        };
        let (node_name, namespace, ovs_bridge) = (
            deps.node_name.clone(),
            deps.config.external_node_namespace.clone(),
            deps.config.ovs_bridge.clone(),
        );
        // `trace` asks ovs-vswitchd on a connection of its own.
        let trace_vswitchd = Arc::new(antrea_vm_agent::ovs::vswitchd::Vswitchd::new(
            deps.config.ovs_run_dir.clone(),
            deps.config.ovs_datapath_type.as_str(),
        ));
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
                vswitchd: Some(trace_vswitchd),
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
