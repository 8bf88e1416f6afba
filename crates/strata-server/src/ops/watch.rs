//! `watch [streams]`: the connection becomes a watcher, as in memcached
//! 1.6.45: `OK`, then log lines (`ts=... gid=... type=...`) until it
//! disconnects; it runs no further command.
//!
//! A watcher is a never-ending key dump: the command hands its connection
//! a [`Watcher`] through the dump slot (`ops/dump.rs`), whose pump, every
//! 1 ms tick, collects the workers' log buffers and moves the watcher's
//! lines into the connection's output (`ops/logger.rs` has the buffers).
//! Dropping the watcher (the connection closed) detaches it.
//!
//! The hooks the request path calls ([`deleted`], ...) cost one relaxed
//! load while nobody watches their stream.

use std::sync::Arc;

use strata_proto::admin::watch as streams;
use strata_proto::number::push_u64;

use super::logger::Sink;
use super::push_line;
use crate::exec::Executor;
use crate::shared::Shared;

/// One attached watcher.
pub struct Watcher {
    sink: Arc<Sink>,
    shared: Arc<Shared>,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.shared.ops.log.detach(&self.sink);
    }
}

impl Watcher {
    /// Collect, then move up to `max_bytes` of this watcher's lines to `out`.
    pub fn refill(&self, out: &mut Vec<u8>, max_bytes: usize) {
        self.shared.ops.log.collect();
        self.sink.drain(out, max_bytes);
    }
}

/// `watch ...`, checked in memcached's order.
pub fn start(exec: &Executor<'_>, mask: Option<u32>, out: &mut Vec<u8>) {
    if !exec.shared.settings.watch_enabled {
        return push_line(out, "CLIENT_ERROR watch commands not allowed");
    }
    if exec.has_stacked_replies(out) {
        return push_line(out, "ERROR cannot pipeline other commands before watch");
    }
    let Some(mask) = mask else {
        return push_line(out, "ERROR");
    };
    if exec.is_datagram() {
        return push_line(out, "WATCHER_FAILED failed to add log watcher");
    }
    let Some(sink) = exec.shared.ops.log.attach(mask) else {
        return push_line(out, "WATCHER_TOO_MANY log watcher limit reached");
    };
    out.extend_from_slice(b"OK\r\n");
    let watcher = Watcher { sink, shared: exec.shared.clone() };
    exec.start_dump(Box::new(super::dump::Dump::watch(watcher)));
}

/// What deleted an item (memcached's `LOG_TYPE_DELETE`, `LOG_TYPE_META_DELETE`).
#[derive(Clone, Copy)]
pub enum DeleteCmd {
    Delete,
    Md,
}

/// A watcher wants `stream`: the request path's check.
#[inline]
pub fn wants(exec: &Executor<'_>, stream: u32) -> bool {
    exec.shared.ops.log.wants(stream)
}

/// `type=deleted key=<k> cmd=<delete|md> clsid=<c> size=<value bytes>`.
/// `item` is (flags, value length) of the deleted item.
#[cold]
pub fn deleted(exec: &Executor<'_>, key: &[u8], item: (u32, usize), cmd: DeleteCmd) {
    let class = class_of(exec, key, item);
    exec.shared.ops.log.log(&exec.shared.worker_stats, exec.stats, streams::DELETIONS, |line| {
        line.extend_from_slice(b"type=deleted key=");
        super::dump::uriencode(key, line);
        line.extend_from_slice(match cmd {
            DeleteCmd::Delete => b" cmd=delete clsid=",
            DeleteCmd::Md => b" cmd=md clsid=",
        });
        push_u64(line, class);
        line.extend_from_slice(b" size=");
        push_u64(line, item.1 as u64);
    });
}

/// The memcached size class of an item (as the dumps compute it).
fn class_of(exec: &Executor<'_>, key: &[u8], (flags, value_len): (u32, usize)) -> u64 {
    let cas = !exec.shared.settings.cas_disabled;
    let size = strata_store::memcached_item_size(key.len(), flags, value_len, cas);
    u64::from(exec.shared.settings.slab_classes().class_of(size))
}

/// The flags and value length of the item under `key`, read without
/// touching it (for a hook that must describe an item about to go).
pub fn peek(exec: &Executor<'_>, key: &[u8]) -> Option<(u32, usize)> {
    let mut found = None;
    let opts = strata_store::GetOptions { no_bump: true, uncounted: true, ..Default::default() };
    exec.shared.engine.get(key, opts, exec.shared.clock.now(), &mut |item, _| {
        found = Some((item.meta.flags, item.value.len()));
        strata_store::GetAction::default()
    });
    found
}
