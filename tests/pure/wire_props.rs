// SPDX-License-Identifier: MIT
//! Property tests of the wire format: round trips, frame budget, a decoder
//! fuzz over arbitrary bytes (bounded in time), and corrupted streams that
//! must yield every undamaged frame and report the rest. Pure: no BPF.

use std::time::{Duration, Instant};

use crate::common;
use common::{hello, XorShift};

use latmon_core::hist::{Hist, BUCKETS};
use latmon_core::summary::AlertRecord;
use latmon_core::wire::*;
use proptest::prelude::*;

/// A cumulative histogram with `n` random non-zero buckets.
fn arb_hist() -> impl Strategy<Value = Hist> {
    (
        prop::collection::vec((0..BUCKETS, 1u64..u64::MAX / 4096), 0..80),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
    )
        .prop_map(|(buckets, sum, min, drops, alerts)| {
            let mut h = Hist::default();
            for (i, c) in buckets {
                h.slots[i] = c;
            }
            h.count = h.slots.iter().fold(0u64, |a, &c| a.wrapping_add(c));
            h.sum_ns = sum;
            h.min_ns = min % 1_000_000;
            h.max_ns = h.min_ns.saturating_add(sum % 1_000_000_000_000);
            h.drops = drops % 1_000_000;
            h.alerts = alerts;
            h
        })
}

fn arb_name() -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..40).prop_map(|v| v.into_iter().collect())
}

/// An Alert's comm: at most 16 characters of any kind, so within the
/// wire's 64 bytes (`MAX_ALERT_NAME_LEN`; a receiver refuses more).
fn arb_comm() -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..16).prop_map(|v| v.into_iter().collect())
}

fn arb_hello() -> impl Strategy<Value = Hello> {
    (
        arb_name(),
        arb_name(),
        any::<u32>(),
        any::<u64>(),
        any::<u64>(),
        prop::collection::vec((arb_name(), arb_name()), 0..12),
    )
        .prop_map(|(board, kernel, boot_id, start_ns, interval_ns, probes)| Hello {
            protocol_revision: PROTOCOL_REVISION,
            latmon_version: "0.1.0".into(),
            board,
            kernel,
            boot_id,
            start_ns,
            interval_ns,
            probe_count: probes.len() as u16,
            probes: probes
                .into_iter()
                .enumerate()
                .map(|(i, (name, attach))| ProbeDesc {
                    id: i as u16,
                    name,
                    kind: "runq".into(),
                    attach,
                    mode: String::new(),
                    scheme: BucketScheme::LATMON,
                })
                .collect(),
            thresholds: Vec::new(),
            certificate: None,
        })
}

fn decode(bytes: &[u8]) -> (Vec<Result<Frame, FrameError>>, LinkStats) {
    let mut d = FrameDecoder::new();
    let mut v = Vec::new();
    d.feed(bytes, &mut |r| v.push(r));
    (v, d.stats)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Any set of cumulative histograms: every frame within the budget, and
    /// the receiver rebuilds each histogram exactly, whatever the read sizes.
    #[test]
    fn summaries_round_trip_within_budget(
        hists in prop::collection::vec(arb_hist(), 0..10),
        seq in 1u64..u64::MAX,
        boot in any::<u32>(),
        time in any::<u64>(),
        chunk in 1usize..600,
    ) {
        let mut enc = Encoder::new();
        let mut stream = Vec::new();
        let mut sizes = Vec::new();
        enc.summary(SummaryHeader { seq, boot_id: boot, time_ns: time, last: false }, &hists, &mut |f| {
            sizes.push(f.len());
            stream.extend_from_slice(f);
        }).unwrap();
        prop_assert!(sizes.iter().all(|&s| s <= FRAME_BUDGET), "{sizes:?}");
        let mut d = FrameDecoder::new();
        let mut t = Tracker::new();
        for c in stream.chunks(chunk) {
            d.feed(c, &mut |r| { t.on_frame(r.unwrap()); });
        }
        prop_assert_eq!(d.stats.frames_good as usize, sizes.len());
        for (i, h) in hists.iter().enumerate() {
            prop_assert_eq!(t.totals(i as u16), Some(h));
        }
    }

    #[test]
    fn hello_round_trips_and_packs(h in arb_hello()) {
        let mut enc = Encoder::new();
        let mut parts = Vec::new();
        enc.hello(&h, &mut |f| parts.push(f.to_vec())).unwrap();
        let mut t = Tracker::new();
        for p in &parts {
            prop_assert!(p.len() <= FRAME_BUDGET);
            let (f, _) = decode(p);
            t.on_frame(f.into_iter().next().unwrap().unwrap());
        }
        prop_assert_eq!(t.hello.as_ref(), Some(&h));
        // A single frame (no budget) decodes to the value itself.
        let one = encode_to_vec(&Frame::Hello(h.clone())).unwrap();
        let (f, _) = decode(&one);
        prop_assert_eq!(f, vec![Ok(Frame::Hello(h))]);
    }

    /// A cycle record's half (revision 8) crosses the wire as it is, and
    /// the receiver's model of it goes back to the same wire value.
    #[test]
    fn cycle_alerts_round_trip(
        event in 1u8..=3, release in any::<u64>(), deadline in any::<u64>(), done in any::<Option<u64>>(),
        doing in 0u8..=3, id in any::<u32>(), name in arb_comm(), migrations in any::<u64>(), lat in any::<u64>(),
    ) {
        // The model keeps a name only for the states that have one.
        let (doing_id, doing_name) = match doing {
            2 => (id, name.clone()),
            3 => (id % 4, name.clone()),
            _ => (0, String::new()),
        };
        let w = WireCycle { event, release_ns: release, deadline_ns: deadline, done_ns: done, doing, doing_id, doing_name, migrations };
        let a = Alert { boot_id: 7, probe: 3, pid: 1, tid: 2, comm: name, cpu: 0, latency_ns: lat, time_ns: 5, cpu_woken: 0, cpu_ran: 0, causes: vec![], cycle: w.clone() };
        let (f, _) = decode(&encode_to_vec(&Frame::Alert(a.clone())).unwrap());
        prop_assert_eq!(f, vec![Ok(Frame::Alert(a))]);
        let mark = latmon_core::wire::cycle::from_wire(&w).unwrap();
        prop_assert_eq!(latmon_core::wire::cycle::to_wire(&mark), w);
    }

    #[test]
    fn alert_and_status_round_trip(
        pid in any::<u32>(), tid in any::<u32>(), comm in arb_comm(), cpu in any::<u32>(),
        lat in any::<u64>(), time in any::<u64>(), drops in any::<u64>(), n in 0usize..300,
    ) {
        let a = Alert { boot_id: 7, probe: 3, pid, tid, comm: comm.clone(), cpu, latency_ns: lat, time_ns: time, cpu_woken: 0, cpu_ran: 0, causes: vec![], cycle: WireCycle::default() };
        let (f, _) = decode(&encode_to_vec(&Frame::Alert(a.clone())).unwrap());
        prop_assert_eq!(f, vec![Ok(Frame::Alert(a))]);
        let s = Status {
            boot_id: 7, time_ns: time, seq: lat, uptime_ns: time / 2, frames_dropped: drops, bytes_dropped: drops / 3,
            clients: cpu, probes: (0..n).map(|i| ProbeHealth { id: i as u16, read_errors: i as u64, run_count: lat, run_time_ns: 0 }).collect(),
            flags: cpu, bpf_cpu_ppm: cpu / 2, detached: (0..n.min(20)).map(|i| i as u16).collect(), link: Default::default(),
            // Every fifth probe had alert records shed.
            shed: (0..n).filter(|i| i % 5 == 2).map(|i| ProbeShed { id: i as u16, alerts_shed: lat ^ i as u64 }).collect(),
            // Every seventh probe had alert records dropped before the link.
            dropped: (0..n).filter(|i| i % 7 == 4).map(|i| ProbeDropped { id: i as u16, alerts_dropped: lat ^ i as u64 }).collect(),
            // Every third probe has kernel misses.
            missed: (0..n).filter(|i| i % 3 == 1).map(|i| ProbeMissed { id: i as u16, missed: lat ^ i as u64 }).collect(),
        };
        let mut enc = Encoder::new();
        let mut got = Vec::new();
        enc.status(&s, &mut |b| {
            assert!(b.len() <= FRAME_BUDGET);
            let (f, _) = decode(b);
            got.push(f);
        }).unwrap();
        let parts: Vec<Status> = got.into_iter().map(|f| match f.into_iter().next() {
            Some(Ok(Frame::Status(st))) => st,
            other => panic!("{other:?}"),
        }).collect();
        // Each part carries the misses of its own probes, so together they
        // carry every one exactly once.
        for p in &parts {
            prop_assert!(p.missed.iter().all(|m| p.probes.iter().any(|h| h.id == m.id)), "{:?}", p.missed);
        }
        let missed: Vec<ProbeMissed> = parts.iter().flat_map(|p| p.missed.clone()).collect();
        prop_assert_eq!(&missed, &s.missed);
        for p in &parts {
            prop_assert!(p.shed.iter().all(|m| p.probes.iter().any(|h| h.id == m.id)), "{:?}", p.shed);
        }
        let shed: Vec<ProbeShed> = parts.iter().flat_map(|p| p.shed.clone()).collect();
        prop_assert_eq!(&shed, &s.shed);
        for p in &parts {
            prop_assert!(p.dropped.iter().all(|m| p.probes.iter().any(|h| h.id == m.id)), "{:?}", p.dropped);
        }
        let dropped: Vec<ProbeDropped> = parts.iter().flat_map(|p| p.dropped.clone()).collect();
        prop_assert_eq!(&dropped, &s.dropped);
        let probes: Vec<ProbeHealth> = parts.into_iter().flat_map(|p| p.probes).collect();
        prop_assert_eq!(probes, s.probes);
        let _ = AlertRecord { id: latmon_core::ident::ProbeId::NONE, pid, tid, comm, cpu, latency_ns: lat, time_ns: time, anatomy: None, cycle: None };
    }

    /// Any anatomy an agent builds reaches the receiver with parts that sum
    /// to the latency exactly, in a frame within the budget (large ones
    /// folded into `other`), and renders without panicking.
    #[test]
    fn anatomies_cross_the_wire_summing_to_the_latency(
        lat in any::<u64>(),
        parts in prop::collection::vec((0u8..8, any::<u32>(), arb_name(), any::<u64>()), 0..24),
        woken in any::<u32>(), ran in any::<u32>(),
    ) {
        use latmon_core::anatomy::{Anatomy, Cause, CauseKind, Policy};
        let causes = parts.into_iter().map(|(k, id, name, ns)| Cause {
            ns,
            kind: match k {
                0 => CauseKind::Task { comm: name, pid: id, policy: Policy::from_code(id % 8), prio: id as i32 },
                1 => CauseKind::TaskRest,
                2 => CauseKind::Irq { irq: id, name },
                3 => CauseKind::IrqRest,
                4 => CauseKind::Softirq { vector: id % 12 },
                5 => CauseKind::TimerIrqDelay,
                6 => CauseKind::Unknown { code: id as u8 },
                _ => CauseKind::Other,
            },
        }).collect();
        let anatomy = Anatomy::from_parts(lat, woken, ran, causes);
        prop_assert!(anatomy.sums_to(lat), "{:?}", anatomy);
        let rec = AlertRecord { id: latmon_core::ident::ProbeId::NONE, pid: 1, tid: 2, comm: "c".into(), cpu: 0, latency_ns: lat, time_ns: 3, anatomy: Some(anatomy), cycle: None };
        let mut enc = Encoder::new();
        let mut frames = Vec::new();
        enc.alert(7, 0, &rec, &mut |b| frames.push(b.to_vec())).unwrap();
        prop_assert_eq!(frames.len(), 1);
        prop_assert!(frames[0].len() <= FRAME_BUDGET, "{} bytes", frames[0].len());
        let (f, _) = decode(&frames[0]);
        let Some(Ok(Frame::Alert(a))) = f.into_iter().next() else { panic!("no alert") };
        prop_assert!(a.causes.len() <= latmon_core::anatomy::MAX_CAUSES);
        let mut t = Tracker::new();
        let Event::Alert(r) = t.on_frame(Frame::Alert(a)) else { panic!("not an alert event") };
        if lat > 0 {
            let back = r.record.anatomy.expect("an anatomy with parts");
            prop_assert!(back.sums_to(lat), "{:?}", back);
            prop_assert_eq!((back.cpu_woken, back.cpu_ran), (woken, ran));
            let line = back.render(lat);
            prop_assert!(line.starts_with("late ") && line.bytes().all(|b| (b' '..=b'~').contains(&b)), "{}", line);
        }
    }

    /// Arbitrary bytes in arbitrary chunks: no panic, and every non-empty
    /// fragment is accounted for exactly once.
    #[test]
    fn decoder_never_panics_on_arbitrary_bytes(
        bytes in prop::collection::vec(any::<u8>(), 0..6000),
        chunk in 1usize..300,
    ) {
        let mut d = FrameDecoder::new();
        let mut events = 0u64;
        for c in bytes.chunks(chunk) {
            d.feed(c, &mut |_| events += 1);
        }
        let s = d.stats;
        let joined = events - s.frames_good - s.unknown_kinds - s.errors();
        prop_assert!(joined <= 1, "{s:?} events {events}");
        prop_assert_eq!(s.resyncs, s.errors() + joined);
    }
}

/// A small deterministic PRNG for the time-bounded loops.
/// A stream of real frames of every kind.
fn sample_frames(rng: &mut XorShift, n: usize) -> Vec<Vec<u8>> {
    let mut enc = Encoder::new();
    let mut frames = Vec::new();
    let mut out = |f: &[u8]| frames.push(f.to_vec());
    let mut h = Hist::default();
    // Revision 0 and a table announced as two probes with none in it: a
    // stream the decoder must get through as it is.
    let hello = Hello { protocol_revision: 0, interval_ns: 1_000_000, probe_count: 2, ..hello("fuzz", vec![]) };
    for seq in 1..=n as u64 {
        match rng.below(5) {
            0 => {
                enc.hello(&hello, &mut out).unwrap();
            }
            1 => {
                let a = AlertRecord {
                    id: latmon_core::ident::ProbeId::NONE,
                    pid: rng.next() as u32,
                    tid: 1,
                    comm: "ctrl".into(),
                    cpu: 0,
                    latency_ns: rng.next(),
                    time_ns: seq,
                    anatomy: None,
                    cycle: None,
                };
                enc.alert(42, 0, &a, &mut out).unwrap();
            }
            _ => {
                for _ in 0..rng.below(500) {
                    h.record(rng.below(1 << 30));
                }
                enc.summary(
                    SummaryHeader { seq, boot_id: 42, time_ns: seq, last: false },
                    std::slice::from_ref(&h),
                    &mut out,
                )
                .unwrap();
            }
        }
    }
    frames
}

/// Injects random bytes between and inside frames; checks that exactly the
/// undamaged frames decode, in order, and every other fragment is reported.
fn corrupted_stream_round(rng: &mut XorShift) {
    let n = 1 + rng.below(40) as usize;
    let frames = sample_frames(rng, n);
    let mut stream = Vec::new();
    let mut intact = Vec::new(); // frames expected back
    let mut damage_next = false;
    for f in &frames {
        let mut f = f.clone();
        let mut damaged = std::mem::take(&mut damage_next);
        match rng.below(6) {
            0 => {
                // Noise between frames, ending with a delimiter: harmless.
                for _ in 0..rng.below(20) {
                    stream.push(rng.next() as u8);
                }
                stream.push(0);
                damaged = false; // isolated from a merged predecessor
            }
            1 => {
                // Noise right before the frame, no delimiter: merges with it.
                for _ in 0..1 + rng.below(20) {
                    stream.push(1 + rng.below(255) as u8);
                }
                damaged = true;
            }
            2 => {
                // Bytes changed inside the frame (the delimiter kept).
                for _ in 0..1 + rng.below(3) {
                    let i = rng.below(f.len() as u64 - 1) as usize;
                    let old = f[i];
                    while f[i] == old {
                        f[i] = rng.next() as u8;
                    }
                }
                damaged = true;
            }
            3 => {
                // Bytes inserted inside the frame.
                let i = rng.below(f.len() as u64 - 1) as usize;
                let junk: Vec<u8> = (0..1 + rng.below(8)).map(|_| rng.next() as u8).collect();
                f.splice(i..i, junk);
                damaged = true;
            }
            4 if f.len() > 3 => {
                // The delimiter itself hit: this frame and the next merge.
                let last = f.len() - 1;
                f[last] = 1 + rng.below(255) as u8;
                damaged = true;
                damage_next = true;
            }
            _ => {}
        }
        stream.extend_from_slice(&f);
        if !damaged {
            intact.push(f);
        }
    }
    // Reference accounting: split the final stream at delimiters.
    // (The part after the last delimiter is unterminated: not judged yet.)
    let mut parts: Vec<&[u8]> = stream.split(|&b| b == 0).collect();
    parts.pop();
    let fragments: Vec<&[u8]> = parts.into_iter().filter(|f| !f.is_empty()).collect();
    let intact_set: Vec<&[u8]> = intact.iter().map(|f| &f[..f.len() - 1]).collect();
    // A changed byte could, with probability 2^-32, still pass the CRC; the
    // fixed seeds below never do.
    let expected_bad = fragments.iter().filter(|f| !intact_set.contains(f)).count();

    let mut d = FrameDecoder::new();
    let mut good = Vec::new();
    let mut bad = 0;
    let mut pos = 0;
    while pos < stream.len() {
        let n = (1 + rng.below(64) as usize).min(stream.len() - pos);
        d.feed(&stream[pos..pos + n], &mut |r| match r {
            Ok(f) => good.push(f),
            Err(_) => bad += 1,
        });
        pos += n;
    }
    let want: Vec<Frame> = intact
        .iter()
        .map(|f| match decode(f).0.into_iter().next() {
            Some(Ok(fr)) => fr,
            other => panic!("intact frame does not decode: {other:?}"),
        })
        .collect();
    assert_eq!(good.len(), want.len(), "undamaged frames recovered");
    assert_eq!(good, want);
    assert_eq!(bad, expected_bad, "every damaged fragment reported");
    assert_eq!(d.stats.frames_good as usize, want.len());
}

#[test]
fn corrupted_streams_recover_every_undamaged_frame() {
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut rounds = 0;
    while rounds < 200 || (Instant::now() < deadline && rounds < 5_000) {
        corrupted_stream_round(&mut rng);
        rounds += 1;
    }
    eprintln!("{rounds} corrupted streams checked");
}

/// Bounded-time fuzz: real frames mutated at random plus pure noise, fed
/// in random chunks. The decoder must neither panic nor lose its count.
#[test]
fn decoder_fuzz_bounded_time() {
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
    let mut d = FrameDecoder::new();
    let mut t = Tracker::new();
    let mut events = 0u64;
    let mut bytes = 0usize;
    while Instant::now() < deadline {
        let mut s: Vec<u8> = sample_frames(&mut rng, 8).concat();
        for _ in 0..rng.below(16) {
            let i = rng.below(s.len() as u64) as usize;
            match rng.below(3) {
                0 => s[i] = rng.next() as u8,
                1 => s.insert(i, rng.next() as u8),
                _ => {
                    s.remove(i);
                }
            }
        }
        if rng.below(4) == 0 {
            s.extend((0..rng.below(3000)).map(|_| rng.next() as u8));
        }
        bytes += s.len();
        for c in s.chunks(1 + rng.below(200) as usize) {
            d.feed(c, &mut |r| {
                events += 1;
                if let Ok(f) = r {
                    t.on_frame(f);
                }
            });
        }
    }
    let st = d.stats;
    assert_eq!(st.bytes as usize, bytes);
    assert_eq!(events, st.frames_good + st.unknown_kinds + st.resyncs);
    eprintln!("fuzzed {bytes} bytes: {st:?}");
}
