//! For a fuzz target's body: after an input the process has no more
//! threads than before it, and every thread that ended is gone before
//! libFuzzer looks for leaks.
//!
//! libFuzzer runs LeakSanitizer after an input whose allocations and
//! frees do not balance. A detached thread still on its way out at that
//! moment holds thread-locals that no live thread points to any more, and
//! they are reported as leaked: a conn run of 11-29 stopped on 112 bytes of
//! a dump walker's channel context (`oracle-dump-thread-exit`). Under
//! `inline_background` a crawl or a dump starts no thread; the only ones
//! an input starts now are conn's flash store's writers (a store is built
//! anew every 32 inputs, `flash_store.rs`; the first is built by
//! `conn::init`), the old writer joined as its store is dropped. The wait
//! stays as the check: an input that leaves a thread more than it found,
//! 5 s after it returned, fails. Not for the stable replays: tests
//! run side by side in one process, their threads coming and going.

use std::time::{Duration, Instant};

/// How long an input's threads may take to end once it returned.
const WAIT: Duration = Duration::from_secs(5);

/// Run `body`, then wait until the process has no more threads than before.
pub fn settled<R>(body: impl FnOnce() -> R) -> R {
    let before = live_threads();
    let result = body();
    let deadline = Instant::now() + WAIT;
    while live_threads() > before {
        assert!(Instant::now() < deadline, "threads an input started still alive {WAIT:?} after it ended");
        std::thread::sleep(Duration::from_micros(50));
    }
    result
}

/// The process's threads (`Threads:` of `/proc/self/status`; the kernel
/// drops a thread from it once the thread has exited, locals freed).
fn live_threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("a Threads: line")
}
