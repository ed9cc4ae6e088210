// SPDX-License-Identifier: MIT
//! What latmon reads from /proc and how it parses it (a leaf: it imports
//! nothing of this crate). The parsers are pure; the readers return
//! nothing rather than an error, as the names they give are labels only.

use std::collections::HashMap;

/// IRQ number -> action names from /proc/interrupts; empty if unreadable.
pub fn interrupt_names() -> HashMap<u32, String> {
    std::fs::read_to_string("/proc/interrupts").map(|t| parse_interrupts(&t)).unwrap_or_default()
}

/// IRQ number -> action names, from the text of /proc/interrupts. Per line:
/// `N:`, one count per CPU, the chip, the hardware IRQ and trigger
/// (`5-edge` on x86, `27 Level` on a GIC), then the action names.
pub fn parse_interrupts(text: &str) -> HashMap<u32, String> {
    let mut lines = text.lines();
    let ncpus = lines.next().map_or(0, |h| h.split_whitespace().count());
    let mut names = HashMap::new();
    for line in lines {
        let Some((irq, rest)) = line.split_once(':') else { continue };
        let Ok(irq) = irq.trim().parse::<u32>() else { continue };
        // Past the per-CPU counts and the chip, the hardware IRQ: `5-edge`,
        // or `27` followed by `Level`/`Edge`.
        let mut fields = rest.split_whitespace().skip(ncpus).skip(1).peekable();
        if let Some(hw) = fields.peek() {
            let digits = hw.split('-').next().unwrap_or("");
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                let joined = hw.contains('-');
                fields.next();
                if !joined && fields.peek().is_some_and(|t| matches!(*t, "Level" | "Edge")) {
                    fields.next();
                }
            }
        }
        let name = fields.collect::<Vec<_>>().join(" ");
        if !name.is_empty() {
            names.insert(irq, name);
        }
    }
    names
}

/// A thread /proc shows: its process, its own id and its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadName {
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    /// Its process holds a timerfd: `Some(true)`; `None`: its open files
    /// are not readable here (another user's process after latmon's
    /// privilege drop: /proc/PID/fd needs ptrace access).
    pub timerfd: Option<bool>,
}

/// The threads named `comm` (or the thread `tid`) whose process holds a
/// timerfd open, or may (its open files unreadable): what a `cycle` probe
/// without `timerfd=true` cannot follow. Bounded: at most `max` threads,
/// and /proc's processes as they are listed (a thread that comes or goes
/// meanwhile is missed or skipped, which a hint may be).
pub fn timerfd_threads(comm: Option<&str>, tid: Option<u32>, max: usize) -> Vec<ThreadName> {
    let mut out = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else { return out };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(tasks) = std::fs::read_dir(p.path().join("task")) else { continue };
        let named: Vec<ThreadName> = tasks
            .flatten()
            .filter_map(|t| {
                let tid_here = t.file_name().to_str()?.parse::<u32>().ok()?;
                let name = std::fs::read_to_string(t.path().join("comm")).ok()?;
                let name = name.strip_suffix('\n').unwrap_or(&name);
                thread_wanted(name, tid_here, comm, tid).then(|| ThreadName {
                    pid,
                    tid: tid_here,
                    comm: name.into(),
                    timerfd: None,
                })
            })
            .collect();
        if named.is_empty() {
            continue;
        }
        let timerfd = holds_timerfd(&p.path());
        if timerfd == Some(false) {
            continue;
        }
        out.extend(named.into_iter().take(max - out.len()).map(|t| ThreadName { timerfd, ..t }));
        if out.len() == max {
            break;
        }
    }
    out
}

/// A probe's thread filter, as the BPF side applies it: the thread id
/// when `pid=` is given, else the name (the kernel's comm, at most 15
/// bytes; config.rs refuses longer).
pub fn thread_wanted(name: &str, tid: u32, comm: Option<&str>, want_tid: Option<u32>) -> bool {
    match (want_tid, comm) {
        (Some(want), _) => tid == want,
        (None, Some(c)) => name == c,
        (None, None) => false,
    }
}

/// Whether the process at `proc_dir` (/proc/PID) has a timerfd among its
/// open files: the kernel names one's link `anon_inode:[timerfd]`
/// (fs/timerfd.c, anon_inode_getfd("[timerfd]", ...)). None: its fd
/// directory is not readable here.
fn holds_timerfd(proc_dir: &std::path::Path) -> Option<bool> {
    let fds = std::fs::read_dir(proc_dir.join("fd")).ok()?;
    Some(fds.flatten().any(|f| std::fs::read_link(f.path()).is_ok_and(|l| is_timerfd_link(&l.to_string_lossy()))))
}

/// An fd link target that is a timerfd.
pub fn is_timerfd_link(target: &str) -> bool {
    target == "anon_inode:[timerfd]"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interrupt_names_on_x86_and_gic_layouts() {
        let x86 = "           CPU0       CPU1       \n \
 24:          1          0  IO-APIC   5-edge      ACPI:Ged\n \
 36:          0     110320 PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0\n \
 40:          3          0 PCI-MSIX-0000:00:04.0   0-edge      eth0, eth0-tx\n\
NMI:          0          0   Non-maskable interrupts\n\
ERR:          0\n";
        let n = parse_interrupts(x86);
        assert_eq!(n.get(&24).map(String::as_str), Some("ACPI:Ged"));
        assert_eq!(n.get(&36).map(String::as_str), Some("virtio1-req.0"));
        assert_eq!(n.get(&40).map(String::as_str), Some("eth0, eth0-tx"));
        assert_eq!(n.len(), 3, "named rows (NMI, ERR) are not IRQ numbers");

        let gic = "           CPU0       CPU1       CPU2       CPU3       \n \
 11:     123456     234567     345678     456789     GICv3  27 Level     arch_timer\n \
 47:          0          0          0          0     GICv3  79 Edge      virtio0\n \
 70:          1          0          0          0  ITS-MSI 16384 Edge      nvme0q0\n";
        let n = parse_interrupts(gic);
        assert_eq!(n.get(&11).map(String::as_str), Some("arch_timer"));
        assert_eq!(n.get(&47).map(String::as_str), Some("virtio0"));
        assert_eq!(n.get(&70).map(String::as_str), Some("nvme0q0"));
    }

    #[test]
    fn threads_are_wanted_by_id_or_name_and_timerfds_by_their_link() {
        assert!(thread_wanted("ctrl", 7, Some("ctrl"), None));
        assert!(!thread_wanted("ctrl2", 7, Some("ctrl"), None));
        assert!(thread_wanted("other", 7, Some("ctrl"), Some(7)), "pid= is the thread id and wins");
        assert!(!thread_wanted("ctrl", 8, Some("ctrl"), Some(7)));
        assert!(!thread_wanted("ctrl", 7, None, None));
        assert!(is_timerfd_link("anon_inode:[timerfd]"));
        assert!(!is_timerfd_link("anon_inode:[eventfd]"));
        assert!(!is_timerfd_link("/tmp/anon_inode:[timerfd]"));
    }

    #[test]
    fn a_process_holding_a_timerfd_is_found_by_its_name() {
        // This test's own thread, with a timerfd of its own open (no other
        // unit test of this crate opens one).
        // SAFETY: plain syscalls on an fd this test owns.
        let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_CLOEXEC) };
        assert!(fd >= 0, "timerfd_create");
        let tid = std::process::id();
        let name = std::fs::read_to_string("/proc/thread-self/comm").unwrap();
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::gettid() } as u32;
        let found = timerfd_threads(None, Some(me), 4);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            (found[0].pid, found[0].tid, found[0].comm.as_str(), found[0].timerfd),
            (tid, me, name.trim_end(), Some(true))
        );
        // SAFETY: fd is this test's and not used after.
        unsafe { libc::close(fd) };
        assert!(timerfd_threads(None, Some(me), 4).is_empty(), "closed: no timerfd held");
    }
}
