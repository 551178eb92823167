//! The wire shape of Antrea's `controlplane.antrea.io/v1beta2` API, one set of types shared by the
//! agent (which receives it from antrea-controller or standalone policy files) and the API
//! emulator (which serves it): the objects with exactly the Go JSON (`types`), IP byte strings and
//! networks (`ip`), and the naming rules both sides must agree on (`naming`). What is received is
//! carried unchecked; validation into typed views is the agent's (`policy::controlplane::validate`).
//! Nothing here does I/O.

pub mod ip;
pub mod naming;
pub mod testdata;
pub mod types;

pub use types::{ControlplaneObject, DecodeError, Kind, API_VERSION};
