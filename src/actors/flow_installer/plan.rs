//! The sync planner: the flow installer's decisions, without the actor or the switch. From the
//! installer's state it decides how a sync brings the switch in line (take over every flow, send
//! an incremental change, or nothing), and from a bundle's result what follows (commit the new
//! state, reconnect, or retry). The `Sync` handler asks these functions and acts through its
//! `Switch`, OVSDB and FQDN handles.

use crate::ovs::openflow::OfError;

/// What the installer knows about its session when a sync starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct SyncState {
    /// The first full sync of this connection has committed.
    pub synced: bool,
    /// The switch's NetworkPolicy flows may differ from the compiler's (a bundle failed after
    /// the compiler moved on).
    pub policy_resync: bool,
    /// The flow monitor or the audit saw a change by someone else.
    pub drift_pending: bool,
}

impl SyncState {
    /// Whether the sync takes over before the rules are compiled (then no delta is needed): the
    /// first sync of a connection takes over what the switch holds (an earlier run's flows, or
    /// nothing after an OVS restart), and so does the sync after the NetworkPolicy flows got
    /// out of step or drifted; later ones diff against what was installed.
    pub fn takes_over(self) -> bool {
        !self.synced || self.policy_resync || self.drift_pending
    }

    /// How the sync goes once the compiler has moved to the current rules (`full`: it started
    /// over, so it has no delta either).
    pub fn mode(self, full: bool) -> Mode {
        if self.takes_over() || full {
            // Only the first sync of a connection may use the switch's flows dumped when it came
            // up: later take-overs (drift, a resync) read the switch as it is then.
            Mode::TakeOver {
                use_prefetched: !self.synced,
            }
        } else {
            Mode::Incremental
        }
    }
}

/// How a sync brings the switch in line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// One bundle replaces every flow of the previous rounds with the desired ones. FQDN
    /// address flows are written for every placement (none counts as committed).
    TakeOver { use_prefetched: bool },
    /// The base flows' diff, the compiler's delta and the FQDN flows of new placements.
    Incremental,
}

/// What an incremental sync sends, by whether each part is empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Change {
    pub base_empty: bool,
    pub delta_empty: bool,
    pub fqdn_empty: bool,
}

impl Change {
    /// `true`: no flow changes, the rule view is realized already (no bundle is sent).
    pub fn is_nothing(self) -> bool {
        self.base_empty && self.delta_empty && self.fqdn_empty
    }
}

/// What follows a sync's bundle.
#[derive(Debug)]
pub(super) struct AfterBundle<T> {
    /// A repair committed: the FQDN controller re-reads its own flows (round 0, not ours).
    pub fqdn_repaired: bool,
    /// Not realized: the retry keeps the change's arrival time and the drift to repair.
    pub keep_pending: bool,
    /// What to do with the session; `None` when the bundle's session is gone (a newer
    /// connection's first sync takes over anyway).
    pub session: Option<Outcome<T>>,
}

/// The bundle's outcome for a session still current (`T`: what the sending counted).
#[derive(Debug)]
pub(super) enum Outcome<T> {
    /// Committed: the installed flows, compiler counts, FQDN placements and realization advance.
    Committed {
        flow_mods: usize,
        tally: T,
        /// Drift was repaired with flow_mods: purge the datapath's cached megaflows.
        purge_datapath: bool,
        /// A large bundle: return the freed pages.
        release_memory: bool,
    },
    /// The connection failed: drop the session and reconnect.
    ConnectionLost { fqdn_maybe_written: bool },
    /// The commit may or may not have been applied: retry later; the take-over that follows
    /// (`policy_resync` stays set) finds out from the switch itself.
    Unknown {
        error: OfError,
        fqdn_maybe_written: bool,
    },
    /// The switch rejected the bundle, nothing changed: withdraw the pending FQDN placements and
    /// retry later.
    Rejected { error: OfError },
}

/// What follows a bundle that sent `Ok((flow_mods, tally))` or failed: `repair` says whether it
/// repaired drift, `wrote_fqdn` whether it carried FQDN address flows, `current` whether its
/// session is still the installer's.
pub(super) fn after_bundle<T>(
    res: Result<(usize, T), OfError>,
    repair: bool,
    wrote_fqdn: bool,
    current: bool,
) -> AfterBundle<T> {
    let fqdn_repaired = repair && res.is_ok();
    let keep_pending = res.is_err();
    let session = current.then(|| match res {
        Ok((flow_mods, tally)) => Outcome::Committed {
            flow_mods,
            tally,
            purge_datapath: repair && flow_mods > 0,
            release_memory: flow_mods >= crate::memory::LARGE_BUNDLE_FLOW_MODS,
        },
        Err(OfError::Closed) | Err(OfError::Io(_)) => Outcome::ConnectionLost {
            fqdn_maybe_written: wrote_fqdn,
        },
        Err(error @ OfError::Timeout(_)) => Outcome::Unknown {
            error,
            fqdn_maybe_written: wrote_fqdn,
        },
        Err(error) => Outcome::Rejected { error },
    });
    AfterBundle {
        fqdn_repaired,
        keep_pending,
        session,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(synced: bool, policy_resync: bool, drift_pending: bool) -> SyncState {
        SyncState {
            synced,
            policy_resync,
            drift_pending,
        }
    }

    #[test]
    fn a_synced_session_in_step_changes_incrementally() {
        let s = state(true, false, false);
        assert!(!s.takes_over());
        assert_eq!(s.mode(false), Mode::Incremental);
        // The compiler started over: no delta, so a take-over, from a fresh dump.
        assert_eq!(
            s.mode(true),
            Mode::TakeOver {
                use_prefetched: false
            }
        );
    }

    #[test]
    fn first_sync_out_of_step_or_drifted_takes_over() {
        let first = state(false, false, false);
        assert!(first.takes_over());
        assert_eq!(first.mode(false), Mode::TakeOver { use_prefetched: true });
        for s in [
            state(true, true, false),
            state(true, false, true),
            state(true, true, true),
        ] {
            assert!(s.takes_over(), "{s:?}");
            // Later take-overs read the switch as it is then.
            assert_eq!(
                s.mode(false),
                Mode::TakeOver {
                    use_prefetched: false
                },
                "{s:?}"
            );
        }
        // Not synced yet on this connection: the planner allows the early dump (after a failed
        // first bundle the installer has already taken it, so there is none left to use).
        assert_eq!(
            state(false, true, false).mode(false),
            Mode::TakeOver { use_prefetched: true }
        );
    }

    #[test]
    fn a_change_with_no_flows_is_nothing() {
        let nothing = Change {
            base_empty: true,
            delta_empty: true,
            fqdn_empty: true,
        };
        assert!(nothing.is_nothing());
        for c in [
            Change {
                base_empty: false,
                ..nothing
            },
            Change {
                delta_empty: false,
                ..nothing
            },
            Change {
                fqdn_empty: false,
                ..nothing
            },
        ] {
            assert!(!c.is_nothing(), "{c:?}");
        }
    }

    #[test]
    fn a_commit_advances_and_repairs() {
        let a = after_bundle(Ok((3, ())), false, false, true);
        assert!(!a.fqdn_repaired && !a.keep_pending);
        assert!(matches!(
            a.session,
            Some(Outcome::Committed {
                flow_mods: 3,
                purge_datapath: false,
                release_memory: false,
                ..
            })
        ));
        let repair = after_bundle(Ok((3, ())), true, false, true);
        assert!(repair.fqdn_repaired);
        assert!(matches!(
            repair.session,
            Some(Outcome::Committed {
                purge_datapath: true,
                ..
            })
        ));
        // A repair that found nothing to put back purges nothing.
        let clean = after_bundle(Ok((0, ())), true, false, true);
        assert!(matches!(
            clean.session,
            Some(Outcome::Committed {
                purge_datapath: false,
                ..
            })
        ));
        let large = after_bundle(
            Ok((crate::memory::LARGE_BUNDLE_FLOW_MODS, ())),
            false,
            false,
            true,
        );
        assert!(matches!(
            large.session,
            Some(Outcome::Committed {
                release_memory: true,
                ..
            })
        ));
        // The session is gone: nothing more, but the FQDN controller still re-reads.
        let stale = after_bundle(Ok((3, ())), true, false, false);
        assert!(stale.fqdn_repaired && stale.session.is_none());
    }

    #[test]
    fn failures_reconnect_retry_or_withdraw() {
        let io = || OfError::Io(std::io::Error::other("reset"));
        let lost = |res: Result<(usize, ()), OfError>, wrote| after_bundle(res, true, wrote, true);
        assert!(matches!(
            lost(Err(OfError::Closed), true).session,
            Some(Outcome::ConnectionLost {
                fqdn_maybe_written: true
            })
        ));
        assert!(matches!(
            lost(Err(io()), false).session,
            Some(Outcome::ConnectionLost {
                fqdn_maybe_written: false
            })
        ));
        assert!(matches!(
            lost(Err(OfError::Timeout("commit".into())), true).session,
            Some(Outcome::Unknown {
                error: OfError::Timeout(_),
                fqdn_maybe_written: true
            })
        ));
        assert!(matches!(
            lost(Err(OfError::Unsupported("x".into())), true).session,
            Some(Outcome::Rejected {
                error: OfError::Unsupported(_)
            })
        ));
        for err in [
            OfError::Closed,
            OfError::Timeout("t".into()),
            OfError::Unsupported("x".into()),
        ] {
            let a = lost(Err(err), true);
            assert!(a.keep_pending && !a.fqdn_repaired);
        }
        // Of a stale session, only the pending state is kept for the retry.
        let stale = after_bundle::<()>(Err(io()), true, true, false);
        assert!(stale.keep_pending && stale.session.is_none());
    }
}
