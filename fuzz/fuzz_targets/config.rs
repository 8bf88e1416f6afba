//! `--config` files and command lines (`strata::cli::fuzzing::config`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| strata::cli::fuzzing::config(data));
