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
    /// Every Antrea-native key with the files defining it, in path order (a file once, however
    /// many times it defines the key: the last of its definitions is its own).
    defined_in: BTreeMap<NativeKey, Vec<PathBuf>>,
    /// The keys defined in more than one file: reported on every pass while they last.
    conflicts: BTreeSet<NativeKey>,
    /// The controlplane name (uid) each policy key in use claims, and the keys claiming each.
    uid_of: BTreeMap<NativeKey, String>,
    claims: BTreeMap<String, BTreeSet<NativeKey>>,
    /// The policy holding each claimed uid: the one translated first keeps it while it lasts.
    uid_owner: BTreeMap<String, NativeKey>,
    /// The policies refused for a uid another one holds, with the error reported on every pass.
    uid_refused: BTreeMap<NativeKey, String>,
}

impl std::fmt::Debug for LocalController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalController")
            .field("objects", &self.state.as_ref().map_or(0, |s| s.objects().count()))
            .field("outputs", &self.validated.len())
            .field("conflicts", &self.conflicts.len())
            .field("uid_refused", &self.uid_refused.len())
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

/// The warnings of a file that defines one Antrea-native object more than once: `objects`
/// holds each of its Antrea-native objects' key with its position among the file's objects
/// (0-based, as the file lists them). `kubectl apply -f` applies a file's objects in order, so
/// the last definition is the one a cluster keeps; the agent, `translate` and `compile` all
/// use it (see [`LocalController::translate_into`]) and say so with this warning.
pub fn duplicates_in_file(path: &Path, objects: &[(usize, NativeKey)]) -> Vec<String> {
    let mut positions: BTreeMap<&NativeKey, Vec<usize>> = BTreeMap::new();
    for (at, key) in objects {
        positions.entry(key).or_default().push(*at);
    }
    positions
        .into_iter()
        .filter(|(_, at)| at.len() > 1)
        .map(|(key, mut at)| {
            at.sort_unstable();
            let mut numbers: Vec<String> = at.iter().map(|i| (i + 1).to_string()).collect();
            let last = numbers.pop().unwrap_or_default();
            let all = if at.len() == 2 { "both" } else { "all" };
            format!(
                "policy file {}: objects {} and {last} {all} define {}: the last (object {last}) is \
                 used, as `kubectl apply -f` leaves it",
                path.display(),
                numbers.join(", "),
                describe_key(key),
            )
        })
        .collect()
}

/// What the agent's first pass makes of `files` (each with its Antrea-native objects in file
/// order): the translation, and every problem (conflicts between files, uids claimed twice,
/// the controller's errors). `translate` and `compile --policies` use it, so that they refuse
/// and keep exactly what the running agent does.
pub fn translate_files(
    files: Vec<(PathBuf, Vec<NativeObject>)>,
    local: &[Entity],
) -> (native::Translation, Vec<String>) {
    let files: BTreeMap<PathBuf, Vec<NativeObject>> = files.into_iter().collect();
    let changed: Vec<ChangedFile> = files
        .keys()
        .map(|path| ChangedFile {
            path: path.clone(),
            before: Vec::new(),
        })
        .collect();
    let current = |path: &Path| files.get(path).map_or(&[][..], Vec::as_slice);
    let mut controller = LocalController::default();
    let mut snapshot = PolicySnapshot::default();
    let mut errors = Vec::new();
    controller.translate_into(&changed, &current, local, &mut snapshot, &mut errors);
    let mut translation = controller
        .state
        .as_ref()
        .map(NativeState::translation)
        .unwrap_or_default();
    translation.errors = Vec::new();
    (translation, errors)
}

impl LocalController {
    /// Brings the controller to the directory's Antrea-native objects after the files in
    /// `changed` changed, and adds its output to `snapshot`. `current` gives the Antrea-native
    /// objects a file holds now (empty for a removed file); only the changed files' objects are
    /// compared with the ones held. An object defined in two files is a conflict: the version
    /// translated before the conflict stays in force (a second copy of a policy must never
    /// remove the first one's enforcement), and when there was none, no definition is used
    /// until only one is left. A file defining an object more than once defines it by the last
    /// of its definitions (as `kubectl apply -f` leaves it; `load_file` warns with their
    /// positions, see [`duplicates_in_file`]). Two policies with one uid (see
    /// [`uid_settled`](Self::uid_settled)) are never both translated. A translated object
    /// whose name a hand-written controlplane object already has is left out.
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
                // A second definition in the same file is no conflict: the later one replaces
                // the earlier (below, `objects.insert`; `definition` takes the last).
                if at == 0 || paths[at - 1] != file.path {
                    paths.insert(at, file.path.clone());
                }
                objects.insert(key.clone(), object);
                touched.insert(key);
            }
        }
        if self.defined_in.is_empty() {
            *self = LocalController::default();
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
                None => current(path).iter().rfind(|o| native_key(o) == *key),
            }
        };
        let state = self.state.as_ref();
        // What each key's files ask for now (before the uid check).
        let defined_in = &self.defined_in;
        let desire = |key: &NativeKey| {
            let paths = defined_in.get(key).map_or(&[][..], Vec::as_slice);
            match paths {
                [] => None,
                [path] => definition(path, key).map(|object| (file_origin(path), object)),
                _ => {
                    let files: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
                    state.and_then(|s| s.object(key)).map(|(_, object)| {
                        (
                            format!(
                                "policy files {} (the version enforced before the conflict)",
                                files.join(", ")
                            ),
                            object,
                        )
                    })
                }
            }
        };
        let mut desired: BTreeMap<NativeKey, Option<(String, &NativeObject)>> = BTreeMap::new();
        for key in &touched {
            if self.defined_in.get(key).is_some_and(|paths| paths.len() > 1) {
                self.conflicts.insert(key.clone());
            } else {
                self.conflicts.remove(key);
            }
            desired.insert(key.clone(), desire(key));
        }
        Self::settle_uids(
            &mut self.uid_of,
            &mut self.claims,
            &mut self.uid_owner,
            &mut self.uid_refused,
            &mut desired,
            &desire,
        );
        let mut changes: Vec<Change> = Vec::new();
        let mut fresh: Vec<(String, NativeObject)> = Vec::new();
        for (key, desired) in desired {
            let held = state.and_then(|s| s.object(&key));
            match (desired, held) {
                (None, Some(_)) => changes.push(Change::Delete(key)),
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
        errors.extend(self.uid_refused.values().cloned());
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
        // The rules translated fail-closed travel with their validated policy, to its status.
        let notes = self
            .state
            .as_ref()
            .map(NativeState::rule_notes)
            .unwrap_or_default();
        for object in delta.upserted {
            let key = (object.kind(), object.metadata().name.clone());
            let mut valid = object.validate().map_err(|e| e.to_string());
            if let (Ok(ValidObject::NetworkPolicy(p)), Some(list)) = (&mut valid, notes.get(key.1.as_str())) {
                Arc::make_mut(p).rule_notes = list.to_vec();
            }
            self.validated.insert(key, valid);
        }
        if let Some(state) = &self.state {
            errors.extend(state.errors());
        }
        self.add_to(snapshot, errors);
    }

    /// The uid check, after each touched key's `desired` definition is known. antrea-controller
    /// names a policy's controlplane object after the CRD object's uid
    /// (`internalNetworkPolicyKeyFunc`), which an apiserver makes unique; here two files can
    /// hold one (a renamed copy of `kubectl get -o yaml`). Of the policies claiming a uid, the
    /// one holding it keeps it while it claims it; when none holds it (the first pass, or its
    /// holder gone), the first claimant in (kind, namespace, name) order takes it. The others
    /// are refused, each with an error naming both objects and their files: a refusal never
    /// lifts the rules of the policy already enforced under that name.
    ///
    /// Claimants not touched in this pass join `desired` when their standing changes (a refused
    /// one takes the uid over, or is refused from now on).
    fn settle_uids<'o>(
        uid_of: &mut BTreeMap<NativeKey, String>,
        claims: &mut BTreeMap<String, BTreeSet<NativeKey>>,
        uid_owner: &mut BTreeMap<String, NativeKey>,
        uid_refused: &mut BTreeMap<NativeKey, String>,
        desired: &mut BTreeMap<NativeKey, Option<(String, &'o NativeObject)>>,
        desire: &dyn Fn(&NativeKey) -> Option<(String, &'o NativeObject)>,
    ) {
        let mut affected: BTreeSet<String> = BTreeSet::new();
        for (key, wanted) in desired.iter() {
            let new_uid = wanted
                .as_ref()
                .and_then(|(_, o)| native::controller::policy_name(o));
            let old_uid = uid_of.get(key).cloned();
            if new_uid == old_uid {
                affected.extend(new_uid);
                continue;
            }
            if let Some(uid) = old_uid {
                uid_of.remove(key);
                uid_refused.remove(key);
                if let Some(keys) = claims.get_mut(&uid) {
                    keys.remove(key);
                    if keys.is_empty() {
                        claims.remove(&uid);
                    }
                }
                affected.insert(uid);
            }
            if let Some(uid) = new_uid {
                uid_of.insert(key.clone(), uid.clone());
                claims.entry(uid.clone()).or_default().insert(key.clone());
                affected.insert(uid);
            }
        }
        for uid in affected {
            let Some(keys) = claims.get(&uid) else {
                uid_owner.remove(&uid);
                continue;
            };
            let owner = match uid_owner.get(&uid) {
                Some(owner) if keys.contains(owner) => owner.clone(),
                // Not empty: emptied sets are removed above.
                _ => match keys.first() {
                    Some(first) => first.clone(),
                    None => continue,
                },
            };
            uid_owner.insert(uid.clone(), owner.clone());
            if keys.len() == 1 {
                uid_refused.remove(&owner);
                if !desired.contains_key(&owner) {
                    desired.insert(owner.clone(), desire(&owner));
                }
                continue;
            }
            let owner_definition = match desired.get(&owner) {
                Some(d) => d.clone(),
                None => desire(&owner),
            };
            let owner_origin = owner_definition
                .as_ref()
                .map_or_else(String::new, |(origin, _)| origin.clone());
            if uid_refused.remove(&owner).is_some() && !desired.contains_key(&owner) {
                desired.insert(owner.clone(), owner_definition);
            }
            for key in keys.iter().filter(|k| **k != owner) {
                let origin = match desired.get(key) {
                    Some(Some((origin, _))) => origin.clone(),
                    _ => desire(key).map_or_else(String::new, |(origin, _)| origin),
                };
                uid_refused.insert(
                    key.clone(),
                    format!(
                        "{origin}: {}: metadata.uid {uid:?} is also the uid of {} ({owner_origin}), \
                         which keeps it: antrea-controller names a policy's controlplane object after \
                         its uid, and two policies cannot share one; this one is refused (not \
                         enforced) until its uid is unique",
                        describe_key(key),
                        describe_key(&owner),
                    ),
                );
                desired.insert(key.clone(), None);
            }
        }
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

    /// An ACNP named `name` with `uid`, dropping ingress from `app`.
    fn policy_with_uid(name: &str, uid: &str, app: &str) -> NativeObject {
        object(&format!(
            "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\n\
             metadata: {{name: {name}, uid: {uid}}}\n\
             spec: {{priority: 5, appliedTo: [{{externalEntitySelector: {{matchLabels: {{role: db}}}}}}],\n\
             ingress: [{{action: Drop, from: [{{externalEntitySelector: {{matchLabels: {{app: {app}}}}}}}]}}]}}\n"
        ))
    }

    fn new_dir() -> Files {
        Files {
            files: BTreeMap::new(),
            asked: RefCell::new(BTreeSet::new()),
        }
    }

    /// The policies of a snapshot as (controlplane name, the name their author gave them).
    fn sources(s: &PolicySnapshot) -> Vec<(String, String)> {
        s.network_policies
            .iter()
            .map(|p| {
                let source = p.source_ref.as_ref().map_or_else(String::new, |r| r.name.clone());
                (p.name.clone(), source)
            })
            .collect()
    }

    /// A rule the local controller translates fail-closed (a peer whose addresses it cannot
    /// know) carries its note to the validated policy, and from there to what the resolver
    /// reports for the policy's status and `get networkpolicy`; a note that changes alone (the
    /// same rule, another field) reaches it too.
    #[test]
    fn a_fail_closed_rule_is_reported_in_the_policy_status() {
        let with = |field: &str| {
            object(&format!(
                "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\n\
                 metadata: {{name: p, uid: p}}\n\
                 spec: {{priority: 5, appliedTo: [{{externalEntitySelector: {{matchLabels: {{role: db}}}}}}],\n\
                 ingress: [{{action: Drop, name: deny, from: [{{{field}: {{}}}}]}},\n\
                 {{action: Allow, name: web, from: [{{externalEntitySelector: {{}}}}]}}]}}\n"
            ))
        };
        let mut dir = new_dir();
        let mut controller = LocalController::default();
        let file = dir.set("/p/a.yaml", Some(vec![with("podSelector")]));
        let s = dir.pass(&mut controller, &[file]);
        assert_eq!(s.network_policies.len(), 1, "{:#?}", s.errors);
        let notes = &s.network_policies[0].rule_notes;
        assert_eq!(notes.len(), 1, "{notes:#?}");
        assert_eq!(notes[0].rule_index, 0);
        assert_eq!(notes[0].reason, crate::policy::refuse::Reason::UnresolvedPeer);
        assert!(notes[0].message.starts_with(
            "enforced fail-closed: the rule drops all traffic from any address, because \
                          spec.ingress[0].from[0].podSelector: is not supported in standalone mode"
        ));
        // The same note as a line for the log, `get agentinfo` and `translate`.
        assert_eq!(s.errors.len(), 1, "{:#?}", s.errors);
        assert!(s.errors[0].starts_with(
            "policy file /p/a.yaml: ClusterNetworkPolicy p: spec.ingress[0] (rule \"deny\"): enforced fail-closed"
        ));
        // The controlplane form is the same for a nodeSelector: the note alone changes.
        let file = dir.set("/p/a.yaml", Some(vec![with("nodeSelector")]));
        let s = dir.pass(&mut controller, &[file]);
        let notes = &s.network_policies[0].rule_notes;
        assert!(notes[0].message.contains("from[0].nodeSelector"), "{notes:#?}");

        // The resolver reports it for the rule, as it reports what it installs fail-closed.
        let mut store = crate::policy::controlplane::store::PolicyStore::new();
        let atg = crate::policy::controlplane::ControlplaneObject::from_value(serde_json::json!({
            "apiVersion": "controlplane.antrea.io/v1beta2", "kind": "AppliedToGroup",
            "metadata": {"name": s.network_policies[0].applied_to_groups[0]},
            "groupMembers": [{"externalEntity": {"name": "vm1", "namespace": "vm-ns"}}]}))
        .expect("decodes");
        store.apply(atg.validate().expect("valid")).expect("applies");
        store
            .apply(ValidObject::NetworkPolicy(Arc::clone(&s.network_policies[0])))
            .expect("applies");
        let iface = crate::attachment::AttachedInterface {
            name: "eth0".into(),
            ofport: 3,
            uplink_name: "eth0~".into(),
            uplink_ofport: 103,
            ips: vec!["10.99.0.2".parse().expect("ip")],
            entity: crate::attachment::EntityRef {
                namespace: "vm-ns".into(),
                name: "vm1".into(),
            },
        };
        let resolved = crate::policy::resolve::resolve(&store, &[iface]);
        assert_eq!(resolved.not_enforced.len(), 1, "{:#?}", resolved.not_enforced);
        assert_eq!(resolved.not_enforced[0].rule_index, 0);
        assert!(resolved.not_enforced[0].message.starts_with(
            "rule \"deny\" (rules[0]): enforced fail-closed: the rule drops all traffic from any address"
        ));
    }

    /// The same object twice in one file: `kubectl apply -f` applies a file's objects in
    /// order, so a cluster keeps the last; so does the agent (no conflict), also when the file
    /// is unchanged and read again to end a conflict with another file.
    #[test]
    fn an_object_twice_in_one_file_is_its_last_definition_as_kubectl_apply_leaves_it() {
        let mut dir = new_dir();
        let mut controller = LocalController::default();
        let all = vec![
            dir.set(
                "/p/a.yaml",
                Some(vec![
                    policy("p1", "web"),
                    entity("h1", "api", "10.0.0.1"),
                    policy("p1", "api"),
                ]),
            ),
            dir.set("/p/b.yaml", Some(vec![entity("h2", "web", "10.0.0.2")])),
        ];
        let s = dir.pass(&mut controller, &all);
        assert_eq!(s.errors, Vec::<String>::new());
        assert_eq!(s.network_policies.len(), 1);
        assert_eq!(members(&s), groups(&[&["h1"]]));

        // A third definition in another file: a conflict between files (the rule for those
        // stays: the version enforced before is kept).
        let copy = dir.set("/p/c.yaml", Some(vec![policy("p1", "web")]));
        let s = dir.pass(&mut controller, &[copy]);
        assert_eq!(s.errors.len(), 1, "{:#?}", s.errors);
        assert!(s.errors[0].starts_with("policy files /p/a.yaml, /p/c.yaml: ClusterNetworkPolicy p1"));
        assert_eq!(members(&s), groups(&[&["h1"]]));
        // The copy removed: a.yaml, unchanged, is read again and gives its last definition.
        let gone = dir.set("/p/c.yaml", None);
        let s = dir.pass(&mut controller, &[gone]);
        assert_eq!(s.errors, Vec::<String>::new());
        assert_eq!(members(&s), groups(&[&["h1"]]));

        // A fresh start (what `translate` and `compile` run) agrees.
        let (t, errors) = translate_files(
            dir.files.iter().map(|(p, o)| (p.clone(), o.clone())).collect(),
            &[],
        );
        assert_eq!(errors, Vec::<String>::new());
        assert_eq!(t.address_groups.len(), 1);
        let member = t.address_groups[0].group_members[0]
            .external_entity
            .as_ref()
            .map(|e| e.name.as_str());
        assert_eq!(member, Some("h1"));
    }

    #[test]
    fn the_warning_names_every_position_of_an_object_defined_twice_in_one_file() {
        let key = |name: &str| native_key(&policy(name, "web"));
        let path = Path::new("/p/a.yaml");
        assert_eq!(
            duplicates_in_file(path, &[(0, key("p1")), (1, key("p2")), (4, key("p1"))]),
            [
                "policy file /p/a.yaml: objects 1 and 5 both define ClusterNetworkPolicy p1: the last \
              (object 5) is used, as `kubectl apply -f` leaves it"
            ]
        );
        assert_eq!(
            duplicates_in_file(path, &[(0, key("p1")), (2, key("p1")), (3, key("p1"))]),
            [
                "policy file /p/a.yaml: objects 1, 3 and 4 all define ClusterNetworkPolicy p1: the last \
              (object 4) is used, as `kubectl apply -f` leaves it"
            ]
        );
        assert!(duplicates_in_file(path, &[(0, key("p1")), (1, key("p2"))]).is_empty());
    }

    /// Two policies with one `metadata.uid`: antrea-controller names the controlplane
    /// NetworkPolicy after it (`internalNetworkPolicyKeyFunc`), so both cannot be translated.
    /// The first in (kind, namespace, name) order takes it on a fresh start; in a running agent
    /// the one already enforced keeps it, so that the refusal never lifts enforced rules; when
    /// it goes, the other takes over.
    #[test]
    fn two_policies_with_one_uid_never_collapse_and_the_enforced_one_keeps_it() {
        let refused = |name: &str, file: &str, owner: &str, owner_file: &str| {
            format!(
                "policy file {file}: ClusterNetworkPolicy {name}: metadata.uid \"u1\" is also the uid \
                 of ClusterNetworkPolicy {owner} (policy file {owner_file}), which keeps it: \
                 antrea-controller names a policy's controlplane object after its uid, and two \
                 policies cannot share one; this one is refused (not enforced) until its uid is unique"
            )
        };
        // Fresh: `pa` (in the later file) comes first by name and takes the uid.
        let mut dir = new_dir();
        let mut controller = LocalController::default();
        let all = vec![
            dir.set("/p/a.yaml", Some(vec![policy_with_uid("pb", "u1", "web")])),
            dir.set("/p/b.yaml", Some(vec![policy_with_uid("pa", "u1", "api")])),
        ];
        let s = dir.pass(&mut controller, &all);
        assert_eq!(sources(&s), [("u1".to_string(), "pa".to_string())]);
        assert_eq!(s.errors, [refused("pb", "/p/a.yaml", "pa", "/p/b.yaml")]);
        let (t, errors) = translate_files(
            dir.files.iter().map(|(p, o)| (p.clone(), o.clone())).collect(),
            &[],
        );
        assert_eq!(errors, s.errors);
        assert_eq!(t.network_policies.len(), 1);
        assert_eq!(
            t.network_policies[0].source_ref.as_ref().map(|r| r.name.as_str()),
            Some("pa")
        );

        // Running: `pb` enforced first keeps the uid when `pa` arrives; `pa` is refused.
        let mut dir = new_dir();
        let mut controller = LocalController::default();
        let first = dir.set("/p/a.yaml", Some(vec![policy_with_uid("pb", "u1", "web")]));
        let s = dir.pass(&mut controller, &[first]);
        assert_eq!(s.errors, Vec::<String>::new());
        let enforced = s.network_policies.clone();
        let copy = dir.set("/p/b.yaml", Some(vec![policy_with_uid("pa", "u1", "api")]));
        let s = dir.pass(&mut controller, &[copy]);
        assert_eq!(s.network_policies, enforced);
        assert_eq!(s.errors, [refused("pa", "/p/b.yaml", "pb", "/p/a.yaml")]);
        // Reported on every pass while it lasts.
        let s = dir.pass(&mut controller, &[]);
        assert_eq!(s.errors, [refused("pa", "/p/b.yaml", "pb", "/p/a.yaml")]);
        // `pb` edited: it still holds the uid.
        let edited = dir.set("/p/a.yaml", Some(vec![policy_with_uid("pb", "u1", "db")]));
        let s = dir.pass(&mut controller, &[edited]);
        assert_eq!(sources(&s), [("u1".to_string(), "pb".to_string())]);
        assert_eq!(s.errors, [refused("pa", "/p/b.yaml", "pb", "/p/a.yaml")]);
        // `pb` removed: `pa`, unchanged, takes over.
        let gone = dir.set("/p/a.yaml", None);
        let s = dir.pass(&mut controller, &[gone]);
        assert_eq!(s.errors, Vec::<String>::new());
        assert_eq!(sources(&s), [("u1".to_string(), "pa".to_string())]);
        // `pb` back with its own uid: both enforced.
        let back = dir.set("/p/a.yaml", Some(vec![policy_with_uid("pb", "u2", "web")]));
        let s = dir.pass(&mut controller, &[back]);
        assert_eq!(s.errors, Vec::<String>::new());
        assert_eq!(
            sources(&s),
            [
                ("u1".to_string(), "pa".to_string()),
                ("u2".to_string(), "pb".to_string())
            ]
        );
        // `pb` takes u1 again while `pa` holds it: refused, `pa` unchanged.
        let clash = dir.set("/p/a.yaml", Some(vec![policy_with_uid("pb", "u1", "web")]));
        let s = dir.pass(&mut controller, &[clash]);
        assert_eq!(sources(&s), [("u1".to_string(), "pa".to_string())]);
        assert_eq!(s.errors, [refused("pb", "/p/a.yaml", "pa", "/p/b.yaml")]);
    }
}
