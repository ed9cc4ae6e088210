// SPDX-License-Identifier: MIT
//! RT hygiene: keep latmon's user-space threads out of the real-time
//! threads' way. Applied once, in the main thread, before any other thread
//! exists, so every thread (outputs, alert readers, the Prometheus server)
//! inherits it:
//! - CPU affinity: `housekeeping_cpus` (sched_setaffinity on the process);
//! - policy: SCHED_OTHER at `nice` (default 10), or SCHED_IDLE; an RT
//!   policy inherited from the parent is reset — never an RT priority;
//! - `mlockall = true`: MCL_CURRENT | MCL_FUTURE (RLIMIT_MEMLOCK raised
//!   first while still root, so later allocations stay lockable after the
//!   privilege drop).
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
}

impl std::fmt::Display for Applied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CPUs {:?}, {}", self.cpus, self.sched)?;
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
    if !cfg.housekeeping_cpus.is_empty() {
        let online = online_cpu_list();
        let usable: Vec<u32> =
            cfg.housekeeping_cpus.iter().copied().filter(|c| online.is_empty() || online.contains(c)).collect();
        if usable.is_empty() {
            return Err(HygieneError::NoneOnline { cpus: cfg.housekeeping_cpus.clone(), online });
        }
        if usable.len() < cfg.housekeeping_cpus.len() {
            log::warn!("housekeeping_cpus {:?}: only {usable:?} are online; using those", cfg.housekeeping_cpus);
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
            if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &inf) } != 0 {
                log::warn!("mlockall: raising RLIMIT_MEMLOCK: {}", std::io::Error::last_os_error());
            }
        }
        // SAFETY: plain syscall.
        if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) } != 0 {
            return Err(refused("mlockall = true".into(), std::io::Error::last_os_error()));
        }
        mlocked = true;
    }
    Ok(Applied { cpus: current_affinity(), sched: name, nice: cfg.nice, mlocked })
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
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,6\n"), vec![0, 1, 2, 3, 6]);
        assert_eq!(parse_cpu_list("0"), vec![0]);
        assert_eq!(parse_cpu_list(""), Vec::<u32>::new());
        assert_eq!(parse_cpu_list("x,2"), vec![2]);
    }
}
