//! Desired flow sets and the flow_mods that turn one set into another. Pure.
//!
//! A flow set maps each flow's identity (table, priority, match) to the flow. Cookies carry the
//! round, so comparing two flows ignores the cookie's round only where the caller asks for it.

use std::collections::BTreeMap;

use crate::attachment::AttachedInterface;
use crate::bypass::BypassRule;
use crate::pipeline::fields::{round_cookie, ROUND_MASK};
use crate::pipeline::{self, PipelineOptions};
use ovs_openflow::normalize_flow;
use ovs_openflow::{Flow, FlowKey, FlowMod};

/// Flows keyed by identity.
pub type FlowSet = BTreeMap<FlowKey, Flow>;

/// Builds a flow set; a later flow with the same identity replaces an earlier one. Flows are put
/// in the form OVS stores and reports them (e.g. a /0 prefix is no match at all), so identities
/// and contents here compare equal to a decoded flow-stats dump of the switch.
pub fn flow_set(flows: impl IntoIterator<Item = Flow>) -> FlowSet {
    flows
        .into_iter()
        .map(|f| {
            let f = normalize_flow(&f);
            (f.key(), f)
        })
        .collect()
}

/// Whether two flows are the same apart from the round in their cookies: replacing one by the
/// other would change nothing but the round (and reset its counters), so it is not done.
pub fn same_but_round(a: &Flow, b: &Flow) -> bool {
    // Field by field (no copy of the flow): destructuring makes a new field a compile error.
    let Flow {
        table,
        priority,
        matches,
        cookie,
        idle_timeout,
        hard_timeout,
        actions,
        goto_table,
    } = a;
    cookie & !ROUND_MASK == b.cookie & !ROUND_MASK
        && *table == b.table
        && *priority == b.priority
        && *idle_timeout == b.idle_timeout
        && *hard_timeout == b.hard_timeout
        && *goto_table == b.goto_table
        && *matches == b.matches
        && *actions == b.actions
}

/// Everything the flow installer owns for the given state.
pub fn desired_flows(
    opts: PipelineOptions,
    bypass: &[BypassRule],
    interfaces: &[AttachedInterface],
    dns_ports: &std::collections::BTreeSet<u32>,
) -> FlowSet {
    let mut flows = pipeline::init_flows(opts);
    flows.extend(pipeline::dns_intercept_port_flows(
        opts.round,
        dns_ports.iter().copied(),
    ));
    flows.extend(pipeline::bypass_flows(opts.round, bypass));
    for iface in interfaces {
        flows.extend(pipeline::uplink_pair_flows(
            opts.round,
            iface.ofport,
            iface.uplink_ofport,
        ));
    }
    flow_set(flows)
}

/// The flow_mods that change `installed` into `desired`: ADD for new or changed flows (an ADD
/// replaces a flow with the same identity in place, so traffic never sees a gap), DELETE_STRICT
/// for flows no longer wanted. Unchanged flows produce nothing, also when only the round in
/// their cookie differs (their counters are kept). `installed` may be a decoded dump of the
/// switch: this is how the agent takes over what an earlier run installed.
pub fn diff(installed: &FlowSet, desired: &FlowSet) -> Vec<FlowMod> {
    let mut mods: Vec<FlowMod> = desired
        .iter()
        .filter(|(key, flow)| needs_add(installed, key, flow))
        .map(|(_, flow)| FlowMod::add(flow.clone()))
        .collect();
    mods.extend(deletes(installed, desired));
    mods
}

/// [`diff`], consuming `desired`: its flows move into the ADDs instead of being copied, and the
/// map's memory is freed as it goes (a take-over of 150,000 flows would otherwise hold both).
pub fn diff_into(installed: &FlowSet, desired: FlowSet) -> Vec<FlowMod> {
    let deletes = deletes(installed, &desired);
    let mut mods: Vec<FlowMod> = desired
        .into_iter()
        .filter(|(key, flow)| needs_add(installed, key, flow))
        .map(|(_, flow)| FlowMod::add(flow))
        .collect();
    mods.extend(deletes);
    mods
}

/// Whether a desired flow must be (re)added: new, or changed beyond its cookie's round.
fn needs_add(installed: &FlowSet, key: &FlowKey, flow: &Flow) -> bool {
    !installed.get(key).is_some_and(|have| same_but_round(have, flow))
}

/// DELETE_STRICTs for the installed flows no longer desired.
fn deletes(installed: &FlowSet, desired: &FlowSet) -> Vec<FlowMod> {
    installed
        .iter()
        .filter(|(key, _)| !desired.contains_key(key))
        .map(|(_, flow)| FlowMod::delete_strict(flow.clone()))
        .collect()
}

/// The flow_mods of a full resync at a new round, as one atomic bundle: drop leftovers of an
/// earlier attempt at `round` (a crash before the round was persisted), add every desired flow
/// (replacing same-identity flows of the previous round in place), then delete whatever still
/// carries the `previous` round (flows no longer wanted).
pub fn full_resync(desired: FlowSet, round: u16, previous: Option<u16>) -> Vec<FlowMod> {
    let mut mods = Vec::with_capacity(desired.len() + 2);
    mods.push(FlowMod::delete_by_cookie(round_cookie(round), ROUND_MASK));
    mods.extend(desired.into_values().map(FlowMod::add));
    if let Some(prev) = previous.filter(|&p| p != round) {
        mods.push(FlowMod::delete_by_cookie(round_cookie(prev), ROUND_MASK));
    }
    mods
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attachment::EntityRef;
    use ovs_openflow::FlowModCommand;

    fn iface(name: &str, ofport: u32, uplink: u32) -> AttachedInterface {
        AttachedInterface {
            name: name.into(),
            ofport,
            uplink_name: format!("{name}~"),
            uplink_ofport: uplink,
            ips: vec![],
            entity: EntityRef {
                namespace: "ns".into(),
                name: "vm1".into(),
            },
        }
    }

    #[test]
    fn diff_into_equals_diff() {
        let opts = PipelineOptions {
            round: 1,
            meters: true,
        };
        let before = desired_flows(
            opts,
            &[],
            &[iface("eth0", 1, 2), iface("eth2", 5, 6)],
            &Default::default(),
        );
        let after = desired_flows(
            PipelineOptions { round: 2, ..opts },
            &[],
            &[iface("eth0", 1, 2), iface("eth1", 3, 4)],
            &Default::default(),
        );
        let by_value = diff_into(&before, after.clone());
        assert_eq!(by_value, diff(&before, &after));
        assert!(!by_value.is_empty());
        assert!(diff_into(&after, after.clone()).is_empty());
    }

    #[test]
    fn diff_of_equal_sets_is_empty() {
        let opts = PipelineOptions {
            round: 1,
            meters: true,
        };
        let a = desired_flows(opts, &[], &[iface("eth0", 1, 2)], &Default::default());
        assert!(diff(&a, &a).is_empty());
    }

    #[test]
    fn adding_and_removing_an_interface_touches_only_its_flows() {
        let opts = PipelineOptions {
            round: 1,
            meters: true,
        };
        let before = desired_flows(opts, &[], &[iface("eth0", 1, 2)], &Default::default());
        let after = desired_flows(
            opts,
            &[],
            &[iface("eth0", 1, 2), iface("eth1", 3, 4)],
            &Default::default(),
        );
        let mods = diff(&before, &after);
        assert_eq!(mods.len(), 6);
        assert!(mods.iter().all(|m| m.command == FlowModCommand::Add));
        let back = diff(&after, &before);
        assert_eq!(back.len(), 6);
        assert!(back.iter().all(|m| m.command == FlowModCommand::DeleteStrict));
    }

    #[test]
    fn a_new_round_alone_changes_nothing_but_other_changes_do() {
        let before = desired_flows(
            PipelineOptions {
                round: 1,
                meters: true,
            },
            &[],
            &[iface("eth0", 1, 2)],
            &Default::default(),
        );
        let after = desired_flows(
            PipelineOptions {
                round: 2,
                meters: true,
            },
            &[],
            &[iface("eth0", 1, 2)],
            &Default::default(),
        );
        assert!(
            diff(&before, &after).is_empty(),
            "same flows at a new round: nothing to do"
        );
        let moved = desired_flows(
            PipelineOptions {
                round: 2,
                meters: true,
            },
            &[],
            &[iface("eth0", 1, 3)],
            &Default::default(),
        );
        let mods = diff(&before, &moved);
        assert!(!mods.is_empty());
        assert!(mods
            .iter()
            .filter(|m| m.command == FlowModCommand::Add)
            .all(|m| m.flow.cookie >> 48 == 2));
    }

    #[test]
    fn full_resync_deletes_the_new_round_first_and_the_previous_last() {
        let opts = PipelineOptions {
            round: 5,
            meters: false,
        };
        let desired = desired_flows(opts, &[], &[], &Default::default());
        let mods = full_resync(desired.clone(), 5, Some(4));
        assert_eq!(mods.len(), desired.len() + 2);
        assert_eq!(mods[0].command, FlowModCommand::Delete);
        assert_eq!(mods[0].flow.cookie, 5 << 48);
        let last = mods.last().map(|m| (m.command, m.flow.cookie, m.cookie_mask));
        assert_eq!(last, Some((FlowModCommand::Delete, 4 << 48, ROUND_MASK)));
        assert_eq!(full_resync(desired.clone(), 5, None).len(), desired.len() + 1);
    }
}
