//! Server settings: everything the command line decides, in one struct that
//! the workers share read-only. Names and defaults are memcached's.
//!
//! Plain data: this module and its files (`tls.rs`, `warm.rs`,
//! `memory.rs`: the settings of TLS, warm return and the memory governor)
//! import no feature, so every part of the server can read its settings
//! without depending on another part. The features re-export the types
//! they own (`tls::TlsSettings`, `journal::WarmSettings`,
//! `memory::GovernorConfig`).

mod memory;
mod tls;
mod warm;

pub use memory::{GovernorConfig, MemorySource};
pub use tls::{min_version_text, ListenTls, TlsSettings, VerifyMode};
pub use warm::{WarmSettings, JOURNAL_DEFAULT_ENTRIES, JOURNAL_MAX_ENTRIES};

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// `-B`: which protocols a connection may speak.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ProtocolChoice {
    /// Decided by the first byte of the connection.
    #[default]
    Auto,
    Ascii,
    Binary,
}

/// `-o io_engine`: how workers wait for and move bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IoEngine {
    /// io_uring when the kernel allows it, else epoll.
    #[default]
    Auto,
    Uring,
    Epoll,
}

#[derive(Clone, Debug)]
pub struct Settings {
    /// `-e`: the memory file the cache lives in (restartable cache).
    pub memory_file: Option<std::path::PathBuf>,
    /// `-o restart_strict`: refuse to start on an unusable memory file.
    pub restart_strict: bool,
    /// Warm return (`journal/`): `-o journal_size`, `restart_max_downtime`,
    /// `restart_peers`, `restart_margin`, `restart_peer_timeout`.
    pub warm: WarmSettings,

    /// `-m auto` or `-o memory_pressure_yield`: the memory governor (`memory/`).
    pub memory_governor: Option<GovernorConfig>,
    /// `-o memory_pressure_yield`.
    pub memory_pressure_yield: bool,
    /// `-o io_engine`.
    pub io_engine: IoEngine,
    /// `-B`.
    pub protocol: ProtocolChoice,
    /// `-l` addresses with `-p` applied; empty with `-s`.
    pub tcp_listen: Vec<SocketAddr>,
    pub tcp_port: u16,
    /// Each `tcp_listen` entry's TLS mode (`-Z`, `-l notls:|btls:|mtls:`);
    /// missing entries are plain.
    pub tcp_listen_tls: Vec<ListenTls>,
    /// `-Z` and `-o ssl_*` (None: TLS off).
    pub tls: Option<TlsSettings>,
    /// `-p 0` turns TCP off (memcached's meaning); `-p -1` is an ephemeral
    /// port, which `tcp_listen` carries as port 0.
    pub tcp_enabled: bool,
    pub udp_port: u16,
    /// `-U` other than 0 (tests may ask for port 0 with this set).
    pub udp_enabled: bool,
    /// `-s`: listen on a unix socket instead of TCP.
    pub unix_socket: Option<PathBuf>,
    /// `-a`: permissions of the unix socket (octal in the CLI).
    pub unix_mask: u32,
    /// `-m`, bytes.
    pub memory_limit_bytes: u64,
    /// `-M`.
    pub evictions_disabled: bool,
    /// `-c`.
    pub max_connections: usize,
    /// `-t`.
    pub threads: usize,
    /// `-R`.
    pub reqs_per_event: usize,
    /// `-C`.
    pub cas_disabled: bool,
    /// `-b`.
    pub backlog: i32,
    /// `-I`, bytes.
    pub item_size_max: usize,
    /// `-A`.
    pub shutdown_enabled: bool,
    /// `-F` turns this off.
    pub flush_enabled: bool,
    /// `-v` count.
    pub verbose: u8,
    /// `-o idle_timeout`, None = never.
    pub idle_timeout: Option<Duration>,
    /// `-o maxconns_fast` (default on): refuse with an error past `-c`.
    pub maxconns_fast: bool,
    /// `-o pin_threads` (Some(true)): worker N pinned to the N-th allowed
    /// CPU, and connections steered to the worker of the CPU their packets
    /// arrive on (`steer.rs`); `-o no_pin_threads` (Some(false)): neither.
    /// None (the default): pinned when the process may use exactly as many
    /// CPUs as it has workers. `Server::start` resolves it.
    pub pin_threads: Option<bool>,
    /// Longest multi-get line accepted before the connection is closed.
    pub max_get_line_bytes: usize,
    /// Bytes of pending replies at which a connection stops reading requests
    /// until the client has read some (a client that never reads cannot make
    /// the server buffer without bound).
    pub max_pending_output_bytes: usize,
    /// `-Y`: text-protocol authentication file (`user:password` lines).
    pub auth_file: Option<PathBuf>,
    /// `-S`: binary SASL PLAIN authentication required.
    pub sasl: bool,
    /// `-o sasl_pwdb` or `MEMCACHED_SASL_PWDB`: SASL password file.
    pub sasl_pwdb: Option<PathBuf>,
    /// `-o udp_max_reply`: largest reply one UDP request may draw; 0 = no
    /// limit (memcached's behaviour). Bounds UDP amplification.
    pub udp_max_reply_bytes: usize,
    /// The size classes memcached would use (`-f`, `-n`, `-I`,
    /// `-o slab_chunk_max`, `-o slab_sizes`): what `stats items`, `stats
    /// slabs`, `me` and the dumps report an item's class by.
    pub slabs: SlabSettings,
    /// `-X` turns this off: `stats cachedump`, `stats detail` and
    /// `lru_crawler metadump|mgdump` are refused.
    pub dumps_enabled: bool,
    /// `-W` turns this off: `watch` is refused.
    pub watch_enabled: bool,
    /// `-D <char>`: the delimiter between a key's prefix and the rest, for
    /// `stats detail`; giving `-D` also turns detail collection on.
    pub detail_delimiter: u8,
    pub detail_enabled: bool,
    /// `-o track_sizes`: `stats sizes` reports a histogram.
    pub track_sizes: bool,
    /// The LRU crawler (`-o no_lru_crawler` turns it off; `lru_crawler
    /// enable|disable` at run time), its pause between items in
    /// microseconds and the most items it checks per class per run (0: all).
    pub lru_crawler: bool,
    pub lru_crawler_sleep_us: u32,
    pub lru_crawler_tocrawl: u32,
    /// `-L`: the kernel offers transparent huge pages and the operator asked
    /// for them; memory the engine maps may be advised `MADV_HUGEPAGE`.
    pub large_pages: bool,
    /// memcached's knobs with no effect on segments, kept for `stats settings`.
    pub tunables: crate::tunables::Tunables,
    /// `-o ext_*`: the flash tier (memcached's extstore options); on when
    /// `ext.paths` is not empty. Its run-time tunables are shared with the
    /// engine (`ext.tunables`, changed by the `extstore` command).
    pub ext: strata_store::ExtConfig,
    /// `-o metrics_listen=ADDR:PORT`: serve Prometheus `/metrics` there
    /// (`ops/metrics_http.rs`); off by default.
    pub metrics_listen: Option<SocketAddr>,
    /// `MEMCACHED_PORT_FILENAME`: where to write the bound ports.
    pub port_file: Option<PathBuf>,
    /// `stats latency` collection (`-o no_latency_stats` turns it off).
    pub latency_stats: bool,
    /// `stats hotkeys` sampling (`-o no_hotkeys` turns it off).
    pub hotkeys: bool,
    /// `stats mrc`'s sampled simulations (`-o no_mrc` turns them off).
    pub mrc: bool,
    /// `-o handover=PATH`: the control socket a restart takes the listeners
    /// and connections over from (`handover/`).
    pub handover: Option<PathBuf>,
    /// Crawls and crawler dumps run on the worker that asked for them, in
    /// its turns, and no dump rests between refills: what the fuzz
    /// harnesses set (`fuzzing/`), so that an input's coverage turns on
    /// its bytes and not on how threads and the clock fell. Not an option
    /// of the command line: a server runs them on threads of their own.
    pub inline_background: bool,
}

/// memcached's slab class geometry (`slabs_init`), kept so tools that read
/// per-class figures see the classes memcached would have.
#[derive(Clone, Debug, PartialEq)]
pub struct SlabSettings {
    /// `-f`, default 1.25.
    pub growth_factor: f64,
    /// `-n`: the smallest chunk's room for key, value and flags (default 48;
    /// the chunk adds memcached's 48-byte item header).
    pub min_size_bytes: usize,
    /// `-o slab_chunk_max`, bytes; 0 = half the slab page (memcached's default).
    pub chunk_max_bytes: usize,
    /// `-o slab_sizes=a-b-c`: explicit chunk sizes instead of the factor.
    pub sizes: Option<Vec<usize>>,
}

impl Default for SlabSettings {
    fn default() -> Self {
        SlabSettings { growth_factor: 1.25, min_size_bytes: 48, chunk_max_bytes: 0, sizes: None }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            io_engine: IoEngine::Auto,
            protocol: ProtocolChoice::Auto,
            tcp_listen: vec![SocketAddr::from(([127, 0, 0, 1], 11211))],
            tcp_port: 11211,
            tcp_listen_tls: Vec::new(),
            tls: None,
            tcp_enabled: true,
            udp_port: 0,
            udp_enabled: false,
            unix_socket: None,
            unix_mask: 0o700,
            memory_limit_bytes: 64 << 20,
            evictions_disabled: false,
            max_connections: 1024,
            threads: 4,
            reqs_per_event: 20,
            cas_disabled: false,
            backlog: 1024,
            item_size_max: 1 << 20,
            shutdown_enabled: false,
            memory_file: None,
            restart_strict: false,
            warm: WarmSettings::default(),

            memory_governor: None,
            memory_pressure_yield: false,
            flush_enabled: true,
            verbose: 0,
            idle_timeout: None,
            maxconns_fast: true,
            pin_threads: None,
            max_get_line_bytes: 2 << 20,
            max_pending_output_bytes: 4 << 20,
            udp_max_reply_bytes: 64 << 10,
            auth_file: None,
            sasl: false,
            sasl_pwdb: None,
            slabs: SlabSettings::default(),
            dumps_enabled: true,
            watch_enabled: true,
            detail_delimiter: b':',
            detail_enabled: false,
            track_sizes: false,
            lru_crawler: true,
            lru_crawler_sleep_us: 100,
            lru_crawler_tocrawl: 0,
            large_pages: false,
            tunables: crate::tunables::Tunables::default(),
            ext: strata_store::ExtConfig::default(),
            metrics_listen: None,
            port_file: None,
            latency_stats: true,
            hotkeys: true,
            mrc: true,
            handover: None,
            inline_background: false,
        }
    }
}

/// The version `version` and `stats` report: the memcached release whose
/// protocol Strata speaks, digits only as memcached prints it (clients parse
/// it as a version number). What Strata itself is goes in
/// [`STRATA_VERSION`] (`STAT strata_version`).
pub const VERSION: &str = "1.6.45";

/// Strata's own release, reported as `STAT strata_version`.
pub const STRATA_VERSION: &str = env!("CARGO_PKG_VERSION");
