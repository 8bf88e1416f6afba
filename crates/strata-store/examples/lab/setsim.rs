//! The small store's simulator: replays a key stream like a cache (get
//! each key; on a miss, set it) through the real layout, a `SegStore` with
//! a flash tier and its small store, in process, and reports per
//! configuration what the small store's settings (`ext_log_share`,
//! `ext_set_threshold`, `ext_set_size`, `ext_set_bloom_bits`,
//! `ext_small_item_max`) cost and give: miss ratio, write amplification,
//! device reads and false positives per miss, RAM per item on flash, and
//! rewrites (merges). docs/design/small-store.md has the tables and the
//! commands that made them.
//!
//! As the server runs it: a thread steps `flash_rewrite` (the server's
//! `strata-flash-merge`, as `tests/store/flash_small.rs`'s `with_rewrites`),
//! reads go through the server's flash protocol (RAM `get`, else
//! `flash_check`, a blocking read, `finish_flash_read`, RAM again when it
//! was not visited: `tests/store/flash.rs`'s `get`), and `maintain` runs
//! every `tick` requests (the server's once-a-second tick).
//!
//! ```text
//!  cargo build --release -p strata-store --example lab
//!  target/release/examples/lab setsim DIR [name=value ...]
//!    DIR          where the flash file goes (a file per run, deleted after)
//!    keys=4000000 distinct keys K; requests=12000000 of which warmup=4000000 not counted
//!    dist=zipf:0.9 | uniform           key popularity (zipf over ranks 1..K)
//!    sizes=fixed:64 | mixed:50:300     value bytes (fixed), or key + value bytes
//!                                      uniform in [lo, hi] (per key, fixed); keys 20 bytes
//!    mem=32 (MiB, -m)  flash=512 (MiB)  page=1 (ext_page_size: MiB, or KiB with a k)
//!    wbuf=4 (ext_wbuf_size, the same units; the tier takes at most -m/16)
//!    tick=1000000 (requests between `maintain` calls)  max_secs=300
//!    inline=0     0: a thread steps `flash_rewrite` (the server's way);
//!                 N: no thread, the replay steps it every N requests until
//!                 none is due (merges never lag the requests: the figures
//!                 do not depend on how much CPU the merges get)
//!    log=13 threshold=1 set=4096 bloom=320 small_max=512   (the small store's settings)
//!    seed=1
//!    sweep=NAME:V1,V2,...  one run per value of NAME (any of the names above);
//!                          repeat sweep= for a cross product
//! ```
//!
//! A run is given up as jammed (its row says after how many million
//! requests) when in a million requests items left RAM, the small store
//! refused some (`fallbacks`) and took none: its rewrites no longer free
//! room; and as stalled when it takes longer than `max_secs` (300) in
//! all. Its merges and fallbacks are then totals, not the counted part's.
//!
//! With `SETSIM_PROGRESS=1` in the environment it prints, every million
//! requests, that million's miss ratio and the small store's state.
//!
//! Prints one Markdown table row per run on stdout (the header first) and
//! the run's full figures on stderr. Columns:
//! - miss: misses / counted requests; cold: the counted requests that were
//!   a key's first in the whole stream (no cache avoids them);
//! - WA: extstore bytes written / bytes admitted (`ext_stats()`'s
//!   `bytes_written` and `bytes_admitted`), over the counted part;
//! - rd/miss: device reads issued (`flash_check` handing out a read) by
//!   requests that ended as misses, per miss (the `small` stats cannot
//!   tell them apart: `log_hits` also counts records served from a write
//!   buffer, which `log_reads` does not); fp/miss: set reads whose set did
//!   not hold the key (`false_positives`' delta) per miss;
//! - B/item: `small.ram_bytes` / items in the small store (sets and logs)
//!   at the end; idx B/item: all the flash tier's RAM (`index_bytes`, the
//!   larger items' index too) / every item on flash;
//! - on flash: items on flash at the end (small store's and larger ones);
//! - merges: rewrites done in the counted part; blocks/merge: log blocks
//!   written per merge in it (what a merge takes in, in steady state: a
//!   merge rewrites its partition's whole extent for them, and takes at
//!   most -m/32 / 8 KiB of them, `merge.rs`); fallbacks: small items
//!   the small store could not take (ring full, index at its share);
//!   dropped: items a rewrite had no room for (or under the threshold).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use strata_store::*;

/// 20-byte keys.
const KEY_BYTES: usize = 20;

#[derive(Clone, Debug)]
enum Dist {
    Uniform,
    Zipf(f64),
}

#[derive(Clone, Debug)]
enum Sizes {
    /// Value bytes.
    Fixed(usize),
    /// Key + value bytes, uniform in [lo, hi].
    Mixed(usize, usize),
}

#[derive(Clone, Debug)]
struct Config {
    keys: u64,
    requests: u64,
    warmup: u64,
    dist: Dist,
    sizes: Sizes,
    mem_mb: u64,
    flash_mb: u64,
    /// ext_page_size, KiB.
    page_kb: u64,
    /// ext_wbuf_size, KiB (the tier takes at most -m/16 and a page).
    wbuf_kb: u64,
    tick: u64,
    /// 0: a thread steps the rewrites (the server's way); N: the replay
    /// itself steps them every N requests until none is due.
    inline: u64,
    /// Give a run up after this many seconds (stalled).
    max_secs: u64,
    log: u32,
    threshold: u32,
    set: usize,
    bloom: u32,
    small_max: usize,
    seed: u64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            keys: 4_000_000,
            requests: 12_000_000,
            warmup: 4_000_000,
            dist: Dist::Zipf(0.9),
            sizes: Sizes::Fixed(64),
            mem_mb: 32,
            flash_mb: 512,
            page_kb: 1024,
            wbuf_kb: 4096,
            tick: 1_000_000,
            max_secs: 300,
            inline: 0,
            log: 13,
            threshold: 1,
            set: 4096,
            bloom: 320,
            small_max: 512,
            seed: 1,
        }
    }
}

fn parse_num<T: std::str::FromStr>(name: &str, v: &str) -> T {
    v.replace('_', "").parse().unwrap_or_else(|_| panic!("{name}={v}: not a number"))
}

impl Config {
    fn set(&mut self, name: &str, v: &str) {
        match name {
            "keys" => self.keys = parse_num(name, v),
            "requests" => self.requests = parse_num(name, v),
            "warmup" => self.warmup = parse_num(name, v),
            "dist" => {
                self.dist = match v.split_once(':') {
                    None if v == "uniform" => Dist::Uniform,
                    Some(("zipf", s)) => Dist::Zipf(parse_num(name, s)),
                    _ => panic!("dist={v}: uniform or zipf:S"),
                }
            }
            "sizes" => {
                let parts: Vec<&str> = v.split(':').collect();
                self.sizes = match parts.as_slice() {
                    ["fixed", n] => Sizes::Fixed(parse_num(name, n)),
                    ["mixed", lo, hi] => Sizes::Mixed(parse_num(name, lo), parse_num(name, hi)),
                    _ => panic!("sizes={v}: fixed:VALUE or mixed:LO:HI"),
                };
                if let Sizes::Mixed(lo, hi) = self.sizes {
                    assert!(lo >= KEY_BYTES + 8 && hi >= lo, "sizes={v}: key + value bytes, at least {}", KEY_BYTES + 8);
                }
            }
            "mem" => self.mem_mb = parse_num(name, v),
            "flash" => self.flash_mb = parse_num(name, v),
            "page" => {
                self.page_kb = match v.strip_suffix('k') {
                    Some(kib) => parse_num(name, kib),
                    None => parse_num::<u64>(name, v) << 10,
                }
            }
            "wbuf" => {
                self.wbuf_kb = match v.strip_suffix('k') {
                    Some(kib) => parse_num(name, kib),
                    None => parse_num::<u64>(name, v) << 10,
                }
            }
            "tick" => self.tick = parse_num(name, v),
            "max_secs" => self.max_secs = parse_num(name, v),
            "inline" => self.inline = parse_num(name, v),
            "log" => self.log = parse_num(name, v),
            "threshold" => self.threshold = parse_num(name, v),
            "set" => self.set = parse_num(name, v),
            "bloom" => self.bloom = parse_num(name, v),
            "small_max" => self.small_max = parse_num(name, v),
            "seed" => self.seed = parse_num(name, v),
            _ => panic!("unknown setting {name}"),
        }
    }

    fn dist_name(&self) -> String {
        match self.dist {
            Dist::Uniform => "uniform".into(),
            Dist::Zipf(s) => format!("zipf {s}"),
        }
    }

    fn sizes_name(&self) -> String {
        match self.sizes {
            Sizes::Fixed(v) => format!("{KEY_BYTES}+{v}"),
            Sizes::Mixed(lo, hi) => format!("{lo}-{hi}"),
        }
    }

    /// Key + value bytes of key `id`.
    fn item_bytes(&self, id: u64) -> usize {
        match self.sizes {
            Sizes::Fixed(v) => KEY_BYTES + v,
            Sizes::Mixed(lo, hi) => lo + (mix(id ^ 0x5eed_0f_5123) % (hi - lo + 1) as u64) as usize,
        }
    }
}

/// splitmix64's finalizer.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }
    /// Uniform in [0, 1).
    fn f64(&mut self) -> f64 {
        (self.next() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// Zipf over ranks 1..=n with exponent s: rejection-inversion sampling
/// (Hörmann and Derflinger 1996, as Apache Commons RNG's
/// `RejectionInversionZipfSampler`), O(1) a draw.
struct Zipf {
    n: f64,
    s: f64,
    h_x1: f64,
    h_n: f64,
    cut: f64,
}

impl Zipf {
    fn new(n: u64, s: f64) -> Zipf {
        let mut z = Zipf { n: n as f64, s, h_x1: 0.0, h_n: 0.0, cut: 0.0 };
        z.h_x1 = z.h_integral(1.5) - 1.0;
        z.h_n = z.h_integral(n as f64 + 0.5);
        z.cut = 2.0 - z.h_integral_inv(z.h_integral(2.5) - z.h(2.0));
        z
    }
    fn h(&self, x: f64) -> f64 {
        (-self.s * x.ln()).exp()
    }
    fn h_integral(&self, x: f64) -> f64 {
        let lx = x.ln();
        helper2((1.0 - self.s) * lx) * lx
    }
    fn h_integral_inv(&self, x: f64) -> f64 {
        let t = (x * (1.0 - self.s)).max(-1.0);
        (helper1(t) * x).exp()
    }
    /// A rank in 1..=n.
    fn sample(&self, rng: &mut Rng) -> u64 {
        loop {
            let u = self.h_n + rng.f64() * (self.h_x1 - self.h_n);
            let x = self.h_integral_inv(u);
            let k = (x + 0.5).floor().clamp(1.0, self.n);
            if k - x <= self.cut || u >= self.h_integral(k + 0.5) - self.h(k) {
                return k as u64;
            }
        }
    }
}

/// ln(1 + x) / x.
fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// (e^x - 1) / x.
fn helper2(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x))
    }
}

fn key_of(id: u64, out: &mut Vec<u8>) {
    use std::io::Write;
    out.clear();
    write!(out, "key:{id:016}").expect("into a Vec");
    debug_assert_eq!(out.len(), KEY_BYTES);
}

/// Key `id`'s value: its id, then filler.
fn value_of(id: u64, len: usize, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&id.to_le_bytes()[..len.min(8)]);
    out.resize(len, b'a' + (id % 26) as u8);
}

fn value_ok(id: u64, len: usize, v: &[u8]) -> bool {
    v.len() == len && v[..len.min(8)] == id.to_le_bytes()[..len.min(8)] && v[len.min(8)..].iter().all(|&b| b == b'a' + (id % 26) as u8)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Got {
    Ram,
    Flash,
    Miss,
}

/// A read as the server makes it (module docs); `reads` counts the device
/// reads it issued, `wrong` a value that is not the key's.
fn get(store: &SegStore, key: &[u8], id: u64, len: usize, now: RelTime, reads: &mut u64, wrong: &mut u64) -> Got {
    let mut seen: Option<bool> = None;
    let mut visit = |view: ItemView<'_>, _created: bool| {
        seen = Some(value_ok(id, len, view.value));
        GetAction::default()
    };
    let got = if store.get(key, GetOptions::default(), now, &mut visit) {
        Got::Ram
    } else if let Some(read) = store.flash_check(key, now) {
        *reads += 1;
        let data = read.read_blocking().ok();
        if store.finish_flash_read(&read, data.as_deref(), GetOptions::default(), false, now, &mut visit) == FlashFinish::Visited {
            Got::Flash
        } else if store.get(key, GetOptions::default(), now, &mut visit) {
            Got::Flash
        } else {
            Got::Miss
        }
    } else if store.get(key, GetOptions::default(), now, &mut visit) {
        // Served from a write buffer or an open log block, back into RAM.
        Got::Flash
    } else {
        Got::Miss
    };
    if seen == Some(false) {
        *wrong += 1;
    }
    got
}

/// One run's figures.
struct Run {
    counted: u64,
    misses: u64,
    cold: u64,
    ram_hits: u64,
    flash_hits: u64,
    app_reads_on_miss: u64,
    wrong: u64,
    not_stored: u64,
    before: ExtStats,
    after: ExtStats,
    merges_thread: u64,
    /// The million of requests after which the run was given up: the
    /// small store took no item in it while items left RAM.
    jammed: Option<u64>,
    /// Given up after `max_secs` with this many requests done.
    stalled: Option<u64>,
    secs: f64,
    line: String,
}

fn run(dir: &std::path::Path, c: &Config) -> Run {
    let path = dir.join(format!("setsim-{}.flash", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let mut store = SegStore::new(EngineConfig { memory_limit_bytes: c.mem_mb << 20, ..EngineConfig::default() });
    let ext = ExtConfig {
        paths: vec![ExtPath { path: path.clone(), size_bytes: c.flash_mb << 20, bucket: ExtBucket::Default }],
        page_size_bytes: c.page_kb << 10,
        wbuf_size_bytes: c.wbuf_kb << 10,
        tunables: Arc::new(ExtTunables::default()),
        small_item_max: c.small_max,
        log_percent: c.log,
        set_size_bytes: c.set,
        set_bloom_bits: c.bloom,
        set_threshold: c.threshold,
        ..ExtConfig::default()
    };
    let line = store.attach_flash(ext).expect("flash tier");
    let now: RelTime = 100;
    let zipf = match c.dist {
        Dist::Zipf(s) => Some(Zipf::new(c.keys, s)),
        Dist::Uniform => None,
    };
    let mut rng = Rng(c.seed.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ 0x1234_5678);
    let mut seen_keys = vec![0u64; (c.keys as usize).div_ceil(64)];
    let (mut key, mut value) = (Vec::with_capacity(KEY_BYTES), Vec::new());
    let stop = AtomicBool::new(false);
    let progress = std::env::var_os("SETSIM_PROGRESS").is_some();
    let mut window_misses = 0u64;
    let mut window_stats = ExtStats::default();
    let started = Instant::now();
    let mut r = Run {
        counted: 0,
        misses: 0,
        cold: 0,
        ram_hits: 0,
        flash_hits: 0,
        app_reads_on_miss: 0,
        wrong: 0,
        not_stored: 0,
        before: ExtStats::default(),
        after: ExtStats::default(),
        merges_thread: 0,
        jammed: None,
        stalled: None,
        secs: 0.0,
        line,
    };
    let store = &store;
    std::thread::scope(|scope| {
        let inline = c.inline;
        let mut inline_state = FlashRewrite::default();
        let stop = &stop;
        let rewrites = scope.spawn(move || {
            let mut state = FlashRewrite::default();
            while inline == 0 && !stop.load(Ordering::Relaxed) {
                if !store.flash_rewrite(now, &mut state) {
                    store.flash_rewrite_wait(std::time::Duration::from_millis(5));
                }
            }
            state.merges
        });
        for n in 0..c.requests {
            if n == c.warmup {
                r.before = store.ext_stats().expect("flash stats");
            }
            if n % 10_000 == 0 && started.elapsed().as_secs() >= c.max_secs {
                r.stalled = Some(n);
                r.after = store.ext_stats().expect("flash stats");
                break;
            }
            if n > 0 && n % c.tick == 0 {
                store.maintain(now, true);
            }
            if inline > 0 && n % inline == 0 {
                while store.flash_rewrite(now, &mut inline_state) {}
            }
            let id = match &zipf {
                Some(z) => z.sample(&mut rng) - 1,
                None => rng.next() % c.keys,
            };
            let counted = n >= c.warmup;
            let (word, bit) = ((id / 64) as usize, 1u64 << (id % 64));
            let first = seen_keys[word] & bit == 0;
            seen_keys[word] |= bit;
            key_of(id, &mut key);
            let len = c.item_bytes(id) - KEY_BYTES;
            let mut reads = 0;
            let got = get(store, &key, id, len, now, &mut reads, &mut r.wrong);
            if counted {
                r.counted += 1;
                match got {
                    Got::Ram => r.ram_hits += 1,
                    Got::Flash => r.flash_hits += 1,
                    Got::Miss => {
                        r.misses += 1;
                        r.cold += u64::from(first);
                        r.app_reads_on_miss += reads;
                    }
                }
            }
            window_misses += u64::from(got == Got::Miss);
            if (n + 1) % 1_000_000 == 0 {
                let st = store.ext_stats().expect("flash stats");
                let s = &st.small;
                if progress {
                    eprintln!(
                        "{:>5}M: miss {:.4}; small: {} in sets, {} in logs, merges {} (failed {}), fallbacks {}, written {} MiB, admitted {} MiB; pages free {}, tail blocked {}, write fallbacks {}; small RAM {} KiB ({} sets, {} tombstones); {:.0} s",
                        (n + 1) / 1_000_000,
                        window_misses as f64 / 1e6,
                        s.items_sets,
                        s.items_log,
                        s.merges,
                        s.merges_failed,
                        s.fallbacks,
                        st.bytes_written >> 20,
                        st.bytes_admitted >> 20,
                        st.pages_free,
                        s.tail_blocked,
                        st.write_fallbacks,
                        s.ram_bytes >> 10,
                        s.sets,
                        s.tombstones,
                        started.elapsed().as_secs_f64()
                    );
                }
                // Jammed: a million requests in which items left RAM
                // (the small store refused some) and it took none.
                let p = &window_stats.small;
                if s.fallbacks > p.fallbacks && s.items_admitted == p.items_admitted {
                    r.jammed = Some((n + 1) / 1_000_000);
                    r.after = st;
                    break;
                }
                window_stats = st;
                window_misses = 0;
            }
            if got == Got::Miss {
                value_of(id, len, &mut value);
                if !matches!(store.store(&StoreRequest::set(&key, &value), now), StoreResult::Stored { .. }) {
                    r.not_stored += 1;
                }
            }
        }
        if r.jammed.is_none() && r.stalled.is_none() {
            r.after = store.ext_stats().expect("flash stats");
        }
        stop.store(true, Ordering::Relaxed);
        store.flash_rewrite_wake();
        r.merges_thread = rewrites.join().expect("rewrite thread") + inline_state.merges;
    });
    r.secs = started.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&path);
    r
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

const HEADER: &str = "| stream | sizes | log % | threshold | set | bloom bits | small max | miss | cold | WA | rd/miss | fp/miss | B/item | idx B/item | on flash | merges | blocks/merge | fallbacks | dropped | s |\n\
                      |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|";

/// A row's first cells: the run's stream and settings.
fn settings_cells(c: &Config) -> String {
    format!("| {} | {} | {} | {} | {} | {} | {} |", c.dist_name(), c.sizes_name(), c.log, c.threshold, c.set, c.bloom, c.small_max)
}

fn row(c: &Config, r: &Run) -> String {
    let given_up = match (r.jammed, r.stalled) {
        (Some(m), _) => Some(format!("jammed at {m}M requests")),
        (_, Some(n)) => Some(format!("stalled: {n} requests in {} s", c.max_secs)),
        _ => None,
    };
    if let Some(why) = given_up {
        let a = &r.after.small;
        return format!(
            "{} {why} | | | | | | | {} | {} | | {} | {} | {:.0} |",
            settings_cells(c),
            r.after.objects_used,
            a.merges,
            a.fallbacks,
            a.dropped,
            r.secs
        );
    }
    let (b, a) = (&r.before.small, &r.after.small);
    let wa = ratio(r.after.bytes_written - r.before.bytes_written, r.after.bytes_admitted - r.before.bytes_admitted);
    let small_items = a.items_sets + a.items_log;
    format!(
        "{} {:.4} | {:.4} | {:.2} | {:.4} | {:.4} | {:.2} | {:.2} | {} | {} | {:.0} | {} | {} | {:.0} |",
        settings_cells(c),
        ratio(r.misses, r.counted),
        ratio(r.cold, r.counted),
        wa,
        ratio(r.app_reads_on_miss, r.misses),
        ratio(a.false_positives - b.false_positives, r.misses),
        ratio(a.ram_bytes, small_items),
        ratio(r.after.index_bytes, r.after.objects_used),
        r.after.objects_used,
        a.merges - b.merges,
        ratio(a.log_blocks_written - b.log_blocks_written, a.merges - b.merges),
        a.fallbacks - b.fallbacks,
        a.dropped - b.dropped,
        r.secs
    )
}

pub fn main(args: Vec<String>) {
    let args: Vec<String> = args.into_iter().skip(1).collect();
    let dir = std::path::PathBuf::from(args.first().expect("usage: setsim DIR [name=value ...] [sweep=name:v1,v2 ...]"));
    let mut base = Config::default();
    let mut sweeps: Vec<(String, Vec<String>)> = Vec::new();
    for a in &args[1..] {
        let (name, v) = a.split_once('=').unwrap_or_else(|| panic!("{a}: name=value"));
        if name == "sweep" {
            let (what, values) = v.split_once(':').unwrap_or_else(|| panic!("sweep={v}: name:v1,v2,..."));
            // A zipf value has a colon of its own: split on commas only.
            sweeps.push((what.to_string(), values.split(',').map(str::to_string).collect()));
        } else {
            base.set(name, v);
        }
    }
    let mut configs = vec![base];
    for (what, values) in &sweeps {
        configs = configs
            .iter()
            .flat_map(|c| {
                values.iter().map(move |v| {
                    let mut c = c.clone();
                    c.set(what, v);
                    c
                })
            })
            .collect();
    }
    println!("{HEADER}");
    for c in &configs {
        assert!(c.warmup < c.requests, "warmup={} is not below requests={}", c.warmup, c.requests);
        let r = run(&dir, c);
        println!("{}", row(c, &r));
        let (b, a) = (&r.before.small, &r.after.small);
        eprintln!(
            "{c:?}{}\n  {}\n  counted {} requests: misses {} (cold {}), RAM hits {}, flash hits {}; device reads on misses {} (app count); wrong values {}, sets refused {}\n  \
             small (counted part): set reads {} hits {} false positives {}, log reads {} hits {}, admitted {} items {} bytes, written {} bytes, merges {} (failed {}), \
             sets written {}, log blocks {}, dropped {}, spilled {}, fallbacks {}, tombstones written {}, tail blocked {}\n  \
             at the end: items in sets {} in logs {}, sets {}, partitions {}, tombstones {}, small RAM {} B; flash index RAM {} B, items on flash {}; \
             extstore written {} admitted {} (whole run WA {:.2}), page evictions {} reclaims {}, objects evicted {}, write fallbacks {}, miss_from_extstore {}, badcrc {}; rewrite thread merges {}",
            r.jammed.map_or(String::new(), |m| format!(" JAMMED after {m}M requests"))
                + &r.stalled.map_or(String::new(), |n| format!(" STALLED after {n} requests")),
            r.line,
            r.counted,
            r.misses,
            r.cold,
            r.ram_hits,
            r.flash_hits,
            r.app_reads_on_miss,
            r.wrong,
            r.not_stored,
            a.set_reads - b.set_reads,
            a.set_hits - b.set_hits,
            a.false_positives - b.false_positives,
            a.log_reads - b.log_reads,
            a.log_hits - b.log_hits,
            a.items_admitted - b.items_admitted,
            a.bytes_admitted - b.bytes_admitted,
            a.bytes_written - b.bytes_written,
            a.merges - b.merges,
            a.merges_failed - b.merges_failed,
            a.sets_written - b.sets_written,
            a.log_blocks_written - b.log_blocks_written,
            a.dropped - b.dropped,
            a.spilled - b.spilled,
            a.fallbacks - b.fallbacks,
            a.tombstones_written - b.tombstones_written,
            a.tail_blocked - b.tail_blocked,
            a.items_sets,
            a.items_log,
            a.sets,
            a.partitions,
            a.tombstones,
            a.ram_bytes,
            r.after.index_bytes,
            r.after.objects_used,
            r.after.bytes_written,
            r.after.bytes_admitted,
            r.after.admit_write_amplification(),
            r.after.page_evictions,
            r.after.page_reclaims,
            r.after.objects_evicted,
            r.after.write_fallbacks,
            r.after.miss_from_extstore,
            r.after.badcrc_from_extstore,
            r.merges_thread,
        );
    }
}
