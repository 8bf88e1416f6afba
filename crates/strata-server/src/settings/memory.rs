//! The memory governor's settings (`-m auto`, `-o memory_pressure_yield`;
//! `memory/` runs it). Where it reads memory from is part of the setting:
//! the CLI looks once (`memory::auto_config`, `memory::yield_config`), and
//! the governor keeps reading there (`memory/source.rs` reads the files).

use std::path::PathBuf;

/// Where memory is read: the memory cgroup the process is in (v1 or v2,
/// by its directory), else the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemorySource {
    CgroupV1(PathBuf),
    CgroupV2(PathBuf),
    Host,
}

/// `-m auto` or `-o memory_pressure_yield`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GovernorConfig {
    /// `-m auto` (else a fixed `-m` with `memory_pressure_yield`).
    pub auto: bool,
    pub source: MemorySource,
    /// The limit at start, and the most it grows back to.
    pub max_limit_bytes: u64,
}
