//! One measured run: probe that the server speaks the protocol, optionally
//! prefill every key, then start the load threads, print progress, and
//! merge their tallies into a [`Report`].
//!
//! Connections are spread over threads (`conns / threads` each, the
//! remainder to the first ones); an open-loop rate and a request budget
//! (`--requests`) are split evenly. Each thread has its own RNG seeded
//! `seed + thread`, so a run is reproducible as far as the server's timing
//! allows (with `--requests`, the keys each thread asks for are too).

use crate::driver::{drive, LoadSpec, ThreadResult};
use crate::exchange::Codec;
use crate::keyspace::Keyspace;
use crate::mix::Mix;
use crate::report::Report;
use crate::sys;
use crate::tally::{ErrorKind, Tally};
use crate::tcp::TcpChannel;
use crate::udp::UdpChannel;
use crate::workload::{Protocol, Workload};
use mio::{Poll, Token};
use std::io::{Read, Write};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use strata_proto::client::{binary, text, udp as udp_frame, Status};

#[derive(Clone, Debug)]
pub struct RunConfig {
    pub server: SocketAddr,
    pub udp_server: SocketAddr,
    pub workload: Workload,
    pub duration: Duration,
    pub threads: usize,
    pub conns: usize,
    pub pipeline: usize,
    /// Open-loop total rate in requests per second; None is closed loop.
    pub rate: Option<f64>,
    /// Requests in all (`--requests`); None: until the duration's end.
    pub requests: Option<u64>,
    pub prefill: bool,
    /// Connections the prefill uses (`--prefill-conns`).
    pub prefill_conns: usize,
    pub seed: u64,
    pub progress: bool,
    pub load_cpu: Option<usize>,
    pub udp_timeout: Duration,
    /// `--tls`: the client config every connection shares (`tls.rs`).
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// `--tls-handshakes full|resumed`: measure new TLS connections
    /// instead of the workload (Some(true): resumed).
    pub tls_handshakes: Option<bool>,
}

/// Why a run did not happen.
#[derive(Debug)]
pub enum RunError {
    /// The server does not speak the requested protocol (exit code 3).
    Unsupported(String),
    Failed(String),
}

impl RunConfig {
    pub fn keyspace(&self) -> Keyspace {
        let w = &self.workload;
        Keyspace { key_size: w.key_size, key_count: w.key_end(), sizes: w.value_size.clone() }
    }
}

/// Check the server answers in the run's protocol.
pub fn probe(cfg: &RunConfig) -> Result<(), RunError> {
    let unsupported = |what: &str| RunError::Unsupported(format!("{} {what}", cfg.server));
    if cfg.workload.protocol == Protocol::Udp {
        return probe_udp(cfg.udp_server).map_err(|e| unsupported(&format!("gave no UDP reply on {}: {e}", cfg.udp_server)));
    }
    let mut conn = crate::tls::stream(cfg.server, cfg.tls.as_ref(), Duration::from_secs(2))
        .map_err(|e| RunError::Failed(format!("connect {}: {e}", cfg.server)))?;
    let (request, name): (Vec<u8>, _) = match cfg.workload.protocol {
        Protocol::Binary => {
            let mut out = Vec::new();
            binary::encode_noop(&mut out, 0x5eed);
            (out, "binary")
        }
        Protocol::Meta => (b"mn\r\n".to_vec(), "meta"),
        _ => (b"version\r\n".to_vec(), "text"),
    };
    conn.write_all(&request).map_err(|e| RunError::Failed(format!("write: {e}")))?;
    let mut buf = vec![0u8; 256];
    let n = conn.read(&mut buf).unwrap_or(0);
    let reply = &buf[..n];
    let ok = match cfg.workload.protocol {
        Protocol::Binary => matches!(binary::parse_response(reply, 1024), Ok(Status::Complete(r, _)) if r.opcode == 0x0a && r.opaque == 0x5eed),
        Protocol::Meta => reply == b"MN\r\n",
        _ => reply.starts_with(b"VERSION "),
    };
    if ok {
        Ok(())
    } else {
        Err(unsupported(&format!("does not speak the {name} protocol (reply {:?})", String::from_utf8_lossy(reply))))
    }
}

fn probe_udp(addr: SocketAddr) -> std::io::Result<()> {
    let bind = if addr.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
    let socket = UdpSocket::bind(bind)?;
    socket.connect(addr)?;
    socket.set_read_timeout(Some(Duration::from_millis(500)))?;
    let mut frame = Vec::new();
    udp_frame::encode_request(&mut frame, 0x7777, b"version\r\n");
    let mut buf = vec![0u8; 2048];
    for _ in 0..4 {
        socket.send(&frame)?;
        if let Ok(n) = socket.recv(&mut buf) {
            if n > 8 && buf[..2] == [0x77, 0x77] && buf[8..n].starts_with(b"VERSION ") {
                return Ok(());
            }
        }
    }
    Err(std::io::Error::other("no VERSION reply"))
}

/// Set every key once (text protocol, pipelined in batches, every reply
/// read and checked), so gets hit from the start. The keys are cut into
/// `prefill_conns` contiguous shares, one a connection; up to `threads`
/// threads drive them, each its connections in turn (a batch written to
/// each, then each one's replies read). Returns the keys stored.
pub fn prefill(cfg: &RunConfig) -> Result<u64, RunError> {
    let w = &cfg.workload;
    let conns = cfg.prefill_conns.clamp(1, w.key_count as usize);
    let threads = cfg.threads.clamp(1, conns);
    let shares = prefill_shares(w.key_offset, w.key_count, conns);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let mine: Vec<_> = shares.iter().cloned().enumerate().skip(t).step_by(threads).collect();
                s.spawn(move || prefill_thread(cfg, mine))
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("prefill thread panicked")).sum()
    })
}

/// `count` keys from `first` cut into `conns` contiguous shares, in order,
/// their sizes differing by one at most.
fn prefill_shares(first: u32, count: u32, conns: usize) -> Vec<std::ops::Range<u32>> {
    let at = |c: usize| first + (u64::from(count) * c as u64 / conns as u64) as u32;
    (0..conns).map(|c| at(c)..at(c + 1)).collect()
}

/// One prefill thread: its connections (index, keys) until every key is stored.
fn prefill_thread(cfg: &RunConfig, shares: Vec<(usize, std::ops::Range<u32>)>) -> Result<u64, RunError> {
    // Debian's memcached 1.6.18 -Z stops answering a TLS pipeline of
    // 64 sets of 1 KiB part way (decrypted input left in OpenSSL is not
    // looked at until more bytes arrive), so TLS prefills in small batches.
    let batch: u32 = if cfg.tls.is_some() { 8 } else { 256 };
    let failed = |e: String| RunError::Failed(format!("prefill: {e}"));
    let ks = cfg.keyspace();
    struct Share {
        conn: Box<dyn crate::tls::ReadWrite>,
        keys: std::ops::Range<u32>,
        mix: Mix,
        input: Vec<u8>,
        /// Sets written and not yet answered.
        sent: u32,
    }
    let mut open = Vec::new();
    for (c, keys) in shares {
        let conn = crate::tls::stream(cfg.server, cfg.tls.as_ref(), Duration::from_secs(10)).map_err(|e| failed(e.to_string()))?;
        // Connection 0 draws the sizes the one-connection prefill drew.
        let mix = Mix::new(&cfg.workload, (cfg.seed ^ 0xf111).wrapping_add(c as u64));
        open.push(Share { conn, keys, mix, input: Vec::new(), sent: 0 });
    }
    let (mut out, mut key) = (Vec::new(), Vec::new());
    let mut stored_all = 0u64;
    while open.iter().any(|s| !s.keys.is_empty()) {
        for s in open.iter_mut().filter(|s| !s.keys.is_empty()) {
            let last = s.keys.end.min(s.keys.start + batch);
            out.clear();
            for k in s.keys.start..last {
                key.clear();
                ks.write_key(k, &mut key);
                let len = s.mix.value_len();
                text::encode_set_header(&mut out, &key, ks.flags(k), 0, len as usize, false);
                ks.write_value(k, 0, len, &mut out);
                out.extend_from_slice(b"\r\n");
            }
            s.conn.write_all(&out).map_err(|e| failed(e.to_string()))?;
            s.sent = last - s.keys.start;
            s.keys.start = last;
        }
        for s in open.iter_mut().filter(|s| s.sent > 0) {
            while s.sent > 0 {
                match text::parse_reply(&s.input, 1024) {
                    Ok(Status::Complete(text::Reply::Stored, n)) => {
                        s.input.drain(..n);
                        s.sent -= 1;
                        stored_all += 1;
                    }
                    Ok(Status::Complete(other, _)) => return Err(failed(format!("set answered {other:?}"))),
                    Err(e) => return Err(failed(format!("bad reply: {e:?}"))),
                    Ok(Status::Partial) => {
                        let mut buf = [0u8; 16384];
                        // `tls::stream` reads again after EINTR.
                        let n = s.conn.read(&mut buf).map_err(|e| failed(e.to_string()))?;
                        if n == 0 {
                            return Err(failed("server closed the connection".into()));
                        }
                        s.input.extend_from_slice(&buf[..n]);
                    }
                }
            }
        }
    }
    Ok(stored_all)
}

fn thread_body(cfg: &RunConfig, index: usize, conns: usize, spec: &LoadSpec, progress: &AtomicU64) -> ThreadResult {
    if let Some(cpu) = cfg.load_cpu {
        if let Err(e) = sys::pin_current_thread(cpu) {
            eprintln!("strata-bench: cannot pin load thread to CPU {cpu}: {e}");
        }
    }
    let mut poll = Poll::new().expect("epoll instance");
    let mut codec = Codec::new(cfg.workload.protocol, cfg.keyspace());
    let mut mix = Mix::new(&cfg.workload, cfg.seed.wrapping_add(index as u64));
    let mut failed = Tally::default();
    let finish = |mut r: ThreadResult, failed: &Tally| {
        r.tally.merge(failed);
        r
    };
    if cfg.workload.protocol == Protocol::Udp {
        let mut chans: Vec<UdpChannel> = (0..conns)
            .filter_map(|i| {
                UdpChannel::connect(cfg.udp_server, poll.registry(), Token(i), cfg.udp_timeout)
                    .map_err(|_| failed.error(ErrorKind::Connect))
                    .ok()
            })
            .collect();
        let r = drive(&mut poll, &mut chans, &mut codec, &mut mix, spec, progress);
        finish(r, &failed)
    } else {
        let mut chans: Vec<TcpChannel> = Vec::new();
        for _ in 0..conns {
            match TcpChannel::connect(cfg.server, poll.registry(), Token(chans.len()), cfg.tls.as_ref()) {
                Ok(c) => chans.push(c),
                Err(_) => failed.error(ErrorKind::Connect),
            }
        }
        let r = drive(&mut poll, &mut chans, &mut codec, &mut mix, spec, progress);
        finish(r, &failed)
    }
}

/// Run the load (no probe, no prefill: see [`run_full`]).
pub fn run(cfg: &RunConfig) -> Report {
    if let Some(resumed) = cfg.tls_handshakes {
        return handshakes(cfg, resumed);
    }
    let threads = cfg.threads.clamp(1, cfg.conns.max(1));
    let start = Instant::now() + Duration::from_millis(20);
    let progress = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let cfg = cfg.clone();
            let progress = progress.clone();
            let conns = cfg.conns / threads + usize::from(i < cfg.conns % threads);
            let budget = cfg.requests.map(|n| n / threads as u64 + u64::from((i as u64) < n % threads as u64));
            std::thread::spawn(move || {
                let spec = LoadSpec {
                    pipeline: cfg.pipeline.max(1),
                    rate: cfg.rate.map(|r| r / threads as f64),
                    start,
                    end: start + cfg.duration,
                    budget,
                    drain: Duration::from_secs(2),
                };
                thread_body(&cfg, i, conns, &spec, &progress)
            })
        })
        .collect();
    let show = cfg.progress && cfg.duration >= Duration::from_secs(5);
    let mut last = (Instant::now(), 0u64);
    while !handles.iter().all(|h| h.is_finished()) {
        std::thread::sleep(Duration::from_millis(100));
        let now = Instant::now();
        if show && now.duration_since(last.0) >= Duration::from_secs(1) && now < start + cfg.duration {
            let done = progress.load(Ordering::Relaxed);
            let rate = (done - last.1) as f64 / now.duration_since(last.0).as_secs_f64();
            eprintln!("[{:5.1} s] {done:>12} requests, {rate:>10.0} req/s", now.duration_since(start).as_secs_f64());
            last = (now, done);
        }
    }
    let mut tally = Tally::default();
    let mut unsent = 0;
    let mut finished = start;
    for h in handles {
        let r = h.join().expect("load thread panicked");
        tally.merge(&r.tally);
        unsent += r.unsent;
        finished = finished.max(r.finished);
    }
    // Issuing stops at the end of the duration; the drain of the requests
    // then in flight (microseconds, unless the server stalls) is included.
    let elapsed = finished.saturating_duration_since(start).max(Duration::from_millis(1));
    make_report(cfg, threads, &tally, unsent, elapsed)
}

/// `--tls-handshakes`: `--threads` threads each making new TLS
/// connections one after another for the run's duration.
fn handshakes(cfg: &RunConfig, resumed: bool) -> Report {
    let threads = cfg.threads.max(1);
    let start = Instant::now();
    let end = start + cfg.duration;
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (addr, load_cpu) = (cfg.server, cfg.load_cpu);
            std::thread::spawn(move || {
                if let Some(cpu) = load_cpu {
                    let _ = sys::pin_current_thread(cpu);
                }
                crate::tls::handshake_thread(addr, resumed, end)
            })
        })
        .collect();
    let mut tally = Tally::default();
    let mut resumed_count = 0;
    for h in handles {
        let r = h.join().expect("handshake thread panicked");
        tally.merge(&r.tally);
        resumed_count += r.resumed;
    }
    if cfg.progress {
        eprintln!("strata-bench: {} TLS connections, {resumed_count} resumed", tally.completed);
    }
    let mut report = make_report(cfg, threads, &tally, 0, start.elapsed());
    report.protocol = format!("tls-handshake-{}", if resumed { "resumed" } else { "full" });
    report.conns = threads;
    report.pipeline = 1;
    report
}

fn make_report(cfg: &RunConfig, threads: usize, t: &Tally, unsent: u64, elapsed: Duration) -> Report {
    let w = &cfg.workload;
    let elapsed_s = elapsed.as_secs_f64();
    Report {
        server: if w.protocol == Protocol::Udp { cfg.udp_server } else { cfg.server }.to_string(),
        protocol: format!("{:?}", w.protocol).to_lowercase(),
        mode: if cfg.rate.is_some() { "open" } else { "closed" }.into(),
        target_rate_rps: cfg.rate,
        threads,
        conns: cfg.conns,
        pipeline: cfg.pipeline,
        keys: w.key_count,
        key_size: w.key_size,
        value_size: w.value_size.to_string(),
        get_ratio: w.get_ratio,
        mget: w.mget,
        dist: match w.dist {
            crate::workload::KeyDist::Uniform => "uniform".into(),
            crate::workload::KeyDist::Zipf(s) => format!("zipf:{s}"),
        },
        elapsed_s,
        requests: t.completed,
        throughput_rps: t.completed as f64 / elapsed_s,
        gets: t.gets,
        sets: t.sets,
        keys_requested: t.keys_requested,
        hits: t.hits,
        misses: t.misses,
        sent: t.sent,
        aborted: t.aborted,
        timed_out: t.timed_out,
        unsent,
        error_total: t.error_total(),
        errors: t.error_map().into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        latency: t.latency.percentiles(),
        latency_gets: t.latency_gets.percentiles(),
        latency_sets: t.latency_sets.percentiles(),
        precision: Report::precision(),
        prefill_keys: 0,
        prefill_s: 0.0,
    }
}

/// Probe, prefill if asked, run.
pub fn run_full(cfg: &RunConfig) -> Result<Report, RunError> {
    probe(cfg)?;
    let t0 = Instant::now();
    let stored = if cfg.prefill { prefill(cfg)? } else { 0 };
    let prefill_s = if cfg.prefill { t0.elapsed().as_secs_f64() } else { 0.0 };
    Ok(Report { prefill_keys: stored, prefill_s, ..run(cfg) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefill_shares_cover_the_keys_once_in_order() {
        for (first, count, conns) in [(0, 10, 1), (0, 10, 3), (5, 7, 7), (1000, 300_000_000, 16), (u32::MAX - 17, 17, 16)] {
            let shares = prefill_shares(first, count, conns);
            assert_eq!(shares.len(), conns);
            assert_eq!((shares[0].start, shares[conns - 1].end), (first, first + count));
            for pair in shares.windows(2) {
                assert_eq!(pair[0].end, pair[1].start);
            }
            let sizes: Vec<u32> = shares.iter().map(|r| r.end - r.start).collect();
            let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            assert!(hi - lo <= 1, "{sizes:?}");
        }
    }
}
