//! A storage command's header held while its data block arrives: what
//! [`parse_request`](crate::parse_request) found in a `set ...` or `ms ...`
//! line, its borrowed parts (the key, `ms`'s opaque) kept as offsets into
//! the request, so the request's bytes may move (a read buffer compacts
//! as it grows) and the line is not parsed again when the block is whole.
//!
//! ```text
//!  request: [ set k 0 0 5\r\n | v a l u e \r\n ]
//!             ^ 0   ^ key at (4, 1)
//!  hold(request) ──► Held { key: (4, 1), flags, exptime, value_len, .. }
//!  ... the block's bytes arrive, the buffer moves ...
//!  held.store(request) ──► StoreCommand { key: &request[4..5], .. }
//! ```
//!
//! A held header is only good for the same request bytes at the front of
//! the same connection's input: the caller keeps it until the request runs.

use crate::meta::{MetaFlags, MetaKey, MetaRequest, MAX_META_TOKENS};
use crate::StoreCommand;

/// `part`'s place in `whole`, which holds it: (offset, length).
fn place(whole: &[u8], part: &[u8]) -> (u32, u32) {
    let offset = (part.as_ptr() as usize).wrapping_sub(whole.as_ptr() as usize);
    assert!(offset <= whole.len() && part.len() <= whole.len() - offset, "a held part lies within its request");
    (offset as u32, part.len() as u32)
}

fn at(whole: &[u8], (offset, len): (u32, u32)) -> &[u8] {
    &whole[offset as usize..(offset + len) as usize]
}

/// A text storage command (`set add replace append prepend cas`), held.
#[derive(Clone, Copy, Debug)]
pub struct HeldStore {
    cmd: StoreCommand<'static>,
    key: (u32, u32),
}

impl HeldStore {
    /// Hold `cmd`, parsed from the front of `request`.
    pub fn hold(cmd: &StoreCommand<'_>, request: &[u8]) -> HeldStore {
        HeldStore { cmd: StoreCommand { key: &[], ..*cmd }, key: place(request, cmd.key) }
    }

    /// The command again, over the same request's bytes (moved or not).
    pub fn command<'a>(&self, request: &'a [u8]) -> StoreCommand<'a> {
        StoreCommand { key: at(request, self.key), ..self.cmd }
    }
}

/// An `ms` request, held.
#[derive(Clone, Copy, Debug)]
pub struct HeldMeta {
    key: MetaKey<'static>,
    raw_key: (u32, u32),
    flags: MetaFlags,
    order: [u8; MAX_META_TOKENS],
    order_len: u8,
    opaque: Option<(u32, u32)>,
}

impl HeldMeta {
    /// Hold `req`, parsed from the front of `request`.
    pub fn hold(req: &MetaRequest<'_>, request: &[u8]) -> HeldMeta {
        let order = req.order();
        let mut held = HeldMeta {
            key: req.key.detached(),
            raw_key: place(request, req.key.raw()),
            flags: req.flags,
            order: [0; MAX_META_TOKENS],
            order_len: order.len() as u8,
            opaque: req.opaque.map(|o| place(request, o)),
        };
        held.order[..order.len()].copy_from_slice(order);
        held
    }

    /// The request again, over the same request's bytes (moved or not).
    pub fn request<'a>(&self, request: &'a [u8]) -> MetaRequest<'a> {
        MetaRequest::from_parts(
            self.key.attached(at(request, self.raw_key)),
            self.flags,
            &self.order[..usize::from(self.order_len)],
            self.opaque.map(|o| at(request, o)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse_request, Command};

    #[test]
    fn a_held_set_is_the_same_command_over_moved_bytes() {
        let line = b"cas k3y 5 10 4 77 noreply\r\n";
        let Command::Store(cmd) = parse_request(&line[..line.len() - 2], line.len()) else { panic!() };
        let held = HeldStore::hold(&cmd, line);
        let moved = line.to_vec();
        let again = held.command(&moved);
        assert_eq!((again.key, again.flags, again.exptime, again.value_len, again.cas, again.noreply), (&b"k3y"[..], 5, 10, 4, 77, true));
        assert_eq!(again.verb, cmd.verb);
    }

    #[test]
    fn a_held_ms_keeps_its_key_flags_order_and_opaque() {
        for line in [&b"ms a2V5 3 b T30 F9 Oxyz q\r\n"[..], b"ms key 3 c T0 Oab\r\n"] {
            let Command::MetaSet { req, value_len } = parse_request(&line[..line.len() - 2], line.len()) else { panic!() };
            let held = HeldMeta::hold(&req, line);
            let moved = line.to_vec();
            let again = held.request(&moved);
            assert_eq!(value_len, 3);
            assert_eq!(again.key.bytes(), req.key.bytes());
            assert_eq!((again.key.raw(), again.key.binary), (req.key.raw(), req.key.binary));
            assert_eq!(again.order(), req.order());
            assert_eq!(again.opaque, req.opaque);
            assert_eq!(format!("{:?}", again.flags), format!("{:?}", req.flags));
        }
    }
}
