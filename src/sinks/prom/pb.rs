// SPDX-License-Identifier: MIT
//! The Prometheus protobuf exposition (`application/vnd.google.protobuf;
//! proto=io.prometheus.client.MetricFamily; encoding=delimited`): a stream
//! of length-delimited `MetricFamily` messages, encoded by prost.
//!
//! The structs mirror the messages of package `io.prometheus.client`, file
//! `io/prometheus/client/metrics.proto` of the Prometheus client_model
//! (proto2), field for field with the same tags and wire types; latmon
//! writes only the fields listed here (exemplars, summaries, untyped and
//! created timestamps are left out - a proto2 reader skips absent fields).
//! Written with `#[derive(prost::Message)]` so no protoc runs at build
//! time; docs/prometheus.md lists the fields and tags.

/// `enum MetricType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, prost::Enumeration)]
#[repr(i32)]
pub enum MetricType {
    Counter = 0,
    Gauge = 1,
    Histogram = 4,
}

/// `message LabelPair`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LabelPair {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub value: Option<String>,
}

/// `message Gauge`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Gauge {
    #[prost(double, optional, tag = "1")]
    pub value: Option<f64>,
}

/// `message Counter` (without `exemplar` = 2, `created_timestamp` = 3).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Counter {
    #[prost(double, optional, tag = "1")]
    pub value: Option<f64>,
}

/// `message Bucket`: a classic (cumulative, `le`) bucket.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Bucket {
    #[prost(uint64, optional, tag = "1")]
    pub cumulative_count: Option<u64>,
    /// Inclusive.
    #[prost(double, optional, tag = "2")]
    pub upper_bound: Option<f64>,
}

/// `message BucketSpan`: `length` consecutive native buckets, `offset`
/// after the previous span (the first: the first bucket's index).
#[derive(Clone, PartialEq, prost::Message)]
pub struct BucketSpan {
    #[prost(sint32, optional, tag = "1")]
    pub offset: Option<i32>,
    #[prost(uint32, optional, tag = "2")]
    pub length: Option<u32>,
}

/// `message Histogram`: classic buckets (3) and the native histogram
/// (5..13) of the same data side by side, as client libraries send them.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Histogram {
    #[prost(uint64, optional, tag = "1")]
    pub sample_count: Option<u64>,
    #[prost(double, optional, tag = "2")]
    pub sample_sum: Option<f64>,
    #[prost(message, repeated, tag = "3")]
    pub bucket: Vec<Bucket>,
    #[prost(sint32, optional, tag = "5")]
    pub schema: Option<i32>,
    #[prost(double, optional, tag = "6")]
    pub zero_threshold: Option<f64>,
    #[prost(uint64, optional, tag = "7")]
    pub zero_count: Option<u64>,
    #[prost(message, repeated, tag = "12")]
    pub positive_span: Vec<BucketSpan>,
    /// Each bucket's count minus the previous bucket's (the first: minus 0).
    #[prost(sint64, repeated, tag = "13")]
    pub positive_delta: Vec<i64>,
}

/// `message Metric` (without `summary` = 4, `untyped` = 5, `timestamp_ms` = 6).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Metric {
    #[prost(message, repeated, tag = "1")]
    pub label: Vec<LabelPair>,
    #[prost(message, optional, tag = "2")]
    pub gauge: Option<Gauge>,
    #[prost(message, optional, tag = "3")]
    pub counter: Option<Counter>,
    #[prost(message, optional, tag = "7")]
    pub histogram: Option<Histogram>,
}

/// `message MetricFamily` (without `unit` = 5).
#[derive(Clone, PartialEq, prost::Message)]
pub struct MetricFamily {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub help: Option<String>,
    #[prost(enumeration = "MetricType", optional, tag = "3")]
    pub r#type: Option<i32>,
    #[prost(message, repeated, tag = "4")]
    pub metric: Vec<Metric>,
}
