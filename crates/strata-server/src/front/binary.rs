//! The binary protocol's commands, answered as memcached 1.6's `proto_bin.c`
//! answers them: statuses with memcached's error texts, quiet commands silent
//! unless they fail (GETQ-style reads silent on a miss), GETK misses carrying
//! the key, TOUCH answering flags without the value.
//!
//! [`step`] validates a request from its 24-byte header first (magic,
//! opcode, lengths: `binary::validate`), admits a storage command's value
//! from its header and key, then runs the request once its body is whole.

use strata_proto::binary::{self, write_error, write_response, Opcode, Request, Status, Verdict};
use strata_store::{
    DeleteRequest, DeleteResult, DeltaMode, DeltaRequest, DeltaResult, GetAction, GetOptions, StoreMode,
    StoreRequest, StoreResult,
};

use super::{Flow, Held, Outcome, Step};
use crate::output::Output;
use crate::service::hooks::StatsGroup as Group;
use crate::service::{Origin, Read, ReadAs, Service};

/// Largest body accepted for a binary command that carries no value.
const MAX_BINARY_CONTROL_BODY: usize = 4096;

/// One binary request at the front of `buf` (`held`: a store whose value
/// was admitted before, from its header and key).
pub fn step(buf: &[u8], svc: &mut Service<'_>, out: &mut Output, unauthenticated: &mut bool, held: Option<&Held>) -> Step {
    let Some(header) = binary::Header::parse(buf) else { return Step::Need(binary::HEADER_LEN) };
    if header.magic != binary::REQUEST_MAGIC {
        return Step::Stop(Flow::Close);
    }
    let (code, opaque) = (header.opcode, header.opaque);
    let close_with = |status, out: &mut Output| {
        write_error(out, code, status, opaque);
        Step::then(binary::HEADER_LEN, Flow::CloseAfterWrite)
    };
    let op = match binary::validate(&header, strata_proto::KEY_MAX_LENGTH) {
        Verdict::Corrupt => return close_with(Status::UnknownCommand, out),
        Verdict::ProtocolError => return close_with(Status::Invalid, out),
        Verdict::Unknown => {
            write_error(out, code, Status::UnknownCommand, opaque);
            return Step::Done { advance: binary::HEADER_LEN, swallow: header.body_len as usize, outcome: Outcome::CONTINUE };
        }
        Verdict::Execute(op) => op,
    };
    let (loud, quiet) = op.loud();
    let body_len = header.body_len as usize;
    let sasl_command = matches!(loud, Opcode::SaslListMechs | Opcode::SaslAuth | Opcode::SaslStep | Opcode::Version);
    if *unauthenticated && !sasl_command {
        write_error(out, code, Status::AuthError, opaque);
        return Step::then(binary::HEADER_LEN, Flow::CloseAfterWrite);
    }
    let head_len = binary::HEADER_LEN + usize::from(header.extras_len) + usize::from(header.key_len);
    let stores = matches!(loud, Opcode::Set | Opcode::Add | Opcode::Replace | Opcode::Append | Opcode::Prepend);
    if stores && held.is_none() {
        if buf.len() < head_len {
            return Step::Need(head_len);
        }
        let head = Request::split(header, &buf[binary::HEADER_LEN..head_len]);
        let flags = if header.extras_len >= 4 { head.extra_u32(0) } else { 0 };
        let value_len = binary::HEADER_LEN + body_len - head_len;
        if !svc.admit(head.key, flags, value_len, loud == Opcode::Set) {
            write_error(out, code, Status::TooBig, opaque);
            return Step::Done { advance: head_len, swallow: value_len, outcome: Outcome::CONTINUE };
        }
    } else if body_len > MAX_BINARY_CONTROL_BODY {
        return close_with(Status::Invalid, out);
    }
    let end = binary::HEADER_LEN + body_len;
    if buf.len() < end {
        return if stores { Step::Hold(end, Box::new(Held::Binary)) } else { Step::Need(end) };
    }
    let req = Request::split(header, &buf[binary::HEADER_LEN..end]);
    if let Some(step) = super::auth::sasl(loud, &req, svc, out, unauthenticated) {
        return step;
    }
    let flow = match execute(svc, loud, quiet, &req, out) {
        // A quiet QUIT closes without its reply.
        Flow::CloseAfterWrite if quiet => Flow::Close,
        flow => flow,
    };
    Step::then(end, flow)
}

/// Execute one validated binary request. `op` is the loud opcode; the
/// reply carries the opcode the client sent.
pub fn execute(svc: &mut Service<'_>, op: Opcode, quiet: bool, req: &Request<'_>, out: &mut Output) -> Flow {
    let code = req.header.opcode;
    let opaque = req.header.opaque;
    match op {
        Opcode::Get | Opcode::GetK | Opcode::Gat | Opcode::GatK | Opcode::Touch => get(svc, op, quiet, req, out),
        Opcode::Set | Opcode::Add | Opcode::Replace | Opcode::Append | Opcode::Prepend => store(svc, op, quiet, req, out),
        Opcode::Delete => delete(svc, quiet, req, out),
        Opcode::Increment | Opcode::Decrement => delta(svc, op, quiet, req, out),
        Opcode::Quit => {
            if !quiet {
                write_response(out, code, Status::Success, opaque, 0, &[], &[], &[]);
            }
            return Flow::CloseAfterWrite;
        }
        Opcode::Flush => {
            let delay = if req.extras.len() == 4 { req.extra_u32(0) } else { 0 };
            let at = if delay > 0 { svc.core.clock.expiry(i64::from(delay)) } else { 0 };
            if !svc.flush_all(at) {
                write_error(out, code, Status::AuthError, opaque);
            } else if !quiet {
                write_response(out, code, Status::Success, opaque, 0, &[], &[], &[]);
            }
        }
        Opcode::Noop => write_response(out, code, Status::Success, opaque, 0, &[], &[], &[]),
        Opcode::Version => {
            let version = crate::settings::VERSION.as_bytes();
            write_response(out, code, Status::Success, opaque, 0, &[], &[], version);
        }
        Opcode::Stat if req.key.starts_with(b"detail") => svc.hooks.detail_stat(&svc.ctx, req, out),
        Opcode::Stat => match svc.hooks.stats_group(&svc.ctx, req.key) {
            Group::Values(values) => {
                for (name, value) in values {
                    write_response(out, code, Status::Success, opaque, 0, &[], name.as_bytes(), value.as_bytes());
                }
                write_response(out, code, Status::Success, opaque, 0, &[], &[], &[]);
            }
            Group::Reset => write_response(out, code, Status::Success, opaque, 0, &[], &[], &[]),
            Group::DetailUsage | Group::Unknown => write_error(out, code, Status::KeyNotFound, opaque),
        },
        _ => write_error(out, code, Status::UnknownCommand, opaque),
    }
    Flow::Continue
}

fn get(svc: &mut Service<'_>, op: Opcode, quiet: bool, req: &Request<'_>, out: &mut Output) {
    let (code, opaque) = (req.header.opcode, req.header.opaque);
    let touching = matches!(op, Opcode::Gat | Opcode::GatK | Opcode::Touch);
    let touch = touching.then(|| svc.core.clock.expiry(i64::from(req.extra_u32(0))));
    let with_key = matches!(op, Opcode::GetK | Opcode::GatK);
    let with_value = op != Opcode::Touch;
    let opts = GetOptions { touch, no_token: true, fetched_unseen: true, ..GetOptions::default() };
    let read_as = if touching { ReadAs::Touch } else { ReadAs::Get };
    let mark = out.len();
    let read = svc.read(Origin::Binary, read_as, req.key, 0, opts, &mut |item, _| {
        let flags = item.meta.flags.to_be_bytes();
        let key = if with_key { req.key } else { &[] };
        let value = if with_value { item.value } else { &[] };
        write_response(out, code, Status::Success, opaque, item.meta.cas, &flags, key, value);
        GetAction::default()
    });
    match read {
        Read::Hit => {}
        Read::Parked => out.truncate(mark),
        Read::Miss if quiet => {}
        Read::Miss if with_key => write_response(out, code, Status::KeyNotFound, opaque, 0, &[], req.key, &[]),
        Read::Miss => write_error(out, code, Status::KeyNotFound, opaque),
    }
}

fn store(svc: &mut Service<'_>, op: Opcode, quiet: bool, req: &Request<'_>, out: &mut Output) {
    let (code, opaque, cas) = (req.header.opcode, req.header.opaque, req.header.cas);
    let mut mode = match op {
        Opcode::Add => StoreMode::Add,
        Opcode::Replace => StoreMode::Replace,
        Opcode::Append => StoreMode::Append,
        Opcode::Prepend => StoreMode::Prepend,
        _ => StoreMode::Set,
    };
    let appending = matches!(mode, StoreMode::Append | StoreMode::Prepend);
    if cas != 0 && !appending {
        mode = StoreMode::Cas;
    }
    let (flags, exptime) = if appending { (0, 0) } else { (req.extra_u32(0), req.extra_u32(4)) };
    let exptime = svc.core.clock.expiry(i64::from(exptime));
    let store = StoreRequest::new(mode, req.key, req.value).with_flags(flags).with_exptime(exptime).with_cas(cas);
    let Ok(result) = svc.store(Origin::Binary, &store) else { return };
    let status = match result {
        StoreResult::Stored { cas, .. } => {
            if !quiet {
                write_response(out, code, Status::Success, opaque, cas, &[], &[], &[]);
            }
            return;
        }
        StoreResult::Exists => Status::KeyExists,
        StoreResult::NotFound => Status::KeyNotFound,
        StoreResult::NotStored | StoreResult::TooLarge | StoreResult::OutOfMemory => match op {
            Opcode::Add => Status::KeyExists,
            Opcode::Replace => Status::KeyNotFound,
            _ => Status::NotStored,
        },
    };
    write_error(out, code, status, opaque);
}

fn delete(svc: &mut Service<'_>, quiet: bool, req: &Request<'_>, out: &mut Output) {
    let (code, opaque) = (req.header.opcode, req.header.opaque);
    // The binary header's CAS is "none" when 0.
    let cas = (req.header.cas != 0).then_some(req.header.cas);
    let del = DeleteRequest { key: req.key, cas, ..DeleteRequest::default() };
    let Ok(result) = svc.delete(Origin::Binary, &del) else { return };
    match result {
        DeleteResult::Deleted => {
            if !quiet {
                write_response(out, code, Status::Success, opaque, 0, &[], &[], &[]);
            }
        }
        DeleteResult::NotFound => write_error(out, code, Status::KeyNotFound, opaque),
        DeleteResult::Exists => write_error(out, code, Status::KeyExists, opaque),
        DeleteResult::NotStored => write_error(out, code, Status::NotStored, opaque),
    }
}

fn delta(svc: &mut Service<'_>, op: Opcode, quiet: bool, req: &Request<'_>, out: &mut Output) {
    let (code, opaque) = (req.header.opcode, req.header.opaque);
    let expiration = req.extra_u32(16);
    let delta = DeltaRequest {
        key: req.key,
        mode: if op == Opcode::Increment { DeltaMode::Incr } else { DeltaMode::Decr },
        delta: req.extra_u64(0),
        cas: req.header.cas,
        vivify: (expiration != u32::MAX).then(|| svc.core.clock.expiry(i64::from(expiration))),
        initial: req.extra_u64(8),
        touch: None,
        in_place: true,
        new_cas: None,
    };
    let Ok(result) = svc.delta(&delta) else { return };
    let status = match result {
        DeltaResult::Ok { value, cas, .. } => {
            if !quiet {
                write_response(out, code, Status::Success, opaque, cas, &[], &[], &value.to_be_bytes());
            }
            return;
        }
        DeltaResult::NotFound => Status::KeyNotFound,
        DeltaResult::NonNumeric => Status::DeltaBadValue,
        DeltaResult::Exists => Status::KeyExists,
        DeltaResult::NotStored => Status::NotStored,
        DeltaResult::OutOfMemory => Status::OutOfMemory,
    };
    write_error(out, code, status, opaque);
}
