// SPDX-License-Identifier: MIT
//! The live tests' guard against kernel harm (issue 39, "First, do no
//! harm"): a test that loads BPF fails when the kernel logs a splat while
//! it runs - a BUG, a WARNING, scheduling while atomic, a stall, a lockup,
//! a hung task, an Oops or a panic (tests/kernel-splats.txt, the patterns
//! the virtual boards and the harm soak use too) - naming the line.
//!
//! How: /dev/kmsg opened at the start, at its end (`lseek(SEEK_END)`:
//! what the kernel logged before, at boot or in an earlier test, does not
//! count), and read at the end. Every process of the test binaries that
//! load BPF (tests/live, tests/cli, tests/alloc_free.rs) starts one watch
//! before `main` ([`start_watch`] in the binary's `.init_array`, so no
//! test can forget it) and reads it twice: in [`crate::common::finish`]
//! (and so `stop`), which most BPF tests call to end latmon, failing the
//! test with a panic there; and when the process exits (`atexit`), which
//! covers every test, including those that load BPF in-process
//! (bucket_agreement, irq, func, kernel_misses) or never call `finish`:
//! a splat then makes the process exit 101 after the test passed, and
//! nextest (one process per test) reports that test failed, with the
//! line on its stderr. Under plain `cargo test` (a binary's tests are
//! threads of one process) the exit check fails the binary, not a test.
//!
//! nextest retries a failed live test once: a splat in the first try and
//! a clean retry would be FLAKY there, which is why scripts/test.sh also
//! checks the whole tests stage's kernel log (tests/board/splats.py
//! --kmsg-since), a splat failing the stage whatever the retries said.

use std::io::Read;
use std::os::fd::AsRawFd;
use std::sync::Mutex;

/// The patterns, shared with tests/board/splats.py.
const PATTERNS: &str = include_str!("../kernel-splats.txt");

/// What the guard's own negative control writes into its fake splat
/// (tests/live/kmsg_guard.rs). The per-process watches (and the stage
/// check of scripts/test.sh) pass over lines holding it, so that the
/// control does not fail the tests running beside it. No line the kernel
/// logs about a task can hold it by chance: a task's comm (what "BUG:
/// scheduling while atomic: COMM/PID/..." names) has at most 15 bytes.
pub const SELFTEST_MARK: &str = "latmon-kmsg-guard-selftest";

/// The patterns of tests/kernel-splats.txt.
pub fn patterns() -> impl Iterator<Item = &'static str> {
    PATTERNS.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
}

/// Whether `line` holds a pattern where the character before it is not a
/// letter, digit or `_` (`DEBUG:` is not `BUG:`): splats.py's rule.
pub fn is_splat(line: &str) -> bool {
    patterns().any(|p| {
        line.match_indices(p)
            .any(|(at, _)| !line[..at].chars().next_back().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_'))
    })
}

/// A window on the kernel's log: the records logged since [`Guard::start`].
pub struct Guard {
    kmsg: std::fs::File,
    /// Lines holding any of these are passed over.
    ignore: Vec<&'static str>,
    /// Splat lines seen so far (kept: every check reports them all).
    pub splats: Vec<String>,
}

impl Guard {
    /// Opens /dev/kmsg at its end. Needs root (CAP_SYSLOG).
    pub fn start() -> std::io::Result<Guard> {
        use std::os::unix::fs::OpenOptionsExt;
        let kmsg = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open("/dev/kmsg")?;
        // SAFETY: an lseek on an fd this function owns.
        if unsafe { libc::lseek(kmsg.as_raw_fd(), 0, libc::SEEK_END) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Guard { kmsg, ignore: Vec::new(), splats: Vec::new() })
    }

    /// Passes over lines holding `mark`.
    pub fn ignoring(mut self, mark: &'static str) -> Guard {
        self.ignore.push(mark);
        self
    }

    /// Reads what the kernel logged since the last read; returns every
    /// splat line seen since the start.
    pub fn read(&mut self) -> &[String] {
        let mut rec = vec![0u8; 8192];
        loop {
            match self.kmsg.read(&mut rec) {
                Ok(0) => break,
                Ok(n) => {
                    // PRIO,SEQ,USEC,FLAGS;MESSAGE\n then " KEY=VALUE" lines.
                    let text = String::from_utf8_lossy(&rec[..n]);
                    let msg = text.split_once(';').map_or(&*text, |(_, m)| m).lines().next().unwrap_or("");
                    if is_splat(msg) && !self.ignore.iter().any(|m| msg.contains(m)) {
                        self.splats.push(msg.to_string());
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                // EPIPE: records this reader had not read were overwritten
                // (the ring buffer wrapped); the next read goes on from the
                // oldest left. What was lost may have been a splat.
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => {
                    let lost = "kernel log records were overwritten before the guard read them: this window cannot be shown free of splats";
                    if !self.splats.iter().any(|s| s == lost) {
                        self.splats.push(lost.to_string());
                    }
                }
                Err(e) => panic!("reading /dev/kmsg: {e}"),
            }
        }
        &self.splats
    }

    /// [`Guard::read`], failing (a panic) when there is any splat, naming
    /// each line.
    pub fn check(&mut self) {
        let splats = self.read();
        assert!(splats.is_empty(), "{}", report(splats));
    }
}

fn report(splats: &[String]) -> String {
    let mut s = format!(
        "the kernel logged {} splat line(s) while this test ran (tests/kernel-splats.txt; issue 39):",
        splats.len()
    );
    for l in splats {
        s.push_str("\n  ");
        s.push_str(l);
    }
    s
}

/// This process's watch ([`start_watch`]); Err: why it could not
/// start (as root, that fails every check).
static WATCH: Mutex<Option<Result<Guard, String>>> = Mutex::new(None);

/// Starts this process's watch and its check at exit. Called before
/// `main`: each test binary that loads BPF puts it into its
/// `.init_array` (it then runs in every process of the binary: each test,
/// under nextest), e.g. tests/live/main.rs:
/// `#[used] #[link_section = ".init_array"] static KMSG_WATCH: extern "C" fn() = common::kmsg::start_watch;` As a normal user (no root: the tests
/// that load BPF are ignored) there is no watch. LATMON_KMSG_GUARD_STRICT=1
/// counts the negative control's marked lines too
/// (tests/live/kmsg_guard.rs runs itself so).
pub extern "C" fn start_watch() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let strict = std::env::var("LATMON_KMSG_GUARD_STRICT").is_ok_and(|v| v == "1");
    let guard = Guard::start()
        .map(|g| if strict { g } else { g.ignoring(SELFTEST_MARK) })
        .map_err(|e| format!("cannot watch the kernel's log (/dev/kmsg) as root: {e}"));
    *WATCH.lock().unwrap_or_else(|e| e.into_inner()) = Some(guard);
    // SAFETY: registers a function with the C signature atexit expects.
    unsafe { libc::atexit(check_at_exit) };
}

/// Fails the calling test (a panic) if the kernel logged a splat since
/// this process started. Called by [`crate::common::finish`].
pub fn check_process() {
    let mut watch = WATCH.lock().unwrap_or_else(|e| e.into_inner());
    match watch.as_mut() {
        None => {}
        Some(Err(e)) => panic!("{e}"),
        Some(Ok(g)) => {
            let splats = g.read();
            assert!(splats.is_empty(), "{}", report(splats));
        }
    }
}

/// At exit: a splat since the process started makes it exit 101 (a test
/// that passed fails), naming the lines on stderr.
extern "C" fn check_at_exit() {
    let mut watch = WATCH.lock().unwrap_or_else(|e| e.into_inner());
    let fail = match watch.as_mut() {
        None => None,
        Some(Err(e)) => Some(e.clone()),
        Some(Ok(g)) => {
            let splats = g.read();
            (!splats.is_empty()).then(|| report(splats))
        }
    };
    if let Some(why) = fail {
        eprintln!("latmon tests: FAIL at exit: {why}");
        // SAFETY: ends the process without running further exit handlers
        // (this one holds the watch's lock).
        unsafe { libc::_exit(101) };
    }
}
