//! The few operating-system calls the bench needs, in one place: pinning a
//! thread to a CPU, and reading a process's CPU time from `/proc`.

use std::time::Duration;

/// Pin the calling thread to `cpu`.
pub fn pin_current_thread(cpu: usize) -> std::io::Result<()> {
    // SAFETY: `cpu_set_t` is plain data for which all-zero is the empty
    // set; CPU_SET only writes inside it (it checks `cpu` against the set's
    // size) and sched_setaffinity(0, ...) reads exactly size_of bytes of it.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn clock_ticks_per_s() -> u64 {
    // SAFETY: sysconf has no preconditions; it only reads a constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as u64
    } else {
        100
    }
}

/// User plus system CPU time of process `pid` (`/proc/PID/stat` fields 14
/// and 15, in clock ticks: 10 ms resolution on Linux's usual 100 Hz).
pub fn process_cpu_time(pid: u32) -> std::io::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let after = stat.rfind(')').map(|i| &stat[i + 2..]).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    let (Some(utime), Some(stime)) = (field(14), field(15)) else {
        return Err(std::io::Error::other("unreadable /proc stat"));
    };
    let ticks = utime + stime;
    Ok(Duration::from_nanos(ticks * 1_000_000_000 / clock_ticks_per_s()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_cpu_time() {
        let t0 = process_cpu_time(std::process::id()).unwrap();
        let spin = std::time::Instant::now();
        let mut x = 0u64;
        while spin.elapsed() < Duration::from_millis(60) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        let t1 = process_cpu_time(std::process::id()).unwrap();
        assert!(t1 > t0, "{t0:?} -> {t1:?} ({x})");
    }
}
