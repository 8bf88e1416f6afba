//! `-m`: memcached's megabytes (with k, m, g suffixes), or Strata's `auto`,
//! and `-o memory_pressure_yield`: which memory governor, if any, the
//! server runs (`strata_server::memory`).
//!
//! `-m auto` reads the memory cgroup (v1 or v2) or the host at start and
//! begins at the cap less headroom and what is already in use; the
//! governor moves it from there. A memory file (`-e`) is refused with
//! either: its freed extents stay in the page cache, charged to the same
//! cgroup, so giving memory back would not.

use strata_server::memory;
use strata_server::Settings;

use super::validate::parse_size;
use super::CliError;

pub fn apply(memory_limit: &str, s: &mut Settings) -> Result<(), CliError> {
    let auto = memory_limit.eq_ignore_ascii_case("auto");
    if (auto || s.memory_pressure_yield) && s.memory_file.is_some() {
        let what = if auto { "-m auto" } else { "-o memory_pressure_yield" };
        return Err(CliError::new(
            1,
            format!("{what} cannot be used with -e: a memory file's freed pages stay in the page cache, charged to the same memory; give -m a size"),
        ));
    }
    if auto {
        let config = memory::auto_config().map_err(|e| CliError::new(1, e))?;
        s.memory_limit_bytes = config.max_limit_bytes;
        s.memory_governor = Some(config);
        return Ok(());
    }
    s.memory_limit_bytes = megabytes(memory_limit)?;
    if s.memory_pressure_yield {
        s.memory_governor = Some(memory::yield_config(s.memory_limit_bytes));
    }
    Ok(())
}

/// `-m`'s value in bytes: megabytes, or a size with a k, m or g suffix
/// (`auto` is handled before).
fn megabytes(memory_limit: &str) -> Result<u64, CliError> {
    parse_size(memory_limit, 1 << 20)
        .ok_or_else(|| CliError::new(1, format!("Invalid memory limit '{memory_limit}': a number of megabytes or auto is needed")))
}

/// `-m`'s value alone, as [`apply`] checks it (for a configuration file's
/// line, conf.rs).
pub fn check_text(memory_limit: &str) -> Result<(), CliError> {
    if memory_limit.eq_ignore_ascii_case("auto") {
        return Ok(());
    }
    megabytes(memory_limit).map(drop)
}
