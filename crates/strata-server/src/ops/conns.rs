//! `stats conns` as memcached 1.6.45 prints it: every socket the server
//! holds, listening ones and UDP ones included, in the order they were
//! opened (memcached orders by file descriptor, which is the same order).
//!
//! ```text
//!  <id>:addr tcp:127.0.0.1:11211          listening socket
//!  <id>:state conn_listening
//!  <id>:secs_since_last_cmd <s>
//!  <id>:UDP UDP                           a worker's UDP socket
//!  <id>:addr udp:127.0.0.1:11211
//!  <id>:state conn_read
//!  <id>:secs_since_last_cmd <s>
//!  <id>:addr tcp:127.0.0.1:40000          a client
//!  <id>:listen_addr tcp:127.0.0.1:11211
//!  <id>:state conn_parse_cmd | conn_read  (the asking one | the others)
//!  <id>:secs_since_last_cmd <s>
//! ```
//!
//! The ids are the connection registry's (memcached's are file
//! descriptors): listening and UDP sockets are registered at start, so
//! they come first.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::ctx::Ctx;
use crate::core::Core;
use crate::registry::{ConnInfo, ConnKind};

type Stats = Vec<(String, String)>;

/// Register the listening sockets and each worker's UDP sockets, as
/// memcached keeps a connection for each.
pub fn register_sockets(shared: &Core, tcp: &[SocketAddr], udp: &[SocketAddr]) {
    let now = shared.clock.now();
    let listening: Vec<String> = match &shared.settings.unix_socket {
        Some(path) => vec![format!("unix:{}", path.display())],
        None => tcp.iter().map(|a| format!("tcp:{a}")).collect(),
    };
    for addr in listening {
        shared.conns.register(Arc::new(ConnInfo::socket(addr, ConnKind::Listening, now)));
    }
    // One socket per worker and address (SO_REUSEPORT), as 1.6.45 has one
    // UDP connection per worker thread.
    for _ in 0..shared.settings.threads.max(1) {
        for a in udp {
            shared.conns.register(Arc::new(ConnInfo::socket(format!("udp:{a}"), ConnKind::Udp, now)));
        }
    }
}

/// memcached names an IPv6 address's protocol `tcp6`/`udp6`.
fn memcached_addr(addr: &str) -> String {
    match addr.split_once(":[") {
        Some((proto @ ("tcp" | "udp"), rest)) => format!("{proto}6:[{rest}"),
        _ => addr.to_string(),
    }
}

pub fn conns(ctx: &Ctx<'_>, t: &mut Stats) {
    let now = ctx.core.clock.now();
    let mut push = |id: u64, field: &str, value: String| t.push((format!("{id}:{field}"), value));
    for (id, info) in ctx.core.conns.snapshot() {
        let state = match info.kind {
            ConnKind::Listening => "conn_listening",
            ConnKind::Udp => {
                push(id, "UDP", "UDP".to_string());
                "conn_read"
            }
            ConnKind::Client if id == ctx.conn_id => "conn_parse_cmd",
            ConnKind::Client => "conn_read",
        };
        push(id, "addr", memcached_addr(&info.peer));
        if info.kind == ConnKind::Client {
            push(id, "listen_addr", memcached_addr(&info.listen));
        }
        push(id, "state", state.to_string());
        push(id, "secs_since_last_cmd", now.saturating_sub(info.last_cmd()).to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_addresses_say_tcp6() {
        assert_eq!(memcached_addr("tcp:[::1]:11211"), "tcp6:[::1]:11211");
        assert_eq!(memcached_addr("udp:[::1]:11211"), "udp6:[::1]:11211");
        assert_eq!(memcached_addr("tcp:127.0.0.1:5"), "tcp:127.0.0.1:5");
        assert_eq!(memcached_addr("unix:/tmp/s"), "unix:/tmp/s");
    }
}
