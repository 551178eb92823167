//! The attachment model (an interface attached to the bridge and the ExternalEntity it stands
//! for), owned by the pure policy core (`crates/policy`) and re-exported under its old path, so
//! `packetin`, `uplink` and the actors' messages keep naming `crate::attachment`.

pub use antrea_policy::attachment::{AttachedInterface, EntityRef};
