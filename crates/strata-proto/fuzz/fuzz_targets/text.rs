//! libFuzzer target for the text and meta request parser:
//! `cargo +nightly fuzz run text` from crates/strata-proto.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    strata_proto::fuzz_text(data);
});
