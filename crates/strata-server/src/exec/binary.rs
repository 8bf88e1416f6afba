//! The binary protocol's commands, answered as memcached 1.6's `proto_bin.c`
//! answers them: statuses with memcached's error texts, quiet commands silent
//! unless they fail (GETQ-style reads silent on a miss), GETK misses carrying
//! the key, TOUCH answering flags without the value.

use strata_proto::binary::{write_error, write_response, Opcode, Request, Status};
use strata_store::{
    DeleteRequest, DeleteResult, DeltaMode, DeltaRequest, DeltaResult, GetAction, GetOptions,
    StoreMode, StoreRequest, StoreResult,
};

use super::stats_cmd::{collect, Group};
use super::{Executor, Flow};
use crate::stats::WorkerStats;

impl<'a> Executor<'a> {
    /// Execute one validated binary request. `op` is the loud opcode; the
    /// reply carries the opcode the client sent.
    pub fn binary(&self, op: Opcode, quiet: bool, req: &Request<'_>, out: &mut Vec<u8>) -> Flow {
        let code = req.header.opcode;
        let opaque = req.header.opaque;
        match op {
            Opcode::Get | Opcode::GetK | Opcode::Gat | Opcode::GatK | Opcode::Touch => {
                return self.bin_get(op, quiet, req, out);
            }
            Opcode::Set | Opcode::Add | Opcode::Replace | Opcode::Append | Opcode::Prepend => {
                return self.bin_store(op, quiet, req, out);
            }
            Opcode::Delete => return self.bin_delete(quiet, req, out),
            Opcode::Increment | Opcode::Decrement => return self.bin_delta(op, quiet, req, out),
            Opcode::Quit => {
                if !quiet {
                    write_response(out, code, Status::Success, opaque, 0, &[], &[], &[]);
                }
                return Flow::CloseAfterWrite;
            }
            Opcode::Flush => {
                WorkerStats::incr(&self.stats.cmd_flush);
                if !self.shared.settings.flush_enabled {
                    write_error(out, code, Status::AuthError, opaque);
                } else {
                    let delay = if req.extras.len() == 4 { req.extra_u32(0) } else { 0 };
                    let at = if delay > 0 { self.shared.clock.expiry(i64::from(delay)) } else { 0 };
                    self.shared.journal.record_flush(strata_store::clock::unix_time());
                    self.shared.engine.flush_all(at, self.now());
                    if !quiet {
                        write_response(out, code, Status::Success, opaque, 0, &[], &[], &[]);
                    }
                }
            }
            Opcode::Noop => write_response(out, code, Status::Success, opaque, 0, &[], &[], &[]),
            Opcode::Version => {
                let version = crate::settings::VERSION.as_bytes();
                write_response(out, code, Status::Success, opaque, 0, &[], &[], version);
            }
            Opcode::Stat if req.key.starts_with(b"detail") => crate::ops::detail::binary_stat(self, req, out),
            Opcode::Stat => match collect(self, req.key) {
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

    fn bin_get(&self, op: Opcode, quiet: bool, req: &Request<'_>, out: &mut Vec<u8>) -> Flow {
        let (code, opaque) = (req.header.opcode, req.header.opaque);
        let touching = matches!(op, Opcode::Gat | Opcode::GatK | Opcode::Touch);
        let touch = touching.then(|| self.shared.clock.expiry(i64::from(req.extra_u32(0))));
        let with_key = matches!(op, Opcode::GetK | Opcode::GatK);
        let with_value = op != Opcode::Touch;
        if !self.resuming(0) {
            crate::ops::watch::fetched(self, req.key);
        }
        let opts = GetOptions { touch, ..GetOptions::default() };
        let mark = out.len();
        let read = self.read_item(req.key, 0, opts, self.now(), &mut |item, _| {
            let flags = item.meta.flags.to_be_bytes();
            let key = if with_key { req.key } else { &[] };
            let value = if with_value { item.value } else { &[] };
            write_response(out, code, Status::Success, opaque, item.meta.cas, &flags, key, value);
            GetAction::default()
        });
        let hit = match read {
            super::flash::Read::Hit => true,
            super::flash::Read::Miss => false,
            super::flash::Read::Parked => {
                out.truncate(mark);
                return Flow::Continue;
            }
        };
        let s = self.stats;
        if touching {
            WorkerStats::incr(&s.cmd_touch);
            WorkerStats::incr(if hit { &s.touch_hits } else { &s.touch_misses });
        } else {
            WorkerStats::incr(&s.cmd_get);
            WorkerStats::incr(if hit { &s.get_hits } else { &s.get_misses });
        }
        if self.shared.ops.detail.on() {
            self.shared.ops.detail.record_get(req.key, hit);
        }
        if !hit && !quiet {
            if with_key {
                write_response(out, code, Status::KeyNotFound, opaque, 0, &[], req.key, &[]);
            } else {
                write_error(out, code, Status::KeyNotFound, opaque);
            }
        }
        Flow::Continue
    }

    fn bin_store(&self, op: Opcode, quiet: bool, req: &Request<'_>, out: &mut Vec<u8>) -> Flow {
        let (code, opaque, cas) = (req.header.opcode, req.header.opaque, req.header.cas);
        if op != Opcode::Set && self.flash_first(req.key, 0).is_err() {
            return Flow::Continue;
        }
        WorkerStats::incr(&self.stats.cmd_set);
        if self.shared.ops.detail.on() {
            self.shared.ops.detail.record_set(req.key);
        }
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
        let store = StoreRequest {
            key: req.key,
            value: req.value,
            flags,
            exptime: self.shared.clock.expiry(i64::from(exptime)),
            mode,
            cas,
            invalidate: false,
            vivify_ttl: None,
            key_binary: false,
            new_cas: None,
        };
        let before = crate::ops::watch::fetched(self, req.key);
        self.journal(req.key);
        let result = self.shared.engine.store(&store, self.now());
        self.count_store(mode, result);
        let ttl = crate::ops::watch::ttl_left(self, store.exptime);
        crate::ops::watch::stored(self, req.key, crate::ops::watch::StoreCmd::of(mode), result, flags, req.value.len(), ttl, before);
        let status = match result {
            StoreResult::Stored { cas, .. } => {
                if !quiet {
                    write_response(out, code, Status::Success, opaque, cas, &[], &[], &[]);
                }
                return Flow::Continue;
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
        Flow::Continue
    }

    fn bin_delete(&self, quiet: bool, req: &Request<'_>, out: &mut Vec<u8>) -> Flow {
        if self.flash_first(req.key, 0).is_err() {
            return Flow::Continue;
        }
        let (code, opaque) = (req.header.opcode, req.header.opaque);
        // The binary header's CAS is "none" when 0.
        let cas = (req.header.cas != 0).then_some(req.header.cas);
        let del = DeleteRequest { key: req.key, cas, ..DeleteRequest::default() };
        if self.shared.ops.detail.on() {
            self.shared.ops.detail.record_delete(req.key);
        }
        self.journal(req.key);
        match self.shared.engine.delete(&del, self.now()) {
            DeleteResult::Deleted => {
                WorkerStats::incr(&self.stats.delete_hits);
                if !quiet {
                    write_response(out, code, Status::Success, opaque, 0, &[], &[], &[]);
                }
            }
            DeleteResult::NotFound => {
                WorkerStats::incr(&self.stats.delete_misses);
                write_error(out, code, Status::KeyNotFound, opaque);
            }
            DeleteResult::Exists => write_error(out, code, Status::KeyExists, opaque),
            DeleteResult::NotStored => write_error(out, code, Status::NotStored, opaque),
        }
        Flow::Continue
    }

    fn bin_delta(&self, op: Opcode, quiet: bool, req: &Request<'_>, out: &mut Vec<u8>) -> Flow {
        if self.flash_first(req.key, 0).is_err() {
            return Flow::Continue;
        }
        let (code, opaque) = (req.header.opcode, req.header.opaque);
        let incr = op == Opcode::Increment;
        let expiration = req.extra_u32(16);
        let delta = DeltaRequest {
            key: req.key,
            mode: if incr { DeltaMode::Incr } else { DeltaMode::Decr },
            delta: req.extra_u64(0),
            cas: req.header.cas,
            vivify: (expiration != u32::MAX).then(|| self.shared.clock.expiry(i64::from(expiration))),
            initial: req.extra_u64(8),
            touch: None,
            in_place: true,
            new_cas: None,
        };
        let s = self.stats;
        self.journal(req.key);
        let status = match self.shared.engine.delta(&delta, self.now()) {
            DeltaResult::Ok { value, cas, .. } => {
                WorkerStats::incr(if incr { &s.incr_hits } else { &s.decr_hits });
                if !quiet {
                    write_response(out, code, Status::Success, opaque, cas, &[], &[], &value.to_be_bytes());
                }
                return Flow::Continue;
            }
            DeltaResult::NotFound => {
                WorkerStats::incr(if incr { &s.incr_misses } else { &s.decr_misses });
                Status::KeyNotFound
            }
            DeltaResult::NonNumeric => Status::DeltaBadValue,
            DeltaResult::Exists => Status::KeyExists,
            DeltaResult::NotStored => Status::NotStored,
            DeltaResult::OutOfMemory => Status::OutOfMemory,
        };
        write_error(out, code, status, opaque);
        Flow::Continue
    }
}
