//! Scrape-time collection: asks the supervisor and the actors for their current state (each
//! question bounded by a timeout, so a restarting or busy actor only leaves its part out), then
//! decides liveness and readiness and renders the metrics computed from those answers in the
//! Prometheus text format. The pure part ([`render_rule_families`], [`render_metrics`],
//! [`liveness`], [`readiness`]) is separate from the asking ([`collect`]) so it can be tested and
//! benchmarked without actors.
//!
//! Consistency: every metric family comes from one actor answer (one message, handled at one
//! moment), so a scrape during a resync or a rule deletion shows each family as it was at one
//! point; per-rule series are rebuilt from the current [`RuleStatsSnapshot`] on every scrape, so a
//! deleted rule's series disappear with it.
//!
//! Liveness (`/livez`): the supervisor answers and reports every actor alive. Readiness
//! (`/readyz`): the first sync is realized, i.e. the ExternalNode was read, the interface
//! manager recovered its state and attached every interface of the ExternalNode without error
//! (none when it is absent), the policy source delivered its first complete view, and the flow
//! installer committed its first full sync on the current OpenFlow connection. Readiness is
//! evaluated anew on every request (after an OVS restart it is lost until the replay commits).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use actix::Addr;
use tracing::debug;

use crate::actors::policy_cache::query::{GetPolicyCounts, PolicyCounts};
use crate::actors::supervisor::{GetPeers, GetSupervisorReport, SupervisorReport};
use crate::actors::{Peers, Supervisor};
use crate::fqdn::FqdnCounts;
use crate::messages::{
    ActorDetail, ActorKind, ActorStatus, ExternalNodeState, ExternalNodeWatcherStatus, FlowInstallerStatus,
    GetRuleStats, InterfaceManagerStatus, PolicyCacheStatus, RuleStatsSnapshot, StatusQuery,
};
use crate::policy::rule::{Direction, RuleAction};
use crate::telemetry::AgentMetrics;
use crate::views::tier_name;

/// How long one question to one actor may take before its part of the answer is left out.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(3);

/// What the actors said, at (nearly) one moment. Missing parts are `None`/absent.
#[derive(Clone, Debug, Default)]
pub struct Collected {
    /// `None`: the supervisor did not answer (the process is wedged or shutting down).
    pub report: Option<SupervisorReport>,
    /// The actors that answered their status query.
    pub statuses: BTreeMap<ActorKind, ActorStatus>,
    pub counts: Option<PolicyCounts>,
    /// `None` when not asked for, or the switch could not be read (see `rule_stats_error`).
    pub rule_stats: Option<RuleStatsSnapshot>,
    pub rule_stats_error: Option<String>,
}

/// What to ask besides the supervisor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Depth {
    /// The supervisor report only (`/livez`).
    Supervisor,
    /// Plus every actor's status and the policy counts (`/readyz`, `/agentinfo`).
    Status,
    /// Plus the per-rule counters from the switch (`/metrics`).
    Full,
}

async fn bounded<T, E: std::fmt::Display>(
    what: &str,
    fut: impl std::future::Future<Output = Result<T, E>>,
) -> Option<T> {
    match tokio::time::timeout(ASK_TIMEOUT, fut).await {
        Ok(Ok(v)) => Some(v),
        Ok(Err(e)) => {
            debug!("{what}: no answer ({e}); left out");
            None
        }
        Err(_) => {
            debug!("{what}: no answer within {ASK_TIMEOUT:?}; left out");
            None
        }
    }
}

async fn status_of<A>(addr: Option<Addr<A>>, kind: ActorKind) -> Option<ActorStatus>
where
    A: actix::Actor + actix::Handler<StatusQuery>,
    A::Context: actix::dev::ToEnvelope<A, StatusQuery>,
{
    let Some(addr) = addr else {
        debug!(actor = %kind, "not running (restarting); status left out");
        return None;
    };
    bounded(kind.as_str(), addr.send(StatusQuery)).await
}

/// The supervisor's current addresses of the actors.
pub async fn peers(supervisor: &Addr<Supervisor>) -> Option<Peers> {
    bounded("supervisor peers", supervisor.send(GetPeers)).await
}

/// Asks the supervisor and (per `depth`) the actors, concurrently.
pub async fn collect(supervisor: &Addr<Supervisor>, depth: Depth) -> Collected {
    let mut out = Collected {
        report: bounded("supervisor report", supervisor.send(GetSupervisorReport)).await,
        ..Collected::default()
    };
    if depth == Depth::Supervisor {
        return out;
    }
    let Some(p) = peers(supervisor).await else {
        return out;
    };
    let want_stats = depth == Depth::Full;
    let stats = async {
        match (&p.flows, want_stats) {
            (Some(flows), true) => match tokio::time::timeout(ASK_TIMEOUT, flows.send(GetRuleStats)).await {
                Ok(Ok(Ok(s))) => (Some(s), None),
                Ok(Ok(Err(e))) => (None, Some(e.to_string())),
                Ok(Err(e)) => (None, Some(format!("flow installer: {e}"))),
                Err(_) => (None, Some("flow installer: no answer in time".to_string())),
            },
            (None, true) => (None, Some("flow installer not running".to_string())),
            _ => (None, None),
        }
    };
    let counts = async {
        match &p.policy {
            Some(a) => bounded("policy counts", a.send(GetPolicyCounts)).await,
            None => None,
        }
    };
    let (watcher, interfaces, policy, flows, reporter, counts, (rule_stats, rule_stats_error)) = futures::join!(
        status_of(p.watcher.clone(), ActorKind::ExternalNodeWatcher),
        status_of(p.interfaces.clone(), ActorKind::InterfaceManager),
        status_of(p.policy.clone(), ActorKind::PolicyCache),
        status_of(p.flows.clone(), ActorKind::FlowInstaller),
        status_of(p.reporter.clone(), ActorKind::AgentInfoReporter),
        counts,
        stats,
    );
    if let Some(e) = &rule_stats_error {
        debug!("rule counters left out: {e}");
    }
    for s in [watcher, interfaces, policy, flows, reporter]
        .into_iter()
        .flatten()
    {
        out.statuses.insert(s.actor, s);
    }
    out.counts = counts;
    out.rule_stats = rule_stats;
    out.rule_stats_error = rule_stats_error;
    out
}

/// One named check of a health endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    /// `None` = passed; `Some(why)` = failed.
    pub failure: Option<String>,
}

/// The outcome of `/livez` or `/readyz`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthReport {
    pub checks: Vec<Check>,
}

impl HealthReport {
    pub fn ok(&self) -> bool {
        self.checks.iter().all(|c| c.failure.is_none())
    }

    /// Kubernetes' verbose health format: `[+]name ok` / `[-]name failed: why`, then a verdict.
    pub fn body(&self, endpoint: &str) -> String {
        let mut s = String::new();
        for c in &self.checks {
            match &c.failure {
                None => {
                    let _ = writeln!(s, "[+]{} ok", c.name);
                }
                Some(why) => {
                    let _ = writeln!(s, "[-]{} failed: {why}", c.name);
                }
            }
        }
        let verdict = if self.ok() { "passed" } else { "failed" };
        let _ = writeln!(s, "{endpoint} check {verdict}");
        s
    }

    /// The first failure, for a one-line status.
    pub fn first_failure(&self) -> Option<String> {
        self.checks
            .iter()
            .find_map(|c| c.failure.as_ref().map(|f| format!("{}: {f}", c.name)))
    }
}

fn check(name: &str, failure: Option<String>) -> Check {
    Check {
        name: name.to_string(),
        failure,
    }
}

/// `/livez`: the supervisor answered and every actor is alive.
pub fn liveness(report: Option<&SupervisorReport>) -> HealthReport {
    let Some(report) = report else {
        return HealthReport {
            checks: vec![check("supervisor", Some("no answer".into()))],
        };
    };
    let mut checks = vec![check("supervisor", None)];
    for kind in ActorKind::ALL {
        let alive = report.alive.get(&kind).copied().unwrap_or(false);
        checks.push(check(
            kind.as_str(),
            (!alive).then(|| "not running (being restarted)".to_string()),
        ));
    }
    HealthReport { checks }
}

/// The FQDN controller's metrics (upstream's cache size gauge, evictions by reason, and this
/// agent's DNS interception counters).
fn render_fqdn(f: &FqdnCounts, out: &mut String) {
    gauge(
        out,
        "antrea_agent_fqdn_cache_size",
        "Number of names in the FQDN cache.",
        f.cache_size,
    );
    header(
        out,
        "antrea_agent_fqdn_cache_evictions_total",
        "counter",
        "Names that left the FQDN cache, by reason (expired, cache_full, selector_full, unselected).",
    );
    for (reason, n) in &f.evictions {
        sample(
            out,
            "antrea_agent_fqdn_cache_evictions_total",
            &[("reason", reason)],
            n,
        );
    }
    header(
        out,
        "antrea_vm_agent_fqdn_dns_responses_total",
        "counter",
        "Intercepted DNS responses, by outcome: all received, malformed (passed through unparsed), answers for names no rule selects, new addresses added to rules.",
    );
    for (outcome, n) in [
        ("received", f.responses),
        ("malformed", f.malformed),
        ("unwanted_answers", f.unwanted_answers),
        ("ips_added", f.ips_added),
    ] {
        sample(
            out,
            "antrea_vm_agent_fqdn_dns_responses_total",
            &[("outcome", outcome)],
            n,
        );
    }
    header(
        out,
        "antrea_vm_agent_fqdn_requeries_total",
        "counter",
        "Names the agent asked its DNS server again before they expired, by outcome: answered (possibly with no address), failed (no server answered; retried while the name is cached).",
    );
    for (outcome, n) in [("answered", f.requeries_answered), ("failed", f.requery_failures)] {
        sample(
            out,
            "antrea_vm_agent_fqdn_requeries_total",
            &[("outcome", outcome)],
            n,
        );
    }
    header(
        out,
        "antrea_vm_agent_fqdn_flow_commit_failures_total",
        "counter",
        "FQDN flow bundles the switch refused (the DNS response was released anyway).",
    );
    sample(
        out,
        "antrea_vm_agent_fqdn_flow_commit_failures_total",
        &[],
        f.commit_failures,
    );
    header(
        out,
        "antrea_vm_agent_fqdn_datapath_flows_evicted_total",
        "counter",
        "Cached datapath flows (megaflows) toward changed FQDN addresses deleted after a commit, before the DNS response was released.",
    );
    sample(
        out,
        "antrea_vm_agent_fqdn_datapath_flows_evicted_total",
        &[],
        f.datapath_flows_evicted,
    );
    header(
        out,
        "antrea_vm_agent_fqdn_datapath_evict_failures_total",
        "counter",
        "Commits after which the cached datapath flows toward the changed addresses could not be evicted (ovs-vswitchd's control socket failed; the response was released anyway).",
    );
    sample(
        out,
        "antrea_vm_agent_fqdn_datapath_evict_failures_total",
        &[],
        f.datapath_evict_failures,
    );
}

impl Collected {
    fn detail(&self, kind: ActorKind) -> Option<&ActorDetail> {
        self.statuses.get(&kind).map(|s| &s.detail)
    }

    /// The ExternalNode watcher's report, if it answered.
    pub fn external_node_watcher(&self) -> Option<&ExternalNodeWatcherStatus> {
        self.detail(ActorKind::ExternalNodeWatcher)
            .and_then(ActorDetail::external_node_watcher)
    }

    /// The interface manager's report, if it answered.
    pub fn interface_manager(&self) -> Option<&InterfaceManagerStatus> {
        self.detail(ActorKind::InterfaceManager)
            .and_then(ActorDetail::interface_manager)
    }

    /// The policy cache's report, if it answered.
    pub fn policy_cache(&self) -> Option<&PolicyCacheStatus> {
        self.detail(ActorKind::PolicyCache)
            .and_then(ActorDetail::policy_cache)
    }

    /// The flow installer's report, if it answered.
    pub fn flow_installer(&self) -> Option<&FlowInstallerStatus> {
        self.detail(ActorKind::FlowInstaller)
            .and_then(ActorDetail::flow_installer)
    }
}

fn attached_interfaces(c: &Collected) -> Option<usize> {
    c.interface_manager().map(|im| im.interfaces.len())
}

/// `/readyz`: the first sync is realized (see the module header).
pub fn readiness(c: &Collected) -> HealthReport {
    let watcher = c.external_node_watcher();
    let external_node = match watcher.map(|w| w.state) {
        None => Some("the ExternalNode watcher did not answer".to_string()),
        Some(ExternalNodeState::Unknown) => Some("the ExternalNode has not been read yet".to_string()),
        Some(ExternalNodeState::Absent | ExternalNodeState::Present) => None,
    };
    let wanted = watcher.and_then(|w| match w.state {
        ExternalNodeState::Present => Some(w.interfaces),
        ExternalNodeState::Absent => Some(0),
        ExternalNodeState::Unknown => None,
    });
    let attached = attached_interfaces(c);
    let interfaces = match c.interface_manager() {
        None => Some("the interface manager did not answer".to_string()),
        Some(im) if !im.recovered => Some("recovering the interfaces' state".to_string()),
        Some(im) if !im.external_node_known => Some("waiting for the ExternalNode".to_string()),
        Some(im) if !im.errors.is_empty() => im.errors.first().map(|e| e.message.clone()),
        Some(_) => match (wanted, attached) {
            (Some(w), Some(a)) if a < w => Some(format!("{a} of {w} interfaces attached")),
            (Some(_), Some(_)) => None,
            _ => Some("the ExternalNode's interfaces are not known yet".to_string()),
        },
    };
    let policies = match (&c.counts, c.policy_cache()) {
        (Some(k), _) if k.policies_known => None,
        (None, Some(d)) if d.policies_known => None,
        (None, None) => Some("the policy cache did not answer".to_string()),
        _ => Some("waiting for the first complete view of the NetworkPolicies".to_string()),
    };
    let flows = match c.flow_installer() {
        None => Some("the flow installer did not answer".to_string()),
        Some(fi) if !fi.connected => Some("not connected to the OpenFlow switch".to_string()),
        Some(fi) if !fi.synced => Some("the first flow sync is not committed yet".to_string()),
        Some(_) => None,
    };
    HealthReport {
        checks: vec![
            check("external-node", external_node),
            check("interfaces", interfaces),
            check("policies", policies),
            check("flows", flows),
        ],
    }
}

/// One line for `systemctl status`.
pub fn status_line(c: &Collected, ready: &HealthReport) -> String {
    match ready.first_failure() {
        Some(why) => format!("starting: {why}"),
        None => {
            let interfaces = attached_interfaces(c).unwrap_or(0);
            let rules = c.counts.as_ref().map_or(0, |k| k.effective_rules);
            format!(
                "ready: {interfaces} interface{} attached, {rules} NetworkPolicy rule{} in effect",
                if interfaces == 1 { "" } else { "s" },
                if rules == 1 { "" } else { "s" }
            )
        }
    }
}

// === Prometheus text ===

/// Escapes a label value for the text format.
fn escape_label(v: &str, out: &mut String) {
    for ch in v.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
    out.push_str(name);
    if !labels.is_empty() {
        out.push('{');
        for (i, (k, v)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(k);
            out.push_str("=\"");
            escape_label(v, out);
            out.push('"');
        }
        out.push('}');
    }
    let _ = writeln!(out, " {value}");
}

fn gauge(out: &mut String, name: &str, help: &str, value: impl std::fmt::Display) {
    header(out, name, "gauge", help);
    sample(out, name, &[], value);
}

fn direction_label(d: Direction) -> &'static str {
    match d {
        Direction::In => "Ingress",
        Direction::Out => "Egress",
    }
}

fn action_label(a: RuleAction) -> &'static str {
    match a {
        RuleAction::Allow => "Allow",
        RuleAction::Drop => "Drop",
        RuleAction::Reject => "Reject",
        RuleAction::Pass => "Pass",
    }
}

/// The per-rule counter families (`antrea_vm_agent_rule_{packets,bytes,sessions}_total`), built
/// from one snapshot. Labels: `policy_type` (e.g. `AntreaClusterNetworkPolicy`),
/// `policy_namespace` (empty for cluster-scoped policies), `policy_name` and `policy_uid` (of the
/// source policy), `rule_name`, `direction` (`Ingress`/`Egress`), `action`
/// (`Allow`/`Drop`/`Reject`/`Pass`) and `tier`: the name of Antrea's default tier with that
/// priority (`Emergency`, `SecurityOps`, `NetworkOps`, `Platform`, `Application`, `Baseline`), or
/// the tier priority as a number for a custom tier (the agent receives priorities, not names).
pub fn render_rule_families(stats: &RuleStatsSnapshot, out: &mut String) {
    const FAMILIES: [(&str, &str); 3] = [
        (
            "antrea_vm_agent_rule_packets_total",
            "Packets matched by a NetworkPolicy rule on this node, from its metric flows.",
        ),
        (
            "antrea_vm_agent_rule_bytes_total",
            "Bytes matched by a NetworkPolicy rule on this node, from its metric flows.",
        ),
        (
            "antrea_vm_agent_rule_sessions_total",
            "Connections matched by a NetworkPolicy rule on this node (for Drop and Reject rules, packets).",
        ),
    ];
    if stats.rules.is_empty() {
        return;
    }
    // The label set of each rule is rendered once and reused by the three families.
    let labels: Vec<String> = stats
        .rules
        .iter()
        .map(|r| {
            let number;
            let tier = match tier_name(r.tier_priority) {
                Some(n) => n,
                None => {
                    number = r.tier_priority.to_string();
                    number.as_str()
                }
            };
            let mut s = String::with_capacity(160);
            s.push('{');
            let pairs: [(&str, &str); 8] = [
                ("policy_type", r.policy.policy_type.as_str()),
                ("policy_namespace", &r.policy.namespace),
                ("policy_name", &r.policy.name),
                ("policy_uid", &r.policy.uid),
                ("rule_name", &r.rule_name),
                ("direction", direction_label(r.direction)),
                ("action", action_label(r.action)),
                ("tier", tier),
            ];
            for (i, (k, v)) in pairs.iter().enumerate() {
                if i > 0 {
                    s.push(',');
                }
                s.push_str(k);
                s.push_str("=\"");
                escape_label(v, &mut s);
                s.push('"');
            }
            s.push('}');
            s
        })
        .collect();
    out.reserve(labels.iter().map(|l| l.len() + 48).sum::<usize>() * 3);
    for (family, (name, help)) in FAMILIES.iter().enumerate() {
        header(out, name, "counter", help);
        for (r, l) in stats.rules.iter().zip(&labels) {
            let v = match family {
                0 => r.packets,
                1 => r.bytes,
                _ => r.sessions,
            };
            out.push_str(name);
            out.push_str(l);
            let _ = writeln!(out, " {v}");
        }
    }
}

/// Brings `antrea_vm_agent_actor_restarts_total` up to the supervisor's counts (the counter only
/// moves up, so it stays right whether or not someone else also increments it).
pub fn sync_restart_counter(metrics: &AgentMetrics, report: &SupervisorReport) {
    for kind in ActorKind::ALL {
        let counter = metrics.actor_restarts.with_label_values(&[kind.as_str()]);
        let restarts = report.restarts.get(&kind).copied().unwrap_or(0);
        let current = counter.get();
        if restarts > current {
            counter.inc_by(restarts - current);
        }
    }
}

/// The metrics computed at scrape time from `c` (everything but the registry's own).
pub fn render_metrics(c: &Collected, out: &mut String) {
    if let Some(k) = &c.counts {
        gauge(
            out,
            "antrea_agent_networkpolicy_count",
            "Number of NetworkPolicies on local Node.",
            k.network_policies,
        );
        gauge(
            out,
            "antrea_agent_ingress_networkpolicy_rule_count",
            "Number of ingress NetworkPolicy rules on local Node.",
            k.ingress_rules,
        );
        gauge(
            out,
            "antrea_agent_egress_networkpolicy_rule_count",
            "Number of egress NetworkPolicy rules on local Node.",
            k.egress_rules,
        );
        gauge(
            out,
            "antrea_vm_agent_networkpolicy_effective_rule_count",
            "Number of NetworkPolicy rules in effect on this node (applied to an attached interface).",
            k.effective_rules,
        );
        header(
            out,
            "antrea_vm_agent_rules_not_enforced",
            "gauge",
            "NetworkPolicy rules in effect on this node that are installed fail-closed instead of as written, by reason.",
        );
        for (reason, n) in &k.not_enforced {
            sample(
                out,
                "antrea_vm_agent_rules_not_enforced",
                &[("reason", reason.as_str())],
                n,
            );
        }
        gauge(
            out,
            "antrea_vm_agent_address_group_count",
            "Number of AddressGroups held by the agent.",
            k.address_groups,
        );
        gauge(
            out,
            "antrea_vm_agent_applied_to_group_count",
            "Number of AppliedToGroups held by the agent.",
            k.applied_to_groups,
        );
        if let Some(connected) = k.controller_connected {
            gauge(
                out,
                "antrea_vm_agent_controller_connected",
                "1 when every antrea-controller watch (NetworkPolicy, AddressGroup, AppliedToGroup) is connected.",
                u8::from(connected),
            );
        }
    }
    gauge(
        out,
        "antrea_agent_local_pod_count",
        "Number of Pods on local Node which are managed by the Antrea Agent (always 0 on a VM).",
        0,
    );
    if let Some(fi) = c.flow_installer() {
        let ids: BTreeMap<&str, u8> = crate::policy::pipeline::tables()
            .into_iter()
            .map(|t| (t.name, t.id))
            .collect();
        let mut rows: Vec<(u8, &str, usize)> = fi
            .flows_per_table
            .iter()
            .filter_map(|(name, n)| {
                let id = ids.get(name.as_str()).copied().or_else(|| name.parse().ok())?;
                Some((id, name.as_str(), *n))
            })
            .collect();
        rows.sort_unstable();
        header(
            out,
            "antrea_agent_ovs_flow_count",
            "gauge",
            "Flow count for each OVS flow table. The TableID and TableName are used as labels.",
        );
        for (id, name, n) in &rows {
            sample(
                out,
                "antrea_agent_ovs_flow_count",
                &[("table_id", &id.to_string()), ("table_name", name)],
                n,
            );
        }
        // The total is the sum of the tables (as upstream's), whatever `flowCount` counts.
        gauge(
            out,
            "antrea_agent_ovs_total_flow_count",
            "Total flow count of all OVS flow tables.",
            rows.iter().map(|r| r.2).sum::<usize>(),
        );
        header(
            out,
            "antrea_vm_agent_packet_ins_total",
            "counter",
            "NetworkPolicy packet-ins (audit logging, Reject) on the current OpenFlow connection handler, by outcome.",
        );
        for (outcome, n) in fi.packet_ins.by_outcome() {
            sample(
                out,
                "antrea_vm_agent_packet_ins_total",
                &[("outcome", outcome)],
                n,
            );
        }
        render_fqdn(&fi.fqdn, out);
    }
    if let Some(stats) = &c.rule_stats {
        let denied: u64 = stats
            .rules
            .iter()
            .filter(|r| matches!(r.action, RuleAction::Drop | RuleAction::Reject))
            .map(|r| r.sessions)
            .sum();
        gauge(
            out,
            "antrea_agent_denied_connection_count",
            "Number of denied connections: on this agent, the packets counted by the metric flows of Drop and Reject rules.",
            denied,
        );
        render_rule_families(stats, out);
    }
    if let Some(errors) = c.policy_cache().map(|p| &p.source_errors) {
        gauge(
            out,
            "antrea_vm_agent_policy_source_errors",
            "Number of problems the policy source reports now (unreadable or missing policy directory, \
             files that cannot be read or parsed, conflicts); the last good policies stay enforced.",
            errors.len(),
        );
    }
    if let Some(watcher) = c.statuses.get(&ActorKind::ExternalNodeWatcher) {
        gauge(
            out,
            "antrea_vm_agent_external_node_source_error",
            "1 when the ExternalNode source is unreadable or invalid (the last valid ExternalNode stays in force).",
            u8::from(watcher.last_error.is_some()),
        );
    }
    if !c.statuses.is_empty() {
        header(
            out,
            "antrea_vm_agent_actor_last_error",
            "gauge",
            "1 while the actor's last error has this kind (one series per actor with an error).",
        );
        for (actor, status) in &c.statuses {
            if let Some(e) = &status.last_error {
                sample(
                    out,
                    "antrea_vm_agent_actor_last_error",
                    &[("actor", actor.as_str()), ("kind", e.kind.as_str())],
                    1,
                );
            }
        }
    }
    if let Some(n) = attached_interfaces(c) {
        gauge(
            out,
            "antrea_vm_agent_interfaces_attached",
            "Number of host interfaces attached to the OVS bridge.",
            n,
        );
    }
    if let Some(report) = &c.report {
        header(
            out,
            "antrea_vm_agent_actor_up",
            "gauge",
            "1 when the actor is running, 0 while the supervisor restarts it.",
        );
        for kind in ActorKind::ALL {
            let up = report.alive.get(&kind).copied().unwrap_or(false);
            sample(
                out,
                "antrea_vm_agent_actor_up",
                &[("actor", kind.as_str())],
                u8::from(up),
            );
        }
    }
    if c.report.is_some() && !c.statuses.is_empty() {
        gauge(
            out,
            "antrea_vm_agent_ready",
            "1 when /readyz answers 200 (first sync realized).",
            u8::from(readiness(c).ok()),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::RuleStats;
    use crate::messages::{AttachedInterface, EntityRef, ErrorKind, StatusError};
    use crate::packetin::PacketInCounts;
    use crate::policy::rule::{PolicyRef, PolicyType};

    fn rule(name: &str, action: RuleAction, tier: i32, packets: u64) -> RuleStats {
        RuleStats {
            policy: PolicyRef {
                policy_type: PolicyType::AntreaNetworkPolicy,
                namespace: "vm-ns".into(),
                name: "web \"x\"".into(),
                uid: "uid-1".into(),
            },
            rule_name: name.into(),
            direction: Direction::In,
            action,
            tier_priority: tier,
            packets,
            bytes: packets * 100,
            sessions: packets / 2,
        }
    }

    #[test]
    fn rule_families_have_every_label_escaped() {
        let stats = RuleStatsSnapshot {
            rules: vec![
                rule("r1", RuleAction::Allow, 250, 10),
                rule("r2", RuleAction::Drop, 42, 4),
            ],
        };
        let mut out = String::new();
        render_rule_families(&stats, &mut out);
        assert!(out.contains("# TYPE antrea_vm_agent_rule_packets_total counter\n"));
        assert!(out.contains(
            "antrea_vm_agent_rule_packets_total{policy_type=\"AntreaNetworkPolicy\",policy_namespace=\"vm-ns\",\
             policy_name=\"web \\\"x\\\"\",policy_uid=\"uid-1\",rule_name=\"r1\",direction=\"Ingress\",\
             action=\"Allow\",tier=\"Application\"} 10\n"
        ), "{out}");
        assert!(out.contains("rule_name=\"r2\",direction=\"Ingress\",action=\"Drop\",tier=\"42\"} 400\n"));
        assert!(out.contains("antrea_vm_agent_rule_sessions_total{"));
        assert_eq!(out.lines().filter(|l| !l.starts_with('#')).count(), 6);
        let mut empty = String::new();
        render_rule_families(&RuleStatsSnapshot::default(), &mut empty);
        assert!(empty.is_empty());
    }

    fn status(detail: ActorDetail) -> ActorStatus {
        ActorStatus::new(true, None, detail)
    }

    fn watcher(state: ExternalNodeState, interfaces: usize) -> ActorStatus {
        status(ActorDetail::ExternalNodeWatcher(ExternalNodeWatcherStatus {
            state,
            interfaces,
            ..ExternalNodeWatcherStatus::default()
        }))
    }

    fn interface_manager(attached: &[&str]) -> ActorStatus {
        let interfaces = attached
            .iter()
            .map(|name| AttachedInterface {
                name: name.to_string(),
                ofport: 3,
                uplink_name: format!("{name}~"),
                uplink_ofport: 2,
                ips: vec![],
                entity: EntityRef {
                    namespace: "vm-ns".into(),
                    name: format!("vm1-{name}"),
                },
            })
            .collect();
        status(ActorDetail::InterfaceManager(InterfaceManagerStatus {
            recovered: true,
            external_node_known: true,
            interfaces,
            ..InterfaceManagerStatus::default()
        }))
    }

    fn ready_world() -> Collected {
        let mut c = Collected {
            report: Some(SupervisorReport::default()),
            counts: Some(PolicyCounts {
                policies_known: true,
                effective_rules: 3,
                ..PolicyCounts::default()
            }),
            ..Collected::default()
        };
        for s in [
            watcher(ExternalNodeState::Present, 1),
            interface_manager(&["eth0"]),
            status(ActorDetail::FlowInstaller(FlowInstallerStatus {
                connected: true,
                synced: true,
                flow_count: 3,
                flows_per_table: BTreeMap::from([
                    ("IngressMetric".to_string(), 2),
                    ("ConntrackZone".to_string(), 1),
                ]),
                packet_ins: PacketInCounts {
                    received: 5,
                    rejected: 1,
                    ..PacketInCounts::default()
                },
                ..FlowInstallerStatus::default()
            })),
        ] {
            c.statuses.insert(s.actor, s);
        }
        c
    }

    #[test]
    fn readiness_needs_every_part_of_the_first_sync() {
        let c = ready_world();
        let r = readiness(&c);
        assert!(r.ok(), "{}", r.body("readyz"));
        assert_eq!(
            status_line(&c, &r),
            "ready: 1 interface attached, 3 NetworkPolicy rules in effect"
        );

        let mut not_attached = c.clone();
        not_attached
            .statuses
            .insert(ActorKind::InterfaceManager, interface_manager(&[]));
        let r = readiness(&not_attached);
        assert!(!r.ok());
        assert_eq!(
            r.first_failure().as_deref(),
            Some("interfaces: 0 of 1 interfaces attached")
        );
        assert!(r.body("readyz").ends_with("readyz check failed\n"));

        let mut unsynced = c.clone();
        unsynced.statuses.insert(
            ActorKind::FlowInstaller,
            status(ActorDetail::FlowInstaller(FlowInstallerStatus {
                connected: true,
                synced: false,
                ..FlowInstallerStatus::default()
            })),
        );
        assert!(!readiness(&unsynced).ok());

        let mut no_policies = c.clone();
        no_policies.counts = Some(PolicyCounts::default());
        assert!(!readiness(&no_policies).ok());

        let mut absent = c;
        absent.statuses.insert(
            ActorKind::ExternalNodeWatcher,
            watcher(ExternalNodeState::Absent, 0),
        );
        absent
            .statuses
            .insert(ActorKind::InterfaceManager, interface_manager(&[]));
        assert!(readiness(&absent).ok());
        assert!(!readiness(&Collected::default()).ok());
    }

    #[test]
    fn liveness_lists_every_actor() {
        let mut report = SupervisorReport::default();
        for k in ActorKind::ALL {
            report.alive.insert(k, true);
        }
        let l = liveness(Some(&report));
        assert!(l.ok());
        assert!(l.body("livez").contains("[+]policy-cache ok\n"));
        report.alive.insert(ActorKind::PolicyCache, false);
        let l = liveness(Some(&report));
        assert!(!l.ok());
        assert!(l
            .body("livez")
            .contains("[-]policy-cache failed: not running (being restarted)\n"));
        assert!(!liveness(None).ok());
    }

    #[test]
    fn scrape_time_metrics_from_answers() {
        let mut c = ready_world();
        c.rule_stats = Some(RuleStatsSnapshot {
            rules: vec![
                rule("r1", RuleAction::Allow, 250, 10),
                rule("r2", RuleAction::Drop, 250, 4),
                rule("r3", RuleAction::Reject, 250, 6),
            ],
        });
        let mut out = String::new();
        render_metrics(&c, &mut out);
        assert!(out.contains("antrea_agent_networkpolicy_count 0\n"));
        assert!(
            out.contains("antrea_agent_ovs_flow_count{table_id=\"1\",table_name=\"ConntrackZone\"} 1\n"),
            "{out}"
        );
        assert!(out.contains("antrea_agent_ovs_total_flow_count 3\n"));
        assert!(out.contains("antrea_agent_denied_connection_count 5\n"), "{out}");
        assert!(out.contains("antrea_vm_agent_packet_ins_total{outcome=\"rejected\"} 1\n"));
        assert!(out.contains("antrea_vm_agent_interfaces_attached 1\n"));
        assert!(out.contains("antrea_vm_agent_ready 1\n"));
        assert!(
            out.contains("antrea_vm_agent_external_node_source_error 0\n"),
            "{out}"
        );
        assert!(!out.contains("antrea_vm_agent_policy_source_errors"));
        c.statuses.insert(
            ActorKind::PolicyCache,
            status(ActorDetail::PolicyCache(PolicyCacheStatus {
                source_errors: vec![StatusError::new(
                    ErrorKind::PolicySource,
                    "policy file /p/a.yaml: holds no objects",
                )],
                ..PolicyCacheStatus::default()
            })),
        );
        let mut out = String::new();
        render_metrics(&c, &mut out);
        assert!(out.contains("antrea_vm_agent_policy_source_errors 1\n"), "{out}");
        assert!(!out.contains("antrea_vm_agent_actor_last_error{"), "{out}");
        let failing = StatusError::new(
            ErrorKind::OvsConnection,
            "cannot connect to OpenFlow switch: refused",
        );
        if let Some(s) = c.statuses.get_mut(&ActorKind::FlowInstaller) {
            s.last_error = Some(failing);
        }
        let mut out = String::new();
        render_metrics(&c, &mut out);
        assert!(
            out.contains(
                "antrea_vm_agent_actor_last_error{actor=\"flow-installer\",kind=\"ovs_connection\"} 1\n"
            ),
            "{out}"
        );
        if let Some(s) = c.statuses.get_mut(&ActorKind::FlowInstaller) {
            s.last_error = None;
        }
        assert!(!out.contains("antrea_vm_agent_controller_connected"));
        c.counts = Some(PolicyCounts {
            controller_connected: Some(false),
            not_enforced: crate::policy::refuse::Reason::ALL
                .into_iter()
                .map(|r| (r, usize::from(r == crate::policy::refuse::Reason::L7Protocols)))
                .collect(),
            ..PolicyCounts::default()
        });
        let mut out = String::new();
        render_metrics(&c, &mut out);
        assert!(out.contains("antrea_vm_agent_controller_connected 0\n"));
        assert!(
            out.contains("antrea_vm_agent_rules_not_enforced{reason=\"l7_protocols\"} 1\n"),
            "{out}"
        );
        assert!(out.contains("antrea_vm_agent_rules_not_enforced{reason=\"to_services\"} 0\n"));
    }

    #[test]
    fn restart_counter_follows_the_supervisor() {
        let metrics = AgentMetrics::new();
        let mut report = SupervisorReport::default();
        report.restarts.insert(ActorKind::FlowInstaller, 2);
        sync_restart_counter(&metrics, &report);
        sync_restart_counter(&metrics, &report);
        let c = metrics.actor_restarts.with_label_values(&["flow-installer"]);
        assert_eq!(c.get(), 2);
        report.restarts.insert(ActorKind::FlowInstaller, 3);
        sync_restart_counter(&metrics, &report);
        assert_eq!(c.get(), 3);
        assert_eq!(
            metrics.actor_restarts.with_label_values(&["policy-cache"]).get(),
            0
        );
    }
}
