//! The container image's entrypoint: what the official memcached image's
//! `docker-entrypoint.sh` does, without a shell in the image.
//!
//! ```text
//! docker run strata                  ->  strata -l 0.0.0.0            (the image's CMD)
//! docker run strata -m 256 -v        ->  strata -l 0.0.0.0 -m 256 -v  (first word starts with `-`)
//! docker run strata strata -m 256    ->  strata -l 0.0.0.0 -m 256
//! docker run strata -l 10.1.2.3      ->  strata -l 10.1.2.3
//! docker run strata strata-bench ... ->  strata-bench ...             (any other program, looked up in PATH)
//! ```
//!
//! No argument at all also runs `strata`. Configuration is by flags only,
//! as in the official image: no environment variable is read. Whether
//! the words say where to listen is read as strata reads them
//! ([`strata::cli::listen_given`]: its getopt, and a `--config` file's
//! lines), so a value that only looks like `-l` (`-P -lock`) is not taken
//! for it.
//!
//! One default differs from the binary's: Strata alone listens on
//! 127.0.0.1 (docs/COMPATIBILITY.md), which inside a container no client
//! outside it reaches. The official image's memcached listens on every
//! interface (its default), so `strata` started here without `-l` or
//! `-s`, given or in its `--config` file, gets `-l 0.0.0.0`: the
//! container's network namespace is the boundary, and `-p 11211:11211`
//! publishes it.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};

/// The words to run: `strata` put in front when the first starts with `-`
/// (or there is none), and `-l 0.0.0.0` after `strata` when nothing says
/// where to listen.
fn command_line(args: Vec<OsString>) -> Vec<OsString> {
    let mut words = match args.first() {
        Some(first) if !first.as_bytes().starts_with(b"-") => args,
        _ => std::iter::once(OsString::from("strata")).chain(args).collect(),
    };
    if words[0] == "strata" {
        // strata reads its arguments as lossy UTF-8 too (cli::parse).
        let args: Vec<String> = words[1..].iter().map(|w| w.to_string_lossy().into_owned()).collect();
        if !strata::cli::listen_given(&args) {
            words.splice(1..1, [OsString::from("-l"), OsString::from("0.0.0.0")]);
        }
    }
    words
}

fn main() -> ExitCode {
    let words = command_line(std::env::args_os().skip(1).collect());
    let (program, args) = words.split_first().expect("command_line never returns an empty list");
    // exec only returns on failure; the process is replaced otherwise.
    let err = Command::new(program).args(args).exec();
    eprintln!("strata-entrypoint: cannot run {}: {err}", program.to_string_lossy());
    // 127 and 126 as a shell reports them: not found, found but not runnable.
    ExitCode::from(if err.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 })
}

#[cfg(test)]
mod tests {
    use super::command_line;
    use std::ffi::OsString;

    fn words(s: &[&str]) -> Vec<OsString> {
        s.iter().map(OsString::from).collect()
    }

    #[test]
    fn flags_get_strata_in_front_and_commands_run_as_given() {
        let any = ["strata", "-l", "0.0.0.0"];
        assert_eq!(command_line(words(&[])), words(&any));
        assert_eq!(command_line(words(&["-m", "256"])), words(&[&any[..], &["-m", "256"]].concat()));
        assert_eq!(command_line(words(&["strata", "-m", "256"])), words(&[&any[..], &["-m", "256"]].concat()));
        assert_eq!(command_line(words(&["strata-bench", "-h"])), words(&["strata-bench", "-h"]));
        assert_eq!(command_line(words(&["strata"])), words(&any));
    }

    #[test]
    fn where_to_listen_given_is_kept() {
        for given in [&["-l", "10.0.0.5"][..], &["-l10.0.0.5"], &["--listen=[::]:11211"], &["-s", "/run/strata.sock"]] {
            let args = words(&[&["-m", "64"], given].concat());
            assert_eq!(command_line(args.clone()), [words(&["strata"]), args].concat(), "{given:?}");
        }
    }

    /// Read as strata reads them: a value is not a flag (the cases, and
    /// `--config` files, are `strata::cli::listen_given`'s tests).
    #[test]
    fn a_value_that_looks_like_a_listen_flag_is_not_one() {
        let args = words(&["-P", "-lock", "-u", "-strata"]);
        assert_eq!(command_line(args.clone()), [words(&["strata", "-l", "0.0.0.0"]), args].concat());
    }
}
