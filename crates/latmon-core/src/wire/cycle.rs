// SPDX-License-Identifier: MIT
//! A cycle record's own fields on the wire (Alert revision 8): the
//! model's [`CycleMark`] as a [`WireCycle`] and back, and the trailing
//! fields of an Alert being encoded. Pure, no I/O.
//!
//! The cycle half follows the anatomy (`cpu_woken`, `cpu_ran`, `causes`),
//! which is then sent even without causes (an overrun has none): an
//! older receiver reads the anatomy it knows and ignores the rest as
//! trailing bytes; a revision 8 receiver reads an older sender's Alert as
//! no cycle record (`event` 0, the zero a short body is padded with).

use serde::ser::SerializeTuple;
use serde::{Deserialize, Serialize, Serializer};

use crate::anatomy::BlockedOn;
use crate::cycle::{CycleEvent, CycleMark, Doing, Rule, RuleMark};
use crate::text::truncate;

/// The cycle half of an Alert (revision 8; docs/wire-format.md, Alert).
/// All zero: not a cycle record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireCycle {
    /// [`event`] codes: 0 none, 1 miss, 2 overrun, 3 response, 4 rule
    /// (`doing_id` the rule's code, `doing_name` the syscall; its waker is
    /// not carried); another value is a newer sender's event, shown as a
    /// plain alert.
    pub event: u8,
    /// CLOCK_MONOTONIC: the release and release + deadline.
    pub release_ns: u64,
    pub deadline_ns: u64,
    /// When the cycle was done (None: an overrun, still running).
    pub done_ns: Option<u64>,
    /// [`doing`] codes: 0 not said, 1 running, 2 runnable, 3 blocked.
    pub doing: u8,
    /// runnable: the pid it waits behind; blocked: what it sleeps on
    /// (`BlockedOn` code, as the blocked cause's `id`); else 0.
    pub doing_id: u32,
    /// runnable: that task's comm; blocked: the syscall; else empty. At
    /// most 64 bytes (a receiver refuses more, as for every alert name).
    pub doing_name: String,
    /// Times the loop resumed on another CPU within the cycle.
    pub migrations: u64,
}

/// `WireCycle::event` values.
pub mod event {
    pub const NONE: u8 = 0;
    pub const MISS: u8 = 1;
    pub const OVERRUN: u8 = 2;
    pub const RESPONSE: u8 = 3;
    pub const RULE: u8 = 4;
}

/// `WireCycle::doing` values.
pub mod doing {
    pub const NONE: u8 = 0;
    pub const RUNNING: u8 = 1;
    pub const RUNNABLE: u8 = 2;
    pub const BLOCKED: u8 = 3;
}

fn event_code(e: CycleEvent) -> u8 {
    match e {
        CycleEvent::Miss => event::MISS,
        CycleEvent::Overrun => event::OVERRUN,
        CycleEvent::Response => event::RESPONSE,
        CycleEvent::Rule => event::RULE,
    }
}

/// (doing, doing_id, doing_name) of a mark; a rule record's rule and
/// syscall in the last two.
fn doing_parts(m: &CycleMark) -> (u8, u32, &str) {
    if let Some(r) = &m.rule {
        return (doing::NONE, r.rule.code(), &r.syscall);
    }
    match m.doing.as_ref() {
        None => (doing::NONE, 0, ""),
        Some(Doing::Running) => (doing::RUNNING, 0, ""),
        Some(Doing::Runnable { comm, pid }) => (doing::RUNNABLE, *pid, comm),
        Some(Doing::Blocked { on, syscall }) => (doing::BLOCKED, on.code(), syscall),
    }
}

/// The mark as an owned wire value (tests, tools; names cut to 64 bytes).
pub fn to_wire(m: &CycleMark) -> WireCycle {
    let (doing, doing_id, name) = doing_parts(m);
    WireCycle {
        event: event_code(m.event),
        release_ns: m.release_ns,
        deadline_ns: m.deadline_ns,
        done_ns: m.done_ns,
        doing,
        doing_id,
        doing_name: truncate(name, super::MAX_ALERT_NAME_LEN).into(),
        migrations: m.migrations,
    }
}

/// The mark a decoded Alert carries: None for event 0 (not a cycle
/// record, or an older sender) and for an event this receiver does not
/// know (the record still shows, as a plain alert). A state it does not
/// know reads as not said.
pub fn from_wire(w: &WireCycle) -> Option<CycleMark> {
    let event = match w.event {
        event::MISS => CycleEvent::Miss,
        event::OVERRUN => CycleEvent::Overrun,
        event::RESPONSE => CycleEvent::Response,
        event::RULE => {
            let rule = Rule::from_code(w.doing_id)?;
            return Some(CycleMark {
                event: CycleEvent::Rule,
                release_ns: w.release_ns,
                deadline_ns: w.deadline_ns,
                done_ns: None,
                doing: None,
                migrations: 0,
                rule: Some(RuleMark { rule, syscall: w.doing_name.clone(), waker: None }),
            });
        }
        _ => return None,
    };
    let doing = match w.doing {
        doing::RUNNING => Some(Doing::Running),
        doing::RUNNABLE => Some(Doing::Runnable { comm: w.doing_name.clone(), pid: w.doing_id }),
        doing::BLOCKED => Some(Doing::Blocked { on: BlockedOn::from_code(w.doing_id), syscall: w.doing_name.clone() }),
        _ => None,
    };
    Some(CycleMark {
        event,
        release_ns: w.release_ns,
        deadline_ns: w.deadline_ns,
        done_ns: w.done_ns,
        doing,
        migrations: w.migrations,
        rule: None,
    })
}

/// The cycle half of an Alert being encoded: the model's, or a decoded
/// frame's.
#[derive(Clone, Copy)]
pub(crate) enum CycleOut<'a> {
    Model(&'a CycleMark),
    Wire(&'a WireCycle),
}

impl Serialize for CycleOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let m = match self {
            CycleOut::Wire(w) => return w.serialize(s),
            CycleOut::Model(m) => m,
        };
        // As WireCycle's fields, without building one (the agent's path).
        let (doing, id, name) = doing_parts(m);
        let mut t = s.serialize_tuple(8)?;
        t.serialize_element(&event_code(m.event))?;
        t.serialize_element(&m.release_ns)?;
        t.serialize_element(&m.deadline_ns)?;
        t.serialize_element(&m.done_ns)?;
        t.serialize_element(&doing)?;
        t.serialize_element(&id)?;
        t.serialize_element(truncate(name, super::MAX_ALERT_NAME_LEN))?;
        t.serialize_element(&m.migrations)?;
        t.end()
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{golden_cycle_alert, golden_overrun_alert};
    use super::super::*;
    use crate::summary::{render_detail_into, AlertRecord, Named};

    /// The frames of `alerts` after a Hello naming probe 0 `cycle:ctrl`.
    fn stream(alerts: &[Alert]) -> Vec<u8> {
        let hello = Hello {
            protocol_revision: PROTOCOL_REVISION,
            latmon_version: "0.1.0".into(),
            board: String::new(),
            kernel: String::new(),
            boot_id: 0x1234_5678,
            start_ns: 0,
            interval_ns: 1_000_000_000,
            probe_count: 1,
            probes: vec![ProbeDesc {
                id: 0,
                name: "cycle:ctrl".into(),
                kind: "cycle".into(),
                attach: "tp_btf".into(),
                mode: String::new(),
                scheme: BucketScheme::LATMON,
            }],
            thresholds: Vec::new(),
            certificate: None,
        };
        let mut v = encode_to_vec(&Frame::Hello(hello)).unwrap();
        for a in alerts {
            v.extend(encode_to_vec(&Frame::Alert(a.clone())).unwrap());
        }
        v
    }

    /// What `Tracker` makes of `bytes` (frames, alert records).
    fn receive(bytes: &[u8]) -> (Vec<Result<Frame, FrameError>>, Vec<ReceivedAlert>) {
        let (mut frames, mut recs) = (Vec::new(), Vec::new());
        let mut t = Tracker::new();
        FrameDecoder::new().feed(bytes, &mut |r| {
            if let Ok(f) = &r {
                if let Event::Alert(a) = t.on_frame(f.clone()) {
                    recs.push(a);
                }
            }
            frames.push(r);
        });
        (frames, recs)
    }

    /// The agent's record of a golden wire Alert (probe `cycle:ctrl`).
    fn record_of(a: &Alert) -> AlertRecord {
        AlertRecord {
            id: crate::ident::ProbeId(0),
            pid: a.pid,
            tid: a.tid,
            comm: a.comm.clone(),
            cpu: a.cpu,
            latency_ns: a.latency_ns,
            time_ns: a.time_ns,
            anatomy: super::super::anatomy::from_wire(a.cpu_woken, a.cpu_ran, &a.causes),
            cycle: super::from_wire(&a.cycle),
        }
    }

    fn detail(a: Named<'_>) -> String {
        let mut s = String::new();
        assert!(render_detail_into(&mut s, a, usize::MAX));
        s
    }

    #[test]
    fn a_cycle_record_crosses_a_link_and_reads_as_the_agent_prints_it() {
        let doc = include_str!("../../../../docs/wire-format.md");
        for (name, golden, line) in [
            (
                "alert-cycle",
                golden_cycle_alert(),
                "miss 1.62ms of 1.00ms: running 1500 us, blocked on io in fdatasync 60 us, 7 page faults, other 60 us",
            ),
            (
                "alert-overrun",
                golden_overrun_alert(),
                "overrun 1.00ms of 1.00ms, runnable behind hog[4242], 1 migrations",
            ),
        ] {
            let rec = record_of(&golden);
            assert!(rec.cycle.is_some() && rec.anatomy.as_ref().is_none_or(|an| an.sums_to(rec.latency_ns)));
            // The agent's encoder (the frames sinks' path) sends the
            // spec's bytes.
            let mut v = Vec::new();
            Encoder::new().alert(golden.boot_id, 0, &rec, &mut |b| v.extend_from_slice(b)).unwrap();
            let spec = super::super::tests::spec_vector(doc, name, "frame");
            assert_eq!(v, spec, "{name}");
            // The receiver's record is the agent's: the same JSON, the
            // same text line.
            let (frames, recs) = receive(&[&stream(&[])[..], &v].concat());
            assert!(frames.iter().all(|f| f.is_ok()), "{frames:?}");
            let sent = Named { name: "cycle:ctrl", record: &rec };
            assert_eq!((recs.len(), &recs[0].record, recs[0].probe.as_str()), (1, &rec, "cycle:ctrl"), "{name}");
            assert_eq!(crate::json::to_string(&recs[0].named()).unwrap(), crate::json::to_string(&sent).unwrap());
            assert_eq!(detail(recs[0].named()), line, "{name}");
            let json = crate::json::to_string(&recs[0].named()).unwrap();
            assert!(json.contains(&format!("\"event\":\"{}\"", rec.cycle.as_ref().unwrap().event.word())), "{json}");
        }
    }

    #[test]
    fn an_older_receiver_reads_the_common_part_of_a_cycle_alert() {
        // A revision 5-7 receiver's Alert: the fields before `cycle`.
        #[derive(serde::Deserialize, Debug, PartialEq)]
        struct OldAlert {
            boot_id: u32,
            probe: u16,
            pid: u32,
            tid: u32,
            comm: String,
            cpu: u32,
            latency_ns: u64,
            time_ns: u64,
            cpu_woken: u32,
            cpu_ran: u32,
            causes: Vec<WireCause>,
        }
        for a in [golden_cycle_alert(), golden_overrun_alert()] {
            let frame = encode_to_vec(&Frame::Alert(a.clone())).unwrap();
            let mut p = frame[..frame.len() - 1].to_vec();
            let n = cobs::decode_in_place(&mut p).unwrap();
            let (old, rest): (OldAlert, _) = postcard::take_from_bytes(&p[2..n - 4]).unwrap();
            assert_eq!((old.latency_ns, old.comm.as_str(), &old.causes), (a.latency_ns, "ctrl_loop", &a.causes));
            assert!(!rest.is_empty(), "the cycle half is trailing bytes to it");
            // And the bytes before the cycle half are an anatomy Alert's.
            let plain = Alert { cycle: WireCycle::default(), ..a.clone() };
            let q = encode_to_vec(&Frame::Alert(plain)).unwrap();
            let mut q = q[..q.len() - 1].to_vec();
            let m = cobs::decode_in_place(&mut q).unwrap();
            if !a.causes.is_empty() {
                assert_eq!(p[..m - 4], q[..m - 4]);
            }
        }
        // An older sender's Alert reads as no cycle record.
        let (_, recs) = receive(&stream(&[Alert { cycle: WireCycle::default(), ..golden_cycle_alert() }]));
        assert_eq!((recs.len(), recs[0].record.cycle.is_none(), recs[0].record.anatomy.is_some()), (1, true, true));
    }

    #[test]
    fn hostile_cycle_halves_are_refused_or_shown_plain_and_the_no_std_receiver_agrees() {
        let with = |f: &dyn Fn(&mut WireCycle)| {
            let mut a = golden_overrun_alert();
            f(&mut a.cycle);
            a
        };
        let long = with(&|c| c.doing_name = "n".repeat(MAX_ALERT_NAME_LEN + 1));
        let at_bound = with(&|c| c.doing_name = "\x1b[2J".repeat(16));
        let unknown_event = with(&|c| c.event = 200);
        let unknown_state = with(&|c| {
            c.doing = 77;
            c.done_ns = Some(0);
            c.deadline_ns = 0;
        });
        let bytes = stream(&[long, at_bound, unknown_event, unknown_state]);
        // A done_ns tag that is neither None nor Some.
        let mut bad_tag = golden_cycle_alert();
        bad_tag.cycle.done_ns = None;
        let f = encode_to_vec(&Frame::Alert(bad_tag)).unwrap();
        let mut p = f[..f.len() - 1].to_vec();
        let n = cobs::decode_in_place(&mut p).unwrap();
        p.truncate(n - 4);
        let at = n - 4 - 4; // doing, doing_id, doing_name, migrations follow the tag
        assert_eq!(p[at - 1], 0, "the None tag");
        p[at - 1] = 2;
        let crc = crate::crc32::hash(&p);
        p.extend(crc.to_le_bytes());
        let mut enc = vec![0; cobs::max_encoding_length(p.len())];
        let k = cobs::encode(&p, &mut enc);
        enc.truncate(k);
        enc.push(DELIMITER);
        let bytes = [&bytes[..], &enc].concat();

        let (frames, recs) = receive(&bytes);
        let ok: Vec<bool> = frames.iter().map(|f| f.is_ok()).collect();
        assert_eq!(ok, [true, false, true, true, true, false], "{frames:?}");
        assert!(matches!(&frames[1], Err(FrameError::Body { why, .. }) if why.contains("65-byte name")));
        // At the bound: kept, shown clean.
        let line = detail(recs[0].named());
        assert!(line.starts_with("overrun 1.00ms of 1.00ms, runnable behind ") && !line.contains('\x1b'), "{line}");
        // A newer sender's event: a plain alert; an unknown state: not said.
        assert_eq!(recs[1].record.cycle, None);
        let c = recs[2].record.cycle.as_ref().unwrap();
        assert_eq!((c.doing.as_ref(), c.done_ns), (None, Some(0)));
        assert_eq!(detail(recs[2].named()), "overrun 1.00ms of 0ns, 1 migrations", "a deadline before the release");
        // The supervisor's receiver judges the same frames the same way.
        let mut fixed = FixedReceiver::<2, 8, 4>::new();
        fixed.feed(&bytes, |_, _| {});
        let dec = {
            let mut d = FrameDecoder::new();
            d.feed(&bytes, &mut |_| {});
            d.stats
        };
        assert_eq!(fixed.stats, dec, "link statistics");
        let events: Vec<u8> = fixed.tracker.alerts.iter().map(|a| a.event).collect();
        assert_eq!(events, [2, 200, 2]);
    }

    #[test]
    fn a_rule_record_crosses_as_event_4_without_its_waker() {
        use crate::anatomy::Policy;
        use crate::cycle::{CycleEvent, CycleMark, Rule, RuleMark, Waker};
        let rule = |waker| RuleMark { rule: Rule::SleepRealtimeClock, syscall: "clock_nanosleep".into(), waker };
        let mark = |waker| CycleMark {
            event: CycleEvent::Rule,
            release_ns: 5,
            deadline_ns: 0,
            done_ns: None,
            doing: None,
            migrations: 0,
            rule: Some(rule(waker)),
        };
        let waker = Waker { comm: "w".into(), pid: 1, tid: 2, policy: Policy::Fifo, prio: 3 };
        let w = super::to_wire(&mark(Some(waker)));
        assert_eq!((w.event, w.doing, w.doing_id, w.doing_name.as_str()), (4, 0, 3, "clock_nanosleep"));
        assert_eq!(super::from_wire(&w), Some(mark(None)));
        // A rule this receiver does not know: a plain alert.
        assert_eq!(super::from_wire(&super::WireCycle { doing_id: 9, ..w }), None);
    }
}
