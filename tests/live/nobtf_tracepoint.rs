// SPDX-License-Identifier: MIT
//! The tracepoint families without BTF (LATMON_FORCE_NO_BTF=1, as on a
//! kernel without BTF): `latmon check` names the mode per probe, and a
//! record lacking a field the probe reads is reported by event and field
//! while the other probes keep running.

use crate::common;

use common::*;

fn check_json(args: &[&str], env: &[(&str, &str)]) -> (i32, serde_json::Value) {
    let out =
        latmon().args(["check", "--json", "--measure", "0s"]).args(args).envs(env.iter().copied()).output().unwrap();
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("check --json: {e}: {}", String::from_utf8_lossy(&out.stdout)));
    (out.status.code().unwrap(), v)
}

fn plan<'a>(v: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    v["probes"].as_array().unwrap().iter().find(|p| p["name"] == name).unwrap_or_else(|| panic!("no plan {name}: {v}"))
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn check_names_the_no_btf_tracepoint_mode_per_probe() {
    let probes = ["runq", "syscall", "irq", "softirq", "timer", "kfunc:do_nanosleep"];
    let args: Vec<&str> = probes.iter().flat_map(|p| ["--probe", p]).collect();
    let (rc, v) = check_json(&args, &[("LATMON_FORCE_NO_BTF", "1")]);
    assert_eq!(v["force_no_btf"], true);
    assert!(v["btf_source"].is_null());
    for name in ["runq", "syscall", "irq", "softirq"] {
        let p = plan(&v, name);
        assert_eq!(p["ok"], true, "{p}");
        assert_eq!((p["attach"].as_str(), p["btf_mode"].as_str()), (Some("tracepoint"), Some("no-btf")), "{p}");
        assert!(p["mode"].as_str().unwrap().ends_with("layout from tracefs format"), "{p}");
    }
    // timer needs trusted task pointers: refused with the reason, the
    // others still planned; kfunc has its own no-BTF build (no kprobes on
    // this host, so it fails for that reason, not for BTF).
    let timer = plan(&v, "timer");
    assert_eq!(timer["ok"], false);
    assert!(timer["error"].as_str().unwrap().contains("LATMON_FORCE_NO_BTF"), "{timer}");
    assert_eq!(rc, 1, "a configured probe cannot run");

    // Text output says the same, one line per probe.
    let out = latmon()
        .args(["check", "--measure", "0s", "--probe", "runq", "--probe", "syscall"])
        .env("LATMON_FORCE_NO_BTF", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for name in ["runq", "syscall"] {
        let line = text.lines().find(|l| l.trim_start().starts_with(name)).unwrap_or_else(|| panic!("{text}"));
        assert!(
            line.contains("ok via tracepoint, no-btf build (") && line.contains("layout from tracefs format"),
            "{line}"
        );
    }

    // With BTF the same probes stay on tp_btf, co-re.
    let (rc, v) = check_json(&["--probe", "runq", "--probe", "softirq"], &[]);
    assert_eq!(rc, 0);
    for name in ["runq", "softirq"] {
        let p = plan(&v, name);
        assert_eq!((p["attach"].as_str(), p["btf_mode"].as_str()), (Some("tp_btf"), Some("co-re")), "{p}");
    }
}

/// Copy the real format files of `events` into a fake events/ tree.
fn fake_events(dir: &std::path::Path, events: &[&str]) {
    for e in events {
        let d = dir.join(e);
        std::fs::create_dir_all(&d).unwrap();
        let text = std::fs::read_to_string(format!("/sys/kernel/tracing/events/{e}/format")).unwrap();
        std::fs::write(d.join("format"), text).unwrap();
    }
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn a_record_without_a_needed_field_is_named_and_others_keep_running() {
    let dir = std::env::temp_dir().join(format!("latmon-fake-events-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    fake_events(
        &dir,
        &["sched/sched_wakeup", "sched/sched_wakeup_new", "sched/sched_switch", "raw_syscalls/sys_enter"],
    );
    // A kernel whose sched_switch record has no prev_state...
    let sw = dir.join("sched/sched_switch/format");
    let text = std::fs::read_to_string(&sw).unwrap();
    let cut: String = text.lines().filter(|l| !l.contains(" prev_state;")).map(|l| format!("{l}\n")).collect();
    assert_ne!(cut, text);
    std::fs::write(&sw, cut).unwrap();
    // ... and whose sys_enter `id` is 2 bytes.
    let se = dir.join("raw_syscalls/sys_enter/format");
    let text = std::fs::read_to_string(&se).unwrap();
    std::fs::write(&se, text.replace("long id;\toffset:8;\tsize:8;", "long id;\toffset:8;\tsize:2;")).unwrap();
    let env = [("LATMON_FORCE_NO_BTF", "1"), ("LATMON_TRACEFS_EVENTS", dir.to_str().unwrap())];
    let (rc, v) = check_json(&["--probe", "runq", "--probe", "syscall", "--probe", "softirq"], &env);
    let runq = plan(&v, "runq");
    assert_eq!(runq["ok"], false);
    let e = runq["error"].as_str().unwrap();
    assert!(e.contains("tracepoint sched/sched_switch: its record has no field `prev_state`"), "{e}");
    let sc = plan(&v, "syscall");
    let e = sc["error"].as_str().unwrap();
    assert!(e.contains("tracepoint raw_syscalls/sys_enter: field `id` is 2 bytes, expected 4 or 8"), "{e}");
    // softirq's formats are missing from the fake tree altogether: named too.
    let soft = plan(&v, "softirq");
    assert!(soft["error"].as_str().unwrap().contains("tracepoint irq/softirq_entry: format unreadable"), "{soft}");
    assert_eq!(rc, 1);

    // latmon run keeps the probes that can run (here: irq, from real formats).
    fake_events(&dir, &["irq/irq_handler_entry", "irq/irq_handler_exit"]);
    let out = latmon()
        .args([
            "run",
            "--probe",
            "runq",
            "--probe",
            "irq",
            "--duration",
            "600ms",
            "--interval",
            "200ms",
            "--format",
            "json",
        ])
        .envs(env)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("its record has no field `prev_state`"), "{err}");
    let lines = json_lines(&String::from_utf8_lossy(&out.stdout));
    assert!(!lines.is_empty());
    for l in &lines {
        let names: Vec<&str> = l["probes"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
        assert!(names.contains(&"irq") && !names.contains(&"runq"), "{names:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `btf_path` that is not BTF: the CO-RE rungs cannot relocate, the
/// ladder falls through to the no-BTF tracepoint build (which reads no
/// kernel types), and check shows both.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn an_unusable_btf_path_falls_through_to_the_tracepoint_build() {
    let dir = std::env::temp_dir().join(format!("latmon-junk-btf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let junk = dir.join("kernel.btf");
    std::fs::write(&junk, b"this is not BTF").unwrap();
    let cfg = dir.join("cfg.toml");
    std::fs::write(&cfg, format!("btf_path = \"{}\"\nprobes = [\"runq\", \"softirq\"]\n", junk.display())).unwrap();
    let (rc, v) = check_json(&["--config", cfg.to_str().unwrap()], &[]);
    assert_eq!(v["btf_source"].as_str(), junk.to_str(), "{v}");
    for name in ["runq", "softirq"] {
        let p = plan(&v, name);
        assert_eq!(
            (p["ok"].as_bool(), p["attach"].as_str(), p["btf_mode"].as_str()),
            (Some(true), Some("tracepoint"), Some("no-btf")),
            "{p}"
        );
    }
    assert_eq!(rc, 0);
    let _ = std::fs::remove_dir_all(&dir);
}
