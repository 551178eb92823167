//! Tiers in standalone mode: which user Tiers exist (checked as antrea-controller's Tier
//! webhook checks them when they are created), the tier priority of a policy, and the
//! fail-closed translation of a policy whose Tier does not exist here.
//!
//! A cluster never lifts a policy because of its Tier: the webhook refuses the later Tier at a
//! taken priority or past the 20-tier cap (so an existing Tier keeps its policies), and refuses
//! to delete a Tier that policies still name (`tierValidator.deleteValidate`). Files have no
//! history, so a policy here can name a Tier that is refused (it lost a tie, or is past the
//! cap) or missing (its file was deleted). Refusing such a policy would lift its Drop and
//! Reject rules, which the cluster keeps; it is translated fail-closed instead
//! ([`Controller::tier_fail_closed`]). Everything depends only on the objects and their files,
//! so `translate`, the running agent and a restarted one agree.

use std::collections::BTreeMap;

use super::{Controller, DEFAULT_TIERS, DEFAULT_TIER_PRIORITY, MAX_TIERS, STATIC_TIER_NAMES};
use crate::controlplane::types as cp;
use crate::native::objects::NativeObject;
use crate::native::types::Meta;
use crate::refuse::{Reason, RuleNote};

/// The tier priority of a policy whose Tier is missing or refused: ahead of every Tier a
/// cluster can hold (0 to 255), so no rule of another policy precedes its rules. In a cluster
/// that policy sits at its Tier's priority, which is unknown here (a missing Tier) or may be
/// the one the agent gave another Tier (a tie). Its Drops placed ahead of everything drop all
/// they would drop at any priority, and more; as it keeps no Allow or Pass (see
/// `Controller::tier_fail_closed`), nothing it holds can let traffic through, so this
/// placement only closes. Priority 0 would not do: a user Tier may hold it (a tie at 0, or a
/// Tier without `spec`), and an Allow there could precede these Drops.
pub const FAIL_CLOSED_TIER_PRIORITY: i32 = -1;

impl<'a> Controller<'a> {
    /// The Tiers of `objects`, checked as antrea-controller's Tier webhook checks them when
    /// they are created (`tierValidator.createValidate`): a priority a default tier has, or one
    /// another Tier already has, is refused ("overlaps with existing Tier"), and so is a Tier
    /// past the 20-tier cap. A cluster refuses the later Tier, so the first one stays with its
    /// policies; standalone mode has no creation order, so "created first" is
    /// [`first_created`]'s, and the cap counts the Tiers in priority order. A refused Tier does
    /// not exist; the policies naming it are translated fail-closed, and said why.
    pub(in crate::native) fn read_tiers(
        &mut self,
        objects: impl Iterator<Item = (&'a String, &'a NativeObject)>,
    ) {
        let mut by_priority: BTreeMap<i32, Vec<(&str, &Meta)>> = BTreeMap::new();
        for (origin, object) in objects {
            if let NativeObject::Tier { meta, spec } = object {
                if DEFAULT_TIERS.iter().any(|(n, _)| *n == meta.name) {
                    // A default tier's own object (as `kubectl get tier -o yaml` prints it) is
                    // accepted when it says what the tier is.
                    if self.tiers.get(&meta.name) != Some(&spec.priority) {
                        self.errors.push(format!(
                            "{origin}: Tier {}: spec.priority: the default tier {} has priority {}, \
                             which cannot change",
                            meta.name,
                            meta.name,
                            self.tiers.get(&meta.name).copied().unwrap_or_default()
                        ));
                    }
                    continue;
                }
                by_priority.entry(spec.priority).or_default().push((origin, meta));
            }
        }
        let mut user_tiers = 0usize;
        for (priority, mut tiers) in by_priority {
            if let Some((_, default)) = DEFAULT_TIERS.iter().find(|(_, p)| *p == priority) {
                // The default tiers exist before any user Tier: the user Tier is refused.
                for (origin, meta) in tiers {
                    let name = &meta.name;
                    self.errors.push(format!(
                        "{origin}: Tier {name}: spec.priority: tier {name} priority {priority} overlaps \
                         with existing Tier; {FAIL_CLOSED_POLICIES}"
                    ));
                    self.refused_tiers.insert(
                        name.clone(),
                        format!("its priority {priority} is the default tier {default}'s"),
                    );
                }
                continue;
            }
            first_created(&mut tiers);
            let mut tiers = tiers.into_iter();
            let Some((origin, first)) = tiers.next() else {
                continue;
            };
            for (other_origin, meta) in tiers {
                let name = &meta.name;
                self.errors.push(format!(
                    "{other_origin}: Tier {name}: spec.priority: tier {name} priority {priority} \
                     overlaps with existing Tier {} ({origin}), which was created first and is kept; \
                     Tier {name} is refused and {FAIL_CLOSED_POLICIES}",
                    first.name
                ));
                self.refused_tiers.insert(
                    name.clone(),
                    format!("its priority {priority} is Tier {}'s, created first", first.name),
                );
            }
            user_tiers += 1;
            if user_tiers + DEFAULT_TIERS.len() > MAX_TIERS {
                self.errors.push(format!(
                    "{origin}: Tier {}: maximum number of Tiers supported: {MAX_TIERS}; {FAIL_CLOSED_POLICIES}",
                    first.name
                ));
                self.refused_tiers.insert(
                    first.name.clone(),
                    format!(
                        "{MAX_TIERS} Tiers of higher precedence exist (maximum number of Tiers \
                         supported: {MAX_TIERS})"
                    ),
                );
                continue;
            }
            self.tiers.insert(first.name.clone(), priority);
        }
    }

    /// The tier priority of a policy naming `tier`, or `Err` with antrea-controller's message
    /// when no such Tier exists here (`validateTierForPolicy` refuses such a policy when it is
    /// created; see [`Controller::tier_fail_closed`] for why it is translated all the same).
    pub(super) fn tier_priority(&self, tier: &str) -> Result<i32, String> {
        if tier.is_empty() {
            return Ok(DEFAULT_TIER_PRIORITY);
        }
        // The static tiers of Antrea 0.9 were named `Emergency`, `SecurityOps`, `NetworkOps`,
        // `Platform`, `Application` and `Baseline`; antrea-controller still takes exactly these
        // spellings (`validateTierForPolicy` accepts them, `getTierPriority` lowercases them to
        // the Tier's name). Any other spelling (`APPLICATION`, `networkOps`) names a Tier
        // that does not exist.
        let lower = tier.to_ascii_lowercase();
        let name = if STATIC_TIER_NAMES.contains(&tier) {
            lower.as_str()
        } else {
            tier
        };
        self.tiers
            .get(name)
            .copied()
            .ok_or_else(|| match self.refused_tiers.get(name) {
                Some(why) => format!("spec.tier: tier {tier} does not exist (Tier {tier} is refused: {why})"),
                None => format!("spec.tier: tier {tier} does not exist"),
            })
    }

    /// Translates `rule` (at `at`, index `index` of the policy's rules) of a policy whose Tier
    /// does not exist here (`why`: the `spec.tier` message), fail-closed. A cluster keeps such
    /// a policy whenever it was ever enforced: it refuses to delete a Tier that policies name
    /// (`tierValidator.deleteValidate`), and refuses the later of two Tiers at one priority or
    /// past the cap (`tierValidator.createValidate`), which may be the one the agent kept. Its
    /// rules are then enforced at [`FAIL_CLOSED_TIER_PRIORITY`], ahead of every Tier:
    /// * a Drop or Reject rule as written: it denies what it would, wherever Antrea places it;
    /// * an Allow rule allows nothing (it stays, matching nothing, so that it is reported):
    ///   ahead of every Tier it would allow what lower Drops deny;
    /// * a Pass rule becomes a Drop of what it matches (as `rule_peer` does for a Pass it
    ///   cannot resolve): Pass hands traffic to the Baseline tier, whose rules may allow it.
    ///
    /// Every rule gets a note and a [`RuleNote`] (`missing_tier`).
    pub(super) fn tier_fail_closed(
        &mut self,
        rule: &mut cp::NetworkPolicyRule,
        at: &str,
        index: usize,
        why: &str,
    ) {
        let what = match rule.action.as_deref().unwrap_or("Allow") {
            "Allow" => {
                if rule.direction == "In" {
                    rule.from = cp::NetworkPolicyPeer::default();
                } else {
                    rule.to = cp::NetworkPolicyPeer::default();
                }
                "not enforced: the rule allows nothing (dropping an Allow rule never opens \
                 traffic)"
                    .to_string()
            }
            "Pass" => {
                rule.action = Some("Drop".to_string());
                format!(
                    "enforced fail-closed: the Pass rule is installed as a Drop of what it matches, \
                     ahead of every Tier (tier priority {FAIL_CLOSED_TIER_PRIORITY}; a Pass could let \
                     a lower rule allow what the Baseline tier drops)"
                )
            }
            action => format!(
                "enforced fail-closed: the rule {} what it matches ahead of every Tier (tier \
                 priority {FAIL_CLOSED_TIER_PRIORITY}), where no rule of another policy precedes it",
                if action == "Reject" { "rejects" } else { "drops" }
            ),
        };
        self.notes
            .push(format!("{at} (rule {:?}): {what}, because {why}", rule.name));
        self.rule_notes.push(RuleNote {
            rule_index: index,
            reason: Reason::MissingTier,
            message: format!("{what}, because {why}"),
        });
    }
}

/// What becomes of the policies of a refused Tier, as the Tier's error says it.
const FAIL_CLOSED_POLICIES: &str = "the policies in it are enforced fail-closed (their Drop and \
     Reject rules ahead of every Tier, their Allow rules not enforced, their Pass rules as Drops)";

/// Orders the user Tiers of one priority by creation, the first created first. A cluster keeps
/// the first Tier created at a priority (the webhook refuses the later ones); standalone mode
/// reads files, which have no creation order of their own, so: when every one of them has a
/// `metadata.creationTimestamp` (as `kubectl get -o yaml` prints it), the earliest; otherwise
/// (or on a tie) the one whose file comes first in path order, then by name. The order
/// depends on the objects and their files only, never on when the agent saw them, so
/// `translate`, `compile` and the agent (fresh or running) agree.
fn first_created(tiers: &mut [(&str, &Meta)]) {
    let stamps: Option<Vec<chrono::DateTime<chrono::FixedOffset>>> =
        tiers.iter().map(|(_, meta)| creation_timestamp(meta)).collect();
    match stamps {
        Some(stamps) => {
            let mut keyed: Vec<_> = stamps.into_iter().zip(tiers.iter().copied()).collect();
            keyed.sort_by(|(ta, (oa, ma)), (tb, (ob, mb))| (ta, oa, &ma.name).cmp(&(tb, ob, &mb.name)));
            for (slot, (_, tier)) in tiers.iter_mut().zip(keyed) {
                *slot = tier;
            }
        }
        None => tiers.sort_by(|(oa, ma), (ob, mb)| (oa, &ma.name).cmp(&(ob, &mb.name))),
    }
}

/// `metadata.creationTimestamp`, when it is there and well formed (RFC 3339, as the apiserver
/// writes it).
fn creation_timestamp(meta: &Meta) -> Option<chrono::DateTime<chrono::FixedOffset>> {
    let text = meta.ignored.get("creationTimestamp")?.as_str()?;
    chrono::DateTime::parse_from_rfc3339(text).ok()
}
