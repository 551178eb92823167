//! The emulator's state and the logic of the two servers it imitates, without any I/O:
//! * kube-apiserver objects (ExternalNode, ExternalEntity, AntreaAgentInfo) with one etcd-like
//!   resourceVersion counter, the ExternalNode event history used to resume watches, and the
//!   antrea-controller reactions of antrea-apis.md §8.1/§8.2 (ExternalEntity and empty
//!   AntreaAgentInfo per ExternalNode);
//! * antrea-controller's three controlplane stores (NetworkPolicy, AppliedToGroup, AddressGroup),
//!   each with its own resourceVersion counter, the span of every object (§3.2 item 3), and the
//!   per-node watch events computed from old vs new versions (§3.2 items 1 and 4);
//! * what agents posted back: NetworkPolicy statuses and NodeStatsSummaries.
//!
//! Every mutation returns the [`DispatchItem`]s that the watch dispatcher must deliver.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::IpAddr;
use std::sync::Arc;

use serde::Serialize;
use serde_json::{json, Map, Value};

use antrea_controlplane::naming::external_entity_name;
use antrea_controlplane::types::{
    AddressGroup, AppliedToGroup, GroupMember, GroupPatch, IpAddress, IpNetWire, NetworkPolicy,
    NetworkPolicyReference, ObjectMeta,
};
use antrea_controlplane::{ControlplaneObject, API_VERSION as CP_API_VERSION};

pub const EN_API_VERSION: &str = "crd.antrea.io/v1alpha1";
pub const EE_API_VERSION: &str = "crd.antrea.io/v1alpha2";
pub const AAI_API_VERSION: &str = "crd.antrea.io/v1beta1";

// === errors as kube-apiserver reports them ===

/// A failed request, carrying what goes into the `Status` body.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("HTTP {code} {reason}: {message}")]
pub struct StatusError {
    pub code: u16,
    pub reason: String,
    pub message: String,
    pub details: Option<Value>,
}

/// kube-apiserver's answer to an update of a custom resource without `metadata.resourceVersion`.
pub const RV_REQUIRED: &str = "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update";

impl StatusError {
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> StatusError {
        StatusError {
            code,
            reason: reason.into(),
            message: message.into(),
            details: None,
        }
    }

    fn with_details(mut self, group: &str, kind: &str, name: &str) -> StatusError {
        let mut d = Map::new();
        if !name.is_empty() {
            d.insert("name".into(), json!(name));
        }
        d.insert("group".into(), json!(group));
        d.insert("kind".into(), json!(kind));
        self.details = Some(Value::Object(d));
        self
    }

    /// `<resource>.<group> "<name>" not found` (404 NotFound).
    pub fn not_found(group: &str, resource: &str, name: &str) -> StatusError {
        StatusError::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(group, resource)),
        )
        .with_details(group, resource, name)
    }

    pub fn already_exists(group: &str, resource: &str, name: &str) -> StatusError {
        StatusError::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(group, resource)),
        )
        .with_details(group, resource, name)
    }

    /// The optimistic-concurrency failure of an update with a stale resourceVersion.
    pub fn conflict(group: &str, resource: &str, name: &str) -> StatusError {
        StatusError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                qualified(group, resource)
            ),
        )
        .with_details(group, resource, name)
    }

    pub fn invalid(group: &str, kind: &str, name: &str, message: impl Into<String>) -> StatusError {
        let message = message.into();
        StatusError::new(
            422,
            "Invalid",
            format!("{kind}.{group} \"{name}\" is invalid: {message}"),
        )
        .with_details(group, kind, name)
    }

    pub fn bad_request(message: impl Into<String>) -> StatusError {
        StatusError::new(400, "BadRequest", message)
    }

    /// The `Status` object serialized with metav1.Status's key order.
    pub fn to_body(&self) -> String {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Body<'a> {
            kind: &'static str,
            api_version: &'static str,
            metadata: Map<String, Value>,
            status: &'static str,
            message: &'a str,
            reason: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            details: Option<&'a Value>,
            code: u16,
        }
        serde_json::to_string(&Body {
            kind: "Status",
            api_version: "v1",
            metadata: Map::new(),
            status: "Failure",
            message: &self.message,
            reason: &self.reason,
            details: self.details.as_ref(),
            code: self.code,
        })
        .unwrap_or_default()
    }

    /// The `Status` object (kind `Status`, apiVersion `v1`).
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message, "reason": self.reason,
        });
        if let Some(d) = &self.details {
            v["details"] = d.clone();
        }
        v["code"] = json!(self.code);
        v
    }
}

fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

/// A `Status` of kind Success (answer to the controlplane POSTs and to deletions).
pub fn success_status() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})
}

/// [`success_status`] with metav1.Status's key order.
pub const SUCCESS_STATUS_BODY: &str =
    r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success"}"#;

fn now_rfc3339() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn new_uid() -> String {
    let b: u128 = rand::random();
    let h = format!("{b:032x}");
    format!(
        "{}-{}-4{}-a{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

fn meta_str<'a>(obj: &'a Value, key: &str) -> &'a str {
    obj.get("metadata")
        .and_then(|m| m.get(key))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn set_meta(obj: &mut Value, key: &str, value: Value) {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    obj["metadata"][key] = value;
}

// === controlplane ===

/// The three controlplane resources served by antrea-controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum CpResource {
    NetworkPolicies,
    AppliedToGroups,
    AddressGroups,
}

impl CpResource {
    pub const ALL: [CpResource; 3] = [
        CpResource::NetworkPolicies,
        CpResource::AppliedToGroups,
        CpResource::AddressGroups,
    ];

    pub fn plural(self) -> &'static str {
        match self {
            CpResource::NetworkPolicies => "networkpolicies",
            CpResource::AppliedToGroups => "appliedtogroups",
            CpResource::AddressGroups => "addressgroups",
        }
    }

    pub fn kind(self) -> &'static str {
        match self {
            CpResource::NetworkPolicies => "NetworkPolicy",
            CpResource::AppliedToGroups => "AppliedToGroup",
            CpResource::AddressGroups => "AddressGroup",
        }
    }

    pub fn parse(plural: &str) -> Option<CpResource> {
        CpResource::ALL.into_iter().find(|r| r.plural() == plural)
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A stored controlplane object.
#[derive(Clone, Debug, PartialEq)]
pub enum CpObject {
    Np(Box<NetworkPolicy>),
    Atg(AppliedToGroup),
    Ag(AddressGroup),
}

impl CpObject {
    pub fn resource(&self) -> CpResource {
        match self {
            CpObject::Np(_) => CpResource::NetworkPolicies,
            CpObject::Atg(_) => CpResource::AppliedToGroups,
            CpObject::Ag(_) => CpResource::AddressGroups,
        }
    }

    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            CpObject::Np(p) => &p.metadata,
            CpObject::Atg(g) => &g.metadata,
            CpObject::Ag(g) => &g.metadata,
        }
    }

    pub fn name(&self) -> &str {
        &self.metadata().name
    }

    fn members(&self) -> &[GroupMember] {
        match self {
            CpObject::Np(_) => &[],
            CpObject::Atg(g) => &g.group_members,
            CpObject::Ag(g) => &g.group_members,
        }
    }

    /// Decodes a controlplane object (JSON as the controller writes it; IPs may also be text) and
    /// normalizes it to what the controller would store: kind/apiVersion set, uid defaulting to
    /// the name, no resourceVersion, no `creationTimestamp` (a `null` one sent is dropped: the
    /// emulator never offers the agent that quirk to depend on), IPv4 in 16-byte form.
    pub fn from_json(value: Value) -> Result<CpObject, StatusError> {
        let object =
            ControlplaneObject::from_value(value).map_err(|e| StatusError::bad_request(e.to_string()))?;
        let mut object = match object {
            ControlplaneObject::NetworkPolicy(p) => CpObject::Np(p),
            ControlplaneObject::AppliedToGroup(g) => CpObject::Atg(g),
            ControlplaneObject::AddressGroup(g) => CpObject::Ag(g),
            ControlplaneObject::AddressGroupPatch(_) | ControlplaneObject::AppliedToGroupPatch(_) => {
                return Err(StatusError::bad_request(
                    "patch kinds are computed by the emulator; send the whole group",
                ))
            }
        };
        let kind = object.resource().kind();
        let (meta, kind_field, api_field) = match &mut object {
            CpObject::Np(p) => {
                for rule in &mut p.rules {
                    for peer in [&mut rule.from, &mut rule.to] {
                        for block in &mut peer.ip_blocks {
                            widen_net(&mut block.cidr);
                            block.except.iter_mut().for_each(widen_net);
                        }
                    }
                }
                (&mut p.metadata, &mut p.kind, &mut p.api_version)
            }
            CpObject::Atg(g) => (&mut g.metadata, &mut g.kind, &mut g.api_version),
            CpObject::Ag(g) => {
                for m in &mut g.group_members {
                    m.ips.iter_mut().for_each(widen_ip);
                }
                (&mut g.metadata, &mut g.kind, &mut g.api_version)
            }
        };
        if meta.name.is_empty() {
            return Err(StatusError::bad_request(format!(
                "{kind}: metadata.name is required"
            )));
        }
        *kind_field = kind.to_string();
        *api_field = CP_API_VERSION.to_string();
        if meta.uid.is_empty() {
            meta.uid = meta.name.clone();
        }
        meta.resource_version.clear();
        if meta.extra.get("creationTimestamp").is_some_and(Value::is_null) {
            meta.extra.remove("creationTimestamp");
        }
        Ok(object)
    }

    fn to_raw(&self) -> Result<String, serde_json::Error> {
        match self {
            CpObject::Np(p) => serde_json::to_string(p),
            CpObject::Atg(g) => serde_json::to_string(g),
            CpObject::Ag(g) => serde_json::to_string(g),
        }
    }
}

fn widen_ip(ip: &mut IpAddress) {
    if let Ok(IpAddr::V4(v4)) = ip.to_ip() {
        *ip = IpAddress::from_ip(IpAddr::V4(v4));
    }
}

fn widen_net(net: &mut IpNetWire) {
    if net.ip.0.len() == 4 {
        widen_ip(&mut net.ip);
    }
}

/// AppliedToGroup members bucketed by the node key hosting them.
pub type NodeMembers = BTreeMap<String, Vec<GroupMember>>;

/// An object as published by a controlplane store: the object, its span (node keys), and for an
/// AppliedToGroup its members bucketed by node.
#[derive(Clone, Debug, PartialEq)]
pub struct CpEntry {
    pub object: CpObject,
    pub span: BTreeSet<String>,
    pub node_members: NodeMembers,
}

impl CpEntry {
    fn visible_to(&self, node: Option<&str>) -> bool {
        node.is_none_or(|n| self.span.contains(n))
    }

    fn members_for(&self, node: Option<&str>) -> Vec<GroupMember> {
        // Only AppliedToGroups are cut per node; AddressGroups are always global.
        match (&self.object, node) {
            (CpObject::Atg(_), Some(n)) => self.node_members.get(n).cloned().unwrap_or_default(),
            _ => self.object.members().to_vec(),
        }
    }

    /// The object as a watcher of `node` (None = unfiltered) receives it in ADDED, serialized
    /// from the typed object so that keys come in the Go struct order.
    pub fn render(&self, node: Option<&str>) -> String {
        let r = match (&self.object, node) {
            (CpObject::Atg(g), Some(_)) => {
                let mut g = g.clone();
                g.group_members = self.members_for(node);
                serde_json::to_string(&g)
            }
            (o, _) => o.to_raw(),
        };
        r.unwrap_or_default()
    }

    /// The metadata-only object of a DELETED event (§3.2 item 4).
    pub fn render_deleted(&self) -> String {
        let m = self.object.metadata();
        let mut meta = ObjectMeta {
            name: m.name.clone(),
            uid: m.uid.clone(),
            ..ObjectMeta::default()
        };
        let mut source_ref = None;
        if let CpObject::Np(p) = &self.object {
            meta.generation = p.metadata.generation;
            source_ref = p.source_ref.clone();
        }
        serde_json::to_string(&DeletedObject {
            kind: self.object.resource().kind(),
            api_version: CP_API_VERSION,
            metadata: meta,
            source_ref,
        })
        .unwrap_or_default()
    }
}

/// What a DELETED event carries: metadata (and a policy's sourceRef) only.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DeletedObject {
    kind: &'static str,
    api_version: &'static str,
    metadata: ObjectMeta,
    #[serde(skip_serializing_if = "Option::is_none")]
    source_ref: Option<NetworkPolicyReference>,
}

/// The BOOKMARK object: an empty object of the watched kind with only a resourceVersion.
pub fn bookmark_object(kind: &str, api_version: &str, rv: u64) -> String {
    bookmark_with_annotations(kind, api_version, rv, false)
}

/// A BOOKMARK object, with the `k8s.io/initial-events-end` annotation when `initial_end`.
pub fn bookmark_with_annotations(kind: &str, api_version: &str, rv: u64, initial_end: bool) -> String {
    let annotations = if initial_end {
        r#","annotations":{"k8s.io/initial-events-end":"true"}"#
    } else {
        ""
    };
    format!(
        r#"{{"kind":"{kind}","apiVersion":"{api_version}","metadata":{{"resourceVersion":"{rv}"{annotations}}}}}"#
    )
}

/// The identity of a member for set operations (`sets.go`): kind, namespace/name, IP bytes.
fn member_key(m: &GroupMember) -> Vec<u8> {
    let mut k = Vec::new();
    let mut push = |prefix: &str, ns: &str, name: &str| {
        k.extend_from_slice(prefix.as_bytes());
        k.extend_from_slice(ns.as_bytes());
        k.push(b'/');
        k.extend_from_slice(name.as_bytes());
    };
    if let Some(p) = &m.pod {
        push("Pod:", &p.namespace, &p.name);
    } else if let Some(e) = &m.external_entity {
        push("ExternalEntity:", &e.namespace, &e.name);
    } else if let Some(s) = &m.service {
        push("Service:", &s.namespace, &s.name);
    } else if let Some(n) = &m.node {
        push("", "", &n.name);
    }
    for ip in &m.ips {
        k.extend_from_slice(&ip.0);
    }
    k
}

/// Members of `new` not in `old` (in `new`'s order) and of `old` not in `new`.
fn member_diff(old: &[GroupMember], new: &[GroupMember]) -> (Vec<GroupMember>, Vec<GroupMember>) {
    let old_keys: BTreeSet<Vec<u8>> = old.iter().map(member_key).collect();
    let new_keys: BTreeSet<Vec<u8>> = new.iter().map(member_key).collect();
    let added = new
        .iter()
        .filter(|m| !old_keys.contains(&member_key(m)))
        .cloned()
        .collect();
    let removed = old
        .iter()
        .filter(|m| !new_keys.contains(&member_key(m)))
        .cloned()
        .collect();
    (added, removed)
}

/// One change of a controlplane store, as the dispatcher receives it.
#[derive(Clone, Debug)]
pub struct CpEvent {
    pub resource: CpResource,
    /// Controller incarnation; events of a previous one are never delivered after a restart.
    pub epoch: u64,
    pub rv: u64,
    pub prev: Option<Arc<CpEntry>>,
    pub cur: Option<Arc<CpEntry>>,
}

impl CpEvent {
    /// The watch event (type, object) for a watcher of `node` (None = no nodeName selector), or
    /// None when this watcher must not see anything (§3.2 item 4).
    pub fn event_for(&self, node: Option<&str>) -> Option<(&'static str, String)> {
        let before = self.prev.as_ref().filter(|e| e.visible_to(node));
        let now = self.cur.as_ref().filter(|e| e.visible_to(node));
        match (before, now) {
            (None, Some(cur)) => Some(("ADDED", cur.render(node))),
            (Some(prev), None) => Some(("DELETED", prev.render_deleted())),
            (Some(prev), Some(cur)) => match &cur.object {
                CpObject::Np(_) => Some(("MODIFIED", cur.object.to_raw().unwrap_or_default())),
                CpObject::Atg(_) | CpObject::Ag(_) => {
                    let (added, removed) = member_diff(&prev.members_for(node), &cur.members_for(node));
                    if added.is_empty() && removed.is_empty() {
                        return None;
                    }
                    let m = cur.object.metadata();
                    let meta = ObjectMeta {
                        name: m.name.clone(),
                        uid: m.uid.clone(),
                        ..ObjectMeta::default()
                    };
                    let patch = GroupPatch {
                        kind: format!("{}Patch", cur.object.resource().kind()),
                        api_version: CP_API_VERSION.into(),
                        metadata: meta,
                        added_group_members: added,
                        removed_group_members: removed,
                    };
                    Some(("MODIFIED", serde_json::to_string(&patch).unwrap_or_default()))
                }
            },
            (None, None) => None,
        }
    }
}

#[derive(Clone, Debug, Default)]
struct CpStore {
    rv: u64,
    /// What tests asked for.
    desired: BTreeMap<String, CpObject>,
    /// What is published (with spans).
    entries: BTreeMap<String, Arc<CpEntry>>,
}

// === kube-apiserver ===

/// One ExternalNode watch event kept for resumption.
#[derive(Clone, Debug)]
pub struct KubeEvent {
    pub rv: u64,
    pub event_type: &'static str,
    pub namespace: String,
    pub name: String,
    pub object: Value,
}

#[derive(Debug, Default)]
struct KubeStore {
    rv: u64,
    external_nodes: BTreeMap<(String, String), Value>,
    external_entities: BTreeMap<(String, String), Value>,
    agent_infos: BTreeMap<String, Value>,
    history: VecDeque<KubeEvent>,
    /// Watches from a resourceVersion below this are answered 410 Gone.
    compacted_rv: u64,
}

/// Something the dispatcher must deliver to watchers.
#[derive(Clone, Debug)]
pub enum DispatchItem {
    Cp(CpEvent),
    Kube(KubeEvent),
}

/// The last NetworkPolicyStatus entry an agent posted for a policy.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStatusRecord {
    pub policy: String,
    pub node_name: String,
    pub generation: i64,
    pub realization_failure: bool,
    pub message: String,
    /// How many statuses were posted for this (policy, node) since the last controller restart.
    pub count: u64,
}

/// Everything the emulator knows.
#[derive(Debug)]
pub struct State {
    kube: KubeStore,
    cp: [CpStore; 3],
    epoch: u64,
    history_limit: usize,
    statuses: BTreeMap<(String, String), PolicyStatusRecord>,
    summaries: Vec<Value>,
}

const GROUP_CRD: &str = "crd.antrea.io";

impl State {
    pub fn new(history_limit: usize) -> State {
        State {
            kube: KubeStore::default(),
            cp: Default::default(),
            epoch: 0,
            history_limit: history_limit.max(1),
            statuses: BTreeMap::new(),
            summaries: Vec::new(),
        }
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    // --- kube-apiserver: generic helpers ---

    fn next_rv(&mut self) -> u64 {
        self.kube.rv += 1;
        self.kube.rv
    }

    pub fn kube_rv(&self) -> u64 {
        self.kube.rv
    }

    fn record_en_event(&mut self, event_type: &'static str, object: &Value, out: &mut Vec<DispatchItem>) {
        let ev = KubeEvent {
            rv: self.kube.rv,
            event_type,
            namespace: meta_str(object, "namespace").to_string(),
            name: meta_str(object, "name").to_string(),
            object: object.clone(),
        };
        self.kube.history.push_back(ev.clone());
        while self.kube.history.len() > self.history_limit {
            if let Some(old) = self.kube.history.pop_front() {
                self.kube.compacted_rv = old.rv;
            }
        }
        out.push(DispatchItem::Kube(ev));
    }

    /// Forgets the ExternalNode event history: every resourceVersion older than now is gone.
    pub fn compact_kube_history(&mut self) {
        self.kube.history.clear();
        self.kube.compacted_rv = self.kube.rv;
    }

    /// The ExternalNode events after `rv` in `namespace` (name-filtered), or 410 if `rv` is too old.
    pub fn en_events_since(
        &self,
        rv: u64,
        namespace: &str,
        name: Option<&str>,
    ) -> Result<Vec<KubeEvent>, StatusError> {
        if rv < self.kube.compacted_rv {
            return Err(StatusError::new(
                410,
                "Expired",
                format!("too old resource version: {rv} ({})", self.kube.compacted_rv + 1),
            ));
        }
        Ok(self
            .kube
            .history
            .iter()
            .filter(|e| e.rv > rv && e.namespace == namespace && name.is_none_or(|n| n == e.name))
            .cloned()
            .collect())
    }

    /// Current ExternalNodes of `namespace` (all namespaces if empty), name-filtered.
    pub fn list_external_nodes(&self, namespace: &str, name: Option<&str>) -> Vec<Value> {
        self.kube
            .external_nodes
            .iter()
            .filter(|((ns, n), _)| (namespace.is_empty() || ns == namespace) && name.is_none_or(|x| x == n))
            .map(|(_, v)| v.clone())
            .collect()
    }

    pub fn get_external_node(&self, namespace: &str, name: &str) -> Result<Value, StatusError> {
        self.kube
            .external_nodes
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
            .ok_or_else(|| StatusError::not_found(GROUP_CRD, "externalnodes", name))
    }

    pub fn list_external_entities(&self) -> Vec<Value> {
        self.kube.external_entities.values().cloned().collect()
    }

    pub fn list_agent_infos(&self) -> Vec<Value> {
        self.kube.agent_infos.values().cloned().collect()
    }

    pub fn get_agent_info(&self, name: &str) -> Result<Value, StatusError> {
        self.kube
            .agent_infos
            .get(name)
            .cloned()
            .ok_or_else(|| StatusError::not_found(GROUP_CRD, "antreaagentinfos", name))
    }

    /// Fills the server-set metadata of a new object.
    fn stamp_new(&mut self, obj: &mut Value, api_version: &str, kind: &str) {
        obj["apiVersion"] = json!(api_version);
        obj["kind"] = json!(kind);
        let rv = self.next_rv();
        set_meta(obj, "uid", json!(new_uid()));
        set_meta(obj, "resourceVersion", json!(rv.to_string()));
        set_meta(obj, "generation", json!(1));
        set_meta(obj, "creationTimestamp", json!(now_rfc3339()));
    }

    /// Carries the server-set metadata of `old` over to a replacement and bumps resourceVersion
    /// (and generation when anything outside metadata changed, as for a CRD without status).
    fn stamp_update(&mut self, obj: &mut Value, old: &Value, api_version: &str, kind: &str) {
        obj["apiVersion"] = json!(api_version);
        obj["kind"] = json!(kind);
        for key in ["uid", "creationTimestamp"] {
            set_meta(obj, key, old["metadata"][key].clone());
        }
        let strip = |v: &Value| {
            let mut v = v.clone();
            if let Some(m) = v.as_object_mut() {
                m.remove("metadata");
            }
            v
        };
        let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
        let generation = if strip(obj) != strip(old) {
            generation + 1
        } else {
            generation
        };
        set_meta(obj, "generation", json!(generation));
        let rv = self.next_rv();
        set_meta(obj, "resourceVersion", json!(rv.to_string()));
    }

    // --- ExternalNodes (+ controller reactions) ---

    fn validate_external_node(obj: &Value, name: &str) -> Result<(), StatusError> {
        let invalid = |m: &str| StatusError::invalid(GROUP_CRD, "ExternalNode", name, m.to_string());
        let ifaces = obj
            .get("spec")
            .and_then(|s| s.get("interfaces"))
            .and_then(Value::as_array)
            .ok_or_else(|| invalid("spec.interfaces: Required value"))?;
        if ifaces.len() != 1 {
            return Err(invalid(&format!(
                "spec.interfaces: must have exactly 1 item (minItems 1, maxItems 1), got {}",
                ifaces.len()
            )));
        }
        // `ips` is optional in the CRD schema (an interface found by name only); when present it
        // is a list of IP strings.
        let ips = match ifaces[0].get("ips") {
            None | Some(Value::Null) => return Ok(()),
            Some(Value::Array(ips)) => ips,
            Some(_) => {
                return Err(invalid(
                    "spec.interfaces[0].ips: Invalid value: must be of type array",
                ))
            }
        };
        for (i, ip) in ips.iter().enumerate() {
            if ip.as_str().and_then(|s| s.parse::<IpAddr>().ok()).is_none() {
                return Err(invalid(&format!(
                    "spec.interfaces[0].ips[{i}]: must be an IPv4 or IPv6 address"
                )));
            }
        }
        Ok(())
    }

    fn prepare_en(obj: &Value, namespace: Option<&str>) -> Result<(Value, String, String), StatusError> {
        if !obj.is_object() {
            return Err(StatusError::bad_request("ExternalNode must be a JSON object"));
        }
        let mut obj = obj.clone();
        let name = meta_str(&obj, "name").to_string();
        if name.is_empty() {
            return Err(StatusError::invalid(
                GROUP_CRD,
                "ExternalNode",
                "",
                "metadata.name: Required value",
            ));
        }
        let body_ns = meta_str(&obj, "namespace").to_string();
        let ns = match namespace {
            Some(ns) if !body_ns.is_empty() && body_ns != ns => {
                return Err(StatusError::bad_request(format!(
                    "the namespace of the provided object ({body_ns}) does not match the namespace sent on the request ({ns})"
                )))
            }
            Some(ns) => ns.to_string(),
            None if body_ns.is_empty() => "default".to_string(),
            None => body_ns,
        };
        set_meta(&mut obj, "namespace", json!(ns));
        Self::validate_external_node(&obj, &name)?;
        Ok((obj, ns, name))
    }

    /// POST: creates an ExternalNode (409 if it exists); the controller then creates its
    /// ExternalEntity and an empty AntreaAgentInfo.
    pub fn create_external_node(
        &mut self,
        obj: &Value,
        namespace: Option<&str>,
    ) -> Result<(Value, Vec<DispatchItem>), StatusError> {
        let (mut obj, ns, name) = Self::prepare_en(obj, namespace)?;
        let key = (ns, name.clone());
        if self.kube.external_nodes.contains_key(&key) {
            return Err(StatusError::already_exists(GROUP_CRD, "externalnodes", &name));
        }
        self.stamp_new(&mut obj, EN_API_VERSION, "ExternalNode");
        self.kube.external_nodes.insert(key, obj.clone());
        let mut out = Vec::new();
        self.record_en_event("ADDED", &obj, &mut out);
        self.sync_entity(None, Some(&obj));
        if !self.kube.agent_infos.contains_key(&name) {
            let mut aai = json!({"metadata": {"name": name}, "podRef": {}, "nodeRef": {}, "ovsInfo": {},
                                 "networkPolicyControllerInfo": {}, "networkInfo": {}});
            self.stamp_new(&mut aai, AAI_API_VERSION, "AntreaAgentInfo");
            self.kube.agent_infos.insert(name, aai);
        }
        out.extend(self.recompute(&[]));
        Ok((obj, out))
    }

    /// PUT: replaces an ExternalNode; `check_rv` (an API PUT) applies a custom resource's
    /// optimistic concurrency: 422 without a resourceVersion, 409 with a stale one.
    pub fn update_external_node(
        &mut self,
        obj: &Value,
        namespace: Option<&str>,
        check_rv: bool,
    ) -> Result<(Value, Vec<DispatchItem>), StatusError> {
        let (mut obj, ns, name) = Self::prepare_en(obj, namespace)?;
        let key = (ns, name.clone());
        let old = self
            .kube
            .external_nodes
            .get(&key)
            .cloned()
            .ok_or_else(|| StatusError::not_found(GROUP_CRD, "externalnodes", &name))?;
        let sent_rv = meta_str(&obj, "resourceVersion");
        if check_rv && sent_rv.is_empty() {
            return Err(StatusError::invalid(
                GROUP_CRD,
                "ExternalNode",
                &name,
                RV_REQUIRED,
            ));
        }
        if check_rv && sent_rv != meta_str(&old, "resourceVersion") {
            return Err(StatusError::conflict(GROUP_CRD, "externalnodes", &name));
        }
        self.stamp_update(&mut obj, &old, EN_API_VERSION, "ExternalNode");
        self.kube.external_nodes.insert(key, obj.clone());
        let mut out = Vec::new();
        self.record_en_event("MODIFIED", &obj, &mut out);
        self.sync_entity(Some(&old), Some(&obj));
        out.extend(self.recompute(&[]));
        Ok((obj, out))
    }

    /// Create, or replace whatever is stored (control API).
    pub fn apply_external_node(&mut self, obj: &Value) -> Result<(Value, Vec<DispatchItem>), StatusError> {
        let (_, ns, name) = Self::prepare_en(obj, None)?;
        if self.kube.external_nodes.contains_key(&(ns, name)) {
            self.update_external_node(obj, None, false)
        } else {
            self.create_external_node(obj, None)
        }
    }

    /// DELETE: removes the ExternalNode; the controller deletes its ExternalEntity and
    /// AntreaAgentInfo.
    pub fn delete_external_node(
        &mut self,
        namespace: &str,
        name: &str,
    ) -> Result<(Value, Vec<DispatchItem>), StatusError> {
        let mut old = self
            .kube
            .external_nodes
            .remove(&(namespace.to_string(), name.to_string()))
            .ok_or_else(|| StatusError::not_found(GROUP_CRD, "externalnodes", name))?;
        let rv = self.next_rv();
        set_meta(&mut old, "resourceVersion", json!(rv.to_string()));
        let mut out = Vec::new();
        self.record_en_event("DELETED", &old, &mut out);
        self.sync_entity(Some(&old), None);
        if self.kube.agent_infos.remove(name).is_some() {
            self.next_rv();
        }
        out.extend(self.recompute(&[]));
        Ok((old, out))
    }

    /// The ExternalEntity the controller derives from an ExternalNode (§8.1), if it has IPs.
    fn entity_for(en: &Value) -> Option<((String, String), Value)> {
        let iface = en.get("spec")?.get("interfaces")?.as_array()?.first()?;
        let if_name = iface.get("name").and_then(Value::as_str).unwrap_or_default();
        let ips: Vec<&str> = iface
            .get("ips")?
            .as_array()?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        if ips.is_empty() {
            return None;
        }
        let en_name = meta_str(en, "name");
        let ns = meta_str(en, "namespace");
        let name = external_entity_name(en_name, if_name);
        let endpoints: Vec<Value> = ips
            .iter()
            .map(|ip| {
                if if_name.is_empty() {
                    json!({"ip": ip})
                } else {
                    json!({"ip": ip, "name": if_name})
                }
            })
            .collect();
        let mut metadata = json!({"name": name, "namespace": ns,
            "ownerReferences": [{"apiVersion": EN_API_VERSION, "kind": "ExternalNode",
                                 "name": en_name, "uid": meta_str(en, "uid")}]});
        if let Some(labels) = en["metadata"]
            .get("labels")
            .filter(|l| l.as_object().is_some_and(|m| !m.is_empty()))
        {
            metadata["labels"] = labels.clone();
        }
        let ee = json!({"metadata": metadata, "spec": {"endpoints": endpoints, "externalNode": en_name}});
        Some(((ns.to_string(), name), ee))
    }

    /// The controller's ExternalEntity reconciliation for one ExternalNode change.
    fn sync_entity(&mut self, old: Option<&Value>, new: Option<&Value>) {
        let old_ee = old.and_then(Self::entity_for);
        let new_ee = new.and_then(Self::entity_for);
        if let Some((old_key, _)) = &old_ee {
            if new_ee.as_ref().is_none_or(|(k, _)| k != old_key)
                && self.kube.external_entities.remove(old_key).is_some()
            {
                self.next_rv();
            }
        }
        if let Some((key, mut ee)) = new_ee {
            match self.kube.external_entities.get(&key).cloned() {
                None => {
                    self.stamp_new(&mut ee, EE_API_VERSION, "ExternalEntity");
                    self.kube.external_entities.insert(key, ee);
                }
                Some(existing) => {
                    let same = existing["spec"] == ee["spec"]
                        && existing["metadata"].get("labels") == ee["metadata"].get("labels")
                        && existing["metadata"].get("ownerReferences")
                            == ee["metadata"].get("ownerReferences");
                    if !same {
                        self.stamp_update(&mut ee, &existing, EE_API_VERSION, "ExternalEntity");
                        self.kube.external_entities.insert(key, ee);
                    }
                }
            }
        }
    }

    /// Creates or replaces a hand-made ExternalEntity (one without owner reference is hosted by
    /// the node named literally by `spec.externalNode`, e.g. `vm-ns/vm1`, §4.3).
    pub fn apply_external_entity(&mut self, obj: &Value) -> Result<(Value, Vec<DispatchItem>), StatusError> {
        let mut obj = obj.clone();
        let name = meta_str(&obj, "name").to_string();
        if name.is_empty() {
            return Err(StatusError::invalid(
                GROUP_CRD,
                "ExternalEntity",
                "",
                "metadata.name: Required value",
            ));
        }
        let mut ns = meta_str(&obj, "namespace").to_string();
        if ns.is_empty() {
            ns = "default".into();
            set_meta(&mut obj, "namespace", json!(ns));
        }
        let key = (ns, name);
        match self.kube.external_entities.get(&key).cloned() {
            Some(old) => self.stamp_update(&mut obj, &old, EE_API_VERSION, "ExternalEntity"),
            None => self.stamp_new(&mut obj, EE_API_VERSION, "ExternalEntity"),
        }
        self.kube.external_entities.insert(key, obj.clone());
        Ok((obj, self.recompute(&[])))
    }

    pub fn delete_external_entity(
        &mut self,
        namespace: &str,
        name: &str,
    ) -> Result<Vec<DispatchItem>, StatusError> {
        self.kube
            .external_entities
            .remove(&(namespace.to_string(), name.to_string()))
            .ok_or_else(|| StatusError::not_found(GROUP_CRD, "externalentities", name))?;
        self.next_rv();
        Ok(self.recompute(&[]))
    }

    /// `GenerateEntityNodeKey` (§4.3) of the ExternalEntity `namespace/name`, if it exists.
    fn entity_host(&self, namespace: &str, name: &str) -> Option<String> {
        let ee = self
            .kube
            .external_entities
            .get(&(namespace.to_string(), name.to_string()))?;
        let node = ee.get("spec")?.get("externalNode")?.as_str()?;
        if node.is_empty() {
            return None;
        }
        let owner_kind = ee["metadata"]
            .get("ownerReferences")
            .and_then(Value::as_array)
            .and_then(|o| o.first())
            .map(|o| o.get("kind").and_then(Value::as_str).unwrap_or_default());
        Some(match owner_kind {
            Some("ExternalNode") => format!("{namespace}/{node}"),
            _ => node.to_string(),
        })
    }

    // --- AntreaAgentInfo ---

    /// POST (admin only by RBAC): creates an AntreaAgentInfo.
    pub fn create_agent_info(&mut self, obj: &Value) -> Result<Value, StatusError> {
        let name = meta_str(obj, "name").to_string();
        if name.is_empty() {
            return Err(StatusError::invalid(
                GROUP_CRD,
                "AntreaAgentInfo",
                "",
                "metadata.name: Required value",
            ));
        }
        if self.kube.agent_infos.contains_key(&name) {
            return Err(StatusError::already_exists(GROUP_CRD, "antreaagentinfos", &name));
        }
        let mut obj = obj.clone();
        self.stamp_new(&mut obj, AAI_API_VERSION, "AntreaAgentInfo");
        self.kube.agent_infos.insert(name, obj.clone());
        Ok(obj)
    }

    /// PUT: replaces an AntreaAgentInfo; 404 if absent, 422 without a resourceVersion, 409 with a
    /// stale one. Fields the CRD schema does not define are pruned, as kube-apiserver does.
    pub fn update_agent_info(&mut self, name: &str, obj: &Value) -> Result<Value, StatusError> {
        if !obj.is_object() {
            return Err(StatusError::bad_request("AntreaAgentInfo must be a JSON object"));
        }
        let body_name = meta_str(obj, "name");
        if body_name != name {
            return Err(StatusError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let old = self.get_agent_info(name)?;
        let sent_rv = meta_str(obj, "resourceVersion");
        if sent_rv.is_empty() {
            // Custom resources allow no unconditional update.
            return Err(StatusError::invalid(
                GROUP_CRD,
                "AntreaAgentInfo",
                name,
                RV_REQUIRED,
            ));
        }
        if sent_rv != meta_str(&old, "resourceVersion") {
            return Err(StatusError::conflict(GROUP_CRD, "antreaagentinfos", name));
        }
        let mut obj = obj.clone();
        self.stamp_update(&mut obj, &old, AAI_API_VERSION, "AntreaAgentInfo");
        self.kube.agent_infos.insert(name.to_string(), obj.clone());
        Ok(obj)
    }

    pub fn delete_agent_info(&mut self, name: &str) -> Result<Value, StatusError> {
        let old = self
            .kube
            .agent_infos
            .remove(name)
            .ok_or_else(|| StatusError::not_found(GROUP_CRD, "antreaagentinfos", name))?;
        self.next_rv();
        Ok(old)
    }

    // --- controlplane ---

    /// Creates or replaces controlplane objects and publishes the resulting changes.
    pub fn upsert_controlplane(&mut self, objects: Vec<CpObject>) -> Vec<DispatchItem> {
        let mut touched = Vec::new();
        for o in objects {
            let r = o.resource();
            let name = o.name().to_string();
            self.cp[r.index()].desired.insert(name.clone(), o);
            touched.push((r, name));
        }
        self.recompute(&touched)
    }

    /// Deletes a controlplane object (404 if unknown).
    pub fn delete_controlplane(
        &mut self,
        resource: CpResource,
        name: &str,
    ) -> Result<Vec<DispatchItem>, StatusError> {
        if self.cp[resource.index()].desired.remove(name).is_none() {
            return Err(StatusError::not_found(
                "controlplane.antrea.io",
                resource.plural(),
                name,
            ));
        }
        Ok(self.recompute(&[(resource, name.to_string())]))
    }

    /// Recomputes spans (and per-node AppliedToGroup members) of every controlplane object and
    /// publishes every object whose content or span changed, one resourceVersion per change.
    fn recompute(&mut self, touched: &[(CpResource, String)]) -> Vec<DispatchItem> {
        let touched: BTreeSet<(CpResource, &str)> = touched.iter().map(|(r, n)| (*r, n.as_str())).collect();
        // AppliedToGroups: members bucketed by host.
        let mut atg_new: BTreeMap<String, (BTreeSet<String>, NodeMembers)> = BTreeMap::new();
        for (name, obj) in &self.cp[CpResource::AppliedToGroups.index()].desired {
            let mut by_node: BTreeMap<String, Vec<GroupMember>> = BTreeMap::new();
            for m in obj.members() {
                let host = if let Some(e) = &m.external_entity {
                    self.entity_host(&e.namespace, &e.name)
                } else {
                    m.node.as_ref().map(|n| n.name.clone())
                };
                if let Some(h) = host {
                    by_node.entry(h).or_default().push(m.clone());
                }
            }
            atg_new.insert(name.clone(), (by_node.keys().cloned().collect(), by_node));
        }
        // NetworkPolicies: union of their AppliedToGroups' spans.
        let mut np_spans: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut ag_spans: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (name, obj) in &self.cp[CpResource::NetworkPolicies.index()].desired {
            let CpObject::Np(p) = obj else { continue };
            let mut span = BTreeSet::new();
            let atgs = p
                .applied_to_groups
                .iter()
                .chain(p.rules.iter().flat_map(|r| r.applied_to_groups.iter()));
            for atg in atgs {
                if let Some((s, _)) = atg_new.get(atg) {
                    span.extend(s.iter().cloned());
                }
            }
            for rule in &p.rules {
                for ag in rule
                    .from
                    .address_groups
                    .iter()
                    .chain(rule.to.address_groups.iter())
                {
                    ag_spans
                        .entry(ag.clone())
                        .or_default()
                        .extend(span.iter().cloned());
                }
            }
            np_spans.insert(name.clone(), span);
        }
        let mut out = Vec::new();
        for resource in CpResource::ALL {
            let epoch = self.epoch;
            let store = &mut self.cp[resource.index()];
            let names: BTreeSet<String> = store
                .desired
                .keys()
                .chain(store.entries.keys())
                .cloned()
                .collect();
            for name in names {
                let prev = store.entries.get(&name).cloned();
                let cur = store.desired.get(&name).map(|obj| {
                    let (span, node_members) = match resource {
                        CpResource::AppliedToGroups => atg_new.remove(&name).unwrap_or_default(),
                        CpResource::NetworkPolicies => {
                            (np_spans.remove(&name).unwrap_or_default(), BTreeMap::new())
                        }
                        CpResource::AddressGroups => {
                            (ag_spans.remove(&name).unwrap_or_default(), BTreeMap::new())
                        }
                    };
                    (obj, span, node_members)
                });
                let changed = match (&prev, &cur) {
                    (None, None) => false,
                    (Some(_), None) | (None, Some(_)) => true,
                    (Some(p), Some((obj, span, nm))) => {
                        p.span != *span
                            || p.node_members != *nm
                            || (touched.contains(&(resource, name.as_str())) && p.object != **obj)
                    }
                };
                if !changed {
                    continue;
                }
                let cur = cur.map(|(obj, span, node_members)| {
                    Arc::new(CpEntry {
                        object: obj.clone(),
                        span,
                        node_members,
                    })
                });
                match &cur {
                    Some(c) => store.entries.insert(name.clone(), c.clone()),
                    None => store.entries.remove(&name),
                };
                store.rv += 1;
                out.push(DispatchItem::Cp(CpEvent {
                    resource,
                    epoch,
                    rv: store.rv,
                    prev,
                    cur,
                }));
            }
        }
        out
    }

    /// The watch snapshot of `resource` for `node` (None = unfiltered), name-filtered, and the
    /// store's resourceVersion it corresponds to.
    pub fn cp_snapshot(
        &self,
        resource: CpResource,
        node: Option<&str>,
        name: Option<&str>,
    ) -> (Vec<String>, u64) {
        let store = &self.cp[resource.index()];
        let objects = store
            .entries
            .iter()
            .filter(|(n, e)| e.visible_to(node) && name.is_none_or(|x| x == n.as_str()))
            .map(|(_, e)| e.render(node))
            .collect();
        (objects, store.rv)
    }

    pub fn cp_rv(&self, resource: CpResource) -> u64 {
        self.cp[resource.index()].rv
    }

    /// GET of one controlplane object, unfiltered (§2.2).
    pub fn cp_get(&self, resource: CpResource, name: &str) -> Result<String, StatusError> {
        self.cp[resource.index()]
            .entries
            .get(name)
            .map(|e| e.render(None))
            .ok_or_else(|| StatusError::not_found("controlplane.antrea.io", resource.plural(), name))
    }

    /// The span of a published controlplane object.
    pub fn cp_span(&self, resource: CpResource, name: &str) -> Option<BTreeSet<String>> {
        self.cp[resource.index()]
            .entries
            .get(name)
            .map(|e| e.span.clone())
    }

    /// A controller restart: new incarnation, counters restarted (the stores are refilled, one
    /// resourceVersion per object), statuses forgotten. The caller drops the watches.
    pub fn restart_controller(&mut self) {
        self.epoch += 1;
        for store in &mut self.cp {
            store.rv = store.entries.len() as u64;
        }
        self.statuses.clear();
    }

    // --- what agents post ---

    /// POST networkpolicies/{name}/status.
    pub fn post_status(&mut self, name: &str, body: &Value) -> Result<(), StatusError> {
        let body_name = meta_str(body, "name");
        if body_name != name {
            return Err(StatusError::bad_request(format!(
                "name in URL does not match name in NetworkPolicyStatus object ({name} vs {body_name})"
            )));
        }
        let nodes = body
            .get("nodes")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for node in nodes {
            let node_name = node
                .get("nodeName")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let key = (name.to_string(), node_name.clone());
            let count = self.statuses.get(&key).map_or(0, |s| s.count) + 1;
            self.statuses.insert(
                key,
                PolicyStatusRecord {
                    policy: name.to_string(),
                    node_name,
                    generation: node.get("generation").and_then(Value::as_i64).unwrap_or(0),
                    realization_failure: node
                        .get("realizationFailure")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                    message: node
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    count,
                },
            );
        }
        Ok(())
    }

    pub fn statuses(&self) -> Vec<PolicyStatusRecord> {
        self.statuses.values().cloned().collect()
    }

    pub fn post_summary(&mut self, body: Value) {
        self.summaries.push(body);
    }

    pub fn summaries(&self) -> Vec<Value> {
        self.summaries.clone()
    }
}

#[cfg(test)]
mod tests;
