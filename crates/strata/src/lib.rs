//! `strata`'s command line as a library, so the fuzz target (`fuzz/`,
//! `config`) reaches the code the binary runs. The server itself is
//! `strata-server`; `main.rs` only starts it.

pub mod cli;
