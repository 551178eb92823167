//! Delivery of a switch's notifications ([`Event`]: packet-ins and port status changes) to the
//! agent's subscribers. The notification types themselves are the codec's
//! ([`ovs_openflow::events`]), re-exported here.
//!
//! Notifications reach subscribers through a [`Hub`]: every [`Subscription`] has its own
//! bounded queue, so a slow subscriber never stalls the connection or the other subscribers.
//! Nothing is lost silently: an event that finds a subscriber's queue full is counted in that
//! subscription's [`Subscription::dropped`], and an event that finds no subscriber at all is
//! counted too; [`Hub::dropped`] is the connection's total, and both are logged.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;
use tracing::{debug, warn};

pub use ovs_openflow::events::*;

struct Sub {
    tx: mpsc::Sender<Event>,
    dropped: Arc<AtomicU64>,
}

/// Fans notifications out to subscribers (see the module documentation).
pub struct Hub {
    subs: Mutex<Vec<Sub>>,
    capacity: usize,
    dropped: AtomicU64,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("capacity", &self.capacity)
            .field("dropped", &self.dropped())
            .finish_non_exhaustive()
    }
}

impl Hub {
    /// A hub whose subscriptions each queue up to `capacity` events.
    pub fn new(capacity: usize) -> Self {
        Hub {
            subs: Mutex::new(Vec::new()),
            capacity: capacity.max(1),
            dropped: AtomicU64::new(0),
        }
    }

    /// A new subscription; it sees every event published from now on.
    pub fn subscribe(&self) -> Subscription {
        let (tx, rx) = mpsc::channel(self.capacity);
        let dropped = Arc::new(AtomicU64::new(0));
        if let Ok(mut subs) = self.subs.lock() {
            subs.push(Sub {
                tx,
                dropped: dropped.clone(),
            });
        }
        Subscription { rx, dropped }
    }

    /// Hands `ev` to every subscriber, counting (and logging) every copy that cannot be
    /// delivered.
    pub fn publish(&self, ev: Event) {
        let Ok(mut subs) = self.subs.lock() else {
            return;
        };
        subs.retain(|s| !s.tx.is_closed());
        if subs.is_empty() {
            let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            debug!(
                total_dropped = n,
                kind = kind(&ev),
                "OpenFlow notification with no subscriber dropped"
            );
            return;
        }
        for s in subs.iter() {
            match s.tx.try_send(ev.clone()) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    let mine = s.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                    let total = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                    if mine.is_power_of_two() {
                        warn!(
                            dropped = mine,
                            total_dropped = total,
                            kind = kind(&ev),
                            "OpenFlow notification dropped: a subscriber's queue is full"
                        );
                    }
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {}
            }
        }
    }

    /// Every notification not delivered to some subscriber so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Ends every subscription: their `recv` returns `None` once drained.
    pub fn close(&self) {
        if let Ok(mut subs) = self.subs.lock() {
            subs.clear();
        }
    }
}

fn kind(ev: &Event) -> &'static str {
    match ev {
        Event::PacketIn(_) => "packet-in",
        Event::PortStatus(_) => "port-status",
    }
}

/// A subscriber's queue of notifications. Ends (returns `None`) when the connection closes.
#[derive(Debug)]
pub struct Subscription {
    rx: mpsc::Receiver<Event>,
    dropped: Arc<AtomicU64>,
}

impl Subscription {
    /// The next notification; `None` once the connection is gone and the queue is drained.
    pub async fn recv(&mut self) -> Option<Event> {
        self.rx.recv().await
    }

    /// The next notification if one is queued.
    pub fn try_recv(&mut self) -> Option<Event> {
        self.rx.try_recv().ok()
    }

    /// How many notifications this subscription lost because its queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port_event(n: u32) -> Event {
        Event::PortStatus(PortStatus {
            reason: PortReason::Add,
            port: PortDesc {
                port_no: n,
                ..PortDesc::default()
            },
        })
    }

    #[tokio::test]
    async fn every_subscriber_gets_every_event_and_drops_are_counted() {
        let hub = Hub::new(2);
        hub.publish(port_event(0));
        assert_eq!(hub.dropped(), 1, "no subscriber: counted");
        let mut a = hub.subscribe();
        let mut b = hub.subscribe();
        for n in 1..=3 {
            hub.publish(port_event(n));
            // `a` keeps up, `b` does not read.
            assert_eq!(a.recv().await, Some(port_event(n)));
        }
        assert_eq!(a.dropped(), 0);
        assert_eq!(b.dropped(), 1);
        assert_eq!(hub.dropped(), 2);
        assert_eq!(b.try_recv(), Some(port_event(1)));
        assert_eq!(b.try_recv(), Some(port_event(2)));
        assert_eq!(b.try_recv(), None);
        drop(b);
        hub.publish(port_event(4));
        assert_eq!(
            hub.dropped(),
            2,
            "a closed subscription is forgotten, not counted"
        );
        hub.close();
        assert_eq!(a.recv().await, Some(port_event(4)));
        assert_eq!(a.recv().await, None);
    }
}
