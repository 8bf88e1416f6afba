//! The `conn` fuzz target's body: a [`Script`] run through the real
//! connection state machine (`Conn::process`), front ends and service,
//! in process, with the harness in the worker's place: it delivers bytes
//! in the script's pieces, writes replies out, and completes flash reads
//! in the script's order, after whichever other connections ran meanwhile.
//!
//! ```text
//!  script ─► clients[0..4]: queued bytes ─Deliver─► Conn.input ─Process─► Conn.out ─► replies
//!                                     flash reads: parked ─submit─► in flight ─Complete(pick, ok)─► done
//!  trace: (client, bytes each Process consumed), in order
//!     └─► canonical run: a fresh SegStore, each traced piece delivered whole
//!         and processed to the end, in the same order ─► replies, compared
//! ```
//!
//! The oracle, in layers:
//! - (a) every call returns (libFuzzer's `-timeout` catches a hang), the
//!   harness's loops are bounded (a connection that neither consumes nor
//!   finishes is a panic), `out` stays under what the bytes sent can ask
//!   for, input under what was delivered, and with a flash tier every read
//!   handed out is finished or abandoned (`extstore_io_queue` returns).
//! - (b)+(c) without flash (a fresh `MapStore` per input): each client's
//!   replies equal a canonical run's, where the same requests run in the
//!   same order across connections, each delivered whole, over a fresh
//!   `SegStore`. A difference is either framing (a request split, parked
//!   or yielded answers differently) or the engines (the production
//!   store disagrees with the reference `MapStore`, which is
//!   model-tested against memcached's rules); both are bugs. Why this
//!   rather than a hand-written model of the replies: it checks every
//!   command and every flag the fuzzer finds, raw bytes included, not
//!   only those a model spells out, and the MapStore side is already the
//!   model of the store's semantics. The two stores' CAS counters both
//!   start at 0 and step by 1, so CAS values compare as they are. What is
//!   left out of the comparison, and why, is `replies.rs`'s: `STAT`
//!   figures, a watcher's log lines, an `mj` reply's wall-clock times,
//!   access times once `debugtime` moved the clock past what the
//!   `SegStore` keeps, which items a key dump names (compared: how many),
//!   and a `stats cachedump`'s items at all once another connection ran
//!   during it.
//!
//! Both runs set `inline_background` (`settings.rs`): a crawl runs to its
//! end inside its request and a crawler dump on the worker, driven to its
//! end before any other connection runs ([`Run::process`]), and no dump
//! rests. So no thread but the harness's runs, the crawler is free at
//! every request, and what an input covers turns on its bytes alone, not
//! on how threads and the clock fell (which kept libFuzzer finding
//! "new" edges in a run's last minutes).
//!
//! With flash (`flash_store.rs`), the store is shared between inputs, so
//! only (a) runs.

use std::sync::Arc;

use strata_store::{Clock, EngineConfig, MapStore, RelTime, SegStore};

use super::flash_store;
use super::replies::{comparable, Compare};
use super::script::{Script, Step, CONNS};
use crate::conn::{Conn, Progress};
use crate::flash::io::ReadState;
use crate::service::Service;
use crate::settings::{ProtocolChoice, Settings};
use crate::shared::Shared;

/// Process calls one connection may take to finish its input at the end
/// of a script (each must consume a request, swallow bytes or wait for a
/// read the harness then completes).
const DRAIN_ROUNDS: usize = 10_000;

/// `-m` of both stores: a script stores at most a few hundred KiB, and a
/// `SegStore` of 64 MiB takes 13 times longer to make (0.9 ms, without
/// AddressSanitizer) than one of 4.
const MEMORY_BYTES: u64 = 4 << 20;

/// How far from its segment's creation a `SegStore` item's access time
/// is kept (a 16-bit delta of seconds; COMPATIBILITY.md, `me la=`).
const ACCESS_SPAN: RelTime = i16::MAX as RelTime;

/// Before the first input: build the flash store (a fuzzer's `init`), so
/// no input is charged for it.
pub fn init() {
    drop(flash_store::store());
}

/// The target: decode `data` and run it.
pub fn fuzz_conn(data: &[u8]) {
    let _ = run(&Script::decode(data));
}

/// What a script did (for tests that check a seed reaches its path).
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Times a request parked on flash reads.
    pub parks: usize,
    /// Process calls that consumed bytes.
    pub pieces: usize,
    /// Each connection's reply bytes.
    pub replies: Vec<Vec<u8>>,
}

/// Run `script`, panicking on the first broken rule.
pub fn run(script: &Script) -> Outcome {
    // The fuzzer's build has `debugtime` (debug assertions); a stable
    // replay of its inputs must parse them as it did.
    strata_proto::enable_debugtime();
    if script.options.flash {
        let guard = flash_store::store();
        let store = guard.as_ref().expect("flash store");
        let before = store.io_queue();
        let mut run = Run::new(store.shared.clone());
        run.script(script);
        let outcome = run.outcome();
        drop(run);
        assert_eq!(store.io_queue(), before, "flash reads handed out and never finished nor abandoned");
        return outcome;
    }
    let settings = settings(script);
    let config = engine_config(settings.item_size_max);
    let mut run = Run::new(Arc::new(Shared::new(settings.clone(), Box::new(MapStore::new(config.clone())), clock())));
    run.script(script);
    let outcome = run.outcome();
    let engine = SegStore::new(config);
    let mut canonical = Run::new(Arc::new(Shared::new(settings, Box::new(engine), clock())));
    for (c, piece) in std::mem::take(&mut run.trace) {
        canonical.send(c, &piece);
        canonical.deliver(c, usize::MAX);
        canonical.drain(c);
    }
    for (c, (got, want)) in run.clients.iter().zip(&canonical.clients).enumerate() {
        let how = Compare {
            binary: got.conn.protocol == crate::ctx::Protocol::Binary,
            access_times: !run.clock_far && !canonical.clock_far,
            dump_items: !got.dump_overlapped,
        };
        let (got_replies, want_replies) = (comparable(&got.replies, how), comparable(&want.replies, how));
        if got_replies != want_replies {
            panic!(
                "connection {c}: replies differ from the canonical run's\n  split:     {:?}\n  canonical: {:?}",
                String::from_utf8_lossy(&got_replies),
                String::from_utf8_lossy(&want_replies)
            );
        }
    }
    outcome
}

fn settings(script: &Script) -> Settings {
    let protocol = match script.options.protocol {
        2 => ProtocolChoice::Ascii,
        3 => ProtocolChoice::Binary,
        _ => ProtocolChoice::Auto,
    };
    let item_size_max = if script.options.small_items { 1024 } else { Settings::default().item_size_max };
    Settings { threads: 1, protocol, item_size_max, memory_limit_bytes: MEMORY_BYTES, inline_background: true, ..Settings::default() }
}

/// Both stores' config. Made once per `-I`: its class table (a lookup of
/// 128 Ki sizes) took a quarter of an input's time under the fuzzer's
/// instrumentation when made per input.
fn engine_config(item_size_max: usize) -> EngineConfig {
    static CONFIGS: std::sync::Mutex<Vec<EngineConfig>> = std::sync::Mutex::new(Vec::new());
    let mut configs = CONFIGS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(config) = configs.iter().find(|c| c.item_size_max_bytes == item_size_max) {
        return config.clone();
    }
    let config = EngineConfig { memory_limit_bytes: MEMORY_BYTES, item_size_max_bytes: item_size_max, ..EngineConfig::default() };
    configs.push(config.clone());
    config
}

fn clock() -> Clock {
    Clock::starting_at(1_700_000_000)
}

/// One client connection as the harness sees it.
#[derive(Default)]
struct Client {
    conn: Conn,
    /// Bytes the script sent that the connection has not read yet.
    queued: Vec<u8>,
    /// Every byte delivered, and how many of them requests consumed.
    delivered: Vec<u8>,
    consumed: usize,
    /// Every reply byte written out.
    replies: Vec<u8>,
    closed: bool,
    /// Another connection ran requests while this one's dump was in
    /// progress (`replies.rs`: its `stats cachedump` lines may show them).
    dump_overlapped: bool,
}

struct Run {
    shared: Arc<Shared>,
    clients: Vec<Client>,
    /// (client, the bytes one process call consumed), in order.
    trace: Vec<(usize, Vec<u8>)>,
    /// Bytes the script sent, on all connections.
    sent: usize,
    /// The longest run of bytes sent in one step (bounds a value's size).
    largest_step: usize,
    parks: usize,
    /// The clock as the run began, and whether `debugtime` moved it
    /// further from that than a `SegStore` item's access time can follow.
    clock_start: RelTime,
    clock_far: bool,
}

impl Run {
    fn new(shared: Arc<Shared>) -> Run {
        let clients = (0..CONNS).map(|_| Client { conn: Conn::new(shared.requires_auth(), None), ..Client::default() }).collect();
        let clock_start = shared.clock.now();
        Run { shared, clients, trace: Vec::new(), sent: 0, largest_step: 0, parks: 0, clock_start, clock_far: false }
    }

    fn script(&mut self, script: &Script) {
        for step in &script.steps {
            match step {
                Step::Raw { conn, bytes } => self.send(usize::from(*conn), bytes),
                Step::Request { conn, req } => self.send(usize::from(*conn), &req.wire()),
                Step::Deliver { conn, n } => self.deliver(usize::from(*conn), if *n == 0 { usize::MAX } else { usize::from(*n) }),
                Step::Process { conn, budget } => {
                    self.process(usize::from(*conn), usize::from(*budget).max(1));
                }
                Step::Complete { conn, pick, ok } => self.complete(usize::from(*conn), usize::from(*pick), *ok),
            }
        }
        for c in 0..CONNS {
            self.deliver(c, usize::MAX);
            self.drain(c);
        }
    }

    fn outcome(&self) -> Outcome {
        Outcome { parks: self.parks, pieces: self.trace.len(), replies: self.clients.iter().map(|c| c.replies.clone()).collect() }
    }

    fn send(&mut self, c: usize, bytes: &[u8]) {
        self.clients[c].queued.extend_from_slice(bytes);
        self.sent += bytes.len();
        self.largest_step = self.largest_step.max(bytes.len());
    }

    /// Move up to `n` queued bytes into the connection's input (nothing
    /// once it closed: the socket is gone).
    fn deliver(&mut self, c: usize, n: usize) {
        let client = &mut self.clients[c];
        if client.closed {
            return;
        }
        let n = n.min(client.queued.len());
        client.conn.input.extend_from_slice(&client.queued[..n]);
        client.delivered.extend_from_slice(&client.queued[..n]);
        client.queued.drain(..n);
    }

    /// [`Run::process_once`], again while a crawler dump (`lru_crawler
    /// metadump|mgdump`) is in progress, until it ends. A server runs such
    /// a dump on threads of its own, beside the worker; the harness's
    /// `inline_background` runs it on the worker, so that its coverage is
    /// the input's, and drives it to its end before any other connection
    /// runs, as the canonical run does. (What a dump shows of writes made
    /// during it, and the `BUSY` another crawler request gets meanwhile,
    /// the e2e `dumps` tests check.)
    fn process(&mut self, c: usize, budget: usize) -> Progress {
        for _ in 0..DRAIN_ROUNDS {
            let progress = self.process_once(c, budget);
            if self.clients[c].closed || !self.clients[c].conn.holds_crawler() {
                return progress;
            }
        }
        panic!("connection {c}: a crawler dump still going after {DRAIN_ROUNDS} turns");
    }

    /// One `Conn::process` as a worker's turn runs it, then the replies
    /// written out; a park hands its reads to the "kernel" (the harness).
    fn process_once(&mut self, c: usize, budget: usize) -> Progress {
        let stats = self.shared.worker_stats[0].clone();
        let client = &mut self.clients[c];
        if client.closed {
            return Progress::Close;
        }
        let before = client.conn.input.len();
        let progress = {
            let exec = Service::new(&self.shared, &stats).for_conn(c as u64 + 1);
            client.conn.process(&exec, budget)
        };
        self.clock_far |= self.shared.clock.now().abs_diff(self.clock_start) > ACCESS_SPAN;
        let after = client.conn.input.len();
        assert!(after <= before, "input grew during process: {before} -> {after}");
        assert!(before <= client.delivered.len() - client.consumed, "input holds more than was delivered and not consumed");
        // A close can turn on bytes it did not consume (an overlong line
        // after requests it answered: memcached drops their replies and
        // closes), so the canonical run gets all the input this call saw.
        let closing = matches!(progress, Progress::Close | Progress::CloseAfterWrite);
        let seen = if closing { before } else { before - after };
        if seen > 0 {
            let piece = client.delivered[client.consumed..client.consumed + seen].to_vec();
            client.consumed += piece.len();
            self.trace.push((c, piece));
        }
        // Bounds: replies within what the bytes sent can ask for (a key of
        // 2 bytes per value of at most one step's bytes, `stats` groups of
        // a few KiB per request), input within what was delivered.
        let out_bound = 64 * 1024 + self.sent * (self.largest_step + 4096);
        assert!(client.conn.out.len() <= out_bound, "{} reply bytes pending after {} sent", client.conn.out.len(), self.sent);
        assert!(client.conn.input.capacity() <= 2 * client.delivered.len() + 64 * 1024, "input capacity {}", client.conn.input.capacity());
        let pending = client.conn.pending_output();
        client.replies.extend_from_slice(&client.conn.out[client.conn.wpos..]);
        client.conn.consume_output(pending);
        match progress {
            Progress::Close | Progress::CloseAfterWrite => self.close(c),
            Progress::FlashWait => {
                assert!(self.shared.flash_on, "a request parked without a flash tier");
                // Every read goes to the harness; none fails at submission.
                let none_left = client.conn.flash.submit(|_| true);
                assert!(!none_left, "reads in flight");
                self.parks += 1;
            }
            Progress::NeedInput | Progress::Yield | Progress::OutputFull | Progress::Dumping => {}
        }
        if seen > 0 {
            for (d, other) in self.clients.iter_mut().enumerate() {
                other.dump_overlapped |= d != c && other.conn.is_dumping() && !other.conn.is_watching();
            }
        }
        progress
    }

    /// Finish in-flight read `pick` (modulo their number) of client `c`:
    /// the bytes read from the file, or a failed read (`ok` false).
    fn complete(&mut self, c: usize, pick: usize, ok: bool) {
        let waits = &mut self.clients[c].conn.flash;
        let in_flight: Vec<usize> = waits.0.iter().filter(|w| matches!(w.state, ReadState::InFlight)).map(|w| w.key_index).collect();
        if in_flight.is_empty() {
            return;
        }
        let key_index = in_flight[pick % in_flight.len()];
        let wait = waits.0.iter().find(|w| w.key_index == key_index).expect("the wait just found");
        let buf = if ok { wait.read.read_blocking().ok() } else { None };
        waits.complete(key_index, buf);
    }

    /// Run client `c` until it has consumed all it was delivered (or
    /// closed), finishing its flash reads as they are asked for.
    fn drain(&mut self, c: usize) {
        for _ in 0..DRAIN_ROUNDS {
            if self.clients[c].closed {
                return;
            }
            match self.process(c, usize::MAX) {
                // Everything delivered is consumed or waits for more bytes.
                Progress::NeedInput | Progress::Close | Progress::CloseAfterWrite => return,
                // A watcher waits for events; nothing more to run.
                Progress::Dumping if self.clients[c].conn.is_watching() => return,
                Progress::FlashWait => {
                    while self.clients[c].conn.flash.pending() {
                        self.complete(c, 0, true);
                    }
                }
                // A dump refilled (`inline_background`: it never rests).
                Progress::Yield | Progress::OutputFull | Progress::Dumping => {}
            }
        }
        panic!("connection {c} still busy after {DRAIN_ROUNDS} turns");
    }

    /// The connection closes: reads it still holds are abandoned, as the
    /// worker's close does.
    fn close(&mut self, c: usize) {
        let client = &mut self.clients[c];
        client.closed = true;
        if let Some(tier) = self.shared.engine.flash() {
            client.conn.flash.abandon(tier);
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        for c in 0..CONNS {
            self.close(c);
        }
    }
}
