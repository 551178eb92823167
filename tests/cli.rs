//! The command line: `check-config` reports every problem with its key path, and the agent runs
//! as the Go `antrea-agent` does, `antrea-vm-agent --config F` with no subcommand (or `run`), with
//! the Go agent's klog flags, so its systemd unit works with only the binary path changed; unknown
//! flags are named in the error.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_antrea-vm-agent");

fn write(dir: &std::path::Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write test file");
    path
}

#[test]
fn check_config_lists_every_problem_with_its_key_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = write(
        dir.path(),
        "bad.conf",
        "nodeType: externalNode\novsDatapathType: dpdk\napiPort: 70000\nexternalNode:\n  policyBypassRules:\n  \
         - {direction: inbound, protocol: tcp, cidr: 10.0.0.0/8, port: 22}\n  - {direction: ingress, protocol: tcp, cidr: 10.0.0.0/8}\n",
    );
    let out = Command::new(BIN)
        .args(["check-config", "--config"])
        .arg(&bad)
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    for expected in [
        "featureGates",
        "nodeType externalNode requires feature gate ExternalNode to be enabled",
        "ovsDatapathType",
        "OVS datapath type dpdk is not supported",
        "apiPort",
        "policyBypassRules configuration is invalid: direction inbound for policyBypassRule is invalid",
    ] {
        assert!(err.contains(expected), "missing {expected:?} in:\n{err}");
    }

    let good = write(
        dir.path(),
        "good.conf",
        "nodeType: externalNode\nfeatureGates: {ExternalNode: true}\nsomeFutureKey: 1\n\
         standalone: {externalNodeFile: /tmp/en.yaml}\n",
    );
    let out = Command::new(BIN)
        .args(["check-config", "--config"])
        .arg(&good)
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("OK") && text.contains("someFutureKey"), "{text}");
}

#[test]
fn check_config_passes_the_shipped_sample_and_explains_refused_gates() {
    let sample = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/antrea-agent.conf.sample");
    let out = Command::new(BIN)
        .args(["check-config", "--config", sample])
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // Antrea's own sample enables support bundles: refused, with the reason.
    let dir = tempfile::tempdir().expect("tempdir");
    let text = std::fs::read_to_string(sample).expect("sample");
    let with_bundles = text.replace(
        "  NetworkPolicyStats: true\n",
        "  NetworkPolicyStats: true\n  SupportBundleCollection: true\n",
    );
    assert_ne!(text, with_bundles);
    let conf = write(dir.path(), "bundles.conf", &with_bundles);
    let out = Command::new(BIN)
        .args(["check-config", "--config"])
        .arg(&conf)
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("featureGates.SupportBundleCollection")
            && err.contains("SupportBundleCollection is not implemented by antrea-vm-agent")
            && err.contains("would never complete"),
        "{err}"
    );
}

#[test]
fn the_agent_runs_with_the_go_agents_command_line() {
    // Without a subcommand, as the Go unit runs it, and with `run`.
    for drop_in in [true, false] {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = write(
            dir.path(),
            "agent.conf",
            &format!(
                "nodeType: externalNode\nfeatureGates: {{ExternalNode: true}}\novsRunDir: {d}/no-ovs\nstateDir: {d}/state\n\
                 standalone: {{externalNodeFile: {d}/en.yaml}}\n",
                d = dir.path().display()
            ),
        );
        let log = dir.path().join("log/antrea-agent.log");
        let mut command = Command::new(BIN);
        if !drop_in {
            command.arg("run");
        }
        let mut child = command
            .arg(format!("--config={}", config.display()))
            .arg("--logtostderr=false")
            .arg(format!("--log_file={}", log.display()))
            .args([
                "--log_file_max_size=100",
                "--log_file_max_num=4",
                "--alsologtostderr=false",
            ])
            .arg("--v=2")
            .arg("--feature-gates=AntreaPolicy=true")
            .env("NODE_NAME", "vm1")
            .stdin(Stdio::null())
            .spawn()
            .expect("start agent");
        let start = Instant::now();
        let mut text = String::new();
        while start.elapsed() < Duration::from_secs(20) {
            text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.contains("no-ovs/db.sock") {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let still_running = child.try_wait().expect("wait").is_none();
        let _ = child.kill();
        let _ = child.wait();
        assert!(still_running, "the agent keeps running without OVS; log:\n{text}");
        assert!(
            text.contains("starting antrea-vm-agent"),
            "log file written:\n{text}"
        );
        assert!(
            text.contains("no-ovs/db.sock"),
            "the OVSDB error names the socket:\n{text}"
        );
        assert!(!text.contains('\u{1b}'), "no terminal colours in a log file");
    }
}

#[test]
fn bad_flags_and_feature_gates_are_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write(
        dir.path(),
        "agent.conf",
        "nodeType: externalNode\nfeatureGates: {ExternalNode: true}\nstandalone: {externalNodeFile: /tmp/en.yaml}\n",
    );
    let run = |args: &[&str]| {
        let out = Command::new(BIN)
            .arg(format!("--config={}", config.display()))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run");
        assert!(!out.status.success(), "{args:?} accepted");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let err = run(&["--v=2", "--log_dir=/var/log"]);
    assert!(err.contains("unexpected argument '--log_dir'"), "{err}");
    let err = run(&["--feature-gates=Egress"]);
    assert!(err.contains("--feature-gates") && err.contains("Egress"), "{err}");
    // A gate the agent does not implement is refused as if written in the file.
    let err = run(&[
        "--logtostderr",
        "--feature-gates=Multicast=true,ExternalNode=false",
    ]);
    assert!(
        err.contains("featureGates.Multicast")
            && err.contains("featureGates.ExternalNode")
            && err.contains("--feature-gates"),
        "{err}"
    );
    // Subcommands other than run do not take the agent's flags.
    let out = Command::new(BIN)
        .args(["--config=/x", "get", "policies"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    // No configuration, no subcommand: the missing flag is named.
    let out = Command::new(BIN).output().expect("run");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--config is required"));
}

/// `translate` prints the local controller's controlplane objects for the seed example
/// and fails naming the file, object and field of a refused policy; `compile --policies` turns
/// the same input into flows.
#[test]
fn translate_and_compile_read_antrea_native_policies() {
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    write(&policies, "annp.yaml", include_str!("fixtures/seed-annp.yaml"));
    write(
        &policies,
        "inventory.yaml",
        include_str!("fixtures/seed-inventory.yaml"),
    );
    let node = write(
        dir.path(),
        "en.yaml",
        "apiVersion: crd.antrea.io/v1alpha1
kind: ExternalNode
metadata: {name: vm1, namespace: vm-ns, labels: {role: db}}
spec: {interfaces: [{name: eth0, ips: [10.99.0.2]}]}
",
    );
    let out = Command::new(BIN)
        .arg("translate")
        .arg(&policies)
        .arg("--external-node")
        .arg(&node)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let docs: Vec<serde_json::Value> = serde_norway::Deserializer::from_str(&stdout)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["AppliedToGroup", "AddressGroup", "NetworkPolicy"]);
    assert_eq!(docs[0]["groupMembers"][0]["externalEntity"]["name"], "vm1-3e616");
    assert_eq!(docs[2]["sourceRef"]["name"], "annp1");
    assert_eq!(docs[2]["rules"][0]["action"], "Reject");

    let state = write(
        dir.path(),
        "state.yaml",
        "interfaces:\n- {name: eth0, ofport: 1, uplinkOfport: 2, ips: [10.99.0.2], \
         externalEntity: {namespace: vm-ns, name: vm1-3e616}}\n",
    );
    let out = Command::new(BIN)
        .args(["compile", "--state"])
        .arg(&state)
        .arg("--policies")
        .arg(&policies)
        .arg("--external-node")
        .arg(&node)
        .output()
        .unwrap();
    let flows = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        flows.contains("ip,nw_src=172.16.100.4 actions=conjunction("),
        "{flows}"
    );
    assert!(
        flows.contains("ip,nw_src=172.16.100.5 actions=conjunction("),
        "{flows}"
    );

    write(
        &policies,
        "bad.yaml",
        "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: bad}
spec: {priority: 1, appliedTo: [{externalEntitySelector: {}}], ingress: [{action: Allow, ports: [{port: 9, endPort: 8}]}]}
",
    );
    let out = Command::new(BIN)
        .arg("translate")
        .arg(&policies)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("bad.yaml: object 1: ClusterNetworkPolicy bad: spec.ingress[0].ports: `endPort` should be greater than or equal to `port`"),
        "{stderr}"
    );
    // The other policy is still printed.
    assert!(String::from_utf8_lossy(&out.stdout).contains("name: annp1"));
}
