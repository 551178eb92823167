//! Standalone mode: the ExternalNode is a YAML (or JSON) file. Its appearance, change and removal
//! are the ExternalNode's add, update and delete. The file is polled (cheap, and robust to editors
//! that replace files and to directories that do not exist yet).

use std::path::PathBuf;
use std::time::Duration;

use futures::stream::{self, BoxStream, StreamExt};

use super::{ExternalNodeSource, SourceEvent};
use crate::k8s::external_node::ExternalNodeObject;

/// Reads the ExternalNode from a file every `interval`, reporting only changes.
#[derive(Clone, Debug)]
pub struct FileSource {
    pub path: PathBuf,
    pub interval: Duration,
}

impl FileSource {
    pub fn new(path: impl Into<PathBuf>, interval: Duration) -> Self {
        FileSource {
            path: path.into(),
            interval,
        }
    }

    /// One observation of the file.
    pub async fn read(&self) -> SourceEvent {
        match tokio::fs::read_to_string(&self.path).await {
            Ok(text) if text.trim().is_empty() => SourceEvent::Error(format!(
                "ExternalNode file {}: file is empty (remove the file to delete the ExternalNode)",
                self.path.display()
            )),
            Ok(text) => match serde_norway::from_str::<ExternalNodeObject>(&text) {
                Ok(obj) => SourceEvent::Present(Box::new(obj)),
                Err(e) => SourceEvent::Error(format!("ExternalNode file {}: {e}", self.path.display())),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => SourceEvent::Absent,
            Err(e) => SourceEvent::Error(format!(
                "ExternalNode file {}: cannot read: {e}",
                self.path.display()
            )),
        }
    }
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
            Some(SourceEvent::Error(msg)) => assert!(msg.contains("en.yaml"), "{msg}"),
            other => panic!("expected error, got {other:?}"),
        }
        std::fs::remove_file(&path).expect("rm");
        assert_eq!(next(&mut events).await, Some(SourceEvent::Absent));
    }
}
