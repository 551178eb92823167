//! The FQDN clause flows: for each placed rule with FQDN peers and each address its names
//! resolve to, `table=<rule table>, priority=<rule priority>, ct_state=+trk, ip, nw_dst=<IP>`
//! (`ipv6_dst` for IPv6) with `conjunction(<rule id>, 2/<n>)`; rules sharing a table and
//! priority share the flow (one conjunction action each). Pure.
//!
//! Why `ct_state=+trk`: it is always true in the rule tables (conntrack ran before them), and it
//! gives these flows identities of their own, distinct from every flow the rule compiler owns
//! (the compiler merges clause flows of rules sharing a priority). So the DNS path can add and
//! remove them without the compiler, and the compiler can rebuild without knowing the cache.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipnet::{Ipv4Net, Ipv6Net};

use super::cache::FqdnCache;
use crate::ovs::openflow::{ct_state, normalize_flow, Action, CtStateMatch, Flow, FlowKey, FlowMod, Match};
use crate::policy::compiler::FqdnPlacement;
use crate::policy::flowset::{self, FlowSet};
use crate::policy::fqdn_selector::matches;
use crate::policy::pipeline::fields::FQDN_COOKIE;

/// The placed FQDN rules, grouped by (table, priority).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placements {
    groups: BTreeMap<(u8, u16), Vec<FqdnPlacement>>,
    selectors: Vec<String>,
}

impl Placements {
    pub fn new(placements: Vec<FqdnPlacement>) -> Self {
        let mut groups: BTreeMap<(u8, u16), Vec<FqdnPlacement>> = BTreeMap::new();
        let mut selectors = BTreeSet::new();
        for p in placements {
            selectors.extend(p.selectors.iter().cloned());
            groups.entry((p.table, p.priority)).or_default().push(p);
        }
        Placements {
            groups,
            selectors: selectors.into_iter().collect(),
        }
    }

    /// Every selector of every rule, distinct.
    pub fn selectors(&self) -> &[String] {
        &self.selectors
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Rules in all.
    pub fn len(&self) -> usize {
        self.groups.values().map(Vec::len).sum()
    }
}

/// Whether a rule selects `ip`: one of its selectors matches a cached name holding `ip`.
fn selects(p: &FqdnPlacement, cache: &FqdnCache, ip: &IpAddr) -> bool {
    cache
        .names_with_ip(ip)
        .any(|name| p.selectors.iter().any(|s| matches(s, name)))
}

/// The clause match of one address.
pub fn clause_match(ip: IpAddr) -> Match {
    let m = Match::new().ct_state(CtStateMatch::of(&[(ct_state::TRK, true)]));
    match ip {
        IpAddr::V4(a) => m.ipv4().ipv4_dst(Ipv4Net::from(a)),
        IpAddr::V6(a) => m.ipv6().ipv6_dst(Ipv6Net::from(a)),
    }
}

fn clause_flow(table: u8, priority: u16, ip: IpAddr, rules: &[&FqdnPlacement]) -> Flow {
    let mut f = Flow::new(table, priority, clause_match(ip)).cookie(FQDN_COOKIE);
    let mut acts: Vec<Action> = rules
        .iter()
        .map(|p| Action::Conjunction {
            id: p.conj_id,
            clause: 2,
            n_clauses: p.n_clauses,
        })
        .collect();
    acts.sort();
    acts.dedup();
    f.actions = acts;
    normalize_flow(&f)
}

/// Every FQDN clause flow for the placements and the cache.
pub fn desired(placements: &Placements, cache: &FqdnCache) -> FlowSet {
    let mut flows = Vec::new();
    for (&(table, priority), rules) in &placements.groups {
        let mut by_ip: BTreeMap<IpAddr, Vec<&FqdnPlacement>> = BTreeMap::new();
        for p in rules {
            let ips: BTreeSet<IpAddr> = p.selectors.iter().flat_map(|s| cache.ips_for(s)).collect();
            for ip in ips {
                by_ip.entry(ip).or_default().push(p);
            }
        }
        flows.extend(
            by_ip
                .into_iter()
                .map(|(ip, rs)| clause_flow(table, priority, ip, &rs)),
        );
    }
    flowset::flow_set(flows)
}

/// The FQDN clause flows a rule bundle must carry so that a new or moved rule never exists
/// without the addresses already cached for its names: for every (table, priority) holding a
/// placement that is not in `committed` (the placements the switch's rule flows match), every
/// clause flow of that group under `placements`, from `cache` (a snapshot). Adds only: flows of
/// groups that lost rules are left to the FQDN controller, which re-reads the switch when the
/// placements change and removes what no rule wants.
pub fn flows_for_new_placements(
    committed: &[FqdnPlacement],
    placements: &[FqdnPlacement],
    cache: &FqdnCache,
) -> Vec<FlowMod> {
    let old: BTreeSet<&FqdnPlacement> = committed.iter().collect();
    let groups: BTreeSet<(u8, u16)> = placements
        .iter()
        .filter(|p| !old.contains(p))
        .map(|p| (p.table, p.priority))
        .collect();
    if groups.is_empty() || cache.is_empty() {
        return Vec::new();
    }
    let affected: Vec<FqdnPlacement> = placements
        .iter()
        .filter(|p| groups.contains(&(p.table, p.priority)))
        .cloned()
        .collect();
    desired(&Placements::new(affected), cache)
        .into_values()
        .map(FlowMod::add)
        .collect()
}

/// The flow_mods that bring the flows of `ips` (addresses whose names changed) in line with the
/// cache, applied to `installed` (which is updated as if they were committed; the caller keeps
/// a copy if it must undo). Costs the rules times the addresses, not the whole cache.
pub fn delta_for_ips(
    placements: &Placements,
    cache: &FqdnCache,
    ips: &BTreeSet<IpAddr>,
    installed: &mut FlowSet,
) -> Vec<FlowMod> {
    let mut mods = Vec::new();
    for (&(table, priority), rules) in &placements.groups {
        for &ip in ips {
            let wanted: Vec<&FqdnPlacement> = rules.iter().filter(|p| selects(p, cache, &ip)).collect();
            let key = FlowKey {
                table,
                priority,
                matches: normalize_flow(&Flow::new(table, priority, clause_match(ip))).matches,
            };
            if wanted.is_empty() {
                if let Some(old) = installed.remove(&key) {
                    mods.push(FlowMod::delete_strict(old));
                }
                continue;
            }
            let flow = clause_flow(table, priority, ip, &wanted);
            if installed.get(&key) != Some(&flow) {
                installed.insert(key, flow.clone());
                mods.push(FlowMod::add(flow));
            }
        }
    }
    mods
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fqdn::dns::Answer;

    fn placement(conj_id: u32, priority: u16, selectors: &[&str]) -> FqdnPlacement {
        FqdnPlacement {
            conj_id,
            table: 4,
            priority,
            n_clauses: 2,
            selectors: selectors.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn answer(name: &str, ip: &str) -> Answer {
        Answer {
            name: name.into(),
            ip: ip.parse().unwrap(),
            ttl: 60,
        }
    }

    #[test]
    fn delta_equals_full_rebuild_and_rules_sharing_a_priority_share_flows() {
        let placements = Placements::new(vec![
            placement(5, 100, &["*.a.test"]),
            placement(6, 100, &["x.a.test"]),
            placement(7, 90, &["*.b.test"]),
        ]);
        let mut cache = FqdnCache::new(0);
        let mut installed = FlowSet::new();
        let ch = cache.record(
            &[answer("x.a.test", "10.0.0.1"), answer("y.b.test", "fd00::1")],
            0,
            placements.selectors(),
        );
        let ips = ch.added.iter().map(|(_, ip)| *ip).collect();
        let mods = delta_for_ips(&placements, &cache, &ips, &mut installed);
        assert_eq!(mods.len(), 2);
        assert_eq!(installed, desired(&placements, &cache));
        let shared = installed.values().find(|f| f.priority == 100).unwrap();
        assert_eq!(shared.actions.len(), 2, "{shared:?}");
        // Expiry removes them again.
        let ch = cache.expire(61_000);
        let ips = ch.removed.iter().map(|(_, ip)| *ip).collect();
        let mods = delta_for_ips(&placements, &cache, &ips, &mut installed);
        assert_eq!(mods.len(), 2);
        assert!(installed.is_empty());
    }

    #[test]
    fn a_new_or_moved_rule_carries_its_cached_addresses_and_its_group_s() {
        let allow = placement(5, 100, &["*.a.test"]);
        let other = placement(6, 90, &["*.b.test"]);
        let mut cache = FqdnCache::new(0);
        let selectors = vec!["*.a.test".to_string(), "*.b.test".to_string()];
        cache.record(
            &[answer("x.a.test", "10.0.0.1"), answer("y.b.test", "10.0.0.2")],
            0,
            &selectors,
        );
        let committed = vec![allow.clone(), other.clone()];
        // Nothing new: nothing to carry.
        assert!(flows_for_new_placements(&committed, &committed, &cache).is_empty());
        // A drop rule sharing the allow rule's priority: the shared flow with both conjunctions.
        let drop = placement(7, 100, &["x.a.test"]);
        let now = vec![allow.clone(), other.clone(), drop.clone()];
        let mods = flows_for_new_placements(&committed, &now, &cache);
        let expected: Vec<FlowMod> = desired(&Placements::new(vec![allow.clone(), drop.clone()]), &cache)
            .into_values()
            .map(FlowMod::add)
            .collect();
        assert_eq!(mods, expected);
        assert_eq!(mods.len(), 1);
        // The other rule moved to a new priority: its flows at the new one.
        let moved = placement(6, 95, &["*.b.test"]);
        let mods = flows_for_new_placements(&committed, &[allow.clone(), moved.clone()], &cache);
        assert_eq!(
            mods,
            desired(&Placements::new(vec![moved]), &cache)
                .into_values()
                .map(FlowMod::add)
                .collect::<Vec<_>>()
        );
        // At start nothing is committed: every rule's flows.
        assert_eq!(flows_for_new_placements(&[], &committed, &cache).len(), 2);
    }

    #[test]
    fn clause_flows_render_as_expected() {
        let placements = Placements::new(vec![placement(5, 14900, &["*.a.test"])]);
        let mut cache = FqdnCache::new(0);
        cache.record(&[answer("x.a.test", "10.0.0.1")], 0, placements.selectors());
        let flows = desired(&placements, &cache);
        let text: Vec<String> = flows
            .values()
            .map(|f| crate::ovs::openflow::render::render_flow(f, &Default::default()))
            .collect();
        assert_eq!(
            text,
            vec!["cookie=0x2f000000000, table=4, priority=14900,ct_state=+trk,ip,nw_dst=10.0.0.1 actions=conjunction(5,2/2)"]
        );
    }
}
