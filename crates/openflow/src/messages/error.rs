//! OFPT_ERROR: the decoded error, its OpenFlow name (`OFPBAC_BAD_OUT_GROUP`) and the request
//! (or flow) it answers.

use crate::flow::Flow;
use crate::wire::{Header, NX_VENDOR_ID};

use super::{decode_message, Message};

/// An OFPT_ERROR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorMsg {
    pub err_type: u16,
    pub code: u16,
    /// Set for OFPET_EXPERIMENTER errors (e.g. Nicira extension errors).
    pub experimenter: Option<u32>,
    /// The start of the request that failed (OVS sends the whole request).
    pub data: Vec<u8>,
}

const ERROR_TYPES: &[(&str, &[&str])] = &[
    ("OFPHFC", &["INCOMPATIBLE", "EPERM"]),
    (
        "OFPBRC",
        &[
            "BAD_VERSION",
            "BAD_TYPE",
            "BAD_MULTIPART",
            "BAD_EXPERIMENTER",
            "BAD_EXP_TYPE",
            "EPERM",
            "BAD_LEN",
            "BUFFER_EMPTY",
            "BUFFER_UNKNOWN",
            "BAD_TABLE_ID",
            "IS_SLAVE",
            "BAD_PORT",
            "BAD_PACKET",
            "MULTIPART_BUFFER_OVERFLOW",
            "MULTIPART_REQUEST_TIMEOUT",
            "MULTIPART_REPLY_TIMEOUT",
        ],
    ),
    (
        "OFPBAC",
        &[
            "BAD_TYPE",
            "BAD_LEN",
            "BAD_EXPERIMENTER",
            "BAD_EXP_TYPE",
            "BAD_OUT_PORT",
            "BAD_ARGUMENT",
            "EPERM",
            "TOO_MANY",
            "BAD_QUEUE",
            "BAD_OUT_GROUP",
            "MATCH_INCONSISTENT",
            "UNSUPPORTED_ORDER",
            "BAD_TAG",
            "BAD_SET_TYPE",
            "BAD_SET_LEN",
            "BAD_SET_ARGUMENT",
            "BAD_SET_MASK",
            "BAD_METER",
        ],
    ),
    (
        "OFPBIC",
        &[
            "UNKNOWN_INST",
            "UNSUP_INST",
            "BAD_TABLE_ID",
            "UNSUP_METADATA",
            "UNSUP_METADATA_MASK",
            "BAD_EXPERIMENTER",
            "BAD_EXP_TYPE",
            "BAD_LEN",
            "EPERM",
            "DUP_INST",
        ],
    ),
    (
        "OFPBMC",
        &[
            "BAD_TYPE",
            "BAD_LEN",
            "BAD_TAG",
            "BAD_DL_ADDR_MASK",
            "BAD_NW_ADDR_MASK",
            "BAD_WILDCARDS",
            "BAD_FIELD",
            "BAD_VALUE",
            "BAD_MASK",
            "BAD_PREREQ",
            "DUP_FIELD",
            "EPERM",
        ],
    ),
    (
        "OFPFMFC",
        &[
            "UNKNOWN",
            "TABLE_FULL",
            "BAD_TABLE_ID",
            "OVERLAP",
            "EPERM",
            "BAD_TIMEOUT",
            "BAD_COMMAND",
            "BAD_FLAGS",
            "CANT_SYNC",
            "BAD_PRIORITY",
            "IS_SYNC",
        ],
    ),
    (
        "OFPGMFC",
        &[
            "GROUP_EXISTS",
            "INVALID_GROUP",
            "WEIGHT_UNSUPPORTED",
            "OUT_OF_GROUPS",
            "OUT_OF_BUCKETS",
            "CHAINING_UNSUPPORTED",
            "WATCH_UNSUPPORTED",
            "LOOP",
            "UNKNOWN_GROUP",
            "CHAINED_GROUP",
            "BAD_TYPE",
            "BAD_COMMAND",
            "BAD_BUCKET",
            "BAD_WATCH",
            "EPERM",
            "UNKNOWN_BUCKET",
            "BUCKET_EXISTS",
        ],
    ),
    (
        "OFPPMFC",
        &["BAD_PORT", "BAD_HW_ADDR", "BAD_CONFIG", "BAD_ADVERTISE", "EPERM"],
    ),
    ("OFPTMFC", &["BAD_TABLE", "BAD_CONFIG", "EPERM"]),
    ("OFPQOFC", &["BAD_PORT", "BAD_QUEUE", "EPERM"]),
    ("OFPSCFC", &["BAD_FLAGS", "BAD_LEN", "EPERM"]),
    (
        "OFPRRFC",
        &["STALE", "UNSUP", "BAD_ROLE", "ID_UNSUP", "ID_IN_USE"],
    ),
    (
        "OFPMMFC",
        &[
            "UNKNOWN",
            "METER_EXISTS",
            "INVALID_METER",
            "UNKNOWN_METER",
            "BAD_COMMAND",
            "BAD_FLAGS",
            "BAD_RATE",
            "BAD_BURST",
            "BAD_BAND",
            "BAD_BAND_VALUE",
            "OUT_OF_METERS",
            "OUT_OF_BANDS",
        ],
    ),
    (
        "OFPTFFC",
        &[
            "BAD_TABLE",
            "BAD_METADATA",
            "BAD_TYPE",
            "BAD_LEN",
            "BAD_ARGUMENT",
            "EPERM",
        ],
    ),
    (
        "OFPBPC",
        &[
            "BAD_TYPE",
            "BAD_LEN",
            "BAD_VALUE",
            "TOO_MANY",
            "DUP_TYPE",
            "BAD_EXPERIMENTER",
            "BAD_EXP_TYPE",
            "BAD_EXP_VALUE",
            "EPERM",
        ],
    ),
    ("OFPACFC", &["INVALID", "UNSUPPORTED", "EPERM"]),
    (
        "OFPMOFC",
        &[
            "UNKNOWN",
            "MONITOR_EXISTS",
            "INVALID_MONITOR",
            "UNKNOWN_MONITOR",
            "BAD_COMMAND",
            "BAD_FLAGS",
            "BAD_TABLE_ID",
            "BAD_OUT",
        ],
    ),
    (
        "OFPBFC",
        &[
            "UNKNOWN",
            "EPERM",
            "BAD_ID",
            "BUNDLE_EXIST",
            "BUNDLE_CLOSED",
            "OUT_OF_BUNDLES",
            "BAD_TYPE",
            "BAD_FLAGS",
            "MSG_BAD_LEN",
            "MSG_BAD_XID",
            "MSG_UNSUP",
            "MSG_CONFLICT",
            "MSG_TOO_MANY",
            "MSG_FAILED",
            "TIMEOUT",
            "BUNDLE_IN_PROGRESS",
            "SCHED_NOT_SUPPORTED",
            "SCHED_FUTURE",
            "SCHED_PAST",
        ],
    ),
];

impl ErrorMsg {
    /// The OpenFlow name of the error, e.g. `OFPBAC_BAD_OUT_GROUP`.
    pub fn name(&self) -> String {
        if let Some(exp) = self.experimenter {
            if exp == NX_VENDOR_ID {
                return format!("NX_ERROR_{}", self.code);
            }
            return format!("EXPERIMENTER_{exp:#x}_ERROR_{}", self.code);
        }
        match ERROR_TYPES.get(usize::from(self.err_type)) {
            Some((prefix, codes)) => match codes.get(usize::from(self.code)) {
                Some(c) => format!("{prefix}_{c}"),
                None => format!("{prefix}_CODE_{}", self.code),
            },
            None => format!("OFPET_{}_CODE_{}", self.err_type, self.code),
        }
    }

    /// "OFPBAC_BAD_OUT_GROUP (type 2, code 9)".
    pub fn describe(&self) -> String {
        match self.experimenter {
            Some(exp) => format!("{} (experimenter {exp:#x}, code {})", self.name(), self.code),
            None => format!("{} (type {}, code {})", self.name(), self.err_type, self.code),
        }
    }

    /// The header of the request the error answers, when the data holds one.
    pub fn failed_request(&self) -> Option<Header> {
        Header::parse(&self.data).ok()
    }

    /// The flow the error answers, when the failed request is a flow_mod (alone or inside a
    /// bundle_add) and OVS sent it back whole.
    pub fn failed_flow(&self) -> Option<Flow> {
        let h = Header::parse(&self.data).ok()?;
        let bytes = self.data.get(..usize::from(h.length))?;
        match decode_message(bytes).ok()?.1 {
            Message::FlowMod(fm) => Some(fm.flow),
            Message::BundleAdd { inner, .. } => match decode_message(&inner).ok()?.1 {
                Message::FlowMod(fm) => Some(fm.flow),
                _ => None,
            },
            _ => None,
        }
    }
}
