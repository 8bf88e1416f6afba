//! The registry of open connections, all workers: what `stats conns`
//! lists (client connections, and the listening and UDP sockets memcached
//! lists beside them), with each connection's last command time (the idle
//! kick reads it) and its buffer bytes (`stats memory`).
//!
//! Written on open and close only (a mutex over a map from the
//! connection's id); a connection's own [`ConnInfo`] is an `Arc` its
//! worker keeps, touched with relaxed stores by that worker alone.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What a `stats conns` entry is: memcached lists its listening sockets
/// and its UDP sockets beside the client connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnKind {
    Client,
    Listening,
    Udp,
}

/// One open connection (or listening / UDP socket) as `stats conns` shows it.
#[derive(Debug)]
pub struct ConnInfo {
    pub peer: String,
    pub listen: String,
    pub kind: ConnKind,
    last_cmd: std::sync::atomic::AtomicU32,
    /// Bytes of the connection's buffers at capacity, as its worker last
    /// noted them (`stats memory` `conn_buffers_bytes`).
    buffer_bytes: AtomicU64,
}

impl ConnInfo {
    pub fn new(peer: String, listen: String, now: u32) -> ConnInfo {
        ConnInfo { peer, listen, kind: ConnKind::Client, last_cmd: std::sync::atomic::AtomicU32::new(now), buffer_bytes: AtomicU64::new(0) }
    }

    /// A listening or UDP socket bound to `addr` (`tcp:...`, `udp:...`, `unix:...`).
    pub fn socket(addr: String, kind: ConnKind, now: u32) -> ConnInfo {
        ConnInfo { peer: addr.clone(), listen: addr, kind, last_cmd: std::sync::atomic::AtomicU32::new(now), buffer_bytes: AtomicU64::new(0) }
    }

    /// Idle past `limit` seconds (memcached's idle_timeout rule: strictly
    /// more than the limit since the last command).
    pub fn idle_past(&self, now: u32, limit: u32) -> bool {
        now.saturating_sub(self.last_cmd()) > limit
    }

    pub fn last_cmd(&self) -> u32 {
        self.last_cmd.load(Ordering::Relaxed)
    }

    pub fn touch(&self, now: u32) {
        self.last_cmd.store(now, Ordering::Relaxed);
    }

    /// Note the connection's buffer bytes (its worker, at the end of a
    /// turn); a store only when they changed, which is rare.
    #[inline]
    pub fn note_buffers(&self, bytes: usize) {
        if self.buffer_bytes.load(Ordering::Relaxed) != bytes as u64 {
            self.buffer_bytes.store(bytes as u64, Ordering::Relaxed);
        }
    }

    pub fn buffer_bytes(&self) -> u64 {
        self.buffer_bytes.load(Ordering::Relaxed)
    }
}

/// Registry of open connections; written on open and close only.
#[derive(Default)]
pub struct ConnRegistry {
    map: Mutex<std::collections::BTreeMap<u64, Arc<ConnInfo>>>,
    next_id: AtomicU64,
}

impl ConnRegistry {
    pub fn register(&self, info: Arc<ConnInfo>) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        self.map.lock().unwrap_or_else(|e| e.into_inner()).insert(id, info);
        id
    }

    pub fn remove(&self, id: u64) {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
    }

    pub fn snapshot(&self) -> Vec<(u64, Arc<ConnInfo>)> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.iter().map(|(id, info)| (*id, info.clone())).collect()
    }
}
