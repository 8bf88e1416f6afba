//! `watch fetchers` on an item held on the flash tier (`-o ext_path`): the
//! get that reads it from flash logs `status=found` with its size, as
//! memcached 1.6.45 does for an extstore item (its header stays in RAM).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::common;

use common::{Conn, Server};

#[test]
fn watch_fetchers_finds_items_on_flash() {
    let dir = std::env::temp_dir().join(format!("strata-watch-flash-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ext = format!("ext_path={}:256m,ext_page_size=8,ext_wbuf_size=2", dir.join("flash").display());
    let server = Server::strata(&["-t", "2", "-m", "8", "-o", &ext]);
    let mut c = Conn::to(&server);
    c.fill("k", 4000, 2000);
    // A key whose `me` reads flash twice is on flash (and stays there).
    let mut on_flash = |key: &str| {
        (0..2).all(|_| {
            let before = c.stat("get_extstore");
            c.stream.write_all(format!("me {key}\r\n").as_bytes()).unwrap();
            c.line();
            c.stat("get_extstore") > before
        })
    };
    let key = (0..4000).map(|i| format!("k{i}")).find(|k| on_flash(k)).expect("an item on flash");

    let watcher = TcpStream::connect(server.addr).unwrap();
    watcher.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut lines = BufReader::new(watcher.try_clone().unwrap());
    (&watcher).write_all(b"watch fetchers\r\n").unwrap();
    let mut ok = String::new();
    lines.read_line(&mut ok).unwrap();
    assert_eq!(ok, "OK\r\n");

    let before = c.stat("get_extstore");
    assert_eq!(c.get(&key).as_deref(), Some(&[b'f'; 2000][..]), "the filler's value (`Conn::fill`)");
    assert!(c.stat("get_extstore") > before, "the get read flash");
    assert_eq!(c.get("absent_key"), None);
    let mut got = Vec::new();
    for _ in 0..2 {
        let mut l = String::new();
        lines.read_line(&mut l).unwrap();
        got.push(l.split_once(" gid=").and_then(|(_, r)| r.split_once(' ')).map(|(_, r)| r.to_string()).unwrap_or(l));
    }
    assert!(got[0].starts_with(&format!("type=item_get key={key} status=found clsid=")), "{got:?}");
    assert!(got[0].ends_with(" size=2000\n"), "{got:?}");
    assert!(got[1].starts_with("type=item_get key=absent_key status=not_found clsid=0 "), "{got:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
