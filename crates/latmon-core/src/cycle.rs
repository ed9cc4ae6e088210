// SPDX-License-Identifier: MIT
//! The `cycle` family's records and counts (pure model, no I/O): a miss
//! (a cycle done after its deadline), an overrun (a cycle still unfinished
//! at its deadline, reported while it lasts) or a slow response (above
//! `threshold=`), and per interval the cycles, misses and the detected
//! period. The kernel half is bpf/cycle.bpf.c; docs/probes.md "cycle".
//!
//! A record's causes are an [`Anatomy`](crate::anatomy::Anatomy) whose
//! parts sum to `latency_ns` (release -> done) exactly: the wakeup's
//! parts, then the execution's (`running`, preemptions, `blocked`,
//! `page_faults`).

use std::fmt::Write as _;

use serde::ser::{Serialize, SerializeMap, Serializer};

use crate::anatomy::{push_task, BlockedOn, Policy};
use crate::text::{push_clean, Ns};

/// What a cycle record reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CycleEvent {
    /// Done after release + deadline.
    Miss,
    /// Unfinished at its deadline (sent at once, before the cycle ends).
    Overrun,
    /// Response above the probe's threshold, within the deadline.
    Response,
    /// An RT sleep rule broken (the mark's `rule` says which).
    Rule,
}

impl CycleEvent {
    /// The JSON `event` word.
    pub fn word(self) -> &'static str {
        match self {
            CycleEvent::Miss => "miss",
            CycleEvent::Overrun => "overrun",
            CycleEvent::Response => "response",
            CycleEvent::Rule => "rule",
        }
    }
}

/// What an overrunning loop is doing when its deadline passes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Doing {
    Running,
    /// Runnable, behind the thread running on its CPU.
    Runnable {
        comm: String,
        pid: u32,
    },
    /// Sleeping inside the cycle (syscall name; empty: unknown).
    Blocked {
        on: BlockedOn,
        syscall: String,
    },
}

/// The cycle half of an alert record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CycleMark {
    pub event: CycleEvent,
    /// CLOCK_MONOTONIC: the cycle's release and release + deadline.
    pub release_ns: u64,
    pub deadline_ns: u64,
    /// When it was done (None: an overrun, still running).
    pub done_ns: Option<u64>,
    /// An overrun's state at the deadline.
    pub doing: Option<Doing>,
    /// Times the loop resumed on another CPU within the cycle.
    pub migrations: u64,
    /// A rule record's rule (event `Rule`); None otherwise.
    pub rule: Option<RuleMark>,
}

/// The RT sleep rules a watched thread is held to (after the kernel's RV
/// rtapp `sleep` monitor; docs/probes.md "cycle", "Sleep rules").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Woken from a futex wait by a thread of lower effective priority.
    WokenByLower,
    /// Slept in something other than a futex or an absolute
    /// CLOCK_MONOTONIC/TAI timer sleep.
    SleepOther,
    /// A relative nanosleep or clock_nanosleep.
    SleepRelative,
    /// An absolute sleep on CLOCK_REALTIME.
    SleepRealtimeClock,
}

impl Rule {
    /// In the kernel's order (LATMON_RULE_*).
    pub const ALL: [Rule; 4] = [Rule::WokenByLower, Rule::SleepOther, Rule::SleepRelative, Rule::SleepRealtimeClock];

    /// The JSON word (a key of `rule_counts`, a record's `rule`).
    pub fn word(self) -> &'static str {
        match self {
            Rule::WokenByLower => "woken_by_lower",
            Rule::SleepOther => "sleep_other",
            Rule::SleepRelative => "sleep_relative",
            Rule::SleepRealtimeClock => "sleep_realtime_clock",
        }
    }

    /// LATMON_RULE_* (bpf/latmon.h).
    pub fn code(self) -> u32 {
        self as u32
    }

    pub fn from_code(code: u32) -> Option<Rule> {
        Rule::ALL.get(code as usize).copied()
    }
}

/// The thread that woke a watched one (woken_by_lower).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waker {
    pub comm: String,
    pub pid: u32,
    pub tid: u32,
    pub policy: Policy,
    /// rt_priority for FIFO and RR, else the nice value.
    pub prio: i32,
}

/// A rule record's own fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleMark {
    pub rule: Rule,
    /// The syscall the thread slept in (empty: not known).
    pub syscall: String,
    /// woken_by_lower: who woke it (None on the wire: not carried).
    pub waker: Option<Waker>,
}

/// Rules broken, per rule (JSON: an object keyed by the rules' words,
/// zeros included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuleCounts(pub [u64; 4]);

impl RuleCounts {
    pub fn get(&self, r: Rule) -> u64 {
        self.0[r as usize]
    }

    /// The counts of an interval from the cumulative `prev` to `now`.
    pub fn between(prev: &RuleCounts, now: &RuleCounts) -> RuleCounts {
        let mut d = RuleCounts::default();
        for (i, v) in d.0.iter_mut().enumerate() {
            *v = now.0[i].saturating_sub(prev.0[i]);
        }
        d
    }
}

impl Serialize for RuleCounts {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut m = ser.serialize_map(Some(Rule::ALL.len()))?;
        for r in Rule::ALL {
            m.serialize_entry(r.word(), &self.get(r))?;
        }
        m.end()
    }
}

struct WakerJson<'a>(&'a Waker);

impl Serialize for WakerJson<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let w = self.0;
        let mut m = ser.serialize_map(Some(5))?;
        m.serialize_entry("comm", &w.comm)?;
        m.serialize_entry("pid", &w.pid)?;
        m.serialize_entry("tid", &w.tid)?;
        m.serialize_entry("policy", w.policy.word())?;
        m.serialize_entry("prio", &w.prio)?;
        m.end()
    }
}

impl CycleMark {
    /// Every name in the mark the board sent (a runnable overrun's
    /// thread, a blocked one's syscall, a rule's syscall and waker), for a
    /// receiver that cleans names before it shows them.
    pub fn names_mut(&mut self, mut f: impl FnMut(&mut String)) {
        match &mut self.doing {
            Some(Doing::Runnable { comm, .. }) => f(comm),
            Some(Doing::Blocked { syscall, .. }) => f(syscall),
            Some(Doing::Running) | None => {}
        }
        if let Some(rule) = &mut self.rule {
            f(&mut rule.syscall);
            if let Some(w) = &mut rule.waker {
                f(&mut w.comm);
            }
        }
    }

    /// The head of the record's text line: `miss 1.62ms of 1.00ms` (the
    /// caller adds `:` and the parts), `overrun 1.00ms of 1.00ms, running`
    /// (printable ASCII only).
    pub fn render_head_into(&self, s: &mut String, latency_ns: u64) {
        if let Some(r) = &self.rule {
            s.push_str("rule ");
            s.push_str(r.rule.word());
            if !r.syscall.is_empty() {
                s.push_str(" in ");
                push_clean(s, &r.syscall);
            }
            if let Some(w) = &r.waker {
                s.push_str(", woken by ");
                push_task(s, &w.comm, w.tid, w.policy, w.prio);
            }
            return;
        }
        let deadline = self.deadline_ns.saturating_sub(self.release_ns);
        let _ = write!(s, "{} {} of {}", self.event.word(), Ns(latency_ns), Ns(deadline));
        match &self.doing {
            Some(Doing::Running) => s.push_str(", running"),
            Some(Doing::Runnable { comm, pid }) => {
                s.push_str(", runnable behind ");
                push_clean(s, comm);
                let _ = write!(s, "[{pid}]");
            }
            Some(Doing::Blocked { on, syscall }) => {
                let _ = write!(s, ", blocked on {}", on.word());
                if !syscall.is_empty() {
                    s.push_str(" in ");
                    push_clean(s, syscall);
                }
            }
            None => {}
        }
        if self.migrations > 0 {
            let _ = write!(s, ", {} migrations", self.migrations);
        }
    }

    /// The record's fields beside the alert's (JSON).
    pub(crate) fn serialize_fields<M: SerializeMap>(&self, m: &mut M) -> Result<(), M::Error> {
        m.serialize_entry("event", self.event.word())?;
        if let Some(r) = &self.rule {
            m.serialize_entry("rule", r.rule.word())?;
            m.serialize_entry("syscall", &r.syscall)?;
            if let Some(w) = &r.waker {
                m.serialize_entry("waker", &WakerJson(w))?;
            }
            return Ok(());
        }
        m.serialize_entry("release_ns", &self.release_ns)?;
        m.serialize_entry("deadline_ns", &self.deadline_ns)?;
        if let Some(done) = self.done_ns {
            m.serialize_entry("done_ns", &done)?;
        }
        if let Some(d) = &self.doing {
            m.serialize_entry("doing", &DoingJson(d))?;
        }
        m.serialize_entry("migrations", &self.migrations)?;
        Ok(())
    }
}

struct DoingJson<'a>(&'a Doing);

impl Serialize for DoingJson<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut m = ser.serialize_map(None)?;
        match self.0 {
            Doing::Running => m.serialize_entry("state", "running")?,
            Doing::Runnable { comm, pid } => {
                m.serialize_entry("state", "runnable")?;
                m.serialize_entry("behind_comm", comm)?;
                m.serialize_entry("behind_pid", pid)?;
            }
            Doing::Blocked { on, syscall } => {
                m.serialize_entry("state", "blocked")?;
                m.serialize_entry("on", on.word())?;
                m.serialize_entry("syscall", syscall)?;
            }
        }
        m.end()
    }
}

/// A cycle probe's counts: the interval's and since start, and the period
/// (detected from the releases, or `period=`; 0: not known yet).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct CycleCounts {
    pub period_ns: u64,
    pub cycles: u64,
    pub total_cycles: u64,
    pub misses: u64,
    pub total_misses: u64,
    pub overruns: u64,
    pub total_overruns: u64,
    /// Cycles counted although an event of theirs (the wakeup, the
    /// switch in) was not seen, since start.
    pub total_unseen: u64,
    /// The watched threads' RT sleep rules broken, in the interval and
    /// since start.
    pub rule_counts: RuleCounts,
    pub total_rule_counts: RuleCounts,
    /// Rule records lost on the way since start (their token bucket, a
    /// full buffer, the agent's queue); those left out by the one per
    /// rule per thread per 100 ms are not lost: the counts have them.
    pub total_rule_records_lost: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::anatomy::{Anatomy, Cause, CauseKind};

    #[test]
    fn a_miss_line_names_its_parts_and_they_sum_exactly() {
        let m = CycleMark {
            event: CycleEvent::Miss,
            release_ns: 10_000_000,
            deadline_ns: 11_000_000,
            done_ns: Some(11_620_000),
            doing: None,
            migrations: 0,
            rule: None,
        };
        let parts = vec![
            Cause { kind: CauseKind::Running, ns: 1_500_000 },
            Cause { kind: CauseKind::Blocked { on: BlockedOn::Io, syscall: "fdatasync".into() }, ns: 60_000 },
            Cause { kind: CauseKind::PageFaults { count: 7 }, ns: 0 },
        ];
        let a = Anatomy::from_parts(1_620_000, 0, 0, parts);
        assert!(a.sums_to(1_620_000), "{a:?}");
        assert!(a.causes.iter().any(|c| c.kind == CauseKind::PageFaults { count: 7 }), "a count without time stays");
        let mut s = String::new();
        m.render_head_into(&mut s, 1_620_000);
        s.push(':');
        let start = 0;
        a.render_parts_into(&mut s, start, usize::MAX);
        assert_eq!(
            s,
            "miss 1.62ms of 1.00ms: running 1500 us, blocked on io in fdatasync 60 us, 7 page faults, other 60 us"
        );
    }

    #[test]
    fn the_execution_parts_cross_the_wire_as_their_own_kinds() {
        let parts = vec![
            Cause { kind: CauseKind::Running, ns: 900 },
            Cause { kind: CauseKind::Blocked { on: BlockedOn::Futex, syscall: "futex".into() }, ns: 50 },
            Cause { kind: CauseKind::PageFaults { count: 3000 }, ns: 0 },
        ];
        let a = Anatomy::from_parts(1_000, 1, 1, parts);
        let w = crate::wire::anatomy::to_wire(&a);
        let kinds: Vec<(u8, u32)> = w.iter().map(|c| (c.kind, c.id)).collect();
        assert_eq!(kinds, [(8, 0), (9, 0), (10, 3000), (7, 0)], "docs/wire-format.md's Cause kinds");
        assert_eq!(crate::wire::anatomy::from_wire(1, 1, &w), Some(a));
    }

    #[test]
    fn parts_above_the_latency_clamp_past_a_count_without_time() {
        let parts = vec![
            Cause { kind: CauseKind::Running, ns: 900 },
            Cause { kind: CauseKind::TimerIrqDelay, ns: 300 },
            Cause { kind: CauseKind::PageFaults { count: 3 }, ns: 0 },
        ];
        let a = Anatomy::from_parts(1_000, 0, 0, parts);
        assert!(a.sums_to(1_000), "{a:?}");
        assert_eq!(a.causes.len(), 3, "{a:?}");
    }

    #[test]
    fn an_overrun_says_what_the_loop_does_and_escapes_names() {
        let m = CycleMark {
            event: CycleEvent::Overrun,
            release_ns: 0,
            deadline_ns: 1_000_000,
            done_ns: None,
            doing: Some(Doing::Runnable { comm: "hog\x1b[2J".into(), pid: 42 }),
            migrations: 1,
            rule: None,
        };
        let mut s = String::new();
        m.render_head_into(&mut s, 1_004_000);
        assert!(!s.contains('\x1b'), "{s}");
        assert!(s.starts_with("overrun 1.00ms of 1.00ms, runnable behind hog"), "{s}");
        assert!(s.ends_with("[42], 1 migrations"), "{s}");
    }

    #[test]
    fn rule_counts_are_keyed_by_every_rule_and_a_rule_record_names_its_waker() {
        let c = CycleCounts {
            total_rule_counts: RuleCounts([3, 0, 7, 1]),
            rule_counts: RuleCounts::between(&RuleCounts([1, 0, 2, 1]), &RuleCounts([3, 0, 7, 1])),
            ..Default::default()
        };
        let j = serde_json::to_value(&c).unwrap();
        assert_eq!(
            j["total_rule_counts"],
            serde_json::json!({"woken_by_lower": 3, "sleep_other": 0, "sleep_relative": 7, "sleep_realtime_clock": 1})
        );
        assert_eq!(j["rule_counts"]["sleep_relative"], 5);
        assert_eq!(j["rule_counts"]["sleep_realtime_clock"], 0);
        assert_eq!(Rule::from_code(3), Some(Rule::SleepRealtimeClock));
        assert_eq!(Rule::from_code(4), None);
        let m = CycleMark {
            event: CycleEvent::Rule,
            release_ns: 0,
            deadline_ns: 0,
            done_ns: None,
            doing: None,
            migrations: 0,
            rule: Some(RuleMark {
                rule: Rule::WokenByLower,
                syscall: "futex".into(),
                waker: Some(Waker { comm: "lo\x1bw".into(), pid: 5, tid: 6, policy: Policy::Fifo, prio: 10 }),
            }),
        };
        let mut s = String::new();
        m.render_head_into(&mut s, 0);
        assert!(s.starts_with("rule woken_by_lower in futex, woken by lo"), "{s}");
        assert!(!s.contains('\x1b') && s.ends_with("[6] FIFO/10"), "{s}");
        // The agent's ALERT line: a rule is a moment, not a 0 ns latency.
        let rec = crate::summary::AlertRecord {
            id: crate::ident::ProbeId(0),
            pid: 4,
            tid: 4,
            comm: "ctrl".into(),
            cpu: 1,
            latency_ns: 0,
            time_ns: 12_000_001_000,
            anatomy: None,
            cycle: Some(m),
        };
        let mut s = String::new();
        crate::summary::render_alert_line_into(&mut s, crate::summary::Named { name: "cycle", record: &rec }, 100);
        assert_eq!(s, "  ALERT cycle  rule  at 12.000001s  cpu 1  ctrl[4]");
    }
}
