// SPDX-License-Identifier: MIT
//! Compiles every `bpf/*.bpf.c` into a libbpf-rs skeleton in OUT_DIR for the
//! *target* architecture. (The `#define LATMON_*` limits of `bpf/latmon.h`
//! become Rust constants in crates/latmon-core/build.rs.)
//!
//! Sources with a line starting `/* LATMON_NO_BTF_VARIANT` are built a
//! second time for kernels without BTF: `<stem>_nobtf.skel.rs`, compiled
//! with `-DLATMON_NO_BTF` and without bpf/vmlinux/ on the include path (the
//! source includes bpf/nobtf.h instead). That object must carry no CO-RE
//! relocation; the build fails if it does.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use libbpf_cargo::util::CargoWarningFormatter;
use libbpf_cargo::SkeletonBuilder;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::fmt;
use tracing_subscriber::prelude::*;

#[path = "src/core_relos.rs"]
mod core_relos;

/// The types-only object whose skeleton holds the structs of latmon.h.
const SHARED_SOURCE: &str = "shared.bpf.c";

/// The line that opts a source into the no-BTF build.
const NO_BTF_MARKER: &str = "/* LATMON_NO_BTF_VARIANT";

/// libbpf's __TARGET_ARCH_* / bpf/vmlinux/<dir> name for a Rust target arch.
fn bpf_arch(target_arch: &str) -> &str {
    match target_arch {
        "x86_64" => "x86",
        "aarch64" => "arm64",
        "arm" => "arm",
        other => panic!("latmon: no vmlinux.h for target arch {other}; add bpf/vmlinux/<arch>/"),
    }
}

fn main() {
    // Surface clang's own output (libbpf-cargo logs it under the
    // "compiler-*" targets) as cargo warnings, and nothing else it chatters.
    let only_clang = Targets::new()
        .with_target("compiler-stderr", LevelFilter::INFO)
        .with_target("compiler-stdout", LevelFilter::INFO)
        .with_default(LevelFilter::WARN);
    tracing_subscriber::registry()
        .with(fmt::layer().event_format(CargoWarningFormatter).with_filter(only_clang))
        .init();

    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap());
    let target_arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap();
    let arch = bpf_arch(&target_arch);
    let bpf_dir = manifest.join("bpf");
    let vmlinux_dir = bpf_dir.join("vmlinux").join(arch);
    assert!(
        vmlinux_dir.join("vmlinux.h").exists(),
        "latmon: {} missing; see bpf/vmlinux/README.md",
        vmlinux_dir.join("vmlinux.h").display()
    );

    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CLANG");
    println!("cargo:rerun-if-env-changed=LATMON_BPF_CFLAGS");
    let mut headers = vec![vmlinux_dir.join("vmlinux.h")];
    let mut sources = Vec::new();
    for entry in fs::read_dir(&bpf_dir).expect("read bpf/") {
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
    // New files in bpf/ must trigger a rebuild too.
    println!("cargo:rerun-if-changed={}", bpf_dir.display());

    let clang = env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let mut common: Vec<String> = vec![
        "-I".into(),
        bpf_dir.display().to_string(),
        "-Wall".into(),
        // BPF ISA v3 (kernel >= 5.1: 32-bit sub-registers and jumps; the
        // atomic fetch/cmpxchg the syscall probe's slot table uses need
        // 5.12). clang 14 defaults to v1, which has no atomic fetch.
        "-mcpu=v3".into(),
        // Map build paths away so objects do not carry the build host's paths
        // (Yocto's buildpaths QA check).
        format!("-ffile-prefix-map={}=.", manifest.display()),
    ];
    if let Ok(extra) = env::var("LATMON_BPF_CFLAGS") {
        common.extend(extra.split_whitespace().map(String::from));
    }
    let core_args = [common.clone(), vec!["-I".into(), vmlinux_dir.display().to_string()]].concat();
    let no_btf_args = [common, vec!["-DLATMON_NO_BTF".into()]].concat();

    // The shared type set first: every other skeleton's copies of the
    // structs of latmon.h become re-exports of its types.
    let shared_structs = latmon_structs(&bpf_dir.join("latmon.h"));
    sources.sort_by_key(|s| !s.ends_with(SHARED_SOURCE));
    assert!(sources[0].ends_with(SHARED_SOURCE), "latmon: bpf/{SHARED_SOURCE} missing");
    let mut shared_text = None;
    for src in &sources {
        let stem = src.file_name().unwrap().to_string_lossy().replace(".bpf.c", "");
        build_skel(&clang, src, &out, &stem, &core_args);
        let skel = out.join(format!("{stem}.skel.rs"));
        match &shared_text {
            None => shared_text = Some(fs::read_to_string(&skel).expect("read the shared skeleton")),
            Some(shared) => share_types(&skel, shared, &shared_structs),
        }
        let text = fs::read_to_string(src).expect("read BPF source");
        if text.lines().any(|l| l.trim_start().starts_with(NO_BTF_MARKER)) {
            let obj = build_skel(&clang, src, &out, &format!("{stem}_nobtf"), &no_btf_args);
            share_types(&out.join(format!("{stem}_nobtf.skel.rs")), shared_text.as_ref().unwrap(), &shared_structs);
            let relos = core_relos::core_relo_bytes(&fs::read(&obj).expect("read BPF object"))
                .unwrap_or_else(|e| panic!("latmon: {}: {e}", obj.display()));
            assert!(
                relos == 0,
                "latmon: the no-BTF build of {} has {relos} bytes of CO-RE relocations; \
                 kernels without BTF cannot load it (a kernel struct or vmlinux.h type \
                 reached code outside `#ifndef LATMON_NO_BTF`)",
                src.display()
            );
        }
    }
}

/// Compile `src` into OUT_DIR/`name`.bpf.o (kept for the tests) and its
/// skeleton `name`.skel.rs (skeleton and types are named after `name`).
fn build_skel(clang: &str, src: &Path, out: &Path, name: &str, args: &[String]) -> PathBuf {
    let obj = out.join(format!("{name}.bpf.o"));
    let mut builder = SkeletonBuilder::new();
    builder.source(src).obj(&obj).clang(clang).clang_args(args);
    if let Err(e) = builder.build() {
        panic!("latmon: building {} as {name}: {e:#}", src.display());
    }
    strip_branch_labels(&obj);
    drop_line_info(&obj);
    let skel = out.join(format!("{name}.skel.rs"));
    if let Err(e) = builder.generate(&skel) {
        panic!("latmon: skeleton of {} as {name}: {e:#}", src.display());
    }
    embed_deflated(&skel, &obj);
    obj
}

/// The skeleton embeds its object as `static DATA: [u8; N] = [..]`: a
/// third of the binary for all of them. Embed it deflated instead (about 4x
/// smaller), as `crate::bpf::Embedded`, inflated at first use by the zlib
/// libbpf already links. gzip (a host tool everywhere, Yocto included)
/// deflates; the gzip member is rewrapped as the zlib stream zlib's
/// uncompress() reads. Without gzip the object is embedded as it is.
fn embed_deflated(skel: &Path, obj: &Path) {
    let raw = fs::read(obj).expect("read BPF object");
    let text = fs::read_to_string(skel).expect("read skeleton");
    let start = text.find("static DATA: [u8; ").expect("skeleton embeds `static DATA: [u8; N]`");
    let end = start + text[start..].find("];").expect("end of the skeleton's DATA") + 2;
    let file = obj.file_name().unwrap().to_string_lossy().into_owned();
    let embedded = match std::process::Command::new("gzip").args(["-9", "-n", "-c"]).arg(obj).output() {
        Ok(o) if o.status.success() => {
            let z = zlib_of_gzip(&o.stdout, &raw).unwrap_or_else(|e| panic!("latmon: gzip of {}: {e}", obj.display()));
            fs::write(obj.with_extension("o.z"), z).expect("write deflated object");
            format!(
                "pub(crate) static DATA: crate::bpf::Embedded = crate::bpf::Embedded::deflated(include_bytes!(concat!(env!(\"OUT_DIR\"), \"/{file}.z\")), {});",
                raw.len()
            )
        }
        other => {
            println!("cargo:warning=latmon: gzip: {other:?}; BPF objects embedded uncompressed (larger binary)");
            format!("pub(crate) static DATA: crate::bpf::Embedded = crate::bpf::Embedded::plain(include_bytes!(concat!(env!(\"OUT_DIR\"), \"/{file}\")));")
        }
    };
    fs::write(skel, format!("{}{}{}", &text[..start], embedded, &text[end..])).expect("write skeleton");
}

/// A gzip member (RFC 1952) as a zlib stream (RFC 1950) of the same
/// deflate data: zlib header, the deflate blocks, Adler-32 of `raw`.
fn zlib_of_gzip(gz: &[u8], raw: &[u8]) -> Result<Vec<u8>, String> {
    if gz.len() < 18 || gz[..3] != [0x1f, 0x8b, 8] {
        return Err("not a deflate gzip member".into());
    }
    let flags = gz[3];
    let mut at = 10;
    if flags & 4 != 0 {
        at += 2 + usize::from(u16::from_le_bytes([gz[at], gz[at + 1]]));
    }
    for bit in [8u8, 16] {
        if flags & bit != 0 {
            at += gz[at..].iter().position(|&b| b == 0).ok_or("unterminated header field")? + 1;
        }
    }
    if flags & 2 != 0 {
        at += 2;
    }
    let deflate = gz.get(at..gz.len() - 8).ok_or("short gzip member")?;
    let isize = u32::from_le_bytes(gz[gz.len() - 4..].try_into().unwrap());
    if isize as usize != raw.len() & 0xffff_ffff {
        return Err(format!("gzip says {isize} bytes, the object has {}", raw.len()));
    }
    let (mut a, mut b) = (1u32, 0u32);
    for &byte in raw {
        a = (a + u32::from(byte)) % 65521;
        b = (b + a) % 65521;
    }
    let mut z = vec![0x78, 0xda];
    z.extend_from_slice(deflate);
    z.extend_from_slice(&((b << 16) | a).to_be_bytes());
    Ok(z)
}

/// Drop clang's branch-target labels (`LBB<fn>_<block>`, local NOTYPE
/// symbols: ~9% of each object, which the skeleton embeds in the binary).
/// libbpf uses only the program, subprogram and map symbols and the
/// relocations' targets, none of which are labels. Without llvm-objcopy
/// (`LLVM_OBJCOPY` names another) the objects stay as they are.
fn strip_branch_labels(obj: &Path) {
    println!("cargo:rerun-if-env-changed=LLVM_OBJCOPY");
    let tool = env::var("LLVM_OBJCOPY").unwrap_or_else(|_| "llvm-objcopy".into());
    match std::process::Command::new(&tool).args(["--wildcard", "--strip-symbol=LBB[0-9]*"]).arg(obj).status() {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("latmon: {tool} on {}: {s}", obj.display()),
        Err(e) => println!("cargo:warning=latmon: {tool}: {e}; BPF objects keep their branch labels (larger binary)"),
    }
}

/// Drop the BTF line info: `.BTF.ext`'s line_info records (instruction ->
/// source line) and the source-line strings only they name in `.BTF`.
/// libbpf passes line info to the kernel only for verifier messages and
/// `bpftool prog dump` source interleaving; loading, CO-RE relocation
/// (`.BTF.ext` core_relo) and func_info do not use it. It was ~20 % of
/// each CO-RE object, and the board binary embeds them all (the 1.5 MiB
/// goal, scripts/build-static.sh). The header's line_info_len becomes 0
/// (libbpf then reads none) and the bytes are zeroed in place, so no
/// offset moves and the deflated object shrinks. `LATMON_BPF_LINE_INFO=1`
/// keeps it (for reading verifier logs).
fn drop_line_info(obj: &Path) {
    println!("cargo:rerun-if-env-changed=LATMON_BPF_LINE_INFO");
    if env::var("LATMON_BPF_LINE_INFO").is_ok_and(|v| v == "1") {
        return;
    }
    let mut d = fs::read(obj).expect("read BPF object");
    if let Err(e) = zero_line_info(&mut d) {
        panic!("latmon: {}: dropping BTF line info: {e}", obj.display());
    }
    fs::write(obj, d).expect("write BPF object");
}

fn zero_line_info(d: &mut [u8]) -> Result<(), String> {
    let u16_at = |d: &[u8], o: usize| d.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]])).ok_or("truncated");
    let u32_at =
        |d: &[u8], o: usize| d.get(o..o + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap())).ok_or("truncated");
    let u64_at =
        |d: &[u8], o: usize| d.get(o..o + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap())).ok_or("truncated");
    // ELF64 little-endian (clang -target bpf on every host latmon builds on).
    if d.get(..6) != Some(&[0x7f, b'E', b'L', b'F', 2, 1][..]) {
        return Err("not an ELF64 little-endian object".into());
    }
    let shoff = u64_at(d, 0x28)? as usize;
    let shentsize = u16_at(d, 0x3a)? as usize;
    let shnum = u16_at(d, 0x3c)? as usize;
    let shstrndx = u16_at(d, 0x3e)? as usize;
    let sec = |d: &[u8], i: usize| -> Result<(u32, usize, usize), String> {
        let h = shoff + i * shentsize;
        Ok((u32_at(d, h)?, u64_at(d, h + 0x18)? as usize, u64_at(d, h + 0x20)? as usize))
    };
    let (_, stroff, _) = sec(d, shstrndx)?;
    let name = |d: &[u8], n: u32| -> String {
        let o = stroff + n as usize;
        let end = d[o..].iter().position(|&c| c == 0).map_or(d.len(), |e| o + e);
        String::from_utf8_lossy(&d[o..end]).into_owned()
    };
    let (mut btf, mut ext) = (None, None);
    for i in 0..shnum {
        let (n, off, size) = sec(d, i)?;
        match name(d, n).as_str() {
            ".BTF" => btf = Some((off, size)),
            ".BTF.ext" => ext = Some((off, size)),
            _ => {}
        }
    }
    let (Some((btf_off, btf_size)), Some((ext_off, ext_size))) = (btf, ext) else { return Ok(()) };
    // .BTF.ext header: magic u16, version u8, flags u8, hdr_len u32,
    // func_info off/len, line_info off/len (offsets after the header).
    if u16_at(d, ext_off)? != 0xeb9f {
        return Err(".BTF.ext magic".into());
    }
    let hdr_len = u32_at(d, ext_off + 4)? as usize;
    let li_off = ext_off + hdr_len + u32_at(d, ext_off + 16)? as usize;
    let li_len = u32_at(d, ext_off + 20)? as usize;
    if li_len == 0 {
        return Ok(());
    }
    if li_off + li_len > ext_off + ext_size {
        return Err("line_info past .BTF.ext".into());
    }
    // The strings the line info names (file names, source lines).
    let rec = u32_at(d, li_off)? as usize;
    let mut named = std::collections::BTreeSet::new();
    let mut at = li_off + 4;
    while at + 8 <= li_off + li_len {
        let n = u32_at(d, at + 4)? as usize;
        at += 8;
        for _ in 0..n {
            named.insert(u32_at(d, at + 4)?);
            named.insert(u32_at(d, at + 8)?);
            at += rec;
        }
    }
    // .BTF header: magic, version, flags, hdr_len, type off/len, str off/len.
    if u16_at(d, btf_off)? != 0xeb9f {
        return Err(".BTF magic".into());
    }
    let bhdr = u32_at(d, btf_off + 4)? as usize;
    let (type_off, type_len) = (u32_at(d, btf_off + 8)? as usize, u32_at(d, btf_off + 12)? as usize);
    let (str_off, str_len) = (u32_at(d, btf_off + 16)? as usize, u32_at(d, btf_off + 20)? as usize);
    let strs = btf_off + bhdr + str_off;
    if strs + str_len > btf_off + btf_size || btf_off + bhdr + type_off + type_len > btf_off + btf_size {
        return Err(".BTF sections past .BTF".into());
    }
    // A string a type or func_info also names stays: types hold name_off
    // words, so keep any string whose offset appears as a word there (an
    // over-approximation: only ever keeps more).
    let types = &d[btf_off + bhdr + type_off..btf_off + bhdr + type_off + type_len];
    let mut used: std::collections::BTreeSet<u32> =
        types.chunks_exact(4).map(|w| u32::from_le_bytes(w.try_into().unwrap())).collect();
    // So does one that func_info or core_relo (section names, access
    // strings) may name: every word of .BTF.ext outside the line info.
    for (a, b) in [(ext_off, li_off), (li_off + li_len, ext_off + ext_size)] {
        used.extend(d[a..b].chunks_exact(4).map(|w| u32::from_le_bytes(w.try_into().unwrap())));
    }
    for &o in named.iter().filter(|o| **o != 0 && !used.contains(o)) {
        let o = strs + o as usize;
        let end = d[o..strs + str_len].iter().position(|&c| c == 0).map_or(strs + str_len, |e| o + e);
        d[o..end].fill(0);
    }
    d[li_off..li_off + li_len].fill(0);
    d[ext_off + 20..ext_off + 24].copy_from_slice(&0u32.to_le_bytes());
    Ok(())
}

/// The names of the structs latmon.h defines (`struct NAME {` lines).
fn latmon_structs(header: &Path) -> Vec<String> {
    let text = fs::read_to_string(header).expect("read latmon.h");
    text.lines().filter_map(|l| l.strip_prefix("struct ")?.strip_suffix(" {").map(str::to_string)).collect()
}

/// Each skeleton generates its own Rust type for every struct it uses: in
/// `skel`, replace the copies of latmon.h's structs by re-exports of the
/// shared skeleton's (`crate::bpf::shared::types`), so every family reads
/// them through one type. A copy that differs from the shared one (other
/// defines, other layout) fails the build.
fn share_types(skel: &Path, shared: &str, structs: &[String]) {
    let mut text = fs::read_to_string(skel).expect("read skeleton");
    let mut uses = String::new();
    for name in structs {
        let head = format!("pub struct {name}");
        let want = item_span(shared, &head).unwrap_or_else(|| {
            panic!("latmon: the shared skeleton has no struct {name}: add it to bpf/{SHARED_SOURCE}")
        });
        let Some(span) = item_span(&text, &head) else { continue };
        let words = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            words(&text[span.clone()]) == words(&shared[want]),
            "latmon: {}: struct {name} differs from the shared one",
            skel.display()
        );
        text.replace_range(span, "");
        if let Some(span) = item_span(&text, &format!("impl Default for {name}")) {
            text.replace_range(span, "");
        }
        writeln!(uses, "pub use crate::bpf::shared::types::{name};").unwrap();
    }
    let at = text.find("pub mod types {").expect("skeleton has a types module") + "pub mod types {".len();
    text.insert_str(at, &format!("\n{uses}"));
    fs::write(skel, text).expect("write skeleton");
}

/// The bytes of the item that starts `head` (`pub struct NAME`, `impl
/// Default for NAME`) in generated code: its attributes, through the brace
/// that closes it.
fn item_span(text: &str, head: &str) -> Option<std::ops::Range<usize>> {
    let mut from = 0;
    while let Some(i) = text[from..].find(head) {
        let at = from + i;
        from = at + head.len();
        let rest = &text[from..];
        let body = rest.trim_start();
        let word_start = text[..at].ends_with(char::is_whitespace);
        if !body.starts_with('{') || !word_start {
            continue;
        }
        let open = from + (rest.len() - body.len());
        let mut depth = 0usize;
        let close = text[open..].char_indices().find_map(|(j, c)| {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(open + j + 1);
                    }
                }
                _ => {}
            }
            None
        })?;
        let mut start = at;
        loop {
            let before = text[..start].trim_end();
            match before.strip_suffix(']').and_then(|b| b.rfind("#[")) {
                Some(attr) => start = attr,
                None => break,
            }
        }
        return Some(start..close);
    }
    None
}
