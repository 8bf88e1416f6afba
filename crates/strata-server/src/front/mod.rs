//! The front ends: one file per protocol maps its parsed commands
//! (`strata-proto`) to the service's verbs (`service/`) and writes the
//! replies, byte for byte as memcached writes them. They never touch the
//! worker's counters, `watch` or the journal: the service's hooks do.
//!
//! - `text.rs`: the text protocol and the admin commands;
//! - `meta.rs`: `mg ms md ma me`;
//! - `binary.rs`: the binary protocol.

pub mod binary;
pub mod meta;
pub mod text;

/// What the connection does after a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// Send what is queued, then close (`quit`).
    CloseAfterWrite,
    /// Close at once, without a reply.
    Close,
}

/// Whether a storage command's data block is taken, and if not, the reply.
pub enum Admission {
    Accept,
    /// Reply with this line (unless silenced) and swallow the block.
    Refuse { reply: &'static str, noreply: bool },
}

/// Append `line` and CRLF unless `noreply` (then `-vv` still sees it).
#[inline]
pub(crate) fn reply(out: &mut Vec<u8>, line: &str, noreply: bool) {
    if !noreply {
        out.extend_from_slice(line.as_bytes());
        out.extend_from_slice(b"\r\n");
    } else {
        crate::service::hooks::silenced(line.as_bytes());
    }
}
