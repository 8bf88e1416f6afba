//! The idle writer's thread (`strata-flash-age`, only with `-o ext_path`):
//! about once a second it hands the engine a pass of writing items idle
//! longer than `ext_item_age` to flash (`FlashTier::flash_write_idle`, which
//! returns at once while `ext_item_age` is unlimited, the default), so no
//! worker ever does that work. It sleeps on a condition variable the
//! shutdown wakes, and ends with the server.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use strata_store::FlashIdle;

use crate::core::Core;

/// Time between passes.
const PASS_INTERVAL: Duration = Duration::from_secs(1);

/// Start the thread when the engine has a flash tier; None otherwise.
pub fn start(core: &Arc<Core>) -> std::io::Result<Option<std::thread::JoinHandle<()>>> {
    if core.engine.flash().is_none() {
        return Ok(None);
    }
    let stop = Arc::new((Mutex::new(false), Condvar::new()));
    let on_stop = stop.clone();
    core.on_shutdown(Box::new(move || {
        *on_stop.0.lock().unwrap_or_else(|e| e.into_inner()) = true;
        on_stop.1.notify_all();
    }));
    let core = core.clone();
    let thread = std::thread::Builder::new().name("strata-flash-age".into()).spawn(move || {
        let Some(tier) = core.engine.flash() else { return };
        let mut state = FlashIdle::default();
        loop {
            if core.is_shutting_down() {
                return;
            }
            tier.flash_write_idle(core.clock.now(), &mut state);
            let (lock, cvar) = &*stop;
            let stopped = lock.lock().unwrap_or_else(|e| e.into_inner());
            let (stopped, _) = cvar.wait_timeout_while(stopped, PASS_INTERVAL, |s| !*s).unwrap_or_else(|e| e.into_inner());
            if *stopped {
                return;
            }
        }
    })?;
    Ok(Some(thread))
}
