//! memcached's binary protocol, server side: request framing and validation
//! in, response headers out (`/usr/include/memcached/protocol_binary.h`).
//!
//! ```text
//!  byte  0       1       2       3
//!     +-------+-------+-------+-------+
//!   0 | magic | opcode|  key length   |   magic 0x80 request, 0x81 response
//!     +-------+-------+-------+-------+
//!   4 | extlen| dtype | vbucket/status|
//!     +-------+-------+-------+-------+
//!   8 |       total body length       |   extras + key + value
//!     +-------------------------------+
//!  12 |            opaque             |   echoed back
//!     +-------------------------------+
//!  16 |              cas              |
//!  20 |                               |
//!     +-------------------------------+   then extras, key, value
//! ```
//!
//! Validation follows memcached 1.6's `dispatch_bin_command`: a request whose
//! extras/key lengths do not fit its opcode is a protocol error (`EINVAL`,
//! then the connection closes); an unknown opcode answers `UNKNOWN_COMMAND`
//! and its body is skipped.

/// Size of a request or response header.
pub const HEADER_LEN: usize = 24;
pub const REQUEST_MAGIC: u8 = 0x80;
pub const RESPONSE_MAGIC: u8 = 0x81;

/// Opcodes memcached serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Opcode {
    Get = 0x00,
    Set = 0x01,
    Add = 0x02,
    Replace = 0x03,
    Delete = 0x04,
    Increment = 0x05,
    Decrement = 0x06,
    Quit = 0x07,
    Flush = 0x08,
    GetQ = 0x09,
    Noop = 0x0a,
    Version = 0x0b,
    GetK = 0x0c,
    GetKQ = 0x0d,
    Append = 0x0e,
    Prepend = 0x0f,
    Stat = 0x10,
    SetQ = 0x11,
    AddQ = 0x12,
    ReplaceQ = 0x13,
    DeleteQ = 0x14,
    IncrementQ = 0x15,
    DecrementQ = 0x16,
    QuitQ = 0x17,
    FlushQ = 0x18,
    AppendQ = 0x19,
    PrependQ = 0x1a,
    Touch = 0x1c,
    Gat = 0x1d,
    GatQ = 0x1e,
    SaslListMechs = 0x20,
    SaslAuth = 0x21,
    SaslStep = 0x22,
    GatK = 0x23,
    GatKQ = 0x24,
}

impl Opcode {
    pub fn from_u8(byte: u8) -> Option<Opcode> {
        use Opcode::*;
        Some(match byte {
            0x00 => Get,
            0x01 => Set,
            0x02 => Add,
            0x03 => Replace,
            0x04 => Delete,
            0x05 => Increment,
            0x06 => Decrement,
            0x07 => Quit,
            0x08 => Flush,
            0x09 => GetQ,
            0x0a => Noop,
            0x0b => Version,
            0x0c => GetK,
            0x0d => GetKQ,
            0x0e => Append,
            0x0f => Prepend,
            0x10 => Stat,
            0x11 => SetQ,
            0x12 => AddQ,
            0x13 => ReplaceQ,
            0x14 => DeleteQ,
            0x15 => IncrementQ,
            0x16 => DecrementQ,
            0x17 => QuitQ,
            0x18 => FlushQ,
            0x19 => AppendQ,
            0x1a => PrependQ,
            0x1c => Touch,
            0x1d => Gat,
            0x1e => GatQ,
            0x20 => SaslListMechs,
            0x21 => SaslAuth,
            0x22 => SaslStep,
            0x23 => GatK,
            0x24 => GatKQ,
            _ => return None,
        })
    }

    /// The quiet form's loud twin and whether this was quiet: a quiet
    /// command answers only on error (and GETQ-style reads only on a hit).
    pub fn loud(self) -> (Opcode, bool) {
        use Opcode::*;
        match self {
            GetQ => (Get, true),
            GetKQ => (GetK, true),
            SetQ => (Set, true),
            AddQ => (Add, true),
            ReplaceQ => (Replace, true),
            DeleteQ => (Delete, true),
            IncrementQ => (Increment, true),
            DecrementQ => (Decrement, true),
            QuitQ => (Quit, true),
            FlushQ => (Flush, true),
            AppendQ => (Append, true),
            PrependQ => (Prepend, true),
            GatQ => (Gat, true),
            GatKQ => (GatK, true),
            other => (other, false),
        }
    }
}

/// Response status codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum Status {
    Success = 0x00,
    KeyNotFound = 0x01,
    KeyExists = 0x02,
    TooBig = 0x03,
    Invalid = 0x04,
    NotStored = 0x05,
    DeltaBadValue = 0x06,
    AuthError = 0x20,
    AuthContinue = 0x21,
    UnknownCommand = 0x81,
    OutOfMemory = 0x82,
}

impl Status {
    /// memcached's error text for the status (`write_bin_error`).
    pub fn message(self) -> &'static str {
        match self {
            Status::Success => "",
            Status::KeyNotFound => "Not found",
            Status::KeyExists => "Data exists for key.",
            Status::TooBig => "Too large.",
            Status::Invalid => "Invalid arguments",
            Status::NotStored => "Not stored.",
            Status::DeltaBadValue => "Non-numeric server-side value for incr or decr",
            Status::AuthError => "Auth failure.",
            Status::AuthContinue => "Auth continue",
            Status::UnknownCommand => "Unknown command",
            Status::OutOfMemory => "Out of memory",
        }
    }
}

/// A request header, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub magic: u8,
    pub opcode: u8,
    pub key_len: u16,
    pub extras_len: u8,
    pub data_type: u8,
    pub vbucket: u16,
    pub body_len: u32,
    pub opaque: u32,
    pub cas: u64,
}

impl Header {
    /// Decode the first 24 bytes of `buf`; None if fewer are there.
    pub fn parse(buf: &[u8]) -> Option<Header> {
        let h: &[u8; HEADER_LEN] = buf.get(..HEADER_LEN)?.try_into().ok()?;
        Some(Header {
            magic: h[0],
            opcode: h[1],
            key_len: u16::from_be_bytes([h[2], h[3]]),
            extras_len: h[4],
            data_type: h[5],
            vbucket: u16::from_be_bytes([h[6], h[7]]),
            body_len: u32::from_be_bytes([h[8], h[9], h[10], h[11]]),
            opaque: u32::from_be_bytes([h[12], h[13], h[14], h[15]]),
            cas: u64::from_be_bytes([h[16], h[17], h[18], h[19], h[20], h[21], h[22], h[23]]),
        })
    }

    /// Append this header's encoding (requests and responses share it;
    /// `vbucket` carries the status in a response).
    pub fn write(&self, out: &mut Vec<u8>) {
        out.push(self.magic);
        out.push(self.opcode);
        out.extend_from_slice(&self.key_len.to_be_bytes());
        out.push(self.extras_len);
        out.push(self.data_type);
        out.extend_from_slice(&self.vbucket.to_be_bytes());
        out.extend_from_slice(&self.body_len.to_be_bytes());
        out.extend_from_slice(&self.opaque.to_be_bytes());
        out.extend_from_slice(&self.cas.to_be_bytes());
    }
}

/// What the header says to do, before the body is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Read the whole body (`body_len` bytes) and execute.
    Execute(Opcode),
    /// Unknown opcode: answer UNKNOWN_COMMAND and skip the body.
    Unknown,
    /// Malformed for its opcode: answer EINVAL and close.
    ProtocolError,
    /// Key or extras longer than the body: UNKNOWN_COMMAND and close.
    Corrupt,
}

/// memcached's `dispatch_bin_command` checks.
pub fn validate(h: &Header, key_max: usize) -> Verdict {
    use Opcode::*;
    let (ext, key, body) = (u32::from(h.extras_len), u32::from(h.key_len), h.body_len);
    if key > body || key + ext > body {
        return Verdict::Corrupt;
    }
    if key as usize > key_max {
        return Verdict::ProtocolError;
    }
    let Some(opcode) = Opcode::from_u8(h.opcode) else { return Verdict::Unknown };
    let ok = match opcode.loud().0 {
        Version | Noop | Quit | SaslListMechs => ext == 0 && key == 0 && body == 0,
        Flush => key == 0 && body == ext && (ext == 0 || ext == 4),
        Set | Add | Replace => ext == 8 && key != 0 && body >= key + 8,
        Get | GetK => ext == 0 && body == key && key > 0,
        Delete => key > 0 && ext == 0 && body == key,
        Increment | Decrement => key > 0 && ext == 20 && body == key + ext,
        Append | Prepend => key > 0 && ext == 0,
        Stat => ext == 0,
        SaslAuth | SaslStep => ext == 0 && key != 0,
        Touch | Gat | GatK => ext == 4 && key != 0,
        _ => false,
    };
    if ok {
        Verdict::Execute(opcode)
    } else {
        Verdict::ProtocolError
    }
}

/// A complete request: the header and its body split into parts.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub header: Header,
    pub extras: &'a [u8],
    pub key: &'a [u8],
    pub value: &'a [u8],
}

impl<'a> Request<'a> {
    /// Split `body` (exactly `header.body_len` bytes) by the header's lengths.
    pub fn split(header: Header, body: &'a [u8]) -> Request<'a> {
        let ext = usize::from(header.extras_len).min(body.len());
        let key_end = (ext + usize::from(header.key_len)).min(body.len());
        Request { header, extras: &body[..ext], key: &body[ext..key_end], value: &body[key_end..] }
    }

    pub fn extra_u32(&self, at: usize) -> u32 {
        self.extras.get(at..at + 4).map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn extra_u64(&self, at: usize) -> u64 {
        self.extras.get(at..at + 8).map_or(0, |b| {
            u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
        })
    }
}

/// Append a response: header, extras, key, value.
pub fn write_response(
    out: &mut Vec<u8>,
    opcode: u8,
    status: Status,
    opaque: u32,
    cas: u64,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
) {
    let header = Header {
        magic: RESPONSE_MAGIC,
        opcode,
        key_len: key.len() as u16,
        extras_len: extras.len() as u8,
        data_type: 0,
        vbucket: status as u16,
        body_len: (extras.len() + key.len() + value.len()) as u32,
        opaque,
        cas,
    };
    header.write(out);
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// Append an error response with memcached's message as the body.
pub fn write_error(out: &mut Vec<u8>, opcode: u8, status: Status, opaque: u32) {
    write_response(out, opcode, status, opaque, 0, &[], &[], status.message().as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(opcode: u8, key_len: u16, extras_len: u8, body_len: u32) -> Header {
        Header { magic: REQUEST_MAGIC, opcode, key_len, extras_len, data_type: 0, vbucket: 0, body_len, opaque: 7, cas: 9 }
    }

    #[test]
    fn header_round_trip() {
        let h = header(0x01, 3, 8, 16);
        let mut out = Vec::new();
        h.write(&mut out);
        assert_eq!(out.len(), HEADER_LEN);
        assert_eq!(Header::parse(&out), Some(h));
        assert_eq!(Header::parse(&out[..23]), None);
    }

    #[test]
    fn validation_per_opcode() {
        assert_eq!(validate(&header(0x00, 3, 0, 3), 250), Verdict::Execute(Opcode::Get));
        assert_eq!(validate(&header(0x00, 0, 0, 0), 250), Verdict::ProtocolError);
        assert_eq!(validate(&header(0x01, 3, 8, 11), 250), Verdict::Execute(Opcode::Set));
        assert_eq!(validate(&header(0x01, 3, 4, 11), 250), Verdict::ProtocolError);
        assert_eq!(validate(&header(0x05, 1, 20, 21), 250), Verdict::Execute(Opcode::Increment));
        assert_eq!(validate(&header(0x08, 0, 4, 4), 250), Verdict::Execute(Opcode::Flush));
        assert_eq!(validate(&header(0x1b, 0, 4, 4), 250), Verdict::Unknown);
        assert_eq!(validate(&header(0x00, 5, 0, 3), 250), Verdict::Corrupt);
        assert_eq!(validate(&header(0x00, 251, 0, 251), 250), Verdict::ProtocolError);
        for op in 0..=0xffu8 {
            if let Some(code) = Opcode::from_u8(op) {
                assert_eq!(code as u8, op);
            }
        }
    }

    #[test]
    fn request_split_and_extras() {
        let body = [0, 0, 0, 5, 0, 0, 0, 10, b'k', b'e', b'y', b'v'];
        let r = Request::split(header(0x01, 3, 8, 12), &body);
        assert_eq!((r.extra_u32(0), r.extra_u32(4), r.key, r.value), (5, 10, &b"key"[..], &b"v"[..]));
    }
}
