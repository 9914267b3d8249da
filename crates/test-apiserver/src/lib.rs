//! test-apiserver: a real control plane for tests — etcd and kube-apiserver built from upstream
//! by `scripts/install-test-tools`, started on loopback with a throwaway CA, client-certificate
//! and service-account-token authentication, `Node,RBAC` authorization and the default admission
//! plugins (webhooks included), and stopped (killed) when dropped. What envtest is to
//! controller-runtime.
//!
//! ```no_run
//! # async fn demo() -> Result<(), test_apiserver::Error> {
//! let cp = test_apiserver::ControlPlane::start().await?;
//! let admin = cp.admin_client().await?; // system:masters
//! // helm / kubectl: cp.admin_kubeconfig_path()
//! # Ok(()) }
//! ```
//!
//! There is no kube-controller-manager: namespaces are not emptied when deleted (a test that
//! deletes one does the namespace controller's part), there is no garbage collector, and no
//! `default` ServiceAccount appears in new namespaces. Admission webhooks referring to a
//! Service reach the test process through [`ControlPlane::route_service`].

#![warn(missing_docs, unreachable_pub)]

mod binaries;
mod egress;
mod pki;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

pub use binaries::{Component, cache_root, repo_root};
pub use pki::{Authority, KeyPairPem};

/// Why a control plane could not be started or used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A binary is not built yet.
    #[error(
        "{program} not found at {}: run scripts/install-test-tools (it builds the real control \
         plane once per machine), or set {env_var}",
        path.display()
    )]
    MissingBinary {
        /// `kube-apiserver` or `etcd`.
        program: &'static str,
        /// Where it was looked for.
        path: PathBuf,
        /// The override variable.
        env_var: &'static str,
    },
    /// The pinned version could not be read.
    #[error("no `require {module} v…` line in {}", go_mod.display())]
    Pin {
        /// The module looked for.
        module: &'static str,
        /// The go.mod read.
        go_mod: PathBuf,
    },
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Key or certificate generation failed.
    #[error("generating key material: {0}")]
    Pki(#[from] rcgen::Error),
    /// A process exited or the API server never became ready.
    #[error("{0}")]
    Start(String),
    /// A client could not be built or a request failed.
    #[error("{what}: {source}")]
    Client {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// How long the API server may take to become ready: it takes a few seconds, but the machine
/// is shared with compilers and other tests.
const READY_WITHIN: Duration = Duration::from_secs(90);
/// Attempts with fresh ports, for the rare port taken between choosing and binding it.
const ATTEMPTS: usize = 3;
/// The admin user (client certificate, `system:masters`).
pub const ADMIN_USER: &str = "omni-test-admin";
/// The service-account token issuer (the API server's audience too).
pub const SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// A running etcd and kube-apiserver. Dropping it kills both and removes their files.
pub struct ControlPlane {
    /// `https://127.0.0.1:<port>`.
    pub url: String,
    /// The CA that signed the API server's certificate and every client certificate.
    pub authority: Authority,
    admin: KeyPairPem,
    routes: egress::Routes,
    egress: Option<tokio::task::JoinHandle<()>>,
    processes: Vec<Child>,
    started_in: Duration,
    dir: tempfile::TempDir,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("url", &self.url)
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if let Some(task) = self.egress.take() {
            task.abort();
        }
        // The API server first, so it does not log etcd's disappearance; then wait, so the
        // temporary directory is not removed under a live etcd.
        for child in self.processes.iter_mut().rev() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A loopback port that was free a moment ago.
fn free_port() -> Result<u16, Error> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(io("choosing a port"))?;
    Ok(listener.local_addr().map_err(io("choosing a port"))?.port())
}

/// Spawns `program args…` with its output in `<dir>/<name>.log`, killed with the test process
/// (`PR_SET_PDEATHSIG` fires when the spawning thread ends: [`ControlPlane::start`] is awaited by
/// the test that owns the control plane, and a test's thread outlives what it owns).
fn spawn(program: &Path, args: &[String], dir: &Path, name: &str) -> Result<Child, Error> {
    let log = std::fs::File::create(dir.join(format!("{name}.log")))
        .map_err(io(format!("creating the {name} log")))?;
    let err = log.try_clone().map_err(io(format!("the {name} log")))?;
    let mut command = Command::new(program);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        .current_dir(dir);
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt as _;
        // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe, takes no pointers and touches
        // nothing of the parent's state.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
    }
    command
        .spawn()
        .map_err(io(format!("starting {}", program.display())))
}

/// The last lines of a process log, for a start-up error.
fn log_tail(dir: &Path, name: &str) -> String {
    let text = std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(25)..].join("\n")
}

/// A kubeconfig for `server` trusting `ca_pem`, with `user`'s credentials (YAML).
fn kubeconfig(server: &str, ca_pem: &str, user: &str, credentials: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {server}\n    \
         certificate-authority-data: {ca}\nusers:\n- name: {user}\n  user:\n{credentials}\
         contexts:\n- name: test\n  context:\n    cluster: test\n    user: {user}\n\
         current-context: test\n",
        ca = STANDARD.encode(ca_pem),
    )
}

/// A kube client configured by a kubeconfig (YAML).
pub async fn client_from_kubeconfig(yaml: &str) -> Result<kube::Client, Error> {
    let parsed = kube::config::Kubeconfig::from_yaml(yaml).map_err(|e| Error::Client {
        what: "parsing a kubeconfig".into(),
        source: kube::Error::InferKubeconfig(e),
    })?;
    let config = kube::Config::from_custom_kubeconfig(parsed, &Default::default())
        .await
        .map_err(|e| Error::Client {
            what: "reading a kubeconfig".into(),
            source: kube::Error::InferKubeconfig(e),
        })?;
    kube::Client::try_from(config).map_err(|source| Error::Client {
        what: "building a client".into(),
        source,
    })
}

impl ControlPlane {
    /// Starts etcd and kube-apiserver and waits until the API server is ready (`/readyz`),
    /// which includes its bootstrap RBAC policy. Fails with instructions when the binaries
    /// are not built.
    pub async fn start() -> Result<Self, Error> {
        let apiserver = Component::KubeApiserver.binary()?;
        let etcd = Component::Etcd.binary()?;
        let mut last = None;
        for _ in 0..ATTEMPTS {
            match Self::start_once(&apiserver, &etcd).await {
                Ok(cp) => return Ok(cp),
                Err(e @ Error::Start(_)) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::Start("no attempt was made".into())))
    }

    async fn start_once(apiserver: &Path, etcd: &Path) -> Result<Self, Error> {
        let began = Instant::now();
        let dir = tempfile::Builder::new()
            .prefix("test-apiserver-")
            .tempdir()
            .map_err(io("creating the control plane's directory"))?;
        let path = |name: &str| dir.path().join(name);
        let text = |p: &Path| p.display().to_string();

        let authority = Authority::generate()?;
        let serving = authority.server(&[
            "127.0.0.1",
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
        ])?;
        let admin = authority.client(ADMIN_USER, &["system:masters"])?;
        let (signing_key, verifying_key) = pki::signing_key()?;
        let files = [
            ("ca.crt", authority.cert_pem()),
            ("apiserver.crt", serving.cert_pem.clone()),
            ("apiserver.key", serving.key_pem.clone()),
            ("service-account.key", signing_key),
            ("service-account.pub", verifying_key),
        ];
        for (name, content) in &files {
            write_private(&path(name), content)?;
        }
        let socket = path("egress.sock");
        write_private(
            &path("egress.yaml"),
            &format!(
                "apiVersion: apiserver.k8s.io/v1beta1\nkind: EgressSelectorConfiguration\n\
                 egressSelections:\n- name: cluster\n  connection:\n    proxyProtocol: HTTPConnect\n    \
                 transport:\n      uds:\n        udsName: {}\n",
                socket.display()
            ),
        )?;

        let (etcd_client, etcd_peer, secure) = (free_port()?, free_port()?, free_port()?);
        let client_url = format!("http://127.0.0.1:{etcd_client}");
        let peer_url = format!("http://127.0.0.1:{etcd_peer}");
        let etcd_args: Vec<String> = [
            "--name=test".to_string(),
            format!("--data-dir={}", text(&path("etcd"))),
            format!("--listen-client-urls={client_url}"),
            format!("--advertise-client-urls={client_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=test={peer_url}"),
            // A throwaway store: durability costs start-up and write time and buys nothing.
            "--unsafe-no-fsync".to_string(),
            "--log-level=warn".to_string(),
        ]
        .into();
        let url = format!("https://127.0.0.1:{secure}");
        let apiserver_args: Vec<String> = [
            format!("--etcd-servers={client_url}"),
            "--bind-address=127.0.0.1".to_string(),
            "--advertise-address=127.0.0.1".to_string(),
            format!("--secure-port={secure}"),
            format!("--tls-cert-file={}", text(&path("apiserver.crt"))),
            format!("--tls-private-key-file={}", text(&path("apiserver.key"))),
            format!("--client-ca-file={}", text(&path("ca.crt"))),
            "--authorization-mode=Node,RBAC".to_string(),
            format!("--service-account-issuer={SERVICE_ACCOUNT_ISSUER}"),
            format!(
                "--service-account-key-file={}",
                text(&path("service-account.pub"))
            ),
            format!(
                "--service-account-signing-key-file={}",
                text(&path("service-account.key"))
            ),
            "--service-cluster-ip-range=10.0.0.0/24".to_string(),
            format!(
                "--egress-selector-config-file={}",
                text(&path("egress.yaml"))
            ),
            "--profiling=false".to_string(),
            format!("--cert-dir={}", text(&path("certs"))),
        ]
        .into();

        let mut processes = vec![spawn(etcd, &etcd_args, dir.path(), "etcd")?];
        processes.push(spawn(
            apiserver,
            &apiserver_args,
            dir.path(),
            "kube-apiserver",
        )?);
        let mut cp = ControlPlane {
            url,
            authority,
            admin,
            routes: egress::Routes::default(),
            egress: None,
            processes,
            started_in: Duration::ZERO,
            dir,
        };
        write_private(
            &cp.admin_kubeconfig_path(),
            &cp.kubeconfig_with_certificate(&cp.admin),
        )?;
        let admin_client = cp.admin_client().await?;
        cp.egress = Some(
            egress::serve(&socket, cp.routes.clone(), admin_client.clone())
                .map_err(io("serving the egress socket"))?,
        );
        cp.wait_ready(&admin_client).await?;
        cp.started_in = began.elapsed();
        Ok(cp)
    }

    async fn wait_ready(&mut self, admin: &kube::Client) -> Result<(), Error> {
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            for (i, name) in ["etcd", "kube-apiserver"].iter().enumerate() {
                if let Ok(Some(status)) = self.processes[i].try_wait() {
                    return Err(Error::Start(format!(
                        "{name} exited ({status}):\n{}",
                        log_tail(self.dir.path(), name)
                    )));
                }
            }
            let request = http::Request::get("/readyz").body(Vec::new());
            if let Ok(request) = request
                && admin.request_text(request).await.is_ok()
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::Start(format!(
                    "kube-apiserver not ready after {READY_WITHIN:?}:\n{}",
                    log_tail(self.dir.path(), "kube-apiserver")
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// How long [`ControlPlane::start`] took for this instance (processes to `/readyz`).
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// The CA certificate, PEM.
    pub fn ca_pem(&self) -> String {
        self.authority.cert_pem()
    }

    /// The directory holding the logs (`etcd.log`, `kube-apiserver.log`) and kubeconfigs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The API server's log so far (for a failing test's message).
    pub fn apiserver_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("kube-apiserver.log")).unwrap_or_default()
    }

    /// A kubeconfig authenticating with a client certificate.
    pub fn kubeconfig_with_certificate(&self, identity: &KeyPairPem) -> String {
        let credentials = format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            STANDARD.encode(&identity.cert_pem),
            STANDARD.encode(&identity.key_pem)
        );
        kubeconfig(&self.url, &self.ca_pem(), "user", &credentials)
    }

    /// A kubeconfig authenticating with a bearer token.
    pub fn kubeconfig_with_token(&self, token: &str) -> String {
        kubeconfig(
            &self.url,
            &self.ca_pem(),
            "user",
            &format!("    token: {token}\n"),
        )
    }

    /// The admin kubeconfig file (mode 0600), for helm and kubectl.
    pub fn admin_kubeconfig_path(&self) -> PathBuf {
        self.dir.path().join("admin.kubeconfig")
    }

    /// A client authenticated as [`ADMIN_USER`] in `system:masters`.
    pub async fn admin_client(&self) -> Result<kube::Client, Error> {
        client_from_kubeconfig(&self.kubeconfig_with_certificate(&self.admin)).await
    }

    /// A client authenticated by a client certificate as `user` in `groups` (at most two).
    pub async fn user_client(&self, user: &str, groups: &[&str]) -> Result<kube::Client, Error> {
        let identity = self.authority.client(user, groups)?;
        client_from_kubeconfig(&self.kubeconfig_with_certificate(&identity)).await
    }

    /// A token of ServiceAccount `namespace/name` from the TokenRequest API, valid for an hour:
    /// what the kubelet projects into a pod.
    pub async fn service_account_token(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<String, Error> {
        let admin = self.admin_client().await?;
        let body = serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        });
        let request = http::Request::post(format!(
            "/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"
        ))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body.to_string().into_bytes())
        .map_err(|e| Error::Start(format!("building a TokenRequest: {e}")))?;
        let answer: serde_json::Value =
            admin
                .request(request)
                .await
                .map_err(|source| Error::Client {
                    what: format!("requesting a token for {namespace}/{name}"),
                    source,
                })?;
        answer["status"]["token"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| Error::Start(format!("TokenRequest answered without a token: {answer}")))
    }

    /// A client authenticated as ServiceAccount `namespace/name` (see
    /// [`ControlPlane::service_account_token`]).
    pub async fn service_account_client(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<kube::Client, Error> {
        let token = self.service_account_token(namespace, name).await?;
        client_from_kubeconfig(&self.kubeconfig_with_token(&token)).await
    }

    /// Makes port `port` of Service `namespace/name` reach `to` in this process, for the API
    /// server's calls to admission webhooks that refer to the Service.
    pub fn route_service(&self, namespace: &str, name: &str, port: u16, to: SocketAddr) {
        if let Ok(mut routes) = self.routes.lock() {
            routes.insert((namespace.to_string(), name.to_string(), port), to);
        }
    }
}

fn write_private(path: &Path, content: &str) -> Result<(), Error> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(io(format!("writing {}", path.display())))?;
    file.write_all(content.as_bytes())
        .map_err(io(format!("writing {}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tier's premise: both processes start, the admin is `system:masters`, a
    /// ServiceAccount token authenticates and RBAC denies it what no role grants, and dropping
    /// the control plane kills both processes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn starts_authenticates_authorizes_and_stops() {
        let cp = ControlPlane::start()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        eprintln!("control plane ready in {:?}", cp.started_in());
        let admin = cp.admin_client().await.expect("admin client");
        let version = admin.apiserver_version().await.expect("version");
        assert_eq!(
            format!("{}.{}", version.major, version.minor),
            "1.35",
            "{version:?}"
        );

        let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
            kube::Api::all(admin.clone());
        let ns = serde_json::from_value(serde_json::json!({"metadata": {"name": "t"}}))
            .expect("namespace");
        namespaces
            .create(&Default::default(), &ns)
            .await
            .expect("admin creates a namespace");
        let accounts: kube::Api<k8s_openapi::api::core::v1::ServiceAccount> =
            kube::Api::namespaced(admin.clone(), "t");
        let sa = serde_json::from_value(serde_json::json!({"metadata": {"name": "robot"}}))
            .expect("service account");
        accounts
            .create(&Default::default(), &sa)
            .await
            .expect("admin creates a ServiceAccount");
        let robot = cp
            .service_account_client("t", "robot")
            .await
            .expect("token client");
        let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
            kube::Api::namespaced(robot, "t");
        match secrets.list(&Default::default()).await {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 403, "{status:?}");
                assert!(
                    status.message.contains(
                        "system:serviceaccount:t:robot\" cannot list resource \"secrets\""
                    ),
                    "{}",
                    status.message
                );
            }
            other => panic!("RBAC must refuse the ServiceAccount: {other:?}"),
        }

        let pids: Vec<u32> = cp.processes.iter().map(Child::id).collect();
        drop(cp);
        for pid in pids {
            assert!(
                !Path::new(&format!("/proc/{pid}")).exists()
                    || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                        .is_ok_and(|s| s.contains(") Z ")),
                "process {pid} outlived its control plane"
            );
        }
    }
}
