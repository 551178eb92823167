//! OpenFlow 1.5 with the Open vSwitch (Nicira) extensions: a flow model, a wire codec and an
//! `ovs-ofctl dump-flows`-style renderer. Pure encode and decode, no I/O: the caller owns the
//! socket, the xids and the timing.
//!
//! | module | what it owns |
//! |---|---|
//! | [`flow`] | the flow model: [`Match`], [`Action`], [`Flow`], [`FlowMod`], stats types, normalization |
//! | [`wire`] | bounds-checked reader/writer, header, message type constants, [`wire::CodecError`] |
//! | [`oxm`] | match fields (OXM/NXM) and their normalization |
//! | [`actions`] | actions and instructions (standard and Nicira) |
//! | [`messages`] | every message: encoders, decoders, error names |
//! | [`events`] | packet-in, port status, port description, packet-out, async configuration (data) |
//! | [`monitor`] | flow monitoring (OFPMP_FLOW_MONITOR): the request and the updates |
//! | [`packed`] | flows packed small for holding many: an opaque identity key and a digest of the rest |
//! | [`render`] | `ovs-ofctl dump-flows` text |
//! | `golden` | reference flows and their text (tests; public with the `golden` feature) |
//! | `props` | property tests: encode → decode round trips, decoders never panic |
//!
//! Not modelled: `learn`, tunnels, MPLS, IP TOS/TTL/fragment matches, `ct_nw_*`/`ct_tp_*`
//! matches (kept as bytes in packet-in metadata), `move` between non-register fields, masked
//! `ct_zone` (OVS 3.1 refuses it), table features. A flow-stats entry using any of these
//! decodes to [`wire::CodecError::Unsupported`], never to a wrong flow.

pub mod actions;
pub mod events;
pub mod flow;
#[cfg(any(test, feature = "golden"))]
pub mod golden;
pub mod messages;
pub mod monitor;
pub mod oxm;
pub mod packed;
#[cfg(test)]
mod props;
pub mod render;
pub mod wire;

pub use flow::*;

/// An OpenFlow group (only what the pipeline needs: type ALL with resubmit/set_field buckets).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Group {
    pub group_id: u32,
    pub buckets: Vec<Vec<Action>>,
}

/// A packet-in rate-limiting meter: one drop band, `pktps|burst`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Meter {
    pub meter_id: u32,
    pub rate_pps: u32,
    pub burst: u32,
}
