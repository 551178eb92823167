//! Byte-level building blocks of the OpenFlow codec: a bounds-checked reader, a writer with
//! length patching, the OpenFlow header, and the protocol constants shared by the other codec
//! files (`oxm.rs`, `actions.rs`, `messages.rs`).
//!
//! Every read is checked: decoding truncated or malformed input returns a [`CodecError`], it
//! never panics.

/// The OpenFlow version this codec speaks (OpenFlow 1.5).
pub const OFP_VERSION: u8 = 0x06;
/// Size of the common OpenFlow header.
pub const OFP_HEADER_LEN: usize = 8;
/// Nicira's experimenter (vendor) id, used by NXM fields, NXAST actions and NXT messages.
pub const NX_VENDOR_ID: u32 = 0x0000_2320;

/// OpenFlow 1.5 message types (OFPT_*).
pub mod msg_type {
    pub const HELLO: u8 = 0;
    pub const ERROR: u8 = 1;
    pub const ECHO_REQUEST: u8 = 2;
    pub const ECHO_REPLY: u8 = 3;
    pub const EXPERIMENTER: u8 = 4;
    pub const FEATURES_REQUEST: u8 = 5;
    pub const FEATURES_REPLY: u8 = 6;
    pub const GET_CONFIG_REQUEST: u8 = 7;
    pub const GET_CONFIG_REPLY: u8 = 8;
    pub const SET_CONFIG: u8 = 9;
    pub const PACKET_IN: u8 = 10;
    pub const FLOW_REMOVED: u8 = 11;
    pub const PORT_STATUS: u8 = 12;
    pub const PACKET_OUT: u8 = 13;
    pub const FLOW_MOD: u8 = 14;
    pub const GROUP_MOD: u8 = 15;
    pub const PORT_MOD: u8 = 16;
    pub const TABLE_MOD: u8 = 17;
    pub const MULTIPART_REQUEST: u8 = 18;
    pub const MULTIPART_REPLY: u8 = 19;
    pub const BARRIER_REQUEST: u8 = 20;
    pub const BARRIER_REPLY: u8 = 21;
    pub const ROLE_REQUEST: u8 = 24;
    pub const ROLE_REPLY: u8 = 25;
    pub const GET_ASYNC_REQUEST: u8 = 26;
    pub const GET_ASYNC_REPLY: u8 = 27;
    pub const SET_ASYNC: u8 = 28;
    pub const METER_MOD: u8 = 29;
    pub const ROLE_STATUS: u8 = 30;
    pub const TABLE_STATUS: u8 = 31;
    pub const REQUESTFORWARD: u8 = 32;
    pub const BUNDLE_CONTROL: u8 = 33;
    pub const BUNDLE_ADD_MESSAGE: u8 = 34;
    pub const CONTROLLER_STATUS: u8 = 35;

    /// The OFPT_* name of a message type, for logs and error texts.
    pub fn name(t: u8) -> &'static str {
        match t {
            HELLO => "HELLO",
            ERROR => "ERROR",
            ECHO_REQUEST => "ECHO_REQUEST",
            ECHO_REPLY => "ECHO_REPLY",
            EXPERIMENTER => "EXPERIMENTER",
            FEATURES_REQUEST => "FEATURES_REQUEST",
            FEATURES_REPLY => "FEATURES_REPLY",
            GET_CONFIG_REQUEST => "GET_CONFIG_REQUEST",
            GET_CONFIG_REPLY => "GET_CONFIG_REPLY",
            SET_CONFIG => "SET_CONFIG",
            PACKET_IN => "PACKET_IN",
            FLOW_REMOVED => "FLOW_REMOVED",
            PORT_STATUS => "PORT_STATUS",
            PACKET_OUT => "PACKET_OUT",
            FLOW_MOD => "FLOW_MOD",
            GROUP_MOD => "GROUP_MOD",
            PORT_MOD => "PORT_MOD",
            TABLE_MOD => "TABLE_MOD",
            MULTIPART_REQUEST => "MULTIPART_REQUEST",
            MULTIPART_REPLY => "MULTIPART_REPLY",
            BARRIER_REQUEST => "BARRIER_REQUEST",
            BARRIER_REPLY => "BARRIER_REPLY",
            ROLE_REQUEST => "ROLE_REQUEST",
            ROLE_REPLY => "ROLE_REPLY",
            GET_ASYNC_REQUEST => "GET_ASYNC_REQUEST",
            GET_ASYNC_REPLY => "GET_ASYNC_REPLY",
            SET_ASYNC => "SET_ASYNC",
            METER_MOD => "METER_MOD",
            ROLE_STATUS => "ROLE_STATUS",
            TABLE_STATUS => "TABLE_STATUS",
            REQUESTFORWARD => "REQUESTFORWARD",
            BUNDLE_CONTROL => "BUNDLE_CONTROL",
            BUNDLE_ADD_MESSAGE => "BUNDLE_ADD_MESSAGE",
            CONTROLLER_STATUS => "CONTROLLER_STATUS",
            _ => "UNKNOWN",
        }
    }
}

/// Why bytes could not be decoded (or a value could not be encoded).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    #[error("truncated {what}: need {need} bytes, have {have}")]
    Truncated {
        what: &'static str,
        need: usize,
        have: usize,
    },
    #[error("bad length {len} in {what}")]
    BadLength { what: &'static str, len: usize },
    #[error("unsupported {0}")]
    Unsupported(String),
    #[error("invalid {0}")]
    Invalid(String),
}

/// A bounds-checked big-endian reader over a byte slice.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    /// `what` names the structure being read, for error messages.
    pub fn new(buf: &'a [u8], what: &'static str) -> Self {
        Reader { buf, what }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The unread bytes (not consumed).
    pub fn rest(&self) -> &'a [u8] {
        self.buf
    }

    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        if n > self.buf.len() {
            return Err(CodecError::Truncated {
                what: self.what,
                need: n,
                have: self.buf.len(),
            });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    /// Splits off the next `n` bytes as a reader of their own, naming them `what`.
    pub fn sub(&mut self, n: usize, what: &'static str) -> Result<Reader<'a>, CodecError> {
        let b = self.bytes(n)?;
        Ok(Reader::new(b, what))
    }

    pub fn skip(&mut self, n: usize) -> Result<(), CodecError> {
        self.bytes(n).map(|_| ())
    }

    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], CodecError> {
        let b = self.bytes(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        Ok(out)
    }

    pub fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.array::<1>()?[0])
    }

    pub fn u16(&mut self) -> Result<u16, CodecError> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    pub fn u32(&mut self) -> Result<u32, CodecError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    pub fn u64(&mut self) -> Result<u64, CodecError> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    pub fn u128(&mut self) -> Result<u128, CodecError> {
        Ok(u128::from_be_bytes(self.array()?))
    }

    /// Peeks at a big-endian u32 `off` bytes ahead without consuming.
    pub fn peek_u32(&self, off: usize) -> Result<u32, CodecError> {
        match self.buf.get(off..off + 4) {
            Some(b) => Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]])),
            None => Err(CodecError::Truncated {
                what: self.what,
                need: off + 4,
                have: self.buf.len(),
            }),
        }
    }

    /// Peeks at a big-endian u16 `off` bytes ahead without consuming.
    pub fn peek_u16(&self, off: usize) -> Result<u16, CodecError> {
        match self.buf.get(off..off + 2) {
            Some(b) => Ok(u16::from_be_bytes([b[0], b[1]])),
            None => Err(CodecError::Truncated {
                what: self.what,
                need: off + 2,
                have: self.buf.len(),
            }),
        }
    }
}

/// A big-endian writer into a growable buffer.
#[derive(Debug, Default, Clone)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn new() -> Self {
        Writer { buf: Vec::new() }
    }

    pub fn with_capacity(n: usize) -> Self {
        Writer {
            buf: Vec::with_capacity(n),
        }
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }

    pub fn u16(&mut self, v: u16) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    pub fn u128(&mut self, v: u128) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    pub fn bytes(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }

    pub fn zeros(&mut self, n: usize) {
        self.buf.resize(self.buf.len() + n, 0);
    }

    /// Pads with zeros so that the bytes written since `start` are a multiple of 8.
    pub fn pad8_from(&mut self, start: usize) {
        let n = self.buf.len().saturating_sub(start);
        self.zeros(pad8(n) - n);
    }

    /// Overwrites the u16 length field at `at` with the number of bytes written since `start`.
    pub fn patch_len16(&mut self, at: usize, start: usize, what: &str) -> Result<(), CodecError> {
        let len = self.buf.len().saturating_sub(start);
        let v =
            u16::try_from(len).map_err(|_| CodecError::Invalid(format!("{what} too long ({len} bytes)")))?;
        if let Some(slot) = self.buf.get_mut(at..at + 2) {
            slot.copy_from_slice(&v.to_be_bytes());
        }
        Ok(())
    }

    pub fn into_vec(self) -> Vec<u8> {
        self.buf
    }
}

/// Rounds `n` up to a multiple of 8.
pub fn pad8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

/// The common OpenFlow header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub version: u8,
    pub msg_type: u8,
    pub length: u16,
    pub xid: u32,
}

impl Header {
    /// Parses the first 8 bytes; checks that `length` covers at least the header.
    pub fn parse(b: &[u8]) -> Result<Header, CodecError> {
        let mut r = Reader::new(b, "OpenFlow header");
        let h = Header {
            version: r.u8()?,
            msg_type: r.u8()?,
            length: r.u16()?,
            xid: r.u32()?,
        };
        if usize::from(h.length) < OFP_HEADER_LEN {
            return Err(CodecError::BadLength {
                what: "OpenFlow header",
                len: h.length.into(),
            });
        }
        Ok(h)
    }
}

/// Starts a message: writes a header with a placeholder length. Finish with [`end_msg`].
pub fn begin_msg(w: &mut Writer, msg_type: u8, xid: u32) -> usize {
    let start = w.len();
    w.u8(OFP_VERSION);
    w.u8(msg_type);
    w.u16(0);
    w.u32(xid);
    start
}

/// Patches the length of the message that [`begin_msg`] started at `start`.
pub fn end_msg(w: &mut Writer, start: usize) -> Result<(), CodecError> {
    w.patch_len16(start + 2, start, "OpenFlow message")
}

/// Formats bytes as OVS does for hex arguments (`01.02.ff`).
pub fn hex_dotted(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 3);
    for (i, byte) in b.iter().enumerate() {
        if i > 0 {
            s.push('.');
        }
        s.push_str(&format!("{byte:02x}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reader_reports_truncation() {
        let mut r = Reader::new(&[1, 2, 3], "test");
        assert_eq!(r.u16().ok(), Some(0x0102));
        assert!(matches!(
            r.u16(),
            Err(CodecError::Truncated { need: 2, have: 1, .. })
        ));
    }

    #[test]
    fn writer_patches_length() {
        let mut w = Writer::new();
        let s = begin_msg(&mut w, msg_type::ECHO_REQUEST, 7);
        w.bytes(&[9, 9]);
        end_msg(&mut w, s).unwrap();
        assert_eq!(w.buf, vec![6, 2, 0, 10, 0, 0, 0, 7, 9, 9]);
        assert_eq!(hex_dotted(&[1, 0xab]), "01.ab");
        assert_eq!(pad8(0), 0);
        assert_eq!(pad8(9), 16);
    }

    proptest! {
        #[test]
        fn header_parse_never_panics(b in proptest::collection::vec(any::<u8>(), 0..16)) {
            let _ = Header::parse(&b);
        }
    }
}
