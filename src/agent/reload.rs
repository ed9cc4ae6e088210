// SPDX-License-Identifier: MIT
//! SIGHUP: a new configuration applied to the running agent. What happens
//! to each probe is planned by a pure function ([`plan_reload`]) and then
//! carried out ([`Agent::reload`]).

use std::os::fd::RawFd;

use latmon_core::hist::Hist;
use latmon_core::summary::{ProbeInfo, ProbeState};

use super::{failed_probe, Agent, Slot};
use crate::config::{Config, ProbeSpec};
use crate::cost::{self, BudgetWatch};
use crate::probes::{self, Probe, ProbeError};

impl Agent {
    /// SIGHUP: apply a new configuration. Probes whose spec is unchanged
    /// keep running with their cumulative counts; new specs are opened
    /// (not possible once privileges are dropped: reported); removed ones
    /// are detached. Interval and budget take effect; settings that need a
    /// restart (outputs, user, CPUs, scheduling) are reported if changed.
    pub fn reload(&mut self, new: Config) {
        for key in restart_needed(&self.cfg, &new) {
            log::warn!("reload: {key} changed: takes effect only after a restart");
        }
        let running: Vec<(&ProbeSpec, bool)> = self.slots.iter().map(|s| (&s.spec, s.probe.is_some())).collect();
        let plan = plan_reload(&running, &new.probes, self.privileged);
        let mut old: Vec<Option<Slot>> = std::mem::take(&mut self.slots).into_iter().map(Some).collect();
        let mut next: Vec<Option<Slot>> = Vec::with_capacity(new.probes.len());
        let mut to_open: Vec<(usize, ProbeSpec, Option<Slot>)> = Vec::new();
        for (spec, step) in new.probes.iter().zip(plan) {
            match step {
                ReloadStep::Keep(o) | ReloadStep::KeepDetached(o) => next.push(old[o].take()),
                ReloadStep::Reopen(o) => {
                    to_open.push((next.len(), spec.clone(), old[o].take()));
                    next.push(None);
                }
                ReloadStep::Open => {
                    to_open.push((next.len(), spec.clone(), None));
                    next.push(None);
                }
                ReloadStep::Refused => {
                    eprintln!(
                        "latmon: reload: probe {} not started: privileges were dropped (user = {:?}); restart latmon to add probes",
                        spec.name,
                        self.cfg.user.as_deref().unwrap_or("")
                    );
                    next.push(None);
                }
            }
        }
        self.failed.clear();
        if !to_open.is_empty() {
            let specs: Vec<ProbeSpec> = to_open.iter().map(|(_, s, _)| s.clone()).collect();
            for ((at, spec, kept), opened) in to_open.into_iter().zip(probes::open_all(&specs)) {
                match (opened, kept) {
                    (Ok(p), Some(mut s)) => {
                        log::info!("reload: probe {} attached again; counts continue", spec.name);
                        let fresh = Slot::new(spec, p);
                        s.info = fresh.info;
                        s.progs = fresh.progs;
                        s.state = ProbeState::Running;
                        // The new programs count from zero: read on top of
                        // the frozen cumulative histogram.
                        let base = s.prev.clone();
                        s.probe = fresh.probe.map(|inner| Box::new(Continued { inner, base }) as Box<dyn Probe>);
                        next[at] = Some(s);
                    }
                    (Ok(p), None) => {
                        log::info!("reload: probe {} added", spec.name);
                        next[at] = Some(Slot::new(spec, p));
                    }
                    (Err(e), kept) => {
                        eprintln!("latmon: reload: {e}");
                        if kept.is_none() {
                            self.failed.push(failed_probe(at, &spec, &e));
                        }
                        next[at] = kept;
                    }
                }
            }
        }
        for s in old.into_iter().flatten() {
            log::info!("reload: probe {} removed (detached)", s.info.name);
            drop(s);
        }
        self.slots = next.into_iter().flatten().collect();
        if self.slots.is_empty() {
            log::error!("reload: no probe runs now: latmon measures nothing until the next reload");
        }
        self.certificate = super::certificate_of(&new);
        self.cfg = new;
        self.cpus = cost::online_cpus();
        self.budget = BudgetWatch::default();
        self.report.agent.degraded = self.slots.iter().any(|s| s.state == ProbeState::DetachedOverBudget);
        self.report.agent.detached =
            self.slots.iter().filter(|s| s.state == ProbeState::DetachedOverBudget).count() as u32;
        self.report.agent.over_budget = false;
        self.report.agent.over_budget_intervals = 0;
        self.generation += 1;
        self.report.probes.clear();
        self.replan();
        log::info!(
            "reload: {} probes ({} running)",
            self.slots.len(),
            self.slots.iter().filter(|s| s.probe.is_some()).count()
        );
    }
}

/// A re-attached probe: its new BPF maps count from zero, its counts so
/// far are the base every read adds.
struct Continued {
    inner: Box<dyn Probe>,
    base: Hist,
}

impl Probe for Continued {
    fn info(&self) -> &ProbeInfo {
        self.inner.info()
    }
    fn read(&mut self, out: &mut Hist) -> Result<(), ProbeError> {
        self.inner.read(out)?;
        out.merge(&self.base);
        Ok(())
    }
    fn flush_alerts(&mut self) {
        self.inner.flush_alerts()
    }

    fn drain_alerts(&mut self, out: &mut Vec<latmon_core::summary::AlertRecord>) {
        self.inner.drain_alerts(out)
    }
    fn bpf_programs(&self) -> Vec<RawFd> {
        self.inner.bpf_programs()
    }
}

/// What a reload does with one probe of the new configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReloadStep {
    /// Same spec as running probe `old`: it keeps running, counts continue.
    Keep(usize),
    /// Same spec as probe `old`, detached over budget: attached again, its
    /// counts the base of the new programs' (a reload is a fresh chance).
    Reopen(usize),
    /// Same spec as detached probe `old`, but privileges were dropped: it
    /// stays detached, counts frozen.
    KeepDetached(usize),
    /// A new spec: opened.
    Open,
    /// A new spec after the privilege drop: cannot be loaded (reported).
    Refused,
}

/// The reload plan: one step per probe of `new`, in order. `old`: the
/// running configuration's probes (spec, whether it runs). A spec matches
/// the first old probe with the same spec not matched yet (so duplicates
/// pair up in order); old probes matched by nothing are removed.
pub fn plan_reload(old: &[(&ProbeSpec, bool)], new: &[ProbeSpec], privileged: bool) -> Vec<ReloadStep> {
    let mut taken = vec![false; old.len()];
    new.iter()
        .map(|spec| {
            let found = old.iter().enumerate().position(|(i, (s, _))| !taken[i] && *s == spec);
            if let Some(i) = found {
                taken[i] = true;
            }
            match (found, privileged) {
                (Some(i), _) if old[i].1 => ReloadStep::Keep(i),
                (Some(i), true) => ReloadStep::Reopen(i),
                (Some(i), false) => ReloadStep::KeepDetached(i),
                (None, true) => ReloadStep::Open,
                (None, false) => ReloadStep::Refused,
            }
        })
        .collect()
}

/// Settings a reload cannot apply to the running agent (they need a
/// restart), by their config key.
pub fn restart_needed(old: &Config, new: &Config) -> Vec<&'static str> {
    [
        ("outputs", new.outputs != old.outputs),
        ("format", new.format != old.format),
        ("user/group", new.user != old.user || new.group != old.group),
        ("housekeeping_cpus", new.housekeeping_cpus != old.housekeeping_cpus),
        ("sched/nice", new.sched != old.sched || new.nice != old.nice),
        ("mlockall", new.mlockall != old.mlockall),
        ("btf_path", new.btf_path != old.btf_path),
    ]
    .into_iter()
    .filter_map(|(key, changed)| changed.then_some(key))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs(names: &[&str]) -> Vec<ProbeSpec> {
        names.iter().map(|n| ProbeSpec::parse(n).unwrap()).collect()
    }

    #[test]
    fn unchanged_probes_keep_running_new_ones_open_removed_ones_go() {
        let old = specs(&["runq", "irq", "syscall"]);
        let new = specs(&["irq", "timer", "runq"]);
        let running: Vec<(&ProbeSpec, bool)> = old.iter().map(|s| (s, true)).collect();
        let plan = plan_reload(&running, &new, true);
        assert_eq!(plan, [ReloadStep::Keep(1), ReloadStep::Open, ReloadStep::Keep(0)]);
        // syscall (old 2) is matched by nothing: removed.
        assert!(!plan.iter().any(|s| matches!(s, ReloadStep::Keep(2) | ReloadStep::Reopen(2))));
    }

    #[test]
    fn detached_probes_reopen_only_while_privileged() {
        let old = specs(&["runq", "irq"]);
        let running = [(&old[0], false), (&old[1], true)];
        assert_eq!(plan_reload(&running, &old, true), [ReloadStep::Reopen(0), ReloadStep::Keep(1)]);
        assert_eq!(plan_reload(&running, &old, false), [ReloadStep::KeepDetached(0), ReloadStep::Keep(1)]);
        let new = specs(&["runq", "irq", "timer"]);
        assert_eq!(plan_reload(&running, &new, false)[2], ReloadStep::Refused);
    }

    #[test]
    fn duplicate_specs_pair_up_in_order() {
        let old = specs(&["runq", "runq"]);
        let running = [(&old[0], true), (&old[1], false)];
        let new = specs(&["runq", "runq", "runq"]);
        assert_eq!(plan_reload(&running, &new, true), [ReloadStep::Keep(0), ReloadStep::Reopen(1), ReloadStep::Open]);
    }

    #[test]
    fn settings_that_need_a_restart_are_named() {
        let old = Config::default();
        let mut new = old.clone();
        assert!(restart_needed(&old, &new).is_empty());
        new.mlockall = !old.mlockall;
        new.nice = old.nice + 1;
        assert_eq!(restart_needed(&old, &new), ["sched/nice", "mlockall"]);
    }
}
