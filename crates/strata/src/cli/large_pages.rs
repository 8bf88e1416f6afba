//! `-L`: memcached on Linux checks that the kernel has transparent huge
//! pages and that they are not switched off (`[never]`), refuses to start
//! if not, and then preallocates its item memory so the kernel can back it
//! with huge pages. Strata makes the same check; the engine is told through
//! `Settings::large_pages` (docs/COMPATIBILITY.md says what it does with it).

use super::CliError;

const THP_PATHS: [&str; 2] =
    ["/sys/kernel/mm/transparent_hugepage/enabled", "/sys/kernel/mm/redhat_transparent_hugepage/enabled"];

/// Ok when the kernel offers transparent huge pages (`always` or `madvise`).
pub fn check() -> Result<(), CliError> {
    let refuse = |why: &str| {
        strata_server::log_line!("{why}\nWill use default page size.");
        CliError::new(1, "Cannot enable large pages on this system\n(There is no support as of this version)")
    };
    let Some(mode) = THP_PATHS.iter().find_map(|p| std::fs::read_to_string(p).ok()) else {
        return Err(refuse("Transparent huge pages support not detected."));
    };
    if mode.trim().is_empty() {
        return Err(refuse("Transparent huge pages could not read the configuration."));
    }
    if mode.contains("[never]") {
        return Err(refuse("Transparent huge pages support disabled."));
    }
    Ok(())
}
