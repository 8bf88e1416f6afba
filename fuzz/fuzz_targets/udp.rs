//! UDP request datagrams to reply datagrams (`strata_server::fuzzing::udp`).
//! An input starts no thread: a crawl or a dump runs inside its request
//! (`inline_background`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    strata_server::fuzzing::udp(data);
});
