//! The Antrea-native side of the standalone policy directory: the local ExternalNode's
//! ExternalEntities (read from `standalone.externalNodeFile`, as antrea-controller derives them),
//! and the hand-over of the directory's Antrea-native objects to the local controller
//! ([`crate::policy::native`]), whose controlplane objects join the snapshot next to the
//! hand-written ones. One pipeline: everything downstream sees controlplane objects only.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use super::bounded::{parse_values, read_regular_file, FileRead};
use super::policy_dir::PolicySnapshot;
use crate::config::InputLimits;
use crate::k8s::external_node::ExternalNodeObject;
use crate::policy::controlplane::{Kind, ValidObject};
use crate::policy::native::{self, Change, Delta, Entity, NativeObject, NativeState};
pub use crate::policy::native::{native_key, NativeKey};

pub fn native_raw_key(v: &Value) -> Option<NativeKey> {
    native::objects::raw_key(v)
}

/// The ExternalNode file as last read, and the ExternalEntities derived from its last good
/// version (a half-saved ExternalNode file must not empty every AppliedToGroup).
#[derive(Debug, Default)]
pub struct LocalNode {
    text: Option<Result<String, String>>,
    entities: Vec<Entity>,
}

impl LocalNode {
    /// Takes the file's current text (or why it could not be read); derives the entities when
    /// it parses.
    pub fn update(&mut self, text: Option<Result<String, String>>, limits: &InputLimits) {
        if self.text == text {
            return;
        }
        if let Some(Ok(t)) = &text {
            let parsed = parse_values(t, false, limits)
                .ok()
                .and_then(|mut docs| (docs.len() == 1).then(|| docs.remove(0)))
                .and_then(|doc| serde_json::from_value::<ExternalNodeObject>(doc).ok());
            if let Some(node) = parsed {
                self.entities = native::local_entities(&node);
            }
        }
        self.text = text;
    }

    pub fn entities(&self) -> &[Entity] {
        &self.entities
    }
}

/// Reads the ExternalNode file on the calling (blocking) thread: `None` when there is none.
pub fn read_node_text(path: Option<&PathBuf>, limits: &InputLimits) -> Option<Result<String, String>> {
    let path = path?;
    match read_regular_file(path, limits.max_file_bytes) {
        Ok(FileRead::Text(t)) => Some(Ok(t)),
        Ok(FileRead::Missing) => None,
        Ok(FileRead::NotRegular(what)) => Some(Err(format!("it is {what}"))),
        Err(e) => Some(Err(e.to_string())),
    }
}

/// The local controller as the policy directory runs it: kept between passes, fed only what
/// changed (objects added, edited or removed; the ExternalNode's entities), its output validated
/// once per changed object.
#[derive(Default)]
pub struct LocalController {
    /// `None` until the directory holds an Antrea-native object.
    state: Option<NativeState>,
    /// The controller's output, validated (or why not), by kind and name.
    validated: BTreeMap<(Kind, String), Result<ValidObject, String>>,
}

impl std::fmt::Debug for LocalController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalController")
            .field("objects", &self.state.as_ref().map_or(0, |s| s.objects().count()))
            .field("outputs", &self.validated.len())
            .finish()
    }
}

impl LocalController {
    /// Brings the controller to the directory's Antrea-native objects and adds its output to
    /// `snapshot`. An object defined in two files is a conflict: the version translated before
    /// the conflict stays in force (a second copy of a policy must never remove the first one's
    /// enforcement), and when there was none, no definition is used until only one is left. A
    /// translated object whose name a hand-written controlplane object already has is left out.
    pub fn translate_into(
        &mut self,
        natives: &[(&Path, &NativeObject)],
        local: &[Entity],
        snapshot: &mut PolicySnapshot,
        errors: &mut Vec<String>,
    ) {
        if natives.is_empty() {
            self.state = None;
            self.validated.clear();
            return;
        }
        let mut by_key: BTreeMap<NativeKey, Vec<(&Path, &NativeObject)>> = BTreeMap::new();
        // One origin text per file, not per object (thousands of objects share a few files).
        let mut origins: BTreeMap<&Path, String> = BTreeMap::new();
        for (path, object) in natives {
            by_key.entry(native_key(object)).or_default().push((path, object));
            origins
                .entry(*path)
                .or_insert_with(|| format!("policy file {}", path.display()));
        }
        // What the controller should hold now, borrowed: only what differs is cloned (and the
        // version kept through a conflict, which the controller itself holds).
        let mut desired: BTreeMap<NativeKey, (Cow<str>, Cow<NativeObject>)> = BTreeMap::new();
        for (key, definitions) in by_key {
            if let [(path, object)] = definitions.as_slice() {
                let origin = origins.get(*path).map_or("", String::as_str);
                desired.insert(key, (Cow::Borrowed(origin), Cow::Borrowed(*object)));
                continue;
            }
            let files: Vec<String> = definitions.iter().map(|(p, _)| p.display().to_string()).collect();
            let kept = self
                .state
                .as_ref()
                .and_then(|s| s.object(&key))
                .map(|(_, o)| o.clone());
            let outcome = if kept.is_some() {
                "keeping the version enforced before the conflict"
            } else {
                "none of the definitions is used"
            };
            errors.push(format!(
                "policy files {}: {} is defined more than once: a conflict; {outcome} until only one \
                 is left",
                files.join(", "),
                definitions[0].1.describe()
            ));
            if let Some(object) = kept {
                let origin = format!(
                    "policy files {} (the version enforced before the conflict)",
                    files.join(", ")
                );
                desired.insert(key, (Cow::Owned(origin), Cow::Owned(object)));
            }
        }
        let delta = match &mut self.state {
            None => {
                let objects = desired
                    .into_iter()
                    .map(|(_, (origin, object))| (origin.into_owned(), object.into_owned()))
                    .collect();
                let state = NativeState::new(objects, local.to_vec());
                let delta = Delta {
                    upserted: state.translation().objects(),
                    deleted: Vec::new(),
                };
                self.state = Some(state);
                delta
            }
            Some(state) => {
                // Both sides are sorted by key: one walk, no lookups.
                let mut changes: Vec<Change> = Vec::new();
                let mut held = state.objects().peekable();
                for (key, (origin, object)) in desired {
                    while let Some((gone, _)) = held.next_if(|(k, _)| **k < key) {
                        changes.push(Change::Delete(gone.clone()));
                    }
                    let unchanged = held
                        .next_if(|(k, _)| **k == key)
                        .is_some_and(|(_, (o, h))| o.as_str() == origin.as_ref() && *h == *object);
                    if !unchanged {
                        changes.push(Change::Upsert {
                            origin: origin.into_owned(),
                            object: Box::new(object.into_owned()),
                        });
                    }
                }
                changes.extend(held.map(|(gone, _)| Change::Delete(gone.clone())));
                if !state.local_entities().eq(local.iter()) {
                    changes.push(Change::LocalEntities(local.to_vec()));
                }
                state.apply(changes)
            }
        };
        for key in delta.deleted {
            self.validated.remove(&key);
        }
        for object in delta.upserted {
            let key = (object.kind(), object.metadata().name.clone());
            self.validated
                .insert(key, object.validate().map_err(|e| e.to_string()));
        }
        if let Some(state) = &self.state {
            errors.extend(state.errors());
        }
        self.add_to(snapshot, errors);
    }

    /// Adds the validated output to `snapshot`, behind the hand-written controlplane objects.
    fn add_to(&self, snapshot: &mut PolicySnapshot, errors: &mut Vec<String>) {
        let taken_policies: BTreeSet<String> =
            snapshot.network_policies.iter().map(|p| p.name.clone()).collect();
        let taken_ags: BTreeSet<String> = snapshot.address_groups.iter().map(|g| g.name.clone()).collect();
        let taken_atgs: BTreeSet<String> = snapshot
            .applied_to_groups
            .iter()
            .map(|g| g.name.clone())
            .collect();
        for ((kind, name), object) in &self.validated {
            match object {
                Ok(ValidObject::NetworkPolicy(p)) if !taken_policies.contains(name) => {
                    snapshot.network_policies.push(Arc::clone(p));
                }
                Ok(ValidObject::AddressGroup(g)) if !taken_ags.contains(name) => {
                    snapshot.address_groups.push(g.clone())
                }
                Ok(ValidObject::AppliedToGroup(g)) if !taken_atgs.contains(name) => {
                    snapshot.applied_to_groups.push(g.clone())
                }
                Ok(_) => errors.push(format!(
                    "local controller: {kind} {name} is also defined by a controlplane object in the \
                     policy directory; the controlplane object is used"
                )),
                Err(e) => errors.push(format!("local controller: produced an invalid object: {e}")),
            }
        }
    }
}
