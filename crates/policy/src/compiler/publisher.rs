//! Publishing the compiler's conjunctions to the packet-in responder as a shared map, copying
//! only the entries that changed when the previous map is no longer read.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::{Compiler, ConjunctionMap, SharedConjunctions};

/// From this many changed conjunctions on, the spare is made afresh from the new map instead of
/// being left that far behind.
const FRESH_SPARE_FROM: usize = 1024;

/// When at least one in this many of the published conjunctions changed (and at least
/// [`FRESH_SPARE_FROM`]), the map is built afresh from the compiler, at once, instead of
/// entering each change into a copy (a fleet loaded: 10,000 changes into an empty map).
const REBUILD_FROM_SHARE: usize = 4;

/// Publishes [`Compiler::known_conjunctions`] as a shared map (what the packet-in responder
/// reads) without copying every entry on each change: it keeps the previous map as a spare and,
/// once nobody else holds it, brings it up to date with only the entries that changed since.
#[derive(Debug, Default)]
pub struct ConjunctionPublisher {
    current: SharedConjunctions,
    /// An older map and the ids it is behind `current` on.
    spare: Option<(SharedConjunctions, BTreeSet<u32>)>,
}

impl ConjunctionPublisher {
    pub fn new() -> Self {
        Self::default()
    }

    /// The compiler's current conjunctions. Cheap when little changed and the previous
    /// publication's readers are gone.
    pub fn publish(&mut self, compiler: &mut Compiler) -> SharedConjunctions {
        let changes = compiler
            .take_conjunction_changes()
            // So many changed (a fleet loaded) that building the map afresh, at once, is cheaper
            // than entering each change into a copy.
            .filter(|changed| {
                changed.len() < FRESH_SPARE_FROM
                    || changed.len().saturating_mul(REBUILD_FROM_SHARE) < self.current.len()
            });
        let Some(changed) = changes else {
            let map = compiler.known_conjunctions();
            // The spare is made now, while a full compile is paid for anyway: without it the
            // first one-rule change after a large load would copy every entry (tens of
            // milliseconds at 50,000 rules) before its bundle could go out.
            self.spare = Some((Arc::new(map.clone()), BTreeSet::new()));
            self.current = Arc::new(map);
            return Arc::clone(&self.current);
        };
        if changed.is_empty() {
            return Arc::clone(&self.current);
        }
        let refresh = |map: &mut ConjunctionMap, ids: &BTreeSet<u32>| {
            for &c in ids {
                match compiler.conjunction(c) {
                    Some(info) => {
                        map.insert(c, Arc::clone(info));
                    }
                    None => {
                        map.remove(&c);
                    }
                }
            }
        };
        let mut spare = self.spare.take();
        let updated = spare.as_mut().and_then(|(map, behind)| {
            let m = Arc::get_mut(map)?;
            refresh(m, behind);
            refresh(m, &changed);
            Some(())
        });
        let next = match (updated, spare) {
            (Some(()), Some((map, _))) => map,
            _ => {
                // Someone still reads the spare (or there is none): copy.
                let mut m = (*self.current).clone();
                refresh(&mut m, &changed);
                Arc::new(m)
            }
        };
        let previous = std::mem::replace(&mut self.current, next);
        self.spare = if changed.len() >= FRESH_SPARE_FROM {
            // A spare this far behind would cost the next (small) change as much as a copy: a
            // large change (a fleet loaded incrementally) pays for an up-to-date spare now.
            drop(previous);
            Some((Arc::new((*self.current).clone()), BTreeSet::new()))
        } else {
            Some((previous, changed))
        };
        Arc::clone(&self.current)
    }
}
