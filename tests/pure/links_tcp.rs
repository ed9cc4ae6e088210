// SPDX-License-Identifier: MIT
//! The TCP output with two clients, one of which stops reading: the other
//! keeps getting every summary on time, the agent side never waits, and
//! the stalled client is disconnected. No BPF: summaries are synthetic.

use std::io::Read;
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use latmon::sinks;
use latmon_core::hist::Hist;
use latmon_core::session::{Session, Tick};
use latmon_core::summary::{IntervalReport, ProbeReport};
use latmon_core::wire::{Frame, FrameDecoder};

use crate::common;
use common::runq_probe;

#[test]
fn tcp_stalled_client_dropped_while_other_served_on_time() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut sink = sinks::open(&format!("tcp://127.0.0.1:{port}"), None).expect("listen");
    let fast = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut slow = TcpStream::connect(("127.0.0.1", port)).unwrap();
    std::thread::sleep(Duration::from_millis(100));

    // The fast client decodes continuously and timestamps every summary.
    let (tx, rx) = mpsc::channel::<(u64, Instant)>();
    let (ctx, crx) = mpsc::channel::<u32>();
    let reader = std::thread::spawn(move || {
        let mut fast = fast;
        let mut d = FrameDecoder::new();
        let mut buf = [0u8; 65536];
        let mut total = 0usize;
        loop {
            match fast.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    total += n;
                    let now = Instant::now();
                    d.feed(&buf[..n], &mut |r| match r {
                        Ok(Frame::Summary(s)) => {
                            let _ = tx.send((s.seq, now));
                        }
                        Ok(Frame::Status(s)) => {
                            let _ = ctx.send(s.clients);
                        }
                        Ok(_) => {}
                        Err(e) => panic!("fast client saw a bad frame: {e}"),
                    });
                }
            }
        }
        total
    });

    let n_probes = 4;
    let session = Session {
        board: "test".into(),
        kernel: "6.18".into(),
        boot_id: 1,
        start_ns: 0,
        interval_ns: 2_000_000,
        probes: (0..n_probes).map(runq_probe).collect(),
        failed: Vec::new(),
        thresholds_ns: Vec::new(),
        certificate: None,
    };
    let mut totals: Vec<Hist> = vec![Hist::default(); n_probes];
    let mut emitted: Vec<Instant> = vec![Instant::now()];
    let mut slowest_emit = Duration::ZERO;
    let mut clients_seen = Vec::new();
    let start = Instant::now();
    let mut seq = 0u64;
    // Emit until the stalled client has been dropped (Status says one client).
    while start.elapsed() < Duration::from_secs(30) {
        seq += 1;
        let prev = totals.clone();
        for (i, h) in totals.iter_mut().enumerate() {
            for k in 0..400u64 {
                h.record((k * 7_919 + seq * 104_729 + i as u64) % 5_000_000 + 100);
            }
        }
        let report = IntervalReport {
            loops: Vec::new(),
            loops_unlisted: 0,
            seq,
            time_ns: seq * 2_000_000,
            interval_ns: 2_000_000,
            last: false,
            probes: (0..n_probes).map(|i| ProbeReport::new(&session.probes[i], &prev[i], &totals[i])).collect(),
            alert_records: Vec::new(),
            agent: Default::default(),
        };
        let t0 = Instant::now();
        sink.emit(&Tick { session: &session, report: &report, totals: &totals, read_errors: &[0; 4] });
        slowest_emit = slowest_emit.max(t0.elapsed());
        emitted.push(t0);
        clients_seen.extend(crx.try_iter());
        if clients_seen.first() == Some(&2) && clients_seen.last() == Some(&1) {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let emitted_at = emitted;
    std::thread::sleep(Duration::from_millis(300));
    sink.close(Duration::from_secs(2));
    drop(sink);
    let fast_total = reader.join().unwrap();

    // A summary may span several frames: it has arrived with its last one.
    let mut arrivals: Vec<(u64, Instant)> = Vec::new();
    for (s, at) in rx.try_iter() {
        match arrivals.last_mut() {
            Some(last) if last.0 == s => last.1 = at,
            _ => arrivals.push((s, at)),
        }
    }
    eprintln!(
        "{seq} summaries emitted; slowest emit {slowest_emit:?}; clients seen {:?}",
        &clients_seen[..clients_seen.len().min(3)]
    );
    assert_eq!(clients_seen.first(), Some(&2), "both clients were served at first");
    assert_eq!(clients_seen.last(), Some(&1), "the stalled client was disconnected: {clients_seen:?}");
    // (A blocked write would take seconds; the bound leaves room for a
    // loaded CI machine descheduling this thread.)
    assert!(slowest_emit < Duration::from_millis(250), "emit never waits for a client: {slowest_emit:?}");
    let seqs: Vec<u64> = arrivals.iter().map(|a| a.0).collect();
    assert_eq!(seqs, (1..=seq).collect::<Vec<_>>(), "the reading client got every summary, in order");
    let worst = arrivals.iter().map(|&(s, at)| at.duration_since(emitted_at[s as usize])).max().unwrap();
    eprintln!("worst delivery latency to the reading client: {worst:?}");
    assert!(worst < Duration::from_secs(1), "served on time: worst {worst:?}");

    // The stalled client finds its connection closed, far behind.
    slow.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut slow_total = 0usize;
    let mut buf = [0u8; 65536];
    let ended = loop {
        match slow.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => slow_total += n,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break true,
            Err(_) => break false,
        }
    };
    assert!(ended, "the stalled client was disconnected");
    assert!(slow_total < fast_total, "stalled client {slow_total} bytes, reading client {fast_total}");
}
