// SPDX-License-Identifier: MIT
//! latmon: an eBPF latency monitor for real-time Linux robot controllers.
//!
//! Pure models (`hist`, `ident`, `summary`, `table`, `config`, `tpformat`) carry their unit tests and do no
//! I/O; `probes` (BPF) and `sinks` are the I/O edges; `agent` runs the loop.

pub mod agent;
pub mod anatomy;
pub mod bpf;
pub mod check;
pub mod config;
pub mod cost;
pub mod crc32;
pub mod hist;
pub mod hygiene;
pub mod ident;
pub mod modbus_map;
pub mod privs;
pub mod probes;
pub mod promhist;
pub mod session;
pub mod sinks;
pub mod summary;
pub mod table;
pub mod tpformat;
pub mod view;
pub mod wire;
