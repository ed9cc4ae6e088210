// SPDX-License-Identifier: MIT
//! The CLI side of links: bad SINK/SOURCE words fail early with one clear
//! line, and frames on stdout pipe straight into `latmon decode -`.

use crate::common;

use std::process::Stdio;

use common::*;

fn one_line_error(args: &[&str], needle: &str) {
    let out = latmon().args(args).output().unwrap();
    assert!(!out.status.success(), "{args:?} should fail");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?}: {err}");
    assert!(out.stdout.is_empty(), "nothing ran");
}

#[test]
fn bad_link_words_fail_early_with_one_line() {
    one_line_error(&["run", "--output", "ttyS1"], "unknown output/source \"ttyS1\"");
    one_line_error(&["run", "--output", "serial:/dev/ttyS1,parity=mark"], "parity must be none, even or odd");
    one_line_error(&["run", "--output", "tcp://localhost"], "expected HOST:PORT");
    one_line_error(&["run", "--output", "-,format=xml"], "format must be text, json or frames");
    one_line_error(&["run", "--output", "file:/nonexistent-dir/x.bin"], "No such file or directory");
    one_line_error(&["decode", "file:/nonexistent-dir/x.bin"], "No such file or directory");
    one_line_error(&["view", "udp://nohost"], "expected HOST:PORT");
}

#[test]
fn a_port_in_use_is_reported_at_startup() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    one_line_error(&["run", "--duration", "300ms", "--output", &format!("tcp://127.0.0.1:{port}")], "listen");
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn frames_on_stdout_pipe_into_decode() {
    let mut run = latmon()
        .args(["run", "--probe", "runq", "--interval", "200ms", "--duration", "1s", "--format", "frames"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let decode = latmon().args(["decode", "-"]).stdin(run.stdout.take().unwrap()).output().unwrap();
    assert!(run.wait().unwrap().success());
    assert!(decode.status.success());
    let lines = json_lines(&String::from_utf8_lossy(&decode.stdout));
    let kinds: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(&kinds[..3], ["hello", "status", "summary"], "{kinds:?}");
    let sums: Vec<_> = lines.iter().filter(|l| l["type"] == "summary").collect();
    assert_eq!(sums.len(), 5);
    assert_eq!(sums[4]["last"], true);
    assert!(String::from_utf8_lossy(&decode.stderr).contains("0 CRC errors, 0 resyncs"));
}

/// A series born after the first Hello (here: a syscall made only once the
/// run is well under way) is announced by a new Hello before the summaries
/// that carry it, so the receiver names every probe id it sees.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn series_born_late_are_named_on_the_frame_link() {
    let comm = "lm-lateseries";
    let spec = format!("syscall,comm={comm},name=sc");
    let mut run = latmon()
        .args(["run", "--probe", &spec, "--interval", "200ms", "--duration", "1500ms", "--format", "frames"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = run.stdout.take().unwrap();
    let decode = std::thread::spawn(move || latmon().args(["decode", "-"]).stdin(out).output().unwrap());
    std::thread::sleep(std::time::Duration::from_millis(700));
    std::thread::Builder::new()
        .name(comm.into())
        .spawn(|| {
            for _ in 0..10 {
                // SAFETY: no arguments.
                unsafe { libc::syscall(libc::SYS_getppid) };
            }
        })
        .unwrap()
        .join()
        .unwrap();
    assert!(run.wait().unwrap().success());
    let decode = decode.join().unwrap();
    let lines = json_lines(&String::from_utf8_lossy(&decode.stdout));
    let names: Vec<&str> = lines
        .iter()
        .filter(|l| l["type"] == "summary")
        .flat_map(|l| l["probes"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()))
        .collect();
    assert!(names.contains(&"sc:getppid"), "the late series arrived named: {names:?}");
    assert!(names.iter().all(|n| !n.starts_with('#')), "every id named by a Hello: {names:?}");
    let hellos = lines.iter().filter(|l| l["type"] == "hello").count();
    assert!(hellos >= 2, "a second Hello announced the new series ({hellos} Hello frames)");
}
