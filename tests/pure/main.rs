// SPDX-License-Identifier: MIT
//! Tests that need no kernel and no root: the wire format's properties and
//! fuzzing, the TCP and Modbus outputs on synthetic summaries, the fleet's
//! Prometheus rules (promtool).
#[path = "../common/mod.rs"]
mod common;

mod links_tcp;
mod modbus_server;
mod prom_rules;
mod prom_server;
mod supervisor;
mod wire_fuzz;
mod wire_props;
