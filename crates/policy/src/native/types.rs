//! The wire shape of the Antrea-native objects a standalone policy directory may hold:
//! `crd.antrea.io/v1beta1` NetworkPolicy, ClusterNetworkPolicy, Tier, ClusterGroup and Group,
//! `crd.antrea.io/v1alpha2` ExternalEntity, and core `v1` Namespace.
//!
//! Struct fields follow the Go types' field order and `omitempty` rules, so that a rule encodes
//! to the same JSON as Go's `encoding/json` does: antrea-controller's mutating webhook names an
//! unnamed rule after a hash of that JSON, and [`super::controller`] does the same. Unknown
//! fields are refused (a typo must not silently widen or narrow a policy).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::controlplane::types::IntOrString;

pub const API_V1BETA1: &str = "crd.antrea.io/v1beta1";
pub const API_V1ALPHA2: &str = "crd.antrea.io/v1alpha2";

/// The metadata the local controller reads. Other keys (annotations, resourceVersion…) are
/// accepted and ignored, as the apiserver keeps them without meaning for policy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Meta {
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(skip_serializing_if = "is_zero_i64")]
    pub generation: i64,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(flatten, skip_serializing)]
    pub ignored: BTreeMap<String, serde_json::Value>,
}

fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}

/// Go's `omitempty` on a slice: nil and empty are both left out.
fn is_none_or_empty<T>(v: &Option<Vec<T>>) -> bool {
    v.as_ref().is_none_or(Vec::is_empty)
}

/// `metav1.LabelSelector`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct LabelSelector {
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LabelSelectorRequirement {
    pub key: String,
    pub operator: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// `NamespacedName` (serviceAccount, service).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NamespacedName {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

/// The spec of NetworkPolicy and ClusterNetworkPolicy (the same Go fields).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicySpec {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub tier: String,
    pub priority: f64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub applied_to: Vec<AppliedTo>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ingress: Vec<Rule>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<Rule>,
}

/// `Rule`, in Go field order. `action` has no `omitempty` in Go.
///
/// `ports`, `protocols` and `toServices` tell absent (`None`) from present but empty
/// (`Some(vec![])`), as Go's decoding does (`[]` gives an empty slice that is not nil) and as
/// antrea-controller reads them: its webhook (`validatePeers`) refuses `toServices` beside
/// `ports` or `protocols` when either is not nil, and its translation (`svcRefToPeerForCRD`,
/// chosen when `ToServices != nil`) gives a rule with `toServices: []` a peer that matches
/// nothing. Both encode like Go's `omitempty`: an empty list is left out, so the generated rule
/// name does not change.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Rule {
    pub action: Option<String>,
    #[serde(skip_serializing_if = "is_none_or_empty")]
    pub ports: Option<Vec<Port>>,
    #[serde(skip_serializing_if = "is_none_or_empty")]
    pub protocols: Option<Vec<ProtocolMatch>>,
    #[serde(rename = "l7Protocols", skip_serializing_if = "Vec::is_empty")]
    pub l7_protocols: Vec<L7Protocol>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub from: Vec<Peer>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub to: Vec<Peer>,
    #[serde(skip_serializing_if = "is_none_or_empty")]
    pub to_services: Option<Vec<PeerService>>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    pub enable_logging: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub log_label: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub applied_to: Vec<AppliedTo>,
}

/// `NetworkPolicyPeer`, in Go field order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Peer {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip_block: Option<IpBlock>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<LabelSelector>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<PeerNamespaces>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_entity_selector: Option<LabelSelector>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub group: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub fqdn: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_account: Option<NamespacedName>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub scope: String,
}

/// `AppliedTo`, in Go field order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct AppliedTo {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<LabelSelector>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_entity_selector: Option<LabelSelector>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub group: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_account: Option<NamespacedName>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<NamespacedName>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct PeerNamespaces {
    #[serde(rename = "match", skip_serializing_if = "String::is_empty")]
    pub match_type: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub same_labels: Vec<String>,
}

/// `IPBlock`: `cidr` has no `omitempty`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IpBlock {
    pub cidr: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub except: Vec<String>,
}

/// `NetworkPolicyPort`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Port {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<IntOrString>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_port: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_port: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_end_port: Option<i32>,
}

/// `NetworkPolicyProtocol`: ICMP or IGMP.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProtocolMatch {
    #[serde(rename = "icmp", skip_serializing_if = "Option::is_none")]
    pub icmp: Option<Icmp>,
    #[serde(rename = "igmp", skip_serializing_if = "Option::is_none")]
    pub igmp: Option<Igmp>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Icmp {
    #[serde(rename = "icmpType", skip_serializing_if = "Option::is_none")]
    pub icmp_type: Option<i32>,
    #[serde(rename = "icmpCode", skip_serializing_if = "Option::is_none")]
    pub icmp_code: Option<i32>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Igmp {
    #[serde(rename = "igmpType", skip_serializing_if = "Option::is_none")]
    pub igmp_type: Option<i32>,
    #[serde(rename = "groupAddress", skip_serializing_if = "String::is_empty")]
    pub group_address: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct L7Protocol {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpProtocol>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsProtocol>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpProtocol {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub host: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub method: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub path: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsProtocol {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub sni: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PeerService {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub scope: String,
}

/// `GroupSpec` of ClusterGroup and Group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct GroupSpec {
    pub pod_selector: Option<LabelSelector>,
    pub namespace_selector: Option<LabelSelector>,
    pub node_selector: Option<LabelSelector>,
    #[serde(rename = "ipBlock")]
    pub ip_block: Option<IpBlock>,
    pub ip_blocks: Vec<IpBlock>,
    pub service_reference: Option<NamespacedName>,
    pub external_entity_selector: Option<LabelSelector>,
    pub child_groups: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TierSpec {
    pub priority: i32,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
}

/// `ExternalEntitySpec` (v1alpha2).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct ExternalEntitySpec {
    pub endpoints: Vec<Endpoint>,
    pub ports: Vec<NamedPort>,
    pub external_node: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Endpoint {
    pub ip: String,
    pub name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NamedPort {
    pub protocol: String,
    pub port: i32,
    pub name: String,
}

/// Any object of these kinds: apiVersion, kind, metadata, spec (and an ignored status).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Envelope {
    pub api_version: String,
    pub kind: String,
    pub metadata: Meta,
    pub spec: Option<serde_json::Value>,
    /// Written by the controller; never read.
    pub status: Option<serde_json::Value>,
}
