//! The AntreaAgentInfo heartbeat (`crd.antrea.io/v1beta1`, cluster-scoped, named after the bare
//! node name): the serde type with the JSON presence rules of the Go type, the pure functions that
//! fill it from [`AgentInfoInputs`] (full and partial updates), the
//! transition-time bookkeeping we keep for our own reports, and the GET/PUT update algorithm over
//! an [`ApiClient`] (cached copy, partial refresh, drop the cache and re-read after a failed PUT,
//! never create).

use std::collections::BTreeMap;

use base64::Engine;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::api::{ApiClient, ApiError, Method};

pub const API_VERSION: &str = "crd.antrea.io/v1beta1";
pub const KIND: &str = "AntreaAgentInfo";

/// The object's path on kube-apiserver; `name` is the bare node name (never `NS/NAME`).
pub fn path(name: &str) -> String {
    format!("/apis/crd.antrea.io/v1beta1/antreaagentinfos/{name}")
}

/// The version string we publish, in Antrea's `v<semver>-<commit>` style (see [`crate::version`]).
pub fn agent_version() -> String {
    crate::version::VERSION.to_string()
}

fn is_zero_i32(v: &i32) -> bool {
    *v == 0
}

fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}

/// The metadata we read and write; everything else the server sent (labels, managedFields,
/// creationTimestamp, ...) is carried through untouched so a PUT never drops it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `corev1.ObjectReference`: every field is `omitempty`, the struct itself is always present.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub field_path: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OvsInfo {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub bridge_name: String,
    /// OpenFlow table name → number of flows the agent installed in it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub flow_table: BTreeMap<String, i32>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkPolicyControllerInfo {
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub network_policy_num: i32,
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub address_group_num: i32,
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub applied_to_group_num: i32,
}

/// The four condition types, in the order the agent always sends them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ConditionType {
    AgentHealthy,
    ControllerConnectionUp,
    #[serde(rename = "OVSDBConnectionUp")]
    OvsdbConnectionUp,
    OpenflowConnectionUp,
}

impl ConditionType {
    pub const ALL: [ConditionType; 4] = [
        ConditionType::AgentHealthy,
        ConditionType::ControllerConnectionUp,
        ConditionType::OvsdbConnectionUp,
        ConditionType::OpenflowConnectionUp,
    ];
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

/// One `agentConditions` entry as on the wire (upstream has no transition time here).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCondition {
    #[serde(rename = "type")]
    pub type_: ConditionType,
    pub status: ConditionStatus,
    /// RFC 3339, seconds precision (`metav1.Time`); required.
    pub last_heartbeat_time: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// `crd.antrea.io/v1beta1` AntreaAgentInfo. Presence rules follow the Go type: structs
/// (`metadata`, `podRef`, `nodeRef`, `ovsInfo`, `networkPolicyControllerInfo`, `networkInfo`) are
/// always present, scalars and lists are omitted when empty or zero. Unknown top-level fields are
/// kept, so decoding and re-encoding a server object changes nothing.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AntreaAgentInfo {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    #[serde(default)]
    pub pod_ref: ObjectReference,
    #[serde(default)]
    pub node_ref: ObjectReference,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_subnets: Vec<String>,
    #[serde(default)]
    pub ovs_info: OvsInfo,
    #[serde(default)]
    pub network_policy_controller_info: NetworkPolicyControllerInfo,
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub local_pod_num: i32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agent_conditions: Vec<AgentCondition>,
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub api_port: i64,
    /// Base64 of the PEM bundle (Go `[]byte`), kept as text so it round-trips byte for byte.
    #[serde(default, rename = "apiCABundle", skip_serializing_if = "String::is_empty")]
    pub api_ca_bundle: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node_port_local_port_range: String,
    /// Empty on Linux VMs; kept as received.
    #[serde(default)]
    pub network_info: Map<String, Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// What the agent knows about itself at one report, gathered from the actors.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgentInfoInputs {
    /// Bare node name (`NAME`).
    pub node_name: String,
    pub version: String,
    pub bridge_name: String,
    pub api_port: u16,
    /// `Some` only when OVS answered the version query; otherwise the old value stays.
    pub ovs_version: Option<String>,
    pub flow_table: BTreeMap<String, i32>,
    pub policy_info: NetworkPolicyControllerInfo,
    pub conditions: Vec<AgentCondition>,
    /// PEM of the local API server's certificate, when there is one.
    pub api_ca_bundle: Option<Vec<u8>>,
}

impl AntreaAgentInfo {
    /// An object with only its name, as the controller creates it.
    pub fn named(name: &str) -> Self {
        AntreaAgentInfo {
            api_version: API_VERSION.into(),
            kind: KIND.into(),
            metadata: ObjectMeta {
                name: name.into(),
                ..ObjectMeta::default()
            },
            ..AntreaAgentInfo::default()
        }
    }

    /// The fields refreshed at every heartbeat (Go's partial update).
    pub fn apply_partial(&mut self, inputs: &AgentInfoInputs) {
        if self.api_version.is_empty() {
            self.api_version = API_VERSION.into();
        }
        if self.kind.is_empty() {
            self.kind = KIND.into();
        }
        self.metadata.name = inputs.node_name.clone();
        self.local_pod_num = 0;
        self.ovs_info.flow_table = inputs.flow_table.clone();
        self.network_policy_controller_info = inputs.policy_info;
        if let Some(v) = &inputs.ovs_version {
            self.ovs_info.version = v.clone();
        }
        self.agent_conditions = inputs.conditions.clone();
        if let Some(pem) = &inputs.api_ca_bundle {
            self.api_ca_bundle = base64::engine::general_purpose::STANDARD.encode(pem);
        }
    }

    /// Every field the agent owns (Go's full update, after a GET).
    pub fn apply_full(&mut self, inputs: &AgentInfoInputs) {
        self.apply_partial(inputs);
        self.version = inputs.version.clone();
        // A VM agent runs in no Pod: Go sends an empty reference (unless POD_NAME/POD_NAMESPACE
        // are set, which they never are on a VM).
        self.pod_ref = ObjectReference::default();
        self.node_ref = ObjectReference {
            kind: "Node".into(),
            name: inputs.node_name.clone(),
            ..ObjectReference::default()
        };
        self.node_subnets.clear();
        self.ovs_info.bridge_name = inputs.bridge_name.clone();
        self.api_port = i64::from(inputs.api_port);
        self.node_port_local_port_range.clear();
        self.network_info.clear();
    }
}

/// RFC 3339 at seconds precision with `Z`, as `metav1.Time` marshals.
pub fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// Whether OVSDB answered a probe at this report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OvsdbProbe {
    Up { version: Option<String> },
    Down(String),
}

/// One condition as our own reports show it: the wire fields plus when its status last changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionReport {
    #[serde(flatten)]
    pub condition: AgentCondition,
    pub last_transition_time: String,
}

/// Remembers since when each condition has had its current status.
#[derive(Clone, Debug, Default)]
pub struct ConditionTracker {
    since: BTreeMap<ConditionType, (ConditionStatus, String)>,
}

impl ConditionTracker {
    /// Records this report's conditions; a condition whose status changed (or is new) gets its
    /// heartbeat time as transition time.
    pub fn update(&mut self, conditions: &[AgentCondition]) -> Vec<ConditionReport> {
        conditions
            .iter()
            .map(|c| {
                let entry = self
                    .since
                    .entry(c.type_)
                    .or_insert_with(|| (c.status, c.last_heartbeat_time.clone()));
                if entry.0 != c.status {
                    *entry = (c.status, c.last_heartbeat_time.clone());
                }
                ConditionReport {
                    condition: c.clone(),
                    last_transition_time: entry.1.clone(),
                }
            })
            .collect()
    }
}

/// Which path the last successful heartbeat took.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum UpdateKind {
    /// Refresh of the cached copy.
    Partial,
    /// GET, then every field.
    Full,
}

/// Why a heartbeat failed, with the step that failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AgentInfoError {
    /// The controller has not created our AntreaAgentInfo yet (or it was deleted); we never
    /// create it, so we wait for the next report.
    #[error("AntreaAgentInfo {0} does not exist yet (antrea-controller creates it); waiting")]
    NotFound(String),
    #[error("reading AntreaAgentInfo: {0}")]
    Get(ApiError),
    #[error("updating AntreaAgentInfo: {0}")]
    Put(ApiError),
}

impl AgentInfoError {
    pub fn kind(&self) -> crate::error_kind::ErrorKind {
        crate::error_kind::ErrorKind::KubeApi
    }
}

fn decode(method: Method, path: &str, v: Value) -> Result<AntreaAgentInfo, ApiError> {
    serde_json::from_value(v).map_err(|e| ApiError::Decode {
        method: method.as_str(),
        path: path.to_string(),
        message: e.to_string(),
    })
}

async fn put(api: &dyn ApiClient, path: &str, obj: &AntreaAgentInfo) -> Result<AntreaAgentInfo, ApiError> {
    let body = serde_json::to_value(obj).map_err(|e| ApiError::Decode {
        method: Method::Put.as_str(),
        path: path.to_string(),
        message: format!("cannot encode the body: {e}"),
    })?;
    let answer = api.request(Method::Put, path, Some(&body)).await?;
    decode(Method::Put, path, answer)
}

/// One heartbeat. With a cached copy: refresh it and PUT; if that fails (409 because someone else
/// wrote, or anything else) drop the cache and go straight on to the GET + full PUT path, as the Go
/// agent does. Returns the new cache (the server's answer to the last PUT, `None` after a failure)
/// and the outcome.
pub async fn heartbeat(
    api: &dyn ApiClient,
    cached: Option<AntreaAgentInfo>,
    inputs: &AgentInfoInputs,
) -> (Option<AntreaAgentInfo>, Result<UpdateKind, AgentInfoError>) {
    let path = path(&inputs.node_name);
    if let Some(mut obj) = cached {
        obj.apply_partial(inputs);
        match put(api, &path, &obj).await {
            Ok(new) => return (Some(new), Ok(UpdateKind::Partial)),
            Err(e) => tracing::debug!("partial AntreaAgentInfo update failed ({e}); re-reading it"),
        }
    }
    let mut obj = match api.request(Method::Get, &path, None).await {
        Ok(v) => match decode(Method::Get, &path, v) {
            Ok(o) => o,
            Err(e) => return (None, Err(AgentInfoError::Get(e))),
        },
        Err(e) if e.is_not_found() => return (None, Err(AgentInfoError::NotFound(inputs.node_name.clone()))),
        Err(e) => return (None, Err(AgentInfoError::Get(e))),
    };
    obj.apply_full(inputs);
    match put(api, &path, &obj).await {
        Ok(new) => (Some(new), Ok(UpdateKind::Full)),
        Err(e) => (None, Err(AgentInfoError::Put(e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The full-update example of the API reference (§5.3).
    fn example() -> Value {
        json!({
          "apiVersion": "crd.antrea.io/v1beta1",
          "kind": "AntreaAgentInfo",
          "metadata": {"name": "vm1", "resourceVersion": "834411", "uid": "2f8d3c1a-4b5e-4f6a-9b7c-8d9e0f1a2b3c"},
          "version": "v2.8.0-dev-fc70f2b",
          "podRef": {},
          "nodeRef": {"kind": "Node", "name": "vm1"},
          "ovsInfo": {
            "version": "3.1.2",
            "bridgeName": "br-int",
            "flowTable": {"PipelineRootClassifier": 3, "NonIP": 2, "ConntrackZone": 1, "ConntrackState": 3,
                          "AntreaPolicyIngressRule": 4, "IngressRule": 1, "IngressDefaultRule": 1,
                          "IngressMetric": 3, "L2ForwardingCalc": 3, "ConntrackCommit": 1, "Output": 2}
          },
          "networkPolicyControllerInfo": {"networkPolicyNum": 1, "addressGroupNum": 1, "appliedToGroupNum": 1},
          "agentConditions": [
            {"type": "AgentHealthy", "status": "True", "lastHeartbeatTime": "2026-08-21T10:15:30Z"},
            {"type": "ControllerConnectionUp", "status": "True", "lastHeartbeatTime": "2026-08-21T10:15:30Z"},
            {"type": "OVSDBConnectionUp", "status": "True", "lastHeartbeatTime": "2026-08-21T10:15:30Z"},
            {"type": "OpenflowConnectionUp", "status": "True", "lastHeartbeatTime": "2026-08-21T10:15:30Z"}
          ],
          "apiPort": 10350,
          "apiCABundle": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUM...",
          "networkInfo": {}
        })
    }

    fn time() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-08-21T10:15:30Z")
            .expect("test time")
            .with_timezone(&Utc)
    }

    /// The four conditions, all True at [`time`].
    fn all_true() -> Vec<AgentCondition> {
        ConditionType::ALL
            .iter()
            .map(|&type_| AgentCondition {
                type_,
                status: ConditionStatus::True,
                last_heartbeat_time: rfc3339(time()),
                reason: String::new(),
                message: String::new(),
            })
            .collect()
    }

    fn inputs() -> AgentInfoInputs {
        AgentInfoInputs {
            node_name: "vm1".into(),
            version: "v2.8.0-dev-fc70f2b".into(),
            bridge_name: "br-int".into(),
            api_port: 10350,
            ovs_version: Some("3.1.2".into()),
            flow_table: BTreeMap::from([("NonIP".to_string(), 2), ("Output".to_string(), 2)]),
            policy_info: NetworkPolicyControllerInfo {
                network_policy_num: 1,
                address_group_num: 1,
                applied_to_group_num: 1,
            },
            conditions: all_true(),
            api_ca_bundle: None,
        }
    }

    #[test]
    fn the_reference_example_decodes_and_reencodes_unchanged() {
        let obj: AntreaAgentInfo = serde_json::from_value(example()).expect("decodes");
        assert_eq!(obj.metadata.resource_version, "834411");
        assert_eq!(obj.api_port, 10350);
        assert_eq!(obj.agent_conditions[2].type_, ConditionType::OvsdbConnectionUp);
        assert_eq!(serde_json::to_value(&obj).expect("encodes"), example());
    }

    #[test]
    fn unknown_fields_survive_a_round_trip() {
        let mut v = example();
        v["metadata"]["labels"] = json!({"a": "b"});
        v["metadata"]["managedFields"] = json!([{"manager": "x"}]);
        v["futureField"] = json!({"x": 1});
        v["ovsInfo"]["futureOvs"] = json!(true);
        let obj: AntreaAgentInfo = serde_json::from_value(v.clone()).expect("decodes");
        assert_eq!(serde_json::to_value(&obj).expect("encodes"), v);
    }

    #[test]
    fn an_empty_object_from_the_controller_gets_the_always_present_structs() {
        let obj: AntreaAgentInfo = serde_json::from_value(json!({
            "apiVersion": "crd.antrea.io/v1beta1", "kind": "AntreaAgentInfo",
            "metadata": {"name": "vm1", "resourceVersion": "7"}
        }))
        .expect("decodes");
        assert_eq!(
            serde_json::to_value(&obj).expect("encodes"),
            json!({
                "apiVersion": "crd.antrea.io/v1beta1", "kind": "AntreaAgentInfo",
                "metadata": {"name": "vm1", "resourceVersion": "7"},
                "podRef": {}, "nodeRef": {}, "ovsInfo": {}, "networkPolicyControllerInfo": {},
                "networkInfo": {}
            })
        );
    }

    #[test]
    fn a_full_update_produces_the_reference_shape() {
        let mut obj: AntreaAgentInfo = serde_json::from_value(json!({
            "apiVersion": "crd.antrea.io/v1beta1", "kind": "AntreaAgentInfo",
            "metadata": {"name": "vm1", "resourceVersion": "834411", "uid": "u"}
        }))
        .expect("decodes");
        let mut inp = inputs();
        inp.api_ca_bundle = Some(b"PEM".to_vec());
        obj.apply_full(&inp);
        let v = serde_json::to_value(&obj).expect("encodes");
        assert_eq!(
            v,
            json!({
              "apiVersion": "crd.antrea.io/v1beta1",
              "kind": "AntreaAgentInfo",
              "metadata": {"name": "vm1", "resourceVersion": "834411", "uid": "u"},
              "version": "v2.8.0-dev-fc70f2b",
              "podRef": {},
              "nodeRef": {"kind": "Node", "name": "vm1"},
              "ovsInfo": {"version": "3.1.2", "bridgeName": "br-int", "flowTable": {"NonIP": 2, "Output": 2}},
              "networkPolicyControllerInfo": {"networkPolicyNum": 1, "addressGroupNum": 1, "appliedToGroupNum": 1},
              "agentConditions": [
                {"type": "AgentHealthy", "status": "True", "lastHeartbeatTime": "2026-08-21T10:15:30Z"},
                {"type": "ControllerConnectionUp", "status": "True", "lastHeartbeatTime": "2026-08-21T10:15:30Z"},
                {"type": "OVSDBConnectionUp", "status": "True", "lastHeartbeatTime": "2026-08-21T10:15:30Z"},
                {"type": "OpenflowConnectionUp", "status": "True", "lastHeartbeatTime": "2026-08-21T10:15:30Z"}
              ],
              "apiPort": 10350,
              "apiCABundle": "UEVN",
              "networkInfo": {}
            })
        );
    }

    #[test]
    fn a_partial_update_leaves_the_full_only_fields_and_an_unread_ovs_version_alone() {
        let mut obj: AntreaAgentInfo = serde_json::from_value(example()).expect("decodes");
        let mut inp = inputs();
        inp.version = "other".into();
        inp.bridge_name = "br-other".into();
        inp.api_port = 1;
        inp.ovs_version = None;
        inp.flow_table = BTreeMap::from([("Output".to_string(), 9)]);
        obj.apply_partial(&inp);
        assert_eq!(obj.version, "v2.8.0-dev-fc70f2b");
        assert_eq!(obj.ovs_info.bridge_name, "br-int");
        assert_eq!(obj.api_port, 10350);
        assert_eq!(obj.ovs_info.version, "3.1.2");
        assert_eq!(obj.ovs_info.flow_table, inp.flow_table);
        assert_eq!(
            obj.api_ca_bundle,
            "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUM..."
        );
    }
}
