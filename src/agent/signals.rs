// SPDX-License-Identifier: MIT
//! Signals: SIGINT/SIGTERM stop, SIGHUP reloads; all collected by the agent
//! thread with sigtimedwait, whichever thread the kernel picks.

use std::time::Instant;

use crate::error::{Context, Result};
use nix::sys::signal::{SigSet, Signal};

/// The thread that collects the signals (the one that blocked them first).
static AGENT_TID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Runs only in a thread that had the signals unblocked for a moment: the
/// serialport crate waits with `ppoll(.., empty mask)`, unblocking every
/// signal in the serial and Modbus RTU threads while they wait. Without a
/// handler a SIGINT, SIGTERM or SIGHUP landing there killed latmon (no final
/// summary; a reload became a crash). Hand it to the agent thread instead,
/// where it is blocked and collected by sigtimedwait.
extern "C" fn forward_to_agent(sig: libc::c_int) {
    // SAFETY: getpid/tgkill are async-signal-safe syscalls; errno is
    // saved and restored around them.
    unsafe {
        let errno = *libc::__errno_location();
        libc::syscall(libc::SYS_tgkill, libc::getpid(), AGENT_TID.load(std::sync::atomic::Ordering::Relaxed), sig);
        *libc::__errno_location() = errno;
    }
}

/// Block SIGINT, SIGTERM and SIGHUP in this thread (call before any thread
/// is spawned, so all inherit it); the agent collects them synchronously
/// with sigtimedwait. A thread that unblocks them anyway (see
/// `forward_to_agent`) forwards them here. Idempotent.
pub fn block_signals() -> Result<SigSet> {
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGHUP);
    set.thread_block().context("blocking SIGINT/SIGTERM/SIGHUP")?;
    let _ = AGENT_TID.compare_exchange(
        0,
        nix::unistd::gettid().as_raw(),
        std::sync::atomic::Ordering::Relaxed,
        std::sync::atomic::Ordering::Relaxed,
    );
    let forward = nix::sys::signal::SigAction::new(
        nix::sys::signal::SigHandler::Handler(forward_to_agent),
        nix::sys::signal::SaFlags::SA_RESTART,
        SigSet::all(),
    );
    for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        // SAFETY: the handler only makes async-signal-safe syscalls.
        unsafe { nix::sys::signal::sigaction(sig, &forward) }.context("installing the signal forwarder")?;
    }
    Ok(set)
}

/// Sleep until `deadline` or a signal of `set`; the signal, if one came.
pub(super) fn wait_signal(set: &SigSet, deadline: Instant) -> Option<i32> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        let ts = libc::timespec { tv_sec: left.as_secs() as _, tv_nsec: left.subsec_nanos() as _ };
        // SAFETY: set and ts are valid for the call; info may be null.
        let sig = unsafe { libc::sigtimedwait(set.as_ref(), std::ptr::null_mut(), &ts) };
        if sig > 0 {
            return Some(sig);
        }
        // EAGAIN: timeout; EINTR: another signal; both re-check the deadline.
    }
}
