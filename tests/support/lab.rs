//! The lab: a VM and an outside host on one machine, with a private Open vSwitch.
//!
//! Topology (names get a random per-lab prefix so that labs can run in parallel):
//!
//! ```text
//!   <prefix>-ext namespace                 <prefix>-vm namespace
//!   ext0 10.99.0.1/24, fd00:99::1/64  <-veth->  eth0 10.99.0.2/24, fd00:99::2/64, MTU 1400
//!                                              default via 10.99.0.1 proto dhcp metric 100
//!                                              default via fd00:99::1 metric 1024
//!                                              ovsdb-server + ovs-vswitchd (netdev datapath),
//!                                              sockets in <lab dir>/run
//! ```
//!
//! The agent runs inside the vm namespace, renames `eth0` to `eth0~`, attaches it to `br-int` and
//! creates the internal port `eth0`. With the userspace datapath the kernel keeps receiving the
//! uplink's frames, so tests call [`Lab::isolate_uplink`] after the attach (see lab-facts.md).
//!
//! Dropping the lab kills every process in both namespaces (agent, OVS, traffic helpers), deletes the
//! namespaces and the lab directory, also after a panic (set `AVM_LAB_KEEP=1` to keep the directory).

use std::{
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    sync::atomic::{AtomicBool, AtomicU32, Ordering},
    time::Duration,
};

use serde_norway::Value;

use super::util::{
    cmd, find_tool, kill_process, lab_path, process_alive, run, tail, wait_until, CommandOutputExt,
};

/// The VM's IPv4 address (on `eth0`, /24).
pub const VM_IP4: &str = "10.99.0.2";
/// The outside host's IPv4 address, the VM's IPv4 gateway.
pub const EXT_IP4: &str = "10.99.0.1";
/// The VM's IPv6 address (on `eth0`, /64).
pub const VM_IP6: &str = "fd00:99::2";
/// The outside host's IPv6 address, the VM's IPv6 gateway.
pub const EXT_IP6: &str = "fd00:99::1";
/// MTU of the VM's `eth0` (not the default, so that its move and restore are observable).
pub const VM_MTU: u32 = 1400;
/// The VM's NIC.
pub const NIC: &str = "eth0";
/// The NIC's name once the agent attached it to OVS.
pub const UPLINK: &str = "eth0~";
/// The outside host's interface.
pub const EXT_NIC: &str = "ext0";
/// The VM's second NIC (after [`Lab::add_second_nic`]), its uplink name and its peer.
pub const NIC2: &str = "eth1";
pub const UPLINK2: &str = "eth1~";
pub const EXT_NIC2: &str = "ext1";
/// Addresses of the second link (no default route through it).
pub const VM2_IP4: &str = "10.98.0.2";
pub const EXT2_IP4: &str = "10.98.0.1";
pub const VM2_IP6: &str = "fd00:98::2";
pub const EXT2_IP6: &str = "fd00:98::1";
/// The OVS bridge the agent uses (the default `ovsBridge`).
pub const BRIDGE: &str = "br-int";
/// `NODE_NAME` given to the agent, and the ExternalNode's name.
pub const NODE_NAME: &str = "vm1";
/// Namespace of the ExternalNode (written into the config as `externalNodeNamespace`).
pub const EN_NAMESPACE: &str = "vm-ns";

/// Upper bound for any single shell command run in a namespace.
const CMD_TIMEOUT_SECS: u64 = 60;

/// Tools the lab needs, and the Debian package of each.
const TOOLS: &[(&str, &str)] = &[
    ("ip", "iproute2"),
    ("ss", "iproute2"),
    ("nft", "nftables"),
    ("ethtool", "ethtool"),
    ("ping", "iputils-ping"),
    ("nc", "netcat-openbsd"),
    ("timeout", "coreutils"),
    ("ovsdb-tool", "openvswitch-switch"),
    ("ovsdb-server", "openvswitch-switch"),
    ("ovs-vswitchd", "openvswitch-switch"),
    ("ovs-vsctl", "openvswitch-switch"),
    ("ovs-ofctl", "openvswitch-switch"),
    ("ovs-appctl", "openvswitch-switch"),
];

/// One link as `ip -j link` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkInfo {
    pub name: String,
    pub index: u32,
    pub mtu: u32,
    /// Lower-case `aa:bb:cc:dd:ee:ff`.
    pub mac: String,
    /// Administratively up (`UP` in the flags).
    pub up: bool,
    /// `NOARP` is set.
    pub noarp: bool,
    /// `PROMISC` is set.
    pub promisc: bool,
}

/// A lab: two namespaces, a veth pair and a private OVS. See the module documentation.
pub struct Lab {
    prefix: String,
    vm_ns: String,
    ext_ns: String,
    dir: PathBuf,
    run_dir: PathBuf,
    nft_table: String,
    isolated: AtomicBool,
    counter: AtomicU32,
}

impl Lab {
    /// Builds the topology and starts OVS. Panics with a clear message when not root, when a tool is
    /// missing, or when any step fails (cleaning up what was built).
    pub fn new() -> Lab {
        preflight();
        let (prefix, vm_ns, ext_ns, dir) = reserve_names();
        let run_dir = dir.join("run");
        let lab = Lab {
            nft_table: format!("{prefix}_uplink"),
            prefix,
            vm_ns,
            ext_ns,
            run_dir,
            dir,
            isolated: AtomicBool::new(false),
            counter: AtomicU32::new(0),
        };
        // From here on a panic drops `lab`, which removes what was built.
        std::fs::create_dir_all(&lab.run_dir).expect("create the lab run dir");
        std::fs::create_dir_all(lab.state_dir()).expect("create the lab state dir");
        lab.build_network();
        lab.create_ovs_db();
        lab.start_ovsdb();
        lab.init_ovs_db();
        lab.start_vswitchd();
        lab
    }

    // === names and paths ===

    /// The random prefix of this lab's names.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
    /// The VM namespace, `<prefix>-vm`.
    pub fn vm_ns(&self) -> &str {
        &self.vm_ns
    }
    /// The outside host's namespace, `<prefix>-ext`.
    pub fn ext_ns(&self) -> &str {
        &self.ext_ns
    }
    /// The lab's private directory (configs, logs, ExternalNode file).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    /// The OVS run dir: `db.sock`, `br-int.mgmt`, pid files, control sockets and OVS logs.
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }
    /// The agent's `stateDir` in configs written by [`Lab::write_config`].
    pub fn state_dir(&self) -> PathBuf {
        self.dir.join("state")
    }
    /// The OVSDB socket.
    pub fn db_sock(&self) -> PathBuf {
        self.run_dir.join("db.sock")
    }
    /// The bridge's OpenFlow management socket.
    pub fn mgmt_sock(&self) -> PathBuf {
        self.run_dir.join(format!("{BRIDGE}.mgmt"))
    }
    /// The standalone ExternalNode file (`standalone.externalNodeFile`).
    pub fn en_file(&self) -> PathBuf {
        self.dir.join("external-node.yaml")
    }
    /// A fresh, unique file name in the lab dir: `<stem>-<n>.<ext>`.
    pub fn unique_path(&self, stem: &str, ext: &str) -> PathBuf {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        self.dir.join(format!("{stem}-{n}.{ext}"))
    }

    /// The VM's `/etc/resolv.conf` as the processes started in it see it (the agent included):
    /// `ip netns exec` bind-mounts `/etc/netns/<vm namespace>/resolv.conf` over it. Removed with
    /// the lab.
    pub fn set_vm_resolv_conf(&self, text: &str) {
        let dir = PathBuf::from("/etc/netns").join(&self.vm_ns);
        std::fs::create_dir_all(&dir).expect("create /etc/netns/<vm namespace>");
        std::fs::write(dir.join("resolv.conf"), text).expect("write the VM's resolv.conf");
    }

    // === commands in the namespaces ===

    /// Runs `sh -c cmd` in the VM namespace (bounded by 60 s) and returns its output.
    pub fn vm(&self, cmd: &str) -> Output {
        self.in_ns(&self.vm_ns, cmd)
    }
    /// Runs `sh -c cmd` in the outside host's namespace (bounded by 60 s) and returns its output.
    pub fn ext(&self, cmd: &str) -> Output {
        self.in_ns(&self.ext_ns, cmd)
    }
    /// Like [`Lab::vm`], asserting success; returns stdout.
    pub fn vm_ok(&self, cmd: &str) -> String {
        let out = self.vm(cmd);
        assert!(
            out.status.success(),
            "in {}: `{cmd}` failed: {}",
            self.vm_ns,
            out.describe()
        );
        out.stdout_text()
    }
    /// Like [`Lab::ext`], asserting success; returns stdout.
    pub fn ext_ok(&self, cmd: &str) -> String {
        let out = self.ext(cmd);
        assert!(
            out.status.success(),
            "in {}: `{cmd}` failed: {}",
            self.ext_ns,
            out.describe()
        );
        out.stdout_text()
    }

    /// A command that runs `program` inside namespace `ns` (for background processes).
    pub(crate) fn ns_command(&self, ns: &str, program: &str) -> Command {
        let mut c = cmd("ip");
        c.args(["netns", "exec", ns, program]);
        c
    }

    fn in_ns(&self, ns: &str, shell: &str) -> Output {
        let mut c = cmd("timeout");
        c.args([
            "-k",
            "5",
            &CMD_TIMEOUT_SECS.to_string(),
            "ip",
            "netns",
            "exec",
            ns,
            "sh",
            "-c",
            shell,
        ]);
        c.stdin(Stdio::null());
        run(c)
    }

    // === OVS ===

    /// Runs `ovs-vsctl` against the lab's OVSDB; panics on failure; returns stdout.
    pub fn ovs_vsctl(&self, args: &[&str]) -> String {
        let out = self.ovs_vsctl_output(args);
        assert!(
            out.status.success(),
            "ovs-vsctl {args:?} failed: {}",
            out.describe()
        );
        out.stdout_text()
    }
    /// Runs `ovs-vsctl` against the lab's OVSDB and returns its output, whatever the status.
    pub fn ovs_vsctl_output(&self, args: &[&str]) -> Output {
        let mut c = cmd("ovs-vsctl");
        c.arg(format!("--db=unix:{}", self.db_sock().display()))
            .arg("--timeout=10")
            .args(args);
        run(c)
    }
    /// Runs `ovs-appctl` against the lab's ovs-vswitchd; returns its output.
    pub fn ovs_appctl(&self, args: &[&str]) -> Output {
        let mut c = cmd("ovs-appctl");
        c.arg(format!(
            "--target={}",
            self.run_dir.join("ovs-vswitchd.ctl").display()
        ))
        .arg("--timeout=10")
        .args(args);
        run(c)
    }
    /// The bridge's flows (`ovs-ofctl -O OpenFlow15 dump-flows --names --no-stats`), one per line,
    /// trimmed and sorted. Panics if the bridge cannot be reached.
    pub fn dump_flows(&self) -> Vec<String> {
        match self.try_dump_flows() {
            Ok(flows) => flows,
            Err(e) => panic!("dump-flows on {} failed: {e}", self.mgmt_sock().display()),
        }
    }
    /// Like [`Lab::dump_flows`] but returns the failure (e.g. the bridge does not exist yet).
    pub fn try_dump_flows(&self) -> Result<Vec<String>, String> {
        let mut c = cmd("ovs-ofctl");
        c.args([
            "-O",
            "OpenFlow15",
            // 784,000 flows (the 50,000-rule bench) take longer than 10 s to dump.
            "--timeout=120",
            "dump-flows",
            "--names",
            "--no-stats",
        ])
        .arg(format!("unix:{}", self.mgmt_sock().display()));
        let out = run(c);
        if !out.status.success() {
            return Err(out.describe());
        }
        let mut flows: Vec<String> = out
            .stdout_text()
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("OFPST_FLOW") && !l.starts_with("NXST_FLOW"))
            .map(str::to_string)
            .collect();
        flows.sort();
        Ok(flows)
    }

    /// Kills ovs-vswitchd and ovsdb-server (SIGTERM) and starts them again on the same database.
    pub fn restart_ovs(&self) {
        self.stop_daemon("ovs-vswitchd", "TERM");
        self.stop_daemon("ovsdb-server", "TERM");
        self.start_ovsdb();
        self.start_vswitchd();
    }
    /// Stops ovs-vswitchd and ovsdb-server (SIGTERM) and starts them again on a new, empty
    /// database (a lost or re-created `conf.db`).
    pub fn restart_ovs_with_fresh_db(&self) {
        self.stop_daemon("ovs-vswitchd", "TERM");
        self.stop_daemon("ovsdb-server", "TERM");
        std::fs::remove_file(self.run_dir.join("conf.db")).expect("remove conf.db");
        self.create_ovs_db();
        self.start_ovsdb();
        self.init_ovs_db();
        self.start_vswitchd();
    }
    /// Kills ovs-vswitchd with SIGKILL (a crash); start it again with [`Lab::start_vswitchd`].
    pub fn kill_vswitchd(&self) {
        self.stop_daemon("ovs-vswitchd", "KILL");
    }
    /// Kills ovsdb-server with SIGKILL; start it again with [`Lab::start_ovsdb`].
    pub fn kill_ovsdb(&self) {
        self.stop_daemon("ovsdb-server", "KILL");
    }
    /// Whether the daemon (`ovs-vswitchd` or `ovsdb-server`) is running.
    pub fn daemon_running(&self, name: &str) -> bool {
        self.daemon_pid(name).is_some_and(process_alive)
    }

    /// Starts ovsdb-server in the VM namespace on the lab database (waits until it serves).
    pub fn start_ovsdb(&self) {
        let r = &self.run_dir;
        self.start_daemon(
            "ovsdb-server",
            &[
                r.join("conf.db").display().to_string(),
                format!("--remote=punix:{}", self.db_sock().display()),
                format!("--pidfile={}", r.join("ovsdb-server.pid").display()),
                format!("--unixctl={}", r.join("ovsdb-server.ctl").display()),
                format!("--log-file={}", r.join("ovsdb-server.log").display()),
                "--detach".to_string(),
                "--no-chdir".to_string(),
            ],
        );
        wait_until(Duration::from_secs(15), "ovsdb-server to answer", || {
            self.ovs_vsctl_output(&["--no-wait", "get", "Open_vSwitch", ".", "_uuid"])
                .status
                .success()
        });
    }

    /// Starts ovs-vswitchd (userspace datapath) in the VM namespace, with `OVS_RUNDIR` set to the
    /// run dir so that `<bridge>.mgmt` lands there.
    pub fn start_vswitchd(&self) {
        let r = &self.run_dir;
        self.start_daemon(
            "ovs-vswitchd",
            &[
                format!("unix:{}", self.db_sock().display()),
                format!("--pidfile={}", r.join("ovs-vswitchd.pid").display()),
                format!("--unixctl={}", r.join("ovs-vswitchd.ctl").display()),
                format!("--log-file={}", r.join("ovs-vswitchd.log").display()),
                "--detach".to_string(),
                "--no-chdir".to_string(),
            ],
        );
        wait_until(Duration::from_secs(15), "ovs-vswitchd to answer", || {
            self.ovs_appctl(&["version"]).status.success()
        });
    }

    fn create_ovs_db(&self) {
        let schema = [
            "/usr/share/openvswitch/vswitch.ovsschema",
            "/usr/local/share/openvswitch/vswitch.ovsschema",
        ]
        .into_iter()
        .find(|p| Path::new(p).is_file())
        .expect("vswitch.ovsschema not found (install openvswitch-switch: make deps)");
        let mut c = cmd("ovsdb-tool");
        c.arg("create").arg(self.run_dir.join("conf.db")).arg(schema);
        let out = run(c);
        assert!(
            out.status.success(),
            "ovsdb-tool create failed: {}",
            out.describe()
        );
    }

    /// `ovs-vsctl init`, plus the version columns that the distribution's start script (ovs-ctl)
    /// fills in and agents read.
    fn init_ovs_db(&self) {
        let version = |tool: &str, args: &[&str]| -> Option<String> {
            let out = cmd(tool).args(args).output().ok()?;
            let text = out.stdout_text();
            let first = text.lines().next()?.to_string();
            Some(first.rsplit(' ').next()?.trim().to_string())
        };
        let mut args = vec!["--no-wait".to_string(), "init".to_string()];
        if let Some(v) = version("ovs-vswitchd", &["--version"]) {
            args.extend([
                "--".into(),
                "set".into(),
                "Open_vSwitch".into(),
                ".".into(),
                format!("ovs_version=\"{v}\""),
            ]);
        }
        let schema = self.schema_path();
        if let Some(v) = version("ovsdb-tool", &["schema-version", schema]) {
            args.extend([
                "--".into(),
                "set".into(),
                "Open_vSwitch".into(),
                ".".into(),
                format!("db_version=\"{v}\""),
            ]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.ovs_vsctl(&args);
    }

    fn schema_path(&self) -> &'static str {
        [
            "/usr/share/openvswitch/vswitch.ovsschema",
            "/usr/local/share/openvswitch/vswitch.ovsschema",
        ]
        .into_iter()
        .find(|p| Path::new(p).is_file())
        .expect("vswitch.ovsschema not found (install openvswitch-switch: make deps)")
    }

    fn start_daemon(&self, name: &str, args: &[String]) {
        let log = self.run_dir.join(format!("{name}.start.log"));
        let file = std::fs::File::create(&log).expect("create the daemon start log");
        let err = file.try_clone().expect("clone the daemon start log");
        let r = self.run_dir.display().to_string();
        let mut c = cmd("timeout");
        c.args(["-k", "5", "30", "ip", "netns", "exec", &self.vm_ns, "env"])
            .args([
                format!("OVS_RUNDIR={r}"),
                format!("OVS_DBDIR={r}"),
                format!("OVS_LOGDIR={r}"),
            ])
            .arg(name)
            .args(args)
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err);
        let status = c.status().unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(status.success(), "{name} failed to start ({status}):\n{text}");
        assert!(
            self.daemon_running(name),
            "{name} is not running after start:\n{text}"
        );
    }

    fn daemon_pid(&self, name: &str) -> Option<u32> {
        std::fs::read_to_string(self.run_dir.join(format!("{name}.pid")))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    fn stop_daemon(&self, name: &str, sig: &str) {
        if let Some(pid) = self.daemon_pid(name) {
            kill_process(pid, sig, Duration::from_secs(5));
            assert!(!process_alive(pid), "{name} (pid {pid}) does not die");
        }
    }

    // === agent configuration and ExternalNode ===

    /// Writes an agent config for this lab and returns its path: nodeType externalNode, the
    /// ExternalNode gate, the netdev datapath, the lab's OVS run dir, a state dir in the lab dir,
    /// `externalNodeNamespace: vm-ns` and `standalone.externalNodeFile` = [`Lab::en_file`].
    /// `extra_yaml` is merged on top (mappings merge key by key; other values replace).
    pub fn write_config(&self, extra_yaml: &str) -> PathBuf {
        let base = format!(
            "nodeType: externalNode\n\
             featureGates:\n  ExternalNode: true\n\
             ovsDatapathType: netdev\n\
             ovsRunDir: {run}\n\
             stateDir: {state}\n\
             externalNode:\n  externalNodeNamespace: {EN_NAMESPACE}\n\
             standalone:\n  externalNodeFile: {en}\n",
            run = self.run_dir.display(),
            state = self.state_dir().display(),
            en = self.en_file().display(),
        );
        let mut doc: Value = serde_norway::from_str(&base).expect("the base config parses");
        if !extra_yaml.trim().is_empty() {
            let extra: Value = serde_norway::from_str(extra_yaml)
                .unwrap_or_else(|e| panic!("write_config: extra YAML does not parse: {e}\n{extra_yaml}"));
            merge(&mut doc, extra);
        }
        let text = serde_norway::to_string(&doc).expect("serialize the config");
        let path = self.unique_path("antrea-agent", "conf");
        std::fs::write(&path, text).expect("write the config");
        path
    }

    /// Writes the ExternalNode `vm-ns/vm1` with one interface `eth0` carrying `ips` to
    /// [`Lab::en_file`] (atomically: write then rename).
    pub fn write_external_node(&self, ips: &[&str]) {
        let ips: Vec<String> = ips.iter().map(|ip| format!("\"{ip}\"")).collect();
        let text = format!(
            "apiVersion: crd.antrea.io/v1alpha1\n\
             kind: ExternalNode\n\
             metadata:\n  name: {NODE_NAME}\n  namespace: {EN_NAMESPACE}\n  labels:\n    antrea-external-node: {NODE_NAME}\n\
             spec:\n  interfaces:\n  - name: {NIC}\n    ips: [{}]\n",
            ips.join(", ")
        );
        let tmp = self.dir.join(".external-node.yaml.tmp");
        std::fs::write(&tmp, text).expect("write the ExternalNode file");
        std::fs::rename(&tmp, self.en_file()).expect("move the ExternalNode file in place");
    }

    /// Deletes the ExternalNode file (the ExternalNode is deleted). Un-isolates the uplink first if
    /// it is isolated, so that the NIC the agent restores is neither filtered nor without ARP.
    pub fn remove_external_node(&self) {
        if self.isolated.load(Ordering::SeqCst) {
            self.unisolate_uplink();
        }
        match std::fs::remove_file(self.en_file()) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => panic!("remove the ExternalNode file: {e}"),
        }
    }

    // === the userspace-datapath trap ===

    /// Stops the VM's own IP stack from answering frames that arrive on the uplink (the kernel still
    /// sees them next to OVS with the userspace datapath): waits (30 s at most) until `eth0~` exists
    /// and `eth0` is the OVS internal port, then adds an nftables netdev ingress chain with policy drop
    /// on `eth0~` (AF_PACKET, which OVS uses, sees frames before that hook), turns ARP off on `eth0~`,
    /// and turns TX checksum offload off on the internal port. Idempotent: call it again after
    /// anything that recreates the internal port.
    ///
    /// On kernels >= 6.10 a netdev hook follows the device *name*: it stops applying when `eth0~` is
    /// renamed back to `eth0`, and applies again to the next `eth0~`. On older kernels it follows the
    /// device; [`Lab::unisolate_uplink`] deletes it in both cases.
    pub fn isolate_uplink(&self) {
        wait_until(
            Duration::from_secs(30),
            "eth0~ and the OVS internal port eth0",
            || self.vm_link_exists(UPLINK) && self.vm_link_driver(NIC).as_deref() == Some("tun"),
        );
        let table = &self.nft_table;
        self.vm(&format!("nft delete table netdev {table} 2>/dev/null"));
        self.vm_ok(&format!(
            "nft -f - <<'EOF'\n\
             table netdev {table} {{\n  chain uplink_in {{\n    \
             type filter hook ingress device \"{UPLINK}\" priority -500; policy drop;\n  }}\n}}\nEOF"
        ));
        self.vm_ok(&format!("ip link set dev '{UPLINK}' arp off"));
        self.vm_ok(&format!("ethtool -K '{NIC}' tx off >/dev/null"));
        self.isolated.store(true, Ordering::SeqCst);
    }

    /// Undoes [`Lab::isolate_uplink`]: deletes the nftables table and turns ARP back on for the NIC
    /// (`eth0~`, or `eth0` if it is already the veth again). Call it before a detach; it is a no-op
    /// when not isolated.
    pub fn unisolate_uplink(&self) {
        self.vm(&format!("nft delete table netdev {} 2>/dev/null", self.nft_table));
        if self.vm_link_exists(UPLINK) {
            let out = self.vm(&format!("ip link set dev '{UPLINK}' arp on"));
            if out.status.success() {
                self.isolated.store(false, Ordering::SeqCst);
                return;
            }
            // Gone between the check and the command: the agent is detaching (renaming `eth0~`
            // back to `eth0`). Give the rename a moment, then treat the NIC as below.
            assert!(
                !self.vm_link_exists(UPLINK),
                "ip link set dev '{UPLINK}' arp on: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            wait_until(Duration::from_secs(10), "the NIC back after a detach", || {
                self.vm_link_exists(NIC)
            });
        }
        if self.vm_link_driver(NIC).as_deref() == Some("veth") {
            self.vm_ok(&format!("ip link set dev '{NIC}' arp on"));
        }
        self.isolated.store(false, Ordering::SeqCst);
    }

    /// Whether [`Lab::isolate_uplink`] is in effect.
    pub fn uplink_isolated(&self) -> bool {
        self.isolated.load(Ordering::SeqCst)
    }

    // === VM network state ===

    /// Whether a link exists in the VM namespace.
    pub fn vm_link_exists(&self, name: &str) -> bool {
        self.vm(&format!("ip link show dev '{name}' >/dev/null 2>&1"))
            .status
            .success()
    }

    /// A link of the VM namespace, if it exists.
    pub fn vm_link(&self, name: &str) -> Option<LinkInfo> {
        let out = self.vm(&format!("ip -j link show dev '{name}' 2>/dev/null"));
        if !out.status.success() {
            return None;
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let l = v.get(0)?;
        let flags: Vec<&str> = l["flags"]
            .as_array()
            .map(|a| a.iter().filter_map(|f| f.as_str()).collect())
            .unwrap_or_default();
        Some(LinkInfo {
            name: l["ifname"].as_str()?.to_string(),
            index: u32::try_from(l["ifindex"].as_u64()?).ok()?,
            mtu: u32::try_from(l["mtu"].as_u64()?).ok()?,
            mac: l["address"].as_str().unwrap_or_default().to_lowercase(),
            up: flags.contains(&"UP"),
            noarp: flags.contains(&"NOARP"),
            promisc: flags.contains(&"PROMISC"),
        })
    }

    /// The kernel driver of a VM link (`veth` for the NIC, `tun` for an OVS internal port).
    pub fn vm_link_driver(&self, name: &str) -> Option<String> {
        let out = self.vm(&format!("ethtool -i '{name}' 2>/dev/null"));
        if !out.status.success() {
            return None;
        }
        out.stdout_text()
            .lines()
            .find_map(|l| l.strip_prefix("driver:").map(|d| d.trim().to_string()))
    }

    /// Global addresses of a VM link as `addr/prefix`, sorted (link-local ones left out).
    pub fn vm_addrs(&self, name: &str) -> Vec<String> {
        let out = self.vm(&format!("ip -j addr show dev '{name}' 2>/dev/null"));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        let mut addrs: Vec<String> = v
            .get(0)
            .and_then(|l| l["addr_info"].as_array())
            .map(|a| {
                a.iter()
                    .filter(|i| i["scope"].as_str() != Some("link"))
                    .filter_map(|i| Some(format!("{}/{}", i["local"].as_str()?, i["prefixlen"].as_u64()?)))
                    .collect()
            })
            .unwrap_or_default();
        addrs.sort();
        addrs
    }

    /// The VM's main-table routes of both families (`ip route` and `ip -6 route` lines, trimmed,
    /// sorted; IPv6 link-local and multicast routes left out).
    pub fn vm_routes(&self) -> Vec<String> {
        let text = self.vm_ok("ip route show; ip -6 route show");
        let mut routes: Vec<String> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("fe80::") && !l.starts_with("multicast"))
            .map(str::to_string)
            .collect();
        routes.sort();
        routes
    }

    /// Waits (bounded) until no address in either namespace is tentative (IPv6 DAD).
    fn wait_no_tentative(&self) {
        wait_until(
            Duration::from_secs(10),
            "IPv6 addresses to leave the tentative state",
            || !self.vm_ok("ip addr").contains("tentative") && !self.ext_ok("ip addr").contains("tentative"),
        );
    }

    /// Adds a second NIC to the VM: `eth1` (10.98.0.2/24, fd00:98::2/64, no default route) joined
    /// to `ext1` (10.98.0.1/24, fd00:98::1/64) on the outside host.
    pub fn add_second_nic(&self) {
        let (vm, ext) = (&self.vm_ns, &self.ext_ns);
        host_ok(&format!(
            "ip link add {EXT_NIC2} netns {ext} type veth peer name {NIC2} netns {vm}"
        ));
        self.vm_ok(&format!(
            "set -e\n\
             sysctl -qw net.ipv6.conf.{NIC2}.accept_dad=0\n\
             ethtool -K {NIC2} tx off >/dev/null\n\
             ip addr add {VM2_IP4}/24 dev {NIC2}\n\
             ip addr add {VM2_IP6}/64 dev {NIC2} nodad\n\
             ip link set dev {NIC2} up"
        ));
        self.ext_ok(&format!(
            "set -e\n\
             sysctl -qw net.ipv6.conf.{EXT_NIC2}.accept_dad=0\n\
             ethtool -K {EXT_NIC2} tx off >/dev/null\n\
             ip addr add {EXT2_IP4}/24 dev {EXT_NIC2}\n\
             ip addr add {EXT2_IP6}/64 dev {EXT_NIC2} nodad\n\
             ip link set dev {EXT_NIC2} up"
        ));
        self.wait_no_tentative();
    }

    /// [`Lab::isolate_uplink`] for the second NIC (`eth1~`, internal `eth1`).
    pub fn isolate_second_uplink(&self) {
        wait_until(
            Duration::from_secs(30),
            "eth1~ and the OVS internal port eth1",
            || self.vm_link_exists(UPLINK2) && self.vm_link_driver(NIC2).as_deref() == Some("tun"),
        );
        let table = format!("{}2", self.nft_table);
        self.vm(&format!("nft delete table netdev {table} 2>/dev/null"));
        self.vm_ok(&format!(
            "nft -f - <<'EOF'\n\
             table netdev {table} {{\n  chain uplink_in {{\n    \
             type filter hook ingress device \"{UPLINK2}\" priority -500; policy drop;\n  }}\n}}\nEOF"
        ));
        self.vm_ok(&format!("ip link set dev '{UPLINK2}' arp off"));
        self.vm_ok(&format!("ethtool -K '{NIC2}' tx off >/dev/null"));
    }

    /// Undoes [`Lab::isolate_second_uplink`] (before the second NIC is detached).
    pub fn unisolate_second_uplink(&self) {
        self.vm(&format!(
            "nft delete table netdev {}2 2>/dev/null",
            self.nft_table
        ));
        if self.vm_link_exists(UPLINK2) {
            self.vm_ok(&format!("ip link set dev '{UPLINK2}' arp on"));
        }
    }

    /// Writes an ExternalNode listing several interfaces: `(name, ips)` each.
    pub fn write_external_node_interfaces(&self, interfaces: &[(&str, &[&str])]) {
        let mut text = format!(
            "apiVersion: crd.antrea.io/v1alpha1\nkind: ExternalNode\n\
             metadata:\n  name: {NODE_NAME}\n  namespace: {EN_NAMESPACE}\nspec:\n  interfaces:\n"
        );
        for (name, ips) in interfaces {
            let ips: Vec<String> = ips.iter().map(|ip| format!("\"{ip}\"")).collect();
            text.push_str(&format!("  - name: {name}\n    ips: [{}]\n", ips.join(", ")));
        }
        let tmp = self.dir.join(".external-node.yaml.tmp");
        std::fs::write(&tmp, text).expect("write the ExternalNode file");
        std::fs::rename(&tmp, self.en_file()).expect("move the ExternalNode file in place");
    }

    fn build_network(&self) {
        let (vm, ext) = (&self.vm_ns, &self.ext_ns);
        host_ok(&format!(
            "ip link add {EXT_NIC} netns {ext} type veth peer name {NIC} netns {vm}"
        ));
        // No DAD: addresses are usable at once, also when the agent re-adds them elsewhere.
        let no_dad = "sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0";
        self.vm_ok(&format!("{no_dad} net.ipv6.conf.{NIC}.accept_dad=0"));
        self.ext_ok(&format!("{no_dad} net.ipv6.conf.{EXT_NIC}.accept_dad=0"));
        self.vm_ok(&format!(
            "set -e\n\
             ip link set lo up\n\
             ethtool -K {NIC} tx off >/dev/null\n\
             ip link set dev {NIC} mtu {VM_MTU}\n\
             ip addr add {VM_IP4}/24 dev {NIC}\n\
             ip addr add {VM_IP6}/64 dev {NIC} nodad\n\
             ip link set dev {NIC} up"
        ));
        self.ext_ok(&format!(
            "set -e\n\
             ip link set lo up\n\
             ethtool -K {EXT_NIC} tx off >/dev/null\n\
             ip addr add {EXT_IP4}/24 dev {EXT_NIC}\n\
             ip addr add {EXT_IP6}/64 dev {EXT_NIC} nodad\n\
             ip link set dev {EXT_NIC} up"
        ));
        self.vm_ok(&format!(
            "set -e\n\
             ip route add default via {EXT_IP4} dev {NIC} proto dhcp metric 100\n\
             ip -6 route add default via {EXT_IP6} dev {NIC} metric 1024"
        ));
        self.wait_no_tentative();
    }

    // === processes ===

    /// Pids of every process in a namespace.
    fn ns_pids(&self, ns: &str) -> Vec<u32> {
        cmd("ip")
            .args(["netns", "pids", ns])
            .stderr(Stdio::null())
            .output()
            .map(|o| {
                o.stdout_text()
                    .split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    fn print_diagnostics(&self) {
        let mut text = format!(
            "=== lab {} (dir {}) at failure ===\n",
            self.prefix,
            self.dir.display()
        );
        let vm = self.vm("ip -br link; ip -br addr; ip route; ip -6 route");
        text.push_str(&format!("--- vm network ---\n{}", vm.stdout_text()));
        let show = self.ovs_vsctl_output(&["show"]);
        text.push_str(&format!(
            "--- ovs-vsctl show ---\n{}{}",
            show.stdout_text(),
            show.stderr_text()
        ));
        let log = std::fs::read_to_string(self.run_dir.join("ovs-vswitchd.log")).unwrap_or_default();
        text.push_str(&format!("--- ovs-vswitchd.log (tail) ---\n{}\n", tail(&log, 20)));
        eprintln!("{text}");
    }
}

impl Default for Lab {
    fn default() -> Self {
        Lab::new()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.print_diagnostics();
        }
        // Every process in the namespaces: the agent, OVS, traffic helpers.
        for ns in [&self.vm_ns, &self.ext_ns] {
            for pid in self.ns_pids(ns) {
                kill_process(pid, "KILL", Duration::from_secs(1));
            }
        }
        // Daemons whose pid files name processes outside the namespaces cannot exist, but a daemon
        // that was mid-start might not be listed yet: check the pid files too.
        for name in ["ovs-vswitchd", "ovsdb-server"] {
            if let Some(pid) = self.daemon_pid(name) {
                kill_process(pid, "KILL", Duration::from_secs(1));
            }
        }
        let _ = std::fs::remove_dir_all(PathBuf::from("/etc/netns").join(&self.vm_ns));
        for ns in [&self.vm_ns, &self.ext_ns] {
            let _ = cmd("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
        }
        if std::env::var_os("AVM_LAB_KEEP").is_some() {
            eprintln!("lab {}: keeping {}", self.prefix, self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Runs a shell command on the host (bounded); panics on failure.
fn host_ok(shell: &str) {
    let mut c = cmd("timeout");
    c.args(["-k", "5", &CMD_TIMEOUT_SECS.to_string(), "sh", "-c", shell]);
    let out = run(c);
    assert!(out.status.success(), "`{shell}` failed: {}", out.describe());
}

/// Panics unless running as root with every tool present.
fn preflight() {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|rest| rest.split_whitespace().nth(1))
        .unwrap_or("?");
    assert!(
        euid == "0",
        "the lab needs root (network namespaces, OVS); effective uid is {euid}"
    );
    let missing: Vec<String> = TOOLS
        .iter()
        .filter(|(tool, _)| find_tool(tool).is_none())
        .map(|(tool, pkg)| format!("{tool} ({pkg})"))
        .collect();
    assert!(
        missing.is_empty(),
        "the lab needs these tools, not found in {}: {}; install them with `make deps`",
        lab_path(),
        missing.join(", ")
    );
}

/// Picks a random prefix whose namespaces and lab directory are all new, and creates them.
fn reserve_names() -> (String, String, String, PathBuf) {
    for _ in 0..20 {
        let prefix = format!("avm{:05x}", rand::random::<u32>() & 0xfffff);
        let (vm_ns, ext_ns) = (format!("{prefix}-vm"), format!("{prefix}-ext"));
        let dir = std::env::temp_dir().join(format!("avm-lab-{prefix}"));
        if std::fs::create_dir(&dir).is_err() {
            continue;
        }
        if add_netns(&vm_ns) {
            if add_netns(&ext_ns) {
                return (prefix, vm_ns, ext_ns, dir);
            }
            let _ = cmd("ip").args(["netns", "del", &vm_ns]).status();
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    panic!("could not find a free lab name after 20 tries");
}

/// Creates a namespace; false if the name is taken; panics on any other failure.
fn add_netns(name: &str) -> bool {
    let mut c = cmd("ip");
    c.args(["netns", "add", name]);
    let out = run(c);
    if out.status.success() {
        return true;
    }
    assert!(
        out.stderr_text().contains("exists"),
        "ip netns add {name} failed: {}",
        out.describe()
    );
    false
}

/// Deep-merges `extra` into `base`: mappings key by key, anything else replaced.
fn merge(base: &mut Value, extra: Value) {
    match (base, extra) {
        (Value::Mapping(b), Value::Mapping(e)) => {
            for (k, v) in e {
                match b.get_mut(&k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}
