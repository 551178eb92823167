//! The HTTP side: one handler for every request that authenticates the bearer token (401),
//! records the call, applies injected failures (500), resolves the request like kube-apiserver's
//! request-info resolver, authorizes it with RBAC (403 naming verb and resource), and serves the
//! kube-apiserver paths (ExternalNode, ExternalEntity, AntreaAgentInfo) and the antrea-controller
//! paths (controlplane watches, LIST/GET, status and stats POSTs). `/emulator/v1/...` goes to the
//! control API (`control.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::rbac::{Attributes, Identity, Rbac};
use super::store::{
    bookmark_with_annotations, success_status, CpResource, DispatchItem, State, StatusError, AAI_API_VERSION,
    EE_API_VERSION, EN_API_VERSION, SUCCESS_STATUS_BODY,
};
use super::watch::{self, lock, Bookmarks, Registry, WatchTarget};
use antrea_controlplane::API_VERSION as CP_API_VERSION;

/// One request as the emulator saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedCall {
    pub method: String,
    pub path: String,
    /// Raw query string (percent-encoded, as sent).
    pub query: String,
    /// User name of the token; None when the token was missing or unknown.
    pub identity: Option<String>,
    /// Status code of the answer (200 for a watch that started).
    pub status: u16,
}

impl RecordedCall {
    /// The decoded value of query parameter `key`.
    pub fn query_param(&self, key: &str) -> Option<String> {
        serde_urlencoded::from_str::<Vec<(String, String)>>(&self.query)
            .ok()?
            .into_iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }
}

#[derive(Clone, Debug)]
struct Fault {
    prefix: String,
    remaining: u32,
}

/// Tunables the handlers need.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub watch_buffer: usize,
    pub max_watch_duration: Duration,
    pub kube_bookmark_interval: Duration,
    pub kube_aggregates_controlplane: bool,
    /// How long a restarted antrea-controller answers 503 before serving again.
    pub controller_restart_downtime: Duration,
}

/// Which server a request reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    KubeApiserver,
    AntreaController,
}

/// The group antrea-controller serves to agents.
const CONTROLPLANE_GROUP: &str = "controlplane.antrea.io";

/// Everything shared by the HTTP workers, the dispatcher and the in-process API.
pub struct Core {
    pub state: Mutex<State>,
    pub registry: Arc<Registry>,
    dispatch: mpsc::UnboundedSender<DispatchItem>,
    pub rbac: Rbac,
    tokens: Mutex<HashMap<String, Identity>>,
    calls: Mutex<Vec<RecordedCall>>,
    faults: Mutex<Vec<Fault>>,
    pub options: ServeOptions,
    controller_addr: std::sync::OnceLock<std::net::SocketAddr>,
    /// Until then, antrea-controller is restarting (every request of its group answers 503).
    controller_down_until: Mutex<Option<std::time::Instant>>,
}

impl Core {
    pub fn new(
        state: State,
        rbac: Rbac,
        options: ServeOptions,
        dispatch: mpsc::UnboundedSender<DispatchItem>,
    ) -> Core {
        Core {
            state: Mutex::new(state),
            registry: Arc::new(Registry::default()),
            dispatch,
            rbac,
            tokens: Mutex::new(HashMap::new()),
            calls: Mutex::new(Vec::new()),
            faults: Mutex::new(Vec::new()),
            options,
            controller_addr: std::sync::OnceLock::new(),
            controller_down_until: Mutex::new(None),
        }
    }

    /// Records antrea-controller's listening address (requests to it are the controller's).
    pub fn set_controller_addr(&self, addr: std::net::SocketAddr) {
        let _ = self.controller_addr.set(addr);
    }

    fn endpoint(&self, req: &HttpRequest) -> Endpoint {
        if self.controller_addr.get() == Some(&req.app_config().local_addr()) {
            Endpoint::AntreaController
        } else {
            Endpoint::KubeApiserver
        }
    }

    /// Runs a mutation under the state lock and queues its watch events (still under the lock,
    /// so the dispatcher sees changes in resourceVersion order).
    pub fn mutate<T>(
        &self,
        f: impl FnOnce(&mut State) -> Result<(T, Vec<DispatchItem>), StatusError>,
    ) -> Result<T, StatusError> {
        let mut st = lock(&self.state);
        let (value, items) = f(&mut st)?;
        for item in items {
            // The dispatcher only goes away when the emulator stops; nothing to deliver then.
            let _ = self.dispatch.send(item);
        }
        Ok(value)
    }

    pub fn read<T>(&self, f: impl FnOnce(&State) -> T) -> T {
        f(&lock(&self.state))
    }

    pub fn add_token(&self, token: &str, identity: Identity) {
        lock(&self.tokens).insert(token.to_string(), identity);
    }

    fn identity(&self, req: &HttpRequest) -> Option<Identity> {
        let header = req.headers().get("authorization")?.to_str().ok()?;
        let token = header
            .strip_prefix("Bearer ")
            .or_else(|| header.strip_prefix("bearer "))?;
        lock(&self.tokens).get(token.trim()).cloned()
    }

    pub fn calls(&self) -> Vec<RecordedCall> {
        lock(&self.calls).clone()
    }

    pub fn clear_calls(&self) {
        lock(&self.calls).clear();
    }

    /// The next `count` requests whose path starts with `prefix` fail with 500.
    pub fn fail_next(&self, prefix: &str, count: u32) {
        lock(&self.faults).push(Fault {
            prefix: prefix.to_string(),
            remaining: count,
        });
    }

    fn take_fault(&self, path: &str) -> bool {
        let mut faults = lock(&self.faults);
        let hit = faults
            .iter_mut()
            .find(|f| f.remaining > 0 && path.starts_with(&f.prefix))
            .map(|f| f.remaining -= 1)
            .is_some();
        faults.retain(|f| f.remaining > 0);
        hit
    }

    /// Ends every open watch (both APIs).
    pub fn close_watches(&self) -> usize {
        self.registry.close_where(|_| true)
    }

    /// An antrea-controller restart: controlplane watches dropped, counters restarted, statuses
    /// forgotten, and the new process unavailable (503) for `controller_restart_downtime`, as a
    /// real one is while it starts and syncs (the Deployment's Recreate strategy leaves a gap).
    pub fn restart_controller(&self) {
        let mut st = lock(&self.state);
        st.restart_controller();
        *lock(&self.controller_down_until) =
            Some(std::time::Instant::now() + self.options.controller_restart_downtime);
        self.registry
            .close_where(|w| matches!(w.target, WatchTarget::Controlplane { .. }));
    }
}

/// The JSON answer of a failed request.
pub fn status_response(e: &StatusError) -> HttpResponse {
    HttpResponse::build(StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .content_type("application/json")
        .body(e.to_body())
}

/// An answer whose JSON is already serialized.
pub fn raw_response(code: u16, body: String) -> HttpResponse {
    HttpResponse::build(StatusCode::from_u16(code).unwrap_or(StatusCode::OK))
        .content_type("application/json")
        .body(body)
}

pub fn json_response(code: u16, v: &Value) -> HttpResponse {
    HttpResponse::build(StatusCode::from_u16(code).unwrap_or(StatusCode::OK))
        .content_type("application/json")
        .body(v.to_string())
}

/// What kube-apiserver's request-info resolver makes of a request.
#[derive(Debug, Default)]
struct ReqInfo {
    attrs: Attributes,
    version: String,
    params: Vec<(String, String)>,
}

impl ReqInfo {
    fn param(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn flag(&self, key: &str) -> bool {
        matches!(self.param(key), Some("true") | Some("1"))
    }
}

fn parse_request(method: &str, path: &str, query: &str) -> Result<ReqInfo, StatusError> {
    let params: Vec<(String, String)> = serde_urlencoded::from_str(query)
        .map_err(|e| StatusError::bad_request(format!("invalid query string: {e}")))?;
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, version, rest): (&str, &str, &[&str]) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", v, rest),
        ["apis", g, v, rest @ ..] => (g, v, rest),
        _ => ("", "", &[]),
    };
    let mut info = ReqInfo {
        params,
        ..ReqInfo::default()
    };
    if group.is_empty() && version.is_empty() {
        info.attrs.non_resource_path = Some(path.to_string());
        info.attrs.verb = method.to_ascii_lowercase();
        return Ok(info);
    }
    info.version = version.to_string();
    info.attrs.api_group = group.to_string();
    let rest: &[&str] = match rest {
        ["namespaces", ns, tail @ ..] if !tail.is_empty() => {
            info.attrs.namespace = ns.to_string();
            tail
        }
        other => other,
    };
    info.attrs.resource = rest.first().copied().unwrap_or_default().to_string();
    info.attrs.name = rest.get(1).copied().unwrap_or_default().to_string();
    info.attrs.subresource = rest.get(2..).map(|s| s.join("/")).unwrap_or_default();
    let has_name = !info.attrs.name.is_empty();
    info.attrs.verb = match method {
        "GET" | "HEAD" if has_name => "get",
        "GET" | "HEAD" if info.flag("watch") => "watch",
        "GET" | "HEAD" => "list",
        "POST" => "create",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" if has_name => "delete",
        "DELETE" => "deletecollection",
        _ => "unknown",
    }
    .to_string();
    if matches!(info.attrs.verb.as_str(), "list" | "watch") {
        if let Some(fs) = info.param("fieldSelector") {
            if let Ok(sel) = parse_field_selector(fs) {
                if let Some((_, n)) = sel.iter().find(|(k, _)| k == "metadata.name") {
                    info.attrs.name = n.clone();
                }
            }
        }
    }
    Ok(info)
}

/// `key=value` terms joined by `,` (`==` accepted); other operators are rejected.
fn parse_field_selector(s: &str) -> Result<Vec<(String, String)>, StatusError> {
    let mut out = Vec::new();
    for term in s.split(',').filter(|t| !t.is_empty()) {
        if term.contains("!=") {
            return Err(StatusError::bad_request(format!(
                "unsupported field selector operator in {term:?}"
            )));
        }
        let (k, v) = term
            .split_once("==")
            .or_else(|| term.split_once('='))
            .ok_or_else(|| StatusError::bad_request(format!("invalid field selector: {term:?}")))?;
        out.push((k.trim().to_string(), v.trim().to_string()));
    }
    Ok(out)
}

fn selector_terms(info: &ReqInfo, allowed: &[&str]) -> Result<HashMap<String, String>, StatusError> {
    let terms = parse_field_selector(info.param("fieldSelector").unwrap_or_default())?;
    let mut out = HashMap::new();
    for (k, v) in terms {
        if !allowed.contains(&k.as_str()) {
            return Err(StatusError::bad_request(format!(
                "field label not supported: {k} (supported: {})",
                allowed.join(", ")
            )));
        }
        out.insert(k, v);
    }
    Ok(out)
}

fn forbidden(identity: &Identity, a: &Attributes) -> StatusError {
    let user = &identity.user;
    if let Some(path) = &a.non_resource_path {
        return StatusError::new(
            403,
            "Forbidden",
            format!("forbidden: User \"{user}\" cannot {} path \"{path}\"", a.verb),
        );
    }
    let gr = if a.api_group.is_empty() {
        a.resource.clone()
    } else {
        format!("{}.{}", a.resource, a.api_group)
    };
    let subject = if a.name.is_empty() {
        format!("{gr} is forbidden")
    } else {
        format!("{gr} \"{}\" is forbidden", a.name)
    };
    let resource = if a.subresource.is_empty() {
        format!("resource \"{}\"", a.resource)
    } else {
        format!("resource \"{}/{}\"", a.resource, a.subresource)
    };
    let scope = if a.namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace \"{}\"", a.namespace)
    };
    let mut e = StatusError::new(
        403,
        "Forbidden",
        format!(
            "{subject}: User \"{user}\" cannot {} {resource} in API group \"{}\" {scope}",
            a.verb, a.api_group
        ),
    );
    let mut details = json!({"group": a.api_group, "kind": a.resource});
    if !a.name.is_empty() {
        details["name"] = json!(a.name);
    }
    e.details = Some(details);
    e
}

/// Every request enters here.
pub async fn handle(req: HttpRequest, body: web::Bytes, core: web::Data<Arc<Core>>) -> HttpResponse {
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or_default().to_string();
    let identity = core.identity(&req);
    let endpoint = core.endpoint(&req);
    let response = match &identity {
        None => status_response(&StatusError::new(401, "Unauthorized", "Unauthorized")),
        Some(who) => {
            let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
            serve(
                &core,
                endpoint,
                who,
                &method,
                &path,
                &query,
                &body,
                header("accept"),
                header("content-type"),
            )
        }
    };
    // Reading the call log is not itself logged: tests poll it.
    if !(path.starts_with("/emulator/v1/calls") && method == "GET") {
        lock(&core.calls).push(RecordedCall {
            method,
            path,
            query,
            identity: identity.map(|i| i.user),
            status: response.status().as_u16(),
        });
    }
    response
}

/// The generic 404 of a path no handler serves (k8s.io/apiserver's not-found handler).
fn unserved() -> StatusError {
    StatusError::new(
        404,
        "NotFound",
        "the server could not find the requested resource",
    )
}

/// Whether `endpoint` serves a request for `group` (`""` for non-resource paths).
fn serves(core: &Core, endpoint: Endpoint, group: &str, path: &str) -> bool {
    match endpoint {
        // antrea-controller: its controlplane group, and the health and version paths.
        Endpoint::AntreaController => {
            group == CONTROLPLANE_GROUP
                || matches!(path, "/version" | "/healthz" | "/livez" | "/readyz" | "/apis")
        }
        Endpoint::KubeApiserver => group != CONTROLPLANE_GROUP || core.options.kube_aggregates_controlplane,
    }
}

/// Discovery documents, readable by every authenticated user (`system:discovery`).
fn discovery(endpoint: Endpoint, path: &str) -> Option<Value> {
    let trimmed = path.trim_end_matches('/');
    match (endpoint, trimmed) {
        (Endpoint::KubeApiserver, "/api") => Some(json!({
            "kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "10.0.0.1:6443"}]
        })),
        (_, "/apis") => {
            let groups: &[(&str, &str)] = match endpoint {
                Endpoint::KubeApiserver => &[("crd.antrea.io", "v1beta1")],
                Endpoint::AntreaController => &[(CONTROLPLANE_GROUP, "v1beta2")],
            };
            let groups: Vec<Value> = groups
                .iter()
                .map(|(g, v)| {
                    let gv = json!({"groupVersion": format!("{g}/{v}"), "version": v});
                    json!({"name": g, "versions": [gv.clone()], "preferredVersion": gv})
                })
                .collect();
            Some(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}))
        }
        _ => None,
    }
}

/// Content negotiation as kube-apiserver does it for custom resources, and as this emulator does
/// it for antrea-controller: answers are JSON only. `Accept` must allow `application/json` (a
/// media range `application/*` or `*/*`, or none at all, does; parameters such as `;q=` or
/// `;stream=watch` are ignored); anything else, protobuf included, is 406 Not Acceptable (a real
/// antrea-controller would serve protobuf, which this agent never asks for). A request body must
/// be sent as `application/json`, else 415.
fn negotiate(accept: Option<&str>, content_type: Option<&str>, body: &[u8]) -> Result<(), StatusError> {
    let media = |range: &str| {
        range
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase()
    };
    let acceptable = match accept.map(str::trim).filter(|a| !a.is_empty()) {
        None => true,
        Some(accept) => accept
            .split(',')
            .map(media)
            .any(|m| matches!(m.as_str(), "application/json" | "application/*" | "*/*")),
    };
    if !acceptable {
        return Err(StatusError::new(
            406,
            "NotAcceptable",
            "only the following media types are accepted: application/json",
        ));
    }
    if !body.is_empty() {
        let sent = content_type.map(media).unwrap_or_default();
        if sent != "application/json" {
            return Err(StatusError::new(
                415,
                "UnsupportedMediaType",
                format!("the body of the request was in an unknown format - accepted media types include: application/json (got {sent:?})"),
            ));
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn serve(
    core: &Arc<Core>,
    endpoint: Endpoint,
    who: &Identity,
    method: &str,
    path: &str,
    query: &str,
    body: &[u8],
    accept: Option<&str>,
    content_type: Option<&str>,
) -> HttpResponse {
    let control = path.starts_with("/emulator/");
    if !control && core.take_fault(path) {
        return status_response(&StatusError::new(
            500,
            "InternalError",
            "Internal error occurred: failure injected by the emulator",
        ));
    }
    let info = match parse_request(method, path, query) {
        Ok(i) => i,
        Err(e) => return status_response(&e),
    };
    let public = matches!(path, "/version" | "/healthz" | "/livez" | "/readyz");
    let discovery_path = method == "GET" && matches!(path.trim_end_matches('/'), "/api" | "/apis");
    if !public && !discovery_path && !core.rbac.allows(who, &info.attrs) {
        return status_response(&forbidden(who, &info.attrs));
    }
    if control {
        if endpoint == Endpoint::AntreaController {
            return status_response(&unserved());
        }
        return super::control::handle(core, method, path, &info.params, body);
    }
    if !serves(core, endpoint, &info.attrs.api_group, path) {
        return status_response(&unserved());
    }
    if let Err(e) = negotiate(accept, content_type, body) {
        return status_response(&e);
    }
    let restarting = lock(&core.controller_down_until).is_some_and(|until| std::time::Instant::now() < until);
    if restarting && (endpoint == Endpoint::AntreaController || info.attrs.api_group == CONTROLPLANE_GROUP) {
        return status_response(&StatusError::new(
            503,
            "ServiceUnavailable",
            "the server is currently unable to handle the request (antrea-controller is restarting)",
        ));
    }
    if discovery_path {
        return match discovery(endpoint, path) {
            Some(doc) => json_response(200, &doc),
            None => status_response(&unserved()),
        };
    }
    if public {
        return json_response(
            200,
            &json!({"major": "1", "minor": "36", "gitVersion": "v1.36.1-antrea-api-emulator"}),
        );
    }
    match route(core, who, &info, body) {
        Ok(resp) => resp,
        Err(e) => status_response(&e),
    }
}

fn parse_body(body: &[u8]) -> Result<Value, StatusError> {
    serde_json::from_slice(body).map_err(|e| StatusError::bad_request(format!("body is not valid JSON: {e}")))
}

fn list_json(kind: &str, api_version: &str, rv: u64, items: Vec<Value>) -> Value {
    json!({"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": rv.to_string()}, "items": items})
}

fn route(core: &Arc<Core>, who: &Identity, info: &ReqInfo, body: &[u8]) -> Result<HttpResponse, StatusError> {
    let a = &info.attrs;
    let not_found = || {
        StatusError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    };
    match (
        a.api_group.as_str(),
        info.version.as_str(),
        a.resource.as_str(),
        a.subresource.as_str(),
    ) {
        ("crd.antrea.io", "v1alpha1", "externalnodes", "") => external_nodes(core, who, info, body),
        ("crd.antrea.io", "v1alpha2", "externalentities", "") => match a.verb.as_str() {
            "list" => {
                let items: Vec<Value> = core.read(|s| s.list_external_entities());
                let items = items
                    .into_iter()
                    .filter(|e| a.namespace.is_empty() || e["metadata"]["namespace"] == a.namespace.as_str())
                    .collect();
                let rv = core.read(State::kube_rv);
                Ok(json_response(
                    200,
                    &list_json("ExternalEntityList", EE_API_VERSION, rv, items),
                ))
            }
            "get" => core
                .read(|s| {
                    s.list_external_entities().into_iter().find(|e| {
                        e["metadata"]["namespace"] == a.namespace.as_str()
                            && e["metadata"]["name"] == a.name.as_str()
                    })
                })
                .map(|e| json_response(200, &e))
                .ok_or_else(|| StatusError::not_found("crd.antrea.io", "externalentities", &a.name)),
            _ => Err(StatusError::new(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )),
        },
        ("crd.antrea.io", "v1beta1", "antreaagentinfos", "") => match a.verb.as_str() {
            "get" => Ok(json_response(200, &core.read(|s| s.get_agent_info(&a.name))?)),
            "list" => {
                let (items, rv) = core.read(|s| (s.list_agent_infos(), s.kube_rv()));
                Ok(json_response(
                    200,
                    &list_json("AntreaAgentInfoList", AAI_API_VERSION, rv, items),
                ))
            }
            "update" => {
                let body = parse_body(body)?;
                Ok(json_response(
                    200,
                    &core.mutate(|s| Ok((s.update_agent_info(&a.name, &body)?, vec![])))?,
                ))
            }
            "create" => {
                let body = parse_body(body)?;
                Ok(json_response(
                    201,
                    &core.mutate(|s| Ok((s.create_agent_info(&body)?, vec![])))?,
                ))
            }
            "delete" => {
                core.mutate(|s| Ok((s.delete_agent_info(&a.name)?, vec![])))?;
                Ok(json_response(200, &success_status()))
            }
            _ => Err(StatusError::new(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )),
        },
        ("controlplane.antrea.io", "v1beta2", "networkpolicies", "status") if a.verb == "create" => {
            let body = parse_body(body)?;
            core.mutate(|s| Ok((s.post_status(&a.name, &body)?, vec![])))?;
            Ok(raw_response(201, SUCCESS_STATUS_BODY.to_string()))
        }
        ("controlplane.antrea.io", "v1beta2", "nodestatssummaries", "") if a.verb == "create" => {
            let body = parse_body(body)?;
            core.mutate(|s| {
                s.post_summary(body);
                Ok(((), vec![]))
            })?;
            Ok(raw_response(
                201,
                format!(r#"{{"kind":"NodeStatsSummary","apiVersion":"{CP_API_VERSION}","metadata":{{}}}}"#),
            ))
        }
        ("controlplane.antrea.io", "v1beta2", res, "") => {
            let resource = CpResource::parse(res).ok_or_else(not_found)?;
            controlplane(core, who, resource, info)
        }
        _ => Err(not_found()),
    }
}

fn watch_timeout(core: &Core, info: &ReqInfo) -> Duration {
    let max = core.options.max_watch_duration;
    match info.param("timeoutSeconds").and_then(|t| t.parse::<u64>().ok()) {
        Some(t) if t > 0 => max.min(Duration::from_secs(t)),
        _ => max,
    }
}

fn watch_response(
    stream: impl futures::Stream<Item = Result<bytes::Bytes, actix_web::Error>> + 'static,
) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .insert_header(("Cache-Control", "no-cache, private"))
        .streaming(stream)
}

fn controlplane(
    core: &Arc<Core>,
    who: &Identity,
    resource: CpResource,
    info: &ReqInfo,
) -> Result<HttpResponse, StatusError> {
    let a = &info.attrs;
    match a.verb.as_str() {
        "get" => Ok(raw_response(200, core.read(|s| s.cp_get(resource, &a.name))?)),
        "list" => {
            // antrea-controller's LIST validates the field selector but applies none of it
            // (neither nodeName, §2.2, nor metadata.name): every object comes back.
            selector_terms(info, &["metadata.name", "nodeName"])?;
            let (items, rv) = core.read(|s| s.cp_snapshot(resource, None, None));
            // A typed list: kind, apiVersion, metadata, items (Go struct order).
            Ok(raw_response(
                200,
                format!(
                    r#"{{"kind":"{}List","apiVersion":"{CP_API_VERSION}","metadata":{{"resourceVersion":"{rv}"}},"items":[{}]}}"#,
                    resource.kind(),
                    items.join(",")
                ),
            ))
        }
        "watch" => {
            let sel = selector_terms(info, &["metadata.name", "nodeName"])?;
            let node = sel.get("nodeName").cloned();
            let name = sel.get("metadata.name").cloned();
            let initial_end = info.flag("sendInitialEvents") && info.flag("allowWatchBookmarks");
            // Snapshot and registration under one lock: no change can fall between them.
            let (lines, handle, rv) = {
                let st = lock(&core.state);
                let (objects, rv) = st.cp_snapshot(resource, node.as_deref(), name.as_deref());
                let mut lines: Vec<bytes::Bytes> =
                    objects.iter().map(|o| watch::event_line("ADDED", o)).collect();
                let bookmark = bookmark_with_annotations(resource.kind(), CP_API_VERSION, rv, initial_end);
                lines.push(watch::event_line("BOOKMARK", &bookmark));
                let target = WatchTarget::Controlplane { resource, node, name };
                let handle = core.registry.register(
                    who.user.clone(),
                    target,
                    rv,
                    st.epoch(),
                    core.options.watch_buffer,
                );
                (lines, handle, rv)
            };
            Ok(watch_response(watch::body(
                lines,
                handle,
                rv,
                watch_timeout(core, info),
                None,
            )))
        }
        _ => Err(StatusError::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )),
    }
}

fn external_nodes(
    core: &Arc<Core>,
    who: &Identity,
    info: &ReqInfo,
    body: &[u8],
) -> Result<HttpResponse, StatusError> {
    let a = &info.attrs;
    let ns = a.namespace.as_str();
    let ns_opt = (!ns.is_empty()).then_some(ns);
    match a.verb.as_str() {
        "get" => Ok(json_response(
            200,
            &core.read(|s| s.get_external_node(ns, &a.name))?,
        )),
        "list" => {
            let sel = selector_terms(info, &["metadata.name", "metadata.namespace"])?;
            let name = sel.get("metadata.name").map(String::as_str);
            let (items, rv) = core.read(|s| (s.list_external_nodes(ns, name), s.kube_rv()));
            Ok(json_response(
                200,
                &list_json("ExternalNodeList", EN_API_VERSION, rv, items),
            ))
        }
        "watch" => {
            let sel = selector_terms(info, &["metadata.name", "metadata.namespace"])?;
            let name = sel.get("metadata.name").cloned();
            let namespace = sel
                .get("metadata.namespace")
                .cloned()
                .unwrap_or_else(|| ns.to_string());
            let bookmarks_allowed = info.flag("allowWatchBookmarks");
            let send_initial = info.flag("sendInitialEvents");
            let rv_param = info.param("resourceVersion").unwrap_or_default();
            let from_rv = match rv_param {
                "" | "0" => None,
                v => Some(v.parse::<u64>().map_err(|_| {
                    StatusError::invalid(
                        "crd.antrea.io",
                        "ExternalNode",
                        "",
                        format!("resourceVersion: Invalid value: {v:?}"),
                    )
                })?),
            };
            let (lines, handle, rv) = {
                let st = lock(&core.state);
                let rv = st.kube_rv();
                let mut lines = Vec::new();
                match from_rv {
                    Some(from) if !send_initial => {
                        match st.en_events_since(from, &namespace, name.as_deref()) {
                            Ok(events) => {
                                lines.extend(
                                    events
                                        .iter()
                                        .map(|e| watch::event_line(e.event_type, &e.object.to_string())),
                                );
                            }
                            Err(gone) => {
                                // kube-apiserver answers 200 and ends the stream with an ERROR event.
                                let line = watch::event_line("ERROR", &gone.to_body());
                                return Ok(watch_response(futures::stream::iter([
                                    Ok::<_, actix_web::Error>(line),
                                ])));
                            }
                        }
                    }
                    _ => {
                        let objs = st.list_external_nodes(&namespace, name.as_deref());
                        lines.extend(objs.iter().map(|o| watch::event_line("ADDED", &o.to_string())));
                        if send_initial && bookmarks_allowed {
                            lines.push(watch::event_line(
                                "BOOKMARK",
                                &bookmark_with_annotations("ExternalNode", EN_API_VERSION, rv, true),
                            ));
                        }
                    }
                }
                let target = WatchTarget::ExternalNodes { namespace, name };
                let handle = core.registry.register(
                    who.user.clone(),
                    target,
                    rv,
                    st.epoch(),
                    core.options.watch_buffer,
                );
                (lines, handle, rv)
            };
            let bookmarks = bookmarks_allowed.then(|| Bookmarks {
                every: core.options.kube_bookmark_interval,
                kind: "ExternalNode",
                api_version: EN_API_VERSION,
            });
            Ok(watch_response(watch::body(
                lines,
                handle,
                rv,
                watch_timeout(core, info),
                bookmarks,
            )))
        }
        "create" => {
            let body = parse_body(body)?;
            Ok(json_response(
                201,
                &core.mutate(|s| s.create_external_node(&body, ns_opt))?,
            ))
        }
        "update" => {
            let body = parse_body(body)?;
            if body["metadata"]["name"].as_str() != Some(a.name.as_str()) {
                return Err(StatusError::bad_request(format!(
                    "the name of the object ({}) does not match the name on the URL ({})",
                    body["metadata"]["name"].as_str().unwrap_or_default(),
                    a.name
                )));
            }
            Ok(json_response(
                200,
                &core.mutate(|s| s.update_external_node(&body, ns_opt, true))?,
            ))
        }
        "delete" => Ok(json_response(
            200,
            &core.mutate(|s| s.delete_external_node(ns, &a.name))?,
        )),
        _ => Err(StatusError::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_info_like_kube_apiserver() {
        let i = parse_request(
            "GET",
            "/apis/crd.antrea.io/v1alpha1/namespaces/vm-ns/externalnodes",
            "fieldSelector=metadata.name%3Dvm1&watch=true",
        )
        .unwrap();
        assert_eq!(
            (
                i.attrs.verb.as_str(),
                i.attrs.namespace.as_str(),
                i.attrs.name.as_str()
            ),
            ("watch", "vm-ns", "vm1")
        );
        let i = parse_request(
            "POST",
            "/apis/controlplane.antrea.io/v1beta2/networkpolicies/p1/status",
            "",
        )
        .unwrap();
        assert_eq!(
            (
                i.attrs.verb.as_str(),
                i.attrs.resource.as_str(),
                i.attrs.subresource.as_str()
            ),
            ("create", "networkpolicies", "status")
        );
        let i = parse_request("GET", "/emulator/v1/calls", "").unwrap();
        assert_eq!(i.attrs.non_resource_path.as_deref(), Some("/emulator/v1/calls"));
        let i = parse_request("GET", "/api/v1/namespaces/kube-system/configmaps/antrea-ca", "").unwrap();
        assert_eq!(
            (i.attrs.api_group.as_str(), i.attrs.name.as_str()),
            ("", "antrea-ca")
        );
        assert!(parse_field_selector("nodeName!=x").is_err());
    }
}
