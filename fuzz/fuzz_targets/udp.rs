//! UDP request datagrams to reply datagrams (`strata_server::fuzzing::udp`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| strata_server::fuzzing::udp(data));
