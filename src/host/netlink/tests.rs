//! Tests of `host::netlink` (kept beside it, in their own file so the module stays readable).

use super::*;
use crate::host::kernel::{
    IFA_F_NOPREFIXROUTE, IFA_F_PERMANENT, IFA_F_SECONDARY, IFA_F_TENTATIVE, RTPROT_BOOT, RTPROT_DHCP,
    RT_SCOPE_UNIVERSE, RT_TABLE_MAIN,
};

// ---- pure: labels, messages ----

#[test]
fn labels_follow_the_link_name() {
    assert_eq!(rewrite_label("eth0~", "eth0"), "eth0");
    assert_eq!(rewrite_label("eth0~:1", "eth0"), "eth0:1");
    assert_eq!(rewrite_label("eth0", "eth0~"), "eth0~");
    assert_eq!(rewrite_label("eth0:sec", "eth0~"), "eth0~:sec");
    // Too long with the suffix: the bare link name.
    assert_eq!(rewrite_label("e:0123456789abc", "ens123456789"), "ens123456789");
}

fn addr(s: &str) -> Address {
    Address {
        addr: s.parse().expect("test address"),
        flags: 0,
        scope: RT_SCOPE_UNIVERSE,
        valid_lft: LIFETIME_FOREVER,
        preferred_lft: LIFETIME_FOREVER,
        label: None,
        broadcast: None,
        rt_priority: None,
    }
}

#[test]
fn address_message_carries_settable_flags_lifetimes_and_label() {
    let mut a = addr("10.1.2.3/24");
    a.flags = IFA_F_PERMANENT | IFA_F_SECONDARY | IFA_F_NOPREFIXROUTE | IFA_F_TENTATIVE;
    a.label = Some("eth0~:1".into());
    a.broadcast = Some(Ipv4Addr::new(10, 1, 2, 255));
    a.valid_lft = 100;
    a.preferred_lft = 50;
    a.rt_priority = Some(7);
    let m = address_message(9, &a, Some("eth0"), AddrMsg::Add);
    assert_eq!(m.header.index, 9);
    assert_eq!(m.header.prefix_len, 24);
    assert!(m
        .attributes
        .contains(&AddressAttribute::Flags(AddressFlags::from_bits_retain(
            IFA_F_NOPREFIXROUTE
        ))));
    assert!(m.attributes.contains(&AddressAttribute::Label("eth0:1".into())));
    assert!(m
        .attributes
        .contains(&AddressAttribute::Broadcast(Ipv4Addr::new(10, 1, 2, 255))));
    assert!(m.attributes.contains(&AddressAttribute::RoutePriority(7)));
    assert!(m.attributes.iter().any(|x| matches!(x,
        AddressAttribute::CacheInfo(c) if c.ifa_valid == 100 && c.ifa_preferred == 50)));
    // Round trip through the parser gives the model back (flags as sent).
    let back = parse_address(&m).expect("parse");
    assert_eq!(back.addr, a.addr);
    assert_eq!(back.flags, IFA_F_NOPREFIXROUTE);
    assert_eq!(back.rt_priority, Some(7));

    let v6 = address_message(9, &addr("fd00::1/64"), Some("eth0"), AddrMsg::Add);
    assert!(v6
        .attributes
        .contains(&AddressAttribute::Flags(AddressFlags::from_bits_retain(
            IFA_F_NODAD
        ))));
    assert!(!v6
        .attributes
        .iter()
        .any(|x| matches!(x, AddressAttribute::CacheInfo(_) | AddressAttribute::Label(_))));
}

#[test]
fn a_replace_carries_the_saved_flags_and_lifetimes_without_an_added_nodad() {
    let flags_of = |m: &AddressMessage| {
        m.attributes.iter().find_map(|x| match x {
            AddressAttribute::Flags(f) => Some(f.bits()),
            _ => None,
        })
    };
    let mut a = addr("fd00::1/64");
    a.flags = IFA_F_PERMANENT | IFA_F_NOPREFIXROUTE;
    a.valid_lft = 7200;
    a.preferred_lft = 3600;
    a.rt_priority = Some(9);
    let add = address_message(4, &a, None, AddrMsg::Add);
    assert_eq!(flags_of(&add), Some(IFA_F_NOPREFIXROUTE | IFA_F_NODAD));
    let replace = address_message(4, &a, None, AddrMsg::Replace);
    assert_eq!(flags_of(&replace), Some(IFA_F_NOPREFIXROUTE));
    assert_eq!(u32::from(replace.header.flags.bits()), IFA_F_NOPREFIXROUTE & 0xff);
    // The lifetimes go with it: without IFA_CACHEINFO the kernel makes the address permanent.
    assert!(replace.attributes.iter().any(|x| matches!(x,
        AddressAttribute::CacheInfo(c) if c.ifa_valid == 7200 && c.ifa_preferred == 3600)));
    assert!(replace.attributes.contains(&AddressAttribute::RoutePriority(9)));
    // A saved `nodad` is kept, and then there is nothing to clear.
    a.flags |= IFA_F_NODAD;
    let replace = address_message(4, &a, None, AddrMsg::Replace);
    assert_eq!(flags_of(&replace), Some(IFA_F_NOPREFIXROUTE | IFA_F_NODAD));
    assert!(!drops_nodad(&a));
    assert!(drops_nodad(&addr("fd00::1/64")));
    assert!(
        !drops_nodad(&addr("10.0.0.1/24")),
        "IPv4 has no DAD: added as saved"
    );
    let del = address_message(4, &a, None, AddrMsg::Delete);
    assert_eq!(flags_of(&del), None);
}

fn route(dst: &str) -> Route {
    Route {
        dst: dst.parse().expect("test prefix"),
        gateway: None,
        prefsrc: None,
        protocol: RTPROT_BOOT,
        scope: RT_SCOPE_UNIVERSE,
        kind: RTN_UNICAST,
        table: RT_TABLE_MAIN,
        metric: None,
        oif: 3,
        onlink: false,
    }
}

#[test]
fn route_message_round_trips() {
    let mut r = route("0.0.0.0/0");
    r.gateway = Some("10.0.0.1".parse().expect("ip"));
    r.prefsrc = Some("10.0.0.5".parse().expect("ip"));
    r.metric = Some(100);
    r.protocol = RTPROT_DHCP;
    r.table = 1000;
    r.onlink = true;
    let m = route_message(&r, 7);
    assert_eq!(m.header.table, 0, "tables above 255 go in RTA_TABLE only");
    assert!(!m
        .attributes
        .iter()
        .any(|a| matches!(a, RouteAttribute::Destination(_))));
    let back = parse_route(&m, 7).expect("parse");
    assert_eq!(back, Route { oif: 7, ..r.clone() });
    // Another link's route, and kernel-owned ones, are not ours.
    assert_eq!(parse_route(&m, 8), Err(RouteSkip::NotOurs));
    let mut local = route_message(&route("10.0.0.5/32"), 7);
    local
        .attributes
        .retain(|a| !matches!(a, RouteAttribute::Table(_)));
    local.header.table = 255;
    assert_eq!(parse_route(&local, 7), Err(RouteSkip::NotOurs));
    let mut mcast = route_message(&route("ff00::/8"), 7);
    mcast.header.kind = RouteType::Multicast;
    assert!(matches!(parse_route(&mcast, 7), Err(RouteSkip::Unsupported(_))));
}

#[test]
fn new_needs_a_runtime() {
    assert!(matches!(NetlinkHost::new(), Err(HostError::Io(_))));
}

// ---- real kernel, in a fresh namespace per test (root: the `lab` feature) ----

#[cfg(feature = "lab")]
mod lab {
    use super::*;
    use crate::host::kernel::{RTPROT_KERNEL, RTPROT_STATIC, RT_SCOPE_LINK};
    use crate::host::testns::{NetNs, NsCmd};

    const LIMIT: Duration = Duration::from_secs(60);
    const MAC: &str = "02:00:00:00:01:01";

    /// The NIC of the tests: a veth `eth0` (peer up, so it has carrier and runs DAD) with
    /// IPv4 + IPv6 addresses of every kind and routes of every kind.
    const NIC_SETUP: &str = "
    link add eth0 address 02:00:00:00:01:01 mtu 1400 type veth peer name peer0
    link set peer0 up
    link set eth0 up
    addr add 10.1.2.3/24 brd + dev eth0
    addr add 10.1.2.4/24 dev eth0 label eth0:sec
    addr add 10.8.0.3/24 dev eth0 metric 50
    addr add 10.9.0.3/24 dev eth0 noprefixroute valid_lft 3600 preferred_lft 1800
    addr add fd00:1::3/64 dev eth0
    addr add fd00:2::3/64 dev eth0 noprefixroute
    route add default via 10.1.2.1 dev eth0 proto dhcp metric 100 src 10.1.2.3
    -6 route add default via fd00:1::1 dev eth0 metric 1024
    route add 192.168.50.0/24 via 10.1.2.254 dev eth0 table 100
    route add 10.10.10.0/24 dev eth0 table 1000
    route add 10.99.99.99 dev eth0 scope link proto static
    route add 172.16.0.0/16 via 10.200.0.1 dev eth0 onlink
    -6 route add fd00:99::/64 via fe80::1 dev eth0 proto static metric 300
";
    /// A route of the NIC with an IPv6 prefsrc: the kernel refuses it while the address is
    /// tentative, so it is added once DAD is over (after `NIC_SETUP` and [`wait_dad`]).
    const NIC_V6_SRC_ROUTE: &str = "-6 route add fd00:98::/64 dev eth0 proto static metric 400 src fd00:1::3";

    /// Waits (bounded) until no IPv6 address of `dev` is tentative, i.e. DAD is over.
    async fn wait_dad(ns: &NsCmd, dev: &str) {
        for _ in 0..200 {
            if ns
                .ip(&format!("-6 addr show dev {dev} tentative"))
                .trim()
                .is_empty()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("addresses of {dev} still tentative after 10 s");
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("test ip")
    }

    /// No global IPv6 address of `dev` is tentative (the kernel's own link-local one may be:
    /// it is not moved).
    fn assert_usable_at_once(ns: &NsCmd, dev: &str) {
        let tentative = ns.ip(&format!("-6 addr show dev {dev} scope global tentative"));
        assert!(tentative.trim().is_empty(), "tentative:\n{tentative}");
    }

    fn sorted<T: std::fmt::Debug>(v: &[T]) -> Vec<String> {
        let mut out: Vec<String> = v.iter().map(|x| format!("{x:?}")).collect();
        out.sort();
        out
    }

    /// Addresses compared across a move: finite lifetimes count down, so they are normalised
    /// (and checked by [`assert_lifetimes_close`]); everything else, flags included, is exact.
    fn norm_addrs(v: &[Address]) -> Vec<String> {
        let v: Vec<Address> = v
            .iter()
            .map(|a| {
                let mut a = a.clone();
                for lft in [&mut a.valid_lft, &mut a.preferred_lft] {
                    if *lft != LIFETIME_FOREVER {
                        *lft = 1; // finite; checked by lifetimes_close
                    }
                }
                a
            })
            .collect();
        sorted(&v)
    }

    /// Finite lifetimes after a move are the saved ones minus the time that passed (< 60 s).
    fn assert_lifetimes_close(before: &[Address], after: &[Address]) {
        for b in before.iter().filter(|a| a.valid_lft != LIFETIME_FOREVER) {
            let a = after
                .iter()
                .find(|a| a.addr == b.addr)
                .unwrap_or_else(|| panic!("{} missing", b.addr));
            for (x, y) in [(b.valid_lft, a.valid_lft), (b.preferred_lft, a.preferred_lft)] {
                assert!(y <= x && y + 60 > x, "lifetime {x} became {y} for {}", b.addr);
            }
        }
    }

    fn with_oif(v: &[Route], oif: u32) -> Vec<Route> {
        v.iter().map(|r| Route { oif, ..r.clone() }).collect()
    }

    /// `ip` as an oracle: addresses (`-o -d addr`) and routes (`route show table all`) of
    /// `dev`, normalised for lifetimes counting down and the ifindex prefix.
    fn oracle(ns: &NsCmd, dev: &str) -> (Vec<String>, Vec<String>) {
        let mut addrs: Vec<String> = ns
            .ip(&format!("-o -d addr show dev {dev}"))
            .lines()
            .map(|l| {
                let l = l.split_once(": ").map_or(l, |(_, rest)| rest);
                let mut out = Vec::new();
                let mut toks = l.split_whitespace();
                while let Some(t) = toks.next() {
                    match t {
                        "valid_lft" | "preferred_lft" => {
                            out.push(t.to_string());
                            let v = toks.next().unwrap_or("");
                            out.push(if v == "forever" { v.into() } else { "N".into() });
                        }
                        _ => out.push(t.to_string()),
                    }
                }
                out.join(" ")
            })
            .collect();
        addrs.sort();
        let mut routes: Vec<String> = ["-4", "-6"]
            .iter()
            .flat_map(|fam| {
                ns.ip(&format!("{fam} route show table all dev {dev}"))
                    .lines()
                    .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
                    .collect::<Vec<_>>()
            })
            .collect();
        routes.sort();
        (addrs, routes)
    }

    fn expected_nic_addresses() -> Vec<Address> {
        let mut a1 = addr("10.1.2.3/24");
        a1.flags = IFA_F_PERMANENT;
        a1.label = Some("eth0".into());
        a1.broadcast = Some(Ipv4Addr::new(10, 1, 2, 255));
        let mut a2 = addr("10.1.2.4/24");
        a2.flags = IFA_F_PERMANENT | IFA_F_SECONDARY;
        a2.label = Some("eth0:sec".into());
        let mut a3 = addr("10.8.0.3/24");
        a3.flags = IFA_F_PERMANENT;
        a3.label = Some("eth0".into());
        a3.rt_priority = Some(50);
        let mut a4 = addr("10.9.0.3/24");
        a4.flags = IFA_F_NOPREFIXROUTE;
        a4.label = Some("eth0".into());
        a4.valid_lft = 3600;
        a4.preferred_lft = 1800;
        let mut a5 = addr("fd00:1::3/64");
        a5.flags = IFA_F_PERMANENT;
        let mut a6 = addr("fd00:2::3/64");
        a6.flags = IFA_F_PERMANENT | IFA_F_NOPREFIXROUTE;
        let mut ll = addr("fe80::ff:fe00:101/64");
        ll.flags = IFA_F_PERMANENT;
        ll.scope = RT_SCOPE_LINK;
        vec![a1, a2, a3, a4, a5, a6, ll]
    }

    fn expected_nic_routes(oif: u32) -> Vec<Route> {
        let r = |dst: &str, f: &dyn Fn(&mut Route)| {
            let mut r = route(dst);
            r.oif = oif;
            f(&mut r);
            r
        };
        vec![
            r("0.0.0.0/0", &|r| {
                r.gateway = Some(ip("10.1.2.1"));
                r.prefsrc = Some(ip("10.1.2.3"));
                r.protocol = RTPROT_DHCP;
                r.metric = Some(100);
            }),
            r("10.1.2.0/24", &|r| {
                r.prefsrc = Some(ip("10.1.2.3"));
                r.protocol = RTPROT_KERNEL;
                r.scope = RT_SCOPE_LINK;
            }),
            r("10.8.0.0/24", &|r| {
                r.prefsrc = Some(ip("10.8.0.3"));
                r.protocol = RTPROT_KERNEL;
                r.scope = RT_SCOPE_LINK;
                r.metric = Some(50);
            }),
            r("192.168.50.0/24", &|r| {
                r.gateway = Some(ip("10.1.2.254"));
                r.table = 100;
            }),
            r("10.10.10.0/24", &|r| {
                r.scope = RT_SCOPE_LINK;
                r.table = 1000;
            }),
            r("10.99.99.99/32", &|r| {
                r.scope = RT_SCOPE_LINK;
                r.protocol = RTPROT_STATIC;
            }),
            r("172.16.0.0/16", &|r| {
                r.gateway = Some(ip("10.200.0.1"));
                r.onlink = true;
            }),
            r("::/0", &|r| {
                r.gateway = Some(ip("fd00:1::1"));
                r.metric = Some(1024);
            }),
            r("fd00:1::/64", &|r| {
                r.protocol = RTPROT_KERNEL;
                r.metric = Some(256);
            }),
            r("fe80::/64", &|r| {
                r.protocol = RTPROT_KERNEL;
                r.metric = Some(256);
            }),
            r("fd00:99::/64", &|r| {
                r.gateway = Some(ip("fe80::1"));
                r.protocol = RTPROT_STATIC;
                r.metric = Some(300);
            }),
            r("fd00:98::/64", &|r| {
                r.prefsrc = Some(ip("fd00:1::3"));
                r.protocol = RTPROT_STATIC;
                r.metric = Some(400);
            }),
        ]
    }

    #[test]
    fn lab_reads_links_addresses_and_routes() {
        let ns = NetNs::new();
        ns.cmd().ip_script(NIC_SETUP);
        // Routes the model cannot carry must be skipped, not crash the read.
        ns.ip_script_allow_missing_features();
        let cmd = ns.cmd();
        ns.run(LIMIT, move || async move {
            wait_dad(&cmd, "eth0").await;
            cmd.ip(NIC_V6_SRC_ROUTE);
            let host = NetlinkHost::new().expect("netlink");
            let link = host.link_by_name("eth0").await.expect("links").expect("eth0");
            assert_eq!(link.name, "eth0");
            assert_eq!(link.mac.as_deref(), Some(MAC));
            assert_eq!(link.mtu, 1400);
            assert!(link.up);
            let all = host.links().await.expect("links");
            assert!(all.iter().any(|l| l.name == "lo" && l.index == 1));
            assert!(all.iter().any(|l| l.name == "peer0"));
            assert_eq!(host.link_by_name("nope").await.expect("links"), None);

            let mut addrs = host.addresses(link.index).await.expect("addresses");
            // Finite lifetimes count down: check and pin them.
            for a in addrs.iter_mut().filter(|a| a.valid_lft != LIFETIME_FOREVER) {
                assert!(a.valid_lft <= 3600 && a.valid_lft > 3000, "{a:?}");
                assert!(a.preferred_lft <= 1800 && a.preferred_lft > 1200, "{a:?}");
                a.valid_lft = 3600;
                a.preferred_lft = 1800;
            }
            assert_eq!(sorted(&addrs), sorted(&expected_nic_addresses()));

            let routes = host.routes(link.index).await.expect("routes");
            assert_eq!(sorted(&routes), sorted(&expected_nic_routes(link.index)));
            // The peer's routes are not eth0's.
            let peer = host.link_by_name("peer0").await.expect("links").expect("peer0");
            let peer_routes = host.routes(peer.index).await.expect("routes");
            assert!(peer_routes.iter().all(|r| r.oif == peer.index));
        });
    }

    impl NetNs {
        /// A multipath route and a nexthop-object route through eth0 (skipped by `routes`).
        fn ip_script_allow_missing_features(&self) {
            self.ip("route add 10.50.0.0/16 nexthop via 10.1.2.1 dev eth0 nexthop via 10.1.2.2 dev eth0");
            // Nexthop objects need kernel 5.3+; tolerate their absence.
            if self
                .cmd()
                .try_ip("nexthop add id 10 via 10.1.2.1 dev eth0")
                .is_ok()
            {
                self.ip("route add 10.60.0.0/16 nhid 10");
            }
        }
    }

    #[test]
    fn lab_rename_validates_and_cleans_up_altnames() {
        let ns = NetNs::new();
        ns.cmd().ip_script(
            "
        link add eth0 address 02:00:00:00:01:01 type veth peer name peer0
        link set eth0 up
        addr add 10.1.2.3/24 dev eth0
        ",
        );
        let cmd = ns.cmd();
        ns.run(LIMIT, move || async move {
            let host = NetlinkHost::new().expect("netlink");
            let eth0 = host.link_by_name("eth0").await.expect("links").expect("eth0");

            for bad in ["", "a/b", "a b", "enp0s31f6abcdef~"] {
                let err = host.rename(eth0.index, bad).await.expect_err("bad name");
                assert!(matches!(err, HostError::BadName { .. }), "{bad:?}: {err}");
            }
            let err = host.rename(eth0.index, "peer0").await.expect_err("taken");
            assert!(
                matches!(err, HostError::LinkExists(ref n) if n == "peer0"),
                "{err}"
            );
            let err = host.rename(999_999, "x").await.expect_err("no link");
            assert!(matches!(err, HostError::NoLink(_)), "{err}");
            // A failed rename leaves the link up with its name.
            let now = host
                .link_by_index(eth0.index)
                .await
                .expect("links")
                .expect("eth0");
            assert_eq!((now.name.as_str(), now.up), ("eth0", true));

            host.rename(eth0.index, "eth0~").await.expect("rename");
            assert_eq!(host.link_by_name("eth0").await.expect("links"), None);
            let renamed = host.link_by_name("eth0~").await.expect("links").expect("eth0~");
            assert_eq!(renamed.index, eth0.index);
            assert!(renamed.up);
            assert_eq!(renamed.mac, eth0.mac);
            // IPv4 addresses survive the down/up; the label follows the name (kernel).
            let addrs = host.addresses(eth0.index).await.expect("addresses");
            assert!(addrs
                .iter()
                .any(|a| a.addr.to_string() == "10.1.2.3/24" && a.label.as_deref() == Some("eth0~")));

            // An altname equal to the old name (what udev may add) hides nothing from
            // link_by_name and is removed.
            cmd.ip("link property add dev eth0~ altname eth0");
            assert_eq!(
                host.altnames(eth0.index).await.expect("alt"),
                vec!["eth0".to_string()]
            );
            assert_eq!(host.link_by_name("eth0").await.expect("links"), None);
            assert!(host.remove_altname(eth0.index, "eth0").await.expect("remove"));
            assert!(!host
                .remove_altname(eth0.index, "eth0")
                .await
                .expect("absent is fine"));
            assert!(host.altnames(eth0.index).await.expect("alt").is_empty());

            // Rename keeps unrelated altnames and drops the one equal to the old name.
            cmd.ip("link property add dev eth0~ altname keepme");
            host.rename(eth0.index, "eth0").await.expect("rename back");
            assert_eq!(
                host.altnames(eth0.index).await.expect("alt"),
                vec!["keepme".to_string()]
            );
            assert!(cmd.ip("link show dev eth0").contains("altname keepme"));
            // Renaming to the current name is a no-op.
            host.rename(eth0.index, "eth0").await.expect("same name");
            // Renaming to one of its own altnames works (the altname is dropped first); to
            // another link's altname is LinkExists.
            cmd.ip("link property add dev eth0 altname eth9");
            host.rename(eth0.index, "eth9").await.expect("own altname");
            assert_eq!(
                host.altnames(eth0.index).await.expect("alt"),
                vec!["keepme".to_string()]
            );
            cmd.ip("link property add dev peer0 altname peeralt");
            let err = host
                .rename(eth0.index, "peeralt")
                .await
                .expect_err("other's altname");
            assert!(matches!(err, HostError::LinkExists(_)), "{err}");
            let now = host
                .link_by_index(eth0.index)
                .await
                .expect("links")
                .expect("eth9");
            assert_eq!((now.name.as_str(), now.up), ("eth9", true));
        });
    }

    #[test]
    fn lab_errors_are_classified() {
        let ns = NetNs::new();
        ns.cmd().ip_script(
            "
        link add eth0 address 02:00:00:00:01:01 type veth peer name peer0
        link set peer0 up
        link set eth0 up
        addr add 10.1.2.3/24 dev eth0
        ",
        );
        ns.run(LIMIT, move || async move {
            let host = NetlinkHost::new().expect("netlink");
            let eth0 = host.link_by_name("eth0").await.expect("links").expect("eth0");
            let i = eth0.index;

            let a = addr("10.1.2.3/24");
            let err = host.add_address(i, &a).await.expect_err("exists");
            assert!(matches!(err, HostError::Exists(_)), "{err}");
            host.del_address(i, &a).await.expect("delete");
            host.del_address(i, &a)
                .await
                .expect("deleting a missing address is fine");
            host.add_address(i, &a).await.expect("add again");

            let mut r = route("10.20.0.0/16");
            r.gateway = Some(ip("10.1.2.1"));
            host.add_route(i, &r).await.expect("add route");
            let err = host.add_route(i, &r).await.expect_err("exists");
            assert!(matches!(err, HostError::Exists(_)), "{err}");
            let moved = Route { oif: i, ..r.clone() };
            host.del_route(&moved).await.expect("delete route");
            host.del_route(&moved)
                .await
                .expect("deleting a missing route is fine");

            let mut unreachable = route("10.30.0.0/16");
            unreachable.gateway = Some(ip("192.0.2.1"));
            match host.add_route(i, &unreachable).await {
                Err(HostError::Netlink { what, message }) => {
                    assert!(what.contains("10.30.0.0/16 via 192.0.2.1"), "{what}");
                    assert!(!message.is_empty());
                }
                other => panic!("expected a netlink error, got {other:?}"),
            }
            let err = host.set_mtu(999_999, 1400).await.expect_err("no link");
            assert!(matches!(err, HostError::NoLink(_)), "{err}");
            let err = host
                .add_address(999_999, &addr("10.7.7.7/24"))
                .await
                .expect_err("no link");
            assert!(matches!(err, HostError::NoLink(_)), "{err}");
            host.set_mtu(i, 1300).await.expect("mtu");
            host.set_up(i, false).await.expect("down");
            let l = host.link_by_index(i).await.expect("links").expect("eth0");
            assert_eq!((l.mtu, l.up), (1300, false));
        });
    }

    /// IPv6 addresses come out with exactly their saved flags and usable at once, also when an
    /// add is replayed after a crash that left the address with the `nodad` it was added with;
    /// the replay is idempotent and touches nothing but that flag.
    #[test]
    fn lab_ipv6_addresses_keep_their_flags_and_skip_the_dad_window() {
        let ns = NetNs::new();
        ns.cmd().ip_script(
            "
        link add eth0 address 02:00:00:00:01:01 type veth peer name peer0
        link set peer0 up
        link set eth0 up
        ",
        );
        let cmd = ns.cmd();
        ns.run(LIMIT, move || async move {
            wait_dad(&cmd, "eth0").await;
            let host = NetlinkHost::new().expect("netlink");
            let i = host
                .link_by_name("eth0")
                .await
                .expect("links")
                .expect("eth0")
                .index;
            let find = |v: Vec<Address>, net: &str| {
                v.into_iter()
                    .find(|a| a.addr.to_string() == net)
                    .unwrap_or_else(|| panic!("{net} missing"))
            };

            // A fresh add: no nodad, finite lifetimes and a metric kept, not tentative, and a
            // route may name it as prefsrc at once.
            let mut a = addr("fd00:1::3/64");
            a.valid_lft = 7200;
            a.preferred_lft = 3600;
            a.rt_priority = Some(77);
            host.add_address(i, &a).await.expect("add");
            assert_usable_at_once(&cmd, "eth0");
            let mut src_route = route("fd00:98::/64");
            src_route.prefsrc = Some(ip("fd00:1::3"));
            host.add_route(i, &src_route)
                .await
                .expect("route with the new prefsrc");
            let now = find(host.addresses(i).await.expect("addresses"), "fd00:1::3/64");
            assert_eq!(now.flags, 0, "{now:?}");
            assert_eq!(now.rt_priority, Some(77));
            assert!(now.valid_lft <= 7200 && now.valid_lft > 7100, "{now:?}");
            assert!(now.preferred_lft <= 3600 && now.preferred_lft > 3500, "{now:?}");
            assert!(!cmd.ip("-6 addr show dev eth0").contains("nodad"));

            // A saved nodad stays.
            let mut keeps = addr("fd00:2::3/64");
            keeps.flags = IFA_F_NODAD;
            host.add_address(i, &keeps).await.expect("add nodad");
            let now = find(host.addresses(i).await.expect("addresses"), "fd00:2::3/64");
            assert_eq!(now.flags, IFA_F_NODAD | IFA_F_PERMANENT);

            // What a crash between the add and the flag change leaves; the replayed add is
            // "exists" and clears the flag, keeping the lifetimes and the prefsrc route.
            cmd.ip("addr add fd00:3::3/64 dev eth0 nodad valid_lft 5000 preferred_lft 4000 metric 66");
            cmd.ip("-6 route add fd00:97::/64 dev eth0 src fd00:3::3");
            for attempt in 0..2 {
                let err = host
                    .add_address(i, &addr("fd00:3::3/64"))
                    .await
                    .expect_err("exists");
                assert!(matches!(err, HostError::Exists(_)), "{err}");
                let now = find(host.addresses(i).await.expect("addresses"), "fd00:3::3/64");
                assert_eq!(now.flags, 0, "attempt {attempt}: {now:?}");
                assert_eq!(now.rt_priority, Some(66), "the metric it has is kept");
                assert!(now.valid_lft <= 5000 && now.valid_lft > 4900, "{now:?}");
                assert!(now.preferred_lft <= 4000 && now.preferred_lft > 3900, "{now:?}");
                assert_usable_at_once(&cmd, "eth0");
                assert!(cmd
                    .ip("-6 route show dev eth0")
                    .contains("fd00:97::/64 src fd00:3::3"));
            }

            // Someone else's address with another prefix length is left as it is.
            cmd.ip("addr add fd00:4::3/80 dev eth0 nodad");
            let err = host
                .add_address(i, &addr("fd00:4::3/64"))
                .await
                .expect_err("the kernel has it");
            assert!(matches!(err, HostError::Exists(_)), "{err}");
            let now = find(host.addresses(i).await.expect("addresses"), "fd00:4::3/80");
            assert_eq!(now.flags, IFA_F_NODAD | IFA_F_PERMANENT);
        });
    }

    #[test]
    fn lab_a_dead_connection_fails_requests_instead_of_pretending() {
        let ns = NetNs::new();
        let (read, write) = ns.run_sync(|| {
            let rt = |()| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime")
            };
            let first = rt(());
            let host = first.block_on(async { NetlinkHost::new().expect("netlink") });
            drop(first); // takes the connection task with it
            let second = rt(());
            second.block_on(async {
                let limit = Duration::from_secs(10);
                let read = tokio::time::timeout(limit, host.links()).await.expect("no hang");
                let write = tokio::time::timeout(limit, host.set_up(1, true))
                    .await
                    .expect("no hang");
                (read.map(|_| ()), write)
            })
        });
        assert!(matches!(read, Err(HostError::Netlink { .. })), "{read:?}");
        assert!(matches!(write, Err(HostError::Netlink { .. })), "{write:?}");
    }

    #[test]
    fn lab_works_inside_an_actix_system() {
        let ns = NetNs::new();
        ns.ip("link add eth0 type veth peer name peer0");
        let names = ns.run_actix(LIMIT, || async {
            let host = std::sync::Arc::new(NetlinkHost::new().expect("netlink"));
            // Used from a local task spawned on the System's arbiter, as an actor would.
            let h = host.clone();
            let local = actix_rt::spawn(async move {
                h.links()
                    .await
                    .expect("links")
                    .into_iter()
                    .map(|l| l.name)
                    .collect::<Vec<_>>()
            });
            local.await.expect("task")
        });
        assert!(names.contains(&"eth0".to_string()), "{names:?}");
    }

    /// Deletes from `src` first (routes, then addresses, secondaries before primaries), then
    /// adds the saved addresses and routes on `dst` (directly connected routes before routes
    /// through gateways); "already exists" is fine (kernel prefix routes, link-local).
    async fn move_config(
        host: &NetlinkHost,
        src: Option<u32>,
        dst: u32,
        addrs: &[Address],
        routes: &[Route],
    ) {
        if let Some(src) = src {
            for r in host.routes(src).await.expect("routes") {
                host.del_route(&r).await.expect("del route");
            }
            let mut current = host.addresses(src).await.expect("addresses");
            current.sort_by_key(|a| a.flags & IFA_F_SECONDARY == 0);
            for a in current {
                host.del_address(src, &a).await.expect("del address");
            }
        }
        for a in addrs {
            match host.add_address(dst, a).await {
                Ok(()) | Err(HostError::Exists(_)) => {}
                Err(e) => panic!("add {a:?}: {e}"),
            }
        }
        let mut ordered: Vec<&Route> = routes.iter().collect();
        ordered.sort_by_key(|r| r.gateway.is_some());
        for r in ordered {
            match host.add_route(dst, r).await {
                Ok(()) | Err(HostError::Exists(_)) => {}
                Err(e) => panic!("add route {r:?}: {e}"),
            }
        }
    }

    #[test]
    fn lab_moves_to_an_internal_port_and_restores_exactly() {
        let ns = NetNs::new();
        ns.cmd().ip_script(NIC_SETUP);
        let cmd = ns.cmd();
        ns.run(LIMIT, move || async move {
            wait_dad(&cmd, "eth0").await;
            cmd.ip(NIC_V6_SRC_ROUTE);
            let host = NetlinkHost::new().expect("netlink");
            let nic = host.link_by_name("eth0").await.expect("links").expect("eth0");
            let addrs0 = host.addresses(nic.index).await.expect("addresses");
            let routes0 = host.routes(nic.index).await.expect("routes");
            assert_eq!(sorted(&routes0), sorted(&expected_nic_routes(nic.index)));
            let oracle0 = oracle(&cmd, "eth0");

            // Attach: rename the NIC, create the "internal port" with its MAC, move.
            host.rename(nic.index, "eth0~").await.expect("rename");
            cmd.ip(&format!("link add eth0 address {MAC} type veth peer name peer1"));
            cmd.ip("link set peer1 up");
            let port = host.link_by_name("eth0").await.expect("links").expect("new eth0");
            assert_ne!(port.index, nic.index);
            assert!(!port.up);
            host.set_mtu(port.index, nic.mtu).await.expect("mtu");
            host.set_up(port.index, true).await.expect("up");
            move_config(&host, Some(nic.index), port.index, &addrs0, &routes0).await;
            // Usable at once, without their `nodad`: the route with an IPv6 prefsrc was added
            // (move_config panics otherwise), and no moved address waits for DAD.
            assert_usable_at_once(&cmd, "eth0");
            wait_dad(&cmd, "eth0").await;

            assert!(host.addresses(nic.index).await.expect("addresses").is_empty());
            assert!(host.routes(nic.index).await.expect("routes").is_empty());
            let moved_addrs = host.addresses(port.index).await.expect("addresses");
            let moved_routes = host.routes(port.index).await.expect("routes");
            assert_eq!(norm_addrs(&moved_addrs), norm_addrs(&addrs0));
            assert_lifetimes_close(&addrs0, &moved_addrs);
            assert_eq!(sorted(&moved_routes), sorted(&with_oif(&routes0, port.index)));
            let p = host
                .link_by_index(port.index)
                .await
                .expect("links")
                .expect("port");
            assert_eq!((p.mtu, p.up, p.mac.as_deref()), (1400, true, Some(MAC)));
            // Oracle: `ip` shows the same configuration on the new eth0 (the same name).
            let (oa, or) = oracle(&cmd, "eth0");
            assert_eq!(oa, oracle0.0, "ip addr differs after the move");
            assert_eq!(or, oracle0.1, "ip route differs after the move");

            // Detach: re-read the port, delete it, rename the NIC back, restore.
            let saved_addrs = moved_addrs;
            let saved_routes = host.routes(port.index).await.expect("routes");
            cmd.ip("link del eth0");
            host.rename(nic.index, "eth0").await.expect("rename back");
            wait_dad(&cmd, "eth0").await;
            move_config(&host, None, nic.index, &saved_addrs, &saved_routes).await;
            assert_usable_at_once(&cmd, "eth0");
            wait_dad(&cmd, "eth0").await;

            let back = host.link_by_name("eth0").await.expect("links").expect("eth0");
            assert_eq!(back, nic, "link (index, name, MAC, MTU, up) restored");
            let addrs1 = host.addresses(nic.index).await.expect("addresses");
            let routes1 = host.routes(nic.index).await.expect("routes");
            assert_eq!(norm_addrs(&addrs1), norm_addrs(&addrs0));
            assert_lifetimes_close(&addrs0, &addrs1);
            assert_eq!(sorted(&routes1), sorted(&routes0), "routes restored exactly");
            let (oa, or) = oracle(&cmd, "eth0");
            assert_eq!(oa, oracle0.0, "ip addr differs after the restore");
            assert_eq!(or, oracle0.1, "ip route differs after the restore");
        });
    }
}
