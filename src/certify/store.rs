// SPDX-License-Identifier: MIT
//! A certificate as stored on the board, beside its config, and the
//! summary `latmon check` shows of it.
//!
//! Path: `certificate.json` in the directory of `--config`'s file, or
//! /etc/latmon/certificate.json without one (`--certificate PATH` of
//! `latmon certify` and `latmon check` overrides both).

use std::path::{Path, PathBuf};

use latmon_core::wire::{WireCertificate, CERT_FAIL, CERT_METHOD_1, CERT_OTHER_KERNEL, CERT_PASS};
use serde::{Deserialize, Serialize};

use super::model::{Figures, StateStats, Verdict};

/// Where a board keeps its certificate without a config file.
pub const DEFAULT_PATH: &str = "/etc/latmon/certificate.json";
const FILE_NAME: &str = "certificate.json";
/// The format of the stored file; a reader refuses another.
pub const VERSION: u32 = 1;

/// The stored certificate's path for a config file (None: the built-in
/// default config).
pub fn path_for(config: Option<&Path>) -> PathBuf {
    match config.map(|c| c.parent().unwrap_or(Path::new(""))) {
        Some(dir) if dir.as_os_str().is_empty() => PathBuf::from(FILE_NAME),
        Some(dir) => dir.join(FILE_NAME),
        None => PathBuf::from(DEFAULT_PATH),
    }
}

/// latmon's own CPU while the programs ran (the `full` epochs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuShare {
    pub cpus: u32,
    /// The wall time of the full epochs.
    pub wall_ns: u64,
    /// The BPF programs' run time (BPF_ENABLE_STATS), percent of the
    /// machine (all CPUs): the share per CPU on average.
    pub bpf_percent: f64,
    pub bpf_runs: u64,
    /// latmon's threads but the measuring one (/proc/self/task/*/schedstat).
    pub threads_percent: f64,
}

/// The cycle probe's view of the measuring loop in the full epochs:
/// release -> done, from its histogram (bucket resolution).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CycleResponse {
    pub cycles: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
}

/// One certificate: how it was made and its figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Certificate {
    pub version: u32,
    pub made_at_unix: u64,
    pub kernel: String,
    pub duration_ns: u64,
    pub epoch_ns: u64,
    pub settle_ns: u64,
    pub rounds: u32,
    pub interleaving: String,
    /// The measuring thread: its comm, policy and period.
    pub measuring_thread: String,
    /// The probe specs attached in the empty and full states.
    pub probes: Vec<String>,
    #[serde(flatten)]
    pub figures: Figures,
    pub latmon_cpu: CpuShare,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cycle_response: Option<CycleResponse>,
}

/// What `latmon check` shows of a stored certificate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub path: String,
    pub made_at_unix: u64,
    pub kernel: String,
    pub duration_ns: u64,
    pub verdict: Verdict,
    pub verdict_text: String,
    pub shift_p999_ns: i64,
    pub ci95_ns: [i64; 2],
    pub goal_ns: u64,
    pub p999_ns: P999,
    pub attach_spike_ns: u64,
    pub detach_spike_ns: u64,
    pub bpf_cpu_percent: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct P999 {
    pub none: u64,
    pub empty: u64,
    pub full: u64,
}

impl Certificate {
    pub fn summary(&self, path: &Path) -> Summary {
        let p = |s: &StateStats| s.p999_ns;
        let f = &self.figures;
        Summary {
            path: path.display().to_string(),
            made_at_unix: self.made_at_unix,
            kernel: self.kernel.clone(),
            duration_ns: self.duration_ns,
            verdict: f.verdict,
            verdict_text: f.verdict_text.clone(),
            shift_p999_ns: f.shift_p999_ns,
            ci95_ns: f.ci95_ns,
            goal_ns: f.goal_ns,
            p999_ns: P999 { none: p(&f.states.none), empty: p(&f.states.empty), full: p(&f.states.full) },
            attach_spike_ns: f.attach_spike_ns,
            detach_spike_ns: f.detach_spike_ns,
            bpf_cpu_percent: self.latmon_cpu.bpf_percent,
        }
    }

    /// The summary a Hello carries (revision 11) for an agent on kernel
    /// release `kernel`: flagged as made on another kernel when it was
    /// (a certificate of another kernel says nothing sure of this one).
    pub fn wire(&self, kernel: &str) -> WireCertificate {
        let f = &self.figures;
        WireCertificate {
            verdict: match f.verdict {
                Verdict::Pass => CERT_PASS,
                Verdict::Fail => CERT_FAIL,
            },
            flags: if self.kernel == kernel { 0 } else { CERT_OTHER_KERNEL },
            method: CERT_METHOD_1,
            duration_s: u32::try_from(self.duration_ns / 1_000_000_000).unwrap_or(u32::MAX),
            made_at_unix: self.made_at_unix,
            p999_none_ns: f.states.none.p999_ns,
            p999_full_ns: f.states.full.p999_ns,
            shift_p999_ns: f.shift_p999_ns,
            ci95_lo_ns: f.ci95_ns[0],
            ci95_hi_ns: f.ci95_ns[1],
            goal_ns: f.goal_ns,
        }
    }

    /// The stored form's text.
    pub fn from_json(text: &str) -> Result<Certificate, String> {
        let c: Certificate = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if c.version != VERSION {
            return Err(format!("version {} (this latmon reads {VERSION})", c.version));
        }
        Ok(c)
    }
}

/// The certificate stored at `path`: None when there is none, an error
/// naming the file when it cannot be read (I/O).
pub fn read(path: &Path) -> Result<Option<Certificate>, String> {
    match std::fs::read_to_string(path) {
        Ok(t) => Certificate::from_json(&t).map(Some).map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// The Hello summary of the certificate stored at `path` for an agent on
/// kernel release `kernel` (None: none stored, or unreadable: logged,
/// never fatal to the agent).
pub fn announce(path: &Path, kernel: &str) -> Option<WireCertificate> {
    match read(path) {
        Ok(Some(c)) => {
            let w = c.wire(kernel);
            if w.other_kernel() {
                log::warn!(
                    "certificate {}: made on kernel {}, this one is {kernel}: announced as made on another kernel",
                    path.display(),
                    c.kernel
                );
            } else {
                log::info!("certificate {}: {}", path.display(), w.line());
            }
            Some(w)
        }
        Ok(None) => None,
        Err(e) => {
            log::warn!("certificate not announced: {e}");
            None
        }
    }
}

/// Store `c` at `path` (a whole new file renamed over the old: a reader
/// never sees half of one).
pub fn write(path: &Path, c: &Certificate) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_string_pretty(c).map_err(std::io::Error::other)? + "\n")?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::super::model::{figures, Epoch, Sample, State};
    use super::*;

    #[test]
    fn the_certificate_lives_beside_the_config() {
        assert_eq!(path_for(Some(Path::new("/etc/robot/latmon.toml"))), Path::new("/etc/robot/certificate.json"));
        assert_eq!(path_for(Some(Path::new("latmon.toml"))), Path::new("certificate.json"));
        assert_eq!(path_for(None), Path::new(DEFAULT_PATH));
    }

    #[test]
    fn a_stored_certificate_reads_back_and_a_foreign_version_is_refused() {
        let s: Vec<Sample> = (0..300).map(|i| Sample { at_ns: i * 1_000_000, late_ns: 1_000 + i }).collect();
        let e: Vec<Epoch> = State::ALL
            .iter()
            .enumerate()
            .map(|(i, &state)| Epoch { state, start_ns: i as u64 * 100_000_000, end_ns: (i as u64 + 1) * 100_000_000 })
            .collect();
        let c = Certificate {
            version: VERSION,
            made_at_unix: 1,
            kernel: "6.18".into(),
            duration_ns: 300_000_000,
            epoch_ns: 100_000_000,
            settle_ns: 0,
            rounds: 1,
            interleaving: "x".into(),
            measuring_thread: "lm-certify".into(),
            probes: vec!["runq".into()],
            figures: figures(&s, &e, 0, &[100_000_000], &[200_000_000], 10_000_000),
            latmon_cpu: CpuShare { cpus: 2, wall_ns: 1, bpf_percent: 0.5, bpf_runs: 3, threads_percent: 0.1 },
            cycle_response: None,
        };
        let text = serde_json::to_string(&c).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        // The documented JSON names.
        assert_eq!(v["states"]["full"]["p999_ns"], 1_299);
        assert_eq!(v["states"]["none"]["samples"], 100);
        assert!(v["ci95_ns"].is_array() && v["shift_p999_ns"].is_i64() && v["verdict"] == "pass");
        assert_eq!(Certificate::from_json(&text).unwrap(), c);
        let sum = c.summary(Path::new("/x"));
        assert_eq!((sum.p999_ns.none, sum.p999_ns.full, sum.shift_p999_ns), (1_099, 1_299, 200));
        let w = c.wire("6.18");
        assert_eq!((w.verdict, w.flags, w.duration_s, w.shift_p999_ns), (CERT_PASS, 0, 0, 200));
        assert_eq!((w.p999_none_ns, w.p999_full_ns, [w.ci95_lo_ns, w.ci95_hi_ns]), (1_099, 1_299, c.figures.ci95_ns));
        assert!(c.wire("6.19").other_kernel());
        let other = text.replace("\"version\":1", "\"version\":2");
        assert!(Certificate::from_json(&other).unwrap_err().contains("version 2"));
    }
}
