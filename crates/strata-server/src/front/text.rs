//! The text protocol's commands (`get` family, storage commands, `delete`,
//! `incr`/`decr`, `touch`, `flush_all` and the admin commands) as service
//! calls, and their replies, byte for byte as memcached writes them.
//!
//! [`step`] frames one line (`frame_line`, memchr), parses it
//! (`parse_request`) and runs it. Storage commands come in two steps, as in
//! memcached: [`admit`] decides from the header alone whether the data
//! block will be accepted (too large is refused before a byte of it is
//! buffered, and the block is swallowed), then [`store`] runs once the
//! whole block is there; until then the step asks for the block's bytes
//! (`Step::Need`), and the connection does not run it again before they
//! have all arrived.

use strata_proto::command::BAD_CHUNK;
use strata_proto::number::push_u64;
use strata_proto::value_line::push_value;
use strata_proto::{frame_line, parse_request, Command, DebugTime, Frame, GetKind, StoreCommand, StoreVerb, KEY_MAX_LENGTH};
use strata_store::{
    DeleteRequest, DeleteResult, DeltaMode, DeltaRequest, DeltaResult, GetAction, GetOptions, StoreMode,
    StoreRequest, StoreResult,
};

use strata_proto::held::{HeldMeta, HeldStore};

use super::{reply, Admission, Flow, Held, Outcome, Step};
use crate::output::Output;
use crate::service::{Origin, Read, ReadAs, Service};
use crate::stats::WorkerStats;

/// memcached 1.6.45's reply to a multi-get with an over-long key.
const GET_KEY_TOO_LONG: &str = "CLIENT_ERROR bad command line format\r\n";

/// One text or meta request at the front of `buf` (from `held` once a
/// storage command's header was parsed and admitted before).
pub fn step(buf: &[u8], svc: &mut Service<'_>, out: &mut Output, unauthenticated: &mut bool, held: Option<&Held>) -> Step {
    match held {
        Some(&Held::Text { cmd, consumed }) => {
            let cmd = cmd.command(buf);
            return block(buf, consumed, Admission::Accept, cmd.value_len, cmd.noreply, out, |data, out| store(svc, &cmd, data, out)).0;
        }
        Some(&Held::Meta { req, value_len, consumed }) => {
            let req = req.request(buf);
            return block(buf, consumed, Admission::Accept, value_len, false, out, |data, out| super::meta::set(svc, &req, data, out)).0;
        }
        Some(&Held::Binary) | None => {}
    }
    let (line, consumed) = match frame_line(buf, svc.core.settings.max_get_line_bytes) {
        Frame::Partial => return Step::Need(buf.len() + 1),
        Frame::Close => {
            // memcached closes on an overlong line after transmitting what
            // it had flushed (at get, mn, or a large data block) and drops
            // the rest.
            let sent = out.unsent_from().min(out.len());
            out.truncate(sent);
            // UDP's reply marks (none over TCP) must not point past it.
            out.truncate_marks(sent);
            return Step::Stop(Flow::CloseAfterWrite);
        }
        Frame::Line { line, consumed } => (line, consumed),
    };
    if *unauthenticated {
        return super::auth::text_login(buf, line, consumed, svc, out, unauthenticated);
    }
    // Matched by reference: a `Command` is a few hundred bytes (a meta
    // request's decoded key), and a move is a memcpy of all of them.
    let cmd = parse_request(line, consumed);
    match &cmd {
        Command::Store(cmd) => {
            WorkerStats::incr(&svc.stats.store_headers_parsed);
            let remove = cmd.verb == strata_proto::StoreVerb::Set;
            let admission = super::admit(svc, cmd.key, cmd.flags, cmd.value_len, remove);
            match block(buf, consumed, admission, cmd.value_len, cmd.noreply, out, |data, out| store(svc, cmd, data, out)) {
                (Step::Need(end), true) => Step::Hold(end, Box::new(Held::Text { cmd: HeldStore::hold(cmd, buf), consumed })),
                (step, _) => step,
            }
        }
        &Command::MetaSet { ref req, value_len } => {
            WorkerStats::incr(&svc.stats.store_headers_parsed);
            let admission = super::meta::admit(svc, req, value_len);
            match block(buf, consumed, admission, value_len, false, out, |data, out| super::meta::set(svc, req, data, out)) {
                (Step::Need(end), true) => Step::Hold(end, Box::new(Held::Meta { req: HeldMeta::hold(req, buf), value_len, consumed })),
                (step, _) => step,
            }
        }
        &Command::Error { reply: line, noreply, swallow } => {
            reply(out, line, noreply);
            Step::Done { advance: consumed, swallow, outcome: Outcome::CONTINUE }
        }
        cmd => Step::Done { advance: consumed, swallow: 0, outcome: execute(svc, cmd, out) },
    }
}

/// A storage command's data block, after its header (`consumed` bytes):
/// a refused block is swallowed; an accepted one runs once it is all here
/// (until then `Need`, with true: the header was admitted).
#[inline]
fn block(
    buf: &[u8],
    consumed: usize,
    admission: Admission,
    value_len: usize,
    noreply: bool,
    out: &mut Output,
    run: impl FnOnce(&[u8], &mut Output),
) -> (Step, bool) {
    match admission {
        Admission::Refuse { reply: line, .. } => {
            reply(out, line, noreply);
            (Step::Done { advance: consumed, swallow: value_len + 2, outcome: Outcome::CONTINUE }, false)
        }
        Admission::Accept => {
            let end = consumed + value_len + 2;
            if buf.len() < end {
                return (Step::Need(end), true);
            }
            run(&buf[consumed..end], out);
            if value_len + 2 > strata_proto::text::READ_BUFFER_SIZE {
                // memcached reads such a block straight from the socket
                // and then waits for the next request, sending its
                // pending replies first.
                let at = out.len();
                out.set_unsent_from(at);
            }
            (Step::next(end), false)
        }
    }
}

/// Run a command that has no data block.
pub fn execute(svc: &mut Service<'_>, cmd: &Command<'_>, out: &mut Output) -> Outcome {
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
            svc.hooks.set_verbosity(level);
            reply(out, "OK", noreply)
        }
        Command::Quit => return Outcome::flow(Flow::CloseAfterWrite),
        Command::Shutdown { graceful: _, valid } => {
            if !svc.core.settings.shutdown_enabled {
                reply(out, "SERVER_ERROR: shutdown not enabled", false);
            } else if !valid {
                reply(out, "CLIENT_ERROR invalid shutdown mode", false);
            } else {
                svc.core.request_shutdown();
                return Outcome::flow(Flow::Close);
            }
        }
        Command::CacheMemlimit { megabytes, noreply } => memlimit(svc, megabytes, noreply, out),
        Command::RefreshCerts => svc.hooks.refresh_certs(out),
        Command::Stats { args } => return Outcome::started(svc.hooks.stats(&svc.ctx, args, out)),
        Command::MetaNoop => {
            out.extend_from_slice(b"MN\r\n");
            let at = out.len();
            out.flushed(at); // memcached flushes on mn
        }
        Command::MetaGet(ref req) => super::meta::get(svc, req, out),
        Command::MetaDelete(ref req) => super::meta::delete(svc, req, out),
        Command::MetaArith(ref req) => super::meta::arith(svc, req, out),
        Command::MetaDebug { key, base64 } => super::meta::debug(svc, key, base64, out),
        Command::Error { reply: line, noreply, .. } => reply(out, line, noreply),
        Command::Admin(cmd) => return Outcome::started(svc.hooks.admin(&svc.ctx, cmd, out)),
        Command::DebugTime(change) => {
            let clock = &svc.core.clock;
            match change {
                DebugTime::Pause => clock.debug_pause(true),
                DebugTime::Resume => clock.debug_pause(false),
                DebugTime::Advance(secs) => clock.debug_advance(secs),
            }
            reply(out, "OK", false);
        }
        Command::Close => return Outcome::flow(Flow::Close),
        Command::Store(_) | Command::MetaSet { .. } => {
            unreachable!("storage commands go through admit and store")
        }
    }
    Outcome::CONTINUE
}

fn get<'k>(svc: &mut Service<'_>, kind: GetKind, keys: impl Iterator<Item = &'k [u8]>, out: &mut Output) {
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
            batch.get_or_insert_with(|| svc.core.engine.read_batch());
            for (hash, key) in hashes.iter_mut().zip(&window[..n]) {
                *hash = strata_store::hash_key(key);
            }
            svc.core.engine.prefetch(&hashes[..n]);
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
    let at = out.len();
    out.set_unsent_from(at);
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
fn get_one(svc: &mut Service<'_>, get: &GetCommand, key: &[u8], hash: Option<u64>, i: usize, out: &mut Output) -> bool {
    if i > 0 {
        // memcached starts a reply object per key; END rides with the
        // last key's (a separate datagram over UDP if that key missed).
        out.mark();
    }
    if key.len() > KEY_MAX_LENGTH {
        // memcached's conn_release_items: every reply on the
        // connection not yet transmitted is dropped, not only this
        // command's.
        let unsent = out.unsent_from().min(get.mark);
        out.truncate(unsent);
        out.truncate_marks(unsent);
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

/// Store a text-protocol storage command; `data` ends with the 2 bytes
/// that should be `\r\n`.
pub fn store(svc: &mut Service<'_>, cmd: &StoreCommand<'_>, data: &[u8], out: &mut Output) {
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

fn delete(svc: &mut Service<'_>, key: &[u8], noreply: bool, out: &mut Output) {
    let req = DeleteRequest { key, ..DeleteRequest::default() };
    match svc.delete(Origin::Text, &req) {
        Err(_) => {}
        Ok(DeleteResult::Deleted) => reply(out, "DELETED", noreply),
        Ok(_) => reply(out, "NOT_FOUND", noreply),
    }
}

fn arith(svc: &mut Service<'_>, incr: bool, key: &[u8], delta: u64, noreply: bool, out: &mut Output) {
    let req = DeltaRequest {
        key,
        mode: if incr { DeltaMode::Incr } else { DeltaMode::Decr },
        delta,
        cas: 0,
        vivify: None,
        initial: 0,
        touch: None,
        in_place: !out.is_pinned(key),
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

fn touch(svc: &mut Service<'_>, key: &[u8], exptime: i32, noreply: bool, out: &mut Output) {
    let exptime = svc.expiry(exptime);
    match svc.touch(key, exptime) {
        Err(_) => {}
        Ok(true) => reply(out, "TOUCHED", noreply),
        Ok(false) => reply(out, "NOT_FOUND", noreply),
    }
}

fn flush_all(svc: &Service<'_>, delay: i32, noreply: bool, out: &mut Output) {
    let at = if delay > 0 { svc.expiry(delay) } else { 0 };
    if svc.flush_all(at) {
        reply(out, "OK", noreply);
    } else {
        reply(out, "CLIENT_ERROR flush_all not allowed", noreply);
    }
}

fn memlimit(svc: &Service<'_>, megabytes: u32, noreply: bool, out: &mut Output) {
    if megabytes < 8 {
        reply(out, "MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m", noreply);
    } else if megabytes > 1_000_000_000 {
        reply(out, "MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes", noreply);
    } else {
        svc.hooks.memlimit(u64::from(megabytes) << 20);
        reply(out, "OK", noreply);
    }
}

/// Keys of a multi-get the store is asked to prefetch at a time
/// (`Engine::prefetch`; `strata-store/src/seg/prefetch.rs`).
const PREFETCH_WINDOW: usize = 16;

