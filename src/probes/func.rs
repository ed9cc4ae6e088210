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
//! types of the build that runs (`func_build!`).
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

use std::collections::VecDeque;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{
    KprobeOpts, Link, MapCore, MapHandle, MapMut, OpenObject, PerfBufferBuilder, ProgramMut, RingBufferBuilder,
    UprobeOpts,
};

use super::{clear_libbpf_warning, ladder, libbpf_error, BtfMode, Owned, PerCpuHist, Probe, ProbeError, ReadHist};
use crate::bpf::limits::{ALERT_PERF_PAGES, ALERT_QUEUE, COMM_LEN, MAX_FUNC_PROBES};
use crate::config::{ProbeKind, ProbeSpec};
use crate::hist::Hist;
use crate::summary::{fmt_ns, AlertRecord, ProbeInfo};

/// The record layout user space decodes must be the one in latmon.h.
const ALERT_RECORD_BYTES: usize = 8 + 8 + 4 * 4 + COMM_LEN;

/// How long the alert reader waits in the kernel before re-checking its
/// stop flag (records wake it at once; this only bounds shutdown).
const ALERT_POLL: Duration = Duration::from_millis(100);

/// Environment override of the alert transport, for tests and for kernels
/// whose ring buffer is present but unwanted: `ringbuf` or `perf`.
pub const ALERT_BUFFER_ENV: &str = "LATMON_ALERT_BUFFER";

/// What every copy of the object is configured with before load.
struct SetConfig<'a> {
    specs: &'a [&'a ProbeSpec],
    use_ringbuf: bool,
}

fn threshold_ns(spec: &ProbeSpec) -> u64 {
    spec.threshold.map_or(0, |t| u64::try_from(t.as_nanos()).unwrap_or(u64::MAX))
}

fn want_ringbuf() -> bool {
    match std::env::var(ALERT_BUFFER_ENV).as_deref() {
        Ok("perf") => false,
        Ok("ringbuf") => true,
        _ => super::features::try_ringbuf().is_ok(),
    }
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

/// Reads of one build's maps through that build's generated types.
struct Readers {
    hist: Box<dyn ReadHist>,
    alert_drops: Box<dyn ReadDrops>,
    decode_alert: DecodeAlert,
}

/// A loaded func object, whichever build.
trait Loaded {
    fn progs(&self) -> Progs<'_>;
    fn maps(&self) -> Maps<'_>;
    fn readers(&self) -> Result<Readers, String>;
}

/// A generated `struct latmon_alert_drops`.
trait RawAlertDrops: plain::Plain + Default {
    fn total(&self) -> u64;
}

trait ReadDrops {
    /// Alert records dropped in the kernel for probe `key`, all CPUs.
    fn total(&mut self, key: u32) -> Result<u64, String>;
}

impl<T: RawAlertDrops> ReadDrops for PerCpuArray<T> {
    fn total(&mut self, key: u32) -> Result<u64, String> {
        let mut n = 0;
        self.read(key, |d| n += d.total())?;
        Ok(n)
    }
}

/// A generated `struct latmon_alert`, as the summary's record.
trait RawAlert: plain::Plain + Default {
    fn probe_id(&self) -> u32;
    fn record(&self, probe: String) -> AlertRecord;
}

/// Decodes one alert record (`decode_alert::<the build's latmon_alert>`).
type DecodeAlert = fn(&[u8], &[String]) -> Option<(usize, AlertRecord)>;

/// What differs between the two builds of func.bpf.c: the generated
/// skeleton and types. One instance per build; each gives the rest of this
/// file a `Loaded` object and readers typed by its own skeleton.
macro_rules! func_build {
    ($build:ident, $skel:ident, $Skel:ident, $Builder:ident, $Open:ident) => {
        mod $build {
            use super::*;
            use crate::bpf::$skel::{types, $Builder, $Open, $Skel};

            pub(super) type Skel = $Skel<'static>;

            // SAFETY: #[repr(C)] structs of integers generated from
            // bpf/latmon.h; every bit pattern is valid.
            unsafe impl plain::Plain for types::latmon_alert {}
            unsafe impl plain::Plain for types::latmon_alert_drops {}
            const _: () = assert!(size_of::<types::latmon_alert>() == ALERT_RECORD_BYTES);
            const _: () = assert!(size_of::<types::latmon_alert_drops>() == 16);

            impl RawAlertDrops for types::latmon_alert_drops {
                fn total(&self) -> u64 {
                    self.rate_limited + self.buffer_full
                }
            }

            impl RawAlert for types::latmon_alert {
                fn probe_id(&self) -> u32 {
                    self.probe_id
                }
                fn record(&self, probe: String) -> AlertRecord {
                    let comm: Vec<u8> = self.comm.iter().map(|&c| c as u8).take_while(|&c| c != 0).collect();
                    AlertRecord {
                        probe,
                        pid: self.pid,
                        tid: self.tid,
                        comm: String::from_utf8_lossy(&comm).into_owned(),
                        cpu: self.cpu,
                        latency_ns: self.latency_ns,
                        time_ns: self.time_ns,
                    }
                }
            }

            /// Open a copy of the object and set its rodata (filters,
            /// thresholds, probe count) and alert transport.
            pub(super) fn open(
                storage: &'static mut MaybeUninit<OpenObject>,
                cfg: &SetConfig<'_>,
                fentry_probe_id: u32,
            ) -> Result<$Open<'static>, String> {
                let mut open = $Builder::default()
                    .open_opts(super::super::open_opts(), storage)
                    .map_err(|e| libbpf_error("open func", &e))?;
                let ro = open.maps.rodata_data.as_deref_mut().ok_or("func object has no rodata")?;
                ro.nr_probes = cfg.specs.len() as u32;
                ro.fentry_probe_id = fentry_probe_id;
                ro.use_ringbuf = cfg.use_ringbuf;
                for (id, spec) in cfg.specs.iter().enumerate() {
                    ro.filter_tgid[id] = spec.pid.unwrap_or(0);
                    if let Some(comm) = &spec.comm {
                        for (d, s) in ro.filter_comm[id].iter_mut().zip(comm.bytes()) {
                            *d = s as i8;
                        }
                    }
                    ro.threshold_ns[id] = threshold_ns(spec);
                }
                let unused =
                    if cfg.use_ringbuf { &mut open.maps.func_alerts_perf } else { &mut open.maps.func_alerts };
                unused.set_autocreate(false).map_err(|e| libbpf_error("alert buffer", &e))?;
                Ok(open)
            }

            /// The set's object: loaded with the programs `wanted` says.
            pub(super) fn load(cfg: &SetConfig<'_>, wanted: &dyn Fn(&str) -> bool) -> Result<Box<dyn Loaded>, String> {
                let skel = Owned::new(|storage: &'static mut MaybeUninit<OpenObject>| -> Result<Skel, String> {
                    let mut open = open(storage, cfg, 0)?;
                    for mut prog in open.open_object_mut().progs_mut() {
                        let name = prog.name().to_string_lossy().into_owned();
                        prog.set_autoload(wanted(&name));
                    }
                    open.load().map_err(|e| libbpf_error("load func", &e))
                })?;
                Ok(Box::new(skel))
            }

            impl Loaded for Owned<Skel> {
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
                        alert_tat: &m.func_alert_tat,
                        alert_drops: &m.func_alert_drops,
                        alerts: &m.func_alerts,
                        alerts_perf: &m.func_alerts_perf,
                    }
                }

                fn readers(&self) -> Result<Readers, String> {
                    Ok(Readers {
                        hist: Box::new(PerCpuHist::<types::latmon_hist>::new(&self.maps.func_hist)?),
                        alert_drops: Box::new(PerCpuArray::<types::latmon_alert_drops>::new(
                            &self.maps.func_alert_drops,
                        )?),
                        decode_alert: decode_alert::<types::latmon_alert>,
                    })
                }
            }
        }
    };
}

func_build!(core_build, func, FuncSkel, FuncSkelBuilder, OpenFuncSkel);
func_build!(nobtf_build, func_nobtf, FuncNobtfSkel, FuncNobtfSkelBuilder, OpenFuncNobtfSkel);

/// The shared half: one loaded object, its readers and the alert feed.
/// Field order is drop order: the feed thread stops before the maps go.
struct FuncSet {
    alerts: Option<AlertFeed>,
    hist: std::cell::RefCell<Box<dyn ReadHist>>,
    alert_drops: std::cell::RefCell<Box<dyn ReadDrops>>,
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
    _own: Option<Owned<core_build::Skel>>,
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
                out.push(Err(ProbeError::KernelFeature { probe: spec.name.clone(), what: why.clone() }));
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
    if super::kernel_btf_present() {
        BtfMode::CoRe
    } else {
        BtfMode::NoBtf
    }
}

fn load_set(specs: &[&ProbeSpec]) -> Result<FuncSet, String> {
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
        BtfMode::CoRe => core_build::load(&cfg, &wanted)?,
        BtfMode::NoBtf => {
            log::info!("func: {}: kfunc/ufunc probes run the no-BTF build (kprobe, uprobe)", super::no_btf_reason());
            nobtf_build::load(&cfg, &wanted)?
        }
    };
    // Threads exiting inside a traced function: their stamps are dropped
    // (and counted) here. Without it they stay until the map fills.
    let exit_link = skel.progs().task_exit.attach();
    if let Err(e) = &exit_link {
        log::warn!("func: {}", libbpf_error("attach raw_tp/sched_process_exit (stamps of exiting threads leak)", e));
    }
    let readers = skel.readers()?;
    let alerts = if specs.iter().any(|s| threshold_ns(s) > 0) {
        let maps = skel.maps();
        let map = if use_ringbuf { maps.alerts } else { maps.alerts_perf };
        let handle = MapHandle::try_from(map).map_err(|e| libbpf_error("alert buffer", &e))?;
        let names = specs.iter().map(|s| s.name.clone()).collect();
        Some(AlertFeed::spawn(handle, use_ringbuf, names, readers.decode_alert)?)
    } else {
        None
    };
    let set = FuncSet {
        alerts,
        hist: readers.hist.into(),
        alert_drops: readers.alert_drops.into(),
        use_ringbuf,
        btf_mode,
        _exit_link: exit_link.ok(),
        skel,
    };
    Ok(set)
}

fn attach(set: &Rc<FuncSet>, specs: &[&ProbeSpec], id: u32, spec: &ProbeSpec) -> Result<Func, ProbeError> {
    let probe = spec.name.clone();
    let (links, own, mech) = match &spec.kind {
        ProbeKind::Kfunc(func) => {
            let res = ladder(&probe, &spec.ladder(), |mech| match mech {
                "fentry" if set.btf_mode == BtfMode::NoBtf => {
                    Err("needs the kernel's BTF; the func probes run the no-BTF build here".to_string())
                }
                "fentry" => attach_fentry(set, specs, id, func)
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
            check_binary(binary).map_err(|what| ProbeError::Target { probe: probe.clone(), what })?;
            let pid = spec.pid.map_or(-1, |p| p as i32);
            let res = ladder(&probe, &spec.ladder(), |_| attach_uprobe(set, id, binary, symbol, pid));
            match res {
                Ok((links, mech)) => (links, None, mech),
                Err(ProbeError::Attach { tried, .. })
                    if tried.iter().any(|(_, why)| why.contains("failed to find symbol") || why.contains("is 0 in symtab")) =>
                {
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
        "uprobe" => "uprobe/uretprobe, frames paired by stack pointer",
        "kprobe" => "kprobe/kretprobe, nested calls paired in order",
        _ => "fentry/fexit, nested calls paired in order",
    };
    let mut mode = pairing.to_string();
    let thr = threshold_ns(spec);
    if thr > 0 {
        mode += &format!(", alerts above {} via {}", fmt_ns(thr), if set.use_ringbuf { "ringbuf" } else { "perf buffer" });
    }
    Ok(Func {
        info: ProbeInfo {
            name: probe,
            kind: spec.kind.family().into(),
            attach: mech.into(),
            mode,
            btf_mode: set.btf_mode.as_str().into(),
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
) -> Result<(Owned<core_build::Skel>, Vec<Link>), String> {
    let cfg = SetConfig { specs, use_ringbuf: set.use_ringbuf };
    let shared = set.skel.maps();
    let own = Owned::new(|storage: &'static mut MaybeUninit<OpenObject>| -> Result<core_build::Skel, String> {
        let mut open = core_build::open(storage, &cfg, id)?;
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
        reuse("func_alert_tat", &mut m.func_alert_tat, shared.alert_tat.as_fd())?;
        reuse("func_alert_drops", &mut m.func_alert_drops, shared.alert_drops.as_fd())?;
        if set.use_ringbuf {
            reuse("func_alerts", &mut m.func_alerts, shared.alerts.as_fd())?;
        } else {
            reuse("func_alerts_perf", &mut m.func_alerts_perf, shared.alerts_perf.as_fd())?;
        }
        open.load().map_err(|e| libbpf_error("load", &e))
    })?;
    let exit = own.progs.func_fexit.attach_trace().map_err(|e| libbpf_error("attach fexit", &e))?;
    let entry = own.progs.func_fentry.attach_trace().map_err(|e| libbpf_error("attach fentry", &e))?;
    Ok((own, vec![exit, entry]))
}

fn attach_kprobe(set: &FuncSet, id: u32, func: &str) -> Result<Vec<Link>, String> {
    let opts = || KprobeOpts { cookie: u64::from(id), ..Default::default() };
    let progs = set.skel.progs();
    let exit = progs
        .kexit
        .attach_kprobe_with_opts(true, func, opts())
        .map_err(|e| libbpf_error("attach kretprobe", &e))?;
    let entry = progs
        .kentry
        .attach_kprobe_with_opts(false, func, opts())
        .map_err(|e| libbpf_error("attach kprobe", &e))?;
    Ok(vec![exit, entry])
}

fn attach_uprobe(set: &FuncSet, id: u32, binary: &str, symbol: &str, pid: i32) -> Result<Vec<Link>, String> {
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
fn explain(mech: &str, func: &str, raw: String) -> String {
    let has = |errno: &str, text: &str| raw.contains(errno) || raw.contains(text);
    match mech {
        "fentry" if has("-EPERM", "Operation not permitted") => {
            "the kernel refuses fentry/fexit programs here (EPERM at load)".into()
        }
        "fentry" if has("-ESRCH", "No such process") => {
            format!("no BTF for {func} (ESRCH): the function is inlined, static or not in the kernel's BTF")
        }
        "kprobe" if has("-ENOENT", "No such file or directory") => format!(
            "no kprobe on {func} (ENOENT): kernel built without CONFIG_KPROBES, or {func} cannot be probed"
        ),
        _ => raw,
    }
}

/// A readable regular file, or why not, naming it.
fn check_binary(binary: &str) -> Result<(), String> {
    match std::fs::metadata(binary) {
        Ok(m) if m.is_file() => Ok(()),
        Ok(_) => Err(format!("binary {binary} is not a regular file")),
        Err(e) => Err(format!("binary {binary}: {e}")),
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
        let err = |why| ProbeError::Read { probe: self.info.name.clone(), why };
        self.set.hist.borrow_mut().read(self.id, out).map_err(err)?;
        let mut dropped = self.set.alert_drops.borrow_mut().total(self.id).map_err(err)?;
        if let Some(feed) = &self.set.alerts {
            dropped += feed.queue_dropped(self.id);
        }
        out.alerts_dropped = dropped;
        Ok(())
    }

    fn drain_alerts(&mut self, out: &mut Vec<AlertRecord>) {
        if let Some(feed) = &self.set.alerts {
            feed.drain(self.id, out);
        }
    }

    fn bpf_programs(&self) -> Vec<RawFd> {
        let fd = |p: &libbpf_rs::ProgramMut<'_>| p.as_fd().as_raw_fd();
        let mut fds = match (&self._own, self.info.attach.as_str()) {
            // fentry: this probe's own copy, exact.
            (Some(own), _) => vec![fd(&own.progs.func_fentry), fd(&own.progs.func_fexit)],
            // kprobe/uprobe: the set's programs, shared by its probes of
            // that kind (the cookie tells them apart).
            (None, "kprobe") => {
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

/// Reads one key of a per-CPU array map of `T`, visiting each CPU's value.
struct PerCpuArray<T> {
    fd: RawFd,
    buf: Vec<u8>,
    stride: usize,
    _t: std::marker::PhantomData<T>,
}

impl<T: plain::Plain + Default> PerCpuArray<T> {
    fn new(map: &dyn MapCore) -> Result<Self, String> {
        let ncpus = libbpf_rs::num_possible_cpus().map_err(|e| e.to_string())?;
        if map.value_size() as usize != size_of::<T>() {
            return Err(format!("map value is {} bytes, expected {}", map.value_size(), size_of::<T>()));
        }
        let stride = size_of::<T>().next_multiple_of(8);
        Ok(PerCpuArray { fd: map.as_fd().as_raw_fd(), buf: vec![0; stride * ncpus], stride, _t: Default::default() })
    }

    fn read(&mut self, key: u32, mut each: impl FnMut(&T)) -> Result<(), String> {
        // SAFETY: buf holds stride * possible-CPUs bytes, as the kernel writes.
        let rc = unsafe {
            libbpf_rs::libbpf_sys::bpf_map_lookup_elem(self.fd, (&key as *const u32).cast(), self.buf.as_mut_ptr().cast())
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error().to_string());
        }
        let mut v = T::default();
        for chunk in self.buf.chunks_exact(self.stride) {
            plain::copy_from_bytes(&mut v, &chunk[..size_of::<T>()]).map_err(|e| format!("{e:?}"))?;
            each(&v);
        }
        Ok(())
    }
}

/// Alert records waiting for the agent, per probe id; bounded in total.
#[derive(Default)]
struct AlertQueue {
    per_probe: Vec<VecDeque<AlertRecord>>,
    held: usize,
    /// Records dropped because the agent had not drained the queue.
    dropped: Vec<u64>,
    /// Records that could not be decoded (wrong size, unknown probe id).
    bad: u64,
}

/// The alert reader thread and its queue.
struct AlertFeed {
    queue: Arc<Mutex<AlertQueue>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl AlertFeed {
    fn spawn(map: MapHandle, ringbuf: bool, names: Vec<String>, decode: DecodeAlert) -> Result<Self, String> {
        let n = names.len();
        let queue = Arc::new(Mutex::new(AlertQueue {
            per_probe: vec![VecDeque::new(); n],
            dropped: vec![0; n],
            ..Default::default()
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::sync_channel::<Result<(), String>>(1);
        let (q, st) = (Arc::clone(&queue), Arc::clone(&stop));
        let thread = std::thread::Builder::new()
            .name("latmon-alerts".into())
            .spawn(move || {
                let push = move |data: &[u8]| push_record(&q, &names, decode, data);
                if ringbuf {
                    let mut b = RingBufferBuilder::new();
                    let built = b
                        .add(&map, move |d: &[u8]| {
                            push(d);
                            0
                        })
                        .map(|_| ())
                        .and_then(|()| b.build());
                    let rb = match built {
                        Ok(rb) => rb,
                        Err(e) => {
                            let _ = ready_tx.send(Err(libbpf_error("ring buffer", &e)));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok(()));
                    while !st.load(Ordering::Relaxed) {
                        let _ = rb.poll(ALERT_POLL);
                    }
                    let _ = rb.consume();
                } else {
                    let built = PerfBufferBuilder::new(&map)
                        .pages(ALERT_PERF_PAGES)
                        .sample_cb(move |_cpu, d: &[u8]| push(d))
                        .lost_cb(|cpu, n| log::warn!("func: perf buffer lost {n} alert records on CPU {cpu}"))
                        .build();
                    let pb = match built {
                        Ok(pb) => pb,
                        Err(e) => {
                            let _ = ready_tx.send(Err(libbpf_error("perf buffer", &e)));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok(()));
                    while !st.load(Ordering::Relaxed) {
                        let _ = pb.poll(ALERT_POLL);
                    }
                    let _ = pb.consume();
                }
            })
            .map_err(|e| format!("spawn alert reader: {e}"))?;
        let feed = AlertFeed { queue, stop, thread: Some(thread) };
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(feed),
            Ok(Err(e)) => Err(e),
            Err(_) => Err("alert reader thread ended early".into()),
        }
    }

    fn drain(&self, id: u32, out: &mut Vec<AlertRecord>) {
        let Ok(mut q) = self.queue.lock() else { return };
        if q.bad > 0 {
            log::warn!("func: {} undecodable alert records skipped", q.bad);
            q.bad = 0;
        }
        let Some(records) = q.per_probe.get_mut(id as usize) else { return };
        let n = records.len();
        out.extend(records.drain(..));
        q.held -= n;
    }

    fn queue_dropped(&self, id: u32) -> u64 {
        self.queue.lock().ok().and_then(|q| q.dropped.get(id as usize).copied()).unwrap_or(0)
    }
}

impl Drop for AlertFeed {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Decode one record (never panics on kernel data) and queue it.
fn push_record(queue: &Mutex<AlertQueue>, names: &[String], decode: DecodeAlert, data: &[u8]) {
    let Ok(mut q) = queue.lock() else { return };
    let Some((id, rec)) = decode(data, names) else {
        q.bad += 1;
        return;
    };
    if q.held >= ALERT_QUEUE {
        q.dropped[id] += 1;
        return;
    }
    q.per_probe[id].push_back(rec);
    q.held += 1;
}

/// A kernel alert record, read through the generated type `T` of the
/// build that wrote it, as the summary's `AlertRecord` (lossy UTF-8 comm).
fn decode_alert<T: RawAlert>(data: &[u8], names: &[String]) -> Option<(usize, AlertRecord)> {
    let mut raw = T::default();
    // Perf buffer samples may carry trailing padding; never less.
    plain::copy_from_bytes(&mut raw, data.get(..ALERT_RECORD_BYTES)?).ok()?;
    let id = raw.probe_id() as usize;
    let probe = names.get(id)?.clone();
    Some((id, raw.record(probe)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::func::types;

    fn decode(data: &[u8], names: &[String]) -> Option<(usize, AlertRecord)> {
        decode_alert::<types::latmon_alert>(data, names)
    }

    fn raw(id: u32, comm: &[u8]) -> Vec<u8> {
        let mut a = types::latmon_alert {
            time_ns: 5,
            latency_ns: 2_000_000,
            probe_id: id,
            pid: 7,
            tid: 8,
            cpu: 1,
            ..Default::default()
        };
        for (d, s) in a.comm.iter_mut().zip(comm) {
            *d = *s as i8;
        }
        // SAFETY: Plain struct viewed as bytes.
        unsafe { plain::as_bytes(&a) }.to_vec()
    }

    #[test]
    fn alert_records_decode_with_lossy_comm_and_never_panic() {
        let names = vec!["a".to_string(), "b".to_string()];
        let (id, r) = decode(&raw(1, b"ctrl\xffloop"), &names).unwrap();
        assert_eq!((id, r.probe.as_str(), r.pid, r.tid, r.cpu), (1, "b", 7, 8, 1));
        assert_eq!(r.comm, "ctrl\u{fffd}loop");
        assert_eq!(r.latency_ns, 2_000_000);
        // A full 16-byte comm without NUL stays within the array.
        assert_eq!(decode(&raw(0, b"0123456789abcdef"), &names).unwrap().1.comm, "0123456789abcdef");
        // Unknown probe id, short record: rejected, not a panic.
        assert!(decode(&raw(2, b"x"), &names).is_none());
        assert!(decode(&raw(0, b"x")[..20], &names).is_none());
        // Perf samples padded past the struct still decode.
        let mut padded = raw(0, b"x");
        padded.extend([0u8; 4]);
        assert!(decode(&padded, &names).is_some());
    }

    #[test]
    fn kfunc_failures_are_put_in_words() {
        let e = explain("fentry", "f", "load: Operation not permitted (os error 1) (libbpf: ... -EPERM)".into());
        assert_eq!(e, "the kernel refuses fentry/fexit programs here (EPERM at load)");
        let e = explain("kprobe", "f", "attach kretprobe: failed (libbpf: ... perf event: -ENOENT)".into());
        assert!(e.starts_with("no kprobe on f (ENOENT)"), "{e}");
        assert!(explain("fentry", "f", "load: -ESRCH".into()).contains("no BTF for f"));
        assert_eq!(explain("kprobe", "f", "something else".into()), "something else");
    }

    #[test]
    fn the_queue_is_bounded_and_counts_what_it_drops() {
        let names = vec!["a".to_string()];
        let q = Mutex::new(AlertQueue { per_probe: vec![VecDeque::new()], dropped: vec![0], ..Default::default() });
        for _ in 0..ALERT_QUEUE + 3 {
            push_record(&q, &names, decode, &raw(0, b"x"));
        }
        push_record(&q, &names, decode, b"short");
        let q = q.into_inner().unwrap();
        assert_eq!((q.held, q.dropped[0], q.bad), (ALERT_QUEUE, 3, 1));
    }
}
