// SPDX-License-Identifier: MIT
//! A disk that fills during a run: a small tmpfs holds JSON, text and
//! frames outputs; a filler takes the rest of it for a while, then frees
//! it. Every output keeps only whole records, and every record it did not
//! write is counted in its drops.

use crate::common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;

/// A tmpfs of `size` mounted at `dir` for this test; unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let st = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .unwrap();
        assert!(st.success(), "mount -t tmpfs at {}", dir.display());
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// Write zeros to `path` until the file system is full.
fn fill(path: &Path) -> u64 {
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = [0u8; 4096];
    let mut n = 0u64;
    while let Ok(k) = f.write(&chunk) {
        if k == 0 {
            break;
        }
        n += k as u64;
    }
    n
}

/// From latmon's log: records output `name` counted dropped (its last
/// report, at exit).
fn dropped(log: &[String], name: &str) -> u64 {
    let want = format!("output {name}: ");
    log.iter().filter_map(|l| l.split_once(&want)?.1.split_once(" records (")?.0.parse().ok()).next_back().unwrap_or(0)
}

/// Seqs from 1 to the last one written that are missing.
fn missing(seqs: &[u64]) -> u64 {
    let last = seqs.iter().copied().max().unwrap_or(0);
    last - seqs.len() as u64
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn a_full_disk_leaves_whole_records_and_counts_every_one_lost() {
    let dir = scratch("full-disk", "mnt");
    let _fs = Tmpfs::mount(&dir, "512k");
    let (json, text, frames) = (dir.join("out.json"), dir.join("out.txt"), dir.join("out.bin"));
    let outs = [
        format!("file:{},format=json", json.display()),
        format!("file:{},format=text", text.display()),
        format!("file:{},format=frames", frames.display()),
    ];
    let mut args = vec!["--probe", "runq", "--interval", "100ms", "--duration", "9s"];
    for o in &outs {
        args.extend(["--output", o.as_str()]);
    }
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let l = Arc::clone(&log);
    let mut cmd = latmon();
    cmd.arg("run").args(&args).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped());
    let (mut child, _) = spawn_ready(cmd, common::READY_WITHIN, move |line| {
        eprintln!("[latmon] {line}");
        l.lock().unwrap().push(line.to_string());
    });
    std::thread::sleep(Duration::from_millis(2500));
    let filler = dir.join("filler");
    let took = fill(&filler);
    std::thread::sleep(Duration::from_millis(2500));
    // Whatever space the outputs freed meanwhile (none): full once more.
    let more = std::fs::OpenOptions::new().append(true).open(&filler).map(|mut f| f.write(&[0u8; 65536]));
    std::fs::remove_file(&filler).unwrap();
    let status = child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert!(status.success(), "latmon run: {status}");
    let log = log.lock().unwrap().clone();
    eprintln!("filler took {took} bytes (then {more:?})");

    // JSON: every line a whole record; the missing ones all counted.
    let body = std::fs::read_to_string(&json).unwrap();
    let mut seqs = Vec::new();
    for l in body.lines() {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("a JSON line is not a whole record ({e}): {l:.200}"));
        seqs.push(u(&v, "seq"));
    }
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "seqs ascending, none twice: {seqs:?}");
    let (lost, counted) = (missing(&seqs), dropped(&log, &format!("file:{}", json.display())));
    eprintln!("json: {} records, {lost} missing, {counted} counted dropped", seqs.len());
    assert!(lost > 0, "the disk was full for 2.5 s: records were lost");
    assert_eq!(lost, counted, "every JSON record lost is counted");
    assert!(body.ends_with('\n'));

    // Text: each record starts a line and has the lines of every other.
    let body = std::fs::read_to_string(&text).unwrap();
    let mut records: BTreeMap<u64, usize> = BTreeMap::new();
    let mut cur = None;
    for l in body.lines() {
        assert!(!l.contains("--- seq") || l.starts_with("--- seq"), "a record glued to a partial one: {l:.200}");
        if let Some(rest) = l.strip_prefix("--- seq ") {
            let seq: u64 = rest.split_whitespace().next().unwrap().parse().unwrap();
            assert!(records.insert(seq, 0).is_none(), "seq {seq} twice");
            cur = Some(seq);
        }
        if let Some(s) = cur {
            *records.get_mut(&s).unwrap() += 1;
        }
    }
    let mut sizes: Vec<usize> = records.values().copied().collect();
    sizes.sort_unstable();
    let typical = sizes[sizes.len() / 2];
    let last = records.keys().last().copied().unwrap_or(0);
    // (The first and the final record may carry lines of their own.)
    let odd: Vec<(&u64, &usize)> = records.iter().filter(|(&s, &n)| n != typical && s > 1 && s < last).collect();
    assert!(odd.is_empty(), "records of {typical} lines, but these differ (cut?): {odd:?}");
    let seqs: Vec<u64> = records.keys().copied().collect();
    let (lost, counted) = (missing(&seqs), dropped(&log, &format!("file:{}", text.display())));
    eprintln!("text: {} records, {lost} missing, {counted} counted dropped", seqs.len());
    assert!(lost > 0);
    assert_eq!(lost, counted, "every text record lost is counted");

    // Frames: not one damaged frame for the decoder.
    let out = latmon().arg("decode").arg(format!("file:{}", frames.display())).output().unwrap();
    let lines = json_lines(&String::from_utf8_lossy(&out.stdout));
    let bad = lines.iter().filter(|l| l["type"] == "bad_frame").count();
    let summaries = lines.iter().filter(|l| l["type"] == "summary").count();
    let counted = dropped(&log, &format!("file:{}", frames.display()));
    eprintln!("frames: {summaries} summaries, {bad} damaged frames, {counted} frames counted dropped");
    assert_eq!(bad, 0, "no partial frame left: {}", String::from_utf8_lossy(&out.stderr));
    assert!(counted > 0);
}
