//! Binary SASL PLAIN and `-Y` text logins against a fixed credentials
//! table (`strata_server::fuzzing::sasl`).
//! An input starts no thread: a crawl or a dump runs inside its request
//! (`inline_background`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    strata_server::fuzzing::sasl(data);
});
