// SPDX-License-Identifier: MIT
//! The register map's unit tests (docs/modbus-map.md's addresses).

use latmon_core::extra::ProbeExtra;
use latmon_core::hist::Hist;
use latmon_core::ident::{BtfMode, Family, Mechanism};
use latmon_core::session::Session;
use latmon_core::summary::{FailedProbe, IntervalReport, ProbeInfo};

use super::*;

fn info(name: &str, attach: Mechanism) -> ProbeInfo {
    ProbeInfo {
        name: name.into(),
        kind: Family::Runq,
        attach,
        mode: String::new(),
        btf_mode: BtfMode::CoRe,
        wait: Default::default(),
    }
}

fn u32_at(w: &[u16], a: u16) -> u32 {
    (w[a as usize] as u32) << 16 | w[a as usize + 1] as u32
}

fn u64_at(w: &[u16], a: u16) -> u64 {
    (u32_at(w, a) as u64) << 32 | u32_at(w, a + 2) as u64
}

fn session(failed: Vec<FailedProbe>) -> Session {
    Session {
        board: "b".into(),
        kernel: "k".into(),
        boot_id: 0xDEAD_BEEF,
        start_ns: 1_000_000_000,
        interval_ns: 1_000_000_000,
        probes: vec![info("runq", Mechanism::TpBtf), info("second-probe-with-long-name", Mechanism::RawTp)],
        failed,
        thresholds_ns: Vec::new(),
        certificate: None,
    }
}

fn report(seq: u64) -> IntervalReport {
    let mut prev = Hist::default();
    prev.record(10);
    let mut cur = prev.clone();
    for v in [1_001u64, 2_500, 7_000_000_000_000] {
        cur.record(v);
    }
    cur.drops = 2;
    cur.alerts = 1;
    let p = ProbeReport::new(&info("runq", Mechanism::TpBtf), &prev, &cur);
    let mut q =
        ProbeReport::new(&info("second-probe-with-long-name", Mechanism::RawTp), &Hist::default(), &Hist::default());
    q.total_count = 0x1_0000_0002;
    q.count = 5_000_000_000;
    IntervalReport {
        seq,
        time_ns: 5_500_000_000,
        interval_ns: 1_000_000_001,
        last: false,
        probes: vec![p, q],
        alert_records: Vec::new(),
        agent: Default::default(),
        loops: Vec::new(),
        loops_unlisted: 0,
    }
}

#[test]
fn header_and_blocks() {
    let failed = vec![FailedProbe { position: 1, name: "timer".into(), kind: Family::Timer, why: "no".into() }];
    let s = session(failed);
    let r = report(0x0102_0304_0506_0708);
    let mut img = Image::default();
    img.build(&Tick { session: &s, report: &r, totals: &[], read_errors: &[0, 3] }, &AgentStatus::default());
    let w = img.words();
    assert_eq!(w.len(), 32 + 3 * 40);
    assert_eq!(
        &w[..6],
        &[
            MAGIC,
            MAP_VERSION,
            3,
            BLOCK_WORDS,
            HEADER_WORDS,
            status::RUNNING | status::PROBE_FAILED | status::READ_ERRORS
        ]
    );
    assert_eq!(u32_at(w, reg::BOOT_ID), 0xDEAD_BEEF);
    assert_eq!(&w[8..12], &[0x0102, 0x0304, 0x0506, 0x0708], "u64 high word first");
    assert_eq!(u32_at(w, reg::INTERVAL_US), 1_000_001, "rounded up");
    assert_eq!(u32_at(w, reg::UPTIME_S), 4);
    assert_eq!((w[16], w[17]), (2, 1));
    assert_eq!(u32_at(w, reg::READ_ERRORS), 3);

    // Block 0: runq, attached.
    let b = HEADER_WORDS;
    let p = &r.probes[0];
    assert_eq!(&w[b as usize..b as usize + 4], &[STATE_ATTACHED, 1, 1, 0]);
    assert_eq!(u64_at(w, b + off::TOTAL_COUNT), 4);
    assert_eq!(u32_at(w, b + off::COUNT), 3);
    assert_eq!(u32_at(w, b + off::P50_US), us_ceil(p.p50_ns));
    assert_eq!(u32_at(w, b + off::MIN_US), us_ceil(p.min_ns));
    assert_eq!(us_ceil(1_001), 2, "1001 ns reads 2 µs");
    assert_eq!(u32_at(w, b + off::MAX_US), u32::MAX, "7000 s saturates");
    assert_eq!((u32_at(w, b + off::DROPS), u32_at(w, b + off::ALERTS)), (2, 1));
    assert_eq!(&w[(b + off::NAME) as usize..(b + off::NAME + 3) as usize], &[0x7275, 0x6E71, 0]);

    // Block 1: the failed probe keeps its place.
    let b = HEADER_WORDS + BLOCK_WORDS;
    assert_eq!(&w[b as usize..b as usize + 4], &[STATE_FAILED, 0, 5, 1]);
    assert!(w[(b + 4) as usize..(b + off::NAME) as usize].iter().all(|&x| x == 0));
    assert_eq!(w[(b + off::NAME) as usize], u16::from_be_bytes(*b"ti"));

    // Block 2: the second attached probe.
    let b = HEADER_WORDS + 2 * BLOCK_WORDS;
    assert_eq!(&w[b as usize..b as usize + 4], &[STATE_ATTACHED, 2, 1, 2]);
    assert_eq!(u64_at(w, b + off::TOTAL_COUNT), 0x1_0000_0002);
    assert_eq!(u32_at(w, b + off::COUNT), u32::MAX, "interval count saturates");
    let name: Vec<u8> =
        w[(b + off::NAME) as usize..(b + off::NAME + 8) as usize].iter().flat_map(|x| x.to_be_bytes()).collect();
    assert_eq!(&name, b"second-probe-wit", "truncated to 16 bytes");
}

#[test]
fn thresholds_sit_at_their_blocks_place_after_the_extension_blocks() {
    let failed = vec![FailedProbe { position: 1, name: "timer".into(), kind: Family::Timer, why: "no".into() }];
    let s = session(failed);
    let mut r = report(1);
    r.probes[0].threshold_ns = 500_000;
    r.probes[1].threshold_ns = 5_000_000_000_000_001;
    let mut img = Image::default();
    img.build(&Tick { session: &s, report: &r, totals: &[], read_errors: &[0, 0] }, &AgentStatus::default());
    let words = img.read(THRESHOLD_BASE, 6).unwrap();
    // Block 0: 500 µs; block 1 failed: 0; block 2: µs, saturated.
    assert_eq!(words, &[0, 500, 0, 0, 0xFFFF, 0xFFFF]);
    assert_eq!(img.read(THRESHOLD_BASE + 4, 2).unwrap(), &[0xFFFF, 0xFFFF]);
    assert!(img.read(THRESHOLD_BASE + 5, 2).is_err(), "past the last block");
    assert!(img.read(THRESHOLD_BASE - 1, 1).is_err(), "between the extension and threshold blocks");
    // The registers before are where they were.
    assert_eq!(img.words().len(), 32 + 3 * 40);
    assert_eq!(img.ext_words().len(), 3 * EXT_WORDS as usize);
}

#[test]
fn status_bits_and_final_interval() {
    let s = session(Vec::new());
    let mut r = report(1);
    r.last = true;
    let mut img = Image::default();
    let agent = AgentStatus { over_budget: true, bad_requests: 1, link_failed: false };
    img.build(&Tick { session: &s, report: &r, totals: &[], read_errors: &[0, 0] }, &agent);
    assert_eq!(img.words()[reg::STATUS as usize], status::OVER_BUDGET | status::LINK_ERRORS);
    assert_eq!(u32_at(img.words(), reg::BAD_REQUESTS), 1);
    assert_eq!(u32_at(img.words(), reg::MISSED), 0);
    // Kernel-skipped runs: the sum over probes, and a status bit.
    r.probes[0].total_bpf_missed = 90;
    r.probes[1].total_bpf_missed = 2;
    img.build(&Tick { session: &s, report: &r, totals: &[], read_errors: &[0, 0] }, &agent);
    assert_eq!(img.words()[reg::STATUS as usize], status::OVER_BUDGET | status::LINK_ERRORS | status::MISSED);
    assert_eq!(u32_at(img.words(), reg::MISSED), 92);
}

#[test]
fn the_top_cause_of_the_probe_with_the_most_late_time() {
    use latmon_core::causes::{CauseId, CauseSummary, TopCause};
    let s = session(Vec::new());
    let mut r = report(3);
    let mut img = Image::default();
    img.build(&Tick { session: &s, report: &r, totals: &[], read_errors: &[0, 0] }, &AgentStatus::default());
    let w = img.words();
    assert_eq!(w[reg::CAUSE_BLOCK as usize], NO_BLOCK, "no alerts: no block");
    assert!(w[reg::CAUSE_KIND as usize..reg::EXT_FIRST as usize].iter().all(|&x| x == 0));
    assert_eq!(w[reg::EXT_FIRST as usize], EXT_BASE);
    let causes = |alerted_ns: u64, id: CauseId, ns: u64| CauseSummary {
        alerts: 3,
        alerted_ns,
        causes: vec![
            TopCause { id, name: "hog".into(), ns },
            TopCause { id: CauseId::Other, name: String::new(), ns: alerted_ns - ns },
        ],
        ..Default::default()
    };
    r.probes[0].alert_causes = Some(causes(1_000_000, CauseId::Irq { irq: 36 }, 600_000));
    r.probes[1].alert_causes = Some(causes(4_000_001, CauseId::Task { pid: 70_000 }, 3_600_000));
    img.build(&Tick { session: &s, report: &r, totals: &[], read_errors: &[0, 0] }, &AgentStatus::default());
    let w = img.words();
    assert_eq!((w[reg::CAUSE_BLOCK as usize], w[reg::CAUSE_KIND as usize]), (1, 1), "block 1, a task");
    assert_eq!(u32_at(w, reg::CAUSE_ID), 70_000);
    assert_eq!(u32_at(w, reg::CAUSE_ALERTED_US), 4_001, "rounded up");
    assert_eq!(w[reg::CAUSE_SHARE as usize], 8_999, "89.99 %: rounded down");
    assert_eq!(w[31], EXT_BASE, "the extension blocks' address (reserved before them)");
    // The header's other registers are where they were.
    assert_eq!(u32_at(w, reg::MISSED), 0);
    assert_eq!(&w[..2], &[MAGIC, MAP_VERSION]);
}

#[test]
fn reads_in_and_out_of_range() {
    let img = Image::empty(2);
    let len = 32 + 80;
    assert_eq!(img.read(0, 125).unwrap_err(), MapError::OutOfRange { addr: 0, count: 125, len });
    assert_eq!(img.read(0, 112).unwrap().len(), 112);
    assert_eq!(img.read(111, 1).unwrap(), &[0]);
    assert!(matches!(img.read(112, 1), Err(MapError::OutOfRange { .. })));
    assert!(matches!(img.read(u16::MAX, 125), Err(MapError::OutOfRange { .. })), "no overflow");
    assert_eq!(img.read(3, 0), Err(MapError::ZeroCount));
    assert_eq!(img.read(0, 2).unwrap(), &[MAGIC, MAP_VERSION]);
}

#[test]
fn rebuild_reuses_the_buffer_and_clears_old_values() {
    let s = session(Vec::new());
    let mut img = Image::default();
    let r1 = report(1);
    img.build(&Tick { session: &s, report: &r1, totals: &[], read_errors: &[0, 0] }, &AgentStatus::default());
    let ptr = img.words().as_ptr();
    let mut r2 = report(2);
    r2.probes[0].max_ns = 0;
    img.build(&Tick { session: &s, report: &r2, totals: &[], read_errors: &[0, 0] }, &AgentStatus::default());
    assert_eq!(img.words().as_ptr(), ptr);
    assert_eq!(u32_at(img.words(), HEADER_WORDS + off::MAX_US), 0);
    assert_eq!(u64_at(img.words(), reg::SEQ), 2);
}

#[test]
fn codes() {
    // docs/modbus-map.md's tables: a PLC program reads these numbers.
    use Mechanism::*;
    for (m, c) in [(TpBtf, 1), (RawTp, 2), (Tracepoint, 3), (Fentry, 4), (Kprobe, 5), (Uprobe, 6)] {
        assert_eq!(m.modbus_code(), c, "{m}");
    }
    for (k, c) in [
        (Family::Runq, 1),
        (Family::Syscall, 2),
        (Family::Irq, 3),
        (Family::Softirq, 4),
        (Family::Timer, 5),
        (Family::Kfunc, 6),
        (Family::Ufunc, 7),
        (Family::Chain, 8),
        (Family::Cycle, 9),
        (Family::Lock, 10),
    ] {
        assert_eq!(k.modbus_code(), c, "{k}");
    }
    assert_eq!(us_ceil(0), 0);
    assert_eq!(us_ceil(1), 1);
    assert_eq!(us_ceil(1_000), 1);
    assert_eq!(us_ceil(u64::MAX), u32::MAX);
    assert!(MAX_BLOCKS * BLOCK_WORDS as usize + HEADER_WORDS as usize <= 65_536);
}

#[test]
fn a_cycle_probes_misses_and_top_cause_in_its_extension_block() {
    use latmon_core::causes::{CauseId, CauseSummary, TopCause};
    use latmon_core::cycle::CycleCounts;
    let s = session(Vec::new());
    let mut r = report(3);
    ProbeExtra::cycle_in(&mut r.probes[1].extra).counts =
        CycleCounts { misses: 3, total_misses: 5_000_000_123, ..Default::default() };
    ProbeExtra::cycle_in(&mut r.probes[1].extra).miss_causes = CauseSummary {
        alerts: 3,
        alerted_ns: 4_000_001,
        causes: vec![
            TopCause { id: CauseId::Blocked { on: 1 }, name: "fdatasync".into(), ns: 3_000_000 },
            TopCause { id: CauseId::Running, name: String::new(), ns: 1_000_001 },
        ],
        ..Default::default()
    };
    let mut img = Image::default();
    img.build(&Tick { session: &s, report: &r, totals: &[], read_errors: &[0, 0] }, &AgentStatus::default());
    let e = img.ext_words();
    assert_eq!(e.len(), 2 * EXT_WORDS as usize, "one extension block per probe block");
    assert!(e[..EXT_WORDS as usize].iter().all(|&x| x == 0), "not a cycle probe: zeros");
    let b = EXT_WORDS;
    assert_eq!(u32_at(e, b + ext::TOTAL_MISSES), u32::MAX, "saturates");
    assert_eq!(u32_at(e, b + ext::MISSES), 3);
    assert_eq!((e[(b + ext::CAUSE_KIND) as usize], e[(b + ext::CAUSE_SHARE) as usize]), (9, 7499));
    assert_eq!(u32_at(e, b + ext::CAUSE_ID), 1, "blocked on io");
    assert_eq!(u32_at(e, b + ext::MISSED_US), 4_001);
    // Served at EXT_BASE + N * EXT_WORDS; the gap below it and past the
    // last extension block are outside the map; no block moved.
    assert_eq!(img.read(EXT_BASE + b, EXT_WORDS).unwrap(), &e[b as usize..]);
    assert!(img.read(EXT_BASE + 2 * b, 1).is_err());
    assert!(img.read(EXT_BASE - 1, 2).is_err());
    assert_eq!(img.words().len(), HEADER_WORDS as usize + 2 * BLOCK_WORDS as usize);
}

/// A cycle probe's rule counts and a lock line's inversion counts in
/// their counter blocks at 64000 + 10·N, the low 32 bits (they wrap);
/// other blocks read 0, and nothing before them moved.
#[test]
fn rule_and_lock_counters_sit_in_counter_blocks_after_the_thresholds() {
    use latmon_core::cycle::{CycleCounts, RuleCounts};
    use latmon_core::lock::LockCounts;
    let mut s = session(Vec::new());
    s.probes.push(info("lock", Mechanism::TpBtf));
    let mut r = report(4);
    r.probes.push(r.probes[0].clone());
    ProbeExtra::cycle_in(&mut r.probes[0].extra).counts = CycleCounts {
        total_rule_counts: RuleCounts([7, 150, 100, (1 << 32) + 49]),
        total_rule_records_lost: 3,
        ..Default::default()
    };
    r.probes[2].extra = Some(ProbeExtra::Lock(LockCounts {
        total_inversions: 99,
        total_inversion_ns: 150_000_001,
        total_owners_refused: Some(4),
        total_owned: 120,
        ..Default::default()
    }));
    let mut img = Image::default();
    img.build(&Tick { session: &s, report: &r, totals: &[], read_errors: &[0, 0, 0] }, &AgentStatus::default());
    let c = img.read(COUNTER_BASE, 3 * COUNTER_WORDS).unwrap();
    let u = |b: u16, o: u16| u32_at(c, b * COUNTER_WORDS + o);
    let rules: Vec<u32> = (0..4).map(|k| u(0, counter::RULES + 2 * k)).collect();
    assert_eq!(rules, [7, 150, 100, 49], "woken_by_lower .. sleep_realtime_clock, the low 32 bits");
    assert_eq!(u(0, counter::RULE_RECORDS_LOST), 3);
    assert!(c[COUNTER_WORDS as usize..2 * COUNTER_WORDS as usize].iter().all(|&w| w == 0), "block 1: neither");
    assert_eq!(u(2, counter::INVERSIONS), 99);
    assert_eq!(u(2, counter::INVERSION_US), 150_001, "µs rounded up");
    assert_eq!(u(2, counter::OWNERS_REFUSED), 4);
    assert_eq!(u(2, counter::OWNED), 120);
    assert_eq!(u(2, 8), 0, "reserved");
    // The gap before, past the last block: outside the map.
    assert!(img.read(COUNTER_BASE + 3 * COUNTER_WORDS, 1).is_err());
    assert!(img.read(COUNTER_BASE - 1, 2).is_err());
    assert!(img.read(THRESHOLD_BASE, 6).is_ok(), "the threshold blocks are where they were");
    assert_eq!(img.words().len(), HEADER_WORDS as usize + 3 * BLOCK_WORDS as usize);
    // The address space: the last counter block ends within it, past the
    // largest threshold table.
    assert_eq!(COUNTER_BLOCKS, 153);
    assert!(COUNTER_BASE as usize + COUNTER_BLOCKS * COUNTER_WORDS as usize <= 65_536);
    assert!(THRESHOLD_BASE as usize + MAX_BLOCKS * THRESHOLD_WORDS as usize <= COUNTER_BASE as usize);
    let many = Image::empty(MAX_BLOCKS);
    assert!(many.read(COUNTER_BASE + (COUNTER_BLOCKS as u16 - 1) * COUNTER_WORDS, COUNTER_WORDS).is_ok());
    assert!(many.read(65_529, 1).is_ok(), "the last counter block's last register");
    assert!(many.read(65_530, 1).is_err() && many.read(65_535, 1).is_err(), "past it");
}

fn a_loop(
    tid: u32,
    comm: &str,
    watched: bool,
    cycle: Option<latmon_core::loops::LoopCycles>,
) -> latmon_core::loops::Loop {
    use latmon_core::anatomy::Policy;
    use latmon_core::loops::{Loop, LoopClass, PeriodSource};
    Loop {
        tid,
        pid: 4_000,
        comm: comm.into(),
        policy: Policy::Fifo,
        prio: 80,
        rt: true,
        class: LoopClass::Periodic,
        period_ns: 1_000_000,
        period_source: PeriodSource::AbsTimer,
        jitter_ns: 0,
        watched,
        cycle,
    }
}

/// The image's loops area read back through [`Image::read`], as a PLC
/// does: its header and loop block `n`.
fn loop_block(img: &Image, n: u16) -> Vec<u16> {
    img.read(LOOPS_BASE + LOOPS_HEADER_WORDS + n * LOOP_WORDS, LOOP_WORDS).unwrap().to_vec()
}

/// No loop: the loops area is served all the same (its header tells the
/// layout, every count and block reads 0), at 45056, below the extension
/// blocks and past the largest probe table; the gaps around it answer 02.
#[test]
fn the_loops_area_with_no_loop() {
    let s = session(Vec::new());
    let r = report(1);
    let mut img = Image::default();
    assert!(img.read(LOOPS_BASE, 1).is_err(), "no image yet");
    img.build(&Tick { session: &s, report: &r, totals: &[], read_errors: &[0, 0] }, &AgentStatus::default());
    assert_eq!(LOOPS_BASE, 45_056);
    let h = img.read(LOOPS_BASE, LOOPS_HEADER_WORDS).unwrap();
    assert_eq!(
        h,
        &[0, 0, 0, 40, 45_064, 0, 0, 32],
        "listed, watched, blocks, size, first, unwatched, unlisted, capacity"
    );
    let all = img.read(LOOPS_BASE + LOOPS_HEADER_WORDS, 125).unwrap();
    assert!(all.iter().all(|&w| w == 0));
    let end = LOOPS_BASE + LOOPS_HEADER_WORDS + 32 * LOOP_WORDS;
    assert_eq!(end, 46_344);
    assert!(img.read(end - 1, 1).is_ok(), "the last block's last register");
    assert!(img.read(end - 1, 2).is_err() && img.read(end, 1).is_err(), "past the area");
    assert!(img.read(LOOPS_BASE - 1, 2).is_err(), "the gap below it");
    // The largest probe table ends below it; the extension blocks did not move.
    let many = Image::empty(MAX_BLOCKS);
    assert!(many.read(HEADER_WORDS + (MAX_BLOCKS as u16 - 1) * BLOCK_WORDS, BLOCK_WORDS).is_ok());
    assert!(many.read(HEADER_WORDS + MAX_BLOCKS as u16 * BLOCK_WORDS, 1).is_err());
    assert_eq!(many.read(LOOPS_BASE, 5).unwrap(), &[0, 0, 0, 40, 45_064], "before the first interval");
    assert!(many.read(EXT_BASE + (MAX_BLOCKS as u16 - 1) * EXT_WORDS, EXT_WORDS).is_ok());
    assert_eq!(many.read(reg::EXT_FIRST, 1).unwrap(), &[EXT_BASE]);
}

/// Watched loops get a block each, in list order (unwatched ones none):
/// every register as docs/modbus-map.md says, a loop not yet cycled with
/// its counts 0 and COUNTED 0, a hostile comm bounded to 16 ASCII bytes.
#[test]
fn a_block_per_watched_loop() {
    use latmon_core::anatomy::Policy;
    use latmon_core::loops::{LoopCycles, PeriodSource};
    let s = session(Vec::new());
    let mut r = report(2);
    let counted = LoopCycles {
        period_ns: 999_999,
        cycles: 1_000,
        total_cycles: 0x1_0000_0005,
        misses: 3,
        total_misses: 5_000_000_123,
        total_overruns: 7,
        total_rules: (1 << 32) + 9,
    };
    let mut sporadic = a_loop(11, "pipe_reader", false, None);
    sporadic.rt = false;
    let mut tfd = a_loop(12, "tfd\u{e9}\n\0loop-with-a-long-name", true, None);
    tfd.policy = Policy::Unknown(70_000);
    tfd.prio = 99;
    tfd.period_ns = 2_000_001;
    tfd.period_source = PeriodSource::Timerfd;
    r.loops = vec![a_loop(10, "ctrl_1khz", true, Some(counted)), sporadic, tfd];
    r.loops_unlisted = 70_000;
    r.agent.loops_unwatched = 2;
    let mut img = Image::default();
    img.build(&Tick { session: &s, report: &r, totals: &[], read_errors: &[0, 0] }, &AgentStatus::default());
    let h = img.read(LOOPS_BASE, LOOPS_HEADER_WORDS).unwrap();
    assert_eq!(h, &[3, 2, 2, 40, 45_064, 2, 65_535, 32]);
    let b = loop_block(&img, 0);
    assert_eq!(u32_at(&b, lp::TID), 10);
    assert_eq!(u32_at(&b, lp::PID), 4_000);
    assert_eq!((b[lp::POLICY as usize], b[lp::PRIO as usize]), (1, 80), "SCHED_FIFO 80");
    assert_eq!(u32_at(&b, lp::PERIOD_US), 1_000);
    assert_eq!((b[lp::PERIOD_SOURCE as usize], b[lp::COUNTED as usize]), (2, 1), "abs_timer, counted");
    assert_eq!(u64_at(&b, lp::TOTAL_CYCLES), 0x1_0000_0005, "u64: no wrap, no saturation");
    assert_eq!(u32_at(&b, lp::CYCLES), 1_000);
    assert_eq!(u32_at(&b, lp::MISSES), 3);
    assert_eq!(u32_at(&b, lp::TOTAL_MISSES), u32::MAX, "saturates, as the extension block's");
    assert_eq!(u32_at(&b, lp::TOTAL_OVERRUNS), 7);
    assert_eq!(u32_at(&b, lp::TOTAL_RULES), 9, "the low 32 bits, as the counter blocks'");
    assert_eq!(u32_at(&b, lp::CYCLE_PERIOD_US), 1_000, "999.999 µs rounded up");
    assert!(b[lp::RESERVED as usize..lp::COMM as usize].iter().all(|&w| w == 0), "reserved: read 0");
    assert_eq!(&b[lp::COMM as usize..], &[0x6374, 0x726C, 0x5F31, 0x6B68, 0x7A00, 0, 0, 0], "\"ctrl_1khz\"");
    // Block 1 is the third loop (the sporadic one has no block): not cycled yet.
    let b = loop_block(&img, 1);
    assert_eq!(u32_at(&b, lp::TID), 12);
    assert_eq!((b[lp::POLICY as usize], b[lp::PRIO as usize]), (65_535, 99), "an unknown policy saturates");
    assert_eq!(u32_at(&b, lp::PERIOD_US), 2_001);
    assert_eq!((b[lp::PERIOD_SOURCE as usize], b[lp::COUNTED as usize]), (1, 0), "timerfd, not counted yet");
    assert!(b[lp::TOTAL_CYCLES as usize..lp::COMM as usize].iter().all(|&w| w == 0), "no counts: 0");
    let comm: Vec<u8> = b[lp::COMM as usize..].iter().flat_map(|w| w.to_be_bytes()).collect();
    assert_eq!(&comm, b"tfd????loop-with", "non-ASCII, control and NUL bytes read '?', 16 bytes kept");
    assert!(loop_block(&img, 2).iter().all(|&w| w == 0), "past the watched loops");
    // The next interval lists fewer: old values do not linger, the buffer stays.
    let ptr = img.loops_words().as_ptr();
    r.loops.truncate(1);
    r.loops[0].cycle = None;
    img.build(&Tick { session: &s, report: &r, totals: &[], read_errors: &[0, 0] }, &AgentStatus::default());
    assert_eq!(img.loops_words().as_ptr(), ptr, "no allocation per interval");
    assert_eq!(img.read(LOOPS_BASE, 3).unwrap(), &[1, 1, 1]);
    assert!(loop_block(&img, 0)[lp::COUNTED as usize..lp::COMM as usize].iter().all(|&w| w == 0));
    assert!(loop_block(&img, 1).iter().all(|&w| w == 0));
}

/// More watched loops than blocks (a report from elsewhere: the agent
/// watches at most LATMON_CYCLE_AUTO): the first 32 get blocks, the
/// header counts them all, nothing past the area is written or served.
#[test]
fn more_watched_loops_than_blocks_are_bounded_and_counted() {
    let s = session(Vec::new());
    let mut r = report(3);
    r.loops = (0..40).map(|i| a_loop(100 + i, &format!("l{i}"), true, None)).collect();
    let mut img = Image::default();
    img.build(&Tick { session: &s, report: &r, totals: &[], read_errors: &[0, 0] }, &AgentStatus::default());
    assert_eq!(LOOP_BLOCKS, 32);
    assert_eq!(img.read(LOOPS_BASE, 3).unwrap(), &[40, 40, 32], "listed 40, watched 40, 32 blocks");
    assert_eq!(u32_at(&loop_block(&img, 31), lp::TID), 131, "the 32nd loop in the last block");
    assert_eq!(img.loops_words().len(), LOOPS_HEADER_WORDS as usize + 32 * LOOP_WORDS as usize);
    assert!(img.read(LOOPS_BASE + LOOPS_HEADER_WORDS + 32 * LOOP_WORDS, 1).is_err());
}
