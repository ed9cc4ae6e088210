// SPDX-License-Identifier: MIT
//! Wire tests: round trips, damage, sizes, and the golden vectors of
//! docs/wire-format.md byte for byte.

use super::*;
use crate::hist::{Hist, BUCKETS};
use crate::summary::{AlertRecord, ProbeReport};
use serde::Serialize;

fn hist(values: &[u64]) -> Hist {
    let mut h = Hist::default();
    for &v in values {
        h.record(v);
    }
    h
}

fn decode_all(bytes: &[u8]) -> (Vec<Result<Frame, FrameError>>, LinkStats) {
    let mut d = FrameDecoder::new();
    let mut v = Vec::new();
    d.feed(bytes, &mut |r| v.push(r));
    (v, d.stats)
}

fn summary_frames(h: SummaryHeader, hists: &[Hist], budget: usize) -> Vec<Vec<u8>> {
    let mut enc = Encoder::with_budget(budget);
    let mut frames = Vec::new();
    enc.summary(h, hists, &mut |f| frames.push(f.to_vec())).unwrap();
    frames
}

#[test]
fn budget_constants() {
    assert_eq!(PAYLOAD_BUDGET, 508);
    assert!(cobs::max_encoding_length(PAYLOAD_BUDGET) < FRAME_BUDGET);
    assert_eq!(varint_len(0), 1);
    assert_eq!(varint_len(127), 1);
    assert_eq!(varint_len(128), 2);
    assert_eq!(varint_len(u64::MAX), 10);
    for v in [0u64, 1, 127, 128, 300, 16383, 16384, 1 << 35, u64::MAX] {
        assert_eq!(postcard::to_allocvec(&v).unwrap().len(), varint_len(v), "{v}");
    }
}

/// A receiver's reports carry the thresholds the sender's Hello said
/// (revision 9), each on its probe's report, and the Hello's words parsed.
#[test]
fn the_tracker_puts_each_hellos_threshold_on_its_probes_reports() {
    let h1 = hist(&[1_000, 300]);
    let mut hello = golden_hello();
    hello.probes.push(ProbeDesc { id: 1, name: "novel".into(), kind: "quantum".into(), ..hello.probes[0].clone() });
    hello.probe_count = 2;
    hello.thresholds = vec![ProbeThreshold { id: 1, threshold_ns: 250_000 }];
    let mut stream = encode_to_vec(&Frame::Hello(hello.clone())).unwrap();
    let head = SummaryHeader { seq: 1, boot_id: hello.boot_id, time_ns: 2_000_000_000, last: false };
    for f in summary_frames(head, &[h1.clone(), h1.clone()], PAYLOAD_BUDGET) {
        stream.extend(f);
    }
    let (frames, _) = decode_all(&stream);
    let mut t = Tracker::new();
    let mut got = None;
    for f in frames {
        if let Event::Summary { report, .. } = t.on_frame(f.unwrap()) {
            got = Some(report);
        }
    }
    let r = got.expect("a summary");
    assert_eq!((r.probes[0].threshold_ns, r.probes[1].threshold_ns), (0, 250_000));
    assert_eq!(r.probes[0].kind, crate::ident::Said::Known(crate::ident::Family::Runq));
    assert_eq!(r.probes[1].kind, crate::ident::Said::Unknown("quantum".into()));
    assert_eq!(crate::json::to_string(&r.probes[1]).unwrap().matches("\"kind\":\"quantum\"").count(), 1);
}

#[test]
fn summary_round_trip_and_tracker_deltas() {
    let h1 = hist(&[1_000, 300, 2_500]);
    let mut h2 = h1.clone();
    for v in [2_600, 40_000, 7] {
        h2.record(v);
    }
    h2.drops = 2;
    let head = |seq| SummaryHeader { seq, boot_id: 9, time_ns: seq * 1_000_000_000, last: false };
    let mut stream = Vec::new();
    for (seq, h) in [(1, &h1), (2, &h2)] {
        for f in summary_frames(head(seq), &[h.clone(), Hist::default()], PAYLOAD_BUDGET) {
            stream.extend(f);
        }
    }
    let (frames, stats) = decode_all(&stream);
    assert_eq!(stats.frames_good, 2);
    let mut t = Tracker::new();
    let mut reports = Vec::new();
    for f in frames {
        if let Event::Summary { report, .. } = t.on_frame(f.unwrap()) {
            reports.push(report);
        }
    }
    assert_eq!(reports[1].probes[0], ProbeReport::labelled("#0", "", "", &h1, &h2));
    assert_eq!(reports[1].interval_ns, 1_000_000_000);
    assert_eq!(reports[1].probes[1].count, 0);
    assert_eq!(t.totals(0), Some(&h2));
}

#[test]
fn lost_summary_loses_no_counts() {
    let hs: Vec<Hist> = (1..=4u64).map(|k| hist(&(0..k * 10).map(|v| v * 97).collect::<Vec<_>>())).collect();
    let mut t = Tracker::new();
    let mut total = 0;
    for (i, h) in hs.iter().enumerate() {
        if i == 2 {
            continue; // lost on the link
        }
        let head = SummaryHeader { seq: i as u64 + 1, boot_id: 1, time_ns: i as u64, last: false };
        for f in summary_frames(head, std::slice::from_ref(h), PAYLOAD_BUDGET) {
            let (fr, _) = decode_all(&f);
            if let Event::Summary { report, .. } = t.on_frame(fr.into_iter().next().unwrap().unwrap()) {
                total += report.probes[0].count;
            }
        }
    }
    assert_eq!(total, hs[3].count);
    assert_eq!(t.summaries_lost, 1);
}

#[test]
fn big_probe_splits_over_frames_within_budget() {
    let mut h = Hist::default();
    for i in 0..BUCKETS {
        let (lo, _) = crate::hist::bucket_bounds(i);
        h.slots[i] = 1 << 40;
        h.count += 1 << 40;
        h.max_ns = lo;
    }
    h.sum_ns = u64::MAX;
    let frames = summary_frames(
        SummaryHeader { seq: 1, boot_id: u32::MAX, time_ns: u64::MAX, last: true },
        &[h.clone(), h.clone()],
        PAYLOAD_BUDGET,
    );
    assert!(frames.len() > 2);
    for f in &frames {
        assert!(f.len() <= FRAME_BUDGET, "{}", f.len());
    }
    let mut t = Tracker::new();
    let mut done = 0;
    for f in frames.concat().split_inclusive(|&b| b == 0) {
        let (fr, _) = decode_all(f);
        if let Event::Summary { report, .. } = t.on_frame(fr.into_iter().next().unwrap().unwrap()) {
            done += report.probes.len();
        }
    }
    assert_eq!(done, 2);
    assert_eq!(t.totals(0), Some(&h));
    assert_eq!(t.totals(1), Some(&h));
}

#[test]
fn lost_part_of_split_probe_skips_only_that_snapshot() {
    let mut h = Hist::default();
    for i in 0..BUCKETS {
        h.slots[i] = 1_000_000 + i as u64;
    }
    h.count = h.slots.iter().sum();
    let a = summary_frames(
        SummaryHeader { seq: 1, boot_id: 1, time_ns: 1, last: false },
        std::slice::from_ref(&h),
        PAYLOAD_BUDGET,
    );
    let mut t = Tracker::new();
    for (i, f) in a.iter().enumerate() {
        if i == 1 {
            continue;
        }
        let (fr, _) = decode_all(f);
        t.on_frame(fr.into_iter().next().unwrap().unwrap());
    }
    assert!(t.partial_dropped > 0);
    assert_eq!(t.totals(0), None);
    // The next complete summary restores everything.
    for f in summary_frames(
        SummaryHeader { seq: 2, boot_id: 1, time_ns: 2, last: false },
        std::slice::from_ref(&h),
        PAYLOAD_BUDGET,
    ) {
        let (fr, _) = decode_all(&f);
        t.on_frame(fr.into_iter().next().unwrap().unwrap());
    }
    assert_eq!(t.totals(0), Some(&h));
}

#[test]
fn unknown_kind_is_skipped_and_stream_continues() {
    let mut payload = vec![PROTOCOL_VERSION, 0x7f, 1, 2, 3];
    let crc = crate::crc32::hash(&payload);
    payload.extend(crc.to_le_bytes());
    let mut stream = vec![0; cobs::max_encoding_length(payload.len())];
    let n = cobs::encode(&payload, &mut stream);
    stream.truncate(n);
    stream.push(0);
    let alert = Alert {
        boot_id: 1,
        probe: 0,
        pid: 1,
        tid: 2,
        comm: "x".into(),
        cpu: 0,
        latency_ns: 5,
        time_ns: 6,
        cpu_woken: 0,
        cpu_ran: 0,
        causes: vec![],
        cycle: WireCycle::default(),
    };
    stream.extend(encode_to_vec(&Frame::Alert(alert.clone())).unwrap());
    let (frames, stats) = decode_all(&stream);
    assert_eq!(frames[0], Ok(Frame::Unknown { kind: 0x7f, len: 9 }));
    assert_eq!(frames[1], Ok(Frame::Alert(alert)));
    assert_eq!((stats.unknown_kinds, stats.frames_good, stats.errors()), (1, 1, 0));
}

#[test]
fn appended_fields_are_compatible_both_ways() {
    // An older sender: Status without its last field (probes).
    #[derive(Serialize)]
    struct OldStatus {
        boot_id: u32,
        time_ns: u64,
        seq: u64,
        uptime_ns: u64,
        frames_dropped: u64,
        bytes_dropped: u64,
        clients: u32,
    }
    let old =
        OldStatus { boot_id: 3, time_ns: 4, seq: 5, uptime_ns: 6, frames_dropped: 7, bytes_dropped: 8, clients: 1 };
    let mut payload = vec![PROTOCOL_VERSION, Kind::Status as u8];
    payload.extend(postcard::to_allocvec(&old).unwrap());
    let newer_extra = payload.clone();
    let crc = crate::crc32::hash(&payload);
    payload.extend(crc.to_le_bytes());
    match decode_payload(&payload).unwrap() {
        Frame::Status(s) => assert_eq!((s.seq, s.clients, s.probes.len()), (5, 1, 0)),
        other => panic!("{other:?}"),
    }
    // A newer sender: a Status with two more fields appended.
    let mut p = newer_extra;
    p.extend([0u8, 42, 0x80, 0x01]); // probes: [], then unknown fields
    let crc = crate::crc32::hash(&p);
    p.extend(crc.to_le_bytes());
    assert!(matches!(decode_payload(&p), Ok(Frame::Status(s)) if s.frames_dropped == 7));
}

#[test]
fn damaged_frames_are_reported_and_neighbours_survive() {
    let a = Alert {
        boot_id: 1,
        probe: 0,
        pid: 10,
        tid: 11,
        comm: "ctrl".into(),
        cpu: 1,
        latency_ns: 99,
        time_ns: 5,
        cpu_woken: 0,
        cpu_ran: 0,
        causes: vec![],
        cycle: WireCycle::default(),
    };
    let f = encode_to_vec(&Frame::Alert(a.clone())).unwrap();
    let mut bad = f.clone();
    bad[3] ^= 0x40;
    let stream = [&f[..], &bad, &[1, 2, 3, 0], &f].concat();
    let (frames, stats) = decode_all(&stream);
    assert_eq!(frames.len(), 4);
    assert!(frames[0].is_ok() && frames[3].is_ok());
    assert!(frames[1].is_err() && frames[2].is_err());
    assert_eq!(stats.frames_good, 2);
    assert_eq!(stats.resyncs, 2);
    assert_eq!(stats.errors(), 2);
    // A receiver joining mid-frame: the partial head is not an error.
    let (frames, stats) = decode_all(&stream[5..]);
    assert!(matches!(frames[0], Err(FrameError::Joined { .. })));
    assert_eq!(stats.errors(), 2);
    assert_eq!(stats.frames_good, 1);
}

#[test]
fn oversize_garbage_resyncs() {
    let a = Alert {
        boot_id: 1,
        probe: 0,
        pid: 1,
        tid: 1,
        comm: String::new(),
        cpu: 0,
        latency_ns: 1,
        time_ns: 1,
        cpu_woken: 0,
        cpu_ran: 0,
        causes: vec![],
        cycle: WireCycle::default(),
    };
    let f = encode_to_vec(&Frame::Alert(a)).unwrap();
    let stream = [&f[..], &vec![0x55; MAX_ENCODED * 2], &[0], &f].concat();
    let mut d = FrameDecoder::new();
    let mut ok = 0;
    for chunk in stream.chunks(7) {
        d.feed(chunk, &mut |r| ok += r.is_ok() as usize);
    }
    assert_eq!(ok, 2);
    assert_eq!(d.stats.oversize, 1);
}

/// erfc with relative accuracy ~1e-7 everywhere (Numerical Recipes'
/// Chebyshev fit), so far-tail bucket counts are not invented.
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.26551223
        + t * (1.00002368
            + t * (0.37409196
                + t * (0.09678418
                    + t * (-0.18628806
                        + t * (0.27886807
                            + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))));
    let r = t * poly.exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

/// Expected cumulative histogram of `n` events drawn from a mixture of
/// log-normals [(weight, median_ns, sigma)].
pub fn model_hist(n: u64, mix: &[(f64, f64, f64)]) -> Hist {
    let cdf = |x: f64| -> f64 {
        if x <= 0.0 {
            return 0.0;
        }
        mix.iter().map(|&(w, med, sig)| w * 0.5 * erfc(-(x.ln() - med.ln()) / (sig * std::f64::consts::SQRT_2))).sum()
    };
    let mut h = Hist::default();
    for i in 0..BUCKETS {
        let (lo, hi) = crate::hist::bucket_bounds(i);
        let hi = if hi == u64::MAX { f64::INFINITY } else { hi as f64 };
        let p = if hi.is_infinite() { 1.0 - cdf(lo as f64) } else { cdf(hi) - cdf(lo as f64) };
        let c = (p * n as f64).round() as u64;
        if c > 0 {
            h.slots[i] = c;
            if h.count == 0 {
                h.min_ns = lo;
            }
            h.max_ns = hi.min(1e12) as u64 - 1;
            h.count += c;
            h.sum_ns = h.sum_ns.wrapping_add(c * lo);
        }
    }
    h
}

/// Eight probes a robot controller would run, with event rates and
/// latency shapes (body plus a 1 % heavier tail) of a PREEMPT_RT box.
pub(crate) fn realistic_8(uptime_s: u64) -> Vec<Hist> {
    let probes: [(u64, f64, f64); 8] = [
        (20_000, 4_000.0, 0.8),   // runq
        (1_000, 25_000.0, 0.4),   // timer (1 kHz control loop)
        (5_000, 2_000.0, 0.5),    // irq
        (3_000, 6_000.0, 0.7),    // softirq
        (50_000, 1_500.0, 1.2),   // syscall
        (1_000, 60_000.0, 0.3),   // kfunc:do_nanosleep
        (10_000, 3_000.0, 1.0),   // kfunc:vfs_read
        (1_000, 150_000.0, 0.25), // ufunc: control step
    ];
    probes
        .iter()
        .map(|&(rate, med, sig)| {
            let mut h = model_hist(rate * uptime_s, &[(0.99, med, sig), (0.01, med * 4.0, sig + 0.5)]);
            h.alerts = h.count / 100_000;
            h
        })
        .collect()
}

fn sizes(hists: &[Hist]) -> (usize, usize, usize) {
    let head = SummaryHeader { seq: 86_400, boot_id: 0xdead_beef, time_ns: 90_000_000_000_000, last: false };
    let frames = summary_frames(head, hists, PAYLOAD_BUDGET);
    (frames.len(), frames.iter().map(Vec::len).sum(), frames.iter().map(Vec::len).max().unwrap_or(0))
}

/// Measured sizes for docs/wire-format.md (run with --nocapture).
#[test]
fn eight_probe_summary_sizes() {
    for (label, secs) in [("1 min", 60u64), ("1 h", 3_600), ("24 h", 86_400)] {
        let hs = realistic_8(secs);
        let nz: usize = hs.iter().map(|h| h.slots.iter().filter(|&&c| c > 0).count()).sum();
        let (frames, total, max) = sizes(&hs);
        println!("realistic 8 probes after {label}: {nz} non-zero buckets, {frames} frames, {total} bytes, largest frame {max}");
        assert!(max <= FRAME_BUDGET);
    }
    // Worst case: every bucket of every probe non-zero, huge counts.
    let mut w = Hist::default();
    for (i, s) in w.slots.iter_mut().enumerate() {
        *s = u64::MAX / 1024 - i as u64;
    }
    w.count = u64::MAX;
    w.sum_ns = u64::MAX;
    w.min_ns = 1;
    w.max_ns = u64::MAX;
    w.drops = u64::MAX;
    w.alerts = u64::MAX;
    let (frames, total, max) = sizes(&vec![w; 8]);
    println!("worst 8 probes: {frames} frames, {total} bytes, largest frame {max}");
    assert!(max <= FRAME_BUDGET);
}

/// The messages whose bytes docs/wire-format.md lists.
fn golden() -> Vec<(&'static str, Frame)> {
    let h = hist(&[300, 2_500, 2_600, 40_000]);
    let buckets = h.slots.iter().enumerate().filter(|(_, &c)| c > 0).map(|(i, &c)| (i as u16, c)).collect();
    vec![
        ("hello", Frame::Hello(golden_hello())),
        (
            "summary",
            Frame::Summary(Summary {
                seq: 2,
                boot_id: 0x1234_5678,
                time_ns: 3_000_000_000,
                last: false,
                probes: vec![ProbeCounts {
                    id: 0,
                    count: h.count,
                    sum_ns: h.sum_ns,
                    min_ns: h.min_ns,
                    max_ns: h.max_ns,
                    drops: 0,
                    alerts: 1,
                    first_bucket: 0,
                    end_bucket: BUCKETS as u16,
                    buckets,
                }],
                merge: 0,
                base_seq: 0,
            }),
        ),
        (
            "alert",
            Frame::Alert(Alert {
                boot_id: 0x1234_5678,
                probe: 0,
                pid: 1234,
                tid: 1240,
                comm: "ctrl_loop".into(),
                cpu: 1,
                latency_ns: 250_000,
                time_ns: 2_500_000_000,
                cpu_woken: 0,
                cpu_ran: 0,
                causes: vec![],
                cycle: WireCycle::default(),
            }),
        ),
        (
            "status",
            Frame::Status(Status {
                boot_id: 0x1234_5678,
                time_ns: 3_000_000_000,
                seq: 2,
                uptime_ns: 2_000_000_000,
                frames_dropped: 0,
                bytes_dropped: 0,
                clients: 1,
                probes: vec![ProbeHealth { id: 0, read_errors: 0, run_count: 1000, run_time_ns: 92_000 }],
                flags: STATUS_OVER_BUDGET | STATUS_DEGRADED | STATUS_COST_MEASURED,
                bpf_cpu_ppm: 12_500,
                detached: vec![1],
                missed: vec![ProbeMissed { id: 0, missed: 92 }],
                link: LinkHealth::default(),
                shed: vec![],
                dropped: vec![],
            }),
        ),
        (
            "delta",
            Frame::Delta(Delta {
                seq: 3,
                base_seq: 2,
                boot_id: 0x1234_5678,
                time_ns: 4_000_000_000,
                last: false,
                merge: 0,
                first_id: 0,
                end_id: 2,
                probes: vec![ProbeCounts {
                    id: 0,
                    count: 2,
                    sum_ns: 2_800,
                    min_ns: 300,
                    max_ns: 2_500,
                    drops: 0,
                    alerts: 0,
                    first_bucket: 0,
                    end_bucket: BUCKETS as u16,
                    buckets: vec![(49, 1), (73, 1)],
                }],
                keyed: vec![1],
                born: vec![],
            }),
        ),
        (
            "keyframe",
            Frame::Summary(Summary {
                seq: 5,
                boot_id: 0x1234_5678,
                time_ns: 6_000_000_000,
                last: false,
                probes: vec![ProbeCounts {
                    id: 1,
                    count: 4,
                    sum_ns: 45_400,
                    min_ns: 300,
                    max_ns: 40_000,
                    drops: 0,
                    alerts: 1,
                    first_bucket: 0,
                    end_bucket: BUCKETS as u16,
                    // 49, 73, 74, 105 with merge 1: each pair of
                    // sub-buckets at its odd (upper) index.
                    buckets: vec![(49, 1), (73, 1), (75, 1), (105, 1)],
                }],
                merge: 1,
                base_seq: 4,
            }),
        ),
        ("request", Frame::Request(Request { what: REQUEST_HELLO })),
        (
            "status-link",
            Frame::Status(Status {
                boot_id: 0x1234_5678,
                time_ns: 3_000_000_000,
                seq: 2,
                uptime_ns: 2_000_000_000,
                frames_dropped: 0,
                bytes_dropped: 0,
                clients: 0,
                probes: vec![ProbeHealth { id: 0, read_errors: 0, run_count: 1000, run_time_ns: 92_000 }],
                flags: STATUS_COST_MEASURED,
                bpf_cpu_ppm: 12_500,
                detached: vec![],
                missed: vec![],
                link: LinkHealth {
                    budget_bps: 5_760,
                    used_bps: 3_120,
                    step: Step::CoarseBuckets as u8,
                    merge: 1,
                    rolled: 0,
                    interval_ms: 1_000,
                    keyframe_ms: 20_000,
                    alerts_shed: 0,
                    intervals_folded: 0,
                },
                shed: vec![],
                dropped: vec![],
            }),
        ),
        (
            "status-shed",
            Frame::Status(Status {
                boot_id: 0x1234_5678,
                time_ns: 3_000_000_000,
                seq: 2,
                uptime_ns: 2_000_000_000,
                frames_dropped: 0,
                bytes_dropped: 0,
                clients: 0,
                probes: vec![
                    ProbeHealth { id: 0, read_errors: 0, run_count: 0, run_time_ns: 0 },
                    ProbeHealth { id: 1, read_errors: 0, run_count: 0, run_time_ns: 0 },
                ],
                flags: 0,
                bpf_cpu_ppm: 0,
                detached: vec![],
                missed: vec![],
                link: LinkHealth {
                    budget_bps: 480,
                    used_bps: 400,
                    step: Step::RollUp as u8,
                    merge: 3,
                    rolled: 0,
                    interval_ms: 1_000,
                    keyframe_ms: 60_000,
                    alerts_shed: 12,
                    intervals_folded: 0,
                },
                shed: vec![ProbeShed { id: 1, alerts_shed: 12 }],
                dropped: vec![],
            }),
        ),
        ("alert-anatomy", Frame::Alert(golden_anatomy_alert())),
        ("status-dropped", Frame::Status(golden_dropped_status())),
        ("alert-cycle", Frame::Alert(golden_cycle_alert())),
        ("alert-overrun", Frame::Alert(golden_overrun_alert())),
        ("hello-thresholds", Frame::Hello(golden_threshold_hello())),
        ("alert-lock", Frame::Alert(golden_lock_alert())),
        ("hello-certificate", Frame::Hello(golden_certificate_hello())),
        ("loops", Frame::Loops(golden_loops())),
    ]
}

/// The Loops frame (revision 12) of docs/wire-format.md: a 1 ms FIFO 80
/// loop watched (1 000 cycles and 3 misses this interval, 5 000 and 12
/// since it entered, 1 overrun) and its process's SCHED_OTHER logger,
/// sporadic, listed because its process has an RT thread.
pub(crate) fn golden_loops() -> LoopList {
    LoopList {
        boot_id: 0x1234_5678,
        seq: 5,
        time_ns: 5_000_000_000,
        listed: 2,
        first: 0,
        unlisted: 0,
        unwatched: 0,
        loops: vec![
            WireLoop {
                tid: 412,
                pid: 410,
                comm: "ctl_loop".into(),
                policy: 1,
                prio: 80,
                rt: true,
                class: super::loops::class::PERIODIC,
                period_ns: 1_000_000,
                period_source: super::loops::source::ABS_TIMER,
                jitter_ns: 0,
                watched: true,
                cycle: Some(WireLoopCycles {
                    period_ns: 1_000_000,
                    cycles: 1_000,
                    total_cycles: 5_000,
                    misses: 3,
                    total_misses: 12,
                    total_overruns: 1,
                    total_rules: 0,
                }),
            },
            WireLoop {
                tid: 415,
                pid: 410,
                comm: "logger".into(),
                policy: 0,
                prio: 0,
                rt: false,
                class: super::loops::class::SPORADIC,
                period_ns: 0,
                period_source: super::loops::source::NONE,
                jitter_ns: 0,
                watched: false,
                cycle: None,
            },
        ],
    }
}

/// The agent's borrowed encoder gives the golden Loops bytes from its own
/// `loops::Loop`s, and a receiver hands them out with the summary of
/// the same seq, as the agent's JSON lists them.
#[test]
fn loops_go_out_from_the_agents_list_and_come_back_with_their_summary() {
    let doc = include_str!("../../../../docs/wire-format.md");
    let g = golden_loops();
    let agent: Vec<crate::loops::Loop> = g.loops.iter().map(WireLoop::to_loop).collect();
    let mut enc = Encoder::new();
    let mut v = Vec::new();
    let n = enc.loops((g.boot_id, g.seq, g.time_ns), &agent, (0, 0), &mut |b| v.extend_from_slice(b)).unwrap();
    assert_eq!(n, 1);
    assert_eq!(hex(&v), hex(&spec_vector(doc, "loops", "frame")));
    // No loops, nothing past the bound: no frame, no byte.
    let mut none = Vec::new();
    assert_eq!(enc.loops((1, 1, 1), &[], (0, 0), &mut |b| none.extend_from_slice(b)).unwrap(), 0);
    assert!(none.is_empty());
    // A receiver: the loops, then the summary of seq 5.
    let Frame::Summary(mut s) = golden()[1].1.clone() else { panic!("golden()[1] is the summary") };
    s.seq = g.seq;
    s.boot_id = g.boot_id;
    v.extend_from_slice(&encode_to_vec(&Frame::Summary(s.clone())).unwrap());
    let mut t = Tracker::new();
    let mut reports = Vec::new();
    for f in decode_all(&v).0 {
        if let Event::Summary { report, .. } = t.on_frame(f.unwrap()) {
            reports.push(report);
        }
    }
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].loops, agent);
    let c = reports[0].loops[0].cycle.unwrap();
    assert_eq!((c.total_misses, c.misses, c.total_cycles), (12, 3, 5_000));
    // The JSON of a decoded summary lists them as the agent's does.
    let json = crate::json::to_string(&reports[0]).unwrap();
    assert!(json.contains(r#""loops":[{"tid":412,"pid":410,"comm":"ctl_loop","policy":"fifo","prio":80"#), "{json}");
    // The next summary (seq 6) had no loops frame: it shows none, never
    // seq 5's as its own.
    s.seq = 6;
    match t.on_frame(Frame::Summary(s)) {
        Event::Summary { report, .. } => assert!(report.loops.is_empty()),
        e => panic!("{e:?}"),
    }
}

/// 32 loops with 64-byte names span several frames within the budget; a
/// lost middle part loses that listing (counted), never mixes two; a
/// sender listing more than `loops::LISTED` is bounded and counted.
#[test]
fn a_long_loop_list_spans_frames_and_a_lost_part_is_counted_not_mixed() {
    let one = |i: u32| crate::loops::Loop { tid: 1000 + i, comm: "x".repeat(70), ..golden_loops().loops[0].to_loop() };
    let agent: Vec<_> = (0..32).map(one).collect();
    let mut enc = Encoder::new();
    let mut frames = Vec::new();
    enc.loops((7, 9, 9), &agent, (3, 1), &mut |b| frames.push(b.to_vec())).unwrap();
    assert!(frames.len() > 1, "{} frames", frames.len());
    assert!(frames.iter().all(|f| f.len() <= FRAME_BUDGET));
    let mut a = LoopsAssembly::default();
    let parts: Vec<LoopList> = frames
        .iter()
        .map(|f| match decode_all(f).0.remove(0).unwrap() {
            Frame::Loops(l) => l,
            e => panic!("{e:?}"),
        })
        .collect();
    let last = parts.len() - 1;
    for (i, p) in parts.iter().enumerate() {
        assert_eq!(a.on_part(p.clone()), i == last);
    }
    let done = a.done.clone().unwrap();
    assert_eq!(done.loops.len(), 32);
    assert_eq!((done.unlisted, done.unwatched, done.seq), (3, 1, 9));
    // Names cut at the alert bound (64 bytes) on the way out.
    assert!(done.loops.iter().all(|l| l.comm.len() == MAX_ALERT_NAME_LEN));
    // Seq 10 with its second part lost: seq 9's listing stays whole.
    let mut a2 = LoopsAssembly::default();
    a2.done = a.done.clone();
    for (i, p) in parts.iter().enumerate().filter(|(i, _)| *i != 1) {
        let p = LoopList { seq: 10, ..p.clone() };
        assert!(!a2.on_part(p), "part {i}");
    }
    assert_eq!(a2.listings_lost, 1);
    assert_eq!(a2.done.unwrap().seq, 9);
    // A sender saying 40 loops: 32 kept, 8 counted.
    let mut big = golden_loops();
    big.loops = (0..40).map(|i| WireLoop { tid: i, ..big.loops[1].clone() }).collect();
    big.listed = 40;
    let mut a3 = LoopsAssembly::default();
    assert!(a3.on_part(big));
    let d = a3.done.unwrap();
    assert_eq!((d.loops.len(), d.ignored), (crate::loops::LISTED, 8));
}

/// A loop name longer than an alert's is refused by both decoders (the
/// desktop one and the supervisor's fixed one), naming the problem.
#[test]
fn a_loops_frame_with_a_too_long_name_is_refused_by_both_decoders() {
    let mut l = golden_loops();
    l.loops[1].comm = "y".repeat(MAX_ALERT_NAME_LEN + 1);
    // After a delimiter: a bad first fragment of a stream reads as joined
    // mid-frame, not as a bad body.
    let mut bytes = vec![DELIMITER];
    bytes.extend(encode_to_vec(&Frame::Loops(l)).unwrap());
    match decode_all(&bytes).0.remove(0) {
        Err(FrameError::Body { why, .. }) => assert!(why.contains("65-byte loop name"), "{why}"),
        e => panic!("{e:?}"),
    }
    let mut fixed = FixedReceiver::<4, 16, 4>::new();
    let mut bad = Vec::new();
    fixed.feed(&bytes, |_, r| bad.push(matches!(r, Received::BadBody(7))));
    assert_eq!(bad, [true]);
    // The golden one passes both.
    let good = encode_to_vec(&Frame::Loops(golden_loops())).unwrap();
    let mut got = Vec::new();
    fixed.feed(&good, |_, r| got.push(matches!(r, Received::Frame(Applied::Other))));
    assert_eq!(got, [true]);
}

/// The Hello with a certificate (revision 11) of docs/wire-format.md: the
/// `hello` vector's board certified on its own kernel, 60 s, p99.9 from
/// 41.2 to 42.0 µs (+0.8 µs, 95 % CI -1.2 .. 2.9 µs, goal 2 µs: pass),
/// made 2026-12-07 01:00 UTC; no thresholds (the empty list's `00` goes
/// before it).
fn golden_certificate_hello() -> Hello {
    Hello { protocol_revision: 11, certificate: Some(golden_certificate()), ..golden_hello() }
}

fn golden_certificate() -> WireCertificate {
    WireCertificate {
        verdict: CERT_PASS,
        flags: 0,
        method: CERT_METHOD_1,
        duration_s: 60,
        made_at_unix: 1_796_605_200,
        p999_none_ns: 41_200,
        p999_full_ns: 42_000,
        shift_p999_ns: 800,
        ci95_lo_ns: -1_200,
        ci95_hi_ns: 2_900,
        goal_ns: 2_000,
    }
}

/// A Hello's certificate (revision 11) round-trips with and without
/// thresholds before it, in every part of a split table; a Hello without
/// one keeps the revision 9 (or 8) bytes exactly.
#[test]
fn a_hellos_certificate_round_trips_and_its_absence_costs_no_byte() {
    let cert = golden_certificate();
    for thresholds in [vec![], vec![ProbeThreshold { id: 0, threshold_ns: 500_000 }]] {
        let without = Hello { thresholds: thresholds.clone(), ..golden_hello() };
        let with = Hello { certificate: Some(cert), ..without.clone() };
        let (a, b) = (
            encode_to_vec(&Frame::Hello(without.clone())).unwrap(),
            encode_to_vec(&Frame::Hello(with.clone())).unwrap(),
        );
        assert_eq!(decode_all(&a).0, vec![Ok(Frame::Hello(without.clone()))]);
        assert_eq!(decode_all(&b).0, vec![Ok(Frame::Hello(with.clone()))]);
        // The option's tag, the fields; plus the empty list's byte.
        assert!(b.len() > a.len() + 20 && b.len() < a.len() + 45, "{} vs {}", b.len(), a.len());
    }
    // A long table: every part carries it (a receiver may see only one).
    let probes: Vec<ProbeDesc> = (0..200).map(|i| probe_desc(i, &format!("series-{i:03}-with-a-long-name"))).collect();
    let h = Hello { probe_count: 200, probes, certificate: Some(cert), ..golden_hello() };
    let (frames, _) = decode_all(&encode_to_vec(&Frame::Hello(h)).unwrap());
    assert!(frames.len() > 1);
    for f in frames {
        let Ok(Frame::Hello(part)) = f else { panic!("{f:?}") };
        assert_eq!(part.certificate, Some(cert));
    }
    // A newer sender's verdict and flags are shown, not refused.
    let odd = Hello { certificate: Some(WireCertificate { verdict: 7, flags: 0x80, ..cert }), ..golden_hello() };
    assert_eq!(decode_all(&encode_to_vec(&Frame::Hello(odd.clone())).unwrap()).0, vec![Ok(Frame::Hello(odd))]);
}

/// A receiver of revision 10 (or 9) reads a revision 11 Hello as before:
/// the thresholds list, then the certificate left unread; one of revision
/// 8 stops at `probes`. And the tracker keeps the sender's certificate.
#[test]
fn a_revision_10_receiver_reads_a_hello_with_a_certificate() {
    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct HelloRev10 {
        protocol_revision: u8,
        latmon_version: String,
        board: String,
        kernel: String,
        boot_id: u32,
        start_ns: u64,
        interval_ns: u64,
        probe_count: u16,
        probes: Vec<ProbeDesc>,
        thresholds: Vec<ProbeThreshold>,
    }
    let h = Hello { thresholds: vec![ProbeThreshold { id: 0, threshold_ns: 500_000 }], ..golden_certificate_hello() };
    for h in [golden_certificate_hello(), h] {
        let frame = encode_to_vec(&Frame::Hello(h.clone())).unwrap();
        let mut p = frame[..frame.len() - 1].to_vec();
        let n = cobs::decode_in_place(&mut p).unwrap();
        let (old, rest): (HelloRev10, _) = postcard::take_from_bytes(&p[2..n - 4]).unwrap();
        assert_eq!((old.protocol_revision, &old.probes, &old.thresholds), (11, &h.probes, &h.thresholds));
        assert_eq!(
            rest.len(),
            1 + postcard::to_allocvec(&golden_certificate()).unwrap().len(),
            "the certificate follows"
        );
        let mut t = Tracker::new();
        t.on_frame(decode_all(&frame).0.remove(0).unwrap());
        assert_eq!(t.hello.as_ref().and_then(|h| h.certificate), Some(golden_certificate()));
    }
}

/// The lock wait (revision 10) of docs/wire-format.md: 1.5 ms on a mutex
/// whose FIFO/10 owner (found in glibc's mutex) was held off 1.3 ms by a
/// FIFO/50 task.
fn golden_lock_alert() -> Alert {
    let cause = |kind, id, policy, prio, name: &str, ns| WireCause { kind, id, policy, prio, name: name.into(), ns };
    Alert {
        probe: 1,
        pid: 810,
        tid: 811,
        comm: "high".into(),
        cpu: 0,
        latency_ns: 1_500_000,
        time_ns: 2_500_000_000,
        cpu_woken: 0,
        cpu_ran: 0,
        causes: vec![
            cause(12, 813, 1, 50, "med", 1_300_000),
            cause(11, 812, 0x21, 10, "low", 150_000),
            cause(7, 0, 0, 0, "", 50_000),
        ],
        ..golden_anatomy_alert()
    }
}

/// The cycle miss (revision 8) of docs/wire-format.md: a 1 ms deadline
/// missed by 0.62 ms, its parts the execution's.
/// The Hello with a threshold (revision 9) of docs/wire-format.md: the
/// `hello` vector's probe with a 500 µs threshold.
fn golden_threshold_hello() -> Hello {
    Hello { protocol_revision: 9, thresholds: vec![ProbeThreshold { id: 0, threshold_ns: 500_000 }], ..golden_hello() }
}

fn golden_hello() -> Hello {
    Hello {
        protocol_revision: 0,
        latmon_version: "0.1.0".into(),
        board: "arm1".into(),
        kernel: "6.1.0-rt".into(),
        boot_id: 0x1234_5678,
        start_ns: 1_000_000_000,
        interval_ns: 1_000_000_000,
        probe_count: 1,
        probes: vec![ProbeDesc {
            id: 0,
            name: "runq".into(),
            kind: "runq".into(),
            attach: "tp_btf".into(),
            mode: String::new(),
            scheme: BucketScheme::LATMON,
        }],
        thresholds: Vec::new(),
        certificate: None,
    }
}

/// A receiver of revision 8 reads a revision 9 Hello as before: its
/// message ends at `probes`, and the thresholds after them are left unread.
#[test]
fn a_revision_8_receiver_reads_a_hello_with_thresholds() {
    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct HelloRev8 {
        protocol_revision: u8,
        latmon_version: String,
        board: String,
        kernel: String,
        boot_id: u32,
        start_ns: u64,
        interval_ns: u64,
        probe_count: u16,
        probes: Vec<ProbeDesc>,
    }
    let h = golden_threshold_hello();
    let frame = encode_to_vec(&Frame::Hello(h.clone())).unwrap();
    let mut p = frame[..frame.len() - 1].to_vec();
    let n = cobs::decode_in_place(&mut p).unwrap();
    // Version and kind bytes first, CRC-32 last.
    let (old, rest): (HelloRev8, _) = postcard::take_from_bytes(&p[2..n - 4]).unwrap();
    assert_eq!((old.protocol_revision, old.probes), (9, h.probes.clone()));
    assert_eq!((old.board, old.probe_count), (h.board.clone(), 1));
    assert!(!rest.is_empty(), "the thresholds follow the table");
    // And a Hello without thresholds has no byte for them.
    let plain = Hello { thresholds: Vec::new(), ..h.clone() };
    let bare = encode_to_vec(&Frame::Hello(plain)).unwrap();
    assert!(bare.len() < frame.len());
    let (frames, _) = decode_all(&frame);
    assert_eq!(frames, vec![Ok(Frame::Hello(h))]);
}

pub(crate) fn golden_cycle_alert() -> Alert {
    let cause = |kind, id, name: &str, ns| WireCause { kind, id, policy: 0, prio: 0, name: name.into(), ns };
    Alert {
        latency_ns: 1_620_000,
        causes: vec![
            cause(8, 0, "", 1_500_000),
            cause(9, 1, "fdatasync", 60_000),
            cause(10, 7, "", 0),
            cause(7, 0, "", 60_000),
        ],
        cycle: WireCycle {
            event: 1,
            release_ns: 2_498_380_000,
            deadline_ns: 2_499_380_000,
            done_ns: Some(2_500_000_000),
            doing: 0,
            doing_id: 0,
            doing_name: String::new(),
            migrations: 0,
        },
        ..golden_anatomy_alert()
    }
}

/// The cycle overrun (revision 8) of docs/wire-format.md: unfinished at
/// its deadline, runnable behind `hog`, no causes yet.
pub(crate) fn golden_overrun_alert() -> Alert {
    Alert {
        latency_ns: 1_000_000,
        time_ns: 2_499_380_000,
        cpu_woken: 0,
        cpu_ran: 0,
        causes: vec![],
        cycle: WireCycle {
            event: 2,
            release_ns: 2_498_380_000,
            deadline_ns: 2_499_380_000,
            done_ns: None,
            doing: 2,
            doing_id: 4242,
            doing_name: "hog".into(),
            migrations: 1,
        },
        ..golden_anatomy_alert()
    }
}

/// The Status with records dropped before any output (revision 6) of
/// docs/wire-format.md: an unlimited link (link all zero), nothing shed,
/// 760 records of probe 0 refused by its token bucket.
fn golden_dropped_status() -> Status {
    Status {
        boot_id: 0x1234_5678,
        time_ns: 3_000_000_000,
        seq: 2,
        uptime_ns: 2_000_000_000,
        frames_dropped: 0,
        bytes_dropped: 0,
        clients: 0,
        probes: vec![ProbeHealth { id: 0, read_errors: 0, run_count: 0, run_time_ns: 0 }],
        flags: 0,
        bpf_cpu_ppm: 0,
        detached: vec![],
        missed: vec![],
        link: LinkHealth::default(),
        shed: vec![],
        dropped: vec![ProbeDropped { id: 0, alerts_dropped: 760 }],
    }
}

#[test]
fn dropped_records_travel_in_status_and_older_bytes_read_as_none() {
    // A revision 6 Status with drops decodes to them; the tracker keeps
    // them per probe, fills the decoded summaries' record drops and
    // forgets them when the sender restarts.
    let (mut got, _) = decode_all(&encode_to_vec(&Frame::Status(golden_dropped_status())).unwrap());
    assert_eq!(got, vec![Ok(Frame::Status(golden_dropped_status()))]);
    let mut t = Tracker::new();
    t.on_frame(got.pop().unwrap().unwrap());
    assert_eq!(t.alerts_dropped(0), 760);
    assert_eq!(t.dropped_probes().collect::<Vec<_>>(), vec![(0, 760)]);
    let Event::Summary { report, .. } = t.on_frame(Frame::Summary(Summary {
        seq: 3,
        boot_id: 0x1234_5678,
        time_ns: 4_000_000_000,
        last: false,
        probes: vec![ProbeCounts {
            id: 0,
            count: 0,
            sum_ns: 0,
            min_ns: 0,
            max_ns: 0,
            drops: 0,
            alerts: 800,
            first_bucket: 0,
            end_bucket: BUCKETS as u16,
            buckets: vec![],
        }],
        merge: 0,
        base_seq: 0,
    })) else {
        panic!("not a summary")
    };
    assert_eq!((report.probes[0].total_alerts, report.probes[0].total_alerts_dropped), (800, 760));
    let mut restarted = golden_dropped_status();
    restarted.boot_id += 1;
    restarted.dropped.clear();
    t.on_frame(Frame::Status(restarted));
    assert_eq!(t.alerts_dropped(0), 0, "a new boot's counts start at zero");
    // With nothing dropped, `dropped` is left out: the "status" and
    // "status-shed" vectors keep their revision 1 and 4 bytes
    // (golden_vectors_match_spec_byte_for_byte).
}

/// The Alert with an anatomy (revision 5) of docs/wire-format.md.
fn golden_anatomy_alert() -> Alert {
    let cause = |kind, id, policy, prio, name: &str, ns| WireCause { kind, id, policy, prio, name: name.into(), ns };
    Alert {
        boot_id: 0x1234_5678,
        probe: 0,
        pid: 1234,
        tid: 1240,
        comm: "ctrl_loop".into(),
        cpu: 1,
        latency_ns: 512_000,
        time_ns: 2_500_000_000,
        cpu_woken: 1,
        cpu_ran: 1,
        causes: vec![
            cause(1, 4242, 1, 90, "hog", 460_000),
            cause(3, 36, 0, 0, "virtio1", 30_000),
            cause(7, 0, 0, 0, "", 22_000),
        ],
        cycle: WireCycle::default(),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(" ")
}

/// `<!-- golden: NAME PART -->` followed by a fenced block of hex bytes.
pub(crate) fn spec_vector(doc: &str, name: &str, part: &str) -> Vec<u8> {
    let tag = format!("<!-- golden: {name} {part} -->");
    let at = doc.find(&tag).unwrap_or_else(|| panic!("docs/wire-format.md lacks {tag}"));
    let rest = &doc[at + tag.len()..];
    let open = rest.find("```").unwrap();
    let body_start = open + rest[open..].find('\n').unwrap() + 1;
    let close = body_start + rest[body_start..].find("```").unwrap();
    rest[body_start..close]
        .split_whitespace()
        .map(|t| u8::from_str_radix(t, 16).unwrap_or_else(|_| panic!("bad hex {t:?} in {tag}")))
        .collect()
}

/// Print the vectors (to refresh the spec after a deliberate change):
/// cargo test --lib print_golden -- --ignored --nocapture
#[test]
#[ignore]
fn print_golden() {
    for (name, f) in golden() {
        let frame = encode_to_vec(&f).unwrap();
        let mut p = frame[..frame.len() - 1].to_vec();
        let n = cobs::decode_in_place(&mut p).unwrap();
        println!(
            "{name} payload ({n} bytes):\n{}\n{name} frame ({} bytes):\n{}\n",
            hex(&p[..n]),
            frame.len(),
            hex(&frame)
        );
    }
}

#[test]
fn coarsen_carries_groups_at_their_upper_index() {
    let mut h = hist(&[300, 2_500, 2_600, 40_000]);
    coarsen(&mut h, 1);
    let b: Vec<(usize, u64)> = h.slots.iter().enumerate().filter(|(_, &c)| c > 0).map(|(i, &c)| (i, c)).collect();
    assert_eq!(b, [(49, 1), (73, 1), (75, 1), (105, 1)]);
    coarsen(&mut h, 3);
    let b: Vec<(usize, u64)> = h.slots.iter().enumerate().filter(|(_, &c)| c > 0).map(|(i, &c)| (i, c)).collect();
    assert_eq!(b, [(55, 1), (79, 2), (111, 1)], "one bucket per power of two");
    assert_eq!(h.count, 4, "totals unchanged");
}

#[test]
fn golden_vectors_match_spec_byte_for_byte() {
    let doc = include_str!("../../../../docs/wire-format.md");
    for (name, f) in golden() {
        let frame = encode_to_vec(&f).unwrap();
        assert_eq!(hex(&frame), hex(&spec_vector(doc, name, "frame")), "{name} frame");
        let mut p = frame[..frame.len() - 1].to_vec();
        let n = cobs::decode_in_place(&mut p).unwrap();
        assert_eq!(hex(&p[..n]), hex(&spec_vector(doc, name, "payload")), "{name} payload");
        // And the spec's bytes decode to the value.
        let (frames, stats) = decode_all(&spec_vector(doc, name, "frame"));
        assert_eq!(frames, vec![Ok(f.clone())], "{name}");
        assert_eq!(stats.frames_good, 1);
    }
    // The agent's borrowed, budgeted encoders produce the same bytes.
    let g = golden();
    let mut enc = Encoder::new();
    let mut v = Vec::new();
    if let Frame::Summary(s) = &g[1].1 {
        let h = hist(&[300, 2_500, 2_600, 40_000]);
        let mut h = h;
        h.alerts = 1;
        enc.summary(
            SummaryHeader { seq: s.seq, boot_id: s.boot_id, time_ns: s.time_ns, last: s.last },
            &[h],
            &mut |b| v.extend_from_slice(b),
        )
        .unwrap();
        assert_eq!(hex(&v), hex(&spec_vector(doc, "summary", "frame")));
    }
    v.clear();
    if let Frame::Alert(a) = &g[2].1 {
        let rec = AlertRecord {
            id: crate::ident::ProbeId::NONE,
            pid: a.pid,
            tid: a.tid,
            comm: a.comm.clone(),
            cpu: a.cpu,
            latency_ns: a.latency_ns,
            time_ns: a.time_ns,
            anatomy: None,
            cycle: None,
        };
        enc.alert(a.boot_id, a.probe, &rec, &mut |b| v.extend_from_slice(b)).unwrap();
        assert_eq!(hex(&v), hex(&spec_vector(doc, "alert", "frame")));
    }
    // An AlertRecord with its anatomy encodes to the anatomy vector, and
    // the tracker gives back the same anatomy.
    v.clear();
    let a = golden_anatomy_alert();
    let anatomy = anatomy::from_wire(a.cpu_woken, a.cpu_ran, &a.causes).unwrap();
    assert!(anatomy.sums_to(a.latency_ns));
    let rec = AlertRecord {
        id: crate::ident::ProbeId::NONE,
        pid: a.pid,
        tid: a.tid,
        comm: a.comm.clone(),
        cpu: a.cpu,
        latency_ns: a.latency_ns,
        time_ns: a.time_ns,
        anatomy: Some(anatomy.clone()),
        cycle: None,
    };
    enc.alert(a.boot_id, a.probe, &rec, &mut |b| v.extend_from_slice(b)).unwrap();
    assert_eq!(hex(&v), hex(&spec_vector(doc, "alert-anatomy", "frame")));
    assert_eq!(anatomy::to_wire(&anatomy), a.causes);
    let mut t = Tracker::new();
    match t.on_frame(Frame::Alert(a)) {
        Event::Alert(r) => assert_eq!(r.record.anatomy, Some(anatomy)),
        e => panic!("{e:?}"),
    }
}

#[test]
fn alerts_with_anatomies_stay_compatible_both_ways() {
    let a = golden_anatomy_alert();
    let frame = encode_to_vec(&Frame::Alert(a.clone())).unwrap();
    let mut p = frame[..frame.len() - 1].to_vec();
    let n = cobs::decode_in_place(&mut p).unwrap();
    // An older receiver decodes the fields it knows and ignores the rest:
    // the body without the anatomy is a prefix of the one with it.
    let plain = Alert { cpu_woken: 0, cpu_ran: 0, causes: vec![], ..a.clone() };
    let old = encode_to_vec(&Frame::Alert(plain.clone())).unwrap();
    let mut q = old[..old.len() - 1].to_vec();
    let m = cobs::decode_in_place(&mut q).unwrap();
    assert_eq!(p[..m - 4], q[..m - 4], "the anatomy is appended after the older fields");
    // An alert without anatomy from an older sender reads as none.
    let (frames, _) = decode_all(&old);
    assert_eq!(frames, vec![Ok(Frame::Alert(plain))]);
    assert!(n > m);
}

#[test]
fn hostile_cause_lists_are_refused_not_allocated() {
    let mut a = golden_anatomy_alert();
    let c = a.causes[0].clone();
    a.causes = vec![c; crate::anatomy::MAX_CAUSES + 1];
    // After a good frame: the first fragment of a stream is judged leniently.
    let mut stream = encode_to_vec(&Frame::Request(Request { what: 1 })).unwrap();
    stream.extend(encode_to_vec(&Frame::Alert(a.clone())).unwrap());
    let (frames, stats) = decode_all(&stream);
    assert!(matches!(&frames[..], [Ok(_), Err(FrameError::Body { .. })]), "{frames:?}");
    assert_eq!(stats.body_errors, 1);
    a.causes.truncate(crate::anatomy::MAX_CAUSES);
    let (frames, _) = decode_all(&encode_to_vec(&Frame::Alert(a.clone())).unwrap());
    assert!(matches!(&frames[..], [Ok(Frame::Alert(_))]), "{frames:?}");
    // Names past the spec's 64 bytes (a 448-byte cause name, a long comm).
    let mut long = a.clone();
    long.causes[0].name = "n".repeat(448);
    let mut stream = encode_to_vec(&Frame::Request(Request { what: 1 })).unwrap();
    stream.extend(encode_to_vec(&Frame::Alert(long)).unwrap());
    let (frames, _) = decode_all(&stream);
    assert!(
        matches!(&frames[..], [Ok(_), Err(FrameError::Body { why, .. })] if why.contains("448-byte name")),
        "{frames:?}"
    );
    let mut long = a.clone();
    long.comm = "c".repeat(MAX_ALERT_NAME_LEN + 1);
    let (frames, _) = decode_all(
        &[
            &encode_to_vec(&Frame::Request(Request { what: 1 })).unwrap()[..],
            &encode_to_vec(&Frame::Alert(long)).unwrap(),
        ]
        .concat(),
    );
    assert!(matches!(&frames[..], [Ok(_), Err(FrameError::Body { .. })]), "{frames:?}");
    a.causes[0].name = "n".repeat(MAX_ALERT_NAME_LEN);
    let (frames, _) = decode_all(&encode_to_vec(&Frame::Alert(a.clone())).unwrap());
    assert!(matches!(&frames[..], [Ok(Frame::Alert(_))]), "64 bytes are fine: {frames:?}");
    // A count the body cannot hold: a body error, whatever it claims.
    let mut body = vec![PROTOCOL_VERSION, 3];
    body.extend([0xf8, 0xac, 0xd1, 0x91, 0x01, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0xff, 0xff, 0xff, 0xff, 0x0f]);
    let crc = crate::crc32::hash(&body);
    body.extend(crc.to_le_bytes());
    assert!(matches!(decode_payload(&body), Err(FrameError::Body { .. })));
}

/// An alert record with `anatomy` through the agent's encoder and back
/// (as probe 0: a frame carries the id, never the name): the frame's
/// length and the decoded Alert.
fn through_the_wire(latency_ns: u64, anatomy: crate::anatomy::Anatomy) -> (usize, Alert) {
    let rec = AlertRecord {
        id: crate::ident::ProbeId::NONE,
        pid: 1,
        tid: 1,
        comm: "c".into(),
        cpu: 0,
        latency_ns,
        time_ns: 1,
        anatomy: Some(anatomy),
        cycle: None,
    };
    let mut enc = Encoder::new();
    let mut v = Vec::new();
    enc.alert(1, 0, &rec, &mut |b| v.extend_from_slice(b)).unwrap();
    let (frames, _) = decode_all(&v);
    let Some(Ok(Frame::Alert(a))) = frames.into_iter().next() else { panic!("no Alert decoded") };
    (v.len(), a)
}

#[test]
fn an_anatomy_too_large_for_a_frame_folds_its_smallest_parts_into_other() {
    use crate::anatomy::{Anatomy, Cause, CauseKind, Policy};
    let long = "x".repeat(200);
    let parts: Vec<Cause> = (0..20)
        .map(|i| Cause {
            kind: CauseKind::Task { comm: long.clone(), pid: i, policy: Policy::Other, prio: 0 },
            ns: 1_000 + u64::from(i),
        })
        .collect();
    let anatomy = Anatomy::from_parts(1_000_000, 0, 0, parts);
    let (len, a) = through_the_wire(1_000_000, anatomy);
    assert!(len <= FRAME_BUDGET, "{len} bytes");
    let back = anatomy::from_wire(a.cpu_woken, a.cpu_ran, &a.causes).unwrap();
    assert!(back.sums_to(1_000_000), "{back:?}");
    assert!(back.causes.len() < 21 && back.causes.iter().any(|c| c.kind == CauseKind::Other));
    // The largest part survives with its name cut to the wire's 64 bytes.
    assert!(matches!(&back.causes[0].kind, CauseKind::Task { pid: 19, comm, .. } if comm.len() == 64));
}

/// A lock wait's parts cross the wire as their own kinds (revision 10):
/// the owner (with where it was found), and the inversion as one cause
/// per preempter with its own time plus its folded rest. A receiver
/// rebuilds the one inversion naming the owner, blames each preempter for
/// its own share only, shows the same text line, and the parts still
/// sum. A cycle probe's missed-time tally credits each preempter alike.
#[test]
fn an_inversion_crosses_with_its_owner_and_each_preempter() {
    use crate::anatomy::{Anatomy, Cause, CauseKind, LockOwner, OwnerFrom, Policy, Preempter};
    let pre = |comm: &str, pid, ns| Preempter { comm: comm.into(), pid, policy: Policy::Fifo, prio: 50, ns };
    let owner =
        LockOwner { comm: "low".into(), pid: 800, tid: 812, policy: Policy::Fifo, prio: 10, from: OwnerFrom::Glibc };
    let parts = vec![
        Cause {
            kind: CauseKind::Inversion {
                owner: owner.clone(),
                preempted_by: vec![pre("med", 813, 900_000), pre("irq/9-uart", 90, 300_000)],
            },
            ns: 1_250_000,
        },
        Cause { kind: CauseKind::Task { comm: "ktimers".into(), pid: 20, policy: Policy::Fifo, prio: 99 }, ns: 30_000 },
        Cause { kind: CauseKind::Owner { owner: owner.clone() }, ns: 100_000 },
    ];
    let anatomy = Anatomy::from_parts(1_400_000, 0, 0, parts);
    let w = anatomy::to_wire(&anatomy);
    let kinds: Vec<(u8, u32, u64)> = w.iter().map(|c| (c.kind, c.id, c.ns)).collect();
    assert_eq!(
        kinds,
        [(12, 813, 900_000), (12, 90, 300_000), (12, 0, 50_000), (11, 812, 100_000), (1, 20, 30_000), (7, 0, 20_000)],
        "docs/wire-format.md's Cause kinds 11 and 12"
    );
    assert_eq!(w[3].policy, 0x21, "FIFO in the low nibble, glibc (2) in the high one");
    let (_, a) = through_the_wire(1_400_000, anatomy.clone());
    let back = anatomy::from_wire(a.cpu_woken, a.cpu_ran, &a.causes).unwrap();
    assert!(back.sums_to(1_400_000), "{back:?}");
    // The same anatomy but the owner's process id, which is not carried.
    let unpid = |mut a: Anatomy| {
        for c in &mut a.causes {
            if let CauseKind::Owner { owner } | CauseKind::Inversion { owner, .. } = &mut c.kind {
                owner.pid = 0;
            }
        }
        a
    };
    assert_eq!(back, unpid(anatomy.clone()));
    let text = |a: &Anatomy| {
        let mut s = String::new();
        a.render_into(&mut s, 1_400_000);
        s
    };
    assert_eq!(text(&back), text(&anatomy));
    assert!(text(&back).contains("inversion 1250 us: held by low[812] FIFO/10, preempted by med[813] FIFO/50 900 us"));
    let mut s = crate::causes::CauseSummary::default();
    s.begin_misses();
    s.add_miss(1_400_000, &anatomy.causes);
    let of = |pid| s.causes.iter().find(|c| c.id == crate::causes::CauseId::Task { pid }).map(|c| c.ns);
    assert_eq!((of(813), of(90)), (Some(900_000), Some(300_000)), "{s:?}");
}

/// An inversion whose owner cause did not come (a sender folded it)
/// still decodes as one inversion, its owner unnamed, summing.
#[test]
fn an_inversion_without_its_owner_cause_decodes_with_an_unnamed_owner() {
    use crate::anatomy::CauseKind;
    let w = vec![
        WireCause { kind: 12, id: 813, policy: 1, prio: 50, name: "med".into(), ns: 900 },
        WireCause { kind: 12, id: 0, policy: 0, prio: 0, name: String::new(), ns: 40 },
        WireCause { kind: 7, id: 0, policy: 0, prio: 0, name: String::new(), ns: 60 },
    ];
    let a = anatomy::from_wire(0, 0, &w).unwrap();
    assert!(a.sums_to(1_000), "{a:?}");
    let CauseKind::Inversion { owner, preempted_by } = &a.causes[0].kind else { panic!("{a:?}") };
    assert_eq!((owner.tid, owner.comm.as_str(), preempted_by.len(), a.causes[0].ns), (0, "", 1, 940));
    assert_eq!(a.causes[1].kind, CauseKind::Other);
}

/// An anatomy whose inversions would cross as more causes than a receiver
/// takes is folded first: the frame decodes, the parts sum.
#[test]
fn an_anatomy_over_the_receivers_cause_count_is_folded_to_fit() {
    use crate::anatomy::{Anatomy, Cause, CauseKind, LockOwner, OwnerFrom, Policy, Preempter, MAX_CAUSES};
    let owner = LockOwner { comm: "o".into(), pid: 1, tid: 2, policy: Policy::Other, prio: 0, from: OwnerFrom::Pi };
    let inv = |k: u32| Cause {
        kind: CauseKind::Inversion {
            owner: owner.clone(),
            preempted_by: (0..4)
                .map(|i| Preempter { comm: "p".into(), pid: k * 10 + i, policy: Policy::Fifo, prio: 5, ns: 10 })
                .collect(),
        },
        ns: 40,
    };
    let anatomy = Anatomy::from_parts(400, 0, 0, (0..10).map(inv).collect());
    assert!(anatomy::to_wire(&anatomy).len() > MAX_CAUSES);
    let (_, a) = through_the_wire(400, anatomy);
    assert!(a.causes.len() <= MAX_CAUSES, "{} causes", a.causes.len());
    let back = anatomy::from_wire(a.cpu_woken, a.cpu_ran, &a.causes).unwrap();
    assert!(back.sums_to(400), "{back:?}");
}

#[test]
fn absurd_probe_ids_are_ignored_not_allocated() {
    let mut t = Tracker::new();
    let s = Summary {
        seq: 1,
        boot_id: 1,
        time_ns: 1,
        last: false,
        probes: vec![ProbeCounts {
            id: u16::MAX,
            count: 1,
            sum_ns: 1,
            min_ns: 1,
            max_ns: 1,
            drops: 0,
            alerts: 0,
            first_bucket: 0,
            end_bucket: BUCKETS as u16,
            buckets: vec![(1, 1)],
        }],
        merge: 0,
        base_seq: 0,
    };
    match t.on_frame(Frame::Summary(s)) {
        Event::Summary { report, ids, .. } => assert!(report.probes.is_empty() && ids.is_empty()),
        e => panic!("{e:?}"),
    }
    assert_eq!(t.ignored_entries, 1);
    assert!(t.tracks.len() <= 1);
}

#[test]
fn boot_ids_differ_per_run() {
    let k = "4a0f8d1e-0000-4000-8000-000000000001";
    assert_ne!(boot_id(k, 1, 100), boot_id(k, 2, 100));
    assert_ne!(boot_id(k, 1, 100), boot_id(k, 1, 101));
    assert_eq!(boot_id(k, 1, 100), boot_id(k, 1, 100));
}

fn probe_desc(id: u16, name: &str) -> ProbeDesc {
    ProbeDesc {
        id,
        name: name.into(),
        kind: "runq".into(),
        attach: "tp_btf".into(),
        mode: String::new(),
        scheme: BucketScheme::LATMON,
    }
}

fn hello_with(boot_id: u32, probes: Vec<ProbeDesc>) -> Hello {
    Hello {
        protocol_revision: PROTOCOL_REVISION,
        latmon_version: "0.1.0".into(),
        board: String::new(),
        kernel: String::new(),
        boot_id,
        start_ns: 0,
        interval_ns: 1_000_000_000,
        probe_count: probes.len() as u16,
        probes,
        thresholds: Vec::new(),
        certificate: None,
    }
}

/// Hello entries with ids of MAX_PROBES or more are ignored (the
/// spec), not kept: many such Hellos leave the probe table bounded.
#[test]
fn hello_entries_with_huge_ids_are_not_kept() {
    let mut t = Tracker::new();
    for round in 0..50u16 {
        let probes = (0..100u16)
            .map(|i| probe_desc(MAX_PROBES as u16 + round * 100 + i, "x"))
            .chain([probe_desc(round % 3, "ok")])
            .collect();
        t.on_frame(Frame::Hello(hello_with(5, probes)));
    }
    let h = t.hello.as_ref().unwrap();
    assert_eq!(h.probes.iter().map(|p| p.id).collect::<Vec<_>>(), [0, 1, 2], "only ids below MAX_PROBES are kept");
    assert_eq!(t.ignored_entries, 50 * 100);
    // The first Hello of a boot too.
    let mut t = Tracker::new();
    t.on_frame(Frame::Hello(hello_with(6, vec![probe_desc(u16::MAX, "big"), probe_desc(0, "a")])));
    assert_eq!(t.hello.as_ref().unwrap().probes.len(), 1);
}

fn summary_seq(seq: u64) -> Frame {
    Frame::Summary(Summary { seq, boot_id: 1, time_ns: seq, last: false, probes: Vec::new(), merge: 0, base_seq: 0 })
}

/// A wild seq is no loss of 1.8e19 summaries, and u64::MAX does not
/// overflow.
#[test]
fn wild_seq_jumps_are_not_counted_as_lost() {
    let mut t = Tracker::new();
    t.on_frame(summary_seq(1));
    t.on_frame(summary_seq(4));
    assert_eq!(t.summaries_lost, 2);
    t.on_frame(summary_seq(u64::MAX - 7));
    assert_eq!((t.summaries_lost, t.seq_jumps), (2, 1));
    t.on_frame(summary_seq(u64::MAX));
    assert_eq!(t.summaries_lost, 8);
    t.on_frame(summary_seq(u64::MAX));
    t.on_frame(summary_seq(3));
    assert_eq!((t.summaries_lost, t.seq_jumps, t.restarts), (8, 1, 1));
    t.on_frame(summary_seq(3 + MAX_SEQ_GAP + 1));
    assert_eq!((t.summaries_lost, t.seq_jumps), (8 + MAX_SEQ_GAP, 1), "the largest believed gap");
}

/// Revision 7: a probe's wait role travels as its mode's prefix, through
/// the encoder, decoder and tracker, into the report's `wait` / `waits`
/// flags and the JSON; an older sender's modes say no waits.
#[test]
fn wait_roles_travel_in_the_mode_and_old_senders_have_none() {
    use crate::ident::{BtfMode, Family, Mechanism, Wait};
    use crate::summary::ProbeInfo;
    let info = |name: &str, wait: Wait| ProbeInfo {
        name: name.into(),
        kind: Family::Syscall,
        attach: Mechanism::TpBtf,
        mode: "per-cpu stamp, task-storage park".into(),
        btf_mode: BtfMode::CoRe,
        wait,
    };
    let infos = [
        info("syscall", Wait::No),
        info("syscall:write", Wait::No),
        info("syscall:waits", Wait::Sum),
        info("syscall:ppoll", Wait::Series),
    ];
    let table = probe_table(&infos);
    assert_eq!(table[3].mode, "wait; per-cpu stamp, task-storage park");
    assert_eq!(table[2].mode, "waits sum; per-cpu stamp, task-storage park");
    assert_eq!(table[0].mode, infos[0].mode, "no prefix for latency");
    // A mode cut at MAX_NAME_LEN keeps its prefix.
    let long = ProbeInfo { mode: "m".repeat(200), ..info("syscall:pause", Wait::Series) };
    let cut = &probe_table(&[long])[0].mode;
    assert!(cut.len() <= MAX_NAME_LEN && wait_of_mode(cut) == Wait::Series, "{cut}");

    let feed = |table: Vec<ProbeDesc>| {
        let mut bytes = encode_to_vec(&Frame::Hello(hello_with(9, table))).unwrap();
        let hs = vec![hist(&[300, 5_000]); 4];
        for seq in 1..=2 {
            Encoder::new()
                .summary(SummaryHeader { seq, boot_id: 9, time_ns: seq * 1_000_000_000, last: false }, &hs, &mut |f| {
                    bytes.extend_from_slice(f)
                })
                .unwrap();
        }
        let (frames, _) = decode_all(&bytes);
        let mut t = Tracker::new();
        let mut last = None;
        for f in frames {
            if let Event::Summary { report, .. } = t.on_frame(f.unwrap()) {
                last = Some(report);
            }
        }
        last.expect("a summary")
    };
    let r = feed(table.clone());
    let roles: Vec<Wait> = r.probes.iter().map(ProbeReport::wait_role).collect();
    assert_eq!(roles, [Wait::No, Wait::No, Wait::Sum, Wait::Series]);
    let json = serde_json::to_string(&r.probes).unwrap();
    assert_eq!(json.matches("\"wait\":true").count(), 1, "{json}");
    assert_eq!(json.matches("\"waits\":true").count(), 1, "{json}");
    assert!(!json.contains("\"wait\":false"), "false flags are left out: {json}");
    // A sender before revision 7: the same names, modes without prefixes.
    let old: Vec<ProbeDesc> =
        table.into_iter().map(|d| ProbeDesc { mode: "per-cpu stamp, task-storage park".into(), ..d }).collect();
    let r = feed(old);
    assert!(r.probes.iter().all(|p| p.wait_role() == Wait::No));
}

/// A cycle miss's release -> run gap when not the timer's (issue 40 item
/// 8): kinds 13 (stopped) and 14 (backlog) cross the wire and come back,
/// new values of the existing field (docs/wire-format.md).
#[test]
fn stopped_and_backlog_causes_cross_the_wire() {
    use crate::anatomy::{Anatomy, Cause, CauseKind};
    let parts = vec![
        Cause { kind: CauseKind::Stopped, ns: 5_000_000_000 },
        Cause { kind: CauseKind::Backlog, ns: 2_000_000 },
        Cause { kind: CauseKind::Running, ns: 1_000_000 },
    ];
    let anatomy = Anatomy::from_parts(5_003_000_000, 0, 0, parts);
    let w = anatomy::to_wire(&anatomy);
    assert!(w.iter().any(|c| (c.kind, c.ns) == (13, 5_000_000_000)), "{w:?}");
    assert!(w.iter().any(|c| (c.kind, c.ns) == (14, 2_000_000)), "{w:?}");
    let (_, a) = through_the_wire(5_003_000_000, anatomy.clone());
    let back = anatomy::from_wire(a.cpu_woken, a.cpu_ran, &a.causes).unwrap();
    assert_eq!(back, anatomy);
}
