// SPDX-License-Identifier: MIT
//! `latmon-view view` full screen, live (root: the default probes attach
//! to this kernel), driven in tmux (send-keys, capture-pane) as a
//! technician would: `latmon run --output serial:PTY_A` writes frames into
//! one pty pair; a relay thread forwards them, both ways, to a second pty
//! pair standing in for the laptop's USB adapter, whose slave the view
//! opens through a symlink. Checked on the captured screen text: the
//! header and the rows of the running probes within two intervals,
//! sorting by a key changes the order, selecting a row shows its
//! histogram, 80x24 stays readable, and killing the relay (the adapter
//! unplugged: the pty and the symlink go away) shows "NO DATA for N s",
//! then restarting it (replugged) resumes. And, from a hand-made stream
//! (no root), a selected cycle row shows its misses with their causes.
//!
//! Needs tmux and latmon-view beside the latmon under test, in the same
//! profile (`cargo build --release -p latmon-view` for `cargo test
//! --release`; scripts/test.sh builds it, in its tests' profile, first).

use crate::common;

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::*;

const INTERVAL: Duration = Duration::from_secs(1);

fn view_bin() -> PathBuf {
    let p = Path::new(env!("CARGO_BIN_EXE_latmon")).with_file_name("latmon-view");
    assert!(p.exists(), "{} missing: build it first, in the profile of these tests (cargo build -p latmon-view --release, or --profile release-test as scripts/test.sh does)", p.display());
    p
}

struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(cmd: &str, w: u16, h: u16) -> Tmux {
        // One server per test, also when tests share a process.
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let t = Tmux { socket: format!("latmon-view-test-{}-{n}", std::process::id()) };
        let ok = Command::new("tmux")
            .args(["-L", &t.socket, "-f", "/dev/null", "new-session", "-d", "-s", "v"])
            .args(["-x", &w.to_string(), "-y", &h.to_string(), cmd])
            .status()
            .expect("tmux (apt-get install tmux)");
        assert!(ok.success(), "tmux new-session failed");
        t
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux").args(["-L", &self.socket]).args(args).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", "v"])
    }

    fn keys(&self, k: &str) {
        self.tmux(&["send-keys", "-t", "v", k]);
    }

    /// Poll the screen until `ok` holds; the last screen either way.
    fn wait_for(&self, within: Duration, ok: impl Fn(&str) -> bool) -> (bool, String) {
        let t0 = Instant::now();
        loop {
            let s = self.screen();
            if ok(&s) {
                return (true, s);
            }
            if t0.elapsed() >= within {
                return (false, s);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").args(["-L", &self.socket, "kill-server"]).status();
    }
}

/// The "adapter": a pty pair whose slave `link` names, and a thread
/// copying bytes between it and the agent's pty master, both ways.
struct Relay {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<File>>,
}

/// A pty pair whose fds children do not inherit (openpty(3) does not set
/// close-on-exec): a tmux server or agent holding a copy of the adapter's
/// master would keep an "unplugged" adapter alive.
fn private_pty() -> Pty {
    use nix::fcntl::{fcntl, FcntlArg, FdFlag};
    let p = pty();
    use std::os::fd::AsRawFd;
    for fd in [p.master.as_raw_fd(), p.slave.as_raw_fd()] {
        fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)).unwrap();
    }
    p
}

fn relay(agent_master: File, link: &Path) -> Relay {
    let adapter = private_pty();
    let _ = std::fs::remove_file(link);
    std::os::unix::fs::symlink(&adapter.path, link).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let s = Arc::clone(&stop);
    let thread = std::thread::spawn(move || {
        let mut a = agent_master;
        let mut b = adapter.master;
        let _slave = adapter.slave; // held: the pair lives while the relay does
        let mut buf = vec![0u8; 4096];
        while !s.load(Ordering::Relaxed) {
            let mut fds = [
                nix::poll::PollFd::new(a.as_fd(), nix::poll::PollFlags::POLLIN),
                nix::poll::PollFd::new(b.as_fd(), nix::poll::PollFlags::POLLIN),
            ];
            if !matches!(nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(50u16)), Ok(n) if n > 0) {
                continue;
            }
            let ready = |f: &nix::poll::PollFd| f.revents().is_some_and(|r| r.contains(nix::poll::PollFlags::POLLIN));
            let (ra, rb) = (ready(&fds[0]), ready(&fds[1]));
            if ra {
                if let Ok(n @ 1..) = a.read(&mut buf) {
                    let _ = b.write_all(&buf[..n]);
                }
            }
            if rb {
                if let Ok(n @ 1..) = b.read(&mut buf) {
                    let _ = a.write_all(&buf[..n]); // the view's Request frame
                }
            }
        }
        a // the agent's side stays; the adapter pair closes here
    });
    Relay { stop, thread: Some(thread) }
}

impl Relay {
    /// Unplug: the adapter's pty pair closes; the agent's master is returned.
    fn kill(mut self, link: &Path) -> File {
        self.stop.store(true, Ordering::Relaxed);
        let a = self.thread.take().unwrap().join().unwrap();
        let _ = std::fs::remove_file(link);
        a
    }
}

/// The PROBE column of the table's rows, top to bottom.
fn row_names(screen: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut in_table = false;
    for l in screen.lines() {
        if l.contains("PROBE") && l.contains("MECH") {
            in_table = true;
            continue;
        }
        if !in_table {
            continue;
        }
        let t = l.trim_start_matches(['>', ' ']);
        if t.is_empty() || t.starts_with('┌') || t.starts_with('│') || t.starts_with("q quit") {
            break;
        }
        names.push(t.split_whitespace().next().unwrap_or("").to_string());
    }
    names
}

/// The table's rows as (series, name): a series' name is its label, and
/// it sits under its family line; a family's rest line is `+N`.
fn grouped_rows(screen: &str) -> Vec<(bool, String)> {
    let mut rows = Vec::new();
    let mut in_table = false;
    for l in screen.lines() {
        if l.contains("PROBE") && l.contains("MECH") {
            in_table = true;
            continue;
        }
        // Column 0 is the selection mark; a series is indented by two.
        let cell = l.get(1..).unwrap_or("");
        let t = cell.trim_start();
        if !in_table {
            continue;
        }
        if t.is_empty() || t.starts_with('┌') || t.starts_with('│') || t.starts_with("q quit") {
            break;
        }
        rows.push((cell.starts_with("  "), t.split_whitespace().next().unwrap_or("").to_string()));
    }
    rows
}

fn seq_of(screen: &str) -> u64 {
    screen
        .split_whitespace()
        .skip_while(|w| *w != "seq")
        .nth(1)
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no seq in\n{screen}"))
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn live_view_in_tmux_header_sort_select_resize_unplug() {
    let bin = view_bin();
    let agent_pty = private_pty();
    let dir = std::env::temp_dir().join(format!("latmon-view-tui-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("ttyADAPTER");
    // 921600 baud: a link budget (half the line) the default configuration's
    // frames fit in without degradation steps (tests/live/links_paced.rs covers those).
    let agent = start_run(&["--interval", "1s", "--output", &format!("serial:{}@921600", agent_pty.path)]);
    let r = relay(agent_pty.master, &link);
    let cmd = format!("{} view serial:{}@921600", bin.display(), link.display());
    let tmux = Tmux::start(&cmd, 120, 40);

    // 1. Header and the running probes' rows within two intervals (plus
    //    the Request round trip and tmux's start).
    let (ok, s) = tmux.wait_for(2 * INTERVAL + Duration::from_secs(2), |s| {
        s.contains("kernel ") && s.contains("board ") && s.contains("receiving") && {
            let rows = row_names(s);
            rows.iter().any(|n| n == "runq") && rows.iter().any(|n| n.starts_with("syscall"))
        }
    });
    assert!(ok, "no header and runq/syscall rows within two intervals:\n{s}");
    assert!(s.contains("link  frames "), "{s}");
    let before = row_names(&s);

    // 2. Sorting: `s` four times is the name column (p99 -> p50 -> max
    //    -> events/s -> name): the rows come in name order.
    for _ in 0..4 {
        tmux.keys("s");
    }
    let (ok, s) = tmux.wait_for(Duration::from_secs(3), |s| s.contains("families and series by name"));
    assert!(ok, "sort key not taken:\n{s}");
    let by_name = row_names(&s);
    // Families in name order (a family's waits line right after it), and
    // the series listed under each in name order.
    let rows = grouped_rows(&s);
    let families: Vec<&str> = rows.iter().filter(|r| !r.0 && !r.1.ends_with(":waits")).map(|r| r.1.as_str()).collect();
    let mut sorted = families.clone();
    sorted.sort();
    assert_eq!(families, sorted, "families in name order:\n{s}");
    for run in rows.split(|r| !r.0) {
        let names: Vec<&str> = run.iter().map(|r| r.1.as_str()).filter(|n| !n.starts_with('+')).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted, "series in name order under their family:\n{s}");
    }
    assert_ne!(by_name, before, "sorting changed nothing:\n{s}");

    // 3. Selecting the second row shows its histogram (a series is named
    //    after its family there).
    tmux.keys("Home");
    tmux.keys("Down");
    let family = rows.iter().take(2).rfind(|r| !r.0).map_or("", |r| r.1.as_str());
    let want = match &rows[1] {
        (true, label) => format!("histogram of {family}:{label}"),
        (false, name) => format!("histogram of {name}"),
    };
    let (ok, s) = tmux.wait_for(Duration::from_secs(3), |s| s.contains(&want));
    assert!(ok, "{want:?} not shown:\n{s}");
    let hist_rows = s.lines().filter(|l| l.contains("..") && l.contains("|#")).count();
    assert!(hist_rows >= 1, "no histogram bars:\n{s}");
    if let Ok(keep) = std::env::var("LATMON_VIEW_SCREEN") {
        // The README's picture: sorted by p99 again, the worst row selected.
        tmux.keys("s");
        tmux.keys("Home");
        std::thread::sleep(Duration::from_secs(3));
        std::fs::write(keep, tmux.screen()).unwrap();
    }

    // 4. 80x24: header, column heads, rows and the key line still there.
    tmux.tmux(&["resize-window", "-t", "v", "-x", "80", "-y", "24"]);
    let (ok, s) = tmux.wait_for(Duration::from_secs(3), |s| {
        s.lines().count() <= 24
            && s.lines().all(|l| l.chars().count() <= 80)
            && row_names(s).len() >= 3
            && ["board ", "PROBE", "P99", "MAX", "q quit"].iter().all(|n| s.contains(n))
    });
    assert!(ok, "not readable at 80x24:\n{s}");
    for needle in ["board ", "PROBE", "P99", "MAX", "q quit"] {
        assert!(s.contains(needle), "{needle:?} missing at 80x24:\n{s}");
    }
    // Every family line of the default set is on the screen.
    let families: Vec<String> = grouped_rows(&s).into_iter().filter(|r| !r.0).map(|r| r.1).collect();
    for fam in ["runq", "syscall", "irq"] {
        assert!(families.iter().any(|f| f == fam), "{fam} not on the 80x24 screen:\n{s}");
    }
    let seq_before = seq_of(&s);

    // 5. Unplugged: the adapter's pty and link go away.
    let agent_master = r.kill(&link);
    let (ok, s) = tmux.wait_for(Duration::from_secs(8), |s| s.contains("NO DATA for"));
    assert!(ok, "no 'no data' after the relay died:\n{s}");
    std::thread::sleep(Duration::from_secs(1));
    let s = tmux.screen();
    let gap: u64 = s
        .split("NO DATA for ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("gap length not shown:\n{s}"));
    assert!(gap >= 2, "{s}");

    // 6. Replugged: a new pty pair behind the same name; the view reopens it.
    let r = relay(agent_master, &link);
    let (ok, s) = tmux.wait_for(Duration::from_secs(8), |s| {
        !s.contains("NO DATA") && s.contains("receiving") && seq_of(s) > seq_before + 1
    });
    assert!(ok, "the view did not resume after the relay came back:\n{s}");
    tmux.keys("q");
    let _ = r.kill(&link);
    let (status, _) = stop(agent);
    assert!(status.success(), "latmon run: {status}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A frame stream of a cycle probe (family line and series) and runq,
/// three summaries, a miss and an overrun of the loop, then more runq
/// alerts than the view's shared alert list keeps.
fn cycle_stream() -> Vec<u8> {
    use latmon_core::anatomy::{Anatomy, BlockedOn, Cause, CauseKind};
    use latmon_core::cycle::{CycleEvent, CycleMark, Doing};
    use latmon_core::hist::Hist;
    use latmon_core::summary::AlertRecord;
    use latmon_core::wire::{BucketScheme, Encoder, ProbeDesc, SummaryHeader, DELIMITER};
    let names = ["cycle", "cycle:wakeup", "cycle:exec", "runq"];
    let desc = |i: usize| ProbeDesc {
        id: i as u16,
        name: names[i].into(),
        kind: names[i].split(':').next().unwrap().into(),
        attach: "tp_btf".into(),
        mode: String::new(),
        scheme: BucketScheme::LATMON,
    };
    let mut bytes = vec![DELIMITER];
    let mut enc = Encoder::new();
    let mut out = |f: &[u8]| bytes.extend_from_slice(f);
    enc.hello(&hello("robot", (0..names.len()).map(desc).collect()), &mut out).unwrap();
    let mut hs = vec![Hist::default(); names.len()];
    for seq in 1..=3u64 {
        for (h, v) in hs.iter_mut().zip([1_620_000, 20_000, 1_500_000, 30_000]) {
            (0..100).for_each(|_| h.record(v));
        }
        let head = SummaryHeader { seq, boot_id: 42, time_ns: seq * 1_000_000_000, last: false };
        enc.summary(head, &hs, &mut out).unwrap();
    }
    // A frame carries the probe's id (enc.alert's second argument), which
    // the receiver names from the Hello.
    let rec = |latency_ns, anatomy, cycle| AlertRecord {
        id: latmon_core::ident::ProbeId::NONE,
        pid: 700,
        tid: 701,
        comm: "ctrl_loop".into(),
        cpu: 1,
        latency_ns,
        time_ns: 2_500_000_000,
        anatomy,
        cycle,
    };
    let mark = |event, done_ns, doing| CycleMark {
        event,
        release_ns: 2_000_000_000,
        deadline_ns: 2_001_000_000,
        done_ns,
        doing,
        migrations: 0,
        rule: None,
    };
    let parts = vec![
        Cause { kind: CauseKind::Running, ns: 1_500_000 },
        Cause { kind: CauseKind::Blocked { on: BlockedOn::Io, syscall: "fdatasync".into() }, ns: 60_000 },
        Cause { kind: CauseKind::PageFaults { count: 7 }, ns: 0 },
    ];
    let miss = rec(
        1_620_000,
        Some(Anatomy::from_parts(1_620_000, 1, 1, parts)),
        Some(mark(CycleEvent::Miss, Some(2_001_620_000), None)),
    );
    let overrun = rec(
        1_000_000,
        None,
        Some(mark(CycleEvent::Overrun, None, Some(Doing::Blocked { on: BlockedOn::Futex, syscall: "futex".into() }))),
    );
    enc.alert(42, 0, &miss, &mut out).unwrap();
    enc.alert(42, 0, &overrun, &mut out).unwrap();
    for _ in 0..80 {
        enc.alert(42, 3, &rec(30_000, None, None), &mut out).unwrap();
    }
    bytes
}

/// `latmon-view view` (full screen, tmux) of a cycle probe's stream: the
/// selected cycle row (its family line, then a series) shows the loop's
/// misses and overruns, each with the line the agent prints, though
/// later alerts of another probe filled the shared alert list.
#[test]
#[ignore = "needs tmux and latmon-view built beside latmon (scripts/test.sh runs it)"]
fn the_selected_cycle_rows_misses_show_with_their_causes_in_tmux() {
    let bin = view_bin();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let bytes = cycle_stream();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.write_all(&bytes).unwrap();
        // Held open while the screen is read: a closed link would redraw it.
        let mut sink = [0u8; 64];
        let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
        let _ = s.read(&mut sink);
    });
    let tmux = Tmux::start(&format!("{} view tcp://{addr}", bin.display()), 120, 40);
    let miss = "ctrl_loop[701] cpu 1  miss 1.62ms of 1.00ms: running 1500 us, blocked on io in fdatasync 60 us,";
    let overrun = "ctrl_loop[701] cpu 1  overrun 1.00ms of 1.00ms, blocked on futex in futex";
    let shows =
        |s: &str| s.contains("misses of cycle: 1 misses, 1 overruns") && s.contains(miss) && s.contains(overrun);
    // The family line is the worst p99: selected first.
    let (ok, s) = tmux.wait_for(Duration::from_secs(5), |s| row_names(s).iter().any(|n| n == "cycle") && shows(s));
    assert!(ok, "the cycle row's misses are not on the screen:\n{s}");
    // A series of the family shows the family's records too.
    tmux.keys("j");
    let (ok, s) = tmux.wait_for(Duration::from_secs(3), |s| s.contains("histogram of cycle:") && shows(s));
    assert!(ok, "a cycle series' screen lacks the misses:\n{s}");
    // runq (no cycle records): its latest alerts instead.
    tmux.keys("End");
    let (ok, s) = tmux.wait_for(Duration::from_secs(3), |s| s.contains("latest alerts of runq") && !shows(s));
    assert!(ok, "runq's screen:\n{s}");
    drop(tmux);
    let _ = server.join();
}
