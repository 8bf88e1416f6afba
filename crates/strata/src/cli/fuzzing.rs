//! The body of the `config` fuzz target (`fuzz/`, `scripts/fuzz config`):
//! a `--config` file and a command line, through the same reading and
//! checks as a start, with no file read or created and nothing printed.
//!
//! Input: NUL-separated; the first part is the configuration file's text
//! (what any `--config PATH` reads), the others are argv words. Checked:
//! never a panic and never an exit (a refusal is a [`CliError`] with one of
//! memcached's exit codes and a message); an accepted command line gives
//! settings that keep the limits `validate` promises, and
//! [`super::listen_given`] (the container entrypoint's question) finds
//! `-l` or `-s` exactly when the reading kept one.

use super::listen_given::listen_given_in;
use super::{flags, read_flags, validate, CliError, Files};

/// Exit codes a refusal may carry: memcached's 1 and 64 (`EX_USAGE`), 71
/// (`EX_OSERR`, an unresolvable listen address), 2 (an `ext_path` file).
const CODES: [u8; 4] = [1, 2, 64, 71];

pub fn config(data: &[u8]) {
    let mut parts = data.split(|&b| b == 0);
    let config = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
    let args: Vec<String> = parts.map(|w| String::from_utf8_lossy(w).into_owned()).collect();
    match run(&args, config) {
        Ok(()) => {}
        Err(e) => {
            assert!(CODES.contains(&e.code), "exit code {} for {:?}", e.code, e.message);
            assert!(!e.message.is_empty(), "an empty refusal");
        }
    }
}

fn run(args: &[String], config: String) -> Result<(), CliError> {
    let (draft, act) = read_flags(args, Files::InMemory { config })?;
    if !matches!(act, flags::Act::Continue) {
        return Ok(());
    }
    let listens = !draft.listen.is_empty() || draft.settings.unix_socket.is_some();
    assert_eq!(listen_given_in(args, &draft.files), listens, "the entrypoint's reading of {args:?}");
    let opts = validate::finish(draft)?;
    let s = &opts.settings;
    assert!((1..=256).contains(&s.threads), "{} threads", s.threads);
    assert!(s.item_size_max >= 1024 && s.item_size_max <= 1 << 30, "-I {}", s.item_size_max);
    assert!(s.item_size_max as u64 <= s.memory_limit_bytes / 2 || s.memory_governor.is_some(), "-I {} with -m {}", s.item_size_max, s.memory_limit_bytes);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use strata_store::fuzzing::corpus::{dir, inputs, replay, Kept};

    /// The seeds of `fuzz/corpus/config`: the packaged strata.conf and
    /// Debian's memcached.conf, each with a command line (`STRATA_WRITE_CORPUS=1`
    /// rewrites the files).
    fn seeds() -> Vec<(&'static str, Vec<u8>)> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let packaged = std::fs::read(root.join("packaging/strata.conf")).expect("packaging/strata.conf");
        let debian = b"# memcached default config file\n# 2003 - Jay Bonci <jaybonci@debian.org>\n-d\nlogfile /var/log/memcached.log\n-m 64\n-p 11211\n-u memcache\n-l 127.0.0.1\n-P /var/run/memcached/memcached.pid\n".to_vec();
        let with = |conf: &[u8], args: &[&str]| {
            let mut v = conf.to_vec();
            for a in args {
                v.push(0);
                v.extend_from_slice(a.as_bytes());
            }
            v
        };
        vec![
            ("packaged", with(&packaged, &["--config", "/etc/strata/strata.conf"])),
            ("debian", with(&debian, &["--config=/etc/memcached.conf", "-p", "11212"])),
            ("flags-only", with(b"", &["-m", "1024", "-c", "4096", "-t", "8", "-I", "2m", "-U", "0", "-o", "modern,idle_timeout=30,slab_chunk_max=524288"])),
            ("quotes", with(b"-o 'ssl_chain_cert=/etc/a b.crt' -D \\#\n-B binary -S\n", &["-vv", "--config", "x"])),
            ("ext", with(b"", &["-o", "ext_path=/tmp/never:64m,ext_page_size=8,ext_wbuf_size=4", "-m", "128"])),
            ("bad-line", with(b"-m 64\nmaxconn 10\n-l '127.0.0.1\n", &["--config", "f"])),
            ("auto", with(b"", &["-m", "auto", "-e", "/tmp/mem", "-l", "[::1]:11211,127.0.0.1"])),
            ("help", with(b"", &["-h"])),
        ]
    }

    #[test]
    fn write_corpus() {
        let dir = dir("config", Kept::Seeds);
        for (name, bytes) in seeds() {
            let path = dir.join(format!("seed-{name}"));
            if std::env::var_os("STRATA_WRITE_CORPUS").is_some() {
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(&path, &bytes).unwrap();
            } else {
                assert_eq!(std::fs::read(&path).ok(), Some(bytes), "{} differs from its generator", path.display());
            }
        }
    }

    /// Every committed input, whole and cut short, and the runs' finds
    /// (`fuzz/grown/config`) whole.
    #[test]
    fn corpus_config() {
        let seeds = inputs("config", Kept::Seeds);
        assert!(seeds.len() >= 5, "{} inputs", seeds.len());
        for (path, input) in seeds {
            eprintln!("{}", path.display());
            super::config(&input);
            super::config(&input[..input.len() / 2]);
        }
        replay(&inputs("config", Kept::Grown), super::config);
    }
}
