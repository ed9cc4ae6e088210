// SPDX-License-Identifier: MIT
//! `--output prom://[HOST]:PORT`: the Prometheus text exposition format
//! (version 0.0.4, which every Prometheus-compatible scraper reads),
//! served over HTTP at `GET /metrics` by one small blocking server thread.
//!
//! Every interval the agent thread renders the whole exposition into a
//! buffer it keeps (no allocation once grown) and copies it into the slot
//! the server thread serves from, taking the lock only if it is free: a
//! scrape in progress never delays the agent (that interval's update is
//! skipped, the next one lands). Scrapes are served one at a time with
//! 2 s socket timeouts; a slow client delays only other scrapes.
//!
//! Histograms: `latmon_latency_seconds` with cumulative `le` buckets at
//! powers of two of nanoseconds, 2^8 ns (256 ns) to 2^36 ns (68.7 s), plus
//! `+Inf`: 30 series per probe, whatever the data. Each is an exact sum of
//! latmon's log-linear buckets (every power of two is a bucket edge). As
//! latmon's buckets are `[lo, hi)`, a latency of exactly 2^k ns counts in
//! the next bound up. Counts and sums are cumulative since the probe
//! started (Prometheus derives rates). See docs/agent.md for every metric.

use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::{Sink, Tick};
use crate::bpf::limits::HIST_MAX_LOG2;
use crate::hist::{bucket_index, Hist};
use crate::summary::ProbeState;

/// The SINK prefix.
pub const SCHEME: &str = "prom://";
/// Smallest `le` bound: 2^8 ns = 256 ns.
pub const LE_MIN_LOG2: usize = 8;
/// Largest finite `le` bound: 2^36 ns = 68.7 s (latmon's last bucket edge).
pub const LE_MAX_LOG2: usize = HIST_MAX_LOG2;
/// Content type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// Socket timeouts per scrape.
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the server thread looks at its stop flag.
const ACCEPT_POLL_MS: u16 = 200;
/// Longest request head read.
const MAX_REQUEST: usize = 8 * 1024;

/// `HOST:PORT`, `:PORT` (127.0.0.1) or `localhost:PORT`; IP literals only
/// (no name service: the product binary is static).
pub fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim_end_matches('/');
    let bad = || format!("{SCHEME}{s}: expected {SCHEME}[HOST]:PORT with HOST an IP address (default 127.0.0.1)");
    let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    let host = match host {
        "" | "localhost" => "127.0.0.1",
        h => h.trim_start_matches('[').trim_end_matches(']'),
    };
    let ip: std::net::IpAddr = host.parse().map_err(|_| bad())?;
    Ok(SocketAddr::new(ip, port))
}

/// The Prometheus output: renders on the agent thread, serves on its own.
pub struct Prom {
    name: String,
    buf: String,
    slot: Arc<Mutex<Vec<u8>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    local: SocketAddr,
    /// Intervals not published because a scrape held the slot.
    pub skipped: u64,
}

impl Prom {
    /// The address actually bound (port 0 picks a free one).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

/// Bind now (mistakes fail at startup) and start the server thread.
pub fn open(addr: &str) -> Result<Prom, String> {
    let sa = parse_addr(addr)?;
    let listener = TcpListener::bind(sa).map_err(|e| format!("output {SCHEME}{addr}: listen: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    let name = format!("{SCHEME}{local}");
    log::info!("output {name}: serving Prometheus metrics at http://{local}/metrics");
    let slot = Arc::new(Mutex::new(Vec::with_capacity(64 * 1024)));
    let stop = Arc::new(AtomicBool::new(false));
    let (sl, st, n) = (Arc::clone(&slot), Arc::clone(&stop), name.clone());
    let thread = super::spawn_blocked("latmon-prom", move || serve(&listener, &sl, &st, &n))
        .map_err(|e| format!("output {name}: {e}"))?;
    Ok(Prom { name, buf: String::with_capacity(64 * 1024), slot, stop, thread: Some(thread), local, skipped: 0 })
}

fn serve(l: &TcpListener, slot: &Mutex<Vec<u8>>, stop: &AtomicBool, name: &str) {
    let mut body = Vec::with_capacity(64 * 1024);
    while !stop.load(Ordering::Relaxed) {
        let mut fds = [nix::poll::PollFd::new(l.as_fd(), nix::poll::PollFlags::POLLIN)];
        match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ACCEPT_POLL_MS)) {
            Ok(n) if n > 0 => {}
            _ => continue,
        }
        let Ok((mut c, peer)) = l.accept() else { continue };
        if let Err(e) = answer(&mut c, slot, &mut body) {
            log::debug!("output {name}: client {peer}: {e}");
        }
    }
}

/// Read one request, answer it, close.
fn answer(c: &mut TcpStream, slot: &Mutex<Vec<u8>>, body: &mut Vec<u8>) -> io::Result<()> {
    c.set_read_timeout(Some(IO_TIMEOUT))?;
    c.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut req = [0u8; MAX_REQUEST];
    let mut n = 0;
    while n < req.len() && !req[..n].windows(4).any(|w| w == b"\r\n\r\n") && !req[..n].windows(2).any(|w| w == b"\n\n") {
        let k = c.read(&mut req[n..])?;
        if k == 0 {
            break;
        }
        n += k;
    }
    let head = String::from_utf8_lossy(&req[..n]);
    let mut parts = head.lines().next().unwrap_or("").split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, ctype): (&str, &str) = match (method, path) {
        ("GET" | "HEAD", "/metrics") => {
            body.clear();
            if let Ok(s) = slot.lock() {
                body.extend_from_slice(&s);
            }
            ("200 OK", CONTENT_TYPE)
        }
        ("GET" | "HEAD", "/") => {
            body.clear();
            body.extend_from_slice(b"latmon: Prometheus metrics at /metrics\n");
            ("200 OK", "text/plain; charset=utf-8")
        }
        ("GET" | "HEAD", _) => {
            body.clear();
            body.extend_from_slice(b"not found: latmon serves /metrics\n");
            ("404 Not Found", "text/plain; charset=utf-8")
        }
        _ => {
            body.clear();
            body.extend_from_slice(b"only GET /metrics\n");
            ("405 Method Not Allowed", "text/plain; charset=utf-8")
        }
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    c.write_all(head.as_bytes())?;
    if method != "HEAD" {
        c.write_all(body)?;
    }
    c.flush()
}

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

/// Seconds from ns, as the text format's float.
fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// `# HELP` and `# TYPE` lines.
fn head(s: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(s, "# HELP {name} {help}");
    let _ = writeln!(s, "# TYPE {name} {kind}");
}

/// Render the whole exposition for one interval into `s` (appending; no
/// allocation once `s` has room).
pub fn render(s: &mut String, t: &Tick<'_>) {
    let r = t.report;
    let a = &r.agent;
    let ses = t.session;
    let labels = |s: &mut String, i: usize| {
        let p = &ses.probes[i];
        let _ = write!(s, "probe=\"{}\",kind=\"{}\",attach=\"{}\"", Esc(&p.name), Esc(&p.kind), Esc(&p.attach));
    };
    head(s, "latmon_info", "gauge", "latmon version, kernel and board (always 1).");
    let _ = writeln!(
        s,
        "latmon_info{{version=\"{}\",kernel=\"{}\",board=\"{}\",boot_id=\"{:08x}\"}} 1",
        env!("CARGO_PKG_VERSION"),
        Esc(&ses.kernel),
        Esc(&ses.board),
        ses.boot_id
    );
    head(s, "latmon_uptime_seconds", "gauge", "Time since latmon started counting.");
    let _ = writeln!(s, "latmon_uptime_seconds {}", secs(r.time_ns.saturating_sub(ses.start_ns)));
    head(s, "latmon_interval_seconds", "gauge", "Length of the last summary interval.");
    let _ = writeln!(s, "latmon_interval_seconds {}", secs(r.interval_ns));
    head(s, "latmon_summaries_total", "counter", "Summary intervals completed.");
    let _ = writeln!(s, "latmon_summaries_total {}", r.seq);

    head(s, "latmon_latency_seconds", "histogram", "Latency measured by each probe since it started.");
    for (i, h) in t.totals.iter().enumerate().take(ses.probes.len()) {
        let mut cum = 0u64;
        let mut from = 0usize;
        for k in LE_MIN_LOG2..=LE_MAX_LOG2 {
            let upto = bucket_index(1u64 << k);
            cum += h.slots[from..upto].iter().sum::<u64>();
            from = upto;
            s.push_str("latmon_latency_seconds_bucket{");
            labels(s, i);
            let _ = writeln!(s, ",le=\"{}\"}} {cum}", secs(1u64 << k));
        }
        s.push_str("latmon_latency_seconds_bucket{");
        labels(s, i);
        let _ = writeln!(s, ",le=\"+Inf\"}} {}", h.count);
        s.push_str("latmon_latency_seconds_sum{");
        labels(s, i);
        let _ = writeln!(s, "}} {}", secs(h.sum_ns));
        s.push_str("latmon_latency_seconds_count{");
        labels(s, i);
        let _ = writeln!(s, "}} {}", h.count);
    }

    counter(s, t, "latmon_probe_drops_total", "Events the probe lost (full maps, clock anomalies).", |_, h| h.drops as f64);
    counter(s, t, "latmon_probe_alerts_total", "Events above the probe's alert threshold.", |_, h| h.alerts as f64);
    counter(s, t, "latmon_probe_alert_records_dropped_total", "Alert records that never reached latmon (rate limit, full buffer).", |_, h| {
        h.alerts_dropped as f64
    });
    counter(s, t, "latmon_probe_bpf_missed_total", "Runs of the probe's BPF programs the kernel skipped (recursion_misses): events it never saw.", |i, _| {
        r.probes.get(i).map_or(0.0, |p| p.total_bpf_missed as f64)
    });
    counter(s, t, "latmon_probe_read_errors_total", "Failed reads of the probe's maps.", |i, _| {
        t.read_errors.get(i).copied().unwrap_or(0) as f64
    });
    gauge(s, t, "latmon_probe_up", "1 while the probe is attached, 0 once detached (see latmon_probe_detached_over_budget).", |i| {
        f64::from(u8::from(r.probes.get(i).is_some_and(|p| p.state == ProbeState::Running)))
    });
    gauge(s, t, "latmon_probe_detached_over_budget", "1 when latmon detached the probe because its own cost broke overhead_budget.", |i| {
        f64::from(u8::from(r.probes.get(i).is_some_and(|p| p.state == ProbeState::DetachedOverBudget)))
    });
    counter(s, t, "latmon_probe_bpf_runs_total", "Runs of the probe's BPF programs (kernel events it hooked); latmon's own cost.", |i, _| {
        r.probes.get(i).map_or(0.0, |p| p.total_bpf_runs as f64)
    });
    counter(s, t, "latmon_probe_bpf_run_seconds_total", "Time spent in the probe's BPF programs; latmon's own cost.", |i, _| {
        r.probes.get(i).map_or(0.0, |p| secs(p.total_bpf_run_time_ns))
    });
    gauge(s, t, "latmon_probe_bpf_seconds_per_event", "BPF time per hooked event over the last interval.", |i| {
        r.probes.get(i).map_or(0.0, |p| secs(p.bpf_ns_per_event))
    });
    gauge(s, t, "latmon_probe_bpf_events_per_second", "Hooked events per second over the last interval.", |i| {
        r.probes.get(i).map_or(0.0, |p| p.events_per_s as f64)
    });
    gauge(s, t, "latmon_probe_bpf_cpu_ratio", "Share of the machine's CPU capacity the probe's BPF took over the last interval (0..1).", |i| {
        r.probes.get(i).map_or(0.0, |p| p.bpf_cpu_percent / 100.0)
    });

    head(s, "latmon_bpf_cpu_ratio", "gauge", "Share of the machine's CPU capacity all of latmon's BPF programs took over the last interval (0..1).");
    let _ = writeln!(s, "latmon_bpf_cpu_ratio {}", a.bpf_cpu_percent / 100.0);
    head(s, "latmon_cost_measured", "gauge", "1 when BPF run-time statistics are on and the cost metrics mean something.");
    let _ = writeln!(s, "latmon_cost_measured {}", u8::from(a.cost_measured));
    head(s, "latmon_online_cpus", "gauge", "CPUs the CPU ratios are relative to.");
    let _ = writeln!(s, "latmon_online_cpus {}", a.online_cpus);
    head(s, "latmon_over_budget", "gauge", "1 when the last interval broke overhead_budget.");
    let _ = writeln!(s, "latmon_over_budget {}", u8::from(a.over_budget));
    head(s, "latmon_over_budget_intervals", "gauge", "Consecutive intervals over budget so far.");
    let _ = writeln!(s, "latmon_over_budget_intervals {}", a.over_budget_intervals);
    head(s, "latmon_degraded", "gauge", "1 when a probe was detached over budget.");
    let _ = writeln!(s, "latmon_degraded {}", u8::from(a.degraded));
    head(s, "latmon_resident_memory_bytes", "gauge", "latmon's resident set size.");
    let _ = writeln!(s, "latmon_resident_memory_bytes {}", a.rss_bytes);
}

fn counter(s: &mut String, t: &Tick<'_>, name: &str, help: &str, v: impl Fn(usize, &Hist) -> f64) {
    head(s, name, "counter", help);
    for (i, h) in t.totals.iter().enumerate().take(t.session.probes.len()) {
        series(s, t, name, i, v(i, h));
    }
}

fn gauge(s: &mut String, t: &Tick<'_>, name: &str, help: &str, v: impl Fn(usize) -> f64) {
    head(s, name, "gauge", help);
    for i in 0..t.session.probes.len() {
        series(s, t, name, i, v(i));
    }
}

fn series(s: &mut String, t: &Tick<'_>, name: &str, i: usize, v: f64) {
    let p = &t.session.probes[i];
    let _ = writeln!(s, "{name}{{probe=\"{}\",kind=\"{}\",attach=\"{}\"}} {v}", Esc(&p.name), Esc(&p.kind), Esc(&p.attach));
}

impl Sink for Prom {
    fn name(&self) -> &str {
        &self.name
    }

    fn emit(&mut self, t: &Tick<'_>) {
        self.buf.clear();
        render(&mut self.buf, t);
        match self.slot.try_lock() {
            Ok(mut s) => {
                s.clear();
                s.extend_from_slice(self.buf.as_bytes());
            }
            Err(_) => self.skipped += 1,
        }
    }

    fn close(&mut self, _timeout: Duration) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Prom {
    fn drop(&mut self) {
        self.close(Duration::ZERO);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sinks::Session;
    use crate::summary::{IntervalReport, ProbeInfo, ProbeReport};

    #[test]
    fn addresses() {
        assert_eq!(parse_addr(":9477").unwrap(), "127.0.0.1:9477".parse().unwrap());
        assert_eq!(parse_addr("localhost:1").unwrap(), "127.0.0.1:1".parse().unwrap());
        assert_eq!(parse_addr("0.0.0.0:9477").unwrap(), "0.0.0.0:9477".parse().unwrap());
        assert_eq!(parse_addr("[::1]:9477").unwrap(), "[::1]:9477".parse().unwrap());
        for bad in ["", "9477", "host:9477", "1.2.3.4:x", "1.2.3.4:70000"] {
            assert!(parse_addr(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_exact() {
        let mut h = Hist::default();
        for v in [100u64, 255, 256, 1_000, 1_023, 1_024, 5_000_000, 100_000_000_000] {
            h.record(v);
        }
        let info = ProbeInfo { name: "a\"b".into(), kind: "runq".into(), attach: "tp_btf".into(), mode: String::new(), btf_mode: String::new() };
        let session = Session {
            board: "b".into(),
            kernel: "k".into(),
            boot_id: 1,
            start_ns: 0,
            interval_ns: 1,
            probes: vec![info.clone()],
            failed: Vec::new(),
        };
        let report = IntervalReport {
            seq: 3,
            time_ns: 2_000_000_000,
            interval_ns: 1_000_000_000,
            probes: vec![ProbeReport::new(&info, &Hist::default(), &h)],
            ..Default::default()
        };
        let totals = [h];
        let mut s = String::new();
        render(&mut s, &Tick { session: &session, report: &report, totals: &totals, read_errors: &[0] });
        let bucket = |le: &str| -> u64 {
            let key = format!("latmon_latency_seconds_bucket{{probe=\"a\\\"b\",kind=\"runq\",attach=\"tp_btf\",le=\"{le}\"}} ");
            let line = s.lines().find(|l| l.starts_with(&key)).unwrap_or_else(|| panic!("{key} in {s}"));
            line[key.len()..].parse().unwrap()
        };
        assert_eq!(bucket("0.000000256"), 2, "100 and 255 ns; 256 ns is in the next bound");
        assert_eq!(bucket("0.000001024"), 5);
        assert_eq!(bucket("0.000002048"), 6);
        assert_eq!(bucket("0.008388608"), 7);
        assert_eq!(bucket("68.719476736"), 7);
        assert_eq!(bucket("+Inf"), 8);
        let les = s.lines().filter(|l| l.starts_with("latmon_latency_seconds_bucket")).count();
        assert_eq!(les, LE_MAX_LOG2 - LE_MIN_LOG2 + 2);
        assert!(s.contains("latmon_latency_seconds_count{probe=\"a\\\"b\",kind=\"runq\",attach=\"tp_btf\"} 8"));
        assert!(s.contains("latmon_summaries_total 3"));
    }
}
