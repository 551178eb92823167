//! netplan: the YAML files that would rename or configure the NIC by driver or MAC (a hazard,
//! netplan has no drop-in of its own).

use std::collections::BTreeMap;

use super::host_view::{Host, Nic};
use super::{Manager, ManagerFinding};

pub(super) const NETPLAN_DIRS: [&str; 3] = ["/etc/netplan", "/run/netplan", "/lib/netplan"];

pub(super) fn detect_netplan(host: &Host, nics: &[Nic]) -> Option<ManagerFinding> {
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
