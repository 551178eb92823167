//! Standalone mode: the ExternalNode is a YAML (or JSON) file. Its appearance, change and removal
//! are the ExternalNode's add, update and delete. The file is polled (cheap, and robust to editors
//! that replace files and to directories that do not exist yet).

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::stream::{self, BoxStream, StreamExt};

use super::bounded::{parse_values, read_regular_file, FileRead};
use super::{ExternalNodeSource, SourceError, SourceEvent};
use crate::config::InputLimits;
use crate::k8s::external_node::ExternalNodeObject;

/// From this size on, the allocator's free memory is handed back after the file is dropped.
const TRIM_AFTER_BYTES: usize = 256 << 10;

/// Reads the ExternalNode from a file every `interval`, reporting only changes.
#[derive(Clone, Debug)]
pub struct FileSource {
    pub path: PathBuf,
    pub interval: Duration,
    pub limits: InputLimits,
}

impl FileSource {
    pub fn new(path: impl Into<PathBuf>, interval: Duration) -> Self {
        FileSource {
            path: path.into(),
            interval,
            limits: InputLimits::default(),
        }
    }

    /// The same source with other reading limits.
    pub fn with_limits(mut self, limits: InputLimits) -> Self {
        self.limits = limits;
        self
    }

    /// One observation of the file, read and parsed on the blocking pool (never on an actor's
    /// thread) within the limits.
    pub async fn read(&self) -> SourceEvent {
        let path = self.path.clone();
        let limits = self.limits.clone();
        tokio::task::spawn_blocking(move || read_blocking(&path, &limits))
            .await
            .unwrap_or_else(|e| {
                SourceEvent::Error(SourceError::ExternalNodeFile {
                    path: self.path.clone(),
                    problem: format!("reading failed: {e}"),
                })
            })
    }
}

/// Parses the ExternalNode file's text within the limits.
fn parse_external_node(text: &str, json: bool, limits: &InputLimits) -> Result<ExternalNodeObject, String> {
    if text.trim().is_empty() {
        return Err("file is empty (remove the file to delete the ExternalNode)".into());
    }
    // The limits first (cheap, bounded); then the typed parse, whose errors name line and column.
    parse_values(text, json, limits).map_err(|e| e.to_string())?;
    serde_norway::from_str::<ExternalNodeObject>(text).map_err(|e| e.to_string())
}

fn read_blocking(path: &Path, limits: &InputLimits) -> SourceEvent {
    let error = |problem: String| {
        SourceEvent::Error(SourceError::ExternalNodeFile {
            path: path.to_path_buf(),
            problem,
        })
    };
    let text = match read_regular_file(path, limits.max_file_bytes) {
        Ok(FileRead::Text(text)) => text,
        Ok(FileRead::Missing) => return SourceEvent::Absent,
        Ok(FileRead::NotRegular(what)) => return error(format!("skipped: it is {what}, not a regular file")),
        Err(e) => return error(e.to_string()),
    };
    let json = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    let event = match parse_external_node(&text, json, limits) {
        Ok(obj) => SourceEvent::Present(Box::new(obj)),
        Err(why) => error(why),
    };
    if text.len() >= TRIM_AFTER_BYTES {
        drop(text);
        crate::memory::release_free_memory();
    }
    event
}

impl ExternalNodeSource for FileSource {
    fn subscribe(&self) -> BoxStream<'static, SourceEvent> {
        let source = self.clone();
        stream::unfold((source, None::<SourceEvent>), |(source, last)| async move {
            loop {
                if last.is_some() {
                    tokio::time::sleep(source.interval).await;
                }
                let now = source.read().await;
                if last.as_ref() != Some(&now) {
                    return Some((now.clone(), (source, Some(now))));
                }
            }
        })
        .boxed()
    }

    fn describe(&self) -> String {
        format!("file {}", self.path.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn next(events: &mut BoxStream<'static, SourceEvent>) -> Option<SourceEvent> {
        tokio::time::timeout(Duration::from_secs(5), events.next())
            .await
            .expect("event in time")
    }

    #[tokio::test]
    async fn reports_absent_present_change_error_and_delete() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("en.yaml");
        let source = FileSource::new(&path, Duration::from_millis(10));
        let mut events = source.subscribe();
        assert_eq!(next(&mut events).await, Some(SourceEvent::Absent));
        std::fs::write(
            &path,
            "metadata: {name: vm1}\nspec: {interfaces: [{ips: [10.0.0.2]}]}\n",
        )
        .expect("write");
        match next(&mut events).await {
            Some(SourceEvent::Present(obj)) => assert_eq!(obj.metadata.name, "vm1"),
            other => panic!("expected present, got {other:?}"),
        }
        std::fs::write(&path, "metadata: [unclosed\n").expect("write");
        match next(&mut events).await {
            Some(SourceEvent::Error(e)) => assert!(e.to_string().contains("en.yaml"), "{e}"),
            other => panic!("expected error, got {other:?}"),
        }
        std::fs::remove_file(&path).expect("rm");
        assert_eq!(next(&mut events).await, Some(SourceEvent::Absent));
    }

    const EN: &str = "apiVersion: crd.antrea.io/v1alpha1\nkind: ExternalNode\n\
                      metadata: {name: vm1, namespace: vm-ns}\n\
                      spec:\n  interfaces:\n  - name: eth0\n    ips: [\"10.0.0.2\", \"fd00::2\"]\n";

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Random edits of a valid ExternalNode file: no panic, a bounded time, and whatever is
        /// accepted never names an address that cannot identify an uplink.
        #[test]
        fn random_mutations_are_parsed_or_refused_in_bounded_time(
            edits in proptest::collection::vec(crate::sources::mutations::mutation(), 1..4)
        ) {
            let limits = InputLimits::default();
            let mut text = EN.to_string();
            for edit in &edits {
                text = edit.apply(&text);
                let started = std::time::Instant::now();
                let parsed = parse_external_node(&text, false, &limits);
                proptest::prop_assert!(started.elapsed() < Duration::from_secs(3));
                if let Ok(node) = parsed.map_err(|_| ()).and_then(|o| o.validate("vm1", "vm-ns").map_err(|_| ())) {
                    for ip in node.interfaces.iter().flat_map(|i| &i.ips) {
                        let ip = ip.to_canonical();
                        proptest::prop_assert!(!ip.is_loopback() && !ip.is_unspecified() && !ip.is_multicast());
                    }
                }
            }
        }
    }

    #[tokio::test]
    async fn fifos_deep_nesting_and_large_files_are_errors_in_bounded_time() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("en.yaml");
        let source = FileSource::new(&path, Duration::from_millis(10)).with_limits(InputLimits {
            max_file_bytes: 64 << 10,
            ..InputLimits::default()
        });
        let error = |event: SourceEvent| match event {
            SourceEvent::Error(e) => e.to_string(),
            other => panic!("expected an error, got {other:?}"),
        };
        let made = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .expect("mkfifo");
        assert!(made.success());
        let started = std::time::Instant::now();
        assert_eq!(
            error(source.read().await),
            format!(
                "ExternalNode file {}: skipped: it is a FIFO, not a regular file",
                path.display()
            )
        );
        std::fs::remove_file(&path).expect("rm");
        std::fs::write(&path, format!("metadata: {}", "{a: ".repeat(10_000))).expect("write");
        assert!(error(source.read().await)
            .ends_with("nesting deeper than 64 levels at line 1 (standalone.inputLimits.maxNestingDepth)"));
        std::fs::write(&path, "x".repeat(100 << 10)).expect("write");
        assert!(error(source.read().await).contains("more than the 65536 bytes allowed"));
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
