//! The checks of Antrea's CRD OpenAPI schemas (`build/charts/antrea/crds/*.yaml` in
//! antrea-io/antrea), run on the raw object before it is decoded: what the Kubernetes apiserver
//! refuses before Antrea's webhook ever sees the object, with the apiserver's wording.
//!
//! Values the schema refuses (a `logLabel` off its pattern, an ICMP type or code outside 0 to
//! 255, an IGMP type or HTTP method outside its enum, a missing `priority`…) are refused here
//! with the apiserver's message: such an object never exists in a cluster, so refusing it lifts
//! nothing Antrea would enforce.
//!
//! The schemas are also narrower than the Go types the objects share: an ACNP has no
//! `externalEntitySelector` anywhere, an ANNP's rule-level `appliedTo` takes only `podSelector`
//! and `group`, and so on. `kubectl apply` (strict field validation, its default) refuses such a
//! field as unknown; a client without strict validation has it dropped. Standalone files use
//! these fields widely (an ACNP applied to ExternalEntities by `externalEntitySelector`), and
//! Antrea's controller code gives them a clear meaning, so they are accepted, enforced as that
//! code reads them, and reported by [`unknown_fields`] for `translate` to warn that a cluster
//! would refuse the object. A field the Go type lacks too (v1beta1 ClusterGroup `ipBlock`) is
//! refused.

use std::net::IpAddr;

use serde_json::{Map, Value};

use super::objects::NativeKind;

/// The properties the schema gives the places of a policy that differ between ACNP and ANNP.
struct PolicyShape {
    spec_applied_to: &'static [&'static str],
    ingress_applied_to: &'static [&'static str],
    egress_applied_to: &'static [&'static str],
    from: &'static [&'static str],
    to: &'static [&'static str],
    /// The `required` of a `toServices` entry.
    to_services_required: &'static [&'static str],
}

/// `clusternetworkpolicy.yaml` (v1beta1).
const ACNP: PolicyShape = PolicyShape {
    spec_applied_to: &[
        "podSelector",
        "namespaceSelector",
        "group",
        "serviceAccount",
        "service",
        "nodeSelector",
    ],
    ingress_applied_to: &[
        "podSelector",
        "namespaceSelector",
        "group",
        "serviceAccount",
        "service",
    ],
    egress_applied_to: &["podSelector", "namespaceSelector", "group", "serviceAccount"],
    from: &[
        "podSelector",
        "namespaceSelector",
        "namespaces",
        "ipBlock",
        "group",
        "serviceAccount",
        "nodeSelector",
        "scope",
    ],
    to: &[
        "podSelector",
        "namespaceSelector",
        "namespaces",
        "ipBlock",
        "group",
        "fqdn",
        "serviceAccount",
        "nodeSelector",
    ],
    to_services_required: &["name", "namespace"],
};

/// `networkpolicy.yaml` (v1beta1), the namespaced ANNP.
const ANNP: PolicyShape = PolicyShape {
    spec_applied_to: &["podSelector", "externalEntitySelector", "group"],
    ingress_applied_to: &["podSelector", "group"],
    egress_applied_to: &["podSelector", "group"],
    from: &[
        "podSelector",
        "namespaceSelector",
        "externalEntitySelector",
        "ipBlock",
        "group",
        "nodeSelector",
        "scope",
    ],
    to: &[
        "podSelector",
        "namespaceSelector",
        "externalEntitySelector",
        "ipBlock",
        "group",
        "fqdn",
        "nodeSelector",
    ],
    to_services_required: &["name"],
};

const POLICY_SPEC: &[&str] = &["tier", "priority", "appliedTo", "ingress", "egress"];
const INGRESS_RULE: &[&str] = &[
    "action",
    "appliedTo",
    "enableLogging",
    "from",
    "l7Protocols",
    "logLabel",
    "name",
    "ports",
    "protocols",
];
const EGRESS_RULE: &[&str] = &[
    "action",
    "appliedTo",
    "enableLogging",
    "l7Protocols",
    "logLabel",
    "name",
    "ports",
    "protocols",
    "to",
    "toServices",
];
/// `clustergroup.yaml`: no `ipBlock` (v1alpha3 had it; v1beta1 has `ipBlocks` only).
const CLUSTER_GROUP_SPEC: &[&str] = &[
    "podSelector",
    "namespaceSelector",
    "nodeSelector",
    "externalEntitySelector",
    "ipBlocks",
    "serviceReference",
    "childGroups",
];
/// `group.yaml`: a Group has no `nodeSelector` either.
const GROUP_SPEC: &[&str] = &[
    "podSelector",
    "namespaceSelector",
    "externalEntitySelector",
    "ipBlocks",
    "serviceReference",
    "childGroups",
];
const TIER_SPEC: &[&str] = &["priority", "description"];

/// The schema's `logLabel` pattern.
pub const LOG_LABEL_PATTERN: &str = "^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$";
const HTTP_METHODS: &[&str] = &[
    "GET", "POST", "PUT", "HEAD", "DELETE", "TRACE", "OPTIONS", "CONNECT", "PATCH",
];
/// IGMP types: queries (0x11) in ingress rules, reports (v1 0x12, v2 0x16, v3 0x22) in egress.
const IGMP_INGRESS: &[i64] = &[0x11];
const IGMP_EGRESS: &[i64] = &[0x12, 0x16, 0x22];

/// What the apiserver refuses in a raw `spec`, in its words: the field's path within the object
/// (the caller names the object), the value and the schema's bound.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// Strict field validation.
    #[error("strict decoding error: unknown field \"{path}.{field}\"")]
    UnknownField { path: String, field: String },
    #[error("{path}.{field}: Required value")]
    Required { path: String, field: &'static str },
    /// `oneOf` of `required` lists: exactly one of `keys` must be set.
    #[error(
        "{path}: Invalid value: \"object\": {path} must validate one and only one schema (oneOf): \
         exactly one of {} must be set, {set} are",
        .keys.join(", ")
    )]
    OneOf {
        path: String,
        keys: &'static [&'static str],
        set: usize,
    },
    /// A string outside its enum.
    #[error("{path}: Unsupported value: {value:?}: supported values: {}", quoted(.supported))]
    Unsupported {
        path: String,
        value: String,
        supported: &'static [&'static str],
    },
    /// An IGMP type outside the enum of its direction.
    #[error("{path}: Unsupported value: {value}: supported values: {}", quoted(.supported))]
    UnsupportedNumber {
        path: String,
        value: i64,
        supported: &'static [i64],
    },
    /// Below the schema's `minimum` (written as the apiserver prints the bound: `1.0`, `0`).
    #[error("{path}: Invalid value: {value}: {path} in body should be greater than or equal to {minimum}")]
    BelowMinimum {
        path: String,
        value: String,
        minimum: String,
    },
    #[error("{path}: Invalid value: {value}: {path} in body should be less than or equal to {maximum}")]
    AboveMaximum {
        path: String,
        value: String,
        maximum: String,
    },
    #[error(
        "{path}: Invalid value: {value:?}: {path} in body should match '{}'",
        LOG_LABEL_PATTERN
    )]
    Pattern { path: String, value: String },
    #[error("{path}: Invalid value: {value:?}: {path} in body must be of type ipv4 or ipv6")]
    NotAnIp { path: String, value: String },
    #[error("{path}: Invalid value: {count}: {path} in body should have at least 1 properties")]
    TooFewProperties { path: String, count: usize },
    #[error("{path}: Invalid value: {count}: {path} in body should have at most 1 properties")]
    TooManyProperties { path: String, count: usize },
}

/// An enum's values as the apiserver lists them: each quoted, separated by `, `.
fn quoted<T: std::fmt::Display>(values: &[T]) -> String {
    values
        .iter()
        .map(|v| format!("\"{v}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Checks the raw `spec` of one object of `kind` against its CRD schema. The error is the
/// apiserver's, without the object (the caller names it).
pub fn check(kind: NativeKind, spec: Option<&Value>) -> Result<(), SchemaError> {
    match kind {
        NativeKind::ClusterNetworkPolicy => check_policy(&ACNP, spec),
        NativeKind::NetworkPolicy => check_policy(&ANNP, spec),
        NativeKind::Tier => {
            let spec = object(spec);
            known("spec", spec, TIER_SPEC)?;
            required("spec", spec, &["priority"])?;
            range(
                "spec.priority",
                spec.and_then(|s| s.get("priority")).and_then(Value::as_i64),
                0,
                255,
            )
        }
        // `ipBlock` is in no v1beta1 Go type; `nodeSelector` of a Group is refused by the
        // standalone checks (no Nodes) before this would matter.
        NativeKind::ClusterGroup => known("spec", object(spec), CLUSTER_GROUP_SPEC),
        NativeKind::Group => known("spec", object(spec), GROUP_SPEC),
        NativeKind::ExternalEntity => {
            for (i, port) in list(object(spec), "ports").iter().enumerate() {
                let p = object(Some(port));
                one_of_str(
                    &format!("spec.ports[{i}].protocol"),
                    p.and_then(|p| p.get("protocol")),
                    &["TCP", "UDP", "SCTP"],
                )?;
            }
            Ok(())
        }
        NativeKind::Namespace => Ok(()),
    }
}

/// The fields of a policy that its Go type has (so Antrea's controller code gives them a
/// meaning, and the typed decoding takes them) but its CRD schema does not: strict field
/// validation refuses each as `strict decoding error: unknown field "<path>"`, and without it
/// the apiserver drops them. Returned as that message, one per field, for `translate` to warn
/// with; the agent enforces them as Antrea's controller code reads them.
pub fn unknown_fields(kind: NativeKind, spec: Option<&Value>) -> Vec<String> {
    let shape = match kind {
        NativeKind::ClusterNetworkPolicy => &ACNP,
        NativeKind::NetworkPolicy => &ANNP,
        _ => return Vec::new(),
    };
    let spec = object(spec);
    let mut found = Vec::new();
    known_all("spec", spec, POLICY_SPEC, &mut found);
    for (i, a) in list(spec, "appliedTo").iter().enumerate() {
        known_all(
            &format!("spec.appliedTo[{i}]"),
            object(Some(a)),
            shape.spec_applied_to,
            &mut found,
        );
    }
    for (direction, rule_fields, applied_to, peers, side) in [
        (
            "ingress",
            INGRESS_RULE,
            shape.ingress_applied_to,
            shape.from,
            "from",
        ),
        ("egress", EGRESS_RULE, shape.egress_applied_to, shape.to, "to"),
    ] {
        for (r, rule) in list(spec, direction).iter().enumerate() {
            let at = format!("spec.{direction}[{r}]");
            let rule = object(Some(rule));
            known_all(&at, rule, rule_fields, &mut found);
            for (i, a) in list(rule, "appliedTo").iter().enumerate() {
                known_all(
                    &format!("{at}.appliedTo[{i}]"),
                    object(Some(a)),
                    applied_to,
                    &mut found,
                );
            }
            for (i, p) in list(rule, side).iter().enumerate() {
                known_all(&format!("{at}.{side}[{i}]"), object(Some(p)), peers, &mut found);
            }
        }
    }
    found
}

fn check_policy(shape: &PolicyShape, spec: Option<&Value>) -> Result<(), SchemaError> {
    let spec = object(spec);
    required("spec", spec, &["priority"])?;
    range(
        "spec.priority",
        spec.and_then(|s| s.get("priority")).and_then(Value::as_f64),
        1.0,
        10000.0,
    )?;
    let named = &["name", "namespace"];
    for (i, a) in list(spec, "appliedTo").iter().enumerate() {
        let at = format!("spec.appliedTo[{i}]");
        for field in ["serviceAccount", "service"] {
            required(
                &format!("{at}.{field}"),
                object(object(Some(a)).and_then(|a| a.get(field))),
                named,
            )?;
        }
    }
    for (direction, igmp_types, side) in [("ingress", IGMP_INGRESS, "from"), ("egress", IGMP_EGRESS, "to")] {
        for (r, rule) in list(spec, direction).iter().enumerate() {
            let at = format!("spec.{direction}[{r}]");
            let rule = object(Some(rule));
            check_rule(&at, rule, igmp_types)?;
            for (i, a) in list(rule, "appliedTo").iter().enumerate() {
                for field in ["serviceAccount", "service"] {
                    required(
                        &format!("{at}.appliedTo[{i}].{field}"),
                        object(object(Some(a)).and_then(|a| a.get(field))),
                        named,
                    )?;
                }
            }
            for (i, p) in list(rule, side).iter().enumerate() {
                check_peer(&format!("{at}.{side}[{i}]"), object(Some(p)))?;
            }
            for (i, s) in list(rule, "toServices").iter().enumerate() {
                let here = format!("{at}.toServices[{i}]");
                let s = object(Some(s));
                required(&here, s, shape.to_services_required)?;
                if shape.to_services_required.contains(&"namespace") {
                    // Only the ACNP schema has the enum.
                    one_of_str(
                        &format!("{here}.scope"),
                        s.and_then(|s| s.get("scope")),
                        &["Cluster", "ClusterSet"],
                    )?;
                }
            }
        }
    }
    Ok(())
}

/// One rule's `logLabel`, `protocols` and `l7Protocols`.
fn check_rule(
    at: &str,
    rule: Option<&Map<String, Value>>,
    igmp_types: &'static [i64],
) -> Result<(), SchemaError> {
    if let Some(Value::String(label)) = rule.and_then(|r| r.get("logLabel")) {
        if !log_label_matches(label) {
            return Err(SchemaError::Pattern {
                path: format!("{at}.logLabel"),
                value: label.clone(),
            });
        }
    }
    for (i, p) in list(rule, "protocols").iter().enumerate() {
        let here = format!("{at}.protocols[{i}]");
        let p = object(Some(p));
        one_of_keys(&here, p, &["icmp", "igmp"])?;
        let icmp = object(p.and_then(|p| p.get("icmp")));
        for field in ["icmpType", "icmpCode"] {
            range(
                &format!("{here}.icmp.{field}"),
                icmp.and_then(|m| m.get(field)).and_then(Value::as_i64),
                0,
                255,
            )?;
        }
        let igmp = object(p.and_then(|p| p.get("igmp")));
        if let Some(t) = igmp.and_then(|m| m.get("igmpType")).and_then(Value::as_i64) {
            if !igmp_types.contains(&t) {
                return Err(SchemaError::UnsupportedNumber {
                    path: format!("{here}.igmp.igmpType"),
                    value: t,
                    supported: igmp_types,
                });
            }
        }
        if let Some(Value::String(address)) = igmp.and_then(|m| m.get("groupAddress")) {
            if address.parse::<IpAddr>().is_err() {
                return Err(SchemaError::NotAnIp {
                    path: format!("{here}.igmp.groupAddress"),
                    value: address.clone(),
                });
            }
        }
    }
    for (i, l7) in list(rule, "l7Protocols").iter().enumerate() {
        let here = format!("{at}.l7Protocols[{i}]");
        let l7 = object(Some(l7));
        one_of_keys(&here, l7, &["http", "tls"])?;
        let http = object(l7.and_then(|l| l.get("http")));
        one_of_str(
            &format!("{here}.http.method"),
            http.and_then(|h| h.get("method")),
            HTTP_METHODS,
        )?;
    }
    Ok(())
}

/// One peer's `namespaces` (ACNP only) and `serviceAccount`.
fn check_peer(at: &str, peer: Option<&Map<String, Value>>) -> Result<(), SchemaError> {
    required(
        &format!("{at}.serviceAccount"),
        object(peer.and_then(|p| p.get("serviceAccount"))),
        &["name", "namespace"],
    )?;
    if let Some(ns) = object(peer.and_then(|p| p.get("namespaces"))) {
        let here = format!("{at}.namespaces");
        if ns.is_empty() {
            return Err(SchemaError::TooFewProperties { path: here, count: 0 });
        }
        if ns.len() > 1 {
            return Err(SchemaError::TooManyProperties {
                path: here,
                count: ns.len(),
            });
        }
        one_of_str(&format!("{here}.match"), ns.get("match"), &["Self"])?;
    }
    Ok(())
}

/// `^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$`: empty, or 1 to 63 characters that
/// start and end with a letter or digit and hold only those, `-`, `_` and `.`.
pub fn log_label_matches(label: &str) -> bool {
    let b = label.as_bytes();
    b.is_empty()
        || (b.len() <= 63
            && b.first().is_some_and(u8::is_ascii_alphanumeric)
            && b.last().is_some_and(u8::is_ascii_alphanumeric)
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.')))
}

fn object(value: Option<&Value>) -> Option<&Map<String, Value>> {
    value.and_then(Value::as_object)
}

fn list<'v>(map: Option<&'v Map<String, Value>>, key: &str) -> &'v [Value] {
    map.and_then(|m| m.get(key))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// Strict field validation, for every property the schema does not have.
fn known_all(at: &str, map: Option<&Map<String, Value>>, allowed: &[&str], found: &mut Vec<String>) {
    let Some(map) = map else { return };
    for k in map.keys().filter(|k| !allowed.contains(&k.as_str())) {
        let unknown = SchemaError::UnknownField {
            path: at.to_string(),
            field: k.clone(),
        };
        found.push(unknown.to_string());
    }
}

/// Strict field validation: the first property the schema does not have. (Values of the wrong
/// type are left to the typed decoding that follows.)
fn known(at: &str, map: Option<&Map<String, Value>>, allowed: &[&str]) -> Result<(), SchemaError> {
    let Some(map) = map else { return Ok(()) };
    match map.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(SchemaError::UnknownField {
            path: at.to_string(),
            field: k.clone(),
        }),
        None => Ok(()),
    }
}

fn required(at: &str, map: Option<&Map<String, Value>>, fields: &[&'static str]) -> Result<(), SchemaError> {
    let Some(map) = map else { return Ok(()) };
    match fields.iter().find(|f| map.get(**f).is_none_or(Value::is_null)) {
        Some(f) => Err(SchemaError::Required {
            path: at.to_string(),
            field: f,
        }),
        None => Ok(()),
    }
}

/// `oneOf` of `required` lists: exactly one of `keys` is set.
fn one_of_keys(
    at: &str,
    map: Option<&Map<String, Value>>,
    keys: &'static [&'static str],
) -> Result<(), SchemaError> {
    let Some(map) = map else { return Ok(()) };
    let set = keys.iter().filter(|k| map.contains_key(**k)).count();
    if set == 1 {
        return Ok(());
    }
    Err(SchemaError::OneOf {
        path: at.to_string(),
        keys,
        set,
    })
}

fn one_of_str(at: &str, value: Option<&Value>, allowed: &'static [&'static str]) -> Result<(), SchemaError> {
    let Some(Value::String(v)) = value else {
        return Ok(());
    };
    if allowed.contains(&v.as_str()) {
        return Ok(());
    }
    Err(SchemaError::Unsupported {
        path: at.to_string(),
        value: v.clone(),
        supported: allowed,
    })
}

/// The schema's `minimum`/`maximum` on a number read as `T` (a value of another type is the
/// type check's business). `{min:?}` prints `10000.0` for a float bound, as the apiserver does,
/// and `255` for an integer one.
fn range<T: PartialOrd + std::fmt::Display + std::fmt::Debug>(
    at: &str,
    value: Option<T>,
    min: T,
    max: T,
) -> Result<(), SchemaError> {
    let Some(v) = value else {
        return Ok(());
    };
    if v < min {
        return Err(SchemaError::BelowMinimum {
            path: at.to_string(),
            value: v.to_string(),
            minimum: format!("{min:?}"),
        });
    }
    if v > max {
        return Err(SchemaError::AboveMaximum {
            path: at.to_string(),
            value: v.to_string(),
            maximum: format!("{max:?}"),
        });
    }
    Ok(())
}
