//! CPU priority for background threads: a key dump's thread
//! (`ops/dump_feed.rs`) runs under `SCHED_IDLE`, Linux's policy for work
//! that must take only CPU time nobody else wants. Unlike a high nice
//! value (still a share of each slice, and a running nice-19 task is not
//! always preempted on a wakeup), an idle-policy thread is preempted as
//! soon as a normal thread (a worker with a request) becomes runnable on
//! its CPU. `unsafe` here: the libc calls.
//!
//! The flip side: on a machine whose CPUs are all busy, an idle-policy
//! thread gets almost no CPU time, for seconds. So such a thread must
//! never be what a client or a worker waits for: a dump's printer goes
//! back to the normal policy ([`normal_thread`]) for its last chunk and
//! its exit, and a cancelled one is put back by the thread that cancels it.

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


/// The calling thread's scheduling policy (`libc::SCHED_OTHER`,
/// `SCHED_IDLE`, ...), or -1 if the kernel will not say.
pub fn current_policy() -> i32 {
    // SAFETY: pid 0 is the calling thread; no pointers.
    unsafe { libc::sched_getscheduler(0) }
}

/// The calling thread's kernel id, for [`normal_thread`] from another thread.
pub fn current_tid() -> i32 {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { libc::gettid() }
}

/// Put thread `tid` of this process (0: the calling thread) back under
/// the normal policy (`SCHED_OTHER`). Raising a thread of one's own from
/// `SCHED_IDLE` to `SCHED_OTHER` needs no privilege; a thread left at
/// nice 19 by the fallback above stays there (raising a nice value does).
pub fn normal_thread(tid: i32) -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `tid` is a thread id (or 0); `param` is a valid sched_param
    // that outlives the call.
    if unsafe { libc::sched_setscheduler(tid, libc::SCHED_OTHER, &param) } == 0 {
        return Ok(());
    }
    Err(io::Error::last_os_error())
}
