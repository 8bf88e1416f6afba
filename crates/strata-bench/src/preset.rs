//! Workload presets reproducing the published memcached setups. A preset
//! fills every option the user did not give on the command line.
//!
//! | preset          | after                          | protocol | conns x depth | keys x size | values        | get  |
//! |-----------------|--------------------------------|----------|---------------|-------------|---------------|------|
//! | `memaslap`      | memaslap defaults              | text     | 64 x 1        | 10k x 64 B  | 1024 B        | 0.9  |
//! | `memtier-binary`| memtier_benchmark -P memcache_binary | binary | 50 x 1   | 100k x 16 B | 32 B          | 0.9  |
//! | `udp`           | memaslap --udp                 | udp      | 64 x 1        | 10k x 64 B  | 1024 B        | 0.9  |
//! | `pipelined-get` | mc-crusher ascii_get, 8 deep   | text     | 16 x 8        | 10k x 10 B  | 32 B          | 1.0  |
//! | `mget48`        | 48-key batched multi-gets      | text     | 16 x 1        | 100k x 20 B | 20 B          | 1.0  |
//! | `object-mix`    | 4-100 B, 1-2 KiB, 5-20 KiB     | text     | 64 x 1        | 4k x 32 B   | mix           | 0.9  |
//! | `latency`       | memaslap mix, open loop (sweep)| text     | 64 x 1        | 10k x 64 B  | 1024 B        | 0.9  |

use crate::workload::{KeyDist, Protocol, ValueSize, Workload};

/// A preset: a workload plus load shape.
pub struct Preset {
    pub name: &'static str,
    pub about: &'static str,
    pub workload: Workload,
    pub conns: usize,
    pub pipeline: usize,
    /// Open-loop rate for a single run of this preset (the `latency` preset).
    pub rate: Option<f64>,
}

pub const NAMES: [&str; 7] = ["memaslap", "memtier-binary", "udp", "pipelined-get", "mget48", "object-mix", "latency"];

fn workload(protocol: Protocol, key_count: u32, key_size: usize, value_size: ValueSize, get_ratio: f64, mget: usize) -> Workload {
    Workload { protocol, key_count, key_offset: 0, key_size, value_size, get_ratio, mget, dist: KeyDist::Uniform }
}

pub fn preset(name: &str) -> Option<Preset> {
    let memaslap = || workload(Protocol::Text, 10_000, 64, ValueSize::Fixed(1024), 0.9, 1);
    let p = |name, about, workload, conns, pipeline, rate| Preset { name, about, workload, conns, pipeline, rate };
    Some(match name {
        "memaslap" => p("memaslap", "memaslap's default mix: 90% get / 10% set, 64 B keys, 1 KiB values, 64 connections", memaslap(), 64, 1, None),
        "memtier-binary" => p(
            "memtier-binary",
            "memtier_benchmark, binary protocol: 90% get / 10% set, 32 B values, 50 connections",
            workload(Protocol::Binary, 100_000, 16, ValueSize::Fixed(32), 0.9, 1),
            50,
            1,
            None,
        ),
        "udp" => p("udp", "memaslap --udp: the memaslap mix over UDP datagrams", Workload { protocol: Protocol::Udp, ..memaslap() }, 64, 1, None),
        "pipelined-get" => p(
            "pipelined-get",
            "mc-crusher style: text gets only, 8 requests in flight per connection",
            workload(Protocol::Text, 10_000, 10, ValueSize::Fixed(32), 1.0, 1),
            16,
            8,
            None,
        ),
        "mget48" => p(
            "mget48",
            "batched multi-gets of 48 keys, 20 B keys and values",
            workload(Protocol::Text, 100_000, 20, ValueSize::Fixed(20), 1.0, 48),
            16,
            1,
            None,
        ),
        "object-mix" => p(
            "object-mix",
            "object sizes 4-100 B, 1-2 KiB, 5-20 KiB in equal shares, 90% get / 10% set",
            workload(Protocol::Text, 4_000, 32, ValueSize::parse("mix").expect("literal"), 0.9, 1),
            64,
            1,
            None,
        ),
        "latency" => p(
            "latency",
            "the memaslap mix, open loop: `sweep` steps its rate to saturation; `run` uses 20k req/s",
            memaslap(),
            64,
            1,
            Some(20_000.0),
        ),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_is_valid() {
        for name in NAMES {
            let p = preset(name).unwrap();
            assert_eq!(p.name, name);
            p.workload.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        assert!(preset("nope").is_none());
    }
}
