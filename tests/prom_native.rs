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

mod common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use latmon::hist::{bucket_index, Hist};
use serde_json::Value;

const PROMETHEUS: &str = "/usr/bin/prometheus";

/// A Prometheus server of this test: killed (and its data removed) when
/// dropped.
struct Prometheus {
    child: Child,
    addr: String,
    dir: PathBuf,
    what: &'static str,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

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

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Prometheus {
    fn start(what: &'static str, target: &str, native: bool) -> Prometheus {
        let dir = std::env::temp_dir().join(format!("latmon-prom-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let cfg = dir.join("prometheus.yml");
        std::fs::write(
            &cfg,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  evaluation_interval: 1s\n\
                 rule_files: ['{}']\n\
                 scrape_configs:\n  - job_name: latmon\n    static_configs:\n      - targets: ['{target}']\n",
                Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/prometheus-rules.yml").display()
            ),
        )
        .unwrap();
        let addr = format!("127.0.0.1:{}", free_port());
        let mut cmd = Command::new(PROMETHEUS);
        cmd.arg(format!("--config.file={}", cfg.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("log")).unwrap());
        if native {
            cmd.arg("--enable-feature=native-histograms");
        }
        let child = cmd.spawn().expect("prometheus (Debian package prometheus; scripts/install-deps.sh)");
        let p = Prometheus { child, addr, dir, what };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some((200, _)) = http_get(&p.addr, "/-/ready") {
                break;
            }
            assert!(Instant::now() < deadline, "{what} Prometheus not ready: {}", p.log());
            std::thread::sleep(Duration::from_millis(200));
        }
        p
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    /// An instant query (at `at`, unix seconds, or now): its result array.
    fn query(&self, q: &str, at: Option<f64>) -> Vec<Value> {
        let mut path = format!("/api/v1/query?query={}", urlencode(q));
        if let Some(t) = at {
            path.push_str(&format!("&time={t:.3}"));
        }
        let (status, body) =
            http_get(&self.addr, &path).unwrap_or_else(|| panic!("{} Prometheus: no answer", self.what));
        let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{}: {e}: {body}", self.what));
        assert_eq!((status, v["status"].as_str()), (200, Some("success")), "{} {q}: {body}", self.what);
        v["data"]["result"].as_array().unwrap().clone()
    }

    /// A query whose answer is one float sample.
    fn scalar(&self, q: &str, at: Option<f64>) -> Option<f64> {
        let r = self.query(q, at);
        let v = r.first()?["value"][1].as_str()?.parse().ok();
        v
    }

    /// Wait until `q` returns `want` (the data has been scraped).
    fn wait_for(&self, q: &str, want: f64) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let got = self.scalar(q, None);
            if got == Some(want) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} Prometheus: {q} = {got:?}, want {want}; log: {}",
                self.what,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// GET over HTTP/1.0 (no chunked answers): (status, body).
fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    http_get_accept(addr, path, None).map(|(s, _, b)| (s, String::from_utf8_lossy(&b).into_owned()))
}

fn http_get_accept(addr: &str, path: &str, accept: Option<&str>) -> Option<(u16, String, Vec<u8>)> {
    let mut c = std::net::TcpStream::connect(addr).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let accept = accept.map(|a| format!("Accept: {a}\r\n")).unwrap_or_default();
    write!(c, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n{accept}\r\n").ok()?;
    let mut resp = Vec::new();
    c.read_to_end(&mut resp).ok()?;
    let at = resp.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&resp[..at]).into_owned();
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    let ctype = head.lines().find_map(|l| l.strip_prefix("Content-Type: ")).unwrap_or("").to_string();
    Some((status, ctype, resp[at + 4..].to_vec()))
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

fn prom_addr(stderr: &std::sync::Mutex<Vec<String>>) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(l) = stderr.lock().unwrap().iter().find(|l| l.contains("serving Prometheus metrics at http://")) {
            let at = l.find("http://").unwrap() + 7;
            return l[at..].trim_end_matches("/metrics").to_string();
        }
        assert!(Instant::now() < deadline, "latmon did not log its Prometheus address");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
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
