//! Pure policy and pipeline logic: the ExternalNode pipeline definition (`pipeline`) and desired
//! flow sets with their diffs (`flowset`). Nothing here does I/O.

pub mod compiler;
pub mod controlplane;
pub mod flowset;
pub mod fqdn_selector;
pub mod merge_join;
pub mod native;
pub mod ordered;
pub mod pipeline;
pub mod priority;
pub mod refuse;
pub mod report;
pub mod resolve;
pub mod rule;
