// SPDX-License-Identifier: MIT
//! The hazards an observer brings into a PREEMPT_RT kernel, one verdict
//! each, judged at start from the kernel (pure, from `uname`) and, for
//! the maps, from what was loaded. Each unsafe verdict has a safe path
//! latmon takes by default; `latmon check` prints them all (JSON
//! `rt_safety`, one key per hazard).
//!
//! - `task_storage`: creating BPF task storage under the rq lock
//!   (CVE-2024-58070, src/rtkernel.rs): tid hashes / raw_tp instead.
//! - `ringbuf`: before 8b62645b09f8 ("bpf: Use raw_spinlock_t in
//!   ringbuf", 6.12, stable 6.1.115, 6.6.84, 6.11.6) the BPF ring
//!   buffer's producer lock is a `spinlock_t`, a sleeping lock on
//!   PREEMPT_RT: `bpf_ringbuf_reserve()` from sched_switch is then
//!   "BUG: sleeping function called from invalid context". The perf buffer
//!   (per-CPU, no lock) carries the alert records there instead.
//! - `map_alloc`: a hash map without preallocation allocates its element
//!   in the update, from the tracepoint's atomic context. Every hash map
//!   latmon loads is preallocated; the verdict counts the loaded maps
//!   that are not (task storage is the first hazard's).
//! - `percpu`: per-CPU scratch and histograms are updated with plain
//!   read-modify-write, exact only where a program cannot be preempted by
//!   another run of itself on the same CPU. Tracepoint and raw_tp
//!   programs run with preemption disabled by the tracepoint (`__DO_TRACE`,
//!   include/linux/tracepoint.h); uprobe programs (the func family) run
//!   with only migration disabled and record with atomic adds
//!   (bpf/maps.bpf.h `latmon_hist_record_atomic`).

use std::fmt;

use serde::Serialize;

use crate::rtkernel::{self, KernelVersion, TaskStorage};

/// The ring buffer's fix, as verdicts name it.
pub const RINGBUF_FIX: &str = "8b62645b09f8 (bpf: Use raw_spinlock_t in ringbuf)";
/// The first release of each line that has it.
pub const RINGBUF_FIXED_IN: &str = "6.1.115, 6.6.84, 6.11.6, 6.12";

/// Whether a kernel of this upstream version has [`RINGBUF_FIX`]. Lines
/// that ended before the backport (6.2-6.5, 6.7-6.10) and older ones
/// never got it.
pub fn ringbuf_fixed(v: KernelVersion) -> bool {
    match (v.major, v.minor) {
        (6, 1) => v.patch >= 115,
        (6, 6) => v.patch >= 84,
        (6, 11) => v.patch >= 6,
        (major, minor) => (major, minor) >= (6, 12),
    }
}

/// Why the ring buffer's lock is or is not safe here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RingbufWhy {
    NotRt,
    Fixed(KernelVersion),
    Before(KernelVersion),
    /// PREEMPT_RT whose release does not parse: taken as before the fix.
    UnknownRelease(String),
}

/// The verdict on the BPF ring buffer's lock in atomic context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingbufLock {
    pub safe: bool,
    pub why: RingbufWhy,
}

impl RingbufLock {
    /// The verdict for a kernel of `release` (`uname -r`) and `version`
    /// (`uname -v`), read as src/rtkernel.rs reads them.
    pub fn judge(release: &str, version: &str) -> RingbufLock {
        if !rtkernel::preempt_rt(version) {
            return RingbufLock { safe: true, why: RingbufWhy::NotRt };
        }
        match rtkernel::upstream(release, version) {
            Some(v) if ringbuf_fixed(v) => RingbufLock { safe: true, why: RingbufWhy::Fixed(v) },
            Some(v) => RingbufLock { safe: false, why: RingbufWhy::Before(v) },
            None => RingbufLock { safe: false, why: RingbufWhy::UnknownRelease(release.to_string()) },
        }
    }
}

impl fmt::Display for RingbufLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.safe { "safe" } else { "unsafe" })?;
        match &self.why {
            RingbufWhy::NotRt => f.write_str(" (not PREEMPT_RT: its lock never sleeps)"),
            RingbufWhy::Fixed(v) => write!(f, " (PREEMPT_RT {v}, has {RINGBUF_FIX})"),
            RingbufWhy::Before(v) => {
                write!(f, " (PREEMPT_RT {v}, before {RINGBUF_FIX} in {RINGBUF_FIXED_IN}: its lock sleeps)")
            }
            RingbufWhy::UnknownRelease(r) => {
                write!(f, " (PREEMPT_RT, release {r:?} unreadable: taken as before {RINGBUF_FIX})")
            }
        }
    }
}

/// `LATMON_ALERT_BUFFER`: which buffer carries the alert records.
pub const ALERT_BUFFER_ENV: &str = "LATMON_ALERT_BUFFER";

/// The alert buffer chosen for a verdict and `LATMON_ALERT_BUFFER`
/// (None or empty: not set): the ring buffer unless the verdict or the
/// variable says the perf buffer. `ringbuf` on an unsafe kernel is the
/// operator's explicit choice and is kept (the path says so).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertBuffer {
    pub ringbuf: bool,
    /// What is used and why, in words.
    pub path: String,
}

impl AlertBuffer {
    pub fn choose(verdict: &RingbufLock, env: Option<&str>) -> AlertBuffer {
        match env.map(str::trim) {
            Some("perf") => AlertBuffer { ringbuf: false, path: format!("perf buffer ({ALERT_BUFFER_ENV}=perf)") },
            Some("ringbuf") if !verdict.safe => AlertBuffer {
                ringbuf: true,
                path: format!("ring buffer, forced by {ALERT_BUFFER_ENV}=ringbuf on a kernel where it is unsafe"),
            },
            Some("ringbuf") => AlertBuffer { ringbuf: true, path: format!("ring buffer ({ALERT_BUFFER_ENV}=ringbuf)") },
            _ if !verdict.safe => AlertBuffer { ringbuf: false, path: "perf buffer (per-CPU, no lock)".into() },
            _ => AlertBuffer { ringbuf: true, path: "ring buffer (where the kernel has one)".into() },
        }
    }
}

/// Hash map types whose elements an update may allocate (BPF_MAP_TYPE_*:
/// HASH, PERCPU_HASH, HASH_OF_MAPS). LRU hashes are always preallocated.
const ALLOCATING_HASHES: [u32; 3] = [1, 5, 13];
/// BPF_F_NO_PREALLOC.
const NO_PREALLOC: u64 = 1;

/// A loaded BPF map, from its /proc/PID/fdinfo entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapFdInfo {
    pub map_type: u32,
    pub map_flags: u64,
    pub map_id: u32,
}

impl MapFdInfo {
    /// An fdinfo text's map fields (None: not a BPF map's).
    pub fn parse(fdinfo: &str) -> Option<MapFdInfo> {
        let field = |k: &str| fdinfo.lines().find_map(|l| l.strip_prefix(k)).map(str::trim);
        let map_type = field("map_type:")?.parse().ok()?;
        let flags = field("map_flags:")?;
        let map_flags = u64::from_str_radix(flags.trim_start_matches("0x"), 16).ok()?;
        let map_id = field("map_id:").and_then(|v| v.parse().ok()).unwrap_or(0);
        Some(MapFdInfo { map_type, map_flags, map_id })
    }

    /// An update of this map allocates in the caller's context.
    pub fn allocates(&self) -> bool {
        ALLOCATING_HASHES.contains(&self.map_type) && self.map_flags & NO_PREALLOC != 0
    }
}

/// One hazard's verdict, as `latmon check` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub safe: bool,
    /// The verdict and its reason.
    pub verdict: String,
    /// What latmon does here because of it.
    pub path: String,
}

/// Every hazard's verdict (`latmon check --json`: `rt_safety`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RtSafety {
    pub task_storage: Verdict,
    pub ringbuf: Verdict,
    /// None: no BPF map was loaded to judge.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub map_alloc: Option<Verdict>,
    pub percpu: Verdict,
}

impl RtSafety {
    /// The verdicts for this kernel (`release`, `version`), the
    /// overrides' values, and the maps loaded so far (empty: none judged).
    pub fn judge(
        task_storage: Result<TaskStorage, rtkernel::OverrideError>,
        release: &str,
        version: &str,
        alert_buffer_env: Option<&str>,
        maps: &[MapFdInfo],
    ) -> RtSafety {
        let rt = rtkernel::preempt_rt(version);
        let task_storage = match task_storage {
            Ok(ts) if ts.safe => Verdict {
                safe: true,
                verdict: ts.to_string(),
                path: "task storage from the scheduler's tracepoints".into(),
            },
            Ok(ts) => Verdict {
                safe: false,
                verdict: ts.to_string(),
                path: "runq and syscall via raw_tp, timer, chain and irq threads in tid hashes".into(),
            },
            Err(e) => {
                Verdict { safe: false, verdict: format!("invalid: {e}"), path: "latmon run refuses to start".into() }
            }
        };
        let rb = RingbufLock::judge(release, version);
        let buffer = AlertBuffer::choose(&rb, alert_buffer_env);
        let ringbuf = Verdict { safe: rb.safe, verdict: rb.to_string(), path: buffer.path };
        let map_alloc = (!maps.is_empty()).then(|| {
            let allocating: Vec<u32> = maps.iter().filter(|m| m.allocates()).map(|m| m.map_id).collect();
            match (allocating.is_empty(), rt) {
                (true, _) => Verdict {
                    safe: true,
                    verdict: format!("safe ({} maps loaded, every hash preallocated)", maps.len()),
                    path: "no map update allocates".into(),
                },
                (false, false) => Verdict {
                    safe: true,
                    verdict: format!("safe (not PREEMPT_RT; maps {allocating:?} allocate on update)"),
                    path: "kmalloc in atomic context does not sleep here".into(),
                },
                (false, true) => Verdict {
                    safe: false,
                    verdict: format!("unsafe (PREEMPT_RT; maps {allocating:?} allocate on update in atomic context)"),
                    path: "none: a map without preallocation is a defect of latmon's".into(),
                },
            }
        });
        let percpu = Verdict {
            safe: true,
            verdict: "safe (tracepoints run programs with preemption off; uprobes do not)".into(),
            path: "plain per-CPU updates from tracepoints, atomic adds from uprobes (func)".into(),
        };
        RtSafety { task_storage, ringbuf, map_alloc, percpu }
    }

    /// The verdicts as (hazard, verdict) for the text outputs.
    pub fn rows(&self) -> Vec<(&'static str, &Verdict)> {
        let mut v = vec![("task storage", &self.task_storage), ("ring buffer", &self.ringbuf)];
        if let Some(m) = &self.map_alloc {
            v.push(("map alloc", m));
        }
        v.push(("per-CPU", &self.percpu));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rtkernel::v;

    const RT_DEBIAN: &str = "#1 SMP PREEMPT_RT Debian 6.1.176-1 (2026-05-01)";
    const NOT_RT: &str = "#1 SMP PREEMPT_DYNAMIC Debian 6.12.57-1 (2025-11-05)";

    #[test]
    fn the_ringbuf_fix_is_in_exactly_its_stable_releases_and_6_12_on() {
        for k in [v(6, 1, 115), v(6, 1, 176), v(6, 6, 84), v(6, 11, 6), v(6, 12, 0), v(6, 18, 0), v(7, 0, 0)] {
            assert!(ringbuf_fixed(k), "{k}");
        }
        for k in [v(5, 15, 180), v(6, 1, 114), v(6, 5, 13), v(6, 6, 83), v(6, 10, 14), v(6, 11, 5)] {
            assert!(!ringbuf_fixed(k), "{k}");
        }
    }

    #[test]
    fn the_boards_debian_rt_kernels_have_the_raw_spinlock() {
        let r = RingbufLock::judge("6.1.0-50-rt-arm64", RT_DEBIAN);
        assert_eq!(r, RingbufLock { safe: true, why: RingbufWhy::Fixed(v(6, 1, 176)) });
        // An older Debian 6.1 RT build did not.
        let r = RingbufLock::judge("6.1.0-26-rt-amd64", "#1 SMP PREEMPT_RT Debian 6.1.112-1 (2024-09-30)");
        assert_eq!((r.safe, r.why), (false, RingbufWhy::Before(v(6, 1, 112))));
        assert!(RingbufLock::judge("6.8.2-rt11", "#1 SMP PREEMPT_RT")
            .to_string()
            .starts_with("unsafe (PREEMPT_RT 6.8.2"));
        assert_eq!(RingbufLock::judge("6.8.2", NOT_RT).to_string(), "safe (not PREEMPT_RT: its lock never sleeps)");
        assert_eq!(RingbufLock::judge("6.8.2", NOT_RT).why, RingbufWhy::NotRt);
        let r = RingbufLock::judge("custom", "#1 PREEMPT_RT");
        assert!(!r.safe && r.to_string().contains("\"custom\" unreadable"), "{r}");
    }

    #[test]
    fn an_unsafe_ring_buffer_means_the_perf_buffer_unless_forced() {
        let unsafe_rb = RingbufLock { safe: false, why: RingbufWhy::Before(v(6, 1, 100)) };
        let safe_rb = RingbufLock { safe: true, why: RingbufWhy::NotRt };
        assert!(!AlertBuffer::choose(&unsafe_rb, None).ringbuf);
        assert!(!AlertBuffer::choose(&unsafe_rb, Some("")).ringbuf);
        assert!(AlertBuffer::choose(&safe_rb, None).ringbuf);
        assert!(!AlertBuffer::choose(&safe_rb, Some("perf")).ringbuf);
        let forced = AlertBuffer::choose(&unsafe_rb, Some("ringbuf"));
        assert!(forced.ringbuf && forced.path.contains("unsafe"), "{forced:?}");
    }

    #[test]
    fn fdinfo_names_maps_that_allocate() {
        let hash_noprealloc = "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\nmap_type:\t1\nkey_size:\t4\n\
                               value_size:\t16\nmax_entries:\t1024\nmap_flags:\t0x1\nmap_extra:\t0x0\nmemlock:\t0\nmap_id:\t42\n";
        let m = MapFdInfo::parse(hash_noprealloc).unwrap();
        assert_eq!(m, MapFdInfo { map_type: 1, map_flags: 1, map_id: 42 });
        assert!(m.allocates());
        let task_storage = hash_noprealloc.replace("map_type:\t1\n", "map_type:\t29\n");
        assert!(!MapFdInfo::parse(&task_storage).unwrap().allocates(), "task storage: the task_storage hazard's");
        let prealloc = hash_noprealloc.replace("map_flags:\t0x1", "map_flags:\t0x0");
        assert!(!MapFdInfo::parse(&prealloc).unwrap().allocates());
        assert_eq!(MapFdInfo::parse("pos:\t0\nflags:\t02\n"), None, "not a map");
    }

    #[test]
    fn every_hazard_has_a_verdict_and_an_allocating_map_on_rt_is_unsafe() {
        let ts = TaskStorage::with_override(None, "6.1.0-50-rt-arm64", RT_DEBIAN);
        let alloc = MapFdInfo { map_type: 1, map_flags: 1, map_id: 7 };
        let ok = MapFdInfo { map_type: 1, map_flags: 0, map_id: 8 };
        let s = RtSafety::judge(ts.clone(), "6.1.0-50-rt-arm64", RT_DEBIAN, None, &[ok, alloc]);
        assert!(!s.task_storage.safe && s.ringbuf.safe && s.percpu.safe);
        let m = s.map_alloc.as_ref().unwrap();
        assert!(!m.safe && m.verdict.contains("[7]"), "{m:?}");
        let s = RtSafety::judge(ts, "6.1.0-50-rt-arm64", RT_DEBIAN, None, &[ok]);
        assert!(s.map_alloc.unwrap().safe);
        let json = serde_json::to_value(RtSafety::judge(
            TaskStorage::with_override(None, "6.18.0", NOT_RT),
            "6.18.0",
            NOT_RT,
            None,
            &[],
        ))
        .unwrap();
        for k in ["task_storage", "ringbuf", "percpu"] {
            assert_eq!(json[k]["safe"], true, "{k}: {json}");
        }
        assert!(json.get("map_alloc").is_none(), "no map loaded: not judged");
    }
}
