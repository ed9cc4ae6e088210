// SPDX-License-Identifier: MIT
//! Multi-series families: one BPF object whose maps hold several named
//! histograms (per syscall id, per IRQ number, per softirq vector, per chain
//! stage), reported as separate probes.
//!
//! The spec's probe is the *family line* (`syscall`: every syscall the
//! filter admits, summed). Each series with data becomes a probe of its own
//! named `FAMILY:LABEL` (`syscall:nanosleep`), with the family's kind and
//! attach mechanism, born through `Probe::new_series()` the first interval
//! its histogram is non-empty - so output only names what happened, and
//! the maps stay fixed-size in the kernel.
//!
//! Reading: the family probe reads every known slot once per interval into a
//! shared cache (in `new_series()`, or in `read()` if that was not called);
//! series probes copy their slot from the cache. The agent appends series
//! to its list (after their family), so they are read after it in every
//! round.
//!
//! Alert records: the family line drains every slot's records (those of
//! its series into a per-slot stash the series take them from), so every
//! record reaches its line in the round it was drained. For the final
//! summary (`flush_alerts`) the family re-reads the histograms *after*
//! that drain: every record it shows is of an event its counts include.

use std::cell::RefCell;
use std::rc::Rc;

use latmon_core::causes::CauseSummary;
use latmon_core::extra::ProbeExtra;
use latmon_core::hist::Hist;
use latmon_core::ident::Wait;
use latmon_core::summary::{AlertRecord, ProbeInfo};

use super::common::{Probe, ProbeError};
use super::ReadError;

/// How a slot is reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// In the family line only (e.g. the one syscall of `syscall:NAME`, the
    /// end-to-end slot of a chain).
    Family,
    /// A series of its own, also summed into the family line.
    Part,
    /// A series of its own, not in the family line (e.g. chain stages, an
    /// IRQ's threaded path beside its handlers).
    Extra,
    /// A series of calls whose purpose is to wait (ppoll, nanosleep, a
    /// futex wait): not in the family line, summed in the family's waits
    /// line `FAMILY:waits` instead (its time is the caller's timeout or
    /// peer, not the system's latency).
    Wait,
}

/// The label of a family's waits line, `FAMILY:waits`.
pub const WAITS_LABEL: &str = "waits";

/// A histogram slot of a family's maps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slot {
    /// Opaque to this module; the source's way to find the slot.
    pub key: u64,
    /// Series name after `FAMILY:`.
    pub label: String,
    pub role: Role,
}

/// The BPF side of a family.
pub(crate) trait Source {
    /// Slots that may hold data now. Called every interval: must be cheap
    /// (a .bss table, a few map keys).
    fn candidates(&mut self, out: &mut Vec<Slot>) -> Result<(), ReadError>;
    /// The cumulative histogram of one slot, summed over CPUs.
    fn read(&mut self, key: u64, out: &mut Hist) -> Result<(), ReadError>;
    /// Events lost outside every slot (e.g. a full map), reported as drops
    /// of the family line.
    fn lost(&self) -> u64 {
        0
    }
    /// The family's loaded BPF programs (their cost is the family line's).
    fn bpf_programs(&self) -> Vec<std::os::fd::RawFd> {
        Vec::new()
    }
    /// Move the alert records of one slot that arrived since the last call
    /// into `out` (sources whose BPF side sends alert records). The family
    /// names them after the line that drains them (`FAMILY:LABEL`, or the
    /// family for `Role::Family` slots): a source may not know the label
    /// yet when a record arrives.
    fn drain_alerts(&mut self, _key: u64, _out: &mut Vec<AlertRecord>) {}
    /// The family line's alert causes (see `Probe::causes`).
    fn causes(&mut self, out: &mut Option<CauseSummary>) -> Result<(), ReadError> {
        *out = None;
        Ok(())
    }
    /// See `Probe::flush_alerts`.
    fn flush_alerts(&mut self) {}
    /// Slot `key`'s name is on its way (a lock's symbol from the worker):
    /// its series is born a round later, under that name, rather than
    /// under a placeholder its first records would carry. A source says
    /// so for a round or two at most; its events count in the family line
    /// meanwhile and its records wait in the stash.
    fn naming(&self, _key: u64) -> bool {
        false
    }
    /// See `Probe::extra`: of one slot's series (`Some(key)`) or of the
    /// family line (None).
    fn extra(&mut self, _key: Option<u64>, out: &mut Option<ProbeExtra>) -> Result<(), ReadError> {
        *out = None;
        Ok(())
    }
    /// See `Probe::watch`.
    fn watch(&mut self, _loops: &mut [latmon_core::loops::Loop], _scan_at_ns: u64) {}
}

struct Known {
    slot: Slot,
    hist: Hist,
    announced: bool,
    /// Records drained by the family line for this slot's series.
    stash: Vec<AlertRecord>,
}

struct Shared {
    source: Box<dyn Source>,
    known: Vec<Known>,
    /// The waits line was born (the first interval a wait slot had data).
    waits_announced: bool,
    scratch: Vec<Slot>,
    /// The cache was refreshed by new_series() and not yet consumed.
    fresh: bool,
    /// Final round: re-read the histograms after draining alert records.
    reread: bool,
}

impl Shared {
    fn refresh(&mut self) -> Result<(), ReadError> {
        for k in &mut self.known {
            self.source.read(k.slot.key, &mut k.hist)?;
        }
        self.scratch.clear();
        self.source.candidates(&mut self.scratch)?;
        for slot in self.scratch.drain(..) {
            if let Some(k) = self.known.iter_mut().find(|k| k.slot.key == slot.key) {
                // A source may name a slot later (a lock's symbol): its
                // series takes the name (Series::rename).
                if k.slot.label != slot.label {
                    k.slot.label = slot.label;
                }
                continue;
            }
            let mut hist = Hist::default();
            self.source.read(slot.key, &mut hist)?;
            if hist.count > 0 || hist.drops > 0 {
                self.known.push(Known { slot, hist, announced: false, stash: Vec::new() });
            }
        }
        Ok(())
    }
}

/// The family line of a multi-series family.
pub(crate) struct Family {
    info: ProbeInfo,
    shared: Rc<RefCell<Shared>>,
}

impl Family {
    pub fn new(info: ProbeInfo, source: Box<dyn Source>) -> Self {
        let shared = Shared {
            source,
            known: Vec::new(),
            waits_announced: false,
            scratch: Vec::new(),
            fresh: false,
            reread: false,
        };
        Family { info, shared: Rc::new(RefCell::new(shared)) }
    }

    fn read_error(&self, why: ReadError) -> ProbeError {
        ProbeError::Read { probe: self.info.name.clone(), why }
    }
}

impl Probe for Family {
    fn info(&self) -> &ProbeInfo {
        &self.info
    }

    fn read(&mut self, out: &mut Hist) -> Result<(), ProbeError> {
        let mut sh = self.shared.borrow_mut();
        if !sh.fresh {
            sh.refresh().map_err(|why| self.read_error(why))?;
        }
        sh.fresh = false;
        *out = Hist::default();
        for k in sh.known.iter().filter(|k| matches!(k.slot.role, Role::Family | Role::Part)) {
            out.merge(&k.hist);
        }
        out.drops += sh.source.lost();
        Ok(())
    }

    fn bpf_programs(&self) -> Vec<std::os::fd::RawFd> {
        self.shared.borrow().source.bpf_programs()
    }

    fn flush_alerts(&mut self) {
        let mut sh = self.shared.borrow_mut();
        sh.source.flush_alerts();
        sh.reread = true;
    }

    fn drain_alerts(&mut self, out: &mut Vec<AlertRecord>) {
        let mut guard = self.shared.borrow_mut();
        let sh = &mut *guard;
        // The agent stamps what lands in `out` with this line's id: the
        // family's own records are this line's, each series' wait in its
        // stash for its own line.
        let last = sh.reread;
        for k in &mut sh.known {
            if k.slot.role == Role::Family {
                sh.source.drain_alerts(k.slot.key, out);
            } else {
                sh.source.drain_alerts(k.slot.key, &mut k.stash);
                if last && !k.announced {
                    // The final round: a series still unborn (its name
                    // on the way) has no line; its records go out in the
                    // family's rather than nowhere.
                    out.append(&mut k.stash);
                }
            }
        }
        if std::mem::take(&mut sh.reread) {
            sh.fresh = false;
        }
    }

    fn causes(&mut self, out: &mut Option<CauseSummary>) -> Result<(), ProbeError> {
        let r = self.shared.borrow_mut().source.causes(out);
        r.map_err(|why| self.read_error(why))
    }

    fn extra(&mut self, out: &mut Option<ProbeExtra>) -> Result<(), ProbeError> {
        let r = self.shared.borrow_mut().source.extra(None, out);
        r.map_err(|why| self.read_error(why))
    }

    fn watch(&mut self, loops: &mut [latmon_core::loops::Loop], scan_at_ns: u64) {
        self.shared.borrow_mut().source.watch(loops, scan_at_ns);
    }

    fn new_series(&mut self) -> Vec<Box<dyn Probe>> {
        let mut sh = self.shared.borrow_mut();
        if let Err(why) = sh.refresh() {
            // read() retries and reports it.
            log::debug!("{}", self.read_error(why));
            return Vec::new();
        }
        sh.fresh = true;
        let mut born: Vec<Box<dyn Probe>> = Vec::new();
        // The waits line first: a receiver places wait series under it.
        if !sh.waits_announced && sh.known.iter().any(|k| k.slot.role == Role::Wait) {
            sh.waits_announced = true;
            let info =
                ProbeInfo { name: format!("{}:{WAITS_LABEL}", self.info.name), wait: Wait::Sum, ..self.info.clone() };
            log::info!("probe {}: waits line", info.name);
            born.push(Box::new(Waits { info, shared: Rc::clone(&self.shared) }));
        }
        // The final round (flush_alerts came first) waits for no name.
        let Shared { known, source, reread, .. } = &mut *sh;
        for (index, k) in known.iter_mut().enumerate() {
            if k.announced || k.slot.role == Role::Family || (!*reread && source.naming(k.slot.key)) {
                continue;
            }
            k.announced = true;
            let wait = if k.slot.role == Role::Wait { Wait::Series } else { Wait::No };
            let info = ProbeInfo { name: format!("{}:{}", self.info.name, k.slot.label), wait, ..self.info.clone() };
            log::info!("probe {}: new series", info.name);
            let family = self.info.name.clone();
            let label = k.slot.label.clone();
            born.push(Box::new(Series { info, shared: Rc::clone(&self.shared), index, family, label }));
        }
        born
    }
}

/// One series of a family.
struct Series {
    info: ProbeInfo,
    shared: Rc<RefCell<Shared>>,
    /// Index into `Shared::known` (entries are only ever appended).
    index: usize,
    /// The family's name and this series' label in `info.name`.
    family: String,
    label: String,
}

impl Probe for Series {
    fn info(&self) -> &ProbeInfo {
        &self.info
    }

    fn read(&mut self, out: &mut Hist) -> Result<(), ProbeError> {
        let sh = self.shared.borrow();
        out.clone_from(&sh.known[self.index].hist);
        Ok(())
    }

    fn drain_alerts(&mut self, out: &mut Vec<AlertRecord>) {
        let mut sh = self.shared.borrow_mut();
        out.append(&mut sh.known[self.index].stash);
    }

    fn rename(&mut self) -> Option<String> {
        let sh = self.shared.borrow();
        let label = &sh.known[self.index].slot.label;
        if *label == self.label {
            return None;
        }
        let name = format!("{}:{label}", self.family);
        log::info!("probe {}: named {name}", self.info.name);
        self.label.clone_from(label);
        self.info.name = name;
        Some(self.info.name.clone())
    }

    fn extra(&mut self, out: &mut Option<ProbeExtra>) -> Result<(), ProbeError> {
        let mut guard = self.shared.borrow_mut();
        let sh = &mut *guard;
        let key = sh.known[self.index].slot.key;
        sh.source.extra(Some(key), out).map_err(|why| ProbeError::Read { probe: self.info.name.clone(), why })
    }
}

/// A family's waits line: the sum of its wait series, read from the
/// family's cache like them. Its alert records are its series'.
struct Waits {
    info: ProbeInfo,
    shared: Rc<RefCell<Shared>>,
}

impl Probe for Waits {
    fn info(&self) -> &ProbeInfo {
        &self.info
    }

    fn read(&mut self, out: &mut Hist) -> Result<(), ProbeError> {
        let sh = self.shared.borrow();
        *out = Hist::default();
        for k in sh.known.iter().filter(|k| k.slot.role == Role::Wait) {
            out.merge(&k.hist);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source over in-memory histograms.
    struct Fake {
        slots: Rc<RefCell<Vec<(Slot, Hist)>>>,
        reads: Rc<RefCell<usize>>,
    }

    impl Source for Fake {
        fn candidates(&mut self, out: &mut Vec<Slot>) -> Result<(), ReadError> {
            out.extend(self.slots.borrow().iter().map(|(s, _)| s.clone()));
            Ok(())
        }
        fn read(&mut self, key: u64, out: &mut Hist) -> Result<(), ReadError> {
            *self.reads.borrow_mut() += 1;
            let slots = self.slots.borrow();
            let (_, h) = slots
                .iter()
                .find(|(s, _)| s.key == key)
                .ok_or_else(|| ReadError::Map { map: "fake".into(), why: "no such slot".into() })?;
            out.clone_from(h);
            Ok(())
        }
        fn lost(&self) -> u64 {
            2
        }
    }

    fn slot(key: u64, label: &str, role: Role) -> Slot {
        Slot { key, label: label.into(), role }
    }

    fn hist(values: &[u64]) -> Hist {
        let mut h = Hist::default();
        for &v in values {
            h.record(v);
        }
        h
    }

    #[test]
    fn wait_slots_stay_out_of_the_family_line_and_sum_in_its_waits_line() {
        let slots = Rc::new(RefCell::new(vec![
            (slot(1, "write", Role::Part), hist(&[100, 200])),
            (slot(2, "ppoll", Role::Wait), hist(&[1_000_000_000])),
            (slot(3, "nanosleep", Role::Wait), hist(&[1_000_000, 2_000_000, 3_000_000])),
        ]));
        let mut fam = Family::new(info(), Box::new(Fake { slots: slots.clone(), reads: Rc::new(RefCell::new(0)) }));
        let mut born = fam.new_series();
        let got: Vec<(String, Wait)> = born.iter().map(|p| (p.info().name.clone(), p.info().wait)).collect();
        let want = [
            ("fam:waits", Wait::Sum),
            ("fam:write", Wait::No),
            ("fam:ppoll", Wait::Series),
            ("fam:nanosleep", Wait::Series),
        ];
        assert_eq!(got, want.map(|(n, w)| (n.to_string(), w)), "the waits line is born first");
        let mut h = Hist::default();
        fam.read(&mut h).unwrap();
        assert_eq!((h.count, h.max_ns), (2, 200), "waits are not in the family line");
        born[0].read(&mut h).unwrap();
        assert_eq!((h.count, h.min_ns, h.max_ns), (4, 1_000_000, 1_000_000_000), "the waits line sums its series");
        // A later wait series adds to it; the waits line is born once.
        slots.borrow_mut().push((slot(4, "pause", Role::Wait), hist(&[5])));
        let born2 = fam.new_series();
        assert_eq!(born2.iter().map(|p| p.info().name.as_str()).collect::<Vec<_>>(), ["fam:pause"]);
        fam.read(&mut h).unwrap();
        born[0].read(&mut h).unwrap();
        assert_eq!(h.count, 5);
    }

    fn info() -> ProbeInfo {
        ProbeInfo {
            name: "fam".into(),
            kind: latmon_core::ident::Family::Syscall,
            attach: latmon_core::ident::Mechanism::TpBtf,
            mode: "m".into(),
            btf_mode: latmon_core::ident::BtfMode::CoRe,
            wait: Default::default(),
        }
    }

    #[test]
    fn series_are_born_when_they_have_data_and_the_family_sums_parts() {
        let slots = Rc::new(RefCell::new(vec![
            (slot(1, "a", Role::Part), hist(&[100, 200])),
            (slot(2, "b", Role::Part), Hist::default()),
            (slot(3, "x", Role::Extra), hist(&[5_000])),
        ]));
        let reads = Rc::new(RefCell::new(0));
        let mut fam = Family::new(info(), Box::new(Fake { slots: slots.clone(), reads: reads.clone() }));

        let mut born = fam.new_series();
        let names: Vec<_> = born.iter().map(|p| p.info().name.clone()).collect();
        assert_eq!(names, ["fam:a", "fam:x"], "empty slot b has no series yet");
        assert!(born.iter().all(|p| p.info().kind == latmon_core::ident::Family::Syscall
            && p.info().attach == latmon_core::ident::Mechanism::TpBtf));
        let mut h = Hist::default();
        fam.read(&mut h).unwrap();
        assert_eq!((h.count, h.min_ns, h.max_ns, h.drops), (2, 100, 200, 2), "Extra slots stay out of the family line");
        born[0].read(&mut h).unwrap();
        assert_eq!(h.count, 2);
        born[1].read(&mut h).unwrap();
        assert_eq!(h.count, 1);
        let reads_per_round = *reads.borrow();
        assert_eq!(reads_per_round, 3, "one read per slot: series use the family's cache");

        // b gets data; the next round announces it, and only it.
        slots.borrow_mut()[1].1 = hist(&[7]);
        let born2 = fam.new_series();
        assert_eq!(born2.iter().map(|p| p.info().name.as_str()).collect::<Vec<_>>(), ["fam:b"]);
        fam.read(&mut h).unwrap();
        assert_eq!((h.count, h.min_ns), (3, 7));
        assert!(fam.new_series().is_empty());
    }

    fn record(latency_ns: u64) -> AlertRecord {
        AlertRecord {
            id: latmon_core::ident::ProbeId::NONE,
            pid: 1,
            tid: 1,
            comm: "c".into(),
            cpu: 0,
            latency_ns,
            time_ns: 1,
            anatomy: None,
            cycle: None,
        }
    }

    /// A source with one record per series, its latency the series' key.
    struct Alerting;

    impl Source for Alerting {
        fn candidates(&mut self, out: &mut Vec<Slot>) -> Result<(), ReadError> {
            out.push(slot(1, "read", Role::Part));
            out.push(slot(2, "write", Role::Family));
            Ok(())
        }
        fn read(&mut self, _key: u64, out: &mut Hist) -> Result<(), ReadError> {
            *out = hist(&[10]);
            Ok(())
        }
        fn drain_alerts(&mut self, key: u64, out: &mut Vec<AlertRecord>) {
            out.push(record(key));
        }
    }

    #[test]
    fn alert_records_go_to_the_line_they_are_of() {
        // The agent stamps what a line drains with that line's id, which
        // names the records at the outputs.
        let mut fam = Family::new(info(), Box::new(Alerting));
        let mut born = fam.new_series();
        assert_eq!(born.len(), 1);
        let (mut family, mut series) = (vec![record(0)], Vec::new());
        fam.drain_alerts(&mut family);
        born[0].drain_alerts(&mut series);
        let lat = |v: &[AlertRecord]| v.iter().map(|r| r.latency_ns).collect::<Vec<_>>();
        assert_eq!((lat(&family), lat(&series)), (vec![0, 2], vec![1]), "records already drained stay");
        born[0].drain_alerts(&mut series);
        assert_eq!(series.len(), 1, "a series takes what the family drained for it, once");
    }

    #[test]
    fn the_final_round_rereads_histograms_after_draining_records() {
        let slots = Rc::new(RefCell::new(vec![(slot(1, "a", Role::Part), hist(&[100]))]));
        let reads = Rc::new(RefCell::new(0));
        let mut fam = Family::new(info(), Box::new(Fake { slots: slots.clone(), reads: reads.clone() }));
        let mut h = Hist::default();
        let mut out = Vec::new();
        // An ordinary round: new_series() reads, drain and read use that.
        let _born = fam.new_series();
        let before = *reads.borrow();
        fam.drain_alerts(&mut out);
        fam.read(&mut h).unwrap();
        assert_eq!(*reads.borrow(), before, "no second read in an ordinary round");
        // The final round: events after new_series() but before the drain
        // must be in the counts the records are shown with.
        let _ = fam.new_series();
        slots.borrow_mut()[0].1 = hist(&[100, 200]);
        fam.flush_alerts();
        fam.drain_alerts(&mut out);
        fam.read(&mut h).unwrap();
        assert_eq!(h.count, 2, "re-read after the drain");
    }

    /// A slot named later (a lock's symbol from the worker): its series
    /// is born under the first label and renamed once, keeping its data.
    #[test]
    fn a_series_takes_the_name_its_slot_gets_later() {
        let slots = Rc::new(RefCell::new(vec![(slot(5, "0x7f00", Role::Part), hist(&[100]))]));
        let mut fam = Family::new(info(), Box::new(Fake { slots: slots.clone(), reads: Rc::new(RefCell::new(0)) }));
        let mut born = fam.new_series();
        assert_eq!(born[0].info().name, "fam:0x7f00");
        assert_eq!(born[0].rename(), None);
        slots.borrow_mut()[0].0.label = "ctrl_mutex".into();
        slots.borrow_mut()[0].1 = hist(&[100, 200]);
        assert!(fam.new_series().is_empty(), "the same series");
        assert_eq!(born[0].rename().as_deref(), Some("fam:ctrl_mutex"));
        assert_eq!(born[0].info().name, "fam:ctrl_mutex");
        assert_eq!(born[0].rename(), None, "once");
        let mut h = Hist::default();
        born[0].read(&mut h).unwrap();
        assert_eq!(h.count, 2);
    }

    #[test]
    fn family_role_slots_have_no_series_and_read_works_without_new_series() {
        let slots = Rc::new(RefCell::new(vec![(slot(9, "nanosleep", Role::Family), hist(&[1_000_000]))]));
        let mut fam = Family::new(info(), Box::new(Fake { slots, reads: Rc::new(RefCell::new(0)) }));
        let mut h = Hist::default();
        fam.read(&mut h).unwrap();
        assert_eq!(h.count, 1, "read() refreshes by itself");
        assert!(fam.new_series().is_empty());
        fam.read(&mut h).unwrap();
        assert_eq!(h.count, 1);
    }
}
