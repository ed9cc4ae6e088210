//! lock -> cycle: the one map the lock and cycle objects share
//! (bpf/lock_cycle.bpf.h). The lock probe keeps each thread's longest
//! futex wait with an owner there; the cycle probe clears a loop's entry
//! at each release and copies it into a miss record, whose futex part
//! then names the owner and the inversion. Created on first use and kept
//! for the process: whichever probe loads second must find the same map.

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use libbpf_rs::libbpf_sys;
use libbpf_rs::{MapHandle, OpenMapMut};

use latmon_core::anatomy::{Cause, CauseKind, LockOwner, OwnerFrom, Policy, Preempter};

use super::{libbpf_error, LoadError};
use crate::bpf::limits::{ANAT_POLICY_UNSET, LOCK_OWNER_GLIBC, LOCK_OWNER_NONE, LOCK_OWNER_PI};
use crate::bpf::shared::types::{latmon_lock_record, latmon_lock_task};

static MAP: Mutex<Option<MapHandle>> = Mutex::new(None);
/// A lock probe loaded in this process (a cycle probe opened later by a
/// reload joins it; one opened before it does not: docs/probes.md).
static LOCK_LOADED: AtomicBool = AtomicBool::new(false);
/// The same for a cycle probe: a lock probe hands its waits over only
/// when one runs (no map work at each futex wait otherwise).
static CYCLE_LOADED: AtomicBool = AtomicBool::new(false);

pub(super) fn cycle_loaded() -> bool {
    CYCLE_LOADED.load(Ordering::Relaxed)
}

/// The cycle probe's object is loaded with the shared map.
pub(super) fn cycle_is_loaded() {
    CYCLE_LOADED.store(true, Ordering::Relaxed);
}

pub(super) fn lock_loaded() -> bool {
    LOCK_LOADED.load(Ordering::Relaxed)
}

/// The lock probe's object is loaded with the shared map.
pub(super) fn lock_is_loaded() {
    LOCK_LOADED.store(true, Ordering::Relaxed);
}

/// Give the object's `lock_cycle` map the shared one, before load.
pub(super) fn share(map: &mut OpenMapMut<'_>) -> Result<(), LoadError> {
    let mut shared = MAP.lock().unwrap_or_else(PoisonError::into_inner);
    if shared.is_none() {
        let mut opts = super::common::zeroed_opts::<libbpf_sys::bpf_map_create_opts>();
        opts.sz = size_of::<libbpf_sys::bpf_map_create_opts>() as _;
        // The object's own definition gives type and sizes: one truth.
        let handle = MapHandle::create(
            map.map_type(),
            Some("lock_cycle"),
            map.key_size(),
            map.value_size(),
            map.max_entries(),
            &opts,
        )
        .map_err(|e| libbpf_error("create the lock_cycle map", &e))?;
        *shared = Some(handle);
    }
    if let Some(handle) = shared.as_ref() {
        map.reuse_fd(handle.as_fd()).map_err(|e| libbpf_error("share the lock_cycle map", &e))?;
    }
    Ok(())
}

/// Who a wait waited for (struct latmon_lock_record), and the inversion
/// that held the owner off: its preempters' time while their priority
/// lay between the owner's and the waiter's.
pub(crate) struct WaitOwner {
    pub owner: LockOwner,
    pub inverted: Vec<Preempter>,
    /// The inverted preempters' time, the folded rest's included.
    pub inversion_ns: u64,
}

impl WaitOwner {
    /// None: the wait has no owner (no followed owner, no waker).
    pub(crate) fn of(l: &latmon_lock_record) -> Option<WaitOwner> {
        let from = match l.owner_from as usize {
            LOCK_OWNER_NONE => return None,
            LOCK_OWNER_PI => OwnerFrom::Pi,
            LOCK_OWNER_GLIBC => OwnerFrom::Glibc,
            _ => OwnerFrom::Waker,
        };
        let (mut policy, mut prio) = (Policy::from_code(l.owner_policy), l.owner_prio);
        if l.owner_policy as usize == ANAT_POLICY_UNSET {
            // The waker: its policy now (the kernel did not follow it).
            (policy, prio) = super::alerts::thread_sched(l.owner_tid).unwrap_or((Policy::Unknown(0), 0));
        }
        let owner =
            LockOwner { comm: comm_text(&l.owner_comm), pid: l.owner_tgid, tid: l.owner_tid, policy, prio, from };
        let inverted: Vec<Preempter> = l.pre.iter().filter(|p| p.inv_ns > 0).map(|p| preempter(p, p.inv_ns)).collect();
        let inversion_ns = inverted.iter().map(|p| p.ns).sum::<u64>() + l.rest_inv_ns;
        Some(WaitOwner { owner, inverted, inversion_ns })
    }

    /// The inversion as one cause of `inversion_ns`.
    pub(crate) fn inversion(&self) -> Cause {
        Cause {
            kind: CauseKind::Inversion { owner: self.owner.clone(), preempted_by: self.inverted.clone() },
            ns: self.inversion_ns,
        }
    }
}

pub(super) fn comm_text(comm: &[i8]) -> String {
    let bytes: Vec<u8> = comm.iter().map(|&c| c as u8).take_while(|&c| c != 0).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

pub(super) fn preempter(t: &latmon_lock_task, ns: u64) -> Preempter {
    Preempter { comm: comm_text(&t.comm), pid: t.pid, policy: Policy::from_code(t.policy), prio: t.prio, ns }
}
