//! An in-process ExternalNode source for actor tests: the test sets the state and every
//! subscriber sees it.

use std::sync::Arc;

use futures::stream::{BoxStream, StreamExt};
use tokio::sync::watch;

use super::{ExternalNodeSource, SourceEvent};

/// A source whose state the test controls.
#[derive(Clone)]
pub struct FakeSource {
    tx: Arc<watch::Sender<SourceEvent>>,
}

impl Default for FakeSource {
    fn default() -> Self {
        FakeSource {
            tx: Arc::new(watch::channel(SourceEvent::Absent).0),
        }
    }
}

impl FakeSource {
    pub fn set(&self, event: SourceEvent) {
        self.tx.send_replace(event);
    }
}

impl ExternalNodeSource for FakeSource {
    fn subscribe(&self) -> BoxStream<'static, SourceEvent> {
        let rx = self.tx.subscribe();
        tokio_stream_from_watch(rx).boxed()
    }
    fn describe(&self) -> String {
        "fake source".into()
    }
}

fn tokio_stream_from_watch(rx: watch::Receiver<SourceEvent>) -> impl futures::Stream<Item = SourceEvent> {
    futures::stream::unfold((rx, true), |(mut rx, first)| async move {
        if !first && rx.changed().await.is_err() {
            return None;
        }
        let value = rx.borrow_and_update().clone();
        Some((value, (rx, false)))
    })
}
