//! `antrea-vm-agent get`: which endpoint each resource reads, and how its answer is printed.
//! An unknown name (the agent answers 404) and every other failure are errors for the caller to
//! print and turn into exit code 1.

use std::path::PathBuf;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::client::{self, ClientError};
use super::output;
use crate::views::{
    AgentInfoView, ApiError, FlowsView, FqdnCacheView, GroupView, InterfaceView, NetworkPolicyView,
};

/// How long one request may take (the agent bounds its own questions to the actors).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// The resources `get` knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Resource {
    #[value(name = "networkpolicy", aliases = ["networkpolicies", "netpol", "np"])]
    NetworkPolicy,
    #[value(name = "appliedtogroup", aliases = ["appliedtogroups", "atg"])]
    AppliedToGroup,
    #[value(name = "addressgroup", aliases = ["addressgroups", "ag"])]
    AddressGroup,
    #[value(name = "ovsflows", aliases = ["ovsflow", "of"])]
    OvsFlows,
    #[value(name = "agentinfo", aliases = ["ai"])]
    AgentInfo,
    #[value(name = "interfaces", aliases = ["interface", "if"])]
    Interfaces,
    /// The FQDN cache (antctl's columns); NAME filters by name or wildcard.
    #[value(name = "fqdncache", aliases = ["fqdn"])]
    FqdnCache,
}

/// `-o`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    #[default]
    Table,
    Json,
    Yaml,
}

/// The arguments of one `get`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GetArgs {
    pub resource: Resource,
    /// A policy or group name; for `ovsflows`, the same as `--policy`.
    pub name: Option<String>,
    pub output: OutputFormat,
    /// `ovsflows`: only the flows of this policy.
    pub policy: Option<String>,
    pub socket: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum GetError {
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The agent's own error message (e.g. `NetworkPolicy "x" not found`).
    #[error("{0}")]
    Agent(String),
    #[error("unexpected answer from the agent: {0}")]
    Decode(String),
    #[error("{resource} takes no name")]
    NoName { resource: &'static str },
}

fn query(key: &str, value: &Option<String>) -> String {
    match value {
        Some(v) => format!("?{}", serde_urlencoded::to_string([(key, v)]).unwrap_or_default()),
        None => String::new(),
    }
}

fn fetch<T: DeserializeOwned>(socket: &std::path::Path, path: &str) -> Result<T, GetError> {
    let resp = client::get(socket, path, REQUEST_TIMEOUT)?;
    if resp.status != 200 {
        let msg = serde_json::from_slice::<ApiError>(&resp.body)
            .map(|e| e.error)
            .unwrap_or_else(|_| {
                format!(
                    "HTTP {}: {}",
                    resp.status,
                    String::from_utf8_lossy(&resp.body).trim()
                )
            });
        return Err(GetError::Agent(msg));
    }
    serde_json::from_slice(&resp.body).map_err(|e| GetError::Decode(e.to_string()))
}

fn encode<T: Serialize>(v: &T, format: OutputFormat) -> Result<Option<String>, GetError> {
    match format {
        OutputFormat::Table => Ok(None),
        OutputFormat::Json => serde_json::to_string_pretty(v)
            .map(|s| Some(s + "\n"))
            .map_err(|e| GetError::Decode(e.to_string())),
        OutputFormat::Yaml => serde_norway::to_string(v)
            .map(Some)
            .map_err(|e| GetError::Decode(e.to_string())),
    }
}

/// Runs one `get` and returns what to print.
pub fn run_get(args: &GetArgs) -> Result<String, GetError> {
    let socket = args.socket.as_path();
    let name = args.name.clone().filter(|n| !n.is_empty());
    match args.resource {
        Resource::NetworkPolicy => {
            let list: Vec<NetworkPolicyView> =
                fetch(socket, &format!("/networkpolicies{}", query("name", &name)))?;
            if let Some(out) = encode(&list, args.output)? {
                return Ok(out);
            }
            Ok(match (&name, list.as_slice()) {
                (Some(_), [one]) => output::policy_detail(one),
                (Some(_), many) => many
                    .iter()
                    .map(output::policy_detail)
                    .collect::<Vec<_>>()
                    .join("\n"),
                (None, all) => output::policies_table(all),
            })
        }
        Resource::AppliedToGroup | Resource::AddressGroup => {
            let (path, table): (&str, fn(&[GroupView]) -> String) = match args.resource {
                Resource::AppliedToGroup => ("/appliedtogroups", output::applied_to_groups_table),
                _ => ("/addressgroups", output::address_groups_table),
            };
            let list: Vec<GroupView> = fetch(socket, &format!("{path}{}", query("name", &name)))?;
            Ok(encode(&list, args.output)?.unwrap_or_else(|| table(&list)))
        }
        Resource::OvsFlows => {
            let policy = args.policy.clone().or(name);
            let flows: FlowsView = fetch(socket, &format!("/ovsflows{}", query("policy", &policy)))?;
            Ok(encode(&flows, args.output)?.unwrap_or_else(|| output::flows_text(&flows)))
        }
        Resource::AgentInfo => {
            if name.is_some() {
                return Err(GetError::NoName {
                    resource: "agentinfo",
                });
            }
            let info: AgentInfoView = fetch(socket, "/agentinfo")?;
            Ok(encode(&info, args.output)?.unwrap_or_else(|| output::agent_info_table(&info)))
        }
        Resource::Interfaces => {
            let mut list: Vec<InterfaceView> = fetch(socket, "/interfaces")?;
            if let Some(n) = &name {
                list.retain(|i| &i.name == n);
                if list.is_empty() {
                    return Err(GetError::Agent(format!("interface {n:?} not found")));
                }
            }
            Ok(encode(&list, args.output)?.unwrap_or_else(|| output::interfaces_table(&list)))
        }
        Resource::FqdnCache => {
            let list: Vec<FqdnCacheView> = fetch(socket, &format!("/fqdncache{}", query("name", &name)))?;
            Ok(encode(&list, args.output)?.unwrap_or_else(|| output::fqdn_cache_table(&list)))
        }
    }
}
