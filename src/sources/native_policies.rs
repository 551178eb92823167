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

use super::bounded::{parse_values, read_regular_file, FileError, FileRead};
use super::policy_dir::PolicySnapshot;
use crate::config::InputLimits;
use crate::k8s::external_node::{local_entities, ExternalNodeObject};
use crate::policy::controlplane::{InvalidObject, Kind, ValidObject};
use crate::policy::native::{self, Change, Entity, NativeObject, NativeState};
pub use crate::policy::native::{native_key, NativeKey};

pub fn native_raw_key(v: &Value) -> Option<NativeKey> {
    native::objects::raw_key(v)
}

/// The ExternalNode file as last read, and the ExternalEntities derived from its last good
/// version (a half-saved ExternalNode file must not empty every AppliedToGroup).
#[derive(Debug, Default)]
pub struct LocalNode {
    text: Option<Result<String, FileError>>,
    entities: Vec<Entity>,
}

impl LocalNode {
    /// Takes the file's current text (or why it could not be read); derives the entities when
    /// it parses.
    pub fn update(&mut self, text: Option<Result<String, FileError>>, limits: &InputLimits) {
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
pub fn read_node_text(path: Option<&PathBuf>, limits: &InputLimits) -> Option<Result<String, FileError>> {
    let path = path?;
    match read_regular_file(path, limits.max_file_bytes) {
        Ok(FileRead::Text(t)) => Some(Ok(t)),
        Ok(FileRead::Missing) => None,
        Ok(FileRead::NotRegular(what)) => Some(Err(FileError::NotRegular(what))),
        Err(e) => Some(Err(e.into())),
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
    validated: BTreeMap<(Kind, String), Result<ValidObject, InvalidObject>>,
    /// Every Antrea-native key with the files defining it, in path order (a file once, however
    /// many times it defines the key: the last of its definitions is its own).
    defined_in: BTreeMap<NativeKey, Vec<PathBuf>>,
    /// The keys defined in more than one file: reported on every pass while they last.
    conflicts: BTreeSet<NativeKey>,
    /// The controlplane name of every policy defined now.
    names: PolicyNames,
}

impl std::fmt::Debug for LocalController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalController")
            .field("objects", &self.state.as_ref().map_or(0, |s| s.objects().count()))
            .field("outputs", &self.validated.len())
            .field("conflicts", &self.conflicts.len())
            .field("shared_uids", &self.names.renamed.len())
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

/// The warning for an object defined in several files (`paths`, in path order): the last file's
/// definition is used. `kubectl apply -f DIR` applies the directory's files in lexical order of
/// their paths (cli-runtime's `ExpandPathsToFileVisitors` walks the directory with
/// `filepath.Walk`, which visits entries in lexical order), each apply replacing the object the
/// one before left, so a cluster ends with the last file's definition.
fn conflict_warning(key: &NativeKey, paths: &[PathBuf]) -> String {
    let files: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    let last = files.last().cloned().unwrap_or_default();
    format!(
        "policy files {}: {} is defined in more than one file: the definition in {last} (the last \
         file in path order) is used, as `kubectl apply -f` on the directory leaves it",
        files.join(", "),
        describe_key(key)
    )
}

/// What the agent's first pass makes of `files` (each with its Antrea-native objects in file
/// order): the translation, the errors (the controller's) and the warnings (objects defined in
/// several files, uids claimed twice: used as a cluster would, and reported). `translate` and
/// `compile --policies` use it, so that they refuse and keep exactly what the running agent
/// does; since every choice of the controller is a function of the files' current contents,
/// this is also what a running agent holds after any sequence of edits ending in `files`, except
/// for an object edited into a refused form, whose last valid version only the running agent
/// keeps (in memory).
pub fn translate_files(
    files: Vec<(PathBuf, Vec<NativeObject>)>,
    local: &[Entity],
) -> (native::Translation, Vec<String>, Vec<String>) {
    let files: BTreeMap<PathBuf, Vec<Arc<NativeObject>>> = files
        .into_iter()
        .map(|(path, objects)| (path, objects.into_iter().map(Arc::new).collect()))
        .collect();
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
    let (mut errors, mut warnings) = (Vec::new(), Vec::new());
    controller.pass(
        &changed,
        &current,
        local,
        &mut snapshot,
        &mut errors,
        &mut warnings,
    );
    let mut translation = controller
        .state
        .as_ref()
        .map(NativeState::translation)
        .unwrap_or_default();
    translation.errors = Vec::new();
    (translation, errors, warnings)
}

impl LocalController {
    /// Brings the controller to the directory's Antrea-native objects after the files in
    /// `changed` changed, and adds its output to `snapshot`, with its errors and warnings in
    /// `errors`. `current` gives the Antrea-native objects a file holds now (empty for a removed
    /// file); only the changed files' objects are compared with the ones held.
    ///
    /// Every choice is a function of the files' current contents, never of the order in which
    /// they changed, so that a restarted agent and `translate` ([`translate_files`]) hold what a
    /// running agent holds, and no edit or restart lifts a rule the directory still defines:
    /// - a file defining an object more than once defines it by the last of its definitions (as
    ///   `kubectl apply -f` leaves it; `load_file` warns with their positions, see
    ///   [`duplicates_in_file`]);
    /// - an object defined in several files is the definition of the file last in path order
    ///   (see `conflict_warning`), with a warning;
    /// - policies sharing a `metadata.uid` are all enforced, each but one under a name derived
    ///   from its kind, namespace and name (see `PolicyNames`), with a warning.
    ///
    /// A translated object whose name a hand-written controlplane object already has is left
    /// out.
    pub fn translate_into<'a>(
        &mut self,
        changed: &[ChangedFile],
        current: &dyn Fn(&Path) -> &'a [Arc<NativeObject>],
        local: &[Entity],
        snapshot: &mut PolicySnapshot,
        errors: &mut Vec<String>,
    ) {
        let mut warnings = Vec::new();
        self.pass(changed, current, local, snapshot, errors, &mut warnings);
        errors.extend(warnings);
    }

    /// [`translate_into`](Self::translate_into), with the warnings apart.
    fn pass<'a>(
        &mut self,
        changed: &[ChangedFile],
        current: &dyn Fn(&Path) -> &'a [Arc<NativeObject>],
        local: &[Entity],
        snapshot: &mut PolicySnapshot,
        errors: &mut Vec<String>,
        warnings: &mut Vec<String>,
    ) {
        // Which keys the changed files touch, and their current definitions by key.
        let mut touched: BTreeSet<NativeKey> = BTreeSet::new();
        let mut now_in: BTreeMap<&Path, BTreeMap<NativeKey, &'a Arc<NativeObject>>> = BTreeMap::new();
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
        // (the winning file of a conflict unchanged while another one changed) searched in the
        // unchanged file.
        let definition = |path: &Path, key: &NativeKey| -> Option<&'a Arc<NativeObject>> {
            match now_in.get(path) {
                Some(objects) => objects.get(key).copied(),
                None => current(path).iter().rfind(|o| native_key(o) == *key),
            }
        };
        // What each key's files define now: the definition of the last file in path order.
        let defined_in = &self.defined_in;
        let desire = |key: &NativeKey| {
            let path = defined_in.get(key)?.last()?;
            definition(path, key).map(|object| (file_origin(path), object))
        };
        let mut desired: BTreeMap<NativeKey, Option<(String, &Arc<NativeObject>)>> = BTreeMap::new();
        for key in &touched {
            if self.defined_in.get(key).is_some_and(|paths| paths.len() > 1) {
                self.conflicts.insert(key.clone());
            } else {
                self.conflicts.remove(key);
            }
            desired.insert(key.clone(), desire(key));
        }
        self.names.settle(&mut desired, &desire);
        let state = self.state.as_ref();
        let mut changes: Vec<Change> = Vec::new();
        let mut fresh: Vec<(String, Arc<NativeObject>)> = Vec::new();
        for (key, desired) in desired {
            let held = state.and_then(|s| s.object(&key));
            match (desired, held) {
                (None, Some(_)) => changes.push(Change::Delete(key)),
                (None, None) => {}
                (Some((origin, object)), held) => {
                    let object = self.names.named(&key, object);
                    let unchanged = held.is_some_and(|(o, h)| *o == origin && *h == object);
                    if state.is_none() {
                        fresh.push((origin, object));
                    } else if !unchanged {
                        changes.push(Change::Upsert { origin, object });
                    }
                }
            }
        }
        for key in &self.conflicts {
            let paths = self.defined_in.get(key).map_or(&[][..], Vec::as_slice);
            warnings.push(conflict_warning(key, paths));
        }
        warnings.extend(self.names.renamed.values().cloned());
        let delta = match &mut self.state {
            None => {
                // Handed over object by object (each dropped once validated): no copy of the
                // whole output is kept anywhere.
                let (state, delta) = NativeState::with_delta(fresh, local.to_vec());
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
            let mut valid = object.validate();
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

/// The controlplane name of every policy the directory defines, kept up to date from the keys
/// each pass touches, and always the same function of the directory's current policies:
///
/// antrea-controller names a policy's controlplane NetworkPolicy after the CRD object's uid
/// (`internalNetworkPolicyKeyFunc`), which is unique in a cluster: the apiserver gives every
/// object a fresh uid when it creates it, whatever `metadata.uid` the request carried
/// (`FillObjectMetaSystemFields`, k8s.io/apiserver's registry/rest, called by `BeforeCreate`).
/// So a renamed copy of `kubectl get -o yaml` is a second policy, enforced next to the first.
/// Here the files carry the uids, and two policies can claim one. The name of each:
/// - a policy without `metadata.uid`: the name derived from its kind, namespace and name
///   ([`native::controller::policy_uid`]);
/// - a policy with uid `u`: `u` when it is the holder of `u`, otherwise its derived name (as if
///   it had no uid), with a warning. The holder of `u` is the policy whose derived name is `u`
///   if the directory has one (a derived name is never taken away: its policy has no other),
///   else the first claimant of `u` in (kind, namespace, name) order.
///
/// Every policy is enforced, under a name no other one has. "The first claimant keeps it"
/// rather than "every claimant is renamed": a policy's name then changes only when a claimant
/// sorting before it comes or goes, not whenever a copy appears (renaming a policy replaces its
/// controlplane object, and its per-policy statistics start over).
#[derive(Default)]
struct PolicyNames {
    /// The `metadata.uid` of each policy defined now that has one, and the policies claiming
    /// each uid.
    uid_of: BTreeMap<NativeKey, String>,
    claims: BTreeMap<String, BTreeSet<NativeKey>>,
    /// The derived name of each policy defined now, and the policy each derived name is of.
    derived_of: BTreeMap<NativeKey, String>,
    derived_by: BTreeMap<String, NativeKey>,
    /// The policies named by their derived name although they have a uid, with the warning
    /// reported on every pass while it lasts.
    renamed: BTreeMap<NativeKey, String>,
}

/// The name a policy's key derives when it has no uid.
fn derived_name((kind, namespace, name): &NativeKey) -> String {
    let meta = native::types::Meta {
        name: name.clone(),
        namespace: namespace.clone(),
        ..Default::default()
    };
    native::controller::policy_uid(*kind, &meta)
}

/// A key's definition now (its origin and object), or `None` when no file defines it.
type Wanted<'o> = Option<(String, &'o Arc<NativeObject>)>;

impl PolicyNames {
    /// Updates the names after each touched key's `desired` definition is known. Policies not
    /// touched in this pass join `desired` when their name changes (a claimant coming before
    /// them, or its going).
    fn settle<'o>(
        &mut self,
        desired: &mut BTreeMap<NativeKey, Wanted<'o>>,
        desire: &dyn Fn(&NativeKey) -> Wanted<'o>,
    ) {
        // The names whose holder or claimants may have changed (or whose warnings name a
        // policy whose origin may have changed).
        let mut affected: BTreeSet<String> = BTreeSet::new();
        for (key, wanted) in desired.iter() {
            let policy = wanted
                .as_ref()
                .is_some_and(|(_, o)| matches!(***o, NativeObject::Policy { .. }));
            match (policy, self.derived_of.get(key)) {
                (true, Some(derived)) => {
                    affected.insert(derived.clone());
                }
                (true, None) => {
                    let derived = derived_name(key);
                    self.derived_of.insert(key.clone(), derived.clone());
                    self.derived_by.insert(derived.clone(), key.clone());
                    affected.insert(derived);
                }
                (false, Some(_)) => {
                    if let Some(derived) = self.derived_of.remove(key) {
                        self.derived_by.remove(&derived);
                        affected.insert(derived);
                    }
                }
                (false, None) => {}
            }
            let new_uid = wanted
                .as_ref()
                .map(|(_, o)| o.meta().uid.clone())
                .filter(|uid| policy && !uid.is_empty());
            let old_uid = self.uid_of.get(key).cloned();
            if new_uid == old_uid {
                affected.extend(new_uid);
                continue;
            }
            self.renamed.remove(key);
            if let Some(uid) = old_uid {
                self.uid_of.remove(key);
                if let Some(keys) = self.claims.get_mut(&uid) {
                    keys.remove(key);
                    if keys.is_empty() {
                        self.claims.remove(&uid);
                    }
                }
                affected.insert(uid);
            }
            if let Some(uid) = new_uid {
                self.uid_of.insert(key.clone(), uid.clone());
                self.claims.entry(uid.clone()).or_default().insert(key.clone());
                affected.insert(uid);
            }
        }
        for uid in affected {
            let Some(keys) = self.claims.get(&uid) else {
                continue;
            };
            let holder = self.derived_by.get(&uid).or_else(|| keys.first());
            let Some(holder) = holder.cloned() else {
                continue;
            };
            let origin_of =
                |key: &NativeKey, desired: &BTreeMap<NativeKey, Wanted<'o>>| match desired.get(key) {
                    Some(Some((origin, _))) => origin.clone(),
                    Some(None) => String::new(),
                    None => desire(key).map_or_else(String::new, |(origin, _)| origin),
                };
            let holder_origin = origin_of(&holder, desired);
            // The holder's derived name is `uid` when it is not a claimant (or claims its own).
            let whose = if self.derived_by.get(&uid) == Some(&holder) && !keys.contains(&holder) {
                "is the name derived for"
            } else {
                "is also the uid of"
            };
            for key in keys {
                let was_renamed = self.renamed.contains_key(key);
                if *key == holder {
                    self.renamed.remove(key);
                } else {
                    let warning = format!(
                        "{}: {}: metadata.uid {uid:?} {whose} {} ({holder_origin}): a cluster gives \
                         every policy a uid of its own when it creates it, so both are enforced, \
                         this one under the name {} derived from its kind, namespace and name",
                        origin_of(key, desired),
                        describe_key(key),
                        describe_key(&holder),
                        self.derived_of
                            .get(key)
                            .cloned()
                            .unwrap_or_else(|| derived_name(key)),
                    );
                    self.renamed.insert(key.clone(), warning);
                }
                if was_renamed != self.renamed.contains_key(key) && !desired.contains_key(key) {
                    desired.insert(key.clone(), desire(key));
                }
            }
        }
    }

    /// `object` (the definition of `key`) as the controller is to translate it: without its uid
    /// when another policy holds that uid, so that the controller names it by its derived name.
    fn named(&self, key: &NativeKey, object: &Arc<NativeObject>) -> Arc<NativeObject> {
        if !self.renamed.contains_key(key) {
            return Arc::clone(object);
        }
        let mut object = NativeObject::clone(object);
        if let NativeObject::Policy { meta, .. } = &mut object {
            meta.uid = String::new();
        }
        Arc::new(object)
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
            let shared: BTreeMap<&Path, Vec<Arc<NativeObject>>> = self
                .files
                .iter()
                .map(|(path, objects)| (path.as_path(), objects.iter().cloned().map(Arc::new).collect()))
                .collect();
            let current = |path: &Path| -> &[Arc<NativeObject>] {
                self.asked.borrow_mut().insert(path.to_path_buf());
                shared.get(path).map_or(&[][..], Vec::as_slice)
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

        // A copy of h1 lands in inventory-b: a conflict, the copy in inventory-b (last in path
        // order) is used, and h1 moves to api; the unchanged inventory-a is read only once the
        // conflict ends (the copy removed), to find the definition left.
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
        assert_eq!(
            s.errors,
            [
                "policy files /p/inventory-a.yaml, /p/inventory-b.yaml: ExternalEntity vm-ns/h1 is \
                 defined in more than one file: the definition in /p/inventory-b.yaml (the last file \
                 in path order) is used, as `kubectl apply -f` on the directory leaves it"
            ]
        );
        assert_eq!(members(&s), groups(&[&[], &["h1", "h2", "h3"]]));
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
             metadata: {{name: {name}, uid: \"{uid}\"}}\n\
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

        // A third definition in another file: the file last in path order wins, with a warning.
        let copy = dir.set("/p/c.yaml", Some(vec![policy("p1", "web")]));
        let s = dir.pass(&mut controller, &[copy]);
        assert_eq!(s.errors.len(), 1, "{:#?}", s.errors);
        assert!(s.errors[0].starts_with(
            "policy files /p/a.yaml, /p/c.yaml: ClusterNetworkPolicy p1 is defined in more than one \
             file: the definition in /p/c.yaml"
        ));
        assert_eq!(members(&s), groups(&[&["h2"]]));
        // The copy removed: a.yaml, unchanged, is read again and gives its last definition.
        let gone = dir.set("/p/c.yaml", None);
        let s = dir.pass(&mut controller, &[gone]);
        assert_eq!(s.errors, Vec::<String>::new());
        assert_eq!(members(&s), groups(&[&["h1"]]));

        // A fresh start (what `translate` and `compile` run) agrees.
        let (t, errors, warnings) = translate_files(
            dir.files.iter().map(|(p, o)| (p.clone(), o.clone())).collect(),
            &[],
        );
        assert_eq!(errors, Vec::<String>::new());
        assert_eq!(warnings, Vec::<String>::new());
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

    /// The warning for `name` (in `file`) named by its derived name because `holder` (in
    /// `holder_file`) holds uid "u1".
    fn shares_u1(name: &str, file: &str, holder: &str, holder_file: &str) -> String {
        let derived = derived_name(&native_key(&policy(name, "web")));
        format!(
            "policy file {file}: ClusterNetworkPolicy {name}: metadata.uid \"u1\" is also the uid of \
             ClusterNetworkPolicy {holder} (policy file {holder_file}): a cluster gives every policy a \
             uid of its own when it creates it, so both are enforced, this one under the name \
             {derived} derived from its kind, namespace and name"
        )
    }

    /// (controlplane name, source name) of the policies of `s`, sorted.
    fn sorted_sources(s: &PolicySnapshot) -> Vec<(String, String)> {
        let mut all = sources(s);
        all.sort();
        all
    }

    /// The derived name of ClusterNetworkPolicy `name`, with its source name.
    fn derived(name: &str) -> (String, String) {
        (derived_name(&native_key(&policy(name, "web"))), name.to_string())
    }

    /// Two policies with one `metadata.uid` (a renamed copy of `kubectl get -o yaml`): a cluster
    /// enforces both, since the apiserver gives each a fresh uid on create
    /// (`FillObjectMetaSystemFields`), and antrea-controller names each controlplane policy
    /// after its own uid (`internalNetworkPolicyKeyFunc`). Here both are enforced too: the first
    /// in (kind, namespace, name) order keeps the uid, the other takes its derived name, with a
    /// warning. Which one is a function of the directory only, so a running agent, a fresh start
    /// and `translate` agree, and no edit lifts either policy's Drop rule.
    #[test]
    fn two_policies_with_one_uid_are_both_enforced_and_the_first_by_name_keeps_it() {
        // Fresh: `pa` (in the later file) comes first by name and keeps the uid.
        let mut dir = new_dir();
        let mut controller = LocalController::default();
        let all = vec![
            dir.set("/p/a.yaml", Some(vec![policy_with_uid("pb", "u1", "web")])),
            dir.set("/p/b.yaml", Some(vec![policy_with_uid("pa", "u1", "api")])),
        ];
        let s = dir.pass(&mut controller, &all);
        // The name docs/policies.md shows for `pb`.
        assert_eq!(derived("pb").0, "b500cbcf-2edf-5c7f-85ef-338e1cd96c67");
        let mut both = vec![("u1".to_string(), "pa".to_string()), derived("pb")];
        both.sort();
        assert_eq!(sorted_sources(&s), both);
        assert!(s
            .network_policies
            .iter()
            .all(|p| p.rules.len() == 1 && p.rules[0].action == crate::policy::controlplane::Action::Drop));
        assert_eq!(s.errors, [shares_u1("pb", "/p/a.yaml", "pa", "/p/b.yaml")]);
        let (t, errors, warnings) = translate_files(
            dir.files.iter().map(|(p, o)| (p.clone(), o.clone())).collect(),
            &[],
        );
        assert_eq!(errors, Vec::<String>::new());
        assert_eq!(warnings, s.errors);
        let mut names: Vec<(String, String)> = t
            .network_policies
            .iter()
            .map(|p| {
                let source = p.source_ref.as_ref().map_or_else(String::new, |r| r.name.clone());
                (p.metadata.name.clone(), source)
            })
            .collect();
        names.sort();
        assert_eq!(names, both);

        // Running: `pb` enforced first under u1; `pa` arrives and, first by name, takes u1 over:
        // `pb` stays enforced, under its derived name, with the same rules.
        let mut dir = new_dir();
        let mut controller = LocalController::default();
        let first = dir.set("/p/a.yaml", Some(vec![policy_with_uid("pb", "u1", "web")]));
        let s = dir.pass(&mut controller, &[first]);
        assert_eq!(s.errors, Vec::<String>::new());
        let pb_rules = s.network_policies[0].rules.clone();
        let copy = dir.set("/p/b.yaml", Some(vec![policy_with_uid("pa", "u1", "api")]));
        let s = dir.pass(&mut controller, &[copy]);
        assert_eq!(sorted_sources(&s), both);
        let pb = s.network_policies.iter().find(|p| p.name == derived("pb").0);
        assert_eq!(pb.map(|p| &p.rules), Some(&pb_rules));
        assert_eq!(s.errors, [shares_u1("pb", "/p/a.yaml", "pa", "/p/b.yaml")]);
        // Reported on every pass while it lasts.
        let s = dir.pass(&mut controller, &[]);
        assert_eq!(s.errors, [shares_u1("pb", "/p/a.yaml", "pa", "/p/b.yaml")]);
        // A copy sorting after `pa`: `pa`'s name and object do not change.
        let pa = s.network_policies.iter().find(|p| p.name == "u1").cloned();
        let later = dir.set("/p/c.yaml", Some(vec![policy_with_uid("pc", "u1", "db")]));
        let s = dir.pass(&mut controller, &[later]);
        assert_eq!(s.network_policies.iter().find(|p| p.name == "u1").cloned(), pa);
        assert_eq!(
            s.errors,
            [
                shares_u1("pb", "/p/a.yaml", "pa", "/p/b.yaml"),
                shares_u1("pc", "/p/c.yaml", "pa", "/p/b.yaml")
            ]
        );
        let gone = dir.set("/p/c.yaml", None);
        dir.pass(&mut controller, &[gone]);
        // `pb` edited: still under its derived name.
        let edited = dir.set("/p/a.yaml", Some(vec![policy_with_uid("pb", "u1", "db")]));
        let s = dir.pass(&mut controller, &[edited]);
        assert_eq!(sorted_sources(&s), both);
        assert_eq!(s.errors, [shares_u1("pb", "/p/a.yaml", "pa", "/p/b.yaml")]);
        // `pa` removed: `pb`, unchanged, takes u1 back.
        let gone = dir.set("/p/b.yaml", None);
        let s = dir.pass(&mut controller, &[gone]);
        assert_eq!(s.errors, Vec::<String>::new());
        assert_eq!(sources(&s), [("u1".to_string(), "pb".to_string())]);
        // `pa` back with its own uid: both under their uids.
        let back = dir.set("/p/b.yaml", Some(vec![policy_with_uid("pa", "u2", "api")]));
        let s = dir.pass(&mut controller, &[back]);
        assert_eq!(s.errors, Vec::<String>::new());
        assert_eq!(
            sorted_sources(&s),
            [
                ("u1".to_string(), "pb".to_string()),
                ("u2".to_string(), "pa".to_string())
            ]
        );
        // `pa` takes u1 again: it holds it, `pb` is renamed, both enforced.
        let clash = dir.set("/p/b.yaml", Some(vec![policy_with_uid("pa", "u1", "api")]));
        let s = dir.pass(&mut controller, &[clash]);
        assert_eq!(sorted_sources(&s), both);
        assert_eq!(s.errors, [shares_u1("pb", "/p/a.yaml", "pa", "/p/b.yaml")]);
    }

    /// A uid equal to the name another policy derives (copied from `translate`'s output): the
    /// derived name stays with the policy it is derived from, and the one with the uid takes its
    /// own derived name. No two controlplane policies ever share a name.
    #[test]
    fn a_uid_that_is_another_policys_derived_name_leaves_it_that_name() {
        let taken = derived_name(&native_key(&policy("pd", "web")));
        let mut dir = new_dir();
        let mut controller = LocalController::default();
        let first = dir.set("/p/a.yaml", Some(vec![policy_with_uid("pe", &taken, "api")]));
        let s = dir.pass(&mut controller, &[first]);
        assert_eq!(sources(&s), [(taken.clone(), "pe".to_string())]);
        let other = dir.set("/p/b.yaml", Some(vec![policy("pd", "web")]));
        let s = dir.pass(&mut controller, &[other]);
        assert_eq!(sorted_sources(&s), {
            let mut v = vec![(taken.clone(), "pd".to_string()), derived("pe")];
            v.sort();
            v
        });
        assert_eq!(s.errors.len(), 1, "{:#?}", s.errors);
        assert!(
            s.errors[0].starts_with(&format!(
                "policy file /p/a.yaml: ClusterNetworkPolicy pe: metadata.uid {taken:?} is the name \
                 derived for ClusterNetworkPolicy pd (policy file /p/b.yaml)"
            )),
            "{}",
            s.errors[0]
        );
        let (_, _, warnings) = translate_files(
            dir.files.iter().map(|(p, o)| (p.clone(), o.clone())).collect(),
            &[],
        );
        assert_eq!(warnings, s.errors);
    }

    /// What generated directories pick from: one key with two contents, uids shared (with a
    /// claimant sorting before the others, and one changing its uid), a uid that is another
    /// policy's derived name, entities defined twice, a tier-less policy, one in a refused Tier (whose
    /// priority is a default tier's) and one in a Tier that ties with another.
    fn pool() -> Vec<NativeObject> {
        let derived_p4 = derived_name(&native_key(&policy("p4", "web")));
        vec![
            policy_with_uid("p1", "u1", "web"),
            policy_with_uid("p1", "u1", "api"),
            policy_with_uid("p2", "u1", "web"),
            policy_with_uid("p0", "u1", "db"),
            policy_with_uid("p3", "u2", "db"),
            policy_with_uid("p3", "u1", "api"),
            policy("p4", "web"),
            policy_with_uid("p5", &derived_p4, "api"),
            entity("h1", "web", "10.0.0.1"),
            entity("h1", "api", "10.0.0.1"),
            entity("h2", "api", "10.0.0.2"),
            object(
                "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {name: p6}\n\
                 spec: {priority: 5, tier: t1, appliedTo: [{externalEntitySelector: {}}],\n\
                 ingress: [{action: Drop, from: [{externalEntitySelector: {matchLabels: {app: web}}}]}]}\n",
            ),
            object("apiVersion: crd.antrea.io/v1beta1\nkind: Tier\nmetadata: {name: t1}\nspec: {priority: 100}\n"),
            // Two Tiers at one priority (the file first in path order keeps it) and a policy
            // in one of them: fail-closed whenever its Tier loses or is missing.
            object("apiVersion: crd.antrea.io/v1beta1\nkind: Tier\nmetadata: {name: t2}\nspec: {priority: 120}\n"),
            object("apiVersion: crd.antrea.io/v1beta1\nkind: Tier\nmetadata: {name: t3}\nspec: {priority: 120}\n"),
            object(
                "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {name: p7}\n\
                 spec: {priority: 5, tier: t3, appliedTo: [{externalEntitySelector: {}}],\n\
                 ingress: [{action: Drop, from: [{externalEntitySelector: {matchLabels: {app: api}}}]},\n\
                 {action: Allow}, {action: Pass, from: [{ipBlock: {cidr: 10.1.0.0/16}}]}]}\n",
            ),
        ]
    }

    /// What a restarted agent holds: a new local controller given every file of `dir`.
    fn restarted(dir: &Files) -> PolicySnapshot {
        let all: Vec<ChangedFile> = dir
            .files
            .keys()
            .map(|path| ChangedFile {
                path: path.clone(),
                before: Vec::new(),
            })
            .collect();
        sorted(dir.pass(&mut LocalController::default(), &all))
    }

    /// `s` without the rule notes, which only the agent carries (to the policies' status):
    /// `translate` prints them as lines, which `s.errors` holds too.
    fn without_rule_notes(mut s: PolicySnapshot) -> PolicySnapshot {
        for p in &mut s.network_policies {
            Arc::make_mut(p).rule_notes.clear();
        }
        s
    }

    /// What a fresh start (`translate_files`) makes of `dir`, as the agent's snapshot shows it:
    /// the validated objects sorted by name, and every line (errors and warnings) sorted.
    fn fresh_start(dir: &Files) -> PolicySnapshot {
        let (t, errors, warnings) = translate_files(
            dir.files.iter().map(|(p, o)| (p.clone(), o.clone())).collect(),
            &[],
        );
        let mut s = PolicySnapshot::default();
        for object in t.objects() {
            match object.validate() {
                Ok(ValidObject::NetworkPolicy(p)) => s.network_policies.push(p),
                Ok(ValidObject::AddressGroup(g)) => s.address_groups.push(g),
                Ok(ValidObject::AppliedToGroup(g)) => s.applied_to_groups.push(g),
                Ok(other) => panic!("unexpected {other:?}"),
                Err(e) => s
                    .errors
                    .push(format!("local controller: produced an invalid object: {e}")),
            }
        }
        s.errors.extend(errors);
        s.errors.extend(warnings);
        sorted(s)
    }

    fn sorted(mut s: PolicySnapshot) -> PolicySnapshot {
        s.network_policies.sort_by(|a, b| a.name.cmp(&b.name));
        s.address_groups.sort_by(|a, b| a.name.cmp(&b.name));
        s.applied_to_groups.sort_by(|a, b| a.name.cmp(&b.name));
        s.errors.sort();
        s
    }

    /// One pass's changes: (file number, its new objects as pool indices or `None`: removed).
    fn pass_changes() -> impl Strategy<Value = Vec<(usize, Option<Vec<usize>>)>> {
        let len = pool().len();
        proptest::collection::vec(
            (
                0..3usize,
                proptest::option::weighted(0.85, proptest::collection::vec(0..len, 0..4)),
            ),
            1..3,
        )
    }

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        /// No history: after any sequence of directory states applied pass by pass, the running
        /// agent's local controller holds what a fresh start (a restarted agent, `translate`)
        /// makes of the directory's current state: the same controlplane objects (with the
        /// same rule notes, for a restarted agent) and the same lines, at every step.
        #[test]
        fn the_running_agent_holds_what_a_fresh_start_makes_of_the_directory(
            passes in proptest::collection::vec(pass_changes(), 1..7)
        ) {
            let pool = pool();
            let mut dir = new_dir();
            let mut controller = LocalController::default();
            for changes in passes {
                // One change per file and pass, the last one generated.
                let changes: BTreeMap<usize, Option<Vec<usize>>> = changes.into_iter().collect();
                let changed: Vec<ChangedFile> = changes
                    .into_iter()
                    .map(|(file, objects)| {
                        let objects = objects.map(|o| o.iter().map(|i| pool[*i].clone()).collect());
                        dir.set(["/p/a.yaml", "/p/b.yaml", "/p/c.yaml"][file], objects)
                    })
                    .collect();
                let running = sorted(dir.pass(&mut controller, &changed));
                prop_assert_eq!(&running, &restarted(&dir));
                prop_assert_eq!(&without_rule_notes(running.clone()), &fresh_start(&dir));
                prop_assert_eq!(&running.errors, &sorted(dir.pass(&mut controller, &[])).errors);
            }
        }
    }
}

// The local controller's corners pinned end to end, through this module's reader or `compile`:
// they need the agent, so they live here; the controller's other tests are in crates/policy.
#[cfg(test)]
mod corner_tests;
#[cfg(test)]
mod tier_tests;
