// SPDX-License-Identifier: MIT
//! `--output prom://[HOST]:PORT[,series=N]`: Prometheus metrics served over
//! HTTP at `GET /metrics` by one small blocking server thread, in the
//! format the scraper asks for (content negotiation on `Accept`):
//!
//! - the protobuf exposition (`application/vnd.google.protobuf;
//!   proto=io.prometheus.client.MetricFamily; encoding=delimited`, what a
//!   Prometheus started with `--enable-feature=native-histograms` asks for
//!   first): every histogram both as a *native* histogram of schema 3
//!   ([`hist`]: latmon's buckets mapped onto 8 per power of two, no
//!   resolution lost to the scrape) and with the classic `le` buckets;
//! - the text format (version 0.0.4, which every Prometheus-compatible
//!   scraper reads) to everyone else: classic `le` buckets only.
//!
//! Every interval the agent thread copies what it shows into a snapshot
//! whose buffers it keeps (no allocation once grown) and swaps it into the
//! slot the server thread renders from, taking the lock only if it is free:
//! a scrape in progress never delays the agent (that interval's update is
//! skipped and counted, the next one lands). The server thread renders each
//! scrape in the format asked for. It serves up to [`HTTP_CLIENTS_MAX`]
//! connections at once from one poll loop (non-blocking sockets), each
//! closed at [`REQUEST_DEADLINE`] after it was accepted: a slow, silent or
//! malicious client holds one slot for at most that long, and a newcomer
//! displaces the oldest connection that has not finished its request.
//! Hand-written rather than an HTTP crate: the endpoint is one GET; the
//! small blocking crates (tiny_http) start a thread per waiting
//! connection with no deadline on the request head, and the async ones
//! (hyper) do not fit the 1.5 MiB static binary.
//!
//! Classic histograms: `latmon_latency_seconds` with cumulative `le`
//! buckets at powers of two of nanoseconds, 2^8 ns (256 ns) to 2^36 ns
//! (68.7 s), plus `+Inf`: 30 series per probe line, whatever the data. Each
//! is an exact sum of latmon's log-linear buckets (every power of two is a
//! bucket edge). As latmon's buckets are `[lo, hi)`, a latency of exactly
//! 2^k ns counts in the next bound up. Counts and sums are cumulative since
//! the probe started (Prometheus derives rates).
//!
//! Series bound: a family (syscall: up to 127 series) shows its first
//! `series` series (default [`SERIES_PER_FAMILY`], in the order latmon
//! found them, which never changes) as lines of their own; the rest are
//! summed into one line `probe="FAMILY:folded"` and counted in
//! `latmon_series_folded`. See docs/prometheus.md for every metric and
//! the series count per probe.
//!
//! The model ([`model`]), the metrics described once ([`expose`]), the
//! two formats ([`text`], [`protobuf`]) and the server ([`http`]) are
//! modules of their own; this file is the output that ties them.

mod expose;
pub mod hist;
pub mod http;
pub mod model;
pub mod pb;
mod protobuf;
#[cfg(test)]
mod tests;
mod text;

pub use expose::{LE_MAX_LOG2, LE_MIN_LOG2};
pub use http::{displaced, negotiate, Format, CONTENT_TYPE, CONTENT_TYPE_PROTOBUF, HTTP_CLIENTS_MAX, REQUEST_DEADLINE};
pub use model::{snapshot, Line, Snapshot, FOLDED, OTHER_TASKS, TASK_NAMES_MAX, TOP_CAUSES};
pub use protobuf::render_protobuf;
pub use text::render_text;

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use latmon_core::session::Tick;

use super::link::{LinkStats, Sink};
use http::serve;
use model::{copy_str, Grouping};

/// The SINK prefix.
pub const SCHEME: &str = "prom://";
/// Series of one family shown as lines of their own by default (`series=`).
pub const SERIES_PER_FAMILY: u32 = 16;
/// Largest `series=` accepted.
pub const SERIES_PER_FAMILY_MAX: u32 = 512;

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

/// `ADDR[,series=N]`: the address and the series shown per family.
pub fn parse_word(word: &str) -> Result<(SocketAddr, u32), String> {
    let mut parts = word.split(',');
    let addr = parse_addr(parts.next().unwrap_or(""))?;
    let mut series = SERIES_PER_FAMILY;
    for opt in parts {
        let bad = || format!("{SCHEME}{word}: option {opt:?}: expected series=N with N 0..={SERIES_PER_FAMILY_MAX}");
        let n = opt.strip_prefix("series=").ok_or_else(bad)?;
        series = n.parse().ok().filter(|&n| n <= SERIES_PER_FAMILY_MAX).ok_or_else(bad)?;
    }
    Ok((addr, series))
}

/// The Prometheus output: snapshots on the agent thread, renders and
/// serves on its own.
pub struct Prom {
    name: String,
    snap: Snapshot,
    grouping: Grouping,
    series: u32,
    slot: Arc<Mutex<Snapshot>>,
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
pub fn open(word: &str) -> Result<Prom, String> {
    let (sa, series) = parse_word(word)?;
    let listener = TcpListener::bind(sa).map_err(|e| format!("output {SCHEME}{word}: listen: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    let name = format!("{SCHEME}{local}");
    log::info!("output {name}: serving Prometheus metrics at http://{local}/metrics");
    let slot = Arc::new(Mutex::new(Snapshot::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let (sl, st, n) = (Arc::clone(&slot), Arc::clone(&stop), name.clone());
    let thread = super::link::spawn_blocked("latmon-prom", move || serve(&listener, &sl, &st, &n))
        .map_err(|e| format!("output {name}: {e}"))?;
    Ok(Prom {
        name,
        snap: Snapshot::default(),
        grouping: Grouping::default(),
        series,
        slot,
        stop,
        thread: Some(thread),
        local,
        skipped: 0,
    })
}

/// The text exposition for one interval (appending to `s`).
pub fn render(s: &mut String, t: &Tick<'_>) {
    render_text(s, &snapshot(t, SERIES_PER_FAMILY));
}

impl Sink for Prom {
    fn name(&self) -> &str {
        &self.name
    }

    fn emit(&mut self, t: &Tick<'_>) {
        self.snap.fill(t, self.series, &mut self.grouping);
        match self.slot.try_lock() {
            Ok(mut s) => {
                std::mem::swap(&mut *s, &mut self.snap);
                // Link stats arrive between emits (`see_link`) into the
                // snapshot the agent holds: carry them over.
                let (from, to) = (&s.links, &mut self.snap.links);
                to.resize_with(from.len(), || (String::new(), None));
                for ((tn, ts), (fnm, fs)) in to.iter_mut().zip(from) {
                    if tn != fnm {
                        copy_str(tn, fnm);
                    }
                    *ts = *fs;
                }
            }
            Err(_) => self.skipped += 1,
        }
    }

    fn see_link(&mut self, index: usize, name: &str, stats: LinkStats) {
        let links = &mut self.snap.links;
        if links.len() <= index {
            links.resize_with(index + 1, || (String::new(), None));
        }
        let (n, s) = &mut links[index];
        if n != name {
            copy_str(n, name);
        }
        *s = Some(stats);
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
