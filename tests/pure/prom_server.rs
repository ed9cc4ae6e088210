// SPDX-License-Identifier: MIT
//! The Prometheus endpoint beside hostile clients, without BPF: slow
//! clients (a byte of request head every 1.5 s, from python sockets) and
//! silent ones (connected, never a byte) must cost only their own slots.
//! Scrapes by curl and by a real Prometheus stay fast; a slow client is
//! cut at the request deadline; a flood of connections beyond the slots
//! never keeps a scrape out.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use latmon::sinks::{self, prom, Sink};
use latmon_core::hist::Hist;
use latmon_core::session::{Session, Tick};
use latmon_core::summary::{IntervalReport, ProbeReport};

use crate::common;
use common::prometheus::Prometheus;
use common::runq_probe;

/// A Prometheus output on a free port with one interval published.
fn endpoint() -> (Box<dyn Sink>, String) {
    let mut sink = sinks::open(&format!("{}127.0.0.1:0", prom::SCHEME), None).expect("listen");
    let addr = sink.name().trim_start_matches(prom::SCHEME).to_string();
    let session = Session {
        board: "t".into(),
        kernel: "k".into(),
        boot_id: 1,
        start_ns: 0,
        interval_ns: 1_000_000_000,
        probes: vec![runq_probe(0)],
        failed: Vec::new(),
        thresholds_ns: Vec::new(),
        certificate: None,
    };
    let mut h = Hist::default();
    h.record(5_000);
    let report = IntervalReport {
        seq: 1,
        time_ns: 1_000_000_000,
        interval_ns: 1_000_000_000,
        last: false,
        probes: vec![ProbeReport::new(&session.probes[0], &Hist::default(), &h)],
        alert_records: Vec::new(),
        agent: Default::default(),
        loops: Vec::new(),
        loops_unlisted: 0,
    };
    sink.emit(&Tick { session: &session, report: &report, totals: &[h], read_errors: &[0] });
    (sink, addr)
}

/// `n` slow-loris clients in one python process: each sends a request
/// head one byte every 1.5 s, and, when the server closes the
/// connection, prints how long it lived and connects again.
fn slow_clients(addr: &str, n: usize) -> Child {
    let (host, port) = addr.rsplit_once(':').unwrap();
    let script = format!(
        r#"
import socket, threading, time, sys
def one():
    while True:
        s = socket.create_connection(("{host}", {port}))
        t0 = time.monotonic()
        head = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100000
        try:
            for b in head:
                s.sendall(bytes([b]))
                s.settimeout(1.5)
                try:
                    if s.recv(4096) == b"":
                        break
                except socket.timeout:
                    pass
        except OSError:
            pass
        print("lived %.2f" % (time.monotonic() - t0), flush=True)
        s.close()
for _ in range({n}):
    threading.Thread(target=one, daemon=True).start()
time.sleep(3600)
"#
    );
    Command::new("python3").args(["-c", &script]).stdout(Stdio::piped()).spawn().expect("python3")
}

/// One scrape by curl: (HTTP status, seconds it took).
fn curl_scrape(addr: &str) -> (u16, f64) {
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-m", "20", "-w", "%{http_code} %{time_total}"])
        .arg(format!("http://{addr}/metrics"))
        .output()
        .expect("curl");
    let s = String::from_utf8_lossy(&out.stdout);
    let (code, t) = s.split_once(' ').unwrap_or(("0", "0"));
    (code.parse().unwrap_or(0), t.parse().unwrap_or(f64::MAX))
}

/// 5 slow and 5 silent clients beside scrapes: every scrape answers in
/// well under a second (before: one at a time, 2 s per read, every scrape
/// past 10 s), by curl and by a real Prometheus with a 900 ms scrape
/// timeout; a slow client is cut at the request deadline.
#[test]
fn slow_and_silent_clients_cost_only_their_own_slots() {
    let (mut sink, addr) = endpoint();
    let mut slow = slow_clients(&addr, 5);
    let silent: Vec<TcpStream> = (0..5).map(|_| TcpStream::connect(&addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(500));
    let mut times = Vec::new();
    for _ in 0..3 {
        let (code, t) = curl_scrape(&addr);
        eprintln!("scrape beside 5 slow + 5 silent clients: HTTP {code} in {t:.3} s");
        times.push((code, t));
    }
    // A real Prometheus scraping every second, timing out at 900 ms.
    let p = Prometheus::start("slow-clients", &addr, false);
    p.wait_for("up", 1.0);
    std::thread::sleep(Duration::from_secs(6));
    let up_min = p.scalar("min_over_time(up[5s])", None);
    let dur_max = p.scalar("max_over_time(scrape_duration_seconds[5s])", None);
    eprintln!("Prometheus beside them: min up {up_min:?}, slowest scrape {dur_max:?} s");
    // The slow clients' connections end at the deadline, not hours later.
    let lived: Vec<f64> = {
        let out = slow.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        let until = Instant::now() + prom::REQUEST_DEADLINE + Duration::from_secs(3);
        let mut v = Vec::new();
        while let Ok(l) = rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
            v.extend(l.strip_prefix("lived ").and_then(|s| s.parse::<f64>().ok()));
        }
        v
    };
    let _ = slow.kill();
    let _ = slow.wait();
    drop(silent);
    drop(p);
    sink.close(Duration::from_secs(1));
    eprintln!("slow clients' connections lived {lived:?} s");
    for (code, t) in times {
        assert_eq!(code, 200, "every scrape answered");
        assert!(t < 1.0, "a scrape took {t} s beside slow and silent clients");
    }
    assert_eq!(up_min, Some(1.0), "Prometheus never missed a scrape");
    assert!(dur_max.is_some_and(|d| d < 0.5), "Prometheus' slowest scrape {dur_max:?} s");
    let deadline = prom::REQUEST_DEADLINE.as_secs_f64();
    assert!(!lived.is_empty(), "a slow client is cut within the request deadline ({deadline} s)");
    assert!(lived.iter().all(|&l| l < deadline + 2.0), "slow clients lived {lived:?} s");
}

/// Twice as many silent connections as slots, opened again as fast as
/// they are closed: a scrape still gets in (a newcomer displaces the
/// oldest connection still sending its request), and the server never
/// holds more than its slots.
#[test]
fn a_connection_flood_never_keeps_a_scrape_out() {
    let (mut sink, addr) = endpoint();
    let mut held: Vec<TcpStream> = Vec::new();
    let mut worst = 0.0f64;
    for round in 0..5 {
        held.retain(still_open);
        while held.len() < 2 * prom::HTTP_CLIENTS_MAX {
            held.push(TcpStream::connect(&addr).unwrap());
        }
        std::thread::sleep(Duration::from_millis(100));
        let (code, t) = curl_scrape(&addr);
        eprintln!("round {round}: HTTP {code} in {t:.3} s beside {} silent connections", held.len());
        assert_eq!(code, 200);
        worst = worst.max(t);
    }
    // The server holds at most its slots: the rest were closed by it.
    let open = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let port: u16 = addr.rsplit_once(':').unwrap().1.parse().unwrap();
    let established = open
        .lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3
                && f[1].rsplit_once(':').is_some_and(|(_, p)| u16::from_str_radix(p, 16).ok() == Some(port))
                && f[3] == "01"
        })
        .count();
    drop(held);
    sink.close(Duration::from_secs(1));
    eprintln!("worst scrape {worst:.3} s; server-side connections established {established}");
    assert!(worst < 1.0, "worst scrape {worst} s");
    assert!(established <= prom::HTTP_CLIENTS_MAX, "{established} connections held by the server");
}

/// The server has not closed `s` (a read would block, not end).
fn still_open(s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut b = [0u8; 1];
    matches!(s.peek(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}
