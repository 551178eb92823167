//! The DHCP clients run on their own: dhclient (its command line and the exit hook that stops it
//! for uplinks) and dhcpcd (manager mode, its `denyinterfaces`/`allowinterfaces`).

use super::host_view::{evidence_of_procs, Host, Nic, Proc};
use super::ini::glob_match;
use super::{Manager, ManagerFinding, DHCLIENT_DROPIN, DHCPCD_DROPIN};

/// ISC dhclient options that take a value (Debian and Red Hat builds).
pub(super) const DHCLIENT_VALUE_OPTS: [&str; 16] = [
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
pub(super) fn dhclient_interfaces(args: &[String]) -> Vec<String> {
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

pub(super) fn detect_dhclient(host: &Host, nics: &[Nic]) -> Option<ManagerFinding> {
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

pub(super) fn detect_dhcpcd(host: &Host, nics: &[Nic]) -> Option<ManagerFinding> {
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
