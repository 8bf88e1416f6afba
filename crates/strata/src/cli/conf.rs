//! `--config FILE`: flags read from a file in the format of Debian's
//! `/etc/memcached.conf`, so that file can be copied to
//! `/etc/strata/strata.conf` as it is.
//!
//! ```text
//!  # a comment                 everything from an unescaped '#' on ('\#' is a '#')
//!                              blank lines
//!  -d                          a line starting -d or -h: skipped, as Debian's
//!                              start-memcached skips it (the service manager
//!                              runs the process; -d would detach from it)
//!  logfile /var/log/x.log      accepted, not followed: output stays on stderr,
//!                              the journal under systemd, as Debian's
//!                              systemd-memcached-wrapper does
//!  -m 64                       one or more flags with their values, as on the
//!  -o modern,idle_timeout=30   command line; words split as sh splits them
//!                              ("..." and '...' quote, \ escapes)
//! ```
//!
//! Each flag line goes through the command line's own getopt and flag
//! table and is applied where `--config` stands: flags before `--config`
//! are overridden by the file, flags after it override the file. A line is
//! read on its own, so a flag's value is on its flag's line (Debian's
//! scripts join all lines into one command line first). A refused line
//! (an unknown flag, a bad value, an unknown directive) stops the start
//! with memcached's message and exit code, prefixed with `FILE:LINE:`,
//! before anything is opened, the memory file included. A check across
//! flags (`-I` above half of `-m`...) is made once all flags are read and
//! names no line. Nothing in a file is unbounded: at most [`MAX_FILE_BYTES`],
//! and no `--config` inside a file (no include loops).

use std::io::Read;

use super::flags::{self, Act, CONFIG};
use super::{getopt, validate, CliError, Draft};

/// The largest configuration file read: Debian's memcached.conf is 1.6
/// KB; a file this large is not a configuration file.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// A line that carries something, after comments and blanks are dropped.
#[derive(Debug, PartialEq, Eq)]
pub enum Entry {
    /// Words for getopt: `-m 64`, `--port=11211`.
    Flags(Vec<String>),
    /// `logfile PATH`.
    Logfile(String),
}

/// The text of a line without its comment: everything from the first `#`
/// not preceded by a backslash (which shlex then turns into a plain `#`).
fn without_comment(line: &str) -> &str {
    let bytes = line.as_bytes();
    let cut = (0..bytes.len()).find(|&i| bytes[i] == b'#' && (i == 0 || bytes[i - 1] != b'\\'));
    &line[..cut.unwrap_or(line.len())]
}

fn refused(message: impl Into<String>) -> CliError {
    CliError::new(1, message)
}

/// What one line of a configuration file holds: nothing (a comment, a
/// blank, a skipped `-d`), or an [`Entry`].
pub fn entry(raw: &str) -> Result<Option<Entry>, CliError> {
    let line = without_comment(raw).trim();
    if line.is_empty() || line.starts_with("-d") || line.starts_with("-h") {
        return Ok(None);
    }
    let words = shlex::split(line).ok_or_else(|| refused("unbalanced quote or a trailing backslash"))?;
    let Some(first) = words.first() else { return Ok(None) };
    if first.starts_with('-') {
        return Ok(Some(Entry::Flags(words)));
    }
    if first != "logfile" {
        return Err(refused(format!("unknown directive '{first}': a line holds flags (-m 64) or logfile PATH")));
    }
    match words.as_slice() {
        [_, path] => Ok(Some(Entry::Logfile(path.clone()))),
        _ => Err(refused("logfile takes one path: logfile /var/log/strata.log")),
    }
}

/// Read the file at `path`, at most [`MAX_FILE_BYTES`].
pub(super) fn read(path: &str) -> Result<String, CliError> {
    let cannot = |e: std::io::Error| CliError::new(1, format!("{path}: cannot read the configuration file: {e}"));
    let file = std::fs::File::open(path).map_err(cannot)?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(cannot)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(CliError::new(1, format!("{path}: a configuration file is at most {MAX_FILE_BYTES} bytes")));
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// `--config FILE`: apply the file's flags to the draft, line by line.
/// `-V`, `-i` (and `--help`) in a file act as on the command line.
pub fn apply(d: &mut Draft, path: &str) -> Result<Act, CliError> {
    let text = d.files.config_text(path)?;
    let at = |number: usize, e: CliError| CliError::new(e.code, format!("{path}:{number}: {}", e.message));
    let specs = flags::specs();
    for (index, raw) in text.lines().enumerate() {
        let number = index + 1;
        let words = match entry(raw).map_err(|e| at(number, e))? {
            None => continue,
            Some(Entry::Flags(words)) => words,
            Some(Entry::Logfile(log)) => {
                strata_server::log_line!("strata: {path}:{number}: logfile {log} not followed: Strata writes to stderr (the journal under systemd)");
                continue;
            }
        };
        let found = getopt::parse(&specs, &words).map_err(|e| at(number, e))?;
        for (letter, value) in found {
            if letter == CONFIG {
                return Err(at(number, CliError::new(1, "--config cannot be used inside a configuration file")));
            }
            let alone = value.clone();
            match flags::apply(d, letter, value).map_err(|e| at(number, e))? {
                Act::Continue => {}
                act => return Ok(act),
            }
            if let Some(value) = alone {
                validate::check_value(letter, &value).map_err(|e| at(number, e))?;
            }
        }
    }
    Ok(Act::Continue)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(words: &[&str]) -> Entry {
        Entry::Flags(words.iter().map(|w| w.to_string()).collect())
    }

    /// Every line's entry with its number; the first refusal with its.
    fn entries(text: &str) -> Result<Vec<(usize, Entry)>, (usize, CliError)> {
        let mut found = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            if let Some(entry) = entry(raw).map_err(|e| (index + 1, e))? {
                found.push((index + 1, entry));
            }
        }
        Ok(found)
    }

    #[test]
    fn debian_memcached_conf_lines() {
        let text = "# memcached default config file\n-d\n\nlogfile /var/log/memcached.log\n# -v\n-m 64\n  -p 11211   # the port\n-u memcache\n-l 127.0.0.1\n-P /var/run/memcached/memcached.pid\n";
        assert_eq!(
            entries(text).unwrap(),
            vec![
                (4, Entry::Logfile("/var/log/memcached.log".into())),
                (6, flags(&["-m", "64"])),
                (7, flags(&["-p", "11211"])),
                (8, flags(&["-u", "memcache"])),
                (9, flags(&["-l", "127.0.0.1"])),
                (10, flags(&["-P", "/var/run/memcached/memcached.pid"])),
            ]
        );
    }

    #[test]
    fn comments_quotes_and_skipped_lines() {
        let lines = entries("-hello\n-dv\n-o 'ssl_chain_cert=/etc/a b.crt' -D \\#\n#-p 1\n\t\n").unwrap();
        assert_eq!(lines, vec![(3, flags(&["-o", "ssl_chain_cert=/etc/a b.crt", "-D", "#"]))]);
        assert_eq!(without_comment("-p 1 # x # y"), "-p 1 ");
        assert_eq!(without_comment("-D \\# # delimiter"), "-D \\# ");
    }

    #[test]
    fn refused_lines_name_their_number() {
        let (number, e) = entries("-m 64\nmaxconn 10\n").unwrap_err();
        assert_eq!((number, e.code), (2, 1));
        assert_eq!(e.message, "unknown directive 'maxconn': a line holds flags (-m 64) or logfile PATH");
        assert_eq!(entries("\n\n-l '127.0.0.1\n").unwrap_err().0, 3);
        assert_eq!(entries("logfile\n").unwrap_err().0, 1);
        assert_eq!(entries("logfile a b\n").unwrap_err().0, 1);
    }
}

/// `--config` through the whole command line: where it stands, what its
/// refusals say.
#[cfg(test)]
mod command_line {
    use std::ffi::OsString;
    use std::path::PathBuf;

    use super::super::{parse, CliError, Parsed};
    use strata_server::Settings;

    /// A file under the temp dir, unique to this process and test.
    fn conf(name: &str, text: &str) -> PathBuf {
        let path = std::env::temp_dir().join(format!("strata-conf-{}-{name}.conf", std::process::id()));
        std::fs::write(&path, text).unwrap();
        path
    }

    fn run(args: &[&str]) -> Result<Settings, CliError> {
        let args = std::iter::once("strata").chain(args.iter().copied()).map(OsString::from);
        match parse(args)? {
            Parsed::Run(o) => Ok(o.settings),
            Parsed::Exit(_) => Err(CliError::new(0, "exit")),
        }
    }

    fn refused(name: &str, text: &str) -> (u8, String) {
        let path = conf(name, text);
        let result = run(&["--config", path.to_str().unwrap()]);
        std::fs::remove_file(&path).unwrap();
        let e = result.err().unwrap_or_else(|| panic!("{text:?} was accepted"));
        (e.code, e.message.replace(path.to_str().unwrap(), "F"))
    }

    #[test]
    fn the_file_stands_where_config_stands() {
        let path = conf("order", "-d\nlogfile /dev/null\n-m 128\n-p 2001 -t 2\n-l 127.0.0.1,::1\n-o idle_timeout=7\n");
        let file = path.to_str().unwrap();
        let s = run(&["--config", file]).unwrap();
        assert_eq!((s.memory_limit_bytes, s.tcp_port, s.threads), (128 << 20, 2001, 2));
        assert_eq!(s.tcp_listen, vec!["127.0.0.1:2001".parse().unwrap(), "[::1]:2001".parse().unwrap()]);
        assert_eq!(s.idle_timeout, Some(std::time::Duration::from_secs(7)));
        assert_eq!(run(&["-p", "3000", "-m", "32", "--config", file]).unwrap().tcp_port, 2001);
        let s = run(&["--config", file, "-p", "3000", "-m", "32"]).unwrap();
        assert_eq!((s.tcp_port, s.memory_limit_bytes, s.threads), (3000, 32 << 20, 2));
        assert_eq!(run(&[&format!("--config={file}")]).unwrap().tcp_port, 2001);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_bad_line_is_memcached_message_with_file_and_line() {
        assert_eq!(refused("threads", "-m 64\n\n-t 0\n"), (1, "F:3: Number of threads must be greater than 0".into()));
        assert_eq!(refused("unknown", "# x\n-x\n"), (1, "F:2: invalid option -- 'x'".into()));
        assert_eq!(refused("novalue", "-p\n11211\n"), (1, "F:1: option requires an argument -- 'p'".into()));
        assert_eq!(refused("protocol", "-B sideways\n").0, 64);
        assert_eq!(refused("hashpower", "-o hashpower=5\n").1.split(':').nth(1), Some("1"));
        assert_eq!(refused("memory", "-p 1\n-m 12q\n"), (1, "F:2: Invalid memory limit '12q': a number of megabytes or auto is needed".into()));
        assert_eq!(refused("port", "-p 70000\n"), (64, "F:1: ERROR: Invalid port number 70000.".into()));
        assert_eq!(refused("item", "-I 512\n"), (64, "F:1: Item max size cannot be less than 1024 bytes.".into()));
        assert_eq!(refused("directive", "-m 64\nmaxconn 10\n").1, "F:2: unknown directive 'maxconn': a line holds flags (-m 64) or logfile PATH");
        assert_eq!(refused("nested", "--config /etc/strata/strata.conf\n"), (1, "F:1: --config cannot be used inside a configuration file".into()));
        let missing = run(&["--config", "/nonexistent/strata.conf"]).unwrap_err();
        assert_eq!(missing.code, 1);
        assert!(missing.message.starts_with("/nonexistent/strata.conf: cannot read the configuration file"), "{}", missing.message);
    }

    #[test]
    fn checks_across_flags_wait_for_every_flag() {
        // -I 64m is over half of the default -m 64 until the next line.
        let path = conf("across", "-I 64m\n-m 1024\n");
        assert_eq!(run(&["--config", path.to_str().unwrap()]).unwrap().item_size_max, 64 << 20);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(refused("half", "-I 64m\n"), (64, "Cannot set item size limit higher than 1/2 of memory max.".into()));
    }

    #[test]
    fn config_takes_a_long_name_only() {
        assert_eq!(run(&["--con", "5"]).unwrap_err().message, "option '--con' is ambiguous");
        assert_eq!(run(&["--conn", "5"]).unwrap().max_connections, 5);
        assert_eq!(run(&["-\0"]).unwrap_err().message, "invalid option -- '\0'");
    }
}
