//! The `mj` command, answered (docs/COMPATIBILITY.md, "Journal"):
//!
//! ```text
//!  mj <since_unix>\r\n
//!  JR <bytes> <count> <from_unix> <now_unix>\r\n<count × 4-byte LE key tags>\r\n
//!  JN <off|flushed|too_old|wrapped|busy|lost>\r\n
//! ```
//!
//! `JR`: every key changed on this node at or after `since_unix` has its
//! tag in the block (the block is complete from `from_unix`, at or before
//! `since_unix`, or later when the journal was born then with its memory
//! file: nothing came before; the asking node decides, `peer.rs`). `JN`:
//! this node cannot say, and the asking node must start cold. The reply is bounded by the journal's size (4 bytes a
//! distinct tag). Connections that must log in (`-Y`) are refused before
//! they get here, as for every command.

use std::sync::atomic::Ordering;

use strata_proto::number::push_u64;

use super::Journal;

/// Append the answer to `mj <since>` to `out`.
pub fn answer(journal: &Journal, since_unix: u64, now_unix: i64, out: &mut Vec<u8>) {
    let since = i64::try_from(since_unix).unwrap_or(i64::MAX);
    match journal.changes_since(since) {
        Ok(changes) => {
            journal.served.fetch_add(1, Ordering::Relaxed);
            let count = changes.tags.len() as u64;
            out.extend_from_slice(b"JR ");
            push_u64(out, count * 4);
            out.push(b' ');
            push_u64(out, count);
            out.push(b' ');
            push_u64(out, changes.from_unix.max(0) as u64);
            out.push(b' ');
            push_u64(out, now_unix.max(0) as u64);
            out.extend_from_slice(b"\r\n");
            out.reserve(changes.tags.len() * 4 + 2);
            for tag in changes.tags {
                out.extend_from_slice(&tag.to_le_bytes());
            }
            out.extend_from_slice(b"\r\n");
        }
        Err(why) => {
            journal.refused.fetch_add(1, Ordering::Relaxed);
            out.extend_from_slice(b"JN ");
            out.extend_from_slice(why.word().as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
}
