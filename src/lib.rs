// SPDX-License-Identifier: MIT
//! latmon: an eBPF latency monitor for real-time Linux robot controllers.
//!
//! Pure models (`config`, `tpformat`, `rtkernel`, `rtsafety`, the outputs' models
//! `sinks::modbus::map` and `sinks::prom::hist`) carry their
//! unit tests and do no I/O; so do those shared with the technician's tools,
//! in crates/latmon-core (`latmon_core::{hist, ident, summary, table, wire,
//! ...}`), which this crate's files import from there. `probes` (BPF) and
//! `sinks` are the I/O edges; `agent` runs the loop.

pub mod agent;
pub mod board_view;
pub mod bpf;
pub mod certify;
pub mod check;
pub mod config;
pub mod cost;
pub mod discover;
pub mod error;
pub mod hygiene;
pub mod privs;
pub mod probes;
pub mod procfs;
pub mod rtkernel;
pub mod rtsafety;
pub mod sinks;
pub mod tpformat;
