//! Where the control plane's binaries are: `KUBE_APISERVER_BIN` / `ETCD_BIN`, else the cache that
//! `scripts/install-test-tools` builds them into, keyed by the versions pinned in
//! `tools/control-plane/*/go.mod` (read here too, so the script and the tests cannot disagree).

use std::path::{Path, PathBuf};

use crate::Error;

/// One of the two programs of the control plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component {
    /// `kube-apiserver`, from module `k8s.io/kubernetes`.
    KubeApiserver,
    /// `etcd`, from module `go.etcd.io/etcd/server/v3`.
    Etcd,
}

impl Component {
    /// The program's file name.
    pub fn program(self) -> &'static str {
        match self {
            Self::KubeApiserver => "kube-apiserver",
            Self::Etcd => "etcd",
        }
    }

    /// The environment variable that overrides the cached binary.
    pub fn env_var(self) -> &'static str {
        match self {
            Self::KubeApiserver => "KUBE_APISERVER_BIN",
            Self::Etcd => "ETCD_BIN",
        }
    }

    /// The Go module whose required version keys the cache.
    fn module(self) -> &'static str {
        match self {
            Self::KubeApiserver => "k8s.io/kubernetes",
            Self::Etcd => "go.etcd.io/etcd/server/v3",
        }
    }

    /// The `go.mod` that pins it.
    fn go_mod(self) -> PathBuf {
        repo_root()
            .join("tools/control-plane")
            .join(self.program())
            .join("go.mod")
    }

    /// The version `tools/control-plane/<program>/go.mod` requires.
    pub fn pinned_version(self) -> Result<String, Error> {
        let path = self.go_mod();
        let text = std::fs::read_to_string(&path).map_err(|source| Error::Io {
            what: format!("reading {}", path.display()),
            source,
        })?;
        required_version(&text, self.module()).ok_or_else(|| Error::Pin {
            module: self.module(),
            go_mod: path,
        })
    }

    /// The binary to run: `$<ENV_VAR>` when set, else the cached build of the pinned version.
    /// A missing binary is an error that says how to get it.
    pub fn binary(self) -> Result<PathBuf, Error> {
        if let Some(path) = std::env::var_os(self.env_var()).filter(|p| !p.is_empty()) {
            let path = PathBuf::from(path);
            return match path.is_file() {
                true => Ok(path),
                false => Err(self.missing(path)),
            };
        }
        let path = cache_root()
            .join(self.program())
            .join(self.pinned_version()?)
            .join(self.program());
        match path.is_file() {
            true => Ok(path),
            false => Err(self.missing(path)),
        }
    }

    fn missing(self, path: PathBuf) -> Error {
        Error::MissingBinary {
            program: self.program(),
            path,
            env_var: self.env_var(),
        }
    }
}

/// The repository root (two levels above this crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `${XDG_CACHE_HOME:-$HOME/.cache}/omni-operator/test-tools`, as `scripts/install-test-tools`
/// computes it.
pub fn cache_root() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into())).join(".cache")
        });
    base.join("omni-operator/test-tools")
}

/// The version of `module` in a `go.mod`'s `require` lines (block or single-line form).
fn required_version(go_mod: &str, module: &str) -> Option<String> {
    go_mod.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        let first = words.next()?;
        let (name, version) = match first {
            "require" => (words.next()?, words.next()?),
            name => (name, words.next()?),
        };
        (name == module && version.starts_with('v')).then(|| version.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_required_version_from_either_require_form() {
        let block = "module x\n\ngo 1.26.0\n\ntool k8s.io/kubernetes/cmd/kube-apiserver\n\n\
                     require (\n\tgithub.com/a/b v1.0.0 // indirect\n\tk8s.io/kubernetes v1.35.4 // indirect\n)\n";
        assert_eq!(
            required_version(block, "k8s.io/kubernetes").as_deref(),
            Some("v1.35.4")
        );
        let single = "module x\nrequire go.etcd.io/etcd/server/v3 v3.6.17\n";
        assert_eq!(
            required_version(single, "go.etcd.io/etcd/server/v3").as_deref(),
            Some("v3.6.17")
        );
        assert_eq!(required_version(single, "k8s.io/kubernetes"), None);
    }

    #[test]
    fn the_repository_pins_both_components() {
        for component in [Component::KubeApiserver, Component::Etcd] {
            let version = component.pinned_version().expect("pinned");
            assert!(version.starts_with('v'), "{version}");
        }
    }
}
