//! One client connection's protocol state, independent of sockets: bytes
//! in, requests executed in order, reply bytes out.
//!
//! ```text
//!  rbuf: [ consumed | unprocessed requests ........ | spare ]
//!                   ^ rpos                           ^ len
//!  out:  [ written | pending replies ]
//!                  ^ wpos
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

#[derive(Default)]
pub struct Conn {
    pub rbuf: Vec<u8>,
    pub rpos: usize,
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
                let n = self.swallow.min(self.rbuf.len() - self.rpos);
                self.rpos += n;
                self.swallow -= n;
                if self.swallow > 0 {
                    self.compact();
                    return Progress::NeedInput;
                }
            }
            if self.rpos == self.rbuf.len() {
                self.rbuf.clear();
                self.rpos = 0;
                return Progress::NeedInput;
            }
            if budget == 0 {
                return Progress::Yield;
            }
            if self.pending_output() > limits.max_pending_output_bytes {
                return Progress::OutputFull;
            }
            budget -= 1;
            let buf = &self.rbuf[self.rpos..];
            let (line, consumed) = match frame_line(buf, limits.max_get_line_bytes) {
                Frame::Partial => {
                    self.compact();
                    return Progress::NeedInput;
                }
                Frame::Close => return Progress::Close,
                Frame::Line { line, consumed } => (line, consumed),
            };
            let out = &mut self.out;
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
                            self.rpos += consumed;
                        }
                        Admission::Accept => {
                            let end = consumed + cmd.value_len + 2;
                            if buf.len() < end {
                                self.awaiting = end;
                                self.compact();
                                return Progress::NeedInput;
                            }
                            exec.store(&cmd, &buf[consumed..end], out);
                            self.rpos += end;
                        }
                    }
                }
                Command::MetaSet { req, value_len } => match exec.admit_meta_value(&req, value_len) {
                    Admission::Refuse { reply, .. } => {
                        out.extend_from_slice(reply.as_bytes());
                        out.extend_from_slice(b"\r\n");
                        self.swallow = value_len + 2;
                        self.rpos += consumed;
                    }
                    Admission::Accept => {
                        let end = consumed + value_len + 2;
                        if buf.len() < end {
                            self.awaiting = end;
                            self.compact();
                            return Progress::NeedInput;
                        }
                        exec.meta_set(&req, &buf[consumed..end], out);
                        self.rpos += end;
                    }
                },
                Command::Error { reply, noreply, swallow } => {
                    if !noreply {
                        out.extend_from_slice(reply.as_bytes());
                        out.extend_from_slice(b"\r\n");
                    }
                    self.swallow = swallow;
                    self.rpos += consumed;
                }
                cmd => {
                    let flow = exec.execute(&cmd, out);
                    self.rpos += consumed;
                    match flow {
                        Flow::Continue => {}
                        Flow::CloseAfterWrite => return Progress::CloseAfterWrite,
                        Flow::Close => return Progress::Close,
                    }
                }
            }
            self.awaiting = 0;
        }
    }

    /// Move unprocessed bytes to the front of the read buffer.
    fn compact(&mut self) {
        if self.rpos > 0 {
            self.rbuf.drain(..self.rpos);
            self.rpos = 0;
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
