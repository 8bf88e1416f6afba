//! `-h`: the flags in memcached's order with its wording (Strata's
//! differences said in the line), then the `-o` options.

use super::flags::FLAGS;

const EXTENDED: &str = "\
-o, --extended            comma separated list of extended options
                          most options have a 'no_' prefix to disable
   - maxconns_fast:       immediately close new connections after limit (default: enabled)
   - idle_timeout:        timeout for idle connections. (default: 0, no timeout)
   - track_sizes:         enable dynamic reports for 'stats sizes' command.
   - no_lru_crawler:      disable the LRU crawler.
   - lru_crawler_sleep:   microseconds to sleep between items (default: 100)
   - lru_crawler_tocrawl: max items to crawl per slab per run (default: 0, unlimited)
   - slab_chunk_max:      size class geometry reported by stats, in kilobytes (default: 512)
   - slab_sizes:          explicit size classes, e.g. slab_sizes=96-192-384
   - io_engine:           uring, epoll or auto (default: auto; also STRATA_IO_ENGINE)
   - pin_threads:         pin worker N to the N-th allowed CPU and steer each connection
                          to the worker of the CPU its packets arrive on (default: on when
                          the process may use exactly -t CPUs; no_pin_threads: off)
   - udp_max_reply:       largest reply a UDP request may draw, bytes (default: 65536; 0: no cap)
   - sasl_pwdb:           SASL password file (user:password lines; also MEMCACHED_SASL_PWDB)
   - restart_strict:      with -e, refuse to start on a memory file that cannot be used
   - restart_max_downtime: with -e, start cold after an absence longer than this, seconds
   - restart_peers:       with -e, HOST:PORT,... of every node: drop what they saw change
   - restart_margin:      seconds asked for before the last heartbeat (default: 2)
   - restart_peer_timeout: milliseconds a peer has to answer (default: 2000)
   - restart_catchup:     seconds of polling peers after listening (default: 30)
   - journal_size:        invalidation journal entries, 8 bytes each (default: -m/64 bytes' worth, 65536 to 524288; 0: off)
   - handover:            unix control socket PATH: a restart with the same flags takes the
                          listeners and open connections over from the running process

   - memory_pressure_yield: a fixed -m gives memory back when the cgroup or host runs short
   - no_latency_stats:    do not collect 'stats latency' (default: collected)
   - no_hotkeys:          do not sample keys for 'stats hotkeys' (default: sampled)
   - no_mrc:              do not simulate the miss-ratio curve of 'stats mrc' (default: simulated)

   - Flash tier (ext_*, memcached's extstore options)
   - ext_path:            file to write to for the flash tier, repeatable.
                          ie: ext_path=/mnt/d1/strata.flash:1G
   - ext_page_size:       size in megabytes of flash pages. (default: 64, smaller
                          for files of under 64 pages)
   - ext_wbuf_size:       size in megabytes of page write buffers. (default: 4)
   - ext_threads:         number of flash I/O threads (epoll engine). (default: 1)
   - ext_item_size:       store items larger than this (bytes, default 64; memcached: 512)
   - ext_item_age:        store items idle at least this long (seconds, default: no age limit)
   - ext_low_ttl:         keep items with fewer seconds to live in RAM (default: 0)
   - ext_recache_rate:    recache an item every N accesses (default: 2000)
   - ext_small_item_max:  items of at most this many bytes of key and value go to
                          the small store: sets found by hash, a few bits of RAM an item
                          (default: 512; 0: off)
   - ext_log_share:       percent of the flash files the small store's sets leave to
                          the log (default: 13)
   - ext_set_size:        bytes of a small store's set: 4096, 8192 or 16384 (default: 4096)
   - ext_set_bloom_bits:  Bloom filter bits per set (default: 320)
   - ext_set_threshold:   new items a set must get in a rewrite to take them (default: 1)
   - ext_read_ahead_max:  bytes flash reads queued ahead of their requests may hold,
                          all connections (default: 1/64 of -m, at least 1 MiB; 0: off)
   - ext_compact_under:   compact when fewer than this many pages are ready
                          (default: 1 percent of the pages, at least 3)
   - ext_drop_under:      evict the oldest page (keeping its read items) when fewer
                          than this many are ready and none is under ext_max_frag
                          (default: 1 percent of the pages, at least 3)
   - ext_max_frag:        only defrag pages if they are less full than this pct-wise (default: 0.80)
   - ext_io_depth, ext_max_sleep, ext_drop_unread: accepted and shown
     (see docs/COMPATIBILITY.md)
   memcached's other options are accepted and checked as memcached checks them
   (hashpower, tail_repair_time, hash_algorithm, lru_maintainer, hot_lru_pct,
   warm_lru_pct, hot_max_factor, warm_max_factor, temporary_ttl, slab_reassign,
   slab_automove, slab_automove_ratio, slab_automove_window, no_chunked_items,
   watcher_logbuf_size, worker_logbuf_size, read_buf_mem_limit, no_hashexpand,
   modern, no_modern, inline_ascii_resp, drop_privileges, sock_cookie_id, ...);
   docs/COMPATIBILITY.md says which have no effect on a segment store.
   - ssl_chain_cert:      certificate chain file in PEM format
   - ssl_key:             private key, if not part of the -ssl_chain_cert
   - ssl_keyformat:       private key format (1: PEM, 2: DER) (default: 1, PEM)
   - ssl_verify_mode:     peer certificate verification mode, default is 0(None).
                          valid values are 0(None), 1(Request), 2(Require), or 3(Once)
   - ssl_ciphers:         TLS 1.2 cipher list (OpenSSL names; TLS 1.3 suites always on)
   - ssl_ca_cert:         PEM format file of acceptable client CA's
   - ssl_wbuf_size:       size in kilobytes of per-connection SSL output buffer
                          (default: 16)
   - ssl_session_cache:   enable server-side SSL session cache, to support session
                          resumption
   - ssl_kernel_tls:      accepted; Strata encrypts in user space (rustls)
   - ssl_min_version:     minimum protocol version to accept (default: tlsv1.2)
                          valid values are 2(tlsv1.2), or 3(tlsv1.3).
   - ssl_handshake_timeout: seconds a client has to finish its TLS handshake
                          (Strata's own; default: 10)
   -l notls:<ip>:<port> / btls: / mtls: with -Z: no TLS, TLS without client
   certificates, TLS requiring one, on that listener only.
   The proxy (proxy_*) is not in Strata.
";

pub fn text() -> String {
    let mut out = format!("strata {} (memcached 1.6.45 compatible)\n", env!("CARGO_PKG_VERSION"));
    for flag in FLAGS.iter().filter(|f| f.spec.short != 'o') {
        out.push_str(flag.help);
        out.push('\n');
    }
    out.push_str(EXTENDED);
    out
}
