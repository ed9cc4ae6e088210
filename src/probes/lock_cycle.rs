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

use super::{libbpf_error, LoadError};

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
