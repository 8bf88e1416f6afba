//! Target 6: the memory file (`-e`), damaged and read back.
#![no_main]
libfuzzer_sys::fuzz_target!(init: strata_store::fuzzing::prepare(), |data: &[u8]| strata_store::fuzzing::fuzz_memory_file(data));
