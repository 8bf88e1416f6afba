//! memcached's tuning knobs that Strata's segment engine has no use for:
//! the hash table's start size, slab rebalancing, the segmented LRU, NAPI
//! ids (and, the exception, the `watch` buffer sizes `ops/logger.rs` reads). The command line accepts and validates them as
//! memcached 1.6.45 does, and `stats settings` reports them with memcached's
//! names and formats, so an operator's tooling sees what was asked for. None
//! of them changes what the server does; docs/COMPATIBILITY.md lists each.

/// `-o hash_algorithm`: memcached's hash for its table (Strata hashes keys
/// with xxh3 whatever is asked).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HashAlgorithm {
    Jenkins,
    #[default]
    Murmur3,
    Xxh3,
}

impl HashAlgorithm {
    pub fn name(self) -> &'static str {
        match self {
            HashAlgorithm::Jenkins => "jenkins",
            HashAlgorithm::Murmur3 => "murmur3",
            HashAlgorithm::Xxh3 => "xxh3",
        }
    }
}

/// Defaults are memcached 1.6.45's `settings_init()`.
#[derive(Clone, Debug, PartialEq)]
pub struct Tunables {
    /// `-o hashpower=N` (12..=32; 0 = grow from the default).
    pub hashpower_init: u32,
    /// `-o hash_algorithm`.
    pub hash_algorithm: HashAlgorithm,
    /// `-o slab_reassign` / `no_slab_reassign`.
    pub slab_reassign: bool,
    /// `-o slab_automove[=0|1|2]`.
    pub slab_automove: u8,
    /// `-o slab_automove_ratio` (0 < r <= 1).
    pub slab_automove_ratio: f64,
    /// `-o slab_automove_window` (3..=1800).
    pub slab_automove_window: u32,
    /// `-o tail_repair_time`, seconds (0 = off, else at least 10).
    pub tail_repair_time_s: u32,
    /// `-o lru_maintainer` / `no_lru_maintainer` (also `lru_segmented`).
    pub lru_maintainer: bool,
    /// `-o hot_lru_pct`, `warm_lru_pct` (each 1..80, sum <= 80).
    pub hot_lru_pct: u32,
    pub warm_lru_pct: u32,
    /// `-o hot_max_factor`, `warm_max_factor` (> 0).
    pub hot_max_factor: f64,
    pub warm_max_factor: f64,
    /// `-o temporary_ttl=N` turns the temporary LRU on.
    pub temp_lru: bool,
    pub temporary_ttl_s: u32,
    /// `-o watcher_logbuf_size`, `worker_logbuf_size`, given in KiB: the
    /// `watch` buffers' sizes (`ops/logger.rs`), the one pair here in use.
    pub watcher_logbuf_bytes: u32,
    pub worker_logbuf_bytes: u32,
    /// `-o read_buf_mem_limit`, given in MiB (0 = no limit).
    pub read_buf_mem_limit_bytes: u32,
    /// `-N`: NAPI ids for thread selection.
    pub napi_ids: u32,
    /// `-o drop_privileges` / `no_drop_privileges` (seccomp in memcached).
    pub drop_privileges: bool,
    /// `-o sock_cookie_id`.
    pub sock_cookie_id: u32,
    /// `-o slab_automove_freeratio` (an extstore option in memcached).
    pub slab_automove_freeratio: f64,
}

impl Default for Tunables {
    fn default() -> Self {
        Tunables {
            hashpower_init: 0,
            hash_algorithm: HashAlgorithm::Murmur3,
            slab_reassign: true,
            slab_automove: 1,
            slab_automove_ratio: 0.8,
            slab_automove_window: 10,
            tail_repair_time_s: 0,
            lru_maintainer: true,
            hot_lru_pct: 20,
            warm_lru_pct: 40,
            hot_max_factor: 0.2,
            warm_max_factor: 2.0,
            temp_lru: false,
            temporary_ttl_s: 61,
            watcher_logbuf_bytes: 256 << 10,
            worker_logbuf_bytes: 64 << 10,
            read_buf_mem_limit_bytes: 0,
            napi_ids: 0,
            drop_privileges: false,
            sock_cookie_id: 0,
            slab_automove_freeratio: 0.01,
        }
    }
}
