// SPDX-License-Identifier: MIT
//! The CLI contract: check output, clear one-line errors, exit codes.

use crate::common;

use std::os::unix::process::CommandExt;

use common::*;

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn check_reports_kernel_features_and_the_plan() {
    let out = latmon().args(["check", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["btf"], true);
    assert!(v["kernel"].as_str().unwrap().len() > 2);
    assert_eq!(v["config_ok"], true);
    let kinds: Vec<_> = v["features"].as_array().unwrap().iter().map(|f| f["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["tracepoint", "tp_btf", "raw_tp", "kprobe", "fentry", "uprobe", "ringbuf"]);
    let ok = |k: &str| v["features"].as_array().unwrap().iter().find(|f| f["kind"] == k).unwrap()["ok"].clone();
    // Facts of this machine (see the brief): these load and attach here...
    for k in ["tracepoint", "tp_btf", "raw_tp", "uprobe", "ringbuf"] {
        assert_eq!(ok(k), true, "{k}");
    }
    // ...and these do not, each with a reason.
    for k in ["kprobe", "fentry"] {
        assert_eq!(ok(k), false, "{k}");
        let f = v["features"].as_array().unwrap().iter().find(|f| f["kind"] == k).unwrap();
        assert!(!f["error"].as_str().unwrap().is_empty());
    }
    let plan = &v["probes"][0];
    assert_eq!(
        (plan["name"].as_str(), plan["ok"].as_bool(), plan["attach"].as_str()),
        (Some("runq"), Some(true), Some("tp_btf"))
    );
}

#[test]
fn check_lists_each_outputs_budget() {
    let dir = std::env::temp_dir().join(format!("latmon-cli-budget-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("links.toml");
    std::fs::write(
        &cfg,
        "probes = [\"runq\"]\noutputs = [\"serial:/dev/ttyS1@9600\", \"serial:/dev/ttyS2,budget=30%\", \"file:/tmp/x.bin\", \"tcp://127.0.0.1:7070,budget=2000B/s\"]\n",
    )
    .unwrap();
    let out = latmon().args(["check", "--json", "--config"]).arg(&cfg).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let budgets: Vec<(String, Option<u64>)> = v["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["output"].as_str().unwrap().to_string(), o["budget_bps"].as_u64()))
        .collect();
    assert_eq!(
        budgets,
        [
            ("serial:/dev/ttyS1@9600".to_string(), Some(480)),
            ("serial:/dev/ttyS2@115200".to_string(), Some(3_456)),
            ("file:/tmp/x.bin".to_string(), None),
            ("tcp://127.0.0.1:7070".to_string(), Some(2_000)),
        ]
    );
    let text = latmon().args(["check", "--config"]).arg(&cfg).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("output       serial:/dev/ttyS1@9600 (frames): budget 480 B/s (50% of the line's 960 B/s)"),
        "{text}"
    );
    assert!(text.contains("output       file:/tmp/x.bin (frames): unlimited"), "{text}");
}

#[test]
fn check_rejects_an_invalid_config_with_exit_2() {
    let dir = std::env::temp_dir().join(format!("latmon-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("bad.toml");
    std::fs::write(&cfg, "interval = \"1s\"\nprobes = [\"runq,colour=red\"]\n").unwrap();
    let out = latmon().args(["check", "--config"]).arg(&cfg).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("INVALID") && text.contains("unknown option \"colour\""), "{text}");
}

#[test]
fn unknown_probe_is_a_clear_one_line_error() {
    let out = latmon().args(["run", "--probe", "runqq"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("unknown probe kind \"runqq\""), "{err}");
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn a_probe_that_cannot_run_is_reported_and_the_others_keep_running() {
    let out = latmon()
        .args([
            "run",
            "--probe",
            "runq",
            "--probe",
            "kfunc:do_nanosleep",
            "--duration",
            "300ms",
            "--interval",
            "100ms",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "runq still runs: {}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    // This host has no kprobes and refuses fentry: one line names the
    // probe and why each rung of its ladder failed.
    let line =
        err.lines().find(|l| l.contains("probe kfunc:do_nanosleep: cannot attach")).unwrap_or_else(|| panic!("{err}"));
    assert!(line.contains("fentry: ") && line.contains("kprobe: "), "each rung is named: {line}");
    let lines = json_lines(&String::from_utf8_lossy(&out.stdout));
    assert!(!lines.is_empty());
    assert!(lines.iter().all(|l| l["probes"].as_array().unwrap().len() == 1 && l["probes"][0]["name"] == "runq"));
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn when_no_probe_can_run_the_exit_is_non_zero() {
    let out = latmon().args(["run", "--probe", "kfunc:do_nanosleep", "--duration", "300ms"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no probe could attach"));
}

#[test]
fn not_root_is_named_as_the_cause() {
    // uid 65534 may not be able to reach the build tree (a clone under
    // root's mode-700 home): run a copy from a directory everyone can enter.
    let dir = std::env::temp_dir().join(format!("latmon-notroot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let bin = dir.join("latmon");
    std::fs::copy(env!("CARGO_BIN_EXE_latmon"), &bin).unwrap();
    std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out =
        std::process::Command::new(&bin).args(["run", "--duration", "1s"]).uid(65534).gid(65534).output().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("must run as root"), "{err}");
}

#[test]
fn bad_interval_is_rejected() {
    let out = latmon().args(["run", "--interval", "fast"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid duration \"fast\""));
}

#[test]
fn libbpf_libelf_and_zlib_are_linked_statically() {
    let out = std::process::Command::new("ldd").arg(env!("CARGO_BIN_EXE_latmon")).output().expect("ldd");
    let text = String::from_utf8_lossy(&out.stdout);
    for lib in ["libbpf", "libelf", "libz"] {
        assert!(!text.contains(lib), "{lib} must be linked statically:\n{text}");
    }
    // What remains is the C runtime: libc, the loader, the vDSO, and the
    // unwinder Rust's std links on gnu targets (gone in crt-static builds).
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        assert!(
            ["linux-vdso", "libc.so", "ld-linux", "libgcc_s", "statically linked"].iter().any(|ok| line.contains(ok)),
            "unexpected dynamic dependency: {line}"
        );
    }
}
