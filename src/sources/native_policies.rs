//! The Antrea-native side of the standalone policy directory: the local ExternalNode's
//! ExternalEntities (read from `standalone.externalNodeFile`, as antrea-controller derives them),
//! and the hand-over of the directory's Antrea-native objects to the local controller
//! ([`crate::policy::native`]), whose controlplane objects join the snapshot next to the
//! hand-written ones. One pipeline: everything downstream sees controlplane objects only.

use crate::policy::controlplane::Validate as _;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use super::bounded::{parse_values, read_regular_file, FileRead};
use super::policy_dir::PolicySnapshot;
use crate::config::InputLimits;
use crate::k8s::external_node::{local_entities, ExternalNodeObject};
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
                self.entities = local_entities(&node);
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

/// A policy file whose Antrea-native objects may have changed since the last pass: re-read,
/// added or removed. `before` lists the keys it defined until now.
#[derive(Debug)]
pub struct ChangedFile {
    pub path: PathBuf,
    pub before: Vec<NativeKey>,
}

/// The local controller as the policy directory runs it: kept between passes, fed only what
/// changed (the objects of the files re-read, added or removed; the ExternalNode's entities),
/// its output validated once per changed object. What a pass costs follows the files that
/// changed, not the directory: which files define which object is kept here, so an unchanged
/// file's objects are never looked at again.
#[derive(Default)]
pub struct LocalController {
    /// `None` until the directory holds an Antrea-native object.
    state: Option<NativeState>,
    /// The controller's output, validated (or why not), by kind and name.
    validated: BTreeMap<(Kind, String), Result<ValidObject, String>>,
    /// Every Antrea-native key with the files defining it, in path order (a file twice when it
    /// defines the key twice).
    defined_in: BTreeMap<NativeKey, Vec<PathBuf>>,
    /// The keys defined more than once: reported on every pass while they last.
    conflicts: BTreeSet<NativeKey>,
}

impl std::fmt::Debug for LocalController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalController")
            .field("objects", &self.state.as_ref().map_or(0, |s| s.objects().count()))
            .field("outputs", &self.validated.len())
            .field("conflicts", &self.conflicts.len())
            .finish()
    }
}

/// The origin of an object defined by one file, as errors name it.
fn file_origin(path: &Path) -> String {
    format!("policy file {}", path.display())
}

/// `NetworkPolicy ns/name` or `Tier name`, from a key.
fn describe_key((kind, namespace, name): &NativeKey) -> String {
    if namespace.is_empty() {
        format!("{kind} {name}")
    } else {
        format!("{kind} {namespace}/{name}")
    }
}

impl LocalController {
    /// Brings the controller to the directory's Antrea-native objects after the files in
    /// `changed` changed, and adds its output to `snapshot`. `current` gives the Antrea-native
    /// objects a file holds now (empty for a removed file); only the changed files' objects are
    /// compared with the ones held. An object defined in two files is a conflict: the version
    /// translated before the conflict stays in force (a second copy of a policy must never
    /// remove the first one's enforcement), and when there was none, no definition is used
    /// until only one is left. A translated object whose name a hand-written controlplane object
    /// already has is left out.
    pub fn translate_into<'a>(
        &mut self,
        changed: &[ChangedFile],
        current: &dyn Fn(&Path) -> &'a [NativeObject],
        local: &[Entity],
        snapshot: &mut PolicySnapshot,
        errors: &mut Vec<String>,
    ) {
        // Which keys the changed files touch, and their current definitions by key.
        let mut touched: BTreeSet<NativeKey> = BTreeSet::new();
        let mut now_in: BTreeMap<&Path, BTreeMap<NativeKey, &'a NativeObject>> = BTreeMap::new();
        for file in changed {
            for key in &file.before {
                if let Some(paths) = self.defined_in.get_mut(key) {
                    paths.retain(|p| p != &file.path);
                    if paths.is_empty() {
                        self.defined_in.remove(key);
                    }
                }
                touched.insert(key.clone());
            }
        }
        for file in changed {
            let now = current(&file.path);
            if now.is_empty() {
                // Most files hold no Antrea-native object: no entry (keyed by path, whose
                // comparisons are slow) for them; `definition` finds nothing for them either way.
                continue;
            }
            let objects = now_in.entry(file.path.as_path()).or_default();
            for object in now {
                let key = native_key(object);
                let paths = self.defined_in.entry(key.clone()).or_default();
                let at = paths.partition_point(|p| p <= &file.path);
                paths.insert(at, file.path.clone());
                objects.insert(key.clone(), object);
                touched.insert(key);
            }
        }
        if self.defined_in.is_empty() {
            self.state = None;
            self.validated.clear();
            self.conflicts.clear();
            return;
        }
        if self.state.is_none() {
            // The first objects (or the first since the directory held none): every key.
            touched = self.defined_in.keys().cloned().collect();
        }
        // The definition of `key` in `path` now: looked up among the changed files' objects, or
        // (a conflict ending by the other file's change) searched in the unchanged file.
        let definition = |path: &Path, key: &NativeKey| -> Option<&'a NativeObject> {
            match now_in.get(path) {
                Some(objects) => objects.get(key).copied(),
                None => current(path).iter().find(|o| native_key(o) == *key),
            }
        };
        let mut changes: Vec<Change> = Vec::new();
        let mut fresh: Vec<(String, NativeObject)> = Vec::new();
        let state = self.state.as_ref();
        for key in &touched {
            let held = state.and_then(|s| s.object(key));
            let paths = self.defined_in.get(key).map_or(&[][..], Vec::as_slice);
            let desired: Option<(String, &NativeObject)> = match paths {
                [] => {
                    self.conflicts.remove(key);
                    None
                }
                [path] => {
                    self.conflicts.remove(key);
                    definition(path, key).map(|object| (file_origin(path), object))
                }
                _ => {
                    self.conflicts.insert(key.clone());
                    let files: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
                    held.map(|(_, object)| {
                        (
                            format!(
                                "policy files {} (the version enforced before the conflict)",
                                files.join(", ")
                            ),
                            object,
                        )
                    })
                }
            };
            match (desired, held) {
                (None, Some(_)) => changes.push(Change::Delete(key.clone())),
                (None, None) => {}
                (Some((origin, object)), held) => {
                    let unchanged = held.is_some_and(|(o, h)| *o == origin && h == object);
                    if state.is_none() {
                        fresh.push((origin, object.clone()));
                    } else if !unchanged {
                        changes.push(Change::Upsert {
                            origin,
                            object: Box::new(object.clone()),
                        });
                    }
                }
            }
        }
        for key in &self.conflicts {
            let paths = self.defined_in.get(key).map_or(&[][..], Vec::as_slice);
            let files: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
            let outcome = if state.and_then(|s| s.object(key)).is_some() {
                "keeping the version enforced before the conflict"
            } else {
                "none of the definitions is used"
            };
            errors.push(format!(
                "policy files {}: {} is defined more than once: a conflict; {outcome} until only one \
                 is left",
                files.join(", "),
                describe_key(key)
            ));
        }
        let delta = match &mut self.state {
            None => {
                let state = NativeState::new(fresh, local.to_vec());
                let delta = Delta {
                    upserted: state.translation().objects(),
                    deleted: Vec::new(),
                };
                self.state = Some(state);
                delta
            }
            Some(state) => {
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
                    snapshot.address_groups.push(Arc::clone(g))
                }
                Ok(ValidObject::AppliedToGroup(g)) if !taken_atgs.contains(name) => {
                    snapshot.applied_to_groups.push(Arc::clone(g))
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

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;
    use crate::policy::native::decode;

    fn object(yaml: &str) -> NativeObject {
        let value: Value = serde_norway::from_str(yaml).expect("yaml");
        decode(value).expect("valid")
    }

    fn entity(name: &str, app: &str, ip: &str) -> NativeObject {
        object(&format!(
            "apiVersion: crd.antrea.io/v1alpha2\nkind: ExternalEntity\n\
             metadata: {{name: {name}, namespace: vm-ns, labels: {{app: {app}}}}}\n\
             spec: {{endpoints: [{{ip: {ip}}}]}}\n"
        ))
    }

    fn policy(name: &str, app: &str) -> NativeObject {
        object(&format!(
            "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\n\
             metadata: {{name: {name}}}\n\
             spec: {{priority: 5, appliedTo: [{{externalEntitySelector: {{matchLabels: {{role: db}}}}}}],\n\
             ingress: [{{action: Drop, from: [{{externalEntitySelector: {{matchLabels: {{app: {app}}}}}}}]}}]}}\n"
        ))
    }

    /// A directory in memory: what each file holds now, and which files the controller asked for.
    struct Files {
        files: BTreeMap<PathBuf, Vec<NativeObject>>,
        asked: RefCell<BTreeSet<PathBuf>>,
    }

    impl Files {
        fn pass(&self, controller: &mut LocalController, changed: &[ChangedFile]) -> PolicySnapshot {
            self.asked.borrow_mut().clear();
            let current = |path: &Path| -> &[NativeObject] {
                self.asked.borrow_mut().insert(path.to_path_buf());
                self.files.get(path).map_or(&[][..], Vec::as_slice)
            };
            let mut snapshot = PolicySnapshot::default();
            let mut errors = Vec::new();
            controller.translate_into(changed, &current, &[], &mut snapshot, &mut errors);
            snapshot.errors = errors;
            snapshot
        }

        /// Replaces a file's objects (`None`: removes it) and says what it held before.
        fn set(&mut self, path: &str, objects: Option<Vec<NativeObject>>) -> ChangedFile {
            let path = PathBuf::from(path);
            let before = match objects {
                Some(o) => self.files.insert(path.clone(), o),
                None => self.files.remove(&path),
            };
            ChangedFile {
                path,
                before: before.unwrap_or_default().iter().map(native_key).collect(),
            }
        }
    }

    /// The AddressGroups as the sorted names of their members.
    fn members(s: &PolicySnapshot) -> BTreeSet<Vec<String>> {
        s.address_groups
            .iter()
            .map(|g| {
                let mut names: Vec<String> = g
                    .members
                    .values()
                    .map(|m| match &m.entity {
                        crate::policy::controlplane::MemberRef::ExternalEntity { name, .. } => name.clone(),
                        other => format!("{other:?}"),
                    })
                    .collect();
                names.sort();
                names
            })
            .collect()
    }

    fn groups(list: &[&[&str]]) -> BTreeSet<Vec<String>> {
        list.iter()
            .map(|g| g.iter().map(|n| n.to_string()).collect())
            .collect()
    }

    #[test]
    fn a_pass_looks_only_at_the_changed_files() {
        let mut dir = Files {
            files: BTreeMap::new(),
            asked: RefCell::new(BTreeSet::new()),
        };
        let mut controller = LocalController::default();
        let all = vec![
            dir.set(
                "/p/policies.yaml",
                Some(vec![policy("p1", "web"), policy("p2", "api")]),
            ),
            dir.set(
                "/p/inventory-a.yaml",
                Some(vec![
                    entity("h1", "web", "10.0.0.1"),
                    entity("h2", "api", "10.0.0.2"),
                ]),
            ),
            dir.set("/p/inventory-b.yaml", Some(vec![entity("h3", "web", "10.0.0.3")])),
        ];
        let s = dir.pass(&mut controller, &all);
        assert_eq!(s.errors, Vec::<String>::new());
        assert_eq!(s.network_policies.len(), 2);
        assert_eq!(members(&s), groups(&[&["h1", "h3"], &["h2"]]));

        // One inventory file changes: only it is read, and its host moves from web to api.
        let changed = dir.set("/p/inventory-b.yaml", Some(vec![entity("h3", "api", "10.0.0.3")]));
        let s = dir.pass(&mut controller, &[changed]);
        assert_eq!(
            *dir.asked.borrow(),
            BTreeSet::from([PathBuf::from("/p/inventory-b.yaml")])
        );
        assert_eq!(members(&s), groups(&[&["h1"], &["h2", "h3"]]));

        // No file changed: nothing read, the same output.
        let again = dir.pass(&mut controller, &[]);
        assert!(dir.asked.borrow().is_empty());
        assert_eq!(again, s);

        // A copy of h1 lands in inventory-b: a conflict, h1 stays as it was; the unchanged
        // inventory-a is read only once the conflict ends (the copy removed), to find the
        // definition left.
        let copy = dir.set(
            "/p/inventory-b.yaml",
            Some(vec![
                entity("h3", "api", "10.0.0.3"),
                entity("h1", "api", "10.0.0.9"),
            ]),
        );
        let s = dir.pass(&mut controller, &[copy]);
        assert_eq!(
            *dir.asked.borrow(),
            BTreeSet::from([PathBuf::from("/p/inventory-b.yaml")])
        );
        assert_eq!(s.errors.len(), 1, "{:#?}", s.errors);
        assert!(
            s.errors[0].starts_with(
                "policy files /p/inventory-a.yaml, /p/inventory-b.yaml: ExternalEntity vm-ns/h1 is \
                 defined more than once: a conflict; keeping the version enforced"
            ),
            "{}",
            s.errors[0]
        );
        assert_eq!(members(&s), groups(&[&["h1"], &["h2", "h3"]]));
        let back = dir.set("/p/inventory-b.yaml", Some(vec![entity("h3", "api", "10.0.0.3")]));
        let s = dir.pass(&mut controller, &[back]);
        assert_eq!(s.errors, Vec::<String>::new());
        assert_eq!(
            *dir.asked.borrow(),
            BTreeSet::from([
                PathBuf::from("/p/inventory-a.yaml"),
                PathBuf::from("/p/inventory-b.yaml")
            ])
        );
        assert_eq!(members(&s), groups(&[&["h1"], &["h2", "h3"]]));

        // A file removed: its objects go (p1 and p2 with their groups).
        let removed = dir.set("/p/policies.yaml", None);
        let s = dir.pass(&mut controller, &[removed]);
        assert!(s.network_policies.is_empty() && s.address_groups.is_empty());
        assert_eq!(s.errors, Vec::<String>::new());

        // Every file removed: the controller starts over when objects come back.
        let gone: Vec<ChangedFile> = ["/p/inventory-a.yaml", "/p/inventory-b.yaml"]
            .into_iter()
            .map(|p| dir.set(p, None))
            .collect();
        let s = dir.pass(&mut controller, &gone);
        assert_eq!(s, PolicySnapshot::default());
        let back = dir.set("/p/policies.yaml", Some(vec![policy("p1", "web")]));
        let s = dir.pass(&mut controller, &[back]);
        assert_eq!(s.network_policies.len(), 1);
        assert_eq!(members(&s), groups(&[&[] as &[&str]]));
    }
}
