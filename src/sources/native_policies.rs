//! The Antrea-native side of the standalone policy directory: the local ExternalNode's
//! ExternalEntities (read from `standalone.externalNodeFile`, as antrea-controller derives them),
//! and the hand-over of the directory's Antrea-native objects to the local controller
//! ([`crate::policy::native`]), whose controlplane objects join the snapshot next to the
//! hand-written ones. One pipeline: everything downstream sees controlplane objects only.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use super::bounded::{parse_values, read_regular_file, FileRead};
use super::policy_dir::PolicySnapshot;
use crate::config::InputLimits;
use crate::k8s::external_node::ExternalNodeObject;
use crate::policy::controlplane::ValidObject;
use crate::policy::native::{self, Entity, Inputs, NativeKind, NativeObject};

/// An Antrea-native object's identity: kind, namespace, name.
pub type NativeKey = (NativeKind, String, String);

pub fn native_key(o: &NativeObject) -> NativeKey {
    (o.kind(), o.meta().namespace.clone(), o.meta().name.clone())
}

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

/// Translates the directory's Antrea-native objects and adds the result to `snapshot`. An
/// object defined in two files is a conflict: the version translated before the conflict stays
/// in force (a second copy of a policy must never remove the first one's enforcement), and
/// when there was none, no definition is used until only one is left. `enforced` holds the
/// definition used per object and is updated. A translated object whose name a hand-written
/// controlplane object already has is left out.
pub fn translate_into(
    natives: &[(&Path, &NativeObject)],
    local: &[Entity],
    enforced: &mut BTreeMap<NativeKey, NativeObject>,
    snapshot: &mut PolicySnapshot,
    errors: &mut Vec<String>,
) {
    let mut by_key: BTreeMap<NativeKey, Vec<(&Path, &NativeObject)>> = BTreeMap::new();
    for (path, object) in natives {
        by_key.entry(native_key(object)).or_default().push((path, object));
    }
    let mut inputs = Inputs {
        objects: Vec::with_capacity(by_key.len()),
        local_entities: local.to_vec(),
    };
    let mut now_enforced = BTreeMap::new();
    for (key, definitions) in by_key {
        if let [(path, object)] = definitions.as_slice() {
            inputs
                .objects
                .push((format!("policy file {}", path.display()), (*object).clone()));
            now_enforced.insert(key, (*object).clone());
            continue;
        }
        let files: Vec<String> = definitions.iter().map(|(p, _)| p.display().to_string()).collect();
        let kept = enforced.remove(&key);
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
            inputs.objects.push((origin, object.clone()));
            now_enforced.insert(key, object);
        }
    }
    *enforced = now_enforced;
    let translation = native::translate(&inputs);
    errors.extend(translation.errors.iter().cloned());
    let taken_policies: std::collections::BTreeSet<String> =
        snapshot.network_policies.iter().map(|p| p.name.clone()).collect();
    let taken_ags: std::collections::BTreeSet<String> =
        snapshot.address_groups.iter().map(|g| g.name.clone()).collect();
    let taken_atgs: std::collections::BTreeSet<String> = snapshot
        .applied_to_groups
        .iter()
        .map(|g| g.name.clone())
        .collect();
    for object in translation.objects() {
        let kind = object.kind();
        let name = object.metadata().name.clone();
        match object.validate() {
            Ok(ValidObject::NetworkPolicy(p)) if !taken_policies.contains(&name) => {
                snapshot.network_policies.push(Arc::clone(&p));
            }
            Ok(ValidObject::AddressGroup(g)) if !taken_ags.contains(&name) => snapshot.address_groups.push(g),
            Ok(ValidObject::AppliedToGroup(g)) if !taken_atgs.contains(&name) => {
                snapshot.applied_to_groups.push(g)
            }
            Ok(_) => errors.push(format!(
                "local controller: {kind} {name} is also defined by a controlplane object in the \
                 policy directory; the controlplane object is used"
            )),
            Err(e) => errors.push(format!("local controller: produced an invalid object: {e}")),
        }
    }
}
