// SPDX-License-Identifier: MIT
//! `kfunc:FUNCTION` and `ufunc:/path:SYMBOL`: function latency, entry to
//! return, with threshold alerts. See bpf/func.bpf.c for the BPF design.
//!
//! Every kfunc/ufunc spec of a run is served by one BPF object (the
//! "set"): probe id = position among those specs, at most
//! `MAX_FUNC_PROBES`. The set owns the shared maps (per-probe histograms,
//! in-flight stamps, alert token buckets and buffer) and, when any probe
//! has a threshold, a reader thread that moves alert records from the ring
//! (or perf) buffer into a bounded queue; the agent drains it each interval
//! without ever blocking on the kernel.
//!
//! Two builds of bpf/func.bpf.c (build.rs): the CO-RE object, and the
//! no-BTF one (no CO-RE relocation, no fentry/fexit) for kernels without
//! BTF, where libbpf cannot load an object with relocations. The set runs
//! the CO-RE build when kernel types are available (the kernel's BTF or
//! `btf_path`), the no-BTF build otherwise (or with `LATMON_FORCE_NO_BTF`);
//! each probe reports which (`ProbeInfo::btf_mode`). Everything past
//! loading uses libbpf-rs handles common to both builds (`Loaded`), and
//! reads histograms, drop counters and alert records through the generated
//! types of latmon.h (the two builds differ only in their skeleton types,
//! for which `open_func!` and `impl_loaded!` stamp one body each).
//!
//! Attach ladder, per probe:
//! - kfunc: fentry/fexit (a copy of the object holding just that pair,
//!   bound to the function at load, maps shared with the set; CO-RE build
//!   only), then kprobe/kretprobe (the set's programs, probe id in the BPF
//!   cookie).
//! - ufunc: uprobe/uretprobe (the set's programs, probe id in the cookie),
//!   the symbol resolved by libbpf in the binary or shared library.
//!
//! Return probes attach before entry probes (a return without a stamp is
//! ignored; a stamp without its return would be stale) and detach after.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::rc::Rc;

use latmon_core::hist::Hist;
use latmon_core::ident::{BtfMode, Mechanism};
use latmon_core::summary::{AlertRecord, ProbeInfo};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{KprobeOpts, Link, MapMut, OpenObject, ProgramMut, UprobeOpts};

use super::alerts::{decode_alert, keep_alert_buffer, want_ringbuf, AlertMaps, Alerts};
use super::common::{check_binary, symbol_missing, LoadError};
use super::common::{clear_libbpf_warning, ladder, libbpf_error, set_comm, threshold_ns, Owned, Probe, ProbeError};
use super::PerCpuHist;
use crate::bpf::func::{FuncSkel, FuncSkelBuilder, OpenFuncSkel};
use crate::bpf::func_nobtf::{FuncNobtfSkel, FuncNobtfSkelBuilder, OpenFuncNobtfSkel};
use crate::bpf::limits::MAX_FUNC_PROBES;
use crate::bpf::shared::types::latmon_func_config;
use crate::config::{ProbeKind, ProbeSpec};

/// What every copy of the object is configured with before load.
struct SetConfig<'a> {
    specs: &'a [&'a ProbeSpec],
    use_ringbuf: bool,
}

/// The set's programs, as libbpf-rs handles (the same in both builds).
struct Progs<'a> {
    kentry: &'a ProgramMut<'static>,
    kexit: &'a ProgramMut<'static>,
    uentry: &'a ProgramMut<'static>,
    uexit: &'a ProgramMut<'static>,
    task_exit: &'a ProgramMut<'static>,
}

/// The set's maps, as libbpf-rs handles (the same in both builds).
struct Maps<'a> {
    hist: &'a MapMut<'static>,
    stamps: &'a MapMut<'static>,
    alert_tat: &'a MapMut<'static>,
    alert_drops: &'a MapMut<'static>,
    alerts: &'a MapMut<'static>,
    alerts_perf: &'a MapMut<'static>,
}

/// A loaded func object, whichever build.
trait Loaded {
    fn progs(&self) -> Progs<'_>;
    fn maps(&self) -> Maps<'_>;
}

impl SetConfig<'_> {
    /// Set a copy's configuration: alert buffer, filters, thresholds, probe
    /// count.
    fn apply(&self, ro: &mut latmon_func_config, fentry_probe_id: u32) {
        ro.common = super::common::common_config(self.use_ringbuf, false, false);
        ro.nr_probes = self.specs.len() as u32;
        ro.fentry_probe_id = fentry_probe_id;
        for (id, spec) in self.specs.iter().enumerate() {
            ro.filter_tgid[id] = spec.pid.unwrap_or(0);
            set_comm(&mut ro.filter_comm[id], spec.comm.as_deref());
            ro.threshold_ns[id] = threshold_ns(spec);
        }
    }
}

/// Opens a copy of a func object and configures it by `cfg`. The CO-RE
/// and no-BTF skeletons are distinct generated types with the same fields,
/// which a generic cannot name: one body, stamped per build.
macro_rules! open_func {
    ($name:ident, $builder:ident, $open:ident) => {
        fn $name(
            storage: &'static mut MaybeUninit<OpenObject>,
            cfg: &SetConfig<'_>,
            fentry_probe_id: u32,
        ) -> Result<$open<'static>, LoadError> {
            let mut open = $builder::default()
                .open_opts(super::common::open_opts(), storage)
                .map_err(|e| libbpf_error("open func", &e))?;
            let ro = open
                .maps
                .rodata_data
                .as_deref_mut()
                .ok_or_else(|| LoadError::Object("func object has no rodata".into()))?;
            cfg.apply(&mut ro.cfg, fentry_probe_id);
            keep_alert_buffer(&mut open.maps.alerts, &mut open.maps.alerts_perf, cfg.use_ringbuf)?;
            Ok(open)
        }
    };
}

open_func!(open_core, FuncSkelBuilder, OpenFuncSkel);
// The no-BTF build has no fentry copies: its fentry_probe_id stays 0.
open_func!(open_nobtf, FuncNobtfSkelBuilder, OpenFuncNobtfSkel);

/// The set's object of either build (`open` opens a configured copy):
/// loaded with the programs `wanted` says.
fn load_build<O>(
    open: impl FnOnce(&'static mut MaybeUninit<OpenObject>) -> Result<O, LoadError>,
    wanted: &dyn Fn(&str) -> bool,
) -> Result<Box<dyn Loaded>, LoadError>
where
    O: OpenSkel<'static>,
    Owned<O::Output>: Loaded + 'static,
{
    let skel = Owned::new(|storage: &'static mut MaybeUninit<OpenObject>| -> Result<O::Output, LoadError> {
        let mut open = open(storage)?;
        for mut prog in open.open_object_mut().progs_mut() {
            let name = prog.name().to_string_lossy().into_owned();
            prog.set_autoload(wanted(&name));
        }
        open.load().map_err(|e| libbpf_error("load func", &e))
    })?;
    Ok(Box::new(skel))
}

/// `Loaded` for a build's skeleton: both builds name their programs and
/// maps alike.
macro_rules! impl_loaded {
    ($skel:ident) => {
        impl Loaded for Owned<$skel<'static>> {
            fn progs(&self) -> Progs<'_> {
                let p = &self.progs;
                Progs {
                    kentry: &p.func_kentry,
                    kexit: &p.func_kexit,
                    uentry: &p.func_uentry,
                    uexit: &p.func_uexit,
                    task_exit: &p.func_task_exit,
                }
            }

            fn maps(&self) -> Maps<'_> {
                let m = &self.maps;
                Maps {
                    hist: &m.func_hist,
                    stamps: &m.func_stamps,
                    alert_tat: &m.alert_tat,
                    alert_drops: &m.alert_drops,
                    alerts: &m.alerts,
                    alerts_perf: &m.alerts_perf,
                }
            }
        }
    };
}

impl_loaded!(FuncSkel);
impl_loaded!(FuncNobtfSkel);

/// The shared half: one loaded object, its readers and the alert feed.
/// Field order is drop order: the feed thread stops before the maps go.
struct FuncSet {
    alerts: std::cell::RefCell<Alerts>,
    hist: std::cell::RefCell<PerCpuHist>,
    use_ringbuf: bool,
    btf_mode: BtfMode,
    _exit_link: Option<Link>,
    skel: Box<dyn Loaded>,
}

/// One kfunc/ufunc probe of the set.
pub struct Func {
    info: ProbeInfo,
    id: u32,
    /// `[return, entry]`; Drop detaches the entry first.
    links: Vec<Link>,
    /// fentry only: this probe's own copy of the programs.
    _own: Option<Owned<FuncSkel<'static>>>,
    set: Rc<FuncSet>,
}

impl Drop for Func {
    fn drop(&mut self) {
        while let Some(link) = self.links.pop() {
            drop(link);
        }
    }
}

/// Open, load and attach all kfunc/ufunc specs; one result per spec.
pub fn open_set(specs: &[&ProbeSpec]) -> Vec<Result<Box<dyn Probe>, ProbeError>> {
    let n = specs.len().min(MAX_FUNC_PROBES);
    let mut out: Vec<Result<Box<dyn Probe>, ProbeError>> = Vec::with_capacity(specs.len());
    let served = &specs[..n];
    match load_set(served) {
        Err(why) => {
            for spec in served {
                out.push(Err(ProbeError::KernelFeature { probe: spec.name.clone(), what: why.to_string() }));
            }
        }
        Ok(set) => {
            let set = Rc::new(set);
            for (id, spec) in served.iter().enumerate() {
                out.push(attach(&set, served, id as u32, spec).map(|p| Box::new(p) as Box<dyn Probe>));
            }
        }
    }
    for spec in &specs[n..] {
        out.push(Err(ProbeError::TooMany {
            probe: spec.name.clone(),
            what: format!("at most {MAX_FUNC_PROBES} kfunc/ufunc probes per run (LATMON_MAX_FUNC_PROBES)"),
        }));
    }
    out
}

/// The build the set runs: CO-RE where kernel types are available (the
/// kernel's BTF or btf_path), the no-BTF build otherwise.
pub fn btf_mode() -> BtfMode {
    if super::common::kernel_btf_present() {
        BtfMode::CoRe
    } else {
        BtfMode::NoBtf
    }
}

fn load_set(specs: &[&ProbeSpec]) -> Result<FuncSet, LoadError> {
    let btf_mode = btf_mode();
    let use_ringbuf = want_ringbuf();
    let cfg = SetConfig { specs, use_ringbuf };
    let any_kfunc = specs.iter().any(|s| matches!(s.kind, ProbeKind::Kfunc(_)));
    let any_ufunc = specs.iter().any(|s| matches!(s.kind, ProbeKind::Ufunc { .. }));
    // fentry/fexit load in per-probe copies (attach_fentry), never here.
    let wanted = |name: &str| match name {
        "func_kentry" | "func_kexit" => any_kfunc,
        "func_uentry" | "func_uexit" => any_ufunc,
        "func_task_exit" => true,
        _ => false,
    };
    clear_libbpf_warning();
    let skel = match btf_mode {
        BtfMode::CoRe => load_build(|storage| open_core(storage, &cfg, 0), &wanted)?,
        BtfMode::NoBtf => {
            log::info!(
                "func: {}: kfunc/ufunc probes run the no-BTF build (kprobe, uprobe)",
                super::common::no_btf_reason()
            );
            load_build(|storage| open_nobtf(storage, &cfg, 0), &wanted)?
        }
    };
    // Threads exiting inside a traced function: their stamps are dropped
    // (and counted) here. Without it they stay until the map fills.
    let exit_link = skel.progs().task_exit.attach();
    if let Err(e) = &exit_link {
        log::warn!("func: {}", libbpf_error("attach raw_tp/sched_process_exit (stamps of exiting threads leak)", e));
    }
    let maps = skel.maps();
    let hist = PerCpuHist::new(maps.hist).map_err(LoadError::from)?;
    let alert_maps = AlertMaps { drops: maps.alert_drops, ring: maps.alerts, perf: maps.alerts_perf };
    // Record ids are positions among the specs.
    let ids = Some(specs.len());
    let alerts = Alerts::new(alert_maps, specs.iter().any(|s| threshold_ns(s) > 0), use_ringbuf, ids, decode_alert)
        .map_err(LoadError::from)?;
    let set =
        FuncSet { alerts: alerts.into(), hist: hist.into(), use_ringbuf, btf_mode, _exit_link: exit_link.ok(), skel };
    Ok(set)
}

fn attach(set: &Rc<FuncSet>, specs: &[&ProbeSpec], id: u32, spec: &ProbeSpec) -> Result<Func, ProbeError> {
    let probe = spec.name.clone();
    let (links, own, mech) = match &spec.kind {
        ProbeKind::Kfunc(func) => {
            let res = ladder(&probe, &spec.ladder(), |mech| match mech {
                Mechanism::Fentry if set.btf_mode == BtfMode::NoBtf => {
                    Err(LoadError::NoBtf("needs the kernel's BTF; the func probes run the no-BTF build here".into()))
                }
                Mechanism::Fentry => attach_fentry(set, specs, id, func)
                    .map(|(own, links)| (links, Some(own)))
                    .map_err(|e| explain(mech, func, e)),
                _ => attach_kprobe(set, id, func).map(|links| (links, None)).map_err(|e| explain(mech, func, e)),
            });
            match res {
                Ok(((links, own), mech)) => (links, own, mech),
                Err(e) => {
                    return Err(match kernel_function_known(func) {
                        Some(false) => ProbeError::Target {
                            probe,
                            what: format!("kernel function {func} does not exist (not in /proc/kallsyms)"),
                        },
                        _ => e,
                    })
                }
            }
        }
        ProbeKind::Ufunc { binary, symbol } => {
            check_binary(binary).map_err(|e| ProbeError::Target { probe: probe.clone(), what: e.to_string() })?;
            let pid = spec.pid.map_or(-1, |p| p as i32);
            let res = ladder(&probe, &spec.ladder(), |_| attach_uprobe(set, id, binary, symbol, pid));
            match res {
                Ok((links, mech)) => (links, None, mech),
                Err(ProbeError::Attach { tried, .. }) if tried.iter().any(|(_, why)| symbol_missing(why)) => {
                    return Err(ProbeError::Target {
                        probe,
                        what: format!("symbol {symbol} not found in {binary} (no such function in its symbol tables)"),
                    })
                }
                Err(e) => return Err(e),
            }
        }
        other => return Err(ProbeError::Unsupported { probe, kind: other.family() }),
    };
    let pairing = match mech {
        Mechanism::Uprobe => "uprobe/uretprobe, frames paired by stack pointer",
        Mechanism::Kprobe => "kprobe/kretprobe, nested calls paired in order",
        _ => "fentry/fexit, nested calls paired in order",
    };
    let mode = pairing.to_string() + &super::common::alert_mode(threshold_ns(spec), set.use_ringbuf);
    Ok(Func {
        info: ProbeInfo {
            name: probe,
            kind: spec.kind.family(),
            attach: mech,
            mode,
            btf_mode: set.btf_mode,
            wait: Default::default(),
        },
        id,
        links,
        _own: own,
        set: Rc::clone(set),
    })
}

/// A copy of the CO-RE object with only fentry/fexit, bound to `func` at
/// load, every map shared with the set (which runs the CO-RE build too).
fn attach_fentry(
    set: &FuncSet,
    specs: &[&ProbeSpec],
    id: u32,
    func: &str,
) -> Result<(Owned<FuncSkel<'static>>, Vec<Link>), LoadError> {
    let cfg = SetConfig { specs, use_ringbuf: set.use_ringbuf };
    let shared = set.skel.maps();
    let own = Owned::new(|storage: &'static mut MaybeUninit<OpenObject>| -> Result<FuncSkel<'static>, LoadError> {
        let mut open = open_core(storage, &cfg, id)?;
        for mut prog in open.open_object_mut().progs_mut() {
            let name = prog.name().to_string_lossy().into_owned();
            prog.set_autoload(name == "func_fentry" || name == "func_fexit");
        }
        let target = |p: &mut libbpf_rs::OpenProgramMut<'_>| {
            p.set_attach_target(0, Some(func.to_string())).map_err(|e| libbpf_error("attach target", &e))
        };
        target(&mut open.progs.func_fentry)?;
        target(&mut open.progs.func_fexit)?;
        let m = &mut open.maps;
        let reuse = |name: &str, m: &mut libbpf_rs::OpenMapMut<'_>, fd: std::os::fd::BorrowedFd<'_>| {
            m.reuse_fd(fd).map_err(|e| libbpf_error(&format!("share map {name}"), &e))
        };
        reuse("func_hist", &mut m.func_hist, shared.hist.as_fd())?;
        reuse("func_stamps", &mut m.func_stamps, shared.stamps.as_fd())?;
        reuse("alert_tat", &mut m.alert_tat, shared.alert_tat.as_fd())?;
        reuse("alert_drops", &mut m.alert_drops, shared.alert_drops.as_fd())?;
        if set.use_ringbuf {
            reuse("alerts", &mut m.alerts, shared.alerts.as_fd())?;
        } else {
            reuse("alerts_perf", &mut m.alerts_perf, shared.alerts_perf.as_fd())?;
        }
        open.load().map_err(|e| libbpf_error("load", &e))
    })?;
    let exit = own.progs.func_fexit.attach_trace().map_err(|e| libbpf_error("attach fexit", &e))?;
    let entry = own.progs.func_fentry.attach_trace().map_err(|e| libbpf_error("attach fentry", &e))?;
    Ok((own, vec![exit, entry]))
}

fn attach_kprobe(set: &FuncSet, id: u32, func: &str) -> Result<Vec<Link>, LoadError> {
    let opts = || KprobeOpts { cookie: u64::from(id), ..Default::default() };
    let progs = set.skel.progs();
    let exit =
        progs.kexit.attach_kprobe_with_opts(true, func, opts()).map_err(|e| libbpf_error("attach kretprobe", &e))?;
    let entry =
        progs.kentry.attach_kprobe_with_opts(false, func, opts()).map_err(|e| libbpf_error("attach kprobe", &e))?;
    Ok(vec![exit, entry])
}

fn attach_uprobe(set: &FuncSet, id: u32, binary: &str, symbol: &str, pid: i32) -> Result<Vec<Link>, LoadError> {
    let opts = |retprobe| UprobeOpts {
        cookie: u64::from(id),
        retprobe,
        func_name: Some(symbol.to_string()),
        ..Default::default()
    };
    let progs = set.skel.progs();
    let exit = progs
        .uexit
        .attach_uprobe_with_opts(pid, binary, 0, opts(true))
        .map_err(|e| libbpf_error("attach uretprobe", &e))?;
    let entry = progs
        .uentry
        .attach_uprobe_with_opts(pid, binary, 0, opts(false))
        .map_err(|e| libbpf_error("attach uprobe", &e))?;
    Ok(vec![exit, entry])
}

/// The usual kfunc failures in words; libbpf's own line stays in the
/// debug log (-vv). Anything else is reported as libbpf said it.
fn explain(mech: Mechanism, func: &str, raw: LoadError) -> LoadError {
    let text = raw.to_string();
    let has = |errno: &str, text_: &str| text.contains(errno) || text.contains(text_);
    match mech {
        Mechanism::Fentry if has("-EPERM", "Operation not permitted") => {
            LoadError::Refused("the kernel refuses fentry/fexit programs here (EPERM at load)".into())
        }
        Mechanism::Fentry if has("-ESRCH", "No such process") => LoadError::Refused(format!(
            "no BTF for {func} (ESRCH): the function is inlined, static or not in the kernel's BTF"
        )),
        Mechanism::Kprobe if has("-ENOENT", "No such file or directory") => LoadError::Refused(format!(
            "no kprobe on {func} (ENOENT): kernel built without CONFIG_KPROBES, or {func} cannot be probed"
        )),
        _ => raw,
    }
}

/// Whether /proc/kallsyms lists `func` (None: cannot tell).
fn kernel_function_known(func: &str) -> Option<bool> {
    let syms = std::fs::read_to_string("/proc/kallsyms").ok()?;
    Some(syms.lines().any(|l| {
        let mut f = l.split_whitespace();
        let (_addr, kind, name) = (f.next(), f.next(), f.next());
        matches!(kind, Some("T" | "t" | "W" | "w")) && name == Some(func)
    }))
}

impl Probe for Func {
    fn info(&self) -> &ProbeInfo {
        &self.info
    }

    fn read(&mut self, out: &mut Hist) -> Result<(), ProbeError> {
        let (set, id) = (&self.set, self.id);
        set.alerts
            .borrow_mut()
            .read(id, out, |o| set.hist.borrow_mut().read(id, o))
            .map_err(|why| ProbeError::Read { probe: self.info.name.clone(), why })
    }

    fn drain_alerts(&mut self, out: &mut Vec<AlertRecord>) {
        self.set.alerts.borrow().drain(self.id, out);
    }

    fn flush_alerts(&mut self) {
        self.set.alerts.borrow().flush();
    }

    fn bpf_programs(&self) -> Vec<RawFd> {
        let fd = |p: &libbpf_rs::ProgramMut<'_>| p.as_fd().as_raw_fd();
        let mut fds = match (&self._own, self.info.attach) {
            // fentry: this probe's own copy, exact.
            (Some(own), _) => vec![fd(&own.progs.func_fentry), fd(&own.progs.func_fexit)],
            // kprobe/uprobe: the set's programs, shared by its probes of
            // that kind (the cookie tells them apart).
            (None, Mechanism::Kprobe) => {
                let p = self.set.skel.progs();
                vec![fd(p.kentry), fd(p.kexit)]
            }
            (None, _) => {
                let p = self.set.skel.progs();
                vec![fd(p.uentry), fd(p.uexit)]
            }
        };
        if self.set._exit_link.is_some() {
            // Stamp cleanup at thread exit, shared by every probe of the set.
            fds.push(fd(self.set.skel.progs().task_exit));
        }
        fds
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn libbpf(step: &str, err: &str, warning: &str) -> LoadError {
        LoadError::Libbpf { step: step.into(), err: err.into(), warning: warning.into() }
    }

    #[test]
    fn kfunc_failures_are_put_in_words() {
        let e = explain(Mechanism::Fentry, "f", libbpf("load", "Operation not permitted (os error 1)", "... -EPERM"));
        assert_eq!(e.to_string(), "the kernel refuses fentry/fexit programs here (EPERM at load)");
        let e = explain(Mechanism::Kprobe, "f", libbpf("attach kretprobe", "failed", "... perf event: -ENOENT"));
        assert!(e.to_string().starts_with("no kprobe on f (ENOENT)"), "{e}");
        assert!(explain(Mechanism::Fentry, "f", libbpf("load", "-ESRCH", "")).to_string().contains("no BTF for f"));
        let other = libbpf("load", "something else", "");
        assert_eq!(explain(Mechanism::Kprobe, "f", other.clone()), other);
    }

    #[test]
    fn a_missing_symbol_is_recognised_in_libbpf_words_only() {
        assert!(symbol_missing(&libbpf("attach uprobe", "failed", "elf: failed to find symbol 'x' in '/bin/true'")));
        assert!(symbol_missing(&libbpf("attach uprobe", "symbol 'x' is 0 in symtab", "")));
        assert!(!symbol_missing(&libbpf("attach uprobe", "Permission denied", "")));
        assert!(!symbol_missing(&LoadError::Target("failed to find symbol".into())));
    }
}
