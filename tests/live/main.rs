// SPDX-License-Identifier: MIT
//! The live tests: each module drives one probe family, link or output
//! against the running kernel (real BPF programs, real workloads with their
//! own ground truth). They need root: each is marked
//! `#[ignore = "needs root: ..."]`, so `cargo test` as a normal user skips
//! and counts them; scripts/test.sh runs them all (nextest --run-ignored all).
//! One binary, not one per family: one link instead of seventeen.
#[path = "../common/mod.rs"]
mod common;

// Every process of this binary watches the kernel's log from its start
// and fails when the kernel logs a splat (tests/common/kmsg.rs; issue 39).
#[used]
#[link_section = ".init_array"]
static KMSG_WATCH: extern "C" fn() = common::kmsg::start_watch;

mod agent;
mod anatomy;
mod bucket_agreement;
mod certify;
mod cycle;
mod cycle_life;
mod func;
mod irq;
mod json_cut;
mod kernel_misses;
mod kmsg_guard;
mod links;
mod links_paced;
mod lock;
mod lock_kinds;
mod lock_names;
mod loops;
mod modbus;
mod nobtf_tracepoint;
mod prom_native;
mod rt_hash;
mod rt_safety;
mod rules;
mod runq;
mod supervisor;
mod syscall;
mod text;
mod timer;
mod view_report;
mod view_tui;
