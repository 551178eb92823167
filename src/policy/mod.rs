//! The pure policy core is the `antrea-policy` crate (`crates/policy`): controlplane validation,
//! the native local controller, resolution, priorities, the compiler, the pipeline and flow sets.
//! Re-exported here under its module names, so `crate::policy::{compiler, controlplane, native,
//! resolve, ...}` keep meaning what they did; the crate boundary keeps it free of I/O.

pub use antrea_policy::*;
