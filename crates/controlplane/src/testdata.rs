//! The reference objects of antrea-apis.md §2.5 and a watch stream (§3.2, §3.3), captured from
//! the Go types, as text: one home for the tests on both sides (this crate's round trips, the
//! agent's validation, store, fallback and watch tests). Constants only: nothing references them
//! in a product build, so they add nothing to the agent's binary.

/// An Antrea-native NetworkPolicy (`AntreaNetworkPolicy`).
pub const NP_ANNP1: &str = include_str!("testdata/np_annp1.json");
/// An Antrea ClusterNetworkPolicy.
pub const NP_ACNP: &str = include_str!("testdata/np_acnp.json");
/// An AddressGroup.
pub const AG: &str = include_str!("testdata/ag.json");
/// A patch of [`AG`]'s members.
pub const AG_PATCH: &str = include_str!("testdata/ag_patch.json");
/// An AppliedToGroup.
pub const ATG: &str = include_str!("testdata/atg.json");
/// A patch of [`ATG`]'s members.
pub const ATG_PATCH: &str = include_str!("testdata/atg_patch.json");
/// Watch events, one JSON object per line: ADDED, BOOKMARK, patches, DELETED.
pub const WATCH_EVENTS: &str = include_str!("testdata/watch_events.jsonl");
