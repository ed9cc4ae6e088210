// SPDX-License-Identifier: MIT
//! The example supervisor firmware (crates/latmon-supervisor, latmon-core's
//! no_std receiver) in qemu's lm3s6965evb, on captures made by the pure
//! encoder: its last totals line equals `latmon decode` of the same bytes
//! for every probe; with frames dropped and damaged, its `lost` equals
//! decode's; with more series than its capacity (128), the excess is
//! counted and the series it keeps are exact. Needs qemu-system-arm and
//! the rustup target thumbv7m-none-eabi (scripts/install-deps.sh); the
//! live twin, on a real `latmon run`, is tests/live/supervisor.rs.

use crate::common;

use common::*;

/// The captures are paced as a 115200-baud line (faster, qemu's socket
/// chardev was seen to stop feeding the UART once its FIFO had filled).
const BAUD: u32 = 115_200;

fn run(tag: &str, bytes: &[u8]) -> Check {
    let capture = scratch("supervisor", &format!("{tag}.frames"));
    std::fs::write(&capture, bytes).expect("write capture");
    let (lines, took) = supervisor_qemu(&capture, BAUD);
    let (want, want_lost, want_good) = decode_totals(&capture);
    let (got, lost, over) = supervisor_last_totals(&lines);
    let good = supervisor_frames_good(&lines);
    println!(
        "supervisor {tag}: {} bytes, {} lines in {:.1} s; decode: {} probes, {want_good} frames good, {want_lost} lost; firmware: {} probes, {good} frames good, {lost} lost, {over} over capacity",
        bytes.len(),
        lines.len(),
        took.as_secs_f64(),
        want.len(),
        got.len()
    );
    assert_eq!(good, want_good, "good frames: firmware vs latmon decode");
    Check { want, want_lost, got, lost, over }
}

struct Check {
    want: std::collections::BTreeMap<String, u64>,
    want_lost: u64,
    got: std::collections::BTreeMap<String, u64>,
    lost: u64,
    over: u64,
}

#[test]
fn supervisor_totals_equal_decode_on_a_clean_capture() {
    let c = run("clean", &synthetic_capture(40, 15, 0x28 + 40));
    assert_eq!(c.got, c.want, "firmware totals vs latmon decode");
    assert_eq!((c.lost, c.want_lost, c.over), (0, 0, 0));
}

#[test]
fn supervisor_counts_lost_like_decode_on_a_damaged_capture() {
    // Every 7th summary lost whole (seqs 7, 14, 21), 5 % of the other
    // frames dropped, 2 % corrupted.
    let c = run("damaged", &damage(&synthetic_capture(40, 25, 0x28 + 40), 7, 5, 2, 0x28));
    assert!(c.want_lost > 0, "the damage lost summaries");
    assert_eq!(c.lost, c.want_lost, "lost");
    assert_eq!(c.got, c.want, "firmware totals vs latmon decode (as last shown)");
}

#[test]
fn supervisor_counts_series_over_capacity_and_keeps_the_rest_exact() {
    let c = run("over", &synthetic_capture(200, 4, 0x28 + 200));
    assert_eq!(c.over, 200 - 128, "series over the firmware's capacity");
    assert_eq!(c.got.len(), 128);
    for (name, n) in &c.got {
        assert_eq!(Some(n), c.want.get(name), "{name}");
    }
}
