// SPDX-License-Identifier: MIT
//! Compiles every `bpf/*.bpf.c` into a libbpf-rs skeleton in OUT_DIR for the
//! *target* architecture; crates/latmon-build post-processes each object
//! and skeleton. (The `#define LATMON_*` limits of `bpf/latmon.h` become
//! Rust constants in crates/latmon-core/build.rs.)
//!
//! Sources with a line starting `/* LATMON_NO_BTF_VARIANT` are built a
//! second time for kernels without BTF: `<stem>_nobtf.skel.rs`, compiled
//! with `-DLATMON_NO_BTF` and without bpf/vmlinux/ on the include path (the
//! source includes bpf/nobtf.h instead). That object must carry no CO-RE
//! relocation; the build fails if it does.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

use latmon_build::Pack;
use libbpf_cargo::util::CargoWarningFormatter;
use libbpf_cargo::SkeletonBuilder;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::{fmt, prelude::*};

/// The types-only object whose skeleton holds the structs of latmon.h.
const SHARED_SOURCE: &str = "shared.bpf.c";

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
    let bpf_dir = manifest.join("bpf");
    let vmlinux_dir = bpf_dir.join("vmlinux").join(bpf_arch(&env::var("CARGO_CFG_TARGET_ARCH").unwrap()));
    let vmlinux = vmlinux_dir.join("vmlinux.h");
    assert!(vmlinux.exists(), "latmon: {} missing; see bpf/vmlinux/README.md", vmlinux.display());

    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CLANG");
    println!("cargo:rerun-if-env-changed=LATMON_BPF_CFLAGS");
    let mut sources = latmon_build::bpf_sources(&bpf_dir, &vmlinux);

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
    // The cargo feature `test-hooks`: the mutation switches of
    // bpf/test_hooks.bpf.h, in test builds only.
    if env::var_os("CARGO_FEATURE_TEST_HOOKS").is_some() {
        common.push("-DLATMON_TEST_HOOKS".into());
    }
    if let Ok(extra) = env::var("LATMON_BPF_CFLAGS") {
        common.extend(extra.split_whitespace().map(String::from));
    }
    let core_args = [common.clone(), vec!["-I".into(), vmlinux_dir.display().to_string()]].concat();
    let no_btf_args = [common, vec!["-DLATMON_NO_BTF".into()]].concat();

    // The shared type set first: every other skeleton's copies of the
    // structs of latmon.h become re-exports of its types.
    let structs = latmon_build::skel::header_structs(&fs::read_to_string(bpf_dir.join("latmon.h")).unwrap());
    sources.sort_by_key(|s| !s.ends_with(SHARED_SOURCE));
    assert!(sources[0].ends_with(SHARED_SOURCE), "latmon: bpf/{SHARED_SOURCE} missing");
    let mut shared = None;
    let mut pack = Pack::default();
    for src in &sources {
        let stem = src.file_name().unwrap().to_string_lossy().replace(".bpf.c", "");
        let (_, skel) = build_skel(&clang, src, &out, &stem, &core_args, &mut pack);
        match &shared {
            None => shared = Some(fs::read_to_string(&skel).expect("read the shared skeleton")),
            Some(shared) => latmon_build::share_types(&skel, shared, &structs),
        }
        if latmon_build::wants_no_btf_build(&fs::read_to_string(src).expect("read BPF source")) {
            let (obj, skel) = build_skel(&clang, src, &out, &format!("{stem}_nobtf"), &no_btf_args, &mut pack);
            latmon_build::share_types(&skel, shared.as_ref().unwrap(), &structs);
            latmon_build::assert_no_core_relos(&obj, src);
        }
    }
    pack.write(&out);
}

/// Compile `src` into OUT_DIR/`name`.bpf.o (kept for the tests) and its
/// skeleton `name`.skel.rs (skeleton and types are named after `name`),
/// which takes the object from `pack`.
fn build_skel(clang: &str, src: &Path, out: &Path, name: &str, args: &[String], pack: &mut Pack) -> (PathBuf, PathBuf) {
    let (obj, skel) = (out.join(format!("{name}.bpf.o")), out.join(format!("{name}.skel.rs")));
    let mut builder = SkeletonBuilder::new();
    builder.source(src).obj(&obj).clang(clang).clang_args(args);
    if let Err(e) = builder.build() {
        panic!("latmon: building {} as {name}: {e:#}", src.display());
    }
    latmon_build::finish_object(&obj);
    if let Err(e) = builder.generate(&skel) {
        panic!("latmon: skeleton of {} as {name}: {e:#}", src.display());
    }
    pack.embed(&skel, &obj);
    (obj, skel)
}
