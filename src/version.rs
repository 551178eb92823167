//! The agent's version string, stamped by `build.rs`: one string for `--version`, the log,
//! AntreaAgentInfo and `get agentinfo`.

/// `v<semver>-<12 hex digits of the git commit>` (Antrea's full-version style), or `v<semver>`
/// for a build outside a git checkout.
pub const VERSION: &str = env!("AVM_VERSION");

/// The full commit the binary was built from.
pub const GIT_COMMIT: &str = env!("AVM_GIT_COMMIT");

/// When the binary was built (UTC; `SOURCE_DATE_EPOCH` when the build set it).
pub const BUILD_DATE: &str = env!("AVM_BUILD_DATE");

/// What `antrea-vm-agent --version` prints after the program name.
pub const LONG_VERSION: &str = concat!(
    env!("AVM_VERSION"),
    "\ncommit: ",
    env!("AVM_GIT_COMMIT"),
    "\nbuilt:  ",
    env!("AVM_BUILD_DATE")
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_is_semver_then_commit() {
        let semver = concat!("v", env!("CARGO_PKG_VERSION"));
        assert!(VERSION.starts_with(semver), "{VERSION}");
        if let Some(sha) = VERSION.strip_prefix(semver).and_then(|s| s.strip_prefix('-')) {
            assert_eq!(sha.len(), 12, "{VERSION}");
            assert!(sha.chars().all(|c| c.is_ascii_hexdigit()), "{VERSION}");
            assert!(GIT_COMMIT.starts_with(sha), "{GIT_COMMIT} vs {VERSION}");
        }
        assert!(LONG_VERSION.starts_with(VERSION));
        assert!(LONG_VERSION.contains(BUILD_DATE));
        // YYYY-MM-DDTHH:MM:SSZ
        assert_eq!(BUILD_DATE.len(), 20, "{BUILD_DATE}");
        assert!(
            BUILD_DATE.ends_with('Z') && BUILD_DATE.as_bytes()[10] == b'T',
            "{BUILD_DATE}"
        );
    }
}
