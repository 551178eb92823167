//! [`PolicyStore`]: the validated NetworkPolicies, AddressGroups and AppliedToGroups by name, with
//! the watch semantics of antrea-apis.md §3.4: upsert (ADDED, MODIFIED NetworkPolicy), group
//! patches (MODIFIED group; a patch for an unknown group is an error the caller turns into a
//! resync), delete by name (DELETED) and replace-all (the snapshot ending at the BOOKMARK, or a
//! standalone directory snapshot). Every operation returns what changed; applying the same thing
//! twice changes nothing. Pure: no I/O, no clocks.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::types::Kind;
use super::validate::{Group, MembersPatch, Policy, ValidObject};
use crate::merge_join::{merge_join, Joined};

/// How one object changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Change {
    Added,
    Modified,
    Deleted,
}

/// What an operation changed, by kind and name. Objects that were applied but did not change
/// are absent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    pub network_policies: BTreeMap<String, Change>,
    pub address_groups: BTreeMap<String, Change>,
    pub applied_to_groups: BTreeMap<String, Change>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.network_policies.is_empty()
            && self.address_groups.is_empty()
            && self.applied_to_groups.is_empty()
    }

    /// Folds a later set of changes into this one (added then deleted = nothing; deleted then
    /// added = modified; added then modified = added).
    pub fn merge(&mut self, later: Changes) {
        fn fold(into: &mut BTreeMap<String, Change>, later: BTreeMap<String, Change>) {
            for (name, next) in later {
                let merged = match (into.get(&name), next) {
                    (None, next) => Some(next),
                    (Some(Change::Added), Change::Deleted) => None,
                    (Some(Change::Added), _) => Some(Change::Added),
                    (Some(Change::Deleted), Change::Added | Change::Modified) => Some(Change::Modified),
                    (Some(_), next) => Some(next),
                };
                match merged {
                    Some(c) => {
                        into.insert(name, c);
                    }
                    None => {
                        into.remove(&name);
                    }
                }
            }
        }
        fold(&mut self.network_policies, later.network_policies);
        fold(&mut self.address_groups, later.address_groups);
        fold(&mut self.applied_to_groups, later.applied_to_groups);
    }

    fn single(kind: Kind, name: &str, change: Option<Change>) -> Changes {
        let mut out = Changes::default();
        if let Some(change) = change {
            let map = match kind {
                Kind::NetworkPolicy => &mut out.network_policies,
                Kind::AddressGroup | Kind::AddressGroupPatch => &mut out.address_groups,
                Kind::AppliedToGroup | Kind::AppliedToGroupPatch => &mut out.applied_to_groups,
            };
            map.insert(name.to_owned(), change);
        }
        out
    }
}

/// An operation the store refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// A patch arrived for a group the store does not hold: the caller's view is out of sync
    /// and must be rebuilt from a fresh snapshot (restart the watch).
    #[error("{kind} for unknown group {name:?}: resync needed")]
    UnknownGroup { kind: Kind, name: String },
}

/// The three kinds of controlplane objects, validated, by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PolicyStore {
    /// Shared with whoever handed them over (a policy directory keeps its objects for
    /// last-good semantics), so a large policy set is held once.
    policies: BTreeMap<String, Arc<Policy>>,
    address_groups: BTreeMap<String, Arc<Group>>,
    applied_to_groups: BTreeMap<String, Arc<Group>>,
}

/// Equality, with a shortcut for objects shared with the source that handed them over (a
/// policy directory hands the same allocation over again while its file is unchanged).
trait SameValue {
    fn same(&self, other: &Self) -> bool;
}

impl SameValue for Arc<Policy> {
    fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(self, other) || self == other
    }
}

impl SameValue for Arc<Group> {
    fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(self, other) || self == other
    }
}

fn upsert<T: SameValue>(map: &mut BTreeMap<String, T>, name: &str, value: T) -> Option<Change> {
    match map.get_mut(name) {
        Some(old) if old.same(&value) => None,
        Some(old) => {
            *old = value;
            Some(Change::Modified)
        }
        None => {
            map.insert(name.to_owned(), value);
            Some(Change::Added)
        }
    }
}

fn remove<T>(map: &mut BTreeMap<String, T>, name: &str) -> Option<Change> {
    map.remove(name).map(|_| Change::Deleted)
}

fn replace<T: SameValue>(
    map: &mut BTreeMap<String, T>,
    items: impl IntoIterator<Item = (String, T)>,
) -> BTreeMap<String, Change> {
    let mut next: BTreeMap<String, T> = items.into_iter().collect();
    let mut changes = BTreeMap::new();
    // Both maps are sorted by name: one walk of both (a snapshot of 10,000 policies is compared
    // on every change of one of them), not a lookup per name.
    for step in merge_join(map.iter(), next.iter(), |(a, _), (b, _)| a.cmp(b)) {
        let (name, change) = match step {
            Joined::Old((name, _)) => (name, Change::Deleted),
            Joined::New((name, _)) => (name, Change::Added),
            Joined::Both((_, before), (name, now)) if !before.same(now) => (name, Change::Modified),
            Joined::Both(..) => continue,
        };
        changes.insert(name.clone(), change);
    }
    std::mem::swap(map, &mut next);
    changes
}

fn patch(group: &mut Arc<Group>, patch: MembersPatch) -> bool {
    // Copied only if the source still shares it.
    let group = Arc::make_mut(group);
    let before = group.members.clone();
    for m in patch.added {
        group.members.insert(m.key(), m);
    }
    for m in &patch.removed {
        group.members.remove(&m.key());
    }
    group.members != before
}

impl PolicyStore {
    pub fn new() -> Self {
        PolicyStore::default()
    }

    // --- reads ---

    pub fn policy(&self, name: &str) -> Option<&Policy> {
        self.policies.get(name).map(|p| &**p)
    }

    pub fn address_group(&self, name: &str) -> Option<&Group> {
        self.address_groups.get(name).map(|g| &**g)
    }

    pub fn applied_to_group(&self, name: &str) -> Option<&Group> {
        self.applied_to_groups.get(name).map(|g| &**g)
    }

    /// Policies by name, in name order.
    pub fn policies(&self) -> impl Iterator<Item = &Policy> {
        self.policies.values().map(|p| &**p)
    }

    pub fn address_groups(&self) -> impl Iterator<Item = &Group> {
        self.address_groups.values().map(|g| &**g)
    }

    pub fn applied_to_groups(&self) -> impl Iterator<Item = &Group> {
        self.applied_to_groups.values().map(|g| &**g)
    }

    /// Names of the policies whose rules have `group` as a peer.
    pub fn policies_using_address_group(&self, group: &str) -> BTreeSet<&str> {
        self.policies
            .values()
            .filter(|p| p.address_group_names().contains(group))
            .map(|p| p.name.as_str())
            .collect()
    }

    /// Names of the policies that apply to `group` (policy level or per rule).
    pub fn policies_using_applied_to_group(&self, group: &str) -> BTreeSet<&str> {
        self.policies
            .values()
            .filter(|p| p.applied_to_group_names().contains(group))
            .map(|p| p.name.as_str())
            .collect()
    }

    /// The policies whose effective rules may differ after `changes`: the changed policies
    /// (deleted ones included) and every held policy using a changed group.
    pub fn affected_policies(&self, changes: &Changes) -> BTreeSet<String> {
        let mut out: BTreeSet<String> = changes.network_policies.keys().cloned().collect();
        for p in self.policies.values() {
            let uses_changed_ag = p
                .address_group_names()
                .iter()
                .any(|g| changes.address_groups.contains_key(*g));
            let uses_changed_atg = p
                .applied_to_group_names()
                .iter()
                .any(|g| changes.applied_to_groups.contains_key(*g));
            if uses_changed_ag || uses_changed_atg {
                out.insert(p.name.clone());
            }
        }
        out
    }

    // --- single events ---

    /// Applies one validated object as the watch does: a full object is upserted, a patch is
    /// applied to its group (error if the group is unknown).
    pub fn apply(&mut self, object: ValidObject) -> Result<Changes, StoreError> {
        Ok(match object {
            ValidObject::NetworkPolicy(p) => self.upsert_policy(p),
            ValidObject::AddressGroup(g) => self.upsert_address_group(g),
            ValidObject::AppliedToGroup(g) => self.upsert_applied_to_group(g),
            ValidObject::AddressGroupPatch(p) => self.patch_address_group(p)?,
            ValidObject::AppliedToGroupPatch(p) => self.patch_applied_to_group(p)?,
        })
    }

    /// Removes an object by kind and name (a patch kind means its group kind). Deleting an
    /// unknown object changes nothing.
    pub fn delete(&mut self, kind: Kind, name: &str) -> Changes {
        let change = match kind {
            Kind::NetworkPolicy => remove(&mut self.policies, name),
            Kind::AddressGroup | Kind::AddressGroupPatch => remove(&mut self.address_groups, name),
            Kind::AppliedToGroup | Kind::AppliedToGroupPatch => remove(&mut self.applied_to_groups, name),
        };
        Changes::single(kind, name, change)
    }

    pub fn upsert_policy(&mut self, policy: Arc<Policy>) -> Changes {
        let name = policy.name.clone();
        let change = upsert(&mut self.policies, &name, policy);
        Changes::single(Kind::NetworkPolicy, &name, change)
    }

    pub fn upsert_address_group(&mut self, group: Arc<Group>) -> Changes {
        let name = group.name.clone();
        let change = upsert(&mut self.address_groups, &name, group);
        Changes::single(Kind::AddressGroup, &name, change)
    }

    pub fn upsert_applied_to_group(&mut self, group: Arc<Group>) -> Changes {
        let name = group.name.clone();
        let change = upsert(&mut self.applied_to_groups, &name, group);
        Changes::single(Kind::AppliedToGroup, &name, change)
    }

    /// Adds then removes members; a member is removed only if its identity (kind,
    /// namespace/name and IPs) matches.
    pub fn patch_address_group(&mut self, p: MembersPatch) -> Result<Changes, StoreError> {
        let name = p.name.clone();
        let group = self
            .address_groups
            .get_mut(&name)
            .ok_or_else(|| StoreError::UnknownGroup {
                kind: Kind::AddressGroupPatch,
                name: name.clone(),
            })?;
        let changed = patch(group, p).then_some(Change::Modified);
        Ok(Changes::single(Kind::AddressGroup, &name, changed))
    }

    /// See [`PolicyStore::patch_address_group`].
    pub fn patch_applied_to_group(&mut self, p: MembersPatch) -> Result<Changes, StoreError> {
        let name = p.name.clone();
        let group = self
            .applied_to_groups
            .get_mut(&name)
            .ok_or_else(|| StoreError::UnknownGroup {
                kind: Kind::AppliedToGroupPatch,
                name: name.clone(),
            })?;
        let changed = patch(group, p).then_some(Change::Modified);
        Ok(Changes::single(Kind::AppliedToGroup, &name, changed))
    }

    // --- snapshots ---

    /// Makes the policies exactly `policies` (a later duplicate name wins).
    pub fn replace_policies(&mut self, policies: impl IntoIterator<Item = Arc<Policy>>) -> Changes {
        Changes {
            network_policies: replace(
                &mut self.policies,
                policies.into_iter().map(|p| (p.name.clone(), p)),
            ),
            ..Changes::default()
        }
    }

    /// Makes the AddressGroups exactly `groups` (a later duplicate name wins).
    pub fn replace_address_groups(&mut self, groups: impl IntoIterator<Item = Arc<Group>>) -> Changes {
        Changes {
            address_groups: replace(
                &mut self.address_groups,
                groups.into_iter().map(|g| (g.name.clone(), g)),
            ),
            ..Changes::default()
        }
    }

    /// Makes the AppliedToGroups exactly `groups` (a later duplicate name wins).
    pub fn replace_applied_to_groups(&mut self, groups: impl IntoIterator<Item = Arc<Group>>) -> Changes {
        Changes {
            applied_to_groups: replace(
                &mut self.applied_to_groups,
                groups.into_iter().map(|g| (g.name.clone(), g)),
            ),
            ..Changes::default()
        }
    }

    /// Replaces all three kinds at once (a standalone directory snapshot).
    pub fn replace_all(
        &mut self,
        policies: impl IntoIterator<Item = Arc<Policy>>,
        address_groups: impl IntoIterator<Item = Arc<Group>>,
        applied_to_groups: impl IntoIterator<Item = Arc<Group>>,
    ) -> Changes {
        let mut changes = self.replace_policies(policies);
        changes.merge(self.replace_address_groups(address_groups));
        changes.merge(self.replace_applied_to_groups(applied_to_groups));
        changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controlplane::types::ControlplaneObject;
    use crate::controlplane::validate::{Member, MemberRef};
    use crate::controlplane::Validate as _;
    use antrea_controlplane::testdata;

    fn valid(text: &str) -> ValidObject {
        ControlplaneObject::from_value(serde_json::from_str(text).unwrap())
            .unwrap()
            .validate()
            .unwrap()
    }

    const NP: &str = testdata::NP_ANNP1;
    const NP_NAME: &str = "5d5b6c7e-0f0a-4c43-9d61-2a1f9e3c4b10";
    const AG: &str = testdata::AG;
    const AG_NAME: &str = "cacccce8-595f-5250-b361-a0ca752b2c72";
    const ATG: &str = testdata::ATG;
    const ATG_NAME: &str = "9a47b91d-76f1-5b82-a456-3816a3514090";

    fn changes(kind: Kind, name: &str, change: Change) -> Changes {
        Changes::single(kind, name, Some(change))
    }

    fn ee(name: &str, ip: &str) -> Member {
        Member {
            entity: MemberRef::ExternalEntity {
                namespace: "vm-ns".into(),
                name: name.into(),
            },
            ips: if ip.is_empty() {
                vec![]
            } else {
                vec![ip.parse().unwrap()]
            },
            ports: vec![],
        }
    }

    fn loaded() -> PolicyStore {
        let mut s = PolicyStore::new();
        for text in [NP, AG, ATG] {
            s.apply(valid(text)).unwrap();
        }
        s
    }

    #[test]
    fn add_modify_delete_report_changes_and_are_idempotent() {
        let mut s = PolicyStore::new();
        assert_eq!(
            s.apply(valid(NP)).unwrap(),
            changes(Kind::NetworkPolicy, NP_NAME, Change::Added)
        );
        // The controller may resend an unchanged policy (span change): nothing changed.
        assert!(s.apply(valid(NP)).unwrap().is_empty());
        let ValidObject::NetworkPolicy(mut p) = valid(NP) else {
            panic!("kind")
        };
        Arc::make_mut(&mut p).priority = Some(1.0);
        assert_eq!(
            s.upsert_policy(p),
            changes(Kind::NetworkPolicy, NP_NAME, Change::Modified)
        );
        assert_eq!(s.policy(NP_NAME).unwrap().priority, Some(1.0));
        assert_eq!(
            s.delete(Kind::NetworkPolicy, NP_NAME),
            changes(Kind::NetworkPolicy, NP_NAME, Change::Deleted)
        );
        assert!(s.delete(Kind::NetworkPolicy, NP_NAME).is_empty());
        assert!(s.policy(NP_NAME).is_none());

        assert_eq!(
            s.apply(valid(AG)).unwrap(),
            changes(Kind::AddressGroup, AG_NAME, Change::Added)
        );
        assert_eq!(
            s.apply(valid(ATG)).unwrap(),
            changes(Kind::AppliedToGroup, ATG_NAME, Change::Added)
        );
        assert_eq!(
            s.delete(Kind::AddressGroup, AG_NAME),
            changes(Kind::AddressGroup, AG_NAME, Change::Deleted)
        );
        assert_eq!(
            s.delete(Kind::AppliedToGroup, ATG_NAME),
            changes(Kind::AppliedToGroup, ATG_NAME, Change::Deleted)
        );
        assert_eq!(s, PolicyStore::new());
    }

    #[test]
    fn patches_add_and_remove_members_by_identity() {
        let mut s = loaded();
        // Spec example: vm3 (172.16.100.6) removed, pod front-7d9f added.
        assert_eq!(
            s.apply(valid(testdata::AG_PATCH)).unwrap(),
            changes(Kind::AddressGroup, AG_NAME, Change::Modified)
        );
        let names: Vec<String> = s
            .address_group(AG_NAME)
            .unwrap()
            .members
            .values()
            .map(|m| m.entity.to_string())
            .collect();
        assert_eq!(names, ["Pod vm-ns/front-7d9f", "ExternalEntity vm-ns/vm2-e8be5"]);
        // Same patch again: nothing changes.
        assert!(s.apply(valid(testdata::AG_PATCH)).unwrap().is_empty());
        // Removal must match the IPs too: vm2 with another IP is not vm2.
        let wrong_ip = MembersPatch {
            name: AG_NAME.into(),
            added: vec![],
            removed: vec![ee("vm2-e8be5", "172.16.100.99")],
        };
        assert!(s.patch_address_group(wrong_ip).unwrap().is_empty());
        let right_ip = MembersPatch {
            name: AG_NAME.into(),
            added: vec![],
            removed: vec![ee("vm2-e8be5", "172.16.100.4")],
        };
        assert_eq!(
            s.patch_address_group(right_ip).unwrap(),
            changes(Kind::AddressGroup, AG_NAME, Change::Modified)
        );
        assert_eq!(s.address_group(AG_NAME).unwrap().members.len(), 1);

        // AppliedToGroup rename example.
        assert_eq!(
            s.apply(valid(testdata::ATG_PATCH)).unwrap(),
            changes(Kind::AppliedToGroup, ATG_NAME, Change::Modified)
        );
        let atg = s.applied_to_group(ATG_NAME).unwrap();
        assert_eq!(atg.members.values().collect::<Vec<_>>(), [&ee("vm1-3e616", "")]);
    }

    #[test]
    fn a_patch_for_an_unknown_group_is_an_error_and_changes_nothing() {
        let mut s = PolicyStore::new();
        let before = s.clone();
        assert_eq!(
            s.apply(valid(testdata::AG_PATCH)),
            Err(StoreError::UnknownGroup {
                kind: Kind::AddressGroupPatch,
                name: AG_NAME.into()
            })
        );
        let err = s.apply(valid(testdata::ATG_PATCH)).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("AppliedToGroupPatch for unknown group \"{ATG_NAME}\": resync needed")
        );
        assert_eq!(s, before);
    }

    #[test]
    fn replace_reports_added_modified_deleted_and_keeps_unchanged_quiet() {
        let mut s = loaded();
        let ValidObject::AddressGroup(ag) = valid(AG) else {
            panic!("kind")
        };
        let mut other = (*ag).clone();
        other.name = "other".into();
        let other = Arc::new(other);
        let mut smaller = (*ag).clone();
        smaller.members.pop_first();
        let smaller = Arc::new(smaller);
        // Snapshot: AG modified, "other" added; nothing deleted.
        let c = s.replace_address_groups([smaller.clone(), other.clone()]);
        assert_eq!(
            c.address_groups,
            BTreeMap::from([
                (AG_NAME.to_string(), Change::Modified),
                ("other".to_string(), Change::Added)
            ])
        );
        assert!(c.network_policies.is_empty() && c.applied_to_groups.is_empty());
        // Same snapshot again: no change.
        assert!(s
            .replace_address_groups([smaller.clone(), other.clone()])
            .is_empty());
        // A snapshot without "other" deletes it; an empty policy snapshot deletes the policy.
        let atgs: Vec<Arc<Group>> = s.applied_to_groups().cloned().map(Arc::new).collect();
        let c = s.replace_all([], [smaller], atgs);
        assert_eq!(
            c.network_policies,
            BTreeMap::from([(NP_NAME.to_string(), Change::Deleted)])
        );
        assert_eq!(
            c.address_groups,
            BTreeMap::from([("other".to_string(), Change::Deleted)])
        );
        assert!(c.applied_to_groups.is_empty());
        assert_eq!(s.policies().count(), 0);
    }

    #[test]
    fn affected_policies_follow_group_references() {
        let mut s = loaded();
        assert_eq!(s.policies_using_address_group(AG_NAME), BTreeSet::from([NP_NAME]));
        assert_eq!(
            s.policies_using_applied_to_group(ATG_NAME),
            BTreeSet::from([NP_NAME])
        );
        assert!(s.policies_using_address_group("nope").is_empty());
        let c = s.apply(valid(testdata::AG_PATCH)).unwrap();
        assert_eq!(s.affected_policies(&c), BTreeSet::from([NP_NAME.to_string()]));
        let c = s.delete(Kind::AppliedToGroup, ATG_NAME);
        assert_eq!(s.affected_policies(&c), BTreeSet::from([NP_NAME.to_string()]));
        let c = s.delete(Kind::NetworkPolicy, NP_NAME);
        assert_eq!(s.affected_policies(&c), BTreeSet::from([NP_NAME.to_string()]));
        assert!(s.affected_policies(&Changes::default()).is_empty());
    }

    #[test]
    fn merge_folds_sequences() {
        let k = Kind::NetworkPolicy;
        let cases = [
            (Change::Added, Change::Modified, Some(Change::Added)),
            (Change::Added, Change::Deleted, None),
            (Change::Modified, Change::Deleted, Some(Change::Deleted)),
            (Change::Deleted, Change::Added, Some(Change::Modified)),
            (Change::Modified, Change::Modified, Some(Change::Modified)),
        ];
        for (first, then, want) in cases {
            let mut c = changes(k, "p", first);
            c.merge(changes(k, "p", then));
            assert_eq!(
                c.network_policies.get("p").copied(),
                want,
                "{first:?} then {then:?}"
            );
        }
    }
}
