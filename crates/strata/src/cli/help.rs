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
   - pin_threads:         pin worker N to the N-th allowed CPU
   - udp_max_reply:       largest reply a UDP request may draw, bytes (default: 65536; 0: no cap)
   - sasl_pwdb:           SASL password file (user:password lines; also MEMCACHED_SASL_PWDB)
   - restart_strict:      with -e, refuse to start on a memory file that cannot be used
   - memory_pressure_yield: a fixed -m gives memory back when the cgroup or host runs short
   - no_latency_stats:    do not collect 'stats latency' (default: collected)
   - no_hotkeys:          do not sample keys for 'stats hotkeys' (default: sampled)
   - no_mrc:              do not simulate the miss-ratio curve of 'stats mrc' (default: simulated)

   - Flash tier (ext_*, memcached's extstore options)
   - ext_path:            file to write to for the flash tier, repeatable.
                          ie: ext_path=/mnt/d1/strata.flash:1G
   - ext_page_size:       size in megabytes of flash pages. (default: 64)
   - ext_wbuf_size:       size in megabytes of page write buffers. (default: 4)
   - ext_threads:         number of flash I/O threads (epoll engine). (default: 1)
   - ext_item_size:       store items larger than this (bytes, default 512)
   - ext_item_age:        store items idle at least this long (seconds, default: no age limit)
   - ext_low_ttl:         keep items with fewer seconds to live in RAM (default: 0)
   - ext_recache_rate:    recache an item every N accesses (default: 2000)
   - ext_io_depth, ext_compact_under, ext_drop_under, ext_max_frag,
     ext_max_sleep, ext_drop_unread: accepted and shown (see docs/COMPATIBILITY.md)
   memcached's other options are accepted and checked as memcached checks them
   (hashpower, tail_repair_time, hash_algorithm, lru_maintainer, hot_lru_pct,
   warm_lru_pct, hot_max_factor, warm_max_factor, temporary_ttl, slab_reassign,
   slab_automove, slab_automove_ratio, slab_automove_window, no_chunked_items,
   watcher_logbuf_size, worker_logbuf_size, read_buf_mem_limit, no_hashexpand,
   modern, no_modern, inline_ascii_resp, drop_privileges, sock_cookie_id, ...);
   docs/COMPATIBILITY.md says which have no effect on a segment store.
   TLS (ssl_*) and the proxy (proxy_*) are not in Strata.
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
