//! CPU priority for background threads: a key dump's thread
//! (`ops/dump_feed.rs`) runs under `SCHED_IDLE`, Linux's policy for work
//! that must take only CPU time nobody else wants. Unlike a high nice
//! value (still a share of each slice, and a running nice-19 task is not
//! always preempted on a wakeup), an idle-policy thread is preempted as
//! soon as a normal thread (a worker with a request) becomes runnable on
//! its CPU. `unsafe` here: the two libc calls.

use std::io;

/// Put the calling thread under `SCHED_IDLE`, or at nice 19 if the
/// kernel refuses that. Lowering one's own priority needs no privilege.
pub fn idle_current_thread() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param
    // that outlives the call.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } == 0 {
        return Ok(());
    }
    let refused = io::Error::last_os_error();
    // SAFETY: plain syscall on the calling thread (who 0), no pointers.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) } == 0 {
        return Ok(());
    }
    Err(refused)
}

