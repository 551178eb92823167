//! Host network managers that would fight the agent over the NICs it attaches (issue 5): finding
//! NetworkManager, systemd-networkd, netplan, ifupdown, dhclient and dhcpcd, telling whether each
//! is running, whether the drop-ins of `deploy/network-managers/` (or an equivalent configuration)
//! keep it off the renamed uplink `<name>~`, and turning that into one operator-facing warning per
//! problem.
//!
//! Everything here is pure over a filesystem root (`/` in production, a temporary directory in
//! tests): no systemd, D-Bus or netlink calls. A manager counts as running when one of its
//! processes is in `<root>/proc/*/comm`; when `<root>/proc` cannot be read, its pid and state files
//! under `/run` stand in. See `deploy/network-managers/README.md` for why each drop-in is needed.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

/// Names the agent adds to a NIC it attaches (`eth0` becomes `eth0~`).
pub const UPLINK_SUFFIX: char = '~';

/// A network manager or DHCP client that may configure the host's interfaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Manager {
    NetworkManager,
    SystemdNetworkd,
    Netplan,
    Ifupdown,
    Dhclient,
    Dhcpcd,
}

impl Manager {
    pub fn name(self) -> &'static str {
        match self {
            Manager::NetworkManager => "NetworkManager",
            Manager::SystemdNetworkd => "systemd-networkd",
            Manager::Netplan => "netplan",
            Manager::Ifupdown => "ifupdown",
            Manager::Dhclient => "dhclient",
            Manager::Dhcpcd => "dhcpcd",
        }
    }
}

impl fmt::Display for Manager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a drop-in goes in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Install {
    /// Copy the file to `install_as`.
    Copy,
    /// Append the file's lines to `install_as` (the format has no include directive).
    Append,
}

/// One file of `deploy/network-managers/` and where it is installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DropIn {
    /// Path in this repository.
    pub source: &'static str,
    /// Absolute path on the host.
    pub install_as: &'static str,
    pub install: Install,
    /// What to run afterwards so the manager picks it up.
    pub activate: &'static str,
    /// The file itself, embedded at build time.
    pub content: &'static str,
}

/// NetworkManager: `[keyfile] unmanaged-devices+=interface-name:*~` and a `[device-…]` section.
pub const NETWORKMANAGER_DROPIN: DropIn = DropIn {
    source: "deploy/network-managers/NetworkManager/90-antrea-vm-agent.conf",
    install_as: "/etc/NetworkManager/conf.d/90-antrea-vm-agent.conf",
    install: Install::Copy,
    activate: "systemctl reload NetworkManager",
    content: include_str!("../../deploy/network-managers/NetworkManager/90-antrea-vm-agent.conf"),
};

/// systemd-networkd (and netplan with its default renderer): `Name=*~` with `Unmanaged=yes`.
pub const NETWORKD_DROPIN: DropIn = DropIn {
    source: "deploy/network-managers/systemd-networkd/01-antrea-vm-agent-uplink.network",
    install_as: "/etc/systemd/network/01-antrea-vm-agent-uplink.network",
    install: Install::Copy,
    activate: "networkctl reload",
    content: include_str!("../../deploy/network-managers/systemd-networkd/01-antrea-vm-agent-uplink.network"),
};

/// Template (`@IFNAME@`) of a `.network` file that runs DHCP on the OVS internal port.
pub const NETWORKD_HOST_PORT_TEMPLATE: DropIn = DropIn {
    source: "deploy/network-managers/systemd-networkd/02-antrea-vm-agent-host-port.network.in",
    install_as: "/etc/systemd/network/02-antrea-vm-agent-host-@IFNAME@.network",
    install: Install::Copy,
    activate: "networkctl reload",
    content: include_str!(
        "../../deploy/network-managers/systemd-networkd/02-antrea-vm-agent-host-port.network.in"
    ),
};

/// dhclient: an enter hook that stops dhclient-script for interfaces named `*~`.
pub const DHCLIENT_DROPIN: DropIn = DropIn {
    source: "deploy/network-managers/dhclient/antrea-vm-agent-uplink",
    install_as: "/etc/dhcp/dhclient-enter-hooks.d/antrea-vm-agent-uplink",
    install: Install::Copy,
    activate: "nothing (dhclient-script reads hooks at every run)",
    content: include_str!("../../deploy/network-managers/dhclient/antrea-vm-agent-uplink"),
};

/// dhcpcd: `denyinterfaces *~`, appended to dhcpcd.conf.
pub const DHCPCD_DROPIN: DropIn = DropIn {
    source: "deploy/network-managers/dhcpcd/dhcpcd.conf.antrea-vm-agent",
    install_as: "/etc/dhcpcd.conf",
    install: Install::Append,
    activate: "dhcpcd -n",
    content: include_str!("../../deploy/network-managers/dhcpcd/dhcpcd.conf.antrea-vm-agent"),
};

/// Every shipped file, for documentation and tests.
pub const DROPINS: [DropIn; 5] = [
    NETWORKMANAGER_DROPIN,
    NETWORKD_DROPIN,
    NETWORKD_HOST_PORT_TEMPLATE,
    DHCLIENT_DROPIN,
    DHCPCD_DROPIN,
];

/// What was found about one manager on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagerFinding {
    pub manager: Manager,
    /// A process of the manager runs (or, without a readable `/proc`, its pid/state files exist).
    pub active: bool,
    /// Why the manager is considered present or running: processes, pid and state files.
    pub evidence: Vec<String>,
    /// The drop-in that keeps this manager off the renamed uplinks; `None` for managers handled
    /// through another one (netplan through its renderer) or by a configuration change.
    pub dropin: Option<DropIn>,
    /// Our drop-in is at its install path.
    pub dropin_installed: bool,
    /// Renamed uplinks (`eth0~`) this manager would configure, as its configuration reads now
    /// (whatever file keeps it off them: ours or an equivalent of the administrator's).
    pub at_risk: Vec<String>,
    /// The file that makes the manager take an uplink, when one can be named.
    pub culprit: Option<String>,
    /// Further problems, one operator-facing sentence each.
    pub hazards: Vec<String>,
}

impl ManagerFinding {
    fn new(manager: Manager, dropin: Option<DropIn>) -> Self {
        ManagerFinding {
            manager,
            active: false,
            evidence: Vec::new(),
            dropin,
            dropin_installed: false,
            at_risk: Vec::new(),
            culprit: None,
            hazards: Vec::new(),
        }
    }

    /// The manager runs and would configure at least one renamed uplink.
    pub fn fights(&self) -> bool {
        self.active && !self.at_risk.is_empty()
    }
}

/// Finds the network managers present under `root` and how they treat `uplinks`.
///
/// `uplinks` are the NICs the agent attaches, by their own name (`eth0`); a name already ending
/// in `~` is taken as the renamed form. Only managers with some trace on the host (configuration,
/// binary, state or process) are returned, in [`Manager`] order.
pub fn detect(root: &Path, uplinks: &[String]) -> Vec<ManagerFinding> {
    let host = Host::new(root);
    let nics: Vec<Nic> = uplinks
        .iter()
        .filter(|u| !u.is_empty())
        .map(|u| host.nic(u))
        .collect();
    [
        detect_networkmanager(&host, &nics),
        detect_networkd(&host, &nics),
        detect_netplan(&host, &nics),
        detect_ifupdown(&host, &nics),
        detect_dhclient(&host, &nics),
        detect_dhcpcd(&host, &nics),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// One sentence per problem: a running manager that would configure a renamed uplink (naming
/// the file to install) and every hazard found.
pub fn warnings(findings: &[ManagerFinding]) -> Vec<String> {
    let mut out = Vec::new();
    for f in findings {
        // Managers without a drop-in of their own (netplan, ifupdown) say it in their hazards.
        if f.fights() && f.dropin.is_some() {
            out.push(fight_sentence(f));
        }
        out.extend(f.hazards.iter().cloned());
    }
    out
}

/// The warnings to log just before attaching `uplink` (the NIC's own name, e.g. `eth0`).
pub fn check_before_attach(root: &Path, uplink: &str) -> Vec<String> {
    warnings(&detect(root, &[uplink.to_string()]))
}

fn fight_sentence(f: &ManagerFinding) -> String {
    let names = f.at_risk.join(", ");
    let why = match &f.culprit {
        Some(c) => format!(" ({c})"),
        None => String::new(),
    };
    let Some(d) = f.dropin else {
        return format!("{} would configure {names}{why}", f.manager);
    };
    let verb = match d.install {
        Install::Copy => format!("install {} as {}", d.source, d.install_as),
        Install::Append => format!("append {} to {}", d.source, d.install_as),
    };
    if f.dropin_installed {
        format!(
            "{} is running and still does not leave {names} alone although {} is installed{why}: \
             make sure no other file overrides it, then run `{}`",
            f.manager, d.install_as, d.activate
        )
    } else {
        format!(
            "{} is running and does not leave {names} alone{why}: {verb} and run `{}`",
            f.manager, d.activate
        )
    }
}

// ---------------------------------------------------------------------------------------------
// The host as seen under a root directory.

struct Host {
    root: PathBuf,
    /// `None` when `<root>/proc` holds no process (not mounted, or a test root without one).
    procs: Option<Vec<Proc>>,
}

#[derive(Debug, Clone)]
struct Proc {
    pid: u32,
    comm: String,
    args: Vec<String>,
}

/// A NIC the agent attaches, with what sysfs tells about it.
#[derive(Debug, Clone)]
struct Nic {
    /// The NIC's own name (`eth0`), also the name of the OVS internal port.
    name: String,
    /// The name it has while attached (`eth0~`).
    renamed: String,
    driver: Option<String>,
    mac: Option<String>,
}

impl Host {
    fn new(root: &Path) -> Self {
        let mut host = Host {
            root: root.to_path_buf(),
            procs: None,
        };
        host.procs = host.scan_procs();
        host
    }

    fn path(&self, abs: &str) -> PathBuf {
        self.root.join(abs.trim_start_matches('/'))
    }

    fn read(&self, abs: &str) -> Option<String> {
        fs::read_to_string(self.path(abs)).ok()
    }

    fn exists(&self, abs: &str) -> bool {
        fs::symlink_metadata(self.path(abs)).is_ok()
    }

    fn is_dir(&self, abs: &str) -> bool {
        self.path(abs).is_dir()
    }

    /// Regular files (or symlinks) of a directory, sorted by name.
    fn list(&self, dir: &str) -> Vec<String> {
        let Ok(rd) = fs::read_dir(self.path(dir)) else {
            return Vec::new();
        };
        let mut names: Vec<String> = rd
            .filter_map(Result::ok)
            .filter(|e| e.file_type().map(|t| !t.is_dir()).unwrap_or(false))
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        names.sort();
        names
    }

    fn scan_procs(&self) -> Option<Vec<Proc>> {
        let rd = fs::read_dir(self.path("/proc")).ok()?;
        let mut procs = Vec::new();
        for e in rd.filter_map(Result::ok) {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(comm) = fs::read_to_string(e.path().join("comm")) else {
                continue;
            };
            let args = fs::read(e.path().join("cmdline"))
                .map(|b| {
                    b.split(|c| *c == 0)
                        .filter(|a| !a.is_empty())
                        .map(|a| String::from_utf8_lossy(a).into_owned())
                        .collect()
                })
                .unwrap_or_default();
            procs.push(Proc {
                pid,
                comm: comm.trim_end_matches('\n').to_string(),
                args,
            });
        }
        if procs.is_empty() {
            return None;
        }
        procs.sort_by_key(|p| p.pid);
        Some(procs)
    }

    /// Processes whose `comm` is `comm` (the kernel keeps 15 bytes of the name).
    fn procs_named(&self, comm: &str) -> Vec<&Proc> {
        let want: String = comm.chars().take(15).collect();
        self.procs.iter().flatten().filter(|p| p.comm == want).collect()
    }

    fn nic(&self, uplink: &str) -> Nic {
        let name = uplink.trim_end_matches(UPLINK_SUFFIX).to_string();
        let renamed = format!("{name}{UPLINK_SUFFIX}");
        // Before the attach the NIC has its own name; while attached it is the renamed one
        // (and the own name belongs to the OVS internal port).
        let mut driver = None;
        let mut mac = None;
        for candidate in [&renamed, &name] {
            let dir = format!("/sys/class/net/{candidate}");
            if !self.exists(&dir) {
                continue;
            }
            driver = fs::read_link(self.path(&format!("{dir}/device/driver")))
                .ok()
                .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
            mac = self
                .read(&format!("{dir}/address"))
                .map(|m| m.trim().to_ascii_lowercase())
                .filter(|m| !m.is_empty());
            break;
        }
        Nic {
            name,
            renamed,
            driver,
            mac,
        }
    }
}

/// Sets whether a daemon runs, with the evidence: its processes when /proc can be read, else
/// the presence of `state_file` (a pid or state file it keeps while running).
fn mark_running(f: &mut ManagerFinding, host: &Host, procs: &[&Proc], state_file: &str) {
    f.evidence = evidence_of_procs(procs);
    if host.procs.is_some() {
        f.active = !procs.is_empty();
    } else if host.exists(state_file) {
        f.active = true;
        f.evidence.push(format!("{state_file} exists"));
    }
}

fn evidence_of_procs(procs: &[&Proc]) -> Vec<String> {
    procs
        .iter()
        .map(|p| {
            if p.args.is_empty() {
                format!("process {} ({})", p.pid, p.comm)
            } else {
                format!("process {} ({})", p.pid, p.args.join(" "))
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// A small ini reader (NetworkManager keyfile and systemd unit syntax).

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Set,
    /// NetworkManager `key+=value`.
    Append,
    /// NetworkManager `key-=value`.
    Remove,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    key: String,
    op: Op,
    value: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Section {
    name: String,
    entries: Vec<Entry>,
}

/// Why an ini file could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IniError {
    #[error("line {line}: assignment outside of a [section]")]
    OutsideSection { line: usize },
    #[error("line {line}: expected `key=value`, found {text:?}")]
    NotAnAssignment { line: usize, text: String },
    #[error("line {line}: section header {text:?} is not closed by ']'")]
    BadHeader { line: usize, text: String },
}

fn parse_ini(text: &str) -> Result<Vec<Section>, IniError> {
    let mut sections: Vec<Section> = Vec::new();
    let mut pending = String::new();
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let mut line = raw.trim().to_string();
        if !pending.is_empty() {
            line = format!("{pending} {line}");
            pending.clear();
        }
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        // systemd: a trailing backslash continues the value on the next line.
        if let Some(stripped) = line.strip_suffix('\\') {
            pending = stripped.trim_end().to_string();
            continue;
        }
        if line.starts_with('[') {
            let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) else {
                return Err(IniError::BadHeader {
                    line: line_no,
                    text: line,
                });
            };
            sections.push(Section {
                name: name.trim().to_string(),
                entries: Vec::new(),
            });
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            return Err(IniError::NotAnAssignment {
                line: line_no,
                text: line,
            });
        };
        let k = k.trim();
        let (key, op) = if let Some(k) = k.strip_suffix('+') {
            (k.trim_end(), Op::Append)
        } else if let Some(k) = k.strip_suffix('-') {
            (k.trim_end(), Op::Remove)
        } else {
            (k, Op::Set)
        };
        let Some(section) = sections.last_mut() else {
            return Err(IniError::OutsideSection { line: line_no });
        };
        section.entries.push(Entry {
            key: key.to_string(),
            op,
            value: v.trim().to_string(),
        });
    }
    Ok(sections)
}

/// The last value of `key` in the sections named `section`.
fn last_value<'a>(sections: &'a [Section], section: &str, key: &str) -> Option<&'a str> {
    sections
        .iter()
        .filter(|s| s.name == section)
        .flat_map(|s| s.entries.iter())
        .rfind(|e| e.key == key)
        .map(|e| e.value.as_str())
}

/// systemd's boolean syntax.
fn systemd_bool(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "yes" | "y" | "true" | "t" | "on" => Some(true),
        "0" | "no" | "n" | "false" | "f" | "off" => Some(false),
        _ => None,
    }
}

/// Shell-style glob: `*`, `?` and, when `classes` is set, `[...]` (with `!`/`^` negation and
/// ranges) as fnmatch(3) without flags; a backslash escapes the next character.
fn glob_match(pattern: &str, text: &str, classes: bool) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    glob_at(&p, &t, classes)
}

fn glob_at(p: &[char], t: &[char], classes: bool) -> bool {
    let Some((&c, rest)) = p.split_first() else {
        return t.is_empty();
    };
    match c {
        '*' => (0..=t.len()).any(|i| glob_at(rest, &t[i..], classes)),
        '?' => !t.is_empty() && glob_at(rest, &t[1..], classes),
        '[' if classes => {
            let Some((&ch, t_rest)) = t.split_first() else {
                return false;
            };
            match class_match(rest, ch) {
                Some((matched, after)) => matched && glob_at(after, t_rest, classes),
                // No closing bracket: '[' is an ordinary character.
                None => ch == '[' && glob_at(rest, t_rest, classes),
            }
        }
        '\\' if !rest.is_empty() => !t.is_empty() && t[0] == rest[0] && glob_at(&rest[1..], &t[1..], classes),
        _ => !t.is_empty() && t[0] == c && glob_at(rest, &t[1..], classes),
    }
}

/// Matches `ch` against a bracket expression starting after `[`; returns the result and the
/// pattern after the closing `]`.
fn class_match(p: &[char], ch: char) -> Option<(bool, &[char])> {
    let (negate, mut i) = match p.first() {
        Some('!') | Some('^') => (true, 1),
        _ => (false, 0),
    };
    let mut matched = false;
    let mut first = true;
    while i < p.len() {
        let c = p[i];
        if c == ']' && !first {
            return Some((matched != negate, &p[i + 1..]));
        }
        first = false;
        if i + 2 < p.len() && p[i + 1] == '-' && p[i + 2] != ']' {
            if c <= ch && ch <= p[i + 2] {
                matched = true;
            }
            i += 3;
        } else {
            if c == ch {
                matched = true;
            }
            i += 1;
        }
    }
    None
}

// ---------------------------------------------------------------------------------------------
// NetworkManager.

/// A device as NetworkManager's device specs see it.
struct NmDevice<'a> {
    iface: &'a str,
    /// NetworkManager's device type (`nmcli -f GENERAL.TYPE`): "ethernet" for a NIC.
    kind: &'a str,
    driver: Option<&'a str>,
    mac: Option<&'a str>,
}

/// `nm_match_spec_device` semantics: a list of only `except:` specs matches unless one of them
/// does; otherwise it matches when a positive spec matches and no `except:` spec does.
fn nm_spec_matches(specs: &[String], dev: &NmDevice<'_>) -> bool {
    let (mut has_except, mut has_positive, mut hit, mut hit_except) = (false, false, false, false);
    for spec in specs {
        let spec = spec.trim();
        if spec.is_empty() {
            continue;
        }
        if let Some(neg) = spec.strip_prefix("except:") {
            has_except = true;
            hit_except |= nm_one_spec(neg, dev);
        } else {
            has_positive = true;
            hit |= nm_one_spec(spec, dev);
        }
    }
    if has_except && !has_positive {
        return !hit_except;
    }
    hit && !hit_except
}

fn nm_one_spec(spec: &str, dev: &NmDevice<'_>) -> bool {
    if spec == "*" {
        return true;
    }
    if let Some(name) = spec.strip_prefix("interface-name:") {
        if let Some(lit) = name.strip_prefix('=') {
            return lit == dev.iface;
        }
        let pat = name.strip_prefix('~').unwrap_or(name);
        return glob_match(pat, dev.iface, false);
    }
    if let Some(mac) = spec.strip_prefix("mac:") {
        return dev.mac.is_some_and(|m| m.eq_ignore_ascii_case(mac));
    }
    if let Some(t) = spec.strip_prefix("type:") {
        return t == dev.kind;
    }
    if let Some(d) = spec.strip_prefix("driver:") {
        let d = d.split('/').next().unwrap_or(d);
        return dev.driver == Some(d);
    }
    if spec.contains(':') {
        // A MAC address, or a kind of spec this check does not evaluate (s390-subchannels:…).
        return is_mac(spec) && dev.mac.is_some_and(|m| m.eq_ignore_ascii_case(spec));
    }
    spec == dev.iface
}

fn is_mac(s: &str) -> bool {
    let parts: Vec<&str> = s.split(':').collect();
    parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()))
}

fn split_specs(v: &str) -> Vec<String> {
    v.split([',', ';'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// NetworkManager's configuration files in reading order: `/usr/lib/…/conf.d`, `/run/…/conf.d`,
/// `NetworkManager.conf`, `/etc/…/conf.d`, `NetworkManager-intern.conf`. A `conf.d` file name in
/// `/etc` shadows the same name in `/run` and `/usr/lib`; one in `/run` shadows `/usr/lib`.
fn nm_config_files(host: &Host) -> Vec<(String, Vec<Section>)> {
    let etc = host.list("/etc/NetworkManager/conf.d");
    let run = host.list("/run/NetworkManager/conf.d");
    let lib = host.list("/usr/lib/NetworkManager/conf.d");
    let is_conf = |n: &String| n.ends_with(".conf");
    let mut paths: Vec<String> = Vec::new();
    for n in lib.iter().filter(|n| is_conf(n)) {
        if !etc.contains(n) && !run.contains(n) {
            paths.push(format!("/usr/lib/NetworkManager/conf.d/{n}"));
        }
    }
    for n in run.iter().filter(|n| is_conf(n)) {
        if !etc.contains(n) {
            paths.push(format!("/run/NetworkManager/conf.d/{n}"));
        }
    }
    paths.push("/etc/NetworkManager/NetworkManager.conf".to_string());
    for n in etc.iter().filter(|n| is_conf(n)) {
        paths.push(format!("/etc/NetworkManager/conf.d/{n}"));
    }
    paths.push("/var/lib/NetworkManager/NetworkManager-intern.conf".to_string());
    paths
        .into_iter()
        .filter_map(|p| {
            let text = host.read(&p)?;
            // NetworkManager skips a file it cannot parse; so does this check.
            let sections = parse_ini(&text).ok()?;
            Some((p, sections))
        })
        .collect()
}

/// Whether NetworkManager's configuration leaves `dev` unmanaged, and the file that decides.
fn nm_unmanaged(files: &[(String, Vec<Section>)], dev: &NmDevice<'_>) -> (bool, Option<String>) {
    // [device*] sections: later files first; within a file top-down, plain [device] last. The
    // first matching section that sets "managed" decides; it has priority over the rest.
    for (path, sections) in files.iter().rev() {
        let mut ordered: Vec<&Section> = sections
            .iter()
            .filter(|s| s.name.starts_with("device") && s.name != "device")
            .collect();
        ordered.extend(sections.iter().filter(|s| s.name == "device"));
        for s in ordered {
            let get = |k: &str| s.entries.iter().rfind(|e| e.key == k).map(|e| e.value.as_str());
            let applies = get("match-device").is_none_or(|m| nm_spec_matches(&split_specs(m), dev));
            if !applies {
                continue;
            }
            if let Some(managed) = get("managed").and_then(systemd_bool) {
                return (!managed, Some(format!("{path} [{}]", s.name)));
            }
            if get("stop-match").and_then(systemd_bool) == Some(true) {
                break;
            }
        }
    }
    // [keyfile] unmanaged-devices, merged over the files with =, += and -=.
    let mut specs: Vec<String> = Vec::new();
    let mut last_file = None;
    for (path, sections) in files {
        for s in sections.iter().filter(|s| s.name == "keyfile") {
            for e in s.entries.iter().filter(|e| e.key == "unmanaged-devices") {
                let vals = split_specs(&e.value);
                match e.op {
                    Op::Set => specs = vals,
                    Op::Append => specs.extend(vals),
                    Op::Remove => specs.retain(|v| !vals.contains(v)),
                }
                last_file = Some(path.clone());
            }
        }
    }
    (nm_spec_matches(&specs, dev), last_file)
}

fn detect_networkmanager(host: &Host, nics: &[Nic]) -> Option<ManagerFinding> {
    let mut f = ManagerFinding::new(Manager::NetworkManager, Some(NETWORKMANAGER_DROPIN));
    let procs = host.procs_named("NetworkManager");
    let installed = host.is_dir("/etc/NetworkManager")
        || host.exists("/usr/sbin/NetworkManager")
        || host.exists("/run/NetworkManager")
        || !procs.is_empty();
    if !installed {
        return None;
    }
    mark_running(&mut f, host, &procs, "/run/NetworkManager/NetworkManager.pid");
    f.dropin_installed = host.exists(NETWORKMANAGER_DROPIN.install_as);
    let files = nm_config_files(host);
    for nic in nics {
        let dev = NmDevice {
            iface: &nic.renamed,
            kind: "ethernet",
            driver: nic.driver.as_deref(),
            mac: nic.mac.as_deref(),
        };
        if !nm_unmanaged(&files, &dev).0 {
            f.at_risk.push(nic.renamed.clone());
        }
    }
    Some(f)
}

// ---------------------------------------------------------------------------------------------
// systemd-networkd.

const NETWORKD_DIRS: [&str; 5] = [
    "/etc/systemd/network",
    "/run/systemd/network",
    "/usr/local/lib/systemd/network",
    "/usr/lib/systemd/network",
    "/lib/systemd/network",
];

/// A `.network` file with its drop-ins applied.
#[derive(Debug, Clone)]
struct NetworkFile {
    path: String,
    sections: Vec<Section>,
}

impl NetworkFile {
    fn unmanaged(&self) -> bool {
        last_value(&self.sections, "Link", "Unmanaged")
            .and_then(systemd_bool)
            .unwrap_or(false)
    }

    fn dhcp(&self) -> bool {
        last_value(&self.sections, "Network", "DHCP").is_some_and(|v| {
            matches!(
                v.to_ascii_lowercase().as_str(),
                "yes" | "true" | "1" | "on" | "both" | "ipv4" | "ipv6" | "y" | "t"
            )
        })
    }

    /// The [Match] keys that an OVS internal port cannot satisfy, present in this file.
    fn hardware_match_keys(&self) -> Vec<String> {
        let mut keys = BTreeSet::new();
        for s in self.sections.iter().filter(|s| s.name == "Match") {
            for e in &s.entries {
                if matches!(
                    e.key.as_str(),
                    "Driver" | "PermanentMACAddress" | "Path" | "Property"
                ) && !e.value.is_empty()
                {
                    keys.insert(format!("{}=", e.key));
                }
            }
        }
        keys.into_iter().collect()
    }
}

/// What networkd's [Match] can see of a link. `None` in an `Option<Option<_>>` means the value
/// is not known here (the condition is assumed to hold).
struct LinkProps<'a> {
    name: &'a str,
    driver: Option<Option<&'a str>>,
    mac: Option<Option<&'a str>>,
    permanent_mac: Option<Option<&'a str>>,
    kind: Option<Option<&'a str>>,
    path: Option<Option<&'a str>>,
    link_type: &'a str,
}

/// systemd's `net_condition_test_strv`: `!`-prefixed assignments are negative patterns; with
/// any positive pattern one of them must match, and no negative one may.
fn strv_condition(patterns: &[(bool, String)], value: Option<&str>) -> bool {
    if patterns.is_empty() {
        return true;
    }
    let mut has_positive = false;
    let mut hit = false;
    for (invert, pat) in patterns {
        if !invert {
            has_positive = true;
        }
        if let Some(v) = value {
            if glob_match(pat, v, true) {
                if *invert {
                    return false;
                }
                hit = true;
            }
        }
    }
    !has_positive || hit
}

fn network_file_matches(file: &NetworkFile, link: &LinkProps<'_>) -> bool {
    let mut strv: BTreeMap<&str, Vec<(bool, String)>> = BTreeMap::new();
    let mut macs: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for s in file.sections.iter().filter(|s| s.name == "Match") {
        for e in &s.entries {
            match e.key.as_str() {
                k @ ("Name" | "Driver" | "Type" | "Kind" | "Path") => {
                    let list = strv.entry(k).or_default();
                    if e.value.is_empty() {
                        list.clear();
                        continue;
                    }
                    let (invert, rest) = match e.value.strip_prefix('!') {
                        Some(r) => (true, r),
                        None => (false, e.value.as_str()),
                    };
                    list.extend(rest.split_whitespace().map(|w| (invert, w.to_string())));
                }
                k @ ("MACAddress" | "PermanentMACAddress") => {
                    let list = macs.entry(k).or_default();
                    if e.value.is_empty() {
                        list.clear();
                        continue;
                    }
                    list.extend(e.value.split_whitespace().map(|m| m.to_ascii_lowercase()));
                }
                // Host=, Virtualization=, KernelCommandLine=, Property=, … are not evaluated
                // here: they are assumed to hold.
                _ => {}
            }
        }
    }
    let known = |v: &Option<Option<&str>>, patterns: &[(bool, String)]| match v {
        None => true,
        Some(value) => strv_condition(patterns, *value),
    };
    let empty = Vec::new();
    let name_ok = strv_condition(strv.get("Name").unwrap_or(&empty), Some(link.name));
    let type_ok = strv_condition(strv.get("Type").unwrap_or(&empty), Some(link.link_type));
    let driver_ok = known(&link.driver, strv.get("Driver").unwrap_or(&empty));
    let kind_ok = known(&link.kind, strv.get("Kind").unwrap_or(&empty));
    let path_ok = known(&link.path, strv.get("Path").unwrap_or(&empty));
    let mac_ok = |key: &str, v: &Option<Option<&str>>| match (macs.get(key), v) {
        (None, _) => true,
        (Some(list), _) if list.is_empty() => true,
        (Some(_), None) => true,
        (Some(list), Some(value)) => value.is_some_and(|m| list.iter().any(|x| x == m)),
    };
    name_ok
        && type_ok
        && driver_ok
        && kind_ok
        && path_ok
        && mac_ok("MACAddress", &link.mac)
        && mac_ok("PermanentMACAddress", &link.permanent_mac)
}

/// networkd's `.network` files in the order it tries them: all directories merged and sorted by
/// file name, a name in an earlier directory of [`NETWORKD_DIRS`] hiding the same name in a later
/// one, files that are empty or symlinks to `/dev/null` masked; `<name>.d/*.conf` drop-ins
/// appended.
fn networkd_files(host: &Host) -> Vec<NetworkFile> {
    let mut chosen: BTreeMap<String, String> = BTreeMap::new();
    for dir in NETWORKD_DIRS {
        for name in host.list(dir) {
            if name.ends_with(".network") && !chosen.contains_key(&name) {
                chosen.insert(name.clone(), format!("{dir}/{name}"));
            }
        }
    }
    let mut out = Vec::new();
    for (name, path) in chosen {
        let masked = fs::read_link(host.path(&path))
            .map(|t| t == Path::new("/dev/null"))
            .unwrap_or(false);
        let Some(text) = host.read(&path) else {
            continue;
        };
        if masked || text.trim().is_empty() {
            continue;
        }
        let Ok(mut sections) = parse_ini(&text) else {
            continue;
        };
        let mut dropins: BTreeMap<String, String> = BTreeMap::new();
        for dir in NETWORKD_DIRS {
            let d = format!("{dir}/{name}.d");
            for conf in host.list(&d) {
                if conf.ends_with(".conf") && !dropins.contains_key(&conf) {
                    dropins.insert(conf.clone(), format!("{d}/{conf}"));
                }
            }
        }
        for p in dropins.values() {
            if let Some(Ok(more)) = host.read(p).map(|t| parse_ini(&t)) {
                sections.extend(more);
            }
        }
        out.push(NetworkFile { path, sections });
    }
    out
}

fn first_match<'a>(files: &'a [NetworkFile], link: &LinkProps<'_>) -> Option<&'a NetworkFile> {
    files.iter().find(|f| network_file_matches(f, link))
}

fn detect_networkd(host: &Host, nics: &[Nic]) -> Option<ManagerFinding> {
    let mut f = ManagerFinding::new(Manager::SystemdNetworkd, Some(NETWORKD_DROPIN));
    // The kernel keeps 15 bytes of "systemd-networkd".
    let procs = host.procs_named("systemd-networkd");
    let installed = host.exists("/lib/systemd/systemd-networkd")
        || host.exists("/usr/lib/systemd/systemd-networkd")
        || host.is_dir("/etc/systemd/network")
        || host.is_dir("/run/systemd/netif")
        || !procs.is_empty();
    if !installed {
        return None;
    }
    mark_running(&mut f, host, &procs, "/run/systemd/netif/state");
    f.dropin_installed = host.exists(NETWORKD_DROPIN.install_as);
    let files = networkd_files(host);
    for nic in nics {
        let uplink = LinkProps {
            name: &nic.renamed,
            driver: nic.driver.as_deref().map(Some),
            mac: nic.mac.as_deref().map(Some),
            // sysfs has no permanent address; a NIC's current one normally is it.
            permanent_mac: nic.mac.as_deref().map(Some),
            kind: Some(None),
            path: None,
            link_type: "ether",
        };
        if let Some(file) = first_match(&files, &uplink) {
            if !file.unmanaged() {
                f.at_risk.push(nic.renamed.clone());
                f.culprit = Some(format!("{} matches {}", file.path, nic.renamed));
            }
        }
        if f.active {
            if let Some(h) = networkd_host_port_hazard(&files, nic) {
                f.hazards.push(h);
            }
        }
    }
    Some(f)
}

/// DHCP on the NIC whose `.network` file will not match the OVS internal port taking its place.
fn networkd_host_port_hazard(files: &[NetworkFile], nic: &Nic) -> Option<String> {
    let as_nic = LinkProps {
        name: &nic.name,
        driver: nic.driver.as_deref().map(Some),
        mac: nic.mac.as_deref().map(Some),
        permanent_mac: nic.mac.as_deref().map(Some),
        kind: Some(None),
        path: None,
        link_type: "ether",
    };
    let nic_file = first_match(files, &as_nic).filter(|f| !f.unmanaged() && f.dhcp())?;
    // The OVS internal port: same name and MAC, driver and kind "openvswitch", no permanent
    // address, no device path.
    let as_port = LinkProps {
        name: &nic.name,
        driver: Some(Some("openvswitch")),
        mac: nic.mac.as_deref().map(Some),
        permanent_mac: Some(None),
        kind: Some(Some("openvswitch")),
        path: Some(None),
        link_type: "ether",
    };
    if first_match(files, &as_port).is_some_and(|f| !f.unmanaged() && f.dhcp()) {
        return None;
    }
    let keys = nic_file.hardware_match_keys();
    let why = if keys.is_empty() {
        String::new()
    } else {
        format!(" through {}", keys.join(", "))
    };
    let dest = NETWORKD_HOST_PORT_TEMPLATE
        .install_as
        .replace("@IFNAME@", &nic.name);
    Some(format!(
        "systemd-networkd runs DHCP on {name} from {file}, which matches the NIC{why} and so not \
         the OVS internal port that takes over the name {name}: DHCP stops while {name} is \
         attached. Install {src} as {dest} with @IFNAME@ set to {name} and the DHCP settings of \
         {file}, then run `networkctl reload`",
        name = nic.name,
        file = nic_file.path,
        src = NETWORKD_HOST_PORT_TEMPLATE.source,
    ))
}

// ---------------------------------------------------------------------------------------------
// netplan.

const NETPLAN_DIRS: [&str; 3] = ["/etc/netplan", "/run/netplan", "/lib/netplan"];

fn detect_netplan(host: &Host, nics: &[Nic]) -> Option<ManagerFinding> {
    let mut f = ManagerFinding::new(Manager::Netplan, None);
    // netplan reads *.yaml from these directories, a name in /etc hiding /run and /lib.
    let mut chosen: BTreeMap<String, String> = BTreeMap::new();
    for dir in NETPLAN_DIRS {
        for name in host.list(dir) {
            if name.ends_with(".yaml") && !chosen.contains_key(&name) {
                chosen.insert(name.clone(), format!("{dir}/{name}"));
            }
        }
    }
    if chosen.is_empty() && !host.exists("/usr/sbin/netplan") {
        return None;
    }
    for path in chosen.values() {
        let Some(text) = host.read(path) else {
            continue;
        };
        let Ok(doc) = serde_norway::from_str::<serde_norway::Value>(&text) else {
            f.evidence.push(format!("{path} (not valid YAML)"));
            continue;
        };
        let Some(eths) = doc
            .get("network")
            .and_then(|n| n.get("ethernets"))
            .and_then(|e| e.as_mapping())
        else {
            continue;
        };
        f.active = true;
        f.evidence.push(format!("{path} defines ethernets"));
        for (id, def) in eths {
            let id = id.as_str().unwrap_or_default();
            let set_name = def.get("set-name").and_then(|v| v.as_str());
            let critical = def.get("critical").and_then(|v| v.as_bool()).unwrap_or(false);
            let m = def.get("match");
            let driver = m.and_then(|m| m.get("driver")).is_some();
            for nic in nics {
                if set_name == Some(nic.name.as_str()) && m.is_some() && driver && !critical {
                    f.at_risk.push(nic.renamed.clone());
                    f.hazards.push(format!(
                        "netplan's {path} renames the NIC it matches by driver to {name} \
                         (ethernets.{id}: match.driver with set-name): `netplan apply` while \
                         {name} is attached would take {renamed} down and try to rename it back. \
                         Do not run `netplan apply` while attached, or add `critical: true` to \
                         ethernets.{id}",
                        name = nic.name,
                        renamed = nic.renamed,
                    ));
                }
            }
        }
    }
    Some(f)
}

// ---------------------------------------------------------------------------------------------
// ifupdown.

/// The `allow-*` and `auto` classes of an interface in /etc/network/interfaces and the files it
/// sources.
fn ifupdown_classes(host: &Host, iface: &str) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    let mut queue = vec!["/etc/network/interfaces".to_string()];
    let mut seen = BTreeSet::new();
    while let Some(path) = queue.pop() {
        if !seen.insert(path.clone()) || seen.len() > 64 {
            continue;
        }
        let Some(text) = host.read(&path) else {
            continue;
        };
        for line in text.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            let Some((&first, rest)) = words.split_first() else {
                continue;
            };
            if first.starts_with('#') {
                continue;
            }
            if first == "auto" || first.starts_with("allow-") {
                if rest.contains(&iface) {
                    out.insert((first.to_string(), path.clone()));
                }
            } else if first == "source" || first == "source-directory" {
                for arg in rest {
                    let arg = if arg.starts_with('/') {
                        arg.to_string()
                    } else {
                        format!("/etc/network/{arg}")
                    };
                    queue.extend(expand_source(host, &arg, first == "source-directory"));
                }
            }
        }
    }
    out
}

/// The files named by a `source` glob (in its directory) or a `source-directory`.
fn expand_source(host: &Host, arg: &str, directory: bool) -> Vec<String> {
    if directory {
        // run-parts names: letters, digits, '_' and '-'.
        return host
            .list(arg)
            .into_iter()
            .filter(|n| {
                n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            })
            .map(|n| format!("{}/{n}", arg.trim_end_matches('/')))
            .collect();
    }
    let (dir, pat) = match arg.rsplit_once('/') {
        Some((d, p)) => (if d.is_empty() { "/" } else { d }, p),
        None => ("/etc/network", arg),
    };
    if !pat.contains(['*', '?', '[']) {
        return vec![arg.to_string()];
    }
    host.list(dir)
        .into_iter()
        .filter(|n| glob_match(pat, n, true))
        .map(|n| format!("{}/{n}", dir.trim_end_matches('/')))
        .collect()
}

fn detect_ifupdown(host: &Host, nics: &[Nic]) -> Option<ManagerFinding> {
    if !host.exists("/etc/network/interfaces") {
        return None;
    }
    let mut f = ManagerFinding::new(Manager::Ifupdown, None);
    for state in host
        .list("/run/network")
        .into_iter()
        .filter(|n| n.starts_with("ifstate"))
    {
        f.active = true;
        f.evidence.push(format!("/run/network/{state} exists"));
    }
    for nic in nics {
        let classes = ifupdown_classes(host, &nic.name);
        let Some((_, file)) = classes.iter().find(|(c, _)| c == "allow-hotplug") else {
            continue;
        };
        // Under systemd, ifup@<nic>.service is bound to the device, and the rename stops it;
        // without systemd, udev's hotplug helper runs ifdown when the internal port goes away.
        f.at_risk.push(nic.renamed.clone());
        f.hazards.push(format!(
            "ifupdown brings {name} up as `allow-hotplug {name}` ({file}), so `ifdown {name}` \
             (which releases the DHCP lease and removes the addresses of whatever is called \
             {name} then) runs when the agent renames {name} to {renamed} (systemd stops \
             ifup@{name}.service, bound to the device), or without systemd when the agent \
             deletes the internal port on detach. Replace `allow-hotplug {name}` with \
             `auto {name}` in {file}",
            name = nic.name,
            renamed = nic.renamed,
        ));
    }
    Some(f)
}

// ---------------------------------------------------------------------------------------------
// dhclient.

/// ISC dhclient options that take a value (Debian and Red Hat builds).
const DHCLIENT_VALUE_OPTS: [&str; 16] = [
    "-p",
    "-s",
    "-cf",
    "-df",
    "-lf",
    "-pf",
    "-sf",
    "-e",
    "-g",
    "-H",
    "-F",
    "-V",
    "-C",
    "-timeout",
    "--timeout",
    "--request-options",
];

/// The interfaces named on a dhclient command line (empty: every interface).
fn dhclient_interfaces(args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut skip = false;
    for a in args.iter().skip(1) {
        if skip {
            skip = false;
            continue;
        }
        if DHCLIENT_VALUE_OPTS.contains(&a.as_str()) {
            skip = true;
            continue;
        }
        if a.starts_with('-') {
            continue;
        }
        out.push(a.clone());
    }
    out
}

fn detect_dhclient(host: &Host, nics: &[Nic]) -> Option<ManagerFinding> {
    let mut f = ManagerFinding::new(Manager::Dhclient, Some(DHCLIENT_DROPIN));
    let procs: Vec<&Proc> = host
        .procs_named("dhclient")
        .into_iter()
        // A dhclient run by NetworkManager is NetworkManager's: its drop-in covers it.
        .filter(|p| !p.args.iter().any(|a| a.contains("NetworkManager")))
        .collect();
    let mut pid_files = Vec::new();
    for dir in ["/run", "/var/run"] {
        for n in host.list(dir) {
            if n.starts_with("dhclient") && n.ends_with(".pid") {
                pid_files.push((format!("{dir}/{n}"), n));
            }
        }
    }
    let installed = host.exists("/sbin/dhclient")
        || host.exists("/usr/sbin/dhclient")
        || host.is_dir("/var/lib/dhcp")
        || host.is_dir("/var/lib/dhclient")
        || !procs.is_empty()
        || !pid_files.is_empty();
    if !installed {
        return None;
    }
    f.evidence = evidence_of_procs(&procs);
    // Interfaces served; `None` stands for "every interface".
    let mut served: Vec<Option<String>> = Vec::new();
    if host.procs.is_some() {
        f.active = !procs.is_empty();
        for p in &procs {
            let ifs = dhclient_interfaces(&p.args);
            if ifs.is_empty() {
                served.push(None);
            }
            served.extend(ifs.into_iter().map(Some));
        }
    } else {
        for (path, name) in &pid_files {
            f.active = true;
            f.evidence.push(format!("{path} exists"));
            // Debian: dhclient.eth0.pid; Red Hat: dhclient-eth0.pid; plain dhclient.pid.
            let iface = name
                .trim_end_matches(".pid")
                .trim_start_matches("dhclient6")
                .trim_start_matches("dhclient")
                .trim_start_matches(['.', '-']);
            served.push((!iface.is_empty()).then(|| iface.to_string()));
        }
    }
    f.dropin_installed = host.exists(DHCLIENT_DROPIN.install_as)
        || host
            .read("/etc/dhcp/dhclient-enter-hooks")
            .is_some_and(|t| t.contains("antrea-vm-agent"));
    if f.dropin_installed {
        return Some(f);
    }
    for nic in nics {
        let hit = served
            .iter()
            .any(|s| s.as_deref().is_none_or(|i| i == nic.renamed));
        if hit {
            f.at_risk.push(nic.renamed.clone());
        }
    }
    if served.iter().any(Option::is_none) && !f.at_risk.is_empty() {
        f.culprit = Some("a dhclient without interface arguments serves every interface".into());
    }
    Some(f)
}

// ---------------------------------------------------------------------------------------------
// dhcpcd.

fn detect_dhcpcd(host: &Host, nics: &[Nic]) -> Option<ManagerFinding> {
    let mut f = ManagerFinding::new(Manager::Dhcpcd, Some(DHCPCD_DROPIN));
    let procs = host.procs_named("dhcpcd");
    let mut pid_files: Vec<String> = Vec::new();
    for n in host.list("/run") {
        if n.starts_with("dhcpcd") && n.ends_with(".pid") {
            pid_files.push(format!("/run/{n}"));
        }
    }
    for n in host.list("/run/dhcpcd") {
        if n.ends_with("pid") {
            pid_files.push(format!("/run/dhcpcd/{n}"));
        }
    }
    let conf = host.read("/etc/dhcpcd.conf");
    let installed = host.exists("/usr/sbin/dhcpcd")
        || host.exists("/sbin/dhcpcd")
        || conf.is_some()
        || !procs.is_empty()
        || !pid_files.is_empty();
    if !installed {
        return None;
    }
    f.evidence = evidence_of_procs(&procs);
    let mut served: Vec<Option<String>> = Vec::new();
    if host.procs.is_some() {
        f.active = !procs.is_empty();
        for p in &procs {
            // Interface arguments, skipping option values; none (or -M) is manager mode.
            let ifs: Vec<String> = p
                .args
                .iter()
                .skip(1)
                .filter(|a| !a.starts_with('-'))
                .filter(|a| nics.iter().any(|n| **a == n.name || **a == n.renamed))
                .cloned()
                .collect();
            let manager_mode = p.args.iter().any(|a| a == "-M" || a == "--manager")
                || !p.args.iter().skip(1).any(|a| !a.starts_with('-'));
            if manager_mode {
                served.push(None);
            }
            served.extend(ifs.into_iter().map(Some));
        }
    } else if !pid_files.is_empty() {
        f.active = true;
        f.evidence.extend(pid_files.iter().map(|p| format!("{p} exists")));
        served.push(None);
    }
    // denyinterfaces / allowinterfaces of dhcpcd.conf (fnmatch patterns).
    let mut deny: Vec<String> = Vec::new();
    let mut allow: Vec<String> = Vec::new();
    for line in conf.as_deref().unwrap_or_default().lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("denyinterfaces") {
            deny.extend(
                rest.split([' ', ',', '\t'])
                    .filter(|s| !s.is_empty())
                    .map(String::from),
            );
        } else if let Some(rest) = line.strip_prefix("allowinterfaces") {
            allow.extend(
                rest.split([' ', ',', '\t'])
                    .filter(|s| !s.is_empty())
                    .map(String::from),
            );
        }
    }
    f.dropin_installed = conf
        .as_deref()
        .is_some_and(|c| c.contains("antrea-vm-agent") && deny.iter().any(|d| d == "*~"));
    for nic in nics {
        let denied = deny.iter().any(|p| glob_match(p, &nic.renamed, true))
            || (!allow.is_empty() && !allow.iter().any(|p| glob_match(p, &nic.renamed, true)));
        let hit = served
            .iter()
            .any(|s| s.as_deref().is_none_or(|i| i == nic.renamed));
        if hit && !denied {
            f.at_risk.push(nic.renamed.clone());
        }
    }
    Some(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    /// A temporary directory standing in for `/`.
    struct Root {
        dir: tempfile::TempDir,
    }

    impl Root {
        fn new() -> Self {
            Root {
                dir: tempfile::tempdir().expect("tempdir"),
            }
        }
        fn path(&self) -> &Path {
            self.dir.path()
        }
        fn abs(&self, p: &str) -> PathBuf {
            self.dir.path().join(p.trim_start_matches('/'))
        }
        fn write(&self, p: &str, content: &str) -> &Self {
            let f = self.abs(p);
            fs::create_dir_all(f.parent().expect("parent")).expect("mkdir");
            fs::write(&f, content).expect("write");
            self
        }
        fn mkdir(&self, p: &str) -> &Self {
            fs::create_dir_all(self.abs(p)).expect("mkdir");
            self
        }
        fn link(&self, p: &str, target: &str) -> &Self {
            let f = self.abs(p);
            fs::create_dir_all(f.parent().expect("parent")).expect("mkdir");
            symlink(target, f).expect("symlink");
            self
        }
        /// A process with `comm` and a NUL-separated command line.
        fn process(&self, pid: u32, comm: &str, args: &[&str]) -> &Self {
            let comm15: String = comm.chars().take(15).collect();
            self.write(&format!("/proc/{pid}/comm"), &format!("{comm15}\n"));
            let mut cmdline = args.join("\0");
            cmdline.push('\0');
            self.write(&format!("/proc/{pid}/cmdline"), &cmdline)
        }
        /// /proc with only an unrelated process: process scan works, nothing runs.
        fn quiet_proc(&self) -> &Self {
            self.process(1, "init", &["/sbin/init"])
        }
        /// The NIC eth0 in sysfs with a driver and MAC.
        fn nic(&self, name: &str, driver: &str, mac: &str) -> &Self {
            self.write(&format!("/sys/class/net/{name}/address"), &format!("{mac}\n"));
            self.link(
                &format!("/sys/class/net/{name}/device/driver"),
                &format!("../../../bus/pci/drivers/{driver}"),
            )
        }
        fn install(&self, d: &DropIn) -> &Self {
            self.write(d.install_as, d.content)
        }
    }

    const MAC: &str = "60:45:bd:07:a1:c2";

    fn eth0() -> Vec<String> {
        vec!["eth0".to_string()]
    }

    fn finding(root: &Root, m: Manager) -> ManagerFinding {
        detect(root.path(), &eth0())
            .into_iter()
            .find(|f| f.manager == m)
            .unwrap_or_else(|| panic!("no finding for {m}"))
    }

    fn warns(root: &Root) -> Vec<String> {
        check_before_attach(root.path(), "eth0")
    }

    // -- the ini reader and globs --------------------------------------------------------------

    #[test]
    fn ini_reads_sections_operators_and_continuations() {
        let s = parse_ini("# c\n; c\n[keyfile]\nunmanaged-devices+=a;b\nx-=y\n[Match]\nName=a \\\n  b\n")
            .expect("parse");
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].entries[0].op, Op::Append);
        assert_eq!(s[0].entries[0].key, "unmanaged-devices");
        assert_eq!(s[0].entries[1].op, Op::Remove);
        assert_eq!(last_value(&s, "Match", "Name"), Some("a b"));
    }

    #[test]
    fn ini_rejects_malformed_lines() {
        assert_eq!(parse_ini("Name=x\n"), Err(IniError::OutsideSection { line: 1 }));
        assert!(matches!(
            parse_ini("[Match\n"),
            Err(IniError::BadHeader { line: 1, .. })
        ));
        assert!(matches!(
            parse_ini("[Match]\nName\n"),
            Err(IniError::NotAnAssignment { line: 2, .. })
        ));
    }

    #[test]
    fn globs_follow_fnmatch() {
        assert!(glob_match("*~", "eth0~", true));
        assert!(!glob_match("*~", "eth0", true));
        assert!(glob_match("eth*", "eth0~", true));
        assert!(glob_match("en?[0-9]", "ens5", true));
        assert!(!glob_match("en[!0-9]", "en5", true));
        assert!(glob_match("a\\*", "a*", true));
        // NetworkManager: no bracket classes.
        assert!(glob_match("eth[0]", "eth[0]", false));
    }

    // -- the shipped files ---------------------------------------------------------------------

    #[test]
    fn networkmanager_dropin_unmanages_uplinks_and_not_the_internal_port() {
        let s = parse_ini(NETWORKMANAGER_DROPIN.content).expect("valid keyfile");
        let keyfile = s.iter().find(|s| s.name == "keyfile").expect("[keyfile]");
        assert!(keyfile
            .entries
            .iter()
            .any(|e| e.key == "unmanaged-devices" && e.op == Op::Append && e.value == "interface-name:*~"));
        let dev = s
            .iter()
            .find(|s| s.name == "device-antrea-vm-agent-uplink")
            .expect("[device-…]");
        assert!(dev.entries.iter().any(|e| e.key == "managed" && e.value == "0"));
        let files = vec![("/etc/x.conf".to_string(), s)];
        let uplink = NmDevice {
            iface: "eth0~",
            kind: "ethernet",
            driver: None,
            mac: None,
        };
        let port = NmDevice {
            iface: "eth0",
            kind: "openvswitch",
            driver: Some("openvswitch"),
            mac: None,
        };
        assert!(nm_unmanaged(&files, &uplink).0);
        assert!(!nm_unmanaged(&files, &port).0, "the internal port stays managed");
    }

    #[test]
    fn networkd_dropin_matches_only_renamed_links() {
        let file = NetworkFile {
            path: NETWORKD_DROPIN.install_as.into(),
            sections: parse_ini(NETWORKD_DROPIN.content).expect("valid .network"),
        };
        assert_eq!(last_value(&file.sections, "Match", "Name"), Some("*~"));
        assert!(file.unmanaged());
        let link = |name| LinkProps {
            name,
            driver: Some(Some("hv_netvsc")),
            mac: Some(Some(MAC)),
            permanent_mac: Some(Some(MAC)),
            kind: Some(None),
            path: None,
            link_type: "ether",
        };
        assert!(network_file_matches(&file, &link("eth0~")));
        assert!(network_file_matches(&file, &link("ens5~")));
        assert!(!network_file_matches(&file, &link("eth0")));
        // Sorts before netplan's files.
        let name = NETWORKD_DROPIN.install_as.rsplit('/').next().unwrap_or_default();
        assert!(name < "10-netplan-eth0.network");
    }

    #[test]
    fn host_port_template_matches_the_internal_port_and_not_the_nic() {
        let text = NETWORKD_HOST_PORT_TEMPLATE.content.replace("@IFNAME@", "eth0");
        let file = NetworkFile {
            path: "t".into(),
            sections: parse_ini(&text).expect("valid .network"),
        };
        assert!(file.dhcp() && !file.unmanaged());
        let port = LinkProps {
            name: "eth0",
            driver: Some(Some("openvswitch")),
            mac: Some(Some(MAC)),
            permanent_mac: Some(None),
            kind: Some(Some("openvswitch")),
            path: Some(None),
            link_type: "ether",
        };
        let nic = LinkProps {
            driver: Some(Some("hv_netvsc")),
            permanent_mac: Some(Some(MAC)),
            kind: Some(None),
            ..port
        };
        assert!(network_file_matches(&file, &port));
        assert!(!network_file_matches(&file, &nic));
        let name = NETWORKD_HOST_PORT_TEMPLATE
            .install_as
            .rsplit('/')
            .next()
            .unwrap_or_default();
        assert!(name > "01-antrea-vm-agent-uplink.network" && name < "10-netplan-eth0.network");
    }

    #[test]
    fn dhcpcd_snippet_denies_renamed_links() {
        let root = Root::new();
        root.write("/etc/dhcpcd.conf", &format!("duid\n{}", DHCPCD_DROPIN.content))
            .quiet_proc()
            .process(40, "dhcpcd", &["dhcpcd", "-q", "-b"]);
        let f = finding(&root, Manager::Dhcpcd);
        assert!(f.active && f.dropin_installed && f.at_risk.is_empty(), "{f:?}");
    }

    /// Runs dhclient-script's way of sourcing the hook: `exit` in the hook ends the script.
    fn run_hook(interface: &str) -> (bool, String) {
        let dir = tempfile::tempdir().expect("tempdir");
        let hook = dir.path().join("hook");
        fs::write(&hook, DHCLIENT_DROPIN.content).expect("write hook");
        let script = format!(
            "interface='{interface}'; reason=BOUND; . '{}'; echo configured-$interface",
            hook.display()
        );
        let out = Command::new("/bin/sh")
            .arg("-c")
            .arg(&script)
            .env("PATH", "/nonexistent") // no logger: the hook must cope
            .output()
            .expect("run sh");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    #[test]
    fn dhclient_hook_stops_the_script_for_uplinks_only() {
        let syntax = Command::new("/bin/sh")
            .arg("-n")
            .arg("-c")
            .arg(DHCLIENT_DROPIN.content)
            .status()
            .expect("sh -n");
        assert!(syntax.success());
        assert_eq!(run_hook("eth0~"), (true, String::new()));
        assert_eq!(run_hook("eth0"), (true, "configured-eth0\n".to_string()));
        // run-parts (Debian's hook directory) ignores names with dots.
        let name = DHCLIENT_DROPIN.install_as.rsplit('/').next().unwrap_or_default();
        assert!(name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'));
    }

    #[test]
    fn shipped_files_are_where_the_constants_say() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        for d in DROPINS {
            let on_disk = fs::read_to_string(repo.join(d.source)).expect(d.source);
            assert_eq!(on_disk, d.content, "{}", d.source);
            assert!(d.install_as.starts_with('/'));
        }
        assert!(repo.join("deploy/network-managers/README.md").is_file());
    }

    // -- NetworkManager ------------------------------------------------------------------------

    fn nm_host() -> Root {
        let root = Root::new();
        root.write(
            "/etc/NetworkManager/NetworkManager.conf",
            "[main]\nplugins=ifupdown,keyfile\n",
        )
        .nic("eth0", "hv_netvsc", MAC);
        root
    }

    #[test]
    fn networkmanager_running_without_dropin_warns_naming_the_file() {
        let root = nm_host();
        root.quiet_proc().process(
            812,
            "NetworkManager",
            &["/usr/sbin/NetworkManager", "--no-daemon"],
        );
        let f = finding(&root, Manager::NetworkManager);
        assert!(f.active && !f.dropin_installed, "{f:?}");
        assert_eq!(f.at_risk, vec!["eth0~".to_string()]);
        assert_eq!(
            warns(&root),
            vec![
                "NetworkManager is running and does not leave eth0~ alone: install \
                 deploy/network-managers/NetworkManager/90-antrea-vm-agent.conf as \
                 /etc/NetworkManager/conf.d/90-antrea-vm-agent.conf and run \
                 `systemctl reload NetworkManager`"
                    .to_string()
            ]
        );
    }

    #[test]
    fn networkmanager_with_dropin_does_not_warn() {
        let root = nm_host();
        root.quiet_proc()
            .process(812, "NetworkManager", &["/usr/sbin/NetworkManager"])
            // Ubuntu-style base list: "+=" keeps it and adds ours.
            .write(
                "/usr/lib/NetworkManager/conf.d/10-globally-managed-devices.conf",
                "[keyfile]\nunmanaged-devices=interface-name:docker0\n",
            )
            .install(&NETWORKMANAGER_DROPIN);
        let f = finding(&root, Manager::NetworkManager);
        assert!(f.active && f.dropin_installed && f.at_risk.is_empty(), "{f:?}");
        assert!(warns(&root).is_empty());
    }

    #[test]
    fn networkmanager_not_running_does_not_warn() {
        let root = nm_host();
        root.quiet_proc()
            // A stale pid file does not count when /proc can be read.
            .write("/run/NetworkManager/NetworkManager.pid", "812\n");
        let f = finding(&root, Manager::NetworkManager);
        assert!(!f.active);
        assert!(warns(&root).is_empty());
    }

    #[test]
    fn networkmanager_pid_file_counts_without_proc() {
        let root = nm_host();
        root.write("/run/NetworkManager/NetworkManager.pid", "812\n");
        let f = finding(&root, Manager::NetworkManager);
        assert!(f.active, "{f:?}");
        assert_eq!(warns(&root).len(), 1);
    }

    #[test]
    fn networkmanager_dropin_overridden_by_a_later_device_section_warns() {
        let root = nm_host();
        root.quiet_proc()
            .process(812, "NetworkManager", &["NetworkManager"])
            .install(&NETWORKMANAGER_DROPIN)
            .write(
                "/etc/NetworkManager/conf.d/99-manage-all.conf",
                "[device-all]\nmatch-device=*\nmanaged=1\n",
            );
        let w = warns(&root);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("although /etc/NetworkManager/conf.d/90-antrea-vm-agent.conf is installed"),
            "{}",
            w[0]
        );
    }

    #[test]
    fn networkmanager_equivalent_admin_config_is_accepted() {
        let root = nm_host();
        root.quiet_proc()
            .process(812, "NetworkManager", &["NetworkManager"])
            .write(
                "/etc/NetworkManager/conf.d/50-mine.conf",
                "[keyfile]\nunmanaged-devices=mac:00:11:22:33:44:55,interface-name:eth0~\n",
            );
        assert!(warns(&root).is_empty());
        // Ubuntu server's netplan setup: NetworkManager manages nothing but Wi-Fi and modems.
        let root = nm_host();
        root.quiet_proc()
            .process(812, "NetworkManager", &["NetworkManager"])
            .write(
                "/usr/lib/NetworkManager/conf.d/10-globally-managed-devices.conf",
                "[keyfile]\nunmanaged-devices=*,except:type:wifi,except:type:gsm,except:type:cdma\n",
            );
        assert!(warns(&root).is_empty());
    }

    #[test]
    fn nm_specs_follow_networkmanager() {
        let dev = NmDevice {
            iface: "eth0~",
            kind: "ethernet",
            driver: Some("virtio_net"),
            mac: Some(MAC),
        };
        let m = |s: &str| nm_spec_matches(&split_specs(s), &dev);
        assert!(m("interface-name:*~"));
        assert!(m("interface-name:~eth?~"));
        assert!(!m("interface-name:=*~"));
        assert!(m("interface-name:=eth0~"));
        assert!(m("eth0~"));
        assert!(m(&format!("mac:{}", MAC.to_uppercase())));
        assert!(m("type:ethernet"));
        assert!(m("driver:virtio_net"));
        assert!(!m("*,except:type:ethernet"));
        assert!(m("except:type:wifi"));
        assert!(!m("except:interface-name:eth*"));
        assert!(!m(""));
    }

    // -- systemd-networkd ----------------------------------------------------------------------

    fn networkd_host() -> Root {
        let root = Root::new();
        root.mkdir("/etc/systemd/network")
            .nic("eth0", "hv_netvsc", MAC)
            .quiet_proc()
            .process(355, "systemd-networkd", &["/lib/systemd/systemd-networkd"]);
        root
    }

    const DHCP_ETH_GLOB: &str = "[Match]\nName=eth*\n\n[Network]\nDHCP=ipv4\n";

    #[test]
    fn networkd_running_without_dropin_warns_naming_the_file() {
        let root = networkd_host();
        root.write("/etc/systemd/network/50-dhcp.network", DHCP_ETH_GLOB);
        let f = finding(&root, Manager::SystemdNetworkd);
        assert!(f.active && !f.dropin_installed);
        assert_eq!(f.at_risk, vec!["eth0~".to_string()]);
        assert_eq!(
            warns(&root),
            vec!["systemd-networkd is running and does not leave eth0~ alone \
                 (/etc/systemd/network/50-dhcp.network matches eth0~): install \
                 deploy/network-managers/systemd-networkd/01-antrea-vm-agent-uplink.network as \
                 /etc/systemd/network/01-antrea-vm-agent-uplink.network and run `networkctl reload`"
                .to_string()]
        );
    }

    #[test]
    fn networkd_with_dropin_does_not_warn() {
        let root = networkd_host();
        root.write("/etc/systemd/network/50-dhcp.network", DHCP_ETH_GLOB)
            .install(&NETWORKD_DROPIN);
        let f = finding(&root, Manager::SystemdNetworkd);
        assert!(f.active && f.dropin_installed && f.at_risk.is_empty(), "{f:?}");
        assert!(warns(&root).is_empty(), "{:?}", warns(&root));
    }

    #[test]
    fn networkd_not_running_does_not_warn() {
        let root = Root::new();
        root.write("/etc/systemd/network/50-dhcp.network", DHCP_ETH_GLOB)
            .nic("eth0", "hv_netvsc", MAC)
            .quiet_proc()
            .write("/run/systemd/netif/state", "OPER_STATE=routable\n");
        let f = finding(&root, Manager::SystemdNetworkd);
        assert!(!f.active && !f.at_risk.is_empty());
        assert!(warns(&root).is_empty());
        // Without /proc the state file stands in.
        let root = Root::new();
        root.write("/etc/systemd/network/50-dhcp.network", DHCP_ETH_GLOB)
            .write("/run/systemd/netif/state", "OPER_STATE=routable\n");
        assert!(finding(&root, Manager::SystemdNetworkd).active);
    }

    #[test]
    fn networkd_mac_only_match_takes_the_uplink_but_a_name_match_does_not() {
        let root = networkd_host();
        root.write(
            "/run/systemd/network/10-netplan-eth0.network",
            &format!("[Match]\nPermanentMACAddress={MAC}\n\n[Network]\nDHCP=ipv4\n"),
        );
        assert_eq!(finding(&root, Manager::SystemdNetworkd).at_risk, vec!["eth0~"]);
        let root = networkd_host();
        root.write(
            "/run/systemd/network/10-netplan-eth0.network",
            "[Match]\nName=eth0\n\n[Network]\nDHCP=ipv4\n",
        );
        let f = finding(&root, Manager::SystemdNetworkd);
        assert!(f.at_risk.is_empty(), "{f:?}");
        assert!(warns(&root).is_empty(), "{:?}", warns(&root));
    }

    #[test]
    fn networkd_file_sorting_before_the_dropin_is_reported() {
        let root = networkd_host();
        root.install(&NETWORKD_DROPIN).write(
            "/etc/systemd/network/00-all.network",
            "[Match]\nName=*\n\n[Network]\nDHCP=yes\n",
        );
        let w = warns(&root);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("although /etc/systemd/network/01-antrea-vm-agent-uplink.network is installed (/etc/systemd/network/00-all.network matches eth0~)"), "{}", w[0]);
    }

    #[test]
    fn networkd_masked_and_overridden_files() {
        // /etc/…/name masks /run/…/name when it links to /dev/null.
        let root = networkd_host();
        root.write("/run/systemd/network/50-dhcp.network", DHCP_ETH_GLOB)
            .link("/etc/systemd/network/50-dhcp.network", "/dev/null");
        assert!(finding(&root, Manager::SystemdNetworkd).at_risk.is_empty());
        // A drop-in can make the file leave the link alone.
        let root = networkd_host();
        root.write("/run/systemd/network/50-dhcp.network", DHCP_ETH_GLOB)
            .write(
                "/etc/systemd/network/50-dhcp.network.d/unmanaged.conf",
                "[Link]\nUnmanaged=yes\n",
            );
        assert!(finding(&root, Manager::SystemdNetworkd).at_risk.is_empty());
    }

    #[test]
    fn networkd_hardware_match_on_the_nic_means_no_dhcp_on_the_internal_port() {
        // What netplan generates from cloud-init's Azure configuration (`match: {driver,
        // macaddress}` and `set-name`), checked with netplan 0.106's generator.
        let netplan = format!(
            "[Match]\nDriver=hv_netvsc\nPermanentMACAddress={MAC}\nName=eth0\n\n\
             [Network]\nDHCP=ipv4\nLinkLocalAddressing=ipv6\n\n[DHCP]\nRouteMetric=100\n"
        );
        let root = networkd_host();
        root.write("/run/systemd/network/10-netplan-eth0.network", &netplan)
            .install(&NETWORKD_DROPIN);
        let w = warns(&root);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].starts_with("systemd-networkd runs DHCP on eth0 from /run/systemd/network/10-netplan-eth0.network, which matches the NIC through Driver=, PermanentMACAddress="), "{}", w[0]);
        assert!(
            w[0].contains("as /etc/systemd/network/02-antrea-vm-agent-host-eth0.network"),
            "{}",
            w[0]
        );
        // With the rendered template installed DHCP follows the internal port.
        root.write(
            "/etc/systemd/network/02-antrea-vm-agent-host-eth0.network",
            &NETWORKD_HOST_PORT_TEMPLATE.content.replace("@IFNAME@", "eth0"),
        );
        assert!(warns(&root).is_empty(), "{:?}", warns(&root));
    }

    // -- netplan -------------------------------------------------------------------------------

    fn netplan_yaml(extra: &str, matcher: &str) -> String {
        format!(
            "network:\n  version: 2\n  ethernets:\n    eth0:\n      dhcp4: true\n{extra}      \
             match:\n{matcher}      set-name: eth0\n"
        )
    }

    #[test]
    fn netplan_set_name_by_driver_is_a_hazard_unless_critical() {
        let root = Root::new();
        root.write(
            "/etc/netplan/50-cloud-init.yaml",
            &netplan_yaml(
                "",
                &format!("        driver: hv_netvsc\n        macaddress: {MAC}\n"),
            ),
        );
        let f = finding(&root, Manager::Netplan);
        assert!(f.active && f.at_risk == vec!["eth0~".to_string()], "{f:?}");
        let w = warns(&root);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("`netplan apply` while eth0 is attached would take eth0~ down"),
            "{}",
            w[0]
        );
        assert!(
            w[0].contains("add `critical: true` to ethernets.eth0"),
            "{}",
            w[0]
        );

        let root = Root::new();
        root.write(
            "/etc/netplan/50-cloud-init.yaml",
            &netplan_yaml("      critical: true\n", "        driver: hv_netvsc\n"),
        );
        assert!(warns(&root).is_empty());
        // Matched by MAC only, the internal port matches too: `netplan apply` finds no unique
        // interface and renames nothing.
        let root = Root::new();
        root.write(
            "/etc/netplan/50-cloud-init.yaml",
            &netplan_yaml("", &format!("        macaddress: {MAC}\n")),
        );
        assert!(warns(&root).is_empty());
    }

    // -- ifupdown ------------------------------------------------------------------------------

    #[test]
    fn ifupdown_allow_hotplug_is_a_hazard() {
        let root = Root::new();
        root.write(
            "/etc/network/interfaces",
            "source /etc/network/interfaces.d/*\nauto lo\niface lo inet loopback\n",
        )
        .write(
            "/etc/network/interfaces.d/50-cloud-init",
            "allow-hotplug eth0\niface eth0 inet dhcp\n",
        )
        .write("/run/network/ifstate.eth0", "eth0\n")
        .mkdir("/run/systemd/system")
        .quiet_proc();
        let f = finding(&root, Manager::Ifupdown);
        assert!(f.active, "{f:?}");
        let w = warns(&root);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains(
                "Replace `allow-hotplug eth0` with `auto eth0` in /etc/network/interfaces.d/50-cloud-init"
            ),
            "{}",
            w[0]
        );

        let root = Root::new();
        root.write("/etc/network/interfaces", "auto eth0\niface eth0 inet dhcp\n")
            .mkdir("/run/systemd/system")
            .quiet_proc();
        assert!(warns(&root).is_empty());
    }

    // -- dhclient ------------------------------------------------------------------------------

    #[test]
    fn dhclient_on_the_uplink_without_hook_warns_naming_the_file() {
        let root = Root::new();
        root.mkdir("/var/lib/dhcp").quiet_proc().process(
            77,
            "dhclient",
            &["dhclient", "-4", "-v", "-pf", "/run/dhclient.eth0~.pid", "eth0~"],
        );
        assert_eq!(
            warns(&root),
            vec!["dhclient is running and does not leave eth0~ alone: install \
                 deploy/network-managers/dhclient/antrea-vm-agent-uplink as \
                 /etc/dhcp/dhclient-enter-hooks.d/antrea-vm-agent-uplink and run `nothing \
                 (dhclient-script reads hooks at every run)`"
                .to_string()]
        );
        // Without interface arguments dhclient serves every interface.
        let root = Root::new();
        root.quiet_proc().process(78, "dhclient", &["/sbin/dhclient"]);
        let f = finding(&root, Manager::Dhclient);
        assert!(f.fights() && f.culprit.is_some(), "{f:?}");
    }

    #[test]
    fn dhclient_with_hook_does_not_warn() {
        let root = Root::new();
        root.quiet_proc()
            .process(78, "dhclient", &["/sbin/dhclient"])
            .install(&DHCLIENT_DROPIN);
        assert!(warns(&root).is_empty());
        // Red Hat: the single enter-hooks file sourcing or containing ours.
        let root = Root::new();
        root.quiet_proc()
            .process(78, "dhclient", &["/sbin/dhclient"])
            .write("/etc/dhcp/dhclient-enter-hooks", DHCLIENT_DROPIN.content);
        assert!(warns(&root).is_empty());
    }

    #[test]
    fn dhclient_for_the_nic_name_or_not_running_does_not_warn() {
        // ifupdown's dhclient for eth0: its script configures "eth0", the internal port.
        let root = Root::new();
        root.quiet_proc().process(
            79,
            "dhclient",
            &[
                "/sbin/dhclient",
                "-4",
                "-v",
                "-i",
                "-pf",
                "/run/dhclient.eth0.pid",
                "-lf",
                "/var/lib/dhcp/dhclient.eth0.leases",
                "-I",
                "-df",
                "/var/lib/dhcp/dhclient6.eth0.leases",
                "eth0",
            ],
        );
        let f = finding(&root, Manager::Dhclient);
        assert!(f.active && f.at_risk.is_empty(), "{f:?}");
        assert!(warns(&root).is_empty());
        // Installed, not running.
        let root = Root::new();
        root.write("/sbin/dhclient", "")
            .mkdir("/var/lib/dhcp")
            .quiet_proc();
        assert!(!finding(&root, Manager::Dhclient).active);
        assert!(warns(&root).is_empty());
    }

    #[test]
    fn dhclient_pid_files_stand_in_without_proc() {
        let root = Root::new();
        root.write("/run/dhclient.pid", "77\n");
        assert_eq!(finding(&root, Manager::Dhclient).at_risk, vec!["eth0~"]);
        let root = Root::new();
        root.write("/run/dhclient.eth0.pid", "77\n")
            .write("/var/run/dhclient-eth1.pid", "78\n");
        assert!(finding(&root, Manager::Dhclient).at_risk.is_empty());
    }

    #[test]
    fn dhclient_arguments() {
        let a = |v: &[&str]| dhclient_interfaces(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(a(&["dhclient", "-pf", "/run/x.pid", "-v", "eth0"]), vec!["eth0"]);
        assert!(a(&["dhclient", "-4", "-nw"]).is_empty());
        assert_eq!(
            a(&["dhclient", "-e", "IF_METRIC=100", "eth0~", "eth1"]),
            vec!["eth0~", "eth1"]
        );
    }

    // -- dhcpcd --------------------------------------------------------------------------------

    #[test]
    fn dhcpcd_in_manager_mode_without_snippet_warns_naming_the_file() {
        let root = Root::new();
        root.write("/etc/dhcpcd.conf", "duid\npersistent\n")
            .quiet_proc()
            .process(40, "dhcpcd", &["/usr/sbin/dhcpcd", "-q", "-b"]);
        assert_eq!(
            warns(&root),
            vec!["dhcpcd is running and does not leave eth0~ alone: append \
                 deploy/network-managers/dhcpcd/dhcpcd.conf.antrea-vm-agent to /etc/dhcpcd.conf \
                 and run `dhcpcd -n`"
                .to_string()]
        );
    }

    #[test]
    fn dhcpcd_not_running_or_limited_does_not_warn() {
        let root = Root::new();
        root.write("/etc/dhcpcd.conf", "duid\n").quiet_proc();
        assert!(warns(&root).is_empty());
        // Bound to one other interface.
        let root = Root::new();
        root.write("/etc/dhcpcd.conf", "duid\n").quiet_proc().process(
            40,
            "dhcpcd",
            &["dhcpcd", "-q", "eth1"],
        );
        assert!(warns(&root).is_empty());
        // An administrator's allowinterfaces that leaves out eth0~.
        let root = Root::new();
        root.write("/etc/dhcpcd.conf", "allowinterfaces eth[0-9]\n")
            .quiet_proc()
            .process(40, "dhcpcd", &["dhcpcd"]);
        assert!(warns(&root).is_empty());
    }

    // -- everything together -------------------------------------------------------------------

    #[test]
    fn empty_host_has_no_findings() {
        let root = Root::new();
        assert!(detect(root.path(), &eth0()).is_empty());
        assert!(check_before_attach(root.path(), "eth0").is_empty());
    }

    #[test]
    fn renamed_uplink_names_are_accepted() {
        let root = networkd_host();
        root.write("/etc/systemd/network/50-dhcp.network", DHCP_ETH_GLOB);
        let f = detect(root.path(), &["eth0~".to_string()]);
        assert_eq!(f[0].at_risk, vec!["eth0~".to_string()]);
    }

    /// Runs the real systemd-networkd in private network, mount and PID namespaces: a veth pair,
    /// DHCP from networkd's own server on one end, a `Name=eth*` client on the other (`eth0`),
    /// then the agent's rename (down, `eth0` to `eth0~`, up). Without the drop-in networkd
    /// configures `eth0~` again (DHCP on the uplink); with it, `eth0~` becomes unmanaged.
    /// Needs root, unshare(1) and systemd-networkd; without the binary it reports and returns.
    #[test]
    fn lab_networkd_real_daemon_leaves_renamed_uplink_alone_with_the_dropin() {
        let Some(networkd) = [
            "/lib/systemd/systemd-networkd",
            "/usr/lib/systemd/systemd-networkd",
        ]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file()) else {
            // CI machines have systemd (it is in the base image): a missing daemon there is a
            // failure, not a skip.
            assert!(
                std::env::var_os("CI").is_none(),
                "systemd-networkd is missing on a CI machine"
            );
            eprintln!("systemd-networkd not installed: real-daemon check not run");
            return;
        };
        let without = run_networkd_scenario(&networkd, false);
        assert!(
            without.contains("UPLINK configured") || without.contains("UPLINK configuring"),
            "{without}"
        );
        let with = run_networkd_scenario(&networkd, true);
        let summary = |s: &str| {
            s.lines()
                .filter(|l| l.starts_with("LEASE") || l.starts_with("UPLINK"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        eprintln!("without drop-in: {}; with: {}", summary(&without), summary(&with));
        assert!(with.contains("UPLINK unmanaged"), "{with}");
        assert!(with.contains("LEASE 10.77."), "{with}");
    }

    fn run_networkd_scenario(networkd: &Path, with_dropin: bool) -> String {
        let dir = tempfile::tempdir().expect("tempdir");
        let conf = dir.path().join("network");
        fs::create_dir_all(&conf).expect("mkdir");
        if with_dropin {
            fs::write(
                conf.join("01-antrea-vm-agent-uplink.network"),
                NETWORKD_DROPIN.content,
            )
            .expect("write");
        }
        fs::write(
            conf.join("10-client.network"),
            "[Match]\nName=eth*\n\n[Network]\nDHCP=ipv4\nLinkLocalAddressing=no\nIPv6AcceptRA=no\n",
        )
        .expect("write");
        fs::write(
            conf.join("20-server.network"),
            "[Match]\nName=srv0\n\n[Network]\nAddress=10.77.0.1/24\nDHCPServer=yes\n\
             LinkLocalAddressing=no\nIPv6AcceptRA=no\n\n[DHCPServer]\nPoolOffset=10\nPoolSize=20\n",
        )
        .expect("write");
        // Inside the namespaces: private /run/systemd and configuration directories, a
        // read-only sysfs of the new network namespace (networkd then does not wait for udev).
        let script = format!(
            r#"set -u
mount --make-rprivate /
mount -t tmpfs tmpfs /run/systemd
mount -t tmpfs tmpfs /usr/lib/systemd/network
[ -d /etc/systemd ] && mount -t tmpfs tmpfs /etc/systemd
mkdir -p /etc/systemd/network
mount --bind '{conf}' /etc/systemd/network
mount -t sysfs -o ro sysfs /sys
ip link set lo up
ip link add eth0 type veth peer name srv0
ip link set eth0 up; ip link set srv0 up
'{networkd}' >'{log}' 2>&1 &
for i in $(seq 1 100); do ip -4 -o addr show dev eth0 | grep -q 10.77.0 && break; sleep 0.2; done
echo "LEASE $(ip -4 -o addr show dev eth0 | awk '{{print $4}}')"
ip link set eth0 down; ip link set eth0 name 'eth0~'; ip link set 'eth0~' up
IDX=$(cat /sys/class/net/eth0~/ifindex)
for i in $(seq 1 50); do
  S=$(sed -n 's/^ADMIN_STATE=//p' /run/systemd/netif/links/$IDX 2>/dev/null)
  case "$S" in unmanaged|configured|configuring) [ $i -gt 10 ] && break;; esac
  sleep 0.2
done
echo "UPLINK $S"
"#,
            conf = conf.display(),
            networkd = networkd.display(),
            log = dir.path().join("networkd.log").display(),
        );
        let mut child = Command::new("unshare")
            .args([
                "--mount",
                "--net",
                "--pid",
                "--fork",
                "--kill-child",
                "--mount-proc",
            ])
            .args(["sh", "-c", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run unshare (needs root)");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match child.try_wait().expect("wait") {
                Some(_) => break,
                None if Instant::now() > deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("networkd scenario timed out");
                }
                None => std::thread::sleep(Duration::from_millis(100)),
            }
        }
        let out = child.wait_with_output().expect("output");
        let log = fs::read_to_string(dir.path().join("networkd.log")).unwrap_or_default();
        format!(
            "{}{}\n--- networkd log tail:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            log.lines().rev().take(30).collect::<Vec<_>>().join("\n")
        )
    }
}
