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
//! Attach ladder, per probe:
//! - kfunc: fentry/fexit (a copy of the object holding just that pair,
//!   bound to the function at load, maps shared with the set), then
//!   kprobe/kretprobe (the set's programs, probe id in the BPF cookie).
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
use libbpf_rs::{KprobeOpts, Link, MapCore, MapHandle, OpenObject, PerfBufferBuilder, RingBufferBuilder, UprobeOpts};

use super::{clear_libbpf_warning, ladder, libbpf_error, Owned, PerCpuHist, Probe, ProbeError};
use crate::bpf::func::{types, FuncSkel, FuncSkelBuilder, OpenFuncSkel};
use crate::bpf::limits::{ALERT_PERF_PAGES, ALERT_QUEUE, COMM_LEN, MAX_FUNC_PROBES};
use crate::config::{ProbeKind, ProbeSpec};
use crate::hist::Hist;
use crate::summary::{fmt_ns, AlertRecord, ProbeInfo};

// SAFETY: #[repr(C)] structs of integers generated from bpf/latmon.h; every
// bit pattern is valid.
unsafe impl plain::Plain for types::latmon_alert {}
unsafe impl plain::Plain for types::latmon_alert_drops {}

/// The record layout user space decodes must be the one in latmon.h.
const ALERT_RECORD_BYTES: usize = 8 + 8 + 4 * 4 + COMM_LEN;
const _: () = assert!(size_of::<types::latmon_alert>() == ALERT_RECORD_BYTES);
const _: () = assert!(size_of::<types::latmon_alert_drops>() == 16);

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

/// Rodata (filters, thresholds, probe count) and the alert transport.
fn configure(open: &mut OpenFuncSkel<'_>, cfg: &SetConfig<'_>, fentry_probe_id: u32) -> Result<(), String> {
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
    let unused = if cfg.use_ringbuf { &mut open.maps.func_alerts_perf } else { &mut open.maps.func_alerts };
    unused.set_autocreate(false).map_err(|e| libbpf_error("alert buffer", &e))
}

fn want_ringbuf() -> bool {
    match std::env::var(ALERT_BUFFER_ENV).as_deref() {
        Ok("perf") => false,
        Ok("ringbuf") => true,
        _ => super::features::try_ringbuf().is_ok(),
    }
}

/// The shared half: one loaded object, its readers and the alert feed.
/// Field order is drop order: the feed thread stops before the maps go.
struct FuncSet {
    alerts: Option<AlertFeed>,
    hist: std::cell::RefCell<PerCpuHist<types::latmon_hist>>,
    alert_drops: std::cell::RefCell<PerCpuArray<types::latmon_alert_drops>>,
    use_ringbuf: bool,
    _exit_link: Option<Link>,
    skel: Owned<FuncSkel<'static>>,
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

fn load_set(specs: &[&ProbeSpec]) -> Result<FuncSet, String> {
    if !super::kernel_btf_present() {
        return Err("kernel has no BTF (/sys/kernel/btf/vmlinux missing); kfunc/ufunc need CO-RE".into());
    }
    let use_ringbuf = want_ringbuf();
    let cfg = SetConfig { specs, use_ringbuf };
    let any_kfunc = specs.iter().any(|s| matches!(s.kind, ProbeKind::Kfunc(_)));
    let any_ufunc = specs.iter().any(|s| matches!(s.kind, ProbeKind::Ufunc { .. }));
    clear_libbpf_warning();
    let skel = Owned::new(|storage: &'static mut MaybeUninit<OpenObject>| -> Result<FuncSkel<'static>, String> {
        let mut open = FuncSkelBuilder::default().open_opts(super::open_opts(), storage).map_err(|e| libbpf_error("open func", &e))?;
        configure(&mut open, &cfg, 0)?;
        open.progs.func_fentry.set_autoload(false);
        open.progs.func_fexit.set_autoload(false);
        open.progs.func_kentry.set_autoload(any_kfunc);
        open.progs.func_kexit.set_autoload(any_kfunc);
        open.progs.func_uentry.set_autoload(any_ufunc);
        open.progs.func_uexit.set_autoload(any_ufunc);
        open.load().map_err(|e| libbpf_error("load func", &e))
    })?;
    // Threads exiting inside a traced function: their stamps are dropped
    // (and counted) here. Without it they stay until the map fills.
    let exit_link = skel.progs.func_task_exit.attach();
    if let Err(e) = &exit_link {
        log::warn!("func: {}", libbpf_error("attach raw_tp/sched_process_exit (stamps of exiting threads leak)", e));
    }
    let hist = PerCpuHist::new(&skel.maps.func_hist)?;
    let alert_drops = PerCpuArray::new(&skel.maps.func_alert_drops)?;
    let alerts = if specs.iter().any(|s| threshold_ns(s) > 0) {
        let map = if use_ringbuf { &skel.maps.func_alerts } else { &skel.maps.func_alerts_perf };
        let handle = MapHandle::try_from(map).map_err(|e| libbpf_error("alert buffer", &e))?;
        let names = specs.iter().map(|s| s.name.clone()).collect();
        Some(AlertFeed::spawn(handle, use_ringbuf, names)?)
    } else {
        None
    };
    let set = FuncSet {
        alerts,
        hist: hist.into(),
        alert_drops: alert_drops.into(),
        use_ringbuf,
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
        info: ProbeInfo { name: probe, kind: spec.kind.family().into(), attach: mech.into(), mode },
        id,
        links,
        _own: own,
        set: Rc::clone(set),
    })
}

/// A copy of the object with only fentry/fexit, bound to `func` at load,
/// every map shared with the set.
fn attach_fentry(
    set: &FuncSet,
    specs: &[&ProbeSpec],
    id: u32,
    func: &str,
) -> Result<(Owned<FuncSkel<'static>>, Vec<Link>), String> {
    let cfg = SetConfig { specs, use_ringbuf: set.use_ringbuf };
    let shared = &set.skel.maps;
    let own = Owned::new(|storage: &'static mut MaybeUninit<OpenObject>| -> Result<FuncSkel<'static>, String> {
        let mut open = FuncSkelBuilder::default().open_opts(super::open_opts(), storage).map_err(|e| libbpf_error("open", &e))?;
        configure(&mut open, &cfg, id)?;
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
        reuse("func_hist", &mut m.func_hist, shared.func_hist.as_fd())?;
        reuse("func_stamps", &mut m.func_stamps, shared.func_stamps.as_fd())?;
        reuse("func_alert_tat", &mut m.func_alert_tat, shared.func_alert_tat.as_fd())?;
        reuse("func_alert_drops", &mut m.func_alert_drops, shared.func_alert_drops.as_fd())?;
        if set.use_ringbuf {
            reuse("func_alerts", &mut m.func_alerts, shared.func_alerts.as_fd())?;
        } else {
            reuse("func_alerts_perf", &mut m.func_alerts_perf, shared.func_alerts_perf.as_fd())?;
        }
        open.load().map_err(|e| libbpf_error("load", &e))
    })?;
    let exit = own.progs.func_fexit.attach_trace().map_err(|e| libbpf_error("attach fexit", &e))?;
    let entry = own.progs.func_fentry.attach_trace().map_err(|e| libbpf_error("attach fentry", &e))?;
    Ok((own, vec![exit, entry]))
}

fn attach_kprobe(set: &FuncSet, id: u32, func: &str) -> Result<Vec<Link>, String> {
    let opts = || KprobeOpts { cookie: u64::from(id), ..Default::default() };
    let exit = set
        .skel
        .progs
        .func_kexit
        .attach_kprobe_with_opts(true, func, opts())
        .map_err(|e| libbpf_error("attach kretprobe", &e))?;
    let entry = set
        .skel
        .progs
        .func_kentry
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
    let exit = set
        .skel
        .progs
        .func_uexit
        .attach_uprobe_with_opts(pid, binary, 0, opts(true))
        .map_err(|e| libbpf_error("attach uretprobe", &e))?;
    let entry = set
        .skel
        .progs
        .func_uentry
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
        let mut dropped = 0u64;
        self.set
            .alert_drops
            .borrow_mut()
            .read(self.id, |d| dropped += d.rate_limited + d.buffer_full)
            .map_err(err)?;
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
            (None, "kprobe") => vec![fd(&self.set.skel.progs.func_kentry), fd(&self.set.skel.progs.func_kexit)],
            (None, _) => vec![fd(&self.set.skel.progs.func_uentry), fd(&self.set.skel.progs.func_uexit)],
        };
        if self.set._exit_link.is_some() {
            // Stamp cleanup at thread exit, shared by every probe of the set.
            fds.push(fd(&self.set.skel.progs.func_task_exit));
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
    fn spawn(map: MapHandle, ringbuf: bool, names: Vec<String>) -> Result<Self, String> {
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
                let push = move |data: &[u8]| push_record(&q, &names, data);
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
fn push_record(queue: &Mutex<AlertQueue>, names: &[String], data: &[u8]) {
    let Ok(mut q) = queue.lock() else { return };
    let Some((id, rec)) = decode_alert(data, names) else {
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

/// A kernel alert record as the summary's `AlertRecord` (lossy UTF-8 comm).
fn decode_alert(data: &[u8], names: &[String]) -> Option<(usize, AlertRecord)> {
    let mut raw = types::latmon_alert::default();
    // Perf buffer samples may carry trailing padding; never less.
    plain::copy_from_bytes(&mut raw, data.get(..ALERT_RECORD_BYTES)?).ok()?;
    let id = raw.probe_id as usize;
    let probe = names.get(id)?.clone();
    let comm: Vec<u8> = raw.comm.iter().map(|&c| c as u8).take_while(|&c| c != 0).collect();
    Some((
        id,
        AlertRecord {
            probe,
            pid: raw.pid,
            tid: raw.tid,
            comm: String::from_utf8_lossy(&comm).into_owned(),
            cpu: raw.cpu,
            latency_ns: raw.latency_ns,
            time_ns: raw.time_ns,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let (id, r) = decode_alert(&raw(1, b"ctrl\xffloop"), &names).unwrap();
        assert_eq!((id, r.probe.as_str(), r.pid, r.tid, r.cpu), (1, "b", 7, 8, 1));
        assert_eq!(r.comm, "ctrl\u{fffd}loop");
        assert_eq!(r.latency_ns, 2_000_000);
        // A full 16-byte comm without NUL stays within the array.
        assert_eq!(decode_alert(&raw(0, b"0123456789abcdef"), &names).unwrap().1.comm, "0123456789abcdef");
        // Unknown probe id, short record: rejected, not a panic.
        assert!(decode_alert(&raw(2, b"x"), &names).is_none());
        assert!(decode_alert(&raw(0, b"x")[..20], &names).is_none());
        // Perf samples padded past the struct still decode.
        let mut padded = raw(0, b"x");
        padded.extend([0u8; 4]);
        assert!(decode_alert(&padded, &names).is_some());
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
            push_record(&q, &names, &raw(0, b"x"));
        }
        push_record(&q, &names, b"short");
        let q = q.into_inner().unwrap();
        assert_eq!((q.held, q.dropped[0], q.bad), (ALERT_QUEUE, 3, 1));
    }
}
