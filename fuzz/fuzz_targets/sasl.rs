//! Binary SASL PLAIN and `-Y` text logins against a fixed credentials
//! table (`strata_server::fuzzing::sasl`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| strata_server::fuzzing::sasl(data));
