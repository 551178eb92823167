//! The agent's Prometheus registry and the metrics that actors update as things happen (flow
//! operations, realization latency, restarts). Metrics computed at scrape time (per-rule counters,
//! policy counts, flow counts) are collected by the HTTP server (`api::collect`) from actor
//! snapshots. The registry sits below the actors, which get it through `Deps`
//! (docs/architecture.md §5.3, rule 9); `api::metrics` re-exports it.

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts, Registry};

/// The `kind` label values of `antrea_vm_agent_datapath_repairs_total`.
pub const DATAPATH_REPAIR_KINDS: [&str; 4] = ["flows", "bridge", "port", "stale_device"];

/// Metrics shared by every actor; cheap to clone (the prometheus handles are `Arc`s inside).
#[derive(Clone)]
pub struct AgentMetrics {
    pub registry: Registry,
    /// `antrea_agent_ovs_flow_ops_count{operation}`: add, modify, delete.
    pub ovs_flow_ops: IntCounterVec,
    /// `antrea_agent_ovs_flow_ops_error_count{operation}`.
    pub ovs_flow_ops_errors: IntCounterVec,
    /// `antrea_agent_ovs_flow_ops_latency_milliseconds{operation}`.
    pub ovs_flow_ops_latency: HistogramVec,
    /// `antrea_vm_agent_realization_latency_seconds`: from a rule change's arrival to the commit of
    /// the bundle that realizes it.
    pub realization_latency: HistogramVec,
    /// `antrea_vm_agent_actor_restarts_total{actor}`.
    pub actor_restarts: IntCounterVec,
    /// `antrea_vm_agent_datapath_repairs_total{kind}`: what the agent found changed or missing
    /// under it and put back (kind `flows`, `bridge`, `port`), and leftover devices of a datapath
    /// that is gone that it deleted (kind `stale_device`).
    pub datapath_repairs: IntCounterVec,
    /// `antrea_vm_agent_state_write_errors_total`: writes of the interface records under
    /// `stateDir` that failed (full, read-only or failing filesystem).
    pub state_write_errors: IntCounterVec,
    /// `antrea_vm_agent_rules_not_installed`: accepted rules the flow installer could not
    /// install (no OpenFlow priority left in their table); their traffic is not policed by them.
    pub rules_not_installed: IntGauge,
}

impl std::fmt::Debug for AgentMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AgentMetrics")
    }
}

impl Default for AgentMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl AgentMetrics {
    /// A fresh registry with every event-driven metric registered.
    pub fn new() -> Self {
        let registry = Registry::new();
        let counter = |name: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(Opts::new(name, help), labels)
                .unwrap_or_else(|e| panic!("metric {name} is malformed: {e}"));
            registry
                .register(Box::new(c.clone()))
                .unwrap_or_else(|e| panic!("metric {name} registered twice: {e}"));
            c
        };
        let histogram = |name: &str, help: &str, labels: &[&str], buckets: Vec<f64>| {
            let h = HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels)
                .unwrap_or_else(|e| panic!("metric {name} is malformed: {e}"));
            registry
                .register(Box::new(h.clone()))
                .unwrap_or_else(|e| panic!("metric {name} registered twice: {e}"));
            h
        };
        let rules_not_installed = IntGauge::new(
            "antrea_vm_agent_rules_not_installed",
            "Number of NetworkPolicy rules applied to this VM that have no flows because their table ran out of OpenFlow priorities.",
        )
        .unwrap_or_else(|e| panic!("metric antrea_vm_agent_rules_not_installed is malformed: {e}"));
        registry
            .register(Box::new(rules_not_installed.clone()))
            .unwrap_or_else(|e| panic!("metric antrea_vm_agent_rules_not_installed registered twice: {e}"));
        let metrics = AgentMetrics {
            rules_not_installed,
            ovs_flow_ops: counter(
                "antrea_agent_ovs_flow_ops_count",
                "Number of OVS flow operations, partitioned by operation type (add, modify and delete).",
                &["operation"],
            ),
            ovs_flow_ops_errors: counter(
                "antrea_agent_ovs_flow_ops_error_count",
                "Number of OVS flow operation errors, partitioned by operation type (add, modify and delete).",
                &["operation"],
            ),
            ovs_flow_ops_latency: histogram(
                "antrea_agent_ovs_flow_ops_latency_milliseconds",
                "The latency of OVS flow operations, partitioned by operation type (add, modify and delete).",
                &["operation"],
                vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0],
            ),
            realization_latency: histogram(
                "antrea_vm_agent_realization_latency_seconds",
                "Time from a NetworkPolicy change reaching the agent to the commit of the OpenFlow bundle realizing it.",
                &[],
                vec![0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0],
            ),
            actor_restarts: counter(
                "antrea_vm_agent_actor_restarts_total",
                "Number of times the supervisor restarted an actor, by actor.",
                &["actor"],
            ),
            datapath_repairs: counter(
                "antrea_vm_agent_datapath_repairs_total",
                "Number of times the agent found its flows, bridge or ports changed or missing under it and repaired them, by kind (flows, bridge, port).",
                &["kind"],
            ),
            state_write_errors: counter(
                "antrea_vm_agent_state_write_errors_total",
                "Number of failed writes of the interface records under stateDir (attaches are refused, detaches complete from memory while they fail).",
                &[],
            ),
            registry,
        };
        // Like upstream, every operation's series exists from the start (at 0), so rate() and
        // alerts see the first error instead of a series appearing from nothing.
        for operation in ["add", "modify", "delete"] {
            metrics.ovs_flow_ops.with_label_values(&[operation]);
            metrics.ovs_flow_ops_errors.with_label_values(&[operation]);
        }
        metrics.state_write_errors.with_label_values::<&str>(&[]);
        for kind in DATAPATH_REPAIR_KINDS {
            metrics.datapath_repairs.with_label_values(&[kind]);
        }
        metrics
    }
}
