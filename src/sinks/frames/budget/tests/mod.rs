// SPDX-License-Identifier: MIT
//! The budget's unit tests: the pacer's plan alone, then whole links
//! (simulated by [`sim`]) and the bytes-per-second model.

mod sim;

use super::planner::*;
use super::*;
use crate::sinks::queue::Pop;
use latmon_core::hist::{Hist, BUCKETS};
use latmon_core::session::Session;
use latmon_core::summary::AlertRecord;
use latmon_core::summary::{IntervalReport, ProbeInfo, ProbeReport};
use latmon_core::wire::FrameDecoder;
use latmon_core::wire::{coarsen, Step, MAX_MERGE};
use sim::*;

#[test]
fn credit_follows_the_budget_and_folds_when_in_debt() {
    let mut p = Pacer::new(1000);
    p.refill(0);
    p.refill(1_000_000_000);
    assert!(p.summary_due(1, false));
    p.charge(5000);
    p.refill(2_000_000_000);
    assert!(!p.summary_due(2, false), "in debt: folded into the next");
    assert_eq!(p.folded, 1);
    p.refill(4_000_000_000);
    assert!(p.summary_due(3, false));
    assert!(p.summary_due(4, true), "the final summary always goes");
    // A debt being repaid (the start-up table): summaries keep going
    // as long as the debt shrinks; one that grows it folds.
    let mut p = Pacer::new(1000);
    p.refill(0);
    p.charge(5_400);
    p.summary_sent(600);
    p.refill(1_000_000_000);
    assert!(p.credit() < 0);
    assert!(p.summary_due(1, false), "in debt, repaying: still sent");
    p.summary_sent(3_000);
    p.refill(2_000_000_000);
    assert!(!p.summary_due(2, false), "a summary that grows the debt folds");
}

#[test]
fn keyframes_cover_every_entry_once_per_period() {
    let mut p = Pacer::new(1000);
    p.keyframe_ns = 10_000_000_000;
    let total: usize = (0..100).map(|_| p.keys_due(7, 1_000_000_000)).sum();
    assert_eq!(total, 70, "7 entries, 100 s, one key per entry per 10 s");
}

#[test]
fn steps_are_taken_in_the_declared_order() {
    // A little over: one bucket merge at a time, then the roll-up,
    // then longer intervals.
    let mut p = Pacer::new(480);
    let mut seen = vec![p.step()];
    let mut merges = vec![];
    for _ in 0..60 {
        if p.adapt(0, 450, 1_000_000_000, 10, true, DownCost { coarsest_pct: 50, ..DownCost::SAME }) != Change::None {
            seen.push(p.step());
            merges.push(p.merge);
        }
    }
    seen.dedup();
    assert_eq!(seen, [Step::None, Step::CoarseBuckets, Step::RollUp, Step::LongerInterval]);
    assert_eq!(&merges[..3], [1, 2, 3], "one merge at a time");
    assert!(p.stride > 1);
    // Far over (a series count no merge can fit): the roll-up at once,
    // with the coarsest buckets (step 2 includes step 1), then an
    // interval as long as the excess says.
    let mut p = Pacer::new(480);
    assert_eq!(p.adapt(200_000, 5_000, 1_000_000_000, 10, true, DownCost::SAME), Change::Up, "at the first summary");
    assert_eq!((p.step(), p.merge, p.stride), (Step::RollUp, MAX_MERGE, 1));
    for _ in 0..3 {
        p.adapt(200_000, 5_000, 1_000_000_000, 10, false, DownCost::SAME);
    }
    assert_eq!(p.step(), Step::LongerInterval);
    assert!(p.stride >= 16, "5 000 B/s into ~400: {}", p.stride);
    // A link with room stays at full resolution, keyframes within 60 s.
    let mut q = Pacer::new(5_760);
    for _ in 0..20 {
        assert_eq!(q.adapt(30_000, 1_500, 1_000_000_000, 50, true, DownCost::SAME), Change::None);
    }
    assert_eq!(q.step(), Step::None);
    assert!(q.keyframe_ns <= KEYFRAME_MAX_NS && q.keyframe_ns >= KEYFRAME_MIN_NS);
}

#[test]
fn a_debt_counts_in_the_plan() {
    // The same load fits an even link, not one paying off a table.
    let mut even = Pacer::new(480);
    assert_eq!(even.adapt(3_000, 600, 1_000_000_000, 10, true, DownCost::SAME), Change::None);
    let mut owing = Pacer::new(480);
    owing.charge(6_000);
    assert_eq!(owing.adapt(3_000, 600, 1_000_000_000, 10, true, DownCost::SAME), Change::Up);
}

#[test]
fn steps_go_back_down_with_hysteresis() {
    let mut p = Pacer::new(480);
    // (No keyframe bytes: what the plan needs is the deltas alone.)
    for _ in 0..10 {
        p.adapt(0, 5_000, 1_000_000_000, 10, true, DownCost::SAME);
    }
    assert_eq!(p.step(), Step::LongerInterval);
    let top = (p.merge, p.rolled, p.stride);
    // Load just inside the plan, but a step down would not fit with
    // room to spare: it stays (no flapping).
    p.refill(0);
    for i in 0..100 {
        let c = p.adapt(0, 300, 1_000_000_000, 10, true, DownCost { delta_pct: 200, ..DownCost::SAME });
        assert_eq!(c, Change::None, "at {i}: {p:?}");
    }
    assert_eq!((p.merge, p.rolled, p.stride), top);
    // The load falls: down one step per DOWN_SETTLE_TICKS summaries,
    // in the reverse order, to full resolution.
    let mut downs = vec![];
    for i in 0..2_000 {
        match p.adapt(0, 60, 1_000_000_000, 10, true, DownCost { delta_pct: 130, ..DownCost::SAME }) {
            Change::Down => downs.push((i, p.step(), p.merge, p.stride)),
            Change::Up => panic!("up at {i}"),
            Change::None => {}
        }
    }
    assert_eq!(p.step(), Step::None, "{downs:?}");
    assert!(downs.windows(2).all(|w| w[1].0 - w[0].0 >= DOWN_SETTLE_TICKS as usize), "{downs:?}");
    assert!(downs.windows(2).all(|w| w[1].1 <= w[0].1), "reverse order: {downs:?}");
}

#[test]
fn many_series_fit_9600_and_19200_by_rolling_up() {
    // ~110 series (the default probes under load) on 480 and 960 B/s:
    // the whole run, start-up table and final summary included, within
    // the budget, by roll-up and a longer interval rather than folding.
    for budget in [480u32, 960] {
        let r = simulate(budget, 110, 300, 0, 4);
        let bps = r.bytes as u64 / r.secs;
        eprintln!("{budget} B/s, 110 series: {bps} B/s, steps {:?}, plans {:?}, {} folded", r.steps, r.plans, r.folded);
        assert!(bps <= budget as u64, "{bps} B/s over the {budget} B/s budget");
        assert!(r.steps.contains(&Step::RollUp) || r.steps.contains(&Step::LongerInterval), "{:?}", r.steps);
        // Steps are first taken in the declared order.
        let first = |s: Step| r.steps.iter().position(|&x| x == s).unwrap_or(usize::MAX);
        assert!(first(Step::CoarseBuckets) < first(Step::RollUp), "{:?}", r.steps);
        assert!(r.plans.len() <= 10, "no flapping: {:?}", r.plans);
        assert!(r.folded <= r.secs / 10, "{} intervals folded in {} s", r.folded, r.secs);
        assert!(r.final_exact);
    }
}

#[test]
fn series_born_at_once_never_burst_a_slow_link() {
    // The agent's start: ~120 series seen in the first 2 s (the
    // default probes under load), on 480 B/s. Before, the table went
    // first, summaries folded while it was repaid, and the first one
    // after was a delta of every series at full resolution (19 KB
    // measured live: 40 s of the budget); then nothing for ~30 s.
    let budget = 480u64;
    let r = simulate_load(budget as u32, 120, 120, 0, 6, 2, &|_| 100);
    let table_s = 3; // the start-up table: a debt, planned
    let worst = r.per_s.iter().skip(table_s).copied().max().unwrap_or(0) as u64;
    let table: usize = r.per_s.iter().take(table_s).sum();
    // The longest run of seconds without a byte after the table.
    let gap = r.per_s.iter().skip(table_s).fold((0u64, 0u64), |(run, max), &b| {
        let run = if b == 0 { run + 1 } else { 0 };
        (run, max.max(run))
    });
    eprintln!("120 series born in 2 s, 480 B/s: per second {:?}; steps {:?}", r.per_s, r.steps);
    // One summary carries at most the credit and the cap again
    // (Pacer::summary_room: 4 s of budget).
    assert!(worst <= 4 * budget, "{worst} B in one second after the table");
    assert!(r.steps.contains(&Step::RollUp), "{:?}", r.steps);
    // Silence only while the table's debt is repaid (a few seconds of
    // margin), not again for a summary's.
    let repay_s = (table as u64).div_ceil(budget) + 4;
    assert!(gap.1 <= repay_s, "{} s without a byte (table {table} B: {repay_s} s): {:?}", gap.1, r.per_s);
    assert!(r.final_exact);
}

#[test]
fn a_probe_flooding_alerts_cannot_shed_every_record_of_another() {
    // Two probes on a 9600-baud budget: "flood" sends 50 alert records
    // an interval, "rare" one, listed after the flood's (as the agent
    // drains them probe by probe).
    let session = Session {
        board: "b".into(),
        kernel: "k".into(),
        boot_id: 9,
        start_ns: 0,
        interval_ns: 1_000_000_000,
        probes: vec![info("flood", "timer"), info("rare", "irq")],
        failed: Vec::new(),
        thresholds_ns: Vec::new(),
        certificate: None,
    };
    let totals = vec![Hist::default(); 2];
    let q = Queue::new(1 << 24);
    let mut f = BudgetedFrames::new(480);
    let mut enc = Encoder::new();
    let (mut buf, mut lens) = (Vec::new(), Vec::new());
    let mut status_slot = None;
    let mut dec = FrameDecoder::new();
    let (mut data, mut dlens) = (Vec::new(), Vec::new());
    let mut got = [0u64; 2];
    let mut shed_status = Vec::new();
    let rec = |probe: u16, i: u64| AlertRecord {
        id: latmon_core::ident::ProbeId(probe),
        pid: 1,
        tid: 1,
        comm: "task".into(),
        cpu: 0,
        latency_ns: 5_000 + i,
        time_ns: i,
        anatomy: None,
        cycle: None,
    };
    let secs = 30;
    for seq in 1..=secs {
        let mut alert_records: Vec<AlertRecord> = (0..50).map(|i| rec(0, seq * 100 + i)).collect();
        alert_records.push(rec(1, seq));
        let report = IntervalReport {
            loops: Vec::new(),
            loops_unlisted: 0,
            seq,
            time_ns: seq * 1_000_000_000,
            interval_ns: 1_000_000_000,
            last: seq == secs,
            probes: (0..2).map(|p| ProbeReport::new(&session.probes[p], &totals[p], &totals[p])).collect(),
            alert_records,
            agent: Default::default(),
        };
        let tick = Tick { session: &session, report: &report, totals: &totals, read_errors: &[0, 0] };
        f.render(&tick, &q, &mut enc, &mut buf, &mut lens, false, &mut |t, enc, buf, lens, link, shed| {
            crate::sinks::frames::render::status_into(&mut status_slot, t, &q, enc, buf, lens, link, shed);
        });
        if report.last {
            // The final Status (as FrameRender sends after the summary).
            let (mut b, mut l) = (Vec::new(), Vec::new());
            let link = f.health(1_000_000_000);
            crate::sinks::frames::render::status_into(
                &mut status_slot,
                &tick,
                &q,
                &mut enc,
                &mut b,
                &mut l,
                link,
                f.shed(),
            );
            q.push_group(&b, &l);
        }
        if q.pop(&mut data, &mut dlens, std::time::Duration::ZERO) == Pop::Data {
            dec.feed(&data, &mut |r| match r.expect("clean frames") {
                latmon_core::wire::Frame::Alert(a) => got[a.probe as usize] += 1,
                latmon_core::wire::Frame::Status(s) => shed_status = s.shed,
                _ => {}
            });
        }
    }
    let sent = 51 * secs;
    let shed = f.shed().to_vec();
    eprintln!("records over the link {got:?}, shed per probe {shed:?}, link-wide {}", f.pacer.alerts_shed);
    assert!(got[1] >= secs * 9 / 10, "the rare probe's records arrive: {got:?}");
    assert!(got[0] > 0 && shed[0] > 0, "the flood's share is what is left: {got:?} {shed:?}");
    assert_eq!(got[0] + got[1] + shed[0] + shed[1], sent, "every record sent or shed, per probe");
    assert_eq!(shed[0] + shed[1], f.pacer.alerts_shed);
    // A Status says whose records were shed.
    let st: Vec<(u16, u64)> = shed_status.iter().map(|m| (m.id, m.alerts_shed)).collect();
    assert!(st.iter().any(|&(id, n)| id == 0 && n > 0), "{st:?}");
}

#[test]
fn the_load_falls_and_the_link_steps_back_down() {
    let r = simulate_load(960, 60, 900, 0, 5, 60, &|s| if s <= 200 { 100 } else { 3 });
    eprintln!("plans {:?}, steps {:?}", r.plans, r.steps);
    let top = *r.steps.iter().max().unwrap();
    assert!(top >= Step::RollUp, "{:?}", r.steps);
    let down = |w: &[(u8, bool, u32)]| w[1].2 < w[0].2 || (w[0].1 && !w[1].1) || w[1].0 < w[0].0;
    assert!(r.plans.windows(2).any(down), "a step back down: {:?}", r.plans);
    // A step down that does not hold makes the next wait twice as long.
    assert!(r.plans.len() <= 16, "no flapping: {:?}", r.plans);
    assert!(r.final_exact);
    // Under a steady load the plan only goes up.
    let r = simulate(480, 110, 600, 0, 6);
    assert!(r.plans.len() <= 10, "{:?}", r.plans);
}

#[test]
fn alerts_are_shed_beyond_their_share_and_counted() {
    let mut f = BudgetedFrames::new(1000);
    f.pacer.refill(0);
    f.pacer.refill(2_000_000_000);
    let a = AlertRecord {
        id: latmon_core::ident::ProbeId::NONE,
        pid: 1,
        tid: 1,
        comm: "c".into(),
        cpu: 0,
        latency_ns: 1,
        time_ns: 1,
        anatomy: None,
        cycle: None,
    };
    let sent = (0..100).filter(|_| f.alert_ok(&a)).count();
    assert!(sent > 0 && sent < 100, "{sent}");
    assert_eq!(f.pacer.alerts_shed, 100 - sent as u64);
}

#[test]
fn entry_bytes_matches_the_encoder() {
    let mut h = Hist::default();
    for v in [5u64, 300, 2_500, 2_600, 40_000, 1 << 30] {
        h.record(v);
    }
    let mut enc = Encoder::new();
    let mut frame = Vec::new();
    let ids = [3u16];
    enc.keyframe(
        SummaryHeader { seq: 1, boot_id: 1, time_ns: 1, last: false },
        LinkHeader::default(),
        Entries::select(std::slice::from_ref(&h), &ids, &[0]),
        &mut |f| frame.extend_from_slice(f),
    )
    .unwrap();
    let est = entry_bytes(3, &h);
    assert_eq!(entry_bytes_at(3, &h, 0), est);
    for merge in 1..=MAX_MERGE {
        let mut c = h.clone();
        coarsen(&mut c, merge);
        assert_eq!(entry_bytes_at(3, &h, merge), entry_bytes(3, &c), "merge {merge}");
    }
    // The frame: est plus header, CRC, COBS; the estimate is an upper bound of the entry.
    assert!(frame.len() > est && frame.len() < est + 30, "{} vs {est}", frame.len());
    let _ = BUCKETS;
}

#[test]
fn a_familys_waits_line_is_never_rolled_up() {
    let mut probes = vec![info("runq", "runq"), info("syscall", "syscall")];
    probes.push(ProbeInfo { wait: latmon_core::ident::Wait::Sum, ..info("syscall:waits", "syscall") });
    for k in 0..3 * ROLLUP_KEEP {
        probes.push(info(&format!("syscall:s{k}"), "syscall"));
    }
    let session = Session {
        board: "b".into(),
        kernel: "k".into(),
        boot_id: 7,
        start_ns: 0,
        interval_ns: 1_000_000_000,
        probes,
        failed: Vec::new(),
        thresholds_ns: Vec::new(),
        certificate: None,
    };
    let n = session.probes.len();
    let zero = Hist::default();
    // The waits line the quietest of all: a roll-up by events would
    // take it first.
    let totals: Vec<Hist> = (0..n)
        .map(|p| {
            let mut h = Hist::default();
            for _ in 0..if p == 2 { 0 } else { 10 + p } {
                h.record(1_000);
            }
            h
        })
        .collect();
    let report = IntervalReport {
        loops: Vec::new(),
        loops_unlisted: 0,
        seq: 1,
        time_ns: 1_000_000_000,
        interval_ns: 1_000_000_000,
        last: false,
        probes: (0..n).map(|p| ProbeReport::new(&session.probes[p], &zero, &totals[p])).collect(),
        alert_records: Vec::new(),
        agent: Default::default(),
    };
    let tick = Tick { session: &session, report: &report, totals: &totals, read_errors: &vec![0; n] };
    let mut f = BudgetedFrames::new(480);
    f.replan(&tick);
    f.roll_up(&tick);
    assert_eq!(f.families.len(), 1, "syscall's series rolled up");
    assert_eq!(f.rolled(), 3 * ROLLUP_KEEP - ROLLUP_KEEP, "the quiet series, not the waits line");
    assert!(f.families.iter().all(|fam| !fam.members.contains(&2)), "the waits line keeps its entry");
    assert!(f.ids.contains(&2));
}

#[test]
fn deltas_and_keyframes_reconstruct_the_agents_totals() {
    let r = simulate(5_760, 40, 300, 0, 1);
    assert!(
        r.keyframe_checks > 100 && r.delta_checks > 1_000,
        "{} keys, {} deltas checked",
        r.keyframe_checks,
        r.delta_checks
    );
    assert_eq!(r.lost_runs, 0);
    assert!(r.final_exact);
    assert_eq!(r.steps, [Step::None], "115200 baud has room for this");
    let bps = r.bytes as u64 / r.secs;
    assert!(bps <= 5_760, "{bps} B/s over the 5760 B/s budget");
}

#[test]
fn lost_frames_cost_resolution_until_the_next_keyframe_only() {
    let r = simulate(5_760, 40, 300, 1, 2);
    assert!(r.lost_runs > 0, "1 % of frames lost: some deltas missing, reported");
    assert!(r.keyframe_checks > 100, "totals exact at keyframes: {}", r.keyframe_checks);
    assert!(r.final_exact, "and exact at the end");
}

#[test]
fn a_small_budget_degrades_in_order_and_stays_exact() {
    let r = simulate(480, 60, 400, 0, 3);
    assert!(r.steps.len() > 1, "{:?}", r.steps);
    assert!(r.steps.windows(2).all(|w| w[0] < w[1]), "declared order: {:?}", r.steps);
    let bps = r.bytes as u64 / r.secs;
    assert!(bps <= 480 * 11 / 10, "{bps} B/s over the 480 B/s budget");
    assert!(r.final_exact);
    eprintln!("9600 baud model: steps {:?}, {bps} B/s", r.steps);
}

/// The bytes-per-second table of docs/wire-format.md (modelled; run
/// with --nocapture to print it). Every cell fits its budget.
#[test]
fn bytes_per_second_model_table() {
    let bauds: [(u64, u64); 4] = [(9_600, 480), (19_200, 960), (115_200, 5_760), (1_000_000, 50_000)];
    println!("| probe set | uptime | current (cumulative) B/s | 9600 (480 B/s) | 19200 (960 B/s) | 115200 (5 760 B/s) | 1 000 000 (50 000 B/s) |");
    println!("|---|---|---|---|---|---|---|");
    for (name, set) in model_sets() {
        let (one, _) = model_hists(&set, 1);
        // Hello: about 40 bytes a row.
        let hello_bytes = 60 + 40 * one.len();
        for (label, secs) in [("1 min", 60u64), ("1 h", 3_600), ("24 h", 86_400)] {
            let (cum, _) = model_hists(&set, secs);
            let cur = current_bps(&cum, hello_bytes);
            let mut row = format!("| {name} | {label} | {cur} |");
            for (_, budget) in bauds {
                let (bps, step, merge, key_s, stride) = budgeted_bps(&set, secs, budget, hello_bytes);
                assert!(bps <= budget, "{name} {label} at {budget} B/s: {bps} B/s");
                let how = match step {
                    Step::None => format!("keys {key_s} s"),
                    Step::CoarseBuckets => format!("step 1 (merge {merge}), keys {key_s} s"),
                    Step::RollUp => format!("step 2 (merge {merge}, roll-up), keys {key_s} s"),
                    Step::LongerInterval => {
                        format!("step 3 (merge {merge}, roll-up, {stride} s interval), keys {key_s} s")
                    }
                };
                row.push_str(&format!(" {bps} ({how}) |"));
            }
            println!("{row}");
        }
    }
}
