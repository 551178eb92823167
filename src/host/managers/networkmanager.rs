//! NetworkManager: its configuration files in reading order, its device specs
//! (`match-device`, `unmanaged-devices`), and whether it leaves a renamed uplink unmanaged.

use super::host_view::{mark_running, Host, Nic};
use super::ini::{glob_match, parse_ini, systemd_bool, Op, Section};
use super::{Manager, ManagerFinding, NETWORKMANAGER_DROPIN};

/// A device as NetworkManager's device specs see it.
pub(super) struct NmDevice<'a> {
    pub(super) iface: &'a str,
    /// NetworkManager's device type (`nmcli -f GENERAL.TYPE`): "ethernet" for a NIC.
    pub(super) kind: &'a str,
    pub(super) driver: Option<&'a str>,
    pub(super) mac: Option<&'a str>,
}

/// `nm_match_spec_device` semantics: a list of only `except:` specs matches unless one of them
/// does; otherwise it matches when a positive spec matches and no `except:` spec does.
pub(super) fn nm_spec_matches(specs: &[String], dev: &NmDevice<'_>) -> bool {
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

pub(super) fn nm_one_spec(spec: &str, dev: &NmDevice<'_>) -> bool {
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

pub(super) fn is_mac(s: &str) -> bool {
    let parts: Vec<&str> = s.split(':').collect();
    parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()))
}

pub(super) fn split_specs(v: &str) -> Vec<String> {
    v.split([',', ';'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// NetworkManager's configuration files in reading order: `/usr/lib/…/conf.d`, `/run/…/conf.d`,
/// `NetworkManager.conf`, `/etc/…/conf.d`, `NetworkManager-intern.conf`. A `conf.d` file name in
/// `/etc` shadows the same name in `/run` and `/usr/lib`; one in `/run` shadows `/usr/lib`.
pub(super) fn nm_config_files(host: &Host) -> Vec<(String, Vec<Section>)> {
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
pub(super) fn nm_unmanaged(files: &[(String, Vec<Section>)], dev: &NmDevice<'_>) -> (bool, Option<String>) {
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

pub(super) fn detect_networkmanager(host: &Host, nics: &[Nic]) -> Option<ManagerFinding> {
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
