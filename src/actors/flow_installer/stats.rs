//! The flow installer's observability: per-rule counters read from the metric tables
//! ([`GetRuleStats`]: the switch dumps them here, the policy crate's `stats` attributes each
//! metric flow to its rule), the realization notices sent to the reporter ([`PoliciesRealized`]),
//! and the flow-operation and realization-latency metrics recorded around each bundle.
//!
//! **Flow-operation metrics** count flow_mods, not bundles (upstream counts one operation per
//! bundle and kind): `ovs_flow_ops{operation}` grows by the number of ADD, MODIFY(_STRICT) and
//! DELETE(_STRICT) flow_mods of each committed bundle, `ovs_flow_ops_errors{operation}` by those
//! of a bundle that failed (a bundle is atomic: none of them was applied). The bundle's latency
//! (open to commit reply, in milliseconds) is observed once per operation kind present in it,
//! like upstream.

use std::collections::HashMap;
use std::time::Instant;

use actix::{ActorFutureExt, Handler, ResponseActFuture, WrapFuture};

use super::FlowInstaller;
use crate::messages::{GetRuleStats, PoliciesRealized, PolicyGeneration, RuleStatsError, RuleStatsSnapshot};
use crate::ovs::openflow::{FlowMod, FlowModChunks, FlowModCommand, FlowStats, OfError, Switch};
use crate::policy::pipeline::table;
use crate::policy::stats::{metric_filter, rule_stats_for};
use crate::telemetry::AgentMetrics;

/// Every NetworkPolicy flow of `EgressMetric` and `IngressMetric`, with its counters: two
/// table-filtered dumps, in flight together.
pub async fn dump_metric_flows(switch: &dyn Switch) -> Result<Vec<FlowStats>, OfError> {
    let (mut egress, ingress) = futures::try_join!(
        switch.dump_flows(metric_filter(table::EGRESS_METRIC)),
        switch.dump_flows(metric_filter(table::INGRESS_METRIC)),
    )?;
    egress.extend(ingress);
    Ok(egress)
}

impl Handler<GetRuleStats> for FlowInstaller {
    type Result = ResponseActFuture<Self, Result<RuleStatsSnapshot, RuleStatsError>>;

    /// Dumps the metric tables without holding the actor (other messages, including syncs, are
    /// handled meanwhile), then maps the flows to rules with the rule view current at that point.
    fn handle(&mut self, _: GetRuleStats, _: &mut Self::Context) -> Self::Result {
        let switch = match &self.session {
            None => return Box::pin(actix::fut::ready(Err(RuleStatsError::NotConnected))),
            Some(s) if !s.synced => {
                // Before the first sync the switch may hold a previous run's flows, whose
                // conjunction ids this compiler has not assigned.
                return Box::pin(actix::fut::ready(Err(RuleStatsError::NotSynced)));
            }
            Some(s) => s.switch.clone(),
        };
        let dump = async move { dump_metric_flows(switch.as_ref()).await };
        Box::pin(dump.into_actor(self).map(|res, act, _| {
            let flows = res.map_err(RuleStatsError::Switch)?;
            let conjunctions = act.conjunctions_tx.borrow().clone();
            let rules = act.view.rules().map(|r| &**r).unwrap_or_default();
            Ok(rule_stats_for(&flows, &conjunctions, rules))
        }))
    }
}

/// The last notice sent, for tests and diagnostics.
#[derive(Clone, Copy, Debug, Default, actix::Message)]
#[rtype(result = "Option<PoliciesRealized>")]
pub struct GetLastRealized;

impl Handler<GetLastRealized> for FlowInstaller {
    type Result = Option<PoliciesRealized>;
    fn handle(&mut self, _: GetLastRealized, _: &mut Self::Context) -> Self::Result {
        self.realization.last_sent.clone()
    }
}

/// Which policies the rule view names, and which notice went out last.
#[derive(Debug, Default)]
pub(super) struct Realization {
    /// The policies and sync epoch of the latest `RulesChanged`.
    view: Option<PoliciesRealized>,
    last_sent: Option<PoliciesRealized>,
}

impl Realization {
    /// Records the policies of a new rule view (whether or not its rules changed: a generation
    /// bump alone must be reported too).
    pub(super) fn set_view(&mut self, policies: Vec<PolicyGeneration>, sync_epoch: u64) {
        let same = self
            .view
            .as_ref()
            .is_some_and(|v| v.sync_epoch == sync_epoch && *v.policies == *policies);
        if !same {
            self.view = Some(PoliciesRealized {
                policies: policies.into(),
                sync_epoch,
            });
        }
    }

    /// The view a sync is about to realize (captured when the sync computes its flows, so the
    /// notice names that view even if a newer one arrives before the commit).
    pub(super) fn current(&self) -> Option<PoliciesRealized> {
        self.view.clone()
    }
}

impl FlowInstaller {
    /// The flows of `view` are in the switch: tell the reporter.
    pub(super) fn notify_realized(&mut self, view: Option<PoliciesRealized>) {
        let Some(view) = view else {
            return;
        };
        let view = self.with_not_installed(view);
        if let Some(reporter) = &self.outputs.realized {
            reporter.do_send(view.clone());
        }
        self.realization.last_sent = Some(view);
    }

    /// The notice with the rules the compiler could not place added to their policies'
    /// `not_enforced` message (NetworkPolicyStatus `realizationFailure`).
    fn with_not_installed(&self, view: PoliciesRealized) -> PoliciesRealized {
        if self.not_installed.is_empty() {
            return view;
        }
        let mut by_policy: HashMap<&str, Vec<String>> = HashMap::new();
        for (id, why) in &self.not_installed {
            by_policy.entry(id.policy_uid.as_ref()).or_default().push(format!(
                "rules[{}] ({:?}): not installed ({why}): it has no flows, so it allows nothing and drops nothing",
                id.index, id.direction
            ));
        }
        let mut policies = view.policies.to_vec();
        for p in &mut policies {
            if let Some(lines) = by_policy.get(p.uid.as_str()) {
                let mut message = p.not_enforced.take().unwrap_or_default();
                for line in lines {
                    if !message.is_empty() {
                        message.push_str("; ");
                    }
                    message.push_str(line);
                }
                p.not_enforced = Some(message);
            }
        }
        PoliciesRealized {
            policies: policies.into(),
            sync_epoch: view.sync_epoch,
        }
    }

    /// Sends the last notice again (after the reporter restarted).
    pub(super) fn resend_realized(&mut self) {
        let last = self.realization.last_sent.clone();
        self.notify_realized(last);
    }
}

/// The flow_mods of one bundle by operation kind (Antrea's label values).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpCounts {
    pub add: u64,
    pub modify: u64,
    pub delete: u64,
}

impl OpCounts {
    #[cfg(test)]
    pub fn of(mods: &[FlowMod]) -> Self {
        let mut c = OpCounts::default();
        c.add_all(mods);
        c
    }

    fn add_all(&mut self, mods: &[FlowMod]) {
        for m in mods {
            match m.command {
                FlowModCommand::Add => self.add += 1,
                FlowModCommand::Modify | FlowModCommand::ModifyStrict => self.modify += 1,
                FlowModCommand::Delete | FlowModCommand::DeleteStrict => self.delete += 1,
            }
        }
    }

    fn kinds(&self) -> [(&'static str, u64); 3] {
        [
            ("add", self.add),
            ("modify", self.modify),
            ("delete", self.delete),
        ]
    }

    /// Records one bundle's outcome and latency.
    pub fn record(&self, metrics: &AgentMetrics, ok: bool, latency_ms: f64) {
        let counter = if ok {
            &metrics.ovs_flow_ops
        } else {
            &metrics.ovs_flow_ops_errors
        };
        for (op, n) in self.kinds().into_iter().filter(|(_, n)| *n > 0) {
            counter.with_label_values(&[op]).inc_by(n);
            metrics
                .ovs_flow_ops_latency
                .with_label_values(&[op])
                .observe(latency_ms);
        }
    }
}

/// Sends the flow_mods of `chunks` in one bundle, chunk by chunk
/// ([`Switch::bundle_chunks`]), and records the flow-operation metrics; how many were sent.
pub(super) async fn timed_bundle_chunks(
    switch: &dyn Switch,
    chunks: &mut FlowModChunks<'_>,
    metrics: &AgentMetrics,
) -> Result<usize, OfError> {
    let mut counting = Counting {
        inner: chunks,
        counts: OpCounts::default(),
    };
    let started = Instant::now();
    let res = switch.bundle_chunks(&mut counting).await;
    let counts = counting.counts;
    if counts.add + counts.modify + counts.delete > 0 {
        counts.record(metrics, res.is_ok(), started.elapsed().as_secs_f64() * 1000.0);
    }
    res
}

/// Counts the flow_mods of the chunks passing through.
struct Counting<'a, 'b> {
    inner: &'a mut FlowModChunks<'b>,
    counts: OpCounts,
}

impl Iterator for Counting<'_, '_> {
    type Item = Vec<FlowMod>;

    fn next(&mut self) -> Option<Vec<FlowMod>> {
        let chunk = self.inner.next()?;
        self.counts.add_all(&chunk);
        Some(chunk)
    }
}

/// Observes a realization latency given in milliseconds (the histogram is in seconds).
pub(super) fn observe_realization(metrics: &AgentMetrics, realization_ms: f64) {
    metrics
        .realization_latency
        .with_label_values::<&str>(&[])
        .observe(realization_ms / 1000.0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ovs::openflow::Flow;
    use crate::policy::pipeline::fields::ROUND_MASK;

    #[test]
    fn flow_mods_are_counted_per_operation() {
        let f = Flow::new(1, 10, crate::ovs::openflow::Match::new());
        let mut modify = FlowMod::add(f.clone());
        modify.command = FlowModCommand::ModifyStrict;
        let mods = vec![
            FlowMod::add(f.clone()),
            FlowMod::add(f.clone()),
            modify,
            FlowMod::delete_strict(f.clone()),
            FlowMod::delete_by_cookie(1 << 48, ROUND_MASK),
        ];
        let c = OpCounts::of(&mods);
        assert_eq!(
            c,
            OpCounts {
                add: 2,
                modify: 1,
                delete: 2
            }
        );
        let metrics = AgentMetrics::new();
        c.record(&metrics, true, 4.0);
        OpCounts {
            add: 3,
            modify: 0,
            delete: 0,
        }
        .record(&metrics, false, 2.0);
        assert_eq!(metrics.ovs_flow_ops.with_label_values(&["add"]).get(), 2);
        assert_eq!(metrics.ovs_flow_ops.with_label_values(&["modify"]).get(), 1);
        assert_eq!(metrics.ovs_flow_ops.with_label_values(&["delete"]).get(), 2);
        assert_eq!(metrics.ovs_flow_ops_errors.with_label_values(&["add"]).get(), 3);
        assert_eq!(
            metrics.ovs_flow_ops_errors.with_label_values(&["delete"]).get(),
            0
        );
        let latency = |op: &str| {
            metrics
                .ovs_flow_ops_latency
                .with_label_values(&[op])
                .get_sample_count()
        };
        assert_eq!((latency("add"), latency("modify"), latency("delete")), (2, 1, 1));
        observe_realization(&metrics, 250.0);
        let h = metrics.realization_latency.with_label_values::<&str>(&[]);
        assert_eq!(h.get_sample_count(), 1);
        assert!((h.get_sample_sum() - 0.25).abs() < 1e-9);
    }
}
