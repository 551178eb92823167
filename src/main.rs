//! The `antrea-vm-agent` binary: command line and wiring.
#![forbid(unsafe_code)]

fn main() {}
