//! The flash tier (`-o ext_path`): under construction; see `flash_read.rs`
//! for the contract with the server.

use crate::ExtConfig;

use super::SegStore;

impl SegStore {
    /// Attach a flash tier (`-o ext_path=...`), before serving. A missing,
    /// unwritable or too small file is an error (the CLI exits 2). Returns a
    /// line for the log.
    pub fn attach_flash(&mut self, ext: ExtConfig) -> std::io::Result<String> {
        let _ = ext;
        Err(std::io::Error::new(std::io::ErrorKind::Unsupported, "ext_path: the flash tier is not built yet"))
    }
}
