//! The operator under test as a child process (`omni-operator run`, leader election off, no
//! webhook or probe servers), measured from `/proc` alone: CPU time and resident memory.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;

use crate::fleet;

/// A running operator process.
pub struct OperatorProcess {
    child: tokio::process::Child,
    pid: u32,
    /// Where its log goes.
    pub log: PathBuf,
}

/// CPU and memory of a process at one moment, from `/proc/<pid>/stat` and `status`.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct ProcSample {
    /// User + system CPU time so far, in seconds.
    pub cpu_secs: f64,
    /// Resident set size now, in bytes.
    pub rss_bytes: u64,
    /// Peak resident set size so far, in bytes.
    pub peak_rss_bytes: u64,
    /// Open sockets now (its connections to the API servers and Omni, and its listeners).
    pub sockets: u64,
}

/// Finds the `omni-operator` binary: the given path, or the one beside this executable (after
/// `cargo build [--release] -p omni-operator`, which `omni-bench` runs itself when started by
/// cargo so the binary is never stale).
pub fn locate_binary(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = explicit {
        anyhow::ensure!(
            p.is_file(),
            "--operator-binary {} does not exist",
            p.display()
        );
        return Ok(p.to_path_buf());
    }
    let exe = std::env::current_exe()?;
    let dir = exe.parent().context("this executable has no directory")?;
    // Test executables live one level deeper, in target/<profile>/deps.
    let profile_dir = if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().unwrap_or(dir)
    } else {
        dir
    };
    let binary = profile_dir.join("omni-operator");
    anyhow::ensure!(
        binary.is_file(),
        "{} is missing: build it with `cargo build --release -p omni-operator` or pass --operator-binary",
        binary.display()
    );
    Ok(binary)
}

impl OperatorProcess {
    /// Starts `binary run` against the kubeconfig, watching the fleet's namespace.
    pub fn start(
        binary: &Path,
        kubeconfig: &Path,
        work_dir: &Path,
        helm: Option<&Path>,
        baseline_quirks: Option<&str>,
    ) -> anyhow::Result<Self> {
        let quirks = baseline_quirks.map(|q| format!("--baseline-quirks={q}"));
        Self::start_with(binary, kubeconfig, work_dir, helm, quirks.as_slice())
    }

    /// [`OperatorProcess::start`] with `extra` arguments, its log and helm state in `work_dir`
    /// (one directory per process when several run, as with `--shards`).
    pub fn start_with(
        binary: &Path,
        kubeconfig: &Path,
        work_dir: &Path,
        helm: Option<&Path>,
        extra: &[String],
    ) -> anyhow::Result<Self> {
        let helm_dir = work_dir.join("helm");
        std::fs::create_dir_all(&helm_dir)?;
        let mut cmd = tokio::process::Command::new(binary);
        cmd.arg("run")
            .arg("--namespace")
            .arg(fleet::NAMESPACE)
            .args(["--metrics-bind-address", "0"])
            .args(["--health-probe-bind-address", "0"])
            .arg("--webhook-enabled=false")
            .arg("--helm-work-dir")
            .arg(&helm_dir)
            .arg("--helm-binary")
            .arg(helm.unwrap_or(Path::new("helm")))
            .args(extra);
        Self::spawn(cmd, &[], kubeconfig, work_dir, "operator.log")
    }

    /// Starts the original implementation's binary (a controller-runtime manager built from its
    /// source, docs/performance.md) the way its chart runs it, against the same kubeconfig:
    /// leader election off (its default), no webhooks, metrics and probes off, watching the
    /// fleet's namespace, logging only errors (the operator runs at `warn`).
    pub fn start_original(
        binary: &Path,
        kubeconfig: &Path,
        work_dir: &Path,
    ) -> anyhow::Result<Self> {
        let mut cmd = tokio::process::Command::new(binary);
        cmd.args([
            "--metrics-bind-address=0",
            "--health-probe-bind-address=0",
            "--zap-devel=false",
            "--zap-log-level=error",
        ]);
        let home = work_dir.to_string_lossy();
        let env = [
            // Outside a pod it learns its namespace from here, and watches only that one.
            ("POD_NAMESPACE", fleet::NAMESPACE),
            ("ENABLE_WEBHOOKS", "false"),
            // The Helm SDK keeps its caches under the home directory.
            ("HOME", home.as_ref()),
        ];
        Self::spawn(cmd, &env, kubeconfig, work_dir, "original.log")
    }

    /// Starts `bench_binary` (`omni-bench`) as the null operator ([`crate::null_operator`]),
    /// measured the same way.
    pub fn start_null(
        bench_binary: &Path,
        kubeconfig: &Path,
        work_dir: &Path,
    ) -> anyhow::Result<Self> {
        let cmd = tokio::process::Command::new(bench_binary);
        let role = [(crate::null_operator::ENV, "1")];
        Self::spawn(cmd, &role, kubeconfig, work_dir, "null-operator.log")
    }

    /// Spawns `cmd` with only the environment a measured process needs (plus `extra`), its
    /// output going to `work_dir/log_name`.
    fn spawn(
        mut cmd: tokio::process::Command,
        extra: &[(&str, &str)],
        kubeconfig: &Path,
        work_dir: &Path,
        log_name: &str,
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(work_dir)?;
        let log = work_dir.join(log_name);
        let log_file =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        cmd.env_clear()
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "warn")
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("TMPDIR", work_dir)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file)
            .kill_on_drop(true)
            // Its own process group, so stopping it also stops what a wrapper started: a
            // profiler such as heaptrack runs the operator as its child, and that child, not
            // signalled, went on running (and using the cores) through the next runs.
            .process_group(0);
        cmd.envs(extra.iter().copied());
        // An omni-bench killed outright (SIGKILL, the OOM killer, a CI timeout) cannot stop
        // its child, so the kernel does: the child gets SIGKILL when the thread that spawned it
        // ends. That is a Tokio worker or the main thread, which live as long as the process.
        let parent = std::process::id();
        // SAFETY: the closure runs in the forked child before exec and calls only
        // async-signal-safe functions (prctl, getppid), allocating nothing.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent may have died before the prctl: then no signal would come.
                if libc::getppid() as u32 != parent {
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
        let program = cmd.as_std().get_program().to_owned();
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", program.to_string_lossy()))?;
        let pid = child.id().context("the process exited at once")?;
        Ok(Self { child, pid, log })
    }

    /// Its process ID.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// CPU and memory now.
    pub fn sample(&self) -> anyhow::Result<ProcSample> {
        proc_sample(self.pid)
    }

    /// Fails when the process has exited (with the end of its log).
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            anyhow::bail!("the operator exited with {status}:\n{}", tail.join("\n"));
        }
        Ok(())
    }

    /// Stops it and every process it started: SIGTERM to its process group, then, once it has
    /// exited (or after 10 s), SIGKILL to whatever of the group is left.
    pub async fn stop(mut self) {
        signal_group(self.pid, libc::SIGTERM);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        // Not reaped yet: while it is a zombie its pid, and so the group's id, cannot be given
        // to another process, so the SIGKILL below reaches only what it started.
        while !has_exited(self.pid) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        signal_group(self.pid, libc::SIGKILL);
        let _ = self.child.wait().await;
    }
}

impl Drop for OperatorProcess {
    /// A run that fails midway drops its processes without [`OperatorProcess::stop`]: the whole
    /// group goes, not only the child (`kill_on_drop`).
    fn drop(&mut self) {
        // `id()` is `None` once the child has been reaped, when its group id may be reused.
        if self.child.id().is_some() {
            signal_group(self.pid, libc::SIGKILL);
        }
    }
}

/// Sends `signal` to the process group led by `leader`, one of our children not yet reaped.
fn signal_group(leader: u32, signal: libc::c_int) {
    // SAFETY: kill(2) has no memory-safety preconditions; a negative pid names a group.
    unsafe {
        libc::kill(-(leader as libc::pid_t), signal);
    }
}

/// Whether the process `pid` has exited: gone, or a zombie waiting to be reaped.
fn has_exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => true,
    }
}

/// Reads one process's CPU time and memory from `/proc`.
pub fn proc_sample(pid: u32) -> anyhow::Result<ProcSample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .context("malformed /proc/pid/stat")?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat(5); `after` starts at field 3.
    let ticks = |i: usize| -> anyhow::Result<f64> {
        Ok(fields
            .get(i - 3)
            .context("short /proc/pid/stat")?
            .parse::<f64>()?)
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let cpu_secs = (ticks(14)? + ticks(15)?) / hz;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib = |key: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    Ok(ProcSample {
        cpu_secs,
        rss_bytes: kib("VmRSS:"),
        peak_rss_bytes: kib("VmHWM:"),
        sockets: open_sockets(pid),
    })
}

/// The process's open file descriptors that are sockets.
fn open_sockets(pid: u32) -> u64 {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    fds.filter_map(Result::ok)
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter(|target| target.to_string_lossy().starts_with("socket:"))
        .count() as u64
}

/// CPU time this process (the bench with its emulators) has used, in seconds.
pub fn own_cpu_secs() -> f64 {
    proc_sample(std::process::id())
        .map(|s| s.cpu_secs)
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wrapper (here a shell; in practice a profiler) that starts the real process as its
    /// child: stopping the measured process stops that child too. Before the measured process
    /// had its own group, the child outlived the run (found when heaptrack's child went on
    /// using the cores through the runs after it).
    #[tokio::test]
    async fn stopping_a_wrapper_stops_what_it_started() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("child.pid");
        let mut cmd = tokio::process::Command::new("/bin/sh");
        cmd.arg("-c").arg(format!(
            "sleep 300 & echo $! > {}.tmp && mv {0}.tmp {0}; wait",
            pid_file.display()
        ));
        let process =
            OperatorProcess::spawn(cmd, &[], Path::new("/dev/null"), dir.path(), "w.log").unwrap();
        let started = std::time::Instant::now();
        let child: u32 = loop {
            if let Ok(text) = std::fs::read_to_string(&pid_file) {
                break text.trim().parse().unwrap();
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "no child started"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert!(!has_exited(child), "the wrapper's child is running");
        process.stop().await;
        // The signal is delivered before kill(2) returns; the exit itself may take a moment.
        let stopped = std::time::Instant::now();
        while !has_exited(child) && stopped.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            has_exited(child),
            "the wrapper's child {child} outlived the stop"
        );
    }

    #[test]
    fn reads_its_own_cpu_and_memory() {
        // Burn CPU until the kernel has accounted some (at 100 Hz, a tick): a fixed 50 ms of
        // wall time was not enough on a loaded machine, where this thread may get no tick in
        // it. A reader that never sees CPU fails after 10 s.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let start = std::time::Instant::now();
        let mut x = 0u64;
        let s = loop {
            for _ in 0..1_000_000 {
                x = x.wrapping_mul(31).wrapping_add(7);
            }
            std::hint::black_box(x);
            let s = proc_sample(std::process::id()).unwrap();
            if s.cpu_secs > 0.0 || start.elapsed() > Duration::from_secs(10) {
                break s;
            }
        };
        drop(listener);
        assert!(s.sockets >= 1, "{s:?}");
        assert!(s.cpu_secs > 0.0, "{s:?}");
        assert!(s.rss_bytes > 0 && s.peak_rss_bytes >= s.rss_bytes, "{s:?}");
    }
}
