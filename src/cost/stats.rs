// SPDX-License-Identifier: MIT
//! The syscalls of latmon's cost measurement: BPF run-time statistics on
//! (`BPF_ENABLE_STATS`), a program's counters, online CPUs.

use std::io;
use std::mem::size_of;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use super::{Cost, CostTable, ProgStats};

/// Keeps the kernel's BPF run-time statistics on while it lives.
#[derive(Debug)]
pub struct StatsGuard {
    _fd: OwnedFd,
}

/// `bpf(BPF_ENABLE_STATS, BPF_STATS_RUN_TIME)`: needs CAP_SYS_ADMIN (so it
/// is done before privileges are dropped); the fd stays valid after.
pub fn enable_stats() -> io::Result<StatsGuard> {
    // SAFETY: a plain syscall wrapper; the returned fd is ours.
    let fd = unsafe { libbpf_rs::libbpf_sys::bpf_enable_stats(libbpf_rs::libbpf_sys::BPF_STATS_RUN_TIME) };
    if fd < 0 {
        return Err(io::Error::from_raw_os_error(-fd));
    }
    // SAFETY: fd is a new descriptor owned by nobody else.
    Ok(StatsGuard { _fd: unsafe { OwnedFd::from_raw_fd(fd) } })
}

/// `bpf_prog_get_info_by_fd` on an open program fd. Works without any
/// capability on kernels since 6.5 (the counters are filled before the
/// kernel's CAP_BPF check for the instruction dumps); see docs/agent.md.
pub fn prog_stats(fd: RawFd) -> io::Result<ProgStats> {
    // SAFETY: all-zero is valid for this C struct of integers; no pointer
    // fields are set, so the kernel copies no arrays.
    let mut info: libbpf_rs::libbpf_sys::bpf_prog_info = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libbpf_rs::libbpf_sys::bpf_prog_info>() as u32;
    // SAFETY: info/len are valid for the call.
    let rc = unsafe { libbpf_rs::libbpf_sys::bpf_prog_get_info_by_fd(fd, &mut info, &mut len) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(-rc));
    }
    Ok(ProgStats { id: info.id, runs: info.run_cnt, run_time_ns: info.run_time_ns, missed: info.recursion_misses })
}

/// Online CPUs (the denominator of CPU shares).
pub fn online_cpus() -> u32 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    u32::try_from(n).ok().filter(|&n| n > 0).unwrap_or(1)
}

impl CostTable {
    /// [`CostTable::rebuild_with`] the kernel's counters.
    pub fn rebuild(&mut self, probes: &[Vec<RawFd>]) {
        self.rebuild_with(probes, prog_stats)
    }

    /// [`CostTable::sample_with`] the kernel's counters.
    pub fn sample(&mut self) -> (Cost, usize) {
        self.sample_with(prog_stats)
    }
}
