//! The Debian package, built by `make deb` and installed for real (root):
//!
//! - into a clean root directory with `dpkg --root` (maintainer scripts chrootless, honouring
//!   `DPKG_ROOT`): every file in its place, the binary's `--version`, the man page rendering,
//!   the configuration kept across an upgrade when the operator changed it, remove and purge;
//!   an upgrade from a package that still shipped /etc/logrotate.d/antrea-vm-agent removes that
//!   conffile (the agent rotates its own log), keeping an operator's changed copy as `.dpkg-bak`;
//! - inside a Debian booted with `systemd-nspawn --boot` (made once with `debootstrap` and cached
//!   under /var/tmp), sharing the lab's VM network namespace and its Open vSwitch: the unit under a
//!   real systemd reaches `active` only once the agent is ready (`Type=notify`: not while OVS is
//!   down), is restarted after a SIGKILL (`Restart=on-failure`), `systemctl stop` leaves the NIC
//!   attached, and `dpkg -r` restores it.
//!
//! To keep CI short the package is made of the debug binary this test run has just built
//! (`DEB_PROFILE=dev DEB_BUILD=no`), not of a build of its own; `make deb` packages the release
//! build the same way. (The tests' binary also has the fakes compiled in, unused: the product
//! build is linked and run by `make demo`, and linted by `make lint`.)
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use support::{wait_until, Lab, NIC, UPLINK, VM_IP4, VM_IP6};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The two packages of this run: version 0.1.0-2 (the package's own) and the same content as
/// 0.1.0-3 (the upgrade).
struct Packages {
    v1: PathBuf,
    v2: PathBuf,
}

/// `make deb` once per test binary (the tests share it).
fn packages() -> &'static Packages {
    static PACKAGES: OnceLock<Packages> = OnceLock::new();
    PACKAGES.get_or_init(|| {
        let out_dir = repo().join("target/debian-test");
        let _ = std::fs::remove_dir_all(&out_dir);
        std::fs::create_dir_all(&out_dir).expect("create target/debian-test");
        let v1 = out_dir.join("antrea-vm-agent_0.1.0-2.deb");
        let v2 = out_dir.join("antrea-vm-agent_0.1.0-3.deb");
        run(Command::new("make")
            .current_dir(repo())
            .arg("deb")
            .arg("DEB_PROFILE=dev")
            .arg("DEB_BUILD=no")
            .arg("DEB_STRIP=--strip")
            .arg(format!(
                "DEB_ARGS=--fast --deb-version 0.1.0-2 -o {}",
                v1.display()
            )));
        // The same assets again under the next revision: what an upgrade installs.
        run(Command::new("cargo")
            .current_dir(repo())
            .args([
                "deb",
                "--no-build",
                "--strip",
                "--profile",
                "dev",
                "--fast",
                "--deb-version",
                "0.1.0-3",
                "-o",
            ])
            .arg(&v2));
        Packages { v1, v2 }
    })
}

/// Every path the package installs (files and symlinks, not directories).
const PACKAGED_FILES: &[&str] = &[
    "etc/antrea/antrea-agent.conf",
    "etc/dhcp/dhclient-enter-hooks.d/antrea-vm-agent-uplink",
    "lib/systemd/system/antrea-vm-agent.service",
    "usr/bin/antrea-vm-agent",
    "usr/lib/NetworkManager/conf.d/90-antrea-vm-agent.conf",
    "usr/lib/systemd/network/01-antrea-vm-agent-uplink.network",
    "usr/share/antrea-vm-agent/network-managers/02-antrea-vm-agent-host-port.network.in",
    "usr/share/antrea-vm-agent/network-managers/dhcpcd.conf.antrea-vm-agent",
    "usr/share/bash-completion/completions/antrea-vm-agent",
    "usr/share/doc/antrea-vm-agent/README.md",
    "usr/share/doc/antrea-vm-agent/copyright",
    "usr/share/doc/antrea-vm-agent/kubernetes.md",
    "usr/share/doc/antrea-vm-agent/network-managers.md",
    "usr/share/doc/antrea-vm-agent/vm-agent-rbac.yml",
    "usr/share/fish/vendor_completions.d/antrea-vm-agent.fish",
    "usr/share/man/man8/antrea-vm-agent-check-config.8.gz",
    "usr/share/man/man8/antrea-vm-agent-compile.8.gz",
    "usr/share/man/man8/antrea-vm-agent-detach-all.8.gz",
    "usr/share/man/man8/antrea-vm-agent-get.8.gz",
    "usr/share/man/man8/antrea-vm-agent-run.8.gz",
    "usr/share/man/man8/antrea-vm-agent-supportbundle.8.gz",
    "usr/share/man/man8/antrea-vm-agent.8.gz",
    "usr/share/zsh/vendor-completions/_antrea-vm-agent",
];

fn files_under(root: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let path = e.path();
            let ft = e.file_type().expect("file type");
            if ft.is_dir() {
                walk(root, &path, out);
            } else {
                out.push(path.strip_prefix(root).expect("under root").display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.retain(|p| !p.starts_with("var/lib/dpkg/"));
    out.sort();
    out
}

/// A root directory with an empty dpkg database.
fn empty_root(dir: &Path) -> PathBuf {
    let root = dir.join("root");
    for d in ["var/lib/dpkg/info", "var/lib/dpkg/updates"] {
        std::fs::create_dir_all(root.join(d)).expect("dpkg dirs");
    }
    for f in ["var/lib/dpkg/status", "var/lib/dpkg/available"] {
        std::fs::write(root.join(f), "").expect("dpkg files");
    }
    root
}

/// dpkg on `root`, scripts run outside a chroot with `DPKG_ROOT` set (the root has no shell).
/// `--force-depends`: the empty root has no libc6 to satisfy `Depends`. No standard input: a
/// conffile prompt would fail the command.
fn dpkg(root: &Path, args: &[&str]) -> Output {
    run(Command::new("dpkg")
        .arg(format!("--root={}", root.display()))
        .args(["--force-script-chrootless", "--force-depends"])
        .args(args)
        .stdin(Stdio::null()))
}

#[test]
fn package_installs_upgrades_removes_and_purges_in_a_clean_root() {
    let pkgs = packages();
    let dir = tempfile::tempdir().expect("tempdir");
    let root = empty_root(dir.path());

    // The control data: the emulator is not in the package, the config is a conffile.
    let listing = text(&run(Command::new("dpkg-deb").arg("-c").arg(&pkgs.v1)));
    assert!(!listing.contains("emulator"), "{listing}");
    let name = text(&run(Command::new("dpkg-deb")
        .arg("-f")
        .arg(&pkgs.v1)
        .arg("Package")));
    assert_eq!(name.trim(), "antrea-vm-agent");
    let control = dir.path().join("control");
    run(Command::new("dpkg-deb").arg("-e").arg(&pkgs.v1).arg(&control));
    let conffiles = std::fs::read_to_string(control.join("conffiles")).expect("conffiles");
    assert!(
        conffiles.lines().any(|l| l == "/etc/antrea/antrea-agent.conf"),
        "{conffiles}"
    );

    let out = dpkg(&root, &["-i", pkgs.v1.to_str().expect("utf-8")]);
    let installed = files_under(&root);
    let expected: Vec<String> = PACKAGED_FILES.iter().map(|s| s.to_string()).collect();
    let missing: Vec<&String> = expected.iter().filter(|f| !installed.contains(f)).collect();
    assert!(
        missing.is_empty(),
        "missing after install: {missing:?}\ninstalled: {installed:?}\n{}",
        text(&out)
    );
    // postinst creates the log and state directories; it starts nothing (no unit is started).
    assert!(root.join("var/log/antrea").is_dir());
    assert!(root.join("var/lib/antrea-vm-agent").is_dir());

    // The packaged unit runs the packaged binary; the sample config is the conffile.
    let unit =
        std::fs::read_to_string(root.join("lib/systemd/system/antrea-vm-agent.service")).expect("unit");
    assert!(
        unit.contains("ExecStart=/usr/bin/antrea-vm-agent run --config=/etc/antrea/antrea-agent.conf"),
        "{unit}"
    );
    assert!(!unit.contains("/usr/sbin/"), "{unit}");
    let sample = std::fs::read_to_string(repo().join("deploy/antrea-agent.conf.sample")).expect("sample");
    let conf = root.join("etc/antrea/antrea-agent.conf");
    assert_eq!(std::fs::read_to_string(&conf).expect("conf"), sample);

    // The binary: its version names the commit and the build date; the man page renders.
    let binary = root.join("usr/bin/antrea-vm-agent");
    let version = text(&run(Command::new(&binary).arg("--version")));
    assert!(
        version.starts_with(&format!("antrea-vm-agent {}", antrea_vm_agent::version::VERSION)),
        "{version}"
    );
    assert!(
        version.contains("commit: ") && version.contains("built:  "),
        "{version}"
    );
    let man = text(&run(Command::new("man")
        .env("MANWIDTH", "100")
        .env("MAN_KEEP_FORMATTING", "0")
        .arg("-l")
        .arg(root.join("usr/share/man/man8/antrea-vm-agent.8.gz"))));
    assert!(
        man.contains("antrea-vm-agent - Antrea NetworkPolicy for VMs"),
        "{man}"
    );
    assert!(man.contains("/etc/antrea/antrea-agent.conf"), "{man}");
    let get = text(&run(Command::new("man")
        .arg("-l")
        .arg(root.join("usr/share/man/man8/antrea-vm-agent-get.8.gz"))));
    assert!(get.contains("--output"), "{get}");
    let bash = std::fs::read_to_string(root.join("usr/share/bash-completion/completions/antrea-vm-agent"))
        .expect("bash");
    assert!(
        bash.contains("check-config") && bash.contains("detach-all"),
        "completion lacks subcommands"
    );

    // Upgrade with a changed config: the operator's version stays, the binary is replaced.
    let mine = format!("{sample}\n# changed by the operator\n");
    std::fs::write(&conf, &mine).expect("change conf");
    dpkg(&root, &["-i", pkgs.v2.to_str().expect("utf-8")]);
    assert_eq!(
        std::fs::read_to_string(&conf).expect("conf"),
        mine,
        "upgrade replaced the operator's config"
    );
    let status = text(&run(Command::new("dpkg-query")
        .arg(format!("--admindir={}", root.join("var/lib/dpkg").display()))
        .args(["-W", "-f", "${Version} ${db:Status-Status}", "antrea-vm-agent"])));
    assert_eq!(status.trim(), "0.1.0-3 installed");
    assert!(
        !root.join("etc/antrea/antrea-agent.conf.dpkg-dist").exists(),
        "no prompt material expected"
    );

    // Remove: files gone, the conffile kept (dpkg's rule). The root is not the running system,
    // so prerm leaves this host's interfaces alone (no detach-all: it would act on the host).
    let out = dpkg(&root, &["-r", "antrea-vm-agent"]);
    assert!(!binary.exists() && !root.join("lib/systemd/system/antrea-vm-agent.service").exists());
    assert!(conf.exists(), "remove must keep the conffile");
    assert!(
        !text(&out).contains("restore"),
        "prerm acted in another root: {}",
        text(&out)
    );

    // Purge: the conffile goes, and the state directory too, except while an interface record
    // says a NIC is still attached (what a later detach-all needs).
    let records = root.join("var/lib/antrea-vm-agent/interfaces");
    std::fs::create_dir_all(&records).expect("records dir");
    std::fs::write(records.join("eth0.json"), "{}").expect("record");
    let out = dpkg(&root, &["--purge", "antrea-vm-agent"]);
    assert!(!conf.exists(), "purge must remove the conffile");
    assert!(
        records.join("eth0.json").exists(),
        "purge removed a live interface record"
    );
    assert!(
        text(&out).contains("an interface is still attached"),
        "{}",
        text(&out)
    );
    std::fs::remove_dir_all(root.join("var/lib/antrea-vm-agent")).expect("clean up");
    assert_eq!(
        files_under(&root),
        Vec::<String>::new(),
        "purge left files behind"
    );
}

/// The released 0.1.0-1, as the upgrade from it sees one: this build's package under that
/// version, with the logrotate conffile 0.1.0-1 installed and without the preinst that retires it
/// (it had none).
fn earlier_package_with_logrotate(dir: &Path) -> PathBuf {
    const STANZA: &str = "/var/log/antrea/antrea-agent.log {\n    daily\n    maxsize 100M\n    rotate 7\n    missingok\n    notifempty\n    compress\n    delaycompress\n    copytruncate\n}\n";
    let tree = dir.join("earlier");
    run(Command::new("dpkg-deb").arg("-R").arg(&packages().v1).arg(&tree));
    let file = tree.join("etc/logrotate.d/antrea-vm-agent");
    std::fs::create_dir_all(file.parent().expect("parent")).expect("logrotate.d");
    std::fs::write(&file, STANZA).expect("logrotate file");
    let debian = tree.join("DEBIAN");
    let mut conffiles = std::fs::read_to_string(debian.join("conffiles")).expect("conffiles");
    conffiles.push_str("/etc/logrotate.d/antrea-vm-agent\n");
    std::fs::write(debian.join("conffiles"), conffiles).expect("conffiles");
    let md5 = text(&run(Command::new("md5sum")
        .arg("etc/logrotate.d/antrea-vm-agent")
        .current_dir(&tree)));
    let mut md5sums = std::fs::read_to_string(debian.join("md5sums")).unwrap_or_default();
    md5sums.push_str(&md5);
    std::fs::write(debian.join("md5sums"), md5sums).expect("md5sums");
    let control = std::fs::read_to_string(debian.join("control")).expect("control");
    let control: String = control
        .lines()
        .map(|l| {
            if l.starts_with("Version: ") {
                "Version: 0.1.0-1"
            } else {
                l
            }
        })
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(debian.join("control"), control).expect("control");
    std::fs::remove_file(debian.join("preinst")).expect("this build's preinst");
    let deb = dir.join("antrea-vm-agent_0.1.0-1.deb");
    run(Command::new("dpkg-deb")
        .args(["--root-owner-group", "-Zgzip", "-b"])
        .arg(&tree)
        .arg(&deb));
    deb
}

#[test]
fn upgrade_removes_the_logrotate_conffile_of_earlier_packages() {
    let pkgs = packages();
    let dir = tempfile::tempdir().expect("tempdir");
    let earlier = earlier_package_with_logrotate(dir.path());
    let earlier = earlier.to_str().expect("utf-8");
    let listing = text(&run(Command::new("dpkg-deb").arg("-c").arg(&pkgs.v1)));
    assert!(!listing.contains("logrotate"), "{listing}");

    // Unchanged by the operator: deleted by the upgrade.
    let root = empty_root(&dir.path().join("a"));
    let file = root.join("etc/logrotate.d/antrea-vm-agent");
    dpkg(&root, &["-i", earlier]);
    assert!(file.exists(), "the earlier package installs it");
    let out = dpkg(&root, &["-i", pkgs.v1.to_str().expect("utf-8")]);
    assert!(!file.exists(), "the upgrade left it:\n{}", text(&out));
    assert!(
        text(&out).contains("Removing obsolete conffile"),
        "{}",
        text(&out)
    );
    assert!(!root.join("etc/logrotate.d/antrea-vm-agent.dpkg-bak").exists());

    // Changed by the operator: kept aside as .dpkg-bak (logrotate skips that name), removed with
    // the package's purge.
    let root = empty_root(&dir.path().join("b"));
    let file = root.join("etc/logrotate.d/antrea-vm-agent");
    dpkg(&root, &["-i", earlier]);
    std::fs::write(&file, "# changed by the operator\n").expect("change it");
    let out = dpkg(&root, &["-i", pkgs.v1.to_str().expect("utf-8")]);
    assert!(!file.exists(), "{}", text(&out));
    let bak = root.join("etc/logrotate.d/antrea-vm-agent.dpkg-bak");
    assert_eq!(
        std::fs::read_to_string(&bak).expect(".dpkg-bak"),
        "# changed by the operator\n"
    );
    dpkg(&root, &["--purge", "antrea-vm-agent"]);
    assert!(!bak.exists(), "purge keeps the .dpkg-bak");
}

// === the unit under a real systemd ===

/// A Debian root with systemd (and Open vSwitch's tools, unused: the lab's OVS serves), made once
/// with debootstrap and reused by later runs on the same machine.
fn debian_root_cache() -> PathBuf {
    const PACKAGES: &str = "systemd,systemd-sysv,dbus,iproute2";
    let suite = std::fs::read_to_string("/etc/os-release")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("VERSION_CODENAME=")
                .map(|s| s.trim_matches('"').to_string())
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "bookworm".into());
    let cache = PathBuf::from(format!(
        "/var/tmp/antrea-vm-agent-test-rootfs/{suite}-minbase-systemd-1"
    ));
    if cache.join("usr/lib/systemd/systemd").exists() {
        return cache;
    }
    let tmp = cache.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(tmp.parent().expect("parent")).expect("cache dir");
    let started = Instant::now();
    run(Command::new("debootstrap")
        .args(["--variant=minbase", &format!("--include={PACKAGES}"), &suite])
        .arg(&tmp)
        .arg("http://deb.debian.org/debian"));
    eprintln!("debootstrap {suite}: {:?}", started.elapsed());
    let _ = std::fs::remove_dir_all(&cache);
    std::fs::rename(&tmp, &cache).expect("move the root in place");
    cache
}

/// A booted container: systemd as PID 1 of its own PID namespace, in the lab's VM network
/// namespace, with the lab's OVS run directory as /run/openvswitch.
struct Container {
    nspawn: Child,
    log: PathBuf,
}

impl Container {
    fn boot(lab: &Lab, root: &Path) -> Container {
        let log = lab.dir().join("nspawn.log");
        let nspawn = Command::new("systemd-nspawn")
            .arg("-D")
            .arg(root)
            .args([
                "--boot",
                "--keep-unit",
                "--register=no",
                "--capability=CAP_NET_ADMIN",
            ])
            .arg(format!("--network-namespace-path=/run/netns/{}", lab.vm_ns()))
            .arg(format!("--bind={}:/run/openvswitch", lab.run_dir().display()))
            .arg(format!("--machine={}", lab.prefix()))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).expect("nspawn log"))
            .stderr(Stdio::from(
                std::fs::File::options()
                    .append(true)
                    .open(&log)
                    .expect("nspawn log"),
            ))
            .spawn()
            .expect("spawn systemd-nspawn");
        let c = Container { nspawn, log };
        // `starting` counts: the agent's own start job (waiting for READY=1) keeps the system
        // starting until the agent is ready.
        wait_until(
            Duration::from_secs(60),
            "the container's systemd to answer",
            || {
                let state = c.try_exec("systemctl is-system-running 2>/dev/null");
                let s = String::from_utf8_lossy(&state.stdout);
                ["starting", "running", "degraded"].contains(&s.trim())
            },
        );
        c
    }

    /// The container's PID 1, as the host sees it.
    fn leader(&self) -> Option<u32> {
        let pid = self.nspawn.id();
        let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
        children.split_whitespace().next()?.parse().ok()
    }

    fn try_exec(&self, cmd: &str) -> Output {
        let Some(leader) = self.leader() else {
            return Command::new("false").output().expect("false");
        };
        Command::new("nsenter")
            .arg("-t")
            .arg(leader.to_string())
            .args(["-m", "-u", "-i", "-n", "-p", "--", "/bin/sh", "-c", cmd])
            .output()
            .expect("nsenter")
    }

    fn exec(&self, cmd: &str) -> String {
        let out = self.try_exec(cmd);
        assert!(
            out.status.success(),
            "in the container: {cmd}: {}\n{}\n--- nspawn log:\n{}",
            out.status,
            text(&out),
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `systemctl show` properties of the agent's unit.
    fn unit(&self, prop: &str) -> String {
        self.exec(&format!(
            "systemctl show -p {prop} --value antrea-vm-agent.service"
        ))
        .trim()
        .to_string()
    }

    fn journal(&self) -> String {
        String::from_utf8_lossy(
            &self
                .try_exec("journalctl -u antrea-vm-agent --no-pager | tail -40")
                .stdout,
        )
        .into_owned()
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        // SIGTERM asks nspawn to shut the container down cleanly; SIGKILL after 20 s.
        let _ = Command::new("kill").arg(self.nspawn.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.nspawn.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.nspawn.kill();
        let _ = self.nspawn.wait();
    }
}

#[test]
fn unit_runs_under_a_real_systemd_and_package_removal_restores_the_nic() {
    let pkgs = packages();
    let cache = debian_root_cache();
    let lab = Lab::new();
    let root = lab.dir().join("debian");
    run(Command::new("cp").arg("-a").arg(&cache).arg(&root));

    // The package goes in as on any Debian host (no systemd running: postinst starts nothing).
    std::fs::copy(&pkgs.v1, root.join("tmp/antrea-vm-agent.deb")).expect("copy the package");
    let install = run(Command::new("chroot")
        .arg(&root)
        .args(["dpkg", "-i", "/tmp/antrea-vm-agent.deb"]));
    assert!(
        text(&install).contains("Setting up antrea-vm-agent (0.1.0-2)"),
        "{}",
        text(&install)
    );

    // The operator's part: a standalone config for this VM, then `systemctl enable`.
    std::fs::write(
        root.join("etc/antrea/antrea-agent.conf"),
        "nodeType: externalNode\nfeatureGates:\n  ExternalNode: true\novsDatapathType: netdev\n\
         ovsRunDir: /run/openvswitch\nexternalNode:\n  externalNodeNamespace: vm-ns\n\
         standalone:\n  externalNodeFile: /etc/antrea/external-node.yaml\n  policyDir: /etc/antrea/policies\n",
    )
    .expect("config");
    std::fs::create_dir_all(root.join("etc/antrea/policies")).expect("policy dir");
    std::fs::write(
        root.join("etc/antrea/external-node.yaml"),
        format!(
            "apiVersion: crd.antrea.io/v1alpha1\nkind: ExternalNode\nmetadata: {{name: vm1, namespace: vm-ns}}\n\
             spec:\n  interfaces:\n  - name: {NIC}\n    ips: [\"{VM_IP4}\", \"{VM_IP6}\"]\n"
        ),
    )
    .expect("ExternalNode");
    std::fs::write(root.join("etc/antrea/antrea-vm-agent.env"), "NODE_NAME=vm1\n").expect("env");
    run(Command::new("chroot")
        .arg(&root)
        .args(["systemctl", "enable", "antrea-vm-agent.service"]));

    // OVS is down at boot: Type=notify keeps the unit `activating` (not ready) until the agent
    // has attached the NIC and committed its flows.
    lab.kill_vswitchd();
    let addrs_before = lab.vm_addrs(NIC);
    let c = Container::boot(&lab, &root);
    wait_until(Duration::from_secs(30), "the agent's unit to start", || {
        c.unit("ActiveState") == "activating" && c.unit("MainPID") != "0"
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        c.unit("ActiveState"),
        "activating",
        "ready without OVS?\n{}",
        c.journal()
    );
    assert!(
        !c.unit("StatusText").starts_with("ready"),
        "{}",
        c.unit("StatusText")
    );

    lab.start_vswitchd();
    let started = Instant::now();
    wait_until(
        Duration::from_secs(60),
        "the unit to become active (READY=1)",
        || c.unit("ActiveState") == "active",
    );
    eprintln!("unit active {:?} after OVS came up", started.elapsed());
    // Ready means attached: the uplink renamed and the internal port holding the addresses.
    assert!(
        lab.vm_link_exists(UPLINK),
        "active but {UPLINK} missing\n{}",
        c.journal()
    );
    assert_eq!(
        lab.vm_link_driver(NIC).as_deref(),
        Some("tun"),
        "{NIC} is not the internal port"
    );
    let status = c.unit("StatusText");
    assert!(status.starts_with("ready: 1 interface attached"), "{status}");

    // A crash: systemd restarts it (Restart=on-failure) and it is ready again.
    let pid = c.unit("MainPID");
    c.exec(&format!("kill -9 {pid}"));
    wait_until(Duration::from_secs(30), "the restart after SIGKILL", || {
        c.unit("NRestarts") == "1" && c.unit("ActiveState") == "active" && c.unit("MainPID") != pid
    });
    assert!(lab.vm_link_exists(UPLINK));

    // `systemctl stop` leaves the NIC attached (and the flows in place).
    c.exec("systemctl stop antrea-vm-agent.service");
    assert_eq!(c.unit("ActiveState"), "inactive");
    assert!(lab.vm_link_exists(UPLINK), "stop detached the NIC");
    assert_eq!(lab.vm_link_driver(NIC).as_deref(), Some("tun"));

    // Removing the package restores the NIC (prerm: stop, then detach-all).
    let removal = c.exec("dpkg -r antrea-vm-agent 2>&1");
    assert!(removal.contains("every interface is restored"), "{removal}");
    assert!(
        !lab.vm_link_exists(UPLINK),
        "{UPLINK} still there after removal:\n{removal}"
    );
    assert_eq!(
        lab.vm_link_driver(NIC).as_deref(),
        Some("veth"),
        "{NIC} is not the NIC again"
    );
    assert_eq!(lab.vm_addrs(NIC), addrs_before, "addresses not restored");
    let ports = lab.ovs_vsctl(&["list-ports", "br-int"]);
    assert!(ports.trim().is_empty(), "ports left on br-int: {ports}");
}
