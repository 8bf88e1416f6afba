//! `-m` and `-M` on the wire: the memory limit holds under any mix of sizes
//! (process RSS stays within `-m` plus the fixed overhead documented in
//! docs/ARCHITECTURE.md), eviction keeps serving, and `-M` answers
//! memcached's out-of-memory error while keeping what it stored.

use crate::common;

use std::io::Write;

use common::{Conn, Server};

/// Fixed RSS overhead allowed beyond `-m`: code, thread stacks, connection
/// buffers and the hash index of the items a small `-m` can hold.
const FIXED_OVERHEAD_BYTES: u64 = 24 << 20;

fn value(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| b'a' + ((i * 7 + j) % 26) as u8).collect()
}

#[test]
fn rss_stays_within_the_limit_under_a_mix_of_sizes() {
    let server = Server::strata(&["-m", "8"]);
    let mut conn = Conn::to(&server);
    let sizes = [10, 100, 1000, 5000, 20_000, 100_000, 400_000];
    let mut written = 0u64;
    for i in 0..6000 {
        let len = sizes[i % sizes.len()] + i % 13;
        assert_eq!(conn.set(&format!("key:{}", i % 2000), &value(i, len)), "STORED\r\n");
        written += len as u64;
    }
    assert!(written > 64 << 20, "the load must be several times -m");
    assert!(conn.stat("evictions") > 0);
    let rss = server.rss_bytes();
    eprintln!("RSS after the load: {:.1} MiB", rss as f64 / (1 << 20) as f64);
    assert!(rss <= (8 << 20) + FIXED_OVERHEAD_BYTES, "RSS {rss} bytes over -m 8 plus the fixed overhead");
    // Whatever is still there is intact.
    for i in 6000 - 2000..6000 {
        let len = sizes[i % sizes.len()] + i % 13;
        if let Some(v) = conn.get(&format!("key:{}", i % 2000)) {
            assert_eq!(v, value(i, len), "key:{}", i % 2000);
        }
    }
}

#[test]
fn no_evictions_answers_out_of_memory_and_keeps_items() {
    let server = Server::strata(&["-m", "2", "-M"]);
    let mut conn = Conn::to(&server);
    let mut stored = 0;
    let reply = loop {
        let reply = conn.set(&format!("key:{stored}"), &value(stored, 1000));
        if reply != "STORED\r\n" {
            break reply;
        }
        stored += 1;
        assert!(stored < 100_000, "-M never refused a store");
    };
    assert_eq!(reply, "SERVER_ERROR out of memory storing object\r\n");
    assert!(stored > 1000, "only {stored} items fit in -m 2");
    assert_eq!(conn.stat("evictions"), 0);
    for i in 0..stored {
        assert_eq!(conn.get(&format!("key:{i}")), Some(value(i, 1000)), "key:{i} lost under -M");
    }
    // Deleting every other item makes room again: under -M the store
    // compacts segments whose items are mostly dead.
    for i in (0..stored).step_by(2) {
        conn.stream.write_all(format!("delete key:{i}\r\n").as_bytes()).unwrap();
        assert_eq!(conn.line(), "DELETED\r\n");
    }
    for i in 0..stored / 3 {
        assert_eq!(conn.set(&format!("new:{i}"), &value(i, 1000)), "STORED\r\n", "new:{i} after deleting half");
    }
    for i in (1..stored).step_by(2) {
        assert_eq!(conn.get(&format!("key:{i}")), Some(value(i, 1000)), "key:{i} lost by compaction");
    }
}

#[test]
fn stats_reset_zeroes_the_engine_counters_but_not_the_items() {
    let server = Server::strata(&["-m", "2"]);
    let mut conn = Conn::to(&server);
    for i in 0..5000 {
        assert_eq!(conn.set(&format!("key:{i}"), &value(i, 1000)), "STORED\r\n");
    }
    assert_eq!(conn.set("gone", b"x"), "STORED\r\n");
    conn.stream.write_all(b"touch gone -1\r\n").unwrap();
    assert_eq!(conn.line(), "TOUCHED\r\n");
    assert_eq!(conn.get("gone"), None);
    assert!(conn.stat("evictions") > 0 && conn.stat("get_expired") == 1 && conn.stat("total_items") == 5001);
    let items = conn.stat("curr_items");
    conn.stream.write_all(b"stats reset\r\n").unwrap();
    assert_eq!(conn.line(), "RESET\r\n");
    for name in ["evictions", "evicted_unfetched", "get_expired", "reclaimed", "expired_unfetched", "total_items"] {
        assert_eq!(conn.stat(name), 0, "{name} after stats reset");
    }
    assert_eq!(conn.stat("curr_items"), items);
}
