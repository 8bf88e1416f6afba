//! The flash tier's limits on the wire: an `ext_path` too small for one
//! page is refused at start (exit 2, a message naming the file), a large
//! item evicted from RAM goes to flash like a small one, and the flash
//! index is counted in `-m`.

use crate::common;

use std::io::Write;
use std::process::Command;

use common::{Conn, Server, BIN};

#[test]
fn a_too_small_ext_path_exits_2_with_a_clear_message() {
    let path = std::env::temp_dir().join(format!("strata-flash-small-{}.dat", std::process::id()));
    // Under one page of ext_page_size (64 MiB); one page or more starts,
    // in smaller pages (flash_mc_suite.rs).
    let ext = format!("ext_path={}:32m", path.display());
    let out = Command::new(BIN).args(["-p", "-1", "-U", "0", "-o", ext.as_str()]).output().unwrap();
    let _ = std::fs::remove_file(&path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&format!("ext_path {}: ", path.display())) && stderr.contains("zero size"), "{stderr}");
}

/// A 1,000,000-byte value (under `-I 1m`) pushed out of `-m 8` by other
/// writes must be served from flash. Each write buffer is capped at
/// `-m`/16 (512 KiB here, whatever `ext_wbuf_size`), so the record has a
/// write of its own (seg/flash/tier/large.rs), straight to the page.
#[test]
fn a_value_of_1_mb_goes_to_flash() {
    let path = std::env::temp_dir().join(format!("strata-flash-big-{}.dat", std::process::id()));
    let ext = format!("ext_page_size=8,ext_wbuf_size=2,ext_item_size=1,ext_path={}:256m", path.display());
    let server = Server::strata(&["-t", "2", "-m", "8", "-o", ext.as_str()]);
    let mut c = Conn::to(&server);
    let big: Vec<u8> = (0..1_000_000u32).map(|i| b'a' + (i * 7 % 26) as u8).collect();
    assert_eq!(c.set("big", &big), "STORED\r\n");
    for batch in 0..10 {
        let mut fill = Vec::new();
        for i in 0..1500 {
            fill.extend_from_slice(format!("set fill:{batch}:{i} 0 0 1000 noreply\r\n").as_bytes());
            fill.extend_from_slice(&[b'f'; 1000]);
            fill.extend_from_slice(b"\r\n");
        }
        fill.extend_from_slice(b"mn\r\n");
        c.stream.write_all(&fill).unwrap();
        assert_eq!(c.line(), "MN\r\n");
    }
    let got = c.get("big");
    let (fallbacks, from_flash) = (c.stat("extstore_write_fallbacks"), c.stat("get_extstore"));
    let _ = std::fs::remove_file(&path);
    assert_eq!(got.as_deref(), Some(&big[..]), "evicted: {fallbacks} write fallbacks");
    assert!(from_flash >= 1);
}

/// `-m` bounds the flash index too (seg/flash/budget.rs): its bytes are
/// shown (`extstore_index_bytes`, at least 12 an item on flash) and counted
/// in `stats slabs`' `total_malloced`, which stays within `-m`.
#[test]
fn the_flash_index_is_counted_in_m() {
    let path = std::env::temp_dir().join(format!("strata-flash-index-m-{}.dat", std::process::id()));
    let ext = format!("ext_page_size=8,ext_wbuf_size=2,ext_item_size=1,ext_path={}:256m", path.display());
    let server = Server::strata(&["-t", "2", "-m", "8", "-o", ext.as_str()]);
    let mut c = Conn::to(&server);
    for batch in 0..20 {
        let mut fill = Vec::new();
        for i in 0..2000 {
            fill.extend_from_slice(format!("set fill:{batch}:{i} 0 0 1000 noreply\r\n").as_bytes());
            fill.extend_from_slice(&[b'f'; 1000]);
            fill.extend_from_slice(b"\r\n");
        }
        fill.extend_from_slice(b"mn\r\n");
        c.stream.write_all(&fill).unwrap();
        assert_eq!(c.line(), "MN\r\n");
    }
    // extstore_index_bytes holds the small store's RAM too (its directory,
    // here unused: these values are larger than ext_small_item_max).
    let (on_flash, all_index_bytes, small_bytes) = (c.stat("extstore_objects_used"), c.stat("extstore_index_bytes"), c.stat("extstore_small_ram_bytes"));
    let index_bytes = all_index_bytes - small_bytes;
    c.stream.write_all(b"stats slabs\r\n").unwrap();
    let mut malloced = None;
    loop {
        let line = c.line();
        if line == "END\r\n" {
            break;
        }
        if let Some(v) = line.strip_prefix("STAT total_malloced ") {
            malloced = v.trim().parse::<u64>().ok();
        }
    }
    let _ = std::fs::remove_file(&path);
    assert!(on_flash > 30_000, "{on_flash} items on flash");
    assert!(index_bytes >= 12 * on_flash && index_bytes < 16 * on_flash, "{index_bytes} index bytes for {on_flash} items");
    let malloced = malloced.expect("total_malloced");
    assert!(malloced >= all_index_bytes && malloced <= (8 << 20) + index_bytes / 8, "total_malloced {malloced}, index {index_bytes}");
    assert_eq!(c.get("fill:0:7").as_deref(), Some(&[b'f'; 1000][..]));
}
