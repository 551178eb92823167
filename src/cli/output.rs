//! Rendering of the agent API's documents for people: aligned tables like antctl's (columns
//! padded with spaces, `<NONE>` for an empty cell, long member lists shortened), and JSON/YAML.
//! Every member kind is rendered by name, so ExternalEntity members never break a table
//! (upstream antctl panics on them, D9).

use crate::views::{
    AgentInfoView, FlowsView, GroupView, InterfaceView, MemberView, NetworkPolicyView, RuleCounters, RuleView,
};

/// A table: a header row and rows of cells.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Self {
        Table {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Columns separated by at least three spaces; trailing spaces trimmed.
    pub fn render(&self) -> String {
        let cell = |s: &str| {
            if s.is_empty() {
                "<NONE>".to_string()
            } else {
                s.to_string()
            }
        };
        let rows: Vec<Vec<String>> = std::iter::once(self.header.clone())
            .chain(self.rows.iter().map(|r| r.iter().map(|c| cell(c)).collect()))
            .collect();
        let n = self.header.len();
        let widths: Vec<usize> = (0..n)
            .map(|i| {
                rows.iter()
                    .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for r in &rows {
            let mut line = String::new();
            for (i, w) in widths.iter().enumerate() {
                let c = r.get(i).map_or("", String::as_str);
                line.push_str(c);
                if i + 1 < n {
                    line.push_str(&" ".repeat(w - c.chars().count() + 3));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// At most `max` items joined with `, `, then `+ N more...`.
pub fn shorten(items: &[String], max: usize) -> String {
    if items.len() <= max {
        return items.join(", ");
    }
    format!("{} + {} more...", items[..max].join(", "), items.len() - max)
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

fn source(p: &NetworkPolicyView) -> String {
    p.source_ref
        .as_ref()
        .map(|s| format!("{}:{}", s.short_type(), s.qualified_name()))
        .unwrap_or_default()
}

/// antctl's columns: `NAME APPLIED-TO RULES SOURCE TIER-PRIORITY PRIORITY`.
pub fn policies_table(policies: &[NetworkPolicyView]) -> String {
    let mut t = Table::new(&[
        "NAME",
        "APPLIED-TO",
        "RULES",
        "SOURCE",
        "TIER-PRIORITY",
        "PRIORITY",
    ]);
    for p in policies {
        let mut applied_to = p.applied_to_groups.clone();
        if applied_to.is_empty() {
            let mut per_rule: Vec<String> =
                p.rules.iter().flat_map(|r| r.applied_to_groups.clone()).collect();
            per_rule.sort();
            per_rule.dedup();
            applied_to = per_rule;
        }
        t.row(vec![
            p.name.clone(),
            shorten(&applied_to, 3),
            p.rules.len().to_string(),
            source(p),
            opt(p.tier_priority),
            opt(p.priority),
        ]);
    }
    t.render()
}

fn peers(r: &RuleView) -> String {
    let Some(p) = r.from.as_ref().or(r.to.as_ref()) else {
        return String::new();
    };
    let mut items: Vec<String> = p
        .address_groups
        .iter()
        .map(|g| format!("AddressGroup:{g}"))
        .collect();
    for b in &p.ip_blocks {
        if b.except.is_empty() {
            items.push(b.cidr.clone());
        } else {
            items.push(format!("{} except {}", b.cidr, b.except.join(" ")));
        }
    }
    items.extend(p.fqdns.iter().map(|f| format!("FQDN:{f}")));
    items.extend(p.to_services.iter().map(|s| format!("Service:{s}")));
    items.extend(p.label_identities.iter().map(|l| format!("LabelIdentity:{l}")));
    shorten(&items, 3)
}

fn counter(stats: Option<RuleCounters>, pick: fn(&RuleCounters) -> u64) -> String {
    stats
        .map(|s| pick(&s).to_string())
        .unwrap_or_else(|| "-".to_string())
}

/// One policy with its rules and their counters (`get networkpolicy NAME`).
pub fn policy_detail(p: &NetworkPolicyView) -> String {
    let mut out = policies_table(std::slice::from_ref(p));
    out.push('\n');
    let mut t = Table::new(&[
        "RULE",
        "DIRECTION",
        "ACTION",
        "PEERS",
        "SERVICES",
        "STATE",
        "PACKETS",
        "BYTES",
        "SESSIONS",
    ]);
    let mut notes = Vec::new();
    for (i, r) in p.rules.iter().enumerate() {
        let name = if r.name.is_empty() {
            format!("#{i}")
        } else {
            r.name.clone()
        };
        let mut services = if r.services.is_empty() {
            "any".to_string()
        } else {
            shorten(&r.services, 3)
        };
        if !r.l7_protocols.is_empty() {
            services.push_str(&format!(" ({})", shorten(&r.l7_protocols, 2)));
        }
        notes.extend(r.not_enforced.iter().map(|m| format!("{name}: {m}")));
        let state = if r.state.is_empty() { "-" } else { &r.state };
        t.row(vec![
            name,
            r.direction.clone(),
            r.action.clone(),
            peers(r),
            services,
            state.to_string(),
            counter(r.stats, |s| s.packets),
            counter(r.stats, |s| s.bytes),
            counter(r.stats, |s| s.sessions),
        ]);
    }
    out.push_str(&t.render());
    for n in notes {
        out.push_str(&format!("not enforced as written: {n}\n"));
    }
    if let Some(e) = &p.stats_error {
        out.push_str(&format!("counters unavailable: {e}\n"));
    } else if p.effective_rules == 0 {
        out.push_str("no rule of this policy applies to an interface of this node (no counters)\n");
    }
    out
}

fn member_refs(members: &[MemberView]) -> Vec<String> {
    members.iter().map(MemberView::reference).collect()
}

/// `NAME MEMBERS` (antctl's `NAME PODS`, for any member kind).
pub fn applied_to_groups_table(groups: &[GroupView]) -> String {
    let mut t = Table::new(&["NAME", "MEMBERS"]);
    for g in groups {
        t.row(vec![g.name.clone(), shorten(&member_refs(&g.members), 3)]);
    }
    t.render()
}

/// `NAME IPS MEMBERS`.
pub fn address_groups_table(groups: &[GroupView]) -> String {
    let mut t = Table::new(&["NAME", "IPS", "MEMBERS"]);
    for g in groups {
        let ips: Vec<String> = g
            .members
            .iter()
            .flat_map(|m| m.ips.iter().map(ToString::to_string))
            .collect();
        t.row(vec![
            g.name.clone(),
            shorten(&ips, 3),
            shorten(&member_refs(&g.members), 3),
        ]);
    }
    t.render()
}

/// One flow per line, like antctl.
pub fn flows_text(f: &FlowsView) -> String {
    let mut out = String::new();
    for line in &f.flows {
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// `NAME OFPORT UPLINK UPLINK-OFPORT IPS EXTERNAL-ENTITY`.
pub fn interfaces_table(list: &[InterfaceView]) -> String {
    let mut t = Table::new(&[
        "NAME",
        "OFPORT",
        "UPLINK",
        "UPLINK-OFPORT",
        "IPS",
        "EXTERNAL-ENTITY",
    ]);
    for i in list {
        let ips: Vec<String> = i.ips.iter().map(ToString::to_string).collect();
        t.row(vec![
            i.name.clone(),
            i.ofport.to_string(),
            i.uplink_name.clone(),
            i.uplink_ofport.to_string(),
            ips.join(","),
            format!("{}/{}", i.external_entity.namespace, i.external_entity.name),
        ]);
    }
    t.render()
}

/// antctl's `get fqdncache` columns.
pub fn fqdn_cache_table(list: &[crate::views::FqdnCacheView]) -> String {
    let mut t = Table::new(&["FQDN", "ADDRESS", "EXPIRATION TIME"]);
    for r in list {
        t.row(vec![
            r.fqdn_name.clone(),
            r.ip_address.clone(),
            r.expiration_time.clone(),
        ]);
    }
    t.render()
}

/// antctl's agentinfo columns (without the Pod ones), then one row per actor.
pub fn agent_info_table(a: &AgentInfoView) -> String {
    let mut t = Table::new(&[
        "NODE",
        "STATUS",
        "READY",
        "NETWORK-POLICIES",
        "ADDRESS-GROUPS",
        "APPLIED-TO-GROUPS",
        "INTERFACES",
        "FLOWS",
        "VERSION",
    ]);
    t.row(vec![
        a.node_name.clone(),
        a.status.clone(),
        a.ready.to_string(),
        a.network_policies.to_string(),
        a.address_groups.to_string(),
        a.applied_to_groups.to_string(),
        a.interfaces.to_string(),
        a.flows.to_string(),
        a.version.clone(),
    ]);
    let mut out = t.render();
    out.push('\n');
    let mut actors = Table::new(&["ACTOR", "ALIVE", "HEALTHY", "RESTARTS", "LAST-ERROR"]);
    for x in &a.actors {
        actors.row(vec![
            x.actor.clone(),
            x.alive.to_string(),
            x.healthy.map_or_else(|| "unknown".to_string(), |h| h.to_string()),
            x.restarts.to_string(),
            x.last_error.as_ref().map(ToString::to_string).unwrap_or_default(),
        ]);
    }
    out.push_str(&actors.render());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::{EntityView, SourceRefView};

    #[test]
    fn tables_align_and_mark_empty_cells() {
        let mut t = Table::new(&["NAME", "MEMBERS"]);
        t.row(vec!["a".into(), String::new()]);
        t.row(vec!["longer-name".into(), "x".into()]);
        assert_eq!(
            t.render(),
            "NAME          MEMBERS\na             <NONE>\nlonger-name   x\n"
        );
        assert_eq!(
            shorten(&["a".into(), "b".into(), "c".into(), "d".into()], 2),
            "a, b + 2 more..."
        );
    }

    #[test]
    fn groups_of_external_entities_render() {
        let g = GroupView {
            name: "atg-1".into(),
            uid: "atg-1".into(),
            members: vec![MemberView {
                kind: "ExternalEntity".into(),
                namespace: "vm-ns".into(),
                name: "vm1-3e616".into(),
                ips: vec!["10.0.0.2".parse().expect("ip")],
                ports: vec![],
            }],
        };
        let out = applied_to_groups_table(std::slice::from_ref(&g));
        assert!(out.contains("atg-1   ExternalEntity vm-ns/vm1-3e616"), "{out}");
        let out = address_groups_table(&[g]);
        assert!(out.contains("10.0.0.2"), "{out}");
        let i = InterfaceView {
            name: "eth0".into(),
            ofport: 2,
            uplink_name: "eth0~".into(),
            uplink_ofport: 1,
            ips: vec!["10.0.0.2".parse().expect("ip")],
            external_entity: EntityView {
                namespace: "vm-ns".into(),
                name: "vm1-3e616".into(),
            },
        };
        assert!(interfaces_table(&[i]).contains("vm-ns/vm1-3e616"));
    }

    #[test]
    fn a_policy_shows_its_rules_and_counters() {
        let p = NetworkPolicyView {
            name: "uid-1".into(),
            uid: "uid-1".into(),
            generation: 1,
            source_ref: Some(SourceRefView {
                policy_type: "AntreaClusterNetworkPolicy".into(),
                namespace: String::new(),
                name: "drop-ssh".into(),
                uid: "uid-1".into(),
            }),
            applied_to_groups: vec!["atg-1".into()],
            priority: Some(5.0),
            tier_priority: Some(250),
            rules: vec![RuleView {
                name: "r1".into(),
                direction: "In".into(),
                action: "Drop".into(),
                priority: 0,
                from: Some(crate::views::PeerView {
                    ip_blocks: vec![crate::views::IpBlockView {
                        cidr: "10.0.0.0/8".into(),
                        except: vec![],
                    }],
                    ..Default::default()
                }),
                to: None,
                services: vec!["TCP/22".into()],
                applied_to_groups: vec![],
                enable_logging: false,
                log_label: String::new(),
                l7_protocols: vec![],
                stats: Some(RuleCounters {
                    packets: 3,
                    bytes: 180,
                    sessions: 3,
                }),
                state: "Enforced".into(),
                not_enforced: vec![],
            }],
            effective_rules: 1,
            stats_error: None,
        };
        let out = policy_detail(&p);
        assert!(
            out.contains("uid-1   atg-1        1       AntreaClusterNetworkPolicy:drop-ssh   250"),
            "{out}"
        );
        assert!(
            out.contains(
                "r1     In          Drop     10.0.0.0/8   TCP/22     Enforced   3         180     3"
            ),
            "{out}"
        );
        let mut l7 = p.clone();
        l7.rules[0].action = "Allow".into();
        l7.rules[0].l7_protocols = vec!["HTTP method=GET path=/ok".into()];
        l7.rules[0].state = "NotEnforcedAsWritten".into();
        l7.rules[0].not_enforced = vec!["rule \"r1\" (rules[0]): l7Protocols ...".into()];
        let out = policy_detail(&l7);
        assert!(
            out.contains("TCP/22 (HTTP method=GET path=/ok)   NotEnforcedAsWritten"),
            "{out}"
        );
        assert!(
            out.contains("not enforced as written: r1: rule \"r1\" (rules[0]): l7Protocols ...\n"),
            "{out}"
        );
    }
}
