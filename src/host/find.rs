//! Finding the host link that holds an ExternalNode's IPs (upstream `getHostInterfaceName`):
//! a pure function over a snapshot of links and their addresses.

use std::net::IpAddr;

use super::{Address, Link};

/// Why no single link could be chosen for a set of IPs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FindError {
    /// Two of the IPs live on different links.
    #[error("find different interfaces by IPs, ifName {first}, linkName {second}")]
    DifferentLinks { first: String, second: String },
    /// None of the IPs is configured on any link.
    #[error("cannot find interface via IPs [{}]", join_ips(.ips))]
    NotFound { ips: Vec<IpAddr> },
    /// The interface named in the ExternalNode exists, but its IPs are on another link.
    #[error("interface {name} is named in the ExternalNode but its IPs [{}] are on {holder}", join_ips(.ips))]
    NameAndIpsDisagree {
        name: String,
        holder: String,
        ips: Vec<IpAddr>,
    },
    /// The interface named in the ExternalNode exists but holds none of its IPs.
    #[error("interface {name} is named in the ExternalNode but holds none of its IPs [{}]", join_ips(.ips))]
    NameWithoutIps { name: String, ips: Vec<IpAddr> },
}

impl FindError {
    pub fn kind(&self) -> crate::error_kind::ErrorKind {
        crate::error_kind::ErrorKind::InterfaceAttach
    }
}

fn join_ips(ips: &[IpAddr]) -> String {
    ips.iter().map(ToString::to_string).collect::<Vec<_>>().join(" ")
}

/// Finds the one link that carries the given IPs.
///
/// Upstream semantics: every link is searched (none is ignored); an IP that is on no link is
/// skipped (with a log line); if the found IPs are on different links it is an error naming
/// both (the first link found and the conflicting one); if none is found it is an error
/// listing the IPs asked for. IPv4-mapped IPv6 addresses match their IPv4 form (like Go's
/// `net.IP.Equal`). The returned IPs are the found ones, deduplicated and sorted by their text
/// form, as upstream's `sets.List` of strings does (so `ip-address` external IDs match).
pub fn find_link_by_ips(
    links_with_addrs: &[(Link, Vec<Address>)],
    ips: &[IpAddr],
) -> Result<(Link, Vec<IpAddr>), FindError> {
    let mut chosen: Option<&Link> = None;
    let mut found: Vec<IpAddr> = Vec::new();
    for ip in ips {
        let want = ip.to_canonical();
        let holder = links_with_addrs
            .iter()
            .find(|(_, addrs)| addrs.iter().any(|a| a.addr.addr().to_canonical() == want));
        let Some((link, _)) = holder else {
            // Reconciles resolve often; an absent IP is normal (not configured yet), so no warning.
            tracing::debug!(ip = %ip, "Failed to get device from IP: no link holds it");
            continue;
        };
        found.push(want);
        match chosen {
            None => chosen = Some(link),
            Some(first) if first.index != link.index => {
                return Err(FindError::DifferentLinks {
                    first: first.name.clone(),
                    second: link.name.clone(),
                });
            }
            Some(_) => {}
        }
    }
    let Some(link) = chosen else {
        return Err(FindError::NotFound { ips: ips.to_vec() });
    };
    found.sort_by_key(|ip| ip.to_string());
    found.dedup();
    Ok((link.clone(), found))
}

/// Finds the link of an ExternalNode interface by its name and its IPs (upstream looks at the IPs
/// only, D16). When the name matches a link, that link must hold the IPs that are found (IPs on
/// no link are skipped, as upstream); a name that matches no link is only a label (as upstream
/// treats it) and the IPs decide.
pub fn find_link(
    links_with_addrs: &[(Link, Vec<Address>)],
    name: &str,
    ips: &[IpAddr],
) -> Result<(Link, Vec<IpAddr>), FindError> {
    let by_name = (!name.is_empty())
        .then(|| links_with_addrs.iter().find(|(l, _)| l.name == name))
        .flatten();
    let by_ips = find_link_by_ips(links_with_addrs, ips);
    match (by_name, by_ips) {
        (None, result) => result,
        (Some((link, _)), Ok((holder, found))) if holder.index == link.index => Ok((holder, found)),
        (Some(_), Ok((holder, found))) => Err(FindError::NameAndIpsDisagree {
            name: name.to_string(),
            holder: holder.name,
            ips: found,
        }),
        (Some(_), Err(FindError::NotFound { ips })) => Err(FindError::NameWithoutIps {
            name: name.to_string(),
            ips,
        }),
        (Some(_), Err(e)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::kernel::LIFETIME_FOREVER;

    fn link(index: u32, name: &str) -> Link {
        Link {
            index,
            name: name.into(),
            mac: Some(format!("02:00:00:00:00:{index:02x}")),
            mtu: 1500,
            up: true,
            promisc: false,
            nature: crate::host::LinkNature::default(),
        }
    }

    fn addr(s: &str) -> Address {
        Address {
            addr: s.parse().expect("test address"),
            flags: 0,
            scope: 0,
            valid_lft: LIFETIME_FOREVER,
            preferred_lft: LIFETIME_FOREVER,
            label: None,
            broadcast: None,
            rt_priority: None,
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("test ip")
    }

    fn host() -> Vec<(Link, Vec<Address>)> {
        vec![
            (link(1, "lo"), vec![addr("127.0.0.1/8"), addr("::1/128")]),
            (
                link(2, "eth0"),
                vec![
                    addr("10.0.0.9/24"),
                    addr("10.0.0.10/24"),
                    addr("fd00::9/64"),
                    addr("fe80::1/64"),
                ],
            ),
            (link(3, "eth1"), vec![addr("192.168.1.5/24")]),
        ]
    }

    #[test]
    fn find_link_prefers_the_name_and_checks_the_ips_agree() {
        // Name and IPs agree.
        let (l, ips) = find_link(&host(), "eth0", &[ip("10.0.0.9")]).expect("found");
        assert_eq!((l.name.as_str(), ips), ("eth0", vec![ip("10.0.0.9")]));
        // Name given, but the link holds none of the IPs: an error naming it.
        let err = find_link(&host(), "eth1", &[ip("172.16.0.1")]).expect_err("no IPs on it");
        assert_eq!(
            err.to_string(),
            "interface eth1 is named in the ExternalNode but holds none of its IPs [172.16.0.1]"
        );
        // Name given, IPs on another link: a clear error naming both.
        let err = find_link(&host(), "eth1", &[ip("10.0.0.9")]).expect_err("disagree");
        assert_eq!(
            err.to_string(),
            "interface eth1 is named in the ExternalNode but its IPs [10.0.0.9] are on eth0"
        );
        // A name that is no link is a label only: the IPs decide.
        let (l, _) = find_link(&host(), "nic-a", &[ip("192.168.1.5")]).expect("found by IPs");
        assert_eq!(l.name, "eth1");
        // No name: the IPs decide, with upstream's errors.
        assert!(matches!(
            find_link(&host(), "", &[ip("172.16.0.1")]),
            Err(FindError::NotFound { .. })
        ));
    }

    #[test]
    fn finds_dual_stack_link_and_sorts_by_text() {
        let (l, ips) =
            find_link_by_ips(&host(), &[ip("fd00::9"), ip("10.0.0.9"), ip("10.0.0.10")]).expect("found");
        assert_eq!(l.name, "eth0");
        // Text order, as upstream's sorted string set: "10.0.0.10" < "10.0.0.9" < "fd00::9".
        assert_eq!(ips, vec![ip("10.0.0.10"), ip("10.0.0.9"), ip("fd00::9")]);
    }

    #[test]
    fn missing_ips_are_skipped() {
        let (l, ips) = find_link_by_ips(&host(), &[ip("10.9.9.9"), ip("fd00::9")]).expect("found");
        assert_eq!(l.index, 2);
        assert_eq!(ips, vec![ip("fd00::9")]);
    }

    #[test]
    fn duplicates_are_collapsed() {
        let (_, ips) = find_link_by_ips(&host(), &[ip("10.0.0.9"), ip("10.0.0.9")]).expect("found");
        assert_eq!(ips, vec![ip("10.0.0.9")]);
    }

    #[test]
    fn ipv4_mapped_matches_ipv4() {
        let (l, ips) = find_link_by_ips(&host(), &[ip("::ffff:192.168.1.5")]).expect("found");
        assert_eq!(l.name, "eth1");
        assert_eq!(ips, vec![ip("192.168.1.5")]);
    }

    #[test]
    fn different_links_is_an_error_naming_both() {
        let err = find_link_by_ips(&host(), &[ip("10.0.0.9"), ip("192.168.1.5")]).expect_err("two links");
        assert_eq!(
            err,
            FindError::DifferentLinks {
                first: "eth0".into(),
                second: "eth1".into()
            }
        );
        assert_eq!(
            err.to_string(),
            "find different interfaces by IPs, ifName eth0, linkName eth1"
        );
    }

    #[test]
    fn nothing_found_lists_the_ips() {
        let err = find_link_by_ips(&host(), &[ip("10.9.9.9"), ip("fd00::99")]).expect_err("none");
        assert_eq!(
            err.to_string(),
            "cannot find interface via IPs [10.9.9.9 fd00::99]"
        );
        let err = find_link_by_ips(&host(), &[]).expect_err("none");
        assert!(matches!(err, FindError::NotFound { ips } if ips.is_empty()));
    }

    #[test]
    fn link_local_and_loopback_are_searched_too() {
        let (l, _) = find_link_by_ips(&host(), &[ip("fe80::1")]).expect("found");
        assert_eq!(l.name, "eth0");
        let (l, _) = find_link_by_ips(&host(), &[ip("127.0.0.1")]).expect("found");
        assert_eq!(l.name, "lo");
    }
}
