//! The `-o` settings of warm return and its invalidation journal
//! (`journal/`: the journal, the downtime guard, the peers' sync and the
//! catch-up after listening).

/// Default `-o journal_size` at `-m` 256 MiB and above: entries (8 bytes
/// each: 4 MiB). Below that, `journal::default_entries`.
pub const JOURNAL_DEFAULT_ENTRIES: usize = 1 << 19;
/// Largest `-o journal_size` accepted (2 GiB of slots).
pub const JOURNAL_MAX_ENTRIES: usize = 1 << 28;

/// The `-o` settings of warm return.
#[derive(Clone, Debug)]
pub struct WarmSettings {
    /// `journal_size`: journal entries (0: off).
    pub journal_entries: usize,
    /// `restart_max_downtime`: seconds away after which restored items are dropped.
    pub max_downtime_s: Option<u64>,
    /// `restart_peers`: HOST:PORT of every node (this one is skipped).
    pub peers: Vec<String>,
    /// `restart_margin`: seconds asked for before the last heartbeat.
    pub margin_s: u64,
    /// `restart_peer_timeout`: milliseconds a peer has to answer in full.
    pub peer_timeout_ms: u64,
    /// `restart_catchup`: seconds of polling peers after listening (0: off).
    pub catchup_s: u64,
}

impl Default for WarmSettings {
    fn default() -> Self {
        WarmSettings { journal_entries: JOURNAL_DEFAULT_ENTRIES, max_downtime_s: None, peers: Vec::new(), margin_s: 2, peer_timeout_ms: 2000, catchup_s: 30 }
    }
}
