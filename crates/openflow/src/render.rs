//! Renders flows and groups in exactly the text OVS 3.1 prints for them:
//! `ovs-ofctl -O OpenFlow15 dump-flows --names --no-stats BR` (one line, leading space trimmed)
//! and `ovs-ofctl -O OpenFlow15 dump-groups --names BR`.
//!
//! The rules, as verified against a live ovs-vswitchd 3.1 (the lab tests compare every
//! rendered flow of `golden.rs` with the switch's own dump):
//! * line: `cookie=0x<hex>, ` (only if non-zero), `table=<T>, ` (only if the table is not 0 or
//!   has a name), `idle_timeout=<n>, ` / `hard_timeout=<n>, ` (only if non-zero), then the
//!   match, a space, `actions=...`. The match starts with `priority=<n>,` unless the priority
//!   is the default 32768; with an empty match and default priority the line has no match part.
//! * match field order: pkt_mark, conj_id, ct_state, ct_zone, ct_mark, ct_label, protocol
//!   shorthand (`ip`, `tcp6`, `arp`, ...), reg0..reg15 (xreg/xxreg matches print as the
//!   registers they cover), metadata, in_port, dl_vlan/dl_vlan_pcp or vlan_tci, dl_src,
//!   dl_dst, dl_type (only if no shorthand; OVS 3.1 has no `igmp` shorthand: `ip,nw_proto=2`),
//!   nw_src/nw_dst or ipv6_src/ipv6_dst or arp_spa/arp_tpa, nw_proto (only if no shorthand)
//!   or arp_op, arp_sha/arp_tha, icmp_type/icmp_code (+ nd_target, nd_sll, nd_tll for icmp6)
//!   or tp_src/tp_dst, tcp_flags.
//! * 32-bit fields (regs, pkt_mark, ct_mark) and metadata: C `%#x`, so zero is `0`, not `0x0`;
//!   the mask `/%#x` is omitted when all ones. 16-bit ports/ct_zone: decimal when exact,
//!   otherwise `0x%x/0x%x` (zero is `0x0`). ct_label: `0x` + hex without leading zeros (zero
//!   is `0`). Masked values are printed ANDed with their mask. All-zero masks and /0 prefixes
//!   vanish.
//! * ct_state and tcp_flags: `+flag`/`-flag` per mask bit, lowest bit first (`-new+est`,
//!   `+syn-ack`); with every bit in the mask, the set flags joined by `|` (`new|trk`,
//!   `syn|ack`), or `0`.
//! * VLAN: `dl_vlan=<vid>` / `dl_vlan_pcp=<pcp>` when the match is "VLAN present with exactly
//!   this VID and/or PCP", otherwise `vlan_tci=0x%04x[/0x%04x]` (no VLAN: `0x0000/0x1fff`).
//! * names: a port or table name is printed instead of its number; it is quoted JSON-style
//!   (`"eth0~"`, `"x,y"`, `"25"`) unless it starts with an ASCII letter and continues with
//!   ASCII letters/digits only. Names used by two numbers are not used. Reserved ports print
//!   as `IN_PORT`, `TABLE`, `NORMAL`, `FLOOD`, `ALL`, `CONTROLLER`, `LOCAL`, `ANY`.
//! * actions: `output:<port>` (reserved ports print bare: `LOCAL`, `IN_PORT`,
//!   `CONTROLLER:65535`), `output:NXM_NX_REG1[]`, `set_field:<v>[/<m>]-><field>` (field
//!   names `reg<N>`, `ct_mark`, `ct_label`, `pkt_mark`, `metadata`, `eth_src`, `ip_src`,
//!   `ipv6_dst`, `tcp_dst`, ...), `ct(commit,table=T,zone=Z|zone=NXM_NX_REG0[0..15],nat(...),
//!   exec(...))` (zone 0 omitted; a leading nat printed before exec), `nat`,
//!   `nat(src|dst[=A[-B][:P[-Q]]][,persistent][,hash][,random])` (IPv6 addresses in brackets
//!   when a port follows), `ct_clear`, `conjunction(id,k/n)`, `controller(reason=..,
//!   max_len=..,id=..,userdata=..,pause,meter_id=..)` with defaults omitted (reason=action,
//!   max_len=65535, id=0) or `CONTROLLER:<max_len>` when all are default, `meter:N`,
//!   `group:N`, `resubmit(<port>,<table>)` / `resubmit:<port>` when only a port is given /
//!   `resubmit(<port>,<table>,ct)`, `move:NXM_NX_REG0[0..3]->NXM_NX_REG1[4..7]`,
//!   `note:<hex bytes, zero-padded>`, `goto_table:T`; no instruction at all prints `drop`.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv6Addr};

use ipnet::{Ipv4Net, Ipv6Net};

use super::actions::{port_to_16, OFPR_ACTION};
use super::flow::{
    eth_type, ip_proto, port, tcp_flags, vlan, Action, ControllerAction, CtAction, CtZone, Flow, Masked,
    Match, NatAction, NatKind, RegRange, SetField,
};
use super::oxm::{normalize_match, Field};
use super::wire::{hex_dotted, pad8};
use super::Group;

/// Table and port names, as `ovs-ofctl --names` learns them from the switch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NameMap {
    pub tables: BTreeMap<u8, String>,
    pub ports: BTreeMap<u32, String>,
}

impl NameMap {
    /// No names: renders like `--no-names`.
    pub fn new() -> Self {
        Self::default()
    }

    fn unique<K: Copy + Ord>(map: &BTreeMap<K, String>, k: K) -> Option<&str> {
        let name = map.get(&k)?;
        let dup = map.iter().any(|(k2, n2)| *k2 != k && n2 == name);
        (!dup).then_some(name.as_str())
    }

    fn has_table_name(&self, t: u8) -> bool {
        Self::unique(&self.tables, t).is_some()
    }
}

/// A precomputed name map for rendering many flows (duplicate detection done once).
#[derive(Debug, Clone, Default)]
struct Names {
    tables: HashMap<u8, String>,
    ports: HashMap<u32, String>,
}

fn reserved_port_name(p: u32) -> Option<&'static str> {
    Some(match p {
        port::IN_PORT => "IN_PORT",
        port::TABLE => "TABLE",
        port::NORMAL => "NORMAL",
        port::FLOOD => "FLOOD",
        port::ALL => "ALL",
        port::CONTROLLER => "CONTROLLER",
        port::LOCAL => "LOCAL",
        port::ANY => "ANY",
        0xffff_fff7 => "UNSET",
        _ => return None,
    })
}

/// Quotes a port or table name the way OVS does: unquoted only if it starts with an ASCII
/// letter and continues with ASCII letters or digits; otherwise a JSON string.
pub fn quote_name(name: &str) -> String {
    let mut chars = name.bytes();
    let plain = matches!(chars.next(), Some(c) if c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric());
    if plain {
        return name.to_string();
    }
    let mut s = String::with_capacity(name.len() + 2);
    s.push('"');
    for c in name.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            '\u{8}' => s.push_str("\\b"),
            '\u{c}' => s.push_str("\\f"),
            '\n' => s.push_str("\\n"),
            '\r' => s.push_str("\\r"),
            '\t' => s.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(s, "\\u{:04x}", c as u32);
            }
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

impl Names {
    fn from(map: &NameMap) -> Self {
        let mut n = Names::default();
        for &t in map.tables.keys() {
            if let Some(name) = NameMap::unique(&map.tables, t) {
                n.tables.insert(t, quote_name(name));
            }
        }
        for &p in map.ports.keys() {
            if reserved_port_name(p).is_none() {
                if let Some(name) = NameMap::unique(&map.ports, p) {
                    n.ports.insert(p, quote_name(name));
                }
            }
        }
        n
    }

    fn table(&self, t: u8) -> String {
        self.tables.get(&t).cloned().unwrap_or_else(|| t.to_string())
    }

    fn port(&self, p: u32) -> String {
        if let Some(r) = reserved_port_name(p) {
            return r.to_string();
        }
        if let Some(n) = self.ports.get(&p) {
            return n.clone();
        }
        match port_to_16(p) {
            Ok(p16) => p16.to_string(),
            Err(_) => p.to_string(),
        }
    }
}

// === value formatting ===

/// C's `%#x`: `0` for zero, else `0x..`.
fn hash_x32(v: u32) -> String {
    if v == 0 {
        "0".to_string()
    } else {
        format!("{v:#x}")
    }
}

/// C's `%#"PRIx64`: `0` for zero, else `0x..`.
fn hash_x64(v: u64) -> String {
    if v == 0 {
        "0".to_string()
    } else {
        format!("{v:#x}")
    }
}

/// OVS's `ds_put_hex`: `0x` + hex without leading zeros, `0` for zero.
fn put_hex(v: u128) -> String {
    if v == 0 {
        "0".to_string()
    } else {
        format!("{v:#x}")
    }
}

fn mac(m: &[u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

/// IPv6 text as glibc's inet_ntop prints it (RFC 5952 plus the `::a.b.c.d` forms).
pub fn ipv6_text(a: &Ipv6Addr) -> String {
    let seg = a.segments();
    if seg[..6] == [0, 0, 0, 0, 0, 0] && seg[6] != 0 {
        let o = a.octets();
        return format!("::{}.{}.{}.{}", o[12], o[13], o[14], o[15]);
    }
    a.to_string()
}

fn u32_masked(out: &mut String, name: &str, value: u32, mask: Option<u32>) {
    let _ = write!(out, "{name}={}", hash_x32(value));
    if let Some(m) = mask {
        let _ = write!(out, "/{}", hash_x32(m));
    }
    out.push(',');
}

fn u16_masked(out: &mut String, name: &str, value: u16, mask: Option<u16>) {
    match mask {
        None => {
            let _ = write!(out, "{name}={value},");
        }
        Some(m) => {
            let _ = write!(out, "{name}={value:#x}/{m:#x},");
        }
    }
}

fn eth_masked(out: &mut String, name: &str, e: Option<Masked<[u8; 6]>>) {
    if let Some(e) = e {
        let _ = write!(out, "{name}={}", mac(&e.value));
        if let Some(k) = e.mask {
            let _ = write!(out, "/{}", mac(&k));
        }
        out.push(',');
    }
}

fn v4_net(out: &mut String, name: &str, n: Option<Ipv4Net>) {
    if let Some(n) = n {
        let _ = write!(out, "{name}={}", n.addr());
        if n.prefix_len() < 32 {
            let _ = write!(out, "/{}", n.prefix_len());
        }
        out.push(',');
    }
}

fn v6_net(out: &mut String, name: &str, n: Option<Ipv6Net>) {
    if let Some(n) = n {
        let _ = write!(out, "{name}={}", ipv6_text(&n.addr()));
        if n.prefix_len() < 128 {
            let _ = write!(out, "/{}", n.prefix_len());
        }
        out.push(',');
    }
}

/// The VLAN part of a match, as OVS's `match_format` prints a TCI match.
fn vlan_text(out: &mut String, value: u16, mask: u16) {
    let vid_mask = mask & vlan::VID_MASK;
    let pcp_mask = mask & vlan::PCP_MASK;
    let cfi = mask & vlan::PRESENT;
    if cfi != 0
        && value & vlan::PRESENT != 0
        && (vid_mask == 0 || vid_mask == vlan::VID_MASK)
        && (pcp_mask == 0 || pcp_mask == vlan::PCP_MASK)
        && (vid_mask != 0 || pcp_mask != 0)
    {
        if vid_mask != 0 {
            let _ = write!(out, "dl_vlan={},", value & vlan::VID_MASK);
        }
        if pcp_mask != 0 {
            let _ = write!(out, "dl_vlan_pcp={},", value >> 13);
        }
    } else if mask == u16::MAX {
        let _ = write!(out, "vlan_tci={value:#06x},");
    } else {
        let _ = write!(out, "vlan_tci={value:#06x}/{mask:#06x},");
    }
}

const TCP_FLAG_NAMES: [&str; 12] = [
    "fin", "syn", "rst", "psh", "ack", "urg", "ece", "cwr", "ns", "[200]", "[400]", "[800]",
];

/// TCP flags as OVS's `format_flags_masked` prints them.
fn tcp_flags_text(value: u16, mask: u16) -> String {
    let mask = mask & tcp_flags::ALL;
    let value = value & mask;
    if mask == tcp_flags::ALL {
        if value == 0 {
            return "0".to_string();
        }
        return (0..12)
            .filter(|b| value & (1 << b) != 0)
            .map(|b| TCP_FLAG_NAMES[b])
            .collect::<Vec<_>>()
            .join("|");
    }
    let mut s = String::new();
    for (b, name) in TCP_FLAG_NAMES.iter().enumerate() {
        if mask & (1 << b) != 0 {
            s.push(if value & (1 << b) != 0 { '+' } else { '-' });
            s.push_str(name);
        }
    }
    s
}

const CT_STATE_NAMES: [&str; 8] = ["new", "est", "rel", "rpl", "inv", "trk", "snat", "dnat"];

fn ct_state_text(value: u32, mask: u32) -> String {
    let (value, mask) = (value & 0xff, mask & 0xff);
    if mask == 0xff {
        if value == 0 {
            return "0".to_string();
        }
        let names: Vec<&str> = (0..8)
            .filter(|b| value & (1 << b) != 0)
            .map(|b| CT_STATE_NAMES[b as usize])
            .collect();
        return names.join("|");
    }
    if mask == 0 {
        return "0/0".to_string();
    }
    let mut s = String::new();
    for (b, name) in CT_STATE_NAMES.iter().enumerate() {
        if mask & (1 << b) != 0 {
            s.push(if value & (1 << b) != 0 { '+' } else { '-' });
            s.push_str(name);
        }
    }
    s
}

// === match ===

fn render_match_into(out: &mut String, m: &Match, priority: u16, names: &Names) {
    let m = normalize_match(m);
    let start = out.len();
    if priority != 32768 {
        let _ = write!(out, "priority={priority},");
    }
    if let Some(p) = m.pkt_mark {
        u32_masked(out, "pkt_mark", p.value, p.mask);
    }
    if let Some(c) = m.conj_id {
        let _ = write!(out, "conj_id={c},");
    }
    if let Some(s) = m.ct_state {
        let _ = write!(out, "ct_state={},", ct_state_text(s.value, s.mask));
    }
    if let Some(z) = m.ct_zone {
        u16_masked(out, "ct_zone", z, None);
    }
    if let Some(k) = m.ct_mark {
        u32_masked(out, "ct_mark", k.value, k.mask);
    }
    if let Some(l) = m.ct_label {
        let _ = write!(out, "ct_label={}", put_hex(l.value));
        if let Some(k) = l.mask {
            let _ = write!(out, "/{}", put_hex(k));
        }
        out.push(',');
    }
    let mut skip_type = false;
    let mut skip_proto = false;
    if let Some(t) = m.eth_type {
        let shorthand = match t {
            eth_type::IPV4 => Some(match m.ip_proto {
                Some(ip_proto::ICMP) => "icmp",
                Some(ip_proto::TCP) => "tcp",
                Some(ip_proto::UDP) => "udp",
                Some(ip_proto::SCTP) => "sctp",
                _ => "ip",
            }),
            eth_type::IPV6 => Some(match m.ip_proto {
                Some(ip_proto::ICMPV6) => "icmp6",
                Some(ip_proto::TCP) => "tcp6",
                Some(ip_proto::UDP) => "udp6",
                Some(ip_proto::SCTP) => "sctp6",
                _ => "ipv6",
            }),
            eth_type::ARP => Some("arp"),
            0x8035 => Some("rarp"),
            0x8847 => Some("mpls"),
            0x8848 => Some("mplsm"),
            _ => None,
        };
        if let Some(s) = shorthand {
            skip_type = true;
            skip_proto = !matches!(s, "ip" | "ipv6" | "arp" | "rarp" | "mpls" | "mplsm");
            out.push_str(s);
            out.push(',');
        }
    }
    for (idx, r) in &m.regs {
        u32_masked(out, &format!("reg{idx}"), r.value, r.mask);
    }
    if let Some(v) = m.metadata {
        let _ = write!(out, "metadata={}", hash_x64(v.value));
        if let Some(k) = v.mask {
            let _ = write!(out, "/{}", hash_x64(k));
        }
        out.push(',');
    }
    if let Some(p) = m.in_port {
        let _ = write!(out, "in_port={},", names.port(p));
    }
    if let Some(t) = m.vlan_tci {
        vlan_text(out, t.value, t.mask.unwrap_or(u16::MAX));
    }
    eth_masked(out, "dl_src", m.eth_src);
    eth_masked(out, "dl_dst", m.eth_dst);
    if let (false, Some(t)) = (skip_type, m.eth_type) {
        let _ = write!(out, "dl_type={t:#06x},");
    }
    let arp = matches!(m.eth_type, Some(eth_type::ARP | 0x8035));
    if m.eth_type == Some(eth_type::IPV6) {
        v6_net(out, "ipv6_src", m.ipv6_src);
        v6_net(out, "ipv6_dst", m.ipv6_dst);
    } else if arp {
        v4_net(out, "arp_spa", m.arp_spa);
        v4_net(out, "arp_tpa", m.arp_tpa);
    } else {
        v4_net(out, "nw_src", m.ipv4_src);
        v4_net(out, "nw_dst", m.ipv4_dst);
    }
    if arp {
        if let Some(op) = m.arp_op {
            let _ = write!(out, "arp_op={op},");
        }
    } else if let (false, Some(p)) = (skip_proto, m.ip_proto) {
        let _ = write!(out, "nw_proto={p},");
    }
    if arp {
        eth_masked(out, "arp_sha", m.arp_sha);
        eth_masked(out, "arp_tha", m.arp_tha);
    }
    let icmp = matches!(
        (m.eth_type, m.ip_proto),
        (Some(eth_type::IPV4), Some(ip_proto::ICMP)) | (Some(eth_type::IPV6), Some(ip_proto::ICMPV6))
    );
    if icmp {
        if let Some(v) = m.icmp_type {
            let _ = write!(out, "icmp_type={v},");
        }
        if let Some(v) = m.icmp_code {
            let _ = write!(out, "icmp_code={v},");
        }
        if m.eth_type == Some(eth_type::IPV6) {
            v6_net(out, "nd_target", m.nd_target);
            eth_masked(out, "nd_sll", m.nd_sll);
            eth_masked(out, "nd_tll", m.nd_tll);
        }
    } else {
        if let Some(p) = m.tp_src {
            u16_masked(out, "tp_src", p.value, p.mask);
        }
        if let Some(p) = m.tp_dst {
            u16_masked(out, "tp_dst", p.value, p.mask);
        }
    }
    if let Some(f) = m.tcp_flags.filter(|_| m.ip_proto == Some(ip_proto::TCP)) {
        let _ = write!(
            out,
            "tcp_flags={},",
            tcp_flags_text(f.value, f.mask.unwrap_or(tcp_flags::ALL))
        );
    }
    if out.len() > start && out.ends_with(',') {
        out.pop();
    }
}

/// Renders a match as OVS prints it (`priority=...` first unless 32768).
pub fn render_match(m: &Match, priority: u16, names: &NameMap) -> String {
    let mut s = String::new();
    render_match_into(&mut s, m, priority, &Names::from(names));
    s
}

// === actions ===

fn subfield(r: &RegRange) -> String {
    let name = Field::Reg(r.reg).nxm_name();
    if r.ofs == 0 && r.n_bits == 32 {
        format!("{name}[]")
    } else if r.n_bits == 1 {
        format!("{name}[{}]", r.ofs)
    } else {
        format!(
            "{name}[{}..{}]",
            r.ofs,
            (u32::from(r.ofs) + u32::from(r.n_bits)).saturating_sub(1)
        )
    }
}

fn set_field_text(sf: &SetField) -> String {
    fn v32(v: u32, m: Option<u32>) -> String {
        match m {
            None | Some(u32::MAX) => hash_x32(v),
            Some(m) => format!("{}/{}", hash_x32(v & m), hash_x32(m)),
        }
    }
    match sf {
        SetField::Reg { idx, value, mask } => format!("set_field:{}->reg{idx}", v32(*value, *mask)),
        SetField::CtMark { value, mask } => format!("set_field:{}->ct_mark", v32(*value, *mask)),
        SetField::PktMark { value, mask } => format!("set_field:{}->pkt_mark", v32(*value, *mask)),
        SetField::CtLabel { value, mask } => match mask {
            None | Some(u128::MAX) => format!("set_field:{}->ct_label", put_hex(*value)),
            Some(m) => format!("set_field:{}/{}->ct_label", put_hex(value & m), put_hex(*m)),
        },
        SetField::Metadata { value, mask } => match mask {
            None | Some(u64::MAX) => format!("set_field:{}->metadata", hash_x64(*value)),
            Some(m) => format!("set_field:{}/{}->metadata", hash_x64(value & m), hash_x64(*m)),
        },
        SetField::EthSrc(m) => format!("set_field:{}->eth_src", mac(m)),
        SetField::EthDst(m) => format!("set_field:{}->eth_dst", mac(m)),
        SetField::Ipv4Src(a) => format!("set_field:{a}->ip_src"),
        SetField::Ipv4Dst(a) => format!("set_field:{a}->ip_dst"),
        SetField::Ipv6Src(a) => format!("set_field:{}->ipv6_src", ipv6_text(a)),
        SetField::Ipv6Dst(a) => format!("set_field:{}->ipv6_dst", ipv6_text(a)),
        SetField::TcpSrc(p) => format!("set_field:{p}->tcp_src"),
        SetField::TcpDst(p) => format!("set_field:{p}->tcp_dst"),
        SetField::UdpSrc(p) => format!("set_field:{p}->udp_src"),
        SetField::UdpDst(p) => format!("set_field:{p}->udp_dst"),
    }
}

/// `nat(...)` as OVS's `format_NAT` prints it.
fn nat_text(n: &NatAction) -> String {
    let mut s = String::from("nat");
    let Some(kind) = n.kind else { return s };
    s.push('(');
    s.push_str(match kind {
        NatKind::Src => "src",
        NatKind::Dst => "dst",
    });
    let port_min = n.ports.map(|p| p.0).unwrap_or(0);
    if let Some((min, max)) = n.addrs {
        s.push('=');
        match (min, max) {
            (IpAddr::V6(min6), max) => {
                let br = |a: &Ipv6Addr| {
                    if port_min != 0 {
                        format!("[{}]", ipv6_text(a))
                    } else {
                        ipv6_text(a)
                    }
                };
                s.push_str(&br(&min6));
                if let IpAddr::V6(max6) = max {
                    if !max6.is_unspecified() && max6 != min6 {
                        s.push('-');
                        s.push_str(&br(&max6));
                    }
                }
            }
            (min, max) => {
                s.push_str(&min.to_string());
                if !max.is_unspecified() && max != min {
                    let _ = write!(s, "-{max}");
                }
            }
        }
        if let Some((pmin, pmax)) = n.ports.filter(|p| p.0 != 0) {
            let _ = write!(s, ":{pmin}");
            if pmax != 0 && pmax != pmin {
                let _ = write!(s, "-{pmax}");
            }
        }
    }
    s.push(',');
    if n.persistent {
        s.push_str("persistent,");
    }
    if n.hash {
        s.push_str("hash,");
    }
    if n.random {
        s.push_str("random,");
    }
    s.pop();
    s.push(')');
    s
}

fn reason_text(r: u8) -> String {
    match r {
        0 => "no_match".into(),
        1 => "action".into(),
        2 => "invalid_ttl".into(),
        3 => "action_set".into(),
        4 => "group".into(),
        5 => "packet_out".into(),
        6 | 7 => String::new(),
        n => n.to_string(),
    }
}

fn controller_text(c: &ControllerAction) -> String {
    let meter = c.meter_id.filter(|m| *m != 0);
    if c.reason == OFPR_ACTION && c.controller_id == 0 && c.userdata.is_empty() && !c.pause && meter.is_none()
    {
        return format!("CONTROLLER:{}", c.max_len);
    }
    let mut parts = Vec::new();
    if c.reason != OFPR_ACTION {
        parts.push(format!("reason={}", reason_text(c.reason)));
    }
    if c.max_len != u16::MAX {
        parts.push(format!("max_len={}", c.max_len));
    }
    if c.controller_id != 0 {
        parts.push(format!("id={}", c.controller_id));
    }
    if !c.userdata.is_empty() {
        parts.push(format!("userdata={}", hex_dotted(&c.userdata)));
    }
    if c.pause {
        parts.push("pause".into());
    }
    if let Some(m) = meter {
        parts.push(format!("meter_id={m}"));
    }
    format!("controller({})", parts.join(","))
}

fn ct_text(ct: &CtAction, names: &Names) -> String {
    let mut parts = Vec::new();
    if ct.commit {
        parts.push("commit".to_string());
    }
    if let Some(t) = ct.table {
        parts.push(format!("table={}", names.table(t)));
    }
    match ct.zone {
        CtZone::Immediate(0) => {}
        CtZone::Immediate(z) => parts.push(format!("zone={z}")),
        CtZone::Field(r) => parts.push(format!("zone={}", subfield(&r))),
    }
    let mut exec = &ct.exec[..];
    if let Some((Action::Nat(n), rest)) = exec.split_first() {
        parts.push(nat_text(n));
        exec = rest;
    }
    if !exec.is_empty() {
        parts.push(format!("exec({})", actions_text(exec, names)));
    }
    format!("ct({})", parts.join(","))
}

fn action_text(a: &Action, names: &Names) -> String {
    match a {
        Action::Output(p) => {
            let p16 = port_to_16(*p).unwrap_or(0);
            if reserved_port_name(*p).is_none() && (p16 < 0xff00) {
                format!("output:{}", names.port(*p))
            } else if *p == port::CONTROLLER {
                "CONTROLLER:65535".to_string()
            } else {
                names.port(*p)
            }
        }
        Action::OutputReg(r) => format!("output:{}", subfield(r)),
        Action::SetField(sf) => set_field_text(sf),
        Action::Ct(ct) => ct_text(ct, names),
        Action::CtClear => "ct_clear".to_string(),
        Action::Conjunction {
            id,
            clause,
            n_clauses,
        } => format!("conjunction({id},{clause}/{n_clauses})"),
        Action::Controller(c) => controller_text(c),
        Action::Meter(m) => format!("meter:{m}"),
        Action::Group(g) => format!("group:{g}"),
        Action::Resubmit { in_port, table } => {
            let in_port = in_port.filter(|p| *p != port::IN_PORT);
            match (in_port, table) {
                (Some(p), None) => format!("resubmit:{}", names.port(p)),
                (p, t) => format!(
                    "resubmit({},{})",
                    p.map(|p| names.port(p)).unwrap_or_default(),
                    t.map(|t| names.table(t)).unwrap_or_default()
                ),
            }
        }
        Action::ResubmitCt { in_port, table } => {
            let in_port = in_port.filter(|p| *p != port::IN_PORT);
            format!(
                "resubmit({},{},ct)",
                in_port.map(|p| names.port(p)).unwrap_or_default(),
                table.map(|t| names.table(t)).unwrap_or_default()
            )
        }
        Action::Nat(n) => nat_text(n),
        Action::Move { src, dst } => format!("move:{}->{}", subfield(src), subfield(dst)),
        Action::Note(b) => {
            let mut bytes = b.clone();
            let total = pad8(10 + bytes.len()).max(16);
            bytes.resize(total - 10, 0);
            format!("note:{}", hex_dotted(&bytes))
        }
    }
}

fn actions_text(actions: &[Action], names: &Names) -> String {
    actions
        .iter()
        .map(|a| action_text(a, names))
        .collect::<Vec<_>>()
        .join(",")
}

fn instructions_text(actions: &[Action], goto: Option<u8>, names: &Names) -> String {
    let mut parts: Vec<String> = actions.iter().map(|a| action_text(a, names)).collect();
    if let Some(t) = goto {
        parts.push(format!("goto_table:{}", names.table(t)));
    }
    if parts.is_empty() {
        "drop".to_string()
    } else {
        parts.join(",")
    }
}

/// Renders the actions part (after `actions=`) as OVS prints it.
pub fn render_actions(actions: &[Action], goto: Option<u8>, names: &NameMap) -> String {
    instructions_text(actions, goto, &Names::from(names))
}

fn render_flow_with(f: &Flow, names: &Names, has_table_name: bool) -> String {
    let mut s = String::with_capacity(128);
    if f.cookie != 0 {
        let _ = write!(s, "cookie={:#x}, ", f.cookie);
    }
    if f.table != 0 || has_table_name {
        let _ = write!(s, "table={}, ", names.table(f.table));
    }
    if f.idle_timeout != 0 {
        let _ = write!(s, "idle_timeout={}, ", f.idle_timeout);
    }
    if f.hard_timeout != 0 {
        let _ = write!(s, "hard_timeout={}, ", f.hard_timeout);
    }
    render_match_into(&mut s, &f.matches, f.priority, names);
    if !s.is_empty() && !s.ends_with(' ') {
        s.push(' ');
    }
    s.push_str("actions=");
    s.push_str(&instructions_text(&f.actions, f.goto_table, names));
    s
}

/// Renders one flow exactly as `ovs-ofctl -O OpenFlow15 dump-flows --names --no-stats`
/// prints it (without the leading space).
pub fn render_flow(f: &Flow, names: &NameMap) -> String {
    render_flow_with(f, &Names::from(names), names.has_table_name(f.table))
}

/// Renders many flows with one name map (faster than calling [`render_flow`] in a loop).
pub fn render_flows<'a>(flows: impl IntoIterator<Item = &'a Flow>, names: &NameMap) -> Vec<String> {
    let n = Names::from(names);
    flows
        .into_iter()
        .map(|f| render_flow_with(f, &n, n.tables.contains_key(&f.table)))
        .collect()
}

/// Renders a type ALL group as `ovs-ofctl -O OpenFlow15 dump-groups --names` prints it.
pub fn render_group(g: &Group, names: &NameMap) -> String {
    let n = Names::from(names);
    let mut s = format!("group_id={},type=all", g.group_id);
    for (i, b) in g.buckets.iter().enumerate() {
        let actions = if b.is_empty() {
            "drop".to_string()
        } else {
            actions_text(b, &n)
        };
        let _ = write!(s, ",bucket=bucket_id:{i},actions={actions}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::{ct_state, v4, v6, CtStateMatch, Masked};

    fn names() -> NameMap {
        let mut n = NameMap::new();
        for (i, t) in ["PipelineRootClassifier", "ConntrackZone", "ConntrackState"]
            .iter()
            .enumerate()
        {
            n.tables.insert(i as u8, t.to_string());
        }
        n.tables.insert(13, "IngressMetric".into());
        n.tables.insert(15, "Output".into());
        n.ports.insert(20, "ens9".into());
        n.ports.insert(21, "eth0~".into());
        n.ports.insert(23, "x,y".into());
        n.ports.insert(24, "25".into());
        n
    }

    #[test]
    fn quoting_follows_ovs() {
        assert_eq!(quote_name("ens9"), "ens9");
        assert_eq!(quote_name("eth0~"), "\"eth0~\"");
        assert_eq!(quote_name("25"), "\"25\"");
        assert_eq!(quote_name("a_b"), "\"a_b\"");
        assert_eq!(quote_name("q\"\\"), "\"q\\\"\\\\\"");
    }

    #[test]
    fn renders_basic_flows() {
        let n = names();
        let f = Flow::new(0, 200, Match::new().ipv4())
            .cookie(0x1000000000000)
            .goto(1);
        assert_eq!(
            render_flow(&f, &n),
            "cookie=0x1000000000000, table=PipelineRootClassifier, priority=200,ip actions=goto_table:ConntrackZone"
        );
        assert_eq!(
            render_flow(&f, &NameMap::new()),
            "cookie=0x1000000000000, priority=200,ip actions=goto_table:1"
        );
        let f = Flow::new(1, 32768, Match::new());
        assert_eq!(render_flow(&f, &n), "table=ConntrackZone, actions=drop");
        assert_eq!(
            render_flow(&Flow::new(0, 32768, Match::new()), &NameMap::new()),
            "actions=drop"
        );
        let mut f = Flow::new(1, 5, Match::new());
        f.idle_timeout = 10;
        f.hard_timeout = 20;
        assert_eq!(
            render_flow(&f, &n),
            "table=ConntrackZone, idle_timeout=10, hard_timeout=20, priority=5 actions=drop"
        );
    }

    #[test]
    fn renders_ports_and_reserved_outputs() {
        let n = names();
        let f = Flow::new(16, 200, Match::new().in_port(23)).action(Action::Output(24));
        assert_eq!(
            render_flow(&f, &n),
            "table=16, priority=200,in_port=\"x,y\" actions=output:\"25\""
        );
        let f = Flow::new(16, 200, Match::new().in_port(21))
            .action(Action::Output(port::LOCAL))
            .action(Action::Output(port::IN_PORT))
            .action(Action::Output(port::CONTROLLER))
            .action(Action::Output(99));
        assert_eq!(
            render_flow(&f, &n),
            "table=16, priority=200,in_port=\"eth0~\" actions=LOCAL,IN_PORT,CONTROLLER:65535,output:99"
        );
    }

    #[test]
    fn renders_match_field_forms() {
        let n = NameMap::new();
        let mut m = Match::new()
            .ipv4()
            .reg(0, 0x3, Some(0x1))
            .reg(1, 5, Some(u32::MAX));
        m.ct_mark = Some(Masked::new(0x4, 0xf));
        m.ct_label = Some(Masked::exact(1));
        m.pkt_mark = Some(Masked::new(0, 0x1800));
        assert_eq!(
            render_match(&m, 7, &n),
            "priority=7,pkt_mark=0/0x1800,ct_mark=0x4/0xf,ct_label=0x1,ip,reg0=0x1/0x1,reg1=0x5"
        );
        let mut m = Match::new().ipv6().ip_proto(ip_proto::TCP).tp_dst(90);
        m.ipv6_dst = v6("fd00::".parse().unwrap(), 64);
        m.tp_src = Some(Masked::new(0, 0xff00));
        assert_eq!(
            render_match(&m, 14501, &n),
            "priority=14501,tcp6,ipv6_dst=fd00::/64,tp_src=0x0/0xff00,tp_dst=90"
        );
        let mut m = Match::new()
            .ipv4()
            .ip_proto(ip_proto::TCP)
            .ct_state(CtStateMatch::of(&[(ct_state::NEW, true), (ct_state::TRK, true)]));
        m.ipv4_src = v4("10.10.10.0".parse().unwrap(), 30);
        m.tp_dst = Some(Masked::exact(30000));
        assert_eq!(
            render_match(&m, 200, &n),
            "priority=200,ct_state=+new+trk,tcp,nw_src=10.10.10.0/30,tp_dst=30000"
        );
        let m = Match::new().ct_state(CtStateMatch {
            value: 0x21,
            mask: 0xff,
        });
        assert_eq!(render_match(&m, 2, &n), "priority=2,ct_state=new|trk");
        let m = Match::new().ct_state(CtStateMatch::of(&[(ct_state::NEW, false), (ct_state::EST, true)]));
        assert_eq!(render_match(&m, 2, &n), "priority=2,ct_state=-new+est");
        let m = Match::new().ipv4().ip_proto(99);
        assert_eq!(render_match(&m, 16, &n), "priority=16,ip,nw_proto=99");
        let m = Match::new().eth_type(0x88cc);
        assert_eq!(render_match(&m, 19, &n), "priority=19,dl_type=0x88cc");
        let mut m = Match::new().ipv4().ip_proto(ip_proto::ICMP);
        m.icmp_type = Some(8);
        m.icmp_code = Some(0);
        assert_eq!(
            render_match(&m, 200, &n),
            "priority=200,icmp,icmp_type=8,icmp_code=0"
        );
    }

    #[test]
    fn renders_actions() {
        let n = names();
        let ct = Action::Ct(CtAction {
            commit: true,
            table: Some(13),
            zone: CtZone::Immediate(65520),
            exec: vec![Action::SetField(SetField::CtLabel {
                value: 0xa,
                mask: Some(0xffff_ffff),
            })],
        });
        let ctl = Action::Controller(ControllerAction {
            max_len: 65535,
            controller_id: 32776,
            reason: 0,
            userdata: vec![1, 1],
            pause: false,
            meter_id: None,
        });
        let acts = vec![
            Action::Meter(256),
            Action::SetField(SetField::Reg {
                idx: 6,
                value: 0xa,
                mask: None,
            }),
            ct,
            Action::SetField(SetField::Reg {
                idx: 0,
                value: 0,
                mask: Some(0x1800),
            }),
            ctl,
            Action::Conjunction {
                id: 10,
                clause: 1,
                n_clauses: 2,
            },
            Action::Resubmit {
                in_port: None,
                table: Some(15),
            },
            Action::Resubmit {
                in_port: Some(20),
                table: Some(2),
            },
            Action::Resubmit {
                in_port: Some(21),
                table: None,
            },
            Action::Move {
                src: RegRange {
                    reg: 0,
                    ofs: 0,
                    n_bits: 4,
                },
                dst: RegRange {
                    reg: 1,
                    ofs: 4,
                    n_bits: 4,
                },
            },
            Action::OutputReg(RegRange::whole(1)),
            Action::OutputReg(RegRange {
                reg: 7,
                ofs: 31,
                n_bits: 1,
            }),
            Action::Note(vec![1, 2, 3]),
            Action::CtClear,
            Action::Group(4),
        ];
        assert_eq!(
            render_actions(&acts, Some(13), &n),
            "meter:256,set_field:0xa->reg6,ct(commit,table=IngressMetric,zone=65520,exec(set_field:0xa/0xffffffff->ct_label)),\
set_field:0/0x1800->reg0,controller(reason=no_match,id=32776,userdata=01.01),conjunction(10,1/2),resubmit(,Output),\
resubmit(ens9,ConntrackState),resubmit:\"eth0~\",move:NXM_NX_REG0[0..3]->NXM_NX_REG1[4..7],output:NXM_NX_REG1[],\
output:NXM_NX_REG7[31],note:01.02.03.00.00.00,ct_clear,group:4,goto_table:IngressMetric"
        );
        let ctl = ControllerAction {
            max_len: 100,
            controller_id: 5,
            reason: 1,
            userdata: vec![1, 2],
            pause: true,
            meter_id: Some(3),
        };
        assert_eq!(
            controller_text(&ctl),
            "controller(max_len=100,id=5,userdata=01.02,pause,meter_id=3)"
        );
        let ctl = ControllerAction {
            max_len: 65535,
            controller_id: 0,
            reason: 1,
            userdata: vec![],
            pause: false,
            meter_id: None,
        };
        assert_eq!(controller_text(&ctl), "CONTROLLER:65535");
        let ct = CtAction {
            commit: false,
            table: None,
            zone: CtZone::Immediate(0),
            exec: vec![],
        };
        assert_eq!(ct_text(&ct, &Names::default()), "ct()");
        assert_eq!(render_actions(&[], None, &n), "drop");
    }

    #[test]
    fn renders_groups() {
        let mut n = NameMap::new();
        n.tables.insert(5, "EgressRule".into());
        n.tables.insert(15, "Output".into());
        let g = Group {
            group_id: 1,
            buckets: vec![
                vec![Action::Resubmit {
                    in_port: None,
                    table: Some(5),
                }],
                vec![
                    Action::SetField(SetField::Reg {
                        idx: 0,
                        value: 0x400000,
                        mask: Some(0x600000),
                    }),
                    Action::Resubmit {
                        in_port: None,
                        table: Some(15),
                    },
                ],
            ],
        };
        assert_eq!(
            render_group(&g, &n),
            "group_id=1,type=all,bucket=bucket_id:0,actions=resubmit(,EgressRule),bucket=bucket_id:1,actions=set_field:0x400000/0x600000->reg0,resubmit(,Output)"
        );
    }

    #[test]
    fn duplicate_names_render_numbers() {
        let mut n = NameMap::new();
        n.ports.insert(1, "a".into());
        n.ports.insert(2, "a".into());
        let f = Flow::new(0, 1, Match::new().in_port(1));
        assert_eq!(render_flow(&f, &n), "priority=1,in_port=1 actions=drop");
    }

    #[test]
    fn ipv6_text_matches_inet_ntop() {
        assert_eq!(ipv6_text(&"::1".parse().unwrap()), "::1");
        assert_eq!(ipv6_text(&"::102:304".parse().unwrap()), "::1.2.3.4");
        assert_eq!(ipv6_text(&"::ffff:1.2.3.4".parse().unwrap()), "::ffff:1.2.3.4");
        assert_eq!(ipv6_text(&"fe80::1".parse().unwrap()), "fe80::1");
    }
}
