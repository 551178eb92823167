//! Which kernel device left behind by an OVS datapath that is gone may be deleted: a pure
//! decision over the kernel's view of one link, the interface's record and OVSDB.
//!
//! The userspace (netdev) datapath makes each internal port a persistent tap. When ovs-vswitchd
//! stops (a restart, a crash, OVS coming back on a fresh `conf.db`) the tap stays, with the
//! interface's name, MAC and addresses, and nothing attached to it. ovs-vswitchd re-opens it when
//! the same port is created again, so re-attaching keeps it; but when the agent wants the name
//! back for the NIC (a detach, or the roll-back of an interrupted change) the tap never goes away
//! and the NIC cannot be named back: the host stays without its addresses until someone deletes
//! the tap by hand. That leftover is deleted, and nothing else:
//!
//! - the link carries the interface's name and is not its uplink;
//! - OVSDB has no port of that name on the bridge (OVS does not own it);
//! - it is a persistent TAP device (an internal port of the netdev datapath, not a user's
//!   TUN device or any other kind);
//! - it has no carrier: a tap has carrier exactly while a process holds it open, so no
//!   ovs-vswitchd (nor anybody else) is using it;
//! - it has the MAC the agent gave the internal port (the record's).
//!
//! The kernel datapath's internal ports (kind `openvswitch`) are not deleted here: ovs-vswitchd
//! removes the ports it does not know from its datapath itself when it opens the datapath again
//! (creating the bridge does that); deleting one behind its back would only race it.

use crate::host::Link;

/// Why a link is a leftover the agent may delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleTap {
    pub index: u32,
    pub name: String,
}

/// Why a link is kept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Keep {
    #[error("{name} is not the interface's name")]
    OtherName { name: String },
    #[error("{name} is the interface's uplink")]
    Uplink { name: String },
    #[error("{name} has an OVS port: OVS owns it")]
    OvsPort { name: String },
    #[error("{name} is a kernel-datapath OVS device; ovs-vswitchd removes it when it opens its datapath")]
    KernelDatapath { name: String },
    #[error("{name} is not a persistent TAP device (kind {kind}): not an OVS internal port")]
    NotPersistentTap { name: String, kind: String },
    #[error("{name} has carrier or does not say: something holds it open")]
    InUse { name: String },
    #[error("{name} has MAC {found}, not the internal port's {want}: not ours")]
    OtherMac {
        name: String,
        found: String,
        want: String,
    },
}

/// What the decision needs to know of the interface.
#[derive(Debug, Clone, Copy)]
pub struct Interface<'a> {
    /// The internal port's name (the NIC's original name).
    pub name: &'a str,
    /// The renamed NIC's name (`eth0~`).
    pub uplink: &'a str,
    /// The MAC the internal port was given (the NIC's).
    pub mac: &'a str,
}

/// Whether `link` is a leftover internal port of `iface` that may be deleted; `ovs_has_port`
/// says whether OVSDB has a port with the link's name on the bridge.
pub fn stale_internal_port(link: &Link, iface: Interface<'_>, ovs_has_port: bool) -> Result<StaleTap, Keep> {
    let name = link.name.clone();
    if link.name == iface.uplink {
        return Err(Keep::Uplink { name });
    }
    if link.name != iface.name {
        return Err(Keep::OtherName { name });
    }
    if ovs_has_port {
        return Err(Keep::OvsPort { name });
    }
    let kind = link.nature.kind.as_deref().unwrap_or("none");
    if kind == "openvswitch" {
        return Err(Keep::KernelDatapath { name });
    }
    let persistent_tap = kind == "tun" && link.nature.tun.as_ref().is_some_and(|t| t.tap && t.persist);
    if !persistent_tap {
        return Err(Keep::NotPersistentTap {
            name,
            kind: kind.to_string(),
        });
    }
    if link.nature.carrier != Some(false) {
        return Err(Keep::InUse { name });
    }
    let found = link.mac.clone().unwrap_or_default();
    if !found.eq_ignore_ascii_case(iface.mac) {
        return Err(Keep::OtherMac {
            name,
            found,
            want: iface.mac.to_string(),
        });
    }
    Ok(StaleTap {
        index: link.index,
        name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::{LinkNature, TunNature};

    const MAC: &str = "02:ab:cd:00:00:01";
    const IFACE: Interface<'static> = Interface {
        name: "eth0",
        uplink: "eth0~",
        mac: MAC,
    };

    /// A persistent tap named eth0 with the record's MAC and no carrier: the leftover.
    fn leftover() -> Link {
        Link {
            index: 7,
            name: "eth0".into(),
            mac: Some(MAC.into()),
            mtu: 1400,
            up: true,
            promisc: false,
            nature: LinkNature {
                kind: Some("tun".into()),
                carrier: Some(false),
                tun: Some(TunNature {
                    tap: true,
                    persist: true,
                }),
                ..LinkNature::default()
            },
        }
    }

    #[test]
    fn a_persistent_tap_nobody_holds_with_our_name_and_mac_and_no_port_is_stale() {
        assert_eq!(
            stale_internal_port(&leftover(), IFACE, false),
            Ok(StaleTap {
                index: 7,
                name: "eth0".into()
            })
        );
        // MACs compare without regard to case.
        let mut l = leftover();
        l.mac = Some(MAC.to_uppercase());
        assert!(stale_internal_port(&l, IFACE, false).is_ok());
    }

    #[test]
    fn the_uplink_and_other_names_are_never_stale() {
        // The uplink shares the MAC; even a tap-looking uplink is kept.
        let mut uplink = leftover();
        uplink.name = "eth0~".into();
        assert!(matches!(
            stale_internal_port(&uplink, IFACE, false),
            Err(Keep::Uplink { .. })
        ));
        let mut other = leftover();
        other.name = "eth1".into();
        assert!(matches!(
            stale_internal_port(&other, IFACE, false),
            Err(Keep::OtherName { .. })
        ));
    }

    #[test]
    fn a_device_ovs_still_has_a_port_for_is_kept() {
        assert!(matches!(
            stale_internal_port(&leftover(), IFACE, true),
            Err(Keep::OvsPort { .. })
        ));
    }

    #[test]
    fn a_tap_in_use_or_of_unknown_carrier_is_kept() {
        for carrier in [Some(true), None] {
            let mut l = leftover();
            l.nature.carrier = carrier;
            assert!(
                matches!(stale_internal_port(&l, IFACE, false), Err(Keep::InUse { .. })),
                "carrier {carrier:?}"
            );
        }
    }

    #[test]
    fn only_persistent_taps_qualify() {
        let cases: Vec<(&str, LinkNature)> = vec![
            ("a NIC", LinkNature::default()),
            (
                "a veth",
                LinkNature {
                    kind: Some("veth".into()),
                    carrier: Some(false),
                    ..LinkNature::default()
                },
            ),
            (
                "a dummy",
                LinkNature {
                    kind: Some("dummy".into()),
                    carrier: Some(false),
                    ..LinkNature::default()
                },
            ),
            (
                "a TUN (IP) device",
                LinkNature {
                    kind: Some("tun".into()),
                    carrier: Some(false),
                    tun: Some(TunNature {
                        tap: false,
                        persist: true,
                    }),
                    ..LinkNature::default()
                },
            ),
            (
                "a tap that goes away with its holder",
                LinkNature {
                    kind: Some("tun".into()),
                    carrier: Some(false),
                    tun: Some(TunNature {
                        tap: true,
                        persist: false,
                    }),
                    ..LinkNature::default()
                },
            ),
            (
                "a tun device that did not describe itself",
                LinkNature {
                    kind: Some("tun".into()),
                    carrier: Some(false),
                    ..LinkNature::default()
                },
            ),
        ];
        for (what, nature) in cases {
            let mut l = leftover();
            l.nature = nature;
            assert!(
                matches!(
                    stale_internal_port(&l, IFACE, false),
                    Err(Keep::NotPersistentTap { .. })
                ),
                "{what} is kept"
            );
        }
    }

    #[test]
    fn kernel_datapath_devices_are_left_to_ovs() {
        let mut l = leftover();
        l.nature = LinkNature {
            kind: Some("openvswitch".into()),
            carrier: Some(false),
            ..LinkNature::default()
        };
        assert!(matches!(
            stale_internal_port(&l, IFACE, false),
            Err(Keep::KernelDatapath { .. })
        ));
    }

    #[test]
    fn a_tap_with_another_mac_is_someone_elses() {
        let mut l = leftover();
        l.mac = Some("02:aa:bb:cc:dd:ee".into());
        assert!(matches!(
            stale_internal_port(&l, IFACE, false),
            Err(Keep::OtherMac { .. })
        ));
        l.mac = None;
        assert!(matches!(
            stale_internal_port(&l, IFACE, false),
            Err(Keep::OtherMac { .. })
        ));
    }
}
