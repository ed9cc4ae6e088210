// SPDX-License-Identifier: MIT
//! Whether this kernel may create BPF task storage in atomic context: a
//! pure verdict from `uname -r` and `uname -v`, with an override.
//!
//! On PREEMPT_RT, `bpf_task_storage_get(.., BPF_LOCAL_STORAGE_GET_F_CREATE)`
//! allocates with kmalloc, whose locks sleep there; from sched_waking,
//! sched_wakeup or sched_switch (rq lock held, preemption off) that is
//! "BUG: sleeping function called from invalid context", and sometimes a
//! hung machine (CVE-2024-58070). Fixed by 8eef6ac4d70e ("bpf:
//! bpf_local_storage: Always use bpf_mem_alloc in PREEMPT_RT") in 6.14,
//! and in the stable releases 6.12.16 and 6.13.4. On an unsafe kernel the
//! families that create per-task state there use preallocated hashes
//! keyed by thread id instead (bpf/task_slot.bpf.h), or their raw_tp rung
//! (runq, syscall).
//!
//! The release alone can understate the kernel: Debian's `6.1.0-28-rt-amd64`
//! is upstream 6.1.119, which `uname -v` names ("... PREEMPT_RT Debian
//! 6.1.119-1 (2024-11-22)"). A full version of the same major.minor in
//! `uname -v` counts when it is later. A PREEMPT_RT kernel whose release
//! cannot be read is taken as unsafe.

use std::fmt;

/// The override: `unsafe` or `safe` (empty: not set).
pub const ENV: &str = "LATMON_RT_TASK_STORAGE";
/// The kernel's flaw, as mode strings and logs name it.
pub const CVE: &str = "CVE-2024-58070";
/// The first fixed release of each line.
pub const FIXED_IN: &str = "6.12.16, 6.13.4, 6.14";

/// A kernel version `major.minor.patch` (patch 0 when the release has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct KernelVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl KernelVersion {
    pub const fn new(major: u32, minor: u32, patch: u32) -> KernelVersion {
        KernelVersion { major, minor, patch }
    }

    /// The leading `A.B[.C]` of `s` (`6.1.0-28-rt-amd64`, `6.13.3-rt1`,
    /// `6.14.0-rc2`); None when `s` does not start with one.
    pub fn parse(s: &str) -> Option<KernelVersion> {
        let end = s.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(s.len());
        let mut nums = s[..end].split('.');
        let major = nums.next()?.parse().ok()?;
        let minor = nums.next()?.parse().ok()?;
        let patch = match nums.next() {
            None | Some("") => 0,
            Some(p) => p.parse().ok()?,
        };
        Some(KernelVersion::new(major, minor, patch))
    }

    /// Whether this version has the fix (see the module's text).
    pub fn fixed(self) -> bool {
        match (self.major, self.minor) {
            (6, 12) => self.patch >= 16,
            (6, 13) => self.patch >= 4,
            (major, minor) => (major, minor) >= (6, 14),
        }
    }
}

/// The tests' shorthand for a version (here, rtsafety.rs, cost).
#[cfg(test)]
pub(crate) const fn v(major: u32, minor: u32, patch: u32) -> KernelVersion {
    KernelVersion::new(major, minor, patch)
}

impl fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Why a verdict is what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// `uname -v` names no PREEMPT_RT: kmalloc does not sleep in atomic
    /// context.
    NotRt,
    /// PREEMPT_RT with the fix.
    Fixed(KernelVersion),
    /// PREEMPT_RT without it.
    Before(KernelVersion),
    /// PREEMPT_RT, its release unreadable (the text): taken as unsafe.
    UnknownRelease(String),
    /// LATMON_RT_TASK_STORAGE said so.
    Override,
}

/// The verdict on creating task storage in atomic context here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskStorage {
    /// Safe: the families use task storage.
    pub safe: bool,
    pub why: Why,
}

/// LATMON_RT_TASK_STORAGE holds neither word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverrideError {
    pub value: String,
}

impl fmt::Display for OverrideError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{ENV}={:?}: expected \"unsafe\" or \"safe\"", self.value)
    }
}

impl std::error::Error for OverrideError {}

/// Whether `uname -v` says PREEMPT_RT (scripts/mkcompile_h adds the word
/// for CONFIG_PREEMPT_RT).
pub(crate) fn preempt_rt(version: &str) -> bool {
    version.split_whitespace().any(|w| w == "PREEMPT_RT")
}

/// The kernel's upstream version: the release's, or a later one of the
/// same major.minor that `uname -v` names (a distribution's).
pub(crate) fn upstream(release: &str, version: &str) -> Option<KernelVersion> {
    let rel = KernelVersion::parse(release)?;
    let named = version
        .split_whitespace()
        .filter(|w| w.matches('.').count() >= 2)
        .filter_map(KernelVersion::parse)
        .filter(|v| (v.major, v.minor) == (rel.major, rel.minor));
    Some(named.fold(rel, Ord::max))
}

impl TaskStorage {
    /// The verdict for a kernel of `release` (`uname -r`) and `version`
    /// (`uname -v`).
    pub fn judge(release: &str, version: &str) -> TaskStorage {
        if !preempt_rt(version) {
            return TaskStorage { safe: true, why: Why::NotRt };
        }
        match upstream(release, version) {
            Some(v) if v.fixed() => TaskStorage { safe: true, why: Why::Fixed(v) },
            Some(v) => TaskStorage { safe: false, why: Why::Before(v) },
            None => TaskStorage { safe: false, why: Why::UnknownRelease(release.to_string()) },
        }
    }

    /// `judge`, unless `value` (LATMON_RT_TASK_STORAGE; None or empty: not
    /// set) overrides it.
    pub fn with_override(value: Option<&str>, release: &str, version: &str) -> Result<TaskStorage, OverrideError> {
        match value.map(str::trim) {
            None | Some("") => Ok(TaskStorage::judge(release, version)),
            Some("unsafe") => Ok(TaskStorage { safe: false, why: Why::Override }),
            Some("safe") => Ok(TaskStorage { safe: true, why: Why::Override }),
            Some(other) => Err(OverrideError { value: other.to_string() }),
        }
    }

    /// Why an unsafe verdict holds, in the few words a probe's mode takes
    /// (`tid-hash (PREEMPT_RT: CVE-2024-58070)`).
    pub fn mode_note(&self) -> String {
        match self.why {
            Why::Override => format!("{ENV}={}", if self.safe { "safe" } else { "unsafe" }),
            _ => format!("PREEMPT_RT: {CVE}"),
        }
    }
}

impl fmt::Display for TaskStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.safe { "safe" } else { "unsafe" })?;
        match &self.why {
            Why::NotRt => f.write_str(" (not PREEMPT_RT)"),
            Why::Fixed(v) => write!(f, " (PREEMPT_RT {v}, has the fix of {CVE})"),
            Why::Before(v) => write!(f, " (PREEMPT_RT {v}, before the fix of {CVE} in {FIXED_IN})"),
            Why::UnknownRelease(r) => {
                write!(f, " (PREEMPT_RT, release {r:?} unreadable: taken as before the fix of {CVE} in {FIXED_IN})")
            }
            Why::Override => write!(f, " ({ENV}={})", if self.safe { "safe" } else { "unsafe" }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RT: &str = "#1 SMP PREEMPT_RT Thu Jan  2 10:00:00 UTC 2025";
    const NOT_RT: &str = "#1 SMP PREEMPT_DYNAMIC Debian 6.12.57-1 (2025-11-05)";

    #[test]
    fn releases_parse_to_their_leading_version() {
        assert_eq!(KernelVersion::parse("6.1.0-28-rt-amd64"), Some(v(6, 1, 0)));
        assert_eq!(KernelVersion::parse("6.13.3-rt1"), Some(v(6, 13, 3)));
        assert_eq!(KernelVersion::parse("6.14.0-rc2"), Some(v(6, 14, 0)));
        assert_eq!(KernelVersion::parse("6.12.16+deb13-rt-arm64"), Some(v(6, 12, 16)));
        assert_eq!(KernelVersion::parse("6.18"), Some(v(6, 18, 0)));
        assert_eq!(KernelVersion::parse("5.15.0-1032-realtime"), Some(v(5, 15, 0)));
        assert_eq!(KernelVersion::parse("6.1.119-1"), Some(v(6, 1, 119)));
        for bad in ["", "linux-6.1", "6", "6.", "x.1.2", "6.x.1"] {
            assert_eq!(KernelVersion::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_fixed_releases_are_exactly_6_12_16_6_13_4_and_6_14_on() {
        let fixed = [v(6, 12, 16), v(6, 12, 60), v(6, 13, 4), v(6, 13, 12), v(6, 14, 0), v(6, 18, 0), v(7, 0, 0)];
        let before = [v(5, 15, 170), v(6, 1, 119), v(6, 6, 80), v(6, 11, 11), v(6, 12, 15), v(6, 13, 0), v(6, 13, 3)];
        for k in fixed {
            assert!(k.fixed(), "{k}");
        }
        for k in before {
            assert!(!k.fixed(), "{k}");
        }
    }

    #[test]
    fn only_preempt_rt_kernels_before_the_fix_are_unsafe() {
        let judge = TaskStorage::judge;
        assert_eq!(judge("6.1.0-28-amd64", "#1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1 (2024-11-22)").why, Why::NotRt);
        assert!(judge("6.12.5", NOT_RT).safe, "not RT: safe whatever the release");
        // "PREEMPT" alone, or RT in another word, is not PREEMPT_RT.
        assert!(judge("6.1.0", "#1 SMP PREEMPT Tue").safe);
        assert!(judge("6.1.0", "#1 SMP PREEMPT_RTX Tue").safe);
        let t = judge("6.12.15-rt7", RT);
        assert_eq!((t.safe, t.why), (false, Why::Before(v(6, 12, 15))));
        let t = judge("6.12.16-rt8", RT);
        assert_eq!((t.safe, t.why), (true, Why::Fixed(v(6, 12, 16))));
        assert!(!judge("6.13.3-rt1", RT).safe && judge("6.13.4-rt1", RT).safe);
        assert!(judge("6.14.0-rc2-rt1", RT).safe && judge("6.18.0-rt3", RT).safe);
        assert!(!judge("6.6.63-rt46", RT).safe);
    }

    #[test]
    fn a_distributions_full_version_in_uname_v_counts() {
        // Debian bookworm's RT kernel (the rt-amd64 / rt-arm64 boards).
        let t = TaskStorage::judge("6.1.0-28-rt-amd64", "#1 SMP PREEMPT_RT Debian 6.1.119-1 (2024-11-22)");
        assert_eq!((t.safe, t.why), (false, Why::Before(v(6, 1, 119))));
        // An ABI-numbered 6.12 release whose build is 6.12.20: fixed.
        let t = TaskStorage::judge("6.12.0-3-rt-amd64", "#1 SMP PREEMPT_RT Debian 6.12.20-1 (2025-03-01)");
        assert_eq!((t.safe, t.why), (true, Why::Fixed(v(6, 12, 20))));
        // Another line's version in the text does not count.
        let t = TaskStorage::judge("6.12.3-rt1", "#1 SMP PREEMPT_RT built from 6.14.1 tree");
        assert_eq!((t.safe, t.why), (false, Why::Before(v(6, 12, 3))));
        // Nor does an earlier one of the same line, nor a date.
        let t = TaskStorage::judge("6.13.4-rt2", "#1 SMP PREEMPT_RT Debian 6.13.2-1 (2025-02-01)");
        assert!(t.safe, "{t}");
    }

    #[test]
    fn an_unreadable_rt_release_is_taken_as_unsafe() {
        let t = TaskStorage::judge("custom", RT);
        assert_eq!((t.safe, &t.why), (false, &Why::UnknownRelease("custom".into())));
        assert!(t.to_string().contains("\"custom\" unreadable"), "{t}");
    }

    #[test]
    fn the_override_wins_and_a_bad_value_is_named() {
        let over = |v| TaskStorage::with_override(v, "6.18.0", NOT_RT);
        assert_eq!(over(None), Ok(TaskStorage { safe: true, why: Why::NotRt }));
        assert_eq!(over(Some("")), Ok(TaskStorage { safe: true, why: Why::NotRt }));
        assert_eq!(over(Some("unsafe")), Ok(TaskStorage { safe: false, why: Why::Override }));
        let rt = TaskStorage::with_override(Some("safe"), "6.1.0-28-rt-amd64", RT);
        assert_eq!(rt, Ok(TaskStorage { safe: true, why: Why::Override }));
        let e = over(Some("maybe")).unwrap_err();
        assert_eq!(e.to_string(), "LATMON_RT_TASK_STORAGE=\"maybe\": expected \"unsafe\" or \"safe\"");
        assert!(over(Some("UNSAFE")).is_err(), "the words are lower case");
    }

    #[test]
    fn verdicts_say_why_in_words() {
        let t = TaskStorage::judge("6.1.0-28-rt-amd64", "#1 SMP PREEMPT_RT Debian 6.1.119-1 (2024-11-22)");
        assert_eq!(
            t.to_string(),
            "unsafe (PREEMPT_RT 6.1.119, before the fix of CVE-2024-58070 in 6.12.16, 6.13.4, 6.14)"
        );
        assert_eq!(t.mode_note(), "PREEMPT_RT: CVE-2024-58070");
        let o = TaskStorage::with_override(Some("unsafe"), "6.18.0", NOT_RT).unwrap();
        assert_eq!(
            (o.to_string().as_str(), o.mode_note().as_str()),
            ("unsafe (LATMON_RT_TASK_STORAGE=unsafe)", "LATMON_RT_TASK_STORAGE=unsafe")
        );
        assert_eq!(TaskStorage::judge("6.18.0", NOT_RT).to_string(), "safe (not PREEMPT_RT)");
    }
}
