// SPDX-License-Identifier: MIT
//! `lock` (bpf/lock.bpf.c): the futex waits of named threads, from the
//! wait's start to the thread running again. The family line is every
//! wait; one series per lock, `NAME:SYMBOL` when the futex word lies in a
//! data symbol of the process's executable or libraries (src/probes/
//! elfsyms.rs), else `NAME:0xADDR`; locks beyond LOCK_SERIES - 1 in
//! `NAME:overflow`. With `threshold=`, each longer wait sends a record
//! whose causes name the owner (its own time on a CPU), the tasks that
//! preempted it, and a priority inversion, summing to the wait.
//!
//! tp_btf only: the owner is checked and followed through trusted task
//! pointers and bpf_task_from_pid.

use std::collections::HashMap;
use std::mem::{size_of, MaybeUninit};

use latmon_core::anatomy::{Anatomy, Cause, CauseKind};
use latmon_core::extra::ProbeExtra;
use latmon_core::hist::Hist;
use latmon_core::ident::BtfMode;
use latmon_core::lock::{LockCounts, LockTally};
use latmon_core::summary::{AlertRecord, ProbeInfo};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{Link, OpenObject};

use super::alerts::{decode_alert, keep_alert_buffer, want_ringbuf, AlertMaps, Alerts};
use super::common::LoadError;
use super::lock_cycle::{preempter, WaitOwner};
use super::series::{Family, Role, Slot, Source};
use super::symworker::SymbolWorker;
use super::{attach_in_order, ladder, libbpf_error, set_comm, threshold_ns, Owned, Probe, ProbeError};
use super::{PerCpuHist, ReadError};
use crate::bpf::limits::{LOCK_PREEMPTERS, LOCK_SERIES};
use crate::bpf::lock::{LockSkel, LockSkelBuilder};
use crate::bpf::shared::types::{latmon_alert_lock, latmon_lock_key, latmon_lock_record, latmon_lock_tally};
use crate::config::ProbeSpec;

// SAFETY: #[repr(C)] structs of integers generated from bpf/latmon.h.
unsafe impl plain::Plain for latmon_lock_record {}
const _: () =
    assert!(size_of::<latmon_alert_lock>() == super::alerts::ALERT_RECORD_BYTES + size_of::<latmon_lock_record>());
// A lock record's anatomy fits a receiver's MAX_CAUSES (32) wire causes
// whole: its inversion travels as one cause per named preempter plus its
// folded rest (LOCK_PREEMPTERS + 1), then the other preempters as task
// causes (LOCK_PREEMPTERS), the unnamed ones', the owner and `other`.
const _: () = assert!(2 * LOCK_PREEMPTERS + 4 <= latmon_core::anatomy::MAX_CAUSES);

/// Test builds only (feature `test-hooks`): `LATMON_LOCK_MUTATE=1` charges the owner's preempters to
/// the owner's own running time (bpf/lock.bpf.c `cfg.mutate`), the wrong
/// attribution the live test must catch; `=waitv` takes a futex_waitv
/// wait's second waiter's word for its series instead of the first.
#[cfg(feature = "test-hooks")]
pub const MUTATE_ENV: &str = "LATMON_LOCK_MUTATE";

/// Test builds only (feature `test-hooks`): `LATMON_LOCK_OWNER_WALK=1` finds owners by walking the
/// waiter's thread group (bpf/lock.bpf.c `cfg.owner_walk`), the way taken
/// on kernels without bpf_task_from_pid (before 6.2: the boards' 6.1),
/// on a kernel that has it.
#[cfg(feature = "test-hooks")]
pub const OWNER_WALK_ENV: &str = "LATMON_LOCK_OWNER_WALK";

/// A futex syscall the probe follows: its tracepoints' programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FutexSyscall {
    pub name: &'static str,
    enter: &'static str,
    exit: &'static str,
    /// Left out where the kernel lacks it (futex_time64: 32-bit kernels
    /// only; futex_wait: 6.7+; futex_waitv: 5.16+), else its absence
    /// refuses the probe.
    optional: bool,
}

const fn syscall(name: &'static str, enter: &'static str, exit: &'static str, optional: bool) -> FutexSyscall {
    FutexSyscall { name, enter, exit, optional }
}

/// Every futex syscall with a wait the probe can follow.
const SYSCALLS: [FutexSyscall; 4] = [
    syscall("futex", "lock_futex_enter", "lock_futex_exit", false),
    syscall("futex_time64", "lock_futex_time64_enter", "lock_futex_time64_exit", true),
    syscall("futex_wait", "lock_futex_wait_enter", "lock_futex_wait_exit", true),
    syscall("futex_waitv", "lock_futex_waitv_enter", "lock_futex_waitv_exit", true),
];

/// The syscalls followed on a kernel where `has(name)` says whether its
/// `syscalls:sys_enter_NAME` tracepoint exists: the optional ones it has,
/// and futex always (attaching it fails with the reason if it is missing).
pub(crate) fn followed(has: impl Fn(&str) -> bool) -> Vec<FutexSyscall> {
    SYSCALLS.iter().copied().filter(|s| !s.optional || has(s.name)).collect()
}

/// Programs in attach order: a thread's exit and exec first (an entry made
/// before them would never be freed), the consumers (switch, exits) before
/// the producers (the entries that start a wait).
fn programs(calls: &[FutexSyscall]) -> Vec<&'static str> {
    let mut p = vec!["lock_exit", "lock_exec", "lock_switch", "lock_waking"];
    p.extend(calls.iter().map(|s| s.exit));
    p.extend(calls.iter().map(|s| s.enter));
    p
}

/// Whether this kernel has the tracepoint syscalls:sys_enter_NAME (its
/// tracefs directory; tracefs at its own mount point, or under debugfs).
fn has_syscall_tracepoint(name: &str) -> bool {
    ["/sys/kernel/tracing/events/syscalls", "/sys/kernel/debug/tracing/events/syscalls"]
        .iter()
        .any(|root| std::path::Path::new(&format!("{root}/sys_enter_{name}")).is_dir())
}

struct Locks {
    alerts: Alerts,
    reader: PerCpuHist,
    /// The object's .bss `lock_slot_key[LOCK_SERIES]`, mapped; valid
    /// while `_skel` lives (the kernel writes it: volatile reads).
    slot_keys: *const latmon_lock_key,
    /// The object's .bss `lock_tally[LOCK_SERIES]` and `owners_refused`,
    /// mapped likewise (the kernel adds to them).
    tally: *const latmon_lock_tally,
    refused: *const u64,
    /// Each line's tally at its last read (None: the family line). At
    /// most LOCK_SERIES + 1 (65) entries: the series' keys are the slots
    /// `candidates` hands out, 0..LOCK_SERIES, and the family line.
    last: HashMap<Option<u64>, LockTally>,
    /// Labels of the slots seen so far, by slot, and how far their naming
    /// is: at most LOCK_SERIES - 1 (slot 0 is `overflow`, never looked up).
    labels: HashMap<usize, (String, Naming, u8)>,
    /// The worker naming them (None: it could not start; addresses only).
    names: Option<SymbolWorker>,
    _links: Vec<Link>,
    _skel: Owned<LockSkel<'static>>,
}

impl Source for Locks {
    fn bpf_programs(&self) -> Vec<std::os::fd::RawFd> {
        super::loaded_prog_fds(self._skel.object())
    }

    fn candidates(&mut self, out: &mut Vec<Slot>) -> Result<(), ReadError> {
        out.push(Slot { key: 0, label: "overflow".into(), role: Role::Part });
        for n in self.names.iter().flat_map(SymbolWorker::arrived) {
            if let Some(l) = self.labels.get_mut(&n.slot) {
                l.1 = Naming::Done;
                if let Some(name) = n.name.as_deref().filter(|n| !n.is_empty()) {
                    l.0 = cut_label(name);
                }
            }
        }
        for slot in 1..LOCK_SERIES {
            // SAFETY: slot_keys points to the mapped .bss of the live
            // object (LOCK_SERIES entries); the kernel writes it.
            let k = unsafe { std::ptr::read_volatile(self.slot_keys.add(slot)) };
            if k.tgid == 0 {
                continue;
            }
            // `0xADDR` until its symbol arrives (the series is renamed
            // then); a full queue is asked again next interval.
            let label = self.labels.entry(slot).or_insert_with(|| (format!("{:#x}", k.uaddr), Naming::Unasked, 0));
            if label.1 != Naming::Done {
                label.2 = label.2.saturating_add(1);
            }
            if label.1 == Naming::Unasked {
                match &self.names {
                    Some(w) if w.request(slot, k.tgid, k.uaddr) => label.1 = Naming::Asked,
                    Some(_) => {}
                    None => label.1 = Naming::Done,
                }
            }
            out.push(Slot { key: slot as u64, label: label.0.clone(), role: Role::Part });
        }
        Ok(())
    }

    /// The first round a slot is seen its name is asked for; it is born
    /// the next under its symbol when the worker has answered by then
    /// (within milliseconds: one file, 16 MiB at most), else under its
    /// address and renamed when the answer comes.
    fn naming(&self, key: u64) -> bool {
        self.labels.get(&(key as usize)).is_some_and(|l| l.1 != Naming::Done && l.2 < NAMING_ROUNDS)
    }

    fn read(&mut self, key: u64, out: &mut Hist) -> Result<(), ReadError> {
        let reader = &mut self.reader;
        self.alerts.read(key as u32, out, |o| reader.read(key as u32, o))
    }

    fn drain_alerts(&mut self, key: u64, out: &mut Vec<AlertRecord>) {
        self.alerts.drain(key as u32, out);
    }

    fn flush_alerts(&mut self) {
        self.alerts.flush();
    }

    fn extra(&mut self, key: Option<u64>, out: &mut Option<ProbeExtra>) -> Result<(), ReadError> {
        let slot_tally = |slot: usize| {
            // SAFETY: tally points to the mapped .bss of the live object
            // (LOCK_SERIES entries), written by the kernel; slot < LOCK_SERIES.
            let y = unsafe { std::ptr::read_volatile(self.tally.add(slot)) };
            LockTally {
                followed: y.followed,
                inversions: y.inversions,
                inversion_ns: y.inversion_ns,
                owner_run_ns: y.owner_run_ns,
            }
        };
        let now = match key {
            Some(slot) if (slot as usize) < LOCK_SERIES => slot_tally(slot as usize),
            Some(_) => LockTally::default(),
            None => {
                let mut f = LockTally::default();
                (0..LOCK_SERIES).for_each(|s| f.add(&slot_tally(s)));
                f
            }
        };
        let prev = self.last.insert(key, now).unwrap_or_default();
        let mut c = LockCounts::between(&prev, &now);
        if key.is_none() {
            // SAFETY: refused points to the mapped .bss of the live object.
            c.total_owners_refused = Some(unsafe { std::ptr::read_volatile(self.refused) });
        }
        *out = Some(ProbeExtra::Lock(c));
        Ok(())
    }
}

/// Where a lock slot's name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Naming {
    /// Not handed to the worker yet (its queue was full).
    Unasked,
    Asked,
    /// Named, or no name to be had (the address stays).
    Done,
}

/// Rounds a slot's series waits for its name before it is born under its
/// address (see `Locks::naming`).
const NAMING_ROUNDS: u8 = 2;

/// A symbol's longest label as it is (C and mangled Rust names fit).
pub(crate) const LABEL_MAX: usize = 64;
/// Bytes of a cut label before its `~`.
const LABEL_CUT: usize = 60;

/// A symbol as a series label: printable ASCII up to [`LABEL_MAX`] bytes
/// as it is; else each other byte as `\xNN` (the symbol's bytes come one
/// per char from elfsyms) and the whole cut at [`LABEL_CUT`] bytes at a
/// whole piece, ending in `~` (the cut mark of the text outputs). It was
/// silently the address before (issue 40). ASCII only: Modbus names and
/// the text tables count bytes.
pub(crate) fn cut_label(name: &str) -> String {
    if name.len() <= LABEL_MAX && name.bytes().all(|c| c.is_ascii_graphic()) {
        return name.to_string();
    }
    let mut s = String::with_capacity(LABEL_CUT + 1);
    let mut piece = String::with_capacity(8);
    for c in name.chars() {
        piece.clear();
        if c.is_ascii_graphic() {
            piece.push(c);
        } else {
            use std::fmt::Write as _;
            let _ = write!(piece, "\\x{:02x}", c as u32);
        }
        if s.len() + piece.len() > LABEL_CUT {
            s.push('~');
            return s;
        }
        s.push_str(&piece);
    }
    s
}

pub fn open(spec: &ProbeSpec, cycle_join: bool) -> Result<Box<dyn Probe>, ProbeError> {
    let probe = spec.name.clone();
    if !super::kernel_btf_present() {
        return Err(ProbeError::KernelFeature {
            probe,
            what: format!("{}; lock needs tp_btf", super::no_btf_reason()),
        });
    }
    if !super::features::percpu_lookup() {
        return Err(ProbeError::KernelFeature {
            probe,
            what: "lock needs bpf_map_lookup_percpu_elem (kernel 5.19)".into(),
        });
    }
    let ringbuf = want_ringbuf();
    let calls = followed(has_syscall_tracepoint);
    let ((skel, links), mech) = ladder(&probe, &spec.ladder(), |_| load(spec, ringbuf, &calls, cycle_join))?;
    super::lock_cycle::lock_is_loaded();
    let read_err = |why| ProbeError::Read { probe: probe.clone(), why };
    let reader = PerCpuHist::new(&skel.maps.lock_hist).map_err(read_err)?;
    let bss = skel.maps.bss_data.as_deref().ok_or_else(|| ProbeError::Read {
        probe: probe.clone(),
        why: ReadError::Layout { map: ".bss".into(), got: 0, want: 1 },
    })?;
    let (slot_keys, tally, refused) =
        (bss.lock_slot_key.as_ptr(), bss.lock_tally.as_ptr(), std::ptr::addr_of!(bss.owners_refused));
    let m = &skel.maps;
    let maps = AlertMaps { drops: &m.alert_drops, ring: &m.alerts, perf: &m.alerts_perf };
    let threshold = threshold_ns(spec);
    let alerts = Alerts::new(maps, threshold > 0, ringbuf, None, decode_alert_lock).map_err(read_err)?;
    let l = Locks {
        alerts,
        reader,
        slot_keys,
        tally,
        refused,
        last: HashMap::new(),
        labels: HashMap::new(),
        names: SymbolWorker::symbols()
            .inspect_err(|e| log::warn!("{probe}: no symbol worker ({e}): locks are named by address"))
            .ok(),
        _links: links,
        _skel: skel,
    };
    let info = ProbeInfo {
        name: probe,
        kind: spec.kind.family(),
        attach: mech,
        mode: format!(
            "thread-hash, lock series, syscalls {}{}",
            names_of(&calls),
            super::alert_mode(threshold, ringbuf)
        ),
        btf_mode: BtfMode::CoRe,
        wait: Default::default(),
    };
    Ok(Box::new(Family::new(info, Box::new(l))))
}

/// The followed syscalls for the probe's mode: `futex+futex_wait+futex_waitv`.
fn names_of(calls: &[FutexSyscall]) -> String {
    calls.iter().map(|s| s.name).collect::<Vec<_>>().join("+")
}

fn load(
    spec: &ProbeSpec,
    ringbuf: bool,
    calls: &[FutexSyscall],
    cycle_join: bool,
) -> Result<(Owned<LockSkel<'static>>, Vec<Link>), LoadError> {
    let wanted = programs(calls);
    let skel = Owned::new(|storage: &'static mut MaybeUninit<OpenObject>| {
        let mut open =
            LockSkelBuilder::default().open_opts(super::open_opts(), storage).map_err(|e| libbpf_error("open", &e))?;
        let ro = open.maps.rodata_data.as_deref_mut().ok_or_else(|| LoadError::Object("no rodata".into()))?;
        ro.cfg.threshold_ns = threshold_ns(spec);
        ro.cfg.filter_tid = spec.pid.unwrap_or(0);
        #[cfg(feature = "test-hooks")]
        {
            ro.cfg.mutate = match std::env::var(MUTATE_ENV).as_deref() {
                Ok("1") => 1,
                Ok("waitv") => 2,
                _ => 0,
            };
            ro.cfg.owner_walk = u32::from(std::env::var(OWNER_WALK_ENV).as_deref() == Ok("1"));
        }
        ro.cfg.cycle_join = u32::from(cycle_join);
        set_comm(&mut ro.cfg.filter_comm, spec.comm.as_deref());
        ro.cfg.common = super::common::common_config(ringbuf, false, false);
        keep_alert_buffer(&mut open.maps.alerts, &mut open.maps.alerts_perf, ringbuf)?;
        super::lock_cycle::share(&mut open.maps.lock_cycle)?;
        super::autoload_only(open.open_object_mut(), &wanted);
        open.load().map_err(|e| libbpf_error("load", &e))
    })?;
    let links = attach_in_order(skel.object(), &wanted)?;
    Ok((skel, links))
}

/// A wait's record (struct latmon_alert_lock): the alert and its causes.
/// The owner's own time, the inversion (its preempters' time while their
/// priority lay between the owner's and the waiter's), the other
/// preemptions as task causes; the rest is `other` (the waiter's way into
/// and out of the sleep, the owner asleep or unseen).
pub(crate) fn decode_alert_lock(data: &[u8], ids: usize) -> Option<(usize, AlertRecord)> {
    let (id, mut rec) = decode_alert(data, ids)?;
    let at = super::alerts::ALERT_RECORD_BYTES;
    let mut l = latmon_lock_record::default();
    plain::copy_from_bytes(&mut l, data.get(at..at + size_of::<latmon_lock_record>())?).ok()?;
    let mut parts = Vec::with_capacity(LOCK_PREEMPTERS + 3);
    if let Some(w) = WaitOwner::of(&l) {
        if w.inversion_ns > 0 {
            parts.push(w.inversion());
        }
        for p in l.pre.iter().filter(|p| p.ns > p.inv_ns) {
            let q = preempter(p, p.ns - p.inv_ns);
            parts.push(Cause {
                kind: CauseKind::Task { comm: q.comm, pid: q.pid, policy: q.policy, prio: q.prio },
                ns: q.ns,
            });
        }
        parts.push(Cause { kind: CauseKind::TaskRest, ns: l.rest_ns - l.rest_inv_ns.min(l.rest_ns) });
        parts.push(Cause { kind: CauseKind::Owner { owner: w.owner }, ns: l.owner_run_ns });
    }
    rec.anatomy = Some(Anatomy::from_parts(rec.latency_ns, rec.cpu, rec.cpu, parts));
    Some((id, rec))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::limits::LOCK_OWNER_GLIBC;
    use crate::bpf::shared::types::latmon_lock_task;
    use latmon_core::anatomy::OwnerFrom;

    /// Issue 40: a symbol over 64 bytes or with non-graphic bytes was
    /// silently `lock:0xADDR`. Now a bounded, escaped, cut name.
    #[test]
    fn long_or_unprintable_symbols_get_a_cut_escaped_label() {
        assert_eq!(cut_label("ctrl_mutex"), "ctrl_mutex");
        let exact = "m".repeat(LABEL_MAX);
        assert_eq!(cut_label(&exact), exact, "64 bytes fit");
        let long = format!("{}_tail", "a".repeat(80));
        let l = cut_label(&long);
        assert_eq!(l, format!("{}~", "a".repeat(LABEL_CUT)));
        assert_eq!(cut_label("mu\u{1b}[2J\u{ff} x"), "mu\\x1b[2J\\xff\\x20x");
        // An escape is never split by the cut.
        let l = cut_label(&format!("{}\u{7f}\u{7f}", "b".repeat(57)));
        assert_eq!(l, format!("{}~", "b".repeat(57)));
        for l in [cut_label(&"\u{80}".repeat(100)), cut_label(&long)] {
            assert!(l.len() <= LABEL_CUT + 1 && l.bytes().all(|c| c.is_ascii_graphic()), "{l}");
        }
    }

    fn task(pid: u32, comm: &[u8], prio: i32, ns: u64, inv_ns: u64) -> latmon_lock_task {
        let mut t = latmon_lock_task { pid, tgid: 800, policy: 1, prio, ns, inv_ns, ..Default::default() };
        for (d, s) in t.comm.iter_mut().zip(comm) {
            *d = *s as i8;
        }
        t
    }

    #[test]
    fn an_inversion_record_names_owner_and_preempter_and_sums_to_the_wait() {
        let mut r = latmon_alert_lock::default();
        r.alert.latency_ns = 2_300_000;
        r.alert.probe_id = 1;
        r.lock.owner_from = LOCK_OWNER_GLIBC as u32;
        r.lock.owner_tid = 812;
        r.lock.owner_tgid = 800;
        r.lock.owner_policy = 1;
        r.lock.owner_prio = 10;
        r.lock.owner_run_ns = 150_000;
        r.lock.owner_comm[..7].copy_from_slice(&b"lm_lock".map(|c| c as i8));
        r.lock.pre[0] = task(813, b"lm_lock", 50, 2_020_000, 2_020_000);
        r.lock.pre[1] = task(20, b"ktimers/0", 99, 30_000, 0);
        // SAFETY: a plain struct viewed as bytes.
        let bytes = unsafe { plain::as_bytes(&r) };
        let (id, rec) = decode_alert_lock(bytes, 2).unwrap();
        assert_eq!(id, 1);
        let a = rec.anatomy.clone().unwrap();
        assert!(a.sums_to(2_300_000), "{a:?}");
        let CauseKind::Inversion { owner, preempted_by } = &a.causes[0].kind else { panic!("{a:?}") };
        assert_eq!((owner.tid, owner.prio, owner.from), (812, 10, OwnerFrom::Glibc));
        assert_eq!((preempted_by.len(), preempted_by[0].pid, preempted_by[0].ns), (1, 813, 2_020_000));
        assert_eq!(a.causes[0].ns, 2_020_000);
        let mut s = String::new();
        a.render_into(&mut s, rec.latency_ns);
        assert_eq!(
            s,
            "late 2300 us: inversion 2020 us: held by lm_lock[812] FIFO/10, preempted by lm_lock[813] FIFO/50 2020 us, \
             held by lm_lock[812] FIFO/10 running 150 us, ktimers/0[20] FIFO/99 30 us, other 100 us"
        );
        // The text line under the record's ALERT line names the lock, from
        // the name of the series the record is of.
        let mut line = String::new();
        let named = latmon_core::summary::Named { name: "lm_lock:ctrl_mutex", record: &rec };
        assert!(latmon_core::summary::render_detail_into(&mut line, named, usize::MAX));
        assert!(
            line.starts_with(
                "wait 2.30ms on ctrl_mutex: inversion 2020 us: held by lm_lock[812] FIFO/10, \
                 preempted by lm_lock[813] FIFO/50 2020 us, held by"
            ),
            "{line}"
        );
        let json = serde_json::to_value(&a.causes[0]).unwrap();
        assert_eq!(json["kind"], "inversion");
        assert_eq!(json["owner"]["tid"], 812);
        assert_eq!(json["preempted_by"][0]["pid"], 813);
        assert_eq!(json["preempted_by"][0]["policy"], "fifo");
        // A short record is refused, not a panic.
        assert!(decode_alert_lock(&bytes[..bytes.len() - 1], 2).is_none());
    }

    #[test]
    fn syscalls_without_a_tracepoint_are_left_out_futex_never() {
        let names = |have: &[&str]| {
            let calls = followed(|n| have.contains(&n));
            (names_of(&calls), programs(&calls))
        };
        // The 6.18 x86_64 host: no futex_time64 (a 32-bit syscall).
        let (n, p) = names(&["futex", "futex_wait", "futex_waitv"]);
        assert_eq!(n, "futex+futex_wait+futex_waitv");
        assert!(!p.iter().any(|p| p.contains("time64")), "{p:?}");
        // A 6.1 armv7 board: futex_time64 and futex_waitv, no futex_wait.
        let (n, p) = names(&["futex", "futex_time64", "futex_waitv"]);
        assert_eq!(n, "futex+futex_time64+futex_waitv");
        assert_eq!(
            p,
            [
                "lock_exit",
                "lock_exec",
                "lock_switch",
                "lock_waking",
                "lock_futex_exit",
                "lock_futex_time64_exit",
                "lock_futex_waitv_exit",
                "lock_futex_enter",
                "lock_futex_time64_enter",
                "lock_futex_waitv_enter"
            ]
        );
        // futex is never left out: its absence is the attach error.
        assert_eq!(names(&[]).0, "futex");
    }

    #[test]
    fn the_object_has_exactly_the_programs_named_here() {
        let mut want = programs(&SYSCALLS);
        want.sort();
        let mut storage = MaybeUninit::uninit();
        let open = LockSkelBuilder::default().open(&mut storage).expect("open the lock object");
        let mut have: Vec<String> =
            open.open_object().progs().map(|p| p.name().to_string_lossy().into_owned()).collect();
        have.sort();
        assert_eq!(have, want);
    }

    #[test]
    fn a_wait_without_an_owner_is_all_other() {
        let mut r = latmon_alert_lock::default();
        r.alert.latency_ns = 5_000;
        // SAFETY: a plain struct viewed as bytes.
        let bytes = unsafe { plain::as_bytes(&r) };
        let (_, rec) = decode_alert_lock(bytes, 1).unwrap();
        assert_eq!(rec.anatomy.unwrap().causes, vec![Cause { kind: CauseKind::Other, ns: 5_000 }]);
    }
}
