// SPDX-License-Identifier: MIT
//! The gate maps of loaded probes (bpf/gate.bpf.h): found from each
//! program's map ids, whatever its family's skeleton type, and written to
//! open or close every program's body at once. An I/O edge (bpf syscalls).

use std::collections::HashSet;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use libbpf_rs::libbpf_sys;

/// The map libbpf makes of bpf/gate.bpf.h's section, in every object.
const GATE_MAP: &str = ".data.gate";

/// Every gate map of a probe set, each once.
#[derive(Debug, Default)]
pub struct Gates {
    maps: Vec<OwnedFd>,
}

fn map_ids(prog: RawFd) -> io::Result<Vec<u32>> {
    // SAFETY: all-zero is valid for this C struct; the first call asks
    // only for the counts (no array pointers set).
    let mut info: libbpf_sys::bpf_prog_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
    // SAFETY: info/len are valid for the call.
    let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(prog, &mut info, &mut len) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(-rc));
    }
    let mut ids = vec![0u32; info.nr_map_ids as usize];
    // SAFETY: as above; map_ids points at nr_map_ids u32s that live
    // through the call.
    let mut info2: libbpf_sys::bpf_prog_info = unsafe { std::mem::zeroed() };
    info2.nr_map_ids = ids.len() as u32;
    info2.map_ids = ids.as_mut_ptr() as u64;
    let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
    // SAFETY: see above.
    let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(prog, &mut info2, &mut len) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(-rc));
    }
    ids.truncate(info2.nr_map_ids as usize);
    Ok(ids)
}

/// The map with id `id`, if it is a gate.
fn gate_by_id(id: u32) -> io::Result<Option<OwnedFd>> {
    // SAFETY: plain syscall wrapper; a non-negative result is a new fd.
    let fd = unsafe { libbpf_sys::bpf_map_get_fd_by_id(id) };
    if fd < 0 {
        return Err(io::Error::from_raw_os_error(-fd));
    }
    // SAFETY: fd is new and ours.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: all-zero is valid for this C struct of integers and arrays.
    let mut info: libbpf_sys::bpf_map_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libbpf_sys::bpf_map_info>() as u32;
    // SAFETY: info/len are valid for the call.
    let rc = unsafe { libbpf_sys::bpf_map_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(-rc));
    }
    let name: Vec<u8> = info.name.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    Ok((name == GATE_MAP.as_bytes() && info.value_size == 4).then_some(fd))
}

impl Gates {
    /// The gates of every program in `progs` (the probes' program fds);
    /// an error names a probe whose programs have none.
    pub fn find(progs: &[(String, Vec<RawFd>)]) -> Result<Gates, String> {
        let mut seen = HashSet::new();
        let mut maps = Vec::new();
        for (probe, fds) in progs {
            let mut found = false;
            for &prog in fds {
                let ids = map_ids(prog).map_err(|e| format!("{probe}: its program's maps: {e}"))?;
                for id in ids {
                    if seen.contains(&id) {
                        found = true;
                        continue;
                    }
                    if let Some(fd) = gate_by_id(id).map_err(|e| format!("{probe}: map {id}: {e}"))? {
                        seen.insert(id);
                        maps.push(fd);
                        found = true;
                    }
                }
            }
            if !found {
                return Err(format!("{probe}: no {GATE_MAP} map among its programs' maps (no gate to close)"));
            }
        }
        Ok(Gates { maps })
    }

    /// Open (the programs run) or close (they return at the gate).
    pub fn set(&self, open: bool) -> io::Result<()> {
        let key = 0u32;
        let value = u32::from(open);
        for m in &self.maps {
            // SAFETY: key and value are 4-byte values valid for the call;
            // the map's key and value sizes are 4 (checked in gate_by_id).
            let rc = unsafe {
                libbpf_sys::bpf_map_update_elem(
                    m.as_raw_fd(),
                    (&key as *const u32).cast(),
                    (&value as *const u32).cast(),
                    libbpf_sys::BPF_ANY.into(),
                )
            };
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(-rc));
            }
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.maps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.maps.is_empty()
    }
}
