// SPDX-License-Identifier: MIT
//! The Modbus register image a PLC polls (docs/modbus-map.md is the
//! contract). Pure (no I/O): built from one [`Tick`] into a word buffer
//! that the Modbus output then swaps in whole, so a multi-register read
//! never mixes two intervals.
//!
//! Layout: a header block of [`HEADER_WORDS`] registers at address 0, then
//! one block of [`BLOCK_WORDS`] registers per configured probe, in config
//! order, attached or not (a probe that failed keeps its block with
//! state 0: PLC addressing does not depend on which probes attached), and
//! at the fixed address [`EXT_BASE`] one extension block of [`EXT_WORDS`]
//! per probe block (registers added within the map version), and at
//! [`THRESHOLD_BASE`] each probe block's alert threshold, and at
//! [`COUNTER_BASE`] the first [`COUNTER_BLOCKS`] probe blocks' sync
//! counters (RT sleep rules, lock inversions), and at [`LOOPS_BASE`]
//! the loops area: a short header and one block of [`LOOP_WORDS`] per
//! loop `cycle,auto` watches (at most [`LOOP_BLOCKS`]).
//! Registers are big-endian (Modbus); 32- and 64-bit values are high word
//! first (the SunSpec convention) and start at even addresses.

use std::fmt;

use latmon_core::extra::ProbeExtra;
use latmon_core::session::Tick;
use latmon_core::summary::ProbeReport;

/// Register 0: "LM".
pub const MAGIC: u16 = 0x4C4D;
/// Register 1. Bumped when a register changes meaning; registers are only
/// ever appended (into the reserved words) within a version.
pub const MAP_VERSION: u16 = 1;
/// Header size in registers = address of probe block 0.
pub const HEADER_WORDS: u16 = 32;
/// Size of each probe block in registers.
pub const BLOCK_WORDS: u16 = 40;
/// Probe names are kept in this many bytes (2 per register, NUL padded).
pub const NAME_BYTES: usize = 16;
/// Address of extension block 0 ([`reg::EXT_FIRST`] says so): each probe
/// block's registers added within map version 1 (a block has no reserved
/// word), at a fixed address so that no block moves as families add
/// series.
pub const EXT_BASE: u16 = 0xC000;
/// Size of each extension block in registers.
pub const EXT_WORDS: u16 = 10;
/// At most this many probe blocks: a session's bound (the wire's probe
/// ids; the agent adds no series past it). It was the 1228 blocks that fit
/// below the extension blocks; no session ever had more than 1024, so
/// the addresses past block 1023 never held a register, and the loops
/// area ([`LOOPS_BASE`]) takes some of them without moving one.
pub const MAX_BLOCKS: usize = latmon_core::wire::MAX_PROBES;
const _: () = assert!(HEADER_WORDS as usize + MAX_BLOCKS * BLOCK_WORDS as usize <= LOOPS_BASE as usize);
const _: () = assert!(LOOPS_END <= EXT_BASE as usize);
/// Address of the loops area (0xB000, fixed: the header has no reserved
/// word left to point at it): [`LOOPS_HEADER_WORDS`] registers of counts
/// ([`lh`]), then [`LOOP_BLOCKS`] loop blocks of [`LOOP_WORDS`] ([`lp`]),
/// always all served (unfilled ones read 0: a PLC's fixed read never
/// meets exception 02 when a loop goes away).
pub const LOOPS_BASE: u16 = 0xB000;
/// The loops area's own header, in registers (= offset of loop block 0).
pub const LOOPS_HEADER_WORDS: u16 = 8;
/// Size of each loop block in registers.
pub const LOOP_WORDS: u16 = 40;
/// Loop blocks: one per loop `cycle,auto` watches, which watches at most
/// LATMON_CYCLE_AUTO (bpf/latmon.h); more watched loops (a report from
/// elsewhere) are counted in [`lh::WATCHED`], not given a block.
pub const LOOP_BLOCKS: usize = latmon_core::bpf::limits::CYCLE_AUTO;
const LOOPS_LEN: usize = LOOPS_HEADER_WORDS as usize + LOOP_BLOCKS * LOOP_WORDS as usize;
const LOOPS_END: usize = LOOPS_BASE as usize + LOOPS_LEN;
const _: () = assert!(EXT_BASE as usize + MAX_BLOCKS * EXT_WORDS as usize <= THRESHOLD_BASE as usize);
/// Address of threshold block 0: each probe block's alert threshold (µs,
/// u32; 0 none), added within map version 1 after the extension blocks
/// (whose size is fixed: growing them would move every block but the first).
pub const THRESHOLD_BASE: u16 = 0xF000;
/// Size of each threshold block in registers.
pub const THRESHOLD_WORDS: u16 = 2;
const _: () = assert!(THRESHOLD_BASE as usize + MAX_BLOCKS * THRESHOLD_WORDS as usize <= COUNTER_BASE as usize);
/// Address of counter block 0: a `cycle` probe's RT sleep rule counts, a
/// `lock` line's inversion counts (added within map version 1 after the
/// threshold blocks, the last free registers of the address space).
pub const COUNTER_BASE: u16 = 64_000;
/// Size of each counter block in registers.
pub const COUNTER_WORDS: u16 = 10;
/// Counter blocks exist for the first this many probe blocks only: the
/// 16-bit address space ends there (a lock series past them is still in
/// its family line's block, configured probes come first).
pub const COUNTER_BLOCKS: usize = (65_536 - COUNTER_BASE as usize) / COUNTER_WORDS as usize;

/// Header registers (addresses).
pub mod reg {
    pub const MAGIC: u16 = 0;
    pub const VERSION: u16 = 1;
    pub const PROBE_COUNT: u16 = 2;
    pub const BLOCK_SIZE: u16 = 3;
    pub const FIRST_BLOCK: u16 = 4;
    pub const STATUS: u16 = 5;
    /// u32
    pub const BOOT_ID: u16 = 6;
    /// u64
    pub const SEQ: u16 = 8;
    /// u32, µs
    pub const INTERVAL_US: u16 = 12;
    /// u32, s
    pub const UPTIME_S: u16 = 14;
    pub const ATTACHED: u16 = 16;
    pub const FAILED: u16 = 17;
    /// u32
    pub const READ_ERRORS: u16 = 18;
    /// u32
    pub const BAD_REQUESTS: u16 = 20;
    /// u32: runs of the probes' BPF programs the kernel skipped since start
    /// (was reserved: added within map version 1).
    pub const MISSED: u16 = 22;
    /// The interval's top cause of late time (were reserved: added within
    /// map version 1). The block of the probe with the most alerted time
    /// ([`super::NO_BLOCK`]: no probe alerted), its largest cause's kind
    /// (LATMON_CAUSE_* of bpf/latmon.h; 0: none) and id (u32), that
    /// probe's alerted time (u32, µs) and the cause's share of it (0.01 %).
    pub const CAUSE_BLOCK: u16 = 24;
    pub const CAUSE_KIND: u16 = 25;
    /// u32
    pub const CAUSE_ID: u16 = 26;
    /// u32, µs
    pub const CAUSE_ALERTED_US: u16 = 28;
    /// u16, 0.01 % (10000 = all of it)
    pub const CAUSE_SHARE: u16 = 30;
    /// The address of extension block 0 ([`super::EXT_BASE`]; was
    /// reserved: 0 in a latmon without extension blocks).
    pub const EXT_FIRST: u16 = 31;
}

/// Offsets inside extension block N (at `EXT_BASE + EXT_WORDS * N`, the
/// probe of probe block N): a `cycle` probe's misses and the top cause of
/// the interval's missed time; all 0 for other probes.
pub mod ext {
    /// u32: misses since start.
    pub const TOTAL_MISSES: u16 = 0;
    /// u32: misses in the interval.
    pub const MISSES: u16 = 2;
    /// u16: the largest cause's kind (`CauseId::code`: 1 task .. 7 other,
    /// 8 running, 9 blocked, 10 page_faults, 13 stopped, 14 backlog; 0
    /// none).
    pub const CAUSE_KIND: u16 = 4;
    /// u16, 0.01 %: its share of the interval's missed time.
    pub const CAUSE_SHARE: u16 = 5;
    /// u32: its id (thread id, IRQ number, vector, what it slept on).
    pub const CAUSE_ID: u16 = 6;
    /// u32, µs: the interval's missed time (its miss records'
    /// release -> done summed).
    pub const MISSED_US: u16 = 8;
}

/// Offsets inside counter block N (at `COUNTER_BASE + COUNTER_WORDS * N`,
/// N < [`COUNTER_BLOCKS`]): u32 each, the low 32 bits of JSON's u64 totals
/// since start (they wrap, unlike the saturating counts of the probe
/// blocks: a PLC takes differences modulo 2^32, and a wrapped counter
/// still counts where a saturated one would stop). Meaning by family (the
/// probe block's +2); all 0 for other families.
pub mod counter {
    /// cycle: each rule's violations since start, in `Rule::ALL`'s order
    /// (woken_by_lower, sleep_other, sleep_relative, sleep_realtime_clock).
    pub const RULES: u16 = 0;
    /// cycle: rule records lost since start.
    pub const RULE_RECORDS_LOST: u16 = 8;
    /// lock: waits lengthened by a priority inversion since start.
    pub const INVERSIONS: u16 = 0;
    /// lock: their inversion time since start, µs (rounded up).
    pub const INVERSION_US: u16 = 2;
    /// lock, the family line: owners named but not followed since start.
    pub const OWNERS_REFUSED: u16 = 4;
    /// lock: waits whose owner was followed since start.
    pub const OWNED: u16 = 6;
}

/// Offsets inside the loops area's header (at [`LOOPS_BASE`]), u16 each
/// (counts saturate at 65535).
pub mod lh {
    /// Loops discovery lists in the interval (JSON `loops`, at most
    /// `loops::LISTED`).
    pub const LISTED: u16 = 0;
    /// Of those, the loops `cycle,auto` watches (JSON `watched: true`).
    pub const WATCHED: u16 = 1;
    /// Loop blocks filled: min(watched, [`super::LOOP_BLOCKS`]); blocks
    /// from this one on read 0.
    pub const BLOCKS: u16 = 2;
    /// [`super::LOOP_WORDS`].
    pub const BLOCK_SIZE: u16 = 3;
    /// Address of loop block 0 (`LOOPS_BASE + LOOPS_HEADER_WORDS`).
    pub const FIRST_BLOCK: u16 = 4;
    /// Periodic RT loops left unwatched (JSON `agent.loops_unwatched`).
    pub const UNWATCHED: u16 = 5;
    /// Loops past discovery's list (JSON `loops_unlisted`).
    pub const UNLISTED: u16 = 6;
    /// The number of loop blocks served, filled or not
    /// ([`super::LOOP_BLOCKS`]).
    pub const CAPACITY: u16 = 7;
}

/// Offsets inside loop block N (at `LOOPS_BASE + LOOPS_HEADER_WORDS +
/// LOOP_WORDS * N`): the N-th watched loop in discovery's order.
pub mod lp {
    /// u32: thread id.
    pub const TID: u16 = 0;
    /// u32: process id.
    pub const PID: u16 = 2;
    /// u16: scheduling policy, the kernel's SCHED_* number (1 FIFO, 2 RR,
    /// 6 DEADLINE, ...; saturates at 65535).
    pub const POLICY: u16 = 4;
    /// u16: rt_priority.
    pub const PRIO: u16 = 5;
    /// u32, µs: discovery's period (0 none).
    pub const PERIOD_US: u16 = 6;
    /// u16: where that period comes from (`period_source_code`).
    pub const PERIOD_SOURCE: u16 = 8;
    /// u16: 1 the cycle family has counted the loop's cycles (the
    /// registers from +10 to +25 are its counts), 0 not yet (they read 0).
    pub const COUNTED: u16 = 9;
    /// u64: cycles since it was watched.
    pub const TOTAL_CYCLES: u16 = 10;
    /// u32 (saturating): cycles in the interval.
    pub const CYCLES: u16 = 14;
    /// u32 (saturating): misses in the interval.
    pub const MISSES: u16 = 16;
    /// u32 (saturating, as the extension block's): misses since watched.
    pub const TOTAL_MISSES: u16 = 18;
    /// u32 (saturating): overruns since watched.
    pub const TOTAL_OVERRUNS: u16 = 20;
    /// u32: RT sleep rules broken since watched, the low 32 bits (wraps,
    /// as the counter blocks' rule counts).
    pub const TOTAL_RULES: u16 = 22;
    /// u32, µs: the period the cycle family judges it against (0 not yet).
    pub const CYCLE_PERIOD_US: u16 = 24;
    /// +26..+31: reserved for the loop's worst response (u32 µs) and the
    /// top cause of its missed time (kind, share, id as the extension
    /// block's): the agent has no per-loop figure for them yet; read 0.
    pub const RESERVED: u16 = 26;
    /// 8 registers of ASCII: the thread's comm.
    pub const COMM: u16 = 32;
}

/// [`lp::PERIOD_SOURCE`]: `0` none, then in `PeriodSource`'s order.
pub fn period_source_code(s: latmon_core::loops::PeriodSource) -> u16 {
    use latmon_core::loops::PeriodSource as P;
    match s {
        P::None => 0,
        P::Timerfd => 1,
        P::AbsTimer => 2,
        P::Deadline => 3,
        P::Relative => 4,
        P::Median => 5,
    }
}

/// [`reg::CAUSE_BLOCK`] when no probe alerted in the interval.
pub const NO_BLOCK: u16 = 0xFFFF;

/// Offsets inside a probe block.
pub mod off {
    pub const STATE: u16 = 0;
    pub const MECHANISM: u16 = 1;
    pub const KIND: u16 = 2;
    pub const INDEX: u16 = 3;
    /// u64
    pub const TOTAL_COUNT: u16 = 4;
    /// u32 from here on
    pub const COUNT: u16 = 8;
    pub const P50_US: u16 = 10;
    pub const P90_US: u16 = 12;
    pub const P99_US: u16 = 14;
    pub const P999_US: u16 = 16;
    pub const MAX_US: u16 = 18;
    pub const ALERTS: u16 = 20;
    pub const DROPS: u16 = 22;
    pub const MIN_US: u16 = 24;
    pub const MEAN_US: u16 = 26;
    pub const TOTAL_ALERTS: u16 = 28;
    pub const TOTAL_DROPS: u16 = 30;
    /// 8 registers of ASCII
    pub const NAME: u16 = 32;
}

/// Bits of the status register.
pub mod status {
    /// The agent is running (cleared in the image of its final interval).
    pub const RUNNING: u16 = 1 << 0;
    /// At least one configured probe did not attach (its block has state 0).
    pub const PROBE_FAILED: u16 = 1 << 1;
    /// The agent's own cost exceeded its budget (set by the agent; see
    /// [`super::AgentStatus::over_budget`]).
    pub const OVER_BUDGET: u16 = 1 << 2;
    /// This Modbus link saw damaged or malformed requests, or (RTU) its
    /// serial device failed, since start.
    pub const LINK_ERRORS: u16 = 1 << 3;
    /// Reading a probe's BPF maps failed at least once since start.
    pub const READ_ERRORS: u16 = 1 << 4;
    /// The kernel skipped runs of a probe's BPF programs since start:
    /// events went unmeasured (see [`super::reg::MISSED`]).
    pub const MISSED: u16 = 1 << 5;
}

/// Probe block `state` values.
pub const STATE_FAILED: u16 = 0;
pub const STATE_ATTACHED: u16 = 1;

/// Agent-wide facts the Tick does not carry (yet).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AgentStatus {
    /// The agent is over its `overhead_budget`, or detached probes for it
    /// (`IntervalReport::over_budget_alarm`); sets [`status::OVER_BUDGET`].
    pub over_budget: bool,
    /// Damaged/malformed requests or serial failures on this link since
    /// start; sets [`status::LINK_ERRORS`] when non-zero.
    pub bad_requests: u64,
    pub link_failed: bool,
}

/// Why a read of the image is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MapError {
    /// Some register of `addr .. addr + count` is past the end of the map
    /// (Modbus exception 02, illegal data address).
    OutOfRange { addr: u16, count: u16, len: usize },
    /// `count` is 0 (Modbus exception 03, illegal data value).
    ZeroCount,
}

impl fmt::Display for MapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OutOfRange { addr, count, len } => {
                write!(f, "registers {addr}..{} are outside the map (0..{len})", *addr as usize + *count as usize)
            }
            Self::ZeroCount => f.write_str("a read of zero registers"),
        }
    }
}

impl std::error::Error for MapError {}

/// A complete register image.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Image {
    words: Vec<u16>,
    /// The extension blocks, from [`EXT_BASE`].
    ext: Vec<u16>,
    /// The threshold blocks, from [`THRESHOLD_BASE`].
    thresholds: Vec<u16>,
    /// The counter blocks, from [`COUNTER_BASE`].
    counters: Vec<u16>,
    /// The loops area, from [`LOOPS_BASE`] (always its full size).
    loops: Vec<u16>,
}

/// µs rounded up (a non-zero latency never reads 0), saturating at u32::MAX.
pub fn us_ceil(ns: u64) -> u32 {
    u32::try_from(ns.div_ceil(1_000)).unwrap_or(u32::MAX)
}

fn sat32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

impl Image {
    /// An image of `blocks` probe blocks, all zero (what a PLC reads before
    /// the first interval ends: magic and layout only).
    pub fn empty(blocks: usize) -> Image {
        let mut i = Image::default();
        i.layout(blocks.min(MAX_BLOCKS));
        i
    }

    fn layout(&mut self, blocks: usize) {
        let len = HEADER_WORDS as usize + blocks * BLOCK_WORDS as usize;
        self.words.clear();
        self.words.resize(len, 0);
        self.ext.clear();
        self.ext.resize(blocks * EXT_WORDS as usize, 0);
        self.thresholds.clear();
        self.thresholds.resize(blocks * THRESHOLD_WORDS as usize, 0);
        self.counters.clear();
        self.counters.resize(blocks.min(COUNTER_BLOCKS) * COUNTER_WORDS as usize, 0);
        self.loops.clear();
        self.loops.resize(LOOPS_LEN, 0);
        self.loops[lh::BLOCK_SIZE as usize] = LOOP_WORDS;
        self.loops[lh::FIRST_BLOCK as usize] = LOOPS_BASE + LOOPS_HEADER_WORDS;
        self.loops[lh::CAPACITY as usize] = LOOP_BLOCKS as u16;
        self.put16(reg::MAGIC, MAGIC);
        self.put16(reg::VERSION, MAP_VERSION);
        self.put16(reg::PROBE_COUNT, blocks as u16);
        self.put16(reg::BLOCK_SIZE, BLOCK_WORDS);
        self.put16(reg::FIRST_BLOCK, HEADER_WORDS);
        self.put16(reg::EXT_FIRST, EXT_BASE);
    }

    /// The registers, address 0 first (header and probe blocks).
    pub fn words(&self) -> &[u16] {
        &self.words
    }

    /// The extension blocks' registers, [`EXT_BASE`] first.
    pub fn ext_words(&self) -> &[u16] {
        &self.ext
    }

    /// The loops area's registers, [`LOOPS_BASE`] first.
    pub fn loops_words(&self) -> &[u16] {
        &self.loops
    }

    /// Registers `addr .. addr + count`, or why not.
    pub fn read<'a>(&'a self, addr: u16, count: u16) -> Result<&'a [u16], MapError> {
        if count == 0 {
            return Err(MapError::ZeroCount);
        }
        let (a, end) = (addr as usize, addr as usize + count as usize);
        let table =
            |from: u16, t: &'a [u16]| addr.checked_sub(from).map(|o| t.get(o as usize..o as usize + count as usize));
        let got = table(COUNTER_BASE, &self.counters)
            .or_else(|| table(THRESHOLD_BASE, &self.thresholds))
            .or_else(|| table(EXT_BASE, &self.ext))
            .or_else(|| table(LOOPS_BASE, &self.loops))
            .unwrap_or_else(|| self.words.get(a..end));
        got.ok_or(MapError::OutOfRange { addr, count, len: self.words.len() })
    }

    fn put16(&mut self, at: u16, v: u16) {
        if let Some(w) = self.words.get_mut(at as usize) {
            *w = v;
        }
    }

    fn put32(&mut self, at: u16, v: u32) {
        self.put16(at, (v >> 16) as u16);
        self.put16(at.wrapping_add(1), v as u16);
    }

    fn ext_put16(&mut self, at: usize, v: u16) {
        if let Some(w) = self.ext.get_mut(at) {
            *w = v;
        }
    }

    fn ext_put32(&mut self, at: usize, v: u32) {
        self.ext_put16(at, (v >> 16) as u16);
        self.ext_put16(at + 1, v as u16);
    }

    /// A family's own data (core extra.rs) into extension block `pos` (a
    /// cycle probe's misses and the top cause of its missed time) and its
    /// counter block, if it has one (a cycle probe's rule counts, a lock
    /// line's inversion counts, each the low 32 bits: they wrap). Other
    /// probes' blocks stay 0. The image's one match on a family's data.
    fn put_extra(&mut self, pos: usize, x: &ProbeExtra) {
        let base = pos * EXT_WORDS as usize;
        let at = pos * COUNTER_WORDS as usize;
        let put = |w: &mut [u16], off: u16, v: u64| {
            let o = off as usize;
            if let Some(w) = w.get_mut(at + o..at + o + 2) {
                w.copy_from_slice(&[(v >> 16) as u16, v as u16]);
            }
        };
        match x {
            ProbeExtra::Cycle(c) => {
                let (n, m) = (&c.counts, &c.miss_causes);
                self.ext_put32(base + ext::TOTAL_MISSES as usize, sat32(n.total_misses));
                self.ext_put32(base + ext::MISSES as usize, sat32(n.misses));
                self.ext_put32(base + ext::MISSED_US as usize, us_ceil(m.alerted_ns));
                if let Some(top) = m.top() {
                    self.ext_put16(base + ext::CAUSE_KIND as usize, top.id.code());
                    self.ext_put16(base + ext::CAUSE_SHARE as usize, m.share_basis_points(top.ns));
                    self.ext_put32(base + ext::CAUSE_ID as usize, top.id.id());
                }
                if self.counters.len() >= at + COUNTER_WORDS as usize {
                    for (k, v) in n.total_rule_counts.0.iter().enumerate() {
                        put(&mut self.counters, counter::RULES + 2 * k as u16, *v);
                    }
                    put(&mut self.counters, counter::RULE_RECORDS_LOST, n.total_rule_records_lost);
                }
            }
            ProbeExtra::Lock(l) => {
                if self.counters.len() >= at + COUNTER_WORDS as usize {
                    put(&mut self.counters, counter::INVERSIONS, l.total_inversions);
                    put(&mut self.counters, counter::INVERSION_US, l.total_inversion_ns.div_ceil(1_000));
                    put(&mut self.counters, counter::OWNERS_REFUSED, l.total_owners_refused.unwrap_or(0));
                    put(&mut self.counters, counter::OWNED, l.total_owned);
                }
            }
        }
    }

    fn put64(&mut self, at: u16, v: u64) {
        self.put32(at, (v >> 32) as u32);
        self.put32(at.wrapping_add(2), v as u32);
    }

    /// Rebuild the whole image from one interval. Reuses the buffer: no
    /// allocation once it has its working size.
    pub fn build(&mut self, t: &Tick<'_>, agent: &AgentStatus) {
        let s = t.session;
        let configured = s.probes.len() + s.failed.len();
        let blocks = configured.min(MAX_BLOCKS);
        self.layout(blocks);
        let read_errors: u64 = t.read_errors.iter().copied().fold(0, u64::saturating_add);
        let missed: u64 = t.report.probes.iter().map(|p| p.total_bpf_missed).fold(0, u64::saturating_add);
        let mut bits = 0;
        if !t.report.last {
            bits |= status::RUNNING;
        }
        if !s.failed.is_empty() {
            bits |= status::PROBE_FAILED;
        }
        if agent.over_budget {
            bits |= status::OVER_BUDGET;
        }
        if agent.bad_requests > 0 || agent.link_failed {
            bits |= status::LINK_ERRORS;
        }
        if read_errors > 0 {
            bits |= status::READ_ERRORS;
        }
        if missed > 0 {
            bits |= status::MISSED;
        }
        self.put16(reg::STATUS, bits);
        self.put32(reg::BOOT_ID, s.boot_id);
        self.put64(reg::SEQ, t.report.seq);
        self.put32(reg::INTERVAL_US, us_ceil(t.report.interval_ns));
        self.put32(reg::UPTIME_S, sat32(t.report.time_ns.saturating_sub(s.start_ns) / 1_000_000_000));
        self.put16(reg::ATTACHED, s.probes.len().min(u16::MAX as usize) as u16);
        self.put16(reg::FAILED, s.failed.len().min(u16::MAX as usize) as u16);
        self.put32(reg::READ_ERRORS, sat32(read_errors));
        self.put32(reg::BAD_REQUESTS, sat32(agent.bad_requests));
        self.put32(reg::MISSED, sat32(missed));

        // Blocks in config order: failed probes sit at their positions,
        // attached ones fill the rest in session order.
        let mut attached = 0usize;
        // The probe with the most alerted time: (block, its causes).
        let mut worst: Option<(u16, &latmon_core::causes::CauseSummary)> = None;
        for pos in 0..blocks {
            let base = HEADER_WORDS + pos as u16 * BLOCK_WORDS;
            self.put16(base + off::INDEX, pos as u16);
            if let Some(f) = s.failed.iter().find(|f| f.position == pos) {
                self.put16(base + off::STATE, STATE_FAILED);
                self.put16(base + off::KIND, f.kind.modbus_code());
                self.put_name(base, &f.name);
                continue;
            }
            let Some(info) = s.probes.get(attached) else { continue };
            self.put16(base + off::STATE, STATE_ATTACHED);
            self.put16(base + off::MECHANISM, info.attach.modbus_code());
            self.put16(base + off::KIND, info.kind.modbus_code());
            self.put_name(base, &info.name);
            if let Some(p) = t.report.probes.get(attached) {
                self.put_probe(base, p);
                if let Some(x) = &p.extra {
                    self.put_extra(pos, x);
                }
                let th = us_ceil(p.threshold_ns);
                let at = pos * THRESHOLD_WORDS as usize;
                if let Some(w) = self.thresholds.get_mut(at..at + 2) {
                    w.copy_from_slice(&[(th >> 16) as u16, th as u16]);
                }
                if let Some(c) = p.alert_causes.as_ref().filter(|c| c.alerted_ns > 0) {
                    if worst.is_none_or(|(_, w)| c.alerted_ns > w.alerted_ns) {
                        worst = Some((pos as u16, c));
                    }
                }
            }
            attached += 1;
        }
        self.put_loops(t.report);
        self.put16(reg::CAUSE_BLOCK, worst.map_or(NO_BLOCK, |w| w.0));
        if let Some((_, c)) = worst {
            self.put32(reg::CAUSE_ALERTED_US, us_ceil(c.alerted_ns));
            if let Some(top) = c.top() {
                self.put16(reg::CAUSE_KIND, top.id.code());
                self.put32(reg::CAUSE_ID, top.id.id());
                self.put16(reg::CAUSE_SHARE, c.share_basis_points(top.ns));
            }
        }
    }

    /// The loops area: discovery's counts, then a block per watched loop
    /// in list order, as many as fit. Writes in place (no allocation).
    fn put_loops(&mut self, r: &latmon_core::summary::IntervalReport) {
        let w = &mut self.loops;
        let sat16 = |n: usize| n.min(u16::MAX as usize) as u16;
        let watched = r.loops.iter().filter(|l| l.watched).count();
        w[lh::LISTED as usize] = sat16(r.loops.len());
        w[lh::WATCHED as usize] = sat16(watched);
        w[lh::BLOCKS as usize] = sat16(watched.min(LOOP_BLOCKS));
        w[lh::UNWATCHED as usize] = sat16(r.agent.loops_unwatched as usize);
        w[lh::UNLISTED as usize] = sat16(r.loops_unlisted as usize);
        for (n, l) in r.loops.iter().filter(|l| l.watched).take(LOOP_BLOCKS).enumerate() {
            let at = LOOPS_HEADER_WORDS as usize + n * LOOP_WORDS as usize;
            let b = &mut w[at..at + LOOP_WORDS as usize];
            let mut put = |off: u16, v: u64, words: usize| {
                for (i, x) in b[off as usize..off as usize + words].iter_mut().enumerate() {
                    *x = (v >> (16 * (words - 1 - i))) as u16;
                }
            };
            put(lp::TID, l.tid.into(), 2);
            put(lp::PID, l.pid.into(), 2);
            put(lp::POLICY, l.policy.code().min(u16::MAX as u32).into(), 1);
            put(lp::PRIO, l.prio.min(u16::MAX as u32).into(), 1);
            put(lp::PERIOD_US, us_ceil(l.period_ns).into(), 2);
            put(lp::PERIOD_SOURCE, period_source_code(l.period_source).into(), 1);
            if let Some(c) = &l.cycle {
                put(lp::COUNTED, 1, 1);
                put(lp::TOTAL_CYCLES, c.total_cycles, 4);
                put(lp::CYCLES, sat32(c.cycles).into(), 2);
                put(lp::MISSES, sat32(c.misses).into(), 2);
                put(lp::TOTAL_MISSES, sat32(c.total_misses).into(), 2);
                put(lp::TOTAL_OVERRUNS, sat32(c.total_overruns).into(), 2);
                put(lp::TOTAL_RULES, c.total_rules & 0xFFFF_FFFF, 2);
                put(lp::CYCLE_PERIOD_US, us_ceil(c.period_ns).into(), 2);
            }
            put_ascii(&mut b[lp::COMM as usize..lp::COMM as usize + NAME_BYTES / 2], &l.comm);
        }
    }

    fn put_probe(&mut self, base: u16, p: &ProbeReport) {
        self.put64(base + off::TOTAL_COUNT, p.total_count);
        self.put32(base + off::COUNT, sat32(p.count));
        self.put32(base + off::P50_US, us_ceil(p.p50_ns));
        self.put32(base + off::P90_US, us_ceil(p.p90_ns));
        self.put32(base + off::P99_US, us_ceil(p.p99_ns));
        self.put32(base + off::P999_US, us_ceil(p.p999_ns));
        self.put32(base + off::MAX_US, us_ceil(p.max_ns));
        self.put32(base + off::ALERTS, sat32(p.alerts));
        self.put32(base + off::DROPS, sat32(p.drops));
        self.put32(base + off::MIN_US, us_ceil(p.min_ns));
        self.put32(base + off::MEAN_US, us_ceil(p.mean_ns));
        self.put32(base + off::TOTAL_ALERTS, sat32(p.total_alerts));
        self.put32(base + off::TOTAL_DROPS, sat32(p.total_drops));
    }

    fn put_name(&mut self, base: u16, name: &str) {
        let at = (base + off::NAME) as usize;
        if let Some(w) = self.words.get_mut(at..at + NAME_BYTES / 2) {
            put_ascii(w, name);
        }
    }
}

/// A name into `w` (2 bytes a register, high byte first): its first
/// `2 * w.len()` bytes, ASCII (other bytes, a board's comm too, become
/// '?'), NUL padded. Bounded whatever the name.
fn put_ascii(w: &mut [u16], name: &str) {
    let mut b = name.bytes().map(|c| if c.is_ascii_graphic() || c == b' ' { c } else { b'?' });
    for x in w.iter_mut() {
        *x = u16::from_be_bytes([b.next().unwrap_or(0), b.next().unwrap_or(0)]);
    }
}

#[cfg(test)]
#[path = "map_tests.rs"]
mod tests;
