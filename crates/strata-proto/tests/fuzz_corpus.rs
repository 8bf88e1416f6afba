//! Replays the fuzz corpus (`../../fuzz/corpus/text`) and the runs' finds
//! (`../../fuzz/grown/text`) through the fuzz target's body on stable Rust,
//! plus random and mutated inputs from proptest, so the parser's no-panic
//! guarantee is checked on every `scripts/test` run.

use proptest::prelude::*;

/// `fuzz/corpus/text` (the seeds and bug inputs) or `fuzz/grown/text` (what
/// the runs found beyond them).
fn inputs(kept: &str) -> Vec<Vec<u8>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz").join(kept).join("text");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).map(|e| e.unwrap().path()).collect();
    files.sort();
    files.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

fn corpus() -> Vec<Vec<u8>> {
    inputs("corpus")
}

#[test]
fn corpus_replays_without_panics() {
    let corpus = corpus();
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
    for input in inputs("grown") {
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
        let corpus = corpus();
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
