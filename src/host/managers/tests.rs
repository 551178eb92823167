//! Tests of the network-manager checks: each manager's detection against a temporary root that
//! stands in for `/`, the shipped drop-ins, the ini reader and globs, and (as a lab test) the
//! real systemd-networkd with and without the drop-in.

use super::dhcp::*;
use super::ini::*;
use super::networkd::*;
use super::networkmanager::*;
use super::*;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::PathBuf;
use std::process::Command;

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
    root.write("/etc/dhcpcd.conf", "duid\n")
        .quiet_proc()
        .process(40, "dhcpcd", &["dhcpcd", "-q", "eth1"]);
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

// -- the real systemd-networkd (root: the `lab` feature) -------------------------------------

#[cfg(feature = "lab")]
mod lab {
    use super::*;
    use std::process::Stdio;
    use std::time::{Duration, Instant};

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
