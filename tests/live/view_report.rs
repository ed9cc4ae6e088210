// SPDX-License-Identifier: MIT
//! `latmon-view report`, live (root: the default probes attach to this
//! kernel): the default configuration runs with a `file:` frames output
//! under a small stress-ng load, the capture becomes report.html, and
//! headless Chromium (Debian's `chromium`) renders that to a PNG. Checked:
//! every probe with events has its section with two SVG charts (histogram
//! bars, percentile lines); the alert, cost and link charts are there; the
//! HTML fetches nothing (no script, src or href); the PNG is not blank
//! (tests/report/png_stats.py: share of non-white pixels, colours).
//!
//! `LATMON_REPORT_PNG=FILE` keeps the PNG (the README's picture is a
//! 30-minute capture's: scripts/docs-pictures.sh).
//! Needs latmon-view beside the latmon under test, in the same profile
//! (`cargo build --release -p latmon-view` for `cargo test --release`).

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::*;

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn report_of_a_real_capture_renders_in_chromium() {
    let view = Path::new(env!("CARGO_BIN_EXE_latmon")).with_file_name("latmon-view");
    assert!(view.exists(), "{} missing: build it first, in the profile of these tests (cargo build -p latmon-view --release, or --profile release-test as scripts/test.sh does)", view.display());
    let dir = std::env::temp_dir().join(format!("latmon-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cap = dir.join("capture.bin");
    let mut load = Command::new("stress-ng")
        .args(["--cpu", "1", "--cpu-load", "30", "--timer", "1", "--fork", "1", "--timeout", "7s", "--quiet"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("stress-ng");
    let run = latmon()
        .args(["run", "--interval", "1s", "--duration", "6s", "--output"])
        // The budget of a 115200-baud UART: a capture as a serial line
        // carries it (delta frames, keyframes, the link's use in Status).
        .arg(format!("file:{},budget=5760B/s", cap.display()))
        .stdout(Stdio::null())
        .output()
        .unwrap();
    let _ = load.kill();
    let _ = load.wait();
    assert!(run.status.success(), "latmon run: {}", String::from_utf8_lossy(&run.stderr));

    let html = dir.join("report.html");
    let out =
        Command::new(&view).arg("report").arg(format!("file:{}", cap.display())).arg("-o").arg(&html).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "latmon-view report: {said}");
    let text = std::fs::read_to_string(&html).unwrap();

    // What decode says the capture holds: the probes with events.
    let dec = Command::new(env!("CARGO_BIN_EXE_latmon"))
        .arg("decode")
        .arg(format!("file:{}", cap.display()))
        .output()
        .unwrap();
    let lines = json_lines(&String::from_utf8_lossy(&dec.stdout));
    let mut with_events = std::collections::BTreeSet::new();
    for l in lines.iter().filter(|l| l["type"] == "summary") {
        for p in l["probes"].as_array().unwrap() {
            if u(p, "total_count") > 0 {
                with_events.insert(p["name"].as_str().unwrap().to_string());
            }
        }
    }
    assert!(with_events.contains("runq") && with_events.len() >= 3, "{with_events:?}");
    let sections: Vec<&str> = text.split("<section class=\"probe\"").skip(1).collect();
    assert_eq!(sections.len(), with_events.len(), "one section per probe with events");
    for s in &sections {
        let s = &s[..s.find("</section>").unwrap()];
        let name = &s[s.find("<h3>").unwrap() + 4..s.find("</h3>").unwrap()];
        assert!(with_events.contains(name), "{name} has no events per decode");
        assert_eq!(s.matches("<svg").count(), 2, "{name}: histogram and percentile charts");
        assert!(s.matches("<rect").count() >= 3, "{name}: histogram bars");
        assert!(s.contains("<polyline"), "{name}: percentile lines");
    }
    for needle in [
        "agent cost: BPF CPU %",
        "link health (cumulative)",
        "link: bytes/s used and budget",
        "id=\"facts\"",
        "id=\"config\"",
    ] {
        assert!(text.contains(needle), "{needle} missing");
    }
    assert!(!text.contains("<script") && !text.contains(" src=") && !text.contains(" href="), "self-contained");
    // No `board` in the config: the agent names the board by its host name.
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert!(text.contains(&format!("<h1>latmon report: {}</h1>", host.trim())), "the board's name in the heading");

    // The same capture through `view` without a terminal: the compact
    // table of `latmon run` (here the replay's last screen).
    let plain = Command::new(&view).arg("view").arg(format!("file:{}", cap.display())).arg("--plain").output().unwrap();
    let screen = String::from_utf8_lossy(&plain.stdout);
    assert!(plain.status.success(), "{}", String::from_utf8_lossy(&plain.stderr));
    assert!(screen.contains("P99.9") && screen.lines().any(|l| l.starts_with("runq ")), "{screen}");

    let png = dir.join("report.png");
    let shot = Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1300,2000"])
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", html.display()))
        .output()
        .expect("chromium (apt-get install chromium)");
    assert!(png.exists(), "no screenshot: {}", String::from_utf8_lossy(&shot.stderr));
    let stats = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/report/png_stats.py"))
        .arg(&png)
        .output()
        .unwrap();
    assert!(stats.status.success(), "{}", String::from_utf8_lossy(&stats.stderr));
    let st: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert_eq!((u(&st, "width"), u(&st, "height")), (1300, 2000), "{st}");
    let ink = st["ink"].as_f64().unwrap();
    assert!(ink > 0.05 && ink < 0.9, "blank or solid screenshot: {st}");
    assert!(u(&st, "colours") >= 8, "charts have colours: {st}");
    if let Ok(keep) = std::env::var("LATMON_REPORT_PNG") {
        std::fs::copy(&png, &keep).unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The Windows build of latmon-view (cross-built by scripts/test.sh) run
/// under wine (scripts/wine-run.sh), against the Linux build on the same
/// real capture: `decode`'s JSON lines and `report`'s HTML byte for byte
/// (line ends aside), and `view --plain` reading a live agent over TCP.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn the_windows_build_under_wine_reads_as_the_linux_build() {
    let linux = Path::new(env!("CARGO_BIN_EXE_latmon")).with_file_name("latmon-view");
    // target/PROFILE/latmon -> target/x86_64-pc-windows-gnu/PROFILE/latmon-view.exe
    let profile_dir = Path::new(env!("CARGO_BIN_EXE_latmon")).parent().unwrap();
    let exe = profile_dir
        .parent()
        .unwrap()
        .join("x86_64-pc-windows-gnu")
        .join(profile_dir.file_name().unwrap())
        .join("latmon-view.exe");
    for (p, how) in [(&linux, ""), (&exe, " --target x86_64-pc-windows-gnu")] {
        assert!(p.exists(), "{} missing: cargo build -p latmon-view{how} in the profile of these tests", p.display());
    }
    let wine_run = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/wine-run.sh");
    let dir = scratch("wine", "");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let tcp = format!("tcp://127.0.0.1:{port}");
    let wine = |args: &[&str]| {
        let out = Command::new(&wine_run).arg(&exe).args(args).current_dir(&dir).output().expect("scripts/wine-run.sh");
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "wine latmon-view.exe {args:?}: {said}");
        (String::from_utf8(out.stdout).unwrap().replace("\r\n", "\n"), said)
    };
    // First without the agent: a new wine prefix takes a while to make
    // (seconds, on a first run), and Rust's std starts under wine at all.
    let (version, _) = wine(&["--version"]);
    assert!(version.starts_with("latmon-view "), "{version}");
    let cap = dir.join("capture.bin");
    let _ = std::fs::remove_file(&cap);
    let mut load = stress_mix(12);
    let file = format!("file:{},budget=5760B/s", cap.display());
    let mut run = start_run(&["--interval", "1s", "--duration", "8s", "--output", &file, "--output", &tcp]);
    // Relative paths from here on: the same words for both builds (wine
    // maps the working directory), so the report's "capture" fact agrees.
    let (screen, _) = wine(&["view", &tcp, "--plain", "--duration", "4s"]);
    assert!(
        screen.contains("P99.9") && screen.lines().any(|l| l.starts_with("runq ")),
        "view --plain over TCP: {screen}"
    );
    let status = run.wait().unwrap();
    let _ = load.kill();
    let _ = load.wait();
    assert!(status.success(), "latmon run");
    assert!(std::fs::metadata(&cap).map(|m| m.len()).unwrap_or(0) > 0, "no capture at {}", cap.display());

    let native = |args: &[&str]| {
        let out = Command::new(&linux).args(args).current_dir(&dir).output().unwrap();
        assert!(out.status.success(), "latmon-view {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let (w, _) = wine(&["decode", "file:capture.bin"]);
    let l = native(&["decode", "file:capture.bin"]);
    assert!(l.lines().count() >= 8 && l.contains("\"type\":\"summary\""), "{l:.500}");
    assert!(
        w == l,
        "decode differs: wine {} bytes, Linux {} bytes; first difference at line {:?}",
        w.len(),
        l.len(),
        w.lines().zip(l.lines()).position(|(a, b)| a != b)
    );
    wine(&["report", "file:capture.bin", "-o", "windows.html"]);
    native(&["report", "file:capture.bin", "-o", "linux.html"]);
    let read = |n: &str| std::fs::read_to_string(dir.join(n)).unwrap().replace("\r\n", "\n");
    let (w, l) = (read("windows.html"), read("linux.html"));
    assert!(l.contains("<svg") && l.len() > 10_000, "the Linux report: {} bytes", l.len());
    assert!(
        w == l,
        "report differs: wine {} bytes, Linux {} bytes; first difference at line {:?}",
        w.len(),
        l.len(),
        w.lines().zip(l.lines()).position(|(a, b)| a != b)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
