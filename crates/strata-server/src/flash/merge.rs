//! The small store's rewrite thread (`strata-flash-merge`, only with
//! `-o ext_path` and `ext_small_item_max` above 0): it steps the engine's
//! merges (`FlashTier::flash_rewrite`: the partition that most needs its
//! log and sets rewritten, `strata-store/src/seg/flash/small/sched.rs`) one
//! after the other while any is due, and otherwise waits for the engine's
//! bell (a partition's log filling up, the log's tail blocked) or 50 ms.
//! No worker ever merges. The shutdown rings the bell; the thread ends
//! with the server.

use std::sync::Arc;
use std::time::Duration;

use strata_store::FlashRewrite;

use crate::core::Core;

/// Longest wait between two looks when nothing is due.
const IDLE_WAIT: Duration = Duration::from_millis(50);

/// Start the thread when the engine has a small store; None otherwise.
pub fn start(core: &Arc<Core>) -> std::io::Result<Option<std::thread::JoinHandle<()>>> {
    if core.engine.flash().is_none() || core.settings.ext.small_item_max == 0 {
        return Ok(None);
    }
    let waker = core.clone();
    core.on_shutdown(Box::new(move || {
        if let Some(tier) = waker.engine.flash() {
            tier.flash_rewrite_wake();
        }
    }));
    let core = core.clone();
    let thread = std::thread::Builder::new().name("strata-flash-merge".into()).spawn(move || {
        let Some(tier) = core.engine.flash() else { return };
        let mut state = FlashRewrite::default();
        while !core.is_shutting_down() {
            if !tier.flash_rewrite(core.clock.now(), &mut state) {
                tier.flash_rewrite_wait(IDLE_WAIT);
            }
        }
    })?;
    Ok(Some(thread))
}
