//! The interface manager: makes the host's interfaces match the ExternalNode. It owns the set of
//! attached interfaces; on start it recovers that set from OVSDB, the kernel and its records
//! (adopting what is attached, without a flap); then on every ExternalNode change and on a timer it
//! attaches, updates, detaches and heals, one interface at a time, so a problem with one interface
//! never blocks the others. It publishes the attached set to the flow installer and the policy
//! cache — only once it is known, never a guess.
//!
//! The procedures it calls (attach, detach, recover, heal, repair, the record journal) live in
//! [`crate::uplink`]; this module only decides what to attach or detach and applies the outcome.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use actix::{Actor, ActorFutureExt, AsyncContext, AtomicResponse, Context, Handler, Message, WrapFuture};
use tracing::{debug, error, info, warn};

use super::{common_handlers, InterfaceManagerOutputs, Lifeline, Timing};
use crate::config::DatapathType;
use crate::host::eligibility::{check_addresses, check_uplink, Ineligible};
use crate::host::find::find_link;
use crate::host::{Address, HostNet, Link};
use crate::k8s::external_node::ExternalNode;
use crate::messages::status_detail::InterfaceManagerStatus;
use crate::messages::{
    ActorDetail, ActorStatus, EntityRef, ErrorKind, ExternalNodeChanged, InterfacesChanged, Resync,
    StatusError, StatusQuery,
};
use crate::ovs::ovsdb::{BridgeSpec, Ovsdb};
use crate::policy::pipeline;
use crate::retry::RetryPolicy;
use crate::telemetry::AgentMetrics;
use crate::uplink::procedures::{self, Attachment, Env};
use crate::uplink::repair;
use crate::uplink::store::RecordStore;

/// Internal: compare the world with the wanted state and act.
#[derive(Message)]
#[rtype(result = "()")]
struct Reconcile;

/// One wanted interface.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Wanted {
    entity: EntityRef,
    /// `spec.interfaces[i].name` (may be empty).
    name: String,
    ips: Vec<IpAddr>,
    /// Where the entry is, for errors: `ExternalNode ns/name (file …): spec.interfaces[i]`.
    entry: String,
}

/// The outcome of a reconcile pass, applied to the actor's state when it completes.
struct Outcome {
    recovered: bool,
    attached: BTreeMap<String, Attachment>,
    errors: Vec<StatusError>,
    repaired: repair::Repaired,
}

/// What the interface manager needs from the outside world: OVSDB and the host's network (the
/// edges its procedures in `uplink` work through), the three settings it reads, the timing, the
/// metrics it counts repairs in.
#[derive(Clone)]
pub struct InterfaceManagerDeps {
    /// `ovsBridge`: the bridge the uplinks are attached to.
    pub bridge: String,
    /// `ovsDatapathType`: how the bridge is created.
    pub datapath_type: DatapathType,
    /// `stateDir`: where the attachment records (the journal) live.
    pub state_dir: PathBuf,
    pub ovsdb: Arc<dyn Ovsdb>,
    pub host: Arc<dyn HostNet>,
    pub metrics: AgentMetrics,
    pub timing: Timing,
}

pub struct InterfaceManager {
    deps: InterfaceManagerDeps,
    outputs: InterfaceManagerOutputs,
    env: Env,
    /// Set once the attached set has been rebuilt from OVSDB and the kernel.
    recovered: bool,
    /// Attached interfaces by name.
    attached: BTreeMap<String, Attachment>,
    /// The ExternalNode as last reported; outer `None` = not reported yet.
    desired: Option<Option<ExternalNode>>,
    last_errors: Vec<StatusError>,
    /// The view last published (to publish only changes, except on resync).
    published: Option<InterfacesChanged>,
    /// Record write failures already added to the metric.
    write_failures_counted: u64,
    /// Leftover devices deleted already added to the metric.
    stale_deleted_counted: u64,
    _lifeline: Lifeline,
}

impl InterfaceManager {
    pub fn new(deps: InterfaceManagerDeps, outputs: InterfaceManagerOutputs, lifeline: Lifeline) -> Self {
        let env = Env {
            ovsdb: deps.ovsdb.clone(),
            host: deps.host.clone(),
            bridge: deps.bridge.clone(),
            store: RecordStore::new(&deps.state_dir),
            port_wait: deps.timing.port_wait,
            stale_deleted: Default::default(),
        };
        InterfaceManager {
            deps,
            outputs,
            env,
            recovered: false,
            attached: BTreeMap::new(),
            desired: None,
            last_errors: Vec::new(),
            published: None,
            write_failures_counted: 0,
            stale_deleted_counted: 0,
            _lifeline: lifeline,
        }
    }

    /// The attached interfaces with both ofports known (one whose ports are still being
    /// re-created is left out: no flows for it, and the fail-secure bridge drops its traffic).
    fn view(&self) -> InterfacesChanged {
        InterfacesChanged {
            interfaces: self
                .attached
                .values()
                .filter(|a| a.ofport > 0 && a.uplink_ofport > 0)
                .map(Attachment::view)
                .collect(),
        }
    }

    /// Sends the attached set downstream if known and (unless `force`) changed.
    fn publish(&mut self, force: bool) {
        if !self.recovered {
            return;
        }
        let view = self.view();
        if !force && self.published.as_ref() == Some(&view) {
            return;
        }
        if let Some(flows) = &self.outputs.interfaces_to_flows {
            flows.do_send(view.clone());
        }
        if let Some(policy) = &self.outputs.interfaces_to_policy {
            policy.do_send(view.clone());
        }
        self.published = Some(view);
    }

    fn wanted(&self) -> Option<Vec<Wanted>> {
        let node = self.desired.as_ref()?;
        Some(node.as_ref().map_or_else(Vec::new, |n| {
            let origin = if n.source.is_empty() {
                format!("ExternalNode {}/{}", n.namespace, n.name)
            } else {
                format!("ExternalNode {}/{} ({})", n.namespace, n.name, n.source)
            };
            n.interfaces
                .iter()
                .enumerate()
                .map(|(index, i)| Wanted {
                    entity: EntityRef {
                        namespace: n.namespace.clone(),
                        name: i.entity_name.clone(),
                    },
                    name: i.name.clone(),
                    ips: i.ips.clone(),
                    entry: format!("{origin}: spec.interfaces[{index}]"),
                })
                .collect()
        }))
    }
}

/// One reconcile pass over a snapshot of the state; returns the new state.
#[tracing::instrument(name = "reconcile", skip_all, fields(attached = attached.len()))]
async fn reconcile(
    env: Env,
    bridge_spec: BridgeSpec,
    mut recovered: bool,
    mut attached: BTreeMap<String, Attachment>,
    wanted: Option<Vec<Wanted>>,
) -> Outcome {
    let mut errors = Vec::new();
    env.store.probe_after_failure();
    if !recovered {
        if let Err(e) = env.ovsdb.ensure_bridge(&bridge_spec).await {
            errors.push(StatusError::new(
                ErrorKind::Ovsdb,
                format!("bridge {}: {e}", bridge_spec.name),
            ));
            return Outcome {
                recovered,
                attached,
                errors,
                repaired: Default::default(),
            };
        }
        match procedures::recover(&env).await {
            Ok(found) => {
                errors.extend(found.errors);
                attached = found
                    .attachments
                    .into_iter()
                    .map(|a| (a.record.name.clone(), a))
                    .collect();
                recovered = true;
                info!(attached = attached.len(), "interface state recovered");
            }
            Err(e) => {
                errors.push(StatusError::new(e.kind(), format!("recovery: {e}")));
                return Outcome {
                    recovered,
                    attached,
                    errors,
                    repaired: Default::default(),
                };
            }
        }
    }
    errors.extend(procedures::retry_unfinished(&env, &attached).await);
    if let Some(wanted) = wanted {
        apply_wanted(&env, &mut attached, &wanted, &mut errors).await;
    }
    let repaired = repair::repair_all(&env, &bridge_spec, &attached, &mut errors).await;
    procedures::heal_all(&env, &mut attached, &mut errors).await;
    Outcome {
        recovered,
        attached,
        errors,
        repaired,
    }
}

async fn apply_wanted(
    env: &Env,
    attached: &mut BTreeMap<String, Attachment>,
    wanted: &[Wanted],
    errors: &mut Vec<StatusError>,
) {
    let links = if wanted.is_empty() {
        Vec::new()
    } else {
        match procedures::links_with_addresses(env).await {
            Ok(l) => l,
            Err(e) => {
                // Without a view of the host nothing is decided, nothing is detached.
                errors.push(StatusError::new(e.kind(), e.to_string()));
                return;
            }
        }
    };
    // 1. Resolve every wanted interface to a link. An entity that cannot be resolved now keeps
    //    its attachment: the cause may be transient (an address being re-applied).
    let mut targets: BTreeMap<String, (&Wanted, Link, Vec<IpAddr>)> = BTreeMap::new();
    let mut unresolved: BTreeSet<&EntityRef> = BTreeSet::new();
    let mut refused = Vec::new();
    for w in wanted {
        match find_link(&links, &w.name, &w.ips) {
            Ok((link, _)) if targets.contains_key(&link.name) => {
                errors.push(StatusError::new(
                    ErrorKind::InterfaceAttach,
                    format!(
                        "ExternalEntity {}: resolves to {}, which another interface of the ExternalNode already uses",
                        w.entity.name, link.name
                    ),
                ));
                unresolved.insert(&w.entity);
            }
            Ok((link, found)) => {
                // A link not attached yet must be able to be an uplink (an attached one is).
                let eligible = if attached.contains_key(&link.name) {
                    Ok(())
                } else {
                    uplink_candidate(&links, &link, &found)
                };
                match eligible {
                    Ok(()) => {
                        targets.insert(link.name.clone(), (w, link, found));
                    }
                    Err(why) => refused.push(StatusError::new(
                        why.kind(),
                        format!(
                            "{} (name {:?}, ips [{}]): resolves to {}, which cannot be an uplink: {why}; \
                             nothing on the host was changed",
                            w.entry,
                            w.name,
                            join_ips(&w.ips),
                            link.name
                        ),
                    )),
                }
            }
            Err(e) => {
                errors.push(StatusError::new(
                    e.kind(),
                    format!("ExternalEntity {}: {e}", w.entity.name),
                ));
                unresolved.insert(&w.entity);
            }
        }
    }
    // A refused entry refuses the whole ExternalNode: nothing is attached or detached, so the
    // last good state stays exactly as it is.
    if !refused.is_empty() {
        errors.extend(refused);
        return;
    }
    // 2. Attach new links; update the identity of attached ones (no host change, no flap).
    for (name, (w, link, ips)) in &targets {
        let result = match attached.get(name) {
            Some(a) if EntityRef::from(&a.record.entity) == w.entity && same_ips(&a.record.ips, ips) => {
                continue
            }
            Some(a) => procedures::update_identity(env, a, &w.entity, ips).await,
            None => procedures::attach(env, link, &w.entity, ips).await,
        };
        match result {
            Ok(a) => {
                attached.insert(name.clone(), a);
            }
            Err(e) => errors.push(e.to_status()),
        }
    }
    // 3. Detach what no wanted interface resolves to any more (after the attaches, so an entity
    //    that moved to another NIC is never without one).
    let stale: Vec<Attachment> = attached
        .values()
        .filter(|a| !targets.contains_key(&a.record.name))
        .filter(|a| !unresolved.contains(&EntityRef::from(&a.record.entity)))
        .cloned()
        .collect();
    for a in stale {
        match procedures::detach(env, &a).await {
            Ok(()) => {
                attached.remove(&a.record.name);
            }
            Err(e) => errors.push(e.to_status()),
        }
    }
}

/// Whether `link` (not attached yet) may become an uplink for `ips`.
fn uplink_candidate(links: &[(Link, Vec<Address>)], link: &Link, ips: &[IpAddr]) -> Result<(), Ineligible> {
    let all: Vec<Link> = links.iter().map(|(l, _)| l.clone()).collect();
    check_uplink(link, &all)?;
    let addrs = links
        .iter()
        .find(|(l, _)| l.index == link.index)
        .map_or(&[][..], |(_, a)| a.as_slice());
    check_addresses(link, addrs, ips)
}

fn join_ips(ips: &[IpAddr]) -> String {
    ips.iter().map(ToString::to_string).collect::<Vec<_>>().join(" ")
}

/// Whether two IP lists hold the same addresses, whatever their order.
fn same_ips(a: &[IpAddr], b: &[IpAddr]) -> bool {
    a.iter().collect::<BTreeSet<_>>() == b.iter().collect::<BTreeSet<_>>()
}

/// Reconciles as soon as OVSDB reports a change of the bridges, ports or interfaces (a
/// `del-br`, a `del-port`, a re-created database after an ovsdb-server restart), instead of at
/// the next timer pass. The timer stays as the backstop.
async fn watch_ovsdb(
    ovsdb: std::sync::Arc<dyn crate::ovs::ovsdb::Ovsdb>,
    manager: actix::Addr<InterfaceManager>,
) {
    const SETTLE: std::time::Duration = std::time::Duration::from_millis(100);
    // As the flow installer's reconnects to the same Open vSwitch; reset once a watch opened.
    let mut retry = RetryPolicy::OVS_RECONNECT.backoff();
    loop {
        match ovsdb.watch_changes().await {
            Ok(mut changes) => {
                retry.reset();
                while changes.recv().await.is_some() {
                    // One pass for a burst of updates (a del-br removes rows of three tables).
                    tokio::time::sleep(SETTLE).await;
                    while changes.try_recv().is_ok() {}
                    manager.do_send(Reconcile);
                }
                debug!("the OVSDB watch ended (ovsdb-server restarted?); watching again");
                manager.do_send(Reconcile);
            }
            Err(crate::ovs::ovsdb::OvsdbError::Unsupported(_)) => return,
            Err(e) => debug!("cannot watch OVSDB yet: {e}"),
        }
        tokio::time::sleep(retry.next_delay()).await;
    }
}

impl Actor for InterfaceManager {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.notify(Reconcile);
        ctx.spawn(watch_ovsdb(self.deps.ovsdb.clone(), ctx.address()).into_actor(self));
        ctx.run_interval(self.deps.timing.interface_reconcile, |_, ctx| {
            ctx.notify(Reconcile)
        });
    }
}

impl Handler<Reconcile> for InterfaceManager {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, _: Reconcile, _: &mut Context<Self>) -> Self::Result {
        let bridge_spec = BridgeSpec {
            name: self.deps.bridge.clone(),
            datapath_type: self.deps.datapath_type.as_str().to_string(),
            table_names: pipeline::table_names(),
        };
        let fut = reconcile(
            self.env.clone(),
            bridge_spec,
            self.recovered,
            self.attached.clone(),
            self.wanted(),
        );
        AtomicResponse::new(Box::pin(fut.into_actor(self).map(|outcome, act, _| {
            let repairs = &act.deps.metrics.datapath_repairs;
            // After a repair the flow installer hears at once (even with the same ofports), so
            // it reconnects to a re-created bridge without waiting for its backoff.
            let repaired_any = outcome.repaired.bridge || !outcome.repaired.ports.is_empty();
            if outcome.repaired.bridge {
                repairs.with_label_values(&["bridge"]).inc();
            }
            if !outcome.repaired.ports.is_empty() {
                repairs.with_label_values(&["port"]).inc();
                warn!(repaired = ?outcome.repaired.ports, "re-attached interfaces after their OVS ports or uplink changed");
            }
            let stale_deleted = act.env.stale_deleted.load(std::sync::atomic::Ordering::Relaxed);
            if stale_deleted > act.stale_deleted_counted {
                repairs
                    .with_label_values(&["stale_device"])
                    .inc_by(stale_deleted - act.stale_deleted_counted);
                act.stale_deleted_counted = stale_deleted;
            }
            act.recovered = outcome.recovered;
            act.attached = outcome.attached;
            let mut errors = outcome.errors;
            let health = act.env.store.write_health();
            act.deps
                .metrics
                .state_write_errors
                .with_label_values::<&str>(&[])
                .inc_by(health.failures.saturating_sub(act.write_failures_counted));
            act.write_failures_counted = health.failures;
            if let Some(e) = health.last_error {
                // First, so that `/readyz` (which shows the first error) names the cause.
                errors.insert(0, StatusError::new(ErrorKind::StateFile, format!(
                    "state directory: cannot write the interface records ({e}); attaches are refused, detaches complete from memory"
                )));
            }
            for e in &errors {
                if !act.last_errors.contains(e) {
                    error!("{}", e.message);
                }
            }
            if errors.is_empty() && !act.last_errors.is_empty() {
                info!("interfaces converged");
            }
            act.last_errors = errors;
            act.publish(repaired_any);
        })))
    }
}

impl Handler<ExternalNodeChanged> for InterfaceManager {
    type Result = ();

    fn handle(&mut self, msg: ExternalNodeChanged, ctx: &mut Context<Self>) {
        let next = Some(msg.node);
        if self.desired != next {
            self.desired = next;
            ctx.notify(Reconcile);
        }
    }
}

impl Handler<Resync> for InterfaceManager {
    type Result = ();
    fn handle(&mut self, _: Resync, _: &mut Context<Self>) {
        self.publish(true);
    }
}

impl Handler<StatusQuery> for InterfaceManager {
    type Result = actix::MessageResult<StatusQuery>;
    fn handle(&mut self, _: StatusQuery, _: &mut Context<Self>) -> Self::Result {
        let interfaces: Vec<_> = self.attached.values().map(Attachment::view).collect();
        let detail = InterfaceManagerStatus {
            errors: self.last_errors.clone(),
            external_node_known: self.desired.is_some(),
            interfaces,
            recovered: self.recovered,
            state_write_error: self
                .env
                .store
                .write_health()
                .last_error
                .map(|e| StatusError::new(ErrorKind::StateFile, e)),
        };
        actix::MessageResult(ActorStatus::new(
            self.recovered && self.last_errors.is_empty(),
            self.last_errors.first().cloned(),
            ActorDetail::InterfaceManager(detail),
        ))
    }
}

common_handlers!(InterfaceManager, InterfaceManagerOutputs);
