//! The `conn` fuzz target's body: a [`Script`] run through a worker's real
//! connection lifecycle (`session/`: open, receive, drive, the reaction to
//! each `Progress`, close), its connections (`Conn::process`), front ends
//! and service, in process, over an in-memory I/O engine ([`Memory`]) in
//! the kernel's place. As with io_uring, bytes arrive as "completions": a
//! `Deliver` hands the script's next bytes to the session's receive path
//! (the input, its pooled buffer, the accounting); a `Process` is one drive
//! (the requests, at most the step's budget, then their replies written to
//! a byte string); flash reads finish in the script's order, after
//! whichever other connections ran meanwhile.
//!
//! ```text
//!  script ─► clients[0..4]: queued bytes ─Deliver: receive─► Conn.input ─Process: drive─►
//!            Conn.out ─send─► replies
//!                                     flash reads: parked ─submit─► in flight ─Complete(pick, ok)─► done
//!  trace: (client, bytes each drive consumed), in order
//!     └─► canonical run: a fresh SegStore, each traced piece delivered whole
//!         and driven to the end, in the same order ─► replies, compared
//! ```
//!
//! The oracle, in layers:
//! - (a) every call returns (libFuzzer's `-timeout` catches a hang), the
//!   harness's loops are bounded (a connection that neither consumes nor
//!   finishes is a panic), the replies of a drive stay under what the
//!   bytes sent can ask for, input under what was delivered, and with a
//!   flash tier every read handed out is finished or abandoned
//!   (`extstore_io_queue` returns).
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

use std::io;
use std::os::fd::BorrowedFd;
use std::sync::Arc;

use strata_store::{Clock, EngineConfig, MapStore, RelTime, SegStore};

use super::flash_store;
use super::replies::{comparable, Compare};
use super::script::{Script, Step, CONNS};
use crate::conn::Progress;
use crate::flash::ReadState;
use crate::protocol::Protocol;
use crate::runtime::Runtime;
use crate::service::Hooks;
use crate::new_conn::NewConn;
use crate::session::{Filled, Io, ReadPool, Room, Session, Sessions};
use crate::settings::{ProtocolChoice, Settings};
use crate::stats::WorkerStats;

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
    let mut run = Run::new(Arc::new(Runtime::new(settings.clone(), Box::new(MapStore::new(config.clone())), clock())));
    run.script(script);
    let outcome = run.outcome();
    let engine = SegStore::new(config);
    let mut canonical = Run::new(Arc::new(Runtime::new(settings, Box::new(engine), clock())));
    for (c, piece) in std::mem::take(&mut run.trace) {
        canonical.send(c, &piece);
        canonical.deliver(c, usize::MAX);
        canonical.drain(c);
    }
    for (c, got) in run.clients.iter().enumerate() {
        let how = Compare {
            binary: run.io.wires[c].binary,
            access_times: !run.clock_far && !canonical.clock_far,
            dump_items: !got.dump_overlapped,
        };
        let (got_replies, want_replies) = (comparable(&run.io.wires[c].replies, how), comparable(&canonical.io.wires[c].replies, how));
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

/// The harness's I/O engine: bytes come in as the script delivers them
/// ([`Run::deliver`], the session's receive path, as io_uring's
/// completions do), replies go out to a byte string (all at once), and
/// flash reads are finished by the script ([`Run::complete`]). A link is
/// the connection's slot: what it wrote outlives its close, for the
/// harness to compare.
#[derive(Default)]
struct Memory {
    wires: Vec<Wire>,
}

#[derive(Default)]
struct Wire {
    /// Every reply byte written.
    replies: Vec<u8>,
    /// The connection spoke the binary protocol (its replies compare as
    /// binary), as it was last seen or as it closed.
    binary: bool,
}

impl Io for Memory {
    type Link = usize;
    type Endpoint = ();

    fn open(&mut self, slot: usize, _: ()) -> io::Result<usize> {
        if slot >= self.wires.len() {
            self.wires.resize_with(slot + 1, Wire::default);
        }
        Ok(slot)
    }

    fn socket(_: &usize) -> Option<BorrowedFd<'_>> {
        None
    }

    /// Bytes arrive by delivery, not by reading: nothing to do here.
    fn fill(&mut self, _: &mut Session<usize>, _: Room, _: &mut ReadPool, _: Hooks<'_>, _: &WorkerStats) -> Filled {
        Filled::Wait
    }

    fn send(&mut self, s: &mut Session<usize>, _: &WorkerStats) -> io::Result<()> {
        let out = &mut s.conn.out;
        self.wires[s.link].replies.extend_from_slice(out.pending());
        out.consume(out.pending_len());
        Ok(())
    }

    fn sent(&self, s: &Session<usize>) -> bool {
        s.conn.pending_output() == 0
    }

    /// Every read goes to the harness; none fails at submission.
    fn submit_flash(&mut self, s: &mut Session<usize>, _: usize) -> bool {
        let none_left = s.conn.flash.submit(|_| true);
        assert!(!none_left, "reads in flight");
        false
    }

    fn writer(_: &mut usize) -> Option<&mut dyn std::io::Write> {
        None
    }

    fn close(&mut self, slot: usize, s: Session<usize>) {
        self.wires[slot].binary = s.conn.protocol == Protocol::Binary;
    }
}

/// One client connection as the harness sees it (its session is the
/// sessions' slot of the same number, None once closed).
#[derive(Default)]
struct Client {
    /// Bytes the script sent that the connection has not read yet.
    queued: Vec<u8>,
    /// Every byte delivered, and how many of them requests consumed.
    delivered: Vec<u8>,
    consumed: usize,
    /// Another connection ran requests while this one's dump was in
    /// progress (`replies.rs`: its `stats cachedump` lines may show them).
    dump_overlapped: bool,
}

struct Run {
    shared: Arc<Runtime>,
    sessions: Sessions<usize>,
    io: Memory,
    clients: Vec<Client>,
    /// (client, the bytes one drive consumed), in order.
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
    /// The harness's worker, its connections opened (slots 0 to 3, as
    /// the acceptor would count them).
    fn new(shared: Arc<Runtime>) -> Run {
        let mut sessions = Sessions::new(shared.clone(), 0);
        let mut io = Memory::default();
        for c in 0..CONNS {
            shared.core.curr_connections.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let opening = NewConn { stream: (), peer: format!("tcp:127.0.0.1:{}", 50_000 + c), listen: "tcp:127.0.0.1:11211".into(), tls: Default::default(), resume: None };
            assert_eq!(sessions.open(&mut io, opening), Some(c), "the harness's connection {c}");
        }
        sessions.ready.clear();
        let clock_start = shared.core.clock.now();
        let clients = (0..CONNS).map(|_| Client::default()).collect();
        Run { shared, sessions, io, clients, trace: Vec::new(), sent: 0, largest_step: 0, parks: 0, clock_start, clock_far: false }
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
        Outcome { parks: self.parks, pieces: self.trace.len(), replies: self.io.wires.iter().map(|w| w.replies.clone()).collect() }
    }

    fn send(&mut self, c: usize, bytes: &[u8]) {
        self.clients[c].queued.extend_from_slice(bytes);
        self.sent += bytes.len();
        self.largest_step = self.largest_step.max(bytes.len());
    }

    fn closed(&self, c: usize) -> bool {
        self.sessions.get(c).is_none()
    }

    /// Hand up to `n` queued bytes to the connection, as a receive's
    /// completion does (nothing once it closed: the socket is gone).
    fn deliver(&mut self, c: usize, n: usize) {
        if self.closed(c) {
            return;
        }
        let client = &mut self.clients[c];
        let n = n.min(client.queued.len());
        let bytes: Vec<u8> = client.queued.drain(..n).collect();
        client.delivered.extend_from_slice(&bytes);
        self.sessions.receive(c, n, |s| s.take_in(&bytes));
        self.sessions.ready.clear();
    }

    /// [`Run::drive`], again while a crawler dump (`lru_crawler
    /// metadump|mgdump`) is in progress, until it ends. A server runs such
    /// a dump on threads of its own, beside the worker; the harness's
    /// `inline_background` runs it on the worker, so that its coverage is
    /// the input's, and drives it to its end before any other connection
    /// runs, as the canonical run does. (What a dump shows of writes made
    /// during it, and the `BUSY` another crawler request gets meanwhile,
    /// the e2e `dumps` tests check.)
    fn process(&mut self, c: usize, budget: usize) -> Option<Progress> {
        for _ in 0..DRAIN_ROUNDS {
            let progress = self.drive(c, budget);
            if !self.sessions.get(c).is_some_and(|s| s.conn.holds_crawler()) {
                return progress;
            }
        }
        panic!("connection {c}: a crawler dump still going after {DRAIN_ROUNDS} turns");
    }

    /// One drive of the connection, as a worker's turn runs it (at most
    /// `budget` requests, then its replies written); a park hands its
    /// reads to the "kernel" (the harness).
    fn drive(&mut self, c: usize, budget: usize) -> Option<Progress> {
        let Some(s) = self.sessions.get(c) else { return Some(Progress::Close) };
        let unread = s.conn.input.len();
        let client = &self.clients[c];
        assert!(unread <= client.delivered.len() - client.consumed, "input holds more than was delivered and not consumed");
        let replies_before = self.io.wires[c].replies.len();
        // A new turn: no connection has yielded in it yet.
        self.sessions.due_now();
        self.sessions.ready.clear();
        self.sessions.budget = budget;
        let progress = self.sessions.drive(&mut self.io, c);
        self.sessions.ready.clear();
        self.clock_far |= self.shared.core.clock.now().abs_diff(self.clock_start) > ACCESS_SPAN;
        // A close can turn on bytes it did not consume (an overlong line
        // after requests it answered: memcached drops their replies and
        // closes), so the canonical run gets all the input this drive saw.
        let left = match self.sessions.get(c) {
            Some(s) => {
                let client = &self.clients[c];
                assert!(s.conn.input.capacity() <= 2 * client.delivered.len() + 64 * 1024, "input capacity {}", s.conn.input.capacity());
                self.io.wires[c].binary = s.conn.protocol == Protocol::Binary;
                s.conn.input.len()
            }
            None => 0,
        };
        assert!(left <= unread, "input grew during a drive: {unread} -> {left}");
        let seen = unread - left;
        let client = &mut self.clients[c];
        if seen > 0 {
            let piece = client.delivered[client.consumed..client.consumed + seen].to_vec();
            client.consumed += piece.len();
            self.trace.push((c, piece));
        }
        // Bounds: replies within what the bytes sent can ask for (a key of
        // 2 bytes per value of at most one step's bytes, `stats` groups of
        // a few KiB per request), input within what was delivered.
        let out_bound = 64 * 1024 + self.sent * (self.largest_step + 4096);
        let replied = self.io.wires[c].replies.len() - replies_before;
        assert!(replied <= out_bound, "{replied} reply bytes after {} sent", self.sent);
        if progress == Some(Progress::FlashWait) {
            assert!(self.shared.flash.on, "a request parked without a flash tier");
            self.parks += 1;
        }
        if seen > 0 {
            for (d, other) in self.clients.iter_mut().enumerate() {
                let dumping = self.sessions.get(d).is_some_and(|s| s.conn.is_dumping() && !s.conn.is_watching());
                other.dump_overlapped |= d != c && dumping;
            }
        }
        progress
    }

    /// Finish in-flight read `pick` (modulo their number) of client `c`:
    /// the bytes read from the file, or a failed read (`ok` false).
    fn complete(&mut self, c: usize, pick: usize, ok: bool) {
        let Some(s) = self.sessions.get(c) else { return };
        let waits = &s.conn.flash;
        let in_flight: Vec<usize> = waits.0.iter().filter(|w| matches!(w.state, ReadState::InFlight)).map(|w| w.key_index).collect();
        if in_flight.is_empty() {
            return;
        }
        let key_index = in_flight[pick % in_flight.len()];
        let wait = waits.0.iter().find(|w| w.key_index == key_index).expect("the wait just found");
        let buf = if ok { wait.read.read_blocking().ok() } else { None };
        self.sessions.flash_done(c, None, key_index, buf);
        self.sessions.ready.clear();
    }

    /// Drive client `c` until it has consumed all it was delivered (or
    /// closed), finishing its flash reads as they are asked for.
    fn drain(&mut self, c: usize) {
        for _ in 0..DRAIN_ROUNDS {
            if self.closed(c) {
                return;
            }
            match self.process(c, usize::MAX) {
                // Everything delivered is consumed or waits for more bytes.
                Some(Progress::NeedInput | Progress::Close | Progress::CloseAfterWrite) | None => return,
                // A watcher waits for events; nothing more to run.
                Some(Progress::Dumping) if self.sessions.get(c).is_some_and(|s| s.conn.is_watching()) => return,
                Some(Progress::FlashWait) => {
                    while self.sessions.get(c).is_some_and(|s| s.conn.flash.pending()) {
                        self.complete(c, 0, true);
                    }
                }
                // A dump refilled (`inline_background`: it never rests).
                Some(Progress::Yield | Progress::OutputFull | Progress::Dumping) => {}
            }
        }
        panic!("connection {c} still busy after {DRAIN_ROUNDS} turns");
    }
}

impl Drop for Run {
    /// The connections close, as a worker closes them: reads they still
    /// hold are abandoned.
    fn drop(&mut self) {
        for c in 0..CONNS {
            self.sessions.close(&mut self.io, c);
        }
    }
}
