//! Damaged files read back: a pristine image (`images.rs`) copied, damaged
//! with a list of [`Op`]s, opened as a restart opens it, then every key
//! read as the server reads it (RAM, then the flash protocol). The rule:
//! never a crash, never a value of another key, never a value nobody wrote
//! (a value is checked against every version written for its key); items
//! lost are allowed and counted, and so are stale ones (an older version,
//! or a deleted key's: allowed by the rule, reported beside it).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

use arbitrary::{Arbitrary, Unstructured};

use super::images::{self, History, NOW};
use super::mutate::{self, Layout, Op};
use crate::{Engine, GetAction, GetOptions, SegStore};

/// The files a damage lands in.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// `-e FILE`.
    Memory,
    /// `FILE.flash/pages`.
    PageTable,
    /// `FILE.flash/shard.N` (flash index) and `smallidx.N` (small index).
    Index,
    /// The flash data file: records, sets and log blocks.
    Records,
    /// `FILE.flash/wbuf.N`.
    Buffers,
    /// `FILE.flash/small.N`.
    SmallDir,
    /// Any flash file.
    AnyFlash,
}

impl FileKind {
    pub const ALL: [FileKind; 6] = [FileKind::Memory, FileKind::PageTable, FileKind::Index, FileKind::Records, FileKind::Buffers, FileKind::SmallDir];

    pub fn name(self) -> &'static str {
        match self {
            FileKind::Memory => "memory file",
            FileKind::PageTable => "page table",
            FileKind::Index => "flash and small index",
            FileKind::Records => "records (data file)",
            FileKind::Buffers => "write buffers",
            FileKind::SmallDir => "small store directories",
            FileKind::AnyFlash => "any flash file",
        }
    }

    fn flash(self) -> bool {
        self != FileKind::Memory
    }

    /// Whether the image's file `rel` is one this kind damages.
    fn holds(self, rel: &Path) -> bool {
        let name = rel.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let in_dir = rel.parent().is_some_and(|p| p.as_os_str() == "memory.flash");
        match self {
            FileKind::Memory => name == "memory",
            FileKind::PageTable => in_dir && name == "pages",
            FileKind::Index => in_dir && (name.starts_with("shard.") || name.starts_with("smallidx.")),
            FileKind::Records => name == "flash",
            FileKind::Buffers => in_dir && name.starts_with("wbuf."),
            FileKind::SmallDir => in_dir && name.starts_with("small."),
            FileKind::AnyFlash => name != "memory",
        }
    }
}

/// The shape of an image's file, for structure-aware offsets.
fn layout(rel: &Path, len: u64) -> Layout {
    let name = rel.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if name == "memory" {
        // Header page, 16-byte directory entries (one per arena page), the
        // arena's pages and segments.
        let pages = len.saturating_sub(4096) / (4096 + 16);
        let arena = 4096 + (pages * 16).div_ceil(4096) * 4096;
        Layout::new(4096, &[(4096, 16), (arena, 4096), (arena, 32), (arena, 1 << 20)])
    } else if name == "pages" {
        Layout::new(4096, &[(64, 24), (4096, 16)])
    } else if name.starts_with("shard.") {
        Layout::new(64, &[(64, 12), (64, 4096)])
    } else if name.starts_with("smallidx.") {
        Layout::new(64, &[(64, 8), (64, 4096)])
    } else if name.starts_with("small.") {
        // Partitions of 21,184 bytes: two 320-byte commit slots, live
        // counts, a ring of 8-byte slots, the open 4 KiB block.
        Layout::new(4096, &[(4096, 21184), (4096, 320), (4096 + 704, 8), (4096 + 704 + 16384, 21184)])
    } else if name == "flash" {
        Layout::new(4096, &[(0, images::FLASH_PAGE), (0, 4096), (0, 16)])
    } else {
        // Write buffers: records from the start, in 16-byte units.
        Layout::new(64, &[(0, 16), (0, 4096)])
    }
}

/// A fuzzer's input: which image (after a graceful stop or a crash) and
/// the damage done to it.
#[derive(Arbitrary, Debug)]
pub struct Damage {
    pub crash: bool,
    pub ops: Vec<Op>,
}

/// Operations an input applies at most.
const MAX_OPS: usize = 24;

/// What a damaged image answered.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Keys the undamaged image answers with their last version.
    pub live: usize,
    /// Of those, answered with it after the damage.
    pub kept: usize,
    /// Answers with an older version, or for a key deleted last.
    pub stale: usize,
    /// Answers nobody wrote for that key (should be none).
    pub wrong: Vec<String>,
    /// The memory file started cold (its header refused).
    pub cold: bool,
}

struct Image {
    root: PathBuf,
    history: History,
    /// Per variant (clean, crash), each key's version as the undamaged
    /// image answers it.
    baseline: [Vec<Option<u32>>; 2],
    /// Per key, every (version, value) written: made once, not per input
    /// (rebuilding the values was a fifth of an input's time).
    written: Vec<Vec<(u32, Vec<u8>)>>,
}

impl Image {
    /// Whether key `i` was ever written with this value and flags.
    fn was_written(&self, i: usize, value: &[u8], flags: u32) -> bool {
        self.written[i].iter().any(|(version, v)| *version == flags && v == value)
    }
}

struct Images {
    memory: Image,
    flash: Image,
    scratch: PathBuf,
}

/// The pristine images, built on first use; `None` again after
/// [`remove_images`]. Runs share them (each damages a copy in a work
/// directory of its own), so a replay's inputs run on several threads;
/// a removal waits for the runs in progress.
static IMAGES: RwLock<Option<Images>> = RwLock::new(None);

/// Work directories handed out (each run's own name).
static RUNS: AtomicU64 = AtomicU64::new(0);

fn with_images<R>(f: impl FnOnce(&Images) -> R) -> R {
    loop {
        let held = IMAGES.read().unwrap_or_else(|e| e.into_inner());
        if let Some(images) = held.as_ref() {
            return f(images);
        }
        drop(held);
        let mut held = IMAGES.write().unwrap_or_else(|e| e.into_inner());
        if held.is_none() {
            *held = Some(build_images());
        }
    }
}

/// Remove this process's images and scratch directory, after the runs in
/// progress; a later run builds them again.
pub fn remove_images() {
    let mut held = IMAGES.write().unwrap_or_else(|e| e.into_inner());
    *held = None;
    images::remove_scratch();
}

fn build_images() -> Images {
    images::remove_stale_scratch();
    let scratch = images::scratch();
    let work = scratch.join("work");
    let image = |name: &str, flash: bool| {
        let root = scratch.join(name);
        let history = if flash { images::build_flash(&root) } else { images::build_memory(&root) };
        let mut baseline = [Vec::new(), Vec::new()];
        for (v, variant) in ["clean", "crash"].iter().enumerate() {
            images::copy_tree(&root.join(variant), &work).expect("copy image");
            let s = images::open(&work, flash).expect("open pristine image");
            baseline[v] = (0..history.keys).map(|i| read(&s, i)).map(|got| got.map(|(_, flags)| flags)).collect();
        }
        let written = (0..history.keys)
            .map(|i| history.versions[i].iter().map(|&v| (v, images::value(i, v, images::value_len(i, v, flash)))).collect())
            .collect();
        Image { root, history, baseline, written }
    };
    let images = Images { memory: image("memory", false), flash: image("flash", true), scratch };
    let _ = std::fs::remove_dir_all(&work);
    images
}

/// Key `i` read as the server reads it: (value, flags) or a miss.
fn read(s: &SegStore, i: usize) -> Option<(Vec<u8>, u32)> {
    let key = images::key(i);
    let mut seen = None;
    let opts = GetOptions { no_bump: true, ..GetOptions::default() };
    let mut visit = |view: crate::ItemView<'_>, _created: bool| {
        seen = Some((view.value.to_vec(), view.meta.flags));
        GetAction::default()
    };
    if s.get(&key, opts, NOW, &mut visit) {
        return seen;
    }
    let Some(flash) = s.flash_check(&key, NOW) else {
        s.get(&key, opts, NOW, &mut visit);
        return seen;
    };
    let data = flash.read_blocking().ok();
    if s.finish_flash_read(&flash, data.as_deref(), opts, false, NOW, &mut visit) != crate::FlashFinish::Visited {
        s.get(&key, opts, NOW, &mut visit);
    }
    seen
}

/// Damage an image of `kind` as `input` says, open it, read every key.
pub fn run(kind: FileKind, input: &Damage) -> Outcome {
    with_images(|all| run_on(all, kind, input))
}

fn run_on(all: &Images, kind: FileKind, input: &Damage) -> Outcome {
    let image = if kind.flash() { &all.flash } else { &all.memory };
    let work = all.scratch.join(format!("run-{}", RUNS.fetch_add(1, Ordering::Relaxed)));
    let out = run_in(image, kind, input, &work);
    let _ = std::fs::remove_dir_all(&work);
    out
}

fn run_in(image: &Image, kind: FileKind, input: &Damage, work: &Path) -> Outcome {
    let variant = usize::from(input.crash);
    images::copy_tree(&image.root.join(["clean", "crash"][variant]), work).expect("copy image");
    let targets: Vec<PathBuf> = images::files(work).into_iter().filter(|rel| kind.holds(rel)).collect();
    assert!(!targets.is_empty(), "{kind:?}: no file to damage");
    for op in input.ops.iter().take(MAX_OPS) {
        let rel = &targets[op.file as usize % targets.len()];
        let path = work.join(rel);
        let len = std::fs::metadata(&path).map_or(0, |m| m.len());
        mutate::apply(&path, &layout(rel, len), op).expect("damage a file");
    }
    let s = images::open(work, kind.flash()).expect("a damaged image opens (cold at worst)");
    s.check_integrity();
    let mut out = Outcome { cold: s.stats().restart.is_none_or(|r| !r.ok), ..Outcome::default() };
    let h = &image.history;
    for i in 0..h.keys {
        let base = image.baseline[variant][i];
        let live = base.is_some() && base == h.last[i];
        out.live += usize::from(live);
        let Some((value, flags)) = read(&s, i) else { continue };
        if !image.was_written(i, &value, flags) {
            let shown = String::from_utf8_lossy(&value[..value.len().min(40)]).into_owned();
            out.wrong.push(format!("key {i}: {} bytes, flags {flags}: {shown:?} (versions written {:?})", value.len(), h.versions[i]));
        } else if Some(flags) == h.last[i] {
            out.kept += usize::from(live);
        } else {
            out.stale += 1;
        }
    }
    drop(s);
    out
}

/// Parse a fuzzer's bytes into a [`Damage`] (None: too few bytes).
pub fn parse(data: &[u8]) -> Option<Damage> {
    Damage::arbitrary_take_rest(Unstructured::new(data)).ok()
}

fn check(kind: FileKind, data: &[u8]) {
    let Some(input) = parse(data) else { return };
    let out = run(kind, &input);
    reclaim_thread_records();
    assert!(out.wrong.is_empty(), "{kind:?} {input:?}: wrong values: {:#?}", out.wrong);
}

/// Free what crossbeam-epoch keeps of the threads an input started and
/// ended (recovery's, the flash writer's): each registered a record
/// (~2 KiB), which the collector frees only once later pins have walked
/// past it and advanced the epoch twice. Left to that, every input ended
/// with a few more allocations than frees, and libFuzzer ran each one
/// again under LeakSanitizer to look for a leak (a third of flash_files'
/// time). A few pins with a flush, each collecting, free them within the
/// input.
fn reclaim_thread_records() {
    for _ in 0..4 {
        crossbeam_epoch::pin().flush();
    }
}

/// Build the pristine images now (seconds under ASan), before libFuzzer
/// times the first input (the targets' `init`).
pub fn prepare() {
    with_images(|_| ());
}

/// Fuzz target 6: the memory file (`fuzz/fuzz_targets/memory_file.rs`).
pub fn fuzz_memory_file(data: &[u8]) {
    check(FileKind::Memory, data);
}

/// Fuzz target 8: the flash files, the first byte choosing which kind.
pub fn fuzz_flash_files(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else { return };
    let kinds = [FileKind::PageTable, FileKind::Index, FileKind::Records, FileKind::Buffers, FileKind::SmallDir, FileKind::AnyFlash];
    check(kinds[first as usize % kinds.len()], rest);
}
