//! GROUP_MOD and METER_MOD: the commands, the encoders (groups of type ALL with OpenFlow 1.5
//! buckets, meters with one drop band) and their decoders.

use crate::actions::{decode_actions, encode_actions};
use crate::wire::{begin_msg, msg_type, CodecError, Reader, Writer};
use crate::{Group, Meter};

use super::{finish, OFPG_ALL, OFPM_ALL};

/// OFPG15_BUCKET_ALL, the command_bucket_id of add/modify/delete.
const BUCKET_ALL: u32 = 0xffff_ffff;

/// Group mod commands (OFPGC_*).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupCommand {
    Add,
    Modify,
    Delete,
    /// Open vSwitch extension (OFPGC_ADD_OR_MOD = 0x8000): add, or replace if it exists,
    /// without touching the flows that use the group.
    AddOrModify,
}

/// Meter mod commands (OFPMC_*).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MeterCommand {
    Add,
    Modify,
    Delete,
}

/// Meter flags (OFPMF_*).
pub mod meter_flags {
    pub const KBPS: u16 = 1;
    pub const PKTPS: u16 = 2;
    pub const BURST: u16 = 4;
    pub const STATS: u16 = 8;
}

fn group_command_code(c: GroupCommand) -> u16 {
    match c {
        GroupCommand::Add => 0,
        GroupCommand::Modify => 1,
        GroupCommand::Delete => 2,
        GroupCommand::AddOrModify => 0x8000,
    }
}

/// GROUP_MOD of type ALL with OpenFlow 1.5 buckets (bucket ids 0, 1, ...).
pub fn group_mod(xid: u32, command: GroupCommand, g: &Group) -> Result<Vec<u8>, CodecError> {
    let mut w = Writer::with_capacity(128);
    let s = begin_msg(&mut w, msg_type::GROUP_MOD, xid);
    w.u16(group_command_code(command));
    w.u8(0); // OFPGT_ALL
    w.u8(0);
    w.u32(g.group_id);
    let len_at = w.len();
    w.u16(0); // bucket_array_len
    w.u16(0);
    w.u32(BUCKET_ALL);
    let buckets_start = w.len();
    for (i, actions) in g.buckets.iter().enumerate() {
        let b = w.len();
        w.u16(0);
        w.u16(0);
        w.u32(u32::try_from(i).map_err(|_| CodecError::Invalid("too many buckets".into()))?);
        let a = w.len();
        encode_actions(actions, &mut w)?;
        w.patch_len16(b + 2, a, "bucket actions")?;
        w.patch_len16(b, b, "bucket")?;
    }
    w.patch_len16(len_at, buckets_start, "bucket array")?;
    finish(w, s)
}

/// GROUP_MOD deleting every group.
pub fn group_delete_all(xid: u32) -> Vec<u8> {
    group_mod(
        xid,
        GroupCommand::Delete,
        &Group {
            group_id: OFPG_ALL,
            buckets: vec![],
        },
    )
    .unwrap_or_default()
}

fn meter_command_code(c: MeterCommand) -> u16 {
    match c {
        MeterCommand::Add => 0,
        MeterCommand::Modify => 1,
        MeterCommand::Delete => 2,
    }
}

/// METER_MOD with one drop band and flags `pktps|burst`.
pub fn meter_mod(xid: u32, command: MeterCommand, m: &Meter) -> Result<Vec<u8>, CodecError> {
    let mut w = Writer::with_capacity(32);
    let s = begin_msg(&mut w, msg_type::METER_MOD, xid);
    w.u16(meter_command_code(command));
    w.u16(meter_flags::PKTPS | meter_flags::BURST);
    w.u32(m.meter_id);
    if command != MeterCommand::Delete {
        w.u16(1); // OFPMBT_DROP
        w.u16(16);
        w.u32(m.rate_pps);
        w.u32(m.burst);
        w.zeros(4);
    }
    finish(w, s)
}

/// METER_MOD deleting every meter.
pub fn meter_delete_all(xid: u32) -> Vec<u8> {
    let mut w = Writer::with_capacity(16);
    let s = begin_msg(&mut w, msg_type::METER_MOD, xid);
    w.u16(meter_command_code(MeterCommand::Delete));
    w.u16(0);
    w.u32(OFPM_ALL);
    finish(w, s).unwrap_or_default()
}

/// A decoded group mod (only type ALL buckets are modelled).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupModMsg {
    pub command: u16,
    pub group_type: u8,
    pub group: Group,
}

/// A decoded meter mod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeterModMsg {
    pub command: u16,
    pub flags: u16,
    pub meter_id: u32,
    /// (band type, rate, burst).
    pub bands: Vec<(u16, u32, u32)>,
}

pub(super) fn decode_group_mod(r: &mut Reader<'_>) -> Result<GroupModMsg, CodecError> {
    let command = r.u16()?;
    let group_type = r.u8()?;
    r.skip(1)?;
    let group_id = r.u32()?;
    let blen = usize::from(r.u16()?);
    r.skip(2)?;
    let _command_bucket_id = r.u32()?;
    let mut br = r.sub(blen, "bucket array")?;
    let mut buckets = Vec::new();
    while !br.is_empty() {
        let len = usize::from(br.u16()?);
        let alen = usize::from(br.u16()?);
        if len < 8 || alen > len - 8 {
            return Err(CodecError::BadLength { what: "bucket", len });
        }
        let _bucket_id = br.u32()?;
        let mut ar = br.sub(alen, "bucket actions")?;
        buckets.push(decode_actions(&mut ar)?);
        br.skip(len - 8 - alen)?; // bucket properties
    }
    Ok(GroupModMsg {
        command,
        group_type,
        group: Group { group_id, buckets },
    })
}

pub(super) fn decode_meter_mod(r: &mut Reader<'_>) -> Result<MeterModMsg, CodecError> {
    let command = r.u16()?;
    let flags = r.u16()?;
    let meter_id = r.u32()?;
    let mut bands = Vec::new();
    while !r.is_empty() {
        let ty = r.u16()?;
        let len = usize::from(r.u16()?);
        if len < 16 {
            return Err(CodecError::BadLength {
                what: "meter band",
                len,
            });
        }
        let mut b = r.sub(len - 4, "meter band")?;
        bands.push((ty, b.u32()?, b.u32()?));
    }
    Ok(MeterModMsg {
        command,
        flags,
        meter_id,
        bands,
    })
}
