// SPDX-License-Identifier: MIT
//! `latmon-view report` keeps its memory and its HTML bounded however long
//! the capture: a base capture (made here with the agent's encoder: 32
//! probes, a budgeted link's Status, alert records) is stretched to 10
//! minutes and to 2 hours (tests/stretch), and the report of each runs as
//! its own process under /usr/bin/time. Its peak RSS and its HTML may not
//! grow with the capture by more than a fixed allowance. Time is not
//! asserted here (benches, docs/ figures).

mod stretch;

use std::path::{Path, PathBuf};
use std::process::Command;

use latmon_core::hist::Hist;
use latmon_core::summary::AlertRecord;
use latmon_core::wire::{
    encode_to_vec, BucketScheme, Encoder, Frame, FrameDecoder, Hello, LinkHealth, ProbeDesc, Status, SummaryHeader,
    Tracker, STATUS_COST_MEASURED,
};

const PROBES: u16 = 24;

/// A minute of a busy board: 24 probes with spread latencies, a Status
/// per interval, an alert every few seconds.
fn base_capture() -> Vec<u8> {
    let hello = Hello {
        protocol_revision: 6,
        latmon_version: "0.1.0".into(),
        board: "scale-test".into(),
        kernel: "6.12".into(),
        boot_id: 9,
        start_ns: 1_000_000_000,
        interval_ns: 1_000_000_000,
        probe_count: PROBES,
        probes: (0..PROBES)
            .map(|i| ProbeDesc {
                id: i,
                name: format!("probe{i}"),
                kind: "runq".into(),
                attach: "tp_btf".into(),
                mode: String::new(),
                scheme: BucketScheme::LATMON,
            })
            .collect(),
        thresholds: Vec::new(),
        certificate: None,
    };
    let mut bytes = encode_to_vec(&Frame::Hello(hello)).unwrap();
    let mut hs = vec![Hist::default(); PROBES as usize];
    let mut enc = Encoder::new();
    let mut x = 12345u64;
    for seq in 1..=60u64 {
        for (i, h) in hs.iter_mut().enumerate() {
            for _ in 0..50 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                h.record(1_000 + (x >> 40) % (20_000 * (i as u64 + 1)));
            }
        }
        let time_ns = 1_000_000_000 + seq * 1_000_000_000;
        enc.summary(SummaryHeader { seq, boot_id: 9, time_ns, last: false }, &hs, &mut |f| bytes.extend_from_slice(f))
            .unwrap();
        let st = Status {
            boot_id: 9,
            time_ns,
            seq,
            uptime_ns: time_ns,
            frames_dropped: seq / 10,
            bytes_dropped: 0,
            clients: 0,
            probes: Vec::new(),
            flags: STATUS_COST_MEASURED,
            bpf_cpu_ppm: 1500 + (seq % 7) as u32 * 100,
            detached: Vec::new(),
            missed: Vec::new(),
            link: LinkHealth { used_bps: 4000, budget_bps: 5760, ..LinkHealth::default() },
            shed: Vec::new(),
            dropped: Vec::new(),
        };
        bytes.extend(encode_to_vec(&Frame::Status(st)).unwrap());
        if seq % 3 == 0 {
            let a = AlertRecord {
                id: latmon_core::ident::ProbeId::NONE,
                pid: 7,
                tid: 7,
                comm: "ctrl".into(),
                cpu: 1,
                latency_ns: 100_000 + seq * 1000,
                time_ns: time_ns - 500_000_000,
                anatomy: None,
                cycle: None,
            };
            let mut one = Encoder::new();
            one.alert(9, (seq % PROBES as u64) as u16, &a, &mut |f| bytes.extend_from_slice(f)).unwrap();
        }
    }
    bytes
}

struct Run {
    rss_kb: u64,
    html_bytes: u64,
}

fn report(view: &Path, cap: &Path, html: &Path) -> Run {
    let out = Command::new("/usr/bin/time")
        .args(["-f", "maxrss_kb=%M"])
        .arg(view)
        .arg("report")
        .arg(cap)
        .arg("-o")
        .arg(html)
        .output()
        .expect("/usr/bin/time (apt-get install time)");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "latmon-view report {}: {said}", cap.display());
    let rss_kb = said.lines().find_map(|l| l.strip_prefix("maxrss_kb=")).and_then(|v| v.trim().parse().ok());
    Run {
        rss_kb: rss_kb.unwrap_or_else(|| panic!("no maxrss in {said}")),
        html_bytes: std::fs::metadata(html).unwrap().len(),
    }
}

#[test]
fn memory_and_html_do_not_grow_with_the_capture() {
    let view = PathBuf::from(env!("CARGO_BIN_EXE_latmon-view"));
    let dir = std::env::temp_dir().join(format!("latmon-report-scale-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = base_capture();
    let mut runs = Vec::new();
    for secs in [600u64, 2 * 3600] {
        let cap = dir.join(format!("{secs}.bin"));
        let mut f = std::io::BufWriter::new(std::fs::File::create(&cap).unwrap());
        let s = stretch::stretch(base.as_slice(), secs, &mut f).unwrap();
        drop(f);
        assert!(s.span_s + 1 >= secs && s.summaries >= secs, "{secs}: {s:?}");
        // The stretched capture reads as one run: no delta without its
        // base, no summary lost, every interval's events in the totals.
        let mut t = Tracker::new();
        FrameDecoder::new().feed(&std::fs::read(&cap).unwrap(), &mut |f| {
            t.on_frame(f.unwrap());
        });
        assert_eq!((t.summaries, t.summaries_lost, t.deltas_unusable, t.restarts), (s.summaries, 0, 0, 0), "{secs}");
        assert_eq!(t.totals(5).unwrap().count, 50 * s.summaries, "{secs}: 50 events per interval");
        let r = report(&view, &cap, &dir.join(format!("{secs}.html")));
        let html = std::fs::read_to_string(dir.join(format!("{secs}.html"))).unwrap();
        assert!(html.contains("latmon report: scale-test"), "{secs}: the board named");
        assert!(html.contains(&format!("<td>{} over ", s.summaries)), "{secs}: every summary read");
        eprintln!("{secs} s: capture {} bytes, RSS {} KiB, HTML {} bytes", s.bytes, r.rss_kb, r.html_bytes);
        runs.push((s, r));
    }
    let (short, long) = (&runs[0].1, &runs[1].1);
    assert!(runs[1].0.bytes > 10 * runs[0].0.bytes, "the long capture is 12 times longer");
    // The envelopes fill up within the first capture's 600 intervals (512
    // buckets per series); what is left to grow is allocator noise.
    assert!(
        long.rss_kb <= short.rss_kb + 4096,
        "RSS grew with the capture: {} KiB -> {} KiB",
        short.rss_kb,
        long.rss_kb
    );
    assert!(long.html_bytes <= short.html_bytes * 3 / 2, "HTML grew: {} -> {}", short.html_bytes, long.html_bytes);
    assert!(long.html_bytes < 4 << 20, "HTML over 4 MiB: {}", long.html_bytes);
    let _ = std::fs::remove_dir_all(&dir);
}
