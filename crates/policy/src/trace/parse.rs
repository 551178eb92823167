//! The text `ofproto/trace` answers (OVS 2.x-3.x), read as the tables the packet went through.
//!
//! Its shape: a `Flow:` line, then per bridge the flows that matched, one line each, indented by
//! the depth of resubmits and group buckets: `<table>. <match>, priority <p>[, cookie <c>]` (or
//! `<table>. No match.`), followed by the actions of that flow, one per line, and notes starting
//! with `->` (`-> output port is 20`). `Final flow:`, `Megaflow:` and `Datapath actions:` close a
//! pass. Every conntrack recirculation starts a new pass after a banner of `=` signs and a line
//! `recirc(0x..) - resume conntrack with ...`. Only the parts this agent reads are kept; lines
//! it does not know are attached to the step before them and otherwise ignored, so a newer OVS
//! that adds notes does not break the reading.

use serde::{Deserialize, Serialize};

/// Why a trace's text could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TraceParseError {
    #[error("ofproto/trace answered no table and no datapath actions: {first_line:?}")]
    NoSteps { first_line: String },
    #[error("ofproto/trace line {line}: table {table:?} is not a table number")]
    BadTable { line: usize, table: String },
    #[error("ofproto/trace line {line}: unreadable priority in {text:?}")]
    BadPriority { line: usize, text: String },
}

/// The flow that matched in one table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MatchedFlow {
    /// The match as OVS prints it (`conj_id=2,ip`, empty for a table's miss flow).
    pub matches: String,
    pub priority: u16,
    pub cookie: u64,
}

/// One table the packet went through.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceStep {
    /// 0 before the first conntrack recirculation, then one more per recirculation.
    pub pass: usize,
    /// Nesting level, 0 at the top (resubmits and group buckets nest).
    pub depth: usize,
    pub table: u8,
    /// `None`: no flow matched (`No match.`).
    pub flow: Option<MatchedFlow>,
    /// The flow's actions and OVS's notes about them, one per line, trimmed.
    pub actions: Vec<String>,
}

impl TraceStep {
    /// The conjunction id of a rule's action flow (`conj_id=N` in the match).
    pub fn conj_id(&self) -> Option<u32> {
        self.flow.as_ref().and_then(|f| {
            f.matches
                .split(',')
                .find_map(|m| m.strip_prefix("conj_id="))
                .and_then(|v| v.parse().ok())
        })
    }

    /// The userdata bytes of each `controller(...)` action of this step.
    pub fn controller_userdata(&self) -> Vec<Vec<u8>> {
        self.actions
            .iter()
            .filter(|a| a.starts_with("controller(") || a.starts_with("CONTROLLER"))
            .filter_map(|a| {
                let start = a.find("userdata=")? + "userdata=".len();
                let hex: String = a[start..]
                    .chars()
                    .take_while(|c| c.is_ascii_hexdigit() || *c == '.')
                    .collect();
                hex.split('.')
                    .map(|b| u8::from_str_radix(b, 16).ok())
                    .collect::<Option<Vec<u8>>>()
            })
            .collect()
    }
}

/// A trace, read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParsedTrace {
    pub steps: Vec<TraceStep>,
    /// The `Datapath actions:` of each pass, in order.
    pub datapath_actions: Vec<String>,
    /// The OpenFlow ports the flows output the packet to (`output:N`, or `-> output port is N`
    /// after an output to a register). The datapath may still skip one (the input port): the
    /// verdict reads [`ParsedTrace::datapath_outputs`].
    pub output_ports: Vec<u32>,
    /// How many passes (1 + conntrack recirculations).
    pub passes: usize,
}

impl ParsedTrace {
    /// Whether the datapath was told to send the packet out of a port, in any pass. An output
    /// is a bare datapath port number: `ofproto/trace` prints its datapath actions without port
    /// names, so every other word (`drop`, `ct_clear`, `pop_vlan`, `pop_eth`, `set(...)`,
    /// `ct(...)`, `recirc(...)`, a packet-in's `userspace(...)`, a meter) is not an output. A
    /// `clone(...)` outputs what its inner actions output.
    pub fn datapath_outputs(&self) -> bool {
        self.datapath_actions.iter().any(|a| outputs(a))
    }
}

/// Whether the datapath actions `text` include an output to a port.
fn outputs(text: &str) -> bool {
    top_level(text).into_iter().any(|action| {
        let action = action.trim();
        if let Some(inner) = action
            .strip_prefix("clone(")
            .and_then(|rest| rest.strip_suffix(')'))
        {
            return outputs(inner);
        }
        !action.is_empty() && action.chars().all(|c| c.is_ascii_digit())
    })
}

/// The comma-separated actions of `text`, commas inside parentheses kept.
fn top_level(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out
}

/// `<table>. <rest>`: the table number and the rest, for a step line.
fn step_head(trimmed: &str) -> Option<(&str, &str)> {
    let dot = trimmed.find(". ")?;
    let (num, rest) = (&trimmed[..dot], &trimmed[dot + 2..]);
    (!num.is_empty() && num.chars().all(|c| c.is_ascii_digit())).then_some((num, rest))
}

/// `<match>, priority <p>[, cookie <c>]` or `priority <p>...` or `No match...`.
fn matched_flow(rest: &str, line: usize) -> Result<Option<MatchedFlow>, TraceParseError> {
    if rest.starts_with("No match") {
        return Ok(None);
    }
    let bad = || TraceParseError::BadPriority {
        line,
        text: rest.to_string(),
    };
    let (matches, tail) = if let Some(tail) = rest.strip_prefix("priority ") {
        ("", tail)
    } else {
        let at = rest.rfind(", priority ").ok_or_else(bad)?;
        (&rest[..at], &rest[at + ", priority ".len()..])
    };
    let (prio, cookie) = match tail.split_once(", cookie ") {
        Some((p, c)) => (p, Some(c)),
        None => (tail, None),
    };
    let priority = prio.trim().parse::<u16>().map_err(|_| bad())?;
    let cookie = match cookie {
        Some(c) => {
            let c = c.trim();
            u64::from_str_radix(c.trim_start_matches("0x"), 16).map_err(|_| bad())?
        }
        None => 0,
    };
    Ok(Some(MatchedFlow {
        matches: matches.to_string(),
        priority,
        cookie,
    }))
}

/// Reads the text of `ofproto/trace`.
pub fn parse_trace(text: &str) -> Result<ParsedTrace, TraceParseError> {
    let mut t = ParsedTrace {
        passes: 1,
        ..ParsedTrace::default()
    };
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty()
            || trimmed.starts_with("===")
            || trimmed.starts_with("---")
            || trimmed.starts_with("Flow:")
            || trimmed.starts_with("Final flow:")
            || trimmed.starts_with("Megaflow:")
            || trimmed.starts_with("bridge(\"")
        {
            continue;
        }
        if trimmed.starts_with("recirc(") && trimmed.contains(" - resume conntrack") {
            t.passes += 1;
            continue;
        }
        if let Some(actions) = trimmed.strip_prefix("Datapath actions:") {
            t.datapath_actions.push(actions.trim().to_string());
            continue;
        }
        if let Some((num, rest)) = step_head(trimmed) {
            let table = num.parse::<u8>().map_err(|_| TraceParseError::BadTable {
                line: n + 1,
                table: num.to_string(),
            })?;
            // OVS right-aligns the table number in two columns and indents each level of
            // nesting by four: the column of the dot gives the level.
            let dot = line.len() - line.trim_start().len() + num.len();
            t.steps.push(TraceStep {
                pass: t.passes - 1,
                depth: dot.saturating_sub(2) / 4,
                table,
                flow: matched_flow(rest, n + 1)?,
                actions: Vec::new(),
            });
            continue;
        }
        if let Some(port) = trimmed
            .strip_prefix("-> output port is ")
            .or_else(|| trimmed.strip_prefix("output:"))
            .and_then(|p| p.trim().parse::<u32>().ok())
        {
            t.output_ports.push(port);
        }
        if let Some(step) = t.steps.last_mut() {
            step.actions.push(trimmed.to_string());
        }
    }
    if t.steps.is_empty() && t.datapath_actions.is_empty() {
        return Err(TraceParseError::NoSteps {
            first_line: text.lines().next().unwrap_or_default().to_string(),
        });
    }
    Ok(t)
}

/// Real answers of ovs-vswitchd 3.1 on the lab's pipeline, shared with the attribution's tests.
#[cfg(test)]
pub(crate) mod samples {
    /// A TCP SYN rejected by an ingress rule (conjunction 2): the group's two buckets.
    pub const REJECTED: &str = r#"Flow: tcp,in_port=21,vlan_tci=0x0000,dl_src=00:00:00:00:00:00,dl_dst=00:00:00:00:00:00,nw_src=10.0.0.8,nw_dst=10.0.0.1,nw_tos=0,nw_ecn=0,nw_ttl=64,nw_frag=no,tp_src=40000,tp_dst=22,tcp_flags=0

bridge("br-int")
----------------
 0. ip, priority 200
    goto_table:1
 1. ip, priority 200
    ct(table=2,zone=65520)
    drop
     -> A clone of the packet is forked to recirculate. The forked pipeline will be resumed at table 2.
     -> Sets the packet to an untracked state, and clears all the conntrack fields.

Final flow: unchanged
Megaflow: recirc_id=0,eth,ip,in_port=21,nw_frag=no
Datapath actions: ct(zone=65520),recirc(0x1)

===============================================================================
recirc(0x1) - resume conntrack with ct_state=new|trk
===============================================================================

Flow: recirc_id=0x1,ct_state=new|trk,ct_zone=65520,eth,tcp,in_port=21,vlan_tci=0x0000,dl_src=00:00:00:00:00:00,dl_dst=00:00:00:00:00:00,nw_src=10.0.0.8,nw_dst=10.0.0.1,nw_tos=0,nw_ecn=0,nw_ttl=64,nw_frag=no,tp_src=40000,tp_dst=22,tcp_flags=0

bridge("br-int")
----------------
    thaw
        Resuming from table 2
 2. priority 0
    goto_table:3
 3. priority 0
    goto_table:4
 4. priority 0
    goto_table:5
 5. priority 0
    goto_table:6
 6. priority 0
    goto_table:7
 7. priority 0
    goto_table:8
 8. ip,in_port=21, priority 200
    set_field:0x200000/0x600000->reg0
    set_field:0x14->reg1
    goto_table:9
 9. priority 0
    goto_table:10
10. conj_id=2, priority 106, cookie 0x1020000000000
    set_field:0x2->reg3
    set_field:0x400/0x400->reg0
    set_field:0x4000000/0xfe000000->reg0
    set_field:0xa/0xff->reg2
    group:4
    bucket 0
            resubmit(,13)
        13. reg0=0x400/0x400,reg3=0x2, priority 200, cookie 0x1020000000000
            drop
    bucket 1
            set_field:0x400000/0x600000->reg0
            resubmit(,15)
        15. reg0=0x4400000/0xfe600000, priority 200
            controller(id=32776,userdata=01.02)

Final flow: recirc_id=0x1,ct_state=new|trk,ct_zone=65520,eth,tcp,reg0=0x4200400,reg1=0x14,reg2=0xa,reg3=0x2,in_port=21,vlan_tci=0x0000,dl_src=00:00:00:00:00:00,dl_dst=00:00:00:00:00:00,nw_src=10.0.0.8,nw_dst=10.0.0.1,nw_tos=0,nw_ecn=0,nw_ttl=64,nw_frag=no,tp_src=40000,tp_dst=22,tcp_flags=0
Megaflow: recirc_id=0x1,ct_state=-inv+trk,eth,tcp,in_port=21,nw_src=10.0.0.8,nw_frag=no,tp_dst=22
Datapath actions: userspace(pid=0,controller(reason=1,dont_send=1,continuation=0,recirc_id=2,rule_cookie=0,controller_id=32776,max_len=65535))
"#;

    /// An ICMPv6 echo request passed by conjunction 5 to the next tier and allowed (no rule).
    pub const PASSED_AND_FORWARDED: &str = r#"Flow: icmp6,in_port=21,vlan_tci=0x0000,dl_src=00:00:00:00:00:00,dl_dst=00:00:00:00:00:00,ipv6_src=fd00::1,ipv6_dst=fd00::2,ipv6_label=0x00000,nw_tos=0,nw_ecn=0,nw_ttl=64,nw_frag=no,icmp_type=128,icmp_code=0

bridge("br-int")
----------------
 0. ipv6, priority 200
    goto_table:1
 1. ipv6, priority 200
    ct(table=2,zone=65510)
    drop
     -> A clone of the packet is forked to recirculate. The forked pipeline will be resumed at table 2.
     -> Sets the packet to an untracked state, and clears all the conntrack fields.

Final flow: unchanged
Megaflow: recirc_id=0,eth,ipv6,in_port=21,nw_frag=no
Datapath actions: ct(zone=65510),recirc(0xc)

===============================================================================
recirc(0xc) - resume conntrack with ct_state=new|trk
===============================================================================

Flow: recirc_id=0xc,ct_state=new|trk,ct_zone=65510,eth,icmp6,in_port=21,vlan_tci=0x0000,dl_src=00:00:00:00:00:00,dl_dst=00:00:00:00:00:00,ipv6_src=fd00::1,ipv6_dst=fd00::2,ipv6_label=0x00000,nw_tos=0,nw_ecn=0,nw_ttl=64,nw_frag=no,icmp_type=128,icmp_code=0

bridge("br-int")
----------------
    thaw
        Resuming from table 2
 2. priority 0
    goto_table:3
 3. priority 0
    goto_table:4
 4. priority 0
    goto_table:5
 5. priority 0
    goto_table:6
 6. priority 0
    goto_table:7
 7. priority 0
    goto_table:8
 8. ipv6,in_port=21, priority 200
    set_field:0x200000/0x600000->reg0
    set_field:0x14->reg1
    goto_table:9
 9. priority 0
    goto_table:10
10. conj_id=5, priority 14300, cookie 0x1020000000000
    set_field:0x5->reg6
    goto_table:11
11. priority 0
    goto_table:12
12. priority 0
    goto_table:13
13. priority 0
    goto_table:14
14. ct_state=+new+trk,ipv6, priority 200
    ct(commit,table=15,zone=65510)
    drop
     -> A clone of the packet is forked to recirculate. The forked pipeline will be resumed at table 15.
     -> Sets the packet to an untracked state, and clears all the conntrack fields.

Final flow: recirc_id=0xc,eth,icmp6,reg0=0x200000,reg1=0x14,reg6=0x5,in_port=21,vlan_tci=0x0000,dl_src=00:00:00:00:00:00,dl_dst=00:00:00:00:00:00,ipv6_src=fd00::1,ipv6_dst=fd00::2,ipv6_label=0x00000,nw_tos=0,nw_ecn=0,nw_ttl=64,nw_frag=no,icmp_type=128,icmp_code=0
Megaflow: recirc_id=0xc,ct_state=+new-inv+trk,eth,icmp6,in_port=21,ipv6_src=fd00::1,nw_frag=no,icmp_type=0x80/0xff
Datapath actions: ct(commit,zone=65510),recirc(0xd)

===============================================================================
recirc(0xd) - resume conntrack with ct_state=new|trk
===============================================================================

Flow: recirc_id=0xd,ct_state=new|trk,ct_zone=65510,eth,icmp6,reg0=0x200000,reg1=0x14,reg6=0x5,in_port=21,vlan_tci=0x0000,dl_src=00:00:00:00:00:00,dl_dst=00:00:00:00:00:00,ipv6_src=fd00::1,ipv6_dst=fd00::2,ipv6_label=0x00000,nw_tos=0,nw_ecn=0,nw_ttl=64,nw_frag=no,icmp_type=128,icmp_code=0

bridge("br-int")
----------------
    thaw
        Resuming from table 15
15. reg0=0x200000/0x600000, priority 200
    output:NXM_NX_REG1[]
     -> output port is 20

Final flow: unchanged
Megaflow: recirc_id=0xd,eth,ipv6,in_port=21,nw_frag=no
Datapath actions: 2
"#;
}

#[cfg(test)]
mod tests {
    use super::samples::*;
    use super::*;

    #[test]
    fn a_rejected_packet_reads_as_its_tables_and_buckets() {
        let t = parse_trace(REJECTED).unwrap();
        assert_eq!(t.passes, 2);
        let tables: Vec<u8> = t.steps.iter().map(|s| s.table).collect();
        assert_eq!(tables, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 13, 15]);
        let rule = &t.steps[10];
        assert_eq!(rule.pass, 1);
        assert_eq!(rule.conj_id(), Some(2));
        assert_eq!(
            rule.flow,
            Some(MatchedFlow {
                matches: "conj_id=2".into(),
                priority: 106,
                cookie: 0x1020000000000
            })
        );
        assert!(rule.actions.contains(&"group:4".to_string()));
        // The bucket's flows are nested deeper than the rule's.
        assert_eq!((t.steps[9].depth, rule.depth, t.steps[11].depth), (0, 0, 2));
        assert_eq!(t.steps[12].controller_userdata(), vec![vec![1, 2]]);
        assert_eq!(t.steps[2].flow.as_ref().map(|f| f.matches.as_str()), Some(""));
        assert!(t.output_ports.is_empty());
        assert!(!t.datapath_outputs());
        assert_eq!(t.datapath_actions.len(), 2);
    }

    #[test]
    fn a_forwarded_packet_names_its_output_port() {
        let t = parse_trace(PASSED_AND_FORWARDED).unwrap();
        assert_eq!(t.passes, 3);
        assert_eq!(t.output_ports, [20]);
        assert!(t.datapath_outputs());
        assert_eq!(t.steps.iter().find_map(TraceStep::conj_id), Some(5));
    }

    #[test]
    fn misses_errors_and_odd_lines() {
        let t = parse_trace(
            "Flow: ip\n\nbridge(\"br-int\")\n----------------\n 0. No match.\n    drop\n\nDatapath actions: drop\n",
        )
        .unwrap();
        assert_eq!(t.steps[0].flow, None);
        assert!(!t.datapath_outputs());
        assert!(matches!(
            parse_trace("Bad openflow flow syntax: x"),
            Err(TraceParseError::NoSteps { .. })
        ));
        assert!(matches!(
            parse_trace(" 300. ip, priority 1\n"),
            Err(TraceParseError::BadTable { .. })
        ));
        assert!(matches!(
            parse_trace(" 3. ip, priority high\n"),
            Err(TraceParseError::BadPriority { .. })
        ));
        assert_eq!(
            top_level("ct(commit,zone=1),recirc(0x2),3"),
            ["ct(commit,zone=1)", "recirc(0x2)", "3"]
        );
    }
    #[test]
    fn only_a_port_number_is_an_output() {
        let with = |actions: &str| ParsedTrace {
            datapath_actions: vec![actions.to_string()],
            ..ParsedTrace::default()
        };
        // Datapath actions that change or hand on the packet but send it nowhere: Dropped.
        for actions in [
            "drop",
            "ct_clear",
            "pop_vlan",
            "pop_eth",
            "pop_mpls(eth_type=0x800)",
            "set(ipv4(src=10.0.0.1))",
            "ct(zone=65520),recirc(0x1)",
            "ct_clear,pop_vlan,recirc(0x3)",
            "userspace(pid=0,controller(reason=1))",
            "meter(0)",
            "push_vlan(vid=5,pcp=0)",
            "clone(ct_clear,pop_eth)",
            "trunc(100)",
            "",
        ] {
            assert!(!with(actions).datapath_outputs(), "{actions:?} read as an output");
        }
        // A port number, alone or after other actions, or inside a clone: Allowed.
        for actions in [
            "2",
            "ct_clear,3",
            "set(eth(dst=aa:bb:cc:dd:ee:ff)),pop_vlan,12",
            "clone(4),drop",
        ] {
            assert!(with(actions).datapath_outputs(), "{actions:?} read as no output");
        }
        // Any pass that outputs is enough.
        let t = ParsedTrace {
            datapath_actions: vec!["ct(zone=65520),recirc(0x1)".into(), "ct_clear,2".into()],
            ..ParsedTrace::default()
        };
        assert!(t.datapath_outputs());
    }
}
