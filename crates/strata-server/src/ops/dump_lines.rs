//! The lines of a key dump, and memcached's `uriencode` (which `watch`'s
//! log lines share).
//!
//! A [`Printer`] turns one live item (key, value length, [`ItemMeta`]) into
//! one line of a `lru_crawler metadump` (`key=... exp=... ... flags=... `
//! and a bare `\n`, as memcached 1.6.45 writes it), `lru_crawler mgdump`
//! (`mg <key>`, or `mg <base64> b` for a binary key) or `stats cachedump`
//! (`ITEM <key> [<bytes> b; <exp> s]`), and writes the dump's last line
//! (`END`, or `EN` for mgdump). It filters by memcached size class (the
//! class memcached would have stored the item in, from the server's slab
//! classes) and carries the one piece of state a dump's lines have: a
//! cachedump's count of lines and bytes, which stops it at its `limit` or
//! at memcached's 2 MiB, whichever comes first ([`Printer::full`]).
//!
//! Both dump drivers use it: the worker's cachedump walk (`dump.rs`) and
//! the crawler dump's printer thread (`dump_feed.rs`); it knows neither.

use strata_proto::admin::Classes;
use strata_proto::base64;
use strata_proto::number::{push_i64, push_u64};
use strata_store::{ItemMeta, SlabClasses};

use crate::ctx::Ctx;

/// memcached's cachedump reply limit (`memlimit`, 2 MiB with its END).
const CACHEDUMP_MAX_BYTES: usize = 2 << 20;

/// Which dump the lines are for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// `key=... exp=... la=... cas=... fetch=... cls=... size=... flags=... ` lines, then END.
    Meta,
    /// `mg <key>` (or `mg <base64> b`) lines, then EN.
    Mg,
    /// `ITEM <key> [<bytes> b; <exp> s]` lines, then END.
    Cache { limit: u32 },
}

/// Formats one dump's lines.
pub(super) struct Printer {
    kind: Kind,
    classes: Classes,
    sizes: SlabClasses,
    origin_unix: i64,
    cas_enabled: bool,
    /// Cachedump: lines and bytes so far, and whether its limit was hit.
    shown: u32,
    bytes: usize,
    full: bool,
}

impl Printer {
    pub(super) fn new(ctx: &Ctx<'_>, kind: Kind, classes: Classes) -> Printer {
        Printer {
            kind,
            classes,
            sizes: ctx.core.classes.clone(),
            origin_unix: ctx.core.clock.process_started_unix(),
            cas_enabled: !ctx.core.settings.cas_disabled,
            shown: 0,
            bytes: 0,
            full: false,
        }
    }

    /// A cachedump reached its limit (or memcached's 2 MiB): nothing more
    /// is printed, and the walk may end.
    pub(super) fn full(&self) -> bool {
        self.full
    }

    /// The dump's last line.
    pub(super) fn terminate(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(match self.kind {
            Kind::Mg => b"EN\r\n",
            Kind::Meta | Kind::Cache { .. } => b"END\r\n",
        });
    }

    pub(super) fn line(&mut self, key: &[u8], value_len: usize, meta: &ItemMeta, out: &mut Vec<u8>) {
        if self.full {
            return;
        }
        let size = strata_store::memcached_item_size(key.len(), meta.flags, value_len, self.cas_enabled);
        let class = usize::from(self.sizes.class_of(size));
        if !self.classes.contains(class) {
            return;
        }
        match self.kind {
            Kind::Meta => {
                out.extend_from_slice(b"key=");
                uriencode(key, out);
                out.extend_from_slice(b" exp=");
                if meta.exptime == 0 {
                    out.extend_from_slice(b"-1");
                } else {
                    push_i64(out, i64::from(meta.exptime) + self.origin_unix);
                }
                out.extend_from_slice(b" la=");
                push_i64(out, i64::from(meta.last_access) + self.origin_unix);
                out.extend_from_slice(b" cas=");
                push_u64(out, meta.cas);
                out.extend_from_slice(if meta.fetched { b" fetch=yes cls=" } else { b" fetch=no cls=" });
                push_u64(out, class as u64);
                out.extend_from_slice(b" size=");
                push_u64(out, size as u64);
                out.extend_from_slice(b" flags=");
                push_u64(out, u64::from(meta.flags));
                // memcached 1.6.45: a trailing space and a bare newline.
                out.extend_from_slice(b" \n");
            }
            Kind::Mg => {
                out.extend_from_slice(b"mg ");
                if meta.key_binary {
                    base64::encode(key, out);
                    out.extend_from_slice(b" b\r\n");
                } else {
                    out.extend_from_slice(key);
                    out.extend_from_slice(b"\r\n");
                }
            }
            Kind::Cache { limit } => {
                // memcached never prints binary keys here.
                if meta.key_binary {
                    return;
                }
                let start = out.len();
                out.extend_from_slice(b"ITEM ");
                out.extend_from_slice(key);
                out.extend_from_slice(b" [");
                push_u64(out, value_len as u64);
                out.extend_from_slice(b" b; ");
                push_i64(out, if meta.exptime == 0 { 0 } else { i64::from(meta.exptime) + self.origin_unix });
                out.extend_from_slice(b" s]\r\n");
                let len = out.len() - start;
                if self.bytes + len + 6 > CACHEDUMP_MAX_BYTES {
                    out.truncate(start);
                    self.full = true;
                    return;
                }
                self.bytes += len;
                self.shown += 1;
                self.full = limit != 0 && self.shown >= limit;
            }
        }
    }
}

/// memcached's `uriencode`: every byte but ASCII letters, digits and
/// `-._~` becomes `%XX`.
pub(crate) fn uriencode(key: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in key {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uriencodes_as_memcached() {
        let mut out = Vec::new();
        uriencode(b"a%20b c/d-e.f_g~h", &mut out);
        assert_eq!(out, b"a%2520b%20c%2Fd-e.f_g~h");
    }
}
