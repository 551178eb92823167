//! What one sync sends, as flow_mods produced chunk by chunk into one atomic bundle: either a
//! change (the small diff of the flows besides the NetworkPolicy flows, then the compiler's
//! [`FlowDelta`]), or a take-over of everything the switch holds (its dump diffed against the
//! desired flows, the NetworkPolicy ones built group run by group run from a [`FlowPlan`]).
//! No copy of all flows or flow_mods exists at once: the switch's dump is the only full set
//! held, compactly ([`HeldFlows`]), and it shrinks as desired flows are matched against it.
//! The deletes of either go last, in the order OVS removes fastest ([`DeletesLast`]): only
//! their identities are held, grouped by (table, match).

use std::collections::BTreeMap;

use tracing::{debug, warn};

use super::held::HeldFlows;
use super::removal::{DeletesLast, DELETE_CHUNK};
use crate::ovs::openflow::{FlowFilter, FlowMod, OfError, Switch};
use crate::policy::compiler::{CountChanges, FlowDelta, FlowPlan, PlanChunks, CHUNK_RULES};
use crate::policy::flowset::FlowSet;
use crate::policy::pipeline::fields::{round_cookie, ROUND_MASK};

/// What a sync sends.
pub(super) enum Outgoing {
    /// Minimal changes: the base flows' diff, then the NetworkPolicy delta, then `extra`.
    Change {
        base: Vec<FlowMod>,
        delta: FlowDelta,
        extra: Vec<FlowMod>,
    },
    /// Everything, against what the switch holds, then `extra`.
    TakeOver {
        base: FlowSet,
        plan: FlowPlan,
        round: u16,
        previous: Option<u16>,
        extra: Vec<FlowMod>,
        /// What the switch held, dumped as soon as the connection came up (see
        /// [`prefetch_held`]); without it, or if that dump failed, the switch is dumped now.
        prefetched: Option<PrefetchedHeld>,
    },
}

/// The switch's flows dumped ahead of a connection's first sync. Dropping it (an audit
/// discarded it, the session ended) stops the dump.
pub(super) struct PrefetchedHeld {
    result: tokio::sync::oneshot::Receiver<Result<HeldFlows, OfError>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for PrefetchedHeld {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts dumping what the switch holds on a new connection, on this thread's runtime, so a
/// restart's take-over has the switch's flows by the time the policies are read and resolved
/// instead of dumping them only then. Call it once the connection's flow monitor is registered
/// ([`super::drift::Monitor`]): a change by anyone else after the dump then reaches the
/// installer as an audit, which discards this dump if the first sync has not begun, or is
/// repaired right after that sync if it had. The installer
/// itself writes no flow before that sync (the FQDN controller's flows, round 0, are left out
/// either way). The task runs on the arbiter, not in the actor's context, so a sync waiting for
/// it never waits on the context it holds.
pub(super) fn prefetch_held(switch: std::sync::Arc<dyn Switch>) -> PrefetchedHeld {
    let (tx, result) = tokio::sync::oneshot::channel();
    let task = actix::spawn(async move {
        let _ = tx.send(dump_held(switch.as_ref()).await);
    });
    PrefetchedHeld { result, task }
}

/// The switch's flows with a round in their cookie, held compactly as they arrive. Flows with
/// round 0 are not the agent's (e.g. added by hand, or the FQDN controller's) and are left alone.
async fn dump_held(switch: &dyn Switch) -> Result<HeldFlows, OfError> {
    let mut current = HeldFlows::default();
    switch
        .dump_flows_each(FlowFilter::all(), &mut |s| {
            if s.flow.cookie & ROUND_MASK != 0 {
                current.insert(s.flow);
            }
        })
        .await?;
    debug!(held = current.len(), "take-over: the switch's flows dumped");
    Ok(current)
}

/// How the compiler's flow counts move once the bundle committed.
pub(super) enum Tally {
    Changes(CountChanges),
    All(BTreeMap<u8, usize>),
}

impl Outgoing {
    /// Sends everything in one bundle; how many flow_mods, and the flow counts.
    pub(super) async fn send(
        self,
        switch: &dyn Switch,
        metrics: &crate::telemetry::AgentMetrics,
    ) -> Result<(usize, Tally), OfError> {
        match self {
            Outgoing::Change { base, delta, extra } => {
                let mut delta = delta.into_chunks(CHUNK_RULES);
                let mut chunks = DeletesLast::new(
                    std::iter::once(base)
                        .chain(&mut delta)
                        .chain(std::iter::once(extra)),
                );
                let n = super::stats::timed_bundle_chunks(switch, &mut chunks, metrics).await?;
                Ok((n, Tally::Changes(delta.count_changes().clone())))
            }
            Outgoing::TakeOver {
                base,
                plan,
                round,
                previous,
                extra,
                prefetched,
            } => {
                let mut plan = plan.into_chunks(CHUNK_RULES);
                let dumped = match prefetched {
                    Some(mut early) => match (&mut early.result).await {
                        Ok(Ok(held)) => Ok(held),
                        Ok(Err(e)) => {
                            debug!("the early dump of the switch's flows failed ({e}); dumping again");
                            dump_held(switch).await
                        }
                        Err(_) => dump_held(switch).await,
                    },
                    None => dump_held(switch).await,
                };
                let n = match dumped {
                    Ok(current) => {
                        // The extra flow_mods (the FQDN address flows, round 0) come last; the
                        // deletes of leftovers never touch round 0.
                        let mut chunks = DeletesLast::new(
                            TakeOverChunks {
                                current,
                                base: Some(base),
                                plan: &mut plan,
                            }
                            .chain(std::iter::once(extra)),
                        );
                        super::stats::timed_bundle_chunks(switch, &mut chunks, metrics).await?
                    }
                    Err(e) => {
                        warn!(
                            "cannot dump the switch's flows ({e}); replacing them all in one bundle instead"
                        );
                        let mut chunks =
                            full_resync(base, &mut plan, round, previous).chain(std::iter::once(extra));
                        super::stats::timed_bundle_chunks(switch, &mut chunks, metrics).await?
                    }
                };
                Ok((n, Tally::All(plan.counts().clone())))
            }
        }
    }
}

/// A take-over: every desired flow is added unless the switch holds it already (apart from the
/// round in its cookie: counters are kept), and what is left of the switch's flows afterwards
/// is deleted.
struct TakeOverChunks<'a> {
    current: HeldFlows,
    base: Option<FlowSet>,
    plan: &'a mut PlanChunks,
}

impl TakeOverChunks<'_> {
    fn add_unless_held(&mut self, flow: crate::ovs::openflow::Flow) -> Option<FlowMod> {
        (!self.current.take_same(&flow)).then(|| FlowMod::add(flow))
    }
}

impl Iterator for TakeOverChunks<'_> {
    type Item = Vec<FlowMod>;

    fn next(&mut self) -> Option<Vec<FlowMod>> {
        if let Some(base) = self.base.take() {
            return Some(
                base.into_values()
                    .filter_map(|f| self.add_unless_held(f))
                    .collect(),
            );
        }
        if let Some(flows) = self.plan.next() {
            return Some(
                flows
                    .into_iter()
                    .filter_map(|f| self.add_unless_held(f))
                    .collect(),
            );
        }
        let deletes: Vec<FlowMod> = self
            .current
            .take_leftovers(DELETE_CHUNK)
            .into_iter()
            .map(FlowMod::delete_strict)
            .collect();
        (!deletes.is_empty()).then_some(deletes)
    }
}

/// Antrea's round protocol when the switch cannot be dumped: drop leftovers of an earlier
/// attempt at `round`, add every desired flow (replacing same-identity flows in place), then
/// delete whatever still carries the `previous` round.
fn full_resync<'a>(
    base: FlowSet,
    plan: &'a mut PlanChunks,
    round: u16,
    previous: Option<u16>,
) -> impl Iterator<Item = Vec<FlowMod>> + Send + 'a {
    let first = vec![FlowMod::delete_by_cookie(round_cookie(round), ROUND_MASK)];
    let last: Vec<FlowMod> = previous
        .filter(|&p| p != round)
        .map(|p| FlowMod::delete_by_cookie(round_cookie(p), ROUND_MASK))
        .into_iter()
        .collect();
    std::iter::once(first)
        .chain(std::iter::once(base.into_values().map(FlowMod::add).collect()))
        .chain(plan.map(|flows| flows.into_iter().map(FlowMod::add).collect()))
        .chain(std::iter::once(last))
}
