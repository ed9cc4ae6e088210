// SPDX-License-Identifier: MIT
//! Outlier anatomy (pure model, no I/O): what delayed a late wakeup, as
//! parts that sum to its latency exactly, the remainder explicit as
//! `other`. The kernel half is bpf/anatomy.bpf.h; limits in bpf/latmon.h.
//!
//! Words (`task`, `irq`, `softirq`, `timer_irq_delay`, `other`; policies
//! `fifo`, ...) exist only here, at the output edge.

use std::fmt::Write as _;

use serde::ser::{Serialize, SerializeMap, Serializer};

use crate::bpf::limits::{ANAT_MAX_CAUSES, SOFTIRQ_VECS};
use crate::text::{keep_piece, push_clean};

/// Softirq vector names (the kernel's `softirq_to_name`, NR_SOFTIRQS order).
pub const SOFTIRQ_NAMES: [&str; SOFTIRQ_VECS] =
    ["HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU"];

/// Causes a receiver accepts per alert (a bound on what a sender says).
pub const MAX_CAUSES: usize = ANAT_MAX_CAUSES;

/// A task's scheduling policy (include/uapi/linux/sched.h numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Other,
    Fifo,
    Rr,
    Batch,
    Idle,
    Deadline,
    Ext,
    Unknown(u32),
}

impl Policy {
    pub fn from_code(code: u32) -> Policy {
        match code {
            0 => Policy::Other,
            1 => Policy::Fifo,
            2 => Policy::Rr,
            3 => Policy::Batch,
            5 => Policy::Idle,
            6 => Policy::Deadline,
            7 => Policy::Ext,
            n => Policy::Unknown(n),
        }
    }

    pub fn code(self) -> u32 {
        match self {
            Policy::Other => 0,
            Policy::Fifo => 1,
            Policy::Rr => 2,
            Policy::Batch => 3,
            Policy::Idle => 5,
            Policy::Deadline => 6,
            Policy::Ext => 7,
            Policy::Unknown(n) => n,
        }
    }

    /// The JSON word.
    pub fn word(self) -> &'static str {
        match self {
            Policy::Other => "other",
            Policy::Fifo => "fifo",
            Policy::Rr => "rr",
            Policy::Batch => "batch",
            Policy::Idle => "idle",
            Policy::Deadline => "deadline",
            Policy::Ext => "ext",
            Policy::Unknown(_) => "unknown",
        }
    }
}

/// What held the waiting CPU (or delayed the event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CauseKind {
    /// Another task held the CPU; `prio` is the rt priority for FIFO and
    /// RR, else the nice value.
    Task { comm: String, pid: u32, policy: Policy, prio: i32 },
    /// Tasks beyond the kernel's per-record limit, folded.
    TaskRest,
    /// A hard-IRQ handler (name from /proc/interrupts, may be empty).
    Irq { irq: u32, name: String },
    /// IRQs beyond the per-record limit, folded.
    IrqRest,
    /// A softirq vector (index into SOFTIRQ_NAMES; others named `vecN`).
    Softirq { vector: u32 },
    /// timer: intended expiry -> the expiry actually handled.
    TimerIrqDelay,
    /// cycle: the thread was stopped or traced (SIGSTOP, a tracer) when
    /// its release passed: the release -> run gap is the stop's, not the
    /// timer's.
    Stopped,
    /// cycle: the release had passed when the loop asked to sleep (it was
    /// still running its previous cycle; the kernel returned at once):
    /// the gap is the loop's backlog, not the timer's.
    Backlog,
    /// cycle: the loop's own time on a CPU within the cycle.
    Running,
    /// cycle: a voluntary sleep inside the cycle, by what it slept on,
    /// and the syscall it slept in (its name; empty: unknown).
    Blocked { on: BlockedOn, syscall: String },
    /// cycle: page faults taken in the cycle; `ns` 0 where the kernel has
    /// no fault exit to time them (their time is then in `Running`).
    PageFaults { count: u32 },
    /// lock: the owner of the lock waited on, `ns` its own time on a CPU
    /// during the wait (kept at 0 ns: it names the owner).
    Owner { owner: LockOwner },
    /// lock: a priority inversion: the owner, runnable at a lower
    /// priority than the waiter, held off by tasks whose priority lay
    /// between theirs; `ns` is their time (the sum of `preempted_by`).
    Inversion { owner: LockOwner, preempted_by: Vec<Preempter> },
    /// A kind this receiver does not know (a newer sender).
    Unknown { code: u8 },
    /// The remainder: scheduler, idle exit, unaccounted.
    Other,
}

/// What a cycle slept on inside the cycle (bpf/latmon.h
/// LATMON_CYCLE_BLOCKED_*).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockedOn {
    Futex,
    /// Uninterruptible sleep (I/O: fdatasync, a page read).
    Io,
    /// A timer sleep that is not the cycle's release.
    Sleep,
    Other,
}

impl BlockedOn {
    pub fn from_code(code: u32) -> BlockedOn {
        match code {
            0 => BlockedOn::Futex,
            1 => BlockedOn::Io,
            2 => BlockedOn::Sleep,
            _ => BlockedOn::Other,
        }
    }

    pub fn code(self) -> u32 {
        match self {
            BlockedOn::Futex => 0,
            BlockedOn::Io => 1,
            BlockedOn::Sleep => 2,
            BlockedOn::Other => 3,
        }
    }

    /// The JSON and text word.
    pub fn word(self) -> &'static str {
        match self {
            BlockedOn::Futex => "futex",
            BlockedOn::Io => "io",
            BlockedOn::Sleep => "sleep",
            BlockedOn::Other => "other",
        }
    }
}

/// Where a lock wait's owner was found (bpf/latmon.h LATMON_LOCK_OWNER_*).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerFrom {
    /// The PI futex word's thread id.
    Pi,
    /// glibc's pthread_mutex_t owner field.
    Glibc,
    /// The thread that woke the waiter.
    Waker,
    /// Not said (a newer sender's code on the wire).
    Unknown,
}

impl OwnerFrom {
    pub fn word(self) -> &'static str {
        match self {
            OwnerFrom::Pi => "pi",
            OwnerFrom::Glibc => "glibc",
            OwnerFrom::Waker => "waker",
            OwnerFrom::Unknown => "unknown",
        }
    }

    /// The wire's code (the high nibble of an owner Cause's `policy`).
    pub fn code(self) -> u8 {
        match self {
            OwnerFrom::Pi => 1,
            OwnerFrom::Glibc => 2,
            OwnerFrom::Waker => 3,
            OwnerFrom::Unknown => 0,
        }
    }

    pub fn from_code(code: u8) -> OwnerFrom {
        match code {
            1 => OwnerFrom::Pi,
            2 => OwnerFrom::Glibc,
            3 => OwnerFrom::Waker,
            _ => OwnerFrom::Unknown,
        }
    }
}

/// A lock's owner (or its waker): `pid` the process, `tid` the thread;
/// `prio` as a task cause's (rt priority for FIFO and RR, else nice).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockOwner {
    pub comm: String,
    pub pid: u32,
    pub tid: u32,
    pub policy: Policy,
    pub prio: i32,
    pub from: OwnerFrom,
}

/// A task that held a lock owner's CPU while the owner was runnable
/// (`pid`: its thread id, as in task causes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preempter {
    pub comm: String,
    pub pid: u32,
    pub policy: Policy,
    pub prio: i32,
    pub ns: u64,
}

impl Serialize for LockOwner {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut m = ser.serialize_map(Some(6))?;
        m.serialize_entry("comm", &self.comm)?;
        m.serialize_entry("pid", &self.pid)?;
        m.serialize_entry("tid", &self.tid)?;
        m.serialize_entry("policy", self.policy.word())?;
        m.serialize_entry("prio", &self.prio)?;
        m.serialize_entry("from", self.from.word())?;
        m.end()
    }
}

impl Serialize for Preempter {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut m = ser.serialize_map(Some(5))?;
        m.serialize_entry("comm", &self.comm)?;
        m.serialize_entry("pid", &self.pid)?;
        m.serialize_entry("policy", self.policy.word())?;
        m.serialize_entry("prio", &self.prio)?;
        m.serialize_entry("ns", &self.ns)?;
        m.end()
    }
}

/// `lm_lock[812] FIFO/10`: a task in every text line (anatomy causes,
/// lock owners and preempters, a rule record's waker), the agent's text
/// and the view's and report's alike.
pub fn push_task(s: &mut String, comm: &str, pid: u32, policy: Policy, prio: i32) {
    push_clean(s, comm);
    let _ = write!(s, "[{pid}]");
    push_policy(s, policy, prio);
}

/// ` FIFO/10`, ` OTHER/-5` (policy upper case, as chrt and ps name it; the
/// priority is rt_priority for FIFO and RR, else the nice value); nothing
/// for a policy not known (a thread gone before it was read, or a newer
/// sender's): it says nothing a reader could use.
pub fn push_policy(s: &mut String, policy: Policy, prio: i32) {
    if !matches!(policy, Policy::Unknown(_)) {
        let _ = write!(s, " {}/{prio}", policy.word().to_ascii_uppercase());
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    pub kind: CauseKind,
    pub ns: u64,
}

/// The anatomy of one alert's latency.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Anatomy {
    pub cpu_woken: u32,
    pub cpu_ran: u32,
    /// Largest first, `other` last; ns sum to the alert's latency_ns.
    pub causes: Vec<Cause>,
}

impl Anatomy {
    /// From the accounted parts (zero parts dropped): sorted largest
    /// first, clamped so they never exceed `latency_ns` (time is taken off
    /// the smallest parts first: a part torn by a migration race), then
    /// the remainder appended as `other`. The ns then sum to `latency_ns`.
    pub fn from_parts(latency_ns: u64, cpu_woken: u32, cpu_ran: u32, parts: Vec<Cause>) -> Anatomy {
        let mut causes: Vec<Cause> =
            parts.into_iter().filter(|c| c.kept() && c.kind != CauseKind::Other).take(MAX_CAUSES - 1).collect();
        causes.sort_by_key(|c| std::cmp::Reverse(c.ns));
        // u128: parts of hostile or torn records may overflow u64.
        let mut sum: u128 = causes.iter().map(|c| u128::from(c.ns)).sum();
        while sum > u128::from(latency_ns) {
            // The smallest part with time (a count without time, page
            // faults, sorts last and keeps its count).
            let Some(i) = causes.iter().rposition(|c| c.ns > 0) else { break };
            let cut = (sum - u128::from(latency_ns)).min(u128::from(causes[i].ns));
            causes[i].ns -= cut as u64;
            sum -= cut;
            if causes[i].ns == 0 && !causes[i].kept() {
                causes.remove(i);
            }
        }
        let sum = sum as u64; // <= latency_ns now
        if latency_ns > sum {
            causes.push(Cause { kind: CauseKind::Other, ns: latency_ns - sum });
        }
        Anatomy { cpu_woken, cpu_ran, causes }
    }

    /// A lock wait's (its parts name an owner or an inversion)?
    pub fn is_lock_wait(&self) -> bool {
        self.causes.iter().any(|c| matches!(c.kind, CauseKind::Owner { .. } | CauseKind::Inversion { .. }))
    }

    /// Do the parts sum to `latency_ns` exactly?
    pub fn sums_to(&self, latency_ns: u64) -> bool {
        self.causes.iter().try_fold(0u64, |s, c| s.checked_add(c.ns)) == Some(latency_ns)
    }

    /// `late 512 us: hog[4242] FIFO/90 460 us, irq 36 virtio1 30 us, other 22 us`
    /// (printable ASCII only: names come from the kernel or a sender).
    pub fn render_into(&self, s: &mut String, latency_ns: u64) {
        self.render_line_into(s, latency_ns, usize::MAX);
    }

    /// [`render_into`](Self::render_into) within `width` bytes from `s`'s
    /// length on entry, whole parts only: the parts that do not fit are
    /// counted at the line's end (the largest parts come first; JSON and
    /// frames carry them all). A 79-column terminal reads `hog[4242]
    /// FIFO/90 460 us, +2 more`, never a part cut in two or a line wrapped.
    pub fn render_line_into(&self, s: &mut String, latency_ns: u64, width: usize) {
        let start = s.len();
        let _ = write!(s, "late {}:", Us(latency_ns));
        self.render_parts_into(s, start, width);
    }

    /// The parts of [`render_line_into`](Self::render_line_into) after a
    /// head the caller wrote from `start` on (cycle: `miss 1.62 ms of 1 ms:`).
    pub fn render_parts_into(&self, s: &mut String, start: usize, width: usize) {
        let moved = self.cpu_woken != self.cpu_ran;
        let n = self.causes.len();
        for (i, c) in self.causes.iter().enumerate() {
            let before = s.len();
            s.push_str(if i == 0 { " " } else { ", " });
            push_cause(s, c);
            if i == 0 && s.len() - start > width {
                // The first part alone is wider than the line (a lock's
                // inversion names three tasks): cut inside it, for a bare
                // count would say nothing at all.
                s.truncate((start + width.saturating_sub(1)).max(before));
                s.push('~');
                return;
            }
            // Room kept after a part for what ends a cut line: the count
            // of the parts left out (`, +12 more`: a cut line says how
            // many causes it leaves out, not just that it leaves some;
            // issue 42, a 250 us cause read as `~`), or `, ~` after the
            // first part (which is always shown when it fits).
            let room = match (i + 1 < n, i == 0) {
                (true, true) => 3,
                (true, false) => MORE_ROOM,
                (false, _) if moved => 3,
                _ => 0,
            };
            if i == 0 && s.len() - start > width.saturating_sub(room) {
                // It fits, but not with what must follow it.
                s.truncate(before);
                s.push_str(" ~");
                return;
            }
            if i > 0 && s.len() - start > width.saturating_sub(room) {
                s.truncate(before);
                let at = s.len();
                let _ = write!(s, ", +{} more", n - i);
                if s.len() - start > width {
                    s.truncate(at);
                    s.push_str(", ~");
                }
                return;
            }
        }
        if moved {
            let before = s.len();
            let _ = write!(s, "; woken on cpu {}, ran on cpu {}", self.cpu_woken, self.cpu_ran);
            keep_piece(s, start, before, width, false, "; ~");
        }
    }

    pub fn render(&self, latency_ns: u64) -> String {
        let mut s = String::new();
        self.render_into(&mut s, latency_ns);
        s
    }
}

/// Columns kept at a line's end for `, +NN more`.
const MORE_ROOM: usize = 10;

/// One part: `hog[4242] FIFO/90 460 us`, `irq 36 virtio1 30 us`, ...
fn push_cause(s: &mut String, c: &Cause) {
    match &c.kind {
        CauseKind::Task { comm, pid, policy, prio } => push_task(s, comm, *pid, *policy, *prio),
        CauseKind::TaskRest => s.push_str("other tasks"),
        CauseKind::Irq { irq, name } => {
            let _ = write!(s, "irq {irq}");
            if !name.is_empty() {
                s.push(' ');
                push_clean(s, name);
            }
        }
        CauseKind::IrqRest => s.push_str("other irqs"),
        CauseKind::Softirq { vector } => {
            s.push_str("softirq ");
            push_vector(s, *vector);
        }
        CauseKind::TimerIrqDelay => s.push_str("timer irq delay"),
        CauseKind::Stopped => s.push_str("stopped"),
        CauseKind::Backlog => s.push_str("backlog"),
        CauseKind::Running => s.push_str("running"),
        CauseKind::Blocked { on, syscall } => {
            let _ = write!(s, "blocked on {}", on.word());
            if !syscall.is_empty() {
                s.push_str(" in ");
                push_clean(s, syscall);
            }
        }
        CauseKind::PageFaults { count } => {
            let _ = write!(s, "{count} page faults");
        }
        CauseKind::Owner { owner: o } => {
            s.push_str("held by ");
            push_task(s, &o.comm, o.tid, o.policy, o.prio);
            s.push_str(" running");
        }
        CauseKind::Inversion { owner: o, preempted_by } => {
            let _ = write!(s, "inversion {}: held by ", Us(c.ns));
            push_task(s, &o.comm, o.tid, o.policy, o.prio);
            s.push_str(", preempted by");
            for (i, p) in preempted_by.iter().enumerate() {
                s.push_str(if i == 0 { " " } else { ", " });
                push_task(s, &p.comm, p.pid, p.policy, p.prio);
                let _ = write!(s, " {}", Us(p.ns));
            }
            return;
        }
        CauseKind::Unknown { code } => {
            let _ = write!(s, "cause#{code}");
        }
        CauseKind::Other => s.push_str("other"),
    }
    if c.ns > 0 || !matches!(c.kind, CauseKind::PageFaults { .. }) {
        let _ = write!(s, " {}", Us(c.ns));
    }
}

fn push_vector(s: &mut String, vector: u32) {
    match SOFTIRQ_NAMES.get(vector as usize) {
        Some(n) => s.push_str(n),
        None => {
            let _ = write!(s, "vec{vector}");
        }
    }
}

/// Microseconds for the anatomy line: `460 us`, `0.4 us` below 10 us.
struct Us(u64);

impl std::fmt::Display for Us {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0 < 10_000 {
            write!(f, "{:.1} us", self.0 as f64 / 1e3)
        } else {
            // Rounded without an add that wraps near u64::MAX.
            write!(f, "{} us", self.0 / 1000 + u64::from(self.0 % 1000 >= 500))
        }
    }
}

impl Cause {
    /// Kept in an anatomy: time, or page faults counted without time.
    fn kept(&self) -> bool {
        self.ns > 0
            || matches!(self.kind, CauseKind::PageFaults { count } if count > 0)
            || matches!(self.kind, CauseKind::Owner { .. })
    }
}

impl Serialize for Cause {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut m = ser.serialize_map(None)?;
        match &self.kind {
            CauseKind::Task { comm, pid, policy, prio } => {
                m.serialize_entry("kind", "task")?;
                m.serialize_entry("comm", comm)?;
                m.serialize_entry("pid", pid)?;
                m.serialize_entry("policy", policy.word())?;
                m.serialize_entry("prio", prio)?;
            }
            CauseKind::TaskRest => {
                m.serialize_entry("kind", "task")?;
                m.serialize_entry("rest", &true)?;
            }
            CauseKind::Irq { irq, name } => {
                m.serialize_entry("kind", "irq")?;
                m.serialize_entry("irq", irq)?;
                m.serialize_entry("name", name)?;
            }
            CauseKind::IrqRest => {
                m.serialize_entry("kind", "irq")?;
                m.serialize_entry("rest", &true)?;
            }
            CauseKind::Softirq { vector } => {
                m.serialize_entry("kind", "softirq")?;
                let mut v = String::new();
                push_vector(&mut v, *vector);
                m.serialize_entry("vector", &v)?;
            }
            CauseKind::TimerIrqDelay => m.serialize_entry("kind", "timer_irq_delay")?,
            CauseKind::Stopped => m.serialize_entry("kind", "stopped")?,
            CauseKind::Backlog => m.serialize_entry("kind", "backlog")?,
            CauseKind::Running => m.serialize_entry("kind", "running")?,
            CauseKind::Blocked { on, syscall } => {
                m.serialize_entry("kind", "blocked")?;
                m.serialize_entry("on", on.word())?;
                m.serialize_entry("syscall", syscall)?;
            }
            CauseKind::PageFaults { count } => {
                m.serialize_entry("kind", "page_faults")?;
                m.serialize_entry("count", count)?;
            }
            CauseKind::Owner { owner } => {
                m.serialize_entry("kind", "owner")?;
                m.serialize_entry("owner", owner)?;
            }
            CauseKind::Inversion { owner, preempted_by } => {
                m.serialize_entry("kind", "inversion")?;
                m.serialize_entry("owner", owner)?;
                m.serialize_entry("preempted_by", preempted_by)?;
            }
            CauseKind::Unknown { code } => {
                m.serialize_entry("kind", "unknown")?;
                m.serialize_entry("code", code)?;
            }
            CauseKind::Other => m.serialize_entry("kind", "other")?,
        }
        m.serialize_entry("ns", &self.ns)?;
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn microseconds_round_half_up_to_the_largest_value() {
        assert_eq!(Us(9_999).to_string(), "10.0 us");
        assert_eq!((Us(10_499).to_string(), Us(10_500).to_string()), ("10 us".into(), "11 us".into()));
        assert_eq!(Us(u64::MAX).to_string(), "18446744073709552 us");
    }

    fn task(comm: &str, pid: u32, ns: u64) -> Cause {
        Cause { kind: CauseKind::Task { comm: comm.into(), pid, policy: Policy::Fifo, prio: 90 }, ns }
    }

    #[test]
    fn parts_sort_largest_first_and_the_remainder_is_other() {
        let irq = Cause { kind: CauseKind::Irq { irq: 36, name: "virtio1".into() }, ns: 30_000 };
        let a = Anatomy::from_parts(512_000, 3, 3, vec![irq.clone(), task("hog", 4242, 460_000)]);
        assert_eq!(a.causes[0], task("hog", 4242, 460_000));
        assert_eq!(a.causes[1], irq);
        assert_eq!(a.causes[2], Cause { kind: CauseKind::Other, ns: 22_000 });
        assert!(a.sums_to(512_000));
        assert_eq!(a.render(512_000), "late 512 us: hog[4242] FIFO/90 460 us, irq 36 virtio1 30 us, other 22 us");
    }

    #[test]
    fn parts_above_the_latency_are_clamped_from_the_smallest_and_sum_exactly() {
        let sirq = Cause { kind: CauseKind::Softirq { vector: 3 }, ns: 50 };
        let a = Anatomy::from_parts(1_000, 0, 1, vec![task("a", 1, 900), sirq, task("b", 2, 100)]);
        assert!(a.sums_to(1_000), "{a:?}");
        assert_eq!(a.causes.len(), 2);
        assert_eq!(a.causes[0].ns, 900);
        assert_eq!(a.causes[1].ns, 100);
        // Nothing left for `other`: none is added.
        assert!(a.causes.iter().all(|c| c.kind != CauseKind::Other));
        // Zero parts vanish; no parts at all: everything is `other`.
        let a = Anatomy::from_parts(7, 0, 0, vec![task("z", 3, 0)]);
        assert_eq!(a.causes, vec![Cause { kind: CauseKind::Other, ns: 7 }]);
        // Sums that overflow u64 still end exact.
        let a = Anatomy::from_parts(10, 0, 0, vec![task("x", 1, u64::MAX), task("y", 2, u64::MAX)]);
        assert!(a.sums_to(10), "{a:?}");
    }

    /// A cut line counts the parts it leaves out (issue 42: `running
    /// 2807 us, ~` hid a 250 us cause); each part shown is whole and the
    /// shown plus counted are all of them.
    #[test]
    fn a_cut_line_counts_the_parts_it_leaves_out() {
        let parts: Vec<Cause> = (0..6).map(|i| task(&format!("hog{i}"), 100 + i, 1_000 - i as u64 * 100)).collect();
        let a = Anatomy::from_parts(10_000, 0, 0, parts);
        for width in [40, 60, 79, 100] {
            let mut s = String::from("late:");
            a.render_parts_into(&mut s, 0, width);
            assert!(s.len() <= width, "{width}: {s}");
            let shown = s.matches("hog").count();
            let counted: usize = s.rsplit_once(", +").map_or(0, |(_, m)| m.trim_end_matches(" more").parse().unwrap());
            assert_eq!(shown + counted, a.causes.len(), "{width}: {s}");
        }
    }

    /// One text for a policy and priority: upper-case policy, rt_priority
    /// or nice; an unknown policy leaves the name alone.
    #[test]
    fn a_task_reads_name_id_policy_and_priority_the_same_everywhere() {
        let text = |policy, prio| {
            let mut s = String::new();
            push_task(&mut s, "lo\x1bw", 812, policy, prio);
            s
        };
        assert_eq!(text(Policy::Fifo, 10), "lo?w[812] FIFO/10");
        assert_eq!(text(Policy::Rr, 99), "lo?w[812] RR/99");
        assert_eq!(text(Policy::Other, -5), "lo?w[812] OTHER/-5");
        assert_eq!(text(Policy::Deadline, 0), "lo?w[812] DEADLINE/0");
        assert_eq!(text(Policy::Unknown(9), 3), "lo?w[812]");
        // A lock owner in an inversion and a task cause print the same.
        let owner =
            LockOwner { comm: "lo\x1bw".into(), pid: 8, tid: 812, policy: Policy::Fifo, prio: 10, from: OwnerFrom::Pi };
        let parts = vec![
            Cause { kind: CauseKind::Inversion { owner, preempted_by: Vec::new() }, ns: 1_000 },
            Cause {
                kind: CauseKind::Task { comm: "lo\x1bw".into(), pid: 812, policy: Policy::Fifo, prio: 10 },
                ns: 500,
            },
        ];
        let mut s = String::new();
        Anatomy::from_parts(2_000, 0, 0, parts).render_parts_into(&mut s, 0, 500);
        assert_eq!(s.matches(&text(Policy::Fifo, 10)).count(), 2, "{s}");
    }

    /// A first part wider than the line is cut inside, not dropped: a
    /// technician's 79-column view still reads whose inversion it was.
    #[test]
    fn a_first_part_wider_than_the_line_is_cut_inside_it() {
        let owner =
            LockOwner { comm: "low".into(), pid: 8, tid: 812, policy: Policy::Fifo, prio: 10, from: OwnerFrom::Pi };
        let pre = |pid| Preempter { comm: "medium_spinner".into(), pid, policy: Policy::Fifo, prio: 50, ns: 500 };
        let parts = vec![Cause {
            kind: CauseKind::Inversion { owner, preempted_by: vec![pre(813), pre(814), pre(815)] },
            ns: 1_500,
        }];
        let a = Anatomy::from_parts(2_000, 0, 0, parts);
        let mut s = String::from("wait 2.0us on m:");
        a.render_parts_into(&mut s, 0, 60);
        assert_eq!(s.len(), 60, "{s}");
        assert!(
            s.starts_with("wait 2.0us on m: inversion 1.5 us: held by low[812] FIFO/10") && s.ends_with('~'),
            "{s}"
        );
        // A first part that fits keeps the old cut at whole parts.
        let mut s = String::from("wait 2.0us on m:");
        a.render_parts_into(&mut s, 0, 500);
        assert!(s.ends_with("other 0.5 us"), "{s}");
    }

    #[test]
    fn a_lock_waits_parts_cross_the_wire_as_lock_causes_and_still_sum() {
        let owner = LockOwner {
            comm: "low".into(),
            pid: 800,
            tid: 812,
            policy: Policy::Fifo,
            prio: 10,
            from: OwnerFrom::Glibc,
        };
        let med = Preempter { comm: "med".into(), pid: 813, policy: Policy::Fifo, prio: 50, ns: 1_000 };
        let parts = vec![
            Cause { kind: CauseKind::Inversion { owner: owner.clone(), preempted_by: vec![med] }, ns: 1_000 },
            Cause { kind: CauseKind::Owner { owner }, ns: 0 },
        ];
        let a = Anatomy::from_parts(1_200, 1, 1, parts);
        assert!(a.is_lock_wait() && a.sums_to(1_200), "{a:?}");
        // The owner is kept at 0 ns: it names who held the lock.
        assert!(a.causes.iter().any(|c| matches!(&c.kind, CauseKind::Owner { owner } if owner.tid == 812)));
        let w = crate::wire::anatomy::to_wire(&a);
        let got: Vec<(u8, u32, &str, u64)> = w.iter().map(|c| (c.kind, c.id, c.name.as_str(), c.ns)).collect();
        assert_eq!(got, [(12, 813, "med", 1_000), (11, 812, "low", 0), (7, 0, "", 200)]);
        let back = crate::wire::anatomy::from_wire(1, 1, &w).unwrap();
        assert!(back.sums_to(1_200) && back.is_lock_wait(), "{back:?}");
    }
}
