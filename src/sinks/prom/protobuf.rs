// SPDX-License-Identifier: MIT
//! The protobuf format: length-delimited `MetricFamily` messages, each
//! histogram both native (schema 3, [`super::hist`]) and with the classic
//! `le` buckets.

use latmon_core::hist::bucket_index;
use prost::Message as _;

use super::expose::{cause_labels, expose, secs, Exposition, Kind, Labels, LE_MAX_LOG2, LE_MIN_LOG2};
use super::hist::{self as promhist, SPAN};
use super::model::{Line, Snapshot};
use super::pb;

/// The protobuf exposition: `MetricFamily` messages, each encoded
/// length-delimited into `out` when the next one starts.
struct Proto<'a> {
    out: &'a mut Vec<u8>,
    map: &'a promhist::Map,
    counts: &'a mut [u64; SPAN],
    family: Option<pb::MetricFamily>,
    kind: Kind,
}

fn pair(name: &str, value: &str) -> pb::LabelPair {
    pb::LabelPair { name: Some(name.into()), value: Some(value.into()) }
}

fn labels_pb(labels: Labels<'_>) -> Vec<pb::LabelPair> {
    match labels {
        Labels::None => Vec::new(),
        Labels::Line(l) | Labels::Rule(l, _) => {
            let mut v = vec![pair("probe", &l.probe), pair("kind", &l.kind), pair("attach", &l.attach)];
            if let Labels::Rule(_, r) = labels {
                v.push(pair("rule", r));
            }
            v
        }
        Labels::Output(o) => vec![pair("output", o)],
        Labels::Loop(x) => vec![pair("loop", &x.name), pair("tid", &x.tid)],
        Labels::Cause(l, rank) | Labels::MissCause(l, rank) => {
            let (rank, kind, label) = cause_labels(l, rank, matches!(labels, Labels::MissCause(..)));
            vec![
                pair("probe", &l.probe),
                pair("kind", &l.kind),
                pair("attach", &l.attach),
                pair("rank", &rank),
                pair("cause_kind", kind),
                pair("cause", label),
            ]
        }
        Labels::Info(i) => vec![
            pair("version", env!("CARGO_PKG_VERSION")),
            pair("kernel", &i.kernel),
            pair("board", &i.board),
            pair("boot_id", &format!("{:08x}", i.boot_id)),
        ],
    }
}

impl Proto<'_> {
    fn flush(&mut self) {
        if let Some(f) = self.family.take() {
            // A family without samples is left out (the text format shows
            // its HELP/TYPE lines alone).
            if !f.metric.is_empty() {
                // Encoding into a Vec cannot run out of room.
                let _ = f.encode_length_delimited(self.out);
            }
        }
    }

    fn push(&mut self, m: pb::Metric) {
        if let Some(f) = self.family.as_mut() {
            f.metric.push(m);
        }
    }
}

impl Exposition for Proto<'_> {
    fn family(&mut self, name: &'static str, kind: Kind, help: &'static str) {
        self.flush();
        self.kind = kind;
        let t = match kind {
            Kind::Counter => pb::MetricType::Counter,
            Kind::Gauge => pb::MetricType::Gauge,
            Kind::Histogram => pb::MetricType::Histogram,
        };
        self.family = Some(pb::MetricFamily {
            name: Some(name.into()),
            help: Some(help.into()),
            r#type: Some(t as i32),
            metric: Vec::new(),
        });
    }

    fn sample(&mut self, labels: Labels<'_>, v: f64) {
        let mut m = pb::Metric { label: labels_pb(labels), ..Default::default() };
        match self.kind {
            Kind::Counter => m.counter = Some(pb::Counter { value: Some(v) }),
            _ => m.gauge = Some(pb::Gauge { value: Some(v) }),
        }
        self.push(m);
    }

    fn histogram(&mut self, l: &Line) {
        let h = &l.hist;
        let mut bucket = Vec::with_capacity(LE_MAX_LOG2 - LE_MIN_LOG2 + 1);
        let (mut cum, mut from) = (0u64, 0usize);
        for k in LE_MIN_LOG2..=LE_MAX_LOG2 {
            let upto = bucket_index(1u64 << k);
            cum += h.slots[from..upto].iter().sum::<u64>();
            from = upto;
            bucket.push(pb::Bucket { cumulative_count: Some(cum), upper_bound: Some(secs(1u64 << k)) });
        }
        self.counts.fill(0);
        let zero = self.map.fill(h, self.counts);
        let (mut spans, mut deltas) = (Vec::new(), Vec::new());
        promhist::sparse(self.counts, &mut spans, &mut deltas);
        // The native count is the buckets' sum (latmon's count in any
        // consistent read): a Prometheus that validates native histograms
        // rejects a count that differs from its buckets.
        let n = zero + self.counts.iter().sum::<u64>();
        let hist = pb::Histogram {
            sample_count: Some(n),
            sample_sum: Some(secs(h.sum_ns)),
            bucket,
            schema: Some(promhist::SCHEMA),
            zero_threshold: Some(promhist::ZERO_THRESHOLD_S),
            zero_count: Some(zero),
            positive_span: spans
                .into_iter()
                .map(|(o, n)| pb::BucketSpan { offset: Some(o), length: Some(n) })
                .collect(),
            positive_delta: deltas,
        };
        self.push(pb::Metric { label: labels_pb(Labels::Line(l)), histogram: Some(hist), ..Default::default() });
    }
}

/// The protobuf exposition of a snapshot (appending to `out`).
pub fn render_protobuf(out: &mut Vec<u8>, snap: &Snapshot, map: &promhist::Map, counts: &mut [u64; SPAN]) {
    let mut p = Proto { out, map, counts, family: None, kind: Kind::Gauge };
    expose(snap, &mut p);
    p.flush();
}
