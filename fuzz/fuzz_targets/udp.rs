//! UDP request datagrams to reply datagrams (`strata_server::fuzzing::udp`).
//! Threads an input starts (a crawl, a dump) end before the next input
//! (`strata_server::fuzzing::settled`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    strata_server::fuzzing::settled(|| strata_server::fuzzing::udp(data));
});
