//! Request bytes to replies through the real connection, front ends and
//! service over an in-process store, split anywhere, connections
//! interleaved, flash reads finished in any order
//! (`strata_server::fuzzing::conn`).
//! Threads an input starts (the flash store's writer, every 32 inputs)
//! end before the next input (`strata_server::fuzzing::settled`).
#![no_main]

libfuzzer_sys::fuzz_target!(init: strata_server::fuzzing::conn::init(), |data: &[u8]| {
    strata_server::fuzzing::settled(|| strata_server::fuzzing::conn::fuzz_conn(data));
});
