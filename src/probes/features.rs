// SPDX-License-Identifier: MIT
//! What this kernel really allows, found by loading and attaching one empty
//! program per kind (bpf/features.bpf.c). Used by `latmon check`.

use std::mem::MaybeUninit;

use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{MapHandle, MapType, OpenObject};
use serde::Serialize;

use super::{clear_libbpf_warning, libbpf_error, Owned};
use crate::bpf::features::{FeaturesSkel, FeaturesSkelBuilder};

/// Attach kinds `latmon check` reports, in ladder order within families.
pub const KINDS: &[&str] = &["tracepoint", "tp_btf", "raw_tp", "kprobe", "fentry", "uprobe", "ringbuf"];

#[derive(Debug, Clone, Serialize)]
pub struct KindStatus {
    pub kind: &'static str,
    pub ok: bool,
    /// Why not, when `ok` is false.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub error: String,
}

/// Probe every kind in `KINDS`.
pub fn detect() -> Vec<KindStatus> {
    KINDS
        .iter()
        .map(|&kind| {
            clear_libbpf_warning();
            let r = if kind == "ringbuf" { try_ringbuf() } else { try_prog(kind) };
            KindStatus { kind, ok: r.is_ok(), error: r.err().unwrap_or_default() }
        })
        .collect()
}

/// The uprobe feature probe attaches here, in latmon's own text.
#[inline(never)]
#[no_mangle]
pub extern "C" fn latmon_uprobe_target() -> u64 {
    std::hint::black_box(1)
}

fn try_prog(kind: &str) -> Result<(), String> {
    let want = format!("feat_{kind}");
    let skel = Owned::new(|storage: &'static mut MaybeUninit<OpenObject>| -> Result<FeaturesSkel<'static>, String> {
        let mut open = FeaturesSkelBuilder::default()
            .open_opts(super::open_opts(), storage)
            .map_err(|e| libbpf_error("open", &e))?;
        for mut prog in open.open_object_mut().progs_mut() {
            let on = prog.name().to_string_lossy() == want;
            prog.set_autoload(on);
        }
        open.load().map_err(|e| libbpf_error("load", &e))
    })?;
    let prog = skel
        .object()
        .progs_mut()
        .find(|p| p.name().to_string_lossy() == want)
        .ok_or_else(|| format!("no program {want}"))?;
    let _link = if kind == "uprobe" {
        let offset = own_file_offset(latmon_uprobe_target as *const () as usize)
            .ok_or("cannot locate latmon's own text in /proc/self/maps")?;
        prog.attach_uprobe(false, std::process::id() as i32, "/proc/self/exe", offset)
    } else {
        prog.attach()
    }
    .map_err(|e| libbpf_error("attach", &e))?;
    Ok(())
}

/// Whether this kernel has BPF ring buffers (creates and drops one).
pub(crate) fn try_ringbuf() -> Result<(), String> {
    let mut opts = super::zeroed_opts::<libbpf_rs::libbpf_sys::bpf_map_create_opts>();
    opts.sz = size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _;
    MapHandle::create(MapType::RingBuf, Some("latmon_feat"), 0, 0, 4096, &opts)
        .map(drop)
        .map_err(|e| format!("create: {e}"))
}

/// File offset of a code address of this process (what uprobes take),
/// from /proc/self/maps: addr - mapping start + mapping file offset.
pub fn own_file_offset(addr: usize) -> Option<usize> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (range, _perms, off) = (f.next()?, f.next()?, f.next()?);
        let (lo, hi) = range.split_once('-')?;
        let (lo, hi) = (usize::from_str_radix(lo, 16).ok()?, usize::from_str_radix(hi, 16).ok()?);
        if (lo..hi).contains(&addr) {
            return Some(addr - lo + usize::from_str_radix(off, 16).ok()?);
        }
    }
    None
}
