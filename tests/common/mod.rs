// SPDX-License-Identifier: MIT
//! Helpers shared by the integration tests (which run as root: they load
//! real BPF programs into the running kernel).
// Each test binary compiles this module and uses only some of it.
#![allow(dead_code)]

pub mod kmsg;
pub mod prometheus;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Whether this build has the mutation switches (the cargo feature
/// `test-hooks`, Cargo.toml; scripts/test.sh builds the tests with it):
/// without them a test's mutation half cannot run, and is skipped, saying
/// which.
pub fn test_hooks(mutation: &str) -> bool {
    let on = cfg!(feature = "test-hooks");
    if !on {
        eprintln!("SKIPPED the mutation ({mutation}): built without --features test-hooks");
    }
    on
}

/// Field `k` of a JSON object as a number; a missing or non-numeric field
/// fails the test, naming the field and the object.
pub fn u(v: &serde_json::Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("field {k} missing or not a number in {v}"))
}

/// Probe `name` in the last JSON report of `lines`, if it is there.
pub fn last_probe<'a>(lines: &'a [serde_json::Value], name: &str) -> Option<&'a serde_json::Value> {
    lines.last()?["probes"].as_array()?.iter().find(|p| p["name"] == name)
}

/// [`last_probe`], failing the test (naming the probe) when it is missing.
pub fn expect_last_probe<'a>(lines: &'a [serde_json::Value], name: &str) -> &'a serde_json::Value {
    last_probe(lines, name).unwrap_or_else(|| panic!("no probe {name} in the last report"))
}

/// One test at a time among the tests that pin a CPU, busy-wait at
/// SCHED_FIFO or time their own control loops (anatomy, func, timer), when
/// they share a process (`cargo test`: a binary's tests are threads).
/// Under nextest each test is its own process and .config/nextest.toml
/// runs these alone (`threads-required`), which this lock cannot see.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// `name` in this process's scratch directory for `tag` (created): the
/// test command gives each run its own TMPDIR, removed when it ends.
pub fn scratch(tag: &str, name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("latmon-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// A Hello for hand-made frame streams: board `board`, 1 s intervals,
/// `probes` as its table.
pub fn hello(board: &str, probes: Vec<latmon_core::wire::ProbeDesc>) -> latmon_core::wire::Hello {
    latmon_core::wire::Hello {
        protocol_revision: latmon_core::wire::PROTOCOL_REVISION,
        latmon_version: "0.1.0".into(),
        board: board.into(),
        kernel: "6.18".into(),
        boot_id: 42,
        start_ns: 1,
        interval_ns: 1_000_000_000,
        probe_count: probes.len() as u16,
        probes,
        thresholds: Vec::new(),
        certificate: None,
    }
}

pub fn latmon() -> Command {
    Command::new(env!("CARGO_BIN_EXE_latmon"))
}

/// How long a starting `latmon run` may take to say it is ready: a hang
/// guard, well inside nextest's 10 minutes.
pub const READY_WITHIN: Duration = Duration::from_secs(120);

/// Start `latmon run ARGS -v` and wait until it is ready (see
/// [`spawn_ready`]). Returns the child with stdout piped.
pub fn start_run(args: &[&str]) -> Child {
    start_run_env(args, &[])
}

/// `start_run` with extra environment variables.
pub fn start_run_env(args: &[&str], env: &[(&str, &str)]) -> Child {
    let mut cmd = latmon();
    cmd.envs(env.iter().copied()).arg("-v").arg("run").args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    // A guard against a latmon that never gets ready, not a measure: the
    // verifier's time for the no-BTF runq program passed 20 s once in CI
    // beside the supervisor test's qemu (FLAKY; 4 s on its retry).
    let (mut child, _) = spawn_ready(cmd, READY_WITHIN, |line| eprintln!("[latmon] {line}"));
    drain_stdout(&mut child);
    child
}

/// Spawn `cmd` (a `latmon run`, stderr piped) and wait until it says it is
/// ready the way it says so to systemd: `READY=1` on `$NOTIFY_SOCKET`,
/// sent once every probe has been opened (attached or failed) and the
/// privileges are dropped (src/agent/run.rs). Returns early if latmon exits
/// (the test then sees why); kills it and panics after `within`. Every
/// stderr line goes to `on_line`, from a thread, for as long as latmon
/// runs. Also returns the notification (`READY=1\nSTATUS=monitoring N
/// probes\n...`, empty if latmon exited first): see [`monitoring`].
pub fn spawn_ready(mut cmd: Command, within: Duration, on_line: impl Fn(&str) + Send + 'static) -> (Child, String) {
    use std::sync::atomic::{AtomicU32, Ordering};
    static SOCKETS: AtomicU32 = AtomicU32::new(0);
    let path = std::env::temp_dir().join(format!(
        "latmon-ready-{}-{}.sock",
        std::process::id(),
        SOCKETS.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_file(&path);
    let sock = std::os::unix::net::UnixDatagram::bind(&path).expect("bind the readiness socket");
    sock.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let mut child = cmd.env("NOTIFY_SOCKET", &path).spawn().expect("spawn latmon");
    let stderr = child.stderr.take().expect("stderr piped");
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            on_line(&line);
        }
    });
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 512];
    let mut note = String::new();
    let ready = loop {
        if let Ok(n) = sock.recv(&mut buf) {
            if buf[..n].starts_with(b"READY=1") {
                note = String::from_utf8_lossy(&buf[..n]).into_owned();
                break true;
            }
        }
        if matches!(child.try_wait(), Ok(Some(_))) {
            break true; // exited: the caller's assertions say why
        }
        if Instant::now() >= deadline {
            break false;
        }
    };
    // latmon's later notifications (STOPPING=1) then find no socket: it
    // only logs that (at debug level).
    drop(sock);
    let _ = std::fs::remove_file(&path);
    if !ready {
        // Not left running behind the failed test.
        let _ = child.kill();
        let _ = child.wait();
        panic!("latmon was not ready (READY=1 on NOTIFY_SOCKET) within {within:?}");
    }
    (child, note)
}

/// The number of probes attached, from the readiness notification's
/// `STATUS=monitoring N probes` (src/agent/run.rs); None if it has none.
pub fn monitoring(note: &str) -> Option<usize> {
    note.lines().find_map(|l| l.strip_prefix("STATUS=monitoring ")?.strip_suffix(" probes")?.parse().ok())
}

/// stdout of running children (pid, what arrived so far, reader thread).
type Drain = (u32, std::sync::Arc<std::sync::Mutex<Vec<u8>>>, std::thread::JoinHandle<()>);
static STDOUT: std::sync::Mutex<Vec<Drain>> = std::sync::Mutex::new(Vec::new());

/// Read the child's stdout as it comes, in a thread (`stdout_so_far` shows
/// it, `finish` collects it): a pipe nobody reads fills after ~64 KiB, and
/// latmon then drops - and counts - what stdout cannot take, as it does for
/// any slow sink.
fn drain_stdout(child: &mut Child) {
    let Some(mut out) = child.stdout.take() else { return };
    let buf = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let b = std::sync::Arc::clone(&buf);
    let reader = std::thread::spawn(move || {
        let mut chunk = [0u8; 8192];
        while let Ok(n @ 1..) = out.read(&mut chunk) {
            b.lock().unwrap().extend_from_slice(&chunk[..n]);
        }
    });
    STDOUT.lock().unwrap().push((child.id(), buf, reader));
}

/// What a `start_run` child printed on stdout so far.
pub fn stdout_so_far(child: &Child) -> String {
    let drains = STDOUT.lock().unwrap();
    let (_, buf, _) = drains.iter().find(|(pid, _, _)| *pid == child.id()).expect("a start_run child");
    let text = String::from_utf8_lossy(&buf.lock().unwrap()).into_owned();
    text
}

/// Wait for the child, return (exit status, stdout). Then fails the test
/// if the kernel logged a splat since the test process started
/// ([`kmsg::check_process`]; issue 39).
pub fn finish(child: Child) -> (std::process::ExitStatus, String) {
    let done = finish_child(child);
    kmsg::check_process();
    done
}

fn finish_child(mut child: Child) -> (std::process::ExitStatus, String) {
    let drain = {
        let mut drains = STDOUT.lock().unwrap();
        drains.iter().position(|(pid, _, _)| *pid == child.id()).map(|i| drains.swap_remove(i))
    };
    let Some((_, buf, reader)) = drain else {
        let mut out = String::new();
        child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        return (child.wait().unwrap(), out);
    };
    let status = child.wait().unwrap();
    reader.join().unwrap();
    let out = String::from_utf8_lossy(&buf.lock().unwrap()).into_owned();
    (status, out)
}

/// Parse JSON lines.
pub fn json_lines(out: &str) -> Vec<serde_json::Value> {
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
        .collect()
}

/// Pin the calling thread to one CPU.
pub fn pin_to_cpu(cpu: usize) {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu).unwrap();
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).unwrap();
}

/// Two threads named `comm`, pinned to one CPU, bouncing a byte over two
/// pipes `round_trips` times. On one CPU every hand-over is a switch-in of
/// a task that was woken (or preempted while runnable): at least two
/// run-queue events per round trip.
pub fn pipe_ping_pong(comm: &str, round_trips: usize) {
    use std::io::Write;
    let (mut a_rx, mut b_tx) = os_pipe();
    let (mut b_rx, mut a_tx) = os_pipe();
    let n = round_trips;
    let pong = std::thread::Builder::new()
        .name(comm.into())
        .spawn(move || {
            pin_to_cpu(0);
            let mut buf = [0u8; 1];
            for _ in 0..n {
                a_rx.read_exact(&mut buf).unwrap();
                a_tx.write_all(&buf).unwrap();
            }
        })
        .unwrap();
    let ping = std::thread::Builder::new()
        .name(comm.into())
        .spawn(move || {
            pin_to_cpu(0);
            let mut buf = [7u8; 1];
            for _ in 0..n {
                b_tx.write_all(&buf).unwrap();
                b_rx.read_exact(&mut buf).unwrap();
            }
        })
        .unwrap();
    ping.join().unwrap();
    pong.join().unwrap();
}

fn os_pipe() -> (std::fs::File, std::fs::File) {
    let (r, w) = nix::unistd::pipe().unwrap();
    (std::fs::File::from(r), std::fs::File::from(w))
}

/// Start `latmon -v run ARGS` with extra environment variables and wait
/// until it is ready (see [`spawn_ready`]). Returns the child (stdout
/// piped) and every stderr line seen so far and later.
pub fn start_run_logged(
    args: &[&str],
    envs: &[(&str, &str)],
) -> (Child, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let mut cmd = latmon();
    cmd.arg("-v").arg("run").args(args).envs(envs.iter().copied()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = std::sync::Arc::clone(&lines);
    let (mut child, _) = spawn_ready(cmd, Duration::from_secs(30), move |line| {
        eprintln!("[latmon] {line}");
        seen.lock().unwrap().push(line.to_string());
    });
    drain_stdout(&mut child);
    (child, lines)
}

/// SIGINT (a clean stop that flushes the final summary).
pub fn interrupt(child: &Child) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
}

/// Stop a `start_run` child with SIGINT (it flushes a final summary), then
/// `finish` it: the window then surely covers a workload that ran before.
pub fn stop(child: Child) -> (std::process::ExitStatus, String) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    finish(child)
}

/// Ids of the BPF programs a process holds (its bpf-prog fds' fdinfo).
pub fn prog_ids_of(pid: u32) -> Vec<u64> {
    let mut ids = Vec::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().map_while(Result::ok) {
        let target = std::fs::read_link(fd.path()).unwrap_or_default();
        if target.to_string_lossy() != "anon_inode:bpf-prog" {
            continue;
        }
        let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy()))
            .unwrap_or_default();
        ids.extend(info.lines().find_map(|l| l.strip_prefix("prog_id:")).and_then(|v| v.trim().parse::<u64>().ok()));
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Ids of every BPF program loaded on the machine, per bpftool.
pub fn all_prog_ids() -> Vec<u64> {
    let out = std::process::Command::new("bpftool").args(["prog", "show", "--json"]).output().expect("bpftool");
    let progs: serde_json::Value = serde_json::from_slice(&out.stdout).expect("bpftool JSON");
    progs.as_array().unwrap().iter().map(|p| p["id"].as_u64().unwrap()).collect()
}

/// tests/fixtures/`source`.c compiled with `cc -Wall <flags>` into
/// `bin` in this test binary's fixture directory, once per test binary:
/// later calls for the same `bin` return the first build. The binary's
/// name is the comm the tests filter on.
pub fn compile_fixture(source: &str, bin: &str, flags: &[&str]) -> &'static std::path::Path {
    static BUILT: std::sync::Mutex<Vec<(String, &'static std::path::Path)>> = std::sync::Mutex::new(Vec::new());
    // Held while compiling: two tests asking at once get one build.
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, path)) = built.iter().find(|(name, _)| name == bin) {
        return path;
    }
    let dir = std::env::temp_dir().join(format!("latmon-fixtures-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(bin);
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/{source}.c"));
    let out = Command::new("cc")
        .arg("-Wall")
        .args(flags)
        .arg("-o")
        .arg(&path)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("cc (gcc) is needed to build the test fixture {}: {e}", src.display()));
    assert!(out.status.success(), "cc {} failed: {}", src.display(), String::from_utf8_lossy(&out.stderr));
    // Readable and executable by everyone: some tests run latmon as
    // nobody after it drops its privileges.
    let _ = Command::new("chmod").args(["-R", "a+rX"]).arg(&dir).status();
    let path: &'static std::path::Path = Box::leak(path.into_boxed_path());
    built.push((bin.to_string(), path));
    path
}

/// `lm-target` (tests/fixtures/lm_target.c), the traced program of the
/// ufunc tests: with debug info and unoptimised, so its functions stay
/// where its symbols say.
pub fn lm_target() -> &'static std::path::Path {
    compile_fixture("lm_target", "lm-target", &["-g", "-O0", "-pthread"])
}

/// One end of a pty pair: the test holds the master, a program (latmon,
/// a Modbus client) opens `path`. Raw mode, so bytes pass unchanged.
pub struct Pty {
    pub master: std::fs::File,
    pub slave: std::os::fd::OwnedFd,
    pub path: String,
}

pub fn pty() -> Pty {
    use nix::sys::termios;
    use std::os::fd::AsFd;
    let r = nix::pty::openpty(None, None).expect("openpty");
    let mut t = termios::tcgetattr(r.slave.as_fd()).unwrap();
    termios::cfmakeraw(&mut t);
    termios::tcsetattr(r.slave.as_fd(), termios::SetArg::TCSANOW, &t).unwrap();
    let path = nix::unistd::ttyname(r.slave.as_fd()).unwrap().to_string_lossy().into_owned();
    Pty { master: std::fs::File::from(r.master), slave: r.slave, path }
}

/// Disk interrupts: synced writes for `how_long`.
pub fn disk_load(how_long: Duration) {
    let path =
        std::env::temp_dir().join(format!("latmon-irq-{}-{:?}", std::process::id(), std::thread::current().id()));
    let t0 = Instant::now();
    while t0.elapsed() < how_long {
        let mut f = std::fs::File::create(&path).unwrap();
        std::io::Write::write_all(&mut f, &[1u8; 256 << 10]).unwrap();
        f.sync_all().unwrap();
    }
    let _ = std::fs::remove_file(&path);
}

/// Push `bytes` through a loopback TCP connection in small writes.
pub fn loopback_traffic(bytes: usize) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let rx = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = [0u8; 4096];
        let mut got = 0;
        while got < bytes {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0);
            got += n;
        }
    });
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    let chunk = [7u8; 1024];
    let mut sent = 0;
    while sent < bytes {
        std::io::Write::write_all(&mut s, &chunk).unwrap();
        sent += chunk.len();
    }
    rx.join().unwrap();
}

/// `f`'s first `Some` within `limit`, polling every 50 ms; `None` after it.
pub fn poll_until<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let end = std::time::Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if std::time::Instant::now() >= end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One 16-bit input register (function 04, PDU address `reg`) read with
/// mbpoll, a Modbus client no one here wrote, from latmon's Modbus TCP output.
pub fn mbpoll_input_register(port: u16, reg: u16) -> i64 {
    mbpoll_try_input_register(port, reg).unwrap_or_else(|e| panic!("{e}"))
}

/// [`mbpoll_input_register`], with mbpoll's answer as the error when it
/// read no value (e.g. "Illegal data address" before the first summary).
pub fn mbpoll_try_input_register(port: u16, reg: u16) -> Result<i64, String> {
    let out = Command::new("mbpoll")
        .args([
            "-m",
            "tcp",
            "-p",
            &port.to_string(),
            "-t",
            "3",
            "-0",
            "-1",
            "-r",
            &reg.to_string(),
            "-c",
            "1",
            "127.0.0.1",
        ])
        .output()
        .expect("mbpoll (apt-get install mbpoll)");
    let text = String::from_utf8_lossy(&out.stdout);
    let v = text.lines().find_map(|l| {
        l.trim().strip_prefix(&format!("[{reg}]:")).and_then(|v| v.split_whitespace().next()?.parse().ok())
    });
    v.ok_or_else(|| format!("mbpoll -r {reg}: {text} {}", String::from_utf8_lossy(&out.stderr)))
}

/// `count` 32-bit values from input register `from` on (function 04,
/// high word first: mbpoll `-t 3:int -B`), read with mbpoll in one
/// request, as unsigned values; mbpoll's answer as the error when it read
/// none (an exception, no server yet).
pub fn mbpoll_u32s(port: u16, from: u16, count: u16) -> Result<Vec<u32>, String> {
    let out = Command::new("mbpoll")
        .args(["-m", "tcp", "-p", &port.to_string(), "-t", "3:int", "-B", "-0", "-1"])
        .args(["-r", &from.to_string(), "-c", &count.to_string(), "127.0.0.1"])
        .output()
        .expect("mbpoll (apt-get install mbpoll)");
    let text = String::from_utf8_lossy(&out.stdout);
    (0..count)
        .map(|k| {
            let r = from + 2 * k;
            text.lines()
                .find_map(|l| {
                    l.trim().strip_prefix(&format!("[{r}]:")).and_then(|v| v.split_whitespace().next()?.parse().ok())
                })
                .map(|v: i64| v as u32)
                .ok_or_else(|| {
                    format!("mbpoll -r {from} -c {count}, [{r}]: {text} {}", String::from_utf8_lossy(&out.stderr))
                })
        })
        .collect()
}

/// xorshift64: a reproducible stream for tests that damage, sample or
/// interleave frames from a seed (the seed is printed by the test that
/// picks it, so a failure can be replayed).
pub struct XorShift(pub u64);
impl XorShift {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform enough below `n` (0 for `n` 0 or 1).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Probe `p{i}`, a runq probe attached by tp_btf with CO-RE: the identity
/// of the probes in synthetic sessions (no BPF loaded).
pub fn runq_probe(i: usize) -> latmon_core::summary::ProbeInfo {
    use latmon_core::ident::{BtfMode, Family, Mechanism};
    latmon_core::summary::ProbeInfo {
        name: format!("p{i}"),
        kind: Family::Runq,
        attach: Mechanism::TpBtf,
        mode: String::new(),
        btf_mode: BtfMode::CoRe,
        wait: Default::default(),
    }
}

/// `promtool check metrics` on a text exposition: fails the test with what
/// promtool said (syntax errors and naming lints alike) and the exposition.
pub fn promtool_check_metrics(body: &str) {
    use std::io::Write;
    let mut p = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus; scripts/install-deps.sh)");
    p.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    let out = p.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("FIGURES promtool: exit {:?}, {} bytes of metrics, said {said:?}", out.status.code(), body.len());
    assert!(out.status.success() && said.trim().is_empty(), "promtool check metrics: {said}\n{body}");
}

/// IRQ number -> count summed over CPUs, from /proc/interrupts.
pub fn irq_counts() -> std::collections::HashMap<u32, u64> {
    let text = std::fs::read_to_string("/proc/interrupts").unwrap();
    let mut lines = text.lines();
    let ncpus = lines.next().unwrap().split_whitespace().count();
    lines
        .filter_map(|l| {
            let (n, rest) = l.split_once(':')?;
            let n = n.trim().parse().ok()?;
            Some((n, rest.split_whitespace().take(ncpus).map(|c| c.parse::<u64>().unwrap_or(0)).sum()))
        })
        .collect()
}

/// A capture of a budgeted link made by the pure encoder (no kernel): a
/// Hello of `series` probes (`syn:NNN`), then `secs` one-second intervals
/// of random events, each a Delta against the one before, every fifth a
/// keyframe (Summary) of every probe first.
pub fn synthetic_capture(series: usize, secs: u64, seed: u64) -> Vec<u8> {
    use latmon_core::hist::Hist;
    use latmon_core::wire::{BucketScheme, Encoder, Entries, LinkHeader, ProbeDesc, SummaryHeader};
    let mut rng = XorShift(seed | 1);
    let probes = (0..series)
        .map(|i| ProbeDesc {
            id: i as u16,
            name: format!("syn:{i:03}"),
            kind: "syn".into(),
            attach: "none".into(),
            mode: String::new(),
            scheme: BucketScheme::LATMON,
        })
        .collect();
    let h = hello("synthetic", probes);
    let mut enc = Encoder::new();
    let mut frames: Vec<Vec<u8>> = Vec::new();
    let mut push = |f: &[u8]| frames.push(f.to_vec());
    enc.hello(&h, &mut push).expect("hello");
    let mut totals = vec![Hist::default(); series];
    let ids: Vec<u16> = (0..series as u16).collect();
    let mut base_seq = 0;
    for seq in 1..=secs {
        let mut delta = vec![Hist::default(); series];
        for (p, d) in delta.iter_mut().enumerate() {
            // Some probes quiet, some busy; latencies over three decades.
            for _ in 0..rng.below(if p % 7 == 0 { 1 } else { 60 }) {
                d.record(1_000 + rng.below(1_000) * rng.below(1_000));
            }
            if rng.below(10) == 0 {
                d.alerts += 1;
            }
            totals[p].merge(d);
        }
        let head = SummaryHeader { seq, boot_id: h.boot_id, time_ns: seq * 1_000_000_000, last: seq == secs };
        let link = LinkHeader { merge: 0, base_seq };
        let keyed: Vec<u16> = if seq % 5 == 1 { ids.clone() } else { Vec::new() };
        if !keyed.is_empty() {
            enc.keyframe(head, link, Entries::all(&totals), &mut push).expect("keyframe");
        }
        let sel: Vec<u16> = ids.iter().copied().filter(|&i| delta[i as usize].count > 0).collect();
        let born: Vec<u16> = if seq == 1 { ids.clone() } else { Vec::new() };
        enc.delta(head, link, Entries::select(&delta, &ids, &sel), series as u16, &keyed, &born, &mut push)
            .expect("delta");
        base_seq = seq;
    }
    let mut out = vec![0u8];
    frames.iter().for_each(|f| out.extend_from_slice(f));
    out
}

/// A capture (frames between 0x00 delimiters) damaged as a bad line
/// damages it: every frame of each `lose_every`-th summary left out (an
/// outage long enough to lose it whole: the receivers' `lost`), `drop_pct`
/// % of the other frames left out (a summary in part: inexact totals,
/// incomplete split entries) and `corrupt_pct` % with one byte changed
/// (kept non-zero: a CRC error, not a split); the first three frames (the
/// table) are left alone.
pub fn damage(capture: &[u8], lose_every: u64, drop_pct: u64, corrupt_pct: u64, seed: u64) -> Vec<u8> {
    let mut rng = XorShift(seed | 1);
    let mut out = Vec::with_capacity(capture.len());
    for (k, f) in capture.split_inclusive(|&b| b == 0).enumerate() {
        let dropped = rng.below(100) < drop_pct;
        if k > 3 && (summary_seq(f).is_some_and(|seq| seq % lose_every == 0) || (f.len() > 1 && dropped)) {
            continue;
        }
        let at = out.len();
        out.extend_from_slice(f);
        if k > 3 && f.len() > 1 && rng.below(100) < corrupt_pct {
            let i = at + rng.below(f.len() as u64 - 1) as usize;
            out[i] = out[i].wrapping_add(1).max(1);
        }
    }
    out
}

/// The seq of the summary a frame (its delimiter included) is part of: a
/// keyframe's or a delta's; none for other kinds or a damaged frame.
fn summary_seq(frame: &[u8]) -> Option<u64> {
    use latmon_core::wire::{decode_fragment, Frame};
    let mut buf = frame.strip_suffix(&[0]).unwrap_or(frame).to_vec();
    match decode_fragment(&mut buf) {
        Ok(Frame::Summary(s)) => Some(s.seq),
        Ok(Frame::Delta(d)) => Some(d.seq),
        _ => None,
    }
}

/// Runs scripts/supervisor-qemu.sh on `capture` (the firmware in qemu):
/// its JSON lines, and the run's wall time.
pub fn supervisor_qemu(capture: &std::path::Path, baud: u32) -> (Vec<serde_json::Value>, Duration) {
    let t0 = Instant::now();
    let out = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/supervisor-qemu.sh"))
        .arg(capture)
        .env("SUPERVISOR_BAUD", baud.to_string())
        .stderr(Stdio::inherit())
        .output()
        .expect("run scripts/supervisor-qemu.sh");
    assert!(out.status.success(), "supervisor-qemu.sh: {}", out.status);
    (json_lines(&String::from_utf8_lossy(&out.stdout)), t0.elapsed())
}

/// `latmon decode file:CAPTURE`: each probe's last `total_count`, and the
/// summaries lost and the good frames its link line counts.
pub fn decode_totals(capture: &std::path::Path) -> (std::collections::BTreeMap<String, u64>, u64, u64) {
    let out = latmon().args(["decode", &format!("file:{}", capture.display())]).output().expect("latmon decode");
    assert!(out.status.success(), "latmon decode: {}", out.status);
    let mut totals = std::collections::BTreeMap::new();
    for v in json_lines(&String::from_utf8_lossy(&out.stdout)) {
        if v["type"] != "summary" {
            continue;
        }
        for p in v["probes"].as_array().into_iter().flatten() {
            totals.insert(p["name"].as_str().unwrap_or_default().to_string(), u(p, "total_count"));
        }
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let count = |what: &str| -> u64 {
        err.split(", ")
            .find_map(|w| w.strip_suffix(what))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no '{what}' in decode's link line: {err}"))
    };
    (totals, count(" summaries lost"), count(" frames good"))
}

/// The firmware's last totals line: totals by name, `lost`, `over_capacity`.
pub fn supervisor_last_totals(lines: &[serde_json::Value]) -> (std::collections::BTreeMap<String, u64>, u64, u64) {
    let last = lines.iter().rev().find(|v| v.get("totals").is_some()).expect("a totals line from the firmware");
    let totals = last["totals"]
        .as_object()
        .expect("totals")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().expect("a count")))
        .collect();
    (totals, u(last, "lost"), u(last, "over_capacity"))
}

/// The good frames of the firmware's last link line (the whole capture's:
/// scripts/supervisor-qemu.sh waits for the line that counts every byte).
pub fn supervisor_frames_good(lines: &[serde_json::Value]) -> u64 {
    u(&supervisor_link_line(lines)["link"], "frames_good")
}

/// The series slots the firmware filled, from its last link line.
pub fn supervisor_series(lines: &[serde_json::Value]) -> u64 {
    u(supervisor_link_line(lines), "series")
}

fn supervisor_link_line(lines: &[serde_json::Value]) -> &serde_json::Value {
    lines.iter().rev().find(|v| v.get("link").is_some()).expect("a link line from the firmware")
}

/// A busy machine for `secs` seconds (stress-ng: CPU, sockets, timers,
/// forks, disk, message queues): the live link tests' load.
pub fn stress_mix(secs: u64) -> Child {
    Command::new("stress-ng")
        .args([
            "--cpu",
            "1",
            "--cpu-load",
            "20",
            "--sock",
            "1",
            "--timer",
            "1",
            "--fork",
            "1",
            "--hdd",
            "1",
            "--msg",
            "1",
        ])
        .args(["--timeout", &format!("{secs}s"), "--quiet"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("stress-ng (apt-get install stress-ng)")
}

/// `lm-target ARGS`' own account of its lm_work calls (its stdout), the
/// ground truth the ufunc and agent tests compare latmon with.
#[derive(Debug, Default)]
pub struct Ran {
    pub pid: u64,
    pub calls: u64,
    pub over_1ms: u64,
    pub mean_ns: u64,
    /// Every lm_work / lm_recurse call's duration measured in its own body.
    pub self_ns: Vec<u64>,
    pub elapsed: Duration,
}

/// Runs `lm-target ARGS` to its end (it must succeed) and reads its account.
pub fn run_target(args: &[&str]) -> Ran {
    let t0 = Instant::now();
    let out = Command::new(lm_target()).args(args).output().unwrap();
    let elapsed = t0.elapsed();
    assert!(out.status.success(), "lm-target {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |k: &str| -> u64 {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {k}= in {text:?}"))
    };
    let self_ns = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix("self_ns="))
        .map(|v| v.split(',').map(|d| d.parse().unwrap()).collect())
        .unwrap_or_default();
    Ran {
        pid: field("pid"),
        calls: field("calls"),
        over_1ms: field("over_1ms"),
        mean_ns: field("mean_ns"),
        self_ns,
        elapsed,
    }
}
