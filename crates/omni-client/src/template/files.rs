//! Go duration parsing and file resolution for templates.

use std::path::{Path, PathBuf};

/// A duration string that Go's `time.ParseDuration` would reject.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {0:?}")]
pub struct DurationError(pub String);

/// Parses Go duration syntax (`30s`, `1h30m`, `1.5h`, `-5m`, `0`) into signed nanoseconds.
/// Plain numbers other than `0` are rejected, as in Go.
pub fn parse_go_duration(text: &str) -> Result<i128, DurationError> {
    let err = || DurationError(text.to_string());
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(err());
    }
    let mut total: i128 = 0;
    while !rest.is_empty() {
        let int_end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let int_part = &rest[..int_end];
        rest = &rest[int_end..];
        let mut frac_part = "";
        if let Some(after_dot) = rest.strip_prefix('.') {
            let frac_end = after_dot
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(after_dot.len());
            frac_part = &after_dot[..frac_end];
            rest = &after_dot[frac_end..];
        }
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(err());
        }
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit: i128 = match &rest[..unit_end] {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(err()),
        };
        rest = &rest[unit_end..];
        let whole: i128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().map_err(|_| err())?
        };
        let mut value = whole.checked_mul(unit).ok_or_else(err)?;
        let mut scale = unit;
        for digit in frac_part.bytes().take(18) {
            scale /= 10;
            value += i128::from(digit - b'0') * scale;
        }
        total = total.checked_add(value).ok_or_else(err)?;
        if total > i128::from(i64::MAX) {
            return Err(err());
        }
    }
    Ok(if negative { -total } else { total })
}

/// Why a template file could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    /// The file does not exist.
    #[error("file {0:?} not found")]
    NotFound(String),
    /// The path leaves the configured template root (`..`, absolute path or symlink).
    #[error("file {0:?} is outside the template root")]
    OutsideRoot(String),
    /// Any other I/O failure.
    #[error("cannot read file {path:?}: {message}")]
    Io {
        /// The path as written in the template.
        path: String,
        /// The OS error.
        message: String,
    },
}

/// Resolves `file:` references of a template: relative to a base directory and, when a root is
/// configured, confined to it (checked on the fully resolved path, so symlinks cannot escape).
#[derive(Debug, Clone)]
pub struct FileResolver {
    base_dir: PathBuf,
    root: Option<PathBuf>,
}

impl Default for FileResolver {
    fn default() -> Self {
        FileResolver {
            base_dir: PathBuf::from("."),
            root: None,
        }
    }
}

impl FileResolver {
    /// Relative paths resolve against `base_dir` (the template file's directory); no confinement.
    pub fn new(base_dir: impl Into<PathBuf>) -> Self {
        FileResolver {
            base_dir: base_dir.into(),
            root: None,
        }
    }

    /// Relative paths resolve against `root` and must stay inside it (the operator's
    /// `spec.templateRoot`).
    pub fn with_root(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        FileResolver {
            base_dir: root.clone(),
            root: Some(root),
        }
    }

    /// Reads the file a template refers to.
    pub fn read(&self, path: &str) -> Result<Vec<u8>, FileError> {
        let io = |e: std::io::Error| {
            if e.kind() == std::io::ErrorKind::NotFound {
                FileError::NotFound(path.to_string())
            } else {
                FileError::Io {
                    path: path.to_string(),
                    message: e.to_string(),
                }
            }
        };
        let candidate = Path::new(path);
        let full = match &self.root {
            Some(root) => {
                if candidate.is_absolute() {
                    return Err(FileError::OutsideRoot(path.to_string()));
                }
                // Lexical check first so `..` escapes are reported as such even when the
                // target does not exist; canonicalisation below catches symlinks.
                let mut depth: i64 = 0;
                for part in candidate.components() {
                    match part {
                        std::path::Component::ParentDir => depth -= 1,
                        std::path::Component::Normal(_) => depth += 1,
                        _ => {}
                    }
                    if depth < 0 {
                        return Err(FileError::OutsideRoot(path.to_string()));
                    }
                }
                let root = root.canonicalize().map_err(io)?;
                let resolved = root.join(candidate).canonicalize().map_err(io)?;
                if !resolved.starts_with(&root) {
                    return Err(FileError::OutsideRoot(path.to_string()));
                }
                resolved
            }
            None => self.base_dir.join(candidate),
        };
        std::fs::read(full).map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("0"), Ok(0));
        assert_eq!(parse_go_duration("30s"), Ok(30_000_000_000));
        assert_eq!(parse_go_duration("1h30m"), Ok(5_400_000_000_000));
        assert_eq!(parse_go_duration("1.5h"), Ok(5_400_000_000_000));
        assert_eq!(parse_go_duration("-5m"), Ok(-300_000_000_000));
        assert_eq!(parse_go_duration("300ms"), Ok(300_000_000));
        assert!(parse_go_duration("30").is_err());
        assert!(parse_go_duration("").is_err());
        assert!(parse_go_duration("1d").is_err());
        assert!(parse_go_duration("h").is_err());
    }

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
}
