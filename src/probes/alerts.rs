// SPDX-License-Identifier: MIT
//! Threshold alert records, user-space half (bpf/alerts.bpf.h is the
//! kernel half): a reader thread per BPF object moves records from its ring
//! (or perf) buffer into a bounded queue that the agent drains each
//! interval without ever blocking on the kernel; kernel-side drops (token
//! bucket, full buffer) and queue overflows are counted per alert id.
//!
//! Records, drop counters and anatomies are read through the one Rust type
//! set of bpf/latmon.h's structs (`crate::bpf::shared::types`, build.rs).

use std::collections::VecDeque;
use std::mem::size_of;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use latmon_core::anatomy::{Anatomy, Cause, CauseKind, Policy};
use latmon_core::causes::CauseSummary;
use latmon_core::hist::Hist;
use latmon_core::summary::AlertRecord;
use libbpf_rs::{MapCore, MapHandle, MapMut, OpenMapMut, PerfBufferBuilder, RingBufferBuilder};

use super::common::libbpf_error;
use super::common::LoadError;
use super::tallies::{CauseTallies, IrqNames, TaskComms};
use super::ReadError;
use crate::bpf::limits::{
    ALERT_PERF_PAGES, ALERT_QUEUE, ANAT_IRQS, ANAT_POLICY_FAIR, ANAT_POLICY_RT, ANAT_POLICY_UNSET, ANAT_TASKS,
    COMM_LEN, SOFTIRQ_VECS,
};
use crate::bpf::shared::types::{
    latmon_alert, latmon_alert_anat, latmon_alert_drops, latmon_anatomy, latmon_cause_tally,
};

// SAFETY: #[repr(C)] structs of integers generated from bpf/latmon.h;
// every bit pattern is valid.
unsafe impl plain::Plain for latmon_alert {}
unsafe impl plain::Plain for latmon_alert_drops {}
unsafe impl plain::Plain for latmon_anatomy {}
unsafe impl plain::Plain for latmon_cause_tally {}
const _: () = assert!(size_of::<latmon_alert>() == ALERT_RECORD_BYTES);
const _: () = assert!(size_of::<latmon_alert_drops>() == 16);
const _: () = assert!(size_of::<latmon_anatomy>() == ANATOMY_BYTES);
const _: () = assert!(size_of::<latmon_alert_anat>() == ALERT_RECORD_BYTES + ANATOMY_BYTES);

/// The record layout user space decodes must be the one in latmon.h.
pub(crate) const ALERT_RECORD_BYTES: usize = 8 + 8 + 4 * 4 + COMM_LEN;
/// struct latmon_anatomy, appended to an alert record that has one.
pub(crate) const ANATOMY_BYTES: usize =
    3 * 8 + 8 * SOFTIRQ_VECS + (8 + 4 * 4 + COMM_LEN) * ANAT_TASKS + 16 * ANAT_IRQS + 2 * 4;

/// How long the alert reader waits in the kernel before re-checking its
/// stop flag (records wake it at once; this only bounds shutdown).
const ALERT_POLL: Duration = Duration::from_millis(100);

/// Environment override of the alert transport, for tests and for kernels
/// whose ring buffer is present but unwanted: `ringbuf` or `perf`
/// (src/rtsafety.rs chooses with it).
pub use crate::rtsafety::ALERT_BUFFER_ENV;

/// Environment switch for cost measurements: `LATMON_ANATOMY=off` sends
/// alert records without anatomies (and loads none of its programs).
pub const ANATOMY_ENV: &str = "LATMON_ANATOMY";

/// Account anatomies for this probe's alerts (timer, chain, runq): a
/// threshold is set, the environment does not switch them off, and the
/// kernel has what bpf/anatomy.bpf.h needs (else records go without).
pub(crate) fn anatomy_wanted(spec: &crate::config::ProbeSpec) -> bool {
    spec.threshold.is_some() && std::env::var(ANATOMY_ENV).as_deref() != Ok("off") && super::features::percpu_lookup()
}

/// Environment switch for cost measurements: `LATMON_CAUSES=off` leaves
/// out the per-interval cause tally (bpf/causes.bpf.h), anatomies kept.
pub const CAUSES_ENV: &str = "LATMON_CAUSES";

/// Tally the causes of this probe's alerts (anatomies are accounted and
/// the environment does not switch the tally off).
pub(crate) fn causes_wanted(spec: &crate::config::ProbeSpec) -> bool {
    anatomy_wanted(spec) && std::env::var(CAUSES_ENV).as_deref() != Ok("off")
}

/// The ring buffer carries the alert records: the kernel has one, it is
/// safe here (src/rtsafety.rs: its lock sleeps on PREEMPT_RT before
/// 8b62645b09f8) and LATMON_ALERT_BUFFER does not say `perf`; the
/// perf buffer otherwise.
pub(crate) fn want_ringbuf() -> bool {
    let choice = super::common::alert_buffer_here();
    if !choice.ringbuf {
        log::debug!("alert records: {}", choice.path);
        return false;
    }
    super::features::try_ringbuf().is_ok()
}

impl latmon_alert_drops {
    fn total(&self) -> u64 {
        self.rate_limited + self.buffer_full
    }
}

/// A kernel comm (NUL-terminated unless full) as text, lossy UTF-8.
fn comm_text(comm: &[i8]) -> String {
    let bytes: Vec<u8> = comm.iter().map(|&c| c as u8).take_while(|&c| c != 0).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

impl latmon_alert {
    /// The summary's record of this alert.
    fn record(&self) -> AlertRecord {
        AlertRecord {
            // The agent stamps the id as it drains the probe's records:
            // the record's row, which names it at the outputs.
            id: latmon_core::ident::ProbeId::NONE,
            pid: self.pid,
            tid: self.tid,
            comm: comm_text(&self.comm),
            cpu: self.cpu,
            latency_ns: self.latency_ns,
            time_ns: self.time_ns,
            anatomy: None,
            cycle: None,
        }
    }
}

/// An anatomy's parts as causes (see `latmon_anatomy::parts`), for
/// families that add parts of their own (cycle).
pub(crate) fn anatomy_parts(a: &latmon_anatomy, out: &mut Vec<Cause>) {
    a.parts(out);
}

impl latmon_anatomy {
    /// The parts as causes (IRQ names left empty: the feed names them),
    /// before `Anatomy::from_parts`.
    fn parts(&self, out: &mut Vec<Cause>) {
        for t in self.task.iter().filter(|t| t.ns > 0) {
            out.push(Cause {
                kind: CauseKind::Task {
                    comm: comm_text(&t.comm),
                    pid: t.pid,
                    policy: Policy::from_code(t.policy),
                    prio: t.prio,
                },
                ns: t.ns,
            });
        }
        out.push(Cause { kind: CauseKind::TaskRest, ns: self.task_rest_ns });
        for i in self.irq.iter().filter(|i| i.ns > 0) {
            out.push(Cause { kind: CauseKind::Irq { irq: i.irq, name: String::new() }, ns: i.ns });
        }
        out.push(Cause { kind: CauseKind::IrqRest, ns: self.irq_rest_ns });
        for (v, &ns) in self.softirq_ns.iter().enumerate() {
            out.push(Cause { kind: CauseKind::Softirq { vector: v as u32 }, ns });
        }
        out.push(Cause { kind: CauseKind::TimerIrqDelay, ns: self.timer_irq_delay_ns });
    }
}

/// Decodes one alert record of an object with `ids` alert ids (its
/// object-local id, below `ids`, and the record): `decode_alert`, or
/// `decode_alert_anat` for objects that append anatomies.
pub(crate) type DecodeAlert = fn(&[u8], usize) -> Option<(usize, AlertRecord)>;

/// Alert records waiting for the agent, per probe id; bounded in total.
#[derive(Default)]
struct AlertQueue {
    per_probe: Vec<VecDeque<AlertRecord>>,
    held: usize,
    /// Records dropped because the agent had not drained the queue.
    dropped: Vec<u64>,
    /// Records that could not be decoded (wrong size, unknown probe id).
    bad: u64,
}

/// The alert reader thread and its queue.
pub(crate) struct AlertFeed {
    queue: Arc<Mutex<AlertQueue>>,
    stop: Arc<AtomicBool>,
    /// Flushes asked for, and done by the reader (see `flush`).
    flush: Arc<(AtomicU64, AtomicU64)>,
    thread: Option<JoinHandle<()>>,
    /// The comms of the tasks records named (for the cause tallies).
    comms: Arc<Mutex<TaskComms>>,
}

impl AlertFeed {
    pub(crate) fn spawn(map: MapHandle, ringbuf: bool, n: usize, decode: DecodeAlert) -> Result<Self, LoadError> {
        let queue = Arc::new(Mutex::new(AlertQueue {
            per_probe: vec![VecDeque::new(); n],
            dropped: vec![0; n],
            ..Default::default()
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::sync_channel::<Result<(), LoadError>>(1);
        let flush = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
        let comms = Arc::new(Mutex::new(TaskComms::default()));
        let (q, st, fl, cm) = (Arc::clone(&queue), Arc::clone(&stop), Arc::clone(&flush), Arc::clone(&comms));
        // After each wait: consume what is there if a flush was asked for.
        let flushed = move |consume: &dyn Fn()| {
            let asked = fl.0.load(Ordering::Acquire);
            if asked != fl.1.load(Ordering::Relaxed) {
                consume();
                fl.1.store(asked, Ordering::Release);
            }
        };
        let thread = std::thread::Builder::new()
            .name("latmon-alerts".into())
            .spawn(move || {
                let mut irq_names = IrqNames::default();
                let mut push = move |data: &[u8]| {
                    push_record(&q, n, decode, data, &mut |rec| {
                        irq_names.name(rec);
                        name_policies(rec);
                        if let Ok(mut c) = cm.lock() {
                            c.note(rec);
                        }
                    });
                };
                if ringbuf {
                    let mut b = RingBufferBuilder::new();
                    let built = b
                        .add(&map, move |d: &[u8]| {
                            push(d);
                            0
                        })
                        .map(|_| ())
                        .and_then(|()| b.build());
                    let rb = match built {
                        Ok(rb) => rb,
                        Err(e) => {
                            let _ = ready_tx.send(Err(libbpf_error("ring buffer", &e)));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok(()));
                    while !st.load(Ordering::Relaxed) {
                        let _ = rb.poll(ALERT_POLL);
                        flushed(&|| drop(rb.consume()));
                    }
                    let _ = rb.consume();
                } else {
                    let built = PerfBufferBuilder::new(&map)
                        .pages(ALERT_PERF_PAGES)
                        .sample_cb(move |_cpu, d: &[u8]| push(d))
                        .lost_cb(|cpu, n| log::warn!("alerts: perf buffer lost {n} alert records on CPU {cpu}"))
                        .build();
                    let pb = match built {
                        Ok(pb) => pb,
                        Err(e) => {
                            let _ = ready_tx.send(Err(libbpf_error("perf buffer", &e)));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok(()));
                    while !st.load(Ordering::Relaxed) {
                        let _ = pb.poll(ALERT_POLL);
                        flushed(&|| drop(pb.consume()));
                    }
                    let _ = pb.consume();
                }
            })
            .map_err(|e| LoadError::Os(format!("spawn alert reader: {e}")))?;
        let feed = AlertFeed { flush, queue, stop, thread: Some(thread), comms };
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(feed),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(LoadError::Os("alert reader thread ended early".into())),
        }
    }

    /// Wait (at most a second) until the reader has consumed every record
    /// the kernel wrote before this call: the final summary then carries
    /// the records of every alert it counts.
    pub(crate) fn flush(&self) {
        let asked = self.flush.0.fetch_add(1, Ordering::AcqRel) + 1;
        let until = std::time::Instant::now() + Duration::from_secs(1);
        while self.flush.1.load(Ordering::Acquire) < asked && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    pub(crate) fn drain(&self, id: u32, out: &mut Vec<AlertRecord>) {
        let Ok(mut q) = self.queue.lock() else { return };
        if q.bad > 0 {
            log::warn!("alerts: {} undecodable alert records skipped", q.bad);
            q.bad = 0;
        }
        let Some(records) = q.per_probe.get_mut(id as usize) else {
            return;
        };
        let n = records.len();
        out.extend(records.drain(..));
        q.held -= n;
    }

    pub(crate) fn queue_dropped(&self, id: u32) -> u64 {
        self.queue.lock().ok().and_then(|q| q.dropped.get(id as usize).copied()).unwrap_or(0)
    }
}

impl Drop for AlertFeed {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A task cause of the no-BTF build carries its policy's class
/// (ANAT_POLICY_RT, _FAIR: sched_switch's record has the priority only)
/// or nothing (ANAT_POLICY_UNSET). The policy `now` the thread has when
/// the record is read, if it is of that class; None: the class stays
/// (`unknown`). Policies rarely change, but this is the thread's policy
/// when the record is read, not at the wait.
fn policy_of_class(class: u32, now: Policy) -> Option<Policy> {
    let fits = match class as usize {
        ANAT_POLICY_RT => matches!(now, Policy::Fifo | Policy::Rr),
        ANAT_POLICY_FAIR => matches!(now, Policy::Other | Policy::Batch | Policy::Idle),
        ANAT_POLICY_UNSET => !matches!(now, Policy::Unknown(_)),
        _ => false,
    };
    fits.then_some(now)
}

/// Thread `tid`'s policy now, and its priority as anatomies give it
/// (rt_priority for FIFO and RR, else the nice value); None: it is gone.
pub(crate) fn thread_sched(tid: u32) -> Option<(Policy, i32)> {
    let tid = libc::pid_t::try_from(tid).ok()?;
    // SAFETY: plain syscalls on a valid pointer; errors are checked.
    unsafe {
        let pol = libc::sched_getscheduler(tid);
        if pol < 0 {
            return None;
        }
        let policy = Policy::from_code((pol & !libc::SCHED_RESET_ON_FORK) as u32);
        let prio = match policy {
            Policy::Fifo | Policy::Rr => {
                // Zeroed: musl's sched_param has more fields than glibc's.
                let mut p: libc::sched_param = std::mem::zeroed();
                if libc::sched_getparam(tid, &mut p) != 0 {
                    return None;
                }
                p.sched_priority
            }
            Policy::Deadline => 0,
            _ => {
                *libc::__errno_location() = 0;
                let nice = libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t);
                if nice == -1 && *libc::__errno_location() != 0 {
                    return None;
                }
                nice
            }
        };
        Some((policy, prio))
    }
}

/// The policies of a no-BTF anatomy's task causes (see policy_of_class).
fn name_policies(rec: &mut AlertRecord) {
    let Some(a) = rec.anatomy.as_mut() else { return };
    for c in &mut a.causes {
        let CauseKind::Task { pid, policy, prio, .. } = &mut c.kind else { continue };
        let Policy::Unknown(class) = *policy else { continue };
        if ![ANAT_POLICY_RT, ANAT_POLICY_FAIR, ANAT_POLICY_UNSET].contains(&(class as usize)) {
            continue;
        }
        let Some((now, now_prio)) = thread_sched(*pid) else { continue };
        if let Some(p) = policy_of_class(class, now) {
            *policy = p;
            if class as usize == ANAT_POLICY_UNSET {
                *prio = now_prio;
            }
        }
    }
}

/// Decode one record (never panics on kernel data), name its IRQs, and
/// queue it.
fn push_record(
    queue: &Mutex<AlertQueue>,
    ids: usize,
    decode: DecodeAlert,
    data: &[u8],
    name_irqs: &mut dyn FnMut(&mut AlertRecord),
) {
    let Some((id, mut rec)) = decode(data, ids) else {
        if let Ok(mut q) = queue.lock() {
            q.bad += 1;
        }
        return;
    };
    name_irqs(&mut rec);
    let Ok(mut q) = queue.lock() else { return };
    if q.held >= ALERT_QUEUE {
        q.dropped[id] += 1;
        return;
    }
    q.per_probe[id].push_back(rec);
    q.held += 1;
}

/// A kernel alert record as the summary's `AlertRecord` (lossy UTF-8
/// comm), with its object-local id; None for an id of `ids` or more.
pub(crate) fn decode_alert(data: &[u8], ids: usize) -> Option<(usize, AlertRecord)> {
    let mut raw = latmon_alert::default();
    // Perf buffer samples may carry trailing padding; never less.
    plain::copy_from_bytes(&mut raw, data.get(..ALERT_RECORD_BYTES)?).ok()?;
    let id = raw.probe_id as usize;
    (id < ids).then(|| (id, raw.record()))
}

/// As decode_alert, for objects that append an anatomy to some records
/// (struct latmon_alert_anat): a record that long has one.
pub(crate) fn decode_alert_anat(data: &[u8], ids: usize) -> Option<(usize, AlertRecord)> {
    let (id, mut rec) = decode_alert(data, ids)?;
    if let Some(bytes) = data.get(ALERT_RECORD_BYTES..ALERT_RECORD_BYTES + ANATOMY_BYTES) {
        let mut raw = latmon_anatomy::default();
        plain::copy_from_bytes(&mut raw, bytes).ok()?;
        let mut parts = Vec::with_capacity(ANAT_TASKS + ANAT_IRQS + SOFTIRQ_VECS + 3);
        raw.parts(&mut parts);
        rec.anatomy = Some(Anatomy::from_parts(rec.latency_ns, raw.cpu_woken, raw.cpu_ran, parts));
    }
    Some((id, rec))
}

/// Before load: create only the alert buffer in use (`ringbuf`: `ring`,
/// the object's `alerts`; else `perf`, its `alerts_perf`) of an open
/// skeleton that includes bpf/alerts.bpf.h; the BPF side picks it by its
/// `cfg.common.use_ringbuf`.
pub(crate) fn keep_alert_buffer<'a>(
    ring: &mut OpenMapMut<'a>,
    perf: &mut OpenMapMut<'a>,
    ringbuf: bool,
) -> Result<(), LoadError> {
    if ringbuf { perf } else { ring }.set_autocreate(false).map_err(|e| libbpf_error("alert buffer", &e))
}

/// The maps of a loaded object that includes bpf/alerts.bpf.h.
pub(crate) struct AlertMaps<'a> {
    /// `alert_drops`, per alert id: its max_entries is the object's
    /// number of alert ids (LATMON_ALERT_IDS).
    pub drops: &'a MapMut<'a>,
    /// `alerts` (ring buffer) and `alerts_perf`; `keep_alert_buffer`
    /// created one of them.
    pub ring: &'a MapMut<'a>,
    pub perf: &'a MapMut<'a>,
}

/// A family's alert half, read the same way by every family: the
/// records the kernel dropped per alert id and, when the probe has a
/// threshold, the reader of its records.
pub(crate) struct Alerts {
    feed: Option<AlertFeed>,
    drops: super::PerCpu<latmon_alert_drops>,
    /// Objects that tally their alerts' causes (bpf/causes.bpf.h), when
    /// that is on.
    causes: Option<CauseTallies>,
}

impl Alerts {
    /// The alert half of a loaded object; with `records`, its reader too,
    /// decoding records with `decode`. `ids`: how many alert ids the
    /// object uses (None: as many as its drop counters); a record of
    /// another id is counted as undecodable.
    pub(crate) fn new(
        maps: AlertMaps<'_>,
        records: bool,
        ringbuf: bool,
        ids: Option<usize>,
        decode: DecodeAlert,
    ) -> Result<Self, ReadError> {
        let drops = super::PerCpu::new(maps.drops)?;
        if !records {
            return Ok(Alerts { feed: None, drops, causes: None });
        }
        let map = if ringbuf { maps.ring } else { maps.perf };
        let handle = MapHandle::try_from(map).map_err(|e| ReadError::libbpf("alert buffer", &e))?;
        let ids = ids.unwrap_or(maps.drops.max_entries() as usize);
        let feed = AlertFeed::spawn(handle, ringbuf, ids, decode).map_err(|e| ReadError::Feed(e.to_string()))?;
        Ok(Alerts { feed: Some(feed), drops, causes: None })
    }

    /// Read the object's cause tallies too (its `cause_tally` and
    /// `cause_epoch` maps; the object's `tally_causes` is on).
    pub(crate) fn with_causes(mut self, tally: &dyn MapCore, epoch: &dyn MapCore) -> Result<Self, ReadError> {
        let comms = self.feed.as_ref().map(|f| Arc::clone(&f.comms));
        self.causes = Some(CauseTallies::new(tally, epoch, comms)?);
        Ok(self)
    }

    /// The causes of id `id`'s alerted time since the last call into
    /// `out` (None when the object tallies none).
    pub(crate) fn causes(&mut self, id: u32, out: &mut Option<CauseSummary>) -> Result<(), ReadError> {
        match &mut self.causes {
            Some(t) => t.read(id, out.get_or_insert_with(CauseSummary::default)),
            None => {
                *out = None;
                Ok(())
            }
        }
    }

    /// Whether records are read (a threshold is set).
    pub(crate) fn records(&self) -> bool {
        self.feed.is_some()
    }

    /// Alert records of id `id` lost on the way: in the kernel (token
    /// bucket, full buffer) and in the queue (agent too slow).
    pub(crate) fn dropped(&mut self, id: u32) -> Result<u64, ReadError> {
        let mut n = 0;
        self.drops.read(id, |d| n += d.total())?;
        Ok(n + self.feed.as_ref().map_or(0, |f| f.queue_dropped(id)))
    }

    /// A histogram (`hist` reads it into `out`) with the records of alert
    /// id `id` lost on the way.
    pub(crate) fn read(
        &mut self,
        id: u32,
        out: &mut Hist,
        hist: impl FnOnce(&mut Hist) -> Result<(), ReadError>,
    ) -> Result<(), ReadError> {
        // Records refused are counted after their event (BPF counts the
        // alert, then sends or drops the record): reading the drops first
        // keeps every counted drop's event in the histogram read after.
        let dropped = self.dropped(id)?;
        hist(out)?;
        out.alerts_dropped = dropped;
        Ok(())
    }

    pub(crate) fn drain(&self, id: u32, out: &mut Vec<AlertRecord>) {
        if let Some(feed) = &self.feed {
            feed.drain(id, out);
        }
    }

    pub(crate) fn flush(&self) {
        if let Some(feed) = &self.feed {
            feed.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(data: &[u8], ids: usize) -> Option<(usize, AlertRecord)> {
        decode_alert(data, ids)
    }

    fn raw(id: u32, comm: &[u8]) -> Vec<u8> {
        let mut a = latmon_alert {
            time_ns: 5,
            latency_ns: 2_000_000,
            probe_id: id,
            pid: 7,
            tid: 8,
            cpu: 1,
            ..Default::default()
        };
        for (d, s) in a.comm.iter_mut().zip(comm) {
            *d = *s as i8;
        }
        // SAFETY: Plain struct viewed as bytes.
        unsafe { plain::as_bytes(&a) }.to_vec()
    }

    #[test]
    fn alert_records_decode_with_lossy_comm_and_never_panic() {
        let ids = 2;
        let (id, r) = decode(&raw(1, b"ctrl\xffloop"), ids).unwrap();
        assert_eq!((id, r.pid, r.tid, r.cpu), (1, 7, 8, 1));
        assert_eq!(r.comm, "ctrl\u{fffd}loop");
        assert_eq!(r.latency_ns, 2_000_000);
        // A full 16-byte comm without NUL stays within the array.
        assert_eq!(decode(&raw(0, b"0123456789abcdef"), ids).unwrap().1.comm, "0123456789abcdef");
        // Unknown probe id, short record: rejected, not a panic.
        assert!(decode(&raw(2, b"x"), ids).is_none());
        assert!(decode(&raw(0, b"x")[..20], ids).is_none());
        // Perf samples padded past the struct still decode.
        let mut padded = raw(0, b"x");
        padded.extend([0u8; 4]);
        assert!(decode(&padded, ids).is_some());
    }

    #[test]
    fn the_queue_is_bounded_and_counts_what_it_drops() {
        let q = Mutex::new(AlertQueue { per_probe: vec![VecDeque::new()], dropped: vec![0], ..Default::default() });
        for _ in 0..ALERT_QUEUE + 3 {
            push_record(&q, 1, decode, &raw(0, b"x"), &mut |_| {});
        }
        push_record(&q, 1, decode, b"short", &mut |_| {});
        let q = q.into_inner().unwrap();
        assert_eq!((q.held, q.dropped[0], q.bad), (ALERT_QUEUE, 3, 1));
    }

    #[test]
    fn a_no_btf_policy_class_takes_only_a_policy_of_that_class() {
        let (rt, fair, unset) = (ANAT_POLICY_RT as u32, ANAT_POLICY_FAIR as u32, ANAT_POLICY_UNSET as u32);
        assert_eq!(policy_of_class(rt, Policy::Fifo), Some(Policy::Fifo));
        assert_eq!(policy_of_class(rt, Policy::Rr), Some(Policy::Rr));
        // The thread changed class since the wait: the class stays.
        assert_eq!(policy_of_class(rt, Policy::Other), None);
        assert_eq!(policy_of_class(fair, Policy::Batch), Some(Policy::Batch));
        assert_eq!(policy_of_class(fair, Policy::Fifo), None);
        assert_eq!(policy_of_class(unset, Policy::Deadline), Some(Policy::Deadline));
        assert_eq!(policy_of_class(unset, Policy::Unknown(9)), None);
        // A real policy code is never rewritten.
        assert_eq!(policy_of_class(1, Policy::Fifo), None);
    }

    #[test]
    fn name_policies_reads_the_threads_policy_for_a_class() {
        // This thread: SCHED_OTHER at nice 0 (the test harness's).
        let me = unsafe { libc::gettid() } as u32;
        let task = |policy: u32, prio: i32| Cause {
            kind: CauseKind::Task { comm: "t".into(), pid: me, policy: Policy::from_code(policy), prio },
            ns: 5,
        };
        let mut rec = AlertRecord {
            id: latmon_core::ident::ProbeId::NONE,
            pid: 1,
            tid: 1,
            comm: "x".into(),
            cpu: 0,
            latency_ns: 100,
            time_ns: 1,
            anatomy: Some(Anatomy::from_parts(
                100,
                0,
                0,
                vec![
                    task(ANAT_POLICY_FAIR as u32, 0),
                    task(ANAT_POLICY_RT as u32, 50),
                    task(ANAT_POLICY_UNSET as u32, 0),
                ],
            )),
            cycle: None,
        };
        let Some((now, nice)) = thread_sched(me) else { panic!("this thread exists") };
        name_policies(&mut rec);
        let got: Vec<(Policy, i32)> = rec
            .anatomy
            .unwrap()
            .causes
            .iter()
            .filter_map(|c| match &c.kind {
                CauseKind::Task { policy, prio, .. } => Some((*policy, *prio)),
                _ => None,
            })
            .collect();
        assert_eq!(now, Policy::Other);
        assert!(got.contains(&(Policy::Other, 0)), "{got:?}");
        assert!(got.contains(&(Policy::Unknown(ANAT_POLICY_RT as u32), 50)), "an RT class stays: {got:?}");
        assert!(got.contains(&(Policy::Other, nice)), "unset takes policy and nice: {got:?}");
    }
}
