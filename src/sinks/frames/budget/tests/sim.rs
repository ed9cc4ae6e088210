// SPDX-License-Identifier: MIT
//! Whole budgeted links, simulated (a session of probes and series fed
//! through `BudgetedFrames` into the receivers, lost frames included), and
//! the bytes-per-second model of typical probe sets.

use super::super::planner::*;
use super::super::*;
use crate::sinks::queue::Pop;
use latmon_core::hist::Hist;
use latmon_core::ident::{BtfMode, Family, Mechanism};
use latmon_core::session::Session;
use latmon_core::summary::{IntervalReport, ProbeInfo, ProbeReport};
use latmon_core::wire::{coarsen, Step, MAX_MERGE};
use latmon_core::wire::{Event, FixedReceiver, FixedTracker, FrameDecoder, Tracker, MAX_PROBES};

pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

pub(super) fn info(name: &str, kind: &str) -> ProbeInfo {
    ProbeInfo {
        name: name.into(),
        kind: Family::parse(kind).unwrap(),
        attach: Mechanism::TpBtf,
        mode: String::new(),
        btf_mode: BtfMode::CoRe,
        wait: Default::default(),
    }
}

/// What one simulated run saw.
pub(super) struct Run {
    pub(super) keyframe_checks: usize,
    pub(super) delta_checks: usize,
    pub(super) lost_runs: u64,
    pub(super) steps: Vec<Step>,
    /// Every (merge, rolled, stride) the link went through.
    pub(super) plans: Vec<(u8, bool, u32)>,
    pub(super) bytes: usize,
    /// Bytes queued in each second (index: second - 1).
    pub(super) per_s: Vec<usize>,
    pub(super) secs: u64,
    pub(super) final_exact: bool,
    pub(super) folded: u64,
}

/// An agent with runq, a syscall family (its head sums the series) and
/// `series` series born over the first minute, busy for `secs`
/// one-second intervals, rendered by a budgeted frames output and
/// read back by a Tracker, with `drop_pct` % of frames lost. Checks
/// at every keyframe entry that the receiver's totals are the agent's
/// (coarsened to the wire merge; `other` entries against the sum of
/// their members), and at every delta entry without a loss behind it.
pub(super) fn simulate(budget_bps: u32, series: usize, secs: u64, drop_pct: u64, seed: u64) -> Run {
    simulate_load(budget_bps, series, secs, drop_pct, seed, 60, &|_| 100)
}

/// [`simulate`] with the events of second `s` scaled to `load(s)` %.
pub(super) fn simulate_load(
    budget_bps: u32,
    series: usize,
    secs: u64,
    drop_pct: u64,
    seed: u64,
    born_in_s: u64,
    load: &dyn Fn(u64) -> u64,
) -> Run {
    let mut rng = Rng(seed);
    let mut session = Session {
        board: "b".into(),
        kernel: "k".into(),
        boot_id: 7,
        start_ns: 0,
        interval_ns: 1_000_000_000,
        probes: vec![info("runq", "runq"), info("syscall", "syscall")],
        failed: Vec::new(),
        thresholds_ns: Vec::new(),
        certificate: None,
    };
    let mut totals = vec![Hist::default(); 2];
    let mut prev = totals.clone();
    let q = Queue::new(1 << 24);
    let mut f = BudgetedFrames::new(budget_bps);
    let mut enc = Encoder::new();
    let (mut buf, mut lens) = (Vec::new(), Vec::new());
    let mut status_slot = None;
    let mut dec = FrameDecoder::new();
    let mut tracker = Tracker::new();
    let mut fixed = Box::new(FixedReceiver::<{ MAX_PROBES }, 16, 4>::new());
    let mut history: std::collections::BTreeMap<u64, Vec<Hist>> = Default::default();
    let mut run = Run {
        keyframe_checks: 0,
        delta_checks: 0,
        lost_runs: 0,
        steps: vec![Step::None],
        plans: vec![(0, false, 1)],
        bytes: 0,
        per_s: vec![0; secs as usize],
        secs,
        final_exact: false,
        folded: 0,
    };
    let (mut data, mut dlens) = (Vec::new(), Vec::new());
    for seq in 1..=secs {
        // Series are born over the first `born_in_s` seconds.
        let want = 2 + (series * seq.min(born_in_s) as usize) / born_in_s.max(1) as usize;
        while session.probes.len() < want {
            let k = session.probes.len() - 2;
            session.probes.push(info(&format!("syscall:s{k}"), "syscall"));
            totals.push(Hist::default());
            prev.push(Hist::default());
        }
        prev.clone_from(&totals);
        let pct = load(seq);
        for _ in 0..2_000 * pct / 100 {
            totals[0].record(500 + rng.next() % 200_000);
        }
        let n = totals.len();
        for p in 2..n {
            // A few busy series, most quiet.
            let events = if p < 6 { 300 * pct / 100 } else { rng.next() % (1 + 3 * pct / 100) };
            for _ in 0..events {
                let v = 200 + rng.next() % (1 << (8 + p % 20));
                totals[p].record(v);
                totals[1].record(v);
            }
        }
        let report = IntervalReport {
            loops: Vec::new(),
            loops_unlisted: 0,
            seq,
            time_ns: seq * 1_000_000_000,
            interval_ns: 1_000_000_000,
            last: seq == secs,
            probes: (0..n).map(|p| ProbeReport::new(&session.probes[p], &prev[p], &totals[p])).collect(),
            alert_records: Vec::new(),
            agent: Default::default(),
        };
        history.insert(seq, totals.clone());
        let tick = Tick { session: &session, report: &report, totals: &totals, read_errors: &vec![0; n] };
        // The families as this interval's frames carry them (a step
        // after the summary changes them for the next).
        let mut fams: Vec<(u16, Vec<usize>)> = f.families.iter().map(|x| (x.other, x.members.clone())).collect();
        let probes_before = f.probes;
        f.render(&tick, &q, &mut enc, &mut buf, &mut lens, false, &mut |t, enc, buf, lens, link, shed| {
            crate::sinks::frames::render::status_into(&mut status_slot, t, &q, enc, buf, lens, link, shed);
        });
        // Series born this interval joined `other` before the frames.
        if let Some(fam) = fams.first_mut() {
            for p in probes_before.max(2)..n {
                if !fam.1.contains(&p) {
                    fam.1.push(p);
                }
            }
        }
        if run.steps.last() != Some(&f.pacer.step()) {
            run.steps.push(f.pacer.step());
        }
        let plan = (f.pacer.merge, f.pacer.rolled, f.pacer.stride);
        if run.plans.last() != Some(&plan) {
            run.plans.push(plan);
        }
        if q.pop(&mut data, &mut dlens, std::time::Duration::ZERO) != Pop::Data {
            continue; // folded into the next summary
        }
        run.bytes += data.len();
        run.per_s[seq as usize - 1] += data.len();
        let mut at = 0;
        for &l in &dlens {
            let frame = &data[at..at + l];
            at += l;
            // Losses stop 70 s before the end: every probe gets a
            // keyframe (period <= 60 s) after its last loss.
            if drop_pct > 0 && seq + 70 < secs && rng.next() % 100 < drop_pct {
                continue;
            }
            // The no_std receiver reads the same bytes to the same
            // committed totals, losses and inexact probes.
            fixed.feed(frame, |_, _| {});
            dec.feed(frame, &mut |r| {
                let ev = tracker.on_frame(r.expect("clean frames"));
                let Event::Summary { report, ids, keyframe, merge, inexact, .. } = ev else { return };
                let agent = &history[&report.seq];
                for (p, &id) in report.probes.iter().zip(&ids) {
                    if inexact.contains(&id) {
                        continue;
                    }
                    let mut want = Hist::default();
                    match fams.iter().find(|fam| fam.0 == id) {
                        Some(fam) => fam.1.iter().for_each(|&m| want.merge(&agent[m])),
                        None => want.clone_from(&agent[id as usize]),
                    }
                    coarsen(&mut want, merge);
                    let got = tracker.totals(id).expect("a snapshot");
                    assert_eq!(
                        (p.total_count, got.count, got.sum_ns, got.min_ns, got.max_ns),
                        (want.count, want.count, want.sum_ns, want.min_ns, want.max_ns),
                        "seq {} id {id}",
                        report.seq
                    );
                    // Coarsening composes: the receiver's buckets (from
                    // finer earlier frames) agree at this frame's merge.
                    let mut g = got.clone();
                    coarsen(&mut g, merge);
                    assert_eq!(g.slots, want.slots, "seq {} id {id}: buckets", report.seq);
                    if keyframe {
                        run.keyframe_checks += 1;
                    } else {
                        run.delta_checks += 1;
                    }
                }
            });
        }
    }
    assert_fixed_agrees(&fixed.tracker, &tracker);
    run.lost_runs = tracker.summaries_lost + tracker.deltas_unusable;
    run.folded = f.pacer.folded;
    // The final summary is a whole keyframe: every total exact again.
    run.final_exact = tracker.inexact_probes() == 0
        && (0..totals.len()).all(|p| {
            let e = f.entry_of[p];
            let id = f.ids[e];
            let got = tracker.totals(id);
            got.is_some_and(|g| {
                let mut want = Hist::default();
                match f.families.iter().find(|fam| fam.other == id) {
                    Some(fam) => fam.members.iter().for_each(|&m| want.merge(&totals[m])),
                    None => want.clone_from(&totals[p]),
                }
                coarsen(&mut want, f.pacer.merge);
                let ok = g.count == want.count && g.sum_ns == want.sum_ns && g.slots == want.slots;
                if !ok {
                    eprintln!("probe {p} id {id}: {} vs {}", g.count, want.count);
                }
                ok
            })
        });
    run
}

/// The fixed-memory receiver (latmon-core's no_std one) holds what
/// the desktop Tracker holds: committed totals per probe, inexact
/// probes, summaries lost.
pub(super) fn assert_fixed_agrees(fixed: &FixedTracker<{ MAX_PROBES }, 16, 4>, tracker: &Tracker) {
    assert_eq!(fixed.lost(), tracker.summaries_lost, "summaries lost");
    assert_eq!(fixed.deltas_unusable, tracker.deltas_unusable, "deltas unusable");
    for id in 0..MAX_PROBES as u16 {
        let want = tracker.totals(id).map(|h| (h.count, h.alerts, h.drops));
        let s = fixed.get(id);
        let got = s.and_then(|s| s.committed()).map(|t| (t.count, t.alerts, t.drops));
        assert_eq!(got, want, "id {id}: committed totals");
        assert_eq!(s.is_some_and(|s| s.inexact), tracker.is_inexact(id), "id {id}: inexact");
    }
}

/// A probe of a modelled configuration: events per second, latency
/// median (ns) and spread, and its series (0: not a family).
pub(super) struct ModelProbe {
    pub(super) rate: u64,
    pub(super) median: f64,
    pub(super) sigma: f64,
    pub(super) series: usize,
}

pub(super) const fn mp(rate: u64, median: f64, sigma: f64, series: usize) -> ModelProbe {
    ModelProbe { rate, median, sigma, series }
}

/// The modelled probe sets: the default (runq, syscall, irq) and the
/// real boards' configs (board-configs/), on a busy controller.
pub(super) fn model_sets() -> Vec<(&'static str, Vec<ModelProbe>)> {
    let runq = mp(20_000, 4_000.0, 0.8, 0);
    let runq_ctrl = || mp(1_000, 3_000.0, 0.6, 0);
    let irq = || mp(5_000, 2_000.0, 0.5, 12);
    let timer_ctrl = || mp(1_000, 25_000.0, 0.4, 0);
    let kfunc = || mp(1_000, 60_000.0, 0.3, 0);
    vec![
        ("default (runq, syscall, irq)", vec![mp(20_000, 4_000.0, 0.8, 0), mp(50_000, 1_500.0, 1.2, 40), irq()]),
        ("beaglebone-black", vec![runq, runq_ctrl(), kfunc(), irq(), mp(3_000, 2_000.0, 1.0, 10)]),
        ("imx8mp", vec![mp(20_000, 4_000.0, 0.8, 0), runq_ctrl(), kfunc(), timer_ctrl(), irq()]),
        ("raspberrypi4-64-rt", vec![mp(20_000, 4_000.0, 0.8, 0), runq_ctrl(), kfunc(), timer_ctrl(), irq()]),
        ("x86_64-generic", vec![mp(20_000, 4_000.0, 0.8, 0), runq_ctrl(), kfunc(), timer_ctrl(), irq()]),
    ]
}

/// Histograms of a probe set after `secs` of events: (per probe id,
/// family head of each series or usize::MAX).
pub(super) fn model_hists(set: &[ModelProbe], secs: u64) -> (Vec<Hist>, Vec<usize>) {
    let mut hists = Vec::new();
    let mut heads = Vec::new();
    let mut series = Vec::new();
    for p in set {
        let mix = |m: f64| [(0.99, m, p.sigma), (0.01, m * 4.0, p.sigma + 0.5)];
        if p.series == 0 {
            hists.push(latmon_core::wire::tests::model_hist(p.rate * secs, &mix(p.median)));
            heads.push(usize::MAX);
            continue;
        }
        // Zipf-like shares: a few busy series, a long quiet tail.
        let norm: f64 = (1..=p.series).map(|k| 1.0 / k as f64).sum();
        let head = hists.len();
        let mut sum = Hist::default();
        let mut mine = Vec::new();
        for k in 1..=p.series {
            let n = (p.rate as f64 * secs as f64 / k as f64 / norm).round() as u64;
            let h = latmon_core::wire::tests::model_hist(n, &mix(p.median * (1 + k % 5) as f64));
            sum.merge(&h);
            mine.push(h);
        }
        hists.push(sum);
        heads.push(usize::MAX);
        for h in mine {
            series.push((head, h));
        }
    }
    for (head, h) in series {
        hists.push(h);
        heads.push(head);
    }
    (hists, heads)
}

pub(super) fn delta_bytes(hists: &[Hist], ids: &[u16]) -> usize {
    let sel: Vec<u16> = (0..hists.len() as u16).filter(|&i| hists[i as usize].count > 0).collect();
    let mut enc = Encoder::new();
    let mut n = 0;
    let h = SummaryHeader { seq: 86_400, boot_id: 0xdead_beef, time_ns: 90_000_000_000_000, last: false };
    let cover = ids.iter().map(|&i| i + 1).max().unwrap_or(0);
    enc.delta(
        h,
        LinkHeader { merge: 0, base_seq: 86_399 },
        Entries::select(hists, ids, &sel),
        cover,
        &[],
        &[],
        &mut |f| n += f.len(),
    )
    .unwrap();
    n
}

/// Wire entries under the plan: coarsened, families rolled up.
pub(super) fn planned(
    hists: &[Hist],
    heads: &[usize],
    merge: u8,
    rolled: bool,
    interval: &[Hist],
) -> (Vec<Hist>, Vec<u16>) {
    let mut out: Vec<Hist> = Vec::new();
    let mut ids = Vec::new();
    let mut others: Vec<(usize, Hist)> = Vec::new();
    let mut kept: std::collections::HashMap<usize, usize> = Default::default();
    for (p, h) in hists.iter().enumerate() {
        let head = heads[p];
        if rolled && head != usize::MAX {
            let k = kept.entry(head).or_default();
            // Series are in share order: the first ROLLUP_KEEP are the busiest.
            if *k >= ROLLUP_KEEP || interval[p].count == 0 {
                match others.iter_mut().find(|(hd, _)| *hd == head) {
                    Some((_, o)) => o.merge(h),
                    None => others.push((head, h.clone())),
                }
                continue;
            }
            *k += 1;
        }
        out.push(h.clone());
        ids.push(p as u16);
    }
    for (k, (_, o)) in others.into_iter().enumerate() {
        out.push(o);
        ids.push(other_id(k));
    }
    for h in &mut out {
        coarsen(h, merge);
    }
    (out, ids)
}

/// Bytes per second of the current cumulative encoding (a Summary of
/// every probe each second, Hello and Status every 10 s).
pub(super) fn current_bps(hists: &[Hist], hello_bytes: usize) -> u64 {
    let mut enc = Encoder::new();
    let mut n = 0;
    let h = SummaryHeader { seq: 86_400, boot_id: 0xdead_beef, time_ns: 90_000_000_000_000, last: false };
    enc.summary(h, hists, &mut |f| n += f.len()).unwrap();
    (n + (hello_bytes + 70) / 10) as u64
}

/// The budgeted plan for a probe set after `secs` of uptime: settles
/// the Pacer on the modelled sizes; (bytes per second, step, merge,
/// keyframe period s, link interval s).
pub(super) fn budgeted_bps(
    set: &[ModelProbe],
    secs: u64,
    budget: u64,
    hello_bytes: usize,
) -> (u64, Step, u8, u64, u32) {
    let (cum, heads) = model_hists(set, secs);
    let has_families = heads.iter().any(|&h| h != usize::MAX);
    let mut p = Pacer::new(budget);
    let hello_period = ((hello_bytes as u128 * 1_000_000_000 / (budget * HELLO_SHARE_PERCENT / 100).max(1) as u128)
        as u64)
        .clamp(crate::sinks::link::HELLO_PERIOD_NS, HELLO_MAX_PERIOD_NS);
    let hello_bps = (hello_bytes as u64 + 70) * 1_000_000_000 / hello_period;
    let mut quiet = 0;
    let mut bps = 0;
    for _ in 0..100 {
        let (interval, _) = model_hists(set, p.stride as u64);
        let (keys, _) = planned(&cum, &heads, p.merge, p.rolled, &interval);
        let (deltas, ids) = planned(&interval, &heads, p.merge, p.rolled, &interval);
        let (_, key_ids) = planned(&cum, &heads, p.merge, p.rolled, &interval);
        let full_key: u64 = keys.iter().zip(&key_ids).map(|(h, &id)| entry_bytes(id, h) as u64).sum();
        let d = delta_bytes(&deltas, &ids) as u64;
        let now_b: u64 = deltas.iter().zip(&ids).map(|(h, &id)| entry_bytes(id, h) as u64).sum();
        let coarse_b: u64 = deltas.iter().zip(&ids).map(|(h, &id)| entry_bytes_at(id, h, MAX_MERGE) as u64).sum();
        let coarsest_pct = (coarse_b * 100).checked_div(now_b).unwrap_or(100);
        let dt = p.stride as u64 * 1_000_000_000;
        let per_tick = d + (full_key as u128 * dt as u128 / p.keyframe_ns as u128) as u64;
        bps = (per_tick as u128 * 1_000_000_000 / dt as u128) as u64 + hello_bps;
        if p.adapt(
            full_key,
            per_tick,
            dt,
            hello_bps,
            has_families,
            DownCost { delta_pct: 200, coarsest_pct, ..DownCost::SAME },
        ) != Change::None
        {
            quiet = 0;
        } else {
            quiet += 1;
            if quiet > STEP_SETTLE_TICKS + 2 {
                break;
            }
        }
    }
    (bps, p.step(), p.merge, p.keyframe_ns / 1_000_000_000, p.stride)
}
