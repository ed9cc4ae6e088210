// SPDX-License-Identifier: MIT
//! The board's loops on the wire (kind 7, revision 12): what discovery
//! listed and the cycle family's counts of each watched loop, the agent's
//! own since-start totals. Before it a receiver counted the miss records
//! that crossed the link (a board capture's report said 22 misses where
//! the agent counted 3 899). Pure, no I/O.
//!
//! Like a Summary the counts are cumulative: a lost Loops frame loses
//! nothing but that interval's listing. A long list spans several frames
//! (`first` is the index of a part's first loop, `listed` the total).

use serde::ser::SerializeTuple;
use serde::{Deserialize, Serialize, Serializer};

use crate::anatomy::Policy;
use crate::loops::{Loop, LoopClass, LoopCycles, PeriodSource, LISTED};
use crate::text::truncate;

/// Kind 7 (docs/wire-format.md, Loops).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoopList {
    pub boot_id: u32,
    /// The interval's summary seq (the Summary or Delta that follows).
    pub seq: u64,
    /// CLOCK_MONOTONIC at the end of the interval.
    pub time_ns: u64,
    /// Loops the interval lists, all parts together (at most
    /// [`LISTED`] are kept by a receiver, the rest counted).
    pub listed: u16,
    /// Index of this part's first loop.
    pub first: u16,
    /// Loops past the agent's list bound (JSON `loops_unlisted`).
    pub unlisted: u32,
    /// Periodic RT loops the cycle family could not watch (JSON
    /// `agent.loops_unwatched`).
    pub unwatched: u32,
    pub loops: Vec<WireLoop>,
}

/// One loop (JSON `loops[i]`), codes for its words.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireLoop {
    pub tid: u32,
    pub pid: u32,
    /// At most [`super::MAX_ALERT_NAME_LEN`] bytes (a receiver refuses
    /// more, as for every name from the board).
    pub comm: String,
    /// The kernel's policy number (SCHED_FIFO 1, ...).
    pub policy: u32,
    pub prio: u32,
    pub rt: bool,
    /// [`class`] codes.
    pub class: u8,
    pub period_ns: u64,
    /// [`source`] codes.
    pub period_source: u8,
    pub jitter_ns: u64,
    pub watched: bool,
    /// The cycle family's counts (None: not watched, or no cycle yet).
    pub cycle: Option<WireLoopCycles>,
}

/// A watched loop's counts, as `loops::LoopCycles` (JSON `cycle`): a
/// type of its own, for the wire's field order is frozen by the golden
/// vector while JSON's may grow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireLoopCycles {
    pub period_ns: u64,
    pub cycles: u64,
    pub total_cycles: u64,
    pub misses: u64,
    pub total_misses: u64,
    pub total_overruns: u64,
    pub total_rules: u64,
}

/// `WireLoop::class` values; another is a newer sender's, read as unknown.
pub mod class {
    pub const PERIODIC: u8 = 0;
    pub const SPORADIC: u8 = 1;
    pub const UNKNOWN: u8 = 2;
}

/// `WireLoop::period_source` values; another reads as none.
pub mod source {
    pub const NONE: u8 = 0;
    pub const TIMERFD: u8 = 1;
    pub const ABS_TIMER: u8 = 2;
    pub const DEADLINE: u8 = 3;
    pub const RELATIVE: u8 = 4;
    pub const MEDIAN: u8 = 5;
}

fn class_code(c: LoopClass) -> u8 {
    match c {
        LoopClass::Periodic => class::PERIODIC,
        LoopClass::Sporadic => class::SPORADIC,
        LoopClass::Unknown => class::UNKNOWN,
    }
}

fn class_of(c: u8) -> LoopClass {
    match c {
        class::PERIODIC => LoopClass::Periodic,
        class::SPORADIC => LoopClass::Sporadic,
        _ => LoopClass::Unknown,
    }
}

fn source_code(s: PeriodSource) -> u8 {
    match s {
        PeriodSource::None => source::NONE,
        PeriodSource::Timerfd => source::TIMERFD,
        PeriodSource::AbsTimer => source::ABS_TIMER,
        PeriodSource::Deadline => source::DEADLINE,
        PeriodSource::Relative => source::RELATIVE,
        PeriodSource::Median => source::MEDIAN,
    }
}

fn source_of(s: u8) -> PeriodSource {
    match s {
        source::TIMERFD => PeriodSource::Timerfd,
        source::ABS_TIMER => PeriodSource::AbsTimer,
        source::DEADLINE => PeriodSource::Deadline,
        source::RELATIVE => PeriodSource::Relative,
        source::MEDIAN => PeriodSource::Median,
        _ => PeriodSource::None,
    }
}

impl From<LoopCycles> for WireLoopCycles {
    fn from(c: LoopCycles) -> Self {
        WireLoopCycles {
            period_ns: c.period_ns,
            cycles: c.cycles,
            total_cycles: c.total_cycles,
            misses: c.misses,
            total_misses: c.total_misses,
            total_overruns: c.total_overruns,
            total_rules: c.total_rules,
        }
    }
}

impl From<WireLoopCycles> for LoopCycles {
    fn from(c: WireLoopCycles) -> Self {
        LoopCycles {
            period_ns: c.period_ns,
            cycles: c.cycles,
            total_cycles: c.total_cycles,
            misses: c.misses,
            total_misses: c.total_misses,
            total_overruns: c.total_overruns,
            total_rules: c.total_rules,
        }
    }
}

impl WireLoop {
    pub fn of(l: &Loop) -> WireLoop {
        WireLoop {
            tid: l.tid,
            pid: l.pid,
            comm: truncate(&l.comm, super::MAX_ALERT_NAME_LEN).to_string(),
            policy: l.policy.code(),
            prio: l.prio,
            rt: l.rt,
            class: class_code(l.class),
            period_ns: l.period_ns,
            period_source: source_code(l.period_source),
            jitter_ns: l.jitter_ns,
            watched: l.watched,
            cycle: l.cycle.map(Into::into),
        }
    }

    /// The loop as the agent's JSON and text show it.
    pub fn to_loop(&self) -> Loop {
        Loop {
            tid: self.tid,
            pid: self.pid,
            comm: self.comm.clone(),
            policy: Policy::from_code(self.policy),
            prio: self.prio,
            rt: self.rt,
            class: class_of(self.class),
            period_ns: self.period_ns,
            period_source: source_of(self.period_source),
            jitter_ns: self.jitter_ns,
            watched: self.watched,
            cycle: self.cycle.map(Into::into),
        }
    }
}

/// A borrowed loop, serialized as [`WireLoop`] is (the agent encodes its
/// list in place, with no copy per interval).
pub(crate) struct LoopRef<'a>(pub(crate) &'a Loop);

impl Serialize for LoopRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let l = self.0;
        let mut t = s.serialize_tuple(12)?;
        t.serialize_element(&l.tid)?;
        t.serialize_element(&l.pid)?;
        t.serialize_element(truncate(&l.comm, super::MAX_ALERT_NAME_LEN))?;
        t.serialize_element(&l.policy.code())?;
        t.serialize_element(&l.prio)?;
        t.serialize_element(&l.rt)?;
        t.serialize_element(&class_code(l.class))?;
        t.serialize_element(&l.period_ns)?;
        t.serialize_element(&source_code(l.period_source))?;
        t.serialize_element(&l.jitter_ns)?;
        t.serialize_element(&l.watched)?;
        t.serialize_element(&l.cycle.map(WireLoopCycles::from))?;
        t.end()
    }
}

/// The borrowed twin of [`LoopList`] (same bytes), a part of the loops.
#[derive(Serialize)]
pub(crate) struct LoopListRef<'a> {
    pub(crate) boot_id: u32,
    pub(crate) seq: u64,
    pub(crate) time_ns: u64,
    pub(crate) listed: u16,
    pub(crate) first: u16,
    pub(crate) unlisted: u32,
    pub(crate) unwatched: u32,
    pub(crate) loops: LoopsPart<'a>,
}

pub(crate) struct LoopsPart<'a>(pub(crate) &'a [Loop]);

impl Serialize for LoopsPart<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(LoopRef))
    }
}

/// What a receiver assembles from a Loops frame's parts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoopsState {
    pub boot_id: u32,
    /// The summary seq the listing is of (0: none yet).
    pub seq: u64,
    pub loops: Vec<Loop>,
    pub unlisted: u32,
    pub unwatched: u32,
    /// Loops a sender listed past [`LISTED`]: not kept.
    pub ignored: u64,
}

/// The parts of a listing being put together, and the last whole one.
#[derive(Debug, Default)]
pub struct LoopsAssembly {
    building: LoopsState,
    /// Loops the listing being built expects.
    expect: u16,
    /// The index the next part must start at.
    next: u16,
    /// The last listing whose every part arrived.
    pub done: Option<LoopsState>,
    /// Listings dropped because a part did not follow the one before (a
    /// lost frame); the last whole listing stays.
    pub listings_lost: u64,
}

impl LoopsAssembly {
    /// Take one part; true when it completed a listing (then `done`).
    pub fn on_part(&mut self, l: LoopList) -> bool {
        let b = &mut self.building;
        if l.first == 0 {
            *b = LoopsState {
                boot_id: l.boot_id,
                seq: l.seq,
                unlisted: l.unlisted,
                unwatched: l.unwatched,
                ..LoopsState::default()
            };
            b.loops.clear();
            self.expect = l.listed;
            self.next = 0;
        } else if l.first != self.next || l.seq != b.seq || l.boot_id != b.boot_id || l.listed != self.expect {
            // Once per listing: the rest of a broken one are not more losses.
            if self.next != u16::MAX {
                self.listings_lost += 1;
            }
            self.next = u16::MAX;
            return false;
        }
        self.next = self.next.saturating_add(l.loops.len() as u16);
        for w in &l.loops {
            if b.loops.len() < LISTED {
                b.loops.push(w.to_loop());
            } else {
                b.ignored += 1;
            }
        }
        if self.next >= self.expect && self.next != u16::MAX {
            self.done = Some(b.clone());
            self.next = u16::MAX;
            return true;
        }
        false
    }
}
