// SPDX-License-Identifier: MIT
//! latmon's build script's work past clang and libbpf-cargo: each BPF
//! object and skeleton is post-processed here, so that build.rs only
//! lists sources and calls the builder (as the libbpf-rs examples' do).
//!
//! - [`finish_object`]: clang's branch labels and the BTF line info out of
//!   the object (neither is used to load it; together ~30 % of it);
//! - [`embed_deflated`]: the skeleton embeds its object deflated;
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
pub mod skel;
pub mod zlib;

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

/// The skeleton `skel` embeds `obj` deflated (about 4x smaller) as
/// `<obj>.z` beside it, inflated at first use by the zlib libbpf already
/// links; gzip deflates ([`zlib::zlib_of_gzip`]). Without gzip the object
/// is embedded as it is.
pub fn embed_deflated(skel: &Path, obj: &Path) {
    let raw = read(obj);
    let file = obj.file_name().unwrap().to_string_lossy().into_owned();
    let deflated_len = match Command::new("gzip").args(["-9", "-n", "-c"]).arg(obj).output() {
        Ok(o) if o.status.success() => {
            let z = zlib::zlib_of_gzip(&o.stdout, &raw)
                .unwrap_or_else(|e| panic!("latmon: gzip of {}: {e}", obj.display()));
            write(&obj.with_extension("o.z"), z);
            Some(raw.len())
        }
        other => {
            println!("cargo:warning=latmon: gzip: {other:?}; BPF objects embedded uncompressed (larger binary)");
            None
        }
    };
    let text = skel::embed_object(&read_text(skel), &file, deflated_len)
        .unwrap_or_else(|e| panic!("latmon: {}: {e}", skel.display()));
    write(skel, text);
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
    fn the_no_btf_marker_starts_a_line() {
        assert!(super::wants_no_btf_build("#include <x.h>\n  /* LATMON_NO_BTF_VARIANT: tracepoints */\n"));
        assert!(!super::wants_no_btf_build("// see /* LATMON_NO_BTF_VARIANT in other sources\n"));
    }
}
