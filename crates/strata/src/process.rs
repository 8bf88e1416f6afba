//! Process-level chores: daemonizing (`-d`), dropping root (`-u`), and
//! turning SIGTERM/SIGINT into a clean shutdown. The only `unsafe` in the
//! binary is here: libc calls with no Rust wrapper in std.

use std::ffi::CString;
use std::io;
use std::sync::Arc;

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};
use signal_hook::iterator::Signals;
use strata_server::runtime::Runtime;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// memcached refuses to run as root without `-u`; Strata runs, but says so.
pub fn check_user(user: Option<&str>) -> Result<(), String> {
    if is_root() && user.is_none() {
        strata_server::log_line!("strata: warning: running as root; pass -u <user> to drop privileges");
    }
    Ok(())
}

/// Switch to `user` when running as root (memcached's `-u`).
pub fn drop_privileges(user: Option<&str>) -> Result<(), String> {
    let Some(user) = user else { return Ok(()) };
    if !is_root() || user == "root" {
        return Ok(());
    }
    let name = CString::new(user).map_err(|_| format!("invalid user name '{user}'"))?;
    // SAFETY: `name` is a valid NUL-terminated string; getpwnam returns NULL
    // or a pointer to static storage that we read before any other call.
    let (uid, gid) = unsafe {
        let pw = libc::getpwnam(name.as_ptr());
        if pw.is_null() {
            return Err(format!("can't find the user {user} to switch to"));
        }
        ((*pw).pw_uid, (*pw).pw_gid)
    };
    // SAFETY: plain syscalls on integer arguments; failures are checked.
    unsafe {
        if libc::setgroups(0, std::ptr::null()) != 0 || libc::setgid(gid) != 0 || libc::setuid(uid) != 0 {
            return Err(format!("failed to assume identity of user {user}: {}", io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// Detach from the terminal (`-d`). Must run before any thread starts.
pub fn daemonize() -> io::Result<()> {
    // SAFETY: called from main before other threads exist, as daemon(3)
    // (a fork) requires.
    if unsafe { libc::daemon(1, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Replace the default actions of SIGTERM, SIGINT, SIGUSR1 and SIGHUP
/// (which end the process) before the server starts: signals that arrive
/// from here on wait for `stop_on_signals`.
pub fn catch_signals() -> io::Result<Signals> {
    Signals::new([SIGTERM, SIGINT, SIGUSR1, SIGHUP])
}

/// SIGTERM, SIGINT and SIGUSR1 stop the server cleanly; SIGHUP reloads the
/// `-Y` and SASL credential files, and with `-Z` the TLS certificate, key
/// and CA (a failed reload keeps the old ones and logs why). A signal caught
/// before the server ran is handled now.
pub fn stop_on_signals(mut signals: Signals, rt: Arc<Runtime>) -> io::Result<()> {
    std::thread::Builder::new().name("strata-signals".into()).spawn(move || {
        for signal in signals.forever() {
            if signal == SIGHUP {
                for line in rt.auth.reload() {
                    strata_server::log_line!("strata: SIGHUP: {line}");
                }
                if let Some(tls) = &rt.tls {
                    match tls.refresh(rt.core.clock.now()) {
                        Ok(()) => strata_server::log_line!("strata: SIGHUP: reloaded the TLS certificates"),
                        Err(e) => strata_server::log_line!("strata: Could not reload TLS certificates on SIGHUP: {e}"),
                    }
                }
                continue;
            }
            rt.core.request_shutdown();
            return;
        }
    })?;
    Ok(())
}

/// `-r`: raise the core file limit to the hard maximum (first trying
/// unlimited), as memcached does; an error if no core could be written.
pub fn raise_core_limit() -> Result<(), String> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit read and write the rlimit struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_CORE, &mut limit) == 0 {
            let infinite = libc::rlimit { rlim_cur: libc::RLIM_INFINITY, rlim_max: libc::RLIM_INFINITY };
            if libc::setrlimit(libc::RLIMIT_CORE, &infinite) != 0 {
                let hard = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
                let _ = libc::setrlimit(libc::RLIMIT_CORE, &hard);
            }
        }
        if libc::getrlimit(libc::RLIMIT_CORE, &mut limit) != 0 || limit.rlim_cur == 0 {
            return Err("failed to ensure corefile creation".into());
        }
    }
    Ok(())
}

/// `-k`: lock every present and future page in RAM (`mlockall`).
pub fn lock_memory() -> io::Result<()> {
    // Pages are locked as they are first touched (`MCL_ONFAULT`, Linux 4.4+):
    // segment memory is reserved in chunks of up to 1 GiB of address space
    // (seg/region.rs), which plain `MCL_FUTURE` would fault in and lock
    // whole at reservation. Older kernels refuse the flag: lock as memcached does.
    let current_and_future = libc::MCL_CURRENT | libc::MCL_FUTURE;
    // SAFETY: mlockall takes flags only and reports failure through errno.
    if unsafe { libc::mlockall(current_and_future | libc::MCL_ONFAULT) } == 0 {
        return Ok(());
    }
    // SAFETY: as above.
    if unsafe { libc::mlockall(current_and_future) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// memcached sets the open-file limit to `-c` so that many connections can
/// be accepted. Strata raises the soft limit (and the hard one when allowed)
/// to `-c` plus `reserved` descriptors of its own, never lowers it, and warns
/// where memcached would exit: connections past the limit are then refused
/// by `accept` (and logged) instead.
pub fn raise_open_files(max_connections: usize, reserved: usize) {
    let wanted = (max_connections + reserved) as libc::rlim_t;
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit read and write the rlimit struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 || limit.rlim_cur >= wanted {
            return;
        }
        let raised = libc::rlimit { rlim_cur: wanted, rlim_max: limit.rlim_max.max(wanted) };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
            return;
        }
        let to_hard = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
        let _ = libc::setrlimit(libc::RLIMIT_NOFILE, &to_hard);
    }
    strata_server::log_line!(
        "strata: warning: failed to set rlimit for open files to {wanted} (hard limit {}). \
         Try starting as root or requesting smaller maxconns value.",
        limit.rlim_max
    );
}

