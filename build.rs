//! Build script: stamps the version string with the git commit and the build date.
//!
//! Sets `AVM_VERSION` (`v<semver>-<12 hex digits of the commit>`, Antrea's full-version style; just
//! `v<semver>` when built outside a git checkout), `AVM_GIT_COMMIT` and `AVM_BUILD_DATE`, read by
//! `src/version.rs`. The date honours `SOURCE_DATE_EPOCH`, so a package
//! build can be reproducible. The script re-runs only when the checked-out commit changes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    let commit = git(&["rev-parse", "HEAD"]);
    watch_head();

    let semver = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let version = match &commit {
        Some(c) => format!("v{semver}-{}", &c[..c.len().min(12)]),
        None => format!("v{semver}"),
    };
    println!("cargo:rustc-env=AVM_VERSION={version}");
    println!(
        "cargo:rustc-env=AVM_GIT_COMMIT={}",
        commit
            .as_deref()
            .unwrap_or("unknown (not built from a git checkout)")
    );
    println!("cargo:rustc-env=AVM_BUILD_DATE={}", build_date());
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

/// Re-run when HEAD moves: HEAD itself (a checkout) and the branch it names (a commit).
fn watch_head() {
    let (Some(git_dir), Some(common)) = (
        git(&["rev-parse", "--absolute-git-dir"]),
        git(&["rev-parse", "--git-common-dir"]),
    ) else {
        return;
    };
    let git_dir = PathBuf::from(git_dir);
    let common = absolute(&git_dir, Path::new(&common));
    let head = git_dir.join("HEAD");
    println!("cargo:rerun-if-changed={}", head.display());
    println!("cargo:rerun-if-changed={}", common.join("packed-refs").display());
    if let Ok(text) = std::fs::read_to_string(&head) {
        if let Some(branch) = text.trim().strip_prefix("ref: ") {
            println!("cargo:rerun-if-changed={}", common.join(branch).display());
        }
    }
}

fn absolute(base: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        // `--git-common-dir` may be relative to the working directory (the package root).
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or_else(|_| base.join(p))
    }
}

/// `SOURCE_DATE_EPOCH`, else now, as `YYYY-MM-DDTHH:MM:SSZ`.
fn build_date() -> String {
    let secs = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        });
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}
