// SPDX-License-Identifier: MIT
//! Puts memory.x where cortex-m-rt's link.x finds it (the linker's search
//! path), as cortex-m-quickstart does.

use std::path::PathBuf;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    std::fs::write(out.join("memory.x"), include_bytes!("memory.x")).expect("write memory.x");
    println!("cargo:rustc-link-search={}", out.display());
    println!("cargo:rerun-if-changed=memory.x");
}
