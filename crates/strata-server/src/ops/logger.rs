//! The log path behind `watch`: per-worker bounded buffers that never make
//! a worker wait, fanned out to per-watcher bounded buffers.
//!
//! ```text
//!  request path ── streams() & STREAM == 0 ──► nothing (one relaxed load)
//!       │ a watcher wants this stream
//!       ▼
//!  WorkerLog (one per worker: frames [stream u32][len u32][line],
//!            ≤ worker_logbuf_size, 64 KiB)
//!       │ try_lock, never wait: busy or full ──► log_worker_dropped
//!       ▼ collect(): whoever wins `collecting` (a watcher's 1 ms pump, or a
//!       │ worker whose buffer is half full) swaps each worker buffer out
//!  Sink (one per watcher: bytes ≤ watcher_logbuf_size, 256 KiB) ── full or busy ──► skipped
//!       │                                      (`skipped=N` line later)
//!       ▼ the watcher connection's pump (ops/watch.rs)
//!  its output buffer ──► the kernel
//! ```
//!
//! Lines are formatted by the worker that logs them, with memcached's
//! `ts=<sec>.<usec> gid=<n>` prefix (the gid from one counter, touched
//! only while someone watches). A watcher that stops reading only fills
//! its own sink; nothing waits for it.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use strata_proto::number::push_u64;

use crate::stats::WorkerStats;

/// memcached's limit on watchers.
const MAX_WATCHERS: usize = 20;
/// A frame's header: stream and length.
const FRAME_HEADER_BYTES: usize = 8;

/// One worker's log buffer.
#[derive(Default)]
struct WorkerLog {
    frames: Mutex<Vec<u8>>,
    written: AtomicU64,
    dropped: AtomicU64,
}

/// One watcher's buffer of lines not yet in its connection's output.
pub struct Sink {
    streams: u32,
    /// `-o watcher_logbuf_size` (memcached's default 256 KiB).
    capacity_bytes: usize,
    buf: Mutex<SinkBuf>,
}

#[derive(Default)]
struct SinkBuf {
    bytes: Vec<u8>,
    skipped: u64,
}

/// The server's log state (in `Ops`).
pub struct Logger {
    /// The union of the attached watchers' streams (shared with the
    /// store's eviction hook).
    streams: Arc<AtomicU32>,
    gid: AtomicU64,
    /// One per worker, then one for any other logger (UDP, accept).
    workers: Box<[WorkerLog]>,
    /// `-o worker_logbuf_size` (memcached's default 64 KiB).
    worker_buf_bytes: usize,
    /// `-o watcher_logbuf_size`, each new watcher's sink.
    watcher_buf_bytes: usize,
    watchers: Mutex<Vec<Arc<Sink>>>,
    collecting: Mutex<Vec<u8>>,
    watcher_skipped: AtomicU64,
    watcher_sent: AtomicU64,
}

/// What `stats` shows of the log path.
#[derive(Default, Clone, Copy)]
pub struct LogTotals {
    pub worker_dropped: u64,
    pub worker_written: u64,
    pub watcher_skipped: u64,
    pub watcher_sent: u64,
    pub watchers: u64,
}

impl Logger {
    pub fn new(settings: &crate::settings::Settings) -> Logger {
        let workers = settings.threads.max(1);
        Logger {
            streams: Arc::new(AtomicU32::new(0)),
            gid: AtomicU64::new(0),
            workers: (0..=workers).map(|_| WorkerLog::default()).collect(),
            worker_buf_bytes: settings.tunables.worker_logbuf_bytes as usize,
            watcher_buf_bytes: settings.tunables.watcher_logbuf_bytes as usize,
            watchers: Mutex::new(Vec::new()),
            collecting: Mutex::new(Vec::new()),
            watcher_skipped: AtomicU64::new(0),
            watcher_sent: AtomicU64::new(0),
        }
    }

    /// Whether some watcher wants any of `streams` (the request path's only
    /// cost while nobody watches).
    #[inline]
    pub fn wants(&self, streams: u32) -> bool {
        self.streams.load(Relaxed) & streams != 0
    }

    /// The watched-streams mask, for a hook outside the server.
    pub fn streams_flag(&self) -> Arc<AtomicU32> {
        self.streams.clone()
    }

    /// Attach a watcher; `None` at memcached's limit.
    pub fn attach(&self, streams: u32) -> Option<Arc<Sink>> {
        let mut watchers = self.watchers.lock().unwrap_or_else(|e| e.into_inner());
        if watchers.len() >= MAX_WATCHERS {
            return None;
        }
        // memcached takes a gid for the watcher (its `min_gid`).
        self.gid.fetch_add(1, Relaxed);
        let sink = Arc::new(Sink { streams, capacity_bytes: self.watcher_buf_bytes, buf: Mutex::new(SinkBuf::default()) });
        watchers.push(sink.clone());
        self.streams.fetch_or(streams, Relaxed);
        Some(sink)
    }

    /// Detach a watcher (its connection closed).
    pub fn detach(&self, sink: &Arc<Sink>) {
        let mut watchers = self.watchers.lock().unwrap_or_else(|e| e.into_inner());
        watchers.retain(|w| !Arc::ptr_eq(w, sink));
        let union = watchers.iter().fold(0, |m, w| m | w.streams);
        self.streams.store(union, Relaxed);
    }

    /// Log one line on stream `stream` from the worker owning `stats`:
    /// `body` appends what follows `ts=... gid=... ` (no newline). Never
    /// waits: a busy or full buffer drops the line.
    #[cold]
    pub fn log(&self, worker: &[Arc<WorkerStats>], stats: &WorkerStats, stream: u32, body: impl FnOnce(&mut Vec<u8>)) {
        let index = worker.iter().position(|w| std::ptr::eq(&**w, stats)).unwrap_or(self.workers.len() - 1);
        self.log_at(index.min(self.workers.len() - 1), stream, body);
    }

    /// [`Logger::log`] from outside a worker (accept, close, background).
    #[cold]
    pub fn log_other(&self, stream: u32, body: impl FnOnce(&mut Vec<u8>)) {
        self.log_at(self.workers.len() - 1, stream, body);
    }

    fn log_at(&self, index: usize, stream: u32, body: impl FnOnce(&mut Vec<u8>)) {
        let log = &self.workers[index];
        let half_full = {
            let Ok(mut frames) = log.frames.try_lock() else {
                log.dropped.fetch_add(1, Relaxed);
                return;
            };
            let start = frames.len();
            frames.extend_from_slice(&[0; FRAME_HEADER_BYTES]);
            let since_epoch = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
            frames.extend_from_slice(b"ts=");
            push_u64(&mut frames, since_epoch.as_secs());
            frames.push(b'.');
            push_u64(&mut frames, u64::from(since_epoch.subsec_micros()));
            frames.extend_from_slice(b" gid=");
            push_u64(&mut frames, self.gid.fetch_add(1, Relaxed) + 1);
            frames.push(b' ');
            body(&mut frames);
            frames.push(b'\n');
            if frames.len() > self.worker_buf_bytes {
                frames.truncate(start);
                log.dropped.fetch_add(1, Relaxed);
                return;
            }
            let len = (frames.len() - start - FRAME_HEADER_BYTES) as u32;
            frames[start..start + 4].copy_from_slice(&stream.to_le_bytes());
            frames[start + 4..start + 8].copy_from_slice(&len.to_le_bytes());
            log.written.fetch_add(1, Relaxed);
            frames.len() > self.worker_buf_bytes / 2
        };
        if half_full {
            self.collect();
        }
    }

    /// Move every worker's lines to the watchers that want them, unless
    /// someone else is at it.
    pub fn collect(&self) {
        let Ok(mut scratch) = self.collecting.try_lock() else {
            return;
        };
        let watchers: Vec<Arc<Sink>> = self.watchers.lock().unwrap_or_else(|e| e.into_inner()).clone();
        for log in self.workers.iter() {
            scratch.clear();
            {
                let Ok(mut frames) = log.frames.try_lock() else { continue };
                std::mem::swap(&mut *frames, &mut scratch);
            }
            let mut at = 0;
            while at + FRAME_HEADER_BYTES <= scratch.len() {
                let stream = u32::from_le_bytes(scratch[at..at + 4].try_into().unwrap_or_default());
                let len = u32::from_le_bytes(scratch[at + 4..at + 8].try_into().unwrap_or_default()) as usize;
                let line = &scratch[at + FRAME_HEADER_BYTES..(at + FRAME_HEADER_BYTES + len).min(scratch.len())];
                at += FRAME_HEADER_BYTES + len;
                for sink in watchers.iter().filter(|w| w.streams & stream != 0) {
                    if sink.offer(line) {
                        self.watcher_sent.fetch_add(1, Relaxed);
                    } else {
                        self.watcher_skipped.fetch_add(1, Relaxed);
                    }
                }
            }
            // Hand the (now larger) buffer back if the worker's is empty,
            // so steady logging reuses capacity.
            if let Ok(mut frames) = log.frames.try_lock() {
                if frames.is_empty() {
                    scratch.clear();
                    std::mem::swap(&mut *frames, &mut scratch);
                }
            }
        }
    }

    pub fn totals(&self) -> LogTotals {
        let mut t = LogTotals {
            watcher_skipped: self.watcher_skipped.load(Relaxed),
            watcher_sent: self.watcher_sent.load(Relaxed),
            watchers: self.watchers.lock().map(|w| w.len() as u64).unwrap_or(0),
            ..LogTotals::default()
        };
        for log in self.workers.iter() {
            t.worker_dropped += log.dropped.load(Relaxed);
            t.worker_written += log.written.load(Relaxed);
        }
        t
    }
}

impl Sink {
    /// Queue a line; false (skipped) when full or busy. After skips, the
    /// next line that fits is preceded by memcached's `skipped=N`.
    fn offer(&self, line: &[u8]) -> bool {
        let Ok(mut buf) = self.buf.try_lock() else {
            return false;
        };
        let buf = &mut *buf;
        if buf.bytes.len() + line.len() + 32 > self.capacity_bytes {
            buf.skipped += 1;
            return false;
        }
        if buf.skipped > 0 {
            buf.bytes.extend_from_slice(b"skipped=");
            push_u64(&mut buf.bytes, buf.skipped);
            buf.bytes.push(b'\n');
            buf.skipped = 0;
        }
        buf.bytes.extend_from_slice(line);
        true
    }

    /// Move up to `max_bytes` of whole lines into `out`.
    pub fn drain(&self, out: &mut Vec<u8>, max_bytes: usize) {
        let Ok(mut buf) = self.buf.lock() else { return };
        if buf.bytes.is_empty() || max_bytes == 0 {
            return;
        }
        let take = if buf.bytes.len() <= max_bytes {
            buf.bytes.len()
        } else {
            buf.bytes[..max_bytes].iter().rposition(|&b| b == b'\n').map_or(max_bytes, |i| i + 1)
        };
        out.extend_from_slice(&buf.bytes[..take]);
        buf.bytes.drain(..take);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `-o watcher_logbuf_size` bounds what a watcher holds unread, and
    /// `-o worker_logbuf_size` what a worker holds before it hands lines on.
    #[test]
    fn buffer_sizes_follow_the_logbuf_options() {
        let mut settings = crate::settings::Settings::default();
        settings.tunables.watcher_logbuf_bytes = 1 << 10;
        settings.tunables.worker_logbuf_bytes = 512;
        let log = Logger::new(&settings);
        let sink = log.attach(1).unwrap();
        let line = [b'x'; 90];
        // Each line is ~120 bytes with its prefix: a 512-byte worker buffer
        // passes them on (collect) every few lines, a 1 KiB sink keeps 7.
        for _ in 0..100 {
            log.log_other(1, |out| out.extend_from_slice(&line));
        }
        log.collect();
        let totals = log.totals();
        assert_eq!(totals.worker_dropped, 0);
        assert_eq!(totals.worker_written, 100);
        let mut out = Vec::new();
        sink.drain(&mut out, usize::MAX);
        let kept = out.split(|&b| b == b'\n').filter(|l| !l.is_empty()).count() as u64;
        assert!(out.len() <= 1 << 10 && (5..=8).contains(&kept), "{} bytes, {kept} lines", out.len());
        assert_eq!(totals.watcher_sent, kept);
        assert_eq!(totals.watcher_skipped, 100 - kept);
    }
}
