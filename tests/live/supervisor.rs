// SPDX-License-Identifier: MIT
//! A real `latmon run` (default probes, stress-ng mix) recorded to a file
//! with a UART's byte budget (5 760 B/s: half of 115200 baud), read by the
//! example supervisor firmware (latmon-core's no_std receiver, in qemu's
//! lm3s6965evb, the capture paced at 115200 baud on its UART0): its last
//! totals line equals `latmon decode` of the same capture for every probe
//! it keeps (every probe, unless the run made more series than its 128),
//! and with frames of the capture dropped and damaged, its `lost` equals
//! decode's. Synthetic captures (no root) are tests/pure/supervisor.rs.

use crate::common;

use common::*;

/// Seconds recorded.
const SECS: u64 = 30;

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn supervisor_firmware_reads_a_real_run_as_decode_does() {
    let capture = scratch("supervisor", "live.frames");
    let _ = std::fs::remove_file(&capture);
    let out = format!("file:{},budget=5760B/s", capture.display());
    let run = start_run(&["--duration", &format!("{SECS}s"), "--output", &out]);
    let mut load = stress_mix(SECS);
    let (status, _) = finish(run);
    let _ = load.kill();
    let _ = load.wait();
    assert!(status.success(), "latmon run: {status}");
    let bytes = std::fs::read(&capture).expect("the capture");

    let (lines, took) = supervisor_qemu(&capture, 115_200);
    let (want, want_lost, want_good) = decode_totals(&capture);
    let (got, lost, over) = supervisor_last_totals(&lines);
    assert_eq!(supervisor_frames_good(&lines), want_good, "good frames: firmware vs latmon decode");
    println!(
        "supervisor live: {} bytes ({} B/s) in qemu {:.1} s; {} probes by decode, {} kept by the firmware, {over} over capacity",
        bytes.len(),
        bytes.len() as u64 / SECS,
        took.as_secs_f64(),
        want.len(),
        got.len()
    );
    assert!(want.len() >= 3, "decode saw the default probes: {want:?}");
    if over == 0 {
        assert_eq!(got, want, "firmware totals vs latmon decode");
    } else {
        // Full: every slot taken. A kept series the run named in a Hello
        // but never counted in a summary has no totals yet (the firmware
        // prints reported series only), so `got` may hold fewer than 128.
        assert_eq!(supervisor_series(&lines), 128, "a firmware over capacity has every slot full");
        for (name, n) in &got {
            assert_eq!(Some(n), want.get(name), "{name}");
        }
    }
    assert_eq!((lost, want_lost), (0, 0), "a clean capture loses nothing");

    let damaged = scratch("supervisor", "live-damaged.frames");
    std::fs::write(&damaged, damage(&bytes, 7, 5, 2, 0x28)).expect("write");
    let (lines, took) = supervisor_qemu(&damaged, 115_200);
    let (_, want_lost, want_good) = decode_totals(&damaged);
    let (_, lost, _) = supervisor_last_totals(&lines);
    assert_eq!(supervisor_frames_good(&lines), want_good, "good frames of the damaged capture");
    println!("supervisor live, damaged: {lost} lost (decode {want_lost}) in qemu {:.1} s", took.as_secs_f64());
    assert!(want_lost > 0, "the outages lost summaries");
    assert_eq!(lost, want_lost, "lost: firmware vs latmon decode");
}
