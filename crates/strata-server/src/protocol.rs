//! Which protocol a connection speaks, decided by its first byte
//! (memcached's `-B auto`): a leaf the request path and the features that
//! count by protocol (`ops/latency.rs`, `ops/hotkeys.rs`) both read.

use strata_proto::binary::REQUEST_MAGIC;

use crate::settings::ProtocolChoice;

/// Which protocol a connection speaks, decided by its first byte
/// (memcached's `-B auto`): 0x80 is a binary request, anything else text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Protocol {
    #[default]
    Negotiating,
    Text,
    Binary,
}

pub fn negotiate(first: u8, choice: ProtocolChoice) -> Protocol {
    match choice {
        ProtocolChoice::Ascii => Protocol::Text,
        ProtocolChoice::Binary => Protocol::Binary,
        ProtocolChoice::Auto if first == REQUEST_MAGIC => Protocol::Binary,
        ProtocolChoice::Auto => Protocol::Text,
    }
}

