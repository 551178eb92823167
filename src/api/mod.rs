//! The agent's local HTTP side: Prometheus metrics, health, and the JSON API behind the `get`
//! and `trace` commands. It reads snapshots from the actors and never owns their state.

pub mod collect;
pub mod handlers;
pub mod notify;
pub mod server;
pub mod trace;

/// The metrics registry and the JSON views live below the actors, which fill them
/// (docs/architecture.md §5.3, rule 9); their former paths under `api` keep working.
pub use crate::telemetry as metrics;
pub use crate::views;
