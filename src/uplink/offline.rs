//! Restoring the host without the agent running (`antrea-vm-agent detach-all`), under the
//! state-dir lock of [`super::lock`] so that no agent re-attaches what it detaches.
//!
//! `detach-all` works from the interface records: every recorded interface is rolled back with the
//! same procedure the agent uses (ports deleted, NIC renamed back, MTU, promiscuity, addresses and
//! routes restored), whatever phase or step it was in. Ports of ours that no record explains are
//! handled too: an attachment without a record (the Go agent's) is adopted first, stale ports are
//! deleted. The bridge and its flows stay, as upstream leaves them: without uplinks they see no
//! traffic. When OVSDB cannot be reached the kernel side is still restored; the record is kept at
//! the `delete-ports` step so that a later `detach-all` (or the agent's next start) removes the
//! OVS ports, and the run fails saying so.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use super::lock::{AgentLock, LockError};
use super::procedures::{self, ext_id, Env, ProcedureError};
use super::store::{InterfaceRecord, Phase, RecordStore, Step};
use crate::config::Config;
use crate::ovs::ovsdb::{OvsdbClient, OvsdbError, PortRecord};

/// How long a detach waits for ovs-vswitchd to remove the internal port's netdev.
const PORT_WAIT: Duration = Duration::from_secs(10);

/// What `detach-all` did: one line per interface or finding, and whether everything is restored.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Done and fine.
    pub done: Vec<String>,
    /// Not (completely) restored; each line says why and what to do.
    pub problems: Vec<String>,
    /// Set when OVSDB could not be reached (only the kernel side was looked at).
    pub ovs_unreachable: Option<String>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
    pub fn nothing_to_do(&self) -> bool {
        self.done.is_empty() && self.problems.is_empty()
    }
}

fn is_ours(port: &PortRecord) -> bool {
    matches!(
        port.external_ids.get(ext_id::ANTREA_TYPE).map(String::as_str),
        Some(ext_id::TYPE_HOST | ext_id::TYPE_UPLINK)
    )
}

fn summary(r: &InterfaceRecord) -> String {
    format!(
        "MAC {}, MTU {}, {} address(es), {} route(s)",
        r.mac,
        r.mtu,
        r.addresses.len(),
        r.routes.len()
    )
}

/// Restores every interface of `env`'s records and removes our ports from `env.bridge`.
pub async fn detach_all(env: &Env) -> Report {
    let mut report = Report::default();
    let (mut records, store_errors) = env.store.load_all();
    for e in store_errors {
        report
            .problems
            .push(format!("{e}; nothing restored from it (fix or remove the file)"));
    }
    let ports = match env.ovsdb.list_ports(&env.bridge).await {
        Ok(p) => Ok(p),
        // No bridge, no ports: nothing of ours in OVS.
        Err(OvsdbError::NoBridge(_)) => Ok(Vec::new()),
        Err(e) => Err(e),
    };
    let ports = match ports {
        Ok(p) => p,
        Err(e) => {
            report.ovs_unreachable = Some(e.to_string());
            for record in records.values() {
                restore_kernel_only(env, record, &e, &mut report).await;
            }
            return report;
        }
    };

    // Ports of ours that no record explains: an attachment made without a record (adopted, then
    // detached like the others), or leftovers the kernel no longer matches (deleted).
    let recorded: BTreeSet<String> = records
        .values()
        .flat_map(|r| [r.name.clone(), r.uplink_name.clone()])
        .collect();
    let mut explained = recorded.clone();
    let mut adopted = Vec::new();
    for port in ports.iter().filter(|p| is_ours(p) && !recorded.contains(&p.name)) {
        if port.external_ids.get(ext_id::ANTREA_TYPE).map(String::as_str) != Some(ext_id::TYPE_HOST) {
            continue;
        }
        let uplink = port
            .external_ids
            .get(ext_id::UPLINK_NAME)
            .cloned()
            .unwrap_or_else(|| format!("{}~", port.name));
        match env.host.link_by_name(&uplink).await {
            Ok(Some(_)) => match procedures::adopt_without_record(env, port, &uplink).await {
                Ok(record) => {
                    explained.insert(record.name.clone());
                    explained.insert(record.uplink_name.clone());
                    adopted.push(record.name.clone());
                    records.insert(record.name.clone(), record);
                }
                Err(e) => {
                    explained.insert(port.name.clone());
                    explained.insert(uplink);
                    report.problems.push(format!(
                        "{}: attached without a record and cannot be adopted: {e}",
                        port.name
                    ));
                }
            },
            Ok(None) => {}
            Err(e) => {
                report
                    .problems
                    .push(format!("{}: cannot look up its uplink {uplink}: {e}", port.name));
                explained.insert(port.name.clone());
                explained.insert(uplink);
            }
        }
    }
    for port in ports
        .iter()
        .filter(|p| is_ours(p) && !explained.contains(&p.name))
    {
        match env.ovsdb.delete_port(&env.bridge, &port.name).await {
            Ok(()) => report.done.push(format!(
                "{}: stale OVS port deleted from {} (no interface of the host is attached through it)",
                port.name, env.bridge
            )),
            Err(e) => report
                .problems
                .push(format!("{}: cannot delete stale OVS port: {e}", port.name)),
        }
    }

    for record in records.values() {
        // Whether the NIC is still renamed decides what the roll back does to the kernel.
        let renamed = matches!(env.host.link_by_name(&record.uplink_name).await, Ok(Some(_)));
        let how = if adopted.contains(&record.name) {
            " (attached without a record, e.g. by the Go agent; rebuilt from OVS and the internal port)"
        } else {
            match (record.phase, renamed) {
                (Phase::Attached, _) => "",
                (Phase::Attaching, _) => " (an attach had stopped part way: rolled back)",
                (Phase::Detaching, true) => " (a detach had stopped part way: finished)",
                (Phase::Detaching, false) => " (its kernel side was restored earlier, without OVS)",
            }
        };
        let kernel = if renamed {
            format!("{} renamed back to {}", record.uplink_name, record.name)
        } else {
            format!("{} checked", record.name)
        };
        match procedures::roll_back(env, record).await {
            Ok(()) => report.done.push(format!(
                "{}: restored{how}: {kernel}, {}; OVS ports {} and {} deleted from {}",
                record.name,
                summary(record),
                record.name,
                record.uplink_name,
                env.bridge
            )),
            Err(e) => report.problems.push(format!(
                "{}: not restored: {e} (its record {} is kept; fix the cause and run detach-all again)",
                record.name,
                env.store.path(&record.name).display()
            )),
        }
    }
    report
}

/// OVSDB is unreachable: puts the NIC back in the kernel (the internal port's netdev is gone with
/// ovs-vswitchd in the userspace datapath) and keeps the record for the ports.
async fn restore_kernel_only(env: &Env, record: &InterfaceRecord, ovs: &OvsdbError, report: &mut Report) {
    let name = record.name.as_str();
    match kernel_restore(env, record).await {
        Ok(()) => report.problems.push(format!(
            "{name}: kernel side restored ({} renamed back to {name}, {}), but OVS is unreachable \
             ({ovs}): its ports {name} and {} may still be on bridge {}. Its record {} is kept: \
             start OVS and run detach-all again (or start the agent, which removes them)",
            record.uplink_name,
            summary(record),
            record.uplink_name,
            env.bridge,
            env.store.path(name).display()
        )),
        Err(e) => report.problems.push(format!(
            "{name}: not restored: {e}; OVS is unreachable ({ovs}). Start OVS and run detach-all again"
        )),
    }
}

async fn kernel_restore(env: &Env, record: &InterfaceRecord) -> Result<(), ProcedureError> {
    let name = record.name.as_str();
    let uplink = record.uplink_name.as_str();
    let host_err = |step: &'static str| {
        move |source| ProcedureError::Host {
            iface: name.to_string(),
            step,
            source,
        }
    };
    let mut r = record.clone();
    r.phase = Phase::Detaching;
    journal(env, &mut r, Step::RenameBack)?;
    if let Some(up) = env
        .host
        .link_by_name(uplink)
        .await
        .map_err(host_err("look up uplink"))?
    {
        if let Some(internal) = env
            .host
            .link_by_name(name)
            .await
            .map_err(host_err("look up internal port"))?
        {
            // The internal port still holds the name; its addresses and routes go with it if it
            // is the leftover tap of a dead ovs-vswitchd. OVSDB cannot be asked here; a tap
            // nobody holds (no carrier) is used by no ovs-vswitchd.
            if let Err(why) = procedures::delete_if_leftover(env, &r, &internal, false).await? {
                return Err(ProcedureError::Invalid {
                    iface: name.into(),
                    message: format!(
                        "the OVS internal port {name} still exists ({why}), so {uplink} cannot be \
                         renamed back"
                    ),
                });
            }
        }
        env.host
            .rename(up.index, name)
            .await
            .map_err(host_err("rename back"))?;
    }
    let nic = env
        .host
        .link_by_name(name)
        .await
        .map_err(host_err("look up NIC"))?
        .ok_or_else(|| ProcedureError::Invalid {
            iface: name.into(),
            message: "neither the NIC nor its uplink exists".into(),
        })?;
    journal(env, &mut r, Step::RestoreLink)?;
    env.host
        .set_mtu(nic.index, r.mtu)
        .await
        .map_err(host_err("restore MTU"))?;
    env.host
        .set_up(nic.index, true)
        .await
        .map_err(host_err("set link up"))?;
    if nic.promisc != r.promisc {
        env.host
            .set_promisc(nic.index, r.promisc)
            .await
            .map_err(host_err("restore promiscuity"))?;
    }
    procedures::restore_config(env, &mut r, &nic, (Step::RestoreAddresses, Step::RestoreRoutes)).await?;
    // What is left is deleting the ports: a roll back from this step is idempotent on the kernel.
    journal(env, &mut r, Step::DeletePorts)
}

fn journal(env: &Env, r: &mut InterfaceRecord, step: Step) -> Result<(), ProcedureError> {
    r.step = step;
    env.store.save(r).map_err(|source| ProcedureError::Store {
        iface: r.name.clone(),
        step: "journal step",
        source,
    })
}

/// `antrea-vm-agent detach-all --config F`: prints what it did per interface on stdout, problems
/// on stderr; exit 0 when everything is restored, 1 otherwise.
pub fn command(config_path: &Path) -> ExitCode {
    let config = match Config::load(config_path) {
        Ok(c) => c,
        Err(problems) => {
            eprintln!("{}: invalid configuration", config_path.display());
            eprintln!("{problems}");
            return ExitCode::FAILURE;
        }
    };
    let state_dir = config.state_dir.clone();
    // No state dir: no records, and no agent (it holds its lock in there). Do not create one: a
    // detach-all must leave a host without the agent as it is.
    let lock = if state_dir.is_dir() {
        AgentLock::acquire(&state_dir, "detach-all").map(Some)
    } else {
        Ok(None)
    };
    let _lock = match lock {
        Ok(l) => l,
        Err(e @ LockError::Held { .. }) => {
            eprintln!(
                "antrea-vm-agent detach-all: refusing: {e}. Stop it first (systemctl stop antrea-vm-agent): \
                 a running agent re-attaches what is detached under it"
            );
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("antrea-vm-agent detach-all: {e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("antrea-vm-agent detach-all: cannot start a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let report = runtime.block_on(async {
        let host = crate::host::open_system().map_err(|e| format!("cannot open netlink: {e}"))?;
        let env = Env {
            ovsdb: Arc::new(OvsdbClient::new(config.ovsdb_socket())),
            host,
            bridge: config.ovs_bridge.clone(),
            store: RecordStore::new(&state_dir),
            port_wait: PORT_WAIT,
            stale_deleted: Default::default(),
        };
        Ok::<_, String>(detach_all(&env).await)
    });
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            eprintln!("antrea-vm-agent detach-all: {e}");
            return ExitCode::FAILURE;
        }
    };
    if report.nothing_to_do() {
        let records = state_dir.join("interfaces");
        match &report.ovs_unreachable {
            None => println!(
                "nothing to detach: no interface records in {} and no ports of the agent on bridge {}",
                records.display(),
                config.ovs_bridge
            ),
            // No record means no NIC of ours is renamed; ports in OVS (if any) are harmless.
            Some(e) => println!(
                "nothing to detach: no interface records in {} (OVS is unreachable, {e}: its ports \
                 were not checked)",
                records.display()
            ),
        }
        return ExitCode::SUCCESS;
    }
    for line in &report.done {
        println!("{line}");
    }
    for line in &report.problems {
        eprintln!("antrea-vm-agent detach-all: {line}");
    }
    if report.ok() {
        println!(
            "every interface is restored; bridge {} and its flows are left in place (harmless without uplinks)",
            config.ovs_bridge
        );
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "antrea-vm-agent detach-all: {} problem(s); not everything is restored",
            report.problems.len()
        );
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use super::*;
    use crate::attachment::EntityRef;
    use crate::host::fake::FakeHost;
    use crate::host::{Address, HostNet, Link, LinkNature, Route, TunNature};
    use crate::ovs::ovsdb::{FakeOvsdb, Ovsdb, PortSpec};

    const MAC: &str = "02:00:00:00:01:01";

    struct World {
        _dir: tempfile::TempDir,
        env: Env,
        host: Arc<FakeHost>,
        ovsdb: Arc<FakeOvsdb>,
    }

    fn address(s: &str) -> Address {
        Address {
            addr: s.parse().expect("address"),
            flags: 0,
            scope: 0,
            valid_lft: u32::MAX,
            preferred_lft: u32::MAX,
            label: None,
            broadcast: None,
            rt_priority: None,
        }
    }

    fn default_route() -> Route {
        Route {
            dst: "0.0.0.0/0".parse().expect("prefix"),
            gateway: Some("10.0.0.1".parse().expect("gw")),
            prefsrc: None,
            protocol: 16,
            scope: 0,
            kind: 1,
            table: 254,
            metric: Some(100),
            oif: 0,
            onlink: false,
        }
    }

    /// The netdev datapath's internal port: a persistent tap; `held` while ovs-vswitchd runs.
    fn internal_tap(held: bool) -> LinkNature {
        LinkNature {
            kind: Some("tun".into()),
            carrier: Some(held),
            tun: Some(TunNature {
                tap: true,
                persist: true,
            }),
            ..LinkNature::default()
        }
    }

    fn world() -> World {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = Arc::new(FakeHost::new());
        host.add_link("eth0", MAC, 1400);
        host.seed_address("eth0", &address("10.0.0.2/24")).expect("seed");
        host.seed_route("eth0", &default_route()).expect("seed route");
        let ovsdb = Arc::new(FakeOvsdb::new());
        // Like ovs-vswitchd, deleting a port removes only the netdev OVS made for it, never a NIC
        // that has the name by then.
        let made = Arc::new(Mutex::new(Vec::<u32>::new()));
        let (h, m) = (host.clone(), made.clone());
        ovsdb.on_port_created(Box::new(move |spec| {
            if spec.iface_type == "internal" {
                let index = h.add_link(&spec.name, spec.mac.as_deref().unwrap_or(MAC), 1500);
                // Like the userspace datapath: a persistent tap, held (carrier) by ovs-vswitchd.
                h.set_nature(&spec.name, internal_tap(true));
                m.lock().expect("lock").push(index);
            }
        }));
        let (h, m) = (host.clone(), made);
        ovsdb.on_port_deleted(Box::new(move |spec| {
            let ours = h
                .snapshot()
                .link(&spec.name)
                .is_some_and(|l| m.lock().expect("lock").contains(&l.link.index));
            if spec.iface_type == "internal" && ours {
                h.remove_link(&spec.name);
            }
        }));
        let env = Env {
            ovsdb: ovsdb.clone(),
            host: host.clone(),
            bridge: "br-int".into(),
            store: RecordStore::new(dir.path()),
            port_wait: Duration::from_secs(1),
            stale_deleted: Default::default(),
        };
        World {
            _dir: dir,
            env,
            host,
            ovsdb,
        }
    }

    /// What must come back: the NIC's name, MAC, MTU, addresses and routes.
    async fn nic_state(w: &World) -> (Link, Vec<Address>, Vec<(String, Option<std::net::IpAddr>)>) {
        let link = w.host.link_by_name("eth0").await.expect("links").expect("eth0");
        let addrs = w.host.addresses(link.index).await.expect("addresses");
        let routes = w
            .host
            .routes(link.index)
            .await
            .expect("routes")
            .into_iter()
            .map(|r| (r.dst.to_string(), r.gateway))
            .collect();
        let mut link = link;
        link.index = 0;
        (link, addrs, routes)
    }

    async fn attach(w: &World) {
        w.ovsdb
            .ensure_bridge(&crate::ovs::ovsdb::BridgeSpec {
                name: "br-int".into(),
                datapath_type: "netdev".into(),
                table_names: vec![],
            })
            .await
            .expect("bridge");
        let link = w.host.link_by_name("eth0").await.expect("links").expect("eth0");
        let entity = EntityRef {
            namespace: "ns".into(),
            name: "vm1-3e616".into(),
        };
        procedures::attach(&w.env, &link, &entity, &["10.0.0.2".parse().expect("ip")])
            .await
            .expect("attach");
        assert!(w.host.link_by_name("eth0~").await.expect("links").is_some());
    }

    #[tokio::test]
    async fn detach_all_restores_every_record_and_deletes_stale_ports_then_has_nothing_to_do() {
        let w = world();
        let before = nic_state(&w).await;
        attach(&w).await;
        // A leftover pair of ports whose NIC is long gone (no record, no uplink in the kernel).
        for (name, kind) in [("gone", ext_id::TYPE_HOST), ("gone~", ext_id::TYPE_UPLINK)] {
            w.ovsdb
                .create_port(
                    "br-int",
                    &PortSpec {
                        name: name.into(),
                        iface_type: String::new(),
                        mac: None,
                        external_ids: BTreeMap::from([(ext_id::ANTREA_TYPE.to_string(), kind.to_string())]),
                    },
                )
                .await
                .expect("port");
        }
        let report = detach_all(&w.env).await;
        assert!(report.ok(), "{report:?}");
        assert_eq!(report.done.len(), 3, "{report:?}");
        assert!(report
            .done
            .iter()
            .any(|l| l.starts_with("eth0: restored: eth0~ renamed back")));
        assert!(report
            .done
            .iter()
            .any(|l| l.starts_with("gone: stale OVS port deleted")));
        assert_eq!(nic_state(&w).await, before);
        assert!(w.ovsdb.ports("br-int").is_empty());
        assert!(w.env.store.load_all().0.is_empty());
        assert_eq!(
            w.env.stale_deleted.load(std::sync::atomic::Ordering::Relaxed),
            0,
            "OVS removed its own port"
        );

        let again = detach_all(&w.env).await;
        assert!(again.nothing_to_do(), "{again:?}");
    }

    #[tokio::test]
    async fn without_ovs_the_kernel_is_restored_and_the_record_kept_for_the_ports() {
        let w = world();
        let before = nic_state(&w).await;
        attach(&w).await;
        // ovs-vswitchd is gone: its tap stays, held by nobody.
        w.host.set_nature("eth0", internal_tap(false));
        w.ovsdb.fail_next_with(
            "list_ports",
            OvsdbError::Connect {
                path: "/run/openvswitch/db.sock".into(),
                source: std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
            },
        );
        let report = detach_all(&w.env).await;
        assert!(!report.ok());
        assert!(report
            .ovs_unreachable
            .as_deref()
            .is_some_and(|e| e.contains("db.sock")));
        assert!(
            report.problems[0].starts_with("eth0: kernel side restored"),
            "{report:?}"
        );
        assert_eq!(
            w.env.stale_deleted.load(std::sync::atomic::Ordering::Relaxed),
            1,
            "the leftover tap was deleted"
        );
        assert_eq!(nic_state(&w).await, before);
        let (records, _) = w.env.store.load_all();
        let record = records.get("eth0").expect("record kept");
        assert_eq!((record.phase, record.step), (Phase::Detaching, Step::DeletePorts));
        assert_eq!(w.ovsdb.ports("br-int").len(), 2, "the ports are still there");

        // OVS back: the ports go, the kernel stays as it is.
        let report = detach_all(&w.env).await;
        assert!(report.ok(), "{report:?}");
        assert!(
            report.done[0].contains("restored earlier, without OVS"),
            "{report:?}"
        );
        assert_eq!(nic_state(&w).await, before);
        assert!(w.ovsdb.ports("br-int").is_empty());
        assert!(w.env.store.load_all().0.is_empty());
    }

    #[tokio::test]
    async fn an_internal_port_that_is_not_an_orphan_blocks_the_kernel_restore() {
        let w = world();
        attach(&w).await;
        // OVSDB unreachable, but the tap is still held (ovs-vswitchd runs): not a leftover.
        w.ovsdb.fail_next("list_ports", "connection refused");
        let report = detach_all(&w.env).await;
        assert!(
            report.problems[0].contains("something holds it open"),
            "{report:?}"
        );
        // Nothing changed on the host: still attached.
        assert!(w.host.link_by_name("eth0~").await.expect("links").is_some());
    }
}
