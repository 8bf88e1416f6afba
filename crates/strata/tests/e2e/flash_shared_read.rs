//! A multi-get whose keys lie in the same flash blocks reads them once
//! (issue 33): the first key on flash parks the request and reads its
//! blocks; each later key of the request whose record lies in those blocks
//! is answered from the same bytes, counted in `extstore_reads_shared`,
//! with no read of its own. Checked on both engines, with every value
//! compared, and a key deleted between the two gets (its flash entry gone,
//! its record still in the shared bytes) still a miss.

use std::io::Write;

use crate::common::{Conn, Server};

/// Keys set first, so they are the first evicted to flash: each shard of
/// the store goes to flash a segment at a time, so a shard's keys set one
/// after another lie side by side there, records of 32 + 4 + 100 bytes
/// padded to 144, 28 to a 4 KiB block. A multi-get of 100 of them finds
/// some of a shard's keys side by side.
const KEYS: usize = 1000;

fn value(i: usize) -> Vec<u8> {
    format!("{i:05}").repeat(20).into_bytes()
}

fn run_on(engine: &str) {
    let dir = std::env::temp_dir().join(format!("strata-flash-shared-{engine}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ext = format!("io_engine={engine},ext_path={}:64m,ext_page_size=8,ext_wbuf_size=2", dir.join("flash").display());
    let server = Server::strata(&["-t", "1", "-m", "8", "-o", &ext]);
    let mut c = Conn::to(&server);
    let keys: Vec<String> = (0..KEYS).map(|i| format!("s{i:03}")).collect();
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(c.set(key, &value(i)), "STORED\r\n");
    }
    // 24 MB of later items push the first ones out of RAM and out of the
    // write buffer (2 MiB), onto flash.
    c.fill("f", 12_000, 2000);
    assert!(c.stat("extstore_objects_written") > 1000, "items went to flash");

    let (flash_before, shared_before) = (c.stat("get_extstore"), c.stat("extstore_reads_shared"));
    let got = c.get_many(&keys);
    let on_flash = c.stat("get_extstore") - flash_before;
    let shared = c.stat("extstore_reads_shared") - shared_before;
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(got.get(key), Some(&value(i)), "{key}");
    }
    assert!(on_flash >= 900, "the first keys were read from flash: {on_flash} of {KEYS}");
    // Each 100-key get reads a block or two per shard its keys hash to, and
    // finds its keys of the same shard that were set next to each other
    // in those (measured: 262 of 1,000 shared, on both engines; without
    // sharing, 0).
    let issued = on_flash - shared;
    assert!(shared >= on_flash / 5, "{on_flash} keys from flash took {issued} reads ({shared} shared)");

    // Its record is still in the blocks a neighbour's read brings back,
    // but a deleted key is gone: the shared bytes are checked as a read's.
    // Every other key deleted: their records are still in the blocks the
    // others' reads bring back, but they are misses.
    for key in keys.iter().skip(1).step_by(2) {
        c.stream.write_all(format!("delete {key}\r\n").as_bytes()).unwrap();
        assert_eq!(c.line(), "DELETED\r\n");
    }
    let shared_before = c.stat("extstore_reads_shared");
    let got = c.get_many(&keys);
    for (i, key) in keys.iter().enumerate() {
        let want = (i % 2 == 0).then(|| value(i));
        assert_eq!(got.get(key), want.as_ref(), "{key}: deleted keys are misses, the others hits");
    }
    assert!(c.stat("extstore_reads_shared") > shared_before, "the second multi-get shared reads too");
    assert_eq!(c.stat("badcrc_from_extstore"), 0);
    assert_eq!(c.stat("extstore_io_queue"), 0, "every read handed out was finished");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_multi_get_of_neighbours_on_flash_reads_their_blocks_once_with_epoll() {
    run_on("epoll");
}

#[test]
fn a_multi_get_of_neighbours_on_flash_reads_their_blocks_once_with_the_default_engine() {
    run_on("auto");
}
