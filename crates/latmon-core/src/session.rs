// SPDX-License-Identifier: MIT
//! What every output renders from: the agent run's fixed facts
//! ([`Session`]) and one interval ([`Tick`]). Apart from `sinks` so that
//! pure renderers (src/sinks/modbus/map.rs) need nothing of the I/O side. Pure.

use crate::hist::Hist;
use crate::summary::{FailedProbe, IntervalReport, ProbeInfo};
use crate::wire::{self, Hello};

/// Facts about this agent run, fixed once the probes are attached.
#[derive(Debug, Clone)]
pub struct Session {
    pub board: String,
    pub kernel: String,
    pub boot_id: u32,
    /// CLOCK_MONOTONIC when counting started.
    pub start_ns: u64,
    pub interval_ns: u64,
    pub probes: Vec<ProbeInfo>,
    /// Configured probes that did not attach (not in `probes`).
    pub failed: Vec<FailedProbe>,
    /// The alert threshold of each of `probes` (same order), 0 for none
    /// (a probe without one sends no alerts). Empty: none has one.
    pub thresholds_ns: Vec<u64>,
    /// The observer-effect certificate stored for this config (`latmon
    /// certify`), as Hello carries it (revision 11); None: none made.
    pub certificate: Option<wire::WireCertificate>,
}

impl Session {
    pub fn hello(&self) -> Hello {
        let probes = wire::probe_table(&self.probes);
        Hello {
            protocol_revision: wire::PROTOCOL_REVISION,
            latmon_version: env!("CARGO_PKG_VERSION").into(),
            board: self.board.clone(),
            kernel: self.kernel.clone(),
            boot_id: self.boot_id,
            start_ns: self.start_ns,
            interval_ns: self.interval_ns,
            probe_count: probes.len() as u16,
            probes,
            thresholds: self
                .thresholds_ns
                .iter()
                .enumerate()
                .filter(|&(_, &ns)| ns > 0)
                .map(|(i, &ns)| wire::ProbeThreshold { id: i as u16, threshold_ns: ns })
                .collect(),
            certificate: self.certificate,
        }
    }
}

/// Everything an output may render for one interval.
pub struct Tick<'a> {
    pub session: &'a Session,
    pub report: &'a IntervalReport,
    /// Cumulative histogram since start per probe (the order of
    /// `session.probes` and `report.probes`).
    pub totals: &'a [Hist],
    /// Failed map reads since start, per probe.
    pub read_errors: &'a [u64],
}
