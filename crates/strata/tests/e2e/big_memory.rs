//! Big `-m` on the wire: a limit far beyond the machine's memory starts
//! without touching it, and churn through it keeps the process's mappings
//! few (segment buffers are extents of large reservations, not mappings of
//! their own; Linux allows 65,530 mappings per process). `-L` marks that
//! memory for transparent huge pages. The full 4 GiB measurement is in
//! docs/BENCHMARKS.md ("Big -m"); this one churns 2 GiB in a few seconds.

use crate::common;

use std::io::Write;

use common::{Conn, Server};

fn maps_lines(server: &Server) -> usize {
    std::fs::read_to_string(format!("/proc/{}/maps", server.child.id())).expect("proc maps").lines().count()
}

/// A deterministic mix: half small (10 B-1 KiB), a third 1-100 KiB, the
/// rest 100-1000 KiB (each of those gets a single-item segment).
fn size_of(i: u64) -> usize {
    let r = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
    let pick = r % 100;
    let spread = (r >> 8) as usize;
    match pick {
        0..50 => 10 + spread % 1014,
        50..83 => 1024 + spread % (99 << 10),
        _ => (100 << 10) + spread % (900 << 10),
    }
}

/// Write `bytes` of values over `keys` keys, pipelined with noreply in
/// batches of about 4 MiB, each closed by `mn` so the client stays in step.
fn churn(conn: &mut Conn, bytes: u64, keys: u64) {
    let blob: Vec<u8> = (0..(1usize << 20)).map(|i| b'a' + (i * 7 % 26) as u8).collect();
    let (mut written, mut i) = (0u64, 0u64);
    let mut batch = Vec::with_capacity(8 << 20);
    while written < bytes {
        let len = size_of(i);
        let key = i.wrapping_mul(0x2545_F491_4F6C_DD1D) % keys;
        write!(batch, "set k{key} 0 0 {len} noreply\r\n").unwrap();
        batch.extend_from_slice(&blob[..len]);
        batch.extend_from_slice(b"\r\n");
        written += len as u64;
        i += 1;
        if batch.len() > 4 << 20 || written >= bytes {
            batch.extend_from_slice(b"mn\r\n");
            conn.stream.write_all(&batch).unwrap();
            batch.clear();
            let line = conn.line();
            assert_eq!(line, "MN\r\n", "a set failed");
        }
    }
}

#[test]
fn a_200_gib_limit_starts_untouched_and_churn_keeps_mappings_few() {
    let server = Server::strata(&["-m", "200g", "-t", "2"]);
    let mut conn = Conn::to(&server);
    let rss_start = server.rss_bytes();
    let maps_start = maps_lines(&server);
    eprintln!("-m 200g at start: RSS {:.1} MiB, {maps_start} mappings", rss_start as f64 / (1 << 20) as f64);
    assert!(rss_start < 64 << 20, "RSS {rss_start} at start: -m must not be touched until used");
    churn(&mut conn, 2 << 30, 10_000);
    let maps = maps_lines(&server);
    let rss = server.rss_bytes();
    let held = conn.stat("bytes");
    eprintln!("after 2 GiB of churn: {maps} mappings, RSS {:.1} MiB, {:.1} MiB of items", rss as f64 / (1 << 20) as f64, held as f64 / (1 << 20) as f64);
    assert_eq!(conn.stat("evictions"), 0);
    // One mapping per buffer made this 371 (and growing ~300 per GiB);
    // extents of 1 GiB reservations add a handful.
    assert!(maps < maps_start + 64, "{maps} mappings after the churn ({maps_start} at start)");
    // RSS follows what is held: items, their segments' slack and the index.
    assert!(rss < held * 2 + (64 << 20), "RSS {rss} for {held} bytes of items");
    // Values read back whole.
    for i in 0..200u64 {
        let key = i.wrapping_mul(0x2545_F491_4F6C_DD1D) % 10_000;
        if let Some(v) = conn.get(&format!("k{key}")) {
            assert!(v.iter().enumerate().all(|(j, &b)| b == b'a' + (j * 7 % 26) as u8), "k{key} damaged");
        }
    }
}

/// Whether the kernel offers transparent huge pages (`-L` needs them).
fn thp_available() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").is_ok_and(|m| !m.contains("[never]"))
}

#[test]
fn large_pages_mark_segment_memory_for_huge_pages() {
    if !thp_available() {
        eprintln!("skipped: no transparent huge pages");
        return;
    }
    let flagged = |server: &Server| {
        let smaps = std::fs::read_to_string(format!("/proc/{}/smaps", server.child.id())).expect("proc smaps");
        // VmFlags "hg": the mapping was madvise(MADV_HUGEPAGE)d.
        smaps.lines().filter(|l| l.starts_with("VmFlags:") && l.split_whitespace().any(|f| f == "hg")).count()
    };
    for (args, huge) in [(&["-m", "1g", "-L"][..], true), (&["-m", "1g"][..], false)] {
        let server = Server::strata(args);
        let mut conn = Conn::to(&server);
        churn(&mut conn, 16 << 20, 100);
        assert_eq!(flagged(&server) > 0, huge, "{args:?}: huge-page flag on segment memory");
    }
}
