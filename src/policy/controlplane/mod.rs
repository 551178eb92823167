//! The controlplane API (`controlplane.antrea.io/v1beta2`) as the agent receives it from
//! antrea-controller or from standalone policy files: the wire types with exactly the Go JSON
//! (`types`), IP byte strings and networks (`ip`), validation into typed views that name the
//! object and field of every problem (`validate`), and the pure [`store::PolicyStore`] that holds
//! the three kinds by name with the watch's add/modify/delete/patch/replace semantics (`store`).
//! Nothing here does I/O.

pub mod ip;
pub mod store;
pub mod types;
pub mod validate;

pub use store::{Change, Changes, PolicyStore, StoreError};
pub use types::{ControlplaneObject, DecodeError, Kind, API_VERSION};
pub use validate::{
    Action, CidrBlock, Direction, FieldProblem, Group, InvalidObject, L7Protocol, Member, MemberKey,
    MemberPort, MemberRef, MembersPatch, ObjectRef, Peer, Policy, PolicyRef, PolicyType, PortMatch,
    PortRange, Protocol, Rule, ServiceMatch, ServiceRef, ValidObject,
};
