//! The flow model: a typed, protocol-neutral description of one OpenFlow flow (match, priority,
//! cookie, actions, goto-table) and of the flow_mods that change a switch's tables.
//!
//! Everything above `src/ovs/openflow/` speaks in these types; only the codec in this module turns
//! them into bytes. Field order inside [`Match`] is the canonical rendering order of
//! `ovs-ofctl dump-flows`, so a derived `Ord` gives stable sorting and a derived `Eq`/`Hash` makes a
//! flow's identity (table, priority, match) usable as a map key for diffing desired vs installed.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::{Ipv4Net, Ipv6Net};

/// Ethernet types the pipeline matches on.
pub mod eth_type {
    pub const IPV4: u16 = 0x0800;
    pub const ARP: u16 = 0x0806;
    pub const IPV6: u16 = 0x86dd;
}

/// IP protocol numbers the pipeline matches on.
pub mod ip_proto {
    pub const ICMP: u8 = 1;
    pub const IGMP: u8 = 2;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub const ICMPV6: u8 = 58;
    pub const SCTP: u8 = 132;
}

/// Reserved OpenFlow port numbers (OpenFlow 1.1+ 32-bit space).
pub mod port {
    pub const IN_PORT: u32 = 0xffff_fff8;
    pub const TABLE: u32 = 0xffff_fff9;
    pub const NORMAL: u32 = 0xffff_fffa;
    pub const FLOOD: u32 = 0xffff_fffb;
    pub const ALL: u32 = 0xffff_fffc;
    pub const CONTROLLER: u32 = 0xffff_fffd;
    pub const LOCAL: u32 = 0xffff_fffe;
    pub const ANY: u32 = 0xffff_ffff;
}

/// `table=ALL` in flow_mod delete and stats requests.
pub const TABLE_ALL: u8 = 0xff;

/// A value with a bit mask; `mask == None` means an exact match (all ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Masked<T> {
    pub value: T,
    pub mask: Option<T>,
}

impl<T> Masked<T> {
    pub fn exact(value: T) -> Self {
        Masked { value, mask: None }
    }
    pub fn new(value: T, mask: T) -> Self {
        Masked {
            value,
            mask: Some(mask),
        }
    }
}

/// Conntrack state bits, in OVS's rendering order (`+new+est+rel+rpl+inv+trk+snat+dnat`).
pub mod ct_state {
    pub const NEW: u32 = 1 << 0;
    pub const EST: u32 = 1 << 1;
    pub const REL: u32 = 1 << 2;
    pub const RPL: u32 = 1 << 3;
    pub const INV: u32 = 1 << 4;
    pub const TRK: u32 = 1 << 5;
    pub const SNAT: u32 = 1 << 6;
    pub const DNAT: u32 = 1 << 7;
}

/// A ct_state match: `value` holds the bits that must be set, `mask` every bit that is checked
/// (`+new+trk` is value NEW|TRK, mask NEW|TRK; `-new+est` is value EST, mask NEW|EST).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CtStateMatch {
    pub value: u32,
    pub mask: u32,
}

impl CtStateMatch {
    /// Builds a match from `(flag, wanted)` pairs, e.g. `[(NEW, false), (EST, true)]`.
    pub fn of(flags: &[(u32, bool)]) -> Self {
        let mut m = CtStateMatch { value: 0, mask: 0 };
        for &(flag, on) in flags {
            m.mask |= flag;
            if on {
                m.value |= flag;
            }
        }
        m
    }
}

/// The match part of a flow. Absent fields are wildcarded. Prerequisites (eth_type before an IP
/// field, ip_proto before a port) are the caller's responsibility; the codec checks them.
///
/// `ct_zone` is exact only: OVS 3.1 refuses a masked `ct_zone` ("invalid mask for field
/// ct_zone"). `xreg`/`xxreg` matches are register matches (see [`Match::xreg`]); OVS stores and
/// prints them as `reg<N>`. `vlan_tci` is OVS's TCI view of the VLAN header: bit 0x1000 (CFI)
/// means "a VLAN header is present", VID in the low 12 bits, PCP in the top 3.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Match {
    pub pkt_mark: Option<Masked<u32>>,
    pub conj_id: Option<u32>,
    pub ct_state: Option<CtStateMatch>,
    pub ct_zone: Option<u16>,
    pub ct_mark: Option<Masked<u32>>,
    pub ct_label: Option<Masked<u128>>,
    pub eth_type: Option<u16>,
    pub ip_proto: Option<u8>,
    /// reg0..reg15 (key = register index).
    pub regs: BTreeMap<u8, Masked<u32>>,
    /// The OpenFlow metadata field (`metadata=`).
    pub metadata: Option<Masked<u64>>,
    pub in_port: Option<u32>,
    pub vlan_tci: Option<Masked<u16>>,
    pub eth_src: Option<Masked<[u8; 6]>>,
    pub eth_dst: Option<Masked<[u8; 6]>>,
    pub ipv4_src: Option<Ipv4Net>,
    pub ipv4_dst: Option<Ipv4Net>,
    pub ipv6_src: Option<Ipv6Net>,
    pub ipv6_dst: Option<Ipv6Net>,
    /// ARP sender / target protocol address (eth_type arp or rarp).
    pub arp_spa: Option<Ipv4Net>,
    pub arp_tpa: Option<Ipv4Net>,
    /// ARP opcode (OVS keeps 8 bits).
    pub arp_op: Option<u8>,
    pub arp_sha: Option<Masked<[u8; 6]>>,
    pub arp_tha: Option<Masked<[u8; 6]>>,
    pub icmp_type: Option<u8>,
    pub icmp_code: Option<u8>,
    /// Neighbour discovery (icmp6 type 135 or 136): target, source and target link-layer address.
    pub nd_target: Option<Ipv6Net>,
    pub nd_sll: Option<Masked<[u8; 6]>>,
    pub nd_tll: Option<Masked<[u8; 6]>>,
    pub tp_src: Option<Masked<u16>>,
    pub tp_dst: Option<Masked<u16>>,
    /// TCP flags (12 bits: fin syn rst psh ack urg ece cwr ns); `tcp` or `tcp6` only.
    pub tcp_flags: Option<Masked<u16>>,
}

/// TCP flag bits for [`Match::tcp_flags`].
pub mod tcp_flags {
    pub const FIN: u16 = 0x001;
    pub const SYN: u16 = 0x002;
    pub const RST: u16 = 0x004;
    pub const PSH: u16 = 0x008;
    pub const ACK: u16 = 0x010;
    pub const URG: u16 = 0x020;
    pub const ECE: u16 = 0x040;
    pub const CWR: u16 = 0x080;
    pub const NS: u16 = 0x100;
    /// Every bit OVS matches on.
    pub const ALL: u16 = 0x0fff;
}

/// VLAN TCI bits for [`Match::vlan_tci`].
pub mod vlan {
    /// "A VLAN header is present" (OVS's CFI bit, OpenFlow's OFPVID_PRESENT).
    pub const PRESENT: u16 = 0x1000;
    pub const VID_MASK: u16 = 0x0fff;
    pub const PCP_MASK: u16 = 0xe000;
}

impl Match {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn eth_type(mut self, t: u16) -> Self {
        self.eth_type = Some(t);
        self
    }
    pub fn ipv4(self) -> Self {
        self.eth_type(eth_type::IPV4)
    }
    pub fn ipv6(self) -> Self {
        self.eth_type(eth_type::IPV6)
    }
    pub fn ip_proto(mut self, p: u8) -> Self {
        self.ip_proto = Some(p);
        self
    }
    pub fn in_port(mut self, p: u32) -> Self {
        self.in_port = Some(p);
        self
    }
    pub fn ct_state(mut self, s: CtStateMatch) -> Self {
        self.ct_state = Some(s);
        self
    }
    pub fn reg(mut self, idx: u8, value: u32, mask: Option<u32>) -> Self {
        self.regs.insert(idx, Masked { value, mask });
        self
    }
    pub fn conj_id(mut self, id: u32) -> Self {
        self.conj_id = Some(id);
        self
    }
    pub fn ipv4_src(mut self, n: Ipv4Net) -> Self {
        self.ipv4_src = Some(n);
        self
    }
    pub fn ipv4_dst(mut self, n: Ipv4Net) -> Self {
        self.ipv4_dst = Some(n);
        self
    }
    pub fn ipv6_src(mut self, n: Ipv6Net) -> Self {
        self.ipv6_src = Some(n);
        self
    }
    pub fn ipv6_dst(mut self, n: Ipv6Net) -> Self {
        self.ipv6_dst = Some(n);
        self
    }
    pub fn tp_dst(mut self, port: u16) -> Self {
        self.tp_dst = Some(Masked::exact(port));
        self
    }
    pub fn tp_dst_masked(mut self, port: u16, mask: u16) -> Self {
        self.tp_dst = Some(Masked::new(port, mask));
        self
    }
    pub fn tp_src(mut self, port: u16) -> Self {
        self.tp_src = Some(Masked::exact(port));
        self
    }
    pub fn tp_src_masked(mut self, port: u16, mask: u16) -> Self {
        self.tp_src = Some(Masked::new(port, mask));
        self
    }
    pub fn metadata(mut self, value: u64, mask: Option<u64>) -> Self {
        self.metadata = Some(Masked { value, mask });
        self
    }
    /// `xreg<idx>` (idx 0..=7): the 64-bit pair reg<2*idx> (high half) and reg<2*idx+1>.
    /// Halves whose mask is zero are not matched.
    pub fn xreg(mut self, idx: u8, value: u64, mask: Option<u64>) -> Self {
        let mask = mask.unwrap_or(u64::MAX);
        for (half, shift) in [(0u8, 32u32), (1, 0)] {
            let m = (mask >> shift) as u32;
            if m != 0 {
                let v = (value >> shift) as u32;
                self.regs.insert(
                    idx * 2 + half,
                    Masked {
                        value: v & m,
                        mask: (m != u32::MAX).then_some(m),
                    },
                );
            }
        }
        self
    }
    /// `xxreg<idx>` (idx 0..=3): reg<4*idx> (most significant) .. reg<4*idx+3>.
    pub fn xxreg(mut self, idx: u8, value: u128, mask: Option<u128>) -> Self {
        let mask = mask.unwrap_or(u128::MAX);
        for word in 0u8..4 {
            let shift = 96 - 32 * u32::from(word);
            let m = (mask >> shift) as u32;
            if m != 0 {
                let v = (value >> shift) as u32;
                self.regs.insert(
                    idx * 4 + word,
                    Masked {
                        value: v & m,
                        mask: (m != u32::MAX).then_some(m),
                    },
                );
            }
        }
        self
    }
    /// A VLAN header with this VID (`dl_vlan=<vid>`).
    pub fn vlan_vid(mut self, vid: u16) -> Self {
        let (v, m) = self.vlan_parts();
        self.vlan_tci = Some(Masked::new(
            (v & vlan::PCP_MASK) | vlan::PRESENT | (vid & vlan::VID_MASK),
            m | vlan::PRESENT | vlan::VID_MASK,
        ));
        self
    }
    /// A VLAN header with this priority (`dl_vlan_pcp=<pcp>`).
    pub fn vlan_pcp(mut self, pcp: u8) -> Self {
        let (v, m) = self.vlan_parts();
        self.vlan_tci = Some(Masked::new(
            (v & !vlan::PCP_MASK) | vlan::PRESENT | (u16::from(pcp & 7) << 13),
            m | vlan::PRESENT | vlan::PCP_MASK,
        ));
        self
    }
    /// No VLAN header (`vlan_tci=0x0000/0x1fff`).
    pub fn no_vlan(mut self) -> Self {
        self.vlan_tci = Some(Masked::new(0, vlan::PRESENT | vlan::VID_MASK));
        self
    }
    fn vlan_parts(&self) -> (u16, u16) {
        match self.vlan_tci {
            Some(Masked { value, mask }) => (value, mask.unwrap_or(u16::MAX)),
            None => (0, 0),
        }
    }
    pub fn tcp_flags(mut self, value: u16, mask: Option<u16>) -> Self {
        self.tcp_flags = Some(Masked { value, mask });
        self
    }
}

/// A field range inside a register-like field, e.g. `NXM_NX_REG1[]` or `NXM_NX_REG0[21..22]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RegRange {
    /// Register index 0..=15.
    pub reg: u8,
    /// First bit.
    pub ofs: u8,
    /// Number of bits (1..=32).
    pub n_bits: u8,
}

impl RegRange {
    pub fn whole(reg: u8) -> Self {
        RegRange {
            reg,
            ofs: 0,
            n_bits: 32,
        }
    }
}

/// A field written by `set_field` (OpenFlow 1.5 OFPAT_SET_FIELD, masked where OVS allows).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SetField {
    Reg { idx: u8, value: u32, mask: Option<u32> },
    CtMark { value: u32, mask: Option<u32> },
    CtLabel { value: u128, mask: Option<u128> },
    PktMark { value: u32, mask: Option<u32> },
    Metadata { value: u64, mask: Option<u64> },
    EthSrc([u8; 6]),
    EthDst([u8; 6]),
    Ipv4Src(Ipv4Addr),
    Ipv4Dst(Ipv4Addr),
    Ipv6Src(Ipv6Addr),
    Ipv6Dst(Ipv6Addr),
    TcpSrc(u16),
    TcpDst(u16),
    UdpSrc(u16),
    UdpDst(u16),
}

/// Which side a `nat(...)` rewrites.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NatKind {
    Src,
    Dst,
}

/// `nat(...)` (NXAST_NAT), valid only as the first action inside a `ct` action's list
/// ([`CtAction::exec`]); OVS prints it before `exec(...)`. With `kind: None` it is the plain
/// `nat` that applies an existing connection's NAT to its packets.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NatAction {
    pub kind: Option<NatKind>,
    /// Address range (min, max), both of one family; `max == min` for one address.
    pub addrs: Option<(std::net::IpAddr, std::net::IpAddr)>,
    /// Port range (min, max); `max == min` for one port. Needs `addrs`.
    pub ports: Option<(u16, u16)>,
    pub persistent: bool,
    pub hash: bool,
    pub random: bool,
}

impl NatAction {
    /// Plain `nat`.
    pub fn reverse() -> Self {
        NatAction {
            kind: None,
            addrs: None,
            ports: None,
            persistent: false,
            hash: false,
            random: false,
        }
    }
}

/// Where a `ct` action takes its zone from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CtZone {
    Immediate(u16),
    Field(RegRange),
}

/// `ct(...)` (NXAST_CT).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CtAction {
    pub commit: bool,
    /// Table to recirculate to; `None` means no recirculation.
    pub table: Option<u8>,
    pub zone: CtZone,
    /// The nested actions: an optional [`Action::Nat`] first, then the actions of `exec(...)`
    /// (only set_field on ct_mark / ct_label is valid there).
    pub exec: Vec<Action>,
}

/// `controller(...)` as NXAST_CONTROLLER2.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ControllerAction {
    pub max_len: u16,
    pub controller_id: u16,
    /// OFPR_* reason; 0 = no_match (what Antrea uses).
    pub reason: u8,
    pub userdata: Vec<u8>,
    pub pause: bool,
    pub meter_id: Option<u32>,
}

/// One action inside the flow's Apply-Actions instruction, in order.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    Output(u32),
    OutputReg(RegRange),
    SetField(SetField),
    Ct(CtAction),
    CtClear,
    /// `conjunction(id, clause/n_clauses)`, `clause` 1-based as in ovs-ofctl syntax.
    Conjunction {
        id: u32,
        clause: u8,
        n_clauses: u8,
    },
    Controller(ControllerAction),
    Meter(u32),
    Group(u32),
    /// `resubmit(port,table)`; `in_port: None` means OFPP_IN_PORT (`resubmit:T` / `resubmit(,T)`).
    Resubmit {
        in_port: Option<u32>,
        table: Option<u8>,
    },
    /// `resubmit(<port>,<table>,ct)`: look the packet up in `table` with its conntrack
    /// original-direction tuple (NXAST_RESUBMIT_TABLE_CT); needs `ct_state=+trk-inv`.
    ResubmitCt {
        in_port: Option<u32>,
        table: Option<u8>,
    },
    Move {
        src: RegRange,
        dst: RegRange,
    },
    Note(Vec<u8>),
    /// `nat(...)`: only inside [`CtAction::exec`], first.
    Nat(NatAction),
}

/// A flow: what it matches, what it does, and the metadata OVS keeps with it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Flow {
    pub table: u8,
    pub priority: u16,
    pub matches: Match,
    pub cookie: u64,
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    /// Apply-Actions instruction contents. Empty together with `goto_table: None` renders `drop`.
    pub actions: Vec<Action>,
    /// Goto-Table instruction.
    pub goto_table: Option<u8>,
}

impl Flow {
    pub fn new(table: u8, priority: u16, matches: Match) -> Self {
        Flow {
            table,
            priority,
            matches,
            cookie: 0,
            idle_timeout: 0,
            hard_timeout: 0,
            actions: Vec::new(),
            goto_table: None,
        }
    }
    pub fn cookie(mut self, cookie: u64) -> Self {
        self.cookie = cookie;
        self
    }
    pub fn action(mut self, a: Action) -> Self {
        self.actions.push(a);
        self
    }
    pub fn goto(mut self, table: u8) -> Self {
        self.goto_table = Some(table);
        self
    }
    /// The flow's identity in OVS: two flows with the same key replace each other on ADD.
    pub fn key(&self) -> FlowKey {
        FlowKey {
            table: self.table,
            priority: self.priority,
            matches: self.matches.clone(),
        }
    }
}

/// (table, priority, match): what makes a flow unique inside a switch.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowKey {
    pub table: u8,
    pub priority: u16,
    pub matches: Match,
}

/// flow_mod commands (OFPFC_*).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlowModCommand {
    Add,
    Modify,
    ModifyStrict,
    Delete,
    DeleteStrict,
}

/// One flow_mod. Deletes by cookie use `cookie_mask` and `table = TABLE_ALL`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FlowMod {
    pub command: FlowModCommand,
    pub flow: Flow,
    pub cookie_mask: u64,
    pub out_port: u32,
    pub out_group: u32,
    /// OFPFF_* flags (e.g. send_flow_rem, check_overlap, reset_counts).
    pub flags: u16,
}

impl FlowMod {
    pub fn add(flow: Flow) -> Self {
        FlowMod {
            command: FlowModCommand::Add,
            flow,
            cookie_mask: 0,
            out_port: port::ANY,
            out_group: port::ANY,
            flags: 0,
        }
    }
    pub fn delete_strict(flow: Flow) -> Self {
        FlowMod {
            command: FlowModCommand::DeleteStrict,
            ..FlowMod::add(flow)
        }
    }
    /// Deletes every flow in every table whose cookie matches `cookie` under `mask`.
    pub fn delete_by_cookie(cookie: u64, mask: u64) -> Self {
        let mut flow = Flow::new(TABLE_ALL, 0, Match::new());
        flow.cookie = cookie;
        FlowMod {
            command: FlowModCommand::Delete,
            cookie_mask: mask,
            ..FlowMod::add(flow)
        }
    }
}

/// Returns `f` as OVS stores it and reports it back in a flow-stats reply: the match normalized
/// ([`super::oxm::normalize_match`]) and the actions put in the form OVS re-encodes them
/// ([`super::actions::normalize_actions`]). Encoding a flow, installing it and decoding the
/// switch's flow-stats entry for it yields exactly `normalize_flow(f)`.
pub fn normalize_flow(f: &Flow) -> Flow {
    Flow {
        matches: super::oxm::normalize_match(&f.matches),
        actions: super::actions::normalize_actions(&f.actions),
        ..f.clone()
    }
}

/// One entry of a flow-stats reply: the flow, decoded, and its counters.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FlowStats {
    pub flow: Flow,
    pub packet_count: u64,
    pub byte_count: u64,
    /// How long the flow has been installed.
    pub duration: std::time::Duration,
    /// How long since the flow last matched a packet, when the switch says.
    pub idle_age: Option<std::time::Duration>,
    /// OFPFF_* flags the flow was added with.
    pub flags: u16,
    pub importance: u16,
}

/// Which flows a flow-stats or aggregate request selects (non-strict, like `dump-flows`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FlowFilter {
    /// A table id, or [`TABLE_ALL`].
    pub table: u8,
    pub cookie: u64,
    /// Bits of `cookie` that must match; 0 selects any cookie.
    pub cookie_mask: u64,
    /// Only flows that output to this port ([`port::ANY`]: any).
    pub out_port: u32,
    /// Only flows that output to this group ([`port::ANY`]: any).
    pub out_group: u32,
    /// Only flows whose match is at least as specific as this one.
    pub matches: Match,
}

impl Default for FlowFilter {
    fn default() -> Self {
        Self::all()
    }
}

impl FlowFilter {
    /// Every flow in every table.
    pub fn all() -> Self {
        FlowFilter {
            table: TABLE_ALL,
            cookie: 0,
            cookie_mask: 0,
            out_port: port::ANY,
            out_group: port::ANY,
            matches: Match::new(),
        }
    }
    /// Every flow of one table.
    pub fn table(table: u8) -> Self {
        FlowFilter { table, ..Self::all() }
    }
    /// Restricts to flows whose cookie equals `cookie` under `mask`.
    pub fn cookie(mut self, cookie: u64, mask: u64) -> Self {
        self.cookie = cookie;
        self.cookie_mask = mask;
        self
    }
    /// Restricts to flows whose match includes `m`.
    pub fn matching(mut self, m: Match) -> Self {
        self.matches = m;
        self
    }
}

/// An aggregate-stats reply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AggregateStats {
    pub packet_count: u64,
    pub byte_count: u64,
    pub flow_count: u32,
}

/// Convenience: an IPv4 /32 or prefix.
pub fn v4(addr: Ipv4Addr, prefix: u8) -> Option<Ipv4Net> {
    Ipv4Net::new(addr, prefix).ok()
}

/// Convenience: an IPv6 /128 or prefix.
pub fn v6(addr: Ipv6Addr, prefix: u8) -> Option<Ipv6Net> {
    Ipv6Net::new(addr, prefix).ok()
}
