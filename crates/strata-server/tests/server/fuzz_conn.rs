//! The `conn` fuzz target on stable: its corpus (`fuzz/corpus/conn`) and
//! the runs' finds (`fuzz/grown/conn`) replayed through the target's
//! body, and the seed scripts it was started from (real traffic: the wire
//! tests' streams, every generated command kind, flash reads finished in
//! reverse), which
//! `cargo test --release --workspace --test server fuzz_conn::write_seeds -- --ignored`
//! writes into the corpus.

use std::path::PathBuf;

use strata_server::fuzzing::conn::{fuzz_conn, run};
use strata_server::fuzzing::script::{binary_request, Options, Request, Script, Step, KINDS};
use strata_store::fuzzing::corpus::{dir, inputs, replay, Kept};

fn corpus() -> PathBuf {
    dir("conn", Kept::Seeds)
}

#[test]
fn corpus_replays() {
    let seeds = inputs("conn", Kept::Seeds);
    assert!(seeds.len() >= self::seeds().len(), "{} corpus files", seeds.len());
    replay(&seeds, fuzz_conn);
}

/// What the fuzz runs found beyond the seeds (`fuzz/grown/conn`).
#[test]
fn grown_replays() {
    replay(&inputs("conn", Kept::Grown), fuzz_conn);
}

#[test]
fn seeds_run() {
    for (name, script) in seeds() {
        assert_eq!(Script::decode(&script.encode()).options, script.options, "{name}");
        let outcome = run(&script);
        assert!(outcome.pieces > 0, "{name}: no request ran");
        if name.starts_with("flash-reverse") || name.starts_with("kinds-flash") {
            assert!(outcome.parks > 1, "{name}: no request parked on flash ({outcome:?})");
        }
    }
}

/// The oracle's bug of `fuzz/corpus/conn/oracle-crawler-busy-timing`:
/// whether `lru_crawler crawl` found the crawler busy turned on how soon
/// the thread of the crawl or dump before it ended, so the split and the
/// canonical runs could differ. The harness now runs crawls and crawler
/// dumps on its own thread (`inline_background`), each to its end before
/// the next request, so each request finds the crawler let go, and a
/// metadump's lines reach the client (they once went to a socket the
/// harness has not got: the dump started, then the connection closed).
#[test]
fn a_crawl_after_a_crawl_or_a_dump_finds_the_crawler_free() {
    let mut steps = Vec::new();
    for (conn, line) in [(0, "lru_crawler crawl all"), (1, "lru_crawler crawl all"), (2, "lru_crawler metadump all"), (3, "lru_crawler crawl 1,2")] {
        // Apart: a metadump after another reply not yet sent is refused.
        for bytes in [format!("set k{conn} 0 0 1\r\nv\r\n"), format!("{line}\r\n")] {
            steps.push(Step::Raw { conn, bytes: bytes.into_bytes() });
            steps.push(Step::Deliver { conn, n: 0 });
            steps.push(Step::Process { conn, budget: 8 });
        }
    }
    let outcome = run(&Script { options: Options::default(), steps });
    let replies: Vec<String> = outcome.replies.iter().map(|r| String::from_utf8_lossy(r).into_owned()).collect();
    assert_eq!(replies[0], "STORED\r\nOK\r\n");
    assert_eq!(replies[1], "STORED\r\nOK\r\n");
    let dump = &replies[2];
    assert!(dump.starts_with("STORED\r\nOK\r\n") && dump.ends_with(" \nEND\r\n"), "{dump:?}");
    for key in ["k0", "k1", "k2"] {
        assert_eq!(dump.matches(&format!("key={key} exp=-1 ")).count(), 1, "{dump:?}");
    }
    assert_eq!(replies[3], "STORED\r\nOK\r\n");
}

/// The oracle's bug of `fuzz/corpus/conn/oracle-watcher-lines`: a
/// watcher's log lines carry the run's times, and the split run drives
/// every connection at its end, the canonical run only with its requests,
/// so the watcher showed lines in one run only. They are left out.
#[test]
fn a_watchers_lines_are_not_compared() {
    let steps = sent_whole(&[(0, "watch\r\n"), (1, "set a 0 0 1\r\nv\r\nget a b\r\ndelete a\r\n")]);
    let outcome = run(&Script { options: Options::default(), steps });
    let watcher = String::from_utf8_lossy(&outcome.replies[0]).into_owned();
    assert!(watcher.starts_with("OK\r\nts="), "{watcher:?}");
    assert!(watcher.contains(" type=item_get key=b status=not_found "), "{watcher:?}");
}

/// The oracle's bug of `fuzz/corpus/conn/oracle-cachedump-overlapped`: a
/// `stats cachedump` walks in refills across the worker's turns, so a key
/// another connection stores meanwhile shows in it, while the canonical
/// run drives the dump to its end first. Its `ITEM` lines are left out
/// once another connection ran during the dump.
#[test]
fn a_cachedump_overlapped_by_another_connection_is_not_compared_item_by_item() {
    let steps = sent_whole(&[(0, "stats cachedump 1 0\r\n"), (1, "set y 0 0 1\r\nv\r\n")]);
    let outcome = run(&Script { options: Options::default(), steps });
    assert_eq!(String::from_utf8_lossy(&outcome.replies[0]), "ITEM y [1 b; 0 s]\r\nEND\r\n");
}

/// Each connection's bytes in turn, delivered whole and processed once.
fn sent_whole(sends: &[(u8, &str)]) -> Vec<Step> {
    let mut steps = Vec::new();
    for &(conn, bytes) in sends {
        steps.push(Step::Raw { conn, bytes: bytes.as_bytes().to_vec() });
        steps.push(Step::Deliver { conn, n: 0 });
        steps.push(Step::Process { conn, budget: 8 });
    }
    steps
}

#[test]
#[ignore = "writes fuzz/corpus/conn/seed-*"]
fn write_seeds() {
    std::fs::create_dir_all(corpus()).unwrap();
    for (name, script) in seeds() {
        std::fs::write(corpus().join(format!("seed-{name}")), script.encode()).unwrap();
    }
}

/// The text and meta stream of `wire.rs`.
const STREAM: &[u8] = b"set a 5 0 3\r\nabc\r\nget a b\r\ngets a\r\nappend a 0 0 2 noreply\r\nde\r\n\
mg a v f k c s t\r\nms b 4 T0 F7 c\r\nwxyz\r\nmg b v q\r\nmg nope q\r\nmn\r\nincr c 1\r\n\
set c 0 0 2\r\n10\r\ndecr c 3\r\nma c D4 v\r\nmd a q\r\nmg a\r\nset d 0 0 3\r\nabcde\r\n\
delete b 0\r\ntouch c 100\r\ngat 0 c\r\nverbosity 1\r\nms e 2 MX\r\nzz\r\nbogus\r\n\
ms f S2\r\nhi\r\n\nme c\r\nflush_all\r\nget c\r\n";

/// A pymemcache/libmemcached-style session: noreply sets, multi-get, cas.
const CLIENT: &[u8] = b"set k0 3 0 5 noreply\r\nhello\r\nset k1 0 100 2\r\nhi\r\nget k0 k1 k2\r\ngets k1\r\n\
cas k1 0 0 3 2\r\nhey\r\ncas k1 0 0 3 2\r\nbye\r\nincr k2 1\r\nadd k2 0 0 1\r\n5\r\nincr k2 18446744073709551615\r\n\
decr k2 100\r\nprepend k0 0 0 1\r\n>\r\ntouch k0 10\r\ngat 20 k0\r\ndelete k1 noreply\r\nget k1\r\nversion\r\nquit\r\n";

fn binary_stream() -> Vec<u8> {
    let set_extras = [0, 0, 0, 7, 0, 0, 0, 0];
    let delta = |d: u64, initial: u64| [&d.to_be_bytes()[..], &initial.to_be_bytes(), &0u32.to_be_bytes()].concat();
    [
        binary_request(0x01, b"k0", &set_extras, b"hello", 0),
        binary_request(0x11, b"f1", &set_extras, b"quiet", 0),
        binary_request(0x00, b"k0", &[], &[], 0),
        binary_request(0x09, b"missing", &[], &[], 0),
        binary_request(0x0d, b"k0", &[], &[], 0),
        binary_request(0x02, b"k0", &set_extras, b"x", 0),
        binary_request(0x05, b"n", &delta(1, 10), &[], 0),
        binary_request(0x06, b"n", &delta(100, 0), &[], 0),
        binary_request(0x1d, b"f3", &100u32.to_be_bytes(), &[], 0),
        binary_request(0x04, b"k0", &[], &[], 0),
        binary_request(0x0a, b"", &[], &[], 0),
        binary_request(0x17, b"", &[], &[], 0),
    ]
    .concat()
}

/// `bytes` on connection `conn`, delivered `piece` bytes at a time with a
/// process after each.
fn trickle(steps: &mut Vec<Step>, conn: u8, bytes: &[u8], piece: u8) {
    steps.push(Step::Raw { conn, bytes: bytes.to_vec() });
    let pieces = if piece == 0 { 1 } else { bytes.len().div_ceil(usize::from(piece)) };
    for _ in 0..pieces {
        steps.push(Step::Deliver { conn, n: piece });
        steps.push(Step::Process { conn, budget: 3 });
    }
}

fn seeds() -> Vec<(String, Script)> {
    let mut seeds = Vec::new();
    for (name, bytes) in [("stream", STREAM.to_vec()), ("client", CLIENT.to_vec()), ("binary", binary_stream())] {
        for (flash, piece) in [(false, 0), (false, 7), (true, 13)] {
            let mut steps = Vec::new();
            trickle(&mut steps, 0, &bytes, piece);
            let options = Options { flash, ..Options::default() };
            seeds.push((format!("{name}-{}-{piece}", if flash { "flash" } else { "map" }), Script { options, steps }));
        }
    }
    // Every generated kind, on four interleaved connections, flash keys
    // among the keys, reads finished in reverse order.
    for flash in [false, true] {
        let mut steps = Vec::new();
        for (i, _) in KINDS.iter().enumerate() {
            let conn = (i % 4) as u8;
            let value = format!("v{i}").into_bytes();
            let req = Request { kind: i as u8, key: (i * 5) as u8, arg: (i * 37) as u8, vlen: value.len() as u8, value };
            steps.push(Step::Request { conn, req });
            steps.push(Step::Deliver { conn, n: 5 });
            steps.push(Step::Process { conn: (conn + 1) % 4, budget: 2 });
            steps.push(Step::Deliver { conn, n: 0 });
            steps.push(Step::Process { conn, budget: 8 });
            steps.push(Step::Complete { conn: (conn + 3) % 4, pick: 255, ok: i % 5 != 0 });
        }
        let options = Options { flash, ..Options::default() };
        seeds.push((format!("kinds-{}", if flash { "flash" } else { "map" }), Script { options, steps }));
    }
    // A multi-get of flash keys, parked, its reads finished last to first
    // after another connection wrote one of its keys.
    let get = b"get f0 f1 f2 f3 f4 f5\r\nmg f6 v\r\nget f7\r\n".to_vec();
    let mut steps = vec![Step::Raw { conn: 0, bytes: get }, Step::Deliver { conn: 0, n: 0 }, Step::Process { conn: 0, budget: 10 }];
    steps.push(Step::Raw { conn: 1, bytes: b"set f2 0 0 3\r\nnew\r\ndelete f4\r\n".to_vec() });
    steps.push(Step::Deliver { conn: 1, n: 0 });
    steps.push(Step::Process { conn: 1, budget: 10 });
    for _ in 0..8 {
        steps.push(Step::Complete { conn: 0, pick: 255, ok: true });
        steps.push(Step::Process { conn: 0, budget: 10 });
    }
    seeds.push(("flash-reverse".to_string(), Script { options: Options { flash: true, ..Options::default() }, steps }));
    // -I 1k and -B binary: refused blocks swallowed at any split.
    let big = [b"set k1 0 0 2000\r\n".to_vec(), vec![b'x'; 2000], b"\r\nget k1\r\n".to_vec()].concat();
    let mut steps = Vec::new();
    trickle(&mut steps, 2, &big, 100);
    seeds.push(("small-items".to_string(), Script { options: Options { small_items: true, ..Options::default() }, steps }));
    let mut steps = Vec::new();
    trickle(&mut steps, 3, &binary_stream(), 5);
    seeds.push(("binary-only".to_string(), Script { options: Options { protocol: 3, ..Options::default() }, steps }));
    seeds
}
