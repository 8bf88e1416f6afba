//! `stats` `hash_power_level`, `hash_bytes`, `hash_is_expanding` report the
//! segment store's key index (8-byte slots over every shard): memcached's
//! figures for its hash table, which operators read to size
//! `-o hashpower` and to see the index's memory. `-o hashpower=N` presizes
//! the index to 2^N slots (16 by default), as it presizes memcached's table;
//! memcached's t/restart.t expects 16 at start and 17 after 131,072 items.

use crate::common;

use std::io::Write;

use strata_server::Settings;

fn stats(stream: &mut std::net::TcpStream, r: &mut std::io::BufReader<std::net::TcpStream>) -> Vec<(String, String)> {
    stream.write_all(b"stats\r\n").unwrap();
    let mut out = Vec::new();
    loop {
        let l = common::line(r);
        if l == "END\r\n" {
            return out;
        }
        let mut parts = l.split_whitespace().skip(1);
        out.push((parts.next().unwrap().to_string(), parts.next().unwrap_or("").to_string()));
    }
}

fn num(stats: &[(String, String)], name: &str) -> u64 {
    stats.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no {name}")).1.parse().unwrap()
}

/// The level is log2 of the index's slots (bytes / 8), rounded down.
fn check_consistent(stats: &[(String, String)]) -> (u64, u64) {
    let (level, bytes) = (num(stats, "hash_power_level"), num(stats, "hash_bytes"));
    assert!(bytes > 0 && bytes % 8 == 0, "{bytes}");
    assert_eq!(level, u64::from((bytes / 8).ilog2()), "{bytes}");
    assert_eq!(num(stats, "hash_is_expanding"), 0);
    (level, bytes)
}

#[test]
fn hash_stats_follow_the_key_index_as_it_grows() {
    let (server, addr) = common::start(Settings::default());
    let (mut stream, mut r) = common::connect(addr);
    let order: Vec<String> = stats(&mut stream, &mut r).into_iter().map(|(n, _)| n).collect();
    let at = order.iter().position(|n| n == "hash_power_level").expect("hash_power_level listed");
    assert_eq!(&order[at..at + 3], ["hash_power_level", "hash_bytes", "hash_is_expanding"], "memcached's order");

    let (level_start, bytes_start) = check_consistent(&stats(&mut stream, &mut r));
    assert_eq!(level_start, 16, "presized as memcached's default -o hashpower");
    assert_eq!(bytes_start, 8 << 16);

    // 131,072 items, pipelined in batches.
    let items = 1u64 << 17;
    for batch in 0..(items / 4096) {
        let mut req = Vec::new();
        for i in 0..4096 {
            req.extend_from_slice(format!("set z{} 0 0 0 noreply\r\n\r\n", batch * 4096 + i).as_bytes());
        }
        stream.write_all(&req).unwrap();
    }
    let after = stats(&mut stream, &mut r);
    assert_eq!(num(&after, "curr_items"), items);
    let (level, bytes) = check_consistent(&after);
    assert!(bytes > bytes_start);
    // Each shard's table is 68-85% full once grown: 131,072 items need
    // 154,203 to 192,754 slots, so the level is 17, as memcached's table.
    let slots = bytes / 8;
    assert!(slots * 85 >= items * 100 && slots * 60 <= items * 100, "{slots} slots for {items} items");
    assert_eq!(level, 17);
    drop(server);
}

#[test]
fn hashpower_presizes_the_index() {
    for power in [12u32, 20] {
        let mut settings = Settings::default();
        settings.tunables.hashpower_init = power;
        let (server, addr) = common::start(settings);
        let (mut stream, mut r) = common::connect(addr);
        let (level, bytes) = check_consistent(&stats(&mut stream, &mut r));
        assert_eq!((level, bytes), (u64::from(power), 8 << power), "-o hashpower={power}");
        drop(server);
    }
}
