//! Failpoints for crash tests. In debug builds (what `cargo test` builds), setting
//! `ANTREA_VM_AGENT_FAILPOINT=<name>` makes the agent stop dead when it reaches that point: it
//! logs `failpoint <name> reached` and freezes its thread forever, so a test can SIGKILL it at
//! exactly that step boundary. Release builds compile `hit` to nothing.

/// The environment variable naming the failpoint to stop at.
pub const ENV: &str = "ANTREA_VM_AGENT_FAILPOINT";

/// Marks a failpoint; freezes the agent if it is the one selected in the environment.
#[inline]
pub fn hit(name: &str) {
    #[cfg(debug_assertions)]
    if std::env::var(ENV).is_ok_and(|selected| selected == name) {
        tracing::error!("failpoint {name} reached; freezing until killed");
        loop {
            // Blocking on purpose: the whole agent must stop here, as if killed at this instant.
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = name;
}
