//! Operator features that sit beside the request path: the slab view of
//! the segment store (`slab_view.rs`: `stats items|slabs|sizes`), `stats
//! conns` (`conns.rs`), key dumps (`dump.rs`, driving `dump_feed.rs`'s
//! threads or a walk of its own, both printing through `dump_lines.rs`),
//! the LRU crawler and the `lru`/`slabs` commands (`crawler.rs`),
//! per-prefix statistics (`detail.rs`), `watch` (`watch.rs`, over
//! `logger.rs`), `-vv` and
//! `verbosity` (`verbose.rs`), the flash tier's `extstore` tunables
//! (`extstore.rs`), the Prometheus `/metrics` endpoint (`metrics.rs`
//! renders, `metrics_http.rs` serves), `stats latency` (`latency.rs`) and
//! `stats hotkeys` (`hotkeys.rs`), whose per-worker state lives in each
//! worker's `WorkerStats::requests`, and `stats mrc` (`mrc.rs` over
//! `mrc_sim.rs`, state in `Shared::mrc`).
//!
//! Their run-time state is one [`OpsState`] in `Shared`; the request path
//! reads `detail`'s on/off flag, the verbosity level and `watch`'s stream
//! mask (one relaxed load each per request), and `latency.rs` and
//! `hotkeys.rs` record every request unless switched off.

pub(crate) mod conns;
pub mod crawler;
pub mod detail;
pub mod dump;
pub mod extstore;

pub mod dump_feed;
mod dump_lines;
pub(crate) mod slab_view;
pub mod logger;
pub mod verbose;
pub mod watch;
pub mod latency;
pub mod hotkeys;
pub mod mrc;
pub mod mrc_feed;
pub mod mrc_index;
pub mod mrc_sim;

use strata_proto::admin::Admin;
use strata_proto::Tokens;

use crate::ctx::Ctx;
use crate::settings::Settings;

/// Run-time state of the operator features.
pub struct OpsState {
    pub crawler: crawler::Crawler,
    pub detail: detail::Detail,
    /// The log path behind `watch` (`logger.rs`).
    pub log: logger::Logger,
    /// `-v` / `verbosity N` (`verbose.rs`).
    pub verbose: verbose::Verbosity,
}

impl OpsState {
    pub fn new(settings: &Settings) -> OpsState {
        OpsState {
            crawler: crawler::Crawler::new(settings),
            detail: detail::Detail::new(settings),
            log: logger::Logger::new(settings),
            verbose: verbose::Verbosity::new(settings.verbose),
        }
    }
}

/// What a command hands its connection: a key dump or a `watch` to run
/// before its next request (`dump::pump`), or nothing.
pub type Started = Option<Box<dump::Dump>>;

/// `lru_crawler ...`, `lru ...`, `slabs ...`.
pub fn admin(ctx: &Ctx<'_>, cmd: Admin, out: &mut Vec<u8>) -> Started {
    let line = match cmd {
        Admin::Dump { mg, classes } => return dump::start_crawler_dump(ctx, mg, classes, out),
        Admin::Crawl(classes) => crawler::crawl(ctx, classes),
        Admin::Tocrawl(n) => crawler::set_tocrawl(ctx, n),
        Admin::Sleep(us) => crawler::set_sleep(ctx, us),
        Admin::Enable(on) => crawler::enable(ctx, on),
        Admin::Reassign { src, dst } => crawler::reassign(ctx, src, dst),
        Admin::Watch(mask) => return watch::start(ctx, mask, out).map(|w| Box::new(dump::Dump::Watch(w))),
        Admin::Extstore { set, noreply } => {
            let line = extstore::command(ctx, set);
            if !noreply {
                push_line(out, line);
            }
            return None;
        }
        Admin::Journal { since_unix } => {
            crate::journal::answer(&ctx.shared.journal, since_unix, strata_store::clock::unix_time(), out);
            return None;
        }
        Admin::Reply(line) => line,
    };
    refused(out, line)
}

/// `stats detail ...` and `stats cachedump ...` over the text protocol;
/// None for any other group.
pub fn stats(ctx: &Ctx<'_>, args: &Tokens<'_>, out: &mut Vec<u8>) -> Option<Started> {
    let group = args.get(1);
    if group.is_empty() {
        return None;
    }
    // memcached matches a group by prefix (`stats d` is `stats detail`;
    // `stats c` is `stats cachedump`, tried before `conns`).
    if b"detail".starts_with(group) {
        detail::command(ctx, args, out);
        return Some(None);
    }
    if b"cachedump".starts_with(group) {
        return Some(dump::start_cachedump(ctx, args, out));
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
