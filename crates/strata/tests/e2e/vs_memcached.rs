//! Differential test: one seeded random stream of text and meta commands
//! (valid and invalid, noreply, quiet mode, big and empty values, expiry) is
//! sent to Strata and to Debian's memcached, started by the test, and every
//! reply must be identical.
//!
//! The stream goes in batches of 1-12 commands, each batch followed by `mn`,
//! so both replies end at the same `MN`. What is not compared byte for byte
//! (docs/COMPATIBILITY.md): `VERSION` text; meta `t` (TTL) and `me` `exp=`
//! within two seconds (two clocks); meta `l` and `me` `la=` (memcached moves
//! an item's access time only on some fetches); meta `h` and `me` `fetch=`
//! (after an incr/decr memcached may or may not have replaced the item, and
//! a replaced item counts as not fetched). CAS numbers ARE compared:
//! Strata numbers CAS exactly as memcached 1.6.18 does.
//!
//! Strata speaks memcached 1.6.45's protocol where it differs from 1.6.18
//! (docs/COMPATIBILITY.md, "Where Strata follows memcached 1.6.45, not
//! 1.6.18"; crates/strata-server/tests/server/meta_145.rs checks each). The
//! reference here stays Debian's 1.6.18, so exactly those differences are
//! masked, each where it is marked "1.6.45:" below: the generator leaves out
//! the inputs 1.6.45 answers differently (new meta flags `E`, `x`, `s` on
//! ms, `N` with ms append/prepend, `q` on a vivifying ma, `MEE`, meta `F`
//! above 32 bits, flag errors on md, `me <key> b` without a further token,
//! short lines, known commands with too few or extra tokens, an over-long
//! opaque on an ms too large to store), gives a
//! storage command refused from its header a value that is a silent command
//! (1.6.18 reads it as a command, 1.6.45 swallows it), and the comparison
//! reads `me`'s `exp=` with its 1.6.18 sign flipped and the over-long-key
//! reply of a get with its extra CRLF (1.6.45's) removed.
//!
//! With the flash tier on (`same_replies_as_memcached_with_items_on_flash`),
//! Strata runs with `-m 8` and an `ext_path` (`ext_item_size=1`, so every
//! item may go to flash) and a filler connection keeps writing other keys
//! (to both servers, so CAS numbers stay in step), so the stream's keys keep
//! moving to flash and every command
//! meets flash items; the reference stays memcached with room for every
//! key (its own extstore refuses some commands on flash items and drops
//! small items, which Strata need not do): Strata must answer as if nothing
//! had left RAM. The test checks that gets were served from flash
//! (`get_extstore`).
//!
//! `STRATA_DIFF_SEED` and `STRATA_DIFF_COUNT` (default 100,000 commands)
//! reproduce or lengthen a run; `STRATA_DIFF_DUMP=FILE` records the batches.
//! A mismatch prints the seed, the batch, the first differing line, both
//! replies and the 40 batches before it with the time each was sent.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::common;

use common::Server;
const ITEM_SIZE_MAX: usize = 1 << 20;

/// SplitMix64: small, seedable, good enough to drive a generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

fn start_memcached() -> Option<Server> {
    // Without its LRU maintainer and crawler threads, memcached decides
    // deterministically whether incr/decr rewrite an item in place (those
    // threads hold item references at unpredictable moments). Room for
    // every key's largest value: which item an eviction picks is each
    // engine's own business, not the protocol's.
    Server::memcached(&["-o", "no_lru_crawler,no_lru_maintainer", "-m", "1024"])
}

fn start_strata(flash: Option<&str>) -> Server {
    match flash {
        None => Server::strata(&["-t", "2", "-m", "1024"]),
        Some(ext) => Server::strata(&["-t", "2", "-m", "8", "-o", ext]),
    }
}

/// Filler sets (noreply, then `mn`) of keys the stream never uses, sent to
/// both servers (they take CAS numbers): Strata's `-m 8` turns over and the
/// stream's items move to flash.
fn fill(stream: &mut TcpStream, next: &mut u64) {
    let mut req = Vec::new();
    for _ in 0..1500 {
        req.extend_from_slice(format!("set fill:{} 0 0 1000 noreply\r\n", *next % 20_000).as_bytes());
        req.extend_from_slice(&[b'f'; 1000]);
        req.extend_from_slice(b"\r\n");
        *next += 1;
    }
    let (reply, closed) = exchange(stream, &[req, b"mn\r\n".to_vec()].concat());
    assert!(!closed && reply == b"MN\r\n", "filler: {}", String::from_utf8_lossy(&reply));
}

fn stat(stream: &mut TcpStream, name: &str) -> u64 {
    let (reply, _) = exchange(stream, b"stats\r\nmn\r\n");
    let text = String::from_utf8_lossy(&reply).into_owned();
    let prefix = format!("STAT {name} ");
    let line = text.lines().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("no stat {name}"));
    line[prefix.len()..].trim().parse().unwrap()
}

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

/// Send `batch` and read until the reply ends with the `mn` marker, or the
/// server closes the connection (`quit`, or an overlong line). Returns the
/// reply and whether the connection closed.
fn exchange(stream: &mut TcpStream, batch: &[u8]) -> (Vec<u8>, bool) {
    if stream.write_all(batch).is_err() {
        return (Vec::new(), true);
    }
    // Generated keys and values never contain "mn"/"MN", so every `mn`
    // command line in the batch yields one MN line in the reply.
    let expected = batch.windows(4).filter(|w| w == b"mn\r\n").count();
    let mut reply = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        if reply.ends_with(b"MN\r\n") && reply.windows(4).filter(|w| w == b"MN\r\n").count() >= expected {
            return (reply, false);
        }
        match stream.read(&mut buf) {
            Ok(0) => return (reply, true),
            Ok(n) => reply.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return (reply, true),
            Err(e) => panic!("read failed: {e}; got so far: {}", String::from_utf8_lossy(&reply)),
        }
    }
}

const KEYS: &[&str] = &["a", "b", "c", "key", "k1", "k2", "k3", "num", "n2", "big", "x", "y", "zz", "tab\tkey", "ünï"];

struct Gen {
    rng: Rng,
    unix_now: i64,
    /// Whether a multi-get may carry an over-long key. memcached then drops
    /// the replies it has not yet sent, and which those are after a data
    /// block depends on how its 16 KiB read buffer met the stream, so such
    /// gets go only into batches that are still small.
    allow_cull: bool,
    /// Values are cut to this length (the flash run: see `FLASH_VALUE_MAX`).
    value_max: usize,
}

/// The longest a run may take. Every TTL the stream sets is either gone
/// at once (`-1`, a past unix time) or at least 1000 s (and every recache
/// threshold is 500 s or more from every remaining TTL), so that no item
/// expires, and no `R` win flips, while a run goes on: the two servers'
/// clocks tick at different instants, so an item reaching its TTL mid-run
/// can be a hit on one and a miss on the other for one command. (The
/// stream used to set `T30`/`N30` and `gat 100`: a run slowed past 30 s by
/// a busy machine, as in the full suite, where both runs of this file go
/// side by side, crossed the end of those TTLs.)
const RUN_S_MAX: u64 = 400;

/// The flash run's largest value: today an item larger than a write buffer
/// (`-m`/16, 512 KiB at `-m 8`) is never written to flash
/// (`extstore_write_fallbacks`: evicted from RAM instead; see
/// `a_value_of_1_mb_goes_to_flash` in flash_limits.rs), which the reference
/// cannot mirror.
const FLASH_VALUE_MAX: usize = 300_000;

impl Gen {
    fn key(&mut self) -> String {
        if self.rng.chance(2) {
            return "K".repeat(if self.rng.chance(50) { 250 } else { 251 });
        }
        (*self.rng.pick(KEYS)).to_string()
    }

    fn exptime(&mut self) -> String {
        let choice = self.rng.below(10);
        match choice {
            0 => "-1".into(),
            1 => "1000".into(),
            2 => (self.unix_now + 3600).to_string(),
            3 => (self.unix_now - 3600).to_string(),
            4 => "abc".into(),
            _ => "0".into(),
        }
    }

    fn value(&mut self) -> Vec<u8> {
        let len = match self.rng.below(100) {
            0..=9 => 0,
            10..=69 => self.rng.below(20) as usize + 1,
            70..=94 => self.rng.below(3000) as usize,
            95..=97 => self.rng.below(200_000) as usize,
            _ => ITEM_SIZE_MAX - 100 + self.rng.below(200) as usize - 60,
        }
        .min(self.value_max);
        if self.rng.chance(30) {
            let bits = self.rng.below(64);
            return self.rng.below(1u64 << bits).to_string().into_bytes();
        }
        (0..len).map(|i| b"abcdefghij0123456789"[(i + len) % 20]).collect()
    }

    fn flags(&mut self) -> String {
        match self.rng.below(8) {
            0 => self.rng.below(1 << 32).to_string(),
            1 => "4294967296".into(),
            2 => "-1".into(),
            _ => "0".into(),
        }
    }

    fn storage(&mut self, out: &mut Vec<u8>) {
        let verb = *self.rng.pick(&["set", "set", "set", "add", "replace", "append", "prepend", "cas"]);
        let key = self.key();
        let (flags, exptime) = (self.flags(), self.exptime());
        let mut value = self.value();
        let bad_header = flags == "-1" || exptime == "abc" || key.len() > 250;
        if bad_header {
            read_as_command(&mut value);
        }
        let mut declared = value.len().to_string();
        // 1.6.45: a refused header's block is swallowed by its declared
        // length, so a wrong length would leave bytes 1.6.18 never sees.
        if self.rng.chance(3) && value.len() >= 4 && !bad_header {
            // A bad data chunk. (Declaring it longer than sent would make
            // both servers wait for bytes that never come.) 1.6.45: 4 bytes
            // short, so what is left of the block is a line of 4 bytes or
            // more (a shorter one is a format error there, `ERROR` in 1.6.18).
            declared = (value.len() - 4).to_string();
        }
        let mut line = format!("{verb} {key} {flags} {exptime} {declared}");
        if verb == "cas" {
            line += &format!(" {}", self.rng.below(40));
        }
        if self.rng.chance(20) {
            line += " noreply";
        }
        out.extend_from_slice(line.as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&value);
        out.extend_from_slice(b"\r\n");
    }

    fn meta_flags(&mut self, pool: &[&str], count: u64) -> String {
        let mut flags = String::new();
        let n = self.rng.below(count);
        for _ in 0..n {
            let flag = *self.rng.pick(pool);
            let token = match flag {
                // No TTL a run can outlive (see RUN_S_MAX).
                "T" | "N" => self.rng.pick(&["0", "3000", "-1", "1000", "x"]).to_string(),
                // Recache thresholds away from every TTL the stream sets, so
                // a clock tick between the two servers cannot flip a win.
                "R" => self.rng.pick(&["0", "500", "-1", "2000", "x"]).to_string(),
                "O" => self.rng.pick(&["1", "opaque", "o123456789012345678901234567890123"]).to_string(),
                "C" => self.rng.below(40).to_string(),
                // 1.6.45: meta F is a strict 32-bit number (1.6.18 truncated
                // 4294967296 to 0).
                "F" => self.flags().replace("4294967296", "4294967295"),
                // 1.6.45: `MEE` is mode E (1.6.18: "incorrect length").
                "M" => self.rng.pick(&["E", "A", "P", "R", "S", "I", "D", "+", "-", "X"]).to_string(),
                "D" | "J" => self.rng.pick(&["1", "5", "18446744073709551615", "x"]).to_string(),
                _ => String::new(),
            };
            flags += &format!(" {flag}{token}");
        }
        flags
    }

    fn meta(&mut self, out: &mut Vec<u8>) {
        let kind = self.rng.below(6);
        let key = self.key();
        let mut base64 = self.rng.chance(5);
        let mut key = if base64 { b64(key.as_bytes()) } else { key };
        if kind == 4 && key.len() > 250 {
            // 1.6.45: ma refuses an over-long key as "invalid or duplicate
            // flag" (1.6.18: bad command line format).
            (key, base64) = ("k1".into(), false);
        }
        let b = if base64 { " b" } else { "" };
        match kind {
            0 | 1 => {
                // 1.6.45: `E` and `x` are flags on mg (1.6.18: invalid).
                let flags = self.meta_flags(&["v", "c", "f", "h", "k", "s", "t", "O", "q", "u", "T", "N", "R", "P", "L"], 6);
                out.extend_from_slice(format!("mg {key}{b}{flags}\r\n").as_bytes());
            }
            2 => {
                let mut value = self.value();
                if key.len() > 250 {
                    read_as_command(&mut value); // refused before its length is read
                }
                // 1.6.45: `s` answers the length on ms, and `N` with append
                // or prepend creates a missing item.
                let mut flags = self.meta_flags(&["c", "k", "O", "q", "T", "F", "I", "C", "M", "b", "N", "Z"], 5);
                if flags.contains(" MA") || flags.contains(" MP") {
                    flags = drop_flag(&flags, 'N');
                }
                // 1.6.45 checks the size before an over-long opaque.
                if value.len() > ITEM_SIZE_MAX - 1024 {
                    flags = flags.replace("Oo123456789012345678901234567890123", "Oopaque");
                }
                out.extend_from_slice(format!("ms {key} {}{b}{flags}\r\n", value.len()).as_bytes());
                out.extend_from_slice(&value);
                out.extend_from_slice(b"\r\n");
            }
            3 => {
                // 1.6.45: `x` empties the value; a flag error on md has its
                // own message (1.6.18: "invalid or duplicate flag"), so no
                // repeated flag and no bad `T`.
                let mut flags = String::new();
                for flag in self.meta_flags(&["q", "C", "I", "T", "k", "O"], 4).split(' ').filter(|f| !f.is_empty()) {
                    if !flags.split(' ').any(|f: &str| f.starts_with(&flag[..1])) && flag != "Tx" {
                        flags += &format!(" {flag}");
                    }
                }
                out.extend_from_slice(format!("md {key}{b}{flags}\r\n").as_bytes());
            }
            4 => {
                let mut flags = self.meta_flags(&["N", "J", "D", "M", "q", "t", "c", "v", "k", "O", "C", "T"], 6);
                // 1.6.45: `q` also silences the reply for a counter `N`
                // created.
                if flags.contains(" N") {
                    flags = drop_flag(&flags, 'q');
                }
                out.extend_from_slice(format!("ma {key}{b}{flags}\r\n").as_bytes());
            }
            // `me` with `b` on a plain key too (usually not valid base64:
            // memcached's `me` answers it differently from mg/ms/md/ma).
            // 1.6.45 decodes `b` only when another token follows it.
            _ => {
                let b = if !base64 && self.rng.chance(30) { " b" } else { b };
                let more = if b.is_empty() { "" } else { " x" };
                out.extend_from_slice(format!("me {key}{b}{more}\r\n").as_bytes())
            }
        }
    }

    fn other(&mut self, out: &mut Vec<u8>) {
        let key = self.key();
        let kind = self.rng.below(16);
        let line = match kind {
            0..=3 => {
                let verb = *self.rng.pick(&["get", "gets", "gat 1000", "gats 0", "gat -1", "gat x"]);
                let mut keys: Vec<String> = (0..=self.rng.below(5)).map(|_| self.key()).collect();
                if !self.allow_cull {
                    keys.retain(|k| k.len() <= 250);
                    keys.push("a".into());
                }
                format!("{verb} {}", keys.join(" "))
            }
            // 1.6.45 ignores extra tokens (1.6.18: `delete k 1` is a usage error).
            4 => format!("delete {key}{}", self.rng.pick(&["", " 0", " noreply", " 0 noreply"])),
            5 | 6 => {
                let verb = *self.rng.pick(&["incr", "decr"]);
                let delta = *self.rng.pick(&["1", "10", "18446744073709551615", "-1", "x", "0"]);
                format!("{verb} {key} {delta}{}", if self.rng.chance(15) { " noreply" } else { "" })
            }
            7 => format!("touch {key} {}", self.exptime()),
            // 1.6.45: short lines (``, ` `) and known commands with too few
            // (`verbosity`, `set a 0 0`, `get`) or extra (`delete a b c d`)
            // tokens answer differently.
            8 => (*self.rng.pick(&["version", "verbosity 1", "verbosity 1 noreply", "mn"])).to_string(),
            9 => (*self.rng.pick(&["bogus", "GET a", "stats nonsense", "cache_memlimit 2"])).to_string(),
            10 if self.rng.chance(3) => (*self.rng.pick(&["flush_all", "flush_all 0", "flush_all noreply", "flush_all -1"])).to_string(),
            _ => {
                self.meta(out);
                return;
            }
        };
        out.extend_from_slice(line.as_bytes());
        out.extend_from_slice(b"\r\n");
    }

    fn command(&mut self, out: &mut Vec<u8>) {
        match self.rng.below(10) {
            0..=2 => self.storage(out),
            3..=5 => self.meta(out),
            _ => self.other(out),
        }
    }
}

/// The value of a storage command refused from its header alone: 1.6.18
/// reads it as a command line, 1.6.45 (and Strata) swallow it. A command
/// with no reply keeps both in step.
fn read_as_command(value: &mut Vec<u8>) {
    *value = b"verbosity 0 noreply".to_vec();
}

/// `flags` without the flag `flag` (and its token).
fn drop_flag(flags: &str, flag: char) -> String {
    flags.split(' ').filter(|f| !f.is_empty() && !f.starts_with(flag)).map(|f| format!(" {f}")).collect()
}

/// Standard padded base64 (written here so the test does not trust the
/// codec it checks).
fn b64(src: &[u8]) -> String {
    let mut out = Vec::new();
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for c in src.chunks(3) {
        let n = (u32::from(c[0]) << 16) | (u32::from(*c.get(1).unwrap_or(&0)) << 8) | u32::from(*c.get(2).unwrap_or(&0));
        out.push(T[(n >> 18) as usize & 63]);
        out.push(T[(n >> 12) as usize & 63]);
        out.push(if c.len() > 1 { T[(n >> 6) as usize & 63] } else { b'=' });
        out.push(if c.len() > 2 { T[n as usize & 63] } else { b'=' });
    }
    String::from_utf8(out).unwrap()
}

/// Whether two reply lines are equal up to the fields that may differ.
fn lines_match(a: &[u8], b: &[u8]) -> bool {
    if a == b {
        return true;
    }
    let a = a.strip_suffix(b"\r").unwrap_or(a);
    let b = b.strip_suffix(b"\r").unwrap_or(b);
    if a.starts_with(b"VERSION ") && b.starts_with(b"VERSION ") {
        return true;
    }
    let (ta, tb): (Vec<&[u8]>, Vec<&[u8]>) = (a.split(|&c| c == b' ').collect(), b.split(|&c| c == b' ').collect());
    if ta.len() != tb.len() || ta.is_empty() || ta[0] != tb[0] {
        return false;
    }
    let meta = matches!(ta[0], b"VA" | b"HD" | b"EN" | b"NS" | b"EX" | b"NF");
    let debug = ta[0] == b"ME";
    ta.iter().zip(&tb).enumerate().all(|(i, (x, y))| {
        if x == y {
            return true;
        }
        let number = |t: &[u8]| std::str::from_utf8(t).ok().and_then(|s| s.parse::<i64>().ok());
        if meta && i > 0 && x.first() == Some(&b'l') && y.first() == Some(&b'l') {
            return true;
        }
        // Whether an item counts as fetched after memcached rewrote it for
        // incr/decr depends on its reference counts (docs/COMPATIBILITY.md).
        if meta && i > 0 && matches!(x.as_ref(), b"h0" | b"h1") && matches!(y.as_ref(), b"h0" | b"h1") {
            return true;
        }
        if debug && x.starts_with(b"fetch=") && y.starts_with(b"fetch=") {
            return true;
        }
        if meta && i > 0 && x.first() == Some(&b't') && y.first() == Some(&b't') {
            return matches!((number(&x[1..]), number(&y[1..])), (Some(p), Some(q)) if (p - q).abs() <= CLOCKS);
        }
        if debug && x.starts_with(b"la=") && y.starts_with(b"la=") {
            return true;
        }
        // 1.6.45: `exp=` is the seconds remaining; 1.6.18 printed their
        // negation (and -1 for none in both).
        if debug && x.starts_with(b"exp=") && y.starts_with(b"exp=") {
            return matches!((number(&x[4..]), number(&y[4..])), (Some(p), Some(q)) if (p + q).abs() <= CLOCKS || p == q);
        }
        false
    })
}

/// How far the two servers' TTLs may differ, in seconds. Each server keeps
/// its own clock, a count of seconds moved by a timer thread; on a loaded
/// machine either timer can be late by over a second (seen: memcached's
/// `me` at 998 s left against Strata's 1000 s, in a run beside a build).
const CLOCKS: i64 = 2;

/// 1.6.45 answers a get with an over-long key with its error line and a
/// second CRLF; 1.6.18 with the line alone.
const LONG_KEY_145: &[u8] = b"CLIENT_ERROR bad command line format\r\n\r\n";

/// Compare two reply streams line by line (`b` is Strata's); values are
/// lines too.
fn replies_match(a: &[u8], b: &[u8]) -> bool {
    let b = without_145_long_key_crlf(b);
    let (la, lb): (Vec<&[u8]>, Vec<&[u8]>) = (a.split(|&c| c == b'\n').collect(), b.split(|&c| c == b'\n').collect());
    la.len() == lb.len() && la.iter().zip(&lb).all(|(x, y)| lines_match(x, y))
}

fn without_145_long_key_crlf(reply: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(reply.len());
    let mut rest = reply;
    while let Some(at) = rest.windows(LONG_KEY_145.len()).position(|w| w == LONG_KEY_145) {
        out.extend_from_slice(&rest[..at + LONG_KEY_145.len() - 2]);
        rest = &rest[at + LONG_KEY_145.len()..];
    }
    out.extend_from_slice(rest);
    out
}

fn escape(data: &[u8]) -> String {
    let text: String = data.iter().take(3000).flat_map(|&b| std::ascii::escape_default(b)).map(char::from).collect();
    if data.len() > 3000 {
        format!("{text}... ({} bytes)", data.len())
    } else {
        text
    }
}

fn run(count: usize, flash: Option<&str>) {
    let Some(memcached) = start_memcached() else {
        if std::env::var_os("CI").is_some() {
            panic!("memcached is not installed; scripts/test installs it");
        }
        eprintln!("SKIPPED: memcached is not installed (run scripts/test)");
        return;
    };
    let strata = start_strata(flash);
    let (mut filler, mut filler_m) = (connect(strata.addr), connect(memcached.addr));
    let mut filled = 0;
    let seed = std::env::var("STRATA_DIFF_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_0001);
    let count = std::env::var("STRATA_DIFF_COUNT").ok().and_then(|s| s.parse().ok()).unwrap_or(count);
    let unix_now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64;
    let mut gen = Gen { rng: Rng(seed), unix_now, allow_cull: true, value_max: if flash.is_some() { FLASH_VALUE_MAX } else { usize::MAX } };
    let (mut m, mut s) = (connect(memcached.addr), connect(strata.addr));
    let started = Instant::now();
    let (mut sent, mut batches) = (0, 0);
    // The last batches, escaped (values cut short), with when they were
    // sent: a mismatch prints them, so one seen only in CI can be read.
    let mut previous: std::collections::VecDeque<(Duration, Vec<u8>, Vec<u8>)> = std::collections::VecDeque::new();
    // STRATA_DIFF_DUMP=FILE records every batch (u32 length + bytes) to replay.
    let mut dump = std::env::var_os("STRATA_DIFF_DUMP").map(|p| std::fs::File::create(p).unwrap());
    while sent < count {
        let mut batch = Vec::new();
        let mut n = 0;
        let wanted = 1 + gen.rng.below(12) as usize;
        // A command carrying a large value ends its batch: while memcached's
        // reply to it is still draining, an item it references cannot be
        // rewritten in place by incr/decr, a timing effect no server can
        // reproduce byte for byte.
        while n < wanted && batch.len() < 64 << 10 {
            // (The flash run leaves culled multi-gets to the run without flash.)
            gen.allow_cull = flash.is_none() && batch.len() < 1024;
            gen.command(&mut batch);
            n += 1;
        }
        sent += n;
        batches += 1;
        if flash.is_some() && batches % 8 == 0 {
            fill(&mut filler_m, &mut filled.clone());
            fill(&mut filler, &mut filled);
        }
        if gen.rng.chance(1) {
            batch.extend_from_slice(b"quit\r\n");
        }
        batch.extend_from_slice(b"mn\r\n");
        if let Some(file) = dump.as_mut() {
            file.write_all(&(batch.len() as u32).to_le_bytes()).unwrap();
            file.write_all(&batch).unwrap();
        }
        let ((rm, m_closed), (rs, s_closed)) = (exchange(&mut m, &batch), exchange(&mut s, &batch));
        if m_closed != s_closed || !replies_match(&rm, &rs) {
            for (at, request, reply) in &previous {
                eprintln!("earlier request (at {at:?}): {}\nearlier reply:   {}", escape(request), escape(reply));
            }
            let (lm, ls): (Vec<&[u8]>, Vec<&[u8]>) = (rm.split(|&c| c == b'\n').collect(), rs.split(|&c| c == b'\n').collect());
            if let Some((x, y)) = lm.iter().zip(&ls).find(|(x, y)| !lines_match(x, y)) {
                eprintln!("first differing line:\n  memcached: {}\n  strata:    {}", escape(x), escape(y));
            }
            panic!(
                "replies differ (seed {seed}, batch {batches}, command ~{sent}, at {:?})\nrequest:   {}\nmemcached: {}{}\nstrata:    {}{}",
                started.elapsed(),
                escape(&batch),
                escape(&rm),
                if m_closed { " <closed>" } else { "" },
                escape(&rs),
                if s_closed { " <closed>" } else { "" },
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(RUN_S_MAX),
            "the run took over {RUN_S_MAX} s (batch {batches}): longer than its TTLs allow (RUN_S_MAX)"
        );
        previous.push_back((started.elapsed(), batch, rm));
        if previous.len() > 40 {
            previous.pop_front();
        }
        if m_closed {
            m = connect(memcached.addr);
            s = connect(strata.addr);
        }
    }
    eprintln!("differential: {sent} commands in {batches} batches, identical replies, {:?}", started.elapsed());
    if flash.is_some() {
        let (from_flash, written) = (stat(&mut filler, "get_extstore"), stat(&mut filler, "extstore_objects_written"));
        eprintln!("differential with flash: {from_flash} gets served from flash, {written} items written to flash");
        assert!(written > 1000 && from_flash > 100, "the stream's items went to flash ({written} written, {from_flash} read)");
    }
}

#[test]
fn same_replies_as_memcached() {
    run(100_000, None);
}

#[test]
fn same_replies_as_memcached_with_items_on_flash() {
    let path = std::env::temp_dir().join(format!("strata-diff-flash-{}.dat", std::process::id()));
    let ext = format!("ext_page_size=8,ext_wbuf_size=2,ext_item_size=1,ext_path={}:256m", path.display());
    run(30_000, Some(&ext));
    let _ = std::fs::remove_file(&path);
}
