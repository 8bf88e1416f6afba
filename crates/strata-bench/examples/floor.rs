//! The floor: the least a memcached-protocol server on epoll can do per
//! request, to measure what the kernel alone costs on this machine.
//!
//! Text `get`, `set` and `version` only, values in a `HashMap`, one event
//! loop on mio: per readable connection one `read` (more only when it fills
//! the buffer), run every complete request, one `write`. No stats, no
//! expiry, no limits: not a server, a baseline for `strata-bench compare`:
//!
//! ```sh
//! cargo build --release -p strata-bench --example floor
//! target/release/strata-bench compare --a "memcached -p {port} -U 0 -u root -t 1" \
//!     --b "target/release/examples/floor {port}" --preset memaslap
//! ```

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};

struct Client {
    stream: TcpStream,
    input: Vec<u8>,
    output: Vec<u8>,
}

/// Run every complete request at the front of `input`, appending replies;
/// returns how many bytes were consumed.
fn serve(input: &[u8], store: &mut HashMap<Vec<u8>, (Vec<u8>, Vec<u8>)>, out: &mut Vec<u8>) -> usize {
    let mut at = 0;
    while let Some(end) = input[at..].windows(2).position(|w| w == b"\r\n") {
        let line = &input[at..at + end];
        let mut words = line.split(|&b| b == b' ').filter(|w| !w.is_empty());
        match words.next() {
            Some(b"get") => {
                for key in words {
                    if let Some((flags, value)) = store.get(key) {
                        out.extend_from_slice(b"VALUE ");
                        out.extend_from_slice(key);
                        out.push(b' ');
                        out.extend_from_slice(flags);
                        out.extend_from_slice(format!(" {}\r\n", value.len()).as_bytes());
                        out.extend_from_slice(value);
                        out.extend_from_slice(b"\r\n");
                    }
                }
                out.extend_from_slice(b"END\r\n");
                at += end + 2;
            }
            Some(b"set") => {
                let fields: Vec<&[u8]> = words.collect();
                let len: Option<usize> = fields.get(3).and_then(|n| std::str::from_utf8(n).ok()?.parse().ok());
                let (Some(key), Some(flags), Some(len)) = (fields.first(), fields.get(1), len) else {
                    out.extend_from_slice(b"ERROR\r\n");
                    at += end + 2;
                    continue;
                };
                let data = at + end + 2;
                if input.len() < data + len + 2 {
                    break;
                }
                store.insert(key.to_vec(), (flags.to_vec(), input[data..data + len].to_vec()));
                out.extend_from_slice(b"STORED\r\n");
                at = data + len + 2;
            }
            Some(b"version") => {
                out.extend_from_slice(b"VERSION floor\r\n");
                at += end + 2;
            }
            _ => {
                out.extend_from_slice(b"ERROR\r\n");
                at += end + 2;
            }
        }
    }
    at
}

fn main() -> std::io::Result<()> {
    let port: u16 = std::env::args().nth(1).and_then(|p| p.parse().ok()).unwrap_or(11311);
    let mut listener = TcpListener::bind(([127, 0, 0, 1], port).into())?;
    let mut poll = Poll::new()?;
    poll.registry().register(&mut listener, Token(usize::MAX), Interest::READABLE)?;
    let mut clients: HashMap<usize, Client> = HashMap::new();
    let mut store = HashMap::new();
    let mut events = Events::with_capacity(1024);
    let mut buf = vec![0u8; 64 * 1024];
    let mut next = 0;
    loop {
        poll.poll(&mut events, None)?;
        for event in &events {
            if event.token() == Token(usize::MAX) {
                while let Ok((mut stream, _)) = listener.accept() {
                    stream.set_nodelay(true)?;
                    poll.registry().register(&mut stream, Token(next), Interest::READABLE)?;
                    clients.insert(next, Client { stream, input: Vec::new(), output: Vec::new() });
                    next += 1;
                }
                continue;
            }
            let Some(client) = clients.get_mut(&event.token().0) else { continue };
            // Edge-triggered: read until a read comes back short (the
            // socket is then empty; one read per wake-up in the steady state).
            let mut closed = false;
            loop {
                match client.stream.read(&mut buf) {
                    Ok(0) => closed = true,
                    Ok(n) => {
                        client.input.extend_from_slice(&buf[..n]);
                        if n == buf.len() {
                            continue;
                        }
                    }
                    Err(e) => closed = e.kind() != ErrorKind::WouldBlock,
                }
                break;
            }
            let used = serve(&client.input, &mut store, &mut client.output);
            client.input.drain(..used);
            let mut written = 0;
            while written < client.output.len() {
                match client.stream.write(&client.output[written..]) {
                    Ok(n) => written += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::yield_now(),
                    Err(_) => break,
                }
            }
            client.output.clear();
            if closed {
                clients.remove(&event.token().0);
            }
        }
    }
}
