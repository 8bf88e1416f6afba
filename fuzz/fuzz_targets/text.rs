//! The text and meta request parser (`strata_proto::fuzz_text`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| strata_proto::fuzz_text(data));
