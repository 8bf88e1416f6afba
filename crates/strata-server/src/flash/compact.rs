//! The log's compaction thread (`strata-flash-compact`, only with
//! `-o ext_path`): it steps the engine's compactor
//! (`FlashTier::flash_compact`, `strata-store/src/seg/flash/compact.rs`:
//! the live records of the emptiest pages moved forward, so pages are
//! taken for writing only once nothing live is left on them) while a page
//! needs emptying, and otherwise waits for the tier's bell (a page taken
//! with few left ready) or 100 ms. No worker ever compacts. The thread
//! ends with the server (it looks at the shutdown flag at least every
//! 100 ms).

use std::sync::Arc;
use std::time::Duration;

use strata_store::FlashCompact;

use crate::core::Core;

/// Longest wait between two looks when no page needs emptying.
const IDLE_WAIT: Duration = Duration::from_millis(100);

/// Start the thread when the engine has a flash tier; None otherwise.
pub fn start(core: &Arc<Core>) -> std::io::Result<Option<std::thread::JoinHandle<()>>> {
    if core.engine.flash().is_none() {
        return Ok(None);
    }
    let core = core.clone();
    let thread = std::thread::Builder::new().name("strata-flash-compact".into()).spawn(move || {
        let Some(tier) = core.engine.flash() else { return };
        let mut state = FlashCompact::default();
        while !core.is_shutting_down() {
            if !tier.flash_compact(core.clock.now(), &mut state) {
                tier.flash_compact_wait(IDLE_WAIT);
            }
        }
    })?;
    Ok(Some(thread))
}
