//! The controlplane API (`controlplane.antrea.io/v1beta2`) as the agent receives it from
//! antrea-controller or from standalone policy files: the wire types with exactly the Go JSON
//! (`types`) and IP byte strings and networks (`ip`), re-exported from the `antrea-controlplane`
//! crate, validation into typed views that name the
//! object and field of every problem (`validate`), and the pure [`store::PolicyStore`] that holds
//! the three kinds by name with the watch's add/modify/delete/patch/replace semantics (`store`).
//! Nothing here does I/O.

pub mod store;
pub mod validate;

// The wire types live in their own crate, shared with the API emulator (crates/controlplane);
// re-exported so the agent's paths stay `policy::controlplane::{ip, types}`.
pub use antrea_controlplane::{ip, types};

pub use store::{Change, Changes, PolicyStore, StoreError};
pub use types::{ControlplaneObject, DecodeError, Kind, API_VERSION};
pub use validate::{
    Action, CidrBlock, Direction, FieldProblem, Group, InvalidObject, L7Protocol, Member, MemberKey,
    MemberPort, MemberRef, MembersPatch, ObjectRef, Peer, Policy, PolicyRef, PolicyType, PortMatch,
    PortRange, Protocol, Rule, ServiceMatch, ServiceRef, ValidObject, Validate, ValidatePatch,
};
