//! Operator features that sit beside the request path: the slab view of
//! the segment store (`slab_view.rs`: `stats items|slabs|sizes`), `stats
//! conns` (`conns.rs`), key dumps (`dump.rs`, driving `dump_feed.rs`'s
//! threads or a walk of its own, both printing through `dump_lines.rs`),
//! the LRU crawler and the `lru`/`slabs` commands (`crawler.rs`),
//! per-prefix statistics (`detail.rs`), `watch` (`watch.rs`, over
//! `logger.rs`), `-vv` and
//! `verbosity` (`verbose.rs`), the flash tier's `extstore` tunables
//! (`extstore.rs`), `stats latency` (`latency.rs`) and
//! `stats hotkeys` (`hotkeys.rs`), whose per-worker state is
//! [`Ops::requests`], and `stats mrc` (`mrc.rs` over `mrc_sim.rs`).
//!
//! Their run-time state is one [`Ops`], built from the core and kept in
//! the runtime; the request path reaches it through the service's hooks
//! (`service/hooks.rs`), reading `detail`'s on/off flag, the verbosity
//! level and `watch`'s stream mask (one relaxed load each per request),
//! and `latency.rs` and `hotkeys.rs` record every request unless switched
//! off. The groups of `stats` that read every feature, `stats memory` and
//! `/metrics` are the runtime's report (`report/`), not a part of ops.

pub mod conns;
pub mod crawler;
pub mod detail;
pub mod dump;
pub mod extstore;

pub mod dump_feed;
mod dump_lines;
pub mod slab_view;
pub mod logger;
pub mod verbose;
pub mod watch;
pub mod latency;
pub mod hotkeys;
pub mod mrc;
pub mod mrc_feed;
pub mod mrc_index;
pub mod mrc_sim;

use std::sync::Arc;

use strata_proto::admin::Admin;
use strata_proto::Tokens;

use crate::core::Core;
use crate::ctx::Ctx;
use crate::output::Output;

/// Run-time state of the operator features.
pub struct Ops {
    pub crawler: Arc<crawler::Crawler>,
    pub detail: detail::Detail,
    /// The log path behind `watch` (`logger.rs`).
    pub log: Arc<logger::Logger>,
    /// `-v` / `verbosity N` (`verbose.rs`).
    pub verbose: verbose::Verbosity,
    /// `stats mrc` (`mrc.rs`), unless `-o no_mrc`.
    pub mrc: Option<Arc<mrc::Mrc>>,
    /// Each worker's latency histograms and hot-key sketch (`latency.rs`,
    /// `hotkeys.rs`), by worker index; written by that worker only.
    pub requests: Vec<latency::WorkerRequests>,
}

impl Ops {
    /// The operator features of `core`: with them, the engine's sampler
    /// (`stats mrc`) and eviction log (`watch evictions`) are installed.
    pub fn new(core: &Arc<Core>) -> Ops {
        let settings = &core.settings;
        let log = Arc::new(logger::Logger::new(settings));
        watch::EvictionWatch::install(core, &log);
        let requests = (0..settings.threads.max(1))
            .map(|_| {
                let r = latency::WorkerRequests::default();
                r.configure(settings);
                r
            })
            .collect();
        Ops {
            crawler: Arc::new(crawler::Crawler::new(settings)),
            detail: detail::Detail::new(settings),
            log,
            verbose: verbose::Verbosity::new(settings.verbose),
            mrc: settings.mrc.then(|| mrc::Mrc::install(core.engine.as_ref(), settings.memory_limit_bytes)),
            requests,
        }
    }
}

/// What a command hands its connection: a key dump or a `watch` to run
/// before its next request (`dump::pump`), or nothing.
pub type Started = Option<Box<dump::Dump>>;

/// `lru_crawler ...`, `lru ...`, `slabs ...`, `watch`, `extstore` (`mj`,
/// the journal's, is answered by the journal: `Admin::Journal` never
/// comes here).
pub fn admin(ops: &Ops, ctx: &Ctx<'_>, cmd: Admin, out: &mut Output) -> Started {
    let line = match cmd {
        Admin::Dump { mg, classes } => return dump::start_crawler_dump(ops, ctx, mg, classes, out),
        Admin::Crawl(classes) => crawler::crawl(&ops.crawler, ctx, classes),
        Admin::Tocrawl(n) => crawler::set_tocrawl(&ops.crawler, n),
        Admin::Sleep(us) => crawler::set_sleep(&ops.crawler, us),
        Admin::Enable(on) => crawler::enable(&ops.crawler, on),
        Admin::Reassign { src, dst } => crawler::reassign(ctx, src, dst),
        Admin::Watch(mask) => return watch::start(&ops.log, ctx, mask, out).map(|w| Box::new(dump::Dump::Watch(w))),
        Admin::Extstore { set, noreply } => {
            let line = extstore::command(ctx, set);
            if !noreply {
                push_line(out, line);
            }
            return None;
        }
        Admin::Journal { .. } => unreachable!("mj is the journal's"),
        Admin::Reply(line) => line,
    };
    refused(out, line)
}

/// `stats detail ...` and `stats cachedump ...` over the text protocol;
/// None for any other group.
pub fn stats(ops: &Ops, ctx: &Ctx<'_>, args: &Tokens<'_>, out: &mut Output) -> Option<Started> {
    let group = args.get(1);
    if group.is_empty() {
        return None;
    }
    // memcached matches a group by prefix (`stats d` is `stats detail`;
    // `stats c` is `stats cachedump`, tried before `conns`).
    if b"detail".starts_with(group) {
        detail::command(&ops.detail, ctx, args, out);
        return Some(None);
    }
    if b"cachedump".starts_with(group) {
        return Some(dump::start_cachedump(ops, ctx, args, out));
    }
    None
}

/// Reply `line`; nothing is started.
pub(crate) fn refused(out: &mut Vec<u8>, line: &str) -> Started {
    push_line(out, line);
    None
}

pub(crate) fn push_line(out: &mut Vec<u8>, line: &str) {
    out.extend_from_slice(line.as_bytes());
    out.extend_from_slice(b"\r\n");
}
