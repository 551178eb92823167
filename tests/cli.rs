//! The command line: `check-config` reports every problem with its key path, and `run` accepts
//! the Go agent's logging flags (`--logtostderr=false --log_file=F`) so its systemd unit works.

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
fn run_accepts_the_go_agents_logging_flags() {
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
    let mut child = Command::new(BIN)
        .arg("run")
        .arg(format!("--config={}", config.display()))
        .arg("--logtostderr=false")
        .arg(format!("--log_file={}", log.display()))
        .arg("--v=2")
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
