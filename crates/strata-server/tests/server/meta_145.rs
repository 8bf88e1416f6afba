//! Wire tests for the protocol of memcached 1.6.45 where it differs from
//! Debian's 1.6.18 (docs/COMPATIBILITY.md, "Where Strata follows memcached
//! 1.6.45, not 1.6.18"). Every expected reply here was taken from memcached
//! 1.6.45 on the wire. Each case runs on both engines (segments and the
//! map reference), through the connection state machine.

use std::sync::Arc;

use strata_server::conn::{Conn, Progress};
use strata_server::service::Service;
use strata_server::runtime::Runtime;
use strata_server::Settings;
use strata_store::{Clock, Engine, EngineConfig, MapStore, SegStore};

fn engines(cas_disabled: bool) -> Vec<Box<dyn Engine>> {
    let config = EngineConfig { cas_disabled, ..EngineConfig::default() };
    vec![Box::new(SegStore::new(config.clone())), Box::new(MapStore::new(config))]
}

/// Send `input` to a fresh server (per engine) and return the replies,
/// which must be the same on both engines.
fn exchange_with(settings: Settings, input: &str) -> String {
    String::from_utf8_lossy(&exchange_bytes(settings, input.as_bytes())).into_owned()
}

fn exchange_bytes(settings: Settings, input: &[u8]) -> Vec<u8> {
    let mut replies = exchange_per_engine(settings, input);
    assert_eq!(
        without_index_stats(&replies[0]),
        without_index_stats(&replies[1]),
        "segment store and map store disagree on {:?}",
        String::from_utf8_lossy(input)
    );
    replies.swap_remove(0)
}

/// `stats` without the key index's size (`hash_power_level`, `hash_bytes`),
/// which only the segment store reports, and without what belongs to the
/// process, not the server: its CPU time (`rusage_*`, which can cross a
/// 10 ms tick between the two runs) and `reserved_fds` (counted from the
/// process's open descriptors, which the other tests in this binary open
/// and close meanwhile).
fn without_index_stats(reply: &[u8]) -> Vec<u8> {
    reply
        .split_inclusive(|&b| b == b'\n')
        .filter(|line| {
            !line.starts_with(b"STAT hash_power_level ")
                && !line.starts_with(b"STAT hash_bytes ")
                && !line.starts_with(b"STAT rusage_")
                && !line.starts_with(b"STAT reserved_fds ")
        })
        .flatten()
        .copied()
        .collect()
}

/// The replies of each engine (segments, then the map).
fn exchange_per_engine(settings: Settings, input: &[u8]) -> Vec<Vec<u8>> {
    let mut replies = Vec::new();
    for engine in engines(settings.cas_disabled) {
        let shared = Arc::new(Runtime::new(settings.clone(), engine, Clock::starting_at(1_700_000_000)));
        let mut svc = Service::new(&shared, 0);
        let mut conn = Conn::new(false, None);
        conn.input.extend_from_slice(input);
        loop {
            match conn.process(&mut svc, 1000) {
                Progress::Yield | Progress::OutputFull => continue,
                _ => break,
            }
        }
        replies.push(conn.out.to_vec());
    }
    replies
}

fn exchange(input: &str) -> String {
    exchange_with(Settings { threads: 1, ..Settings::default() }, input)
}

#[track_caller]
fn check(input: &str, want: &str) {
    assert_eq!(exchange(input), want, "request {input:?}");
}

#[test]
fn ms_s_reports_the_stored_length() {
    check("ms k 3 s c\r\nabc\r\n", "HD s3 c1\r\n");
    // After append/prepend: the joined length; on a failure: the request's.
    check("ms k 2\r\nab\r\nms k 2 s MA\r\ncd\r\nms k 1 MP s\r\nx\r\n", "HD\r\nHD s4\r\nHD s5\r\n");
    check("ms k 2 s MA\r\nab\r\n", "NS s2\r\n");
    check("ms k 2 MR s c\r\nab\r\n", "NS s2 c0\r\n");
    // Reply flags in request order, quiet hides HD.
    check("ms k 2 O9 k c s\r\nab\r\nms k 1 s q\r\nx\r\nmn\r\n", "HD O9 kk c1 s2\r\nMN\r\n");
}

#[test]
fn ms_e_sets_the_cas_and_leaves_the_counter() {
    check("ms k 3 E500 c\r\nabc\r\nmg k c v\r\nms j 1 c\r\nx\r\n", "HD c500\r\nVA 3 c500\r\nabc\r\nHD c1\r\n");
    // Lower than the current CAS: stored as given.
    check("set k 0 0 1\r\na\r\nset k 0 0 1\r\nb\r\nset k 0 0 1\r\nc\r\nms k 1 E2 c\r\nd\r\nmg k c v\r\n", "STORED\r\nSTORED\r\nSTORED\r\nHD c2\r\nVA 1 c2\r\nd\r\n");
    // E0 on ms means none: the counter numbers it.
    check("ms k 1 E0 c\r\nx\r\n", "HD c1\r\n");
    // With a compare: the new CAS is E; a stale (I) store takes it too.
    check("ms k 1 c\r\na\r\nms k 1 C1 E7 c\r\nb\r\nms k 1 C1 I E3 c\r\nc\r\nmg k c v\r\n", "HD c1\r\nHD c7\r\nHD c3\r\nVA 1 c3 X W\r\nc\r\n");
    // Append keeps the old item's flags; E names the CAS.
    check("ms k 1 F5\r\na\r\nms k 1 MA E40 c\r\nb\r\nmg k c f v\r\n", "HD\r\nHD c40\r\nVA 2 c40 f5\r\nab\r\n");
    // A refused store takes no number: the next one is 1.
    check("ms k 1 MR E9 c\r\nx\r\nms k 1 c\r\nx\r\n", "NS c0\r\nHD c1\r\n");
    check("ms YmI= 2 b k s c E77\r\nab\r\nmg YmI= b k v c\r\n", "HD kYmI= b s2 c77\r\nVA 2 kYmI= b c77\r\nab\r\n");
}

#[test]
fn e_with_cas_disabled_is_ignored() {
    let settings = Settings { threads: 1, cas_disabled: true, ..Settings::default() };
    assert_eq!(exchange_with(settings.clone(), "ms k 1 E500 c\r\nx\r\nmg k c\r\n"), "HD c0\r\nHD c0\r\n");
    assert_eq!(exchange_with(settings, "ma n N0 J1 E5 c\r\nmd n I E6\r\nmg n c\r\n"), "HD c0\r\nHD\r\nHD c0 X W\r\n");
}

#[test]
fn e_on_mg_ma_md() {
    // mg: only an item N creates takes E.
    check("mg nv N30 E55 c v\r\nmg nv E66 c\r\n", "VA 0 c55 W\r\n\r\nHD c55 Z\r\n");
    check("mg nope E5 c\r\n", "EN\r\n");
    // ma: created and updated counters.
    check("ma n N0 J5 E77 c v\r\nma n E99 c v\r\nma n c\r\n", "VA 1 c77\r\n5\r\nVA 1 c99\r\n6\r\nHD c2\r\n");
    // md: with I the stale item takes E; without I or x, E does nothing.
    check("ms m 1\r\n1\r\nmd m E123 I\r\nmg m c v\r\nmd m E300\r\nmg m c\r\n", "HD\r\nHD\r\nVA 1 c123 X W\r\n1\r\nHD\r\nEN\r\n");
    check("md nope E5 I\r\nmd nope x E5\r\n", "NF\r\nNF\r\n");
}

#[test]
fn md_x_empties_the_value_and_keeps_the_item() {
    // The empty item has the F flags (0) and the T TTL (none), and keeps
    // the CAS; with I it is stale and gets a new CAS.
    check(
        "ms q 3 T100 F5\r\nabc\r\nmd q x\r\nmg q v f t c\r\nmd q x I\r\nmg q v c\r\n",
        "HD\r\nHD\r\nVA 0 f0 t-1 c1\r\n\r\nHD\r\nVA 0 c2 X W\r\n\r\n",
    );
    check("ms k 1\r\n1\r\nmd k F5 x\r\nmg k f v\r\n", "HD\r\nHD\r\nVA 0 f5\r\n\r\n");
    check("ms k 1\r\n1\r\nmd k x T100 I\r\nmg k t v\r\n", "HD\r\nHD\r\nVA 0 t100 X W\r\n\r\n");
    check("ms m 1\r\n1\r\nmd m x E200\r\nmg m c v\r\n", "HD\r\nHD\r\nVA 0 c200\r\n\r\n");
    check("ms k 2\r\nab\r\nmd k x q\r\nmd k q\r\nmd k q\r\nmn\r\n", "HD\r\nNF\r\nMN\r\n");
    check("ms k 1 c\r\na\r\nmd k x C9\r\nmd k x C1 k O5\r\n", "HD c1\r\nEX\r\nHD kk O5\r\n");
}

#[test]
fn mg_with_a_matching_cas_answers_hd() {
    check("ms w 3 E42\r\nabc\r\nmg w C42 v\r\nmg w C41 v\r\nmg w C42 v c s\r\n", "HD\r\nHD\r\nVA 3\r\nabc\r\nHD c42 s3\r\n");
}

#[test]
fn ms_append_prepend_autovivify_with_n() {
    check(
        "ms ap 2 MA N30\r\nhi\r\nmg ap v t\r\nms pp 2 MP N30 c\r\nhi\r\nms pp 2 MP N30 c\r\nyo\r\nmg pp v\r\n",
        "HD\r\nVA 2 t30\r\nhi\r\nHD c2\r\nHD c3\r\nVA 4\r\nyohi\r\n",
    );
    check("ms ap 2 MA\r\nhi\r\n", "NS\r\n");
}

#[test]
fn ma_quiet_hides_a_created_counter_too() {
    check("ma qq N0 q\r\nma qq q\r\nmn\r\n", "MN\r\n");
}

#[test]
fn me_exp_is_the_seconds_remaining() {
    let reply = exchange("ms e 3 T100\r\nabc\r\nme e\r\n");
    assert!(reply.starts_with("HD\r\nME e exp=100 la=0 cas=1 fetch=no cls="), "{reply}");
    check("ms e 1\r\nx\r\nme e\r\n", "HD\r\nME e exp=-1 la=0 cas=1 fetch=no cls=1 size=61\r\n");
    // A base64 key is decoded only when a token follows the b.
    check("ms YmI= 2 b\r\nab\r\nme YmI= b\r\n", "HD\r\nEN\r\n");
    let reply = exchange("ms YmI= 2 b\r\nab\r\nme YmI= b x\r\n");
    assert!(reply.starts_with("HD\r\nME YmI= exp=-1"), "{reply}");
}

#[test]
fn meta_flag_errors() {
    check("ms k 2 MEE\r\nab\r\nmg k v\r\n", "HD\r\nVA 2\r\nab\r\n");
    check("ms k 2 M\r\nab\r\n", "CLIENT_ERROR invalid mode for ms M token\r\n");
    check("ms k 2 Ex\r\nab\r\n", "CLIENT_ERROR bad token in command line format\r\n");
    check("mg k E\r\n", "CLIENT_ERROR bad token in command line format\r\n");
    check("md k Ex\r\n", "CLIENT_ERROR bad token in command line format\r\n");
    check("ma k Ex\r\n", "CLIENT_ERROR invalid or duplicate flag\r\n");
    check("md k q q\r\nmd k Z\r\n", "CLIENT_ERROR duplicate flag\r\nCLIENT_ERROR invalid flag\r\n");
    check("ma k M\r\n", "CLIENT_ERROR invalid mode for ma M token\r\n");
    // A flag token must start with a letter or digit: a format error, and
    // ms then does not know its data block (read as a command).
    check("mg k v !\r\n", "CLIENT_ERROR bad command line format\r\n");
    check("ms k 1 !\r\nx\r\n", "CLIENT_ERROR bad command line format\r\nCLIENT_ERROR bad command line format\r\n");
    // Strict numbers: no sign, no overflow of 32-bit flags.
    check("ms f 1 F4294967296\r\nx\r\nmg f f\r\n", "CLIENT_ERROR bad command line format\r\nEN\r\n");
    check("ms f +1 T+5\r\nx\r\n", "CLIENT_ERROR bad command line format\r\nCLIENT_ERROR bad command line format\r\n");
    check("ma n D+1\r\n", "CLIENT_ERROR invalid or duplicate flag\r\n");
    // An over-long opaque on ms is found after the size check.
    let opaque = format!("O{}", "o".repeat(40));
    check(&format!("ms k 2 {opaque}\r\nab\r\nmn\r\n"), "CLIENT_ERROR opaque token too long\r\nMN\r\n");
    let big = "a".repeat(1 << 20);
    check(&format!("ms k {} {opaque}\r\n{big}\r\nmn\r\n", big.len()), "SERVER_ERROR object too large for cache\r\nMN\r\n");
    // x is accepted (and ignored) on every meta command.
    check("ms k 2 x\r\nab\r\nmg k x v\r\n", "HD\r\nVA 2\r\nab\r\n");
    // 20 tokens are allowed, 21 are too many (ms swallows its block).
    check("mg a v c f h k s t O1 q u T1 N1 R1 E1 x P L l\r\n", "VA 0 c1 f0 h0 ka s0 t-1 O1 l0 W\r\n\r\n");
    check("ms a 1 c f h k s t O1 q u T1 N1 R1 E1 x P L I b\r\n1\r\n", "CLIENT_ERROR options flags are too long\r\n");
}

#[test]
fn short_lines_and_too_few_tokens_are_format_errors() {
    const BAD: &str = "CLIENT_ERROR bad command line format\r\n";
    for line in ["\r\n", "\n", "x\r\n", " \r\n", "mn\n", "ab\n", "get\r\n", "gets\r\n", "gat 10\r\n", "incr k\r\n", "decr k\r\n", "touch k\r\n", "delete\r\n", "verbosity\r\n", "verbosity x\r\n", "mg\r\n", "md\r\n", "ma\r\n", "me\r\n", "ms k\r\n"] {
        assert_eq!(exchange(line), BAD, "{line:?}");
    }
    assert_eq!(exchange("ab\r\n"), "ERROR\r\n");
    assert_eq!(exchange(" get a\r\n"), "ERROR\r\n");
    // Too few tokens or a bad length: the block is not known, so it is read
    // as a command ("abc" is one it does not know).
    check("set k 0 0\r\nabc\r\nget k\r\n", "CLIENT_ERROR bad command line format\r\nERROR\r\nEND\r\n");
    check("set a 0 0 x\r\nx\r\n", "CLIENT_ERROR bad command line format\r\nCLIENT_ERROR bad command line format\r\n");
    check("set a 0 0 -1\r\nxyzw\r\n", "CLIENT_ERROR bad command line format\r\nERROR\r\n");
    // The length is known and another field is bad: the block is swallowed.
    check("cas k 0 0 6\r\nabcdef\r\n", BAD);
    check("cas a 0 0 1 x\r\nx\r\n", BAD);
    check("set a x 0 1\r\nx\r\n", BAD);
    check("set a 0 x 1\r\nx\r\n", BAD);
    check("set a x 0 1 noreply\r\nx\r\nmn\r\n", "MN\r\n");
    check("cas f 0 0 1 +1\r\nx\r\n", BAD);
    let long = "k".repeat(251);
    check(&format!("set {long} 0 0 1\r\nx\r\n"), BAD);
    check(&format!("ms {long} 1\r\nx\r\n"), BAD);
    // An over-long key in a get: 1.6.45 sends the line with two CRLFs.
    check(&format!("get a {long} b\r\n"), "CLIENT_ERROR bad command line format\r\n\r\n");
}

#[test]
fn extra_tokens_are_ignored() {
    check("set a 0 0 1\r\n1\r\ndelete a 10\r\ndelete a 0\r\n", "STORED\r\nDELETED\r\nNOT_FOUND\r\n");
    check("set a 0 0 1\r\n1\r\ndelete a b c d\r\n", "STORED\r\nDELETED\r\n");
    check("set a 0 0 1 2 3\r\nx\r\nget a\r\n", "STORED\r\nVALUE a 0 1\r\nx\r\nEND\r\n");
    check("set a 0 0 1 noreply 2\r\nx\r\n", "STORED\r\n");
    check("set n 0 0 1\r\n5\r\nincr n 1 2 3\r\ntouch n 1 2 3\r\n", "STORED\r\n6\r\nTOUCHED\r\n");
    check("verbosity 1 2 3\r\nflush_all 0 2 3\r\n flush_all\r\ncache_memlimit 100 200\r\n", "OK\r\nOK\r\nOK\r\nOK\r\n");
    // Strict numbers in the text commands 1.6.45 parses with mcmc.
    check("set n 0 0 1\r\n5\r\nincr n +5\r\nincr n -0\r\ntouch n +9\r\ngat +5 n\r\n", "STORED\r\nCLIENT_ERROR invalid numeric delta argument\r\nCLIENT_ERROR invalid numeric delta argument\r\nCLIENT_ERROR invalid exptime argument\r\nCLIENT_ERROR invalid exptime argument\r\n");
}

#[test]
fn shutdown_and_version() {
    check("shutdown\r\nshutdown graceful\r\nshutdown now\r\n", "SERVER_ERROR: shutdown not enabled\r\nSERVER_ERROR: shutdown not enabled\r\nSERVER_ERROR: shutdown not enabled\r\n");
    let enabled = Settings { threads: 1, shutdown_enabled: true, ..Settings::default() };
    assert_eq!(exchange_with(enabled, "shutdown now\r\n"), "CLIENT_ERROR invalid shutdown mode\r\n");
    check("version\r\nversion x y\r\n", "VERSION 1.6.45\r\nVERSION 1.6.45\r\n");
    let stats = exchange("stats\r\n");
    let version = format!("STAT version 1.6.45\r\nSTAT strata_version {}\r\n", env!("CARGO_PKG_VERSION"));
    assert!(stats.contains(&version), "{stats}");
}

#[test]
fn binary_version_is_digits_only() {
    // Binary VERSION: magic 0x80, opcode 0x0b, empty body.
    let mut req = vec![0u8; 24];
    req[0] = 0x80;
    req[1] = 0x0b;
    let reply = exchange_bytes(Settings { threads: 1, ..Settings::default() }, &req);
    assert_eq!(&reply[24..], b"1.6.45");
}

#[test]
fn binary_stat_detail_answers_as_memcached() {
    let stat = |key: &[u8]| {
        let mut req = vec![0u8; 24];
        req[0] = 0x80;
        req[1] = 0x10;
        req[2..4].copy_from_slice(&(key.len() as u16).to_be_bytes());
        req[8..12].copy_from_slice(&(key.len() as u32).to_be_bytes());
        req.extend_from_slice(key);
        exchange_bytes(Settings { threads: 1, ..Settings::default() }, &req)
    };
    // on/off: the empty terminating stat, status 0.
    for key in [&b"detail on"[..], b"detail off"] {
        let reply = stat(key);
        assert_eq!(reply.len(), 24, "{key:?}");
        assert_eq!(&reply[6..8], &[0, 0]);
    }
    // dump: one stat "detailed" with the text dump, then the terminator.
    let reply = stat(b"detail dump");
    assert_eq!(&reply[24..24 + 8], b"detailed");
    assert_eq!(&reply[32..37], b"END\r\n");
    assert_eq!(reply.len(), 37 + 24);
    // Anything else: key not found (status 1).
    assert_eq!(&stat(b"detail x")[6..8], &[0, 1]);
}

/// Stats as memcached (1.6.18 and 1.6.45 alike) counts meta commands:
/// `cmd_meta` counts `me` only; an `mg` that applied `T` to a hit is a
/// touch, other hits (and items `N` created) gets, misses get misses; a
/// refused opaque counts nothing.
#[test]
fn meta_stats_count_as_memcached() {
    let long_opaque = format!("O{}", "o".repeat(40));
    let input = format!(
        "ms a 1\r\nx\r\nmg a v\r\nmg a T10\r\nmg nope T10\r\nmg nope v\r\nmg viv N10\r\nmg a {long_opaque}\r\nme a\r\nme nope\r\nmd a I\r\nmd a C999\r\nmd viv x\r\nmd nope\r\nstats\r\n"
    );
    // (Engines differ in `bytes`: each engine is checked on its own.)
    for reply in exchange_per_engine(Settings { threads: 1, ..Settings::default() }, input.as_bytes()) {
        let reply = String::from_utf8_lossy(&reply);
        let stat = |name: &str| {
            let prefix = format!("STAT {name} ");
            reply.lines().find_map(|l| l.strip_prefix(prefix.as_str())).map(str::to_owned).unwrap_or_default()
        };
        let names = ["cmd_get", "get_hits", "get_misses", "cmd_touch", "touch_hits", "touch_misses", "cmd_meta", "delete_hits", "delete_misses"];
        let got: Vec<String> = names.iter().map(|n| stat(n)).collect();
        assert_eq!(got, ["4", "2", "2", "1", "1", "0", "2", "1", "2"], "{reply}");
    }
}
