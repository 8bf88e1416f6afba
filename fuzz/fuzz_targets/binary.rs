//! Binary protocol framing and validation through a connection over an
//! in-process store (`strata_server::fuzzing::binary`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| strata_server::fuzzing::binary(data));
