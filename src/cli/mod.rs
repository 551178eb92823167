//! The client side of the agent API: `antrea-vm-agent get <resource> [NAME] [-o table|json|yaml]
//! [--policy NAME] [--socket PATH]`, like antctl's `get` against the agent. It sends plain
//! HTTP/1.1 GETs over the agent's unix socket ([`client`]), reads back the JSON documents of
//! [`crate::views`], and prints them ([`output`]). [`get`] ties the two together. [`klog`]
//! holds the Go agent's logging flags that `run` accepts. [`compile`] turns a state document
//! into the flows the agent would own (`compile --state`), [`translate`] Antrea-native policy
//! files into controlplane objects. [`trace`] asks the agent what the bridge does with one
//! packet (`trace`). [`docs`] writes the man pages and shell completions from the
//! command line's definition, [`args`] that definition itself.

pub mod args;
pub mod client;
pub mod compile;
pub mod docs;
pub mod get;
pub mod klog;
pub mod output;
pub mod trace;
pub mod translate;

pub use get::{run_get, GetArgs, GetError, OutputFormat, Resource};
