// SPDX-License-Identifier: MIT
//! latmon's histograms in a real Prometheus (Debian's 2.42, root, live
//! BPF): two servers scrape one latmon every second - one with
//! `--enable-feature=native-histograms` (it asks for protobuf and stores
//! the native schema-3 histogram), one without (text, classic `le`
//! buckets) - while the ufunc fixture makes calls of known durations. Over
//! a window that holds the second phase of the workload only,
//! `histogram_quantile(0.5|0.99, ...)` of the native histogram agrees with
//! latmon's own percentile of the same window (its JSON intervals merged)
//! within latmon's bucket error, 12.5 %, and the counts agree exactly. The
//! classic query is printed beside it.

use crate::common;

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::prometheus::*;
use common::*;
use latmon_core::hist::{bucket_index, Hist};
use serde_json::Value;

/// latmon, killed if the test fails before it stops it.
struct Latmon(Option<Child>);

impl Drop for Latmon {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

fn mono_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap();
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// `lm-target work ...`: returns the calls' own durations (the truth).
fn work(args: &[&str]) -> Vec<u64> {
    let out = Command::new(lm_target()).arg("work").args(args).output().unwrap();
    assert!(out.status.success(), "lm-target work {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .find_map(|w| w.strip_prefix("self_ns="))
        .map(|v| v.split(',').map(|d| d.parse().unwrap()).collect())
        .unwrap_or_default()
}

/// latmon's own histogram of the intervals that ended after `after_ns`
/// (monotonic): its JSON buckets merged, min and max of those intervals.
fn latmon_window(lines: &[Value], probe: &str, after_ns: u64) -> Hist {
    let mut h = Hist::default();
    for l in lines.iter().filter(|l| l["time_ns"].as_u64().unwrap() > after_ns) {
        let Some(p) = l["probes"].as_array().unwrap().iter().find(|p| p["name"] == probe) else { continue };
        let n = p["count"].as_u64().unwrap();
        if n == 0 {
            continue;
        }
        let (lo, hi) = (p["min_ns"].as_u64().unwrap(), p["max_ns"].as_u64().unwrap());
        h.min_ns = if h.count == 0 { lo } else { h.min_ns.min(lo) };
        h.max_ns = h.max_ns.max(hi);
        h.count += n;
        h.sum_ns += p["mean_ns"].as_u64().unwrap() * n;
        for b in p["buckets"].as_array().unwrap() {
            h.slots[bucket_index(b[0].as_u64().unwrap())] += b[2].as_u64().unwrap();
        }
    }
    h
}

fn pct(x: f64, of: f64) -> f64 {
    (x - of) / of * 100.0
}

fn truth_quantile(v: &[u64], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_unstable();
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1] as f64
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn prometheus_native_histograms_keep_latmons_resolution() {
    assert!(Path::new(PROMETHEUS).exists(), "{PROMETHEUS} (Debian package prometheus; scripts/install-deps.sh)");
    let probe = format!("ufunc:{}:lm_work,name=work", lm_target().display());
    let (latmon, stderr) = start_run_logged(
        &[
            "--probe",
            &probe,
            "--interval",
            "250ms",
            "--format",
            "json",
            "--output",
            "-",
            "--output",
            "prom://127.0.0.1:0",
        ],
        &[],
    );
    let mut latmon = Latmon(Some(latmon));
    let target = prom_addr(&stderr);

    // What latmon answers to whom (before any server scrapes).
    let pb_accept = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
    let (st, ctype, body) = http_get_accept(&target, "/metrics", Some(pb_accept)).unwrap();
    assert_eq!((st, ctype.as_str()), (200, latmon::sinks::prom::CONTENT_TYPE_PROTOBUF));
    assert!(!body.is_empty() && !body.starts_with(b"# HELP"), "protobuf, not text");
    let (_, ctype, body) = http_get_accept(&target, "/metrics", Some("text/plain;version=0.0.4")).unwrap();
    assert_eq!(ctype, latmon::sinks::prom::CONTENT_TYPE);
    assert!(body.starts_with(b"# HELP latmon_info"));

    let native = Prometheus::start("native", &target, true);
    let classic = Prometheus::start("classic", &target, false);
    let count_n = "histogram_count(latmon_latency_seconds{probe=\"work\"})";
    let count_c = "latmon_latency_seconds_count{probe=\"work\"}";
    native.wait_for(count_n, 0.0);
    classic.wait_for(count_c, 0.0);

    // Phase 1 (outside the window): 300 calls of 100 us.
    let phase1 = work(&["300", "100000"]);
    native.wait_for(count_n, 300.0);
    classic.wait_for(count_c, 300.0);
    std::thread::sleep(Duration::from_millis(1500));
    let (gap_unix, gap_mono) = (unix_now(), mono_ns());
    std::thread::sleep(Duration::from_millis(1500));

    // Phase 2 (the window): 900 calls of 30 us, 100 of 400 us.
    let phase2 = work(&["900", "30000", "100", "400000"]);
    assert_eq!((phase1.len(), phase2.len()), (300, 1000), "lm-target's own records");
    native.wait_for(count_n, 1300.0);
    classic.wait_for(count_c, 1300.0);
    std::thread::sleep(Duration::from_millis(2500));
    let end = unix_now();
    let (status, out) = stop(latmon.0.take().unwrap());
    assert!(status.success(), "latmon exited with {status}");
    let lines = json_lines(&out);

    // latmon's own view of the window: its JSON intervals since the gap.
    let ours = latmon_window(&lines, "work", gap_mono);
    assert_eq!(ours.count, 1000, "latmon's intervals since the gap hold phase 2 exactly");

    // Counts: exact, from both servers.
    let w = format!("{:.0}s", (end - gap_unix).ceil());
    let n_end = native.scalar(count_n, Some(end)).unwrap();
    let n_gap = native.scalar(count_n, Some(gap_unix)).unwrap();
    let c_end = classic.scalar(count_c, Some(end)).unwrap();
    let c_gap = classic.scalar(count_c, Some(gap_unix)).unwrap();
    assert_eq!(
        (n_end - n_gap, c_end - c_gap),
        (1000.0, 1000.0),
        "window counts: native {n_gap}..{n_end}, classic {c_gap}..{c_end}"
    );
    // The native server holds a native histogram, not classic buckets.
    let raw = native.query("latmon_latency_seconds{probe=\"work\"}", Some(end));
    assert!(raw.first().is_some_and(|s| s.get("histogram").is_some()), "native histogram stored: {raw:?}");
    assert!(native.query("latmon_latency_seconds_bucket{probe=\"work\"}", Some(end)).is_empty());
    let sum_n = native.scalar("histogram_sum(latmon_latency_seconds{probe=\"work\"})", Some(end)).unwrap();
    let sum_c = classic.scalar("latmon_latency_seconds_sum{probe=\"work\"}", Some(end)).unwrap();
    assert!((sum_n - sum_c).abs() < 1e-9, "sums: native {sum_n} classic {sum_c}");

    let mut failures = Vec::new();
    for q in [0.5, 0.99] {
        let nq = format!("histogram_quantile({q}, increase(latmon_latency_seconds{{probe=\"work\"}}[{w}]))");
        let cq = format!(
            "histogram_quantile({q}, sum by (le) (increase(latmon_latency_seconds_bucket{{probe=\"work\"}}[{w}])))"
        );
        let pn = native.scalar(&nq, Some(end)).unwrap() * 1e9;
        let pc = classic.scalar(&cq, Some(end)).unwrap() * 1e9;
        let pl = ours.quantile(q) as f64;
        let truth = truth_quantile(&phase2, q);
        eprintln!(
            "FIGURES p{}: latmon {:.0} ns | Prometheus native {:.0} ns ({:+.1} %) | classic {:.0} ns ({:+.1} %) | truth (lm-target's own) {:.0} ns",
            q * 100.0,
            pl,
            pn,
            pct(pn, pl),
            pc,
            pct(pc, pl),
            truth
        );
        if pct(pn, pl).abs() > 12.5 {
            failures.push(format!("p{}: native {pn:.0} vs latmon {pl:.0} ns", q * 100.0));
        }
    }
    // The fleet rules (docs/prometheus-rules.yml) record on both servers:
    // from the native histogram on one, the classic buckets on the other.
    for (p, what) in [(&native, "native"), (&classic, "classic")] {
        let rec = p.scalar("latmon:latency_seconds:p99_1m{probe=\"work\"}", Some(end));
        let events = p.scalar("latmon:events:rate1m{probe=\"work\"}", Some(end));
        eprintln!("FIGURES {what} server, recording rules at the end: latmon:latency_seconds:p99_1m {rec:?} s, latmon:events:rate1m {events:?}/s");
        assert!(
            rec.is_some_and(|v| v > 0.0) && events.is_some_and(|v| v > 0.0),
            "{what}: recording rules produce nothing: {}",
            p.log()
        );
    }
    eprintln!(
        "FIGURES counts: window {} (latmon) = {} (native) = {} (classic); total {n_end} / {c_end}",
        ours.count,
        n_end - n_gap,
        c_end - c_gap
    );
    assert!(failures.is_empty(), "native quantiles off by more than latmon's bucket error: {failures:?}");
}
