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

//!
//! One file per manager (`networkmanager`, `networkd`, `netplan`, `ifupdown`, `dhcp` for dhclient
//! and dhcpcd), over the root-directory view of `host_view` and the ini reader of `ini`; this file
//! holds the findings, the shipped drop-ins and the warnings made of them.

mod dhcp;
mod host_view;
mod ifupdown;
mod ini;
mod netplan;
mod networkd;
mod networkmanager;
#[cfg(test)]
mod tests;

use std::fmt;
use std::path::Path;

use self::dhcp::{detect_dhclient, detect_dhcpcd};
use self::host_view::{Host, Nic};
use self::ifupdown::detect_ifupdown;
pub use self::ini::IniError;
use self::netplan::detect_netplan;
use self::networkd::detect_networkd;
use self::networkmanager::detect_networkmanager;

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
    content: include_str!("../../../deploy/network-managers/NetworkManager/90-antrea-vm-agent.conf"),
};

/// systemd-networkd (and netplan with its default renderer): `Name=*~` with `Unmanaged=yes`.
pub const NETWORKD_DROPIN: DropIn = DropIn {
    source: "deploy/network-managers/systemd-networkd/01-antrea-vm-agent-uplink.network",
    install_as: "/etc/systemd/network/01-antrea-vm-agent-uplink.network",
    install: Install::Copy,
    activate: "networkctl reload",
    content: include_str!(
        "../../../deploy/network-managers/systemd-networkd/01-antrea-vm-agent-uplink.network"
    ),
};

/// Template (`@IFNAME@`) of a `.network` file that runs DHCP on the OVS internal port.
pub const NETWORKD_HOST_PORT_TEMPLATE: DropIn = DropIn {
    source: "deploy/network-managers/systemd-networkd/02-antrea-vm-agent-host-port.network.in",
    install_as: "/etc/systemd/network/02-antrea-vm-agent-host-@IFNAME@.network",
    install: Install::Copy,
    activate: "networkctl reload",
    content: include_str!(
        "../../../deploy/network-managers/systemd-networkd/02-antrea-vm-agent-host-port.network.in"
    ),
};

/// dhclient: an enter hook that stops dhclient-script for interfaces named `*~`.
pub const DHCLIENT_DROPIN: DropIn = DropIn {
    source: "deploy/network-managers/dhclient/antrea-vm-agent-uplink",
    install_as: "/etc/dhcp/dhclient-enter-hooks.d/antrea-vm-agent-uplink",
    install: Install::Copy,
    activate: "nothing (dhclient-script reads hooks at every run)",
    content: include_str!("../../../deploy/network-managers/dhclient/antrea-vm-agent-uplink"),
};

/// dhcpcd: `denyinterfaces *~`, appended to dhcpcd.conf.
pub const DHCPCD_DROPIN: DropIn = DropIn {
    source: "deploy/network-managers/dhcpcd/dhcpcd.conf.antrea-vm-agent",
    install_as: "/etc/dhcpcd.conf",
    install: Install::Append,
    activate: "dhcpcd -n",
    content: include_str!("../../../deploy/network-managers/dhcpcd/dhcpcd.conf.antrea-vm-agent"),
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
