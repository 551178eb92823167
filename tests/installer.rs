//! `deploy/install-vm.sh` run for real as a subprocess, against a temporary `--root` tree and a fake
//! `systemctl` (first on PATH) that records its calls and keeps unit state in files: install,
//! re-run without change, update, uninstall back to the exact original tree, dry runs that change
//! nothing, refusals (bad flags, invalid config, interfaces still attached), the standalone
//! uninstall path that lets the agent restore its interfaces, and shellcheck and
//! `systemd-analyze verify` on the shipped script and unit.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const AGENT: &str = env!("CARGO_BIN_EXE_antrea-vm-agent");

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn script() -> PathBuf {
    repo().join("deploy/install-vm.sh")
}

/// Records every call in `calls`; `enable`/`start` create files in `state`, `disable`/`stop`
/// remove them, `is-enabled`/`is-active` answer from them (exit 1/3 when not).
const FAKE_SYSTEMCTL: &str = r#"#!/bin/sh
echo "$*" >> "$FAKE_SYSTEMCTL_CALLS"
quiet=0; verb=""; unit=""
for a in "$@"; do
  case $a in
    --quiet|-q) quiet=1 ;;
    -*) ;;
    *) if [ -z "$verb" ]; then verb=$a; else unit=$a; fi ;;
  esac
done
st=$FAKE_SYSTEMCTL_STATE
case $verb in
  daemon-reload) ;;
  enable) touch "$st/enabled.$unit" ;;
  disable) rm -f "$st/enabled.$unit" ;;
  start|restart) touch "$st/active.$unit" ;;
  stop) rm -f "$st/active.$unit" ;;
  is-active)
    if [ -e "$st/active.$unit" ]; then [ $quiet = 1 ] || echo active; exit 0; fi
    [ $quiet = 1 ] || echo inactive; exit 3 ;;
  is-enabled)
    if [ -e "$st/enabled.$unit" ]; then [ $quiet = 1 ] || echo enabled; exit 0; fi
    [ $quiet = 1 ] || echo disabled; exit 1 ;;
  *) echo "fake systemctl: unsupported: $*" >&2; exit 1 ;;
esac
"#;

const STANDALONE_CONF: &str = "\
nodeType: externalNode
featureGates:
  ExternalNode: true
externalNode:
  externalNodeNamespace: vm-ns
standalone:
  externalNodeFile: /etc/antrea/external-node.yaml
";

/// A config written for the Go agent: relative kubeconfigs, a commented-out Namespace.
const KUBE_CONF: &str = "\
nodeType: externalNode
featureGates:
  ExternalNode: true
clientConnection:
  kubeconfig: antrea-agent.kubeconfig
antreaClientConnection:
  kubeconfig: antrea-agent.antrea.kubeconfig
externalNode:
  #externalNodeNamespace: default
  policyBypassRules:
  - {direction: ingress, protocol: tcp, cidr: 10.0.0.0/8, port: 22}
#ovsBridge: br-int
";

/// A temporary host: `root/` (the tree under --root), `inputs/`, the fake systemctl.
struct Host {
    dir: tempfile::TempDir,
}

impl Host {
    fn new() -> Host {
        let dir = tempfile::Builder::new()
            .prefix("installer-test")
            .tempdir()
            .expect("tempdir");
        for sub in ["root", "inputs", "bin", "systemd-state"] {
            std::fs::create_dir(dir.path().join(sub)).expect("mkdir");
        }
        let fake = dir.path().join("bin/systemctl");
        std::fs::write(&fake, FAKE_SYSTEMCTL).expect("write fake systemctl");
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let host = Host { dir };
        host.input("kube.conf", KUBE_CONF);
        host.input("standalone.conf", STANDALONE_CONF);
        host.input("kubeconfig", "apiVersion: v1\nkind: Config\n# kube-apiserver\n");
        host.input(
            "antrea-kubeconfig",
            "apiVersion: v1\nkind: Config\n# antrea-controller\n",
        );
        host
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    fn at(&self, path: &str) -> PathBuf {
        self.root().join(path.trim_start_matches('/'))
    }

    fn input(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join("inputs").join(name);
        std::fs::write(&p, text).expect("write input");
        p
    }

    fn inp(&self, name: &str) -> String {
        self.dir.path().join("inputs").join(name).display().to_string()
    }

    fn put(&self, path: &str, text: &str) {
        let p = self.at(path);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }

    /// Runs the installer with `--root`; the fake systemctl is first on PATH.
    fn run(&self, args: &[&str]) -> Output {
        self.run_env(args, &[])
    }

    fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let path = format!(
            "{}:{}",
            self.dir.path().join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let root = self.root().display().to_string();
        let mut cmd = Command::new("bash");
        cmd.arg(script())
            .args(["--root", &root])
            .args(args)
            .env("PATH", path)
            .env_remove("SYSTEMCTL")
            .env("FAKE_SYSTEMCTL_CALLS", self.dir.path().join("systemctl-calls"))
            .env("FAKE_SYSTEMCTL_STATE", self.dir.path().join("systemd-state"))
            .env("TMPDIR", self.dir.path());
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("run install-vm.sh")
    }

    fn kube_install_args(&self) -> Vec<String> {
        vec![
            "--config".into(),
            self.inp("kube.conf"),
            "--bin".into(),
            AGENT.into(),
            "--kubeconfig".into(),
            self.inp("kubeconfig"),
            "--antrea-kubeconfig".into(),
            self.inp("antrea-kubeconfig"),
            "--ns".into(),
            "vm-ns".into(),
            "--nodename".into(),
            "vm1".into(),
        ]
    }

    /// The systemctl calls since the last call of this function.
    fn take_calls(&self) -> Vec<String> {
        let p = self.dir.path().join("systemctl-calls");
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        let _ = std::fs::remove_file(&p);
        text.lines().map(str::to_string).collect()
    }

    fn unit_state(&self, what: &str) -> bool {
        self.dir
            .path()
            .join("systemd-state")
            .join(format!("{what}.antrea-vm-agent.service"))
            .exists()
    }
}

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Every path under `root` with its mode and, for files, a digest of the content.
fn tree(root: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .expect("read_dir")
            .map(|e| e.expect("entry").path())
            .collect();
        entries.sort();
        for p in entries {
            let meta = std::fs::symlink_metadata(&p).expect("stat");
            let rel = p.strip_prefix(root).expect("under root").display().to_string();
            let mode = meta.permissions().mode() & 0o7777;
            if meta.is_dir() {
                out.insert(rel, format!("dir {mode:o}"));
                walk(root, &p, out);
            } else {
                let bytes = std::fs::read(&p).expect("read");
                out.insert(rel, format!("file {mode:o} {} {:016x}", bytes.len(), fnv(&bytes)));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn assert_ok(o: &Output) {
    assert!(
        o.status.success(),
        "installer failed ({:?})\nstdout:\n{}\nstderr:\n{}",
        o.status,
        stdout(o),
        stderr(o)
    );
}

fn mutating(calls: &[String]) -> Vec<&String> {
    calls
        .iter()
        .filter(|c| !c.starts_with("is-active") && !c.starts_with("is-enabled"))
        .collect()
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).expect("stat").permissions().mode() & 0o777
}

#[test]
fn install_rerun_update_and_uninstall_restore_the_original_tree() {
    let host = Host::new();
    // A host that already has things in /etc, including a Go agent's config.
    host.put("/etc/hostname", "vm1\n");
    host.put("/etc/antrea/antrea-agent.conf", "# the Go agent's config\n");
    host.put("/usr/sbin/ovs-vsctl", "not really\n");
    let original = tree(&host.root());

    let out = host.run(&args(&host.kube_install_args()));
    assert_ok(&out);
    let text = stdout(&out);
    assert!(
        text.contains("installed /usr/sbin/antrea-vm-agent (mode 0755)"),
        "{text}"
    );
    assert!(
        text.contains(
            "kept the previous /etc/antrea/antrea-agent.conf as /etc/antrea/antrea-agent.conf.pre-antrea-vm-agent"
        ),
        "{text}"
    );
    assert_eq!(
        host.take_calls(),
        [
            "is-active --quiet antrea-agent.service",
            "daemon-reload",
            "is-enabled --quiet antrea-vm-agent.service",
            "enable antrea-vm-agent.service",
            "is-active --quiet antrea-vm-agent.service",
            "start --no-block antrea-vm-agent.service",
        ]
    );
    assert!(host.unit_state("enabled") && host.unit_state("active"));

    // The files, their modes and contents.
    let conf = std::fs::read_to_string(host.at("/etc/antrea/antrea-agent.conf")).expect("conf");
    assert!(
        conf.contains("  kubeconfig: /etc/antrea/antrea-agent.kubeconfig\n"),
        "{conf}"
    );
    assert!(
        conf.contains("  kubeconfig: /etc/antrea/antrea-agent.antrea.kubeconfig\n"),
        "{conf}"
    );
    assert!(conf.contains("  externalNodeNamespace: \"vm-ns\"\n"), "{conf}");
    assert!(!conf.contains("#externalNodeNamespace"), "{conf}");
    assert!(
        conf.contains("#ovsBridge: br-int\n"),
        "untouched without --ovs-bridge: {conf}"
    );
    for (path, m) in [
        ("/etc/antrea/antrea-agent.kubeconfig", 0o600),
        ("/etc/antrea/antrea-agent.antrea.kubeconfig", 0o600),
        ("/etc/antrea/antrea-agent.conf", 0o644),
        ("/usr/sbin/antrea-vm-agent", 0o755),
        ("/etc/systemd/system/antrea-vm-agent.service", 0o644),
        ("/var/lib/antrea-vm-agent", 0o700),
        ("/var/log/antrea", 0o755),
    ] {
        assert_eq!(mode(&host.at(path)), m, "mode of {path}");
    }
    // The agent rotates its own log: no logrotate file (tests/operator_assets.rs runs logrotate).
    assert!(!host.at("/etc/logrotate.d").exists());
    assert_eq!(
        std::fs::read_to_string(host.at("/etc/antrea/antrea-vm-agent.env")).expect("env"),
        "NODE_NAME=vm1\n"
    );
    assert_eq!(
        std::fs::read(host.at("/etc/systemd/system/antrea-vm-agent.service")).expect("unit"),
        std::fs::read(repo().join("deploy/systemd/antrea-vm-agent.service")).expect("shipped unit")
    );
    // The installed binary accepts the installed config.
    let check = Command::new(host.at("/usr/sbin/antrea-vm-agent"))
        .args(["check-config", "--config"])
        .arg(host.at("/etc/antrea/antrea-agent.conf"))
        .output()
        .expect("check-config");
    assert!(check.status.success(), "{}", stderr(&check));

    // A re-run changes nothing and says so.
    let installed = tree(&host.root());
    let out = host.run(&args(&host.kube_install_args()));
    assert_ok(&out);
    assert!(
        stdout(&out).contains("already installed and up to date: nothing changed"),
        "{}",
        stdout(&out)
    );
    assert_eq!(tree(&host.root()), installed);
    let calls = host.take_calls();
    assert!(mutating(&calls).is_empty(), "re-run called {calls:?}");

    // A new binary is an update: replaced, and the agent restarted (the unit did not change, so no
    // daemon-reload).
    let mut newer = std::fs::read(AGENT).expect("agent");
    newer.extend_from_slice(b"\0newer build");
    let newer_path = host.dir.path().join("inputs/antrea-vm-agent");
    std::fs::write(&newer_path, &newer).expect("write");
    std::fs::set_permissions(&newer_path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut update = host.kube_install_args();
    update[3] = newer_path.display().to_string();
    let out = host.run(&args(&update));
    assert_ok(&out);
    assert!(stdout(&out).contains("updated /usr/sbin/antrea-vm-agent (mode 0755)"));
    assert!(stdout(&out).contains("unchanged /etc/antrea/antrea-agent.conf"));
    assert_eq!(
        mutating(&host.take_calls()),
        ["restart --no-block antrea-vm-agent.service"]
    );

    // Uninstall: stopped, disabled, and the tree is exactly the original, the Go agent's config
    // included.
    let out = host.run(&["--uninstall"]);
    assert_ok(&out);
    assert!(stdout(&out).contains("antrea-vm-agent is uninstalled"));
    assert_eq!(
        mutating(&host.take_calls()),
        [
            "stop antrea-vm-agent.service",
            "disable antrea-vm-agent.service",
            "daemon-reload"
        ]
    );
    assert!(!host.unit_state("enabled") && !host.unit_state("active"));
    assert_eq!(tree(&host.root()), original);

    // Uninstalling again is a no-op.
    let out = host.run(&["--uninstall"]);
    assert_ok(&out);
    assert!(stdout(&out).contains("not installed here"), "{}", stdout(&out));
    assert_eq!(tree(&host.root()), original);
}

/// What an earlier version of the installer added: /etc/logrotate.d/antrea-vm-agent (the host's
/// own file, if it had one, kept aside), recorded in the manifest.
fn add_retired_logrotate_file(host: &Host) {
    const OLD: &str = "/var/log/antrea/antrea-agent.log {\n    daily\n    copytruncate\n}\n";
    let file = host.at("/etc/logrotate.d/antrea-vm-agent");
    let mut manifest =
        std::fs::read_to_string(host.at("/etc/antrea/antrea-vm-agent.manifest")).expect("manifest");
    if file.exists() {
        std::fs::rename(
            &file,
            host.at("/etc/logrotate.d/antrea-vm-agent.pre-antrea-vm-agent"),
        )
        .expect("keep aside");
        manifest.push_str("backup /etc/logrotate.d/antrea-vm-agent\n");
    } else {
        if !host.at("/etc/logrotate.d").exists() {
            manifest.push_str("dir /etc/logrotate.d\n");
        }
        manifest.push_str("file /etc/logrotate.d/antrea-vm-agent\n");
    }
    host.put("/etc/logrotate.d/antrea-vm-agent", OLD);
    std::fs::write(host.at("/etc/antrea/antrea-vm-agent.manifest"), manifest).expect("manifest");
}

#[test]
fn the_logrotate_file_of_an_earlier_install_goes_on_update_and_on_uninstall() {
    // Updated: removed (its directory, made by the installer, goes at uninstall), then uninstalled.
    let host = Host::new();
    host.put("/etc/hostname", "vm1\n");
    let original = tree(&host.root());
    assert_ok(&host.run(&args(&host.kube_install_args())));
    let installed = tree(&host.root());
    add_retired_logrotate_file(&host);
    let mut dry = host.kube_install_args();
    dry.push("--dry-run".into());
    let out = host.run(&args(&dry));
    assert_ok(&out);
    assert!(
        stdout(&out)
            .contains("would remove /etc/logrotate.d/antrea-vm-agent (the agent rotates its own log)"),
        "{}",
        stdout(&out)
    );
    assert!(host.at("/etc/logrotate.d/antrea-vm-agent").exists(), "a dry run");
    host.take_calls();
    let out = host.run(&args(&host.kube_install_args()));
    assert_ok(&out);
    assert!(
        stdout(&out).contains("removed /etc/logrotate.d/antrea-vm-agent (the agent rotates its own log)"),
        "{}",
        stdout(&out)
    );
    assert!(
        mutating(&host.take_calls()).is_empty(),
        "nothing of the agent changed"
    );
    let manifest =
        std::fs::read_to_string(host.at("/etc/antrea/antrea-vm-agent.manifest")).expect("manifest");
    assert!(!manifest.contains("file /etc/logrotate.d/"), "{manifest}");
    let mut expected = installed.clone();
    expected.insert("etc/logrotate.d".into(), "dir 755".into());
    expected.insert(
        "etc/antrea/antrea-vm-agent.manifest".into(),
        tree(&host.root())["etc/antrea/antrea-vm-agent.manifest"].clone(),
    );
    assert_eq!(tree(&host.root()), expected);
    let out = host.run(&args(&host.kube_install_args()));
    assert!(stdout(&out).contains("nothing changed"), "{}", stdout(&out));
    assert_ok(&host.run(&["--uninstall"]));
    assert_eq!(tree(&host.root()), original);

    // The host had a file of that name before the earlier install: put back on update.
    let host = Host::new();
    host.put("/etc/logrotate.d/antrea-vm-agent", "# the host's own\n");
    let original = tree(&host.root());
    assert_ok(&host.run(&args(&host.kube_install_args())));
    let installed = tree(&host.root());
    add_retired_logrotate_file(&host);
    let out = host.run(&args(&host.kube_install_args()));
    assert_ok(&out);
    assert!(
        stdout(&out).contains(
            "restored /etc/logrotate.d/antrea-vm-agent from /etc/logrotate.d/antrea-vm-agent.pre-antrea-vm-agent"
        ),
        "{}",
        stdout(&out)
    );
    assert_eq!(tree(&host.root()), installed);
    assert_ok(&host.run(&["--uninstall"]));
    assert_eq!(tree(&host.root()), original);

    // Uninstalled straight from the earlier install: the file goes with the rest.
    let host = Host::new();
    let original = tree(&host.root());
    assert_ok(&host.run(&args(&host.kube_install_args())));
    add_retired_logrotate_file(&host);
    let out = host.run(&["--uninstall"]);
    assert_ok(&out);
    assert!(
        stdout(&out).contains("removed /etc/logrotate.d/antrea-vm-agent\n"),
        "{}",
        stdout(&out)
    );
    assert_eq!(tree(&host.root()), original);
}

#[test]
fn dry_runs_print_the_actions_and_change_nothing() {
    let host = Host::new();
    let empty = tree(&host.root());
    let mut dry = host.kube_install_args();
    dry.push("--dry-run".into());
    let out = host.run(&args(&dry));
    assert_ok(&out);
    let text = stdout(&out);
    for line in [
        "would create directory /etc/antrea (mode 0755)",
        "would install /etc/antrea/antrea-agent.conf (mode 0644)",
        "would install /usr/sbin/antrea-vm-agent (mode 0755)",
        "would install /etc/systemd/system/antrea-vm-agent.service (mode 0644)",
        "would run systemctl enable antrea-vm-agent.service",
        "would run systemctl start --no-block antrea-vm-agent.service",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    assert_eq!(tree(&host.root()), empty);
    let calls = host.take_calls();
    assert!(mutating(&calls).is_empty(), "dry run called {calls:?}");

    // Installed for real, then a dry-run uninstall: listed, nothing removed.
    assert_ok(&host.run(&args(&host.kube_install_args())));
    host.take_calls();
    let installed = tree(&host.root());
    let out = host.run(&["--uninstall", "--dry-run"]);
    assert_ok(&out);
    let text = stdout(&out);
    assert!(text.contains("would remove /usr/sbin/antrea-vm-agent"), "{text}");
    assert!(
        text.contains("would run systemctl stop antrea-vm-agent.service"),
        "{text}"
    );
    // The dry run knows the directories it would empty.
    assert!(text.contains("would remove directory /etc/antrea"), "{text}");
    assert_eq!(tree(&host.root()), installed);
    let calls = host.take_calls();
    assert!(mutating(&calls).is_empty(), "dry run called {calls:?}");
}

#[test]
fn bad_command_lines_are_refused_with_a_clear_error_and_no_change() {
    let host = Host::new();
    let before = tree(&host.root());
    let conf = host.inp("standalone.conf");
    let kc = host.inp("kubeconfig");
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        (vec!["--bogus"], 2, "unknown option: --bogus"),
        (vec!["--bin", AGENT], 2, "missing argument(s): --config"),
        (vec!["--config", &conf], 2, "missing argument(s): --bin"),
        (vec!["--config", &conf, "--bin"], 2, "option --bin needs a value"),
        (
            vec!["--config", &conf, "--bin", AGENT, "--dry-run=yes"],
            2,
            "option --dry-run takes no value",
        ),
        (
            vec!["--config", "/nonexistent.conf", "--bin", AGENT],
            2,
            "--config /nonexistent.conf: no such readable file",
        ),
        (
            vec!["--config", &conf, "--bin", "/nonexistent"],
            2,
            "--bin /nonexistent: no such executable file",
        ),
        (
            vec!["--config", &conf, "--bin", AGENT, "--ns", "Bad_NS"],
            2,
            "--ns Bad_NS: not a valid Namespace name",
        ),
        (
            vec!["--config", &conf, "--bin", AGENT, "--nodename", "VM_1"],
            2,
            "node name VM_1 (--nodename)",
        ),
        (
            vec![
                "--config",
                &conf,
                "--bin",
                AGENT,
                "--ovs-bridge",
                "a-bridge-name-too-long",
            ],
            2,
            "not a valid bridge name",
        ),
        (
            vec!["--config", &conf, "--bin", AGENT, "--kubeconfig", &kc],
            2,
            "missing argument(s): --antrea-kubeconfig",
        ),
        (
            vec!["--uninstall", "--config", &conf],
            2,
            "--uninstall takes no install options",
        ),
        (
            vec!["--config", &conf, "--bin", AGENT, "--force"],
            2,
            "--force is an --uninstall option",
        ),
        (vec!["--containerize"], 2, "not supported"),
    ];
    for (argv, code, message) in cases {
        let out = host.run(&argv);
        assert_eq!(out.status.code(), Some(code), "{argv:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(message),
            "{argv:?}: expected {message:?} in:\n{}",
            stderr(&out)
        );
        assert!(
            stdout(&out).is_empty(),
            "{argv:?} printed actions: {}",
            stdout(&out)
        );
    }
    // A Go-agent config without the kubeconfigs: they are required unless standalone.
    let out = host.run(&["--config", &host.inp("kube.conf"), "--bin", AGENT]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("missing argument(s): --kubeconfig --antrea-kubeconfig"));

    // A config the agent rejects: the agent's own message, exit 1, nothing changed.
    let bad = host.input(
        "bad.conf",
        &STANDALONE_CONF.replace("externalNode\n", "k8sNode\n"),
    );
    let out = host.run(&["--config", &bad.display().to_string(), "--bin", AGENT]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("nodeType k8sNode is not supported"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("nothing was changed"), "{}", stderr(&out));

    // A running Go agent is a conflict.
    std::fs::write(
        host.dir.path().join("systemd-state/active.antrea-agent.service"),
        "",
    )
    .expect("w");
    let out = host.run(&["--config", &conf, "--bin", AGENT]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("systemctl disable --now antrea-agent.service"),
        "{}",
        stderr(&out)
    );

    assert_eq!(tree(&host.root()), before);
    assert!(mutating(&host.take_calls()).is_empty());
}

#[test]
fn uninstall_refuses_while_interfaces_are_attached_unless_forced() {
    let host = Host::new();
    let original = tree(&host.root());
    assert_ok(&host.run(&args(&host.kube_install_args())));
    host.take_calls();
    // The agent's record of an attached interface.
    host.put("/var/lib/antrea-vm-agent/interfaces/eth0.json", "{}");
    let attached = tree(&host.root());

    let out = host.run(&["--uninstall"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("interfaces still attached to OVS by the agent: eth0"),
        "{err}"
    );
    assert!(err.contains("kubectl -n vm-ns delete externalnode vm1"), "{err}");
    assert!(err.contains("--force"), "{err}");
    assert_eq!(tree(&host.root()), attached);
    assert!(mutating(&host.take_calls()).is_empty());

    // Forced: everything else goes; the record (needed to restore the NIC later) stays.
    let out = host.run(&["--uninstall", "--force", "--purge"]);
    assert_ok(&out);
    assert!(
        stderr(&out).contains("--force: uninstalling anyway"),
        "{}",
        stderr(&out)
    );
    let mut expected = original.clone();
    for (path, desc) in tree(&host.root()) {
        if path.starts_with("var") {
            expected.insert(path, desc);
        }
    }
    assert_eq!(tree(&host.root()), expected);
    assert!(host.at("/var/lib/antrea-vm-agent/interfaces/eth0.json").exists());
    assert!(!host.at("/etc/antrea").exists());
}

#[test]
fn standalone_uninstall_lets_the_running_agent_restore_the_interfaces() {
    let host = Host::new();
    host.put("/etc/antrea/external-node.yaml", "kind: ExternalNode\n");
    let conf = host.inp("standalone.conf");
    assert_ok(&host.run(&["--config", &conf, "--bin", AGENT, "--nodename", "vm1"]));
    assert!(host.unit_state("active"));
    let record = host.at("/var/lib/antrea-vm-agent/interfaces/eth0.json");
    host.put("/var/lib/antrea-vm-agent/interfaces/eth0.json", "{}");

    // Nobody restores: the wait ends, the ExternalNode file is put back, nothing else changes.
    let before = tree(&host.root());
    let out = host.run_env(&["--uninstall"], &[("ANTREA_VM_AGENT_DETACH_TIMEOUT", "1")]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("did not restore eth0 within 1s"),
        "{}",
        stderr(&out)
    );
    assert_eq!(tree(&host.root()), before);

    // A stand-in for the agent: when the ExternalNode file goes, it restores the NIC (drops the
    // record), as the agent does on the ExternalNode's deletion.
    let en = host.at("/etc/antrea/external-node.yaml");
    let agent = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(30);
        while en.exists() {
            assert!(
                Instant::now() < deadline,
                "the installer never removed the ExternalNode file"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        std::fs::remove_file(&record).expect("remove record");
    });
    let out = host.run_env(&["--uninstall"], &[("ANTREA_VM_AGENT_DETACH_TIMEOUT", "30")]);
    agent.join().expect("stand-in agent");
    assert_ok(&out);
    let text = stdout(&out);
    assert!(text.contains("the agent restored eth0"), "{text}");
    assert!(text.contains("antrea-vm-agent is uninstalled"), "{text}");
    // The user's ExternalNode file is kept aside; the (now empty) state is removed.
    assert!(host.at("/etc/antrea/external-node.yaml.uninstalled").exists());
    assert!(!host.at("/etc/antrea/antrea-agent.conf").exists());
    assert!(!host.at("/var/lib/antrea-vm-agent/interfaces/eth0.json").exists());
}

#[test]
fn ovs_bridge_and_namespace_are_set_in_any_config_shape() {
    let host = Host::new();
    // No externalNode section, four-space indentation elsewhere, ovsBridge set explicitly.
    let conf = host.input(
        "shape.conf",
        "nodeType: externalNode\nfeatureGates:\n    ExternalNode: true\novsBridge: br-old\nstandalone:\n    externalNodeFile: /etc/antrea/en.yaml\n",
    );
    let out = host.run(&[
        "--config",
        &conf.display().to_string(),
        "--bin",
        AGENT,
        "--ns",
        "ns2",
        "--ovs-bridge",
        "br-vm",
        "--no-systemd",
    ]);
    assert_ok(&out);
    assert!(host.take_calls().is_empty(), "--no-systemd called systemctl");
    let installed = std::fs::read_to_string(host.at("/etc/antrea/antrea-agent.conf")).expect("conf");
    assert_eq!(
        installed,
        "nodeType: externalNode\nfeatureGates:\n    ExternalNode: true\novsBridge: \"br-vm\"\nstandalone:\n    externalNodeFile: /etc/antrea/en.yaml\nexternalNode:\n  externalNodeNamespace: \"ns2\"\n"
    );
    // Flow-style sections cannot be edited line by line: refused, clearly.
    let flow = host.input(
        "flow.conf",
        "nodeType: externalNode\nfeatureGates: {ExternalNode: true}\nexternalNode: {externalNodeNamespace: a}\nstandalone: {externalNodeFile: /x}\n",
    );
    let out = host.run(&[
        "--config",
        &flow.display().to_string(),
        "--bin",
        AGENT,
        "--ns",
        "b",
        "--no-systemd",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("'externalNode:' is written in flow style"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn the_script_passes_shellcheck() {
    let out = Command::new("shellcheck")
        .arg("--severity=style")
        .arg(script())
        .output()
        .expect("shellcheck is needed (Debian package shellcheck; make deps installs it)");
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
}

#[test]
fn the_unit_passes_systemd_analyze_verify() {
    // The unit as shipped, with the binary path pointed at the built agent (verify checks that
    // ExecStart is executable).
    let dir = tempfile::tempdir().expect("tempdir");
    let unit = std::fs::read_to_string(repo().join("deploy/systemd/antrea-vm-agent.service")).expect("unit");
    assert!(unit.contains("ExecStart=/usr/sbin/antrea-vm-agent run --config=/etc/antrea/antrea-agent.conf"));
    let path = dir.path().join("antrea-vm-agent.service");
    std::fs::write(&path, unit.replace("/usr/sbin/antrea-vm-agent", AGENT)).expect("write");
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze (package systemd)");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "systemd-analyze verify: {}{}",
        stdout(&out),
        stderr(&out)
    );
    // The ExecStart flags are ones the agent accepts.
    let help = Command::new(AGENT)
        .args(["run", "--help"])
        .output()
        .expect("agent");
    let help = stdout(&help);
    for flag in ["--config", "--logtostderr", "--log_file"] {
        assert!(help.contains(flag), "agent run lacks {flag}");
    }
}
