//! Operator features that sit beside the request path: the slab view of
//! the segment store (`slab_view.rs`: `stats items|slabs|sizes`), `stats
//! conns` (`conns.rs`), key dumps (`dump.rs`), the LRU crawler and the
//! `lru`/`slabs` commands (`crawler.rs`), per-prefix statistics
//! (`detail.rs`), `watch` (`watch.rs`, over `logger.rs`), `-vv` and
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
pub(crate) mod slab_view;
pub mod logger;
pub mod metrics;
pub mod metrics_http;
pub mod verbose;
pub mod watch;
pub mod latency;
pub mod hotkeys;
pub mod mrc;
pub mod mrc_sim;

use strata_proto::admin::Admin;
use strata_proto::Tokens;

use crate::exec::Executor;
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

/// `lru_crawler ...`, `lru ...`, `slabs ...`.
pub fn admin(exec: &Executor<'_>, cmd: Admin, out: &mut Vec<u8>) {
    let line = match cmd {
        Admin::Dump { mg, classes } => return dump::start_crawler_dump(exec, mg, classes, out),
        Admin::Crawl(classes) => crawler::crawl(exec, classes),
        Admin::Tocrawl(n) => crawler::set_tocrawl(exec, n),
        Admin::Sleep(us) => crawler::set_sleep(exec, us),
        Admin::Enable(on) => crawler::enable(exec, on),
        Admin::Reassign { src, dst } => crawler::reassign(exec, src, dst),
        Admin::Watch(mask) => return watch::start(exec, mask, out),
        Admin::Extstore { set, noreply } => {
            let line = extstore::command(exec, set);
            if !noreply {
                push_line(out, line);
            }
            return;
        }
        Admin::Journal { since_unix } => {
            return crate::journal::answer(&exec.shared.journal, since_unix, strata_store::clock::unix_time(), out)
        }
        Admin::Reply(line) => line,
    };
    push_line(out, line);
}

/// `stats detail ...` and `stats cachedump ...` over the text protocol;
/// false for any other group.
pub fn stats(exec: &Executor<'_>, args: &Tokens<'_>, out: &mut Vec<u8>) -> bool {
    let group = args.get(1);
    if group.is_empty() {
        return false;
    }
    // memcached matches a group by prefix (`stats d` is `stats detail`;
    // `stats c` is `stats cachedump`, tried before `conns`).
    if b"detail".starts_with(group) {
        detail::command(exec, args, out);
        return true;
    }
    if b"cachedump".starts_with(group) {
        dump::start_cachedump(exec, args, out);
        return true;
    }
    false
}

pub(crate) fn push_line(out: &mut Vec<u8>, line: &str) {
    out.extend_from_slice(line.as_bytes());
    out.extend_from_slice(b"\r\n");
}
