//! systemd-networkd: its `.network` files (with drop-ins and masking) in match order, the
//! `[Match]` rules, and whether the first file that matches a renamed uplink leaves it alone;
//! also the hazard of a hardware match that would put DHCP on the internal port.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

use super::host_view::{mark_running, Host, Nic};
use super::ini::{glob_match, last_value, parse_ini, systemd_bool, Section};
use super::{Manager, ManagerFinding, NETWORKD_DROPIN, NETWORKD_HOST_PORT_TEMPLATE};

pub(super) const NETWORKD_DIRS: [&str; 5] = [
    "/etc/systemd/network",
    "/run/systemd/network",
    "/usr/local/lib/systemd/network",
    "/usr/lib/systemd/network",
    "/lib/systemd/network",
];

/// A `.network` file with its drop-ins applied.
#[derive(Debug, Clone)]
pub(super) struct NetworkFile {
    pub(super) path: String,
    pub(super) sections: Vec<Section>,
}

impl NetworkFile {
    pub(super) fn unmanaged(&self) -> bool {
        last_value(&self.sections, "Link", "Unmanaged")
            .and_then(systemd_bool)
            .unwrap_or(false)
    }

    pub(super) fn dhcp(&self) -> bool {
        last_value(&self.sections, "Network", "DHCP").is_some_and(|v| {
            matches!(
                v.to_ascii_lowercase().as_str(),
                "yes" | "true" | "1" | "on" | "both" | "ipv4" | "ipv6" | "y" | "t"
            )
        })
    }

    /// The [Match] keys that an OVS internal port cannot satisfy, present in this file.
    pub(super) fn hardware_match_keys(&self) -> Vec<String> {
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
pub(super) struct LinkProps<'a> {
    pub(super) name: &'a str,
    pub(super) driver: Option<Option<&'a str>>,
    pub(super) mac: Option<Option<&'a str>>,
    pub(super) permanent_mac: Option<Option<&'a str>>,
    pub(super) kind: Option<Option<&'a str>>,
    pub(super) path: Option<Option<&'a str>>,
    pub(super) link_type: &'a str,
}

/// systemd's `net_condition_test_strv`: `!`-prefixed assignments are negative patterns; with
/// any positive pattern one of them must match, and no negative one may.
pub(super) fn strv_condition(patterns: &[(bool, String)], value: Option<&str>) -> bool {
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

pub(super) fn network_file_matches(file: &NetworkFile, link: &LinkProps<'_>) -> bool {
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
pub(super) fn networkd_files(host: &Host) -> Vec<NetworkFile> {
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

pub(super) fn first_match<'a>(files: &'a [NetworkFile], link: &LinkProps<'_>) -> Option<&'a NetworkFile> {
    files.iter().find(|f| network_file_matches(f, link))
}

pub(super) fn detect_networkd(host: &Host, nics: &[Nic]) -> Option<ManagerFinding> {
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
pub(super) fn networkd_host_port_hazard(files: &[NetworkFile], nic: &Nic) -> Option<String> {
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
