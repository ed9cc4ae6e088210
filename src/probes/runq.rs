// SPDX-License-Identifier: MIT
//! `runq`: run-queue latency (wakeup or preemption -> running), as
//! libbpf-tools' runqlat defines it. See bpf/runq.bpf.c for both designs.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, RawFd};

use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{Link, OpenObject};

use super::{ladder, libbpf_error, Owned, PerCpuHist, Probe, ProbeError};
use crate::bpf::runq::{types, RunqSkel, RunqSkelBuilder};
use crate::config::ProbeSpec;
use crate::hist::Hist;
use crate::summary::ProbeInfo;

/// The start-stamp store each attach mechanism uses (see bpf/runq.bpf.c).
fn mode(mech: &str) -> &'static str {
    if mech == "tp_btf" { "task-storage" } else { "pid-hash" }
}

/// Does program `name` belong to mechanism `mech`?
fn wants(mech: &str, name: &str) -> bool {
    name.ends_with(if mech == "tp_btf" { "_btf" } else { "_raw" })
}

pub struct Runq {
    info: ProbeInfo,
    reader: PerCpuHist<types::latmon_hist>,
    // Field order is drop order: detach before the object goes away.
    _links: Vec<Link>,
    _skel: Owned<RunqSkel<'static>>,
}

impl Runq {
    pub fn open(spec: &ProbeSpec) -> Result<Self, ProbeError> {
        let probe = spec.name.clone();
        if !super::kernel_btf_present() {
            return Err(ProbeError::KernelFeature {
                probe,
                what: format!("{}; runq needs CO-RE (it reads kernel structs) and has no no-BTF build", super::no_btf_reason()),
            });
        }
        let ((skel, links), mech) = ladder(&probe, &spec.ladder(), |mech| load(spec, mech))?;
        let reader = PerCpuHist::new(&skel.maps.runq_hist)
            .map_err(|why| ProbeError::Read { probe: probe.clone(), why })?;
        Ok(Runq {
            info: ProbeInfo {
                name: probe,
                kind: "runq".into(),
                attach: mech.into(),
                mode: mode(mech).into(),
                btf_mode: super::BtfMode::CoRe.as_str().into(),
            },
            reader,
            _links: links,
            _skel: skel,
        })
    }
}

fn load(
    spec: &ProbeSpec,
    mech: &'static str,
) -> Result<(Owned<RunqSkel<'static>>, Vec<Link>), String> {
    let skel = Owned::new(|storage: &'static mut MaybeUninit<OpenObject>| {
        let mut open = RunqSkelBuilder::default().open_opts(super::open_opts(), storage).map_err(|e| libbpf_error("open", &e))?;
        let ro = open.maps.rodata_data.as_deref_mut().ok_or("no rodata")?;
        ro.filter_tgid = spec.pid.unwrap_or(0);
        if let Some(comm) = &spec.comm {
            for (d, s) in ro.filter_comm.iter_mut().zip(comm.bytes()) {
                *d = s as i8;
            }
        }
        for mut prog in open.open_object_mut().progs_mut() {
            let name = prog.name().to_string_lossy().into_owned();
            prog.set_autoload(wants(mech, &name));
        }
        open.load().map_err(|e| libbpf_error("load", &e))
    })?;
    let mut links = Vec::new();
    for prog in skel.object().progs_mut() {
        let name = prog.name().to_string_lossy().into_owned();
        if wants(mech, &name) {
            links.push(prog.attach().map_err(|e| libbpf_error(&format!("attach {name}"), &e))?);
        }
    }
    Ok((skel, links))
}

impl Probe for Runq {
    fn info(&self) -> &ProbeInfo {
        &self.info
    }

    fn bpf_programs(&self) -> Vec<RawFd> {
        self._skel
            .object()
            .progs()
            .filter(|p| wants(&self.info.attach, &p.name().to_string_lossy()))
            .map(|p| p.as_fd().as_raw_fd())
            .collect()
    }

    fn read(&mut self, out: &mut Hist) -> Result<(), ProbeError> {
        self.reader
            .read(0, out)
            .map_err(|why| ProbeError::Read { probe: self.info.name.clone(), why })
    }
}
