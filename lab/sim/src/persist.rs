//! Saving the simulated world: the whole world as one JSON file, written atomically.

use std::io::Write as _;
use std::path::Path;

/// Writes `text` to `path` atomically: a private (0600: the world holds simulated tokens) temporary
/// file in the same folder, fsync, rename, fsync of the folder. A crash leaves the old file or the new.
pub(crate) fn write_atomically(path: &Path, text: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    // tempfile creates it 0600, and removes it if the save does not finish.
    let mut tmp = tempfile::Builder::new()
        .prefix(".sim-world-")
        .suffix(".tmp")
        .tempfile_in(dir)?;
    tmp.write_all(text)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    // The rename is durable only once the folder is.
    #[cfg(unix)]
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}
