// SPDX-License-Identifier: MIT
//! latmon: an eBPF latency monitor for real-time Linux robot controllers.
//!
//! Pure models (`config`, `tpformat`; and from crates/latmon-core `hist`, `ident`, `summary`, `table`, `wire`)
//! carry their unit tests and do no I/O; `probes` (BPF) and `sinks` are the I/O edges; `agent` runs the loop.

pub mod agent;
pub mod bpf;
pub mod check;
pub mod config;
pub mod cost;
pub mod hygiene;
pub mod modbus_map;
pub mod privs;
pub mod probes;
pub mod promhist;
pub mod sinks;
pub mod tpformat;

// The pure models live in crates/latmon-core (shared with latmon-view);
// re-exported so that `crate::wire::...` and `latmon::wire::...` paths keep working.
pub use latmon_core::{anatomy, causes, crc32, hist, ident, json, session, summary, table, view, wire};

/// `latmon view` and `latmon decode` on the board: latmon-core's screen and
/// loops over this crate's sources (src/sinks/source.rs). Not src/view.rs:
/// that path moved to crates/latmon-core (git follows its edits there).
pub mod board_view;
