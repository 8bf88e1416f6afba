//! strata-proto: memcached's wire protocols, bytes to typed commands and typed
//! replies to bytes, in both directions, with no I/O. The server, the load
//! generator and the tests share this one codec.
//!
//! Server side: [`text::frame_line`] finds a request line in a read buffer
//! (push style: `Partial` means read more), [`command::parse_command`] turns
//! it into a [`command::Command`] borrowing keys from the buffer. A storage
//! command carries the length of its data block; the caller reads the block
//! straight into the store.

#![forbid(unsafe_code)]

pub mod admin;
pub mod base64;
pub mod binary;
pub mod client;
pub mod command;
pub mod held;
pub mod meta;
pub mod number;
pub mod text;
pub mod udp;
pub mod value_line;

pub use command::{enable_debugtime, parse_command, parse_request, Command, DebugTime, GetKind, StoreCommand, StoreVerb, KEY_MAX_LENGTH};
pub use meta::{MetaFlags, MetaKey, MetaRequest};
pub use text::{frame_line, Frame, KeyList, Tokens};

/// The fuzz target's body, shared by `fuzz/` (libFuzzer) and the corpus
/// replay test: frame and parse every request in `data`, checking the
/// parser's own invariants. Must never panic.
pub fn fuzz_text(data: &[u8]) {
    let mut rest = data;
    while !rest.is_empty() {
        match frame_line(rest, 1 << 16) {
            Frame::Partial | Frame::Close => return,
            Frame::Line { line, consumed } => {
                assert!(consumed <= rest.len() && line.len() < consumed);
                let skip = match command::parse_request(line, consumed) {
                    Command::Store(s) => s.value_len.saturating_add(2),
                    Command::MetaSet { value_len, req } => {
                        assert!(req.key.bytes().len() <= KEY_MAX_LENGTH);
                        value_len.saturating_add(2)
                    }
                    Command::Error { swallow, .. } => swallow,
                    Command::Get { keys, .. } => {
                        keys.iter().for_each(|k| assert!(!k.is_empty() && !k.contains(&b' ')));
                        0
                    }
                    _ => 0,
                };
                rest = &rest[consumed..];
                rest = &rest[skip.min(rest.len())..];
            }
        }
    }
}
