//! Target 7: the invalidation journal file, damaged and opened as a start does.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| strata_server::fuzzing::fuzz_journal(data));
