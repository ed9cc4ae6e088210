// SPDX-License-Identifier: MIT
//! RT hygiene: keep latmon's user-space threads out of the real-time
//! threads' way. Applied once, in the main thread, before any other thread
//! exists, so every thread (outputs, alert readers, the Prometheus server)
//! inherits it:
//! - CPU affinity: `housekeeping_cpus` (sched_setaffinity on the process),
//!   by default the online CPUs that are neither isolated (`isolcpus`) nor
//!   tickless (`nohz_full`): those are the real-time threads' own;
//! - policy: SCHED_OTHER at `nice` (default 10), or SCHED_IDLE; an RT
//!   policy inherited from the parent is reset — never an RT priority;
//! - `mlockall = true` (the default): MCL_CURRENT | MCL_FUTURE
//!   (RLIMIT_MEMLOCK raised first while still root, so later allocations
//!   stay lockable after the privilege drop): no page fault in steady state
//!   ([`page_faults`], counted every interval).
//!
//! The BPF programs themselves run wherever the events happen; only their
//! cost can be bounded (src/cost/).

use crate::config::{Config, Sched};

/// What was applied, for the log and `check`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// CPUs the process may run on afterwards.
    pub cpus: Vec<u32>,
    pub sched: &'static str,
    pub nice: i32,
    pub mlocked: bool,
    /// Why latmon runs on `cpus`, in words.
    pub placement: String,
}

impl std::fmt::Display for Applied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CPUs {:?} ({}), {}", self.cpus, self.placement, self.sched)?;
        if self.sched == "SCHED_OTHER" {
            write!(f, " nice {}", self.nice)?;
        }
        if self.mlocked {
            write!(f, ", memory locked")?;
        }
        Ok(())
    }
}

/// CPUs this thread may run on.
pub fn current_affinity() -> Vec<u32> {
    let Ok(set) = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)) else { return Vec::new() };
    (0..nix::sched::CpuSet::count()).filter(|&c| set.is_set(c).unwrap_or(false)).map(|c| c as u32).collect()
}

/// Online CPUs by number (/sys/devices/system/cpu/online, e.g. `0-3,6`).
pub fn online_cpu_list() -> Vec<u32> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    parse_cpu_list(&text)
}

/// `0-3,6` -> [0, 1, 2, 3, 6].
pub fn parse_cpu_list(s: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.trim().parse::<u32>(), b.trim().parse::<u32>()) {
                    out.extend(a..=b.min(a + 4096));
                }
            }
            None => out.extend(part.trim().parse::<u32>().ok()),
        }
    }
    out
}

/// The CPUs the kernel keeps for itself and latmon by default: the online
/// ones that are neither `isolated` (isolcpus) nor `nohz_full`; all online
/// ones when that leaves none. Also why, in words.
pub fn housekeeping_default(online: &[u32], isolated: &[u32], nohz_full: &[u32]) -> (Vec<u32>, String) {
    let rt: Vec<u32> = online.iter().copied().filter(|c| isolated.contains(c) || nohz_full.contains(c)).collect();
    let house: Vec<u32> = online.iter().copied().filter(|c| !rt.contains(c)).collect();
    if rt.is_empty() {
        return (online.to_vec(), "no CPU isolated or nohz_full: any online CPU".into());
    }
    if house.is_empty() {
        return (online.to_vec(), format!("every online CPU is isolated or nohz_full ({rt:?}): any of them"));
    }
    (house, format!("housekeeping: not isolcpus {isolated:?} or nohz_full {nohz_full:?}"))
}

/// Where latmon's threads go and why: the config's `housekeeping_cpus`,
/// else [`housekeeping_default`] from sysfs (an I/O edge).
pub fn placement(cfg: &Config) -> (Vec<u32>, String) {
    if !cfg.housekeeping_cpus.is_empty() {
        return (cfg.housekeeping_cpus.clone(), "housekeeping_cpus in the config".into());
    }
    let read =
        |f: &str| parse_cpu_list(&std::fs::read_to_string(format!("/sys/devices/system/cpu/{f}")).unwrap_or_default());
    housekeeping_default(&online_cpu_list(), &read("isolated"), &read("nohz_full"))
}

/// The process's page faults so far, minor and major (getrusage: every
/// thread's, the exited ones' included).
pub fn page_faults() -> u64 {
    // SAFETY: all-zero is a valid rusage; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid out pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0;
    }
    (ru.ru_minflt as u64).saturating_add(ru.ru_majflt as u64)
}

/// Why a hygiene setting could not be applied; each names the setting.
#[derive(Debug)]
pub enum HygieneError {
    /// `housekeeping_cpus` names no online CPU.
    NoneOnline { cpus: Vec<u32>, online: Vec<u32> },
    /// The system refused a setting (`setting` as the config writes it,
    /// e.g. `nice = 10`).
    Refused { setting: String, err: std::io::Error },
}

impl std::fmt::Display for HygieneError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HygieneError::NoneOnline { cpus, online } => {
                write!(f, "housekeeping_cpus {cpus:?}: none of these CPUs is online (online: {online:?})")
            }
            HygieneError::Refused { setting, err } => write!(f, "{setting}: {err}"),
        }
    }
}

impl std::error::Error for HygieneError {}

/// `setting` refused with `err`.
fn refused(setting: String, err: impl Into<std::io::Error>) -> HygieneError {
    HygieneError::Refused { setting, err: err.into() }
}

/// Apply the config's affinity, policy and memory locking to the calling
/// thread (and so to every thread created after). Errors name the setting.
pub fn apply(cfg: &Config) -> Result<Applied, HygieneError> {
    let (cpus, placement) = placement(cfg);
    // Inherited affinity stays when every online CPU is latmon's anyway.
    if !cpus.is_empty() && (!cfg.housekeeping_cpus.is_empty() || cpus != online_cpu_list()) {
        let online = online_cpu_list();
        let usable: Vec<u32> = cpus.iter().copied().filter(|c| online.is_empty() || online.contains(c)).collect();
        if usable.is_empty() {
            return Err(HygieneError::NoneOnline { cpus, online });
        }
        if usable.len() < cpus.len() {
            log::warn!("housekeeping_cpus {cpus:?}: only {usable:?} are online; using those");
        }
        let mut set = nix::sched::CpuSet::new();
        for &c in &usable {
            set.set(c as usize).map_err(|e| refused(format!("housekeeping_cpus: CPU {c}"), e))?;
        }
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
            .map_err(|e| refused(format!("housekeeping_cpus {usable:?}: sched_setaffinity"), e))?;
    }
    let (policy, name) = match cfg.sched {
        Sched::Other => (libc::SCHED_OTHER, "SCHED_OTHER"),
        Sched::Idle => (libc::SCHED_IDLE, "SCHED_IDLE"),
    };
    // SAFETY: sched_param is plain data; all-zero is priority 0 (musl's
    // struct has extra fields, so no struct literal).
    let mut param: libc::sched_param = unsafe { std::mem::zeroed() };
    param.sched_priority = 0;
    // The raw syscall: musl's sched_setscheduler() is a stub that always
    // fails with ENOSYS (glibc's wrapper is this same syscall).
    // SAFETY: pid 0 is the calling thread; param is valid.
    if unsafe {
        libc::syscall(libc::SYS_sched_setscheduler, 0 as libc::pid_t, policy, &param as *const libc::sched_param)
    } != 0
    {
        return Err(refused(format!("sched = {name}"), std::io::Error::last_os_error()));
    }
    if cfg.sched == Sched::Other {
        // On Linux PRIO_PROCESS with 0 is the calling thread; threads
        // created later inherit it.
        // SAFETY: plain syscall.
        if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, cfg.nice) } != 0 {
            return Err(refused(format!("nice = {}", cfg.nice), std::io::Error::last_os_error()));
        }
    }
    let mut mlocked = false;
    if cfg.mlockall {
        if nix::unistd::geteuid().is_root() {
            let inf = libc::rlimit { rlim_cur: libc::RLIM_INFINITY, rlim_max: libc::RLIM_INFINITY };
            // SAFETY: valid rlimit.
            // Refused without CAP_SYS_RESOURCE (some containers): root's
            // CAP_IPC_LOCK still locks beyond the limit; the privilege
            // drop's case is mlock_before_drop's.
            if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &inf) } != 0 {
                log::debug!("mlockall: raising RLIMIT_MEMLOCK: {}", std::io::Error::last_os_error());
            }
        }
        // A monitor that runs unlocked beats one that does not run: the
        // default is on, and a user without CAP_IPC_LOCK under a small
        // RLIMIT_MEMLOCK gets the warning, not a refusal.
        // SAFETY: plain syscall.
        if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) } != 0 {
            log::warn!(
                "mlockall = true: {}: memory NOT locked (page faults possible in steady state)",
                std::io::Error::last_os_error()
            );
        } else {
            mlocked = true;
        }
    }
    Ok(Applied { cpus: current_affinity(), sched: name, nice: cfg.nice, mlocked, placement })
}

/// Before the privilege drop, with `mlockall = true`: without
/// CAP_IPC_LOCK, every new locked mapping counts against RLIMIT_MEMLOCK,
/// and the memory already locked exceeds a finite limit, so with
/// MCL_FUTURE any later allocation (an alert record, a reload) would fail.
/// Unless the limit is infinite (raised while root), keep what is locked
/// (MCL_CURRENT) and stop locking future mappings; the steady-state loop
/// allocates nothing, so it runs entirely in locked memory.
pub fn mlock_before_drop() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: valid out pointer.
    let finite = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } != 0 || lim.rlim_cur != libc::RLIM_INFINITY;
    if !finite {
        return;
    }
    // SAFETY: plain syscall.
    if unsafe { libc::mlockall(libc::MCL_CURRENT) } == 0 {
        log::warn!(
            "mlockall: RLIMIT_MEMLOCK is {} KiB (could not be raised): memory locked so far stays locked; memory allocated after the privilege drop is not",
            lim.rlim_cur / 1024
        );
    } else {
        log::warn!("mlockall(MCL_CURRENT) before the privilege drop: {}", std::io::Error::last_os_error());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_avoids_isolated_and_tickless_cpus() {
        let online = [0, 1, 2, 3];
        let (cpus, why) = housekeeping_default(&online, &[2, 3], &[]);
        assert_eq!(cpus, [0, 1]);
        assert!(why.contains("isolcpus [2, 3]"), "{why}");
        assert_eq!(housekeeping_default(&online, &[], &[1, 2, 3]).0, [0]);
        assert_eq!(housekeeping_default(&online, &[3], &[2]).0, [0, 1]);
        let (cpus, why) = housekeeping_default(&online, &[], &[]);
        assert_eq!((cpus.as_slice(), why.as_str()), (&online[..], "no CPU isolated or nohz_full: any online CPU"));
        let (cpus, why) = housekeeping_default(&online, &[0, 1, 2, 3], &[]);
        assert_eq!(cpus, online, "nowhere else to go");
        assert!(why.starts_with("every online CPU is isolated"), "{why}");
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,6\n"), vec![0, 1, 2, 3, 6]);
        assert_eq!(parse_cpu_list("0"), vec![0]);
        assert_eq!(parse_cpu_list(""), Vec::<u32>::new());
        assert_eq!(parse_cpu_list("x,2"), vec![2]);
    }
}
