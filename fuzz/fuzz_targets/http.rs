//! Request heads to the `/metrics` listener, arriving in pieces
//! (`strata_server::fuzzing::http`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| strata_server::fuzzing::http(data));
