//! Request bytes to replies through the real connection, front ends and
//! service over an in-process store, split anywhere, connections
//! interleaved, flash reads finished in any order
//! (`strata_server::fuzzing::conn`).
#![no_main]

libfuzzer_sys::fuzz_target!(init: strata_server::fuzzing::conn::init(), |data: &[u8]| {
    strata_server::fuzzing::conn::fuzz_conn(data);
});
