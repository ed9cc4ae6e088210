// SPDX-License-Identifier: MIT
//! The report's accumulators, shared by the report and its charts: the
//! downsampling [`Envelope`], a probe's [`Series`], the bounded
//! [`Worst`] records, and the text escapes for HTML and chart text. A
//! leaf: it knows nothing of the capture that holds them.

use std::fmt::Write as _;

use latmon_core::wire::ReceivedAlert;

/// Buckets kept per series: a percentile chart's plot is ~480 px wide,
/// so more would not be seen (between half and all of them are drawn).
pub const SERIES_BUCKETS: usize = 256;
/// Buckets kept for the agent's health (1000 px wide charts).
pub const HEALTH_BUCKETS: usize = 1024;
/// Buckets kept per probe of the alert timeline.
pub const ALERT_BUCKETS: usize = 256;
/// Probes the alert timeline draws apart (each its colour); alerts of
/// further probes are drawn as `other probes`.
pub const MAX_ALERT_PROBES: usize = 12;
/// Alert records listed in the table: the worst, in time order.
pub const MAX_ALERT_ROWS: usize = 500;

/// Samples `(t, [v; N])` downsampled as they arrive: each bucket covers
/// `per` consecutive samples (a power of two) and keeps their time span
/// and each value's min and max. When `cap` buckets are full, neighbours
/// merge pairwise and `per` doubles, so memory is `cap` buckets whatever
/// the number of samples. A value may be NaN (not measured then): min and
/// max skip it while the bucket has a number.
#[derive(Debug, Clone)]
pub struct Envelope<const N: usize> {
    cap: usize,
    per: u64,
    buckets: Vec<Bucket<N>>,
}

/// Consecutive samples of an [`Envelope`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket<const N: usize> {
    /// Time of the first and last sample.
    pub t0: f64,
    pub t1: f64,
    pub lo: [f64; N],
    pub hi: [f64; N],
    /// Samples covered.
    pub n: u64,
}

impl<const N: usize> Bucket<N> {
    fn take(&mut self, o: &Bucket<N>) {
        self.t1 = o.t1;
        for i in 0..N {
            self.lo[i] = self.lo[i].min(o.lo[i]);
            self.hi[i] = self.hi[i].max(o.hi[i]);
        }
        self.n += o.n;
    }

    /// Mid time.
    pub fn t(&self) -> f64 {
        (self.t0 + self.t1) / 2.0
    }
}

impl<const N: usize> Envelope<N> {
    /// `cap`: the most buckets kept (even, at least 2).
    pub fn new(cap: usize) -> Self {
        let cap = cap.max(2) & !1;
        Envelope { cap, per: 1, buckets: Vec::new() }
    }

    pub fn push(&mut self, t: f64, v: [f64; N]) {
        let b = Bucket { t0: t, t1: t, lo: v, hi: v, n: 1 };
        if let Some(last) = self.buckets.last_mut().filter(|l| l.n < self.per) {
            last.take(&b);
            return;
        }
        if self.buckets.len() == self.cap {
            // Every bucket is full here (only the last can be partial, and
            // it is not): pairs merge into full buckets of twice the size.
            for k in 0..self.cap / 2 {
                let mut m = self.buckets[2 * k];
                m.take(&self.buckets[2 * k + 1]);
                self.buckets[k] = m;
            }
            self.buckets.truncate(self.cap / 2);
            self.per *= 2;
        }
        self.buckets.push(b);
    }

    pub fn buckets(&self) -> &[Bucket<N>] {
        &self.buckets
    }

    /// Samples per bucket (the last may have fewer).
    pub fn per(&self) -> u64 {
        self.per
    }

    /// Samples pushed.
    #[cfg(test)]
    pub fn samples(&self) -> u64 {
        self.buckets.iter().map(|b| b.n).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    pub(super) fn last_mut(&mut self) -> Option<&mut Bucket<N>> {
        self.buckets.last_mut()
    }
}

/// One probe's intervals: p50, p99 and max (ns) per interval, against
/// seconds since the agent started.
#[derive(Debug, Clone)]
pub struct Series {
    pub env: Envelope<3>,
    pub events: u64,
}

impl Default for Series {
    fn default() -> Self {
        Series { env: Envelope::new(SERIES_BUCKETS), events: 0 }
    }
}

/// The health values sampled per summary (index into [`Health`]'s
/// envelope): latmon's BPF CPU % (NaN until measured), the link's bytes/s
/// used and budget (NaN: no budget), and cumulative counters.
pub mod hv {
    pub const CPU: usize = 0;
    pub const USED: usize = 1;
    pub const BUDGET: usize = 2;
    pub const CRC: usize = 3;
    pub const RESYNCS: usize = 4;
    pub const LOST: usize = 5;
    pub const DROPS: usize = 6;
    pub const N: usize = 7;
}

/// The worst alert records seen, at most `cap` ([`MAX_ALERT_ROWS`] for
/// the alert table).
#[derive(Debug)]
pub(super) struct Worst {
    /// A min-heap on (latency, later first): its top is the first to go.
    heap: std::collections::BinaryHeap<std::cmp::Reverse<Ranked>>,
    pub(super) seen: u64,
    cap: usize,
}

#[derive(Debug)]
struct Ranked {
    latency_ns: u64,
    /// Arrival order: of equal latencies the earlier is kept.
    order: u64,
    rec: ReceivedAlert,
}

impl PartialEq for Ranked {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == std::cmp::Ordering::Equal
    }
}
impl Eq for Ranked {}
impl PartialOrd for Ranked {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Ranked {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.latency_ns, std::cmp::Reverse(self.order)).cmp(&(o.latency_ns, std::cmp::Reverse(o.order)))
    }
}

impl Worst {
    pub(super) fn new(cap: usize) -> Self {
        Worst { heap: Default::default(), seen: 0, cap: cap.max(1) }
    }

    /// Offer a record whose time since start is `time_ns`.
    pub(super) fn offer(&mut self, got: &ReceivedAlert, time_ns: u64) {
        let rec = &got.record;
        let order = self.seen;
        self.seen += 1;
        let key = |r: &Ranked| (r.latency_ns, std::cmp::Reverse(r.order));
        let least = self.heap.peek().map(|m| key(&m.0));
        if self.heap.len() == self.cap && least >= Some((rec.latency_ns, std::cmp::Reverse(order))) {
            return; // not among the worst: not even cloned
        }
        let mut rec = got.clone();
        rec.record.time_ns = time_ns;
        self.heap.push(std::cmp::Reverse(Ranked { latency_ns: rec.record.latency_ns, order, rec }));
        if self.heap.len() > self.cap {
            self.heap.pop();
        }
    }

    /// The kept records in time order.
    pub(super) fn in_time_order(&self) -> Vec<&ReceivedAlert> {
        let mut v: Vec<&Ranked> = self.heap.iter().map(|r| &r.0).collect();
        v.sort_by_key(|r| (r.rec.record.time_ns, r.order));
        v.into_iter().map(|r| &r.rec).collect()
    }
}

/// Text for HTML (element content and attribute values): [`plain`],
/// HTML-escaped.
pub(super) fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in plain(s).chars() {
        match c {
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '&' => o.push_str("&amp;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// A string from the board as text: control characters (C0, DEL, C1)
/// and bidi overrides (a name rendered reversed) as `\u{..}`. Chart text
/// (captions, legends) takes this: plotters' SVG backend HTML-escapes
/// what it draws itself.
pub(super) fn plain(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() || latmon_core::json::needs_escape(c) {
            let _ = write!(o, "\\u{{{:x}}}", c as u32);
        } else {
            o.push(c);
        }
    }
    o
}

/// A string from the board for a record's row: printable ASCII as is,
/// every other character as `\u{..}`. The row's "what delayed it" is the
/// agent's line, which the core writes in printable ASCII only (a name's
/// other characters as `?`); its names are passed through this first, and
/// the row's own cells too, so one row shows one escape style (issue 40:
/// `c\u{1b}[31m` in the comm cell beside `hog?[2J` in the line).
pub(super) fn ascii(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        if (' '..='~').contains(&c) {
            o.push(c);
        } else {
            let _ = write!(o, "\\u{{{:x}}}", c as u32);
        }
    }
    o
}

/// A record's cell text (probe, comm): [`ascii`], HTML-escaped.
pub(super) fn cell(s: &str) -> String {
    esc(&ascii(s))
}

/// A record's "what delayed it" line, as the agent prints it, with its
/// names escaped as [`ascii`] does, HTML-escaped.
pub(super) fn detail(got: &ReceivedAlert) -> String {
    use latmon_core::anatomy::CauseKind;
    let mut r = got.record.clone();
    let fix = |s: &mut String| *s = ascii(s);
    fix(&mut r.comm);
    for c in r.anatomy.iter_mut().flat_map(|an| an.causes.iter_mut()) {
        match &mut c.kind {
            CauseKind::Task { comm, .. } => fix(comm),
            CauseKind::Irq { name, .. } => fix(name),
            CauseKind::Blocked { syscall, .. } => fix(syscall),
            CauseKind::Owner { owner } => fix(&mut owner.comm),
            CauseKind::Inversion { owner, preempted_by } => {
                fix(&mut owner.comm);
                preempted_by.iter_mut().for_each(|p| fix(&mut p.comm));
            }
            _ => {}
        }
    }
    if let Some(cy) = &mut r.cycle {
        cy.names_mut(fix);
    }
    let name = ascii(&got.probe);
    let mut line = String::new();
    latmon_core::summary::render_detail_into(
        &mut line,
        latmon_core::summary::Named { name: &name, record: &r },
        usize::MAX,
    );
    esc(&line)
}

#[cfg(test)]
mod row_tests {
    use super::*;

    /// Issue 40: the report's alert row showed `\u{1b}` in its comm cell
    /// and `?` for the same byte in its "what delayed it" cell.
    #[test]
    fn a_records_row_escapes_every_name_one_way() {
        use latmon_core::anatomy::{Anatomy, Cause, CauseKind, Policy};
        let evil = "h<g>\u{1b}[2J\u{e9}";
        let task = CauseKind::Task { comm: evil.into(), pid: 7, policy: Policy::Fifo, prio: 50 };
        let got = ReceivedAlert {
            probe: "runq".into(),
            record: latmon_core::summary::AlertRecord {
                id: latmon_core::ident::ProbeId::at(0),
                pid: 1,
                tid: 1,
                comm: evil.into(),
                cpu: 0,
                latency_ns: 500_000,
                time_ns: 1,
                anatomy: Some(Anatomy { cpu_woken: 0, cpu_ran: 0, causes: vec![Cause { kind: task, ns: 400_000 }] }),
                cycle: None,
            },
        };
        let want = "h&lt;g&gt;\\u{1b}[2J\\u{e9}";
        assert_eq!(cell(&got.record.comm), want);
        let d = detail(&got);
        assert!(d.contains(want), "{d}");
        assert!(!d.contains('?'), "no second style: {d}");
    }
}
