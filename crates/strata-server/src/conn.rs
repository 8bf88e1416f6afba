//! One client connection's protocol state, independent of sockets: bytes
//! in, requests executed in order, reply bytes out.
//!
//! ```text
//!  input: [ consumed | unprocessed requests ........ | spare (initialized) ]
//!                    ^ start                         ^ end
//!  out:   [ written | pending replies ]
//!                   ^ wpos
//! ```
//!
//! [`Conn::process`] runs every complete request in `rbuf` (up to a budget,
//! memcached's `-R`), appending replies to `out`, so a pipeline of requests
//! becomes one write. A storage command is executed only when its whole data
//! block has arrived; a refused block is swallowed byte-exactly
//! ([`Conn::swallow`]) so the stream stays in step. It stops early when
//! `out` holds more than the pending-output limit: a client that does not
//! read its replies stops being read from.

use strata_proto::{frame_line, parse_command, Command, Frame};

use crate::exec::{Admission, Executor, Flow};

/// Why processing stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Every complete request was handled; more input is needed.
    NeedInput,
    /// The request budget ran out with requests still buffered.
    Yield,
    /// Too many replies are waiting to be written.
    OutputFull,
    /// Close after writing what is queued (`quit`).
    CloseAfterWrite,
    /// Close now (overlong line, HTTP, shutdown).
    Close,
}

/// The read buffer. Its memory stays initialized and allocated between
/// reads, so a read costs no memset and no allocation.
#[derive(Default)]
pub struct ReadBuf {
    data: Vec<u8>,
    start: usize,
    end: usize,
}

impl ReadBuf {
    /// Bytes received and not yet consumed.
    pub fn filled(&self) -> &[u8] {
        &self.data[self.start..self.end]
    }

    pub fn len(&self) -> usize {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        debug_assert!(self.start <= self.end);
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Free space for at least `min` more bytes, moving unconsumed bytes to
    /// the front first.
    pub fn spare(&mut self, min: usize) -> &mut [u8] {
        if self.start > 0 && self.data.len() - self.end < min {
            self.data.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.data.len() - self.end < min {
            self.data.resize(self.end + min, 0);
        }
        &mut self.data[self.end..]
    }

    /// Mark `n` bytes of [`ReadBuf::spare`] as received.
    pub fn commit(&mut self, n: usize) {
        self.end += n;
        debug_assert!(self.end <= self.data.len());
    }

    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.spare(bytes.len())[..bytes.len()].copy_from_slice(bytes);
        self.commit(bytes.len());
    }
}

#[derive(Default)]
pub struct Conn {
    pub input: ReadBuf,
    pub out: Vec<u8>,
    pub wpos: usize,
    /// Bytes of a refused data block still to discard.
    swallow: usize,
    /// Bytes the next request needs buffered before it can run (a data
    /// block), so the reader can size its buffer.
    pub awaiting: usize,
}

impl Conn {
    pub fn pending_output(&self) -> usize {
        self.out.len() - self.wpos
    }

    /// Run buffered requests; at most `budget` of them.
    pub fn process(&mut self, exec: &Executor<'_>, mut budget: usize) -> Progress {
        let limits = &exec.shared.settings;
        loop {
            if self.swallow > 0 {
                let n = self.swallow.min(self.input.len());
                self.input.consume(n);
                self.swallow -= n;
                if self.swallow > 0 {
                    return Progress::NeedInput;
                }
            }
            if self.input.is_empty() {
                return Progress::NeedInput;
            }
            if budget == 0 {
                return Progress::Yield;
            }
            if self.pending_output() > limits.max_pending_output_bytes {
                return Progress::OutputFull;
            }
            budget -= 1;
            let buf = self.input.filled();
            let (line, consumed) = match frame_line(buf, limits.max_get_line_bytes) {
                Frame::Partial => return Progress::NeedInput,
                Frame::Close => return Progress::Close,
                Frame::Line { line, consumed } => (line, consumed),
            };
            let out = &mut self.out;
            let advance;
            let mut stop = None;
            match parse_command(line) {
                Command::Store(cmd) => {
                    let remove = cmd.verb == strata_proto::StoreVerb::Set;
                    match exec.admit_value(cmd.key, cmd.flags, cmd.value_len, remove) {
                        Admission::Refuse { reply, .. } => {
                            if !cmd.noreply {
                                out.extend_from_slice(reply.as_bytes());
                                out.extend_from_slice(b"\r\n");
                            }
                            self.swallow = cmd.value_len + 2;
                            advance = consumed;
                        }
                        Admission::Accept => {
                            let end = consumed + cmd.value_len + 2;
                            if buf.len() < end {
                                self.awaiting = end;
                                return Progress::NeedInput;
                            }
                            exec.store(&cmd, &buf[consumed..end], out);
                            advance = end;
                        }
                    }
                }
                Command::MetaSet { req, value_len } => match exec.admit_meta_value(&req, value_len) {
                    Admission::Refuse { reply, .. } => {
                        out.extend_from_slice(reply.as_bytes());
                        out.extend_from_slice(b"\r\n");
                        self.swallow = value_len + 2;
                        advance = consumed;
                    }
                    Admission::Accept => {
                        let end = consumed + value_len + 2;
                        if buf.len() < end {
                            self.awaiting = end;
                            return Progress::NeedInput;
                        }
                        exec.meta_set(&req, &buf[consumed..end], out);
                        advance = end;
                    }
                },
                Command::Error { reply, noreply, swallow } => {
                    if !noreply {
                        out.extend_from_slice(reply.as_bytes());
                        out.extend_from_slice(b"\r\n");
                    }
                    self.swallow = swallow;
                    advance = consumed;
                }
                cmd => {
                    advance = consumed;
                    match exec.execute(&cmd, out) {
                        Flow::Continue => {}
                        Flow::CloseAfterWrite => stop = Some(Progress::CloseAfterWrite),
                        Flow::Close => stop = Some(Progress::Close),
                    }
                }
            }
            self.input.consume(advance);
            self.awaiting = 0;
            if let Some(stop) = stop {
                return stop;
            }
        }
    }

    /// Mark `n` output bytes as written.
    pub fn consume_output(&mut self, n: usize) {
        self.wpos += n;
        if self.wpos == self.out.len() {
            self.out.clear();
            self.wpos = 0;
        }
    }
}
