// SPDX-License-Identifier: MIT
//! A family's own data in an interval's report: one typed value per probe
//! line (`ProbeReport::extra`), one variant per family that has any. The
//! agent fills it through one `Probe` method in one place of its tick;
//! every output takes it apart in one function (JSON here, the text
//! table's lines here, Prometheus in src/sinks/prom/model.rs, Modbus in
//! src/sinks/modbus/map.rs). A new family with data of its own adds a
//! variant here and an arm to each of those functions: nothing else in
//! the shared code names its types.
//!
//! Pure model: no I/O. The families' own types stay in their modules
//! (cycle.rs, lock.rs); this module only joins them.

use serde::ser::{Serialize, SerializeMap, Serializer};

use crate::anatomy::Cause;
use crate::causes::{CauseSummary, MissCausesJson};
use crate::cycle::{CycleCounts, CycleEvent, CycleMark};
use crate::lock::LockCounts;

/// One probe line's family data.
#[derive(Debug, Clone, PartialEq)]
pub enum ProbeExtra {
    /// cycle: its counts, rules and period, and what its missed cycles
    /// spent their time on.
    Cycle(CycleExtra),
    /// lock: waits with a followed owner and priority inversions.
    Lock(LockCounts),
}

/// A cycle probe's interval.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CycleExtra {
    pub counts: CycleCounts,
    /// The interval's missed cycles that sent a record, their parts summed
    /// by cause (a miss whose record was refused is in `counts.misses`,
    /// not here).
    pub miss_causes: CauseSummary,
}

/// What [`ProbeExtra::fold_alerts`] reads of one of the interval's alert
/// records of the probe.
#[derive(Debug, Clone, Copy)]
pub struct Alerted<'a> {
    pub latency_ns: u64,
    pub cycle: Option<&'a CycleMark>,
    /// The record's anatomy's parts (empty: none).
    pub parts: &'a [Cause],
}

impl ProbeExtra {
    /// The cycle variant in `out`, made (zero) unless `out` holds one:
    /// kept in place from interval to interval, so its buffers are reused.
    pub fn cycle_in(out: &mut Option<ProbeExtra>) -> &mut CycleExtra {
        if !matches!(out, Some(ProbeExtra::Cycle(_))) {
            *out = Some(ProbeExtra::Cycle(CycleExtra::default()));
        }
        match out {
            Some(ProbeExtra::Cycle(c)) => c,
            _ => unreachable!("set above"),
        }
    }

    /// The interval's alert records of this probe, after its data was
    /// read: a cycle probe sums its misses' parts by cause.
    pub fn fold_alerts<'a>(&mut self, alerts: impl Iterator<Item = Alerted<'a>>) {
        match self {
            ProbeExtra::Cycle(c) => {
                let m = &mut c.miss_causes;
                m.begin_misses();
                for a in alerts.filter(|a| a.cycle.is_some_and(|c| c.event == CycleEvent::Miss)) {
                    m.add_miss(a.latency_ns, a.parts);
                }
                m.end_misses();
            }
            ProbeExtra::Lock(_) => {}
        }
    }

    /// The text lines a probe's histogram block shows under its own
    /// (`--hist`): a cycle probe's missed time by cause.
    pub fn render_text_into(&self, s: &mut String) {
        match self {
            ProbeExtra::Cycle(c) if c.miss_causes.alerts > 0 => {
                s.push_str("  ");
                c.miss_causes.render_misses_into(s, 3);
                s.push('\n');
            }
            ProbeExtra::Cycle(_) | ProbeExtra::Lock(_) => {}
        }
    }
}

/// The JSON keys of the probe line (flattened into it): `cycle` and
/// `miss_causes`, or `lock` (the contract's names, unchanged).
impl Serialize for ProbeExtra {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut m = ser.serialize_map(None)?;
        match self {
            ProbeExtra::Cycle(c) => {
                m.serialize_entry("cycle", &c.counts)?;
                m.serialize_entry("miss_causes", &MissCausesJson(&c.miss_causes))?;
            }
            ProbeExtra::Lock(l) => m.serialize_entry("lock", l)?,
        }
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::anatomy::CauseKind;

    fn mark(event: CycleEvent) -> CycleMark {
        CycleMark { event, release_ns: 0, deadline_ns: 0, done_ns: None, doing: None, migrations: 0, rule: None }
    }

    #[test]
    fn a_cycle_line_sums_its_misses_only() {
        let mut x = Some(ProbeExtra::Lock(LockCounts::default()));
        ProbeExtra::cycle_in(&mut x).counts.misses = 2;
        let x = x.as_mut().unwrap();
        let parts = [Cause { kind: CauseKind::Running, ns: 700 }];
        let (miss, over) = (mark(CycleEvent::Miss), mark(CycleEvent::Overrun));
        let alerts = [
            Alerted { latency_ns: 700, cycle: Some(&miss), parts: &parts },
            Alerted { latency_ns: 900, cycle: Some(&over), parts: &parts },
            Alerted { latency_ns: 300, cycle: Some(&miss), parts: &[] },
            Alerted { latency_ns: 50, cycle: None, parts: &[] },
        ];
        x.fold_alerts(alerts.iter().copied());
        let ProbeExtra::Cycle(c) = x else { panic!("{x:?}") };
        assert_eq!((c.counts.misses, c.miss_causes.alerts, c.miss_causes.alerted_ns), (2, 2, 1_000));
        // Kept in place: a second interval starts over, totals go on.
        x.fold_alerts(std::iter::empty());
        let ProbeExtra::Cycle(c) = x else { panic!("{x:?}") };
        assert_eq!((c.miss_causes.alerts, c.miss_causes.total_alerts), (0, 2));
    }

    #[test]
    fn missed_time_is_summed_by_cause_largest_first() {
        use crate::causes::CauseId;
        let parts = |run: u64, lat: u64| {
            vec![Cause { kind: CauseKind::Running, ns: run }, Cause { kind: CauseKind::Other, ns: lat - run }]
        };
        let recs = [
            (CycleEvent::Miss, 1_500_000, parts(1_200_000, 1_500_000)),
            (CycleEvent::Overrun, 1_000_000, parts(1_000_000, 1_000_000)),
            (CycleEvent::Response, 900_000, parts(900_000, 900_000)),
            (CycleEvent::Miss, 1_100_000, parts(100_000, 1_100_000)),
        ];
        let marks: Vec<CycleMark> = recs.iter().map(|r| mark(r.0)).collect();
        let alerts = || recs.iter().zip(&marks).map(|(r, m)| Alerted { latency_ns: r.1, cycle: Some(m), parts: &r.2 });
        let mut x = ProbeExtra::Cycle(CycleExtra::default());
        x.fold_alerts(alerts());
        let ProbeExtra::Cycle(c) = &x else { unreachable!() };
        let c = &c.miss_causes;
        assert_eq!((c.alerts, c.alerted_ns), (2, 2_600_000));
        let got: Vec<(CauseId, u64)> = c.causes.iter().map(|x| (x.id, x.ns)).collect();
        assert_eq!(got, [(CauseId::Other, 1_300_000), (CauseId::Running, 1_300_000)]);
        x.fold_alerts(alerts().skip(1).take(2));
        let ProbeExtra::Cycle(c) = &x else { unreachable!() };
        let c = &c.miss_causes;
        assert_eq!((c.alerts, c.total_alerts, c.causes.len()), (0, 2, 0));
    }

    #[test]
    fn json_keys_are_the_contracts() {
        let c = serde_json::to_value(ProbeExtra::Cycle(CycleExtra::default())).unwrap();
        let keys: Vec<&str> = c.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["cycle", "miss_causes"]);
        assert_eq!(c["miss_causes"]["misses"], 0);
        let l = serde_json::to_value(ProbeExtra::Lock(LockCounts::default())).unwrap();
        assert_eq!(l.as_object().unwrap().keys().collect::<Vec<_>>(), ["lock"]);
    }
}
