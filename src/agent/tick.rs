// SPDX-License-Identifier: MIT
//! One interval of the agent: read every probe, measure latmon's own cost,
//! hold it to the budget, hand the summary to the sinks.

use std::os::fd::RawFd;
use std::os::unix::fs::FileExt;

use latmon_core::extra::Alerted;
use latmon_core::ident::ProbeId;
use latmon_core::session::Tick;
use latmon_core::summary::{AlertRecord, ProbeState};

use super::{monotonic_ns, Agent, Slot};
use crate::config::ProbeKind;
use crate::cost::{self, Cost};
use crate::sinks::Sink;

/// Slot `probe`'s records of the interval as its family data reads them
/// (core extra.rs).
fn alerted(probe: ProbeId, records: &[AlertRecord]) -> impl Iterator<Item = Alerted<'_>> {
    records.iter().filter(move |a| a.id == probe).map(|a| Alerted {
        latency_ns: a.latency_ns,
        cycle: a.cycle.as_ref(),
        parts: a.anatomy.as_ref().map_or(&[][..], |an| &an.causes),
    })
}

impl Agent {
    /// One interval: read every probe, measure cost, apply the budget, and
    /// hand the summary to every sink. `last`: the final summary.
    pub fn tick(&mut self, last: bool, sinks: &mut [Box<dyn Sink>]) {
        if last {
            // Before the series are born: a family then births the
            // series whose names are still on the way (lock), so their
            // final records go out under their own lines.
            for p in self.slots.iter_mut().filter_map(|s| s.probe.as_mut()) {
                p.flush_alerts();
            }
        }
        self.add_new_series();
        let now_ns = monotonic_ns();
        self.seq += 1;
        let wall = now_ns.saturating_sub(self.last_ns);
        let r = &mut self.report;
        r.seq = self.seq;
        r.time_ns = now_ns;
        r.interval_ns = wall;
        r.last = last;
        r.alert_records.clear();
        for (i, s) in self.slots.iter_mut().enumerate() {
            match &mut s.probe {
                Some(p) => {
                    let from = r.alert_records.len();
                    p.drain_alerts(&mut r.alert_records);
                    // The records' identity from here to every output:
                    // this slot's place in the report.
                    for a in &mut r.alert_records[from..] {
                        a.id = ProbeId::at(i);
                    }
                    if let Err(e) = p.read(&mut s.cur) {
                        // Keep the previous snapshot: the next good read covers the gap.
                        log::warn!("{e}");
                        s.read_errors += 1;
                        s.cur.clone_from(&s.prev);
                    }
                    // A failed read leaves what it missed to the next one.
                    if let Err(e) = p.causes(&mut r.probes[i].alert_causes) {
                        log::warn!("{e}");
                        s.read_errors += 1;
                    }
                    // The family's own data, then what it takes from the
                    // interval's records: the one place a family's extras
                    // pass (core extra.rs).
                    if let Err(e) = p.extra(&mut r.probes[i].extra) {
                        log::warn!("{e}");
                        s.read_errors += 1;
                    }
                    if let Some(x) = &mut r.probes[i].extra {
                        x.fold_alerts(alerted(ProbeId::at(i), &r.alert_records));
                    }
                }
                None => {
                    s.cur.clone_from(&s.prev);
                    r.probes[i].alert_causes = None;
                    r.probes[i].extra = None;
                }
            }
            r.probes[i].fill(&s.info, &s.prev, &s.cur);
            r.probes[i].state = s.state;
            r.probes[i].threshold_ns = self.session.thresholds_ns.get(i).copied().unwrap_or(0);
            // Series carry their family's spec (add_new_series).
            r.probes[i].hist = s.spec.hist;
            self.read_errors[i] = s.read_errors;
        }
        self.measure_cost(wall);
        self.apply_budget(wall);
        for (i, s) in self.slots.iter_mut().enumerate() {
            std::mem::swap(&mut s.prev, &mut s.cur);
            self.totals[i].clone_from(&s.prev);
        }
        if let Some(d) = &self.discovery {
            d.copy_newer(&mut self.discovery_seen, &mut self.report);
        }
        self.watch_loops();
        self.report.agent.rss_bytes = self.rss_bytes();
        let faults = crate::hygiene::page_faults();
        self.report.agent.page_faults = faults.saturating_sub(self.faults_before);
        self.faults_before = faults;
        let tick =
            Tick { session: &self.session, report: &self.report, totals: &self.totals, read_errors: &self.read_errors };
        crate::sinks::share_link_stats(sinks);
        for s in sinks.iter_mut() {
            s.emit(&tick);
        }
        self.last_ns = now_ns;
    }

    /// `cycle,auto` (issue 42): the periodic RT loops discovery lists are
    /// handed to each auto cycle probe, which watches them and fills
    /// their counts. Each interval, on the listing the outputs show.
    fn watch_loops(&mut self) {
        let auto = |s: &Slot| matches!(s.spec.kind, ProbeKind::Cycle { auto: true, .. }) && s.probe.is_some();
        let loops = &mut self.report.loops;
        if !self.slots.iter().any(auto) {
            for l in loops.iter_mut() {
                l.watched = false;
                l.cycle = None;
            }
            return;
        }
        latmon_core::loops::watch_periodic_rt(loops, crate::bpf::limits::CYCLE_AUTO);
        let scan_at = self.report.agent.discovery_at_ns;
        for s in self.slots.iter_mut().filter(|s| auto(s)) {
            if let Some(p) = s.probe.as_mut() {
                p.watch(loops, scan_at);
            }
        }
        // Past the bound, and what a probe could not watch (timerfd loops
        // without the read program).
        let left = loops.iter().filter(|l| l.rt && l.periodic() && !l.watched).count();
        self.report.agent.loops_unwatched = u32::try_from(left).unwrap_or(u32::MAX);
    }

    /// Per probe: its programs' runs, time (with run-time statistics on)
    /// and the runs the kernel skipped (always).
    fn measure_cost(&mut self, wall: u64) {
        let a = &mut self.report.agent;
        a.online_cpus = self.cpus;
        a.cost_measured = self.stats.is_some();
        let (all, failed) = self.costs.sample();
        if failed > 0 {
            // Seen once per run at most in the log; the interval's cost
            // is then partial (or none), and says so.
            if !self.cost_read_failed {
                log::warn!(
                    "BPF statistics: {failed} of {} programs unreadable (bpf_prog_get_info_by_fd); their cost and kernel misses are not counted",
                    self.costs.programs()
                );
                self.cost_read_failed = true;
            }
            if failed == self.costs.programs() {
                a.cost_measured = false;
            }
        }
        let probes = &self.report.probes;
        self.costs.split(|i| probes.get(i).map_or(0, |p| p.count + p.drops), &mut self.cost_now);
        let measured = self.stats.is_some();
        if measured {
            a.bpf_run_time_ns = all.run_time_ns;
            a.bpf_cpu_percent = round4(all.cpu_percent(wall, self.cpus));
        }
        for (i, s) in self.slots.iter_mut().enumerate() {
            let mut c = if s.probe.is_some() { self.cost_now[i] } else { Cost::default() };
            if c.missed > 0 && s.total_cost.missed == 0 {
                log::warn!(
                    "probe {}: the kernel skipped {} runs of its BPF programs (recursion_misses): events it did not \
                     measure, reported as `missed`. Kprobe and classic-tracepoint programs are skipped while a BPF map \
                     syscall (any process's, latmon's own reads included) or another BPF program holds their CPU; \
                     tp_btf/raw_tp (kernel BTF) are not affected by map syscalls (docs/probes.md)",
                    s.info.name,
                    c.missed
                );
            }
            if !measured {
                c = Cost { missed: c.missed, ..Cost::default() };
            }
            s.total_cost.add(c);
            let p = &mut self.report.probes[i];
            p.bpf_missed = c.missed;
            p.total_bpf_missed = s.total_cost.missed;
            p.bpf_runs = c.runs;
            p.bpf_run_time_ns = c.run_time_ns;
            p.total_bpf_runs = s.total_cost.runs;
            p.total_bpf_run_time_ns = s.total_cost.run_time_ns;
            p.bpf_ns_per_event = c.ns_per_event();
            p.events_per_s = c.events_per_s(wall);
            p.bpf_cpu_percent = round4(c.cpu_percent(wall, self.cpus));
            self.budget_costs[i] = s.probe.is_some().then_some(c);
        }
    }

    fn apply_budget(&mut self, wall: u64) {
        let Some(b) = self.cfg.overhead_budget else { return };
        if self.stats.is_none() {
            return;
        }
        let total = Cost { run_time_ns: self.report.agent.bpf_run_time_ns, ..Default::default() };
        let v = self.budget.check(&b, &self.budget_costs, total, wall, self.cpus);
        let a = &mut self.report.agent;
        a.over_budget = v.breach.is_some();
        a.over_budget_intervals = v.streak;
        if let Some(br) = v.breach {
            let who = match br {
                cost::Breach::NsPerEvent { probe, .. } => format!("probe {}: ", self.slots[probe].info.name),
                cost::Breach::Cpu { .. } => String::new(),
            };
            log::warn!("over budget ({}/{} intervals): {who}{br}", v.streak, b.intervals);
            if let Some(i) = v.detach {
                self.detach(i, &br.to_string());
            }
        }
    }

    /// Detach probe `i` over budget: links destroyed, programs unloaded,
    /// its counts frozen and still reported.
    fn detach(&mut self, i: usize, why: &str) {
        let s = &mut self.slots[i];
        let cost = self.cost_now[i];
        log::warn!(
            "probe {}: DETACHED over budget ({why}; its BPF: {} ns/event, {} runs this interval)",
            s.info.name,
            cost.ns_per_event(),
            cost.runs
        );
        s.probe = None;
        s.progs.clear();
        s.state = ProbeState::DetachedOverBudget;
        self.report.probes[i].state = s.state;
        self.report.agent.degraded = true;
        self.report.agent.detached =
            self.slots.iter().filter(|s| s.state == ProbeState::DetachedOverBudget).count() as u32;
        let progs: Vec<Vec<RawFd>> =
            self.slots.iter().map(|s| if s.probe.is_some() { s.progs.clone() } else { Vec::new() }).collect();
        self.costs.rebuild(&progs);
        if self.slots.iter().all(|s| s.probe.is_none()) {
            log::error!(
                "every probe is detached over budget: latmon measures nothing now (raise overhead_budget and reload)"
            );
        }
    }

    /// Whether any probe still runs.
    pub fn any_running(&self) -> bool {
        self.slots.iter().any(|s| s.probe.is_some())
    }

    fn rss_bytes(&self) -> u64 {
        let Some(f) = &self.rss else { return 0 };
        let mut buf = [0u8; 128];
        let n = f.read_at(&mut buf, 0).unwrap_or(0);
        // statm: size resident shared ... (pages)
        let text = std::str::from_utf8(&buf[..n]).unwrap_or("");
        text.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()).map_or(0, |p| p * self.page_size)
    }
}

fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

#[cfg(test)]
mod tests {
    use latmon_core::anatomy::{Anatomy, Cause, CauseKind};

    use super::*;

    fn rec(probe: u16, latency_ns: u64, running_ns: u64) -> AlertRecord {
        AlertRecord {
            id: ProbeId(probe),
            pid: 1,
            tid: 1,
            comm: "loop".into(),
            cpu: 0,
            latency_ns,
            time_ns: 0,
            anatomy: (running_ns > 0).then(|| Anatomy {
                cpu_woken: 0,
                cpu_ran: 0,
                causes: vec![
                    Cause { kind: CauseKind::Running, ns: running_ns },
                    Cause { kind: CauseKind::Other, ns: latency_ns - running_ns },
                ],
            }),
            cycle: None,
        }
    }

    #[test]
    fn a_probes_family_data_reads_only_its_own_records() {
        let records = [rec(0, 1_500_000, 1_200_000), rec(1, 2_000_000, 2_000_000), rec(0, 900_000, 0)];
        let got: Vec<(u64, usize)> = alerted(ProbeId(0), &records).map(|a| (a.latency_ns, a.parts.len())).collect();
        assert_eq!(got, [(1_500_000, 2), (900_000, 0)]);
    }
}
