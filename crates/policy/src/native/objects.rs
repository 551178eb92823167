//! Decoding one Antrea-native object from a policy file into a [`NativeObject`], with the checks
//! that need no other object: the admission webhook's (messages as antrea-controller words them),
//! the CRD schema's, and the refusals of what standalone mode cannot enforce (Pods, Nodes,
//! Services and ServiceAccounts do not exist without a cluster). Each problem names the object
//! and the field.

use std::collections::BTreeSet;
use std::net::IpAddr;

use ipnet::IpNet;
use serde_json::Value;

use super::schema::SchemaError;
use super::selector::{check_label_key, LabelError, Selector};
use super::types::{
    AppliedTo, Envelope, ExternalEntitySpec, GroupSpec, IpBlock, Meta, Peer, PolicySpec, Rule, TierSpec,
    API_V1ALPHA2, API_V1BETA1,
};
use crate::controlplane::types::IntOrString;

/// Why [`decode`] refuses an object: each names the object (or what could be read of it) and
/// the field, in the apiserver's or antrea-controller's words. The webhook's checks and the
/// refusals of standalone mode are `Invalid`, with the field and the reason as antrea-controller
/// words them (its validators return a reason string too).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ObjectError {
    /// An Antrea API group that no antrea-controller serves.
    #[error(
        "{object}: apiVersion: {api:?} is not served by Antrea (Antrea-native policies are {}, \
         ExternalEntities {}); refused, not enforced",
        API_V1BETA1,
        API_V1ALPHA2
    )]
    NotServed { object: String, api: String },
    #[error(
        "{api} kind {kind:?} is not one of NetworkPolicy, ClusterNetworkPolicy, Tier, ClusterGroup, \
         Group (crd.antrea.io/v1beta1), ExternalEntity (crd.antrea.io/v1alpha2), Namespace (v1)"
    )]
    UnknownKind { api: String, kind: String },
    /// `apiVersion`, `kind` or `metadata` do not decode.
    #[error("{kind} (apiVersion {api}): {message}")]
    Envelope {
        kind: NativeKind,
        api: String,
        message: String,
    },
    #[error("{object}: apiVersion: {api:?} is not {expected} (the version this agent reads)")]
    Version {
        object: String,
        api: String,
        expected: &'static str,
    },
    /// A label key or value of `metadata.labels`.
    #[error("{object}: metadata.labels: Invalid value: {text:?}: {reason}")]
    Label {
        object: String,
        text: String,
        reason: LabelError,
    },
    /// The CRD schema, checked by the apiserver before the webhook.
    #[error("{object}: {error}")]
    Schema { object: String, error: SchemaError },
    /// The spec does not decode into its Go type.
    #[error("{object}: spec: {message}")]
    Spec { object: String, message: String },
    #[error("{object}: {reason}")]
    Invalid { object: String, reason: String },
}

/// `validateIPBlock`'s refusals.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IpBlockError {
    #[error("field 'cidr' is required in an ipBlock")]
    NoCidr,
    #[error("invalid CIDR address: {0}")]
    Cidr(String),
    #[error("invalid except CIDR value: invalid CIDR address: {0}")]
    Except(String),
    #[error("except CIDR {except} is not a strict subset of CIDR {cidr}")]
    NotSubset { except: String, cidr: String },
}

/// The Antrea-native kinds the local controller reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NativeKind {
    NetworkPolicy,
    ClusterNetworkPolicy,
    Tier,
    ClusterGroup,
    Group,
    ExternalEntity,
    Namespace,
}

impl NativeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            NativeKind::NetworkPolicy => "NetworkPolicy",
            NativeKind::ClusterNetworkPolicy => "ClusterNetworkPolicy",
            NativeKind::Tier => "Tier",
            NativeKind::ClusterGroup => "ClusterGroup",
            NativeKind::Group => "Group",
            NativeKind::ExternalEntity => "ExternalEntity",
            NativeKind::Namespace => "Namespace",
        }
    }

    fn namespaced(self) -> bool {
        matches!(
            self,
            NativeKind::NetworkPolicy | NativeKind::Group | NativeKind::ExternalEntity
        )
    }

    fn api_version(self) -> &'static str {
        match self {
            NativeKind::ExternalEntity => API_V1ALPHA2,
            NativeKind::Namespace => "v1",
            _ => API_V1BETA1,
        }
    }
}

impl std::fmt::Display for NativeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A decoded, checked Antrea-native object.
#[derive(Clone, Debug, PartialEq)]
pub enum NativeObject {
    /// An Antrea NetworkPolicy (ANNP, namespaced) or ClusterNetworkPolicy (ACNP).
    Policy {
        kind: NativeKind,
        meta: Meta,
        spec: PolicySpec,
    },
    Tier {
        meta: Meta,
        spec: TierSpec,
    },
    /// A ClusterGroup (`meta.namespace` empty) or a Group.
    Group {
        kind: NativeKind,
        meta: Meta,
        spec: Box<GroupSpec>,
    },
    ExternalEntity {
        meta: Meta,
        spec: ExternalEntitySpec,
        ips: Vec<IpAddr>,
    },
    Namespace {
        meta: Meta,
    },
}

impl NativeObject {
    pub fn kind(&self) -> NativeKind {
        match self {
            NativeObject::Policy { kind, .. } | NativeObject::Group { kind, .. } => *kind,
            NativeObject::Tier { .. } => NativeKind::Tier,
            NativeObject::ExternalEntity { .. } => NativeKind::ExternalEntity,
            NativeObject::Namespace { .. } => NativeKind::Namespace,
        }
    }

    pub fn meta(&self) -> &Meta {
        match self {
            NativeObject::Policy { meta, .. }
            | NativeObject::Group { meta, .. }
            | NativeObject::Tier { meta, .. }
            | NativeObject::ExternalEntity { meta, .. }
            | NativeObject::Namespace { meta } => meta,
        }
    }

    /// `Kind namespace/name` or `Kind name`.
    pub fn describe(&self) -> String {
        describe(self.kind(), self.meta())
    }
}

fn describe(kind: NativeKind, meta: &Meta) -> String {
    if meta.namespace.is_empty() {
        format!("{kind} {}", meta.name)
    } else {
        format!("{kind} {}/{}", meta.namespace, meta.name)
    }
}

/// True when `value` is an object for the local controller (tells them apart from
/// `controlplane.antrea.io` objects by `apiVersion`). Every other Antrea API group (the
/// `security.antrea.io` or `*.antrea.tanzu.vmware.com` of old manifests) comes here too, so
/// that [`decode`] refuses it with one message, wherever the file is read (the agent,
/// `translate`, `compile`): no reader may take it for a controlplane object.
pub fn is_native(value: &Value) -> bool {
    let api = value
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or_default();
    (api == "v1" && kind == "Namespace") || other_antrea_group(api)
}

/// Whether `api` is in an Antrea API group other than the controlplane's.
fn other_antrea_group(api: &str) -> bool {
    let Some((group, _version)) = api.split_once('/') else {
        return false;
    };
    let antrea =
        group == "antrea.io" || group.ends_with(".antrea.io") || group.ends_with(".antrea.tanzu.vmware.com");
    antrea && !group.starts_with("controlplane.")
}

/// The kind and `namespace/name` key a raw object tells, for keeping its last good version.
pub fn raw_key(value: &Value) -> Option<(NativeKind, String, String)> {
    let kind = parse_kind(value.get("kind")?.as_str()?)?;
    let meta = value.get("metadata")?;
    let name = meta.get("name")?.as_str()?.to_owned();
    let namespace = meta
        .get("namespace")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    Some((kind, namespace, name))
}

/// Kind, namespace and name as far as a raw object tells them (empty when it does not).
fn raw_key_text(value: &Value) -> (String, String, String) {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_owned();
    let meta = value.get("metadata");
    (
        text(value.get("kind")),
        text(meta.and_then(|m| m.get("namespace"))),
        text(meta.and_then(|m| m.get("name"))),
    )
}

fn parse_kind(kind: &str) -> Option<NativeKind> {
    [
        NativeKind::NetworkPolicy,
        NativeKind::ClusterNetworkPolicy,
        NativeKind::Tier,
        NativeKind::ClusterGroup,
        NativeKind::Group,
        NativeKind::ExternalEntity,
        NativeKind::Namespace,
    ]
    .into_iter()
    .find(|k| k.as_str() == kind)
}

/// What a cluster would refuse in `value` although the agent enforces it, one line each,
/// naming the object: a name or namespace the apiserver refuses (`check_names`), and the
/// fields its Go type has and its CRD schema does not ([`super::schema::unknown_fields`]).
/// For `translate` to print beside its output; call it on an object that [`decode`] accepts.
pub fn cluster_warnings(value: &Value) -> Vec<String> {
    let (kind, namespace, name) = raw_key_text(value);
    let Some(kind) = parse_kind(&kind) else {
        return Vec::new();
    };
    let meta = Meta {
        name,
        namespace,
        ..Meta::default()
    };
    let object = describe(kind, &meta);
    let mut out = Vec::new();
    if let Err(e) = check_names(kind, &meta) {
        out.push(format!(
            "{object}: a cluster would refuse this object: {e}; the agent takes the name as written"
        ));
    }
    out.extend(
        super::schema::unknown_fields(kind, value.get("spec"))
            .into_iter()
            .map(|e| {
                format!(
                    "{object}: a cluster would refuse this object: {e} (not in the CRD schema: \
                     `kubectl apply` refuses it, a client without strict field validation has it \
                     dropped); the agent enforces the field as antrea-controller's code reads it"
                )
            }),
    );
    out
}

/// Decodes and checks one object. The error names the object and the field.
pub fn decode(value: Value) -> Result<NativeObject, ObjectError> {
    let api = value
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let kind_text = value
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if other_antrea_group(&api) && !api.starts_with("crd.antrea.io/") {
        // Served by no antrea-controller today (the CRDs of Antrea-native policies are all in
        // `crd.antrea.io`): a cluster would not store it, so no agent would enforce it.
        let (_, namespace, name) = raw_key_text(&value);
        let object = match (kind_text.is_empty(), namespace.is_empty()) {
            (true, _) => format!("object {name:?}"),
            (false, true) => format!("{kind_text} {name}"),
            (false, false) => format!("{kind_text} {namespace}/{name}"),
        };
        return Err(ObjectError::NotServed { object, api });
    }
    let kind = parse_kind(&kind_text).ok_or_else(|| ObjectError::UnknownKind {
        api: api.clone(),
        kind: kind_text.clone(),
    })?;
    let envelope: Envelope = serde_json::from_value(value).map_err(|e| ObjectError::Envelope {
        kind,
        api: api.clone(),
        message: e.to_string(),
    })?;
    let meta = envelope.metadata;
    let object = describe(kind, &meta);
    let invalid = |reason: String| ObjectError::Invalid {
        object: object.clone(),
        reason,
    };
    if api != kind.api_version() {
        return Err(ObjectError::Version {
            object: object.clone(),
            api,
            expected: kind.api_version(),
        });
    }
    if meta.name.is_empty() {
        return Err(invalid("metadata.name: Required value".into()));
    }
    if kind.namespaced() && meta.namespace.is_empty() {
        return Err(invalid(format!(
            "metadata.namespace: Required value ({kind} is namespaced)"
        )));
    }
    if !kind.namespaced() && !meta.namespace.is_empty() {
        return Err(invalid(format!(
            "metadata.namespace: {kind} is cluster-scoped and takes no namespace"
        )));
    }
    for (k, v) in &meta.labels {
        for (text, checked) in [
            (k, check_label_key(k)),
            (v, super::selector::check_label_value(v)),
        ] {
            checked.map_err(|reason| ObjectError::Label {
                object: object.clone(),
                text: text.clone(),
                reason,
            })?;
        }
    }
    // A Tier's schema requires `spec.priority` only when there is a `spec`: the Tier CRD does
    // not require `spec`, so a cluster creates a Tier without one at priority 0 (the Go
    // type's zero value). A `spec: null` is pruned by the apiserver, the same.
    let tier_without_spec = kind == NativeKind::Tier && envelope.spec.is_none();
    let spec = envelope.spec.unwrap_or(Value::Object(Default::default()));
    // The apiserver's CRD schema checks come before the webhook's.
    super::schema::check(kind, (!tier_without_spec).then_some(&spec)).map_err(|error| {
        ObjectError::Schema {
            object: object.clone(),
            error,
        }
    })?;
    let bad = |e: serde_json::Error| ObjectError::Spec {
        object: object.clone(),
        message: e.to_string(),
    };
    match kind {
        NativeKind::NetworkPolicy | NativeKind::ClusterNetworkPolicy => {
            let spec: PolicySpec = serde_json::from_value(spec).map_err(bad)?;
            check_policy(&spec).map_err(invalid)?;
            Ok(NativeObject::Policy { kind, meta, spec })
        }
        NativeKind::Tier => {
            let spec: TierSpec = serde_json::from_value(spec).map_err(bad)?;
            if !(0..=255).contains(&spec.priority) {
                return Err(invalid(format!(
                    "spec.priority: Invalid value: {}: must be between 0 and 255",
                    spec.priority
                )));
            }
            if [251, 252, 254, 255].contains(&spec.priority) {
                return Err(invalid(format!(
                    "spec.priority: tier {} priority {} is reserved",
                    meta.name, spec.priority
                )));
            }
            Ok(NativeObject::Tier { meta, spec })
        }
        NativeKind::ClusterGroup | NativeKind::Group => {
            let spec: GroupSpec = serde_json::from_value(spec).map_err(bad)?;
            check_group(kind, &meta, &spec).map_err(invalid)?;
            Ok(NativeObject::Group {
                kind,
                meta,
                spec: Box::new(spec),
            })
        }
        NativeKind::ExternalEntity => {
            let spec: ExternalEntitySpec = serde_json::from_value(spec).map_err(bad)?;
            let mut ips = Vec::with_capacity(spec.endpoints.len());
            for (i, ep) in spec.endpoints.iter().enumerate() {
                let ip: IpAddr = ep.ip.parse().map_err(|_| {
                    invalid(format!(
                        "spec.endpoints[{i}].ip: Invalid value: {:?}: not an IP address",
                        ep.ip
                    ))
                })?;
                ips.push(ip);
            }
            for (i, p) in spec.ports.iter().enumerate() {
                if !(0..=65535).contains(&p.port) {
                    return Err(invalid(format!(
                        "spec.ports[{i}].port: Invalid value: {}: must be between 0 and 65535",
                        p.port
                    )));
                }
            }
            Ok(NativeObject::ExternalEntity { meta, spec, ips })
        }
        NativeKind::Namespace => Ok(NativeObject::Namespace { meta }),
    }
}

/// The apiserver's `ValidateObjectMeta` of the names: a Namespace's name and any object's
/// namespace are DNS labels, the name of a custom resource a DNS subdomain. Only warned about
/// (by `translate`): names are looked up exactly, so an uppercase name refers to the same
/// object everywhere in the files and opens nothing, and refusing would drop the deny rules
/// of files written with the camelCase names of Antrea's own unit tests.
fn check_names(kind: NativeKind, meta: &Meta) -> Result<(), String> {
    const LABEL: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric \
                         characters or '-', and must start and end with an alphanumeric character \
                         (e.g. 'my-name',  or '123-abc', regex used for validation is \
                         '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
    const SUBDOMAIN: &str = "a lowercase RFC 1123 subdomain must consist of lower case \
                             alphanumeric characters, '-' or '.', and must start and end with an \
                             alphanumeric character (e.g. 'example.com', regex used for validation \
                             is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    if kind == NativeKind::Namespace {
        if !super::selector::is_dns_label(&meta.name) {
            return Err(format!("metadata.name: Invalid value: {:?}: {LABEL}", meta.name));
        }
    } else if !super::selector::is_dns_subdomain(&meta.name) {
        return Err(format!(
            "metadata.name: Invalid value: {:?}: {SUBDOMAIN}",
            meta.name
        ));
    }
    if !meta.namespace.is_empty() && !super::selector::is_dns_label(&meta.namespace) {
        return Err(format!(
            "metadata.namespace: Invalid value: {:?}: {LABEL}",
            meta.namespace
        ));
    }
    Ok(())
}

/// What standalone mode has no objects for: refused rather than silently matching nothing.
const NO_CLUSTER: &str = "is not supported in standalone mode (there are no Pods, Nodes, Services or \
                          ServiceAccounts without a cluster)";

/// The webhook's checks of an ANNP/ACNP (`validatePolicy`, in its order, minus the Tier
/// existence check, which needs the other objects), then the standalone refusals.
fn check_policy(spec: &PolicySpec) -> Result<(), String> {
    if !spec.priority.is_finite() || spec.priority < 1.0 || spec.priority > 10000.0 {
        // The CRD schema: minimum 1.0, maximum 10000.0.
        return Err(format!(
            "spec.priority: Invalid value: {}: must be between 1.0 and 10000.0",
            spec.priority
        ));
    }
    let rules = || {
        spec.ingress
            .iter()
            .enumerate()
            .map(|(i, r)| (format!("spec.ingress[{i}]"), true, r))
            .chain(
                spec.egress
                    .iter()
                    .enumerate()
                    .map(|(i, r)| (format!("spec.egress[{i}]"), false, r)),
            )
    };
    for (at, _, rule) in rules() {
        match rule.action.as_deref() {
            Some("Allow" | "Drop" | "Reject" | "Pass") => {}
            Some(other) => {
                return Err(format!(
                    "{at}.action: Unsupported value: {other:?}: supported values: \"Allow\", \"Drop\", \"Pass\", \"Reject\""
                ))
            }
            None => return Err(format!("{at}.action: Required value")),
        }
    }
    // `validateTierForPassAction` compares the lowercased name, but only after
    // `validateTierForPolicy` refused any tier that does not exist: of the spellings of
    // "baseline", only the Tier's name and the old static name `Baseline` get this far.
    if matches!(spec.tier.as_str(), "baseline" | "Baseline") {
        for (at, _, rule) in rules() {
            if rule.action.as_deref() == Some("Pass") {
                return Err(format!(
                    "{at}.action: `Pass` action should not be set for Baseline Tier policy rules"
                ));
            }
        }
    }
    // The mutating webhook names unnamed rules before the validating one runs.
    let mut names = BTreeSet::new();
    for (at, ingress, rule) in rules() {
        let name = if rule.name.is_empty() {
            super::controller::generated_rule_name(if ingress { "ingress" } else { "egress" }, rule)
        } else {
            rule.name.clone()
        };
        if !names.insert(name) {
            return Err(format!("{at}.name: rules names must be unique within the policy"));
        }
    }
    check_applied_to(spec)?;
    for (at, ingress, rule) in rules() {
        let (peers, side) = if ingress {
            (&rule.from, "from")
        } else {
            (&rule.to, "to")
        };
        // `validatePeers` looks at egress rules only, and at presence: `toServices: []` or
        // `ports: []` counts as set.
        if !ingress
            && rule.to_services.is_some()
            && (!rule.to.is_empty() || rule.ports.is_some() || rule.protocols.is_some())
        {
            return Err(format!(
                "{at}: `toServices` cannot be used with `to`, `ports` or `protocols`"
            ));
        }
        if ingress && !rule.to.is_empty() {
            return Err(format!("{at}.to: an ingress rule takes `from`, not `to`"));
        }
        if !ingress && !rule.from.is_empty() {
            return Err(format!("{at}.from: an egress rule takes `to`, not `from`"));
        }
        if ingress && rule.to_services.as_ref().is_some_and(|s| !s.is_empty()) {
            return Err(format!("{at}.toServices: only egress rules take `toServices`"));
        }
        for (p, peer) in peers.iter().enumerate() {
            check_peer(ingress, peer).map_err(|e| format!("{at}.{side}[{p}]: {e}"))?;
        }
    }
    for (at, ingress, rule) in rules() {
        check_multicast_and_igmp(ingress, rule).map_err(|e| format!("{at}: {e}"))?;
        check_ports(rule).map_err(|e| format!("{at}.ports: {e}"))?;
        check_l7(rule).map_err(|e| format!("{at}.l7Protocols: {e}"))?;
    }
    Ok(())
}

/// `validateAppliedTo` and the standalone refusals of appliedTo kinds.
fn check_applied_to(spec: &PolicySpec) -> Result<(), String> {
    let in_spec = !spec.applied_to.is_empty();
    let in_rules = spec
        .ingress
        .iter()
        .chain(&spec.egress)
        .filter(|r| !r.applied_to.is_empty())
        .count();
    if in_spec && in_rules > 0 {
        return Err("appliedTo should not be set in both spec and rules".into());
    }
    if !in_spec && in_rules == 0 {
        return Err("appliedTo needs to be set in either spec or rules".into());
    }
    if in_rules > 0 && in_rules != spec.ingress.len() + spec.egress.len() {
        return Err("appliedTo field should either be set in all rules or in none of them".into());
    }
    // `egress` is whether the entries apply egress rules (a policy's with any egress rule).
    let check = |at: &str, list: &[AppliedTo], egress: bool| -> Result<(), String> {
        let services = list.iter().filter(|a| a.service.is_some()).count();
        for (i, a) in list.iter().enumerate() {
            let here = format!("{at}[{i}]");
            let set = [
                a.pod_selector.is_some(),
                a.namespace_selector.is_some(),
                a.external_entity_selector.is_some(),
                !a.group.is_empty(),
                a.service_account.is_some(),
                a.service.is_some(),
                a.node_selector.is_some(),
            ]
            .into_iter()
            .filter(|b| *b)
            .count();
            if !a.group.is_empty() && set > 1 {
                return Err(format!(
                    "{here}: group cannot be set with other peers in appliedTo"
                ));
            }
            if a.node_selector.is_some() && set > 1 {
                return Err(format!(
                    "{here}: nodeSelector cannot be set with other peers in appliedTo"
                ));
            }
            if a.service_account.is_some() && set > 1 {
                return Err(format!(
                    "{here}: serviceAccount cannot be set with other peers in appliedTo"
                ));
            }
            if a.service.is_some() && set > 1 {
                return Err(format!(
                    "{here}: service cannot be set with other peers in appliedTo"
                ));
            }
            if a.service.is_some() && egress {
                return Err(format!("{here}: egress rule cannot be applied to Services"));
            }
            for (field, sel) in [
                ("podSelector", &a.pod_selector),
                ("namespaceSelector", &a.namespace_selector),
                ("externalEntitySelector", &a.external_entity_selector),
                ("nodeSelector", &a.node_selector),
            ] {
                if let Some(sel) = sel {
                    Selector::parse(sel).map_err(|e| format!("{here}.{field}: {e}"))?;
                }
            }
            // What selects Pods, Nodes or Services is accepted, as Antrea accepts it, and
            // selects nothing here: see `outside_vm`.
        }
        if services > 0 && services < list.len() {
            return Err(format!(
                "{at}: a rule/policy cannot be applied to Services and other peers at the same time"
            ));
        }
        Ok(())
    };
    check("spec.appliedTo", &spec.applied_to, !spec.egress.is_empty())?;
    for (i, r) in spec.ingress.iter().enumerate() {
        check(&format!("spec.ingress[{i}].appliedTo"), &r.applied_to, false)?;
    }
    for (i, r) in spec.egress.iter().enumerate() {
        check(&format!("spec.egress[{i}].appliedTo"), &r.applied_to, true)?;
    }
    // `validateAppliedToServiceIngressPeer`: what is applied to Services (judged by the first
    // entry) takes ingress from ipBlocks alone.
    let to_service = |list: &[AppliedTo]| list.first().is_some_and(|a| a.service.is_some());
    for (i, r) in spec.ingress.iter().enumerate() {
        if !(to_service(&spec.applied_to) || to_service(&r.applied_to)) {
            continue;
        }
        for (p, peer) in r.from.iter().enumerate() {
            let only_ip_block = peer.ip_block.is_some()
                && *peer
                    == Peer {
                        ip_block: peer.ip_block.clone(),
                        ..Peer::default()
                    };
            if !only_ip_block {
                return Err(format!(
                    "spec.ingress[{i}].from[{p}]: a rule/policy that is applied to Services can only \
                     use ipBlock to select workloads"
                ));
            }
        }
    }
    Ok(())
}

/// `validatePeers` for one peer, then the standalone refusals.
fn check_peer(ingress: bool, peer: &Peer) -> Result<(), String> {
    if peer.namespace_selector.is_some() && peer.namespaces.is_some() {
        return Err(
            "namespaces and namespaceSelector cannot be set at the same time for a single NetworkPolicyPeer"
                .into(),
        );
    }
    if let Some(ns) = &peer.namespaces {
        if !ns.match_type.is_empty() && !ns.same_labels.is_empty() {
            return Err(
                "namespaces: only one matching criteria can be specified in a single peer namespaces field"
                    .into(),
            );
        }
        for key in &ns.same_labels {
            check_label_key(key)
                .map_err(|_| format!("namespaces: Invalid label key in sameLabels rule: {key}"))?;
        }
    }
    if let Some(ipb) = &peer.ip_block {
        check_ip_block(ipb).map_err(|e| format!("ipBlock: {e}"))?;
    }
    let set = [
        peer.ip_block.is_some(),
        peer.pod_selector.is_some(),
        peer.namespace_selector.is_some(),
        peer.namespaces.is_some(),
        peer.external_entity_selector.is_some(),
        !peer.group.is_empty(),
        !peer.fqdn.is_empty(),
        peer.service_account.is_some(),
        peer.node_selector.is_some(),
        !peer.scope.is_empty(),
    ]
    .into_iter()
    .filter(|b| *b)
    .count();
    if !peer.group.is_empty() && set > 1 {
        return Err("group cannot be set with other peers in rules".into());
    }
    if peer.service_account.is_some() && set > 1 {
        return Err("serviceAccount cannot be set with other peers in rules".into());
    }
    if peer.node_selector.is_some() && set > 1 {
        return Err("nodeSelector cannot be set with other peers in rules".into());
    }
    for (field, sel) in [
        ("podSelector", &peer.pod_selector),
        ("namespaceSelector", &peer.namespace_selector),
        ("externalEntitySelector", &peer.external_entity_selector),
        ("nodeSelector", &peer.node_selector),
    ] {
        if let Some(sel) = sel {
            Selector::parse(sel).map_err(|e| format!("{field}: {e}"))?;
        }
    }
    if !peer.fqdn.is_empty() {
        if ingress {
            return Err("fqdn: only egress rules can select FQDNs".into());
        }
        if !peer
            .fqdn
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'*'))
        {
            return Err(format!(
                "invalid characters in egress rule fqdn field: {}",
                peer.fqdn
            ));
        }
        crate::fqdn_selector::validate(&peer.fqdn).map_err(|e| format!("fqdn: {e}"))?;
    }
    if !matches!(peer.scope.as_str(), "" | "Cluster" | "ClusterSet") {
        // The CRD schema's enum.
        return Err(format!(
            "scope: Unsupported value: {:?}: supported values: \"Cluster\", \"ClusterSet\"",
            peer.scope
        ));
    }
    // The fields Antrea accepts and the agent cannot honour are not refused here: the rule is
    // translated without their exact meaning, never weaker (see `unsupported_peer`).
    Ok(())
}

/// Why the agent cannot know the addresses a rule peer stands for, although Antrea accepts it:
/// the field at fault and the reason. `None` for a peer the local controller translates.
pub(super) fn unsupported_peer(peer: &Peer) -> Option<(&'static str, String)> {
    for (field, present) in [
        ("podSelector", peer.pod_selector.is_some()),
        ("serviceAccount", peer.service_account.is_some()),
        ("nodeSelector", peer.node_selector.is_some()),
    ] {
        if present {
            return Some((field, NO_CLUSTER.to_string()));
        }
    }
    if peer.namespaces.is_some() {
        return Some((
            "namespaces",
            "`match: Self` and `sameLabels` are not supported by the local controller yet".into(),
        ));
    }
    if peer.scope == "ClusterSet" {
        return Some((
            "scope",
            "\"ClusterSet\" needs Antrea Multi-cluster; only \"Cluster\" is supported".into(),
        ));
    }
    if peer.namespace_selector.is_some() && peer.external_entity_selector.is_none() {
        return Some((
            "namespaceSelector",
            format!("without externalEntitySelector it selects Pods, which {NO_CLUSTER}"),
        ));
    }
    None
}

/// An appliedTo entry that selects Pods, Nodes or Services (accepted by Antrea): the field and
/// what it selects. In Antrea it never selects an ExternalEntity, so it selects nothing on
/// this VM either. `None` for an entry that selects ExternalEntities or names a group.
pub(super) fn outside_vm(a: &AppliedTo) -> Option<(&'static str, &'static str)> {
    for (field, present, what) in [
        ("podSelector", a.pod_selector.is_some(), "Pods"),
        ("serviceAccount", a.service_account.is_some(), "Pods"),
        ("service", a.service.is_some(), "the Pods of a Service"),
        ("nodeSelector", a.node_selector.is_some(), "Nodes"),
    ] {
        if present {
            return Some((field, what));
        }
    }
    if a.namespace_selector.is_some() && a.external_entity_selector.is_none() {
        return Some(("namespaceSelector", "Pods (without externalEntitySelector)"));
    }
    None
}

/// `validateIPBlock`.
pub fn check_ip_block(ipb: &IpBlock) -> Result<IpNet, IpBlockError> {
    if ipb.cidr.is_empty() {
        return Err(IpBlockError::NoCidr);
    }
    let cidr: IpNet = ipb
        .cidr
        .parse()
        .map_err(|_| IpBlockError::Cidr(ipb.cidr.clone()))?;
    for except in &ipb.except {
        let e: IpNet = except.parse().map_err(|_| IpBlockError::Except(except.clone()))?;
        if !cidr.trunc().contains(&e.network()) || cidr.prefix_len() >= e.prefix_len() {
            return Err(IpBlockError::NotSubset {
                except: except.clone(),
                cidr: ipb.cidr.clone(),
            });
        }
    }
    Ok(cidr)
}

/// `validateEgressMulticastAddress` and `validateMulticastIGMP` for one rule.
fn check_multicast_and_igmp(ingress: bool, rule: &Rule) -> Result<(), String> {
    let action = rule.action.as_deref().unwrap_or_default();
    if !ingress {
        let (mut multicast, mut unicast, mut selectors) = (false, false, false);
        for peer in &rule.to {
            let Some(ipb) = &peer.ip_block else { continue };
            let net: IpNet = ipb.cidr.parse().map_err(|_| {
                format!(
                    "invalid multicast groupAddress address (to.IPBlock.CIDR): invalid CIDR address: {}",
                    ipb.cidr
                )
            })?;
            if net.addr().is_multicast() {
                multicast = true;
            } else {
                unicast = true;
            }
            if peer.pod_selector.is_some()
                || peer.namespace_selector.is_some()
                || peer.namespaces.is_some()
                || peer.external_entity_selector.is_some()
                || peer.service_account.is_some()
                || peer.node_selector.is_some()
            {
                selectors = true;
            }
            if multicast && matches!(action, "Pass" | "Reject") {
                return Err("multicast does not support action Pass or Reject".into());
            }
        }
        if multicast && unicast {
            return Err("can not set multicast groupAddress and unicast ip address at the same time".into());
        }
        if multicast && selectors {
            return Err("can not set multicast groupAddress and selectors at the same time".into());
        }
    }
    let protocols = rule.protocols.as_deref().unwrap_or_default();
    let igmp = protocols.iter().any(|p| p.igmp.is_some());
    let icmp = protocols.iter().any(|p| p.icmp.is_some());
    for p in protocols {
        if p.icmp.is_some() && p.igmp.is_some() {
            return Err("protocols: set one of icmp, igmp per entry".into());
        }
        if let Some(igmp) = &p.igmp {
            if !igmp.group_address.is_empty() {
                let is_multicast = igmp
                    .group_address
                    .parse::<IpAddr>()
                    .map(|ip| ip.is_multicast())
                    .unwrap_or(false);
                if !is_multicast {
                    return Err(format!(
                        "groupAddress {} is not multicast address",
                        igmp.group_address
                    ));
                }
            }
            if matches!(action, "Pass" | "Reject") {
                return Err("protocol IGMP does not support Pass or Reject".into());
            }
        }
    }
    if igmp
        && (!rule.ports.as_deref().unwrap_or_default().is_empty()
            || !rule.to_services.as_deref().unwrap_or_default().is_empty()
            || !rule.from.is_empty()
            || !rule.to.is_empty()
            || icmp)
    {
        return Err(
            "protocol IGMP can not be used with other protocols or other properties like from, to".into(),
        );
    }
    Ok(())
}

/// `validateL7Protocols` for one rule (minus its feature-gate check).
fn check_l7(rule: &Rule) -> Result<(), String> {
    if rule.l7_protocols.is_empty() {
        return Ok(());
    }
    if rule.action.as_deref() != Some("Allow") {
        return Err("layer 7 protocols only support Allow".into());
    }
    if !rule.to_services.as_deref().unwrap_or_default().is_empty() {
        return Err("layer 7 protocols can not be used with toServices".into());
    }
    if !rule.l7_protocols.iter().any(|p| p.http.is_some()) {
        return Ok(());
    }
    if rule
        .ports
        .iter()
        .flatten()
        .any(|p| p.protocol.as_deref().is_some_and(|p| p != "TCP"))
    {
        return Err("HTTP protocol can only be used when layer 4 protocol is TCP or unset".into());
    }
    if !rule.protocols.as_deref().unwrap_or_default().is_empty() {
        return Err("HTTP protocol can not be used with protocol IGMP or ICMP".into());
    }
    Ok(())
}

/// `validatePort`, plus the port ranges this agent adds (the CRD schema has none).
fn check_ports(rule: &Rule) -> Result<(), String> {
    for (i, port) in rule.ports.iter().flatten().enumerate() {
        if let Some(p) = &port.protocol {
            if !matches!(p.as_str(), "TCP" | "UDP" | "SCTP") {
                return Err(format!(
                    "[{i}].protocol: Unsupported value: {p:?}: supported values: \"TCP\", \"UDP\", \"SCTP\""
                ));
            }
        }
        if let Some(IntOrString::Int(n)) = &port.port {
            if !(0..=65535).contains(n) {
                return Err(format!(
                    "[{i}].port: Invalid value: {n}: must be between 0 and 65535"
                ));
            }
        }
        if let Some(IntOrString::Str(name)) = &port.port {
            if name.is_empty() {
                return Err(format!(
                    "[{i}].port: Invalid value: \"\": a port name is required"
                ));
            }
        }
        if let Some(end) = port.end_port {
            match &port.port {
                None => return Err("if `endPort` is specified `port` must be specified".into()),
                Some(IntOrString::Str(_)) => {
                    return Err("if `port` is a string `endPort` cannot be specified".into())
                }
                Some(IntOrString::Int(p)) if end < *p => {
                    return Err("`endPort` should be greater than or equal to `port`".into())
                }
                Some(IntOrString::Int(_)) => {}
            }
        }
        if let Some(end) = port.source_end_port {
            match port.source_port {
                None => return Err("if `sourceEndPort` is specified `sourcePort` must be specified".into()),
                Some(p) if end < p => {
                    return Err("`sourceEndPort` should be greater than or equal to `sourcePort`".into())
                }
                Some(_) => {}
            }
        }
    }
    Ok(())
}

/// `validateAntreaClusterGroupSpec` / `validateAntreaGroupSpec` (minus the checks of other
/// groups, done at translation).
fn check_group(kind: NativeKind, meta: &Meta, spec: &GroupSpec) -> Result<(), String> {
    let set = [
        spec.pod_selector.is_some(),
        spec.namespace_selector.is_some(),
        spec.node_selector.is_some(),
        spec.ip_block.is_some(),
        !spec.ip_blocks.is_empty(),
        spec.service_reference.is_some(),
        spec.external_entity_selector.is_some(),
        !spec.child_groups.is_empty(),
    ]
    .into_iter()
    .filter(|b| *b)
    .count();
    let message = if kind == NativeKind::ClusterGroup {
        "At most one of podSelector, nodeSelector, externalEntitySelector, serviceReference, ipBlock, ipBlocks or childGroups can be set for a ClusterGroup"
    } else {
        "At most one of podSelector, externalEntitySelector, serviceReference, ipBlocks or childGroups can be set for a Group"
    };
    if set > 2
        || (set == 2
            && (spec.namespace_selector.is_none()
                || (spec.pod_selector.is_none() && spec.external_entity_selector.is_none())))
    {
        return Err(format!("spec: {message}"));
    }
    for (field, sel) in [
        ("podSelector", &spec.pod_selector),
        ("namespaceSelector", &spec.namespace_selector),
        ("externalEntitySelector", &spec.external_entity_selector),
        ("nodeSelector", &spec.node_selector),
    ] {
        if let Some(sel) = sel {
            Selector::parse(sel).map_err(|e| format!("spec.{field}: {e}"))?;
        }
    }
    let (mut unicast, mut multicast) = (false, false);
    for (i, ipb) in spec.ip_block.iter().chain(&spec.ip_blocks).enumerate() {
        let net = check_ip_block(ipb).map_err(|e| format!("spec.ipBlocks[{i}]: {e}"))?;
        if net.addr().is_multicast() {
            multicast = true;
        } else {
            unicast = true;
        }
    }
    if unicast && multicast {
        return Err(
            "spec.ipBlocks: can not set multicast groupAddress together with unicast ip address".into(),
        );
    }
    if spec.child_groups.iter().any(|c| c == &meta.name) {
        return Err(if kind == NativeKind::ClusterGroup {
            format!(
                "spec.childGroups: cannot set ClusterGroup {} as its own childGroup",
                meta.name
            )
        } else {
            format!(
                "spec.childGroups: cannot set Group {}/{} as its own childGroup",
                meta.namespace, meta.name
            )
        });
    }
    // A group of Pods, Nodes or a Service is accepted, as Antrea accepts it: refusing it would
    // make the rules naming it match nothing, lifting their Drops. See `unresolvable_group`.
    Ok(())
}

/// Why the agent cannot know the members of a ClusterGroup or Group, although Antrea accepts
/// it. antrea-controller turns `podSelector`, `nodeSelector` and a `namespaceSelector` without
/// `externalEntitySelector` into a selector of Pods or Nodes (`processClusterGroup`,
/// `processGroup`), and a `serviceReference` into one of the Service's Pods
/// (`processServiceReference`); their members are Pods and Nodes (`getMemberSetForGroupType`),
/// never ExternalEntities. `None` for a group of ExternalEntities, ipBlocks or children (the
/// controller looks at the children).
pub(super) fn unresolvable_group(spec: &GroupSpec) -> Option<Unresolvable> {
    for (field, present, selects) in [
        ("podSelector", spec.pod_selector.is_some(), "Pods"),
        ("nodeSelector", spec.node_selector.is_some(), "Nodes"),
        (
            "serviceReference",
            spec.service_reference.is_some(),
            "the Pods of a Service",
        ),
    ] {
        if present {
            return Some(Unresolvable {
                field,
                selects,
                why: NO_CLUSTER.to_string(),
            });
        }
    }
    if spec.namespace_selector.is_some() && spec.external_entity_selector.is_none() {
        return Some(Unresolvable {
            field: "namespaceSelector",
            selects: "Pods (without externalEntitySelector)",
            why: format!("without externalEntitySelector it selects Pods, which {NO_CLUSTER}"),
        });
    }
    None
}

/// What makes a group's members unknowable to the agent: see [`unresolvable_group`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Unresolvable {
    /// The field of the group's spec at fault.
    pub field: &'static str,
    /// What it selects instead of ExternalEntities.
    pub selects: &'static str,
    /// Why its addresses cannot be known here.
    pub why: String,
}
