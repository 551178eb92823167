//! The wiring between the actors: the addresses the supervisor keeps ([`Peers`]), and per actor
//! an outputs struct holding a typed [`Recipient`] for each message it sends another actor. An
//! actor sees only its outputs, never the others' addresses, so a test can plug a probe into any
//! one output. The supervisor builds every actor's outputs from the current addresses here, in
//! one place ([`Peers`]'s `*_outputs` methods), and sends them with [`SetOutputs`] after each
//! (re)start; a field is `None` while its receiver is down.

use actix::dev::ToEnvelope;
use actix::{Actor, Addr, Handler, Message, Recipient};

use super::{AgentInfoReporter, ExternalNodeWatcher, FlowInstaller, InterfaceManager, PolicyCache};
use crate::messages::{
    ExternalNodeChanged, GetRuleStats, InterfacesChanged, PoliciesRealized, RulesChanged, StatusQuery,
};

/// The current address of every actor (absent while one is being restarted): the supervisor's
/// book, also read by the agent API (`GetPeers`). Actors get outputs built from it, not it.
#[derive(Clone, Default)]
pub struct Peers {
    pub watcher: Option<Addr<ExternalNodeWatcher>>,
    pub interfaces: Option<Addr<InterfaceManager>>,
    pub policy: Option<Addr<PolicyCache>>,
    pub flows: Option<Addr<FlowInstaller>>,
    pub reporter: Option<Addr<AgentInfoReporter>>,
}

impl std::fmt::Debug for Peers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peers")
            .field("watcher", &self.watcher.is_some())
            .field("interfaces", &self.interfaces.is_some())
            .field("policy", &self.policy.is_some())
            .field("flows", &self.flows.is_some())
            .field("reporter", &self.reporter.is_some())
            .finish()
    }
}

/// Supervisor → actor: the receivers of its outputs changed (one of them was restarted or died).
pub struct SetOutputs<O>(pub O);

impl<O: 'static> Message for SetOutputs<O> {
    type Result = ();
}

/// What the ExternalNode watcher sends: the ExternalNode, to the interface manager.
#[derive(Clone, Default)]
pub struct WatcherOutputs {
    pub node_changed: Option<Recipient<ExternalNodeChanged>>,
}

/// What the interface manager sends: the attached set, to the flow installer and the policy
/// cache (in that order).
#[derive(Clone, Default)]
pub struct InterfaceManagerOutputs {
    pub interfaces_to_flows: Option<Recipient<InterfacesChanged>>,
    pub interfaces_to_policy: Option<Recipient<InterfacesChanged>>,
}

/// What the policy cache sends: the rules for this node, to the flow installer.
#[derive(Clone, Default)]
pub struct PolicyCacheOutputs {
    pub rules_changed: Option<Recipient<RulesChanged>>,
}

/// What the flow installer sends: the realization notices, to the reporter.
#[derive(Clone, Default)]
pub struct FlowInstallerOutputs {
    pub realized: Option<Recipient<PoliciesRealized>>,
}

/// The actors the reporter asks for their status; one that is `None` (down) is reported as
/// unresponsive.
#[derive(Clone, Default)]
pub struct StatusRecipients {
    pub watcher: Option<Recipient<StatusQuery>>,
    pub interfaces: Option<Recipient<StatusQuery>>,
    pub policy: Option<Recipient<StatusQuery>>,
    pub flows: Option<Recipient<StatusQuery>>,
}

/// What the reporter sends: status queries to every other actor, and the rule-counter reads to
/// the flow installer.
#[derive(Clone, Default)]
pub struct ReporterOutputs {
    pub status: StatusRecipients,
    pub rule_stats: Option<Recipient<GetRuleStats>>,
}

/// The recipient of `M` at `addr`, if that actor is up.
fn recipient<A, M>(addr: &Option<Addr<A>>) -> Option<Recipient<M>>
where
    A: Actor + Handler<M>,
    A::Context: ToEnvelope<A, M>,
    M: Message + Send + 'static,
    M::Result: Send,
{
    addr.clone().map(Addr::recipient)
}

/// The one map from addresses to outputs (the supervisor's table calls these on every start and
/// re-wiring).
impl Peers {
    pub(super) fn watcher_outputs(&self) -> WatcherOutputs {
        WatcherOutputs {
            node_changed: recipient(&self.interfaces),
        }
    }

    pub(super) fn interface_manager_outputs(&self) -> InterfaceManagerOutputs {
        InterfaceManagerOutputs {
            interfaces_to_flows: recipient(&self.flows),
            interfaces_to_policy: recipient(&self.policy),
        }
    }

    pub(super) fn policy_cache_outputs(&self) -> PolicyCacheOutputs {
        PolicyCacheOutputs {
            rules_changed: recipient(&self.flows),
        }
    }

    pub(super) fn flow_installer_outputs(&self) -> FlowInstallerOutputs {
        FlowInstallerOutputs {
            realized: recipient(&self.reporter),
        }
    }

    pub(super) fn reporter_outputs(&self) -> ReporterOutputs {
        ReporterOutputs {
            status: StatusRecipients {
                watcher: recipient(&self.watcher),
                interfaces: recipient(&self.interfaces),
                policy: recipient(&self.policy),
                flows: recipient(&self.flows),
            },
            rule_stats: recipient(&self.flows),
        }
    }
}
