//! Optional state file: the store's contents as JSON, written atomically after changes.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::store::{Dump, Store};

/// A state file that could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    /// Reading, writing, syncing or renaming failed.
    #[error("state file {path}: {source}")]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a state dump.
    #[error("state file {path} is not valid: {source}")]
    Format {
        /// The file involved.
        path: PathBuf,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> PersistError + '_ {
    move |source| PersistError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Reads a state file; `None` when it does not exist yet.
pub fn load(path: &Path) -> Result<Option<Dump>, PersistError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(path)(e)),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| PersistError::Format {
            path: path.to_path_buf(),
            source,
        })
}

/// Writes a dump so that a crash leaves either the old or the new file: temp file in the same
/// directory, fsync, rename over the target, fsync the directory.
pub fn save(path: &Path, dump: &Dump) -> Result<(), PersistError> {
    let bytes = serde_json::to_vec(dump).map_err(|source| PersistError::Format {
        path: path.to_path_buf(),
        source,
    })?;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "state".to_string());
    let temp = dir.join(format!(".{file_name}.tmp-{}", std::process::id()));
    {
        let mut file = std::fs::File::create(&temp).map_err(io_error(&temp))?;
        file.write_all(&bytes).map_err(io_error(&temp))?;
        file.sync_all().map_err(io_error(&temp))?;
    }
    std::fs::rename(&temp, path).map_err(io_error(path))?;
    // Make the rename itself durable.
    if let Ok(dir_handle) = std::fs::File::open(dir) {
        dir_handle.sync_all().map_err(io_error(dir))?;
    }
    Ok(())
}

/// How long the writer waits after a change before writing, to batch bursts.
const COALESCE: std::time::Duration = std::time::Duration::from_millis(20);

/// Writes the store to `path` whenever it changes, until `stop` fires; then writes once more.
/// Changes arriving during a write are folded into the next one.
pub async fn run_writer(
    store: Arc<Store>,
    path: PathBuf,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut committed = store.committed();
    let mut written = *committed.borrow_and_update();
    loop {
        tokio::select! {
            changed = committed.changed() => {
                if changed.is_err() {
                    break;
                }
            }
            _ = stop.changed() => break,
        }
        // Let a burst of writes settle so it costs one file write, not one per object.
        tokio::select! {
            () = tokio::time::sleep(COALESCE) => {}
            _ = stop.changed() => break,
        }
        written = write(&store, &path, written).await;
    }
    write(&store, &path, written).await;
}

async fn write(store: &Arc<Store>, path: &Path, written: u64) -> u64 {
    let dump = store.dump();
    let version = dump.resource_version;
    if version == written {
        return written;
    }
    let path_owned = path.to_path_buf();
    let result = tokio::task::spawn_blocking(move || save(&path_owned, &dump)).await;
    match result {
        Ok(Ok(())) => version,
        Ok(Err(error)) => {
            tracing::warn!(%error, "writing the state file failed; will retry on the next change");
            written
        }
        Err(error) => {
            tracing::warn!(%error, "state file writer task failed");
            written
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn save_then_load_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        assert!(load(&path).unwrap().is_none());
        let mut objects = BTreeMap::new();
        objects.insert(
            "v1/services".to_string(),
            vec![Arc::new(serde_json::json!({"metadata": {"name": "a"}}))],
        );
        let dump = Dump {
            resource_version: 9,
            objects,
        };
        save(&path, &dump).unwrap();
        let loaded = load(&path).unwrap().unwrap();
        assert_eq!(loaded.resource_version, 9);
        assert_eq!(loaded.objects["v1/services"][0]["metadata"]["name"], "a");
        // No temp files are left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        std::fs::write(&path, b"not json").unwrap();
        assert!(matches!(load(&path), Err(PersistError::Format { .. })));
    }
}
