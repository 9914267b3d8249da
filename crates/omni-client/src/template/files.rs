//! File resolution for templates.

use std::path::{Path, PathBuf};

/// Largest template file read (1 MiB): a patch or manifest is never near it, and the cap keeps a
/// huge or endless file from exhausting memory.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// Why a template file could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    /// The file does not exist.
    #[error("file {0:?} not found")]
    NotFound(String),
    /// The path leaves the configured template root (`..`, absolute path or symlink).
    #[error("file {0:?} is outside the template root")]
    OutsideRoot(String),
    /// The path names a directory, device, FIFO or socket.
    #[error("file {0:?} is not a regular file")]
    NotRegular(String),
    /// The file is larger than [`MAX_FILE_BYTES`].
    #[error("file {path:?} is larger than {limit} bytes")]
    TooLarge {
        /// The path as written in the template.
        path: String,
        /// The cap in bytes.
        limit: u64,
    },
    /// File references are switched off for this resolver (no template root configured).
    #[error("file {path:?} cannot be read: {reason}")]
    Disabled {
        /// The path as written in the template.
        path: String,
        /// Why files are switched off.
        reason: String,
    },
    /// Any other I/O failure.
    #[error("cannot read file {path:?}: {message}")]
    Io {
        /// The path as written in the template.
        path: String,
        /// The OS error.
        message: String,
    },
}

#[derive(Debug, Clone)]
enum Access {
    /// Every read is refused with this reason.
    Disabled(String),
    /// Relative paths resolve against the base directory; anything the process can read is
    /// allowed (a user's own template on their own machine).
    Unconfined,
    /// Reads must stay inside this directory.
    Confined(PathBuf),
}

/// Resolves `file:` references of a template. Every read is capped at [`MAX_FILE_BYTES`] and
/// accepts only regular files. A confined resolver (see [`FileResolver::with_root`]) also
/// refuses `..` components, absolute paths outside its root and symbolic links leaving it; the
/// check is made on the file actually opened, so swapping a path component for a symlink
/// between the check and the read does not help.
#[derive(Debug, Clone)]
pub struct FileResolver {
    base_dir: PathBuf,
    access: Access,
    /// A directory that contains the root and that every file read must also lie in (the
    /// operator's root when `spec.templateRoot` narrowed it), so swapping the narrower root
    /// for a symlink after it was checked still cannot leave the outer one.
    outer: Option<PathBuf>,
}

impl Default for FileResolver {
    /// A resolver that refuses every file: the safe choice when nobody configured a root.
    fn default() -> Self {
        FileResolver::disabled("no template root is configured")
    }
}

impl FileResolver {
    /// Relative paths resolve against `base_dir` (the template file's directory); no confinement.
    /// For templates a user runs from their own machine, as `omnictl` does.
    pub fn new(base_dir: impl Into<PathBuf>) -> Self {
        FileResolver {
            base_dir: base_dir.into(),
            access: Access::Unconfined,
            outer: None,
        }
    }

    /// Relative paths resolve against `root` and every file read must lie inside it.
    pub fn with_root(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        FileResolver {
            base_dir: root.clone(),
            access: Access::Confined(root),
            outer: None,
        }
    }

    /// A resolver that refuses every file with `reason` (shown in the error).
    pub fn disabled(reason: impl Into<String>) -> Self {
        FileResolver {
            base_dir: PathBuf::new(),
            access: Access::Disabled(reason.into()),
            outer: None,
        }
    }

    /// Additionally requires every file read to lie inside `outer` (a directory containing
    /// the root), checked on the opened file like the root itself.
    pub fn also_inside(mut self, outer: impl Into<PathBuf>) -> Self {
        self.outer = Some(outer.into());
        self
    }

    /// The directory reads are confined to, if any.
    pub fn root(&self) -> Option<&Path> {
        match &self.access {
            Access::Confined(root) => Some(root),
            _ => None,
        }
    }

    /// Reads the file a template refers to (at most [`MAX_FILE_BYTES`]).
    pub fn read(&self, path: &str) -> Result<Vec<u8>, FileError> {
        let io = |e: std::io::Error| io_error(path, e);
        let candidate = Path::new(path);
        match &self.access {
            Access::Disabled(reason) => Err(FileError::Disabled {
                path: path.to_string(),
                reason: reason.clone(),
            }),
            Access::Unconfined => {
                // Symlinks are fine here; resolve them so the open below need not follow one.
                let full = self.base_dir.join(candidate).canonicalize().map_err(io)?;
                let file = open_regular(path, &full)?;
                read_capped(path, file)
            }
            Access::Confined(root) => {
                // Lexical check first so `..` is reported as an escape even when the target
                // does not exist; `a/../b` is refused too, as admission does.
                if candidate
                    .components()
                    .any(|c| c == std::path::Component::ParentDir)
                {
                    return Err(FileError::OutsideRoot(path.to_string()));
                }
                let root = root.canonicalize().map_err(|e| FileError::Io {
                    path: path.to_string(),
                    message: format!("template root {}: {e}", root.display()),
                })?;
                // An absolute path is accepted only when it lies inside the root.
                let resolved = root.join(candidate).canonicalize().map_err(io)?;
                let outer = match &self.outer {
                    Some(outer) => Some(outer.canonicalize().map_err(|e| FileError::Io {
                        path: path.to_string(),
                        message: format!("template root {}: {e}", outer.display()),
                    })?),
                    None => None,
                };
                let inside = |p: &Path| {
                    p.starts_with(&root) && outer.as_ref().is_none_or(|o| p.starts_with(o))
                };
                if !inside(&resolved) {
                    return Err(FileError::OutsideRoot(path.to_string()));
                }
                let file = open_regular(path, &resolved)?;
                // The path may have changed since canonicalisation (a directory swapped for a
                // symlink): check where the opened file really is.
                if let Some(opened) = opened_path(&file)
                    && !inside(&opened)
                {
                    return Err(FileError::OutsideRoot(path.to_string()));
                }
                read_capped(path, file)
            }
        }
    }
}

fn io_error(path: &str, e: std::io::Error) -> FileError {
    if e.kind() == std::io::ErrorKind::NotFound {
        FileError::NotFound(path.to_string())
    } else {
        FileError::Io {
            path: path.to_string(),
            message: e.to_string(),
        }
    }
}

/// Opens `full` for reading without blocking (a FIFO would otherwise wait for a writer) and
/// without following a final symlink, then insists on a regular file.
fn open_regular(path: &str, full: &Path) -> Result<std::fs::File, FileError> {
    // Refuse devices and FIFOs before opening them at all: opening a device can have effects.
    let meta = std::fs::metadata(full).map_err(|e| io_error(path, e))?;
    if !meta.is_file() {
        return Err(FileError::NotRegular(path.to_string()));
    }
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY);
    }
    let file = options.open(full).map_err(|e| {
        #[cfg(unix)]
        if e.raw_os_error() == Some(libc::ELOOP) {
            // The final component became a symlink after the checks above.
            return FileError::OutsideRoot(path.to_string());
        }
        io_error(path, e)
    })?;
    let meta = file.metadata().map_err(|e| io_error(path, e))?;
    if !meta.is_file() {
        return Err(FileError::NotRegular(path.to_string()));
    }
    Ok(file)
}

/// Where an open file really is, from `/proc/self/fd` (Linux); `None` elsewhere.
fn opened_path(file: &std::fs::File) -> Option<PathBuf> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd as _;
        std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        None
    }
}

/// Reads at most [`MAX_FILE_BYTES`] + 1 bytes, so a larger file is detected without reading it.
fn read_capped(path: &str, file: std::fs::File) -> Result<Vec<u8>, FileError> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io_error(path, e))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(FileError::TooLarge {
            path: path.to_string(),
            limit: MAX_FILE_BYTES,
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_confines_paths() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("sub")).expect("mkdir");
        std::fs::write(root.join("sub/p.yaml"), b"a: 1\n").expect("write");
        std::fs::write(dir.path().join("secret.yaml"), b"x").expect("write");
        let r = FileResolver::with_root(&root);
        assert_eq!(r.read("sub/p.yaml").expect("read"), b"a: 1\n");
        assert_eq!(
            r.read("../secret.yaml"),
            Err(FileError::OutsideRoot("../secret.yaml".into()))
        );
        assert!(matches!(
            r.read("missing.yaml"),
            Err(FileError::NotFound(_))
        ));
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(dir.path().join("secret.yaml"), root.join("link.yaml"))
                .expect("symlink");
            assert_eq!(
                r.read("link.yaml"),
                Err(FileError::OutsideRoot("link.yaml".into()))
            );
        }
    }

    #[test]
    fn a_narrowed_root_swapped_for_a_link_out_of_the_outer_root_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let outer = dir.path().join("outer");
        std::fs::create_dir_all(outer.join("narrow")).expect("mkdir");
        std::fs::create_dir_all(dir.path().join("elsewhere")).expect("mkdir");
        std::fs::write(outer.join("narrow/p.yaml"), b"a: 1\n").expect("write");
        std::fs::write(dir.path().join("elsewhere/p.yaml"), b"secret\n").expect("write");
        let r = FileResolver::with_root(outer.join("narrow")).also_inside(&outer);
        assert_eq!(r.read("p.yaml"), Ok(b"a: 1\n".to_vec()));
        // After the operator checked `narrow`, someone replaces it with a link leaving `outer`.
        std::fs::remove_dir_all(outer.join("narrow")).expect("rm");
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(dir.path().join("elsewhere"), outer.join("narrow"))
                .expect("symlink");
            assert_eq!(
                r.read("p.yaml"),
                Err(FileError::OutsideRoot("p.yaml".into()))
            );
        }
    }

    #[test]
    fn the_default_resolver_refuses_every_file() {
        assert_eq!(
            FileResolver::default().read("/etc/hostname"),
            Err(FileError::Disabled {
                path: "/etc/hostname".into(),
                reason: "no template root is configured".into()
            })
        );
    }

    #[test]
    fn unconfined_reads_are_still_capped_and_regular_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cap = usize::try_from(MAX_FILE_BYTES).expect("usize");
        std::fs::write(dir.path().join("big.yaml"), vec![b'#'; cap + 1]).expect("write");
        std::fs::write(dir.path().join("p.yaml"), b"a: 1\n").expect("write");
        let r = FileResolver::new(dir.path());
        assert_eq!(r.read("p.yaml"), Ok(b"a: 1\n".to_vec()));
        assert_eq!(
            r.read("big.yaml"),
            Err(FileError::TooLarge {
                path: "big.yaml".into(),
                limit: MAX_FILE_BYTES
            })
        );
        assert_eq!(
            r.read("/dev/zero"),
            Err(FileError::NotRegular("/dev/zero".into()))
        );
        assert_eq!(r.read("."), Err(FileError::NotRegular(".".into())));
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(dir.path().join("p.yaml"), dir.path().join("link.yaml"))
                .expect("symlink");
            assert_eq!(r.read("link.yaml"), Ok(b"a: 1\n".to_vec()));
        }
    }
}
