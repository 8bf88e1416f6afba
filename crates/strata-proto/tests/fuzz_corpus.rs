//! Replays the fuzz corpus (`../../fuzz/corpus/text`) and the runs' finds
//! (`../../fuzz/grown/text.tar.gz`) through the fuzz target's body on
//! stable Rust, plus random and mutated inputs from proptest, so the
//! parser's no-panic guarantee is checked on every `scripts/test` run.

use std::path::{Path, PathBuf};

use proptest::prelude::*;

fn fuzz() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The files of `dir`, in name order.
fn files(dir: &Path) -> Vec<Vec<u8>> {
    let mut files: Vec<_> = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).map(|e| e.unwrap().path()).collect();
    files.sort();
    files.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

/// `fuzz/corpus/text`: the seeds and bug inputs.
fn seeds() -> Vec<Vec<u8>> {
    files(&fuzz().join("corpus/text"))
}

/// `fuzz/grown/text.tar.gz` (what the runs found beyond the seeds), read
/// in memory in name order (as strata-store's `fuzzing::corpus` reads
/// the other targets'; this crate depends on no other).
fn grown() -> Vec<Vec<u8>> {
    use std::io::Read;
    let archive = fuzz().join("grown/text.tar.gz");
    let file = std::fs::File::open(&archive).unwrap_or_else(|e| panic!("{}: {e}", archive.display()));
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(std::io::BufReader::new(file)));
    let mut inputs = Vec::new();
    for entry in tar.entries().expect("a tar archive") {
        let mut entry = entry.expect("an archive entry");
        if entry.header().entry_type() == tar::EntryType::Regular {
            let (name, mut bytes) = (entry.path().expect("a name").into_owned(), Vec::new());
            entry.read_to_end(&mut bytes).expect("an input's bytes");
            inputs.push((name, bytes));
        }
    }
    inputs.sort();
    inputs.into_iter().map(|(_, bytes)| bytes).collect()
}

#[test]
fn corpus_replays_without_panics() {
    let corpus = seeds();
    assert!(corpus.len() >= 10, "corpus has {} entries", corpus.len());
    for input in &corpus {
        strata_proto::fuzz_text(input);
        for cut in 0..input.len() {
            strata_proto::fuzz_text(&input[..cut]);
        }
    }
}

#[test]
fn grown_replays_without_panics() {
    let grown = grown();
    assert!(grown.len() >= 1000, "fuzz/grown/text.tar.gz holds {} inputs", grown.len());
    for input in grown {
        strata_proto::fuzz_text(&input);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        strata_proto::fuzz_text(&data);
    }

    #[test]
    fn mutated_corpus_never_panics(index in 0usize..64, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8)) {
        let corpus = seeds();
        let mut input = corpus[index % corpus.len()].clone();
        for (at, byte) in flips {
            if !input.is_empty() {
                let at = at % input.len();
                input[at] = byte;
            }
        }
        strata_proto::fuzz_text(&input);
    }
}
