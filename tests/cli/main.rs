// SPDX-License-Identifier: MIT
//! The CLI contract through the real binary: check output, one-line errors,
//! exit codes, bounds on what a user or a sender can make it do. Tests that
//! load BPF programs (`check` of a probe, `run`) need root and are marked
//! `#[ignore = "needs root: ..."]`; the rest run as anyone.
#[path = "../common/mod.rs"]
mod common;

// Every process of this binary watches the kernel's log from its start
// and fails when the kernel logs a splat (tests/common/kmsg.rs; issue 39).
#[used]
#[link_section = ".init_array"]
static KMSG_WATCH: extern "C" fn() = common::kmsg::start_watch;

mod bounds;
mod contract;
mod families;
mod full_disk;
mod links;
mod yocto_layer;
