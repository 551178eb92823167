//! The Go agent's klog command-line flags, so an existing systemd unit runs this binary with only
//! its path changed: `--v`, `--logtostderr`, `--alsologtostderr`, `--log_file`,
//! `--log_file_max_size` and `--log_file_max_num` (what they mean here), `--feature-gates`
//! (merged over the configuration's `featureGates`), and the log file with size-based rotation
//! ([`RotatingFile`]). That rotation is the log's only one, as klog's is for the Go agent: the
//! package and the installer ship no logrotate file for it.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Antrea's defaults for the log file rotation flags.
pub const DEFAULT_LOG_FILE_MAX_SIZE_MB: u64 = 100;
pub const DEFAULT_LOG_FILE_MAX_NUM: u32 = 4;

/// The klog flags the Go agent's units use.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct LogArgs {
    /// Write logs to this file (appended).
    #[arg(long = "log_file", alias = "log-file")]
    pub log_file: Option<PathBuf>,
    /// Log to standard error instead of a file (klog syntax: --logtostderr=false).
    #[arg(long = "logtostderr", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub logtostderr: Option<bool>,
    /// Log to standard error as well as to --log_file.
    #[arg(long = "alsologtostderr", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub alsologtostderr: Option<bool>,
    /// Rotate --log_file when it reaches this many megabytes (0 = never).
    #[arg(long = "log_file_max_size", value_name = "MB")]
    pub log_file_max_size: Option<u64>,
    /// Rotated log files kept (`<log_file>.1` newest ... `.N` oldest).
    #[arg(long = "log_file_max_num", value_name = "N")]
    pub log_file_max_num: Option<u32>,
    /// klog verbosity; 0-1 = info, 2-3 = debug, 4+ = trace. RUST_LOG overrides it.
    #[arg(short = 'v', long = "v")]
    pub verbosity: Option<u8>,
    /// Feature gates over the configuration's `featureGates`, e.g. `AntreaPolicy=true,Egress=false`.
    #[arg(long = "feature-gates", value_name = "GATE=BOOL,...", value_parser = parse_feature_gates)]
    pub feature_gates: Option<FeatureGates>,
}

/// `--feature-gates` parsed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FeatureGates(pub BTreeMap<String, bool>);

/// A `--feature-gates` term that is not `GATE=true` or `GATE=false`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FeatureGateError {
    #[error("missing bool value for {term:?} (expected GATE=true or GATE=false)")]
    MissingValue { term: String },
    #[error("invalid value of {name}: {value:?} (expected true or false)")]
    InvalidValue { name: String, value: String },
}

/// `A=true,B=false` (component-base syntax: spaces around terms ignored, values true/false).
pub fn parse_feature_gates(text: &str) -> Result<FeatureGates, FeatureGateError> {
    let mut gates = BTreeMap::new();
    for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let (name, value) = term
            .split_once('=')
            .ok_or_else(|| FeatureGateError::MissingValue {
                term: term.to_string(),
            })?;
        let value = match value.trim() {
            "true" | "True" | "TRUE" | "1" | "t" | "T" => true,
            "false" | "False" | "FALSE" | "0" | "f" | "F" => false,
            other => {
                return Err(FeatureGateError::InvalidValue {
                    name: name.trim().to_string(),
                    value: other.to_string(),
                })
            }
        };
        gates.insert(name.trim().to_string(), value);
    }
    Ok(FeatureGates(gates))
}

impl LogArgs {
    /// Whether logs go to standard error: by default only without `--log_file` (klog would keep
    /// logging to stderr until `--logtostderr=false`; a file given is taken as meant).
    pub fn to_stderr(&self) -> bool {
        self.logtostderr.unwrap_or(self.log_file.is_none())
    }

    /// The log file, if logs go to one.
    pub fn file(&self) -> Option<&Path> {
        match (&self.log_file, self.to_stderr()) {
            (Some(path), false) => Some(path),
            _ => None,
        }
    }

    /// Also to standard error while writing the file.
    pub fn also_stderr(&self) -> bool {
        self.alsologtostderr.unwrap_or(false)
    }

    pub fn max_bytes(&self) -> u64 {
        self.log_file_max_size
            .unwrap_or(DEFAULT_LOG_FILE_MAX_SIZE_MB)
            .saturating_mul(1024 * 1024)
    }

    pub fn max_num(&self) -> u32 {
        self.log_file_max_num.unwrap_or(DEFAULT_LOG_FILE_MAX_NUM)
    }
}

/// An append-only log file that, once it holds `max_bytes`, is renamed to `<path>.1` (older ones
/// shift to `.2` ... `.max_num`, the oldest dropped) and started afresh. `max_bytes` 0 = never.
#[derive(Debug)]
pub struct RotatingFile {
    path: PathBuf,
    file: File,
    written: u64,
    max_bytes: u64,
    max_num: u32,
}

impl RotatingFile {
    pub fn open(path: &Path, max_bytes: u64, max_num: u32) -> std::io::Result<RotatingFile> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let written = file.metadata()?.len();
        Ok(RotatingFile {
            path: path.to_path_buf(),
            file,
            written,
            max_bytes,
            max_num,
        })
    }

    fn numbered(&self, n: u32) -> PathBuf {
        let mut name = self.path.clone().into_os_string();
        name.push(format!(".{n}"));
        PathBuf::from(name)
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        self.file.flush()?;
        if self.max_num == 0 {
            // Nothing kept: start the file again.
            self.file = OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(true)
                .open(&self.path)?;
        } else {
            let _ = std::fs::remove_file(self.numbered(self.max_num));
            for n in (1..self.max_num).rev() {
                let from = self.numbered(n);
                if from.exists() {
                    std::fs::rename(&from, self.numbered(n + 1))?;
                }
            }
            std::fs::rename(&self.path, self.numbered(1))?;
            self.file = OpenOptions::new().create(true).append(true).open(&self.path)?;
        }
        self.written = 0;
        Ok(())
    }
}

impl Write for RotatingFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.max_bytes > 0 && self.written > 0 && self.written + buf.len() as u64 > self.max_bytes {
            self.rotate()?;
        }
        let n = self.file.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feature_gates_parse_like_component_base() {
        let g = parse_feature_gates("AntreaPolicy=true, Egress=false").unwrap();
        assert_eq!(
            g.0,
            BTreeMap::from([("AntreaPolicy".into(), true), ("Egress".into(), false)])
        );
        let e = parse_feature_gates("AntreaPolicy").unwrap_err().to_string();
        assert_eq!(
            e,
            "missing bool value for \"AntreaPolicy\" (expected GATE=true or GATE=false)"
        );
        let e = parse_feature_gates("Egress=maybe").unwrap_err().to_string();
        assert_eq!(e, "invalid value of Egress: \"maybe\" (expected true or false)");
    }

    #[test]
    fn the_log_file_rotates_by_size_and_keeps_max_num() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.log");
        let mut f = RotatingFile::open(&path, 10, 2).unwrap();
        for line in ["aaaaaa\n", "bbbbbb\n", "cccccc\n", "dddddd\n"] {
            f.write_all(line.as_bytes()).unwrap();
        }
        f.flush().unwrap();
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        assert_eq!(read(&path), "dddddd\n");
        assert_eq!(read(&dir.path().join("agent.log.1")), "cccccc\n");
        assert_eq!(read(&dir.path().join("agent.log.2")), "bbbbbb\n");
        assert!(!dir.path().join("agent.log.3").exists(), "only max_num kept");
    }

    #[test]
    fn defaults_are_antreas() {
        let a = LogArgs::default();
        assert_eq!(a.max_bytes(), 100 * 1024 * 1024);
        assert_eq!(a.max_num(), 4);
        assert!(a.to_stderr() && a.file().is_none());
        let a = LogArgs {
            log_file: Some("/x.log".into()),
            logtostderr: Some(false),
            ..LogArgs::default()
        };
        assert_eq!(a.file(), Some(Path::new("/x.log")));
    }
}
