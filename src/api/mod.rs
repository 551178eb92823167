//! The agent's local HTTP side: Prometheus metrics, health, and the JSON API behind the `get`
//! commands. It reads snapshots from the actors and never owns their state.

pub mod collect;
pub mod handlers;
pub mod metrics;
pub mod notify;
pub mod server;
pub mod views;
