//! The UDP transport (`-U`), as memcached 1.6 serves it.
//!
//! Every worker owns one UDP socket per listen address, all bound to the same
//! port with `SO_REUSEPORT`, so the kernel spreads datagrams over the workers
//! and no socket is shared. A datagram is one request frame: an 8-byte header
//! (request id, sequence 0, total 1) and complete commands; a frame that
//! claims more than one datagram, or ends inside a command, is dropped.
//!
//! Replies go only to the datagram's source address. Each reply object (one
//! per command; one per hit of a multi-get, `END` riding with the last) is
//! split into datagrams of at most 1400 bytes with its own sequence numbers,
//! as memcached does. Amplification: a request of a few dozen bytes can ask
//! for a reply up to `-I` (1 MiB, about 750 datagrams); `-o udp_max_reply=N`
//! caps the bytes a single datagram may draw (default 64 KiB), and replies
//! over the cap are replaced by an error and counted in `udp_replies_refused`.

use std::os::fd::AsRawFd;

use mio::net::UdpSocket;
use strata_proto::udp::{split_reply, UdpHeader, HEADER_LEN};

use crate::front::{self, Step};
use crate::output::Output;
use crate::protocol::{negotiate, Protocol};
use crate::service::Service;
use crate::runtime::Runtime;
use crate::stats::WorkerStats;
use crate::sys::mmsg::{RecvBatch, SendBatch, BATCH};

/// Largest datagram read.
const MAX_REQUEST_DATAGRAM: usize = 65536;
/// Reply bytes queued before they are sent even if more requests wait.
const MAX_QUEUED_REPLIES: usize = 256 * 1024;

/// One worker's UDP sockets and scratch buffers.
pub struct UdpPorts {
    pub sockets: Vec<UdpSocket>,
    requests: RecvBatch,
    replies: SendBatch,
    /// A datagram's replies, each reply object marked.
    out: Output,
    datagram: Vec<u8>,
}

impl UdpPorts {
    pub fn new(sockets: Vec<UdpSocket>) -> UdpPorts {
        UdpPorts {
            sockets,
            requests: RecvBatch::new(MAX_REQUEST_DATAGRAM),
            replies: SendBatch::default(),
            out: Output::datagrams(),
            datagram: Vec::new(),
        }
    }

    /// Serve every datagram waiting on socket `index`, for worker
    /// `worker`: up to 16 taken per `recvmmsg`, their replies sent together
    /// with `sendmmsg`.
    pub fn drain(&mut self, index: usize, rt: &Runtime, worker: usize) {
        let UdpPorts { sockets, requests, replies, out, datagram } = self;
        let Some(socket) = sockets.get(index) else { return };
        let stats = &*rt.core.worker_stats[worker];
        let fd = socket.as_raw_fd();
        loop {
            // An error other than an empty socket (none is expected on a
            // bound UDP socket) ends this drain like an empty one.
            let count = requests.recv(fd).unwrap_or(0);
            for i in 0..count {
                // Truncated (over 64 KiB) and non-IP datagrams are dropped.
                let Some((request, peer)) = requests.get(i) else { continue };
                let mut svc = Service::new(rt, worker);
                let Some(request_id) = answer(&mut svc, request, out, fd) else { continue };
                WorkerStats::add(&stats.bytes_read, request.len() as u64);
                each_datagram(request_id, out, out.marks(), datagram, &mut |d| replies.push(d, peer));
                if replies.queued_bytes() > MAX_QUEUED_REPLIES {
                    WorkerStats::add(&stats.bytes_written, replies.flush(fd));
                }
            }
            WorkerStats::add(&stats.bytes_written, replies.flush(fd));
            // A short batch emptied the socket; a datagram arriving later
            // wakes the worker again.
            if count < BATCH {
                return;
            }
        }
    }
}

/// Answer one request datagram (from socket `fd`): its replies into `out`
/// (a datagram output, emptied first), each reply object's end marked.
/// `None` (nothing run) for a datagram too short for its header or one
/// claiming to be part of a multi-datagram request, which memcached does
/// not serve either.
pub(crate) fn answer(svc: &mut Service<'_>, datagram: &[u8], out: &mut Output, fd: std::os::fd::RawFd) -> Option<u16> {
    let header = UdpHeader::parse(datagram)?;
    if header.total != 1 || header.seq != 0 {
        return None;
    }
    out.clear_datagram();
    serve(svc, &datagram[HEADER_LEN..], out, fd);
    Some(header.request_id)
}

/// Run the commands of one datagram (from socket `fd`), marking where each
/// reply ends.
fn serve(svc: &mut Service<'_>, payload: &[u8], out: &mut Output, fd: std::os::fd::RawFd) {
    let limit = svc.core.settings.udp_max_reply_bytes;
    let protocol = match payload.first() {
        Some(&first) => negotiate(first, svc.core.settings.protocol),
        None => return,
    };
    let mut rest = payload;
    while !rest.is_empty() {
        let start = out.len();
        // UDP cannot be combined with -Y or -S (the CLI refuses it).
        let step = front::run(protocol, Some(fd), rest, svc, out, &mut false, None);
        // A get with a key over 250 bytes drops every reply not yet sent,
        // those of the datagram's earlier commands too (memcached's
        // conn_release_items): this command's replies may start before
        // `start`.
        let start = start.min(out.len());
        let (advance, swallow, stop) = match step {
            Step::Need(_) | Step::Hold(..) | Step::Stop(_) => return,
            Step::Done { advance, swallow, outcome } => (advance, swallow, outcome.flow != front::Flow::Continue),
            Step::Parked { advance, .. } => (advance, 0, false),
        };
        if limit > 0 && out.len() - start > limit {
            refuse(svc, protocol, rest, start, out);
        }
        out.mark();
        rest = &rest[advance.min(rest.len())..];
        rest = &rest[swallow.min(rest.len())..];
        if stop {
            return;
        }
    }
}

/// Replace a reply larger than `-o udp_max_reply` by an error.
fn refuse(svc: &Service<'_>, protocol: Protocol, request: &[u8], start: usize, out: &mut Output) {
    out.truncate(start);
    WorkerStats::incr(&svc.stats.udp_replies_refused);
    if protocol == Protocol::Binary {
        let header = strata_proto::binary::Header::parse(request);
        let (opcode, opaque) = header.map_or((0, 0), |h| (h.opcode, h.opaque));
        strata_proto::binary::write_error(out, opcode, strata_proto::binary::Status::TooBig, opaque);
    } else {
        out.extend_from_slice(b"SERVER_ERROR reply too large for UDP\r\n");
    }
}

/// Each reply object as its own datagram series (header and payload, at
/// most 1400 bytes each), passed to `emit`.
pub(crate) fn each_datagram(request_id: u16, out: &[u8], marks: &[usize], scratch: &mut Vec<u8>, emit: &mut dyn FnMut(&[u8])) {
    let mut start = 0;
    for &end in marks.iter().chain(std::iter::once(&out.len())) {
        if end > start {
            split_reply(request_id, &out[start..end], scratch, emit);
        }
        start = start.max(end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> Runtime {
        let settings = crate::Settings { threads: 1, memory_limit_bytes: 16 << 20, ..crate::Settings::default() };
        let config = strata_store::EngineConfig { memory_limit_bytes: settings.memory_limit_bytes, ..strata_store::EngineConfig::default() };
        let engine = Box::new(strata_store::MapStore::new(config));
        Runtime::new(settings, engine, strata_store::Clock::starting_at(1_700_000_000))
    }

    /// Bug found by the `udp` fuzz target: a get with a too-long key after
    /// other commands in the same datagram truncated the output below where
    /// its own replies began, and the reply size `out.len() - start`
    /// underflowed (a panic with overflow checks; without, the replies were
    /// replaced by "SERVER_ERROR reply too large for UDP").
    #[test]
    fn a_too_long_get_key_after_other_replies_is_not_an_oversized_reply() {
        let rt = runtime();
        let stats = rt.core.worker_stats[0].clone();
        let mut svc = Service::new(&rt, 0);
        let mut datagram = vec![0, 7, 0, 0, 0, 1, 0, 0];
        // Six STOREDs (48 bytes) are dropped, and the error (40 bytes)
        // ends before where the get's replies began.
        let sets = "set a 0 0 1\r\n1\r\n".repeat(6);
        datagram.extend_from_slice(format!("{sets}get a {}\r\nget a\r\n", "k".repeat(251)).as_bytes());
        let mut out = Output::datagrams();
        assert_eq!(answer(&mut svc, &datagram, &mut out, -1), Some(7));
        let text = String::from_utf8(out.to_vec()).unwrap();
        assert_eq!(text, "CLIENT_ERROR bad command line format\r\n\r\nVALUE a 0 1\r\n1\r\nEND\r\n");
        assert_eq!(stats.udp_replies_refused.load(std::sync::atomic::Ordering::Relaxed), 0);
        assert!(out.marks().iter().all(|&m| m <= out.len()));
    }

    /// Bug found by the `udp` fuzz target: a line over 2048 bytes without
    /// its newline (memcached closes on it, dropping unsent replies)
    /// emptied the output but left the marks of the datagram's earlier
    /// replies, and cutting the replies into datagrams sliced past the
    /// output's end: a panic of the worker on one datagram (with -U).
    #[test]
    fn an_overlong_line_after_other_replies_leaves_no_mark_past_the_output() {
        let rt = runtime();
        let mut svc = Service::new(&rt, 0);
        let mut datagram = vec![0, 9, 0, 0, 0, 1, 0, 0];
        datagram.extend_from_slice(format!("set a 0 0 1\r\n1\r\nset b 0 0 1\r\n2\r\n{}", "x".repeat(2049)).as_bytes());
        let mut out = Output::datagrams();
        assert_eq!(answer(&mut svc, &datagram, &mut out, -1), Some(9));
        assert!(out.marks().iter().all(|&m| m <= out.len()), "marks {:?} past {} bytes", out.marks(), out.len());
        let mut datagrams = 0;
        each_datagram(9, &out, out.marks(), &mut Vec::new(), &mut |_| datagrams += 1);
        assert_eq!((out.len(), datagrams), (0, 0));
    }
}
