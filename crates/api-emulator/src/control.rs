//! The control API under `/emulator/v1/` (admin token only: RBAC grants non-resource URLs to
//! `system:masters` alone): what a test or a person drives the emulator with, mirroring the
//! in-process methods of [`super::Emulator`].
//!
//! | Method + path | Body / answer |
//! |---|---|
//! | `GET /emulator/v1/externalnodes` | list of stored ExternalNodes |
//! | `POST /emulator/v1/externalnodes` | ExternalNode JSON; created or replaced (controller reactions run) |
//! | `DELETE /emulator/v1/externalnodes/{ns}/{name}` | deletes it (and its ExternalEntity, AntreaAgentInfo) |
//! | `GET`/`POST /emulator/v1/externalentities`, `DELETE .../{ns}/{name}` | same for ExternalEntities |
//! | `POST /emulator/v1/controlplane` | one controlplane object, an array, or `{"items": [...]}`; upserted |
//! | `GET /emulator/v1/controlplane/{resource}` | `[{"object": ..., "span": [...]}]` (unfiltered) |
//! | `DELETE /emulator/v1/controlplane/{resource}/{name}` | name may contain `/` |
//! | `GET /emulator/v1/antreaagentinfos[/{name}]` | AntreaAgentInfo(s) |
//! | `GET /emulator/v1/statuses` | last NetworkPolicyStatus per (policy, node) |
//! | `GET /emulator/v1/statssummaries` | every NodeStatsSummary posted |
//! | `GET`/`DELETE /emulator/v1/calls` | recorded calls / clear them |
//! | `GET /emulator/v1/watches` | `{"watches": [...], "slowStops": n}` |
//! | `POST /emulator/v1/watches/close` | ends every watch |
//! | `POST /emulator/v1/faults` | `{"pathPrefix": "/apis/...", "count": n}`: next n requests → 500 |
//! | `POST /emulator/v1/restart` | antrea-controller restart |
//! | `POST /emulator/v1/kube/compact` | forget ExternalNode history (older watches → 410) |

use std::sync::Arc;

use actix_web::HttpResponse;
use serde_json::{json, Value};

use super::server::{json_response, status_response, Core};
use super::store::{success_status, CpObject, CpResource, StatusError};

fn parse(body: &[u8]) -> Result<Value, StatusError> {
    serde_json::from_slice(body).map_err(|e| StatusError::bad_request(format!("body is not valid JSON: {e}")))
}

/// Decodes one object, an array of objects, or a `{"items": [...]}` list.
pub fn controlplane_objects(v: Value) -> Result<Vec<CpObject>, StatusError> {
    let items = match v {
        Value::Array(items) => items,
        Value::Object(mut m) if m.contains_key("items") && !m.contains_key("kind") => match m.remove("items")
        {
            Some(Value::Array(items)) => items,
            _ => return Err(StatusError::bad_request("items must be an array")),
        },
        Value::Object(m)
            if m.get("items").is_some()
                && m.get("kind")
                    .and_then(Value::as_str)
                    .is_some_and(|k| k.ends_with("List")) =>
        {
            m.get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        }
        other => vec![other],
    };
    items.into_iter().map(CpObject::from_json).collect()
}

pub fn handle(
    core: &Arc<Core>,
    method: &str,
    path: &str,
    params: &[(String, String)],
    body: &[u8],
) -> HttpResponse {
    match route(core, method, path, params, body) {
        Ok((code, v)) => json_response(code, &v),
        Err(e) => status_response(&e),
    }
}

fn route(
    core: &Arc<Core>,
    method: &str,
    path: &str,
    _params: &[(String, String)],
    body: &[u8],
) -> Result<(u16, Value), StatusError> {
    let rest = path.strip_prefix("/emulator/v1/").unwrap_or_default();
    let segs: Vec<&str> = rest.splitn(3, '/').collect();
    let not_found = || {
        StatusError::new(
            404,
            "NotFound",
            format!("no control API endpoint {method} {path}"),
        )
    };
    match (method, segs.as_slice()) {
        ("GET", ["externalnodes"]) => Ok((200, json!(core.read(|s| s.list_external_nodes("", None))))),
        ("POST", ["externalnodes"]) => {
            let body = parse(body)?;
            Ok((200, core.mutate(|s| s.apply_external_node(&body))?))
        }
        ("DELETE", ["externalnodes", ns, name]) => {
            Ok((200, core.mutate(|s| s.delete_external_node(ns, name))?))
        }
        ("GET", ["externalentities"]) => Ok((200, json!(core.read(|s| s.list_external_entities())))),
        ("POST", ["externalentities"]) => {
            let body = parse(body)?;
            Ok((200, core.mutate(|s| s.apply_external_entity(&body))?))
        }
        ("DELETE", ["externalentities", ns, name]) => {
            core.mutate(|s| Ok(((), s.delete_external_entity(ns, name)?)))?;
            Ok((200, success_status()))
        }
        ("POST", ["controlplane"]) => {
            let objects = controlplane_objects(parse(body)?)?;
            core.mutate(|s| Ok(((), s.upsert_controlplane(objects))))?;
            Ok((200, success_status()))
        }
        ("GET", ["controlplane", res]) => {
            let resource = CpResource::parse(res).ok_or_else(not_found)?;
            let list = core.read(|s| {
                let (objects, _) = s.cp_snapshot(resource, None, None);
                objects
                    .into_iter()
                    .map(|raw| {
                        let o: Value = serde_json::from_str(&raw).unwrap_or_default();
                        let name = o["metadata"]["name"].as_str().unwrap_or_default().to_string();
                        json!({"object": o, "span": s.cp_span(resource, &name).unwrap_or_default()})
                    })
                    .collect::<Vec<_>>()
            });
            Ok((200, json!(list)))
        }
        ("DELETE", ["controlplane", res, name]) => {
            let resource = CpResource::parse(res).ok_or_else(not_found)?;
            core.mutate(|s| Ok(((), s.delete_controlplane(resource, name)?)))?;
            Ok((200, success_status()))
        }
        ("GET", ["antreaagentinfos"]) => Ok((200, json!(core.read(|s| s.list_agent_infos())))),
        ("GET", ["antreaagentinfos", name]) => Ok((200, core.read(|s| s.get_agent_info(name))?)),
        ("GET", ["statuses"]) => Ok((200, json!(core.read(|s| s.statuses())))),
        ("GET", ["statssummaries"]) => Ok((200, json!(core.read(|s| s.summaries())))),
        ("GET", ["calls"]) => Ok((200, json!(core.calls()))),
        ("DELETE", ["calls"]) => {
            core.clear_calls();
            Ok((200, success_status()))
        }
        ("GET", ["watches"]) => Ok((
            200,
            json!({"watches": core.registry.list(), "slowStops": core.registry.slow_stops()}),
        )),
        ("POST", ["watches", "close"]) => Ok((200, json!({"closed": core.close_watches()}))),
        ("POST", ["faults"]) => {
            let body = parse(body)?;
            let prefix = body["pathPrefix"].as_str().unwrap_or("/");
            let count = body["count"].as_u64().unwrap_or(1);
            core.fail_next(prefix, u32::try_from(count).unwrap_or(u32::MAX));
            Ok((200, success_status()))
        }
        ("POST", ["restart"]) => {
            core.restart_controller();
            Ok((200, success_status()))
        }
        ("POST", ["kube", "compact"]) => {
            core.mutate(|s| {
                s.compact_kube_history();
                Ok(((), vec![]))
            })?;
            Ok((200, success_status()))
        }
        _ => Err(not_found()),
    }
}
