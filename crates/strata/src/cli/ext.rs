//! `-o ext_*`: memcached 1.6.45's extstore options (`storage_read_config`,
//! `storage_check_config`, `extstore_init`), read into
//! [`ExtSettings`] with memcached's messages and exit codes:
//!
//! ```text
//!  while reading -o (exit 1)   "Missing ext_X argument", "could not parse argument to ext_X",
//!                              ext_path: "must supply size to ext_path ..." / "Unknown extstore
//!                              bucket: B", then "failed to parse ext_path argument"
//!  after every flag (exit 64)  -I larger than ext_wbuf_size, UDP with extstore
//!  engine set-up (exit 1)      "Failed to initialize external storage: <extstore_err>"
//!  the file itself (exit 2)    cannot be created or opened read-write, is not a regular file
//!                              or block device, smaller than one page, or larger than the
//!                              room left on its device
//! ```
//!
//! Sizes take memcached's units: `ext_page_size` and `ext_wbuf_size` in
//! megabytes, `ext_path`'s size with an `m`, `g`, `t` or `p` suffix. Where
//! memcached reads a number with `atoi` (`ext_path`'s size), Strata refuses
//! what is not a number. memcached divides by a zero page size (SIGFPE) and
//! starts with zero I/O threads (reads never finish); Strata refuses both.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use strata_store::{ExtBucket, ExtConfig, ExtPath, ExtTunable};

use super::{number, CliError};

fn error(message: impl Into<String>) -> CliError {
    CliError::new(1, message)
}

/// A 32-bit value (`safe_strtoul`), or memcached's two messages.
fn u32_arg(key: &str, value: Option<&str>) -> Result<u32, CliError> {
    let v = value.ok_or_else(|| error(format!("Missing {key} argument")))?;
    number::<u32>(v).ok_or_else(|| error(format!("could not parse argument to {key}")))
}

/// Whether `key` is one of memcached's extstore options.
pub fn is_ext_option(key: &str) -> bool {
    key.starts_with("ext_")
}

/// One `-o ext_*` option. `opt` is the whole `key=value` for messages.
pub fn apply(ext: &mut ExtConfig, opt: &str, key: &str, value: Option<&str>) -> Result<(), CliError> {
    let t = &ext.tunables;
    let set = |a: &AtomicU32, v: u32| a.store(v, Ordering::Relaxed);
    match key {
        "ext_page_size" => ext.page_size_bytes = u64::from(u32_arg(key, value)?) << 20,
        "ext_wbuf_size" => ext.wbuf_size_bytes = u64::from(u32_arg(key, value)?) << 20,
        "ext_threads" => ext.threads = u32_arg(key, value)?,
        "ext_io_depth" => ext.io_depth = u32_arg(key, value)?,
        "ext_item_size" => set(&t.item_size, u32_arg(key, value)?),
        "ext_item_age" => set(&t.item_age, u32_arg(key, value)?),
        "ext_low_ttl" => set(&t.low_ttl, u32_arg(key, value)?),
        "ext_recache_rate" => set(&t.recache_rate, u32_arg(key, value)?),
        "ext_compact_under" => set(&t.compact_under, u32_arg(key, value)?),
        "ext_drop_under" => set(&t.drop_under, u32_arg(key, value)?),
        "ext_max_sleep" => set(&t.max_sleep, u32_arg(key, value)?),
        "ext_max_frag" => {
            let v = value.ok_or_else(|| error("Missing ext_max_frag argument"))?;
            let frag = number::<f64>(v)
                .filter(|f| f.is_finite())
                .ok_or_else(|| error("could not parse argument to ext_max_frag"))?;
            t.set(ExtTunable::MaxFrag(frag));
        }
        // Strata's small store (fixed at start; checked by `check_small`).
        "ext_small_item_max" => ext.small_item_max = u32_arg(key, value)? as usize,
        "ext_log_share" => ext.log_percent = u32_arg(key, value)?,
        "ext_set_size" => ext.set_size_bytes = u32_arg(key, value)? as usize,
        "ext_set_bloom_bits" => ext.set_bloom_bits = u32_arg(key, value)?,
        "ext_set_threshold" => ext.set_threshold = u32_arg(key, value)?,
        // Strata's bound on flash read-ahead, in bytes (read_ahead_budget.rs).
        "ext_read_ahead_max" => {
            let v = value.ok_or_else(|| error(format!("Missing {key} argument")))?;
            ext.read_ahead_max_bytes = Some(number::<u64>(v).ok_or_else(|| error(format!("could not parse argument to {key}")))?);
        }
        // memcached ignores a value here (`ext_drop_unread=0` turns it on too).
        "ext_drop_unread" => t.set(ExtTunable::DropUnread(true)),
        "ext_path" => {
            let v = value.ok_or_else(|| error("missing argument to ext_path, ie: ext_path=/d/file:5G"))?;
            let path = parse_path(v).map_err(|first| error(format!("{first}failed to parse ext_path argument")))?;
            ext.paths.push(path);
        }
        _ => return Err(error(format!("Illegal suboption \"{opt}\""))),
    }
    Ok(())
}

/// `FILE:SIZE[:BUCKET]` as memcached's `storage_conf_parse` reads it
/// (`strtok_r` on `:`, so empty fields are skipped). The error is the
/// line memcached prints before "failed to parse ext_path argument".
fn parse_path(arg: &str) -> Result<ExtPath, String> {
    let mut fields = arg.split(':').filter(|f| !f.is_empty());
    let Some(file) = fields.next() else { return Err(String::new()) };
    let Some(size) = fields.next() else {
        return Err("must supply size to ext_path, ie: ext_path=/f/e:64m (M|G|T|P supported)\n".into());
    };
    let unsupported = || "must supply size to ext_path, ie: ext_path=/f/e:64m (m|g|t|p supported)\n".to_string();
    // The unit is the last character, which need not be one byte.
    let unit = size.chars().next_back().unwrap_or_default();
    let digits = &size[..size.len() - unit.len_utf8()];
    let shift = match unit.to_ascii_lowercase() {
        'm' => 20,
        'g' => 30,
        't' => 40,
        'p' => 50,
        _ => return Err(unsupported()),
    };
    let count = number::<u64>(digits).ok_or_else(unsupported)?;
    let size_bytes = count.checked_mul(1 << shift).ok_or_else(unsupported)?;
    let bucket = match fields.next() {
        None => ExtBucket::Default,
        Some(name) => ExtBucket::parse(name).ok_or_else(|| format!("Unknown extstore bucket: {name}\n"))?,
    };
    Ok(ExtPath { path: PathBuf::from(file), size_bytes, bucket })
}

/// memcached's `storage_check_config` (exit 64), once every flag is read.
pub fn check_usage(ext: &ExtConfig, item_size_max: usize, udp: bool) -> Result<(), CliError> {
    if !ext.enabled() {
        return Ok(());
    }
    if item_size_max as u64 > ext.wbuf_size_bytes {
        return Err(CliError::new(
            64,
            format!("-I (item_size_max: {item_size_max}) cannot be larger than ext_wbuf_size: {}", ext.wbuf_size_bytes),
        ));
    }
    if udp {
        return Err(CliError::new(64, "Cannot use UDP with extstore enabled (-U 0 to disable)"));
    }
    Ok(())
}

/// memcached's `extstore_init` checks on the geometry (exit 1, its
/// "Failed to initialize external storage" line).
pub fn check_geometry(ext: &ExtConfig) -> Result<(), CliError> {
    if !ext.enabled() {
        return Ok(());
    }
    let fail = |why: &str| CliError::new(1, format!("Failed to initialize external storage: {why}"));
    if ext.page_size_bytes == 0 {
        return Err(fail("ext_page_size must be at least 2 (megabytes)"));
    }
    if ext.wbuf_size_bytes == 0 || ext.page_size_bytes % ext.wbuf_size_bytes != 0 {
        return Err(fail("page_size must be divisible by wbuf_size"));
    }
    const ALIGN: u64 = 2 << 20;
    if ext.page_size_bytes % ALIGN != 0 || ext.wbuf_size_bytes % ALIGN != 0 {
        return Err(fail("page_size and wbuf_size must be divisible by 1024*1024*2"));
    }
    let pages: u64 = ext.paths.iter().map(|p| p.size_bytes / ext.page_size_bytes).sum();
    if pages >= u64::from(u16::MAX) {
        return Err(fail("page_count must total to < 65536. Increase page_size or lower path sizes"));
    }
    if ext.threads == 0 {
        return Err(fail("ext_threads must be at least 1"));
    }
    if ext.small_item_max > 0 {
        ext.check_small().map_err(|why| fail(&why))?;
    }
    if ext.threads > MAX_EXT_THREADS {
        return Err(fail(&format!("ext_threads must be at most {MAX_EXT_THREADS}")));
    }
    Ok(())
}

/// The most flash I/O threads (`ext_threads`) Strata starts.
pub const MAX_EXT_THREADS: u32 = 256;

/// Each `ext_path` file: creatable and writable, a regular file or a block
/// device, at least one page, and (a regular file) no larger than what its
/// device has room for. Exit 2: the file, not the flags, is wrong.
pub fn check_files(ext: &ExtConfig) -> Result<(), CliError> {
    for p in &ext.paths {
        check_file(p, ext.page_size_bytes).map_err(|why| CliError::new(2, format!("ext_path {}: {why}", p.path.display())))?;
    }
    Ok(())
}

fn check_file(p: &ExtPath, page_size_bytes: u64) -> Result<(), String> {
    if p.size_bytes / page_size_bytes.max(1) == 0 {
        // memcached's words (it exits 64 there).
        return Err(format!(
            "supplied ext_path has zero size, cannot use (it must hold at least one ext_page_size page of {} MiB)",
            page_size_bytes >> 20
        ));
    }
    let existed = p.path.exists();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&p.path)
        .map_err(|e| format!("cannot open it for reading and writing: {e}"))?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    use std::os::unix::fs::FileTypeExt;
    let kind = meta.file_type();
    let result = if kind.is_block_device() {
        let mut f = &file;
        let len = std::io::Seek::seek(&mut f, std::io::SeekFrom::End(0)).map_err(|e| e.to_string())?;
        if len < p.size_bytes {
            Err(format!("the device holds {len} bytes, {} asked", p.size_bytes))
        } else {
            Ok(())
        }
    } else if !kind.is_file() {
        Err("not a regular file or a block device".to_string())
    } else {
        room_on_device(&p.path, meta.len(), p.size_bytes)
    };
    if result.is_err() && !existed {
        let _ = std::fs::remove_file(&p.path);
    }
    result
}

/// A regular file of `size_bytes` fits: what it already holds plus the
/// free space of its file system (`statvfs`, as `df` reports it).
fn room_on_device(path: &Path, current_bytes: u64, size_bytes: u64) -> Result<(), String> {
    let free = strata_store::free_bytes(path).map_err(|e| format!("cannot read its file system's free space: {e}"))?;
    if current_bytes.saturating_add(free) < size_bytes {
        return Err(format!(
            "{size_bytes} bytes asked, only {} free on its device (with the {current_bytes} it holds)",
            current_bytes.saturating_add(free)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bug found by the `config` fuzz target: a size ending in a
    /// character of more than one byte (`-o ext_path=/f:64é`) split the
    /// string inside that character, a panic at start instead of
    /// memcached's message.
    #[test]
    fn a_size_ending_in_a_multibyte_character_is_refused_not_a_panic() {
        for bad in ["/d/f:64\u{e9}", "/d/f:\u{fffd}", "/d/f:6\u{1f600}m\u{1f600}"] {
            assert!(parse_path(bad).unwrap_err().contains("(m|g|t|p supported)"), "{bad}");
        }
        assert_eq!(parse_path("/d/\u{e9}:1m").unwrap().size_bytes, 1 << 20);
    }

    #[test]
    fn paths_as_memcached_reads_them() {
        let p = parse_path("/d/f:5G").unwrap();
        assert_eq!((p.path, p.size_bytes, p.bucket), (PathBuf::from("/d/f"), 5 << 30, ExtBucket::Default));
        assert_eq!(parse_path("/d/f:64m:compact").unwrap().bucket, ExtBucket::Compact);
        assert_eq!(parse_path("/d/f::2t").unwrap().size_bytes, 2 << 40);
        assert!(parse_path("/d/f").unwrap_err().contains("(M|G|T|P supported)"));
        for bad in ["/d/f:64", "/d/f:64k", "/d/f:abcm", "/d/f:m"] {
            assert!(parse_path(bad).unwrap_err().contains("(m|g|t|p supported)"), "{bad}");
        }
        assert_eq!(parse_path("/d/f:1g:hot").unwrap_err(), "Unknown extstore bucket: hot\n");
        assert_eq!(parse_path("").unwrap_err(), "");
    }
}
