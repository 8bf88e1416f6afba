//! Binary SASL PLAIN and `-Y` text logins against a fixed credentials
//! table (`strata_server::fuzzing::sasl`).
//! Threads an input starts (a crawl, a dump) end before the next input
//! (`strata_server::fuzzing::settled`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    strata_server::fuzzing::settled(|| strata_server::fuzzing::sasl(data));
});
