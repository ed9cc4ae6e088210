// SPDX-License-Identifier: MIT
//! The Modbus TCP output without BPF: synthetic intervals, clients built on
//! rmodbus's client side (requests and response checks) or raw bytes for
//! what no client would send. One consistent image per read while the
//! agent swaps images as fast as it can; exceptions 01/02/03; malformed
//! frames; connection limit, idle timeout, allowlist, unit id.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use latmon::sinks::modbus::map::{off, reg, status, BLOCK_WORDS, HEADER_WORDS, MAGIC};
use latmon::sinks::{self, Sink};
use latmon_core::extra::ProbeExtra;
use latmon_core::hist::Hist;
use latmon_core::ident::Family;
use latmon_core::session::{Session, Tick};
use latmon_core::summary::{FailedProbe, IntervalReport, ProbeReport};
use rmodbus::client::ModbusRequest;
use rmodbus::{ErrorKind, ModbusProto};

use crate::common;
use common::runq_probe;

fn port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Two attached probes (blocks 0 and 1) and a failed one (block 2).
fn session() -> Session {
    Session {
        board: "t".into(),
        kernel: "k".into(),
        boot_id: 0x1234_5678,
        start_ns: 0,
        interval_ns: 1_000_000,
        probes: vec![runq_probe(0), runq_probe(1)],
        failed: vec![FailedProbe { position: 2, name: "timer".into(), kind: Family::Timer, why: "absent".into() }],
        thresholds_ns: Vec::new(),
        certificate: None,
    }
}

/// Every value of interval `seq` is derived from it: a read that mixed two
/// intervals would show it.
fn report(seq: u64, s: &Session) -> IntervalReport {
    let probes = (0..2u64)
        .map(|i| {
            let mut p = ProbeReport::new(&s.probes[i as usize], &Hist::default(), &Hist::default());
            let v = |k: u64| (seq * 16 + i * 8 + k) * 1_000;
            p.total_count = seq * 5_000_000_029 + i;
            p.count = seq + i;
            (p.p50_ns, p.p90_ns, p.p99_ns, p.p999_ns, p.max_ns) = (v(1), v(2), v(3), v(4), v(5));
            (p.min_ns, p.mean_ns) = (v(0), v(1));
            (p.alerts, p.drops, p.total_alerts, p.total_drops) = (seq % 7, seq % 5, seq, seq * 2);
            p
        })
        .collect();
    IntervalReport {
        seq,
        time_ns: seq * 1_000_000,
        interval_ns: 1_000_000,
        last: false,
        probes,
        alert_records: Vec::new(),
        agent: Default::default(),
        loops: Vec::new(),
        loops_unlisted: 0,
    }
}

fn emit(sink: &mut Box<dyn Sink>, s: &Session, seq: u64) -> Duration {
    let r = report(seq, s);
    let t0 = Instant::now();
    sink.emit(&Tick { session: s, report: &r, totals: &[], read_errors: &[0, 0] });
    t0.elapsed()
}

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    s
}

/// Send one request ADU, read one response ADU (by its MBAP length).
fn transact(s: &mut TcpStream, req: &[u8]) -> std::io::Result<Vec<u8>> {
    s.write_all(req)?;
    let mut resp = vec![0u8; 6];
    s.read_exact(&mut resp)?;
    let n = u16::from_be_bytes([resp[4], resp[5]]) as usize;
    resp.resize(6 + n, 0);
    s.read_exact(&mut resp[6..])?;
    Ok(resp)
}

/// FC03 (`holding`) or FC04 registers through rmodbus's client.
fn read_regs(s: &mut TcpStream, unit: u8, holding: bool, addr: u16, count: u16) -> Result<Vec<u16>, ErrorKind> {
    let mut m = ModbusRequest::new(unit, ModbusProto::TcpUdp);
    let mut req = Vec::new();
    if holding {
        m.generate_get_holdings(addr, count, &mut req)?;
    } else {
        m.generate_get_inputs(addr, count, &mut req)?;
    }
    let resp = transact(s, &req).map_err(|_| ErrorKind::CommunicationError)?;
    let mut out = Vec::new();
    m.parse_u16(&resp, &mut out)?;
    Ok(out)
}

fn u32_at(w: &[u16], a: u16) -> u64 {
    (w[a as usize] as u64) << 16 | w[a as usize + 1] as u64
}

fn u64_at(w: &[u16], a: u16) -> u64 {
    u32_at(w, a) << 32 | u32_at(w, a + 2)
}

/// Check a read of the header and blocks 0 and 1 against `report(seq)`.
fn check_consistent(w: &[u16]) -> u64 {
    assert_eq!(w[0], MAGIC);
    let seq = u64_at(w, reg::SEQ);
    for i in 0..2u64 {
        let b = HEADER_WORDS + i as u16 * BLOCK_WORDS;
        let v = |k: u64| seq * 16 + i * 8 + k;
        let got = [
            u64_at(w, b + off::TOTAL_COUNT),
            u32_at(w, b + off::COUNT),
            u32_at(w, b + off::P50_US),
            u32_at(w, b + off::P90_US),
            u32_at(w, b + off::P99_US),
            u32_at(w, b + off::P999_US),
            u32_at(w, b + off::MAX_US),
            u32_at(w, b + off::MIN_US),
            u32_at(w, b + off::MEAN_US),
            u32_at(w, b + off::ALERTS),
            u32_at(w, b + off::DROPS),
            u32_at(w, b + off::TOTAL_ALERTS),
            u32_at(w, b + off::TOTAL_DROPS),
        ];
        let want = [
            seq * 5_000_000_029 + i,
            seq + i,
            v(1),
            v(2),
            v(3),
            v(4),
            v(5),
            v(0),
            v(1),
            seq % 7,
            seq % 5,
            seq,
            seq * 2,
        ];
        assert_eq!(got, want, "block {i} of a read that says seq {seq}");
    }
    seq
}

#[test]
fn every_read_comes_from_one_interval_while_images_swap() {
    let p = port();
    let mut sink = sinks::open(&format!("modbus-tcp://127.0.0.1:{p}"), None).unwrap();
    let s = session();
    emit(&mut sink, &s, 1);
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..3)
        .map(|k| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut c = connect(p);
                let (mut reads, mut seqs) = (0u64, std::collections::BTreeSet::new());
                while !stop.load(Ordering::Relaxed) {
                    let n = HEADER_WORDS + 2 * BLOCK_WORDS;
                    let w = read_regs(&mut c, 1, k % 2 == 0, 0, n).expect("read");
                    assert_eq!(w.len(), n as usize);
                    seqs.insert(check_consistent(&w));
                    reads += 1;
                }
                (reads, seqs.len())
            })
        })
        .collect();
    let t0 = Instant::now();
    let (mut seq, mut slowest) = (1u64, Duration::ZERO);
    while t0.elapsed() < Duration::from_millis(1500) {
        seq += 1;
        slowest = slowest.max(emit(&mut sink, &s, seq));
        std::thread::sleep(Duration::from_micros(200));
    }
    stop.store(true, Ordering::Relaxed);
    let results: Vec<(u64, usize)> = readers.into_iter().map(|r| r.join().unwrap()).collect();
    eprintln!("{seq} images swapped in; reads, distinct intervals per reader: {results:?}; slowest emit {slowest:?}");
    for (reads, distinct) in results {
        assert!(reads > 100, "{reads} reads");
        assert!(distinct > 20, "reads spanned {distinct} intervals");
    }
    assert!(slowest < Duration::from_millis(100), "emit never waits for clients: {slowest:?}");

    // The failed probe's block: state 0, kind timer, its index, name.
    let mut c = connect(p);
    let b = HEADER_WORDS + 2 * BLOCK_WORDS;
    let w = read_regs(&mut c, 1, false, b, BLOCK_WORDS).unwrap();
    assert_eq!(&w[..4], &[0, 0, 5, 2]);
    assert!(w[4..32].iter().all(|&x| x == 0));
    assert_eq!(&w[32..35], &[u16::from_be_bytes(*b"ti"), u16::from_be_bytes(*b"me"), u16::from_be_bytes(*b"r\0")]);
    let h = read_regs(&mut c, 1, true, 0, 18).unwrap();
    assert_eq!(&h[..6], &[MAGIC, 1, 3, BLOCK_WORDS, HEADER_WORDS, status::RUNNING | status::PROBE_FAILED]);
    assert_eq!(u32_at(&h, reg::BOOT_ID), 0x1234_5678);
    assert_eq!((h[reg::ATTACHED as usize], h[reg::FAILED as usize]), (2, 1));
    sink.close(Duration::from_secs(1));
}

fn raw(pdu: &[u8], unit: u8, tid: u16) -> Vec<u8> {
    let mut v = tid.to_be_bytes().to_vec();
    v.extend_from_slice(&[0, 0]);
    v.extend_from_slice(&(pdu.len() as u16 + 1).to_be_bytes());
    v.push(unit);
    v.extend_from_slice(pdu);
    v
}

/// True when the server closed the connection (EOF or reset) within `wait`.
fn closed_within(s: &mut TcpStream, wait: Duration) -> bool {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut b = [0u8; 64];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

#[test]
fn exceptions_and_malformed_frames() {
    let p = port();
    let mut sink = sinks::open(&format!("modbus-tcp://127.0.0.1:{p}"), None).unwrap();

    // Before the first interval: the header's fixed part, no blocks.
    let mut c = connect(p);
    let h = read_regs(&mut c, 1, false, 0, HEADER_WORDS).unwrap();
    assert_eq!((h[0], h[1], h[2], u64_at(&h, reg::SEQ)), (MAGIC, 1, 0, 0));
    assert_eq!(read_regs(&mut c, 1, false, HEADER_WORDS, 1), Err(ErrorKind::IllegalDataAddress));

    let s = session();
    emit(&mut sink, &s, 7);
    let len = HEADER_WORDS + 3 * BLOCK_WORDS;
    let exc = |c: &mut TcpStream, pdu: &[u8]| {
        let r = transact(c, &raw(pdu, 1, 0x4242)).unwrap();
        assert_eq!(&r[..2], &[0x42, 0x42], "transaction id echoed");
        r[7..].to_vec()
    };
    assert_eq!(exc(&mut c, &[4, 0, 0, 0, 126]), [0x84, 3], "FC04 quantity 126");
    assert_eq!(exc(&mut c, &[3, 0, 0, 0, 0]), [0x83, 3], "FC03 quantity 0");
    let [hi, lo] = len.to_be_bytes();
    assert_eq!(exc(&mut c, &[4, hi, lo, 0, 1]), [0x84, 2], "first register past the map");
    let [hi, lo] = (len - 1).to_be_bytes();
    assert_eq!(exc(&mut c, &[3, hi, lo, 0, 2]), [0x83, 2], "last register past the map");
    assert_eq!(exc(&mut c, &[3, hi, lo, 0, 1]), [3, 2, 0, 0], "the last register itself");
    assert_eq!(exc(&mut c, &[6, 0, 0, 0, 9]), [0x86, 1]);
    assert_eq!(exc(&mut c, &[0x10, 0, 0, 0, 2, 4, 0, 1, 0, 2]), [0x90, 1]);
    assert_eq!(exc(&mut c, &[5, 0, 0, 0xFF, 0]), [0x85, 1]);
    assert_eq!(exc(&mut c, &[0x0F, 0, 0, 0, 3, 1, 5]), [0x8F, 1]);
    assert_eq!(exc(&mut c, &[0x16, 0, 0, 0, 0, 0, 1]), [0x96, 1]);
    assert_eq!(exc(&mut c, &[0x17, 0, 0, 0, 1, 0, 0, 0, 1, 2, 0, 1]), [0x97, 1]);
    assert_eq!(exc(&mut c, &[8, 0, 0, 0xAB, 0xCD]), [0x88, 1], "diagnostics: not supported");
    assert_eq!(exc(&mut c, &[0x41, 1, 2, 3, 4]), [0xC1, 1], "unknown function");
    assert_eq!(read_regs(&mut c, 1, false, 0, 1), Ok(vec![MAGIC]), "connection still fine after exceptions");

    // A broken PDU inside a valid MBAP header is dropped; the connection
    // and the next request are fine.
    c.write_all(&raw(&[3, 0, 0], 1, 1)).unwrap();
    assert_eq!(read_regs(&mut c, 1, true, 0, 2), Ok(vec![MAGIC, 1]));
    // rmodbus takes MBAP lengths up to 250: a function 16 write of 122
    // registers (length 251) is dropped, the connection kept.
    let mut big = vec![0x10, 0, 0, 0, 122, 244];
    big.extend([0u8; 244]);
    c.write_all(&raw(&big, 1, 3)).unwrap();
    assert_eq!(read_regs(&mut c, 1, true, 0, 2), Ok(vec![MAGIC, 1]));
    // A request split over several segments is reassembled.
    let req = raw(&[4, 0, 0, 0, 2], 1, 9);
    for b in &req {
        c.write_all(&[*b]).unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut resp = [0u8; 13];
    c.read_exact(&mut resp).unwrap();
    assert_eq!(&resp[7..], &[4, 4, 0x4C, 0x4D, 0, 1]);
    // Two requests in one segment: two answers.
    let mut two = raw(&[4, 0, 0, 0, 1], 1, 1);
    two.extend(raw(&[3, 0, 1, 0, 1], 1, 2));
    c.write_all(&two).unwrap();
    let mut resp = [0u8; 22];
    c.read_exact(&mut resp).unwrap();
    assert_eq!(
        (&resp[..2], &resp[9..11], &resp[11..13], &resp[20..22]),
        (&[0u8, 1][..], &[0x4Cu8, 0x4D][..], &[0u8, 2][..], &[0u8, 1][..])
    );

    // Garbage and bad MBAP headers cost only their own connection, while
    // a polling client is served throughout.
    let stop = Arc::new(AtomicBool::new(false));
    let st = Arc::clone(&stop);
    let poller = std::thread::spawn(move || {
        let mut n = 0;
        while !st.load(Ordering::Relaxed) {
            assert_eq!(read_regs(&mut c, 1, false, 0, 2), Ok(vec![MAGIC, 1]));
            n += 1;
        }
        n
    });
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    for k in 0..50 {
        let mut g = connect(p);
        let n = 1 + (k * 7) % 300;
        let junk: Vec<u8> = (0..n)
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng as u8
            })
            .collect();
        let _ = g.write_all(&junk);
        if k % 2 == 0 {
            drop(g);
        }
    }
    let mut bad = connect(p);
    bad.write_all(&[0, 1, 0, 7, 0, 6, 1, 3, 0, 0, 0, 1]).unwrap();
    assert!(closed_within(&mut bad, Duration::from_secs(2)), "protocol id 7: disconnected");
    let mut bad = connect(p);
    bad.write_all(&[0, 1, 0, 0, 0x10, 0, 1, 3]).unwrap();
    assert!(closed_within(&mut bad, Duration::from_secs(2)), "length 4096: disconnected");
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let polled = poller.join().unwrap();
    assert!(polled > 10, "{polled} polls");

    // The map counts what it dropped and says so in the status register.
    emit(&mut sink, &s, 8);
    let mut c = connect(p);
    let h = read_regs(&mut c, 1, false, 0, HEADER_WORDS).unwrap();
    assert!(u32_at(&h, reg::BAD_REQUESTS) >= 3, "bad requests {}", u32_at(&h, reg::BAD_REQUESTS));
    assert_ne!(h[reg::STATUS as usize] & status::LINK_ERRORS, 0);
    sink.close(Duration::from_secs(1));
}

#[test]
fn connection_limit_idle_timeout_allowlist_unit() {
    let p = port();
    let mut sink = sinks::open(&format!("modbus-tcp://127.0.0.1:{p},clients=2,idle=700ms,unit=17"), None).unwrap();
    emit(&mut sink, &session(), 1);
    let mut a = connect(p);
    let mut b = connect(p);
    assert_eq!(read_regs(&mut a, 17, false, 0, 1), Ok(vec![MAGIC]));
    assert_eq!(read_regs(&mut b, 17, true, 0, 1), Ok(vec![MAGIC]));
    let mut third = connect(p);
    assert!(closed_within(&mut third, Duration::from_secs(2)), "a third client is refused");
    // Unit 1 is not ours: no answer (a timeout for the client), and the
    // connection stays usable.
    a.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    assert_eq!(read_regs(&mut a, 1, false, 0, 1), Err(ErrorKind::CommunicationError));
    a.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    assert_eq!(read_regs(&mut a, 17, false, 0, 1), Ok(vec![MAGIC]));
    // Idle clients are dropped, which frees their places.
    let t0 = Instant::now();
    assert!(closed_within(&mut b, Duration::from_secs(3)), "idle client disconnected");
    let idle = t0.elapsed();
    assert!(idle >= Duration::from_millis(300) && idle < Duration::from_millis(2500), "after {idle:?}");
    let mut c = connect(p);
    assert_eq!(read_regs(&mut c, 17, false, 0, 1), Ok(vec![MAGIC]));
    // Trickling bytes that never complete a request is idleness too.
    drop((a, c));
    std::thread::sleep(Duration::from_millis(300));
    let mut slow = connect(p);
    let t0 = Instant::now();
    let header = [0u8, 1, 0, 0, 0, 254, 17, 4];
    let mut closed = false;
    for k in 0..80 {
        if slow.write_all(&[header.get(k).copied().unwrap_or(0)]).is_err() {
            closed = true;
            break;
        }
        // More often than the server's poll timeout: every poll has data.
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        closed || closed_within(&mut slow, Duration::from_millis(100)),
        "trickling client kept for {:?}",
        t0.elapsed()
    );
    let held = t0.elapsed();
    assert!(
        held > Duration::from_millis(600) && held < Duration::from_millis(3500),
        "trickling client dropped after {held:?}"
    );
    sink.close(Duration::from_secs(1));

    let p = port();
    let sink = sinks::open(&format!("modbus-tcp://127.0.0.1:{p},allow=10.0.0.0/8+192.168.1.7"), None).unwrap();
    let mut c = connect(p);
    assert!(closed_within(&mut c, Duration::from_secs(2)), "127.0.0.1 is not on the allowlist");
    drop(sink);
    let p = port();
    let sink = sinks::open(&format!("modbus-tcp://127.0.0.1:{p},allow=10.0.0.0/8+127.0.0.0/8"), None).unwrap();
    let mut c = connect(p);
    assert_eq!(read_regs(&mut c, 1, false, 0, 1), Ok(vec![MAGIC]), "127.0.0.0/8 is");
    drop(sink);
}

#[test]
fn bind_address_defaults_to_loopback() {
    let p = port();
    let sink = sinks::open(&format!("modbus-tcp://:{p}"), None).unwrap();
    assert_eq!(sink.name(), format!("modbus-tcp://127.0.0.1:{p}"));
    let mut c = connect(p);
    assert_eq!(read_regs(&mut c, 1, false, 0, 1), Ok(vec![MAGIC]));
    drop(sink);
    assert!(sinks::open("modbus-tcp://:1,format=json", None).is_err());
}

/// mbpoll's 32-bit input registers (high word first) from `reg`: `count`
/// values by address, or mbpoll's complaint.
fn mbpoll_u32s(port: u16, reg: u16, count: u16) -> Result<std::collections::BTreeMap<u32, u64>, String> {
    let out = std::process::Command::new("mbpoll")
        .args(["-m", "tcp", "-p", &port.to_string(), "-t", "3:int", "-B", "-0", "-1"])
        .args(["-r", &reg.to_string(), "-c", &count.to_string(), "127.0.0.1"])
        .output()
        .expect("mbpoll (apt-get install mbpoll)");
    let text = String::from_utf8_lossy(&out.stdout);
    let vals: std::collections::BTreeMap<u32, u64> = text
        .lines()
        .filter_map(|l| {
            let (i, v) = l.trim().strip_prefix('[')?.split_once("]:")?;
            Some((i.parse().ok()?, v.split_whitespace().next()?.parse::<i64>().ok()? as u32 as u64))
        })
        .collect();
    if vals.is_empty() {
        return Err(format!("mbpoll -r {reg}: {text} {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(vals)
}

/// A cycle probe's misses and the top cause of its missed time, read by
/// mbpoll (a client nobody here wrote) from its extension block: found
/// through header register 31, at a fixed address whatever the probe
/// count, the probe blocks where they were.
#[test]
fn a_cycle_probes_extension_block_read_by_mbpoll() {
    use latmon::sinks::modbus::map::{ext, EXT_BASE, EXT_WORDS};
    use latmon_core::anatomy::{Anatomy, BlockedOn, Cause, CauseKind, Policy};
    use latmon_core::causes::CauseSummary;
    use latmon_core::cycle::CycleCounts;
    let mut cycle = common::runq_probe(1);
    (cycle.name, cycle.kind) = ("loop".into(), Family::Cycle);
    let s = Session { probes: vec![common::runq_probe(0), cycle], failed: Vec::new(), ..session() };
    let mut r = report(4, &s);
    ProbeExtra::cycle_in(&mut r.probes[1].extra).counts =
        CycleCounts { misses: 2, total_misses: 70_001, ..Default::default() };
    // Two misses as their records give them: the hog (thread 31337) took
    // 2.4 ms of the 3.1 ms missed.
    let hog = CauseKind::Task { comm: "hog".into(), pid: 31_337, policy: Policy::Fifo, prio: 90 };
    let parts = |v: &[(CauseKind, u64)]| Anatomy {
        cpu_woken: 0,
        cpu_ran: 0,
        causes: v.iter().map(|(kind, ns)| Cause { kind: kind.clone(), ns: *ns }).collect(),
    };
    let mut m = CauseSummary::default();
    m.begin_misses();
    let a = parts(&[(CauseKind::Running, 500_000), (hog.clone(), 1_400_000)]);
    m.add_miss(1_900_000, &a.causes);
    let b =
        parts(&[(hog, 1_000_000), (CauseKind::Blocked { on: BlockedOn::Io, syscall: "fdatasync".into() }, 200_000)]);
    m.add_miss(1_200_000, &b.causes);
    m.end_misses();
    ProbeExtra::cycle_in(&mut r.probes[1].extra).miss_causes = m;
    let p = port();
    let mut sink = sinks::open(&format!("modbus-tcp://127.0.0.1:{p}"), None).unwrap();
    sink.emit(&Tick { session: &s, report: &r, totals: &[], read_errors: &[0, 0] });
    let first = common::mbpoll_input_register(p, reg::EXT_FIRST) as u16;
    assert_eq!(first, EXT_BASE);
    let at = first + EXT_WORDS;
    let v = mbpoll_u32s(p, at, EXT_WORDS / 2).unwrap();
    let get = |off: u16| v[&u32::from(at + off)];
    assert_eq!((get(ext::TOTAL_MISSES), get(ext::MISSES)), (70_001, 2));
    assert_eq!(get(ext::CAUSE_KIND), 1 << 16 | 7741, "a task (kind 1), 77.41 % of the missed time");
    assert_eq!((get(ext::CAUSE_ID), get(ext::MISSED_US)), (31_337, 3_100));
    // Block 0's extension (a runq probe) reads 0; past the last one is
    // outside the map; block 1 is where it always was.
    assert!(mbpoll_u32s(p, first, EXT_WORDS / 2).unwrap().values().all(|&x| x == 0));
    assert!(mbpoll_u32s(p, first + 2 * EXT_WORDS, 1).is_err());
    let block1 = HEADER_WORDS + BLOCK_WORDS;
    assert_eq!(common::mbpoll_input_register(p, block1 + off::INDEX), 1);
    assert_eq!(common::mbpoll_input_register(p, block1 + off::KIND), 9, "cycle");
    sink.close(Duration::from_secs(1));
}
