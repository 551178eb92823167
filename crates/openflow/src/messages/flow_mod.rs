//! FLOW_MOD (encoder and decoder) and the bundle messages that carry flow_mods into one
//! atomic commit (OFPT_BUNDLE_CONTROL, OFPT_BUNDLE_ADD_MESSAGE).

use crate::actions::{decode_instructions, encode_instructions};
use crate::flow::{Flow, FlowMod, FlowModCommand, Match};
use crate::oxm::{decode_match, encode_match};
use crate::wire::{begin_msg, end_msg, msg_type, CodecError, Reader, Writer};

use super::NO_BUFFER;

fn command_code(c: FlowModCommand) -> u8 {
    match c {
        FlowModCommand::Add => 0,
        FlowModCommand::Modify => 1,
        FlowModCommand::ModifyStrict => 2,
        FlowModCommand::Delete => 3,
        FlowModCommand::DeleteStrict => 4,
    }
}

/// Appends a FLOW_MOD to `w`.
pub fn write_flow_mod(w: &mut Writer, xid: u32, fm: &FlowMod) -> Result<(), CodecError> {
    let f = &fm.flow;
    let s = begin_msg(w, msg_type::FLOW_MOD, xid);
    w.u64(f.cookie);
    w.u64(fm.cookie_mask);
    w.u8(f.table);
    w.u8(command_code(fm.command));
    w.u16(f.idle_timeout);
    w.u16(f.hard_timeout);
    w.u16(f.priority);
    w.u32(NO_BUFFER);
    w.u32(fm.out_port);
    w.u32(fm.out_group);
    w.u16(fm.flags);
    w.u16(0); // importance
    encode_match(&f.matches, w)?;
    encode_instructions(&f.actions, f.goto_table, w)?;
    end_msg(w, s)
}

pub fn flow_mod(xid: u32, fm: &FlowMod) -> Result<Vec<u8>, CodecError> {
    let mut w = Writer::with_capacity(128);
    write_flow_mod(&mut w, xid, fm)?;
    Ok(w.into_vec())
}

/// Appends an OFPT_BUNDLE_CONTROL to `w`.
pub fn write_bundle_control(w: &mut Writer, xid: u32, bundle_id: u32, ctrl: u16, flags: u16) {
    let s = begin_msg(w, msg_type::BUNDLE_CONTROL, xid);
    w.u32(bundle_id);
    w.u16(ctrl);
    w.u16(flags);
    // Cannot fail: 16 bytes.
    let _ = end_msg(w, s);
}

pub fn bundle_control(xid: u32, bundle_id: u32, ctrl: u16, flags: u16) -> Vec<u8> {
    let mut w = Writer::with_capacity(16);
    write_bundle_control(&mut w, xid, bundle_id, ctrl, flags);
    w.into_vec()
}

/// Appends an OFPT_BUNDLE_ADD_MESSAGE wrapping a flow_mod. The inner message carries the same
/// xid as the bundle_add (OVS rejects a mismatch with OFPBFC_MSG_BAD_XID).
pub fn write_bundle_add_flow_mod(
    w: &mut Writer,
    xid: u32,
    bundle_id: u32,
    flags: u16,
    fm: &FlowMod,
) -> Result<(), CodecError> {
    let s = begin_msg(w, msg_type::BUNDLE_ADD_MESSAGE, xid);
    w.u32(bundle_id);
    w.u16(0);
    w.u16(flags);
    write_flow_mod(w, xid, fm)?;
    end_msg(w, s)
}

pub(super) fn decode_flow_mod(r: &mut Reader<'_>) -> Result<FlowMod, CodecError> {
    let cookie = r.u64()?;
    let cookie_mask = r.u64()?;
    let table = r.u8()?;
    let command = match r.u8()? {
        0 => FlowModCommand::Add,
        1 => FlowModCommand::Modify,
        2 => FlowModCommand::ModifyStrict,
        3 => FlowModCommand::Delete,
        4 => FlowModCommand::DeleteStrict,
        c => return Err(CodecError::Invalid(format!("flow_mod command {c}"))),
    };
    let idle_timeout = r.u16()?;
    let hard_timeout = r.u16()?;
    let priority = r.u16()?;
    let _buffer_id = r.u32()?;
    let out_port = r.u32()?;
    let out_group = r.u32()?;
    let flags = r.u16()?;
    let _importance = r.u16()?;
    let matches: Match = decode_match(r)?;
    let (actions, goto_table) = decode_instructions(r)?;
    Ok(FlowMod {
        command,
        flow: Flow {
            table,
            priority,
            matches,
            cookie,
            idle_timeout,
            hard_timeout,
            actions,
            goto_table,
        },
        cookie_mask,
        out_port,
        out_group,
        flags,
    })
}
