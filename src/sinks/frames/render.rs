// SPDX-License-Identifier: MIT
//! Wire-frame rendering of one output without a budget: Hello (whole
//! table, or the rows a grown table added), Status, alerts and summaries;
//! with a budget it hands the interval to [`super::budget`].

use latmon_core::session::Tick;
use latmon_core::summary::{IntervalReport, ProbeState};
use latmon_core::wire::{self, Encoder, Hello, ProbeHealth, ProbeMissed, Status, SummaryHeader};

use super::budget;
use crate::sinks::link::{HELLO_EVERY_SUMMARIES, HELLO_PERIOD_NS};
use crate::sinks::queue::Queue;

/// Wire-frame rendering state of one output.
#[derive(Default)]
pub struct FrameRender {
    enc: Encoder,
    buf: Vec<u8>,
    lens: Vec<usize>,
    hello: Option<Hello>,
    status: Option<Status>,
    last_hello_ns: Option<u64>,
    since_hello: u32,
    /// Flags of the last Status sent: a change (over budget, a probe
    /// detached) sends a Status at once.
    last_flags: u32,
    /// A byte budget: delta summaries, keyframes, degradation steps.
    pub budget: Option<Box<budget::BudgetedFrames>>,
    /// [`names_of`] the session at the last interval.
    names: Option<(u64, usize)>,
}

/// A fingerprint of the session's probe names (FNV-1a): a probe renamed
/// within the session (a lock series named once its symbol arrives) sends
/// the table again, which receivers merge by id.
pub(super) fn names_of(s: &latmon_core::session::Session) -> u64 {
    names_of_first(s, s.probes.len())
}

/// [`names_of`] the first `n` probes only: a series born since (a new
/// syscall) is no rename, and goes out as a table update, not a whole
/// Hello (at 9600 baud the default probes' Hello again at every new series
/// overflowed the line: links_paced).
pub(super) fn names_of_first(s: &latmon_core::session::Session, n: usize) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in s.probes.iter().take(n).flat_map(|p| p.name.bytes().chain([0])) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The `wire::STATUS_*` bits of an interval.
pub fn status_flags(r: &IntervalReport) -> u32 {
    let a = &r.agent;
    let mut f = 0;
    if a.over_budget {
        f |= wire::STATUS_OVER_BUDGET;
    }
    if a.degraded {
        f |= wire::STATUS_DEGRADED;
    }
    if a.cost_measured {
        f |= wire::STATUS_COST_MEASURED;
    }
    f
}

/// Status frames for this interval into `buf`/`lens` (the agent's and
/// the link's health); `slot` keeps the message between intervals.
// The encoder and both frame buffers are borrowed one by one, as in
// `BudgetedFrames::render`, whose `status` callback this is.
#[allow(clippy::too_many_arguments)]
pub(super) fn status_into(
    slot: &mut Option<Status>,
    t: &Tick<'_>,
    q: &Queue,
    enc: &mut Encoder,
    buf: &mut Vec<u8>,
    lens: &mut Vec<usize>,
    link: wire::LinkHealth,
    shed: &[u64],
) -> u32 {
    let (dropped, dropped_bytes) = q.dropped();
    let s = slot.get_or_insert_with(|| Status {
        boot_id: 0,
        time_ns: 0,
        seq: 0,
        uptime_ns: 0,
        frames_dropped: 0,
        bytes_dropped: 0,
        clients: 0,
        probes: Vec::with_capacity(t.session.probes.len()),
        flags: 0,
        bpf_cpu_ppm: 0,
        detached: Vec::with_capacity(t.session.probes.len()),
        missed: Vec::with_capacity(t.session.probes.len()),
        link: wire::LinkHealth::default(),
        shed: Vec::with_capacity(t.session.probes.len()),
        dropped: Vec::with_capacity(t.session.probes.len()),
    });
    s.boot_id = t.session.boot_id;
    s.time_ns = t.report.time_ns;
    s.seq = t.report.seq;
    s.uptime_ns = t.report.time_ns.saturating_sub(t.session.start_ns);
    s.frames_dropped = dropped;
    s.bytes_dropped = dropped_bytes;
    s.clients = q.clients();
    s.probes.clear();
    s.probes.extend(t.read_errors.iter().enumerate().map(|(i, &e)| {
        let p = t.report.probes.get(i);
        ProbeHealth {
            id: i as u16,
            read_errors: e,
            run_count: p.map_or(0, |p| p.total_bpf_runs),
            run_time_ns: p.map_or(0, |p| p.total_bpf_run_time_ns),
        }
    }));
    s.flags = status_flags(t.report);
    s.bpf_cpu_ppm = (t.report.agent.bpf_cpu_percent * 10_000.0).round().clamp(0.0, u32::MAX as f64) as u32;
    s.detached.clear();
    s.detached.extend(
        t.report
            .probes
            .iter()
            .enumerate()
            .filter(|(_, p)| p.state == ProbeState::DetachedOverBudget)
            .map(|(i, _)| i as u16),
    );
    // Ids ascending, as the encoder's split by part expects.
    s.missed.clear();
    s.missed.extend(
        t.report
            .probes
            .iter()
            .enumerate()
            .filter(|(_, p)| p.total_bpf_missed > 0)
            .map(|(i, p)| ProbeMissed { id: i as u16, missed: p.total_bpf_missed }),
    );
    s.link = link;
    s.shed.clear();
    s.shed.extend(
        shed.iter().enumerate().filter(|(_, &n)| n > 0).map(|(i, &n)| wire::ProbeShed { id: i as u16, alerts_shed: n }),
    );
    // Records lost before any output (token bucket, kernel buffer, agent
    // queue): the summaries on the wire do not carry them.
    s.dropped.clear();
    s.dropped.extend(
        t.report
            .probes
            .iter()
            .enumerate()
            .filter(|(_, p)| p.total_alerts_dropped > 0)
            .map(|(i, p)| wire::ProbeDropped { id: i as u16, alerts_dropped: p.total_alerts_dropped }),
    );
    if let Err(e) = enc.status(s, &mut |f| {
        buf.extend_from_slice(f);
        lens.push(f.len());
    }) {
        log::warn!("status frame: {e}");
    }
    s.flags
}

/// Loops frames for this interval into `buf`/`lens` (none without
/// loops): before the interval's summary, whose seq they carry, so a
/// receiver hands them out with it (revision 12).
pub(super) fn loops_into(t: &Tick<'_>, enc: &mut Encoder, buf: &mut Vec<u8>, lens: &mut Vec<usize>) {
    let r = t.report;
    let head = (t.session.boot_id, r.seq, r.time_ns);
    if let Err(e) = enc.loops(head, &r.loops, (r.loops_unlisted, r.agent.loops_unwatched), &mut |f| {
        buf.extend_from_slice(f);
        lens.push(f.len());
    }) {
        log::warn!("loops frame: {e}");
    }
}

impl FrameRender {
    fn status_frames(&mut self, t: &Tick<'_>, q: &Queue) {
        self.last_flags = status_into(
            &mut self.status,
            t,
            q,
            &mut self.enc,
            &mut self.buf,
            &mut self.lens,
            wire::LinkHealth::default(),
            &[],
        );
    }

    /// New rows of a grown table: a Hello with only them (receivers keep
    /// the union by id); the whole table is what late joiners get.
    fn table_update(&mut self, t: &Tick<'_>, q: &Queue) {
        let full = t.session.hello();
        let old = self.hello.as_ref().map_or(0, |h| h.probe_count as usize);
        let mut update = full.clone();
        update.probes.drain(..old.min(update.probes.len()));
        self.buf.clear();
        self.lens.clear();
        let (buf, lens) = (&mut self.buf, &mut self.lens);
        if let Err(e) = self.enc.hello(&update, &mut |f| {
            buf.extend_from_slice(f);
            lens.push(f.len());
        }) {
            log::warn!("hello frame: {e}");
        }
        q.push_group(&self.buf, &self.lens);
        self.buf.clear();
        self.lens.clear();
        let (buf, lens) = (&mut self.buf, &mut self.lens);
        let _ = self.enc.hello(&full, &mut |f| {
            buf.extend_from_slice(f);
            lens.push(f.len());
        });
        q.set_hello(&self.buf);
        self.hello = Some(full);
    }

    pub fn render(&mut self, t: &Tick<'_>, q: &Queue) {
        // Room for the largest summary these probes can produce (every
        // bucket non-zero, 10-byte varints), so that histograms filling up
        // over hours never make the buffers grow mid-run.
        let n = t.totals.len().max(1);
        let want = n * (latmon_core::hist::BUCKETS * 11 + 256) + 4096;
        if self.buf.capacity() < want {
            self.buf.reserve(want - self.buf.len());
            self.lens.reserve(n * (want / wire::FRAME_BUDGET + 8));
        }
        let r = t.report;
        let names = (names_of(t.session), t.session.probes.len());
        if self.names.is_some_and(|(h, n)| n > names.1 || names_of_first(t.session, n) != h) {
            self.hello = None;
            if let Some(b) = self.budget.as_deref_mut() {
                b.renamed();
            }
        }
        self.names = Some(names);
        if let Some(b) = self.budget.as_deref_mut() {
            let flags_changed = status_flags(r) != self.last_flags;
            let (status, last_flags) = (&mut self.status, &mut self.last_flags);
            b.render(
                t,
                q,
                &mut self.enc,
                &mut self.buf,
                &mut self.lens,
                flags_changed,
                &mut |t, enc, buf, lens, link, shed| {
                    *last_flags = status_into(status, t, q, enc, buf, lens, link, shed);
                },
            );
            if r.last {
                let link = b.health(t.session.interval_ns);
                self.buf.clear();
                self.lens.clear();
                self.last_flags =
                    status_into(&mut self.status, t, q, &mut self.enc, &mut self.buf, &mut self.lens, link, b.shed());
                q.push_group(&self.buf, &self.lens);
            }
            return;
        }
        // A reload that changed the probe table is a new session (new
        // boot id): announce it at once. A table that grew within the
        // session (a family's new series, appended with new ids) sends
        // only the new rows (no Hello storm); the whole table follows on
        // the timer.
        let new_session = self
            .hello
            .as_ref()
            .is_some_and(|h| h.boot_id != t.session.boot_id || h.probe_count as usize > t.session.probes.len());
        if new_session {
            self.hello = None;
        }
        if q.take_resync() {
            // The link was (re)opened or a receiver asked: the whole table now.
            self.hello = None;
        }
        let grown = self.hello.as_ref().is_some_and(|h| (h.probe_count as usize) < t.session.probes.len());
        if grown {
            self.table_update(t, q);
        }
        let due = self.last_hello_ns.is_none_or(|l| r.time_ns.saturating_sub(l) >= HELLO_PERIOD_NS)
            || self.since_hello >= HELLO_EVERY_SUMMARIES
            || new_session
            || self.hello.is_none();
        if due {
            let first = self.hello.is_none();
            let hello = self.hello.get_or_insert_with(|| t.session.hello());
            self.buf.clear();
            self.lens.clear();
            let (buf, lens) = (&mut self.buf, &mut self.lens);
            if let Err(e) = self.enc.hello(hello, &mut |f| {
                buf.extend_from_slice(f);
                lens.push(f.len());
            }) {
                log::warn!("hello frame: {e}");
            }
            if first {
                q.set_hello(&self.buf);
            }
            self.status_frames(t, q);
            q.push_group(&self.buf, &self.lens);
            self.last_hello_ns = Some(r.time_ns);
            self.since_hello = 0;
        } else if status_flags(r) != self.last_flags {
            // Budget state changed: never wait for the next Hello to say so.
            self.buf.clear();
            self.lens.clear();
            self.status_frames(t, q);
            q.push_group(&self.buf, &self.lens);
        }
        for a in &r.alert_records {
            let id = a.id.0;
            self.buf.clear();
            self.lens.clear();
            let (buf, lens) = (&mut self.buf, &mut self.lens);
            if self
                .enc
                .alert(t.session.boot_id, id, a, &mut |f| {
                    buf.extend_from_slice(f);
                    lens.push(f.len());
                })
                .is_ok()
            {
                q.push_group(&self.buf, &self.lens);
            }
        }
        // A summary goes whole or not at all: half of one is wasted link
        // time. The interval's loops go first, in its group.
        self.buf.clear();
        self.lens.clear();
        loops_into(t, &mut self.enc, &mut self.buf, &mut self.lens);
        let h = SummaryHeader { seq: r.seq, boot_id: t.session.boot_id, time_ns: r.time_ns, last: r.last };
        let (buf, lens) = (&mut self.buf, &mut self.lens);
        match self.enc.summary(h, t.totals, &mut |f| {
            buf.extend_from_slice(f);
            lens.push(f.len());
        }) {
            Ok(_) => {
                q.push_group(&self.buf, &self.lens);
            }
            Err(e) => log::warn!("summary frame: {e}"),
        }
        self.since_hello += 1;
        if r.last {
            self.buf.clear();
            self.lens.clear();
            self.status_frames(t, q);
            q.push_group(&self.buf, &self.lens);
        }
    }
}

#[cfg(test)]
mod rename_tests {
    use super::*;
    use crate::sinks::queue::{Pop, Queue};
    use latmon_core::hist::Hist;
    use latmon_core::session::Session;
    use latmon_core::summary::{ProbeInfo, ProbeReport};

    /// A lock series is born `lock:0x...` and renamed when its symbol
    /// arrives (same id): the next interval carries a Hello with the new
    /// name, which receivers merge by id. The Hello was cached: receivers
    /// kept the address for good.
    #[test]
    fn a_renamed_probe_sends_the_table_again_with_its_new_name() {
        let info = |name: &str| ProbeInfo {
            name: name.into(),
            kind: latmon_core::ident::Family::Lock,
            attach: latmon_core::ident::Mechanism::TpBtf,
            mode: "m".into(),
            btf_mode: latmon_core::ident::BtfMode::CoRe,
            wait: Default::default(),
        };
        let mut session = Session {
            board: "b".into(),
            kernel: "k".into(),
            boot_id: 3,
            start_ns: 0,
            interval_ns: 1_000_000_000,
            probes: vec![info("lock"), info("lock:0x55d0c0a05000")],
            failed: Vec::new(),
            thresholds_ns: Vec::new(),
            certificate: None,
        };
        let totals = vec![Hist::default(); 2];
        let q = Queue::new(1 << 20);
        let mut f = FrameRender::default();
        let hellos = |session: &Session, seq: u64, f: &mut FrameRender| {
            let report = IntervalReport {
                seq,
                time_ns: seq * 1_000_000_000,
                interval_ns: 1_000_000_000,
                probes: (0..2).map(|p| ProbeReport::new(&session.probes[p], &totals[p], &totals[p])).collect(),
                ..Default::default()
            };
            f.render(&Tick { session, report: &report, totals: &totals, read_errors: &[0, 0] }, &q);
            let (mut data, mut lens) = (Vec::new(), Vec::new());
            let mut names = Vec::new();
            if q.pop(&mut data, &mut lens, std::time::Duration::ZERO) == Pop::Data {
                latmon_core::wire::FrameDecoder::new().feed(&data, &mut |r| {
                    if let Ok(wire::Frame::Hello(h)) = r {
                        names.extend(h.probes.iter().map(|p| p.name.clone()));
                    }
                });
            }
            names
        };
        assert!(hellos(&session, 1, &mut f).contains(&"lock:0x55d0c0a05000".to_string()), "the first table");
        assert!(hellos(&session, 2, &mut f).is_empty(), "no table while nothing changed");
        session.probes[1].name = "lock:ctrl_mutex".into();
        assert_eq!(hellos(&session, 3, &mut f), ["lock", "lock:ctrl_mutex"], "the renamed table at once");
    }
}
