// SPDX-License-Identifier: MIT
//! The agent-side frame path allocates nothing once warmed up: the
//! encoder, and a frames output's whole `emit` (render, Hello/Status
//! cadence, queue hand-over). Counted with a global allocator that only
//! counts on the thread under test.

#[path = "common/kmsg.rs"]
#[allow(dead_code)]
mod kmsg;

// This binary's live test loads BPF: its process watches the kernel's log
// from its start and fails when the kernel logs a splat (issue 39).
#[used]
#[link_section = ".init_array"]
static KMSG_WATCH: extern "C" fn() = kmsg::start_watch;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use latmon::sinks;
use latmon_core::hist::Hist;
use latmon_core::ident::{BtfMode, Family, Mechanism};
use latmon_core::session::{Session, Tick};
use latmon_core::summary::{IntervalReport, ProbeInfo, ProbeReport};
use latmon_core::wire::{Encoder, SummaryHeader};

struct Counting;
static ALLOCS: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    static COUNT_HERE: Cell<bool> = const { Cell::new(false) };
}

fn note() {
    if COUNT_HERE.with(|c| c.get()) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: forwards to the system allocator; counting has no side effects
// on the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        note();
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        note();
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn counted<R>(f: impl FnOnce() -> R) -> (R, usize) {
    ALLOCS.store(0, Ordering::Relaxed);
    COUNT_HERE.with(|c| c.set(true));
    let r = f();
    COUNT_HERE.with(|c| c.set(false));
    (r, ALLOCS.load(Ordering::Relaxed))
}

fn busy_hists(n: usize, seq: u64) -> Vec<Hist> {
    (0..n)
        .map(|i| {
            let mut h = Hist::default();
            for k in 0..3_000u64 {
                h.record((k * 7_919 + seq * 104_729 + i as u64 * 13) % 20_000_000 + 50);
            }
            h
        })
        .collect()
}

#[test]
fn summary_encoding_does_not_allocate() {
    assert_eq!(counted(|| std::hint::black_box(vec![1u8; 10]).len()), (10, 1), "the counter counts");
    let mut enc = Encoder::new();
    let hists = busy_hists(8, 1);
    let mut out = Vec::with_capacity(64 * 1024);
    let head = SummaryHeader { seq: 1, boot_id: 9, time_ns: 1, last: false };
    enc.summary(head, &hists, &mut |f| out.extend_from_slice(f)).unwrap(); // warm-up
    let (frames, allocs) = counted(|| {
        let mut frames = 0;
        for seq in 2..100 {
            out.clear();
            let h = SummaryHeader { seq, ..head };
            frames += enc.summary(h, &hists, &mut |f| out.extend_from_slice(f)).unwrap();
        }
        frames
    });
    assert!(frames > 98 * 2, "{frames} frames: the 8 probes span several frames");
    assert_eq!(allocs, 0, "allocations while encoding summaries");
}

#[test]
fn frames_output_emit_does_not_allocate() {
    emit_does_not_allocate("file:/dev/null,format=frames");
}

/// A budgeted output (deltas, rolling keyframes, a budget small enough
/// to take the degradation steps on the way) allocates nothing either.
#[test]
fn budgeted_frames_output_emit_does_not_allocate() {
    emit_does_not_allocate("file:/dev/null,format=frames,budget=2000B/s");
    emit_does_not_allocate("file:/dev/null,format=frames,budget=200B/s");
}

fn emit_does_not_allocate(word: &str) {
    let mut sink = sinks::open(word, None).unwrap();
    let n = 8;
    let session = Session {
        board: "b".into(),
        kernel: "k".into(),
        boot_id: 1,
        start_ns: 0,
        interval_ns: 1_000_000_000,
        probes: (0..n)
            .map(|i| ProbeInfo {
                name: format!("p{i}"),
                kind: Family::Runq,
                attach: Mechanism::TpBtf,
                mode: String::new(),
                btf_mode: BtfMode::CoRe,
                wait: Default::default(),
            })
            .collect(),
        failed: Vec::new(),
        thresholds_ns: Vec::new(),
        certificate: None,
    };
    let mut totals = busy_hists(n, 3);
    let report = IntervalReport {
        loops: Vec::new(),
        loops_unlisted: 0,
        seq: 1,
        time_ns: 1,
        interval_ns: 1,
        last: false,
        probes: (0..n).map(|i| ProbeReport::new(&session.probes[i], &Hist::default(), &totals[i])).collect(),
        alert_records: Vec::new(),
        agent: Default::default(),
    };
    let errors = vec![0u64; n];
    let mut r = report.clone();
    // Warm-up: first Hello, first Status, buffers at their working size.
    for seq in 1..=40 {
        r.seq = seq;
        r.time_ns = seq * 1_000_000_000;
        sink.emit(&Tick { session: &session, report: &r, totals: &totals, read_errors: &errors });
    }
    // Counts that keep growing, so deltas are never empty.
    let more = busy_hists(n, 5);
    let ((), allocs) = counted(|| {
        // 100 more intervals: three more Hello + Status rounds among them.
        for seq in 41..=140 {
            r.seq = seq;
            r.time_ns = seq * 1_000_000_000;
            for (t, m) in totals.iter_mut().zip(&more) {
                t.merge(m);
            }
            sink.emit(&Tick { session: &session, report: &r, totals: &totals, read_errors: &errors });
        }
    });
    sink.close(std::time::Duration::from_secs(1));
    assert_eq!(allocs, 0, "allocations on the agent thread per interval ({word})");
}

/// The text table (a family whose series are sorted, the top 10 shown,
/// the rest summed) and the histograms under it allocate nothing either.
#[test]
fn text_output_emit_does_not_allocate() {
    use latmon_core::table::{SortBy, TextStyle};
    for style in [TextStyle::default(), TextStyle { sort: SortBy::Count, hist_all: true, crlf: false }] {
        let mut sink = sinks::open_with("file:/dev/null,format=text", None, style).unwrap();
        let n = 40;
        let info = |i: usize| ProbeInfo {
            name: if i == 0 { "syscall".into() } else { format!("syscall:s{i}") },
            kind: Family::Syscall,
            attach: Mechanism::TpBtf,
            mode: String::new(),
            btf_mode: BtfMode::CoRe,
            wait: Default::default(),
        };
        let session = Session {
            board: "b".into(),
            kernel: "k".into(),
            boot_id: 1,
            start_ns: 0,
            interval_ns: 1_000_000_000,
            probes: (0..n).map(info).collect(),
            failed: Vec::new(),
            thresholds_ns: Vec::new(),
            certificate: None,
        };
        let totals = busy_hists(n, 3);
        let errors = vec![0u64; n];
        let mut r = IntervalReport {
            loops: Vec::new(),
            loops_unlisted: 0,
            seq: 1,
            time_ns: 1,
            interval_ns: 1_000_000_000,
            last: false,
            probes: (0..n).map(|i| ProbeReport::new(&session.probes[i], &Hist::default(), &totals[i])).collect(),
            alert_records: Vec::new(),
            agent: Default::default(),
        };
        for seq in 1..=3 {
            r.seq = seq;
            sink.emit(&Tick { session: &session, report: &r, totals: &totals, read_errors: &errors });
        }
        let ((), allocs) = counted(|| {
            for seq in 4..=100 {
                r.seq = seq;
                // A different order each interval: the sort does the work.
                for (i, p) in r.probes.iter_mut().enumerate() {
                    p.p99_ns = (i as u64 * 7_919 + seq * 104_729) % 1_000_000;
                    p.count = (i as u64 * 13 + seq) % 97;
                }
                sink.emit(&Tick { session: &session, report: &r, totals: &totals, read_errors: &errors });
            }
        });
        sink.close(std::time::Duration::from_secs(1));
        assert_eq!(allocs, 0, "allocations on the agent thread per interval (text, {style:?})");
    }
}

#[test]
fn modbus_output_emit_does_not_allocate() {
    // Port 0: any free port; nobody connects, so no reader holds an image.
    let mut sink = sinks::open("modbus-tcp://127.0.0.1:0", None).unwrap();
    let n = 8;
    let session = Session {
        board: "b".into(),
        kernel: "k".into(),
        boot_id: 1,
        start_ns: 0,
        interval_ns: 1_000_000_000,
        probes: (0..n)
            .map(|i| ProbeInfo {
                name: format!("p{i}"),
                kind: Family::Runq,
                attach: Mechanism::TpBtf,
                mode: String::new(),
                btf_mode: BtfMode::CoRe,
                wait: Default::default(),
            })
            .collect(),
        failed: Vec::new(),
        thresholds_ns: Vec::new(),
        certificate: None,
    };
    let totals = busy_hists(n, 3);
    let mut r = IntervalReport {
        loops: Vec::new(),
        loops_unlisted: 0,
        seq: 1,
        time_ns: 1,
        interval_ns: 1,
        last: false,
        probes: (0..n).map(|i| ProbeReport::new(&session.probes[i], &Hist::default(), &totals[i])).collect(),
        alert_records: Vec::new(),
        agent: Default::default(),
    };
    let errors = vec![0u64; n];
    // Warm-up: both images (current and spare) at their working size.
    for seq in 1..=3 {
        r.seq = seq;
        sink.emit(&Tick { session: &session, report: &r, totals: &totals, read_errors: &errors });
    }
    let ((), allocs) = counted(|| {
        for seq in 4..=100 {
            r.seq = seq;
            sink.emit(&Tick { session: &session, report: &r, totals: &totals, read_errors: &errors });
        }
    });
    sink.close(std::time::Duration::from_secs(1));
    assert_eq!(allocs, 0, "allocations on the agent thread per interval (Modbus image swap)");
}

/// The whole per-interval path of the agent, live (root): a real runq
/// probe read from the kernel, BPF cost sampled and split, the budget
/// checked, and every kind of output rendered (text, JSON, frames,
/// Prometheus). Nothing allocates on the agent thread once warmed up.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn agent_interval_does_not_allocate() {
    use latmon::agent::{self, Agent};
    use latmon::config::{Budget, Config, ProbeSpec};
    let cfg = Config {
        probes: vec![ProbeSpec::parse("runq").unwrap(), ProbeSpec::parse("runq,comm=lm-nobody,name=quiet").unwrap()],
        // A budget no probe breaks: the check runs every interval.
        overhead_budget: Some(Budget { cpu_percent: Some(100.0), ns_per_event: Some(1_000_000), intervals: 3 }),
        ..Config::default()
    };
    let stats = agent::enable_cost_stats();
    assert!(stats.is_some(), "BPF statistics (root)");
    let mut a = Agent::start(cfg, stats).expect("runq attaches");
    let mut sinks: Vec<Box<dyn sinks::Sink>> = vec![
        sinks::open("file:/dev/null,format=text", None).unwrap(),
        sinks::open("file:/dev/null,format=json", None).unwrap(),
        sinks::open("file:/dev/null,format=frames", None).unwrap(),
        sinks::open("prom://127.0.0.1:0", None).unwrap(),
    ];
    // Warm-up: buffers grow to their working size, Hello/Status go out.
    for _ in 0..60 {
        std::thread::sleep(std::time::Duration::from_millis(2));
        a.tick(false, &mut sinks);
    }
    let mut ticks = 0;
    let ((), allocs) = counted(|| {
        for _ in 0..300 {
            // Real events between reads: this test's own sleeps switch.
            std::thread::sleep(std::time::Duration::from_millis(1));
            a.tick(false, &mut sinks);
            ticks += 1;
        }
    });
    let r = a.report();
    assert!(r.probes[0].total_count > 0 && r.probes[0].total_bpf_runs > 0, "real events were read: {:?}", r.probes[0]);
    assert!(r.agent.cost_measured);
    for s in sinks.iter_mut() {
        s.close(std::time::Duration::from_secs(1));
    }
    eprintln!("FIGURES agent interval: {ticks} intervals, {allocs} allocations");
    assert_eq!(allocs, 0, "allocations on the agent thread in {ticks} intervals");
}
