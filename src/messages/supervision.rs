//! Supervisor → actors.

use actix::Message;

/// "Send your current facts downstream again." Sent to every actor after any actor restarted,
/// so the new instance is brought up to date by its producers.
#[derive(Clone, Copy, Debug, Default, Message)]
#[rtype(result = "()")]
pub struct Resync;

/// Fault injection: the receiving actor panics inside its handler. Used by the supervision tests
/// and for chaos drills; only in-process code can send it.
#[derive(Clone, Debug, Message)]
#[rtype(result = "()")]
pub struct Crash(pub String);

/// "Stop now": orderly shutdown of one actor (it is not restarted once the supervisor is
/// shutting down).
#[derive(Clone, Copy, Debug, Default, Message)]
#[rtype(result = "()")]
pub struct Stop;
