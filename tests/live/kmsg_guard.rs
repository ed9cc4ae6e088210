// SPDX-License-Identifier: MIT
//! The negative controls of the kernel-log guard (tests/common/kmsg.rs,
//! issue 39): a splat line logged while a test runs fails it, naming the
//! line; one logged before the guard started does not. The fake splat is
//! written to /dev/kmsg (as root, a write there logs a line) and carries
//! [`SELFTEST_MARK`], which the other tests' watches pass over: they may
//! run beside these.

use crate::common::kmsg::{self, Guard, SELFTEST_MARK};

/// Logs a fake "BUG: scheduling while atomic" line, as the kernel logs
/// it (level 3), naming [`SELFTEST_MARK`] as the task.
fn log_fake_splat(tag: &str) -> String {
    let line = format!("BUG: scheduling while atomic: {SELFTEST_MARK}/{}/0x00000002 {tag}", std::process::id());
    std::fs::write("/dev/kmsg", format!("<3>{line}\n")).expect("write /dev/kmsg (root)");
    line
}

/// A splat logged after the guard started fails its check, which names
/// the line.
#[test]
#[ignore = "needs root: writes to /dev/kmsg"]
#[should_panic(expected = "BUG: scheduling while atomic: latmon-kmsg-guard-selftest/")]
fn guard_fails_naming_a_splat_logged_during_the_test() {
    let mut g = Guard::start().expect("open /dev/kmsg");
    let line = log_fake_splat("during");
    eprintln!("logged: {line}");
    g.check();
}

/// A splat logged before the guard started does not count; the fake
/// splat matches the patterns (so the control above fails for the right
/// reason) and the patterns' word rule holds (`DEBUG:` is not `BUG:`).
#[test]
#[ignore = "needs root: writes to /dev/kmsg"]
fn guard_counts_only_lines_logged_after_its_start() {
    let line = log_fake_splat("before");
    assert!(kmsg::is_splat(&line), "the fake splat matches tests/kernel-splats.txt: {line}");
    assert!(!kmsg::is_splat("x86/DEBUG: no BUG here"), "DEBUG: is not BUG:");
    let mut g = Guard::start().expect("open /dev/kmsg");
    g.check();
    // The marked line passes only a guard told to pass over it.
    let mut marked = Guard::start().unwrap().ignoring(SELFTEST_MARK);
    log_fake_splat("ignored");
    assert!(marked.read().is_empty(), "a marked line is passed over: {:?}", marked.splats);
}

/// The process watch fails a test that passed, at exit: this binary run
/// on [`helper_logs_a_fake_splat_and_passes`] with the watch counting the
/// marked lines (LATMON_KMSG_GUARD_STRICT=1) exits non-zero and names the
/// line; the same helper without the fake line exits 0.
#[test]
#[ignore = "needs root: writes to /dev/kmsg"]
fn process_watch_fails_a_passing_test_at_exit() {
    let run = |fake: bool| {
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new(exe)
            .args(["--exact", "kmsg_guard::helper_logs_a_fake_splat_and_passes", "--include-ignored", "--nocapture"])
            .env("LATMON_KMSG_GUARD_STRICT", "1")
            .env("LATMON_KMSG_GUARD_HELPER", if fake { "splat" } else { "clean" })
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        let text = format!("{}{err}", String::from_utf8_lossy(&out.stdout));
        eprintln!("helper (fake splat: {fake}): {:?}\n{text}", out.status);
        (out.status, text)
    };
    let (clean, text) = run(false);
    assert!(clean.success() && text.contains("1 passed"), "the helper alone passes: {text}");
    let (status, text) = run(true);
    assert!(text.contains("1 passed"), "the helper's test itself passed: {text}");
    assert_eq!(status.code(), Some(101), "the watch failed the process at exit: {text}");
    assert!(
        text.contains("FAIL at exit") && text.contains("BUG: scheduling while atomic: latmon-kmsg-guard-selftest/"),
        "the failure names the line: {text}"
    );
}

/// Run only by [`process_watch_fails_a_passing_test_at_exit`]
/// (LATMON_KMSG_GUARD_HELPER set): logs a fake splat (`splat`) or nothing
/// (`clean`) and passes; otherwise does nothing.
#[test]
#[ignore = "needs root: writes to /dev/kmsg"]
fn helper_logs_a_fake_splat_and_passes() {
    if std::env::var("LATMON_KMSG_GUARD_HELPER").as_deref() == Ok("splat") {
        log_fake_splat("helper");
    }
}
