//! memcached's `MEMCACHED_PORT_FILENAME`: once the listeners are bound, the
//! ports they got are written to that file, so a harness or supervisor that
//! started the server on any free port (`-p -1`, `-U -1`) can find them.
//! As memcached does: the lines go to `FILE.lck` (opened for appending),
//! which is then renamed to `FILE`, so a reader never sees half a file.
//!
//! ```text
//! TCP INET: 40321        one line per bound TCP listener, then
//! UDP INET6: 40322       one per UDP address; INET6 for IPv6
//! ```
//!
//! Not written when listening on a unix socket (`-s`), as in memcached.

use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The file's contents for these bound addresses.
pub fn lines(tcp: &[SocketAddr], udp: &[SocketAddr]) -> String {
    let mut out = String::new();
    for (transport, addrs) in [("TCP", tcp), ("UDP", udp)] {
        for addr in addrs {
            let family = if addr.is_ipv6() { "INET6" } else { "INET" };
            out.push_str(&format!("{transport} {family}: {}\n", addr.port()));
        }
    }
    out
}

/// Write the ports to `path` through `path.lck`.
pub fn write(path: &Path, tcp: &[SocketAddr], udp: &[SocketAddr]) -> io::Result<()> {
    let mut lock = PathBuf::from(path);
    lock.as_mut_os_string().push(".lck");
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&lock)?;
    file.write_all(lines(tcp, udp).as_bytes())?;
    drop(file);
    std::fs::rename(&lock, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memcached_line_format() {
        let tcp = ["127.0.0.1:11211".parse().unwrap(), "[::1]:11212".parse().unwrap()];
        let udp = ["127.0.0.1:11213".parse().unwrap()];
        assert_eq!(lines(&tcp, &udp), "TCP INET: 11211\nTCP INET6: 11212\nUDP INET: 11213\n");
    }
}
