// SPDX-License-Identifier: MIT
//! Loop discovery (issue 42): the board's control loops found with no
//! configuration, from what /proc already holds. Every interval a
//! worker thread lists the user threads at SCHED_FIFO, SCHED_RR or
//! SCHED_DEADLINE (never kernel threads: PF_KTHREAD, which IRQ threads
//! are too) and the SCHED_OTHER threads of their processes, and reads
//! what each is blocked in (/proc/TID/syscall): an absolute timer sleep
//! (its expiry, read from the sleeper's memory), a timerfd read (its
//! it_interval from /proc/PID/fdinfo), a relative sleep, a yield, or
//! anything else. latmon_core::loops turns those into loops.
//!
//! Passive and cheap: no BPF, reads only; a sleeper is followed past its
//! next release (the worker sleeps to the expiry it read, then reads
//! the next one) so an absolute loop's step is seen exactly. Reading
//! /proc/TID/syscall takes the target's run-queue lock for an instant
//! (wait_task_inactive()); a running thread reads "running" and is not
//! waited for. Needs ptrace access to the threads (root, or latmon
//! before its privilege drop: the worker is started before it and keeps
//! the capabilities of the process, see docs/loops.md).

use std::fs;
use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use latmon_core::anatomy::Policy;
use latmon_core::loops::{Loop, LoopClass, Loops, Seen, Wait, LISTED, TRACKED};
use latmon_core::summary::IntervalReport;

/// PF_KTHREAD (include/linux/sched.h, unchanged since 2.6.27).
const PF_KTHREAD: u64 = 0x0020_0000;
/// A sleeper is followed to its next release only when that is this
/// close: a longer period is seen across scans.
const FOLLOW_WITHIN_NS: u64 = 50_000_000;
/// After the expiry: the time a loop takes to wake, run and sleep again
/// before its next expiry can be read; re-read every RETRY while it runs.
const FOLLOW_MARGIN_NS: u64 = 200_000;
const RETRY: Duration = Duration::from_micros(200);
const RETRIES: u32 = 10;
/// A known absolute loop is followed again every this many scans.
const FOLLOW_EVERY: u64 = 4;
/// Steps seen per followed sleeper and scan.
const FOLLOW_STEPS: usize = 2;
/// Processes looked at per scan: more are counted (`procs_skipped`).
const MAX_PROCS: usize = 4096;

/// The syscall numbers discovery tells apart (the target's own). The
/// casts are no-ops on 64-bit targets, widenings on 32-bit Arm (c_long).
#[allow(clippy::unnecessary_cast)]
mod nr {
    pub const READ: i64 = libc::SYS_read as i64;
    pub const NANOSLEEP: i64 = libc::SYS_nanosleep as i64;
    pub const CLOCK_NANOSLEEP: i64 = libc::SYS_clock_nanosleep as i64;
    pub const SCHED_YIELD: i64 = libc::SYS_sched_yield as i64;
    /// 32-bit Arm with a 64-bit time_t (musl, glibc 2.34+): the time64
    /// syscalls (arch/arm/tools/syscall.tbl 407).
    #[cfg(target_arch = "arm")]
    pub const CLOCK_NANOSLEEP_TIME64: i64 = 407;
    #[cfg(not(target_arch = "arm"))]
    pub const CLOCK_NANOSLEEP_TIME64: i64 = -2;
}

/// What the outputs take each interval.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub loops: Vec<Loop>,
    /// Candidates past [`LISTED`] (not in `loops`).
    pub unlisted: u32,
    /// Candidates past the threads discovery can follow.
    pub untracked: u32,
    /// The worker's CPU time in its last scan (CLOCK_THREAD_CPUTIME_ID).
    pub scan_cpu_ns: u64,
    /// Scans since start, the last one included.
    pub scans: u64,
    /// CLOCK_MONOTONIC when the last scan began.
    pub scan_at_ns: u64,
}

/// The discovery worker: scans every `interval` until dropped.
pub struct Discovery {
    shared: Arc<Mutex<Snapshot>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl Discovery {
    pub fn start(interval: Duration, mutate: bool) -> std::io::Result<Discovery> {
        let shared = Arc::new(Mutex::new(Snapshot::default()));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (out, halt) = (shared.clone(), stop.clone());
        std::thread::Builder::new().name("latmon-loops".into()).spawn(move || {
            let mut loops = Loops::new(mutate);
            let mut scans = 0u64;
            let mut pids = Pids::default();
            let mut next = Instant::now();
            while !halt.load(std::sync::atomic::Ordering::Relaxed) {
                let cpu0 = thread_cpu_ns();
                let scan_at_ns = crate::agent::monotonic_ns();
                let (seen, skipped) = scan_threads(&mut pids);
                loops.scan(seen);
                loops.untracked += skipped;
                let cpu1 = thread_cpu_ns();
                follow_sleepers(&mut loops, scans);
                log::debug!("loops: scan {} us, follow {} us", (cpu1 - cpu0) / 1000, (thread_cpu_ns() - cpu1) / 1000);
                scans += 1;
                let mut list = loops.list();
                let unlisted = list.len().saturating_sub(LISTED) as u32;
                list.truncate(LISTED);
                let snap = Snapshot {
                    loops: list,
                    unlisted,
                    untracked: loops.untracked,
                    scan_cpu_ns: thread_cpu_ns().saturating_sub(cpu0),
                    scans,
                    scan_at_ns,
                };
                // The old one is dropped after the lock is let go: the
                // tick's try_lock finds it held as briefly as can be.
                let old = out.lock().map(|mut s| std::mem::replace(&mut *s, snap));
                drop(old);
                next += interval;
                let now = Instant::now();
                if next > now {
                    std::thread::sleep(next - now);
                } else {
                    next = now;
                }
            }
        })?;
        Ok(Discovery { shared, stop })
    }

    /// The newest scan into the report, if it is newer than scan
    /// `*seen` (which it then becomes): copied in place (`clone_from`),
    /// so the interval's path allocates nothing once the names are
    /// known. Never waits: the worker (at the agent's nice,
    /// docs/agent.md "RT hygiene") may be preempted holding the lock for
    /// as long as the CPUs are busy, and the agent's tick must not wait
    /// for it; the report keeps the last scan's then.
    pub fn copy_newer(&self, seen: &mut u64, r: &mut IntervalReport) {
        let Ok(s) = self.shared.try_lock() else { return };
        if s.scans == *seen {
            return;
        }
        *seen = s.scans;
        r.loops.clone_from(&s.loops);
        r.loops_unlisted = s.unlisted + s.untracked;
        r.agent.discovery_cpu_ns = s.scan_cpu_ns;
        r.agent.discovery_scans = s.scans;
        r.agent.discovery_at_ns = s.scan_at_ns;
    }
}

impl Drop for Discovery {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

fn thread_cpu_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map_or(0, |t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
}

fn clock_ns(clock: libc::clockid_t) -> Option<u64> {
    nix::time::clock_gettime(nix::time::ClockId::from_raw(clock))
        .ok()
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
}

/// The fields of /proc/TID/stat discovery needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    pub comm: String,
    pub flags: u64,
    pub rt_priority: u32,
    pub policy: u32,
}

/// Parse /proc/TID/stat: the comm is between the first '(' and the
/// last ')' (a comm may hold either), then fields 3.. by spaces:
/// flags is field 9, rt_priority 40, policy 41 (proc(5)).
pub fn parse_stat(text: &str) -> Option<Stat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = text.get(close + 1..)?.split_ascii_whitespace().collect();
    let field = |n: usize| rest.get(n - 3).and_then(|s| s.parse::<u64>().ok());
    Some(Stat { comm, flags: field(9)?, rt_priority: field(40)? as u32, policy: field(41)? as u32 })
}

/// `voluntary_ctxt_switches` of /proc/TID/status.
pub fn parse_vcsw(status: &str) -> Option<u64> {
    status.lines().find_map(|l| l.strip_prefix("voluntary_ctxt_switches:")).and_then(|v| v.trim().parse().ok())
}

/// /proc/TID/syscall: "NR ARG1..ARG6 SP PC" in hex after the decimal
/// number, "-1 SP PC" outside a syscall, "running" on a CPU.
pub fn parse_syscall(text: &str) -> Option<(i64, [u64; 6])> {
    let mut it = text.split_ascii_whitespace();
    let nr: i64 = it.next()?.parse().ok()?;
    let mut args = [0u64; 6];
    if nr >= 0 {
        for a in &mut args {
            *a = u64::from_str_radix(it.next()?.trim_start_matches("0x"), 16).ok()?;
        }
    }
    Some((nr, args))
}

/// fdinfo's `it_interval: (SEC, NSEC)` (fs/timerfd.c timerfd_show());
/// None: not a timerfd.
pub fn parse_timerfd_interval(fdinfo: &str) -> Option<u64> {
    let l = fdinfo.lines().find_map(|l| l.strip_prefix("it_interval:"))?;
    let inner = l.trim().trim_start_matches('(').trim_end_matches(')');
    let (s, ns) = inner.split_once(',')?;
    Some(s.trim().parse::<u64>().ok()? * 1_000_000_000 + ns.trim().parse::<u64>().ok()?)
}

/// A /proc file of at most 4 KiB in one read() (read_to_string's size
/// probe and its read to EOF would double the syscalls: proc files are
/// generated whole at the first read).
fn read_small(path: &str, buf: &mut String) -> bool {
    buf.clear();
    let mut b = [0u8; 4096];
    let Ok(mut f) = fs::File::open(path) else { return false };
    match f.read(&mut b) {
        Ok(n) => match std::str::from_utf8(&b[..n]) {
            Ok(t) => {
                buf.push_str(t);
                true
            }
            // A comm is any bytes: keep what parses.
            Err(_) => {
                buf.push_str(&String::from_utf8_lossy(&b[..n]));
                true
            }
        },
        Err(_) => false,
    }
}

/// A timespec in another process's memory (process_vm_readv; needs
/// ptrace access). `wide`: 64-bit seconds.
fn read_timespec(pid: u32, addr: u64, wide: bool) -> Option<u64> {
    let mut b = [0u8; 16];
    let n = if wide { 16 } else { 8 };
    let local = libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: n };
    let remote = libc::iovec { iov_base: addr as usize as *mut libc::c_void, iov_len: n };
    // SAFETY: one local buffer of `n` bytes; the remote side is checked by
    // the kernel (EFAULT, EPERM).
    let got = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    if got != n as isize {
        return None;
    }
    let (s, ns) = if wide {
        (i64::from_ne_bytes(b[..8].try_into().ok()?), i64::from_ne_bytes(b[8..16].try_into().ok()?))
    } else {
        (i32::from_ne_bytes(b[..4].try_into().ok()?) as i64, i32::from_ne_bytes(b[4..8].try_into().ok()?) as i64)
    };
    (s >= 0 && (0..1_000_000_000).contains(&ns)).then(|| s as u64 * 1_000_000_000 + ns as u64)
}

/// SCHED_DEADLINE's period of `tid` (sched_getattr; 0: none).
fn dl_period(tid: u32) -> u64 {
    // struct sched_attr (include/uapi/linux/sched/types.h), VER0: 48 bytes.
    let mut attr = [0u64; 7];
    // SAFETY: a 56-byte buffer, its size passed; the kernel writes at most that.
    let r = unsafe { libc::syscall(libc::SYS_sched_getattr, tid as libc::pid_t, attr.as_mut_ptr(), 56u32, 0u32) };
    if r != 0 {
        return 0;
    }
    // size:u32 policy:u32 | flags | nice:i32 prio:u32 | runtime | deadline | period
    let (deadline, period) = (attr[4], attr[5]);
    if period != 0 {
        period
    } else {
        deadline
    }
}

/// What thread `tid` of `pid` is blocked in, and the clock of an
/// absolute sleep (for following it).
fn wait_of(pid: u32, tid: u32, buf: &mut String) -> (Wait, libc::clockid_t) {
    if !read_small(&format!("/proc/{pid}/task/{tid}/syscall"), buf) {
        return (Wait::Running, 0);
    }
    let Some((nr, a)) = parse_syscall(buf) else { return (Wait::Running, 0) };
    match nr {
        n if n == nr::CLOCK_NANOSLEEP || n == nr::CLOCK_NANOSLEEP_TIME64 => {
            if a[1] & libc::TIMER_ABSTIME as u64 == 0 {
                return (Wait::RelSleep, 0);
            }
            let wide = n == nr::CLOCK_NANOSLEEP_TIME64 || cfg!(target_pointer_width = "64");
            match read_timespec(pid, a[2], wide) {
                Some(e) => (Wait::AbsSleep { expiry_ns: e }, a[0] as libc::clockid_t),
                None => (Wait::Running, 0),
            }
        }
        n if n == nr::NANOSLEEP => (Wait::RelSleep, 0),
        n if n == nr::SCHED_YIELD => (Wait::Yield, 0),
        n if n == nr::READ => {
            let fd = a[0];
            if !read_small(&format!("/proc/{pid}/fdinfo/{fd}"), buf) {
                return (Wait::Other, 0);
            }
            match parse_timerfd_interval(buf) {
                Some(i) => (Wait::Timerfd { interval_ns: i }, 0),
                None => (Wait::Other, 0),
            }
        }
        n if n < 0 => (Wait::Running, 0),
        _ => (Wait::Other, 0),
    }
}

/// What discovery remembers of the processes between scans: which are
/// kernel threads, and each user process's threads with their policies.
/// A pid keeps its kind until it is reused: the kinds are thrown away
/// every PIDS_KEPT scans for that. Bounded by MAX_PROCS processes.
#[derive(Default)]
struct Pids {
    kernel: std::collections::HashSet<u32>,
    user: std::collections::HashMap<u32, Proc>,
    /// /proc/loadavg's last pid at the last scan.
    last_pid: Option<u32>,
    scans: u32,
}

/// A user process as the last scan that listed it saw it.
#[derive(Default)]
struct Proc {
    threads: Vec<(u32, Policy)>,
    /// An RT process's threads' names, read from their stat every
    /// RECHECK scans (a rename shows within them): tid -> comm.
    names: std::collections::HashMap<u32, String>,
    /// One of its threads is RT: its threads are listed every scan.
    rt: bool,
    /// The scan that found it in /proc.
    seen: u32,
}

const PIDS_KEPT: u32 = 16;
/// A process with no RT thread has its threads listed, and a known
/// non-RT thread is asked its policy, every this many scans (staggered
/// by id): a thread made RT after its start is found within them, a
/// new thread of an RT process at once.
const RECHECK: u32 = 4;

fn is_rt(p: Policy) -> bool {
    matches!(p, Policy::Fifo | Policy::Rr | Policy::Deadline)
}

/// sched_getscheduler(2): one syscall, no file (a thread's stat costs
/// some 8 us to generate; this well under one).
fn policy_of(tid: u32) -> Option<Policy> {
    // SAFETY: no pointers; an unknown tid returns -1 (ESRCH).
    let p = unsafe { libc::sched_getscheduler(tid as libc::pid_t) };
    // SCHED_RESET_ON_FORK may be or-ed in.
    (p >= 0).then(|| Policy::from_code(p as u32 & !0x4000_0000))
}

/// sched_getparam(2)'s priority (rt_priority; 0 outside FIFO and RR).
fn rt_priority(tid: u32) -> Option<u32> {
    // Zeroed, not a literal: musl's sched_param has more fields than
    // sched_priority (its SCHED_SPORADIC ones).
    // SAFETY: sched_param is plain integers; all-zero is a valid value.
    let mut sp: libc::sched_param = unsafe { std::mem::zeroed() };
    // SAFETY: a valid sched_param the kernel writes.
    let r = unsafe { libc::sched_getparam(tid as libc::pid_t, &mut sp) };
    (r == 0).then_some(sp.sched_priority.max(0) as u32)
}

/// One scan of /proc: the candidate threads, and how many more there
/// were past [`TRACKED`] (counted, not read). Only a process with an RT
/// thread has its threads' stat and waits read.
fn scan_threads(pids: &mut Pids) -> (Vec<Seen>, u32) {
    let mut out = Vec::new();
    let mut skipped = 0u32;
    pids.scans += 1;
    let scan = pids.scans;
    if scan % PIDS_KEPT == 0 {
        pids.kernel.clear();
        pids.user.clear();
    }
    let mut buf = String::with_capacity(1024);
    let mut status = String::with_capacity(2048);
    // No pid or tid allocated since the last scan (/proc/loadavg's last
    // field: the last id handed out; threads take ids from the same
    // space): no new process or thread, so the known processes are all
    // there is to look at, and /proc need not be listed.
    let last_pid = read_small("/proc/loadavg", &mut buf)
        .then(|| buf.rsplit(' ').next().and_then(|v| v.trim().parse::<u32>().ok()))
        .flatten();
    let listing: Vec<u32> = if last_pid.is_some() && last_pid == pids.last_pid && scan % PIDS_KEPT != 0 {
        pids.user.keys().copied().collect()
    } else {
        let Ok(procs) = fs::read_dir("/proc") else { return (out, 0) };
        let mut l: Vec<u32> = procs
            .flatten()
            .take(MAX_PROCS)
            .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
            .collect();
        // Kernel threads gone from /proc are forgotten: the set stays
        // within one listing's MAX_PROCS.
        l.sort_unstable();
        pids.kernel.retain(|p| l.binary_search(p).is_ok());
        l
    };
    pids.last_pid = last_pid;
    for pid in listing {
        if pids.kernel.contains(&pid) {
            continue;
        }
        // A new pid: its leader says whether it is a kernel thread
        // (PF_KTHREAD; IRQ threads are), skipped whole then.
        if !pids.user.contains_key(&pid) {
            if !read_small(&format!("/proc/{pid}/stat"), &mut buf) {
                continue;
            }
            match parse_stat(&buf) {
                Some(st) if st.flags & PF_KTHREAD == 0 => {}
                Some(_) => {
                    pids.kernel.insert(pid);
                    continue;
                }
                None => continue,
            }
        }
        let p = pids.user.entry(pid).or_default();
        let fresh = p.seen == 0;
        p.seen = scan;
        if !fresh && !p.rt && (pid + scan) % RECHECK != 0 {
            continue;
        }
        let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
            p.seen = 0; // gone: forgotten below
            continue;
        };
        let mut threads = Vec::with_capacity(p.threads.len());
        for tid in tasks.flatten().filter_map(|t| t.file_name().to_str().and_then(|s| s.parse::<u32>().ok())) {
            let known = p.threads.iter().find(|&&(t, _)| t == tid).map(|&(_, pol)| pol);
            let policy = match known {
                Some(pol) if !is_rt(pol) && (tid + scan) % RECHECK != 0 => Some(pol),
                _ => policy_of(tid),
            };
            if let Some(pol) = policy {
                threads.push((tid, pol));
            }
        }
        p.rt = threads.iter().any(|&(_, pol)| is_rt(pol));
        p.threads = threads;
        if !p.rt {
            continue;
        }
        p.names.retain(|tid, _| p.threads.iter().any(|&(t, _)| t == *tid));
        for &(tid, policy) in &p.threads {
            if !is_rt(policy) && policy != Policy::Other {
                continue; // BATCH, IDLE: no loop of a controller's
            }
            if out.len() >= TRACKED {
                skipped += 1;
                continue;
            }
            let (comm, prio) = match p.names.get(&tid) {
                Some(comm) if (tid + scan) % RECHECK != 0 => match rt_priority(tid) {
                    Some(prio) => (comm.clone(), prio),
                    None => continue, // gone meanwhile
                },
                _ => {
                    if !read_small(&format!("/proc/{pid}/task/{tid}/stat"), &mut buf) {
                        continue; // gone meanwhile
                    }
                    let Some(st) = parse_stat(&buf) else { continue };
                    p.names.insert(tid, st.comm.clone());
                    (st.comm, st.rt_priority)
                }
            };
            let time_ns = crate::agent::monotonic_ns();
            let (wait, _) = wait_of(pid, tid, &mut buf);
            let vcsw = (wait == Wait::RelSleep && read_small(&format!("/proc/{pid}/task/{tid}/status"), &mut status))
                .then(|| parse_vcsw(&status))
                .flatten();
            let dl_period_ns = if policy == Policy::Deadline { dl_period(tid) } else { 0 };
            out.push(Seen { tid, pid, comm, policy, prio, dl_period_ns, vcsw, time_ns, wait });
        }
    }
    // Processes gone from /proc are forgotten.
    pids.user.retain(|_, p| p.seen == scan);
    (out, skipped)
}

/// Follow every absolute sleeper whose expiry is near past its next
/// releases: each expiry read after the one before it passed.
fn follow_sleepers(loops: &mut Loops, scan: u64) {
    let mut buf = String::with_capacity(256);
    let list = loops.list();
    // A loop whose period is known is followed again every FOLLOW_EVERY
    // scans (staggered by tid): a change of period on the same grid
    // (1 ms -> 2 ms) is seen within them.
    let due = |l: &Loop| l.period_ns == 0 || (l.tid as u64 + scan) % FOLLOW_EVERY == 0;
    // A thread not yet known (a SCHED_OTHER sleeper of an RT process) is
    // followed too: with only one expiry per scan, a 1 ms loop's samples
    // one scan apart can all step by exactly 1 s, and their common step
    // read as a 1 s period until it was followed (the loops test's FLAKY,
    // zoo_other1ms at 1 s for an interval).
    let wanted = |l: &Loop| l.rt || l.periodic() || l.class == LoopClass::Unknown;
    for l in list.iter().filter(|l| wanted(l) && due(l)) {
        let mut seen: Vec<u64> = Vec::with_capacity(FOLLOW_STEPS + 1);
        let (w, clock) = wait_of(l.pid, l.tid, &mut buf);
        let Wait::AbsSleep { expiry_ns } = w else { continue };
        seen.push(expiry_ns);
        while seen.len() <= FOLLOW_STEPS {
            let last = *seen.last().unwrap_or(&0);
            let Some(now) = clock_ns(clock) else { break };
            if last > now + FOLLOW_WITHIN_NS {
                break;
            }
            std::thread::sleep(Duration::from_nanos(last.saturating_sub(now) + FOLLOW_MARGIN_NS));
            let mut next = None;
            for _ in 0..RETRIES {
                match wait_of(l.pid, l.tid, &mut buf).0 {
                    Wait::AbsSleep { expiry_ns } if expiry_ns > last => {
                        next = Some(expiry_ns);
                        break;
                    }
                    Wait::AbsSleep { .. } | Wait::Running => std::thread::sleep(RETRY),
                    _ => break,
                }
            }
            match next {
                Some(e) => seen.push(e),
                None => break,
            }
        }
        loops.followed(l.tid, &seen);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_come_after_the_last_parenthesis() {
        // A hostile comm with spaces and a ')' of its own.
        let s = "42 (a) b 1) S 1 42 42 0 -1 4194560 10 0 0 0 1 2 0 0 -51 0 3 0 100 1000 50 18446744073709551615 \
                 1 1 0 0 0 0 0 0 0 0 0 0 -1 1 50 1 0 0 0 0 0 0 0 0 0 0 0";
        let st = parse_stat(s).unwrap();
        assert_eq!(st.comm, "a) b 1");
        assert_eq!((st.flags, st.rt_priority, st.policy), (4194560, 50, 1));
        assert!(parse_stat("42 (x").is_none());
    }

    #[test]
    fn syscall_and_fdinfo_lines_parse_and_others_do_not() {
        assert_eq!(
            parse_syscall("230 0x1 0x1 0x7ffd10 0x0 0x0 0x0 0x7ffd00 0x7f00").unwrap(),
            (230, [1, 1, 0x7ffd10, 0, 0, 0])
        );
        assert_eq!(parse_syscall("-1 0x7ffd00 0x7f00").unwrap().0, -1);
        assert!(parse_syscall("running").is_none());
        let fdinfo = "pos:\t0\nflags:\t02\nmnt_id:\t15\nino:\t1057\nclockid: 1\nticks: 3\nsettime flags: 01\n\
                      it_value: (0, 1234)\nit_interval: (0, 2000000)\n";
        assert_eq!(parse_timerfd_interval(fdinfo), Some(2_000_000));
        assert_eq!(parse_timerfd_interval("pos:\t0\nflags:\t0\n"), None);
        assert_eq!(
            parse_vcsw("Name:\tx\nvoluntary_ctxt_switches:\t1234\nnonvoluntary_ctxt_switches:\t5\n"),
            Some(1234)
        );
    }

    /// This test's own thread, in a 1.5 ms absolute sleep loop, read as
    /// an absolute sleeper whose every expiry is one it programmed (its
    /// own log, exact); sampled until three are seen, bounded by the
    /// sleeper's cycles, not by time.
    #[test]
    fn a_live_absolute_sleeper_reads_as_one() {
        use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
        use std::sync::Mutex;
        const CYCLES: usize = 20_000;
        let stop = Arc::new(AtomicBool::new(false));
        let tid = Arc::new(AtomicU32::new(0));
        let programmed = Arc::new(Mutex::new(Vec::with_capacity(CYCLES)));
        let (s2, t2, p2) = (stop.clone(), tid.clone(), programmed.clone());
        let h = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            t2.store(unsafe { libc::gettid() } as u32, Ordering::SeqCst);
            let mut next = clock_ns(libc::CLOCK_MONOTONIC).unwrap();
            for _ in 0..CYCLES {
                if s2.load(Ordering::SeqCst) {
                    break;
                }
                next += 1_500_000;
                p2.lock().unwrap().push(next);
                let ts = libc::timespec { tv_sec: (next / 1_000_000_000) as _, tv_nsec: (next % 1_000_000_000) as _ };
                // SAFETY: a valid timespec; no remainder for an absolute sleep.
                unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
            }
        });
        while tid.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        let mut buf = String::new();
        let mut exp: Vec<u64> = Vec::new();
        while exp.len() < 3 && !h.is_finished() {
            if let (Wait::AbsSleep { expiry_ns }, clock) =
                wait_of(std::process::id(), tid.load(Ordering::SeqCst), &mut buf)
            {
                assert_eq!(clock, libc::CLOCK_MONOTONIC);
                if exp.last() != Some(&expiry_ns) {
                    exp.push(expiry_ns);
                }
            }
            std::thread::sleep(Duration::from_micros(700));
        }
        stop.store(true, Ordering::SeqCst);
        h.join().unwrap();
        let programmed = programmed.lock().unwrap();
        assert!(exp.len() >= 3, "3 expiries not read in the sleeper's {} cycles: {exp:?}", programmed.len());
        for e in &exp {
            assert!(programmed.contains(e), "{e} is no expiry the sleeper programmed");
        }
    }
}
