//! What memcached's own t/maxconns.t and t/metaget.t ask of an extstore
//! server, on the wire (CI has no memcached source):
//! - `ext_path=F:64m` at the default 64 MiB `ext_page_size` (one page)
//!   starts, in smaller pages;
//! - with `ext_item_age`, idle items go to flash with no memory pressure,
//!   and `stats items` then shows them where memcached shows their RAM
//!   headers (a small class, `number_cold`);
//! - an item whose flash page was reclaimed reads as a miss counted in
//!   `miss_from_extstore`.

mod common;

use std::io::Write;
use std::time::{Duration, Instant};

use common::{Conn, Server};

fn flash_file(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("strata-flash-suite-{name}-{}.dat", std::process::id()))
}

/// `stats <group>` as (name, value) pairs.
fn stats(c: &mut Conn, group: &str) -> Vec<(String, String)> {
    c.stream.write_all(format!("stats {group}\r\n").as_bytes()).unwrap();
    let mut out = Vec::new();
    loop {
        let line = c.line();
        if line == "END\r\n" {
            return out;
        }
        let mut parts = line.trim_end().splitn(3, ' ');
        assert_eq!(parts.next(), Some("STAT"), "{line}");
        out.push((parts.next().unwrap().to_string(), parts.next().unwrap_or("").to_string()));
    }
}

#[test]
fn one_page_of_ext_path_starts_in_smaller_pages() {
    let path = flash_file("onepage");
    let ext = format!("ext_path={}:64m", path.display());
    let server = Server::strata(&["-m", "64", "-o", ext.as_str()]);
    let mut c = Conn::to(&server);
    assert_eq!(c.set("k", b"v"), "STORED\r\n");
    assert_eq!(c.get("k").as_deref(), Some(&b"v"[..]));
    assert_eq!(c.stat("extstore_limit_maxbytes"), 64 << 20);
    assert_eq!(c.stat("extstore_pages_free"), 8, "8 pages of 8 MiB");
    let pages = stats(&mut c, "extstore").len();
    assert_eq!(pages, 8 * 4, "a row of four per page");
    drop(server);
    let _ = std::fs::remove_file(&path);
}
