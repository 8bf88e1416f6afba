//! The lock-free read's core protocol under loom (issue 30): a shard's
//! sequence (`seg/seqlock.rs`, the real `SeqLock` compiled against loom's
//! atomics) guarding data that readers read without a lock. Data words are
//! relaxed atomics standing for the racy reads of index slots and item
//! bytes. Loom explores every interleaving (and the relaxed-memory
//! outcomes it models) of a writer and a reader; a reader that validates
//! must never have seen a torn state or a buffer's next owner's bytes.
//!
//!     cargo test --release --workspace --features strata-store/loom --test loom_read
//!
//! (`required-features` keeps it out of every other build.)

use loom::sync::atomic::{fence, AtomicU64, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use strata_store::seg::SeqLock;

/// An item of two words rewritten in place (an `incr`, a touch): a
/// validated read sees both words of one version.
#[test]
fn a_validated_read_is_never_torn() {
    loom::model(|| {
        let seq = Arc::new(SeqLock::new());
        let data = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let writer = {
            let (seq, data) = (Arc::clone(&seq), Arc::clone(&data));
            thread::spawn(move || {
                for v in 1..=2 {
                    seq.write_begin();
                    data[0].store(v, Ordering::Relaxed);
                    data[1].store(v, Ordering::Relaxed);
                    seq.write_end();
                }
            })
        };
        if let Some(s) = seq.read_begin() {
            let a = data[0].load(Ordering::Relaxed);
            let b = data[1].load(Ordering::Relaxed);
            if seq.read_valid(s) {
                assert_eq!(a, b, "validated a torn item");
            }
        }
        writer.join().unwrap();
    });
}

/// Reclamation without an epoch for buffers: shard A frees a buffer into
/// the store's pool inside its write section, shard B takes it and writes
/// another key's bytes into it. A reader of A that found the buffer and
/// read B's bytes must fail to validate against A's sequence. (Without
/// the release fence `Shard::open` issues before writing into a buffer it
/// was handed, loom finds an execution that validates B's bytes: the pool
/// mutex orders A before B, but nothing orders it before the reader.)
#[test]
fn a_reused_buffer_is_never_validated() {
    loom::model(|| {
        let seq_a = Arc::new(SeqLock::new());
        let seq_b = Arc::new(SeqLock::new());
        // The buffer: 1 = A's item; 2 = B's item.
        let buffer = Arc::new(AtomicU64::new(1));
        // A's index: whether A still points at the buffer.
        let linked = Arc::new(AtomicU64::new(1));
        let pool = Arc::new(Mutex::new(false));
        let a = {
            let (seq_a, linked, pool) = (Arc::clone(&seq_a), Arc::clone(&linked), Arc::clone(&pool));
            thread::spawn(move || {
                seq_a.write_begin();
                linked.store(0, Ordering::Relaxed);
                *pool.lock().unwrap() = true;
                seq_a.write_end();
            })
        };
        let b = {
            let (seq_b, buffer, pool) = (Arc::clone(&seq_b), Arc::clone(&buffer), Arc::clone(&pool));
            thread::spawn(move || {
                seq_b.write_begin();
                if std::mem::take(&mut *pool.lock().unwrap()) {
                    // Shard::open's fence: after the pool, before the bytes.
                    fence(Ordering::Release);
                    buffer.store(2, Ordering::Relaxed);
                }
                seq_b.write_end();
            })
        };
        if let Some(s) = seq_a.read_begin() {
            if linked.load(Ordering::Relaxed) == 1 {
                let item = buffer.load(Ordering::Relaxed);
                if seq_a.read_valid(s) {
                    assert_eq!(item, 1, "validated another owner's bytes");
                }
            }
        }
        a.join().unwrap();
        b.join().unwrap();
    });
}
