//! Target 8: the flash files (page table, indexes, write buffers, records,
//! the small store's directories), damaged and read back.
#![no_main]
libfuzzer_sys::fuzz_target!(init: strata_store::fuzzing::prepare(), |data: &[u8]| strata_store::fuzzing::fuzz_flash_files(data));
