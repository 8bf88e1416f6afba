//! The text protocol's commands (`get` family, storage commands, `delete`,
//! `incr`/`decr`, `touch`, `flush_all` and the admin commands) as service
//! calls, and their replies, byte for byte as memcached writes them.
//!
//! Storage commands come in two steps, as in memcached: [`admit`] decides
//! from the header alone whether the data block will be accepted (too large
//! is refused before a byte of it is buffered, and the block is swallowed),
//! then [`store`] runs once the whole block is there.

use std::sync::atomic::Ordering;

use strata_proto::command::BAD_CHUNK;
use strata_proto::number::push_u64;
use strata_proto::value_line::push_value;
use strata_proto::{Command, DebugTime, GetKind, StoreCommand, StoreVerb, KEY_MAX_LENGTH};
use strata_store::{
    DeleteRequest, DeleteResult, DeltaMode, DeltaRequest, DeltaResult, GetAction, GetOptions, StoreMode,
    StoreRequest, StoreResult,
};

use super::{reply, Admission, Flow};
use crate::service::{Origin, Read, ReadAs, Service};

/// memcached 1.6.45's reply to a multi-get with an over-long key.
const GET_KEY_TOO_LONG: &str = "CLIENT_ERROR bad command line format\r\n";

/// Run a command that has no data block.
pub fn execute(svc: &Service<'_>, cmd: &Command<'_>, out: &mut Vec<u8>) -> Flow {
    match *cmd {
        Command::Get { kind, keys } => get(svc, kind, keys.iter(), out),
        Command::Delete { key, noreply } => delete(svc, key, noreply, out),
        Command::Arith { incr, key, delta, noreply } => arith(svc, incr, key, delta, noreply, out),
        Command::Touch { key, exptime, noreply } => touch(svc, key, exptime, noreply, out),
        Command::FlushAll { delay, noreply } => flush_all(svc, delay, noreply, out),
        Command::Version => {
            out.extend_from_slice(b"VERSION ");
            out.extend_from_slice(crate::settings::VERSION.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Command::Verbosity { level, noreply } => {
            svc.shared.ops.verbose.set(level);
            reply(out, "OK", noreply)
        }
        Command::Quit => return Flow::CloseAfterWrite,
        Command::Shutdown { graceful: _, valid } => {
            if !svc.shared.settings.shutdown_enabled {
                reply(out, "SERVER_ERROR: shutdown not enabled", false);
            } else if !valid {
                reply(out, "CLIENT_ERROR invalid shutdown mode", false);
            } else {
                svc.shared.request_shutdown();
                return Flow::Close;
            }
        }
        Command::CacheMemlimit { megabytes, noreply } => memlimit(svc, megabytes, noreply, out),
        Command::RefreshCerts => crate::tls::refresh_command(svc.shared, out),
        Command::Stats { args } => svc.start(crate::report::stats::stats(svc, args, out)),
        Command::MetaNoop => {
            out.extend_from_slice(b"MN\r\n");
            svc.flushed(out.len()); // memcached flushes on mn
        }
        Command::MetaGet(ref req) => super::meta::get(svc, req, out),
        Command::MetaDelete(ref req) => super::meta::delete(svc, req, out),
        Command::MetaArith(ref req) => super::meta::arith(svc, req, out),
        Command::MetaDebug { key, base64 } => super::meta::debug(svc, key, base64, out),
        Command::Error { reply: line, noreply, .. } => reply(out, line, noreply),
        Command::Admin(cmd) => svc.start(crate::ops::admin(svc, cmd, out)),
        Command::DebugTime(change) => {
            let clock = &svc.shared.clock;
            match change {
                DebugTime::Pause => clock.debug_pause(true),
                DebugTime::Resume => clock.debug_pause(false),
                DebugTime::Advance(secs) => clock.debug_advance(secs),
            }
            reply(out, "OK", false);
        }
        Command::Close => return Flow::Close,
        Command::Store(_) | Command::MetaSet { .. } => {
            unreachable!("storage commands go through admit and store")
        }
    }
    Flow::Continue
}

fn get<'k>(svc: &Service<'_>, kind: GetKind, keys: impl Iterator<Item = &'k [u8]>, out: &mut Vec<u8>) {
    let mark = out.len();
    let touch = match kind {
        GetKind::Gat(e) | GetKind::Gats(e) => Some(svc.expiry(e)),
        _ => None,
    };
    let read_as = if touch.is_some() { ReadAs::Touch } else { ReadAs::Get };
    let opts = GetOptions { touch, no_token: true, fetched_unseen: true, ..GetOptions::default() };
    let get = GetCommand { cas: kind.returns_cas(), opts, read_as, mark };
    // Run again after a flash read: the keys before it were answered.
    let resume_from = svc.resume_from();
    let mut keys = keys.skip(resume_from);
    let mut window: [&[u8]; PREFETCH_WINDOW] = [&[]; PREFETCH_WINDOW];
    // The window's keys are hashed once, for the prefetch and the reads.
    let mut hashes = [0u64; PREFETCH_WINDOW];
    let mut i = resume_from;
    // Held while the keys are read (one epoch pin for all of them).
    let mut batch = None;
    loop {
        // The line is scanned once: a window of keys is split out, handed
        // to the store's prefetch (a multi-get only), then served.
        let n = window.iter_mut().zip(&mut keys).map(|(slot, key)| *slot = key).count();
        if n == 0 {
            break;
        }
        let hashed = n > 1;
        if hashed {
            batch.get_or_insert_with(|| svc.shared.engine.read_batch());
            for (hash, key) in hashes.iter_mut().zip(&window[..n]) {
                *hash = strata_store::hash_key(key);
            }
            svc.shared.engine.prefetch(&hashes[..n]);
        }
        for (at, &key) in window[..n].iter().enumerate() {
            if !get_one(svc, &get, key, hashed.then(|| hashes[at]), i, out) {
                // Parked on a flash read: the later keys' reads go with it.
                svc.read_ahead(window[at + 1..n].iter().copied().chain(keys), i + 1);
                return;
            }
            i += 1;
        }
    }
    out.extend_from_slice(b"END\r\n");
    // memcached transmits everything queued after a multi-get.
    svc.set_unsent_from(out.len());
}

/// What every key of one get command shares. Made once and lent to each
/// key: a copy per key stored it in narrow pieces that the key's read then
/// loaded whole, a store-forwarding stall each (perf: ~2% of a 48-key
/// get's CPU).
struct GetCommand {
    /// `gets`/`gats`: the reply lines carry the CAS.
    cas: bool,
    opts: GetOptions,
    read_as: ReadAs,
    /// Where the command's replies start in the output.
    mark: usize,
}

/// Key `i` of a get: false when the command ends here (a key too long, or
/// a flash read parked it).
#[inline]
fn get_one(svc: &Service<'_>, get: &GetCommand, key: &[u8], hash: Option<u64>, i: usize, out: &mut Vec<u8>) -> bool {
    if i > 0 {
        // memcached starts a reply object per key; END rides with the
        // last key's (a separate datagram over UDP if that key missed).
        svc.mark(out);
    }
    if key.len() > KEY_MAX_LENGTH {
        // memcached's conn_release_items: every reply on the
        // connection not yet transmitted is dropped, not only this
        // command's.
        let unsent = svc.unsent_from().min(get.mark);
        out.truncate(unsent);
        svc.truncate_marks(unsent);
        // 1.6.45 copies the error line, its CRLF included, and
        // sends it with another CRLF.
        reply(out, GET_KEY_TOO_LONG, false);
        return false;
    }
    let key_mark = out.len();
    let opts = GetOptions { hash, ..get.opts };
    let read = svc.read(Origin::Text, get.read_as, key, i, opts, &mut |item, _created| {
        let cas = get.cas.then_some(item.meta.cas);
        push_value(out, key, item.meta.flags, item.value, cas);
        GetAction::default()
    });
    if let Read::Parked = read {
        out.truncate(key_mark);
        return false;
    }
    true
}

/// Decide from a storage header whether its data block is taken.
pub fn admit(svc: &Service<'_>, key: &[u8], flags: u32, value_len: usize, remove_on_refusal: bool) -> Admission {
    if svc.admit(key, flags, value_len, remove_on_refusal) {
        Admission::Accept
    } else {
        Admission::Refuse { reply: "SERVER_ERROR object too large for cache", noreply: false }
    }
}

/// Store a text-protocol storage command; `data` ends with the 2 bytes
/// that should be `\r\n`.
pub fn store(svc: &Service<'_>, cmd: &StoreCommand<'_>, data: &[u8], out: &mut Vec<u8>) {
    let (value, tail) = data.split_at(data.len() - 2);
    if tail != b"\r\n" {
        reply(out, BAD_CHUNK, cmd.noreply);
        return;
    }
    let mode = match cmd.verb {
        StoreVerb::Set => StoreMode::Set,
        StoreVerb::Add => StoreMode::Add,
        StoreVerb::Replace => StoreMode::Replace,
        StoreVerb::Append => StoreMode::Append,
        StoreVerb::Prepend => StoreMode::Prepend,
        StoreVerb::Cas => StoreMode::Cas,
    };
    let req = StoreRequest::new(mode, cmd.key, value).with_flags(cmd.flags).with_exptime(svc.expiry(cmd.exptime)).with_cas(cmd.cas);
    let Ok(result) = svc.store(Origin::Text, &req) else { return };
    let line = match result {
        StoreResult::Stored { .. } => "STORED",
        StoreResult::NotStored => "NOT_STORED",
        StoreResult::Exists => "EXISTS",
        StoreResult::NotFound => "NOT_FOUND",
        StoreResult::TooLarge => "SERVER_ERROR object too large for cache",
        StoreResult::OutOfMemory => "SERVER_ERROR out of memory storing object",
    };
    reply(out, line, cmd.noreply);
}

fn delete(svc: &Service<'_>, key: &[u8], noreply: bool, out: &mut Vec<u8>) {
    let req = DeleteRequest { key, ..DeleteRequest::default() };
    match svc.delete(Origin::Text, &req) {
        Err(_) => {}
        Ok(DeleteResult::Deleted) => reply(out, "DELETED", noreply),
        Ok(_) => reply(out, "NOT_FOUND", noreply),
    }
}

fn arith(svc: &Service<'_>, incr: bool, key: &[u8], delta: u64, noreply: bool, out: &mut Vec<u8>) {
    let req = DeltaRequest {
        key,
        mode: if incr { DeltaMode::Incr } else { DeltaMode::Decr },
        delta,
        cas: 0,
        vivify: None,
        initial: 0,
        touch: None,
        in_place: !svc.is_pinned(key),
        new_cas: None,
    };
    let Ok(result) = svc.delta(&req) else { return };
    match result {
        DeltaResult::Ok { value, .. } => {
            if !noreply {
                push_u64(out, value);
                out.extend_from_slice(b"\r\n");
            } else {
                crate::service::hooks::silenced_u64(value);
            }
        }
        DeltaResult::NotFound | DeltaResult::NotStored | DeltaResult::Exists => reply(out, "NOT_FOUND", noreply),
        DeltaResult::NonNumeric => reply(out, "CLIENT_ERROR cannot increment or decrement non-numeric value", noreply),
        DeltaResult::OutOfMemory => reply(out, "SERVER_ERROR out of memory", noreply),
    }
}

fn touch(svc: &Service<'_>, key: &[u8], exptime: i32, noreply: bool, out: &mut Vec<u8>) {
    match svc.touch(key, svc.expiry(exptime)) {
        Err(_) => {}
        Ok(true) => reply(out, "TOUCHED", noreply),
        Ok(false) => reply(out, "NOT_FOUND", noreply),
    }
}

fn flush_all(svc: &Service<'_>, delay: i32, noreply: bool, out: &mut Vec<u8>) {
    let at = if delay > 0 { svc.expiry(delay) } else { 0 };
    if svc.flush_all(at) {
        reply(out, "OK", noreply);
    } else {
        reply(out, "CLIENT_ERROR flush_all not allowed", noreply);
    }
}

fn memlimit(svc: &Service<'_>, megabytes: u32, noreply: bool, out: &mut Vec<u8>) {
    if megabytes < 8 {
        reply(out, "MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m", noreply);
    } else if megabytes > 1_000_000_000 {
        reply(out, "MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes", noreply);
    } else {
        let shared = svc.shared;
        shared.engine.set_memory_limit(u64::from(megabytes) << 20);
        shared.memory_limit_bytes.store(u64::from(megabytes) << 20, Ordering::Relaxed);
        if let Some(g) = &shared.memory_governor {
            g.on_cache_memlimit(shared, u64::from(megabytes) << 20, shared.settings.memory_pressure_yield);
        }
        reply(out, "OK", noreply);
    }
}

/// Keys of a multi-get the store is asked to prefetch at a time
/// (`Engine::prefetch`; `strata-store/src/seg/prefetch.rs`).
const PREFETCH_WINDOW: usize = 16;

