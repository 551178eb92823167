//! ifupdown: the `/etc/network/interfaces` stanzas (with `source` and `source-directory`) that
//! name a renamed uplink (`allow-hotplug` and friends are a hazard).

use std::collections::BTreeSet;

use super::host_view::{Host, Nic};
use super::ini::glob_match;
use super::{Manager, ManagerFinding};

/// The `allow-*` and `auto` classes of an interface in /etc/network/interfaces and the files it
/// sources.
pub(super) fn ifupdown_classes(host: &Host, iface: &str) -> BTreeSet<(String, String)> {
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
pub(super) fn expand_source(host: &Host, arg: &str, directory: bool) -> Vec<String> {
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

pub(super) fn detect_ifupdown(host: &Host, nics: &[Nic]) -> Option<ManagerFinding> {
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
