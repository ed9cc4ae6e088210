// SPDX-License-Identifier: MIT
//! latmon's build script's work past clang and libbpf-cargo: each BPF
//! object and skeleton is post-processed here, so that build.rs only
//! lists sources and calls the builder (as the libbpf-rs examples' do).
//!
//! - [`finish_object`]: clang's branch labels and the BTF line info out of
//!   the object (neither is used to load it; together ~30 % of it);
//! - [`Pack`]: the skeletons take their objects from one LZMA stream of
//!   them all, which [`lzma`] decodes (the one part the binary links:
//!   latmon calls it at an object's first use);
//! - [`share_types`]: every family's skeleton re-exports the structs of
//!   bpf/latmon.h from the types-only `shared` skeleton;
//! - [`elf::core_relo_bytes`]: what must be 0 in a no-BTF object.
//!
//! The file steps panic with a message naming the file (what a build
//! script does with an error); the edits under them are pure functions on
//! bytes and text, tested on small inputs.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

pub mod elf;
mod error;
pub mod lzma;
pub mod skel;

pub use error::Error;

/// The line that opts a BPF source into the no-BTF build.
pub const NO_BTF_MARKER: &str = "/* LATMON_NO_BTF_VARIANT";

/// Does the BPF source `text` ask for a no-BTF build ([`NO_BTF_MARKER`])?
pub fn wants_no_btf_build(text: &str) -> bool {
    text.lines().any(|l| l.trim_start().starts_with(NO_BTF_MARKER))
}

/// The `*.bpf.c` of `bpf_dir`, sorted. Cargo is told to run the build
/// again when one of them, a header there, `vmlinux` or the directory
/// (a new file) changes.
pub fn bpf_sources(bpf_dir: &Path, vmlinux: &Path) -> Vec<PathBuf> {
    let mut headers = vec![vmlinux.to_path_buf()];
    let mut sources = Vec::new();
    for entry in fs::read_dir(bpf_dir).unwrap_or_else(|e| panic!("latmon: read {}: {e}", bpf_dir.display())) {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.ends_with(".bpf.c") {
            sources.push(path);
        } else if name.ends_with(".h") {
            headers.push(path);
        }
    }
    sources.sort();
    for p in sources.iter().chain(&headers) {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    println!("cargo:rerun-if-changed={}", bpf_dir.display());
    sources
}

fn read(path: &Path) -> Vec<u8> {
    fs::read(path).unwrap_or_else(|e| panic!("latmon: read {}: {e}", path.display()))
}

fn read_text(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("latmon: read {}: {e}", path.display()))
}

fn write(path: &Path, data: impl AsRef<[u8]>) {
    fs::write(path, data).unwrap_or_else(|e| panic!("latmon: write {}: {e}", path.display()))
}

/// The object clang wrote, in place: without clang's branch-target labels
/// (`LBB<fn>_<block>`, local NOTYPE symbols: ~9 % of an object; libbpf
/// uses only the program, subprogram and map symbols and the relocations'
/// targets, none of which are labels) and without the BTF line info
/// ([`elf::drop_line_info`]). Without llvm-objcopy (`LLVM_OBJCOPY` names
/// another) the labels stay; `LATMON_BPF_LINE_INFO=1` keeps the line info
/// (for reading verifier logs).
pub fn finish_object(obj: &Path) {
    println!("cargo:rerun-if-env-changed=LLVM_OBJCOPY");
    let tool = std::env::var("LLVM_OBJCOPY").unwrap_or_else(|_| "llvm-objcopy".into());
    match Command::new(&tool).args(["--wildcard", "--strip-symbol=LBB[0-9]*"]).arg(obj).status() {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("latmon: {tool} on {}: {s}", obj.display()),
        Err(e) => println!("cargo:warning=latmon: {tool}: {e}; BPF objects keep their branch labels (larger binary)"),
    }
    println!("cargo:rerun-if-env-changed=LATMON_BPF_LINE_INFO");
    if std::env::var("LATMON_BPF_LINE_INFO").is_ok_and(|v| v == "1") {
        return;
    }
    let mut d = read(obj);
    if let Err(e) = elf::drop_line_info(&mut d) {
        panic!("latmon: {}: dropping BTF line info: {e}", obj.display());
    }
    write(obj, d);
}

/// The BPF objects of one build, embedded as one LZMA stream (`xz
/// --format=lzma`, a host tool like gzip: Debian's xz-utils, Yocto's
/// HOSTTOOLS) that [`lzma`] decodes at first use of an object: LZMA's
/// window spans the whole pack, so the objects' shared parts (BTF types,
/// each family's CO-RE and no-BTF builds, the tp_btf and raw_tp copies of
/// its programs) are stored once - 50 KB where deflating each object made
/// 113 KB (2026-12, 13 objects). Without xz the pack is the objects as
/// they are (larger binary).
#[derive(Default)]
pub struct Pack {
    /// (file name, bytes) in build order.
    objects: Vec<(String, Vec<u8>)>,
}

/// The pack's file in OUT_DIR (its table: [`PACK_SOURCE`]).
pub const PACK_FILE: &str = "bpf-pack.lzma";
/// The Rust source in OUT_DIR that src/bpf.rs includes: `static PACK`.
pub const PACK_SOURCE: &str = "bpf-pack.rs";

impl Pack {
    /// The skeleton `skel` takes its object `obj` from the pack (by file
    /// name), and `obj` joins the pack.
    pub fn embed(&mut self, skel: &Path, obj: &Path) {
        let name = obj.file_name().unwrap().to_string_lossy().into_owned();
        let text =
            skel::embed_object(&read_text(skel), &name).unwrap_or_else(|e| panic!("latmon: {}: {e}", skel.display()));
        write(skel, text);
        self.objects.push((name, read(obj)));
    }

    /// Writes the pack and its table into `out`.
    pub fn write(&self, out: &Path) {
        println!("cargo:rerun-if-env-changed=XZ");
        let order = pack_order(&self.objects.iter().map(|(n, b)| (n.as_str(), b.len())).collect::<Vec<_>>());
        let mut raw = Vec::new();
        let mut table = Vec::new();
        for i in order {
            let (name, bytes) = &self.objects[i];
            table.push((name.clone(), raw.len(), bytes.len()));
            raw.extend_from_slice(bytes);
        }
        let raw_path = out.join("bpf-pack.raw");
        write(&raw_path, &raw);
        let xz = std::env::var("XZ").unwrap_or_else(|_| "xz".into());
        // A 4 MiB dictionary covers the whole pack (the default of -9e,
        // 64 MiB, only costs the compressor memory).
        let packed = match Command::new(&xz)
            .args(["--format=lzma", "--lzma1=preset=9e,dict=4MiB,lc=0,lp=3,pb=3", "-c"])
            .arg(&raw_path)
            .output()
        {
            Ok(o) if o.status.success() && !o.stdout.is_empty() => Some(o.stdout),
            other => {
                println!("cargo:warning=latmon: {xz}: {other:?}; BPF objects embedded uncompressed (larger binary)");
                None
            }
        };
        let lzma = packed.is_some();
        write(&out.join(PACK_FILE), packed.unwrap_or(raw));
        write(&out.join(PACK_SOURCE), pack_source(lzma, &table));
    }
}

/// The objects' order in the pack, as indices into `objects` (file name,
/// size): decoding an object decodes all before it, and a kernel loads
/// either the CO-RE builds or the no-BTF ones (`*_nobtf.bpf.o`), so the
/// CO-RE builds come first, and within each kind the smaller first (the
/// ones every start loads, the feature probes, are small).
pub fn pack_order(objects: &[(&str, usize)]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..objects.len()).collect();
    order.sort_by_key(|&i| (objects[i].0.ends_with("_nobtf.bpf.o"), objects[i].1));
    order
}

/// The source of `static PACK` (src/bpf.rs `Pack`): its bytes, whether
/// they are LZMA, and each object's name, offset and length in what they
/// decode to.
pub fn pack_source(lzma: bool, table: &[(String, usize, usize)]) -> String {
    let len = table.iter().map(|(_, at, n)| at + n).max().unwrap_or(0);
    let mut s = format!(
        "pub(crate) static PACK: crate::bpf::Pack = crate::bpf::Pack {{\n    \
         bytes: include_bytes!(concat!(env!(\"OUT_DIR\"), \"/{PACK_FILE}\")),\n    lzma: {lzma},\n    len: {len},\n    objects: &[\n"
    );
    for (name, at, n) in table {
        s.push_str(&format!("        ({name:?}, {at}, {n}),\n"));
    }
    s.push_str("    ],\n};\n");
    s
}

/// [`skel::share_types`] on the skeleton file `skel`.
pub fn share_types(skel: &Path, shared: &str, structs: &[String]) {
    let text = skel::share_types(&read_text(skel), shared, structs).unwrap_or_else(|e| match e {
        Error::NotShared(_) => panic!("latmon: {e}: add it to bpf/shared.bpf.c"),
        e => panic!("latmon: {}: {e}", skel.display()),
    });
    write(skel, text);
}

/// Fails the build if the no-BTF object `obj` (built from `src`) carries
/// CO-RE relocations: kernels without BTF could not load it.
pub fn assert_no_core_relos(obj: &Path, src: &Path) {
    let relos = elf::core_relo_bytes(&read(obj)).unwrap_or_else(|e| panic!("latmon: {}: {e}", obj.display()));
    assert!(
        relos == 0,
        "latmon: the no-BTF build of {} has {relos} bytes of CO-RE relocations; \
         kernels without BTF cannot load it (a kernel struct or vmlinux.h type \
         reached code outside `#ifndef LATMON_NO_BTF`)",
        src.display()
    );
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_pack_holds_co_re_builds_first_smaller_first() {
        let objects = [("shared.bpf.o", 50), ("runq.bpf.o", 900), ("runq_nobtf.bpf.o", 10), ("features.bpf.o", 30)];
        assert_eq!(super::pack_order(&objects), [3, 0, 1, 2]);
    }

    #[test]
    fn the_pack_table_names_each_object_and_where_it_is() {
        let table = [("a.bpf.o".to_string(), 0, 10), ("b_nobtf.bpf.o".to_string(), 10, 5)];
        let s = super::pack_source(true, &table);
        assert!(s.contains("lzma: true,\n    len: 15,"), "{s}");
        assert!(s.contains("(\"a.bpf.o\", 0, 10),\n        (\"b_nobtf.bpf.o\", 10, 5),"), "{s}");
        assert!(s.contains("/bpf-pack.lzma\")"), "{s}");
        assert!(super::pack_source(false, &[]).contains("lzma: false,\n    len: 0,"));
    }

    #[test]
    fn the_no_btf_marker_starts_a_line() {
        assert!(super::wants_no_btf_build("#include <x.h>\n  /* LATMON_NO_BTF_VARIANT: tracepoints */\n"));
        assert!(!super::wants_no_btf_build("// see /* LATMON_NO_BTF_VARIANT in other sources\n"));
    }
}
