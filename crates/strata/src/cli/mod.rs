//! memcached 1.6.45's command line, turned into [`Settings`].
//!
//! ```text
//!  argv ──getopt.rs──▶ (flag, value)… ──flags.rs / extended.rs──▶ Draft ──validate.rs──▶ Options
//!                      getopt_long rules  one flag or -o option     checks after all flags
//! ```
//!
//! Every flag and `-o` option of memcached 1.6.45 is accepted and checked as
//! memcached checks it. A bad one is a message and memcached's exit code: 1
//! for what memcached refuses while reading a flag, 64 (`EX_USAGE`) for what
//! it refuses after reading them all, 71 (`EX_OSERR`) for a listen address
//! it cannot resolve. Never a panic.

mod conf;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod ext;
mod extended;
mod flags;
mod getopt;
mod help;
mod large_pages;
mod license;
mod listen_given;
mod tls;

mod memory_auto;
mod validate;
mod warm;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::str::FromStr;

use strata_server::Settings;

pub use listen_given::listen_given;

/// A refused command line: what to print and the exit code.
#[derive(Debug)]
pub struct CliError {
    pub code: u8,
    pub message: String,
}

impl CliError {
    pub fn new(code: u8, message: impl Into<String>) -> CliError {
        CliError { code, message: message.into() }
    }
}

/// What the process should do.
pub enum Parsed {
    Run(Options),
    Exit(ExitCode),
}

pub struct Options {
    pub settings: Settings,
    pub user: Option<String>,
    pub daemonize: bool,
    pub pid_file: Option<PathBuf>,
    /// `-k`: mlockall once started.
    pub lock_memory: bool,
    /// `-r`: raise the core file limit.
    pub core_dumps: bool,
}

/// The command line as read so far: settings plus what memcached keeps in
/// `main()`'s locals until every flag is known.
pub struct Draft {
    pub settings: Settings,
    /// `-p`, `-U` as given (-1: any free port, 0: off).
    pub tcp_port: i64,
    pub udp_port: i64,
    pub tcp_specified: bool,
    pub udp_specified: bool,
    pub protocol_specified: bool,
    pub listen: Vec<String>,
    /// `-m`, `-I` as given: units are applied once all flags are read.
    pub memory_limit: String,
    pub item_size_max: String,
    pub slab_sizes: Option<String>,
    pub slab_chunk_max_changed: bool,
    /// `-o journal_size` was given; else it is sized to `-m`
    /// (`journal::default_entries`).
    pub journal_size_given: bool,
    pub user: Option<String>,
    pub daemonize: bool,
    pub pid_file: Option<PathBuf>,
    pub lock_memory: bool,
    pub core_dumps: bool,
    /// `-Z`, and the `ssl_*` options (kept even without `-Z`, as memcached
    /// does; used only with it).
    pub ssl_enabled: bool,
    pub tls: strata_server::tls::TlsSettings,
    pub files: Files,
}

impl Default for Draft {
    fn default() -> Self {
        Draft {
            settings: Settings::default(),
            tcp_port: 11211,
            udp_port: 0,
            tcp_specified: false,
            udp_specified: false,
            protocol_specified: false,
            listen: Vec::new(),
            memory_limit: "64".into(),
            item_size_max: "1m".into(),
            slab_sizes: None,
            slab_chunk_max_changed: false,
            journal_size_given: false,
            user: None,
            daemonize: false,
            pid_file: None,
            lock_memory: false,
            core_dumps: false,
            ssl_enabled: false,
            tls: Default::default(),
            files: Files::Real,
        }
    }
}

/// A number, strictly: memcached's `atoi` would read "12abc" as 12 and
/// "abc" as 0; Strata refuses both rather than guess.
pub(crate) fn number<T: FromStr>(text: &str) -> Option<T> {
    text.trim().parse::<T>().ok()
}

pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Parsed, CliError> {
    let args: Vec<String> = args.into_iter().skip(1).map(|a| a.to_string_lossy().into_owned()).collect();
    let (draft, act) = read_flags(&args, Files::Real)?;
    match act {
        flags::Act::Continue => {}
        flags::Act::Help => {
            print!("{}", help::text());
            return Ok(Parsed::Exit(ExitCode::SUCCESS));
        }
        flags::Act::License => {
            print!("strata {}\n\n{}", env!("CARGO_PKG_VERSION"), license::TEXT);
            return Ok(Parsed::Exit(ExitCode::SUCCESS));
        }
        flags::Act::Version => {
            println!("strata {} (memcached 1.6.45 compatible)", env!("CARGO_PKG_VERSION"));
            return Ok(Parsed::Exit(ExitCode::SUCCESS));
        }
    }
    validate::finish(draft).map(Parsed::Run)
}

/// Where `--config` and `-o ext_path` lead: to files, or (the fuzz
/// target's) to nothing outside the process.
#[derive(Default)]
pub enum Files {
    #[default]
    Real,
    /// `--config` reads `config` whatever its path; `ext_path` files are
    /// neither created nor opened (their geometry is still checked).
    InMemory { config: String },
}

impl Files {
    /// The text `--config path` reads.
    fn config_text(&self, path: &str) -> Result<String, CliError> {
        match self {
            Files::Real => conf::read(path),
            Files::InMemory { config } => Ok(config.clone()),
        }
    }
}

/// Every flag of `args` (without the program name) applied to a fresh
/// [`Draft`], up to the first that ends the reading (`-h`, `-i`, `-V`).
fn read_flags(args: &[String], files: Files) -> Result<(Draft, flags::Act), CliError> {
    let found = getopt::parse(&flags::specs(), args)?;
    let mut draft = Draft { files, ..Draft::default() };
    for (letter, value) in found {
        match flags::apply(&mut draft, letter, value)? {
            flags::Act::Continue => {}
            act => return Ok((draft, act)),
        }
    }
    Ok((draft, flags::Act::Continue))
}

#[cfg(test)]
mod tests;
