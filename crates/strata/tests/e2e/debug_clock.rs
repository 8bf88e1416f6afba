//! `debugtime`, the clock command memcached's own test suite moves time
//! with (t/expirations.t, t/stats.t), on the wire.
//!
//! memcached has it only in `memcached-debug`; Strata in a build with
//! debug assertions (`cargo build`, or the optimized
//! `cargo build --profile memcached-debug`), and in the release binary
//! started with `STRATA_DEBUGTIME=1` (what memcached's suite can run, and
//! what this test runs, so that one release build serves every test). A
//! release binary started without it refuses `debugtime` as release
//! memcached does; with it, the clock moves as t/expirations.t relies on:
//! relative and absolute TTLs, `add` over an expired item, `touch` and
//! `gat` expiring with the moved clock.

use crate::common;

use common::{Conn, Server};
use std::io::Write;

fn send(conn: &mut Conn, req: &str) -> String {
    conn.stream.write_all(req.as_bytes()).unwrap();
    conn.line()
}

fn value(conn: &mut Conn, key: &str) -> Option<String> {
    conn.get(key).map(|v| String::from_utf8(v).unwrap())
}

/// Unix time as the server reads it: the test's clock and the server's agree
/// to the second, as t/expirations.t assumes.
fn unix_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
}

#[test]
fn release_builds_refuse_debugtime() {
    if cfg!(debug_assertions) {
        return; // a debug build always has it
    }
    let server = Server::strata(&[]);
    let mut conn = Conn::to(&server);
    for req in ["debugtime 5\r\n", "debugtime p\r\n", "debugtime r\r\n"] {
        assert_eq!(send(&mut conn, req), "ERROR\r\n", "{req}");
    }
    assert_eq!(conn.set("k", b"v"), "STORED\r\n", "the connection goes on");
}

#[test]
fn debugtime_moves_the_clock_as_expirations_t_does() {
    let server = Server::strata_env(&[], &[("STRATA_DEBUGTIME", "1")]);
    let mut conn = Conn::to(&server);

    // An absolute TTL (unix time) expires once the clock has moved past it;
    // from then on the server's unix time runs ahead of the test's.
    let expire = unix_now() + 4;
    assert_eq!(send(&mut conn, &format!("set foo 0 {expire} 6\r\nfoov+1\r\n")), "STORED\r\n");
    assert_eq!(value(&mut conn, "foo").as_deref(), Some("foov+1"));
    // (5, not 4: the server's second may have begun before the test's)
    assert_eq!(send(&mut conn, "debugtime 5\r\n"), "OK\r\n");
    assert_eq!(value(&mut conn, "foo"), None);

    // A relative one too.
    assert_eq!(send(&mut conn, "set foo 0 3 6\r\nfooval\r\n"), "STORED\r\n");
    assert_eq!(value(&mut conn, "foo").as_deref(), Some("fooval"));
    assert_eq!(send(&mut conn, "debugtime 3\r\n"), "OK\r\n");
    assert_eq!(value(&mut conn, "foo"), None);

    // `add` fails while the item lives and stores once it has expired.
    assert_eq!(send(&mut conn, "add add 0 2 6\r\naddval\r\n"), "STORED\r\n");
    assert_eq!(send(&mut conn, "add add 0 2 7\r\naddval2\r\n"), "NOT_STORED\r\n");
    assert_eq!(send(&mut conn, "debugtime 2\r\n"), "OK\r\n");
    assert_eq!(send(&mut conn, "add add 0 2 7\r\naddval3\r\n"), "STORED\r\n");
    assert_eq!(value(&mut conn, "add").as_deref(), Some("addval3"));

    // `touch` and `gat` set a TTL the moved clock then runs out.
    assert_eq!(send(&mut conn, "set tch 0 0 8\r\ntouchval\r\n"), "STORED\r\n");
    assert_eq!(send(&mut conn, "touch tch 2\r\n"), "TOUCHED\r\n");
    assert_eq!(value(&mut conn, "tch").as_deref(), Some("touchval"));
    assert_eq!(send(&mut conn, "debugtime 2\r\n"), "OK\r\n");
    assert_eq!(value(&mut conn, "tch"), None);
    assert_eq!(send(&mut conn, "set gat 0 0 6\r\ngatval\r\n"), "STORED\r\n");
    assert_eq!(send(&mut conn, "gat 2 gat\r\n"), "VALUE gat 0 6\r\n");
    assert_eq!(conn.line(), "gatval\r\n");
    assert_eq!(conn.line(), "END\r\n");
    assert_eq!(send(&mut conn, "debugtime 2\r\n"), "OK\r\n");
    assert_eq!(value(&mut conn, "gat"), None);

    // A paused clock keeps an item alive past its TTL; resumed, it runs on.
    assert_eq!(send(&mut conn, "debugtime p\r\n"), "OK\r\n");
    assert_eq!(send(&mut conn, "set p 0 1 1\r\nx\r\n"), "STORED\r\n");
    std::thread::sleep(std::time::Duration::from_millis(2100));
    assert_eq!(value(&mut conn, "p").as_deref(), Some("x"), "the clock stood still");
    assert_eq!(send(&mut conn, "debugtime r\r\n"), "OK\r\n");
    assert_eq!(send(&mut conn, "debugtime 2\r\n"), "OK\r\n");
    assert_eq!(value(&mut conn, "p"), None);
}
