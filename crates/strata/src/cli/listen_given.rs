//! Whether a command line says where to listen, read as `strata` reads it:
//! the container image's entrypoint (`strata-entrypoint`) adds `-l 0.0.0.0`
//! only when it does not.
//!
//! A prefix test on the words would take a value for a flag: in `-P -lock`
//! the `-lock` is `-P`'s file; and `--unix-so=/run/s` is `--unix-socket`
//! abbreviated (getopt_long takes any unique prefix). Here the words go through the command line's own getopt
//! and flag table, and a `--config` file's lines through its reader, so
//! `-l`, `--listen`, `-s` and `--unix-socket` count wherever strata would
//! find them and nowhere else. Nothing is applied and nothing is opened but
//! the configuration file.

use super::conf::{self, Entry};
use super::flags::{self, CONFIG};
use super::{getopt, Files};

/// True if `args` (without the program name) give `-l` or `-s`, on the
/// command line or in its `--config` file. A command line strata would
/// refuse, or a file it cannot read, says nothing here: strata then
/// refuses it with its own message.
pub fn listen_given(args: &[String]) -> bool {
    listen_given_in(args, &Files::Real)
}

/// [`listen_given`] with `--config` read through `files` (the fuzz target
/// checks it against what the full reading keeps).
pub(super) fn listen_given_in(args: &[String], files: &Files) -> bool {
    let Ok(found) = getopt::parse(&flags::specs(), args) else { return false };
    found.into_iter().any(|(letter, value)| match letter {
        'l' | 's' => true,
        CONFIG => value.is_some_and(|path| file_gives_listen(&path, files)),
        _ => false,
    })
}

fn file_gives_listen(path: &str, files: &Files) -> bool {
    let Ok(text) = files.config_text(path) else { return false };
    let specs = flags::specs();
    text.lines().any(|line| match conf::entry(line) {
        Ok(Some(Entry::Flags(words))) => getopt::parse(&specs, &words).is_ok_and(|found| found.iter().any(|(letter, _)| matches!(letter, 'l' | 's'))),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::listen_given;

    fn given(words: &[&str]) -> bool {
        listen_given(&words.iter().map(|w| w.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn listen_and_socket_flags_count_in_every_spelling() {
        for words in [&["-l", "10.0.0.5"][..], &["-l10.0.0.5"], &["--listen=[::]:11211"], &["--listen", "::"], &["--unix-so=/run/s"], &["-vl", "10.0.0.5"], &["-s", "/run/strata.sock"], &["--unix-socket=/run/s"], &["-m", "64", "-l", "0.0.0.0"]] {
            assert!(given(words), "{words:?}");
        }
    }

    #[test]
    fn values_that_look_like_flags_do_not() {
        for words in [&[][..], &["-m", "64"], &["-P", "-lock"], &["-u", "-strata"], &["-o", "-s"], &["--", "-l", "10.0.0.5"], &["-p", "11211", "extra", "words"]] {
            assert!(!given(words), "{words:?}");
        }
    }

    #[test]
    fn a_config_file_counts_only_if_it_says_so() {
        let dir = std::env::temp_dir().join(format!("strata-listen-given-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (with, without) = (dir.join("with.conf"), dir.join("without.conf"));
        std::fs::write(&with, "# Debian's\n-m 64\n-l 127.0.0.1\n").unwrap();
        std::fs::write(&without, "-m 64\n# -l 127.0.0.1\n-P -lock\n").unwrap();
        let arg = |p: &std::path::Path| format!("--config={}", p.display());
        assert!(given(&[&arg(&with)]));
        assert!(given(&["--config", with.to_str().unwrap()]));
        assert!(!given(&[&arg(&without)]));
        assert!(!given(&["--config", dir.join("missing.conf").to_str().unwrap()]));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
