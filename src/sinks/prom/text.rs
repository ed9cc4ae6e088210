// SPDX-License-Identifier: MIT
//! The text format (version 0.0.4), classic `le` buckets only; label
//! values escaped as the format requires.

use std::fmt::Write as _;

use latmon_core::hist::bucket_index;

use super::expose::{cause_labels, expose, secs, Exposition, Kind, Labels, LE_MAX_LOG2, LE_MIN_LOG2};
use super::model::{Line, Snapshot};

/// A label value, escaped as the text format requires.
struct Esc<'a>(&'a str);

impl std::fmt::Display for Esc<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for ch in self.0.chars() {
            match ch {
                '\\' => f.write_str("\\\\")?,
                '"' => f.write_str("\\\"")?,
                '\n' => f.write_str("\\n")?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// The text format into a `String`.
struct Text<'a> {
    s: &'a mut String,
    name: &'static str,
}

impl Text<'_> {
    fn labels(&mut self, labels: Labels<'_>, le: Option<&dyn std::fmt::Display>) {
        let s = &mut *self.s;
        match labels {
            Labels::None => {}
            Labels::Line(l) | Labels::Rule(l, _) => {
                let _ =
                    write!(s, "{{probe=\"{}\",kind=\"{}\",attach=\"{}\"", Esc(&l.probe), Esc(&l.kind), Esc(&l.attach));
                if let Labels::Rule(_, r) = labels {
                    s.push_str(",rule=\"");
                    s.push_str(r);
                    s.push('"');
                }
                if let Some(le) = le {
                    let _ = write!(s, ",le=\"{le}\"");
                }
                s.push('}');
            }
            Labels::Output(o) => {
                let _ = write!(s, "{{output=\"{}\"}}", Esc(o));
            }
            Labels::Loop(x) => {
                let _ = write!(s, "{{loop=\"{}\",tid=\"{}\"}}", Esc(&x.name), x.tid);
            }
            Labels::Cause(l, rank) | Labels::MissCause(l, rank) => {
                let (rank, kind, label) = cause_labels(l, rank, matches!(labels, Labels::MissCause(..)));
                let _ = write!(
                    s,
                    "{{probe=\"{}\",kind=\"{}\",attach=\"{}\",rank=\"{rank}\",cause_kind=\"{kind}\",cause=\"{}\"}}",
                    Esc(&l.probe),
                    Esc(&l.kind),
                    Esc(&l.attach),
                    Esc(label)
                );
            }
            Labels::Info(i) => {
                let _ = write!(
                    s,
                    "{{version=\"{}\",kernel=\"{}\",board=\"{}\",boot_id=\"{:08x}\"}}",
                    env!("CARGO_PKG_VERSION"),
                    Esc(&i.kernel),
                    Esc(&i.board),
                    i.boot_id
                );
            }
        }
    }
}

impl Exposition for Text<'_> {
    fn family(&mut self, name: &'static str, kind: Kind, help: &'static str) {
        self.name = name;
        let kind = match kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        let _ = writeln!(self.s, "# HELP {name} {help}");
        let _ = writeln!(self.s, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, labels: Labels<'_>, v: f64) {
        self.s.push_str(self.name);
        self.labels(labels, None);
        let _ = writeln!(self.s, " {v}");
    }

    fn histogram(&mut self, l: &Line) {
        let name = self.name;
        let h = &l.hist;
        let mut cum = 0u64;
        let mut from = 0usize;
        for k in LE_MIN_LOG2..=LE_MAX_LOG2 {
            let upto = bucket_index(1u64 << k);
            cum += h.slots[from..upto].iter().sum::<u64>();
            from = upto;
            let _ = write!(self.s, "{name}_bucket");
            self.labels(Labels::Line(l), Some(&secs(1u64 << k)));
            let _ = writeln!(self.s, " {cum}");
        }
        let _ = write!(self.s, "{name}_bucket");
        self.labels(Labels::Line(l), Some(&"+Inf"));
        let _ = writeln!(self.s, " {}", h.count);
        let _ = write!(self.s, "{name}_sum");
        self.labels(Labels::Line(l), None);
        let _ = writeln!(self.s, " {}", secs(h.sum_ns));
        let _ = write!(self.s, "{name}_count");
        self.labels(Labels::Line(l), None);
        let _ = writeln!(self.s, " {}", h.count);
    }
}

/// The text exposition of a snapshot (appending to `s`).
pub fn render_text(s: &mut String, snap: &Snapshot) {
    expose(snap, &mut Text { s, name: "" });
}
