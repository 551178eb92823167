//! The agent's pure policy core: what the agent enforces, decided without I/O, threads of its own
//! or an async runtime (the agent's actors feed it and act on its answers).
//!
//! | module | what it owns |
//! |---|---|
//! | `controlplane` | the controlplane objects validated into typed views, and the store that holds them |
//! | `native` | standalone mode's local controller: Antrea-native policies translated into controlplane objects |
//! | `resolve` | the rules that apply on this node, kept incrementally (`ResolvedView`) |
//! | `priority`, `rule` | rule ordering (tiers, priorities) and the resolved rule model |
//! | `compiler` | rules into flows, groups and conjunctions, and the bundle plan of a change |
//! | `pipeline` | the ExternalNode pipeline (tables, registers, bypass flows) and its fields |
//! | `flowset` | desired flow sets and their diffs |
//! | `refuse`, `report` | rules not enforced as written, and what is reported about them |
//! | `stats` | the metric-flow decoding: per-rule counters from a dump of the metric tables |
//! | `trace` | `antrea-vm-agent trace`: the packet to trace, `ofproto/trace`'s answer read, and the verdict attributed to a rule |
//! | `fqdn_selector` | FQDN rules' name patterns |
//! | `ordered`, `merge_join` | small ordered-collection helpers |
//! | `attachment`, `bypass` | the plain data the core reads from the agent: attached interfaces, bypass rules |
//! | `jobs` | parallel work, injected by the caller ([`jobs::RunJobs`]) |

pub mod attachment;
pub mod bypass;
pub mod compiler;
pub mod controlplane;
pub mod flowset;
pub mod fqdn_selector;
pub mod jobs;
pub mod merge_join;
pub mod native;
pub mod ordered;
pub mod pipeline;
pub mod priority;
pub mod refuse;
pub mod report;
pub mod resolve;
pub mod rule;
pub mod stats;
pub mod trace;
