//! The HTTP handlers: health (`/livez`, `/readyz`, `/healthz`), `/metrics`, and the agent API's
//! JSON endpoints. Each request asks the supervisor for the current actor addresses and then the
//! actors themselves (bounded by [`collect::ASK_TIMEOUT`]); an actor being restarted gives a 503
//! for the endpoints that need it, never a hang.
//!
//! Agent API (unix socket; JSON; `?name=` filters like antctl's):
//! `GET /networkpolicies[?name=N]` (with `name`: 404 if unknown, and each rule carries its
//! counters), `GET /appliedtogroups[?name=N]`, `GET /addressgroups[?name=N]`,
//! `GET /ovsflows[?policy=N]`, `GET /agentinfo`, `GET /interfaces`; `GET /trace?...` is
//! [`super::trace`]'s.

use std::collections::{BTreeMap, BTreeSet};

use actix::Addr;
use actix_web::http::{header, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse};
use prometheus::Encoder as _;
use serde::{Deserialize, Serialize};
use tracing::{debug, warn};

use super::collect::{self, Collected, Depth};
use crate::actors::flow_installer::query::{FlowDump, GetFlowDump};
use crate::actors::policy_cache::query::{GetGroups, GetNetworkPolicies, GroupKind};
use crate::actors::Supervisor;
use crate::messages::{ActorKind, GetRuleStats, RuleStatsSnapshot};
use crate::ovs::openflow::render::{render_flows, NameMap};
use crate::ovs::openflow::{Action, Flow};
use crate::policy::pipeline::fields::{ct_label, reg};
use crate::policy::pipeline::{self, table};
use crate::policy::rule::Direction;
use crate::telemetry::AgentMetrics;
use crate::views::{
    ActorView, AgentInfoView, ApiError, FlowsView, GroupView, InterfaceView, NetworkPolicyView, RuleCounters,
};

/// What every handler needs.
#[derive(Clone, Debug)]
pub struct ApiState {
    pub supervisor: Addr<Supervisor>,
    pub metrics: AgentMetrics,
    pub node_name: String,
    pub namespace: String,
    pub ovs_bridge: String,
    /// The FQDN controller's cache and counters.
    pub fqdn: crate::fqdn::FqdnHandle,
    /// ovs-vswitchd's control socket, for `/trace` (`None`: the endpoint answers 503).
    pub vswitchd: Option<std::sync::Arc<crate::ovs::vswitchd::Vswitchd>>,
}

/// The bearer token `/metrics` requires on this listener, if any.
#[derive(Clone, Debug, Default)]
pub struct MetricsAuth(pub Option<String>);

pub(super) fn error(status: StatusCode, msg: impl Into<String>) -> HttpResponse {
    HttpResponse::build(status).json(ApiError { error: msg.into() })
}

pub(super) fn unavailable(what: &str) -> HttpResponse {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("{what} is not available right now (being restarted or busy); retry"),
    )
}

fn json<T: Serialize>(v: &T) -> HttpResponse {
    HttpResponse::Ok().json(v)
}

/// Constant-time comparison, so the token cannot be guessed byte by byte from response times.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn authorized(req: &HttpRequest, auth: &MetricsAuth) -> bool {
    let Some(token) = &auth.0 else {
        return true;
    };
    req.headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|given| same_secret(given.trim().as_bytes(), token.as_bytes()))
}

fn health_response(report: &collect::HealthReport, endpoint: &str) -> HttpResponse {
    let status = if report.ok() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    HttpResponse::build(status)
        .content_type("text/plain; charset=utf-8")
        .body(report.body(endpoint))
}

pub async fn livez(state: web::Data<ApiState>) -> HttpResponse {
    let c = collect::collect(&state.supervisor, Depth::Supervisor).await;
    health_response(&collect::liveness(c.report.as_ref()), "livez")
}

pub async fn readyz(state: web::Data<ApiState>) -> HttpResponse {
    let c = collect::collect(&state.supervisor, Depth::Status).await;
    health_response(&collect::readiness(&c), "readyz")
}

/// The whole `/metrics` page: the registry's event-driven metrics, then the scrape-time ones.
pub fn metrics_text(metrics: &AgentMetrics, c: &Collected) -> String {
    if let Some(r) = &c.report {
        collect::sync_restart_counter(metrics, r);
    }
    let mut out = String::new();
    if let Err(e) = prometheus::TextEncoder::new().encode_utf8(&metrics.registry.gather(), &mut out) {
        warn!("cannot encode the metrics registry: {e}");
    }
    collect::render_metrics(c, &mut out);
    out
}

pub async fn metrics(
    req: HttpRequest,
    state: web::Data<ApiState>,
    auth: web::Data<MetricsAuth>,
) -> HttpResponse {
    if !authorized(&req, &auth) {
        return HttpResponse::Unauthorized()
            .insert_header((header::WWW_AUTHENTICATE, "Bearer"))
            .content_type("text/plain; charset=utf-8")
            .body("Unauthorized\n");
    }
    let c = collect::collect(&state.supervisor, Depth::Full).await;
    HttpResponse::Ok()
        .content_type(prometheus::TextEncoder::new().format_type())
        .body(metrics_text(&state.metrics, &c))
}

#[derive(Debug, Default, Deserialize)]
pub struct NameQuery {
    pub name: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct FlowsQuery {
    pub policy: Option<String>,
}

pub(super) async fn ask<T, E: std::fmt::Display>(
    fut: impl std::future::Future<Output = Result<T, E>>,
) -> Option<T> {
    match tokio::time::timeout(collect::ASK_TIMEOUT, fut).await {
        Ok(Ok(v)) => Some(v),
        Ok(Err(e)) => {
            debug!("actor did not answer: {e}");
            None
        }
        Err(_) => None,
    }
}

/// Adds each rule's counters (summed over the stats entries of the same policy, direction and
/// rule name: named ports may split one rule into several installed rules).
pub fn attach_counters(views: &mut [NetworkPolicyView], stats: &RuleStatsSnapshot) {
    let mut by_rule: BTreeMap<(&str, &str, &str), RuleCounters> = BTreeMap::new();
    for s in &stats.rules {
        let dir = match s.direction {
            Direction::In => "In",
            Direction::Out => "Out",
        };
        let e = by_rule
            .entry((s.policy.uid.as_str(), dir, s.rule_name.as_str()))
            .or_default();
        e.packets += s.packets;
        e.bytes += s.bytes;
        e.sessions += s.sessions;
    }
    for v in views {
        let uid = v.rules_uid().to_string();
        for r in &mut v.rules {
            r.stats = by_rule
                .get(&(uid.as_str(), r.direction.as_str(), r.name.as_str()))
                .copied();
        }
    }
}

async fn policies(state: &ApiState, name: Option<String>) -> Result<Vec<NetworkPolicyView>, HttpResponse> {
    let peers = collect::peers(&state.supervisor)
        .await
        .ok_or_else(|| unavailable("the supervisor"))?;
    let cache = peers.policy.ok_or_else(|| unavailable("the policy cache"))?;
    let views = ask(cache.send(GetNetworkPolicies { name: name.clone() }))
        .await
        .ok_or_else(|| unavailable("the policy cache"))?;
    if let Some(n) = &name {
        if views.is_empty() {
            return Err(error(
                StatusCode::NOT_FOUND,
                format!("NetworkPolicy {n:?} not found"),
            ));
        }
    }
    Ok(views)
}

pub async fn network_policies(state: web::Data<ApiState>, q: web::Query<NameQuery>) -> HttpResponse {
    let name = q.into_inner().name.filter(|n| !n.is_empty());
    let with_counters = name.is_some();
    let mut views = match policies(&state, name).await {
        Ok(v) => v,
        Err(resp) => return resp,
    };
    if with_counters {
        let stats = match collect::peers(&state.supervisor).await.and_then(|p| p.flows) {
            None => Err("the flow installer is not running".to_string()),
            Some(flows) => match tokio::time::timeout(collect::ASK_TIMEOUT, flows.send(GetRuleStats)).await {
                Ok(Ok(r)) => r.map_err(|e| e.to_string()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("the flow installer did not answer in time".to_string()),
            },
        };
        match stats {
            Ok(s) => attach_counters(&mut views, &s),
            Err(e) => {
                for v in &mut views {
                    v.stats_error = Some(e.clone());
                }
            }
        }
    }
    json(&views)
}

async fn groups(state: web::Data<ApiState>, q: web::Query<NameQuery>, kind: GroupKind) -> HttpResponse {
    let name = q.into_inner().name.filter(|n| !n.is_empty());
    let Some(cache) = collect::peers(&state.supervisor).await.and_then(|p| p.policy) else {
        return unavailable("the policy cache");
    };
    let Some(views): Option<Vec<GroupView>> = ask(cache.send(GetGroups {
        kind,
        name: name.clone(),
    }))
    .await
    else {
        return unavailable("the policy cache");
    };
    if let (Some(n), true) = (&name, views.is_empty()) {
        let what = match kind {
            GroupKind::AddressGroup => "AddressGroup",
            GroupKind::AppliedToGroup => "AppliedToGroup",
        };
        return error(StatusCode::NOT_FOUND, format!("{what} {n:?} not found"));
    }
    json(&views)
}

pub async fn applied_to_groups(state: web::Data<ApiState>, q: web::Query<NameQuery>) -> HttpResponse {
    groups(state, q, GroupKind::AppliedToGroup).await
}

pub async fn address_groups(state: web::Data<ApiState>, q: web::Query<NameQuery>) -> HttpResponse {
    groups(state, q, GroupKind::AddressGroup).await
}

/// Whether `f` belongs to one of the rules with conjunction ids `ids`: its action flow
/// (`conj_id=`), a clause flow (`conjunction(id,...)`), or a metric flow (the id in `ct_label`
/// for Allow rules, in `reg3` for Drop/Reject rules).
pub fn is_rule_flow(f: &Flow, ids: &BTreeSet<u32>) -> bool {
    if f.matches.conj_id.is_some_and(|c| ids.contains(&c)) {
        return true;
    }
    if f.actions
        .iter()
        .any(|a| matches!(a, Action::Conjunction { id, .. } if ids.contains(id)))
    {
        return true;
    }
    if f.table != table::INGRESS_METRIC && f.table != table::EGRESS_METRIC {
        return false;
    }
    if let Some(label) = f.matches.ct_label {
        let mask = label.mask.unwrap_or(u128::MAX);
        for (word_mask, shift) in [
            (ct_label::INGRESS_MASK, ct_label::INGRESS_SHIFT),
            (ct_label::EGRESS_MASK, ct_label::EGRESS_SHIFT),
        ] {
            if mask & word_mask == word_mask {
                let id = ((label.value & word_mask) >> shift) as u32;
                if ids.contains(&id) {
                    return true;
                }
            }
        }
    }
    f.matches
        .regs
        .get(&reg::DENY_CONJ)
        .is_some_and(|r| r.mask.is_none() && ids.contains(&r.value))
}

/// The flows of `dump` (those of the rules `ids` if given), rendered and sorted like
/// `ovs-ofctl dump-flows`: by table, then highest priority first.
pub fn render_dump(dump: &FlowDump, ids: Option<&BTreeSet<u32>>) -> Vec<String> {
    let mut flows: Vec<&Flow> = dump
        .flows
        .iter()
        .filter(|f| ids.is_none_or(|ids| is_rule_flow(f, ids)))
        .collect();
    flows.sort_by(|a, b| {
        a.table
            .cmp(&b.table)
            .then(b.priority.cmp(&a.priority))
            .then(a.cmp(b))
    });
    let names = NameMap {
        tables: pipeline::table_names().into_iter().collect(),
        ports: dump
            .interfaces
            .iter()
            .flat_map(|i| {
                [
                    (i.ofport, i.name.clone()),
                    (i.uplink_ofport, i.uplink_name.clone()),
                ]
            })
            .collect(),
    };
    render_flows(flows, &names)
}

pub async fn ovs_flows(state: web::Data<ApiState>, q: web::Query<FlowsQuery>) -> HttpResponse {
    let policy = q.into_inner().policy.filter(|n| !n.is_empty());
    let uids: Option<BTreeSet<String>> = match &policy {
        None => None,
        Some(name) => match policies(&state, Some(name.clone())).await {
            Ok(views) => Some(views.iter().map(|v| v.rules_uid().to_string()).collect()),
            Err(resp) => return resp,
        },
    };
    let Some(flows) = collect::peers(&state.supervisor).await.and_then(|p| p.flows) else {
        return unavailable("the flow installer");
    };
    let Some(dump) = ask(flows.send(GetFlowDump {
        policy_uids: uids.clone(),
    }))
    .await
    else {
        return unavailable("the flow installer");
    };
    let ids: Option<BTreeSet<u32>> = uids.as_ref().map(|uids| {
        dump.conjunctions
            .iter()
            .filter(|c| uids.contains(&c.policy.uid))
            .map(|c| c.conj_id)
            .collect()
    });
    json(&FlowsView {
        policy,
        conjunction_ids: ids.iter().flatten().copied().collect(),
        flows: render_dump(&dump, ids.as_ref()),
    })
}

/// The interfaces in the interface manager's status.
fn interfaces_of(c: &Collected) -> Option<Vec<InterfaceView>> {
    Some(
        c.interface_manager()?
            .interfaces
            .iter()
            .map(|a| InterfaceView {
                name: a.name.clone(),
                ofport: a.ofport,
                uplink_name: a.uplink_name.clone(),
                uplink_ofport: a.uplink_ofport,
                ips: a.ips.clone(),
                external_entity: crate::views::EntityView {
                    namespace: a.entity.namespace.clone(),
                    name: a.entity.name.clone(),
                },
            })
            .collect(),
    )
}

pub async fn interfaces(state: web::Data<ApiState>) -> HttpResponse {
    let c = collect::collect(&state.supervisor, Depth::Status).await;
    match interfaces_of(&c) {
        Some(list) => json(&list),
        None => unavailable("the interface manager"),
    }
}

/// `/fqdncache[?name=N]`: the FQDN cache, one row per (name, address); `name` may be a
/// wildcard selector (`*.example.com`).
pub async fn fqdn_cache(state: web::Data<ApiState>, q: web::Query<NameQuery>) -> HttpResponse {
    let filter = q.name.as_deref().map(crate::fqdn::normalize);
    let rows: Vec<crate::views::FqdnCacheView> = state
        .fqdn
        .records()
        .iter()
        .filter(|r| {
            filter
                .as_deref()
                .is_none_or(|f| crate::fqdn::selector::matches(f, &r.name))
        })
        .map(|r| crate::views::FqdnCacheView {
            fqdn_name: r.name.clone(),
            ip_address: r.ip.to_string(),
            expiration_time: chrono::DateTime::<chrono::Utc>::from_timestamp_millis(r.expires_at_ms as i64)
                .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
                .unwrap_or_default(),
        })
        .collect();
    json(&rows)
}

/// `/fqdnstats`: the FQDN controller's counters and its recent holds (packet-in → commit →
/// resume, for the benchmark and for diagnosis).
pub async fn fqdn_stats(state: web::Data<ApiState>) -> HttpResponse {
    json(&serde_json::json!({
        "counts": state.fqdn.stats.snapshot(),
        "holds": state.fqdn.stats.holds(),
    }))
}

/// `/agentinfo` from one collection.
pub fn agent_info(state: &ApiState, c: &Collected) -> AgentInfoView {
    let actors: Vec<ActorView> = ActorKind::ALL
        .iter()
        .map(|&kind| {
            let status = c.statuses.get(&kind);
            ActorView {
                actor: kind.as_str().to_string(),
                alive: c
                    .report
                    .as_ref()
                    .and_then(|r| r.alive.get(&kind).copied())
                    .unwrap_or(false),
                healthy: status.map(|s| s.healthy),
                restarts: c
                    .report
                    .as_ref()
                    .and_then(|r| r.restarts.get(&kind).copied())
                    .unwrap_or(0),
                last_error: status.and_then(|s| s.last_error.clone()),
            }
        })
        .collect();
    let status = if c.report.is_none() {
        "Unknown"
    } else if actors.iter().all(|a| a.alive && a.healthy == Some(true)) {
        "Healthy"
    } else {
        "Unhealthy"
    };
    let counts = c.counts.clone().unwrap_or_default();
    let flows = c
        .flow_installer()
        .map_or(0, |fi| fi.flows_per_table.values().sum::<usize>());
    AgentInfoView {
        version: crate::version::VERSION.to_string(),
        node_name: state.node_name.clone(),
        namespace: state.namespace.clone(),
        ovs_bridge: state.ovs_bridge.clone(),
        status: status.to_string(),
        ready: collect::readiness(c).ok(),
        network_policies: counts.network_policies,
        address_groups: counts.address_groups,
        applied_to_groups: counts.applied_to_groups,
        local_pods: 0,
        interfaces: interfaces_of(c).map_or(0, |l| l.len()),
        flows,
        controller_connected: counts.controller_connected,
        actors,
    }
}

pub async fn agentinfo(state: web::Data<ApiState>) -> HttpResponse {
    let c = collect::collect(&state.supervisor, Depth::Status).await;
    json(&agent_info(&state, &c))
}

/// Routes of the metrics listener (TCP): `/metrics` and the health paths.
pub fn metrics_routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/metrics", web::get().to(metrics))
        .route("/livez", web::get().to(livez))
        .route("/healthz", web::get().to(livez))
        .route("/readyz", web::get().to(readyz));
}

/// Routes of the agent API (unix socket): everything.
pub fn api_routes(cfg: &mut web::ServiceConfig) {
    metrics_routes(cfg);
    cfg.route("/networkpolicies", web::get().to(network_policies))
        .route("/appliedtogroups", web::get().to(applied_to_groups))
        .route("/addressgroups", web::get().to(address_groups))
        .route("/ovsflows", web::get().to(ovs_flows))
        .route("/agentinfo", web::get().to(agentinfo))
        .route("/interfaces", web::get().to(interfaces))
        .route("/fqdncache", web::get().to(fqdn_cache))
        .route("/fqdnstats", web::get().to(fqdn_stats))
        .route("/trace", web::get().to(super::trace::trace));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ovs::openflow::Match;

    #[test]
    fn token_comparison() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"abcd"));
    }

    #[test]
    fn rule_flows_are_recognized_by_conjunction_id() {
        let ids: BTreeSet<u32> = [7].into_iter().collect();
        let action = Flow::new(table::ANTREA_POLICY_INGRESS_RULE, 14000, Match::new().conj_id(7));
        assert!(is_rule_flow(&action, &ids));
        let other = Flow::new(table::ANTREA_POLICY_INGRESS_RULE, 14000, Match::new().conj_id(8));
        assert!(!is_rule_flow(&other, &ids));
        let clause =
            Flow::new(table::ANTREA_POLICY_INGRESS_RULE, 14000, Match::new()).action(Action::Conjunction {
                id: 7,
                clause: 1,
                n_clauses: 2,
            });
        assert!(is_rule_flow(&clause, &ids));
        let mut m = Match::new();
        m.ct_label = Some(crate::ovs::openflow::Masked::new(
            7u128 << 32,
            0xffff_ffffu128 << 32,
        ));
        assert!(is_rule_flow(
            &Flow::new(table::EGRESS_METRIC, 200, m.clone()),
            &ids
        ));
        assert!(!is_rule_flow(&Flow::new(table::EGRESS_RULE, 200, m), &ids));
        let deny = Flow::new(
            table::INGRESS_METRIC,
            200,
            Match::new().reg(0, 0x400, Some(0x400)).reg(3, 7, None),
        );
        assert!(is_rule_flow(&deny, &ids));
    }
}
