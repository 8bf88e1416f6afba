//! The binary protocol's commands, answered as memcached 1.6's `proto_bin.c`
//! answers them: statuses with memcached's error texts, quiet commands silent
//! unless they fail (GETQ-style reads silent on a miss), GETK misses carrying
//! the key, TOUCH answering flags without the value.

use strata_proto::binary::{write_error, write_response, Opcode, Request, Status};
use strata_store::{
    DeleteRequest, DeleteResult, DeltaMode, DeltaRequest, DeltaResult, GetAction, GetOptions, StoreMode,
    StoreRequest, StoreResult,
};

use super::Flow;
use crate::report::stats::{collect, Group};
use crate::service::{Origin, Read, ReadAs, Service};

/// Execute one validated binary request. `op` is the loud opcode; the
/// reply carries the opcode the client sent.
pub fn execute(svc: &Service<'_>, op: Opcode, quiet: bool, req: &Request<'_>, out: &mut Vec<u8>) -> Flow {
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
            let at = if delay > 0 { svc.shared.clock.expiry(i64::from(delay)) } else { 0 };
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
        Opcode::Stat if req.key.starts_with(b"detail") => crate::ops::detail::binary_stat(svc, req, out),
        Opcode::Stat => match collect(svc, req.key) {
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

fn get(svc: &Service<'_>, op: Opcode, quiet: bool, req: &Request<'_>, out: &mut Vec<u8>) {
    let (code, opaque) = (req.header.opcode, req.header.opaque);
    let touching = matches!(op, Opcode::Gat | Opcode::GatK | Opcode::Touch);
    let touch = touching.then(|| svc.shared.clock.expiry(i64::from(req.extra_u32(0))));
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

fn store(svc: &Service<'_>, op: Opcode, quiet: bool, req: &Request<'_>, out: &mut Vec<u8>) {
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
    let exptime = svc.shared.clock.expiry(i64::from(exptime));
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

fn delete(svc: &Service<'_>, quiet: bool, req: &Request<'_>, out: &mut Vec<u8>) {
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

fn delta(svc: &Service<'_>, op: Opcode, quiet: bool, req: &Request<'_>, out: &mut Vec<u8>) {
    let (code, opaque) = (req.header.opcode, req.header.opaque);
    let expiration = req.extra_u32(16);
    let delta = DeltaRequest {
        key: req.key,
        mode: if op == Opcode::Increment { DeltaMode::Incr } else { DeltaMode::Decr },
        delta: req.extra_u64(0),
        cas: req.header.cas,
        vivify: (expiration != u32::MAX).then(|| svc.shared.clock.expiry(i64::from(expiration))),
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
