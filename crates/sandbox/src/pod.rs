//! Runs the operator the way a kubelet runs the chart's Deployment: from `helm template` output,
//! the container's `args` and `env` (with the pod namespace from `valueFrom.fieldRef`), the
//! image's binary paths mapped to the built binaries, a read-only root filesystem, each
//! `emptyDir` as a fresh tmpfs at its `mountPath`, Secret volumes as files, a projected
//! service-account token with `KUBERNETES_SERVICE_HOST/PORT`, and `runAsUser`/`runAsGroup`.
//!
//! Isolation uses a private mount namespace (`unshare`, util-linux) and `chroot` into a root
//! assembled from read-only bind mounts of the host's `/usr` and `/etc`, as a distroless image
//! would look. Where mount namespaces are not allowed (not root, or no `unshare`), the container
//! runs directly on the host with a loud warning: paths then resolve on the host and a writable
//! root can hide bugs, so the caller learns which mode ran ([`Pod::isolated`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, bail};
use serde_json::Value;

/// Where the operator image keeps its executables (see the Dockerfile).
pub const IMAGE_OPERATOR_PATH: &str = "/omni-operator";
/// Where the operator image keeps helm.
pub const IMAGE_HELM_PATH: &str = "/usr/local/bin/helm";

/// `args` with every listen address that means "all interfaces" (`--x-bind-address=:PORT`
/// or `=0.0.0.0:PORT`, how the chart writes them for a pod's private network) bound to
/// loopback instead, because this pod shares the host's network.
pub fn loopback_binds(args: &[String]) -> Vec<String> {
    args.iter()
        .map(|arg| {
            let Some((flag, address)) = arg.split_once('=') else {
                return arg.clone();
            };
            let port = address
                .strip_prefix(':')
                .or_else(|| address.strip_prefix("0.0.0.0:"))
                .or_else(|| address.strip_prefix("[::]:"));
            match port {
                Some(port) if flag.ends_with("-bind-address") => {
                    format!("{flag}=127.0.0.1:{port}")
                }
                _ => arg.clone(),
            }
        })
        .collect()
}

/// What the "node" provides to the pod.
#[derive(Debug, Clone)]
pub struct PodContext {
    /// Namespace the pod runs in (`metadata.namespace` for `fieldRef`).
    pub namespace: String,
    /// Pod name (`metadata.name`, and `HOSTNAME`).
    pub name: String,
    /// API server address for `KUBERNETES_SERVICE_HOST`/`PORT` (HTTPS).
    pub api: SocketAddr,
    /// CA of the API server's serving certificate (`ca.crt` of the projected token).
    pub api_ca_pem: String,
    /// The service-account token.
    pub token: String,
    /// Built binaries for the image paths ([`IMAGE_OPERATOR_PATH`], [`IMAGE_HELM_PATH`]).
    pub binaries: BTreeMap<String, PathBuf>,
    /// Contents of the Secrets that Secret volumes name: Secret name → key → bytes.
    pub secrets: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    /// Directory for the pod's files (its root and volumes are created below it).
    pub dir: PathBuf,
}

/// A volume mount of the container, resolved.
#[derive(Debug, Clone)]
enum Mount {
    EmptyDir { path: String },
    Files { path: String, source: PathBuf },
}

/// The container of a rendered Deployment, as a kubelet would start it.
#[derive(Debug, Clone)]
pub struct ContainerSpec {
    /// `command` (defaults to the image entrypoint, [`IMAGE_OPERATOR_PATH`]).
    pub command: Vec<String>,
    /// `args`.
    pub args: Vec<String>,
    /// `env`, resolved (`fieldRef` to the pod namespace and name).
    pub env: Vec<(String, String)>,
    /// `readinessProbe.httpGet`: path and port.
    pub readiness: Option<(String, u16)>,
    /// `livenessProbe.httpGet`: path and port.
    pub liveness: Option<(String, u16)>,
    /// `runAsUser`/`runAsGroup` (container over pod security context).
    pub run_as: Option<(u32, u32)>,
    /// `readOnlyRootFilesystem`.
    pub read_only_root: bool,
    /// `terminationGracePeriodSeconds` of the pod.
    pub termination_grace: Duration,
    mounts: Vec<Mount>,
}

fn str_list(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Resolves a probe's `port`, a number or the name of a container port.
fn probe_port(port: &Value, container: &Value) -> Option<u16> {
    if let Some(n) = port.as_u64() {
        return u16::try_from(n).ok();
    }
    let name = port.as_str()?;
    container["ports"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == name)
        .and_then(|p| p["containerPort"].as_u64())
        .and_then(|n| u16::try_from(n).ok())
}

impl ContainerSpec {
    /// The first container of `deployment`, resolved against `ctx` (Secret volumes are written
    /// below `ctx.dir`).
    pub fn from_deployment(deployment: &Value, ctx: &PodContext) -> anyhow::Result<Self> {
        let pod = &deployment["spec"]["template"]["spec"];
        let container = pod["containers"]
            .get(0)
            .context("the Deployment has no container")?;
        let mut env = Vec::new();
        for e in container["env"].as_array().into_iter().flatten() {
            let name = e["name"].as_str().unwrap_or_default().to_string();
            let value = if let Some(v) = e["value"].as_str() {
                v.to_string()
            } else if let Some(path) = e.pointer("/valueFrom/fieldRef/fieldPath") {
                match path.as_str() {
                    Some("metadata.namespace") => ctx.namespace.clone(),
                    Some("metadata.name") => ctx.name.clone(),
                    other => bail!("env {name}: fieldRef {other:?} is not supported"),
                }
            } else {
                bail!("env {name}: only value and fieldRef are supported");
            };
            env.push((name, value));
        }
        let security = |key: &str| {
            container["securityContext"][key]
                .as_u64()
                .or_else(|| pod["securityContext"][key].as_u64())
                .and_then(|n| u32::try_from(n).ok())
        };
        let run_as = security("runAsUser").map(|u| (u, security("runAsGroup").unwrap_or(u)));
        let http_probe = |probe: &str| {
            container[probe]["httpGet"].as_object().and_then(|g| {
                let path = g.get("path")?.as_str()?.to_string();
                Some((path, probe_port(g.get("port")?, container)?))
            })
        };
        let (readiness, liveness) = (http_probe("readinessProbe"), http_probe("livenessProbe"));
        let volumes: BTreeMap<&str, &Value> = pod["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| Some((v["name"].as_str()?, v)))
            .collect();
        let mut mounts = Vec::new();
        for (i, m) in container["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let name = m["name"].as_str().unwrap_or_default();
            let path = m["mountPath"].as_str().unwrap_or_default().to_string();
            let volume = volumes
                .get(name)
                .with_context(|| format!("volumeMount {name} names no volume"))?;
            if volume.get("emptyDir").is_some() {
                mounts.push(Mount::EmptyDir { path });
            } else if let Some(secret) =
                volume.pointer("/secret/secretName").and_then(Value::as_str)
            {
                let data = ctx
                    .secrets
                    .get(secret)
                    .with_context(|| format!("volume {name}: Secret {secret} is not provided"))?;
                let source = ctx.dir.join(format!("volume-{i}-{name}"));
                std::fs::create_dir_all(&source)?;
                for (key, bytes) in data {
                    std::fs::write(source.join(key), bytes)?;
                }
                mounts.push(Mount::Files { path, source });
            } else {
                bail!("volume {name}: only emptyDir and secret volumes are supported");
            }
        }
        let command = match str_list(&container["command"]) {
            c if c.is_empty() => vec![IMAGE_OPERATOR_PATH.to_string()],
            c => c,
        };
        Ok(Self {
            command,
            args: str_list(&container["args"]),
            env,
            readiness,
            liveness,
            run_as,
            read_only_root: container["securityContext"]["readOnlyRootFilesystem"] == true,
            termination_grace: Duration::from_secs(
                pod["terminationGracePeriodSeconds"].as_u64().unwrap_or(30),
            ),
            mounts,
        })
    }
}

/// The Deployment in `helm template` output.
pub fn find_deployment(docs: &[Value]) -> anyhow::Result<&Value> {
    docs.iter()
        .find(|d| d["kind"] == "Deployment")
        .context("the rendered chart has no Deployment")
}

/// Renders `chart` with helm as release `release` in `namespace` with `--set` values.
pub fn helm_template(
    helm: &Path,
    chart: &Path,
    release: &str,
    namespace: &str,
    set: &[String],
) -> anyhow::Result<Vec<Value>> {
    let mut cmd = std::process::Command::new(helm);
    cmd.args(["template", release])
        .arg(chart)
        .args(["--namespace", namespace]);
    for s in set {
        cmd.arg("--set").arg(s);
    }
    let out = cmd.output().context("running helm template")?;
    if !out.status.success() {
        bail!(
            "helm template failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8(out.stdout)?;
    let mut docs = Vec::new();
    for doc in omni_operator::cli::validate::split_documents(&text) {
        let v: Value = serde_saphyr::from_str(doc)
            .map_err(|e| anyhow::anyhow!("parsing helm template output: {e}"))?;
        if v.is_object() {
            docs.push(v);
        }
    }
    Ok(docs)
}

/// A running pod.
pub struct Pod {
    child: tokio::process::Child,
    spec: ContainerSpec,
    isolated: bool,
    /// What the container printed (stdout and stderr), for diagnostics.
    pub log: PathBuf,
}

/// Whether this process may create mount namespaces (root, with `unshare` and `chroot`).
pub fn can_isolate() -> bool {
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    root && std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "true"])
        .status()
        .is_ok_and(|s| s.success())
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

impl Pod {
    /// Starts the container of `spec` in `ctx`.
    pub async fn start(spec: ContainerSpec, ctx: &PodContext) -> anyhow::Result<Pod> {
        let isolated = can_isolate();
        let token_dir = ctx.dir.join("serviceaccount");
        std::fs::create_dir_all(&token_dir)?;
        std::fs::write(token_dir.join("token"), &ctx.token)?;
        std::fs::write(token_dir.join("ca.crt"), &ctx.api_ca_pem)?;
        std::fs::write(token_dir.join("namespace"), &ctx.namespace)?;
        let log = ctx.dir.join("container.log");
        let out = std::fs::File::create(&log)?;
        let mut env: Vec<(String, String)> = vec![
            ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
            ("HOSTNAME".into(), ctx.name.clone()),
            ("KUBERNETES_SERVICE_HOST".into(), ctx.api.ip().to_string()),
            ("KUBERNETES_SERVICE_PORT".into(), ctx.api.port().to_string()),
        ];
        env.extend(spec.env.iter().cloned());
        let mut cmd = if isolated {
            let script = isolation_script(&spec, ctx, &token_dir)?;
            let mut c = tokio::process::Command::new("unshare");
            c.args(["--mount", "--propagation", "private", "--", "sh", "-ec"])
                .arg(script);
            c
        } else {
            eprintln!(
                "WARNING: pod runner: mount namespaces are not available here; running the \
                 container on the host with a WRITABLE root filesystem and host paths. A \
                 read-only-root bug would not show."
            );
            let program = ctx
                .binaries
                .get(&spec.command[0])
                .cloned()
                .unwrap_or_else(|| PathBuf::from(&spec.command[0]));
            let mut c = tokio::process::Command::new(program);
            c.args(&spec.command[1..]).args(&spec.args);
            c
        };
        cmd.env_clear()
            .envs(env)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .kill_on_drop(true);
        let child = cmd.spawn().context("starting the pod")?;
        Ok(Pod {
            child,
            spec,
            isolated,
            log,
        })
    }

    /// Whether the container runs in its own mount namespace with the chart's root filesystem
    /// settings (false: the host fallback).
    pub fn isolated(&self) -> bool {
        self.isolated
    }

    /// Whether the container's root filesystem is read-only (isolated, and the chart asks for
    /// it): then nothing can be written outside its mounted volumes.
    pub fn read_only_root(&self) -> bool {
        self.isolated && self.spec.read_only_root
    }

    /// What the container printed so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Polls the readiness and liveness probes until both answer 200 (fails early if the
    /// container exits).
    pub async fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let (path, port) = self
            .spec
            .readiness
            .clone()
            .context("the container has no httpGet readiness probe")?;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("the container exited ({status}):\n{}", self.output());
            }
            let live = match &self.spec.liveness {
                Some((path, port)) => http_status(*port, path).await == Some(200),
                None => true,
            };
            if live && http_status(port, &path).await == Some(200) {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                bail!(
                    "the readiness probe {path} on port {port} never answered 200:\n{}",
                    self.output()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Stops the container as a kubelet does: SIGTERM, then SIGKILL after the grace period.
    /// Returns whether it exited within the grace period.
    pub async fn terminate(&mut self) -> anyhow::Result<bool> {
        if let Some(pid) = self.child.id() {
            // SIGTERM goes to unshare, which forwards nothing: signal its process group's
            // members by pid instead, the container process being the last exec'd one.
            signal_tree(pid, "TERM");
        }
        match tokio::time::timeout(self.spec.termination_grace, self.child.wait()).await {
            Ok(status) => {
                status?;
                Ok(true)
            }
            Err(_) => {
                self.child.kill().await?;
                Ok(false)
            }
        }
    }
}

/// Sends `signal` to `pid` and all its descendants (unshare → sh → exec'd container).
fn signal_tree(pid: u32, signal: &str) {
    let mut pids = vec![pid];
    let mut i = 0;
    while i < pids.len() {
        let children = std::fs::read_to_string(format!("/proc/{p}/task/{p}/children", p = pids[i]))
            .unwrap_or_default();
        pids.extend(
            children
                .split_whitespace()
                .filter_map(|c| c.parse::<u32>().ok()),
        );
        i += 1;
    }
    for p in pids.iter().rev() {
        let _ = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(p.to_string())
            .status();
    }
}

async fn http_status(port: u16, path: &str) -> Option<u16> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: pod\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(2), s.read_to_end(&mut buf))
        .await
        .ok()?
        .ok()?;
    String::from_utf8_lossy(&buf)
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The shell script that assembles the container's root in a private mount namespace and
/// execs the container process in it.
fn isolation_script(
    spec: &ContainerSpec,
    ctx: &PodContext,
    token_dir: &Path,
) -> anyhow::Result<String> {
    let root = ctx.dir.join("rootfs");
    std::fs::create_dir_all(&root)?;
    let r = root.display().to_string();
    let mut s = Vec::new();
    s.push(format!("R={}", quote(&r)));
    // The script's PATH is the container's; the host tools it needs live in sbin too.
    s.push("CHROOT=$(PATH=/usr/sbin:/sbin:/usr/bin:/bin command -v chroot)".into());
    s.push("mount -t tmpfs -o mode=0755 rootfs \"$R\"".into());
    // A distroless-like image: the host's /usr and /etc, read-only; merged-usr links.
    for dir in ["usr", "etc"] {
        s.push(format!(
            "mkdir -p \"$R/{dir}\" && mount --rbind /{dir} \"$R/{dir}\" && mount -o remount,bind,ro \"$R/{dir}\""
        ));
    }
    for link in ["bin", "lib", "lib64", "sbin"] {
        s.push(format!(
            "if [ -L /{link} ]; then ln -s \"$(readlink /{link})\" \"$R/{link}\"; elif [ -d /{link} ]; then mkdir -p \"$R/{link}\" && mount --rbind /{link} \"$R/{link}\" && mount -o remount,bind,ro \"$R/{link}\"; fi"
        ));
    }
    s.push("mkdir -p \"$R/proc\" \"$R/dev\" && mount --rbind /proc \"$R/proc\" && mount --rbind /dev \"$R/dev\"".into());
    // The image's own files: /usr/local is the image's, not the host's.
    s.push("mount -t tmpfs -o mode=0755 image-usr-local \"$R/usr/local\"".into());
    for (image_path, built) in &ctx.binaries {
        let parent = Path::new(image_path)
            .parent()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "/".into());
        s.push(format!(
            "mkdir -p \"$R{parent}\" && touch \"$R{image_path}\" && mount --bind {} \"$R{image_path}\"",
            quote(&built.display().to_string())
        ));
    }
    let (uid, gid) = spec.run_as.unwrap_or((0, 0));
    for m in &spec.mounts {
        match m {
            Mount::EmptyDir { path } => s.push(format!(
                "mkdir -p \"$R{path}\" && mount -t tmpfs -o mode=0777 emptydir \"$R{path}\" && chown {uid}:{gid} \"$R{path}\""
            )),
            Mount::Files { path, source } => s.push(format!(
                "chown -R {uid}:{gid} {src} && mkdir -p \"$R{path}\" && mount --bind {src} \"$R{path}\" && mount -o remount,bind,ro \"$R{path}\"",
                src = quote(&source.display().to_string())
            )),
        }
    }
    let sa = "/var/run/secrets/kubernetes.io/serviceaccount";
    s.push(format!(
        "chown -R {uid}:{gid} {src} && mkdir -p \"$R{sa}\" && mount --bind {src} \"$R{sa}\" && mount -o remount,bind,ro \"$R{sa}\"",
        src = quote(&token_dir.display().to_string())
    ));
    if spec.read_only_root {
        s.push("mount -o remount,ro \"$R\"".into());
    }
    let argv: Vec<String> = spec
        .command
        .iter()
        .chain(&spec.args)
        .map(|a| quote(a))
        .collect();
    let drop = match spec.run_as {
        Some((u, g)) => format!("/usr/bin/setpriv --reuid={u} --regid={g} --clear-groups -- "),
        None => String::new(),
    };
    s.push(format!(
        "cd / && exec \"$CHROOT\" \"$R\" {drop}{}",
        argv.join(" ")
    ));
    Ok(s.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn listen_addresses_for_all_interfaces_become_loopback() {
        let args: Vec<String> = [
            "run",
            "--metrics-bind-address=:8080",
            "--health-probe-bind-address=0.0.0.0:8081",
            "--webhook-bind-address=[::]:9443",
            "--metrics-bind-address=0",
            "--helm-work-dir=/tmp/x:1",
            "--leader-election-namespace=ops",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            loopback_binds(&args),
            vec![
                "run",
                "--metrics-bind-address=127.0.0.1:8080",
                "--health-probe-bind-address=127.0.0.1:8081",
                "--webhook-bind-address=127.0.0.1:9443",
                "--metrics-bind-address=0",
                "--helm-work-dir=/tmp/x:1",
                "--leader-election-namespace=ops",
            ]
        );
    }

    fn ctx(dir: &Path) -> PodContext {
        PodContext {
            namespace: "ops".into(),
            name: "op-0".into(),
            api: "127.0.0.1:6443".parse().unwrap_or_else(|e| panic!("{e}")),
            api_ca_pem: String::new(),
            token: "t".into(),
            binaries: BTreeMap::new(),
            secrets: BTreeMap::from([(
                "cert".to_string(),
                BTreeMap::from([("tls.crt".to_string(), b"CERT".to_vec())]),
            )]),
            dir: dir.to_path_buf(),
        }
    }

    #[test]
    fn a_deployment_container_is_resolved_as_a_kubelet_would() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let deployment = json!({"spec": {"template": {"spec": {
            "securityContext": {"runAsUser": 65532, "runAsGroup": 65533},
            "terminationGracePeriodSeconds": 12,
            "containers": [{
                "args": ["run", "--x"],
                "env": [
                    {"name": "A", "value": "1"},
                    {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                ],
                "ports": [{"name": "health", "containerPort": 8081}],
                "readinessProbe": {"httpGet": {"path": "/readyz", "port": "health"}},
                "securityContext": {"readOnlyRootFilesystem": true},
                "volumeMounts": [
                    {"name": "scratch", "mountPath": "/tmp/x"},
                    {"name": "certs", "mountPath": "/certs"},
                ],
            }],
            "volumes": [
                {"name": "scratch", "emptyDir": {}},
                {"name": "certs", "secret": {"secretName": "cert"}},
            ],
        }}}});
        let spec = ContainerSpec::from_deployment(&deployment, &ctx(dir.path()))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(spec.command, vec![IMAGE_OPERATOR_PATH.to_string()]);
        assert_eq!(spec.args, vec!["run", "--x"]);
        assert_eq!(
            spec.env,
            vec![
                ("A".into(), "1".into()),
                ("POD_NAMESPACE".into(), "ops".into())
            ]
        );
        assert_eq!(spec.readiness, Some(("/readyz".into(), 8081)));
        assert_eq!(spec.liveness, None);
        assert_eq!(spec.run_as, Some((65532, 65533)));
        assert!(spec.read_only_root);
        assert_eq!(spec.termination_grace, Duration::from_secs(12));
        assert_eq!(spec.mounts.len(), 2);
        let written = std::fs::read(dir.path().join("volume-1-certs/tls.crt"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(written, b"CERT");
    }

    #[test]
    fn unsupported_volume_sources_are_refused() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let deployment = json!({"spec": {"template": {"spec": {
            "containers": [{"volumeMounts": [{"name": "host", "mountPath": "/h"}]}],
            "volumes": [{"name": "host", "hostPath": {"path": "/"}}],
        }}}});
        let err = ContainerSpec::from_deployment(&deployment, &ctx(dir.path()))
            .err()
            .unwrap_or_else(|| panic!("a hostPath volume must be refused"));
        assert!(
            err.to_string().contains("only emptyDir and secret"),
            "{err}"
        );
    }
}
