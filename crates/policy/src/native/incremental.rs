//! The local controller kept running: [`NativeState`] holds the Antrea-native objects, what it
//! needs of the policies translated from them (names, fingerprints, the groups they use; not the
//! controlplane objects, which the [`Delta`] hands over and whoever takes it keeps) and the
//! members of every group they use, and takes changes one at a time, answering each batch with
//! the controlplane objects it added, changed or deleted, as antrea-controller's watchers would
//! send them.
//!
//! What a change costs depends on what it touches:
//! - an ExternalEntity (or the local ExternalNode's ones) is tested against each group's
//!   selector, old and new version, and only the groups that selected it or select it now are
//!   patched; no policy is translated again;
//! - a Namespace's labels re-resolve the groups (selectors may look at namespace labels);
//! - a policy is translated again alone; groups it stops using go, groups it starts using are
//!   resolved;
//! - a Tier, ClusterGroup or Group translates every policy again (a tier's priority, a group's
//!   ipBlocks or children show in the policies) and re-resolves the groups defined by name.
//!
//! Its output equals [`super::translate`] of the same objects, in key order (the unit tests
//! compare the two over random change sequences). Pure: no I/O.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::controller::{
    inventory_entity, nesting_exceeded, shadowed_entity_error, Controller, Entity, PolicyError, PolicyOutput,
    Scope, Source, Translation,
};
use super::objects::{NativeKind, NativeObject};
use super::selector::Selector;
use crate::controlplane::types as cp;
use crate::controlplane::Kind;
use crate::refuse::RuleNote;

/// An Antrea-native object's identity: kind, namespace, name.
pub type NativeKey = (NativeKind, String, String);

/// The key of `object`.
pub fn native_key(object: &NativeObject) -> NativeKey {
    (
        object.kind(),
        object.meta().namespace.clone(),
        object.meta().name.clone(),
    )
}

/// An ExternalEntity's identity: namespace, name.
type EntityKey = (String, String);

/// One change of the controller's input.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// An object added or replaced; `origin` (e.g. its file) names it in errors.
    Upsert {
        origin: String,
        /// Shared with whoever read it (the policy directory keeps each file's objects): the
        /// state holds no copy of its own.
        object: Arc<NativeObject>,
    },
    Delete(NativeKey),
    /// The ExternalEntities derived from this agent's ExternalNode, all of them.
    LocalEntities(Vec<Entity>),
}

/// What a batch of changes did to the controlplane objects.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Delta {
    /// Added or changed, in antrea-controller's order: groups before the policies using them.
    pub upserted: Vec<cp::ControlplaneObject>,
    /// Deleted: policies before the groups they used.
    pub deleted: Vec<(Kind, String)>,
}

impl Delta {
    pub fn is_empty(&self) -> bool {
        self.upserted.is_empty() && self.deleted.is_empty()
    }
}

/// A group in use, with its members by ExternalEntity.
#[derive(Clone, Debug)]
struct GroupState {
    source: Source,
    /// How many translated policies use it.
    users: usize,
    members: BTreeMap<EntityKey, cp::GroupMember>,
}

/// A translated policy, where it came from, and what of its translation the state needs. Not the
/// controlplane object: that is handed over in the next [`Delta`] (from [`NativeState::pending`])
/// and kept by whoever takes it; the state remembers its name and fingerprint only.
struct PolicyState {
    origin: String,
    /// The object's description, for its error.
    describe: String,
    result: Result<Translated, PolicyError>,
    notes: Vec<String>,
    rule_notes: Vec<RuleNote>,
    /// The names of the groups it uses (their sources are kept by the groups).
    address_groups: Vec<String>,
    applied_to_groups: Vec<String>,
}

/// A policy's controlplane NetworkPolicy, as the state remembers it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Translated {
    name: String,
    fingerprint: Fingerprint,
}

/// The SHA-1 of a controlplane NetworkPolicy's `Debug` text (every field, `None` apart from an
/// empty list, floats exactly): two translations with the same fingerprint are the same object.
type Fingerprint = [u8; 20];

fn fingerprint(policy: &cp::NetworkPolicy) -> Fingerprint {
    struct Hasher(sha1_smol::Sha1);
    impl std::fmt::Write for Hasher {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            self.0.update(s.as_bytes());
            Ok(())
        }
    }
    let mut h = Hasher(sha1_smol::Sha1::new());
    // Writing into a hasher cannot fail.
    let _ = std::fmt::Write::write_fmt(&mut h, format_args!("{policy:?}"));
    h.0.digest().bytes()
}

impl PolicyState {
    /// The state of `output`, its controlplane object (when it translated), and the groups it
    /// uses with their sources.
    fn of(
        origin: String,
        describe: String,
        output: PolicyOutput,
    ) -> (Self, Option<cp::NetworkPolicy>, UsedGroups) {
        let (result, object) = match output.result {
            Ok(p) => (
                Ok(Translated {
                    name: p.metadata.name.clone(),
                    fingerprint: fingerprint(&p),
                }),
                Some(p),
            ),
            Err(e) => (Err(e), None),
        };
        let state = PolicyState {
            origin,
            describe,
            result,
            notes: output.notes,
            rule_notes: output.rule_notes,
            address_groups: output.address_groups.keys().cloned().collect(),
            applied_to_groups: output.applied_to_groups.keys().cloned().collect(),
        };
        (state, object, (output.address_groups, output.applied_to_groups))
    }
}

/// The AddressGroups and AppliedToGroups a translation uses, with their sources.
type UsedGroups = (BTreeMap<String, Source>, BTreeMap<String, Source>);

/// A policy just translated, with where it came from.
struct Fresh {
    origin: String,
    describe: String,
    output: PolicyOutput,
}

/// The names whose controlplane object changed since the last [`NativeState::apply`].
#[derive(Default)]
struct Dirty {
    policies: BTreeSet<String>,
    address_groups: BTreeSet<String>,
    applied_to_groups: BTreeSet<String>,
}

/// The local controller's state; see the module header.
#[derive(Default)]
pub struct NativeState {
    objects: BTreeMap<NativeKey, (String, Arc<NativeObject>)>,
    local: BTreeMap<EntityKey, Entity>,
    /// The inventory's ExternalEntities, local names included (those are shadowed).
    inventory: BTreeMap<EntityKey, Entity>,
    /// Every namespace seen, with its labels as selectors see them (the `Namespace` object's,
    /// plus `kubernetes.io/metadata.name`). Kept for namespaces no longer used: only the
    /// namespace of an existing entity is ever looked at.
    namespace_labels: BTreeMap<String, BTreeMap<String, String>>,
    /// The Tier and group errors of the last translation of every policy.
    layer_errors: Vec<String>,
    policies: BTreeMap<NativeKey, PolicyState>,
    /// The controlplane objects of the policies marked dirty, as last translated, until the
    /// next [`Delta`] hands them over.
    pending: BTreeMap<NativeKey, cp::NetworkPolicy>,
    address_groups: BTreeMap<String, GroupState>,
    applied_to_groups: BTreeMap<String, GroupState>,
    /// For each Group (namespaced, by `namespace/name`) that selects ExternalEntities outside
    /// its namespace, those entities: such a Group cannot be an appliedTo (see
    /// `Controller::applied_to`). Kept per entity so that an entity's change costs a test per
    /// Group; the policies are translated again only when a Group enters or leaves the map.
    foreign: BTreeMap<String, BTreeSet<EntityKey>>,
    dirty: Dirty,
}

impl NativeState {
    /// The state of `objects` (later duplicates of a key replace earlier ones).
    pub fn new<O: Into<Arc<NativeObject>>>(objects: Vec<(String, O)>, local: Vec<Entity>) -> Self {
        let mut state = Self::translated(objects, local);
        state.dirty = Dirty::default();
        state.pending = BTreeMap::new();
        state
    }

    /// [`Self::new`], with everything it produces as one [`Delta`] (groups, then policies, each
    /// by name): a first load, handed over without a copy left behind.
    pub fn with_delta<O: Into<Arc<NativeObject>>>(
        objects: Vec<(String, O)>,
        local: Vec<Entity>,
    ) -> (Self, Delta) {
        let mut state = Self::translated(objects, local);
        let delta = state.take_delta();
        (state, delta)
    }

    /// The state of `objects`, everything in it marked as changed.
    fn translated<O: Into<Arc<NativeObject>>>(objects: Vec<(String, O)>, local: Vec<Entity>) -> Self {
        let mut state = NativeState::default();
        for (origin, object) in objects {
            let object: Arc<NativeObject> = object.into();
            let key = native_key(&object);
            if let NativeObject::ExternalEntity { meta, spec, ips } = &*object {
                state.inventory.insert(
                    (meta.namespace.clone(), meta.name.clone()),
                    inventory_entity(meta, spec, ips),
                );
            }
            if let NativeObject::Namespace { meta } = &*object {
                state
                    .namespace_labels
                    .insert(meta.name.clone(), meta.labels.clone());
            }
            state.objects.insert(key, (origin, object));
        }
        state.local = local
            .into_iter()
            .map(|e| ((e.namespace.clone(), e.name.clone()), e))
            .collect();
        let namespaces: Vec<String> = state
            .local
            .keys()
            .chain(state.inventory.keys())
            .map(|(ns, _)| ns.clone())
            .collect();
        for ns in namespaces {
            state.namespace_labels.entry(ns).or_default();
        }
        for (name, labels) in state.namespace_labels.iter_mut() {
            labels.insert("kubernetes.io/metadata.name".into(), name.clone());
        }
        state.foreign = state.all_foreign();
        state.translate_all_policies();
        state
    }

    /// Applies `changes` and returns what they did to the controlplane objects.
    pub fn apply(&mut self, changes: impl IntoIterator<Item = Change>) -> Delta {
        for change in changes {
            match change {
                Change::Upsert { origin, object } => self.upsert(origin, object),
                Change::Delete(key) => self.delete(&key),
                Change::LocalEntities(entities) => self.set_local(entities),
            }
        }
        self.take_delta()
    }

    /// The objects held now, in key order, with their origins.
    pub fn objects(&self) -> impl Iterator<Item = (&NativeKey, &(String, Arc<NativeObject>))> {
        self.objects.iter()
    }

    /// The object held under `key`, with its origin.
    pub fn object(&self, key: &NativeKey) -> Option<&(String, Arc<NativeObject>)> {
        self.objects.get(key)
    }

    pub fn local_entities(&self) -> impl Iterator<Item = &Entity> {
        self.local.values()
    }

    /// Everything the controller produces now, as [`super::translate`] returns it.
    /// The policies are translated again: the state keeps no copy of them.
    pub fn translation(&self) -> Translation {
        let mut c = Self::policy_layer(&self.objects, &self.foreign);
        let mut network_policies: Vec<cp::NetworkPolicy> = self
            .policies
            .iter()
            .filter(|(_, s)| s.result.is_ok())
            .filter_map(|(key, _)| {
                let (_, object) = self.objects.get(key)?;
                c.translate_policy(object)?.result.ok()
            })
            .collect();
        network_policies.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        Translation {
            network_policies,
            address_groups: self
                .address_groups
                .keys()
                .filter_map(|name| self.address_group(name))
                .collect(),
            applied_to_groups: self
                .applied_to_groups
                .keys()
                .filter_map(|name| self.applied_to_group(name))
                .collect(),
            errors: self.errors(),
        }
    }

    /// The rules translated fail-closed, by controlplane policy name (policies with some only).
    pub fn rule_notes(&self) -> BTreeMap<&str, &[RuleNote]> {
        self.policies
            .values()
            .filter(|s| !s.rule_notes.is_empty())
            .filter_map(|s| {
                let p = s.result.as_ref().ok()?;
                Some((p.name.as_str(), s.rule_notes.as_slice()))
            })
            .collect()
    }

    /// One line per problem, in the order [`super::translate`] reports them.
    pub fn errors(&self) -> Vec<String> {
        let mut errors: Vec<String> = self
            .inventory
            .keys()
            .filter(|key| self.local.contains_key(*key))
            .filter_map(|(ns, name)| {
                self.objects
                    .get(&(NativeKind::ExternalEntity, ns.clone(), name.clone()))
                    .map(|(origin, object)| shadowed_entity_error(origin, object))
            })
            .collect();
        errors.extend(self.layer_errors.iter().cloned());
        for state in self.policies.values() {
            match &state.result {
                Err(e) => errors.push(format!("{}: {}: {e}", state.origin, state.describe)),
                Ok(_) => errors.extend(
                    state
                        .notes
                        .iter()
                        .map(|note| format!("{}: {}: {note}", state.origin, state.describe)),
                ),
            }
        }
        errors
    }

    fn address_group(&self, name: &str) -> Option<cp::AddressGroup> {
        self.address_groups.get(name).map(|g| cp::AddressGroup {
            metadata: cp::ObjectMeta {
                name: name.to_string(),
                ..Default::default()
            },
            group_members: g.members.values().cloned().collect(),
            ..Default::default()
        })
    }

    fn applied_to_group(&self, name: &str) -> Option<cp::AppliedToGroup> {
        self.applied_to_groups.get(name).map(|g| cp::AppliedToGroup {
            metadata: cp::ObjectMeta {
                name: name.to_string(),
                ..Default::default()
            },
            group_members: g.members.values().cloned().collect(),
            ..Default::default()
        })
    }

    fn take_delta(&mut self) -> Delta {
        let dirty = std::mem::take(&mut self.dirty);
        let mut delta = Delta::default();
        for name in &dirty.applied_to_groups {
            match self.applied_to_group(name) {
                Some(g) => delta.upserted.push(cp::ControlplaneObject::AppliedToGroup(g)),
                None => delta.deleted.push((Kind::AppliedToGroup, name.clone())),
            }
        }
        for name in &dirty.address_groups {
            match self.address_group(name) {
                Some(g) => delta.upserted.push(cp::ControlplaneObject::AddressGroup(g)),
                None => delta.deleted.push((Kind::AddressGroup, name.clone())),
            }
        }
        let mut pending = std::mem::take(&mut self.pending);
        if !dirty.policies.is_empty() {
            // Each name's policy: the first in key order that has it.
            let mut by_name: BTreeMap<&str, &NativeKey> = BTreeMap::new();
            for (key, state) in &self.policies {
                if let Ok(p) = &state.result {
                    if dirty.policies.contains(&p.name) {
                        by_name.entry(p.name.as_str()).or_insert(key);
                    }
                }
            }
            let mut deleted = Vec::new();
            let mut layer = None;
            for name in &dirty.policies {
                let object = by_name.get(name.as_str()).and_then(|key| {
                    // Not pending: the policy did not change, another one left its name to it.
                    pending.remove(*key).or_else(|| {
                        let (_, object) = self.objects.get(*key)?;
                        let c = layer.get_or_insert_with(|| Self::policy_layer(&self.objects, &self.foreign));
                        c.translate_policy(object)?.result.ok()
                    })
                });
                match object {
                    Some(p) => delta
                        .upserted
                        .push(cp::ControlplaneObject::NetworkPolicy(Box::new(p))),
                    None => deleted.push((Kind::NetworkPolicy, name.clone())),
                }
            }
            // A policy goes before the groups it used.
            deleted.append(&mut delta.deleted);
            delta.deleted = deleted;
        }
        delta
    }

    fn upsert(&mut self, origin: String, object: Arc<NativeObject>) {
        let key = native_key(&object);
        if self
            .objects
            .get(&key)
            .is_some_and(|(o, old)| *o == origin && *old == object)
        {
            return;
        }
        match &*object {
            NativeObject::ExternalEntity { meta, spec, ips } => {
                let entity_key = (meta.namespace.clone(), meta.name.clone());
                let entity = inventory_entity(meta, spec, ips);
                self.objects.insert(key, (origin, object));
                self.set_inventory_entity(entity_key, Some(entity));
            }
            NativeObject::Namespace { meta } => {
                let mut labels = meta.labels.clone();
                labels.insert("kubernetes.io/metadata.name".into(), meta.name.clone());
                let changed = self.namespace_labels.get(&meta.name) != Some(&labels);
                self.namespace_labels.insert(meta.name.clone(), labels);
                self.objects.insert(key, (origin, object));
                if changed {
                    self.resolve_all_groups(|_| true);
                    self.refresh_foreign();
                }
            }
            NativeObject::Policy { .. } => {
                self.objects.insert(key.clone(), (origin, object));
                self.translate_policy(&key);
            }
            NativeObject::Tier { .. } | NativeObject::Group { .. } => {
                self.objects.insert(key, (origin, object));
                self.foreign = self.all_foreign();
                self.translate_all_policies();
            }
        }
    }

    fn delete(&mut self, key: &NativeKey) {
        let Some((_, object)) = self.objects.remove(key) else {
            return;
        };
        match &*object {
            NativeObject::ExternalEntity { meta, .. } => {
                self.set_inventory_entity((meta.namespace.clone(), meta.name.clone()), None);
            }
            NativeObject::Namespace { meta } => {
                let labels: BTreeMap<String, String> =
                    [("kubernetes.io/metadata.name".to_string(), meta.name.clone())].into();
                if self.namespace_labels.insert(meta.name.clone(), labels.clone()) != Some(labels) {
                    self.resolve_all_groups(|_| true);
                    self.refresh_foreign();
                }
            }
            NativeObject::Policy { .. } => self.translate_policy(key),
            NativeObject::Tier { .. } | NativeObject::Group { .. } => {
                self.foreign = self.all_foreign();
                self.translate_all_policies();
            }
        }
    }

    /// The entity selectors see under `key`: the local one, else the inventory's.
    fn effective(&self, key: &EntityKey) -> Option<&Entity> {
        self.local.get(key).or_else(|| self.inventory.get(key))
    }

    fn set_inventory_entity(&mut self, key: EntityKey, entity: Option<Entity>) {
        let before = self.effective(&key).cloned();
        match entity {
            Some(e) => {
                self.note_namespace(&e.namespace);
                self.inventory.insert(key.clone(), e);
            }
            None => {
                self.inventory.remove(&key);
            }
        }
        let after = self.effective(&key).cloned();
        self.entity_changed(&key, before.as_ref(), after.as_ref());
    }

    fn set_local(&mut self, entities: Vec<Entity>) {
        let new: BTreeMap<EntityKey, Entity> = entities
            .into_iter()
            .map(|e| ((e.namespace.clone(), e.name.clone()), e))
            .collect();
        if new == self.local {
            return;
        }
        let keys: BTreeSet<EntityKey> = self.local.keys().chain(new.keys()).cloned().collect();
        let before: Vec<Option<Entity>> = keys.iter().map(|k| self.effective(k).cloned()).collect();
        for e in new.values() {
            self.note_namespace(&e.namespace);
        }
        self.local = new;
        for (key, before) in keys.iter().zip(before) {
            let after = self.effective(key).cloned();
            self.entity_changed(key, before.as_ref(), after.as_ref());
        }
    }

    /// A namespace seen for the first time gets its name label.
    fn note_namespace(&mut self, namespace: &str) {
        if !self.namespace_labels.contains_key(namespace) {
            self.namespace_labels.insert(
                namespace.to_string(),
                [("kubernetes.io/metadata.name".to_string(), namespace.to_string())].into(),
            );
        }
    }

    /// Patches the groups that selected `before` or select `after`; no other group is looked at
    /// beyond its selector.
    fn entity_changed(&mut self, key: &EntityKey, before: Option<&Entity>, after: Option<&Entity>) {
        if before == after {
            return;
        }
        self.entity_foreign_changed(key, after);
        for address in [true, false] {
            let groups = if address {
                &self.address_groups
            } else {
                &self.applied_to_groups
            };
            let mut patches: Vec<(String, Option<cp::GroupMember>)> = Vec::new();
            for (name, group) in groups {
                let was = before.is_some_and(|e| self.selects(&group.source, e, 1));
                let is = after.is_some_and(|e| self.selects(&group.source, e, 1));
                if !was && !is {
                    continue;
                }
                let member = after
                    .filter(|e| is && (address || e.local))
                    .map(|e| group_member(e, address));
                if group.members.get(key) != member.as_ref() {
                    patches.push((name.clone(), member));
                }
            }
            for (name, member) in patches {
                let (groups, dirty) = if address {
                    (&mut self.address_groups, &mut self.dirty.address_groups)
                } else {
                    (&mut self.applied_to_groups, &mut self.dirty.applied_to_groups)
                };
                if let Some(group) = groups.get_mut(&name) {
                    match member {
                        Some(m) => group.members.insert(key.clone(), m),
                        None => group.members.remove(key),
                    };
                    dirty.insert(name);
                }
            }
        }
    }

    /// Whether `source` selects `entity` (what [`Controller`]'s scan decides entity by entity).
    fn selects(&self, source: &Source, entity: &Entity, level: usize) -> bool {
        match source {
            Source::Selector { scope, entities } => {
                let in_scope = match scope {
                    Scope::All => true,
                    Scope::Namespace(ns) => *ns == entity.namespace,
                    Scope::Namespaces(sel) => self
                        .namespace_labels
                        .get(&entity.namespace)
                        .is_some_and(|labels| sel.matches(labels)),
                };
                in_scope && entities.matches(&entity.labels)
            }
            Source::Named { namespace, name } => {
                if level > 2 {
                    return false;
                }
                let kind = if namespace.is_empty() {
                    NativeKind::ClusterGroup
                } else {
                    NativeKind::Group
                };
                let Some(NativeObject::Group { kind, meta, spec }) = self
                    .objects
                    .get(&(kind, namespace.clone(), name.clone()))
                    .map(|(_, o)| &**o)
                else {
                    return false;
                };
                let child_kind = *kind;
                let exceeded = nesting_exceeded(&spec.child_groups, |child| {
                    matches!(
                        self.objects.get(&(child_kind, namespace.clone(), child.to_string())).map(|(_, o)| &**o),
                        Some(NativeObject::Group { spec, .. }) if !spec.child_groups.is_empty()
                    )
                });
                if exceeded {
                    return false;
                }
                if let Some(ee) = &spec.external_entity_selector {
                    let Ok(entities) = Selector::parse(ee) else {
                        return false;
                    };
                    let scope = match &spec.namespace_selector {
                        Some(ns) => match Selector::parse(ns) {
                            Ok(s) => Scope::Namespaces(s),
                            Err(_) => return false,
                        },
                        None if *kind == NativeKind::Group => Scope::Namespace(meta.namespace.clone()),
                        None => Scope::All,
                    };
                    if self.selects(&Source::Selector { scope, entities }, entity, level) {
                        return true;
                    }
                }
                spec.child_groups.iter().any(|child| {
                    self.selects(
                        &Source::Named {
                            namespace: meta.namespace.clone(),
                            name: child.clone(),
                        },
                        entity,
                        level + 1,
                    )
                })
            }
        }
    }

    /// The Groups (namespaced) of the current objects, as `(namespace, name)`.
    fn namespaced_groups(&self) -> impl Iterator<Item = (&String, &String)> {
        // Keys sort by kind first: the Groups are one range, not a scan of every object.
        let from = (NativeKind::Group, String::new(), String::new());
        self.objects
            .range(from..)
            .map(|(key, _)| key)
            .take_while(|(kind, _, _)| *kind == NativeKind::Group)
            .map(|(_, namespace, name)| (namespace, name))
    }

    /// Whether the Group `namespace/name` selects `entity` from outside its namespace.
    fn selects_foreign(&self, namespace: &str, name: &str, entity: &Entity) -> bool {
        entity.namespace != namespace
            && self.selects(
                &Source::Named {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                },
                entity,
                1,
            )
    }

    /// [`Self::foreign`] computed from scratch (a Group or a Namespace's labels changed).
    fn all_foreign(&self) -> BTreeMap<String, BTreeSet<EntityKey>> {
        let inventory = self
            .inventory
            .iter()
            .filter(|(key, _)| !self.local.contains_key(*key));
        let entities: Vec<(&EntityKey, &Entity)> = self.local.iter().chain(inventory).collect();
        let mut out: BTreeMap<String, BTreeSet<EntityKey>> = BTreeMap::new();
        for (namespace, name) in self.namespaced_groups() {
            let selected: BTreeSet<EntityKey> = entities
                .iter()
                .filter(|(_, e)| self.selects_foreign(namespace, name, e))
                .map(|(key, _)| (*key).clone())
                .collect();
            if !selected.is_empty() {
                out.insert(format!("{namespace}/{name}"), selected);
            }
        }
        out
    }

    /// Recomputes [`Self::foreign`] after a Namespace's labels changed; translates the policies
    /// again when a Group entered or left it.
    fn refresh_foreign(&mut self) {
        let foreign = self.all_foreign();
        let flipped = !foreign.keys().eq(self.foreign.keys());
        self.foreign = foreign;
        if flipped {
            self.translate_all_policies();
        }
    }

    /// Updates [`Self::foreign`] for the entity under `key`, now `after`; translates the
    /// policies again when a Group entered or left it (which changes whether the policies
    /// applied to it are in error).
    fn entity_foreign_changed(&mut self, key: &EntityKey, after: Option<&Entity>) {
        let now: Vec<(String, bool)> = self
            .namespaced_groups()
            .map(|(namespace, name)| {
                (
                    format!("{namespace}/{name}"),
                    after.is_some_and(|e| self.selects_foreign(namespace, name, e)),
                )
            })
            .collect();
        let mut flipped = false;
        for (group, is) in now {
            if is {
                let set = self.foreign.entry(group).or_default();
                flipped |= set.is_empty();
                set.insert(key.clone());
            } else if let Some(set) = self.foreign.get_mut(&group) {
                if set.remove(key) && set.is_empty() {
                    self.foreign.remove(&group);
                    flipped = true;
                }
            }
        }
        if flipped {
            self.translate_all_policies();
        }
    }

    /// Every entity `source` selects, as members.
    fn resolve(&self, source: &Source, address: bool) -> BTreeMap<EntityKey, cp::GroupMember> {
        let inventory = self
            .inventory
            .iter()
            .filter(|(key, _)| !self.local.contains_key(*key));
        self.local
            .iter()
            .chain(inventory)
            .filter(|(_, e)| (address || e.local) && self.selects(source, e, 1))
            .map(|(key, e)| (key.clone(), group_member(e, address)))
            .collect()
    }

    /// Resolves again the groups whose source passes `which`; marks those whose members changed.
    fn resolve_all_groups(&mut self, which: impl Fn(&Source) -> bool) {
        for address in [true, false] {
            let groups = if address {
                &self.address_groups
            } else {
                &self.applied_to_groups
            };
            let updates: Vec<(String, BTreeMap<EntityKey, cp::GroupMember>)> = groups
                .iter()
                .filter(|(_, g)| which(&g.source))
                .map(|(name, g)| (name.clone(), self.resolve(&g.source, address)))
                .filter(|(name, members)| groups.get(name).is_some_and(|g| g.members != *members))
                .collect();
            let (groups, dirty) = if address {
                (&mut self.address_groups, &mut self.dirty.address_groups)
            } else {
                (&mut self.applied_to_groups, &mut self.dirty.applied_to_groups)
            };
            for (name, members) in updates {
                if let Some(g) = groups.get_mut(&name) {
                    g.members = members;
                    dirty.insert(name);
                }
            }
        }
    }

    /// A controller holding the tiers and groups of the current objects (no entities: members
    /// are resolved here).
    fn policy_layer<'s>(
        objects: &'s BTreeMap<NativeKey, (String, Arc<NativeObject>)>,
        foreign: &BTreeMap<String, BTreeSet<EntityKey>>,
    ) -> Controller<'s> {
        let mut c = Controller::new();
        c.foreign_groups = foreign.keys().cloned().collect();
        let tiers_and_groups = || {
            objects
                .values()
                .filter(|(_, o)| matches!(**o, NativeObject::Tier { .. } | NativeObject::Group { .. }))
                .map(|(origin, o)| (origin, &**o))
        };
        c.read_tiers(tiers_and_groups());
        c.read_groups(tiers_and_groups());
        c
    }

    /// Translates the policy under `key` again (or drops it when it is gone).
    fn translate_policy(&mut self, key: &NativeKey) {
        let fresh = match self.objects.get(key) {
            Some((origin, object)) => {
                let mut c = Self::policy_layer(&self.objects, &self.foreign);
                c.translate_policy(object).map(|output| Fresh {
                    origin: origin.clone(),
                    describe: object.describe(),
                    output,
                })
            }
            None => None,
        };
        let old = self.policies.remove(key);
        self.replace_policy(key, old, fresh);
    }

    /// Puts the policy under `key` translated afresh (`None`: gone) in place of `old`; updates
    /// the groups, and marks its names (and keeps its object for the next delta) when it changed.
    fn replace_policy(&mut self, key: &NativeKey, old: Option<PolicyState>, fresh: Option<Fresh>) {
        let (new, object, (gained_ags, gained_atgs)) = match fresh {
            Some(f) => {
                let (state, object, used) = PolicyState::of(f.origin, f.describe, f.output);
                (Some(state), object, used)
            }
            None => (None, None, Default::default()),
        };
        let old_policy = old.as_ref().and_then(|s| s.result.as_ref().ok());
        let new_policy = new.as_ref().and_then(|s| s.result.as_ref().ok());
        let notes = |s: Option<&PolicyState>| s.map(|s| &s.rule_notes).cloned();
        // A note can change alone (the same fail-closed rule, for another field): the policy
        // is handed over again so that its status says the new one.
        if old_policy != new_policy || notes(old.as_ref()) != notes(new.as_ref()) {
            for p in old_policy.into_iter().chain(new_policy) {
                self.dirty.policies.insert(p.name.clone());
            }
            if let Some(object) = object {
                self.pending.insert(key.clone(), object);
            }
        }
        if new_policy.is_none() {
            self.pending.remove(key);
        }
        let (lost_ags, lost_atgs) = match old {
            Some(s) => (s.address_groups, s.applied_to_groups),
            None => Default::default(),
        };
        if let Some(state) = new {
            self.policies.insert(key.clone(), state);
        }
        self.use_groups(true, gained_ags, lost_ags);
        self.use_groups(false, gained_atgs, lost_atgs);
    }

    /// Counts the uses of `gained` and drops those of `lost`; a group starting to be used is
    /// resolved, one no longer used is deleted.
    fn use_groups(&mut self, address: bool, gained: BTreeMap<String, Source>, lost: Vec<String>) {
        for (name, source) in gained {
            let groups = if address {
                &self.address_groups
            } else {
                &self.applied_to_groups
            };
            if groups.contains_key(&name) {
                let groups = if address {
                    &mut self.address_groups
                } else {
                    &mut self.applied_to_groups
                };
                if let Some(g) = groups.get_mut(&name) {
                    g.users += 1;
                }
                continue;
            }
            let members = self.resolve(&source, address);
            let (groups, dirty) = if address {
                (&mut self.address_groups, &mut self.dirty.address_groups)
            } else {
                (&mut self.applied_to_groups, &mut self.dirty.applied_to_groups)
            };
            groups.insert(
                name.clone(),
                GroupState {
                    source,
                    users: 1,
                    members,
                },
            );
            dirty.insert(name);
        }
        let (groups, dirty) = if address {
            (&mut self.address_groups, &mut self.dirty.address_groups)
        } else {
            (&mut self.applied_to_groups, &mut self.dirty.applied_to_groups)
        };
        for name in lost {
            if let Some(g) = groups.get_mut(&name) {
                g.users = g.users.saturating_sub(1);
                if g.users == 0 {
                    groups.remove(&name);
                    dirty.insert(name);
                }
            }
        }
    }

    /// Translates every policy again (a Tier or group changed), then re-resolves the groups
    /// defined by ClusterGroup/Group name (their definitions may be what changed).
    fn translate_all_policies(&mut self) {
        let mut c = Self::policy_layer(&self.objects, &self.foreign);
        let mut outputs: Vec<(NativeKey, Fresh)> = Vec::new();
        for (key, (origin, object)) in &self.objects {
            if let Some(output) = c.translate_policy(object) {
                outputs.push((
                    key.clone(),
                    Fresh {
                        origin: origin.clone(),
                        describe: object.describe(),
                        output,
                    },
                ));
            }
        }
        self.layer_errors = std::mem::take(&mut c.errors);
        drop(c);
        let mut old = std::mem::take(&mut self.policies);
        for (key, fresh) in outputs {
            let previous = old.remove(&key);
            self.replace_policy(&key, previous, Some(fresh));
        }
        for (key, state) in old {
            self.replace_policy(&key, Some(state), None);
        }
        self.resolve_all_groups(|source| matches!(source, Source::Named { .. }));
    }
}

/// `entity` as a member of an AddressGroup (with its IPs) or an AppliedToGroup.
fn group_member(e: &Entity, address: bool) -> cp::GroupMember {
    cp::GroupMember {
        external_entity: Some(cp::ObjectReference {
            name: e.name.clone(),
            namespace: e.namespace.clone(),
        }),
        ips: if address {
            e.ips.iter().map(|ip| cp::IpAddress::from_ip(*ip)).collect()
        } else {
            Vec::new()
        },
        ports: e.ports.clone(),
        ..Default::default()
    }
}
