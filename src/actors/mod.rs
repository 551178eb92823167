//! The supervisor and the five actors.
