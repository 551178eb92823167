//! The agent under test as a child process running inside the lab's VM namespace.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Output, Stdio},
    time::Duration,
};

use super::{
    lab::{Lab, NODE_NAME},
    util::{cmd, poll_until, run, signal, tail, wait_child},
};

/// How long `stop()` waits after SIGTERM before giving up.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// The built agent binary.
pub fn agent_binary() -> &'static str {
    env!("CARGO_BIN_EXE_antrea-vm-agent")
}

/// A running `antrea-vm-agent run --config F` in the VM namespace; stdout and stderr go to a log file
/// in the lab dir. Dropping it kills the agent (SIGKILL) if it still runs, and prints the end of its
/// log when the test is panicking.
pub struct AgentProcess {
    child: Child,
    pid: u32,
    log_path: PathBuf,
    status: Option<ExitStatus>,
}

impl Lab {
    /// Starts the agent on `config` in the VM namespace with `NODE_NAME=vm1`.
    pub fn start_agent(&self, config: &Path) -> AgentProcess {
        self.start_agent_with_args(&["run", "--config", &config.display().to_string()])
    }

    /// Starts the agent binary with arbitrary arguments (in the VM namespace, `NODE_NAME=vm1`).
    pub fn start_agent_with_args(&self, args: &[&str]) -> AgentProcess {
        self.start_agent_with_env(args, &[])
    }

    /// Like [`Lab::start_agent_with_args`], with extra environment variables (e.g. a failpoint).
    pub fn start_agent_with_env(&self, args: &[&str], env: &[(&str, &str)]) -> AgentProcess {
        let log_path = self.unique_path("agent", "log");
        let log = std::fs::File::create(&log_path).expect("create the agent log");
        let err = log.try_clone().expect("clone the agent log handle");
        let mut c = self.agent_command(args);
        c.envs(env.iter().copied());
        c.stdin(Stdio::null()).stdout(log).stderr(err);
        let child = c
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the agent {c:?}: {e}"));
        let pid = child.id();
        AgentProcess {
            child,
            pid,
            log_path,
            status: None,
        }
    }

    /// The agent binary as a command in the VM namespace with `NODE_NAME=vm1` (`ip netns exec`
    /// execs the program, so the child's pid is the agent's).
    pub fn agent_command(&self, args: &[&str]) -> Command {
        let mut c = cmd("ip");
        c.args(["netns", "exec", self.vm_ns(), agent_binary()])
            .args(args)
            .env("NODE_NAME", NODE_NAME);
        c
    }

    /// `antrea-vm-agent compile --state` for this lab's attached `eth0` (ofports read from OVS,
    /// ExternalEntity `vm1-3e616`), the given controlplane objects (YAML, one per string) and
    /// `policyBypassRules`: the flows it prints, one per line.
    pub fn compile_state(&self, objects: &[&str], bypass: serde_json::Value) -> String {
        self.compile_state_with_policies(objects, bypass, &[], None)
    }

    /// [`Lab::compile_state`] plus Antrea-native policy files or directories (`--policies`),
    /// translated for the ExternalNode in `external_node` (`--external-node`).
    pub fn compile_state_with_policies(
        &self,
        objects: &[&str],
        bypass: serde_json::Value,
        policies: &[&Path],
        external_node: Option<&Path>,
    ) -> String {
        use super::lab::{EN_NAMESPACE, NIC, UPLINK, VM_IP4, VM_IP6};
        let ofport = |iface: &str| -> u32 {
            self.ovs_vsctl(&["get", "Interface", iface, "ofport"])
                .trim()
                .parse()
                .expect("ofport")
        };
        let mut state = serde_json::json!({
            "interfaces": [{
                "name": NIC, "ofport": ofport(NIC), "uplinkOfport": ofport(UPLINK),
                "ips": [VM_IP4, VM_IP6],
                "externalEntity": {"namespace": EN_NAMESPACE, "name": "vm1-3e616"},
            }],
            "networkPolicies": [], "addressGroups": [], "appliedToGroups": [],
            "policyBypassRules": bypass,
        });
        for text in objects {
            let obj: serde_json::Value = serde_norway::from_str(text).expect("object yaml");
            let key = match obj["kind"].as_str() {
                Some("NetworkPolicy") => "networkPolicies",
                Some("AddressGroup") => "addressGroups",
                Some("AppliedToGroup") => "appliedToGroups",
                other => panic!("unexpected kind {other:?}"),
            };
            state[key].as_array_mut().expect("list").push(obj);
        }
        let path = self.unique_path("state", "json");
        std::fs::write(&path, state.to_string()).expect("write state");
        let out = Command::new(agent_binary())
            .args(["compile", "--state"])
            .arg(&path)
            .args(policies.iter().flat_map(|p| [Path::new("--policies"), p]))
            .args(
                external_node
                    .iter()
                    .flat_map(|p| [Path::new("--external-node"), p]),
            )
            .output()
            .expect("run compile");
        assert!(
            out.status.success(),
            "compile failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs the agent binary to completion (e.g. `check-config`), bounded by 60 s.
    pub fn run_agent(&self, args: &[&str]) -> Output {
        let mut c = cmd("timeout");
        c.args([
            "-k",
            "5",
            "60",
            "ip",
            "netns",
            "exec",
            self.vm_ns(),
            agent_binary(),
        ])
        .args(args)
        .env("NODE_NAME", NODE_NAME)
        .stdin(Stdio::null());
        run(c)
    }
}

impl AgentProcess {
    /// The agent's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The log file (stdout and stderr).
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Everything the agent has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Whether the agent is still running (reaps it if it exited).
    pub fn is_running(&mut self) -> bool {
        if self.status.is_some() {
            return false;
        }
        match self.child.try_wait() {
            Ok(Some(status)) => {
                self.status = Some(status);
                false
            }
            Ok(None) => true,
            Err(_) => false,
        }
    }

    /// The exit status, once it has exited and been reaped.
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        self.is_running();
        self.status
    }

    /// Waits at most `timeout` for the agent to exit on its own.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = wait_child(&mut self.child, timeout);
        }
        self.status
    }

    /// Waits (bounded) until the log contains `needle`; panics with the log on timeout.
    pub fn wait_for_log(&self, needle: &str, timeout: Duration) {
        if !poll_until(timeout, || self.log().contains(needle)) {
            panic!(
                "timed out after {timeout:?} waiting for the agent log to contain {needle:?}; log:\n{}",
                tail(&self.log(), 60)
            );
        }
    }

    /// SIGKILL (`kill -9`), like a crash: the agent gets no chance to clean up. Waits until reaped.
    pub fn kill_hard(&mut self) -> ExitStatus {
        if self.is_running() {
            signal(self.pid, "KILL");
        }
        self.wait_exit(Duration::from_secs(10))
            .expect("the agent survives SIGKILL")
    }

    /// SIGTERM and wait (30 s at most) for a clean exit; returns the exit status. Panics (after a
    /// SIGKILL) if the agent does not exit in time.
    pub fn stop(&mut self) -> ExitStatus {
        if self.is_running() {
            signal(self.pid, "TERM");
        }
        match self.wait_exit(STOP_TIMEOUT) {
            Some(status) => status,
            None => {
                self.kill_hard();
                panic!(
                    "the agent did not exit within {STOP_TIMEOUT:?} after SIGTERM; log:\n{}",
                    tail(&self.log(), 60)
                );
            }
        }
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        if self.is_running() {
            signal(self.pid, "KILL");
            let _ = wait_child(&mut self.child, Duration::from_secs(10));
        }
        if std::thread::panicking() {
            eprintln!(
                "=== agent log {} (tail) ===\n{}\n=== end of agent log ===",
                self.log_path.display(),
                tail(&self.log(), 80)
            );
        }
    }
}
