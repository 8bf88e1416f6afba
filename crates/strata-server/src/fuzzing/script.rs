//! The `conn` fuzz target's input: a script of steps over a few client
//! connections, decoded from libFuzzer's bytes with `arbitrary`'s
//! `Unstructured`, one byte a field, so a script can also be written
//! back ([`Script::encode`]) to make seed files from real traffic.
//!
//! ```text
//!  input = options | step | step | ...           (decoded until the bytes run out)
//!  options: bit 0 flash store, bit 1 -I 1k, bits 2-3 -B (auto, auto, ascii, binary)
//!  step:
//!    0 Raw      conn | len | len bytes           queue raw bytes
//!    1 Request  conn | kind | key | arg | vlen | value bytes   queue a well-formed request
//!    2 Deliver  conn | n                         move n queued bytes (0: all) to the input
//!    3 Process  conn | budget                    Conn::process (budget 0 means 1)
//!    4 Complete conn | pick | ok                 finish one of its flash reads in flight
//!  conn = byte % CONNS; a tag is byte % 5
//! ```
//!
//! Split points come from `Deliver`: a request can reach the connection a
//! byte at a time, and the connections' steps interleave in any order.
//! A `Request`'s bytes become wire bytes in [`Request::wire`]: text, meta
//! or binary, over a keyspace of 8 RAM keys (`k0`..) and 16 keys the flash
//! store keeps on flash (`f0`..).

use arbitrary::{Arbitrary, Unstructured};

/// Connections a script drives.
pub const CONNS: usize = 4;

/// RAM keys `k0..k7`, then flash keys `f0..f15`.
pub const RAM_KEYS: u8 = 8;
pub const FLASH_KEYS: u8 = 16;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Run over the process-wide store with a flash tier (`flash_store.rs`).
    pub flash: bool,
    /// `-I 1k`: larger values are refused and their blocks swallowed.
    pub small_items: bool,
    /// `-B`: 0 or 1 auto, 2 ascii, 3 binary.
    pub protocol: u8,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    Raw { conn: u8, bytes: Vec<u8> },
    Request { conn: u8, req: Request },
    Deliver { conn: u8, n: u8 },
    Process { conn: u8, budget: u8 },
    Complete { conn: u8, pick: u8, ok: bool },
}

/// A generated request: `kind` picks the command (`KINDS`), `key` the
/// key(s), `arg` its options (noreply/quiet, TTL, flags, meta flags, CAS,
/// delta), `value` its data (`vlen` over 127: the number `vlen - 128` in
/// decimal, for incr and decr).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub kind: u8,
    pub key: u8,
    pub arg: u8,
    pub vlen: u8,
    pub value: Vec<u8>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Script {
    pub options: Options,
    pub steps: Vec<Step>,
}

/// Longest raw chunk or value one step carries.
const MAX_CHUNK: usize = 255;
const MAX_VALUE: u8 = 40;

fn byte(u: &mut Unstructured<'_>) -> u8 {
    u8::arbitrary(u).unwrap_or(0)
}

fn bytes(u: &mut Unstructured<'_>, n: usize) -> Vec<u8> {
    let n = n.min(u.len());
    u.bytes(n).map(<[u8]>::to_vec).unwrap_or_default()
}

impl Script {
    pub fn decode(data: &[u8]) -> Script {
        let mut u = Unstructured::new(data);
        let o = byte(&mut u);
        let options = Options { flash: o & 1 != 0, small_items: o & 2 != 0, protocol: (o >> 2) & 3 };
        let mut steps = Vec::new();
        while !u.is_empty() {
            let tag = byte(&mut u) % 5;
            let conn = byte(&mut u) % CONNS as u8;
            steps.push(match tag {
                0 => {
                    let len = byte(&mut u) as usize;
                    Step::Raw { conn, bytes: bytes(&mut u, len) }
                }
                1 => {
                    let (kind, key, arg, vlen) = (byte(&mut u), byte(&mut u), byte(&mut u), byte(&mut u));
                    let value = if vlen < 128 { bytes(&mut u, usize::from(vlen.min(MAX_VALUE))) } else { Vec::new() };
                    Step::Request { conn, req: Request { kind, key, arg, vlen, value } }
                }
                2 => Step::Deliver { conn, n: byte(&mut u) },
                3 => Step::Process { conn, budget: byte(&mut u) },
                _ => Step::Complete { conn, pick: byte(&mut u), ok: byte(&mut u) % 4 != 0 },
            });
        }
        Script { options, steps }
    }

    /// One client's bytes on connection 0, delivered whole and processed
    /// four times (the harness then drains what is left), over the map
    /// store or the flash store.
    pub fn stream(bytes: &[u8], flash: bool) -> Script {
        let mut steps = vec![Step::Raw { conn: 0, bytes: bytes.to_vec() }, Step::Deliver { conn: 0, n: 0 }];
        steps.extend((0..4).map(|_| Step::Process { conn: 0, budget: 255 }));
        Script { options: Options { flash, ..Options::default() }, steps }
    }

    /// The bytes [`Script::decode`] reads back as this script (seed files).
    pub fn encode(&self) -> Vec<u8> {
        let o = &self.options;
        let mut out = vec![u8::from(o.flash) | u8::from(o.small_items) << 1 | (o.protocol & 3) << 2];
        for step in &self.steps {
            match step {
                Step::Raw { conn, bytes } => {
                    for chunk in bytes.chunks(MAX_CHUNK) {
                        out.extend_from_slice(&[0, *conn, chunk.len() as u8]);
                        out.extend_from_slice(chunk);
                    }
                }
                Step::Request { conn, req } => {
                    out.extend_from_slice(&[1, *conn, req.kind, req.key, req.arg, req.vlen]);
                    if req.vlen < 128 {
                        out.extend_from_slice(&req.value[..req.value.len().min(usize::from(req.vlen.min(MAX_VALUE)))]);
                    }
                }
                Step::Deliver { conn, n } => out.extend_from_slice(&[2, *conn, *n]),
                Step::Process { conn, budget } => out.extend_from_slice(&[3, *conn, *budget]),
                Step::Complete { conn, pick, ok } => out.extend_from_slice(&[4, *conn, *pick, if *ok { 1 } else { 0 }]),
            }
        }
        out
    }
}

/// The key named by `n`: `k0..k7`, then `f0..f15`.
pub fn key(n: u8) -> Vec<u8> {
    let n = n % (RAM_KEYS + FLASH_KEYS);
    match n < RAM_KEYS {
        true => format!("k{n}").into_bytes(),
        false => format!("f{}", n - RAM_KEYS).into_bytes(),
    }
}

/// The commands a [`Request`] can be, by `kind % KINDS.len()`.
pub const KINDS: &[&str] = &[
    "get", "gets", "gat", "gats", "set", "add", "replace", "append", "prepend", "cas", "incr", "decr", "delete", "touch",
    "flush_all", "mg", "ms", "md", "ma", "mn", "bget", "bgetk", "bgetq", "bgetkq", "bset", "bsetq", "badd", "breplace",
    "bappend", "bprepend", "bdelete", "bdeleteq", "bincr", "bincrq", "bdecr", "bnoop", "btouch", "bgat", "bgatkq",
];

const TTLS: [i64; 4] = [0, 100, -1, 3000];
const FLAGS: [u32; 4] = [0, 5, u32::MAX, 42];

impl Request {
    pub fn kind_name(&self) -> &'static str {
        KINDS[usize::from(self.kind) % KINDS.len()]
    }

    fn data(&self) -> Vec<u8> {
        match self.vlen < 128 {
            true => self.value.clone(),
            false => (self.vlen - 128).to_string().into_bytes(),
        }
    }

    fn keys(&self) -> Vec<Vec<u8>> {
        (0..1 + (self.arg >> 5) % 4).map(|i| key(self.key.wrapping_add(i * 3))).collect()
    }

    /// The request's bytes on the wire.
    pub fn wire(&self) -> Vec<u8> {
        let k = key(self.key);
        let k = String::from_utf8_lossy(&k);
        let a = self.arg;
        let noreply = if a & 1 != 0 { " noreply" } else { "" };
        let ttl = TTLS[usize::from(a >> 1) & 3];
        let flags = FLAGS[usize::from(a >> 3) & 3];
        let data = self.data();
        let block = |head: String| [head.as_bytes(), b"\r\n", &data, b"\r\n"].concat();
        let line = |s: String| format!("{s}\r\n").into_bytes();
        let keys = self.keys().iter().map(|k| String::from_utf8_lossy(k).into_owned()).collect::<Vec<_>>().join(" ");
        match self.kind_name() {
            "get" | "gets" => line(format!("{} {keys}", self.kind_name())),
            "gat" | "gats" => line(format!("{} {ttl} {keys}", self.kind_name())),
            verb @ ("set" | "add" | "replace" | "append" | "prepend") => block(format!("{verb} {k} {flags} {ttl} {}{noreply}", data.len())),
            "cas" => block(format!("cas {k} {flags} {ttl} {} {}{noreply}", data.len(), a >> 4)),
            verb @ ("incr" | "decr") => line(format!("{verb} {k} {}{noreply}", delta(a))),
            "delete" => line(format!("delete {k}{noreply}")),
            "touch" => line(format!("touch {k} {ttl}{noreply}")),
            "flush_all" => line(format!("flush_all{}", if a & 2 != 0 { " 0" } else { "" })),
            "mg" => line(format!("mg {k}{}", meta_flags(a, &["v", "f", "k", "c", "s", "t", "q", "O9"]))),
            "ms" => block(format!("ms {k} {}{}{}", data.len(), meta_flags(a & 0x47, &["q", "F5", "T100", "", "", "", "I"]), ms_mode(a))),
            "md" => line(format!("md {k}{}", meta_flags(a, &["q", "I", "T30", "k", "O7", "C1"]))),
            "ma" => line(format!("ma {k}{}", meta_flags(a, &["q", "v", "N0", "D7", "MD", "t", "c", "k"]))),
            "mn" => line("mn".to_string()),
            name => binary(name, &key(self.key), a, &data),
        }
    }
}

fn delta(a: u8) -> u64 {
    match a >> 1 {
        127 => u64::MAX,
        d => u64::from(d),
    }
}

/// ` flag` for each bit of `bits` set, `names[bit]` (empty names skipped).
fn meta_flags(bits: u8, names: &[&str]) -> String {
    names.iter().enumerate().filter(|&(i, n)| bits >> i & 1 != 0 && !n.is_empty()).map(|(_, n)| format!(" {n}")).collect()
}

fn ms_mode(a: u8) -> &'static str {
    [" MS", " ME", " MA", " MP", " MR", "", " C3", " MA N0"][usize::from(a >> 3) & 7]
}

/// A binary request (`bin` in the wire tests).
fn binary(name: &str, key: &[u8], a: u8, data: &[u8]) -> Vec<u8> {
    let flags = FLAGS[usize::from(a >> 3) & 3];
    let exp = (TTLS[usize::from(a >> 1) & 3].max(0) as u32).to_be_bytes();
    let set_extras = [&flags.to_be_bytes()[..], &exp].concat();
    let delta_extras = [&delta(a).min(255).to_be_bytes()[..], &u64::from(a >> 4).to_be_bytes(), &exp].concat();
    let cas = if a & 0x80 != 0 { u64::from(a & 15) } else { 0 };
    let (opcode, extras, key, value): (u8, &[u8], &[u8], &[u8]) = match name {
        "bget" => (0x00, &[], key, &[]),
        "bgetq" => (0x09, &[], key, &[]),
        "bgetk" => (0x0c, &[], key, &[]),
        "bgetkq" => (0x0d, &[], key, &[]),
        "bset" => (0x01, &set_extras, key, data),
        "bsetq" => (0x11, &set_extras, key, data),
        "badd" => (0x02, &set_extras, key, data),
        "breplace" => (0x03, &set_extras, key, data),
        "bappend" => (0x0e, &[], key, data),
        "bprepend" => (0x0f, &[], key, data),
        "bdelete" => (0x04, &[], key, &[]),
        "bdeleteq" => (0x14, &[], key, &[]),
        "bincr" => (0x05, &delta_extras, key, &[]),
        "bincrq" => (0x15, &delta_extras, key, &[]),
        "bdecr" => (0x06, &delta_extras, key, &[]),
        "btouch" => (0x1c, &exp, key, &[]),
        "bgat" => (0x1d, &exp, key, &[]),
        "bgatkq" => (0x24, &exp, key, &[]),
        _ => (0x0a, &[], &[], &[]), // bnoop
    };
    binary_request(opcode, key, extras, value, cas)
}

/// One binary request's bytes: header, extras, key, value.
pub fn binary_request(opcode: u8, key: &[u8], extras: &[u8], value: &[u8], cas: u64) -> Vec<u8> {
    let mut out = vec![0x80, opcode];
    out.extend_from_slice(&(key.len() as u16).to_be_bytes());
    out.push(extras.len() as u8);
    out.extend_from_slice(&[0, 0, 0]);
    out.extend_from_slice(&((extras.len() + key.len() + value.len()) as u32).to_be_bytes());
    out.extend_from_slice(&u32::from(opcode).to_be_bytes());
    out.extend_from_slice(&cas.to_be_bytes());
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_is_decodes_inverse() {
        let script = Script {
            options: Options { flash: true, small_items: false, protocol: 2 },
            steps: vec![
                Step::Raw { conn: 1, bytes: vec![7; 300] },
                Step::Request { conn: 0, req: Request { kind: 4, key: 9, arg: 3, vlen: 3, value: b"abc".to_vec() } },
                Step::Request { conn: 2, req: Request { kind: 10, key: 1, arg: 8, vlen: 140, value: Vec::new() } },
                Step::Deliver { conn: 3, n: 0 },
                Step::Process { conn: 0, budget: 9 },
                Step::Complete { conn: 2, pick: 1, ok: false },
            ],
        };
        let back = Script::decode(&script.encode());
        assert_eq!(back.options, script.options);
        // The 300 raw bytes come back as two chunks.
        assert_eq!(back.steps.len(), script.steps.len() + 1);
        assert_eq!(back.steps[2..], script.steps[1..]);
    }

    #[test]
    fn every_kind_makes_one_whole_request() {
        for kind in 0..KINDS.len() as u8 {
            let req = Request { kind, key: 3, arg: 0xff, vlen: 2, value: b"hi".to_vec() };
            let wire = req.wire();
            match wire[0] {
                0x80 => assert_eq!(wire.len(), 24 + u32::from_be_bytes(wire[8..12].try_into().unwrap()) as usize),
                _ => assert!(wire.ends_with(b"\r\n"), "{}", String::from_utf8_lossy(&wire)),
            }
        }
    }
}
