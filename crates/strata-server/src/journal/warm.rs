//! Warm return: what a server restarted on its memory file does before it
//! listens (so before it serves a single request).
//!
//! 1. The downtime guard: the file's heartbeat says when the previous
//!    process was last alive; away longer than `-o restart_max_downtime`
//!    (or for an unknown time), every restored item is flushed: a cold
//!    start, logged and counted (`restart_cold_reason`).
//! 2. The journal sync (`-o restart_peers`): each peer but this server is
//!    asked (`peer.rs`) for the keys changed since the heartbeat minus
//!    `-o restart_margin`; the restored items with those tags are deleted.
//!    A peer that cannot answer (unreachable, hung past
//!    `-o restart_peer_timeout`, garbage, plain memcached, journal not
//!    reaching back, a flush in the window) makes it a cold start: a
//!    restored item is served only if every peer vouched for it.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use strata_store::{DeleteRequest, Engine, Visit, WalkCursor};

pub use crate::settings::WarmSettings;

use std::sync::Arc;

use super::catchup::CatchUp;
use crate::core::Core;

/// What the start did (`stats`: `restart_*` beside the store's).
#[derive(Clone, Debug, Default)]
pub struct WarmReport {
    /// Seconds between the last heartbeat and this start (-1: unknown).
    pub downtime_s: i64,
    /// Why the restored items were dropped; None: served (minus `dropped_keys`).
    pub cold_reason: Option<String>,
    /// Items the cold start flushed.
    pub cold_items: u64,
    /// Peers whose journals were read, and the key tags they sent.
    pub peers_synced: u64,
    pub tags_received: u64,
    /// Restored items deleted because a peer's journal named them.
    pub keys_dropped: u64,
    pub sync_seconds: f64,
    /// The peers asked (for the catch-up), and the unix second the sync began.
    pub peers_asked: Vec<SocketAddr>,
    pub synced_from_unix: i64,
    /// The previous process's last heartbeat (unix seconds; 0: unknown).
    pub last_alive_unix: i64,
}

/// Guard and sync, on a store just restored (nothing to do otherwise).
/// `listen` are the addresses this server will listen on (to skip itself),
/// `login` the `user pass` token peers want (`-Y`). Returns None when no
/// memory file was restored.
pub fn warm_return(
    settings: &WarmSettings,
    engine: &dyn Engine,
    now: strata_store::RelTime,
    listen: &[SocketAddr],
    login: Option<&[u8]>,
) -> Option<WarmReport> {
    let restart = engine.stats().restart.filter(|r| r.ok)?;
    let started = Instant::now();
    let now_unix = strata_store::clock::unix_time();
    let mut report = WarmReport {
        synced_from_unix: now_unix,
        last_alive_unix: restart.last_alive_unix,
        downtime_s: if restart.last_alive_unix > 0 { (now_unix - restart.last_alive_unix).max(0) } else { -1 },
        ..WarmReport::default()
    };
    let items = restart.items;
    let outcome = match settings.max_downtime_s {
        Some(max) if report.downtime_s < 0 => Err(format!("the time it was away is unknown (restart_max_downtime {max})")),
        Some(max) if report.downtime_s as u64 > max => {
            Err(format!("away {} s, longer than restart_max_downtime {max} s", report.downtime_s))
        }
        _ => sync(settings, restart.last_alive_unix, listen, login, &mut report),
    };
    match outcome {
        Ok(tags) => report.keys_dropped = drop_tagged(engine, &tags, now),
        Err(why) => {
            report.peers_asked.clear();
            engine.flush_all(0, now);
            report.cold_items = items;
            report.cold_reason = Some(why);
        }
    }
    report.sync_seconds = started.elapsed().as_secs_f64();
    Some(report)
}

/// The tags every peer but this server names; Err: start cold.
fn sync(
    settings: &WarmSettings,
    last_alive_unix: i64,
    listen: &[SocketAddr],
    login: Option<&[u8]>,
    report: &mut WarmReport,
) -> Result<HashSet<u32>, String> {
    let mut tags = HashSet::new();
    if settings.peers.is_empty() {
        return Ok(tags);
    }
    if last_alive_unix <= 0 {
        return Err("the memory file has no heartbeat time to sync from".into());
    }
    let since = last_alive_unix - settings.margin_s as i64;
    let timeout = Duration::from_millis(settings.peer_timeout_ms.max(1));
    for peer in &settings.peers {
        let addr = super::peer::resolve(peer)?;
        if super::peer::is_self(addr, listen) {
            continue;
        }
        let got = ask_retrying(addr, since, last_alive_unix, timeout, login).map_err(|e| format!("peer {peer}: {e}"))?;
        report.peers_asked.push(addr);
        report.peers_synced += 1;
        report.tags_received += got.len() as u64;
        tags.extend(got);
    }
    Ok(tags)
}

/// Ask `addr`, again every 100 ms while it cannot be reached, until
/// `timeout` has passed (a peer restarting at the same moment listens a
/// little later).
fn ask_retrying(
    addr: SocketAddr,
    since: i64,
    born_by_unix: i64,
    timeout: Duration,
    login: Option<&[u8]>,
) -> Result<Vec<u32>, super::peer::AskError> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match super::peer::ask(addr, since, born_by_unix, left.max(Duration::from_millis(1)), login) {
            Err(e) if e.gone && left > Duration::from_millis(100) => std::thread::sleep(Duration::from_millis(100)),
            other => return other,
        }
    }
}

/// Delete every item whose key's tag is in `tags`; the count deleted.
fn drop_tagged(engine: &dyn Engine, tags: &HashSet<u32>, now: strata_store::RelTime) -> u64 {
    if tags.is_empty() {
        return 0;
    }
    let mut keys: Vec<Vec<u8>> = Vec::new();
    // Items on a flash tier were restored too: the walk reads them (blocking
    // reads are fine here, nothing is served yet).
    let mut cursor = if engine.flash().is_some() { WalkCursor::with_flash() } else { WalkCursor::default() };
    while !engine.walk(&mut cursor, 4096, now, &mut |item, visit| {
        if visit == Visit::Live && tags.contains(&super::tag(item.key)) {
            keys.push(item.key.to_vec());
        }
        false
    }) {}
    let mut dropped = 0;
    for key in &keys {
        let req = DeleteRequest { key, ..DeleteRequest::default() };
        if matches!(engine.delete(&req, now), strata_store::DeleteResult::Deleted) {
            dropped += 1;
        }
    }
    dropped
}

impl WarmReport {
    /// The log line.
    pub fn line(&self) -> String {
        match &self.cold_reason {
            Some(why) => format!("warm return: {why}; {} restored items dropped (cold start)", self.cold_items),
            None => format!(
                "warm return: away {} s; {} peers synced, {} changed keys named, {} restored items dropped ({:.3} s)",
                self.downtime_s, self.peers_synced, self.tags_received, self.keys_dropped, self.sync_seconds
            ),
        }
    }
}

/// [`warm_return`] for `Server::start`: this server's settings, its clock,
/// the `-Y` file's first login; the outcome logged.
pub fn before_listening(settings: &crate::settings::Settings, engine: &dyn Engine) -> Option<WarmReport> {
    let clock = engine.clock_origin().map_or_else(strata_store::Clock::new, strata_store::Clock::resuming);
    let login = peer_login(settings);
    let report = warm_return(&settings.warm, engine, clock.now(), &settings.tcp_listen, login.as_deref())?;
    crate::log_line!("strata: {}", report.line());
    Some(report)
}

/// The `user pass` token peers want (`-Y`), if any.
pub fn peer_login(settings: &crate::settings::Settings) -> Option<Vec<u8>> {
    settings.auth_file.as_deref().and_then(first_login)
}

/// A warm return's part of the runtime: what the start did about
/// staleness (None: no memory file was restored), and the catch-up that
/// goes on after listening.
pub struct WarmReturn {
    pub report: Option<WarmReport>,
    /// After a warm return that asked peers: peers polled for a while
    /// (`catchup.rs`); the request path's hook checks it before a key.
    pub catchup: Arc<CatchUp>,
}

impl WarmReturn {
    /// The state after `report` (a catch-up armed when the start synced
    /// from peers and `-o restart_catchup` is on).
    pub fn new(report: Option<WarmReport>, core: &Core) -> WarmReturn {
        let synced = report.as_ref().is_some_and(|w| w.cold_reason.is_none() && !w.peers_asked.is_empty());
        let catchup = match synced && core.settings.warm.catchup_s > 0 {
            true => CatchUp::started(core.engine.cas_counter()),
            false => CatchUp::default(),
        };
        WarmReturn { report, catchup: Arc::new(catchup) }
    }

    /// Start the catch-up (`catchup.rs`) on a server that listened after a
    /// warm return that asked peers.
    pub fn after_listening(&self, core: &Arc<Core>) {
        let Some(w) = self.report.as_ref() else { return };
        if w.cold_reason.is_some() || w.peers_asked.is_empty() || !self.catchup.is_active() {
            return;
        }
        let login = peer_login(&core.settings);
        super::catchup::spawn(core.clone(), self.catchup.clone(), w.peers_asked.clone(), w.synced_from_unix, w.last_alive_unix, login);
    }

    /// `stats` (and `stats journal`) lines of a start on a memory file.
    pub fn lines(&self, out: &mut dyn FnMut(&str, String)) {
        warm_lines(self.report.as_ref(), &self.catchup, out);
    }
}

/// `user pass` from the first `user:password` line of a `-Y` file.
fn first_login(path: &std::path::Path) -> Option<Vec<u8>> {
    let data = std::fs::read(path).ok()?;
    let line = data.split(|&b| b == b'\n').map(|l| l.strip_suffix(b"\r").unwrap_or(l)).find(|l| !l.is_empty())?;
    let colon = line.iter().position(|&b| b == b':')?;
    let mut token = line[..colon].to_vec();
    token.push(b' ');
    token.extend_from_slice(&line[colon + 1..]);
    Some(token)
}

/// `stats journal` lines (memcached's general `stats` keeps its own list).
pub fn journal_lines(journal: &super::Journal, out: &mut dyn FnMut(&str, String)) {
    use std::sync::atomic::Ordering::Relaxed;
    out("journal_entries", journal.capacity().to_string());
    out("journal_bytes", journal.bytes().to_string());
    out("journal_recorded", journal.recorded().to_string());
    out("journal_covers_from", journal.covers_from_unix().unwrap_or(0).to_string());
    // Kept beside the memory file: went on from the previous process's
    // journal, born with the memory file (it answers for any window from
    // its birth), and the downtime it went on across.
    out("journal_continued", u8::from(journal.continued()).to_string());
    out("journal_born", journal.born_unix().unwrap_or(0).to_string());
    out("journal_down_seconds", journal.down.map_or(0, |(from, to)| (to - from).max(0)).to_string());
    out("journal_requests_served", journal.served.load(Relaxed).to_string());
    out("journal_requests_refused", journal.refused.load(Relaxed).to_string());
}

/// `stats` (and `stats journal`) lines of a start on a memory file.
fn warm_lines(warm: Option<&WarmReport>, catchup: &CatchUp, out: &mut dyn FnMut(&str, String)) {
    use std::sync::atomic::Ordering::Relaxed;
    let Some(w) = warm else { return };
    out("restart_downtime_seconds", w.downtime_s.to_string());
    out("restart_cold", u8::from(w.cold_reason.is_some()).to_string());
    // A stats value is one token: the reason with its spaces as underscores.
    out("restart_cold_reason", w.cold_reason.as_deref().unwrap_or("none").replace([' ', '\r', '\n'], "_"));
    out("restart_cold_items", w.cold_items.to_string());
    out("restart_peers_synced", w.peers_synced.to_string());
    out("restart_sync_tags", w.tags_received.to_string());
    out("restart_sync_dropped", w.keys_dropped.to_string());
    out("restart_sync_seconds", format!("{:.6}", w.sync_seconds));
    out("restart_catchup_active", u8::from(catchup.is_active()).to_string());
    out("restart_catchup_polls", catchup.polls.load(Relaxed).to_string());
    out("restart_catchup_tags", catchup.named.load(Relaxed).to_string());
    out("restart_catchup_dropped", catchup.dropped.load(Relaxed).to_string());
}

/// `stats settings` lines.
pub fn setting_lines(s: &WarmSettings, out: &mut dyn FnMut(&str, String)) {
    out("journal_size", s.journal_entries.to_string());
    out("restart_max_downtime", s.max_downtime_s.map_or("-1".into(), |v| v.to_string()));
    out("restart_peers", if s.peers.is_empty() { "none".into() } else { s.peers.join(",") });
    out("restart_margin", s.margin_s.to_string());
    out("restart_peer_timeout", s.peer_timeout_ms.to_string());
    out("restart_catchup", s.catchup_s.to_string());
}
