// SPDX-License-Identifier: MIT
//! `latmon certify` can fail: with an injected observer
//! (tests/fixtures/lm_observer.bpf.c, compiled and loaded by this test,
//! never part of latmon) that busy-waits 500 us at the measuring thread's
//! every sched_wakeup and sched_switch while armed - armed by this test in
//! the full epochs only, which latmon -v names as each starts - the
//! certificate's verdict is fail and says so. Without it, on this host, the verdict holds: the
//! p99.9 shift stays within max(2 us, the bootstrap interval's
//! half-width), and `latmon check` shows the stored certificate.

use crate::common;

use std::io::{BufRead, BufReader};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::*;
use libbpf_rs::{libbpf_sys, MapCore};

/// The observer's object, built with clang from tests/fixtures.
fn observer_object(dir: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("tests/fixtures/lm_observer.bpf.c");
    let arch = match std::env::consts::ARCH {
        "x86_64" => "x86",
        "aarch64" => "arm64",
        _ => "arm",
    };
    let obj = dir.join("lm_observer.o");
    let out = std::process::Command::new("clang")
        .args(["-O2", "-g", "-target", "bpf", "-mcpu=v3", "-Wall", "-c"])
        .arg("-I")
        .arg(root.join("bpf/vmlinux").join(arch))
        .arg(&src)
        .arg("-o")
        .arg(&obj)
        .output()
        .expect("clang is needed to build the injected observer");
    assert!(out.status.success(), "clang {}: {}", src.display(), String::from_utf8_lossy(&out.stderr));
    obj
}

/// The observer, attached (unarmed) while it lives.
struct Observer {
    _obj: libbpf_rs::Object,
    _links: Vec<libbpf_rs::Link>,
    /// Its .bss map: `armed`.
    bss: OwnedFd,
}

impl Observer {
    fn attach(dir: &Path) -> Observer {
        let obj = libbpf_rs::ObjectBuilder::default().open_file(observer_object(dir)).unwrap().load().unwrap();
        let links = obj.progs_mut().map(|p| p.attach().expect("attach the observer")).collect();
        let bss = obj
            .maps()
            .find(|m| m.name().to_string_lossy().ends_with(".bss"))
            .expect("the observer's .bss")
            .as_fd()
            .try_clone_to_owned()
            .unwrap();
        Observer { _obj: obj, _links: links, bss }
    }
}

/// Arms the observer to spin `spin_us` (0: disarmed).
fn arm(bss: &OwnedFd, spin_us: u32) {
    let (key, value) = (0u32, spin_us);
    // SAFETY: key and value are 4-byte values valid for the call.
    let rc = unsafe {
        libbpf_sys::bpf_map_update_elem(
            bss.as_raw_fd(),
            (&key as *const u32).cast(),
            (&value as *const u32).cast(),
            libbpf_sys::BPF_ANY.into(),
        )
    };
    assert_eq!(rc, 0, "arming the observer");
}

/// `latmon -v certify --duration 30s --epoch 1s --json`
/// (LATMON_CERTIFY_DURATION and _EPOCH override them: the README's figures
/// were made with 60s and 2s), storing into `cert`; the observer (if any)
/// armed exactly while a full epoch runs. Returns the JSON and the exit
/// code. Ten 1 s epochs a state, not three of 2 s: the interval resamples
/// epochs, and with three one burst of the shared host's noise in one
/// `none` epoch made it 5 ms wide (observer run: pass, 1 of 3 runs).
fn certify(cert: &Path, observer: Option<(&Observer, u32)>) -> (serde_json::Value, i32) {
    let duration = std::env::var("LATMON_CERTIFY_DURATION").unwrap_or_else(|_| "30s".into());
    let epoch = std::env::var("LATMON_CERTIFY_EPOCH").unwrap_or_else(|_| "1s".into());
    let mut child = latmon()
        .args(["-v", "certify", "--duration", &duration, "--epoch", &epoch, "--json", "--certificate"])
        .arg(cert)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let bss = observer.map(|(o, spin_us)| (o.bss.try_clone().unwrap(), spin_us));
    let watcher = std::thread::spawn(move || {
        let mut fulls = 0;
        for line in BufReader::new(stderr).lines() {
            let line = line.unwrap();
            eprintln!("[latmon] {line}");
            if let (Some((bss, spin_us)), Some(at)) = (&bss, line.find("certify: epoch ")) {
                let full = line[at..].ends_with(": full");
                fulls += u32::from(full);
                arm(bss, if full { *spin_us } else { 0 });
            }
        }
        if let Some((bss, _)) = &bss {
            arm(bss, 0);
        }
        fulls
    });
    let out = child.wait_with_output().unwrap();
    let fulls = watcher.join().unwrap();
    if observer.is_some() {
        assert!(fulls >= 3, "latmon -v named {fulls} full epochs");
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("certify JSON: {e}: {}", String::from_utf8_lossy(&out.stdout)));
    (v, out.status.code().unwrap_or(-1))
}

fn us(v: &serde_json::Value) -> f64 {
    v.as_i64().unwrap() as f64 / 1000.0
}

fn states_line(v: &serde_json::Value) -> String {
    ["none", "empty", "full"]
        .iter()
        .map(|s| {
            let st = &v["states"][s];
            format!("{s}: p50 {} p99.9 {} us", us(&st["p50_ns"]), us(&st["p999_ns"]))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn an_injected_observer_fails_the_certificate() {
    let cert = scratch("certify-observer", "certificate.json");
    let observer = Observer::attach(cert.parent().unwrap());
    // 500 us a spin, unless the host's own p99.9 (the none state's) was
    // that large already: then no shift could stand clear of it (this
    // VM's hypervisor put it at 1.5-1.8 ms, and a 500 us observer passed
    // twice in CI), and the observer spins twice the noise it measured,
    // once. The bound comes from what the run measured, not from a guess.
    let mut spin_us = 500;
    let (mut v, mut code) = certify(&cert, Some((&observer, spin_us)));
    let noise_us = v["states"]["none"]["p999_ns"].as_u64().unwrap() / 1000;
    eprintln!("{}; shift {} us CI {:?}; {}", states_line(&v), us(&v["shift_p999_ns"]), v["ci95_ns"], v["verdict_text"]);
    if v["verdict"] != "fail" && noise_us >= u64::from(spin_us) {
        let hidden = spin_us;
        spin_us = u32::try_from((2 * noise_us).min(8_000)).unwrap();
        eprintln!("the host's p99.9 ({noise_us} us) hid a {hidden} us observer: again with {spin_us} us");
        (v, code) = certify(&cert, Some((&observer, spin_us)));
        eprintln!(
            "{}; shift {} us CI {:?}; {}",
            states_line(&v),
            us(&v["shift_p999_ns"]),
            v["ci95_ns"],
            v["verdict_text"]
        );
    }
    assert_eq!(v["verdict"], "fail", "{v:#}");
    assert!(v["verdict_text"].as_str().unwrap().starts_with("FAIL"), "{}", v["verdict_text"]);
    assert_eq!(code, 3, "a failed certificate exits 3");
    let shift = v["shift_p999_ns"].as_i64().unwrap();
    assert!(shift > v["goal_ns"].as_i64().unwrap() && shift > 2_000, "{v:#}");
    // The observer's two spins land on every wakeup in full, in no other
    // state: the medians say where it was armed.
    let p50 = |s: &str| v["states"][s]["p50_ns"].as_i64().unwrap();
    let spins_ns = 2_000 * i64::from(spin_us);
    assert!(
        p50("full") - p50("none") > spins_ns * 4 / 5 && p50("empty") - p50("none") < 100_000,
        "{}",
        states_line(&v)
    );
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn without_an_observer_the_certificate_holds_and_check_shows_it() {
    let cert = scratch("certify-clean", "certificate.json");
    let (v, code) = certify(&cert, None);
    eprintln!("{}; shift {} us CI {:?}; {}", states_line(&v), us(&v["shift_p999_ns"]), v["ci95_ns"], v["verdict_text"]);
    for s in ["none", "empty", "full"] {
        assert!(v["states"][s]["samples"].as_u64().unwrap() > 3_000, "{s}: {v:#}");
    }
    assert!(v["latmon_cpu"]["bpf_runs"].as_u64().unwrap() > 0, "the full epochs ran the programs: {v:#}");
    assert!(v["cycle_response"]["cycles"].as_u64().unwrap() > 1_000, "the cycle probe saw the loop: {v:#}");
    assert!(v["attaches"].as_u64().unwrap() >= 2 && v["detaches"].as_u64().unwrap() >= 2, "{v:#}");
    // The goal is the interval's half-width where that is wider than
    // 2 us: the verdict is bound by the measured noise, not a fixed time.
    let ci = v["ci95_ns"].as_array().unwrap();
    let half = (ci[1].as_i64().unwrap() - ci[0].as_i64().unwrap()) / 2;
    assert_eq!(v["goal_ns"].as_i64().unwrap(), half.max(2_000));
    assert_eq!(v["verdict"], "pass", "{v:#}");
    assert_eq!(code, 0);
    let out = latmon().args(["check", "--json", "--measure", "0", "--certificate"]).arg(&cert).output().unwrap();
    let c: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(c["certificate"]["verdict"], "pass", "{c:#}");
    assert_eq!(c["certificate"]["shift_p999_ns"], v["shift_p999_ns"]);
    assert_eq!(c["certificate"]["path"], cert.display().to_string());
}
