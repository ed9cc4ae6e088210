// SPDX-License-Identifier: MIT
//! Live Modbus tests (root: the runq probe attaches to this kernel), with
//! clients nobody here wrote: mbpoll (Debian) and pymodbus (PyPI, in a venv
//! under target/, scripts/modbus-venv.sh). What they read must equal
//! latmon's own JSON for the interval the header's sequence number names.
//! Modbus TCP on loopback; Modbus RTU over two pty pairs joined by a relay
//! (the "bus"), which can also put noise on the line.

use crate::common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

fn port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The venv's python with pymodbus (created once, cached under target/).
fn python() -> &'static str {
    static PY: OnceLock<String> = OnceLock::new();
    PY.get_or_init(|| {
        let out = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/modbus-venv.sh"))
            .output()
            .expect("modbus-venv.sh");
        assert!(out.status.success(), "modbus-venv.sh: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    })
}

/// Run tests/modbus/pyclient.py; its JSON answer.
fn pyclient(args: &[&str]) -> Value {
    let out = Command::new(python())
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/modbus/pyclient.py"))
        .args(args)
        .output()
        .expect("python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "pyclient {args:?}: {}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("pyclient {args:?}: {e}: {stdout}"))
}

/// mbpoll's exit status, its values by register (`[N]: V`, the first
/// number: unsigned for 16-bit, signed for `:int`), and stderr.
fn mbpoll(args: &[&str]) -> (bool, BTreeMap<usize, i64>, String) {
    let out = Command::new("mbpoll").args(args).output().expect("mbpoll (apt-get install mbpoll)");
    let mut vals = BTreeMap::new();
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let Some((i, v)) = l.trim().strip_prefix('[').and_then(|r| r.split_once("]:")) else { continue };
        if let (Ok(i), Some(Ok(v))) = (i.parse(), v.split_whitespace().next().map(str::parse)) {
            vals.insert(i, v);
        }
    }
    (out.status.success(), vals, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// latmon's JSON lines (stdout), as they come.
struct Json<'a>(&'a Child);

impl Json<'_> {
    fn collect(child: &Child) -> Json<'_> {
        Json(child)
    }

    fn lines(&self) -> Vec<Value> {
        stdout_so_far(self.0).lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).collect()
    }

    fn seq(&self, seq: u64) -> Value {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(v) = self.lines().into_iter().find(|v| v["seq"] == seq) {
                return v;
            }
            assert!(Instant::now() < deadline, "no JSON line for seq {seq}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn wait_for(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.lines().len() < n {
            assert!(Instant::now() < deadline, "fewer than {n} intervals");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn us(ns: &Value) -> u64 {
    ns.as_u64().unwrap().div_ceil(1_000).min(u32::MAX as u64)
}

fn n(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("{k} missing in {v}"))
}

/// Background run-queue traffic, so every interval has events.
struct Load(Arc<AtomicBool>, Option<JoinHandle<()>>);

fn load() -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let s = Arc::clone(&stop);
    let t = std::thread::spawn(move || {
        while !s.load(Ordering::Relaxed) {
            pipe_ping_pong("mbload", 200);
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    Load(stop, Some(t))
}

impl Drop for Load {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        if let Some(t) = self.1.take() {
            let _ = t.join();
        }
    }
}

/// SIGINT and wait (stdout was taken by a collector).
fn stop(mut child: Child) {
    interrupt(&child);
    let st = child.wait().unwrap();
    assert!(st.success(), "latmon exit: {st}");
}

/// What pymodbus decoded for the probe block of an attached probe equals
/// the JSON report of that probe.
fn assert_block_matches(b: &Value, p: &Value) {
    let want = [
        ("state", 1),
        ("mechanism", 1),
        ("kind", 1),
        ("index", 0),
        ("total_count", n(p, "total_count")),
        ("count", n(p, "count").min(u32::MAX as u64)),
        ("p50_us", us(&p["p50_ns"])),
        ("p90_us", us(&p["p90_ns"])),
        ("p99_us", us(&p["p99_ns"])),
        ("p999_us", us(&p["p999_ns"])),
        ("max_us", us(&p["max_ns"])),
        ("alerts", n(p, "alerts")),
        ("drops", n(p, "drops")),
        ("min_us", us(&p["min_ns"])),
        ("mean_us", us(&p["mean_ns"])),
        ("total_alerts", n(p, "total_alerts")),
        ("total_drops", n(p, "total_drops")),
    ];
    for (k, v) in want {
        assert_eq!(b[k].as_u64(), Some(v), "{k}: block {b} vs JSON {p}");
    }
    assert_eq!(b["name"], p["name"]);
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn modbus_tcp_mbpoll_and_pymodbus_read_what_json_says() {
    let _load = load();
    let p = port();
    let ps = p.to_string();
    let child = start_run(&[
        "--probe",
        "runq",
        "--probe",
        "kfunc:do_nanosleep,name=kfn",
        "--interval",
        "1s",
        "--format",
        "json",
        "--output",
        "-",
        "--output",
        &format!("modbus-tcp://127.0.0.1:{p}"),
    ]);
    let json = Json::collect(&child);
    // From the second interval on, the interval count and the count since
    // start differ.
    json.wait_for(2);

    // mbpoll, 16-bit input registers, PDU addressing: the header.
    let (ok, h, err) = mbpoll(&["-m", "tcp", "-p", &ps, "-t", "3", "-0", "-1", "-r", "0", "-c", "22", "127.0.0.1"]);
    assert!(ok, "mbpoll: {err}");
    eprintln!("mbpoll header (16-bit input registers 0..21): {:?}", h.values().collect::<Vec<_>>());
    let expect = [(0, 0x4C4D), (1, 1), (2, 2), (3, 40), (4, 32), (5, 0b11), (16, 1), (17, 1), (18, 0), (19, 0)];
    for (i, v) in expect {
        assert_eq!(h[&i], v, "header register {i}");
    }

    // mbpoll, 32-bit holding registers, big-endian word order (-B): header
    // and probe blocks 0 and 1 in one request, so from one interval.
    let (ok, v, err) =
        mbpoll(&["-m", "tcp", "-p", &ps, "-t", "4:int", "-B", "-0", "-1", "-r", "0", "-c", "56", "127.0.0.1"]);
    assert!(ok, "mbpoll: {err}");
    let u = |i: usize| v[&i] as u32 as u64;
    let seq = u(8) << 32 | u(10);
    let j = json.seq(seq);
    let jp = &j["probes"][0];
    eprintln!("mbpoll -t 4:int -B read seq {seq}: block 0 total_count {} count {} p50 {} p99 {} max {} µs; JSON: total_count {} count {} p50 {} p99 {} max {} ns",
        u(36) << 32 | u(38), u(40), u(42), u(46), u(50), jp["total_count"], jp["count"], jp["p50_ns"], jp["p99_ns"], jp["max_ns"]);
    assert_eq!(u(12), us(&j["interval_ns"]), "interval µs");
    let b = 32;
    assert_eq!(u(b), 1 << 16 | 1, "state attached, mechanism tp_btf");
    assert_eq!(u(b + 2), 1 << 16, "kind runq, index 0");
    assert_eq!(u(b + 4) << 32 | u(b + 6), n(jp, "total_count"));
    assert_eq!(u(b + 8), n(jp, "count"));
    assert!(n(jp, "count") > 0, "the load made run-queue events");
    for (o, k) in [
        (10, "p50_ns"),
        (12, "p90_ns"),
        (14, "p99_ns"),
        (16, "p999_ns"),
        (18, "max_ns"),
        (24, "min_ns"),
        (26, "mean_ns"),
    ] {
        assert_eq!(u(b + o), us(&jp[k]), "{k}");
    }
    for (o, k) in [(20, "alerts"), (22, "drops"), (28, "total_alerts"), (30, "total_drops")] {
        assert_eq!(u(b + o), n(jp, k), "{k}");
    }
    // Block 1: a kfunc probe, which this host cannot attach (no kprobes,
    // fentry refused), keeps its place: state failed, kind kfunc (6),
    // index 1, all counters 0.
    let b = 72;
    assert_eq!((u(b), u(b + 2)), (0, 6 << 16 | 1));
    assert!((b + 4..b + 32).step_by(2).all(|i| u(i) == 0));
    assert_eq!(u(b + 32), u32::from_be_bytes(*b"kfn\0") as u64);

    // Without -B, mbpoll pairs the words the other way round: the same
    // registers, swapped (the register order is high word first).
    let (ok, le, _) = mbpoll(&["-m", "tcp", "-p", &ps, "-t", "3:int", "-0", "-1", "-r", "0", "-c", "4", "127.0.0.1"]);
    assert!(ok);
    assert_eq!(le[&0] as u32, 0x0001_4C4D, "magic, version as a little-word-order int32");

    // The same image as input registers and as holding registers.
    let mut same = false;
    for _ in 0..3 {
        let (_, a, _) =
            mbpoll(&["-m", "tcp", "-p", &ps, "-t", "3:int", "-B", "-0", "-1", "-r", "0", "-c", "36", "127.0.0.1"]);
        let (_, h, _) =
            mbpoll(&["-m", "tcp", "-p", &ps, "-t", "4:int", "-B", "-0", "-1", "-r", "0", "-c", "36", "127.0.0.1"]);
        if a.get(&10) == h.get(&10) {
            assert_eq!(a, h, "FC04 and FC03 read the same interval differently");
            same = true;
            break;
        }
    }
    assert!(same, "three FC04/FC03 pairs straddled an interval each");

    // pymodbus: header and both blocks, u64/u32 decoded by pymodbus.
    let r = pyclient(&["read", "--tcp", "127.0.0.1", &ps, "--blocks", "2"]);
    let (inp, hold) = (&r["input"], &r["holding"]);
    assert_eq!(inp, hold, "FC04 and FC03 give the same image");
    let seq = n(inp, "seq");
    let j = json.seq(seq);
    eprintln!("pymodbus read seq {seq}: block 0 {}\nJSON probe: {}", inp["blocks"][0], {
        let mut p = j["probes"][0].clone();
        p.as_object_mut().unwrap().remove("buckets");
        p
    });
    assert_eq!((n(inp, "magic"), n(inp, "version"), n(inp, "probe_count"), n(inp, "block_size")), (0x4C4D, 1, 2, 40));
    assert_eq!((n(inp, "status"), n(inp, "attached"), n(inp, "failed")), (0b11, 1, 1));
    assert_eq!(n(inp, "interval_us"), us(&j["interval_ns"]));
    assert_block_matches(&inp["blocks"][0], &j["probes"][0]);
    assert_eq!(inp["blocks"][1]["state"], 0);
    assert_eq!(inp["blocks"][1]["name"], "kfn");

    // The exception codes, as the clients report them.
    let e = pyclient(&["exceptions", "--tcp", "127.0.0.1", &ps]);
    eprintln!("pymodbus exception codes: {e}");
    for k in [
        "write_register",
        "write_registers",
        "write_coil",
        "write_coils",
        "read_coils",
        "read_discrete_inputs",
        "mask_write_register",
        "readwrite_registers",
    ] {
        assert_eq!(e[k], 1, "{k}");
    }
    assert_eq!(
        (&e["input_out_of_range"], &e["holding_past_end"], &e["header_after"]),
        (&Value::from(2), &Value::from(2), &Value::from("ok"))
    );
    let (ok, _, err) = mbpoll(&["-m", "tcp", "-p", &ps, "-t", "4", "-0", "-1", "-r", "5", "127.0.0.1", "7"]);
    eprintln!("mbpoll write: {}", err.trim());
    assert!(!ok && err.contains("Illegal function"), "mbpoll write: {err}");
    let (ok, _, err) = mbpoll(&["-m", "tcp", "-p", &ps, "-t", "3", "-0", "-1", "-r", "112", "-c", "1", "127.0.0.1"]);
    eprintln!("mbpoll read past the end: {}", err.trim());
    assert!(!ok && err.contains("Illegal data address"), "mbpoll out of range: {err}");
    stop(child);
}

fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count()
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn modbus_tcp_200_connect_cycles_leak_no_fd() {
    let p = port();
    let ps = p.to_string();
    let child = start_run(&[
        "--probe",
        "runq",
        "--interval",
        "500ms",
        "--output",
        &format!("modbus-tcp://127.0.0.1:{p}"),
        "--output",
        "-",
    ]);
    let pid = child.id();
    // One client first, so the server is past every first-use allocation.
    assert_eq!(pyclient(&["cycles", "1", "--tcp", "127.0.0.1", &ps])["ok"], 1);
    std::thread::sleep(Duration::from_millis(300));
    let before = fd_count(pid);
    let r = pyclient(&["cycles", "200", "--tcp", "127.0.0.1", &ps]);
    assert_eq!(r["ok"], 200, "{r}");
    // And 200 rude ones: connect and vanish, half a request, garbage.
    for k in 0..200u32 {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", p)).unwrap();
        match k % 4 {
            0 => {}
            1 => drop(s.write_all(&[0, 1, 0, 0, 0, 6, 1, 4])),
            2 => drop(s.write_all(&[0xFF; 40])),
            _ => {
                s.write_all(&[0, 1, 0, 0, 0, 6, 1, 4, 0, 0, 0, 2]).unwrap();
                let mut b = [0u8; 13];
                s.read_exact(&mut b).unwrap();
                assert_eq!(&b[9..11], &[0x4C, 0x4D]);
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut after = fd_count(pid);
    while after != before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        after = fd_count(pid);
    }
    eprintln!("latmon fds: {before} before, {after} after 200 pymodbus + 200 raw connect/disconnect cycles");
    assert_eq!(after, before, "fd leak");
    stop(child);
}

/// One FC04 request for registers 0..2 on `s` and its 13-byte answer.
fn ask_once(s: &mut std::net::TcpStream) -> [u8; 13] {
    s.write_all(&[0, 1, 0, 0, 0, 6, 1, 4, 0, 0, 0, 2]).unwrap();
    let mut b = [0u8; 13];
    s.read_exact(&mut b).unwrap();
    b
}

/// Whether the server closed `s` (EOF or reset) rather than keeping it.
fn closed_by_server(s: &mut std::net::TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let mut b = [0u8; 64];
    match s.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
    }
}

/// Slow clients (one request, then nothing for longer than
/// DISPLACE_IDLE, like the ones completing a request every 12 s) fill
/// every slot but the PLC's: a newcomer (mbpoll) still gets in, by
/// displacing the slow client idle longest, and the PLC (mbpoll polling
/// once a second) is never the one closed. Before: "too many clients".
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn modbus_tcp_slow_clients_yield_their_slot_never_the_plc() {
    let p = port();
    let ps = p.to_string();
    let child = start_run(&[
        "--probe",
        "runq",
        "--interval",
        "100ms",
        "--output",
        &format!("modbus-tcp://127.0.0.1:{p},clients=3"),
    ]);
    // Line-buffered, so that what it printed survives its end.
    let plc = Command::new("stdbuf")
        .args([
            "-oL",
            "-eL",
            "mbpoll",
            "-m",
            "tcp",
            "-p",
            &ps,
            "-t",
            "3",
            "-0",
            "-r",
            "0",
            "-c",
            "2",
            "-l",
            "1000",
            "127.0.0.1",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("mbpoll");
    std::thread::sleep(Duration::from_millis(500));
    let mut slow: Vec<std::net::TcpStream> =
        (0..2).map(|_| std::net::TcpStream::connect(("127.0.0.1", p)).unwrap()).collect();
    let t0 = Instant::now();
    for s in &mut slow {
        assert_eq!(&ask_once(s)[9..11], &[0x4C, 0x4D]);
    }
    // Three slots taken: the PLC and two clients now silent for > 2 s.
    std::thread::sleep(Duration::from_millis(2600));
    let (ok, h, err) = mbpoll(&["-m", "tcp", "-p", &ps, "-t", "3", "-0", "-1", "-r", "0", "-c", "1", "127.0.0.1"]);
    let newcomer_after = t0.elapsed();
    let closed: Vec<bool> = slow.iter_mut().map(closed_by_server).collect();
    // The PLC goes on polling undisturbed.
    std::thread::sleep(Duration::from_millis(2500));
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(plc.id() as i32), nix::sys::signal::Signal::SIGINT);
    let out = plc.wait_with_output().unwrap();
    let plc_out = String::from_utf8_lossy(&out.stdout);
    let plc_err = String::from_utf8_lossy(&out.stderr);
    let polls = plc_out.lines().filter(|l| l.trim_start().starts_with("[0]:")).count();
    stop(child);
    eprintln!(
        "FIGURES modbus displacement: newcomer after {newcomer_after:.1?} of silence: ok {ok} ({err:?}); slow clients closed {closed:?}; PLC polls {polls}, PLC errors {:?}",
        plc_err.trim()
    );
    assert!(ok && h.get(&0) == Some(&0x4C4D), "the newcomer got no slot: {err}");
    assert_eq!(closed.iter().filter(|&&c| c).count(), 1, "exactly one slow client displaced: {closed:?}");
    assert!(closed[0], "the one idle longest (asked first) is displaced: {closed:?}");
    assert!(polls >= 5 && !plc_err.contains("failed"), "the PLC kept its slot: {polls} polls, {plc_err}");
}

/// The serial "bus": copies bytes both ways between the masters of the
/// agent's pty and the client's pty; `noise` bytes are put on the agent's
/// line as soon as they are queued.
fn bus(agent: &Pty, client: &Pty, stop: Arc<AtomicBool>, noise: Arc<Mutex<Vec<u8>>>) -> JoinHandle<()> {
    let (mut a, mut c) = (agent.master.try_clone().unwrap(), client.master.try_clone().unwrap());
    std::thread::spawn(move || {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let mut buf = [0u8; 1024];
        while !stop.load(Ordering::Relaxed) {
            let junk = std::mem::take(&mut *noise.lock().unwrap());
            if !junk.is_empty() {
                a.write_all(&junk).unwrap();
            }
            let (ra, rc) = {
                let mut fds = [PollFd::new(a.as_fd(), PollFlags::POLLIN), PollFd::new(c.as_fd(), PollFlags::POLLIN)];
                if poll(&mut fds, PollTimeout::from(20u8)).unwrap_or(0) == 0 {
                    continue;
                }
                let ev = |f: &PollFd| f.revents().is_some_and(|r| r.contains(PollFlags::POLLIN));
                (ev(&fds[0]), ev(&fds[1]))
            };
            if ra {
                if let Ok(n) = a.read(&mut buf) {
                    let _ = c.write_all(&buf[..n]);
                }
            }
            if rc {
                if let Ok(n) = c.read(&mut buf) {
                    let _ = a.write_all(&buf[..n]);
                }
            }
        }
    })
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn modbus_rtu_over_a_pty_pair_with_pymodbus_and_mbpoll() {
    let _load = load();
    let (agent_tty, client_tty) = (pty(), pty());
    let stop_bus = Arc::new(AtomicBool::new(false));
    let noise = Arc::new(Mutex::new(Vec::new()));
    let relay = bus(&agent_tty, &client_tty, Arc::clone(&stop_bus), Arc::clone(&noise));
    let child = start_run(&[
        "--probe",
        "runq",
        "--interval",
        "1s",
        "--format",
        "json",
        "--output",
        "-",
        "--output",
        &format!("modbus-rtu:serial:{}@19200,unit=17,parity=none", agent_tty.path),
    ]);
    let json = Json::collect(&child);
    json.wait_for(1);

    // pymodbus's serial client (pyserial), 19200 8N1 (this kernel's ptys
    // refuse PARENB with EINVAL, so not the Modbus default 8E1), unit 17.
    let r = pyclient(&["read", "--rtu", &client_tty.path, "19200", "N", "--unit", "17", "--blocks", "1"]);
    let (inp, hold) = (&r["input"], &r["holding"]);
    assert_eq!(inp, hold, "FC04 and FC03 give the same image");
    let seq = n(inp, "seq");
    let j = json.seq(seq);
    eprintln!("pymodbus RTU read seq {seq}: block 0 {}", inp["blocks"][0]);
    assert_eq!((n(inp, "magic"), n(inp, "probe_count"), n(inp, "status"), n(inp, "bad_requests")), (0x4C4D, 1, 1, 0));
    assert_block_matches(&inp["blocks"][0], &j["probes"][0]);

    // mbpoll (libmodbus RTU) on the same line; another unit gets silence.
    let tty = client_tty.path.as_str();
    let rtu = ["-m", "rtu", "-b", "19200", "-P", "none", "-0", "-1", "-o", "1"];
    let (ok, h, err) = mbpoll(&[&rtu[..], &["-a", "17", "-t", "3", "-r", "0", "-c", "5", tty]].concat());
    assert!(ok, "mbpoll rtu: {err}");
    assert_eq!(h.values().copied().collect::<Vec<_>>(), [0x4C4D, 1, 1, 40, 32]);
    let (ok, _, err) = mbpoll(&[&rtu[..], &["-a", "5", "-o", "0.3", "-t", "3", "-r", "0", "-c", "1", tty]].concat());
    assert!(!ok, "unit 5 answered: {err}");
    let (ok, _, err) = mbpoll(&[&rtu[..], &["-a", "17", "-t", "4", "-r", "3", tty, "9"]].concat());
    assert!(!ok && err.contains("Illegal function"), "mbpoll rtu write: {err}");

    // Noise on the line: dropped, counted, flagged; the next poll works.
    noise.lock().unwrap().extend_from_slice(&[0x11, 0x04, 0x00, 0x00, 0x00, 0x02, 0xDE, 0xAD, 0x55]);
    std::thread::sleep(Duration::from_millis(1300));
    let r = pyclient(&["read", "--rtu", &client_tty.path, "19200", "N", "--unit", "17", "--blocks", "1"]);
    let inp = &r["input"];
    eprintln!("after noise: status {} bad_requests {}", inp["status"], inp["bad_requests"]);
    assert!(n(inp, "bad_requests") >= 1);
    assert_eq!(n(inp, "status") & 0b1000, 0b1000, "link errors bit");
    assert_block_matches(&inp["blocks"][0], &json.seq(n(inp, "seq"))["probes"][0]);

    stop(child);
    stop_bus.store(true, Ordering::Relaxed);
    relay.join().unwrap();
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn modbus_rtu_device_that_appears_later_is_opened_and_flagged() {
    use latmon::sinks;
    use latmon_core::hist::Hist;
    use latmon_core::ident::{BtfMode, Family, Mechanism};
    use latmon_core::session::{Session, Tick};
    use latmon_core::summary::{IntervalReport, ProbeInfo, ProbeReport};
    // No BPF here: the output alone, with one synthetic interval.
    let dir = std::env::temp_dir().join(format!("latmon-mb-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("ttyPLC");
    let _ = std::fs::remove_file(&link);
    let mut sink = sinks::open(&format!("modbus-rtu:serial:{}@9600,parity=none", link.display()), None)
        .expect("absent device is not fatal");
    let info = ProbeInfo {
        name: "runq".into(),
        kind: Family::Runq,
        attach: Mechanism::RawTp,
        mode: String::new(),
        btf_mode: BtfMode::CoRe,
        wait: Default::default(),
    };
    let session = Session {
        board: "b".into(),
        kernel: "k".into(),
        boot_id: 3,
        start_ns: 0,
        interval_ns: 1_000_000_000,
        probes: vec![info.clone()],
        failed: Vec::new(),
        thresholds_ns: Vec::new(),
        certificate: None,
    };
    let mut h = Hist::default();
    for v in [1_500u64, 2_500, 900_000] {
        h.record(v);
    }
    let report = IntervalReport {
        seq: 41,
        time_ns: 41_000_000_000,
        interval_ns: 1_000_000_000,
        last: false,
        probes: vec![ProbeReport::new(&info, &Hist::default(), &h)],
        alert_records: Vec::new(),
        agent: Default::default(),
        loops: Vec::new(),
        loops_unlisted: 0,
    };
    // The device shows up (a USB-RS485 adapter plugged in): latmon opens it
    // within its reopen period.
    std::thread::sleep(Duration::from_millis(300));
    let (agent_tty, client_tty) = (pty(), pty());
    std::os::unix::fs::symlink(&agent_tty.path, &link).unwrap();
    let stop_bus = Arc::new(AtomicBool::new(false));
    let relay = bus(&agent_tty, &client_tty, Arc::clone(&stop_bus), Arc::new(Mutex::new(Vec::new())));
    sink.emit(&Tick { session: &session, report: &report, totals: std::slice::from_ref(&h), read_errors: &[0] });
    std::thread::sleep(Duration::from_millis(1500));
    let r = pyclient(&["read", "--rtu", &client_tty.path, "9600", "N", "--unit", "1", "--blocks", "1"]);
    let inp = &r["input"];
    eprintln!("RTU device opened late: status {} seq {} block 0 {}", inp["status"], inp["seq"], inp["blocks"][0]);
    assert_eq!(n(inp, "seq"), 41);
    assert_eq!(n(inp, "status"), 0b1001, "running, link errors (the device was missing)");
    let b = &inp["blocks"][0];
    assert_eq!((n(b, "mechanism"), n(b, "total_count"), n(b, "max_us")), (2, 3, 900));
    sink.close(Duration::from_secs(1));
    stop_bus.store(true, Ordering::Relaxed);
    relay.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn chain_probe_blocks_read_family_8() {
    // A PLC told the family of each block: chain read 0 (unknown).
    let p = port();
    let child = start_run(&[
        "--probe",
        "chain,comm=lm-nochain",
        "--interval",
        "200ms",
        "--output",
        &format!("modbus-tcp://127.0.0.1:{p}"),
    ]);
    // Block 0's registers exist from the first summary on (200 ms after
    // ready; later on a loaded machine): poll for them.
    let family = poll_until(Duration::from_secs(5), || mbpoll_try_input_register(p, 32 + 2).ok().filter(|&f| f != 0))
        .unwrap_or_else(|| mbpoll_input_register(p, 32 + 2));
    let index = mbpoll_input_register(p, 32 + 3);
    stop(child);
    assert_eq!((family, index), (8, 0), "block 0: family chain, index 0");
}

/// The map's policy number of a JSON policy word (docs/modbus-map.md,
/// loop block +4: the kernel's SCHED_* numbers).
fn policy_code(word: &str) -> u64 {
    match word {
        "other" => 0,
        "fifo" => 1,
        "rr" => 2,
        "batch" => 3,
        "idle" => 5,
        "deadline" => 6,
        "ext" => 7,
        w => panic!("policy {w}"),
    }
}

/// The map's period source number of a JSON word (loop block +8).
fn source_code(word: &str) -> u64 {
    ["none", "timerfd", "abs_timer", "deadline", "relative", "median"]
        .iter()
        .position(|w| *w == word)
        .unwrap_or_else(|| panic!("period_source {word}")) as u64
}

/// A loop block as pymodbus decoded it equals JSON's loop, register by
/// register (docs/modbus-map.md "Loop block N").
fn assert_loop_block_matches(b: &Value, l: &Value) {
    let c = &l["cycle"];
    let counted = c.is_object();
    let cn = |k: &str| if counted { n(c, k) } else { 0 };
    let want = [
        ("tid", n(l, "tid")),
        ("pid", n(l, "pid")),
        ("policy", policy_code(l["policy"].as_str().unwrap())),
        ("prio", n(l, "prio")),
        ("period_us", us(&l["period_ns"])),
        ("period_source", source_code(l["period_source"].as_str().unwrap())),
        ("counted", counted as u64),
        ("total_cycles", cn("total_cycles")),
        ("cycles", cn("cycles").min(u32::MAX as u64)),
        ("misses", cn("misses").min(u32::MAX as u64)),
        ("total_misses", cn("total_misses").min(u32::MAX as u64)),
        ("total_overruns", cn("total_overruns").min(u32::MAX as u64)),
        ("total_rules", cn("total_rules") & 0xFFFF_FFFF),
        ("cycle_period_us", if counted { us(&c["period_ns"]) } else { 0 }),
        ("reserved0", 0),
        ("reserved1", 0),
        ("reserved2", 0),
    ];
    for (k, v) in want {
        assert_eq!(b[k].as_u64(), Some(v), "{k}: block {b} vs JSON {l}");
    }
    assert_eq!(b["comm"], l["comm"], "block {b} vs JSON {l}");
}

/// Issue 42 item 3: with no configuration (`cycle,auto` watching the
/// loop zoo, tests/fixtures/lm_loops.c, misses injected into zoo_abs1ms
/// every 40th cycle after 3 s), pymodbus reads the loops area's header
/// and the first five loop blocks, dated by the header's sequence
/// number read before and after; every register equals JSON's
/// `loops` for that interval, zoo_abs1ms's block carries misses, and
/// the tids, policies, priorities and periods are the zoo's own (its
/// `loop` lines). mbpoll reads the header as docs/modbus-map.md shows.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn modbus_loops_area_reads_what_json_says_of_the_loop_zoo() {
    let zoo = compile_fixture("lm_loops", "lm_loops", &["-O2", "-pthread"]);
    let p = port();
    let ps = p.to_string();
    let child = start_run(&[
        "--interval",
        "1s",
        "--format",
        "json",
        "--output",
        "-",
        "--output",
        &format!("modbus-tcp://127.0.0.1:{p}"),
    ]);
    let json = Json::collect(&child);
    let zoo = Command::new(zoo)
        .args(["20", "seed=5", "miss=40", "warmup_ms=3000"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("lm_loops");
    // Until an interval counts misses of zoo_abs1ms in one of the first
    // five blocks (the hang guard is the zoo's own run).
    let abs_missed = |l: &Value| {
        l["loops"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|x| x["watched"] == true)
            .take(5)
            .any(|x| x["comm"] == "zoo_abs1ms" && x["cycle"]["total_misses"].as_u64().is_some_and(|m| m >= 2))
    };
    let deadline = Instant::now() + Duration::from_secs(17);
    while !json.lines().iter().any(abs_missed) {
        assert!(Instant::now() < deadline, "zoo_abs1ms never watched with misses: {:?}", json.lines().last());
        std::thread::sleep(Duration::from_millis(100));
    }
    let r = pyclient(&["loops", "--tcp", "127.0.0.1", &ps, "--blocks", "5"]);
    let j = json.seq(n(&r, "seq"));
    let listed = j["loops"].as_array().cloned().unwrap_or_default();
    let watched: Vec<&Value> = listed.iter().filter(|x| x["watched"] == true).collect();
    eprintln!("pymodbus loops area at seq {}: {r}\nJSON loops: {}", n(&r, "seq"), j["loops"]);
    let (ok, h, err) = mbpoll(&["-m", "tcp", "-p", &ps, "-t", "3", "-0", "-1", "-r", "45056", "-c", "8", "127.0.0.1"]);
    assert!(ok, "mbpoll: {err}");
    eprintln!("mbpoll loops header (45056..45063): {:?}", h.values().collect::<Vec<_>>());
    assert_eq!((h[&45059], h[&45060], h[&45063]), (40, 45064, 32), "mbpoll: the area's layout");
    assert!(watched.len() >= 2, "the zoo's periodic RT loops watched: {}", j["loops"]);
    let want_header = [
        ("listed", listed.len() as u64),
        ("watched", watched.len() as u64),
        ("blocks", watched.len().min(32) as u64),
        ("block_size", 40),
        ("first_block", 45064),
        ("unwatched", n(&j["agent"], "loops_unwatched")),
        ("unlisted", j["loops_unlisted"].as_u64().unwrap_or(0)),
        ("capacity", 32),
    ];
    for (k, v) in want_header {
        assert_eq!(r[k].as_u64(), Some(v), "{k}: {r} vs JSON {}", j["loops"]);
    }
    // Every watched loop's block (the zoo's four at most: abs, timerfd,
    // relative, deadline), and the block past them reads 0.
    let blocks = r["loops"].as_array().unwrap();
    for (b, l) in blocks.iter().zip(&watched) {
        assert_loop_block_matches(b, l);
    }
    for b in &blocks[watched.len().min(5)..] {
        assert!(b.as_object().unwrap().values().all(|v| *v == 0 || *v == ""), "past the watched loops: {b}");
    }
    let abs = r["loops"].as_array().unwrap().iter().find(|b| b["comm"] == "zoo_abs1ms").cloned();
    let abs = abs.unwrap_or_else(|| panic!("zoo_abs1ms not in the first five blocks: {r}"));
    assert!(n(&abs, "total_misses") >= 2 && n(&abs, "counted") == 1, "injected misses: {abs}");

    // The zoo's own truth, once it has run out: its threads' tids,
    // policies, priorities and periods.
    let out = zoo.wait_with_output().unwrap();
    assert!(out.status.success(), "lm_loops: {}", String::from_utf8_lossy(&out.stderr));
    stop(child);
    let stdout = String::from_utf8_lossy(&out.stdout);
    for b in &blocks[..watched.len().min(5)] {
        let comm = b["comm"].as_str().unwrap();
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("loop {comm} ")))
            .unwrap_or_else(|| panic!("{comm}: not a zoo thread ({stdout})"));
        let f: Vec<&str> = line.split_whitespace().collect();
        let field = |k: &str| f[f.iter().position(|x| *x == k).unwrap() + 1];
        let policy = field("policy").trim_start_matches("SCHED_").to_lowercase();
        let period_ns: u64 = field("period_ns").parse().unwrap();
        let mut truth = vec![
            ("tid", field("tid").parse::<u64>().unwrap()),
            ("policy", policy_code(&policy)),
            ("prio", field("prio").parse().unwrap()),
        ];
        // Exact periods only: a relative sleeper's is inferred (within 1 %,
        // tests/live/loops.rs).
        if ["abs_timer", "timerfd", "deadline"].contains(&field("period_source")) {
            truth.push(("period_us", period_ns / 1000));
            truth.push(("period_source", source_code(field("period_source"))));
        }
        for (k, v) in truth {
            assert_eq!(b[k].as_u64(), Some(v), "{k}: block {b} vs the zoo's {line}");
        }
        eprintln!("block {comm}: {b}\n  zoo: {line}");
    }
}
