//! The steps that move a NIC behind OVS and back, over the [`Ovsdb`] and [`HostNet`] traits:
//! attach (save record → rename → uplink port → internal port → move MTU/addresses/routes),
//! detach (ports gone → rename back → restore exactly), recovery at start (adopt what is attached,
//! finish or roll back what a crash interrupted), and healing (put addresses and routes back on an
//! internal port that lost them, e.g. after ovs-vswitchd re-created it). The interface manager's
//! reconcile pass also reads the host's links with their addresses here (`links_with_addresses`)
//! and heals every attached interface in one go (`heal_all`).
//!
//! Moves never leave two default routes: the source's routes are deleted before the destination's
//! are added. A failed attach is rolled back, addresses included (upstream leaves the host without
//! them, defect D11).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use super::stale;
use super::store::{InterfaceRecord, Phase, RecordStore, Step};
use crate::attachment::{AttachedInterface, EntityRef};
use crate::error_kind::{ErrorKind, StatusError};
use crate::failpoint;
use crate::host::{Address, HostError, HostNet, Link, Route};
use crate::ovs::ovsdb::{Ovsdb, OvsdbError, PortRecord, PortSpec};

/// external_ids keys Antrea puts on its ports.
pub mod ext_id {
    pub const ANTREA_TYPE: &str = "antrea-type";
    pub const TYPE_HOST: &str = "host";
    pub const TYPE_UPLINK: &str = "uplink";
    pub const UPLINK_NAME: &str = "uplink-name";
    pub const UPLINK_PORT: &str = "uplink-port";
    pub const ENTITY_NAME: &str = "entity-name";
    pub const ENTITY_NAMESPACE: &str = "entity-namespace";
    pub const IP_ADDRESS: &str = "ip-address";
}

/// Linux IFNAMSIZ - 1.
const MAX_IFNAME: usize = 15;

/// What the procedures work with.
#[derive(Clone)]
pub struct Env {
    pub ovsdb: Arc<dyn Ovsdb>,
    pub host: Arc<dyn HostNet>,
    pub bridge: String,
    pub store: RecordStore,
    pub port_wait: Duration,
    /// Leftover devices of a datapath that is gone, deleted so far (see [`super::stale`]); the
    /// actor adds them to `antrea_vm_agent_datapath_repairs_total{kind="stale_device"}`.
    pub stale_deleted: Arc<AtomicU64>,
}

/// An attached interface as the interface manager tracks it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attachment {
    pub record: InterfaceRecord,
    pub ofport: u32,
    pub uplink_ofport: u32,
}

impl Attachment {
    pub fn view(&self) -> AttachedInterface {
        AttachedInterface {
            name: self.record.name.clone(),
            ofport: self.ofport,
            uplink_name: self.record.uplink_name.clone(),
            uplink_ofport: self.uplink_ofport,
            ips: self.record.ips.clone(),
            entity: EntityRef::from(&self.record.entity),
        }
    }
}

/// Errors of one interface's procedure, naming the interface and the step.
#[derive(Debug, thiserror::Error)]
pub enum ProcedureError {
    #[error("interface {iface}: {step}: {source}")]
    Host {
        iface: String,
        step: &'static str,
        source: HostError,
    },
    #[error("interface {iface}: {step}: {source}")]
    Ovsdb {
        iface: String,
        step: &'static str,
        source: OvsdbError,
    },
    #[error("interface {iface}: {step}: {source}")]
    Store {
        iface: String,
        step: &'static str,
        source: super::store::StoreError,
    },
    #[error("interface {iface}: {message}")]
    Invalid { iface: String, message: String },
    /// OVS has not caught up yet (no ofport, no netdev); the same step can succeed later.
    #[error("interface {iface}: not ready: {message}")]
    NotReady { iface: String, message: String },
}

impl ProcedureError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            ProcedureError::Ovsdb { .. } => ErrorKind::Ovsdb,
            ProcedureError::Store { .. } => ErrorKind::StateFile,
            ProcedureError::Host { source, .. } => source.kind(),
            ProcedureError::Invalid { .. } | ProcedureError::NotReady { .. } => ErrorKind::InterfaceAttach,
        }
    }

    /// The error as a status shows it.
    pub fn to_status(&self) -> StatusError {
        StatusError::new(self.kind(), self.to_string())
    }
}

/// The host links cannot be listed, so nothing can be decided about the interfaces.
#[derive(Debug, thiserror::Error)]
#[error("list host links: {0}")]
pub struct LinksError(#[source] pub HostError);

impl LinksError {
    pub fn kind(&self) -> ErrorKind {
        self.0.kind()
    }
}

pub(super) fn host_err<'a>(
    iface: &'a str,
    step: &'static str,
) -> impl FnOnce(HostError) -> ProcedureError + 'a {
    move |source| ProcedureError::Host {
        iface: iface.to_string(),
        step,
        source,
    }
}

pub(super) fn db_err<'a>(
    iface: &'a str,
    step: &'static str,
) -> impl FnOnce(OvsdbError) -> ProcedureError + 'a {
    move |source| ProcedureError::Ovsdb {
        iface: iface.to_string(),
        step,
        source,
    }
}

fn store_err<'a>(
    iface: &'a str,
    step: &'static str,
) -> impl FnOnce(super::store::StoreError) -> ProcedureError + 'a {
    move |source| ProcedureError::Store {
        iface: iface.to_string(),
        step,
        source,
    }
}

/// Treats "already exists" as success.
fn tolerate_exists(r: Result<(), HostError>) -> Result<(), HostError> {
    match r {
        Err(HostError::Exists(_)) => Ok(()),
        other => other,
    }
}

pub(super) fn host_port_external_ids(
    record: &InterfaceRecord,
    uplink_uuid: &str,
) -> BTreeMap<String, String> {
    let ips = record
        .ips
        .iter()
        .map(|ip| ip.to_string())
        .collect::<Vec<_>>()
        .join(",");
    [
        (ext_id::ANTREA_TYPE, ext_id::TYPE_HOST.to_string()),
        (ext_id::UPLINK_NAME, record.uplink_name.clone()),
        (ext_id::UPLINK_PORT, uplink_uuid.to_string()),
        (ext_id::ENTITY_NAME, record.entity.name.clone()),
        (ext_id::ENTITY_NAMESPACE, record.entity.namespace.clone()),
        (ext_id::IP_ADDRESS, ips),
    ]
    .into_iter()
    .filter(|(_, v)| !v.is_empty())
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Polls until `name` exists (`want == true`) or is gone; returns the link when it exists.
pub(super) async fn wait_link(env: &Env, name: &str, want: bool) -> Result<Option<Link>, ProcedureError> {
    let deadline = tokio::time::Instant::now() + env.port_wait;
    loop {
        let link = env
            .host
            .link_by_name(name)
            .await
            .map_err(host_err(name, "look up link"))?;
        if link.is_some() == want {
            return Ok(link);
        }
        if tokio::time::Instant::now() >= deadline {
            let state = if want { "appear" } else { "disappear" };
            return Err(ProcedureError::NotReady {
                iface: name.to_string(),
                message: format!("netdev did not {state} within {:?}", env.port_wait),
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Journals `step` in the record before it runs (and marks its failpoint). Healing an attached
/// interface is not journaled: nothing is in flight there.
async fn begin(env: &Env, record: &mut InterfaceRecord, step: Step) -> Result<(), ProcedureError> {
    if record.phase == Phase::Attached {
        return Ok(());
    }
    record.step = step;
    env.store
        .save_off_thread(record)
        .await
        .map_err(|source| ProcedureError::Store {
            iface: record.name.clone(),
            step: "journal step",
            source,
        })?;
    failpoint::hit(&format!("{}:{}", record.phase.as_str(), step.as_str()));
    Ok(())
}

/// [`begin`] for a restore: when the journal cannot be written (a full, read-only or failing
/// state directory) the restore goes on from memory, since putting the NIC back matters more
/// than the journal; a crash before it ends then replays from the last step that was written.
async fn journal_or_go_on(env: &Env, record: &mut InterfaceRecord, step: Step) {
    if let Err(e) = begin(env, record, step).await {
        warn!(iface = %record.name, step = step.as_str(), "cannot journal the step; restoring from memory: {e}");
    }
}

/// Moves MTU, addresses and routes from `src` (if any) onto `dst`. The source's routes and
/// addresses are removed first, so there is never a moment with two default routes.
async fn move_config(
    env: &Env,
    record: &mut InterfaceRecord,
    src: Option<&Link>,
    dst: &Link,
) -> Result<(), ProcedureError> {
    let host = &env.host;
    let d = dst.name.as_str();
    begin(env, record, Step::ClearSource).await?;
    host.set_mtu(dst.index, record.mtu)
        .await
        .map_err(host_err(d, "set MTU"))?;
    host.set_up(dst.index, true)
        .await
        .map_err(host_err(d, "set link up"))?;
    if let Some(src) = src {
        let s = src.name.as_str();
        for route in host.routes(src.index).await.map_err(host_err(s, "list routes"))? {
            host.del_route(&route)
                .await
                .map_err(host_err(s, "delete route"))?;
        }
        for addr in host
            .addresses(src.index)
            .await
            .map_err(host_err(s, "list addresses"))?
        {
            host.del_address(src.index, &addr)
                .await
                .map_err(host_err(s, "delete address"))?;
        }
    }
    restore_config(env, record, dst, (Step::AddAddresses, Step::AddRoutes)).await
}

/// Adds the record's addresses, then its routes, to `dst` (present ones are left alone),
/// journaling the two steps.
pub(crate) async fn restore_config(
    env: &Env,
    record: &mut InterfaceRecord,
    dst: &Link,
    (addresses_step, routes_step): (Step, Step),
) -> Result<(), ProcedureError> {
    let d = dst.name.as_str();
    // A restore goes on without the journal; an attach stops (and is rolled back).
    let restoring = record.phase == Phase::Detaching;
    if restoring {
        journal_or_go_on(env, record, addresses_step).await;
    } else {
        begin(env, record, addresses_step).await?;
    }
    for addr in &record.addresses {
        tolerate_exists(env.host.add_address(dst.index, addr).await).map_err(host_err(d, "add address"))?;
    }
    if restoring {
        journal_or_go_on(env, record, routes_step).await;
    } else {
        begin(env, record, routes_step).await?;
    }
    // On-link routes first: a route through a gateway needs the gateway's subnet to be reachable.
    let (direct, via_gateway): (Vec<&Route>, Vec<&Route>) =
        record.routes.iter().partition(|r| r.gateway.is_none());
    for route in direct.into_iter().chain(via_gateway) {
        tolerate_exists(env.host.add_route(dst.index, route).await).map_err(host_err(d, "add route"))?;
    }
    Ok(())
}

/// Reads what must be saved about a NIC before it is attached.
async fn snapshot(env: &Env, link: &Link) -> Result<(Vec<Address>, Vec<Route>), ProcedureError> {
    let n = link.name.as_str();
    let addresses: Vec<Address> = env
        .host
        .addresses(link.index)
        .await
        .map_err(host_err(n, "list addresses"))?
        .into_iter()
        .filter(|a| !a.is_link_local())
        .collect();
    let routes = env
        .host
        .routes(link.index)
        .await
        .map_err(host_err(n, "list routes"))?;
    Ok((addresses, routes))
}

/// Attaches `link` as the interface of `entity` with the ExternalNode's `ips`.
#[tracing::instrument(name = "attach", skip_all, fields(iface = %link.name))]
pub async fn attach(
    env: &Env,
    link: &Link,
    entity: &EntityRef,
    ips: &[IpAddr],
) -> Result<Attachment, ProcedureError> {
    let name = link.name.clone();
    let uplink_name = format!("{name}~");
    if uplink_name.len() > MAX_IFNAME {
        return Err(ProcedureError::Invalid {
            iface: name,
            message: format!(
                "name is too long to add the '~' suffix (at most {} characters)",
                MAX_IFNAME - 1
            ),
        });
    }
    if env
        .host
        .link_by_name(&uplink_name)
        .await
        .map_err(host_err(&name, "look up uplink"))?
        .is_some()
    {
        return Err(ProcedureError::Invalid {
            iface: name,
            message: format!("a link named {uplink_name} already exists; refusing to attach"),
        });
    }
    let Some(mac) = link.mac.clone() else {
        return Err(ProcedureError::Invalid {
            iface: name,
            message: "link has no MAC address".into(),
        });
    };
    // A network manager that does not leave the renamed NIC alone would fight the agent over it
    // (configure it twice, or take it back): say so, naming the drop-in that prevents it.
    for warning in env.host.manager_warnings(&name).await {
        warn!(iface = %name, "{warning}");
    }
    let (addresses, routes) = snapshot(env, link).await?;
    let mut record = InterfaceRecord {
        name: name.clone(),
        uplink_name: uplink_name.clone(),
        entity: entity.into(),
        ips: ips.to_vec(),
        mac,
        mtu: link.mtu,
        promisc: link.promisc,
        addresses,
        routes,
        phase: Phase::Attaching,
        step: Step::Saved,
    };
    env.store
        .save_off_thread(&record)
        .await
        .map_err(store_err(&name, "save record"))?;
    failpoint::hit("attaching:saved");
    info!(iface = %name, entity = %entity.name, "attaching interface");
    match attach_steps(env, link, &mut record).await {
        Ok((ofport, uplink_ofport)) => {
            record.phase = Phase::Attached;
            record.step = Step::Done;
            if let Err(e) = env.store.save_off_thread(&record).await {
                // Attached but not recorded: a crash now would leave nothing saying so. Put the
                // NIC back (from memory) rather than keep an attach the journal does not know.
                let e = store_err(&name, "save record")(e);
                warn!(iface = %name, "attach done but not journaled, rolling back: {e}");
                if let Err(r) = roll_back(env, &record).await {
                    warn!(iface = %name, "roll back incomplete, will retry: {r}");
                }
                return Err(e);
            }
            info!(iface = %name, ofport, uplink_ofport, "interface attached");
            Ok(Attachment {
                record,
                ofport,
                uplink_ofport,
            })
        }
        Err(e) => {
            warn!(iface = %name, "attach failed, rolling back: {e}");
            match roll_back(env, &record).await {
                Ok(()) => info!(iface = %name, "attach rolled back; interface restored"),
                Err(r) => warn!(iface = %name, "roll back incomplete, will retry: {r}"),
            }
            Err(e)
        }
    }
}

async fn attach_steps(
    env: &Env,
    link: &Link,
    record: &mut InterfaceRecord,
) -> Result<(u32, u32), ProcedureError> {
    let name = record.name.clone();
    let uplink = record.uplink_name.clone();
    let (name, uplink) = (name.as_str(), uplink.as_str());
    begin(env, record, Step::Rename).await?;
    env.host
        .rename(link.index, uplink)
        .await
        .map_err(host_err(name, "rename to uplink name"))?;
    begin(env, record, Step::UplinkPort).await?;
    // Leftovers of an earlier attempt would make the creates fail.
    env.ovsdb
        .delete_port(&env.bridge, uplink)
        .await
        .map_err(db_err(uplink, "remove stale uplink port"))?;
    env.ovsdb
        .delete_port(&env.bridge, name)
        .await
        .map_err(db_err(name, "remove stale internal port"))?;
    let uplink_ids = BTreeMap::from([(ext_id::ANTREA_TYPE.to_string(), ext_id::TYPE_UPLINK.to_string())]);
    let uplink_uuid = env
        .ovsdb
        .create_port(
            &env.bridge,
            &PortSpec {
                name: uplink.into(),
                iface_type: String::new(),
                mac: None,
                external_ids: uplink_ids,
            },
        )
        .await
        .map_err(db_err(uplink, "create uplink port"))?;
    let uplink_ofport = env
        .ovsdb
        .wait_ofport(uplink, env.port_wait)
        .await
        .map_err(db_err(uplink, "wait for uplink ofport"))?;
    begin(env, record, Step::InternalPort).await?;
    let spec = PortSpec {
        name: name.into(),
        iface_type: "internal".into(),
        mac: Some(record.mac.clone()),
        external_ids: host_port_external_ids(record, &uplink_uuid),
    };
    env.ovsdb
        .create_port(&env.bridge, &spec)
        .await
        .map_err(db_err(name, "create internal port"))?;
    let ofport = env
        .ovsdb
        .wait_ofport(name, env.port_wait)
        .await
        .map_err(db_err(name, "wait for internal ofport"))?;
    let internal = wait_link(env, name, true)
        .await?
        .ok_or_else(|| ProcedureError::Invalid {
            iface: name.into(),
            message: "internal port vanished".into(),
        })?;
    let Some(renamed) = env
        .host
        .link_by_name(uplink)
        .await
        .map_err(host_err(uplink, "look up uplink"))?
    else {
        // The NIC vanished (hot-unplug): never move the configuration onto a port with nothing
        // behind it.
        return Err(ProcedureError::Invalid {
            iface: name.into(),
            message: format!("{uplink} vanished during the attach"),
        });
    };
    move_config(env, record, Some(&renamed), &internal).await?;
    Ok((ofport, uplink_ofport))
}

/// Puts a NIC back from whatever point an attach reached (or a detach started from): ports
/// removed, uplink renamed back, MTU, addresses and routes restored; the record is deleted.
pub async fn roll_back(env: &Env, record: &InterfaceRecord) -> Result<(), ProcedureError> {
    let name = record.name.as_str();
    let uplink = record.uplink_name.as_str();
    let mut record = record.clone();
    record.phase = Phase::Detaching;
    journal_or_go_on(env, &mut record, Step::DeletePorts).await;
    env.ovsdb
        .delete_port(&env.bridge, name)
        .await
        .map_err(db_err(name, "delete internal port"))?;
    env.ovsdb
        .delete_port(&env.bridge, uplink)
        .await
        .map_err(db_err(uplink, "delete uplink port"))?;
    journal_or_go_on(env, &mut record, Step::RenameBack).await;
    if let Some(uplink_link) = env
        .host
        .link_by_name(uplink)
        .await
        .map_err(host_err(uplink, "look up uplink"))?
    {
        delete_stale_internal_port(env, &record).await?;
        wait_link(env, name, false).await?;
        env.host
            .rename(uplink_link.index, name)
            .await
            .map_err(host_err(uplink, "rename back"))?;
    }
    let nic = env
        .host
        .link_by_name(name)
        .await
        .map_err(host_err(name, "look up NIC"))?
        .ok_or_else(|| ProcedureError::Invalid {
            iface: name.into(),
            message: "neither the NIC nor its uplink exists".into(),
        })?;
    journal_or_go_on(env, &mut record, Step::RestoreLink).await;
    env.host
        .set_mtu(nic.index, record.mtu)
        .await
        .map_err(host_err(name, "restore MTU"))?;
    env.host
        .set_up(nic.index, true)
        .await
        .map_err(host_err(name, "set link up"))?;
    // OVS turned promiscuity on for the uplink by name; once renamed it cannot turn it off.
    if nic.promisc != record.promisc {
        env.host
            .set_promisc(nic.index, record.promisc)
            .await
            .map_err(host_err(name, "restore promiscuity"))?;
    }
    restore_config(
        env,
        &mut record,
        &nic,
        (Step::RestoreAddresses, Step::RestoreRoutes),
    )
    .await?;
    if let Err(e) = env.store.remove_off_thread(name).await {
        // The NIC is back; a stale record only makes the next pass restore it again.
        warn!(iface = %name, "interface restored, but its record could not be removed: {e}");
    }
    Ok(())
}

/// Deletes the device holding the interface's name if it is provably a leftover internal port
/// of a datapath that is gone ([`super::stale`]): OVS restarted (on a fresh database, or
/// without the port) leaves the netdev datapath's persistent tap behind, and the NIC could never
/// take its name back. Anything else is left alone (the wait that follows then reports it).
async fn delete_stale_internal_port(env: &Env, record: &InterfaceRecord) -> Result<(), ProcedureError> {
    let name = record.name.as_str();
    let Some(link) = env
        .host
        .link_by_name(name)
        .await
        .map_err(host_err(name, "look up internal port"))?
    else {
        return Ok(());
    };
    let ovs_has_port = match env.ovsdb.list_ports(&env.bridge).await {
        Ok(ports) => ports.iter().any(|p| p.name == name),
        Err(OvsdbError::NoBridge(_)) => false,
        Err(e) => return Err(db_err(name, "list ports")(e)),
    };
    if let Err(keep) = delete_if_leftover(env, record, &link, ovs_has_port).await? {
        tracing::debug!(iface = %name, "the device with the interface's name is kept: {keep}");
    }
    Ok(())
}

/// Deletes `link` (the device with the interface's name) if [`stale::stale_internal_port`] says
/// it is a leftover; logs and counts the deletion. `Ok(Err(why))` when it is kept.
pub(super) async fn delete_if_leftover(
    env: &Env,
    record: &InterfaceRecord,
    link: &Link,
    ovs_has_port: bool,
) -> Result<Result<(), stale::Keep>, ProcedureError> {
    let name = record.name.as_str();
    let iface = stale::Interface {
        name,
        uplink: &record.uplink_name,
        mac: &record.mac,
    };
    let tap = match stale::stale_internal_port(link, iface, ovs_has_port) {
        Ok(tap) => tap,
        Err(keep) => return Ok(Err(keep)),
    };
    warn!(iface = %name, index = tap.index,
        "a leftover internal port of a datapath that is gone holds the interface's name (a persistent tap with its MAC that no OVS port and no process uses); deleting it");
    match env.host.delete_link(tap.index).await {
        Ok(()) | Err(HostError::NoLink(_)) => {}
        Err(e) => return Err(host_err(name, "delete the leftover internal port")(e)),
    }
    env.stale_deleted.fetch_add(1, Ordering::Relaxed);
    Ok(Ok(()))
}

/// Rolls back every recorded attach or detach that is unfinished and not tracked as attached
/// (a rollback that failed earlier, e.g. while OVSDB was down). Returns the errors; the records
/// of failures stay for the next try.
pub async fn retry_unfinished(env: &Env, attached: &BTreeMap<String, Attachment>) -> Vec<StatusError> {
    let (records, _) = env.store.load_all();
    let mut errors = Vec::new();
    for record in records.values() {
        if record.phase == Phase::Attached || attached.contains_key(&record.name) {
            continue;
        }
        warn!(iface = %record.name, phase = %record.phase.as_str(), step = %record.step.as_str(),
            "finishing an interrupted change: restoring the interface");
        if let Err(e) = roll_back(env, record).await {
            errors.push(e.to_status());
        }
    }
    errors
}

/// Detaches an attached interface and restores the NIC exactly as it was.
#[tracing::instrument(name = "detach", skip_all, fields(iface = %attachment.record.name))]
pub async fn detach(env: &Env, attachment: &Attachment) -> Result<(), ProcedureError> {
    info!(iface = %attachment.record.name, "detaching interface");
    roll_back(env, &attachment.record).await?;
    info!(iface = %attachment.record.name, "interface restored");
    Ok(())
}

/// Updates the entity and IPs of an attached interface (OVSDB external_ids and record only; the
/// host is not touched).
pub async fn update_identity(
    env: &Env,
    attachment: &Attachment,
    entity: &EntityRef,
    ips: &[IpAddr],
) -> Result<Attachment, ProcedureError> {
    let name = attachment.record.name.as_str();
    let mut next = attachment.clone();
    next.record.entity = entity.into();
    next.record.ips = ips.to_vec();
    let ports = env
        .ovsdb
        .list_ports(&env.bridge)
        .await
        .map_err(db_err(name, "list ports"))?;
    let uplink_uuid = ports
        .iter()
        .find(|p| p.name == next.record.uplink_name)
        .map(|p| p.uuid.clone())
        .unwrap_or_default();
    env.ovsdb
        .set_port_external_ids(name, &host_port_external_ids(&next.record, &uplink_uuid))
        .await
        .map_err(db_err(name, "update external_ids"))?;
    env.store
        .save(&next.record)
        .map_err(store_err(name, "save record"))?;
    info!(iface = %name, entity = %entity.name, "interface identity updated");
    Ok(next)
}

/// What recovery found.
#[derive(Debug, Default)]
pub struct Recovered {
    pub attachments: Vec<Attachment>,
    /// Problems with single interfaces; the others were recovered.
    pub errors: Vec<StatusError>,
}

fn ofport_of(ports: &[PortRecord], name: &str) -> Option<u32> {
    ports
        .iter()
        .find(|p| p.name == name)
        .and_then(|p| p.ofport)
        .and_then(|o| u32::try_from(o).ok())
        .filter(|&o| o > 0)
}

/// Rebuilds the set of attached interfaces from OVSDB, the kernel and the records: adopts what is
/// fully attached (no change to the host), and finishes or rolls back what a crash interrupted.
pub async fn recover(env: &Env) -> Result<Recovered, ProcedureError> {
    let bridge = env.bridge.as_str();
    let ports = env
        .ovsdb
        .list_ports(bridge)
        .await
        .map_err(db_err(bridge, "list ports"))?;
    let (records, store_errors) = env.store.load_all();
    let mut out = Recovered {
        errors: store_errors
            .iter()
            .map(|e| StatusError::new(e.kind(), e.to_string()))
            .collect(),
        ..Default::default()
    };
    let host_ports: Vec<&PortRecord> = ports
        .iter()
        .filter(|p| p.external_ids.get(ext_id::ANTREA_TYPE).map(String::as_str) == Some(ext_id::TYPE_HOST))
        .collect();
    for port in &host_ports {
        match recover_port(env, &ports, port, records.get(&port.name)).await {
            Ok(Some(a)) => out.attachments.push(a),
            Ok(None) => {}
            // Recovering without this interface would publish a view that lacks it and remove its
            // flows; retry the whole recovery instead once OVS is ready.
            Err(e @ ProcedureError::NotReady { .. }) => return Err(e),
            Err(e) => out.errors.push(e.to_status()),
        }
    }
    for (name, record) in &records {
        if host_ports.iter().any(|p| &p.name == name) {
            continue;
        }
        if lost_by_ovs(env, record).await? {
            // OVS lost the ports of an interface that was fully attached (it came back on a
            // fresh database, or they were deleted while the agent was down) while the NIC is
            // still the renamed uplink. Rolling back would open the host until the re-attach;
            // instead the interface stays attached and the repair that follows in the same pass
            // re-creates its ports from the record (and heal fills in the ofports).
            warn!(iface = %name, "OVS has no ports for an attached interface (a new database?); re-attaching it from its record");
            out.attachments.push(Attachment {
                record: record.clone(),
                ofport: 0,
                uplink_ofport: 0,
            });
            continue;
        }
        warn!(iface = %name, phase = ?record.phase, "unfinished change found; restoring the interface");
        if let Err(e) = roll_back(env, record).await {
            out.errors.push(e.to_status());
        }
    }
    Ok(out)
}

/// Whether a record without an internal port in OVSDB is an attached interface whose ports OVS
/// lost: fully attached, and the uplink is still there under its renamed name.
async fn lost_by_ovs(env: &Env, record: &InterfaceRecord) -> Result<bool, ProcedureError> {
    if record.phase != Phase::Attached {
        return Ok(false);
    }
    let uplink = record.uplink_name.as_str();
    Ok(env
        .host
        .link_by_name(uplink)
        .await
        .map_err(host_err(uplink, "look up uplink"))?
        .is_some())
}

async fn recover_port(
    env: &Env,
    ports: &[PortRecord],
    port: &PortRecord,
    record: Option<&InterfaceRecord>,
) -> Result<Option<Attachment>, ProcedureError> {
    let name = port.name.as_str();
    let uplink_name = port
        .external_ids
        .get(ext_id::UPLINK_NAME)
        .cloned()
        .unwrap_or_else(|| format!("{name}~"));
    let uplink_link = env
        .host
        .link_by_name(&uplink_name)
        .await
        .map_err(host_err(name, "look up uplink"))?;
    if uplink_link.is_none() {
        // OVSDB remembers an attachment the kernel does not have: a reboot (the NIC came back
        // under its own name) or a half-finished detach. Drop the stale ports and restore.
        warn!(iface = %name, "OVS has ports for an interface the kernel no longer has attached; cleaning up");
        match record {
            Some(r) => roll_back(env, r).await?,
            None => {
                env.ovsdb
                    .delete_port(&env.bridge, name)
                    .await
                    .map_err(db_err(name, "delete stale port"))?;
                env.ovsdb
                    .delete_port(&env.bridge, &uplink_name)
                    .await
                    .map_err(db_err(&uplink_name, "delete stale port"))?;
            }
        }
        return Ok(None);
    }
    let record = match record {
        Some(r) if r.phase == Phase::Detaching => {
            roll_back(env, r).await?;
            return Ok(None);
        }
        Some(r) => {
            let mut r = r.clone();
            if r.phase == Phase::Attaching {
                // The crash came after the ports were made: finish the move (idempotent).
                let internal = wait_link(env, name, true)
                    .await?
                    .ok_or_else(|| ProcedureError::Invalid {
                        iface: name.into(),
                        message: "internal port missing".into(),
                    })?;
                move_config(env, &mut r, uplink_link.as_ref(), &internal).await?;
                r.phase = Phase::Attached;
                env.store
                    .save_off_thread(&r)
                    .await
                    .map_err(store_err(name, "save record"))?;
            }
            r
        }
        None => adopt_without_record(env, port, &uplink_name).await?,
    };
    let (Some(ofport), Some(uplink_ofport)) = (ofport_of(ports, name), ofport_of(ports, &uplink_name)) else {
        return Err(ProcedureError::NotReady {
            iface: name.into(),
            message: "OVS has not assigned ofports (is ovs-vswitchd running?)".into(),
        });
    };
    info!(iface = %name, ofport, uplink_ofport, "adopted attached interface");
    Ok(Some(Attachment {
        record,
        ofport,
        uplink_ofport,
    }))
}

/// An interface attached by an earlier agent that kept no record (e.g. the Go agent): the record
/// is rebuilt from OVSDB and the internal port's current configuration.
pub(crate) async fn adopt_without_record(
    env: &Env,
    port: &PortRecord,
    uplink_name: &str,
) -> Result<InterfaceRecord, ProcedureError> {
    let name = port.name.as_str();
    let internal = env
        .host
        .link_by_name(name)
        .await
        .map_err(host_err(name, "look up internal port"))?
        .ok_or_else(|| ProcedureError::NotReady {
            iface: name.into(),
            message: "internal port netdev missing (is ovs-vswitchd running?)".into(),
        })?;
    let (addresses, routes) = snapshot(env, &internal).await?;
    let ips = port
        .external_ids
        .get(ext_id::IP_ADDRESS)
        .map(|s| s.split(',').filter_map(|ip| ip.trim().parse().ok()).collect())
        .unwrap_or_default();
    let record = InterfaceRecord {
        name: name.into(),
        uplink_name: uplink_name.into(),
        entity: super::store::EntityRefRecord {
            namespace: port
                .external_ids
                .get(ext_id::ENTITY_NAMESPACE)
                .cloned()
                .unwrap_or_default(),
            name: port
                .external_ids
                .get(ext_id::ENTITY_NAME)
                .cloned()
                .unwrap_or_default(),
        },
        ips,
        mac: internal
            .mac
            .clone()
            .or_else(|| port.mac.clone())
            .unwrap_or_default(),
        mtu: internal.mtu,
        promisc: false,
        addresses,
        routes,
        phase: Phase::Attached,
        step: Step::Done,
    };
    env.store
        .save_off_thread(&record)
        .await
        .map_err(store_err(name, "save record"))?;
    Ok(record)
}

/// Every host link with its addresses, for choosing the NICs to attach; renamed uplinks are left
/// out.
pub async fn links_with_addresses(env: &Env) -> Result<Vec<(Link, Vec<Address>)>, LinksError> {
    let links = env.host.links().await.map_err(LinksError)?;
    let mut out = Vec::with_capacity(links.len());
    for link in links {
        // Renamed uplinks carry no addresses of ours; skip them so they can never be picked.
        if link.name.ends_with('~') {
            continue;
        }
        match env.host.addresses(link.index).await {
            Ok(addrs) => out.push((link, addrs)),
            Err(e) => warn!(link = %link.name, "cannot read addresses, skipping link: {e}"),
        }
    }
    Ok(out)
}

/// [`heal`]s every attached interface against the bridge's ports, replacing each with its healed
/// state; errors are per interface and land in `errors`.
pub async fn heal_all(env: &Env, attached: &mut BTreeMap<String, Attachment>, errors: &mut Vec<StatusError>) {
    if attached.is_empty() {
        return;
    }
    let ports = match env.ovsdb.list_ports(&env.bridge).await {
        Ok(p) => p,
        Err(e) => {
            errors.push(StatusError::new(
                ErrorKind::Ovsdb,
                format!("bridge {}: list ports: {e}", env.bridge),
            ));
            return;
        }
    };
    for a in attached.values_mut() {
        match heal(env, a, &ports).await {
            Ok(next) => *a = next,
            Err(e) => errors.push(e.to_status()),
        }
    }
}

/// Re-applies MTU, link state, addresses and routes to an attached interface's internal port if it
/// lost them (ovs-vswitchd re-creates internal netdevs empty after a restart). Returns the current
/// ofports, which can change when OVS re-creates ports.
pub async fn heal(
    env: &Env,
    attachment: &Attachment,
    ports: &[PortRecord],
) -> Result<Attachment, ProcedureError> {
    let r = &attachment.record;
    let name = r.name.as_str();
    let Some(internal) = env
        .host
        .link_by_name(name)
        .await
        .map_err(host_err(name, "look up internal port"))?
    else {
        return Err(ProcedureError::Invalid {
            iface: name.into(),
            message: "internal port netdev is missing".into(),
        });
    };
    let have: Vec<IpAddr> = env
        .host
        .addresses(internal.index)
        .await
        .map_err(host_err(name, "list addresses"))?
        .iter()
        .map(Address::ip)
        .collect();
    let missing_addr = r.addresses.iter().any(|a| !have.contains(&a.ip()));
    let routes = env
        .host
        .routes(internal.index)
        .await
        .map_err(host_err(name, "list routes"))?;
    let missing_route = r.routes.iter().any(|want| {
        !routes
            .iter()
            .any(|got| got.dst == want.dst && got.gateway == want.gateway && got.table == want.table)
    });
    if missing_addr || missing_route || !internal.up || internal.mtu != r.mtu {
        warn!(iface = %name, missing_addr, missing_route, up = internal.up, mtu = internal.mtu,
            "internal port lost its configuration; re-applying");
        // An attached record: `begin` journals nothing here.
        move_config(env, &mut r.clone(), None, &internal).await?;
    }
    let mut next = attachment.clone();
    if let (Some(o), Some(u)) = (ofport_of(ports, name), ofport_of(ports, &r.uplink_name)) {
        next.ofport = o;
        next.uplink_ofport = u;
    }
    Ok(next)
}
