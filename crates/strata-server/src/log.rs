//! Log lines on stderr that never take the server down.
//!
//! `eprintln!` panics when stderr cannot be written (closed, or a pipe
//! whose reader went away): one warning would end a server whose operator
//! started it with `2>&-` or whose log collector restarted. memcached
//! ignores a failed log write; [`log_line!`](crate::log_line) drops the
//! line the same way. Every message the server and the `strata` binary
//! print at run time goes through it.

/// `eprintln!` without the panic: the line is dropped if stderr cannot
/// take it.
#[macro_export]
macro_rules! log_line {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::writeln!(::std::io::stderr(), $($arg)*);
    }};
}
