// SPDX-License-Identifier: MIT
//! What this kernel really allows, found by loading and attaching one empty
//! program per kind (bpf/features.bpf.c). Used by `latmon check`.

use std::mem::MaybeUninit;

use latmon_core::ident::Mechanism;
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{MapHandle, MapType, OpenObject};
use serde::Serialize;

use super::common::LoadError;
use super::common::{clear_libbpf_warning, libbpf_error, Owned};
use crate::bpf::features::{FeaturesSkel, FeaturesSkelBuilder};

/// What `latmon check` tries: an attach mechanism, or BPF ring buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    Attach(Mechanism),
    Ringbuf,
}

impl Feature {
    /// Its word in `latmon check` (text and JSON `kind`).
    pub fn as_str(self) -> &'static str {
        match self {
            Feature::Attach(m) => m.as_str(),
            Feature::Ringbuf => "ringbuf",
        }
    }
}

impl std::fmt::Display for Feature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl Serialize for Feature {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Attach kinds `latmon check` reports, in ladder order within families.
pub const KINDS: [Feature; 7] = {
    use Mechanism::*;
    [
        Feature::Attach(Tracepoint),
        Feature::Attach(TpBtf),
        Feature::Attach(RawTp),
        Feature::Attach(Kprobe),
        Feature::Attach(Fentry),
        Feature::Attach(Uprobe),
        Feature::Ringbuf,
    ]
};

#[derive(Debug, Clone, Serialize)]
pub struct KindStatus {
    pub kind: Feature,
    pub ok: bool,
    /// Why not, when `ok` is false.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub error: String,
}

/// Probe every kind in `KINDS`.
pub fn detect() -> Vec<KindStatus> {
    KINDS
        .into_iter()
        .map(|kind| {
            clear_libbpf_warning();
            let r = match kind {
                Feature::Ringbuf => try_ringbuf(),
                Feature::Attach(m) => try_prog(m),
            };
            KindStatus { kind, ok: r.is_ok(), error: r.err().map(|e| e.to_string()).unwrap_or_default() }
        })
        .collect()
}

/// The uprobe feature probe attaches here, in latmon's own text.
#[inline(never)]
#[no_mangle]
pub extern "C" fn latmon_uprobe_target() -> u64 {
    std::hint::black_box(1)
}

/// Load and attach bpf/features.bpf.c's `feat_MECHANISM` program.
fn try_prog(kind: Mechanism) -> Result<(), LoadError> {
    let want = format!("feat_{kind}");
    let skel =
        Owned::new(|storage: &'static mut MaybeUninit<OpenObject>| -> Result<FeaturesSkel<'static>, LoadError> {
            let mut open = FeaturesSkelBuilder::default()
                .open_opts(super::common::open_opts(), storage)
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
        .ok_or_else(|| LoadError::Object(format!("no program {want}")))?;
    let _link = if kind == Mechanism::Uprobe {
        let offset = own_file_offset(latmon_uprobe_target as *const () as usize)
            .ok_or_else(|| LoadError::Object("cannot locate latmon's own text in /proc/self/maps".into()))?;
        prog.attach_uprobe(false, std::process::id() as i32, "/proc/self/exe", offset)
    } else {
        prog.attach()
    }
    .map_err(|e| libbpf_error("attach", &e))?;
    Ok(())
}

/// Whether BPF programs may read another CPU's per-CPU map value
/// (bpf_map_lookup_percpu_elem, kernel 5.19): outlier anatomy needs it
/// (bpf/anatomy.bpf.h). Probed once, by libbpf loading a tiny program.
pub(crate) fn percpu_lookup() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        use libbpf_rs::libbpf_sys as sys;
        // SAFETY: plain libbpf call; NULL opts are allowed.
        let rc = unsafe {
            sys::libbpf_probe_bpf_helper(
                sys::BPF_PROG_TYPE_TRACEPOINT,
                sys::BPF_FUNC_map_lookup_percpu_elem,
                std::ptr::null(),
            )
        };
        rc > 0
    })
}

/// Whether this kernel has BPF ring buffers (creates and drops one).
pub(crate) fn try_ringbuf() -> Result<(), LoadError> {
    let mut opts = super::common::zeroed_opts::<libbpf_rs::libbpf_sys::bpf_map_create_opts>();
    opts.sz = size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _;
    MapHandle::create(MapType::RingBuf, Some("latmon_feat"), 0, 0, 4096, &opts)
        .map(drop)
        .map_err(|e| LoadError::Refused(format!("create: {e}")))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_lines_up_the_kinds() {
        // print_text writes `{:<11}`: the words must pad as strings do.
        assert_eq!(format!("{:<11}|", Feature::Attach(Mechanism::TpBtf)), "tp_btf     |");
        assert_eq!(format!("{:<11}|", Feature::Ringbuf), "ringbuf    |");
    }
}
