//! The supervisor and the five actors. Each actor owns its state and touches nothing else's; they
//! talk through the messages in `crate::messages`. The supervisor starts them in order, notices
//! when one dies (it stopped, or a handler panicked), restarts it with backoff, hands every actor
//! new recipients for its outputs (`wiring`), and asks producers to resend their facts so the new
//! instance converges.

pub mod external_node_watcher;
pub mod flow_installer;
pub mod interface_manager;
pub mod policy_cache;
pub mod reporter;
pub mod supervisor;
pub mod wiring;

use actix::Message;

use crate::messages::ActorKind;

pub use external_node_watcher::{ExternalNodeWatcher, WatcherDeps};
pub use flow_installer::{FlowInstaller, FlowInstallerDeps};
pub use interface_manager::{InterfaceManager, InterfaceManagerDeps};
pub use policy_cache::{PolicyCache, PolicyCacheDeps};
pub use reporter::{AgentInfoReporter, ReporterDeps};
pub use supervisor::{Deps, Supervisor, Timing};
pub use wiring::{
    FlowInstallerOutputs, InterfaceManagerOutputs, Peers, PolicyCacheOutputs, ReporterOutputs, SetOutputs,
    StatusRecipients, WatcherOutputs,
};

/// Actor → supervisor, sent when an actor instance is dropped, whatever the cause.
#[derive(Clone, Copy, Debug, Message)]
#[rtype(result = "()")]
pub struct ChildExited {
    pub kind: ActorKind,
    pub generation: u64,
}

/// Held by every actor instance; dropping it (normal stop, error stop, or panic unwinding the
/// actor) tells the supervisor. This is how panics are noticed: actix drops a task's actor when a
/// handler panics, but its own `Supervisor` only sees orderly stops.
pub struct Lifeline {
    kind: ActorKind,
    generation: u64,
    supervisor: Option<actix::Recipient<ChildExited>>,
}

impl Lifeline {
    pub fn new(kind: ActorKind, generation: u64, supervisor: actix::Recipient<ChildExited>) -> Self {
        Lifeline {
            kind,
            generation,
            supervisor: Some(supervisor),
        }
    }
    /// A lifeline nobody listens to (for actors run outside a supervisor).
    pub fn detached(kind: ActorKind) -> Self {
        Lifeline {
            kind,
            generation: 0,
            supervisor: None,
        }
    }
}

impl Drop for Lifeline {
    fn drop(&mut self) {
        if let Some(sup) = &self.supervisor {
            sup.do_send(ChildExited {
                kind: self.kind,
                generation: self.generation,
            });
        }
    }
}

/// Handlers every actor shares: new recipients for its outputs, fault injection, and orderly
/// stop. The actor must have an `outputs` field of the type given.
macro_rules! common_handlers {
    ($actor:ty, $outputs:ty) => {
        $crate::actors::common_handlers!($actor, $outputs, own_stop);

        impl actix::Handler<$crate::messages::Stop> for $actor {
            type Result = ();
            fn handle(&mut self, _: $crate::messages::Stop, ctx: &mut Self::Context) {
                actix::ActorContext::stop(ctx);
            }
        }
    };
    // An actor with its own `Stop` handler (work to finish before it answers).
    ($actor:ty, $outputs:ty, own_stop) => {
        impl actix::Handler<$crate::actors::SetOutputs<$outputs>> for $actor {
            type Result = ();
            fn handle(&mut self, msg: $crate::actors::SetOutputs<$outputs>, _: &mut Self::Context) {
                self.outputs = msg.0;
            }
        }

        impl actix::Handler<$crate::messages::Crash> for $actor {
            type Result = ();
            fn handle(&mut self, msg: $crate::messages::Crash, _: &mut Self::Context) {
                panic!("fault injected into {}: {}", stringify!($actor), msg.0);
            }
        }
    };
}
pub(crate) use common_handlers;
