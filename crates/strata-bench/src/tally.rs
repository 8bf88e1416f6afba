//! Per-thread counters of one run, merged at the end. Every request the
//! bench sends ends exactly one way: completed (counted as a get or a set,
//! with a latency), aborted (its connection broke), or timed out (no reply
//! by the drain deadline, or a lost UDP datagram), so
//! `sent == completed + aborted + timed_out` is the check that nothing was
//! lost or double counted. Errors count per kind; some (a value that fails
//! validation) leave the request completed, others end it.

use crate::histogram::Latency;
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Could not connect.
    Connect,
    /// The server closed the connection or a socket call failed.
    Closed,
    /// A reply the codec could not parse, or one out of step with the
    /// request (wrong opaque, unsolicited bytes): the connection is dropped.
    BadReply,
    /// A value that is not what the bench wrote for that key.
    ValueMismatch,
    /// A well-formed reply that should not happen (NOT_STORED to a set, a
    /// key that was not asked for, `ERROR`).
    UnexpectedReply,
    ServerError,
    ClientError,
    /// No reply by the deadline.
    Timeout,
    /// A UDP datagram for no outstanding request.
    UdpStray,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 9] = [
        ErrorKind::Connect,
        ErrorKind::Closed,
        ErrorKind::BadReply,
        ErrorKind::ValueMismatch,
        ErrorKind::UnexpectedReply,
        ErrorKind::ServerError,
        ErrorKind::ClientError,
        ErrorKind::Timeout,
        ErrorKind::UdpStray,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::Closed => "closed",
            ErrorKind::BadReply => "bad_reply",
            ErrorKind::ValueMismatch => "value_mismatch",
            ErrorKind::UnexpectedReply => "unexpected_reply",
            ErrorKind::ServerError => "server_error",
            ErrorKind::ClientError => "client_error",
            ErrorKind::Timeout => "timeout",
            ErrorKind::UdpStray => "udp_stray",
        }
    }
}

#[derive(Default)]
pub struct Tally {
    pub latency: Latency,
    /// The same latencies split by kind (a multi-get is one get).
    pub latency_gets: Latency,
    pub latency_sets: Latency,
    pub sent: u64,
    pub completed: u64,
    pub aborted: u64,
    pub timed_out: u64,
    pub gets: u64,
    pub sets: u64,
    /// Keys asked for by completed gets (`mget` per get).
    pub keys_requested: u64,
    pub hits: u64,
    pub misses: u64,
    errors: [u64; ErrorKind::ALL.len()],
}

impl Tally {
    pub fn error(&mut self, kind: ErrorKind) {
        self.errors[kind as usize] += 1;
    }

    pub fn errors_of(&self, kind: ErrorKind) -> u64 {
        self.errors[kind as usize]
    }

    pub fn error_total(&self) -> u64 {
        self.errors.iter().sum()
    }

    /// Nonzero error counts by name.
    pub fn error_map(&self) -> BTreeMap<&'static str, u64> {
        ErrorKind::ALL.iter().filter(|k| self.errors_of(**k) > 0).map(|k| (k.name(), self.errors_of(*k))).collect()
    }

    pub fn merge(&mut self, o: &Tally) {
        self.latency.merge(&o.latency);
        self.latency_gets.merge(&o.latency_gets);
        self.latency_sets.merge(&o.latency_sets);
        self.sent += o.sent;
        self.completed += o.completed;
        self.aborted += o.aborted;
        self.timed_out += o.timed_out;
        self.gets += o.gets;
        self.sets += o.sets;
        self.keys_requested += o.keys_requested;
        self.hits += o.hits;
        self.misses += o.misses;
        for (a, b) in self.errors.iter_mut().zip(o.errors) {
            *a += b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_and_error_names() {
        let mut a = Tally::default();
        a.error(ErrorKind::Timeout);
        a.sent = 3;
        let mut b = Tally::default();
        b.error(ErrorKind::Timeout);
        b.error(ErrorKind::ValueMismatch);
        b.sent = 4;
        a.merge(&b);
        assert_eq!(a.sent, 7);
        assert_eq!(a.error_total(), 3);
        assert_eq!(a.error_map().into_iter().collect::<Vec<_>>(), vec![("timeout", 2), ("value_mismatch", 1)]);
    }
}
