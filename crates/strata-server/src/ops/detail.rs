//! `stats detail on|off|dump` and `-D <delimiter>`: memcached's per-prefix
//! counts of gets, hits, sets and deletes (`stats_prefix.c`).
//!
//! The request path pays one relaxed load of [`Detail::on`] per command
//! while collection is off. While on, each get, set and delete looks its
//! key's prefix (the bytes before the first delimiter; keys without one
//! are not counted) up in one table behind a mutex, as memcached does
//! under its stats lock:
//!
//! ```text
//!  index: prefix ──BTreeMap──► row number
//!  rows:  [ (prefix, get, hit, set, del) ... ]   in order of first use
//! ```
//!
//! The index is ordered, not hashed: its keys are clients' bytes, which a
//! hash of fixed keys lets a client pile into one chain, and a hash of
//! random keys (std's) takes other paths in each process, which fuzzing
//! reads as new coverage. A lookup compares about 20 prefixes at 65,536.
//!
//! At most 65,536 prefixes are kept (memcached's `MAX_PREFIX_COUNT`); a new
//! prefix past that is not counted. `dump` prints rows in first-use order
//! (memcached: its hash table's order). `stats reset` clears the table.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use strata_proto::binary::{write_error, write_response, Request, Status};
use strata_proto::number::push_u64;
use strata_proto::Tokens;

use super::push_line;
use crate::ctx::Ctx;
use crate::settings::Settings;

const MAX_PREFIXES: usize = 1 << 16;

#[derive(Clone, Copy)]
enum Event {
    Get { hit: bool },
    Set,
    Delete,
}

#[derive(Default)]
struct Table {
    index: BTreeMap<Box<[u8]>, usize>,
    /// Prefix, then gets, hits, sets, deletes.
    rows: Vec<(Box<[u8]>, [u64; 4])>,
}

pub struct Detail {
    enabled: AtomicBool,
    delimiter: u8,
    table: Mutex<Table>,
}

impl Detail {
    pub fn new(settings: &Settings) -> Detail {
        Detail {
            enabled: AtomicBool::new(settings.detail_enabled),
            delimiter: settings.detail_delimiter,
            table: Mutex::new(Table::default()),
        }
    }

    /// Collection is on (`detail_enabled` in `stats settings`).
    #[inline]
    pub fn on(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    pub fn record_get(&self, key: &[u8], hit: bool) {
        self.record(key, Event::Get { hit });
    }

    pub fn record_set(&self, key: &[u8]) {
        self.record(key, Event::Set);
    }

    pub fn record_delete(&self, key: &[u8]) {
        self.record(key, Event::Delete);
    }

    /// `stats reset`.
    pub fn clear(&self) {
        *self.table.lock().unwrap_or_else(|e| e.into_inner()) = Table::default();
    }

    fn record(&self, key: &[u8], event: Event) {
        // memcached stops at a NUL as C strings do.
        let key = key.split(|&b| b == 0).next().unwrap_or_default();
        let Some(end) = key.iter().position(|&b| b == self.delimiter) else { return };
        let prefix = &key[..end];
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let row = match table.index.get(prefix) {
            Some(&row) => row,
            None if table.rows.len() >= MAX_PREFIXES => return,
            None => {
                let row = table.rows.len();
                table.rows.push((prefix.into(), [0; 4]));
                table.index.insert(prefix.into(), row);
                row
            }
        };
        let counts = &mut table.rows[row].1;
        match event {
            Event::Get { hit } => {
                counts[0] += 1;
                counts[1] += u64::from(hit);
            }
            Event::Set => counts[2] += 1,
            Event::Delete => counts[3] += 1,
        }
    }

    fn dump(&self, out: &mut Vec<u8>) {
        let table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        for (prefix, [get, hit, set, del]) in &table.rows {
            out.extend_from_slice(b"PREFIX ");
            out.extend_from_slice(prefix);
            for (name, n) in [(&b" get "[..], get), (b" hit ", hit), (b" set ", set), (b" del ", del)] {
                out.extend_from_slice(name);
                push_u64(out, *n);
            }
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"END\r\n");
    }
}

/// `stats detail <on|off|dump>`, as memcached 1.6.45 answers it.
pub fn command(detail: &Detail, ctx: &Ctx<'_>, args: &Tokens<'_>, out: &mut Vec<u8>) {
    const USAGE: &str = "CLIENT_ERROR usage: stats detail on|off|dump";
    if !ctx.core.settings.dumps_enabled {
        return push_line(out, "CLIENT_ERROR stats detail not allowed");
    }
    let sub = args.get(2);
    let is = |name: &[u8]| !sub.is_empty() && name.starts_with(sub);
    if args.len() < 3 {
        push_line(out, USAGE);
    } else if is(b"on") {
        detail.enabled.store(true, Ordering::Relaxed);
        push_line(out, "OK");
    } else if is(b"off") {
        detail.enabled.store(false, Ordering::Relaxed);
        push_line(out, "OK");
    } else if is(b"dump") {
        detail.dump(out);
    } else {
        push_line(out, USAGE);
    }
}

/// Binary `STAT` with key `detail ...`, as memcached's `process_bin_stat`:
/// `detail on`/`detail off` answer the empty closing stat; `detail dump`
/// sends the dump text as the value of a stat named `detailed` first;
/// anything else, or `-X`, is `KEY_ENOENT`.
pub fn binary_stat(detail: &Detail, ctx: &Ctx<'_>, req: &Request<'_>, out: &mut Vec<u8>) {
    let (code, opaque) = (req.header.opcode, req.header.opaque);
    let rest = &req.key[b"detail".len()..];
    if !ctx.core.settings.dumps_enabled {
        return write_error(out, code, Status::KeyNotFound, opaque);
    }
    if rest.starts_with(b" dump") {
        let mut dump = Vec::new();
        detail.dump(&mut dump);
        write_response(out, code, Status::Success, opaque, 0, &[], b"detailed", &dump);
    } else if rest.starts_with(b" on") {
        detail.enabled.store(true, Ordering::Relaxed);
    } else if rest.starts_with(b" off") {
        detail.enabled.store(false, Ordering::Relaxed);
    } else {
        return write_error(out, code, Status::KeyNotFound, opaque);
    }
    write_response(out, code, Status::Success, opaque, 0, &[], &[], &[]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_prefix() {
        let d = Detail::new(&Settings::default());
        d.record_set(b"foo:1");
        d.record_get(b"foo:2", false);
        d.record_get(b"foo:1", true);
        d.record_delete(b"bar:1");
        d.record_get(b"nodelimiter", true);
        let mut out = Vec::new();
        d.dump(&mut out);
        assert_eq!(out, b"PREFIX foo get 2 hit 1 set 1 del 0\r\nPREFIX bar get 0 hit 0 set 0 del 1\r\nEND\r\n");
        d.clear();
        out.clear();
        d.dump(&mut out);
        assert_eq!(out, b"END\r\n");
    }
}
