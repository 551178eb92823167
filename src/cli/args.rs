//! The command line's definition: [`Cli`] and its subcommands ([`Command`]), parsed by the
//! binary (`src/main.rs`, which runs them) and read as a model by `gen-docs` (man pages and
//! completions) and by the documentation test (`tests/docs_drift.rs`: every subcommand, `get`
//! resource and flag is in docs/cli.md). Kept in the library for that second use.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

use super::klog::LogArgs;
use super::{OutputFormat, Resource};

/// The top of `--help` and of the man page: what the agent does and where its files live.
const LONG_ABOUT: &str = "Antrea NetworkPolicy for VMs and bare-metal servers.

antrea-vm-agent is Antrea's ExternalNode agent: it attaches the host's NICs to the Open vSwitch \
bridge, installs Antrea's ExternalNode OpenFlow pipeline and enforces Antrea NetworkPolicies, \
watched from antrea-controller (Kubernetes mode) or read from local files (standalone mode). \
It reports AntreaAgentInfo, policy status and per-rule statistics, and serves /metrics, \
/livez, /readyz and a local API read by `antrea-vm-agent get`.

Files: /etc/antrea/antrea-agent.conf (configuration; `check-config` validates it), \
/var/lib/antrea-vm-agent (state: interface records, the last policies), \
/var/log/antrea/antrea-agent.log (log), /run/antrea/antrea-vm-agent.sock (agent API). \
The systemd unit is antrea-vm-agent.service; stopping it leaves the NICs attached and the \
policies enforced, `detach-all` restores the NICs.";

#[derive(Parser, Debug)]
#[command(
    name = "antrea-vm-agent",
    version = crate::version::VERSION,
    long_version = crate::version::LONG_VERSION,
    about = "Antrea NetworkPolicy for VMs and bare-metal servers",
    long_about = LONG_ABOUT
)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Path of antrea-agent.conf: with no subcommand, runs the agent (as the Go antrea-agent).
    #[arg(long)]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub log: LogArgs,
}

#[derive(Subcommand, Debug)]
pub enum Command {
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
        /// Antrea-native policy files or directories (as `standalone.policyDir` holds), translated
        /// by the local controller and added to the state's objects.
        #[arg(long)]
        policies: Vec<PathBuf>,
        /// The ExternalNode file whose ExternalEntities (and labels) the policies apply to.
        #[arg(long)]
        external_node: Option<PathBuf>,
    },
    /// Translate Antrea-native policies (crd.antrea.io NetworkPolicy, ClusterNetworkPolicy, Tier,
    /// ClusterGroup, Group, ExternalEntity; v1 Namespace) into the controlplane objects the
    /// local controller produces, printed as YAML. Exit status 1 when any object is refused.
    Translate {
        /// Policy files or directories.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// The ExternalNode file whose ExternalEntities the AppliedToGroups hold.
        #[arg(long)]
        external_node: Option<PathBuf>,
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
        #[arg(long, default_value = crate::config::DEFAULT_AGENT_API_SOCKET)]
        socket: PathBuf,
    },
    /// Ask the running agent what the bridge does with one packet (ofproto/trace on the live
    /// flows): allowed, dropped or rejected, by which policy rule or default, and the tables it
    /// went through.
    Trace(super::trace::TraceArgs),
    /// Write one tar.gz for troubleshooting: the agent's logs, configuration and kubeconfigs
    /// (credentials removed), state files and `get` outputs, the bridge's flows, groups and
    /// meters, OVSDB, ovs-vswitchd's log and coverage, the host's ip and nft state, versions.
    /// Works with the agent stopped; what could not be collected is in the bundle's manifest.
    #[command(name = "supportbundle")]
    SupportBundle {
        /// Path of antrea-agent.conf.
        #[arg(long, default_value = "/etc/antrea/antrea-agent.conf")]
        config: PathBuf,
        /// The archive to write (default: antrea-vm-agent-supportbundle-<node>-<time>.tar.gz in
        /// the working directory).
        #[arg(short = 'o', long)]
        output: Option<PathBuf>,
        /// Only the logs of this last period (`30m`, `2h`, `1d`): older rotated logs and journal
        /// lines are left out.
        #[arg(long, value_name = "DURATION", value_parser = parse_since)]
        since: Option<Duration>,
        /// The agent's log file (repeatable; default: the running agent's --log_file, else
        /// /var/log/antrea/antrea-agent.log). Its rotated copies (.1, .2, ...) come with it.
        #[arg(long = "log-file", value_name = "FILE")]
        log_file: Vec<PathBuf>,
    },
    /// Write the man pages and the bash, zsh and fish completions into a directory (used by
    /// `make deb`).
    #[command(hide = true)]
    GenDocs {
        #[arg(long)]
        out: PathBuf,
    },
}

/// `--since`: a number and a unit, `s`, `m`, `h` or `d` (`90s`, `30m`, `2h`, `1d`).
pub fn parse_since(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?}: expected a number and a unit, e.g. 30m, 2h or 1d"))?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        _ => return Err(format!("{text:?}: the unit is s, m, h or d")),
    };
    if n == 0 {
        return Err(format!("{text:?}: must be more than zero"));
    }
    Ok(Duration::from_secs(n.saturating_mul(secs)))
}
