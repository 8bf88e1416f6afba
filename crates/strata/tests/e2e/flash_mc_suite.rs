//! What memcached's own t/maxconns.t and t/metaget.t ask of an extstore
//! server, on the wire (CI has no memcached source):
//! - `ext_path=F:64m` at the default 64 MiB `ext_page_size` (one page)
//!   starts, in smaller pages;
//! - with `ext_item_age`, idle items go to flash with no memory pressure,
//!   and `stats items` then shows them where memcached shows their RAM
//!   headers (a small class, `number_cold`);
//! - an item whose flash page was reclaimed reads as a miss counted in
//!   `miss_from_extstore`.

use crate::common;

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
    // ext_page_size not given: 64 pages of 1 MiB (ext_config.rs).
    assert_eq!(c.stat("extstore_pages_free"), 64, "64 pages of 1 MiB");
    let pages = stats(&mut c, "extstore").len();
    assert_eq!(pages, 64 * 4, "a row of four per page");
    drop(server);
    let _ = std::fs::remove_file(&path);
}

/// Sum of `items:<class>:number` over classes from `min_class` up.
fn items_from_class(c: &mut Conn, min_class: u32) -> u64 {
    stats(c, "items")
        .iter()
        .filter_map(|(name, value)| {
            let rest = name.strip_prefix("items:")?;
            let (class, field) = rest.split_once(':')?;
            (field == "number" && class.parse::<u32>().ok()? >= min_class).then(|| value.parse::<u64>().unwrap())
        })
        .sum()
}

fn stat_of(all: &[(String, String)], name: &str) -> u64 {
    all.iter().find(|(n, _)| n == name).map(|(_, v)| v.parse().unwrap()).unwrap_or_else(|| panic!("no {name}"))
}

fn set_noreply(c: &mut Conn, key: &str, value: &[u8]) {
    let mut req = format!("set {key} 0 0 {} noreply\r\n", value.len()).into_bytes();
    req.extend_from_slice(value);
    req.extend_from_slice(b"\r\n");
    c.stream.write_all(&req).unwrap();
}

/// metaget.t's extstore section, first part: with `ext_item_age`, items
/// idle longer than that go to flash with no memory pressure, and `stats
/// items` then lists them as memcached lists their RAM headers: class 1
/// (a 74-byte header for a 5-byte key), `number_cold`. Without it
/// (memcached's default: unlimited) they stay in RAM; `extstore item_age`
/// turns it on at run time.
#[test]
fn idle_items_go_to_flash_without_memory_pressure() {
    let path = flash_file("idle");
    let ext = format!("ext_page_size=8,ext_wbuf_size=2,ext_item_size=512,ext_path={}:64m,no_lru_crawler", path.display());
    let server = Server::strata(&["-m", "64", "-o", ext.as_str()]);
    let mut c = Conn::to(&server);
    let value: Vec<u8> = (0..20_000).map(|i| b'C' + (i % 24) as u8).collect();
    for i in 1..=10 {
        set_noreply(&mut c, &format!("nfoo{i}"), &value);
    }
    // Too small for flash (ext_item_size 512): stays in RAM whatever its age.
    assert_eq!(c.set("tiny", b"0123456789"), "STORED\r\n");
    let big_class = stats(&mut c, "items").iter().find(|(n, v)| n.ends_with(":number_hot") && v == "10").map(|(n, _)| n.clone());
    let big_class = big_class.expect("the 10 values in one class, HOT");
    std::thread::sleep(Duration::from_millis(3500));
    assert_eq!(c.stat("extstore_objects_written"), 0, "ext_item_age unlimited: no write without pressure");
    assert_eq!(items_from_class(&mut c, 3), 10);

    c.stream.write_all(b"extstore item_age 2\r\n").unwrap();
    assert_eq!(c.line(), "OK\r\n");
    let started = Instant::now();
    while items_from_class(&mut c, 3) > 0 {
        assert!(started.elapsed() < Duration::from_secs(15), "idle items still in RAM");
        std::thread::sleep(Duration::from_millis(200));
    }
    let all = stats(&mut c, "");
    assert_eq!((stat_of(&all, "extstore_objects_written"), stat_of(&all, "evictions")), (10, 0));
    assert_eq!(stat_of(&all, "curr_items"), 11);
    let items = stats(&mut c, "items");
    let field = |name: &str| stat_of(&items, &format!("items:1:{name}"));
    // memcached 1.6.45: items:1:number 11 (10 headers + tiny), number_cold 10,
    // mem_requested 9 x 74 + 75 for the headers, plus tiny's 73.
    assert_eq!((field("number"), field("number_hot"), field("number_cold")), (11, 1, 10));
    assert_eq!((field("mem_requested"), field("moves_to_cold")), (9 * 74 + 75 + 73, 10));
    assert!(!items.iter().any(|(n, _)| n == &big_class), "the 20,000-byte class is empty: not listed");
    let slabs = stats(&mut c, "slabs");
    let class = big_class.trim_start_matches("items:").split(':').next().unwrap().to_string();
    assert_eq!(stat_of(&slabs, "1:used_chunks"), 11);
    assert_eq!((stat_of(&slabs, &format!("{class}:used_chunks")), stat_of(&slabs, &format!("{class}:cmd_set"))), (0, 10));

    // Read back from flash (metaget.t's `mg nfoo1 s v`).
    c.stream.write_all(b"mg nfoo1 s v\r\n").unwrap();
    assert_eq!(c.line(), "VA 20000 s20000\r\n");
    assert_eq!(c.line().trim_end().as_bytes(), &value[..]);
    assert!(c.stat("get_extstore") > 0, "one object was fetched");
    assert_eq!(c.get("tiny").as_deref(), Some(&b"0123456789"[..]));
    drop(server);
    let _ = std::fs::remove_file(&path);
}

/// metaget.t's extstore section, second part: flash filled to eviction.
/// An item whose flash page was reclaimed reads as a miss counted in
/// `miss_from_extstore` (memcached's meaning: a header whose page is gone);
/// under memory pressure items go to flash whatever `ext_item_age` says
/// (memcached writes with an age of 0 then). With the LRU crawler on, the
/// reclaimed page's entries are swept out first, as memcached's crawler
/// unlinks such headers: the read is then a plain miss.
#[test]
fn an_item_whose_flash_page_was_reclaimed_is_a_miss_from_extstore() {
    for crawler in [false, true] {
        let path = flash_file(if crawler { "reclaim-crawler" } else { "reclaim" });
        let mut ext = format!("ext_page_size=2,ext_wbuf_size=2,ext_item_age=3600,ext_path={}:16m", path.display());
        if !crawler {
            ext.push_str(",no_lru_crawler");
        }
        let server = Server::strata(&["-m", "8", "-o", ext.as_str()]);
        let mut c = Conn::to(&server);
        let value = vec![b'v'; 100_000];
        for i in 1..=400 {
            set_noreply(&mut c, &format!("mfoo{i}"), &value);
        }
        c.stream.write_all(b"mn\r\n").unwrap();
        assert_eq!(c.line(), "MN\r\n");
        let all = stats(&mut c, "");
        assert!(stat_of(&all, "extstore_objects_written") > 200, "pressure writes young items to flash");
        assert!(stat_of(&all, "extstore_objects_evicted") > 0, "flash full: pages reclaimed");
        if crawler {
            std::thread::sleep(Duration::from_millis(2500));
        }
        c.stream.write_all(b"mg mfoo1 s v\r\n").unwrap();
        assert_eq!(c.line(), "EN\r\n");
        c.stream.write_all(b"mg mfoo1 s v q\r\nmn\r\n").unwrap();
        assert_eq!(c.line(), "MN\r\n");
        let misses = c.stat("miss_from_extstore");
        if crawler {
            assert_eq!(misses, 0, "swept before the read");
        } else {
            assert!(misses > 0, "the stale entry's read is counted");
        }
        // The newest items are still served, from flash or RAM.
        assert_eq!(c.get("mfoo400").as_deref(), Some(&value[..]));
        drop(server);
        let _ = std::fs::remove_file(&path);
    }
}
