// SPDX-License-Identifier: MIT
//! Inputs an adversarial pass over the binary found unbounded or
//! unchecked, each through the real binary: `latmon check` judges outputs
//! as `latmon run` would open them, refuses absurd probe counts and
//! config files, accepts `--measure 0`; `latmon view` and `decode` survive
//! a CRC-valid Summary with min > max; tcp:// listeners serve a bounded
//! number of clients in bounded memory.

use crate::common;

use std::io::Read;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;
use latmon_core::hist::BUCKETS;
use latmon_core::wire::*;

fn check_json(args: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    let out = latmon().args(["check", "--json"]).args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("check JSON: {e}\n{}\n{err}", String::from_utf8_lossy(&out.stdout)));
    (out.status.code(), v, err)
}

/// Every output `latmon run` refuses, `latmon check` refuses too, naming
/// the output and the problem (exit 2, as for an invalid config); valid
/// ones pass, an absent serial device with a note.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn check_judges_outputs_as_run_opens_them() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_port = busy.local_addr().unwrap().port();
    let bad = [
        ("tcp://999.1.1.1:99999", "HOST:PORT"),
        ("tcp://999.1.1.1:9999", "listen on 999.1.1.1:9999"),
        ("ftp://example.org/x", "unknown output"),
        ("-,format=xml", "format must be text, json or frames"),
        ("modbus-tcp://127.0.0.1:5020,clients=0", "clients must be 1..256"),
        ("serial:/dev/ttyS1@10", "baud rate must be 50..4000000"),
        ("serial:/dev/ttyS1@fast", "baud rate must be a number"),
        (&*format!("tcp://127.0.0.1:{busy_port}"), "Address already in use"),
        (&*format!("modbus-tcp://127.0.0.1:{busy_port}"), "Address already in use"),
        (&*format!("prom://127.0.0.1:{busy_port}"), "Address already in use"),
        ("file:/nonexistent-latmon-dir/out.bin", "directory /nonexistent-latmon-dir does not exist"),
        ("unix:/nonexistent-latmon-dir/s.sock", "directory /nonexistent-latmon-dir does not exist"),
        ("tcp://127.0.0.1:7071,clients=0", "clients must be 1..64"),
    ];
    let cfg = scratch("bounds", "bad-outputs.toml");
    let list: Vec<String> = bad.iter().map(|(o, _)| format!("{o:?}")).collect();
    std::fs::write(&cfg, format!("probes = [\"runq\"]\noutputs = [{}]\n", list.join(", "))).unwrap();
    let (code, v, err) = check_json(&["--measure", "0", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{v}\n{err}");
    let outs = v["outputs"].as_array().expect("outputs in check JSON");
    assert_eq!(outs.len(), bad.len(), "{v}");
    for ((word, needle), o) in bad.iter().zip(outs) {
        assert_eq!(o["spec"], *word);
        assert_eq!(o["ok"], false, "{word}: {o}");
        let e = o["error"].as_str().unwrap_or_default();
        assert!(e.contains(needle), "{word}: {e:?} lacks {needle:?}");
    }
    // Text: one INVALID line per output.
    let text = latmon().args(["check", "--measure", "0", "--config", cfg.to_str().unwrap()]).output().unwrap();
    assert_eq!(text.status.code(), Some(2));
    let text = String::from_utf8_lossy(&text.stdout);
    assert_eq!(
        text.lines().filter(|l| l.starts_with("output ") && l.contains(" INVALID: ")).count(),
        bad.len(),
        "{text}"
    );
    drop(busy);

    // What run accepts, check accepts; nothing is created or taken.
    let file = scratch("bounds", "later.bin");
    let sock = scratch("bounds", "s.sock");
    let good = [
        "-".to_string(),
        format!("file:{}", file.display()),
        format!("unix:{}", sock.display()),
        "tcp://127.0.0.1:0,clients=2".into(),
        "udp://127.0.0.1:9".into(),
        "modbus-tcp://127.0.0.1:0".into(),
        "serial:/dev/ttyLATMON-ABSENT@115200".into(),
    ];
    let list: Vec<String> = good.iter().map(|o| format!("{o:?}")).collect();
    std::fs::write(&cfg, format!("probes = [\"runq\"]\noutputs = [{}]\n", list.join(", "))).unwrap();
    let (code, v, err) = check_json(&["--measure", "0", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{v}\n{err}");
    assert!(v["outputs"].as_array().unwrap().iter().all(|o| o["ok"] == true), "{v}");
    assert!(v["outputs"][6]["note"].as_str().unwrap().contains("absent"), "{v}");
    assert!(!file.exists() && !sock.exists(), "check creates no file and no socket");
}

/// `--help` says 0 skips the measurement: it does.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn check_measure_0_skips_the_measurement() {
    let (code, v, err) = check_json(&["--measure", "0", "--probe", "runq"]);
    assert_eq!(code, Some(0), "{v}\n{err}");
    assert_eq!(v["measure_ns"], 0);
    assert!(v["probes"][0]["cost"].is_null(), "{v}");
}

/// A thousand probes are refused before a single BPF object is opened
/// (they were tried: 2 379 programs, 11 413 fds, > 250 s).
#[test]
fn check_refuses_more_probes_than_the_bound() {
    let mut args = vec!["--measure".to_string(), "0".into()];
    for i in 0..1000 {
        args.push("--probe".into());
        args.push(format!("runq,name=r{i}"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, v, _) = check_json(&args);
    assert_eq!(code, Some(2), "{v}");
    assert!(v["config_error"].as_str().unwrap().contains("1000 probes configured; at most 32"), "{v}");
    assert!(v["probes"].as_array().unwrap().is_empty(), "no probe opened: {v}");
}

/// A config file is read up to 1 MiB, never to the end of /dev/zero.
#[test]
fn config_files_are_read_with_a_limit() {
    let (code, v, _) = check_json(&["--config", "/dev/zero"]);
    assert_eq!(code, Some(2), "{v}");
    assert!(v["config_error"].as_str().unwrap().contains("larger than 1048576 bytes"), "{v}");
    let out = latmon().args(["run", "--config", "/dev/zero"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("larger than 1048576 bytes"));
}

#[test]
fn absurd_intervals_and_durations_are_refused() {
    for (args, needle) in [
        (&["--interval", "18446744073s"][..], "interval: must be at most"),
        (&["--duration", "0s"][..], "duration: must be more than 0"),
        (&["--duration", "18446744073s"][..], "duration: must be at most"),
    ] {
        let out = latmon().args(["run", "--probe", "runq"]).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(needle), "{args:?}: {err}");
    }
    let out = latmon().args(["decode", "-", "--duration", "18446744073s"]).output().unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("duration: must be at most"));
}

/// One CRC-valid Summary whose min > max (after a Hello): `view` (which
/// aborted in `Ord::clamp`) and `decode` both show it and exit 0.
#[test]
fn view_and_decode_survive_min_above_max() {
    let hello = hello(
        "b",
        vec![ProbeDesc {
            id: 0,
            name: "runq".into(),
            kind: "runq".into(),
            attach: "tp_btf".into(),
            mode: String::new(),
            scheme: BucketScheme::LATMON,
        }],
    );
    let summary = |seq: u64, count: u64, min_ns: u64, max_ns: u64| {
        Frame::Summary(Summary {
            seq,
            boot_id: 42,
            time_ns: seq * 1_000_000_000,
            last: false,
            probes: vec![ProbeCounts {
                id: 0,
                count,
                sum_ns: count * 5000,
                min_ns,
                max_ns,
                drops: 0,
                alerts: 0,
                first_bucket: 0,
                end_bucket: BUCKETS as u16,
                buckets: vec![(100, count / 2), (120, count - count / 2)],
            }],
            merge: 0,
            base_seq: 0,
        })
    };
    let mut bytes = vec![DELIMITER];
    for f in [Frame::Hello(hello), summary(1, 10, 9_000_000, 10), summary(2, 30, u64::MAX, 1)] {
        bytes.extend(encode_to_vec(&f).unwrap());
    }
    let path = scratch("bounds", "min-above-max.bin");
    std::fs::write(&path, &bytes).unwrap();
    let src = format!("file:{}", path.display());
    let view = latmon().args(["view", &src]).output().unwrap();
    let screen = String::from_utf8_lossy(&view.stdout);
    assert!(view.status.success(), "view: {:?}\n{}", view.status, String::from_utf8_lossy(&view.stderr));
    assert!(screen.contains("runq") && screen.contains("seq 2"), "{screen}");
    let decode = latmon().args(["decode", &src]).output().unwrap();
    assert!(decode.status.success(), "decode: {:?}", decode.status);
    assert_eq!(
        json_lines(&String::from_utf8_lossy(&decode.stdout)).iter().filter(|l| l["type"] == "summary").count(),
        2
    );
}

fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Whether the server closed `s` (EOF) - a refused or displaced client -
/// rather than keeping it (data waiting, or nothing yet).
fn closed_by_server(s: &mut TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut b = [0u8; 65536];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(_) => return true, // reset
        }
    }
}

/// 1 000 loopback clients that never read (RSS went from 5 MB to 114-152
/// MB; ~100 MB stayed after they left): `clients=N` of them are served, the
/// rest refused or displaced; RSS stays within a few MiB.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn tcp_output_serves_a_bounded_number_of_clients_in_bounded_memory() {
    const CLIENTS: usize = 1000;
    const LIMIT: usize = 8;
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let out = format!("tcp://127.0.0.1:{port}");
    let child = start_run(&["--probe", "runq", "--interval", "10ms", "--output", &out]);
    let pid = child.id();
    std::thread::sleep(Duration::from_millis(500));
    let rss_before = rss_kib(pid);
    let mut socks = Vec::new();
    for _ in 0..CLIENTS {
        socks.push(TcpStream::connect(("127.0.0.1", port)).unwrap());
    }
    // Frames at 100 per second pile up for the clients that are kept.
    std::thread::sleep(Duration::from_secs(3));
    let rss_with = rss_kib(pid);
    let kept = socks.iter_mut().map(|s| !closed_by_server(s)).filter(|&k| k).count();
    drop(socks);
    std::thread::sleep(Duration::from_millis(500));
    let rss_after = rss_kib(pid);
    // A reader that keeps up keeps its slot against newcomers.
    let mut reader = TcpStream::connect(("127.0.0.1", port)).unwrap();
    reader.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 4096];
    let mut read_for = |d: Duration| {
        let (t, mut got) = (Instant::now(), 0usize);
        while t.elapsed() < d {
            match reader.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n,
            }
        }
        got
    };
    read_for(Duration::from_millis(300));
    // Newcomers that never read, 4 x the limit, while it reads on.
    let others: Vec<TcpStream> = (0..LIMIT * 4).map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap()).collect();
    let got = read_for(Duration::from_secs(1));
    let reader_kept = !closed_by_server(&mut reader);
    drop(others);
    interrupt(&child);
    let (status, _) = finish(child);
    eprintln!(
        "FIGURES tcp:// clients: {CLIENTS} connected, {kept} kept (limit {LIMIT}); latmon RSS {rss_before} KiB before, {rss_with} KiB with them, {rss_after} KiB after they left; a reading client got {got} bytes in 1 s among {} newcomers and kept its slot: {reader_kept}",
        LIMIT * 4
    );
    assert!(status.success());
    assert!(kept <= LIMIT, "{kept} of {CLIENTS} clients kept, limit {LIMIT}");
    assert!(rss_with <= rss_before + 8 * 1024, "RSS {rss_before} -> {rss_with} KiB with {CLIENTS} clients");
    assert!(rss_after <= rss_before + 8 * 1024, "RSS {rss_before} -> {rss_after} KiB after they left");
    assert!(got > 0 && reader_kept, "a client that reads is never the one displaced");
}

/// `check` judges a config's outputs as `run` opens them, together:
/// `prom://HOST:PORT,series=N` (which run accepts) passes; two outputs
/// on one listening address, file or device are refused by both, naming
/// the second output and the problem.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn check_and_run_agree_on_outputs_that_clash() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let file = scratch("bounds", "twice.json");
    let file = file.display();
    let absent = "/dev/ttyLATMON-ABSENT";
    let cases: Vec<([String; 2], &str)> = vec![
        ([format!("prom://127.0.0.1:{port}"), format!("modbus-tcp://127.0.0.1:{port}")], "Address already in use"),
        ([format!("prom://127.0.0.1:{port},series=4"), format!("prom://127.0.0.1:{port}")], "Address already in use"),
        ([format!("tcp://127.0.0.1:{port}"), format!("tcp://127.0.0.1:{port}")], "Address already in use"),
        ([format!("file:{file},format=json"), format!("file:{file},format=text")], "the same file as output 1"),
        ([format!("serial:{absent}"), format!("modbus-rtu:serial:{absent}")], "the same device as output 1"),
    ];
    let cfg = scratch("bounds", "clashing-outputs.toml");
    for (outs, needle) in &cases {
        std::fs::write(&cfg, format!("probes = [\"runq\"]\noutputs = [{:?}, {:?}]\n", outs[0], outs[1])).unwrap();
        let (code, v, err) = check_json(&["--measure", "0", "--config", cfg.to_str().unwrap()]);
        assert_eq!(code, Some(2), "check {outs:?}: {v}\n{err}");
        assert_eq!(v["outputs"][0]["ok"], true, "{outs:?}: {v}");
        let e = v["outputs"][1]["error"].as_str().unwrap_or_default();
        assert!(e.contains(needle) && e.contains(&outs[1]), "check {outs:?}: {e:?} lacks {needle:?}");
        let run = latmon()
            .args(["run", "--probe", "runq", "--duration", "300ms", "--output", &outs[0], "--output", &outs[1]])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success() && err.contains(needle), "run {outs:?}: {err}");
    }
    // What run accepts: the documented series option.
    std::fs::write(&cfg, "probes = [\"runq\"]\noutputs = [\"prom://127.0.0.1:0,series=4\"]\n").unwrap();
    let (code, v, err) = check_json(&["--measure", "0", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{v}\n{err}");
    assert!(!std::path::Path::new(&file.to_string()).exists(), "check creates no file");
}
