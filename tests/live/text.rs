// SPDX-License-Identifier: MIT
//! What a person sees (root, real probes): the default `latmon run` on a
//! terminal prints a compact table, at most 40 lines an interval while a
//! workload keeps many syscall series busy; `--hist` brings bcc-style
//! histograms back for every probe, `hist=true` for one.

use crate::common;

use std::io::Read;
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;

/// A thread making some 20 different syscalls in a loop (each becomes a
/// series of the syscall family), and a stress-ng mix standing in for a
/// busy controller (sockets, timers, forks, disk, message queues).
struct Workload {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    stress: Option<Child>,
}

fn workload() -> Workload {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let thread = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        while !s.load(Ordering::Relaxed) {
            let f = std::fs::File::open("/dev/zero").unwrap();
            let _ = (&f).read(&mut buf);
            let _ = std::fs::metadata("/proc/self/stat");
            let _ = std::fs::read_dir("/proc/self/fd").map(|d| d.count());
            let _ = std::env::current_dir();
            let _ = std::net::UdpSocket::bind("127.0.0.1:0").map(|u| u.local_addr());
            // SAFETY: plain syscalls on this process, with valid arguments.
            unsafe {
                libc::getpid();
                libc::getppid();
                libc::sched_yield();
                let fd = libc::dup(f.as_raw_fd());
                libc::lseek(fd, 0, libc::SEEK_SET);
                libc::close(fd);
                let mut u: libc::utsname = std::mem::zeroed();
                libc::uname(&mut u);
                let mut r: libc::rusage = std::mem::zeroed();
                libc::getrusage(libc::RUSAGE_SELF, &mut r);
                let mut si: libc::sysinfo = std::mem::zeroed();
                libc::sysinfo(&mut si);
                let mut p = [0i32; 2];
                if libc::pipe(p.as_mut_ptr()) == 0 {
                    libc::write(p[1], buf.as_ptr().cast(), 8);
                    libc::read(p[0], buf.as_mut_ptr().cast(), 8);
                    libc::close(p[0]);
                    libc::close(p[1]);
                }
                libc::umask(0o022);
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    });
    let stress = Command::new("stress-ng")
        .args(["--cpu", "1", "--cpu-load", "20", "--sock", "1", "--timer", "1", "--fork", "1", "--hdd", "1"])
        .args(["--msg", "1", "--timeout", "30s", "--quiet"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok();
    if stress.is_none() {
        eprintln!("stress-ng not found (scripts/install-deps.sh installs it): the syscall loop alone");
    }
    Workload { stop, thread: Some(thread), stress }
}

impl Drop for Workload {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(mut c) = self.stress.take() {
            // SAFETY: signals the stress-ng we started; its workers follow.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let _ = c.wait();
        }
    }
}

/// `latmon run ARGS` with its stdout on a pseudo-terminal, as a person
/// runs it; everything it printed.
fn run_on_a_terminal(args: &[&str]) -> String {
    let mut pty = pty();
    let out = std::fs::OpenOptions::new().write(true).open(&pty.path).unwrap();
    let mut child = latmon().arg("run").args(args).stdout(out).stderr(Stdio::piped()).spawn().unwrap();
    let mut text = Vec::new();
    let mut buf = [0u8; 65536];
    // A hang guard from latmon's own start, its first output: loading
    // the default set (the cycle object's verification, some 0.5 s of
    // CPU) at nice 10 beside stress-ng's fork storm took 10-30 s of wall
    // time with 0.5 s of CPU (starved, not hung), and the run's duration
    // counts from after it. The load phase has a guard of its own.
    let mut until = Instant::now() + Duration::from_secs(240);
    let mut started = false;
    // SAFETY: non-blocking reads on the master, which the test owns.
    unsafe { libc::fcntl(pty.master.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
    loop {
        match pty.master.read(&mut buf) {
            Ok(n) if n > 0 => {
                text.extend_from_slice(&buf[..n]);
                if !started {
                    started = true;
                    until = Instant::now() + Duration::from_secs(30);
                }
            }
            _ => {
                if child.try_wait().unwrap().is_some() || Instant::now() > until {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    // What is left in the pty once latmon exited.
    while let Ok(n @ 1..) = pty.master.read(&mut buf) {
        text.extend_from_slice(&buf[..n]);
    }
    let _ = child.kill();
    let status = child.wait().unwrap();
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(status.success(), "latmon run {args:?}: {status}\n{err}");
    String::from_utf8(text).expect("ASCII text")
}

/// The intervals of a run's text, each from its `--- seq` line on.
fn intervals(text: &str) -> Vec<Vec<&str>> {
    let mut out: Vec<Vec<&str>> = Vec::new();
    for l in text.lines() {
        if l.starts_with("--- seq ") {
            out.push(Vec::new());
        }
        if let Some(cur) = out.last_mut() {
            cur.push(l);
        }
    }
    out
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn the_default_run_prints_a_table_of_at_most_40_lines_and_hist_brings_histograms_back() {
    let _load = workload();
    std::thread::sleep(Duration::from_millis(500));
    let text = run_on_a_terminal(&["--interval", "1s", "--duration", "3500ms"]);
    let ivs = intervals(&text);
    assert!(ivs.len() >= 3, "{text}");
    // A whole interval in the middle (the first saw series being born).
    let one = &ivs[1];
    eprintln!("FIGURES default run under load: {} lines in interval seq 2\n{}", one.len(), one.join("\n"));
    assert!(one.len() <= 40, "{} lines in one interval:\n{}", one.len(), one.join("\n"));
    for l in ivs.iter().flatten() {
        assert!(l.len() <= 79 && l.bytes().all(|b| (0x20..0x7f).contains(&b)), "{l:?}");
    }
    let row = |name: &str| one.iter().find(|l| l.split_whitespace().next() == Some(name));
    for fam in ["runq", "syscall", "irq"] {
        let r = row(fam).unwrap_or_else(|| panic!("no {fam} row:\n{}", one.join("\n")));
        assert!(r.contains(" tp_btf ") || r.contains(" raw_tp ") || r.contains(" tp "), "{r}");
    }
    assert!(one.iter().any(|l| l.starts_with("NAME ") && l.contains("P99.9") && l.contains("SKIP")));
    // The loop alone makes more than ten syscall series: ten shown (indented
    // under their family), the rest summed.
    let sys = one.iter().position(|l| l.starts_with("syscall ")).unwrap();
    let series = one[sys + 1..].iter().take_while(|l| l.starts_with("  ")).count();
    assert_eq!(series, 11, "10 series and the rest line:\n{}", one.join("\n"));
    assert!(one[sys + 11].starts_with("  +") && one[sys + 11].contains(" more series"), "{}", one.join("\n"));
    assert!(!text.contains("distribution"), "no histogram by default");

    let text = run_on_a_terminal(&["--interval", "1s", "--duration", "2500ms", "--hist"]);
    let ivs = intervals(&text);
    let one = &ivs[1];
    eprintln!("FIGURES --hist under load: {} lines in interval seq 2", one.len());
    let blocks = one.iter().filter(|l| l.contains(" : count     distribution")).count();
    let with_events = one.iter().filter(|l| l.contains(" [") && l.contains(" via ") && !l.contains("count 0 ")).count();
    assert!(blocks >= 13 && blocks == with_events, "{blocks} histograms for {with_events} lines:\n{}", one.join("\n"));
    for fam in ["runq [runq via ", "syscall [syscall via ", "syscall:read [syscall via "] {
        assert!(one.iter().any(|l| l.starts_with(fam)), "{fam}:\n{}", one.join("\n"));
    }
    assert!(one.iter().any(|l| l.ends_with("|") && l.contains("|*")), "bcc bars");
    assert!(one.iter().any(|l| l.starts_with("NAME ")), "the table stays on top");
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn hist_true_on_one_probe_shows_its_histogram_only() {
    let _load = workload();
    let cfg = std::env::temp_dir().join(format!("latmon-text-{}.toml", std::process::id()));
    std::fs::write(&cfg, "interval = \"1s\"\nprobes = [\"runq,hist=true\", \"syscall\", \"irq\"]\n").unwrap();
    let text = run_on_a_terminal(&["--config", cfg.to_str().unwrap(), "--duration", "2500ms"]);
    let _ = std::fs::remove_file(&cfg);
    let ivs = intervals(&text);
    assert!(ivs.len() >= 2, "{text}");
    for one in &ivs {
        let blocks = one.iter().filter(|l| l.contains(" : count     distribution")).count();
        assert_eq!(blocks, 1, "runq's histogram only:\n{}", one.join("\n"));
        assert!(one.iter().any(|l| l.starts_with("runq [runq via ")), "{}", one.join("\n"));
        assert!(!one.iter().any(|l| l.starts_with("syscall") && l.contains(" via ")), "{}", one.join("\n"));
    }
    // The same from the command line.
    let text = run_on_a_terminal(&["--probe", "syscall,hist=true", "--probe", "runq", "--duration", "1500ms"]);
    let one = &intervals(&text)[0];
    assert!(one.iter().any(|l| l.starts_with("syscall [syscall via ")), "{}", one.join("\n"));
    assert!(!one.iter().any(|l| l.starts_with("runq [runq via ")), "{}", one.join("\n"));
}
