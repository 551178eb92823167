//! The wire shape of `controlplane.antrea.io/v1beta2` (antrea-apis.md §2.4): NetworkPolicy,
//! AddressGroup, AppliedToGroup and their Patch kinds, with exactly the JSON names and Go
//! `omitempty` rules of the Go types, so that an object decodes and re-encodes to the same JSON.
//! Unknown fields are accepted and dropped (newer controllers), except inside `metadata`, which
//! keeps them (`creationTimestamp: null` and friends) to re-encode unchanged.
//!
//! These types carry what was received, unchecked; `validate` turns them into the typed views
//! the agent acts on.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

pub use super::ip::{IpAddress, IpNetWire};

/// `apiVersion` of every object of this API.
pub const API_VERSION: &str = "controlplane.antrea.io/v1beta2";

fn is_zero_i32(v: &i32) -> bool {
    *v == 0
}

fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}

// === metadata ===

/// `metav1.ObjectMeta`, reduced to what the controller fills; any other key (e.g.
/// `creationTimestamp`, which Go always writes, as `null`) is kept in `extra` as received.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ObjectMeta {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    #[serde(skip_serializing_if = "is_zero_i64")]
    pub generation: i64,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

// === NetworkPolicy ===

/// Kind `NetworkPolicy`: the controller's internal policy; `metadata.name` = `metadata.uid` = the
/// UID of the source policy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NetworkPolicy {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    pub metadata: ObjectMeta,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<NetworkPolicyRule>,
    /// Policy-level AppliedToGroups; empty when every rule carries its own ("appliedToPerRule").
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub applied_to_groups: Vec<String>,
    /// `*float64`; absent for K8s NetworkPolicies. Integral values are written as integers, as Go
    /// does (`9000`, not `9000.0`).
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_go_float"
    )]
    pub priority: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier_priority: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_ref: Option<NetworkPolicyReference>,
}

/// Go's `encoding/json` writes a float64 with the shortest representation, without a fraction
/// for integral values below 1e21.
fn serialize_go_float<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match *v {
        Some(f) if f.is_finite() && f.fract() == 0.0 && f.abs() < 1e15 => {
            // Exact: |f| < 1e15 fits in i64 without rounding.
            s.serialize_i64(f as i64)
        }
        Some(f) => s.serialize_f64(f),
        None => s.serialize_none(),
    }
}

/// `sourceRef`: the policy the internal NetworkPolicy was computed from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NetworkPolicyReference {
    /// `K8sNetworkPolicy`, `AntreaClusterNetworkPolicy`, `AntreaNetworkPolicy`, ...
    #[serde(rename = "type", skip_serializing_if = "String::is_empty")]
    pub policy_type: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

/// One rule. `from`/`to` are Go non-pointer structs: always written, possibly `{}`;
/// `enableLogging` has no `omitempty`: always written.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NetworkPolicyRule {
    /// `In` or `Out`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub direction: String,
    pub from: NetworkPolicyPeer,
    pub to: NetworkPolicyPeer,
    /// Absent (or empty) = all protocols and ports.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<Service>,
    /// Index of the rule in its CRD's ingress (or egress) list; absent = 0.
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub priority: i32,
    /// `Allow`, `Drop`, `Reject`, `Pass`; absent = Allow.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    pub enable_logging: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub applied_to_groups: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub l7_protocols: Vec<L7Protocol>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub log_label: String,
}

/// The other end of a rule: AddressGroups, IP blocks, FQDNs (egress), Services (egress).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NetworkPolicyPeer {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub address_groups: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ip_blocks: Vec<IpBlock>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fqdns: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub to_services: Vec<ServiceReference>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub label_identities: Vec<u32>,
}

impl NetworkPolicyPeer {
    pub fn is_empty(&self) -> bool {
        self == &NetworkPolicyPeer::default()
    }
}

/// `cidr` (always written) minus `except`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct IpBlock {
    pub cidr: IpNetWire,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub except: Vec<IpNetWire>,
}

/// A protocol/port match. Every field is a Go pointer: absent ≠ zero (`icmpCode: 0` is written).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Service {
    /// `TCP`, `UDP`, `SCTP`, `ICMP`, `IGMP`; absent = TCP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<IntOrString>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_port: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub icmp_type: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub icmp_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub igmp_type: Option<i32>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub group_address: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub src_port: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub src_end_port: Option<i32>,
}

/// Kubernetes `IntOrString`: a JSON number (port number) or string (port name).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IntOrString {
    Int(i32),
    Str(String),
}

impl Serialize for IntOrString {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            IntOrString::Int(i) => s.serialize_i32(*i),
            IntOrString::Str(v) => s.serialize_str(v),
        }
    }
}

impl<'de> Deserialize<'de> for IntOrString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = IntOrString;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a 32-bit integer or a string")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<IntOrString, E> {
                i32::try_from(v)
                    .map(IntOrString::Int)
                    .map_err(|_| E::custom(format!("{v} does not fit in int32")))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<IntOrString, E> {
                i32::try_from(v)
                    .map(IntOrString::Int)
                    .map_err(|_| E::custom(format!("{v} does not fit in int32")))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<IntOrString, E> {
                if v.fract() == 0.0 && v >= f64::from(i32::MIN) && v <= f64::from(i32::MAX) {
                    Ok(IntOrString::Int(v as i32))
                } else {
                    Err(E::custom(format!("{v} is not a 32-bit integer")))
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<IntOrString, E> {
                Ok(IntOrString::Str(v.to_owned()))
            }
        }
        d.deserialize_any(V)
    }
}

/// Layer-7 match: exactly one of `http`, `tls`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct L7Protocol {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpProtocol>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsProtocol>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HttpProtocol {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub host: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub method: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub path: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TlsProtocol {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub sni: String,
}

/// `{name?, namespace?}` of a Service (peer `toServices`, or a Service group member).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServiceReference {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

// === groups ===

/// Kind `AppliedToGroup`: the members a policy applies to. A watch filtered by node delivers
/// only that node's members, without `ips`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct AppliedToGroup {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    pub metadata: ObjectMeta,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub group_members: Vec<GroupMember>,
}

/// Kind `AddressGroup`: peers of rules; always the full membership, with `ips`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct AddressGroup {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    pub metadata: ObjectMeta,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub group_members: Vec<GroupMember>,
}

/// Kinds `AddressGroupPatch` and `AppliedToGroupPatch` (the object of a MODIFIED group event):
/// members to add and to remove. `kind` tells which group kind it patches.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct GroupPatch {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    pub metadata: ObjectMeta,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub added_group_members: Vec<GroupMember>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub removed_group_members: Vec<GroupMember>,
}

/// A group member: exactly one of `pod`, `externalEntity`, `node`, `service`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct GroupMember {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<ObjectReference>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_entity: Option<ObjectReference>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<IpAddress>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<NamedPort>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<NodeReference>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceReference>,
}

/// `PodReference` / `ExternalEntityReference`: `{name?, namespace?}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ObjectReference {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

/// `NodeReference`: `{name?}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeReference {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
}

/// A named port of a member: `{port?, name?, protocol?}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NamedPort {
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub port: i32,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub protocol: String,
}

// === any object, by kind ===

/// The kinds of this API the agent handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    NetworkPolicy,
    AddressGroup,
    AppliedToGroup,
    AddressGroupPatch,
    AppliedToGroupPatch,
}

impl Kind {
    pub const ALL: [Kind; 5] = [
        Kind::NetworkPolicy,
        Kind::AddressGroup,
        Kind::AppliedToGroup,
        Kind::AddressGroupPatch,
        Kind::AppliedToGroupPatch,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::NetworkPolicy => "NetworkPolicy",
            Kind::AddressGroup => "AddressGroup",
            Kind::AppliedToGroup => "AppliedToGroup",
            Kind::AddressGroupPatch => "AddressGroupPatch",
            Kind::AppliedToGroupPatch => "AppliedToGroupPatch",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One object of this API, of any handled kind.
#[derive(Clone, Debug, PartialEq)]
pub enum ControlplaneObject {
    NetworkPolicy(Box<NetworkPolicy>),
    AddressGroup(AddressGroup),
    AppliedToGroup(AppliedToGroup),
    AddressGroupPatch(GroupPatch),
    AppliedToGroupPatch(GroupPatch),
}

/// An object that could not be decoded: names the object as far as it could be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("not an object (expected a JSON/YAML mapping with a kind)")]
    NotAnObject,
    #[error("missing kind")]
    MissingKind,
    #[error("kind {0:?} is not one of NetworkPolicy, AddressGroup, AppliedToGroup, AddressGroupPatch, AppliedToGroupPatch")]
    UnknownKind(String),
    #[error("{kind} {name:?}: apiVersion {found:?} is not {API_VERSION}")]
    ApiVersion { kind: Kind, name: String, found: String },
    #[error("{kind} {name:?}: {message}")]
    Invalid {
        kind: Kind,
        name: String,
        message: String,
    },
}

impl ControlplaneObject {
    /// Decodes one object; `kind` selects the type. A missing `apiVersion` is accepted, another
    /// one than [`API_VERSION`] is not.
    pub fn from_value(value: Value) -> Result<Self, DecodeError> {
        let Value::Object(map) = &value else {
            return Err(DecodeError::NotAnObject);
        };
        let kind_text = match map.get("kind") {
            Some(Value::String(k)) if !k.is_empty() => k.clone(),
            _ => return Err(DecodeError::MissingKind),
        };
        let kind = Kind::parse(&kind_text).ok_or(DecodeError::UnknownKind(kind_text))?;
        let name = map
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        match map.get("apiVersion") {
            None => {}
            Some(Value::String(v)) if v == API_VERSION => {}
            Some(other) => {
                return Err(DecodeError::ApiVersion {
                    kind,
                    name,
                    found: other.as_str().map_or_else(|| other.to_string(), str::to_owned),
                })
            }
        }
        Self::from_deserializer(kind, value).map_err(|e| DecodeError::Invalid {
            kind,
            name,
            message: e.to_string(),
        })
    }

    /// The object of `kind` that `de` holds: what [`Self::from_value`] decodes once it has read
    /// the kind and checked the `apiVersion`.
    fn from_deserializer<'de, D: Deserializer<'de>>(kind: Kind, de: D) -> Result<Self, D::Error> {
        Ok(match kind {
            Kind::NetworkPolicy => ControlplaneObject::NetworkPolicy(Box::new(Deserialize::deserialize(de)?)),
            Kind::AddressGroup => ControlplaneObject::AddressGroup(Deserialize::deserialize(de)?),
            Kind::AppliedToGroup => ControlplaneObject::AppliedToGroup(Deserialize::deserialize(de)?),
            Kind::AddressGroupPatch => ControlplaneObject::AddressGroupPatch(Deserialize::deserialize(de)?),
            Kind::AppliedToGroupPatch => {
                ControlplaneObject::AppliedToGroupPatch(Deserialize::deserialize(de)?)
            }
        })
    }

    /// The JSON encoding (as the controller would write it).
    pub fn to_value(&self) -> Result<Value, serde_json::Error> {
        match self {
            ControlplaneObject::NetworkPolicy(o) => serde_json::to_value(o),
            ControlplaneObject::AddressGroup(o) => serde_json::to_value(o),
            ControlplaneObject::AppliedToGroup(o) => serde_json::to_value(o),
            ControlplaneObject::AddressGroupPatch(o) | ControlplaneObject::AppliedToGroupPatch(o) => {
                serde_json::to_value(o)
            }
        }
    }

    pub fn kind(&self) -> Kind {
        match self {
            ControlplaneObject::NetworkPolicy(_) => Kind::NetworkPolicy,
            ControlplaneObject::AddressGroup(_) => Kind::AddressGroup,
            ControlplaneObject::AppliedToGroup(_) => Kind::AppliedToGroup,
            ControlplaneObject::AddressGroupPatch(_) => Kind::AddressGroupPatch,
            ControlplaneObject::AppliedToGroupPatch(_) => Kind::AppliedToGroupPatch,
        }
    }

    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            ControlplaneObject::NetworkPolicy(o) => &o.metadata,
            ControlplaneObject::AddressGroup(o) => &o.metadata,
            ControlplaneObject::AppliedToGroup(o) => &o.metadata,
            ControlplaneObject::AddressGroupPatch(o) | ControlplaneObject::AppliedToGroupPatch(o) => {
                &o.metadata
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata;
    use serde_json::json;

    /// The JSON examples of antrea-apis.md §2.5, verbatim.
    pub(crate) const SPEC_EXAMPLES: [(&str, &str); 6] = [
        ("np_annp1", testdata::NP_ANNP1),
        ("atg", testdata::ATG),
        ("ag", testdata::AG),
        ("ag_patch", testdata::AG_PATCH),
        ("atg_patch", testdata::ATG_PATCH),
        ("np_acnp", testdata::NP_ACNP),
    ];

    fn round_trip(text: &str) -> (Value, Value) {
        let original: Value = serde_json::from_str(text).unwrap();
        let object = ControlplaneObject::from_value(original.clone()).unwrap();
        (original, object.to_value().unwrap())
    }

    #[test]
    fn every_spec_example_round_trips_unchanged() {
        for (name, text) in SPEC_EXAMPLES {
            let (original, encoded) = round_trip(text);
            assert_eq!(encoded, original, "{name}");
        }
    }

    #[test]
    fn every_watch_event_object_round_trips_unchanged() {
        // §3.2/§3.3: ADDED, BOOKMARK (metadata-only with resourceVersion), patch, DELETED.
        let lines = testdata::WATCH_EVENTS;
        let mut n = 0;
        for line in lines.lines().filter(|l| !l.trim().is_empty()) {
            let event: Value = serde_json::from_str(line).unwrap();
            let (original, encoded) = round_trip(&event["object"].to_string());
            assert_eq!(encoded, original, "{line}");
            n += 1;
        }
        assert_eq!(n, 6);
    }

    #[test]
    fn spec_examples_decode_to_the_right_kinds_and_fields() {
        let kinds: Vec<Kind> = SPEC_EXAMPLES
            .iter()
            .map(|(_, t)| {
                ControlplaneObject::from_value(serde_json::from_str(t).unwrap())
                    .unwrap()
                    .kind()
            })
            .collect();
        assert_eq!(
            kinds,
            [
                Kind::NetworkPolicy,
                Kind::AppliedToGroup,
                Kind::AddressGroup,
                Kind::AddressGroupPatch,
                Kind::AppliedToGroupPatch,
                Kind::NetworkPolicy
            ]
        );
        let np: NetworkPolicy = serde_json::from_str(SPEC_EXAMPLES[5].1).unwrap();
        assert_eq!(np.priority, Some(5.0));
        assert_eq!(np.tier_priority, Some(100));
        assert_eq!(np.metadata.generation, 3);
        assert_eq!(np.rules[0].services[0].port, Some(IntOrString::Int(8000)));
        assert_eq!(np.rules[0].services[0].end_port, Some(9000));
        assert_eq!(np.rules[0].services[1].icmp_code, Some(0));
        assert_eq!(np.rules[0].from.ip_blocks[0].except[0].prefix_length, 16);
        assert_eq!(np.rules[2].priority, 1);
        assert_eq!(np.rules[2].to.ip_blocks[1].cidr.prefix_length, 0);
        assert_eq!(
            np.rules[1].l7_protocols[0].tls.as_ref().unwrap().sni,
            "api.example.com"
        );
        assert_eq!(np.source_ref.unwrap().policy_type, "AntreaClusterNetworkPolicy");
    }

    #[test]
    fn go_presence_rules_on_encode() {
        // from/to/enableLogging always written; zero rule priority and zero prefix omitted;
        // pointer fields written when set, even to zero.
        let rule = NetworkPolicyRule {
            direction: "In".into(),
            services: vec![Service {
                protocol: Some("ICMP".into()),
                icmp_type: Some(0),
                icmp_code: Some(0),
                ..Service::default()
            }],
            ..NetworkPolicyRule::default()
        };
        assert_eq!(
            serde_json::to_value(&rule).unwrap(),
            json!({"direction": "In", "from": {}, "to": {}, "enableLogging": false,
                   "services": [{"protocol": "ICMP", "icmpType": 0, "icmpCode": 0}]})
        );
        let np = NetworkPolicy {
            priority: Some(1.5),
            tier_priority: Some(0),
            ..NetworkPolicy::default()
        };
        assert_eq!(
            serde_json::to_value(&np).unwrap(),
            json!({"metadata": {}, "priority": 1.5, "tierPriority": 0})
        );
    }

    #[test]
    fn unknown_fields_are_accepted() {
        let v = json!({
            "kind": "NetworkPolicy", "apiVersion": API_VERSION, "futureTopLevel": {"x": 1},
            "metadata": {"name": "p", "uid": "p", "labels": {"a": "b"}},
            "rules": [{"direction": "Out", "from": {}, "to": {"newPeerKind": [1]},
                       "enableLogging": false, "newRuleField": true,
                       "services": [{"protocol": "TCP", "port": "http", "newServiceField": 1}]}]
        });
        let ControlplaneObject::NetworkPolicy(np) = ControlplaneObject::from_value(v).unwrap() else {
            panic!("not a NetworkPolicy");
        };
        assert_eq!(
            np.rules[0].services[0].port,
            Some(IntOrString::Str("http".into()))
        );
        // Metadata keeps what it does not know, so it re-encodes as received.
        assert_eq!(np.metadata.extra["labels"], json!({"a": "b"}));
    }

    #[test]
    fn decode_errors_name_the_object() {
        let err = |v: Value| ControlplaneObject::from_value(v).unwrap_err().to_string();
        assert!(err(json!([1])).contains("not an object"));
        assert!(err(json!({"metadata": {"name": "x"}})).contains("missing kind"));
        assert!(err(json!({"kind": "Pod"})).contains("\"Pod\""));
        let e = err(json!({"kind": "AddressGroup", "apiVersion": "v1", "metadata": {"name": "g"}}));
        assert!(e.contains("AddressGroup \"g\"") && e.contains("\"v1\""), "{e}");
        let e = err(json!({"kind": "AddressGroup", "metadata": {"name": "g"},
                           "groupMembers": [{"ips": ["!!notbase64"]}]}));
        assert!(e.contains("AddressGroup \"g\"") && e.contains("base64"), "{e}");
        let e = err(json!({"kind": "NetworkPolicy", "metadata": {"name": "p"},
                           "rules": [{"services": [{"port": 4294967296u64}]}]}));
        assert!(e.contains("NetworkPolicy \"p\"") && e.contains("int32"), "{e}");
    }

    #[test]
    fn yaml_decodes_like_json() {
        let yaml = "kind: NetworkPolicy\napiVersion: controlplane.antrea.io/v1beta2\n\
                    metadata: {name: p1}\npriority: 9000.0\nappliedToGroups: [atg]\n\
                    rules:\n- direction: In\n  from: {ipBlocks: [{cidr: 10.0.0.0/8}]}\n  \
                    services: [{protocol: TCP, port: 22}, {port: ssh}]\n";
        let value: Value = serde_norway::from_str(yaml).unwrap();
        let ControlplaneObject::NetworkPolicy(np) = ControlplaneObject::from_value(value).unwrap() else {
            panic!("not a NetworkPolicy");
        };
        assert_eq!(np.priority, Some(9000.0));
        assert_eq!(serde_json::to_value(&np).unwrap()["priority"], json!(9000));
        assert_eq!(np.rules[0].services[0].port, Some(IntOrString::Int(22)));
        assert_eq!(np.rules[0].services[1].port, Some(IntOrString::Str("ssh".into())));
        assert_eq!(np.rules[0].from.ip_blocks[0].cidr.prefix_length, 8);
    }
}
