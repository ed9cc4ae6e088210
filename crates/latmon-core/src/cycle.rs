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

use crate::anatomy::BlockedOn;
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
}

impl CycleEvent {
    /// The JSON `event` word.
    pub fn word(self) -> &'static str {
        match self {
            CycleEvent::Miss => "miss",
            CycleEvent::Overrun => "overrun",
            CycleEvent::Response => "response",
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
}

impl CycleMark {
    /// The head of the record's text line: `miss 1.62ms of 1.00ms` (the
    /// caller adds `:` and the parts), `overrun 1.00ms of 1.00ms, running`
    /// (printable ASCII only).
    pub fn render_head_into(&self, s: &mut String, latency_ns: u64) {
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
        };
        let mut s = String::new();
        m.render_head_into(&mut s, 1_004_000);
        assert!(!s.contains('\x1b'), "{s}");
        assert!(s.starts_with("overrun 1.00ms of 1.00ms, runnable behind hog"), "{s}");
        assert!(s.ends_with("[42], 1 migrations"), "{s}");
    }
}
