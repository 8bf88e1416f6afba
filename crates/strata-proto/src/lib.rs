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

pub mod base64;
pub mod command;
pub mod meta;
pub mod number;
pub mod text;

pub use command::{parse_command, Command, GetKind, StoreCommand, StoreVerb, KEY_MAX_LENGTH};
pub use meta::{MetaFlags, MetaKey, MetaRequest};
pub use text::{frame_line, Frame, KeyList, Tokens};
