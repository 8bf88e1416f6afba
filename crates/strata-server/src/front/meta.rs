//! Meta commands: `mg ms md ma me`.
//!
//! Reply flags are written in request order, as memcached writes them, and
//! TTL changes take effect at their place in that order: in `mg k t T30 ...`
//! the `t` reports the old TTL, in `mg k T30 t` the new one. The store
//! returns the item as it was before the command; [`TtlTrack`] replays the
//! `T`/`N` flags so each `t` prints what memcached would.

use strata_proto::base64;
use strata_proto::command::BAD_CHUNK;
use strata_proto::meta::MetaRequest;
use strata_proto::number::push_u64;
use strata_store::{
    DeleteRequest, DeleteResult, DeltaMode, DeltaRequest, DeltaResult, EmptyItem, GetAction, GetOptions, ItemView,
    RelTime, StoreMode, StoreRequest, StoreResult,
};

use super::{reply, Admission};
use crate::output::Output;
use crate::service::{Origin, Read, ReadAs, Service};

/// ` k<key>`, base64-encoded with a trailing ` b` for binary keys.
fn push_key(out: &mut Vec<u8>, key: &[u8], binary: bool) {
    out.extend_from_slice(b" k");
    if binary {
        base64::encode(key, out);
        out.extend_from_slice(b" b");
    } else {
        out.extend_from_slice(key);
    }
}

/// ` t<remaining>`: -1 for no expiry; memcached prints the difference as an
/// unsigned 32-bit number.
fn push_ttl(out: &mut Vec<u8>, exptime: RelTime, now: RelTime) {
    out.extend_from_slice(b" t");
    if exptime == 0 {
        out.extend_from_slice(b"-1");
    } else {
        push_u64(out, u64::from(exptime.wrapping_sub(now)));
    }
}

/// Echo the O and k flags in request order, handing every other flag to
/// `other` at its place.
fn push_flags(out: &mut Vec<u8>, req: &MetaRequest<'_>, mut other: impl FnMut(u8, &mut Vec<u8>)) {
    for &flag in req.order() {
        match flag {
            b'O' => {
                out.push(b' ');
                out.extend_from_slice(req.opaque.unwrap_or_default());
            }
            b'k' => push_key(out, req.key.bytes(), req.key.binary),
            _ => other(flag, out),
        }
    }
}

/// The O and k flags, which every meta reply echoes, even a miss.
fn push_echo(out: &mut Vec<u8>, req: &MetaRequest<'_>) {
    push_flags(out, req, |_, _| {});
}

/// TTL of a created item after the `T` and `N` flags, in request order.
fn created_ttl(req: &MetaRequest<'_>, ttl: RelTime, vivify: RelTime) -> RelTime {
    let mut exptime = 0;
    for &flag in req.effective_order() {
        match flag {
            b'T' => exptime = ttl,
            b'N' => exptime = vivify,
            _ => {}
        }
    }
    exptime
}

fn opt_expiry(svc: &Service<'_>, raw: Option<i32>) -> Option<RelTime> {
    raw.map(|e| svc.expiry(e))
}

pub(super) fn get(svc: &mut Service<'_>, req: &MetaRequest<'_>, out: &mut Output) {
    let now = svc.now();
    let f = &req.flags;
    let ttl = opt_expiry(svc, f.new_ttl);
    let vivify = opt_expiry(svc, f.vivify_ttl);
    let recache = opt_expiry(svc, f.recache_ttl);
    let bad_opaque = req.opaque_too_long();
    let opts = GetOptions {
        touch: ttl.filter(|_| req.effective_order().contains(&b'T')),
        // With h, l, T, N or R memcached reads the item locked and bumps
        // it after the reply loop, which a bad opaque aborts.
        no_bump: f.no_update || (bad_opaque && req.order().iter().any(|c| b"hlTNR".contains(c))),
        vivify: vivify.map(|n| created_ttl(req, ttl.unwrap_or(0), n)),
        vivify_cas: f.explicit_cas,
        ..GetOptions::default()
    };
    let key = req.key.bytes();
    let mark = out.len();
    // As memcached counts mg: nothing when the opaque is refused; a hit
    // (or an item N created) that applied T is a touch, any other hit a
    // get; a miss is a get miss, T or not (service/hooks.rs, row 6).
    let read_as = if bad_opaque { ReadAs::Silent } else { ReadAs::MetaGet };
    let read = svc.read(Origin::Meta, read_as, key, 0, opts, &mut |item: ItemView<'_>, created| {
        if bad_opaque {
            return GetAction::default();
        }
        let mut exptime = item.meta.exptime;
        let mut won = false;
        // 1.6.45: a `C` that matches the item's CAS means the client
        // holds this value already; the reply is `HD` without it.
        let value = f.value && f.compare_cas != Some(item.meta.cas);
        if value {
            out.extend_from_slice(b"VA ");
            push_u64(out, item.value.len() as u64);
        } else {
            out.extend_from_slice(b"HD");
        }
        for &flag in req.order() {
            match flag {
                b'T' => exptime = ttl.unwrap_or(exptime),
                b'N' if created => {
                    exptime = vivify.unwrap_or(exptime);
                    won = true;
                }
                b'R' => {
                    let below = recache.unwrap_or(0);
                    if !item.meta.token_sent && !created && exptime != 0 && exptime < below {
                        won = true;
                    }
                }
                b's' => {
                    out.extend_from_slice(b" s");
                    push_u64(out, item.value.len() as u64);
                }
                b't' => push_ttl(out, exptime, now),
                b'c' => {
                    out.extend_from_slice(b" c");
                    push_u64(out, item.meta.cas);
                }
                b'f' => {
                    out.extend_from_slice(b" f");
                    push_u64(out, u64::from(item.meta.flags));
                }
                b'l' => {
                    out.extend_from_slice(b" l");
                    push_u64(out, u64::from(now.saturating_sub(item.meta.last_access)));
                }
                b'h' => out.extend_from_slice(if item.meta.fetched { b" h1" } else { b" h0" }),
                b'O' => {
                    out.push(b' ');
                    out.extend_from_slice(req.opaque.unwrap_or_default());
                }
                b'k' => push_key(out, item.key, item.meta.key_binary),
                _ => {}
            }
        }
        if item.meta.token_sent {
            out.extend_from_slice(b" Z");
        }
        if item.meta.stale {
            out.extend_from_slice(b" X");
            if !item.meta.token_sent {
                won = true;
            }
        }
        if won {
            out.extend_from_slice(b" W");
        }
        out.extend_from_slice(b"\r\n");
        if value {
            out.extend_from_slice(item.value);
            out.extend_from_slice(b"\r\n");
        }
        GetAction { set_token_sent: won }
    });
    let hit = match read {
        Read::Hit => true,
        Read::Miss => false,
        Read::Parked => {
            out.truncate(mark);
            return;
        }
    };
    if bad_opaque {
        return reply(out, "CLIENT_ERROR opaque token too long", false);
    }
    if hit {
        out.pin(key);
    }
    if !hit && !f.quiet {
        out.extend_from_slice(b"EN");
        push_echo(out, req);
        out.extend_from_slice(b"\r\n");
    }
}

/// The header check for `ms`: too large is refused before the data,
/// then (1.6.45: after the item was allocated) an over-long opaque.
pub fn admit(svc: &Service<'_>, req: &MetaRequest<'_>, value_len: usize) -> Admission {
    let flags = req.flags.client_flags.unwrap_or(0);
    if !svc.admit(req.key.bytes(), flags, value_len, true) {
        Admission::Refuse { reply: "SERVER_ERROR object too large for cache", noreply: false }
    } else if req.opaque_too_long() {
        Admission::Refuse { reply: "CLIENT_ERROR opaque token too long", noreply: false }
    } else {
        Admission::Accept
    }
}

pub fn set(svc: &mut Service<'_>, req: &MetaRequest<'_>, data: &[u8], out: &mut Output) {
    let (value, tail) = data.split_at(data.len() - 2);
    if tail != b"\r\n" {
        reply(out, BAD_CHUNK, false);
        return;
    }
    let f = &req.flags;
    let mut mode = match f.mode {
        Some(b'E') => StoreMode::Add,
        Some(b'A') => StoreMode::Append,
        Some(b'P') => StoreMode::Prepend,
        Some(b'R') => StoreMode::Replace,
        _ => StoreMode::Set,
    };
    if f.compare_cas.is_some() && matches!(mode, StoreMode::Set | StoreMode::Replace) {
        mode = StoreMode::Cas;
    }
    // 1.6.45: append/prepend with `N` create a missing item, with the
    // `N` TTL.
    let vivify_ttl = match mode {
        StoreMode::Append | StoreMode::Prepend => opt_expiry(svc, f.vivify_ttl),
        _ => None,
    };
    let exptime = opt_expiry(svc, f.new_ttl).unwrap_or(0);
    let store = StoreRequest {
        cas: f.compare_cas.unwrap_or(0),
        invalidate: f.invalidate,
        vivify_ttl,
        key_binary: req.key.binary,
        // `E0` on ms means "none" (memcached numbers the item then).
        new_cas: f.explicit_cas.filter(|&cas| cas != 0),
        ..StoreRequest::new(mode, req.key.bytes(), value).with_flags(f.client_flags.unwrap_or(0)).with_exptime(exptime)
    };
    let Ok(result) = svc.store(Origin::Meta, &store) else { return };
    // `s` is the stored value's length (joined, after append or
    // prepend), else the request's.
    let (code, cas, size): (&[u8], u64, usize) = match result {
        StoreResult::Stored { .. } if f.quiet => return,
        StoreResult::Stored { cas, value_len } => (b"HD", cas, value_len),
        StoreResult::Exists => (b"EX", 0, value.len()),
        StoreResult::NotFound => (b"NF", 0, value.len()),
        StoreResult::NotStored => (b"NS", 0, value.len()),
        StoreResult::TooLarge => return reply(out, "SERVER_ERROR object too large for cache", false),
        StoreResult::OutOfMemory => return reply(out, "SERVER_ERROR out of memory storing object", false),
    };
    out.extend_from_slice(code);
    push_flags(out, req, |flag, out| match flag {
        b'c' => {
            out.extend_from_slice(b" c");
            push_u64(out, cas);
        }
        b's' => {
            out.extend_from_slice(b" s");
            push_u64(out, size as u64);
        }
        _ => {}
    });
    out.extend_from_slice(b"\r\n");
}

pub(super) fn delete(svc: &mut Service<'_>, req: &MetaRequest<'_>, out: &mut Output) {
    let f = &req.flags;
    // `x` (1.6.45) leaves an empty item with the `F` flags and the `T`
    // TTL (none without `T`).
    let empty = f.remove_value.then(|| EmptyItem {
        flags: f.client_flags.unwrap_or(0),
        exptime: opt_expiry(svc, f.new_ttl).unwrap_or(0),
    });
    let del = DeleteRequest {
        key: req.key.bytes(),
        cas: f.compare_cas,
        invalidate: f.invalidate,
        touch: if f.invalidate { opt_expiry(svc, f.new_ttl) } else { None },
        empty,
        new_cas: f.explicit_cas,
    };
    let Ok(result) = svc.delete(Origin::Meta, &del) else { return };
    let code: &[u8] = match result {
        DeleteResult::Deleted if f.quiet => return,
        DeleteResult::Deleted => b"HD",
        DeleteResult::NotFound => b"NF",
        DeleteResult::Exists => b"EX",
        DeleteResult::NotStored => b"NS",
    };
    out.extend_from_slice(code);
    push_echo(out, req);
    out.extend_from_slice(b"\r\n");
}

pub(super) fn arith(svc: &mut Service<'_>, req: &MetaRequest<'_>, out: &mut Output) {
    let f = &req.flags;
    let incr = !matches!(f.mode, Some(b'D' | b'd' | b'-'));
    let ttl = opt_expiry(svc, f.new_ttl);
    let vivify = opt_expiry(svc, f.vivify_ttl);
    let delta = DeltaRequest {
        key: req.key.bytes(),
        mode: if incr { DeltaMode::Incr } else { DeltaMode::Decr },
        delta: f.delta.unwrap_or(1),
        cas: f.compare_cas.unwrap_or(0),
        vivify: vivify.map(|n| created_ttl(req, ttl.unwrap_or(0), n)),
        initial: f.initial.unwrap_or(0),
        touch: ttl.filter(|_| req.effective_order().contains(&b'T')),
        in_place: !out.is_pinned(req.key.bytes()),
        new_cas: f.explicit_cas,
    };
    let bad_opaque = req.opaque_too_long();
    let Ok(result) = svc.delta(&delta) else { return };
    let now = svc.now();
    let (value, cas, mut exptime, created) = match result {
        DeltaResult::Ok { value, cas, exptime, created } => (value, cas, exptime, created),
        DeltaResult::NonNumeric => {
            return reply(out, "CLIENT_ERROR cannot increment or decrement non-numeric value", false)
        }
        DeltaResult::OutOfMemory => return reply(out, "SERVER_ERROR out of memory", false),
        // memcached finds the bad opaque while writing the reply.
        _ if bad_opaque => return reply(out, "CLIENT_ERROR opaque token too long", false),
        miss => {
            let code: &[u8] = match miss {
                DeltaResult::Exists => b"EX",
                DeltaResult::NotStored => b"NS",
                _ => b"NF",
            };
            out.extend_from_slice(code);
            push_echo(out, req);
            out.extend_from_slice(b"\r\n");
            return;
        }
    };
    if bad_opaque {
        return reply(out, "CLIENT_ERROR opaque token too long", false);
    }
    // 1.6.45 silences a created counter's reply too.
    if f.quiet {
        return;
    }
    let mut digits = Vec::with_capacity(20);
    push_u64(&mut digits, value);
    if f.value {
        out.extend_from_slice(b"VA ");
        push_u64(out, digits.len() as u64);
    } else {
        out.extend_from_slice(b"HD");
    }
    for &flag in req.order() {
        match flag {
            b'c' => {
                out.extend_from_slice(b" c");
                push_u64(out, cas);
            }
            b't' => push_ttl(out, exptime, now),
            b'T' => exptime = ttl.unwrap_or(exptime),
            b'N' if created => exptime = vivify.unwrap_or(exptime),
            b'O' => {
                out.push(b' ');
                out.extend_from_slice(req.opaque.unwrap_or_default());
            }
            b'k' => push_key(out, req.key.bytes(), req.key.binary),
            _ => {}
        }
    }
    out.extend_from_slice(b"\r\n");
    if f.value {
        out.extend_from_slice(&digits);
        out.extend_from_slice(b"\r\n");
    }
}

pub(super) fn debug(svc: &mut Service<'_>, raw_key: &[u8], base64_key: bool, out: &mut Output) {
    let mut decoded = Vec::new();
    let key = if base64_key {
        if !base64::decode(raw_key, &mut decoded) {
            // memcached's `me` has its own message for this (mg/ms say
            // "error decoding key").
            return reply(out, "CLIENT_ERROR bad command line format", false);
        }
        &decoded[..]
    } else {
        raw_key
    };
    let now = svc.now();
    let cas_enabled = !svc.core.settings.cas_disabled;
    let opts = GetOptions { no_bump: true, uncounted: true, no_token: true, ..GetOptions::default() };
    let classes = &svc.core.classes;
    let mark = out.len();
    // memcached's cmd_meta counts `me` only (service/hooks.rs, row 7).
    let read = svc.read(Origin::Meta, ReadAs::MetaDebug, key, 0, opts, &mut |item, _| {
        let size = strata_store::memcached_item_size(key.len(), item.meta.flags, item.value.len(), cas_enabled);
        // memcached prints the key base64-encoded when the item was
        // stored with a binary key, as it is, otherwise.
        out.extend_from_slice(b"ME ");
        if item.meta.key_binary {
            base64::encode(key, out);
        } else {
            out.extend_from_slice(key);
        }
        // The seconds remaining, as memcached 1.6.45 prints them (1.6.18
        // printed the negation): unsigned arithmetic shown signed.
        let exp = if item.meta.exptime == 0 { -1 } else { item.meta.exptime.wrapping_sub(now) as i32 };
        let line = format!(
            " exp={exp} la={} cas={} fetch={} cls={} size={size}\r\n",
            now.saturating_sub(item.meta.last_access),
            item.meta.cas,
            if item.meta.fetched { "yes" } else { "no" },
            classes.class_of(size),
        );
        out.extend_from_slice(line.as_bytes());
        GetAction::default()
    });
    let hit = match read {
        Read::Hit => true,
        Read::Miss => false,
        Read::Parked => {
            out.truncate(mark);
            return;
        }
    };
    if !hit {
        out.extend_from_slice(b"EN\r\n");
    }
}
