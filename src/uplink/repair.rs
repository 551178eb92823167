//! Datapath repair for attached interfaces: puts back what was removed or changed under them
//! while the agent runs — the bridge deleted (`ovs-vsctl del-br`) or gone with a re-created
//! database, a port deleted (`del-port`), the agent's `external_ids` on the internal port
//! changed, the uplink renamed by hand. Every attached interface is rebuilt from its record (the
//! journal in memory), the host is never left without its addresses for longer than the repair
//! takes, and nothing is detached.
//!
//! Runs on every reconcile pass, before healing (which then re-applies addresses and routes and
//! picks up the new ofports).

use std::collections::BTreeMap;

use tracing::warn;

use super::procedures::{self, db_err, ext_id, host_err, Attachment, Env, ProcedureError};
use crate::error_kind::{ErrorKind, StatusError};
use crate::ovs::ovsdb::{BridgeSpec, OvsdbError, PortRecord, PortSpec};

/// What one pass repaired (for the log and `antrea_vm_agent_datapath_repairs_total`).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Repaired {
    pub bridge: bool,
    /// One entry per repaired port or uplink, saying what was done.
    pub ports: Vec<String>,
}

/// Checks the bridge and every attached interface's ports and uplink; re-creates what is
/// missing. Errors are per interface and land in `errors`.
pub async fn repair_all(
    env: &Env,
    bridge_spec: &BridgeSpec,
    attached: &BTreeMap<String, Attachment>,
    errors: &mut Vec<StatusError>,
) -> Repaired {
    let mut repaired = Repaired::default();
    if attached.is_empty() {
        return repaired;
    }
    let ports = match env.ovsdb.list_ports(&env.bridge).await {
        Ok(p) => p,
        Err(OvsdbError::NoBridge(_)) => {
            warn!(bridge = %env.bridge, interfaces = attached.len(),
                "the bridge is gone (deleted, or OVS runs on a new database); re-creating it and re-attaching every interface");
            if let Err(e) = env.ovsdb.ensure_bridge(bridge_spec).await {
                errors.push(StatusError::new(
                    ErrorKind::Ovsdb,
                    format!("bridge {}: re-create: {e}", env.bridge),
                ));
                return repaired;
            }
            repaired.bridge = true;
            match env.ovsdb.list_ports(&env.bridge).await {
                Ok(p) => p,
                Err(e) => {
                    errors.push(StatusError::new(
                        ErrorKind::Ovsdb,
                        format!("bridge {}: list ports: {e}", env.bridge),
                    ));
                    return repaired;
                }
            }
        }
        Err(e) => {
            errors.push(StatusError::new(
                ErrorKind::Ovsdb,
                format!("bridge {}: list ports: {e}", env.bridge),
            ));
            return repaired;
        }
    };
    for a in attached.values() {
        match repair_one(env, a, &ports).await {
            Ok(done) => repaired.ports.extend(done),
            Err(e) => errors.push(e.to_status()),
        }
    }
    repaired
}

/// Repairs one interface; returns what it did.
async fn repair_one(env: &Env, a: &Attachment, ports: &[PortRecord]) -> Result<Vec<String>, ProcedureError> {
    let r = &a.record;
    let (name, uplink) = (r.name.as_str(), r.uplink_name.as_str());
    let mut done = Vec::new();
    // The uplink renamed by hand: OVS lost it (its port names a link that no longer exists).
    // It is found by its MAC (which the internal port shares, so that one is skipped) and named
    // back; OVS opens it again once the name is back.
    if env
        .host
        .link_by_name(uplink)
        .await
        .map_err(host_err(uplink, "look up uplink"))?
        .is_none()
    {
        let links = env.host.links().await.map_err(host_err(uplink, "list links"))?;
        let renamed: Vec<_> = links
            .iter()
            .filter(|l| l.mac.as_deref() == Some(r.mac.as_str()) && l.name != name)
            .collect();
        match renamed.as_slice() {
            [l] => {
                warn!(iface = %name, uplink, found = %l.name, "the uplink was renamed; naming it back");
                env.host
                    .rename(l.index, uplink)
                    .await
                    .map_err(host_err(uplink, "rename the uplink back"))?;
                done.push(format!("{uplink} renamed back from {}", l.name));
            }
            [] => {
                return Err(ProcedureError::Invalid {
                    iface: name.into(),
                    message: format!("the uplink {uplink} is gone (no link has its MAC {})", r.mac),
                })
            }
            many => {
                return Err(ProcedureError::Invalid {
                    iface: name.into(),
                    message: format!(
                        "the uplink {uplink} is gone and several links have its MAC: {}",
                        many.iter()
                            .map(|l| l.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                })
            }
        }
    }
    let port = |n: &str| ports.iter().find(|p| p.name == n);
    let uplink_uuid = match port(uplink) {
        Some(p) => p.uuid.clone(),
        None => {
            warn!(iface = %name, uplink, "the uplink's OVS port is gone; re-creating it");
            let uuid = env
                .ovsdb
                .create_port(
                    &env.bridge,
                    &PortSpec {
                        name: uplink.into(),
                        iface_type: String::new(),
                        mac: None,
                        external_ids: BTreeMap::from([(
                            ext_id::ANTREA_TYPE.to_string(),
                            ext_id::TYPE_UPLINK.to_string(),
                        )]),
                    },
                )
                .await
                .map_err(db_err(uplink, "re-create uplink port"))?;
            env.ovsdb
                .wait_ofport(uplink, env.port_wait)
                .await
                .map_err(db_err(uplink, "wait for uplink ofport"))?;
            done.push(format!("{uplink} port re-created"));
            uuid
        }
    };
    let want_ids = procedures::host_port_external_ids(r, &uplink_uuid);
    match port(name) {
        Some(p) if p.external_ids == want_ids => {}
        Some(_) => {
            warn!(iface = %name, "the internal port's external_ids changed; putting them back");
            env.ovsdb
                .set_port_external_ids(name, &want_ids)
                .await
                .map_err(db_err(name, "restore external_ids"))?;
            done.push(format!("{name} external_ids restored"));
        }
        None => {
            warn!(iface = %name, "the internal OVS port is gone; re-creating it");
            env.ovsdb
                .create_port(
                    &env.bridge,
                    &PortSpec {
                        name: name.into(),
                        iface_type: "internal".into(),
                        mac: Some(r.mac.clone()),
                        external_ids: want_ids,
                    },
                )
                .await
                .map_err(db_err(name, "re-create internal port"))?;
            env.ovsdb
                .wait_ofport(name, env.port_wait)
                .await
                .map_err(db_err(name, "wait for internal ofport"))?;
            // Healing, next, puts the addresses and routes back on the new netdev.
            procedures::wait_link(env, name, true).await?;
            done.push(format!("{name} port re-created"));
        }
    }
    Ok(done)
}
