//! The bodies of the libFuzzer targets that reach this crate (`fuzz/`,
//! `scripts/fuzz`): each takes the fuzzer's bytes, runs them through the
//! code a server runs on untrusted input, and panics only when an
//! invariant of that code breaks. The same bodies replay the committed
//! corpora on stable (`tests` below), so `cargo test` checks every input
//! that ever crashed a target. Also the journal's damage harness, the
//! body of `fuzz/fuzz_targets/journal.rs` (its corpus replayed by its
//! own tests) and the journal's row of the
//! damaged-file benchmark (`examples/journal_damage.rs`). And `conn`
//! ([`conn::fuzz_conn`]): scripts of requests over a few connections
//! through a worker's real connection lifecycle (`session/`, over an
//! in-memory I/O engine), split anywhere, flash reads finished in any
//! order; input format in [`script`]. And [`catalog`]: every command the
//! text service knows as client sessions, the seeds
//! `examples/fuzz_cross_seeds.rs` wraps for conn, sasl and udp.

mod binary;
pub mod catalog;
pub mod conn;
mod flash_store;
mod http;
pub mod journal;
mod replies;
mod sasl;
pub mod script;
mod threads;
mod udp;

pub use binary::binary;
pub use http::http;
pub use journal::fuzz_journal;
pub use sasl::sasl;
pub use threads::settled;
pub use udp::udp;

use std::sync::Arc;

use strata_store::{Clock, EngineConfig, MapStore};

use crate::auth::Credentials;
use crate::conn::{Conn, Progress};
use crate::service::Service;
use crate::runtime::Runtime;
use crate::Settings;

/// A fresh in-process server per input (so a crash replays from its input
/// alone): one worker, a 16 MiB map store, `-I 1m`.
pub(crate) fn server(settings: Settings, text_auth: Option<Credentials>, sasl_auth: Option<Credentials>) -> Arc<Runtime> {
    // The fuzzers' builds have `debugtime` (debug assertions); a stable
    // replay of their inputs must parse them as they did.
    strata_proto::enable_debugtime();
    let settings = Settings { threads: 1, memory_limit_bytes: 16 << 20, inline_background: true, ..settings };
    // The size class table takes most of an input's time to build: once.
    static BASE: std::sync::OnceLock<EngineConfig> = std::sync::OnceLock::new();
    let base = BASE.get_or_init(EngineConfig::default).clone();
    let config = EngineConfig { memory_limit_bytes: settings.memory_limit_bytes, item_size_max_bytes: settings.item_size_max, ..base };
    let engine = Box::new(MapStore::new(config));
    let auth = crate::auth::Auth { text: text_auth, sasl: sasl_auth };
    Arc::new(Runtime::with_auth(settings, engine, Clock::starting_at(1_700_000_000), auth))
}

/// Chunk lengths for feeding a stream in pieces: from one seed byte, a
/// repeating pattern of 1 to 64 bytes (0: all at once).
fn chunks(seed: u8, len: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    let mut at = 0;
    let mut turn = 0usize;
    std::iter::from_fn(move || {
        if at >= len {
            return None;
        }
        let size = if seed == 0 { len } else { 1 + (usize::from(seed).wrapping_mul(turn + 7) % 64) };
        turn += 1;
        let range = at..(at + size).min(len);
        at = range.end;
        Some(range)
    })
}

/// Run what `conn` has buffered until it needs input or closes, moving its
/// replies to `replies`. Returns whether the connection is closed.
fn pump(conn: &mut Conn, svc: &mut Service<'_>, replies: &mut Vec<u8>) -> bool {
    loop {
        let progress = conn.process(svc, 16);
        replies.extend_from_slice(conn.out.pending());
        let n = conn.out.pending_len();
        conn.consume_output(n);
        match progress {
            Progress::Yield | Progress::OutputFull => continue,
            // A key dump's next refill (a watcher never ends).
            Progress::Dumping if !conn.is_watching() => continue,
            Progress::NeedInput => return false,
            _ => return true,
        }
    }
}

#[cfg(test)]
mod tests {
    pub(super) use strata_store::fuzzing::corpus::{inputs, replay as replay_whole, Kept};

    /// A target's generated seeds: written to its corpus with
    /// `STRATA_WRITE_CORPUS=1`, else each must be there as generated.
    pub(crate) fn write_seeds(name: &str, seeds: &[(&str, Vec<u8>)]) {
        let dir = strata_store::fuzzing::corpus::dir(name, Kept::Seeds);
        for (seed, bytes) in seeds {
            let path = dir.join(format!("seed-{seed}"));
            if std::env::var_os("STRATA_WRITE_CORPUS").is_some() {
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(&path, bytes).unwrap();
            } else {
                assert_eq!(std::fs::read(&path).ok().as_ref(), Some(bytes), "{} differs from its generator", path.display());
            }
        }
    }

    /// Each committed input through its target's body: the seeds and bug
    /// inputs whole and cut short, the runs' finds (`fuzz/grown`) whole.
    fn replay(name: &str, body: fn(&[u8])) {
        let seeds = inputs(name, Kept::Seeds);
        assert!(seeds.len() >= 5, "fuzz/corpus/{name} holds {} inputs", seeds.len());
        for (path, input) in &seeds {
            eprintln!("{}", path.display());
            body(input);
            body(&input[..input.len() / 2]);
        }
        replay_whole(&inputs(name, Kept::Grown), body);
    }

    #[test]
    fn corpus_binary() {
        replay("binary", super::binary);
    }

    #[test]
    fn corpus_udp() {
        replay("udp", super::udp);
    }

    #[test]
    fn corpus_sasl() {
        replay("sasl", super::sasl);
    }

    #[test]
    fn corpus_http() {
        replay("http", super::http);
    }
}
