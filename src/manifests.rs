//! Reading manifest files for `kube-lb up` and `kube-lb reconcile`.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// One manifest file's text.
#[derive(Debug, Clone)]
pub struct Manifest {
    /// Where it came from (`-` for stdin).
    pub source: PathBuf,
    /// Its YAML or JSON text (possibly several documents).
    pub text: String,
}

/// Reads every file named in `paths`; directories are searched recursively for `*.yaml`,
/// `*.yml` and `*.json` (sorted, so the order is stable); `-` reads standard input.
pub fn read(paths: &[String]) -> anyhow::Result<Vec<Manifest>> {
    let mut out = Vec::new();
    for path in paths {
        if path == "-" {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("reading manifests from stdin")?;
            out.push(Manifest {
                source: PathBuf::from("-"),
                text,
            });
            continue;
        }
        let mut files = Vec::new();
        collect(Path::new(path), &mut files)?;
        for file in files {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            out.push(Manifest { source: file, text });
        }
    }
    Ok(out)
}

fn collect(path: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if !meta.is_dir() {
        out.push(path.to_path_buf());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .with_context(|| format!("listing {}", path.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for entry in entries {
        if entry.is_dir() {
            collect(&entry, out)?;
        } else if entry
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
        {
            out.push(entry);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_are_searched_recursively_in_order() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("b.yaml"), "b").unwrap();
        std::fs::write(dir.path().join("a.json"), "a").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "x").unwrap();
        std::fs::write(dir.path().join("sub/c.yml"), "c").unwrap();
        let read = read(&[dir.path().display().to_string()]).unwrap();
        let texts: Vec<&str> = read.iter().map(|m| m.text.as_str()).collect();
        assert_eq!(texts, ["a", "b", "c"]);
        assert!(super::read(&["/nonexistent/file.yaml".into()]).is_err());
    }
}
