//! `antrea-api-emulator`: runs the kube-apiserver + antrea-controller emulator
//! (`antrea_api_emulator`) for manual testing of the agent's Kubernetes mode. Writes the CA
//! and kubeconfigs for an agent (and an admin kubeconfig for the control API), optionally loads
//! objects from files, prints the URL, and serves until SIGTERM or SIGINT.
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use serde::Deserialize;
use serde_json::Value;

use antrea_api_emulator::{Emulator, EmulatorOptions};

#[derive(Parser, Debug)]
#[command(about = "HTTPS emulator of kube-apiserver and antrea-controller for antrea-vm-agent")]
struct Args {
    /// kube-apiserver's address.
    #[arg(long, default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// antrea-controller's address (a separate server, as in a cluster).
    #[arg(long, default_value = "127.0.0.1:10349")]
    controller_listen: SocketAddr,
    /// Also serve controlplane.antrea.io on kube-apiserver's address (the controller's
    /// APIService), for agents without antreaClientConnection.
    #[arg(long)]
    aggregate_controlplane: bool,
    /// Directory for ca.crt, antrea-agent.kubeconfig, antrea-agent.antrea.kubeconfig, admin.kubeconfig.
    #[arg(long, default_value = "emulator")]
    out_dir: PathBuf,
    /// Agent ServiceAccount token (random if not given).
    #[arg(long)]
    agent_token: Option<String>,
    /// Admin token for the control API under /emulator/v1 (random if not given).
    #[arg(long)]
    admin_token: Option<String>,
    /// YAML/JSON files (multi-document) of ExternalNodes, ExternalEntities and controlplane
    /// NetworkPolicies/AppliedToGroups/AddressGroups to load at start.
    #[arg(long = "apply")]
    apply: Vec<PathBuf>,
}

fn load(emu: &Emulator, path: &PathBuf) -> anyhow::Result<usize> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut n = 0;
    for doc in serde_norway::Deserializer::from_str(&text) {
        let v = Value::deserialize(doc).with_context(|| format!("parsing {}", path.display()))?;
        if v.is_null() {
            continue;
        }
        match v.get("kind").and_then(Value::as_str) {
            Some("ExternalNode") => {
                emu.apply_external_node(v)?;
            }
            Some("ExternalEntity") => {
                emu.apply_external_entity(v)?;
            }
            _ => emu.upsert_controlplane(v)?,
        }
        n += 1;
    }
    Ok(n)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let args = Args::parse();
    let emu = Emulator::start(EmulatorOptions {
        listen: args.listen,
        controller_listen: args.controller_listen,
        kube_aggregates_controlplane: args.aggregate_controlplane,
        agent_token: args.agent_token,
        admin_token: args.admin_token,
        ..EmulatorOptions::default()
    })
    .await?;
    let (kube, antrea) = emu.write_agent_kubeconfigs(&args.out_dir)?;
    let admin = emu.write_admin_kubeconfig(&args.out_dir)?;
    for path in &args.apply {
        let n = load(&emu, path)?;
        println!("loaded {n} objects from {}", path.display());
    }
    println!("antrea-api-emulator: kube-apiserver on {}", emu.url());
    println!(
        "                     antrea-controller on {}",
        emu.controller_url()
    );
    println!("  agent kubeconfig (kube-apiserver):     {}", kube.display());
    println!("  agent kubeconfig (antrea-controller):  {}", antrea.display());
    println!("  admin kubeconfig (control API):        {}", admin.display());
    println!(
        "  agent identity: {} (ExternalNodes go in namespace {})",
        emu.agent_user(),
        emu.agent_namespace()
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    println!("stopping");
    drop(emu);
    Ok(())
}
