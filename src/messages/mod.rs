//! Messages exchanged between actors: plain data, `Clone`, no behaviour. Each message is a fact
//! ("the ExternalNode is now X", "these interfaces are attached") carrying the full current view,
//! so receivers are idempotent and a restarted actor can simply be sent everything again.

pub mod external_node;
pub mod interfaces;
pub mod rules;
pub mod stats;
pub mod status;
pub mod status_detail;
pub mod supervision;

pub use external_node::ExternalNodeChanged;
pub use interfaces::{AttachedInterface, EntityRef, InterfacesChanged};
pub use rules::RulesChanged;
pub use stats::{
    GetRuleStats, PoliciesRealized, PolicyGeneration, RuleStats, RuleStatsError, RuleStatsSnapshot,
};
pub use status::{ActorKind, ActorStatus, ErrorKind, StatusError, StatusQuery};
pub use status_detail::{
    ActorDetail, ExternalNodeState, ExternalNodeWatcherStatus, FlowInstallerStatus, InterfaceManagerStatus,
    KubernetesWrites, PolicyCacheStatus, ReporterMode, ReporterStatus,
};
pub use supervision::{Crash, Resync, Stop};
