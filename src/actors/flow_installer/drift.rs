//! Drift detection: notices when the switch's flows (and with them the groups and meters they
//! use) are no longer what the installer put there — `ovs-ofctl del-flows`, `del-groups` or
//! `del-meters` (OVS deletes the flows that use a deleted group or meter), a flow with the
//! agent's cookie added or changed by hand — and asks the installer for a repair, which is the
//! same take-over diff as at start-up.
//!
//! The mechanism is OpenFlow 1.4+ flow monitoring on the installer's own connection: OVS
//! reports every flow change made by anyone else at once, and the installer's own changes
//! only as abbreviations, so nothing is polled while nothing changes. A switch that refuses
//! flow monitoring (older than OVS 3.0) gets a periodic audit instead: the same repair, on a
//! timer.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use actix::{Addr, Message};
use tracing::{debug, info, warn};

use super::FlowInstaller;
use crate::ovs::openflow::monitor::{FlowEvent, FlowUpdate};
use crate::ovs::openflow::Switch;
use crate::ovs::vswitchd::{DatapathCache, VswitchdError};
use crate::policy::pipeline::fields::ROUND_MASK;
use crate::telemetry::AgentMetrics;

/// How long to let a burst of updates (a del-flows of thousands of flows comes in many
/// replies) settle before asking for one repair.
const SETTLE: Duration = Duration::from_millis(100);

/// Internal: the switch's flows of connection `epoch` may have drifted; `found` says what was
/// seen.
#[derive(Message)]
#[rtype(result = "()")]
pub(super) struct Audit {
    pub epoch: u64,
    pub found: Found,
}

/// What an audit is looking into.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Found {
    /// For the log.
    pub what: String,
    /// Another controller changed groups or meters: re-asserting them is a repair even when no
    /// flow had to be put back.
    pub groups_or_meters: bool,
}

/// What a burst of flow monitor updates reported.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Drift {
    pub added: u64,
    pub removed: u64,
    pub modified: u64,
    /// The switch paused its reports (or sent one we could not read): anything may have changed.
    pub unknown: bool,
    /// Group or meter changes by another controller.
    pub groups_or_meters: u64,
    pub tables: BTreeSet<u8>,
}

impl Drift {
    /// Adds a batch of updates. Only changes by others to flows carrying the agent's round in
    /// their cookie count: flows with round 0 are not the agent's (take-over leaves them alone),
    /// and the agent's own changes come abbreviated.
    pub fn add(&mut self, updates: &[FlowUpdate]) {
        for u in updates {
            match u {
                FlowUpdate::Full {
                    event,
                    table_id,
                    cookie,
                    ..
                } if cookie & ROUND_MASK != 0 => {
                    match event {
                        FlowEvent::Added | FlowEvent::Initial => self.added += 1,
                        FlowEvent::Removed => self.removed += 1,
                        FlowEvent::Modified => self.modified += 1,
                    }
                    self.tables.insert(*table_id);
                }
                FlowUpdate::Full { .. } | FlowUpdate::Abbrev { .. } | FlowUpdate::Resumed => {}
                FlowUpdate::Paused | FlowUpdate::Undecoded => self.unknown = true,
                FlowUpdate::ForwardedRequest { .. } => self.groups_or_meters += 1,
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        *self == Drift::default()
    }

    /// For the log: "2 removed, 1 modified by another controller in tables 0, 10".
    pub fn describe(&self) -> String {
        let mut s = String::new();
        for (n, what) in [
            (self.added, "added"),
            (self.removed, "removed"),
            (self.modified, "modified"),
        ] {
            if n > 0 {
                let _ = write!(s, "{}{n} {what}", if s.is_empty() { "" } else { ", " });
            }
        }
        if !s.is_empty() {
            let tables: Vec<String> = self.tables.iter().map(u8::to_string).collect();
            let _ = write!(s, " by another controller in tables {}", tables.join(", "));
        }
        if self.groups_or_meters > 0 {
            let _ = write!(
                s,
                "{}{} group or meter changes by another controller",
                if s.is_empty() { "" } else { "; " },
                self.groups_or_meters
            );
        }
        if self.unknown {
            let _ = write!(
                s,
                "{}the switch paused its flow reports",
                if s.is_empty() { "" } else { "; " }
            );
        }
        s
    }
}

/// The flow monitor a connection registered as it came up ([`Switch::monitor_flows`]), after its
/// groups and meters and before its session starts: from then on every change by anyone else
/// is reported, so a dump taken afterwards can be trusted until a report says otherwise.
pub(super) type Monitor =
    Result<tokio::sync::mpsc::UnboundedReceiver<Vec<FlowUpdate>>, crate::ovs::openflow::OfError>;

/// Watches the switch of connection `epoch` until the connection ends, sending an [`Audit`]
/// to the installer whenever its flows may have drifted.
pub(super) async fn watch(
    switch: Arc<dyn Switch>,
    epoch: u64,
    installer: Addr<FlowInstaller>,
    fallback: Duration,
    monitor: Monitor,
) {
    match monitor {
        Ok(mut updates) => {
            info!("watching the switch's flows (OpenFlow flow monitor)");
            while let Some(batch) = updates.recv().await {
                let mut drift = Drift::default();
                drift.add(&batch);
                tokio::time::sleep(SETTLE).await;
                while let Ok(more) = updates.try_recv() {
                    drift.add(&more);
                }
                if !drift.is_empty() {
                    installer.do_send(Audit {
                        epoch,
                        found: Found {
                            what: drift.describe(),
                            groups_or_meters: drift.groups_or_meters > 0,
                        },
                    });
                }
            }
        }
        Err(e) => {
            warn!(
                "the switch does not monitor flows ({e}); auditing its flows every {} s instead",
                fallback.as_secs_f64()
            );
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(fallback) => {}
                    _ = switch.closed() => return,
                }
                installer.do_send(Audit {
                    epoch,
                    found: Found {
                        what: "periodic audit".into(),
                        groups_or_meters: false,
                    },
                });
            }
        }
    }
}

/// Logs and counts a repair: `flow_mods` flows were put back after `found` (nothing is
/// counted when the audit found the switch as it should be).
pub(super) fn report_repair(metrics: &AgentMetrics, found: &Found, flow_mods: usize) {
    let found_what = found.what.as_str();
    if flow_mods == 0 && !found.groups_or_meters {
        debug!(
            found = found_what,
            "audited the switch's flows: nothing to repair"
        );
        return;
    }
    metrics.datapath_repairs.with_label_values(&["flows"]).inc();
    warn!(
        found = found_what,
        flow_mods, "the switch's flows, groups or meters had drifted from what the agent installed; repaired"
    );
}

/// Asks ovs-vswitchd ([`FlowInstallerDeps::datapath`](super::FlowInstallerDeps::datapath)) to purge its datapath
/// flow cache after a repair. The userspace datapath can keep a wide drop megaflow installed
/// while the tables were empty, and revalidation after the repair does not always replace it
/// (seen for IPv6 TCP with OVS 3.1); purging costs one upcall per flow and interrupts nothing.
/// Best effort: a failure is logged (no control socket, as when OVS runs elsewhere, at debug
/// level only).
pub(super) async fn purge_datapath_cache(datapath: &dyn DatapathCache) {
    match datapath.purge().await {
        Ok(()) => debug!("purged the datapath flow cache after a repair"),
        Err(e @ VswitchdError::NoSocket { .. }) => debug!("{e}"),
        Err(e) => warn!("cannot purge the datapath flow cache: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full(event: FlowEvent, table_id: u8, cookie: u64) -> FlowUpdate {
        FlowUpdate::Full {
            event,
            table_id,
            reason: 0,
            priority: 1,
            cookie,
        }
    }

    #[test]
    fn only_foreign_changes_to_agent_flows_count() {
        let ours = 3u64 << 48;
        let mut d = Drift::default();
        d.add(&[
            FlowUpdate::Abbrev { xid: 5 },
            full(FlowEvent::Added, 0, 0),
            FlowUpdate::Resumed,
        ]);
        assert!(d.is_empty(), "{d:?}");
        d.add(&[
            full(FlowEvent::Removed, 10, ours),
            full(FlowEvent::Removed, 0, ours),
            full(FlowEvent::Modified, 10, ours | 7),
        ]);
        assert_eq!(
            d.describe(),
            "2 removed, 1 modified by another controller in tables 0, 10"
        );
        let mut g = Drift::default();
        g.add(&[FlowUpdate::ForwardedRequest { msg_type: 15 }]);
        assert_eq!(g.describe(), "1 group or meter changes by another controller");
        let mut p = Drift::default();
        p.add(&[FlowUpdate::Paused]);
        assert_eq!(p.describe(), "the switch paused its flow reports");
    }
}
