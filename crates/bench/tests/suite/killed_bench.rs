//! An omni-bench killed outright (SIGKILL, the OOM killer, a CI job's timeout) cannot stop the
//! operator it measures; the kernel must, or the operator keeps running against emulators that
//! are gone. The test runs itself as the bench's stand-in: that process starts a measured
//! process the way the bench starts the operator, and is then killed.

use std::io::{BufRead as _, BufReader};
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use omni_bench::operator::OperatorProcess;

/// The test's name as libtest knows it in the suite binary (module path included).
const TEST: &str = "killed_bench::a_killed_bench_takes_its_operator_with_it";
/// Set in the stand-in process: the directory it works in.
const STAND_IN: &str = "OMNI_BENCH_TEST_STAND_IN_DIR";
/// How long the measured process would live on its own (so a failed test leaves nothing for long).
const SLEEP_SECS: u32 = 120;

#[test]
fn a_killed_bench_takes_its_operator_with_it() {
    if let Some(dir) = std::env::var_os(STAND_IN) {
        stand_in(Path::new(&dir));
        return;
    }
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
    let mut bench = Command::new(exe)
        .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env(STAND_IN, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting the stand-in: {e}"));
    let stdout = bench.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let child: u32 = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        // libtest's "test NAME ... " precedes it on the same line.
        .find_map(|l| {
            l.rsplit_once("measured pid ")
                .and_then(|(_, p)| p.parse().ok())
        })
        .unwrap_or_else(|| panic!("the stand-in never started its measured process"));
    assert!(
        alive(child),
        "the measured process runs while the bench does"
    );

    bench
        .kill()
        .unwrap_or_else(|e| panic!("SIGKILL the stand-in: {e}"));
    bench
        .wait()
        .unwrap_or_else(|e| panic!("reap the stand-in: {e}"));

    let until = Instant::now() + Duration::from_secs(10);
    while alive(child) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    let survived = alive(child);
    if survived {
        // SAFETY: kill(2) with a pid we just read; at worst it names no process.
        unsafe {
            libc::kill(child as libc::pid_t, libc::SIGKILL);
        }
    }
    assert!(
        !survived,
        "the measured process outlived the killed bench by 10 s"
    );
}

/// The bench's stand-in: starts a measured process, says its pid, and waits to be killed.
fn stand_in(dir: &Path) {
    let program = dir.join("operator");
    std::fs::write(&program, format!("#!/bin/sh\nexec sleep {SLEEP_SECS}\n"))
        .unwrap_or_else(|e| panic!("write {}: {e}", program.display()));
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("chmod: {e}"));
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, "").unwrap_or_else(|e| panic!("write kubeconfig: {e}"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    runtime.block_on(async {
        let measured = OperatorProcess::start(&program, &kubeconfig, dir, None, None)
            .unwrap_or_else(|e| panic!("start: {e:#}"));
        println!("measured pid {}", measured.pid());
        tokio::time::sleep(Duration::from_secs(u64::from(SLEEP_SECS))).await;
    });
}

/// Whether `pid` is a live process (a zombie waiting for its reaper is not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .next()?
                .to_owned();
            Some(state != "Z" && state != "X")
        })
        .unwrap_or(false)
}
