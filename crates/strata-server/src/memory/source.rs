//! Where the memory governor reads how much memory there is and how much is
//! in use: the memory cgroup the process is in (v1 or v2), else the host.
//!
//! ```text
//!  /proc/self/cgroup     "4:memory:/a/b" (v1 memory controller)  "0::/a/b" (v2)
//!  /proc/self/mountinfo  where that hierarchy is mounted, and which of its
//!                        directories the mount shows (field 4, the root)
//!  cgroup dir = mount point + (path - mount root)
//!
//!             cap (bytes allowed)                used (working set)                  events (cumulative)     PSI
//!  v1  memory.stat hierarchical_memory_limit   memory.usage_in_bytes               memory.failcnt          /proc/pressure/memory
//!      (else memory.limit_in_bytes)            - memory.stat total_inactive_file
//!  v2  min(memory.max, memory.high) over the   memory.current                      memory.events high+max  <dir>/memory.pressure
//!      directory and its ancestors             - memory.stat inactive_file         +oom
//!  host /proc/meminfo MemTotal                 MemTotal - MemAvailable             0                       /proc/pressure/memory
//! ```
//!
//! A cgroup without a limit (v1's 2^63 - 4096, v2's `max`) or with one
//! at or above the host's memory is read as the host (cap and use). Inactive file pages are
//! left out of "used" because the kernel drops them before it reclaims
//! anything else (the working set the kubelet uses for the same decision).
//! Every parser here is a pure function of the files' text, unit-tested
//! with both versions' formats; [`Source::read`] only reads the files,
//! into the policy's [`Reading`] (`policy.rs`, which this module follows:
//! PSI is read only while free memory is under the policy's headroom).

use std::path::{Path, PathBuf};

use super::policy::{headroom_bytes, Reading};

/// The settings' [`MemorySource`](crate::settings::MemorySource): read here.
pub use crate::settings::MemorySource as Source;

impl Source {
    /// The memory cgroup this process is in, if one with a memory
    /// controller is mounted, else the host.
    pub fn discover() -> Source {
        let cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        discover_from(&cgroup, &mountinfo, |dir| dir.join("memory.max").exists())
    }

    pub fn name(&self) -> &'static str {
        match self {
            Source::CgroupV1(_) => "cgroup_v1",
            Source::CgroupV2(_) => "cgroup_v2",
            Source::Host => "host",
        }
    }

    /// The cgroup's usage alone (v1 `memory.usage_in_bytes`, v2
    /// `memory.current`: one small file), for the fast check between
    /// readings; None on the host.
    pub fn usage_bytes(&self) -> Option<u64> {
        match self {
            Source::CgroupV1(dir) => read_u64(&dir.join("memory.usage_in_bytes")),
            Source::CgroupV2(dir) => read_u64(&dir.join("memory.current")),
            Source::Host => None,
        }
    }

    /// A full reading. PSI is read only while free memory is under the
    /// headroom (the only time the policy looks at it), and the host's
    /// MemTotal once: `/proc/meminfo` and `/proc/pressure/memory` cost
    /// 60-80 us each to generate, the cgroup files 8-18 us.
    pub fn read(&self) -> std::io::Result<Reading> {
        let host_total = host_total_bytes();
        let mut r = match self {
            Source::Host => {
                let meminfo = std::fs::read_to_string("/proc/meminfo")?;
                Reading {
                    cap_bytes: host_total,
                    used_bytes: host_total.saturating_sub(meminfo_kib(&meminfo, "MemAvailable").unwrap_or(0) * 1024),
                    limit_events: 0,
                    psi_some_avg10: None,
                }
            }
            Source::CgroupV1(dir) => {
                let stat = std::fs::read_to_string(dir.join("memory.stat"))?;
                let cap = stat_value(&stat, "hierarchical_memory_limit").or_else(|| read_u64(&dir.join("memory.limit_in_bytes")));
                let usage = read_u64(&dir.join("memory.usage_in_bytes")).unwrap_or(0);
                Reading {
                    cap_bytes: cap.unwrap_or(u64::MAX),
                    used_bytes: usage.saturating_sub(stat_value(&stat, "total_inactive_file").unwrap_or(0)),
                    limit_events: read_u64(&dir.join("memory.failcnt")).unwrap_or(0),
                    psi_some_avg10: None,
                }
            }
            Source::CgroupV2(dir) => {
                let stat = std::fs::read_to_string(dir.join("memory.stat"))?;
                let usage = read_u64(&dir.join("memory.current")).unwrap_or(0);
                let events = std::fs::read_to_string(dir.join("memory.events")).unwrap_or_default();
                Reading {
                    cap_bytes: v2_cap(dir),
                    used_bytes: usage.saturating_sub(stat_value(&stat, "inactive_file").unwrap_or(0)),
                    limit_events: ["high", "max", "oom"].iter().filter_map(|k| stat_value(&events, k)).sum(),
                    psi_some_avg10: None,
                }
            }
        };
        if *self != Source::Host && host_total > 0 && r.cap_bytes >= host_total {
            // A cgroup with no limit of its own: the host's memory is the cap,
            // and what the whole host uses is what leaves room.
            return Source::Host.read();
        }
        if r.cap_bytes.saturating_sub(r.used_bytes) < headroom_bytes(r.cap_bytes) {
            let own = match self {
                Source::CgroupV2(dir) => std::fs::read_to_string(dir.join("memory.pressure")).ok(),
                _ => None,
            };
            let text = own.or_else(|| std::fs::read_to_string("/proc/pressure/memory").ok());
            r.psi_some_avg10 = text.and_then(|t| psi_some_avg10(&t));
        }
        Ok(r)
    }
}

/// v2: the lowest `memory.max` / `memory.high` from `dir` up to the mount.
fn v2_cap(dir: &Path) -> u64 {
    let mut cap = u64::MAX;
    let mut at = Some(dir);
    while let Some(d) = at {
        for file in ["memory.max", "memory.high"] {
            if let Ok(text) = std::fs::read_to_string(d.join(file)) {
                cap = cap.min(v2_limit(&text));
            }
        }
        if !d.join("memory.max").exists() {
            break;
        }
        at = d.parent();
    }
    cap
}

/// The host's MemTotal in bytes, read once (0 if unreadable).
fn host_total_bytes() -> u64 {
    static TOTAL: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TOTAL.get_or_init(|| std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| meminfo_kib(&m, "MemTotal")).unwrap_or(0) * 1024)
}

fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// v2's `memory.max`: a number of bytes or `max`.
pub fn v2_limit(text: &str) -> u64 {
    text.trim().parse().unwrap_or(u64::MAX)
}

/// A `name value` line of memory.stat / memory.events.
pub fn stat_value(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == name).then(|| v.trim().parse().ok()).flatten()
    })
}

/// `/proc/meminfo`'s `Name:   123 kB`, in KiB.
pub fn meminfo_kib(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// PSI's `some avg10=1.23 avg60=... total=...` line.
pub fn psi_some_avg10(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace().find_map(|f| f.strip_prefix("avg10=")).and_then(|v| v.parse().ok())
}

/// The cgroup directory from `/proc/self/cgroup` and `/proc/self/mountinfo`:
/// v1's memory hierarchy first (a host may mount both, as this one does,
/// with the memory controller on v1), else v2 where `has_memory` says its
/// directory has the memory controller's files.
pub fn discover_from(cgroup: &str, mountinfo: &str, has_memory: impl Fn(&Path) -> bool) -> Source {
    let mut v1 = None;
    let mut v2 = None;
    for line in cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else { continue };
        if controllers.split(',').any(|c| c == "memory") {
            v1 = Some(path.to_string());
        } else if id == "0" && controllers.is_empty() {
            v2 = Some(path.to_string());
        }
    }
    for line in mountinfo.lines() {
        // id parent major:minor root mountpoint options... - fstype source superoptions
        let Some((left, right)) = line.split_once(" - ") else { continue };
        let fields: Vec<&str> = left.split(' ').collect();
        let right: Vec<&str> = right.split(' ').collect();
        let (Some(root), Some(mount), Some(fstype)) = (fields.get(3), fields.get(4), right.first()) else { continue };
        let supers = right.get(2).copied().unwrap_or("");
        if *fstype == "cgroup" && supers.split(',').any(|o| o == "memory") {
            if let Some(dir) = v1.as_deref().and_then(|p| join(mount, root, p)) {
                return Source::CgroupV1(dir);
            }
        }
    }
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else { continue };
        let fields: Vec<&str> = left.split(' ').collect();
        let (Some(root), Some(mount)) = (fields.get(3), fields.get(4)) else { continue };
        if right.split(' ').next() == Some("cgroup2") {
            if let Some(dir) = v2.as_deref().and_then(|p| join(mount, root, p)) {
                if has_memory(&dir) {
                    return Source::CgroupV2(dir);
                }
            }
        }
    }
    Source::Host
}

/// The directory of cgroup `path` under a mount of the hierarchy at
/// `mount` showing its directory `root` (None if the mount does not show it).
fn join(mount: &str, root: &str, path: &str) -> Option<PathBuf> {
    let rel = if root == "/" { path } else { path.strip_prefix(root)? };
    let rel = rel.trim_start_matches('/');
    Some(if rel.is_empty() { PathBuf::from(mount) } else { Path::new(mount).join(rel) })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTS: &str = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
        35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
        41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

    #[test]
    fn v1_memory_controller_is_found_beside_a_v2_mount() {
        let cgroup = "9:name=systemd:/\n4:memory:/process_api/abc\n0::/\n";
        let s = discover_from(cgroup, MOUNTS, |_| true);
        assert_eq!(s, Source::CgroupV1(PathBuf::from("/sys/fs/cgroup/memory/process_api/abc")));
    }

    #[test]
    fn v2_only_and_a_namespaced_root() {
        let mounts = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        let s = discover_from("0::/system.slice/strata.service\n", mounts, |_| true);
        assert_eq!(s, Source::CgroupV2(PathBuf::from("/sys/fs/cgroup/system.slice/strata.service")));
        // A container sees its own cgroup as the mount's root.
        let mounts = "30 23 0:26 /kubepods/pod1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let s = discover_from("0::/kubepods/pod1\n", mounts, |_| true);
        assert_eq!(s, Source::CgroupV2(PathBuf::from("/sys/fs/cgroup")));
        // v2 without the memory controller's files, or no cgroup fs: the host.
        assert_eq!(discover_from("0::/x\n", mounts, |_| false), Source::Host);
        assert_eq!(discover_from("", "", |_| true), Source::Host);
    }

    #[test]
    fn limits_stats_meminfo_and_psi_parse() {
        assert_eq!(v2_limit("max\n"), u64::MAX);
        assert_eq!(v2_limit("536870912\n"), 512 << 20);
        let v1_stat = "cache 1007616\nrss 1826816\nhierarchical_memory_limit 536870912\ntotal_inactive_file 811008\n";
        assert_eq!(stat_value(v1_stat, "hierarchical_memory_limit"), Some(512 << 20));
        assert_eq!(stat_value(v1_stat, "total_inactive_file"), Some(811008));
        assert_eq!(stat_value(v1_stat, "inactive_file"), None, "whole names only");
        let events = "low 0\nhigh 3\nmax 2\noom 0\noom_kill 0\n";
        assert_eq!(["high", "max", "oom"].iter().filter_map(|k| stat_value(events, k)).sum::<u64>(), 5);
        let meminfo = "MemTotal:       24684032 kB\nMemFree:        13706240 kB\nMemAvailable:   23541760 kB\n";
        assert_eq!(meminfo_kib(meminfo, "MemTotal"), Some(24684032));
        assert_eq!(meminfo_kib(meminfo, "MemAvailable"), Some(23541760));
        let psi = "some avg10=12.50 avg60=3.00 avg300=0.00 total=123\nfull avg10=1.00 avg60=0.00 avg300=0.00 total=4\n";
        assert_eq!(psi_some_avg10(psi), Some(12.5));
        assert_eq!(psi_some_avg10(""), None);
    }

    #[test]
    fn this_machine_reads() {
        let r = Source::discover().read().expect("read memory");
        assert!(r.cap_bytes > 0 && r.used_bytes < r.cap_bytes, "{r:?}");
    }
}
