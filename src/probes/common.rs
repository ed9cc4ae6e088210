// SPDX-License-Identifier: MIT
//! What every probe family shares: the [`Probe`] interface and its
//! errors, the loader ladder, per-CPU histogram reads, libbpf options and
//! logs, tracefs formats and the no-BTF switches. A leaf of `probes`: the
//! families import it, it imports none of them.

use std::ffi::CString;
use std::fmt;
use std::mem::{size_of, ManuallyDrop, MaybeUninit};
use std::os::fd::{AsRawFd, RawFd};
use std::ptr::NonNull;
use std::sync::{Mutex, OnceLock};

use latmon_core::causes::CauseSummary;
use latmon_core::extra::ProbeExtra;
use latmon_core::hist::Hist;
use latmon_core::ident::BtfMode;
use latmon_core::ident::{Family, Mechanism};
use latmon_core::summary::{AlertRecord, ProbeInfo};
use libbpf_rs::{Link, Object, OpenObject, PrintLevel};

use crate::bpf::shared::types::{latmon_common_config, latmon_tp_field};
use crate::config::ProbeSpec;
use crate::rtkernel::TaskStorage;
use crate::rtsafety::{AlertBuffer, MapFdInfo, RingbufLock, RtSafety, ALERT_BUFFER_ENV};

/// Why a probe is not running.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProbeError {
    /// This build of latmon has no such probe family (yet).
    Unsupported { probe: String, kind: Family },
    /// The kernel lacks something the probe needs (BTF, a config option).
    KernelFeature { probe: String, what: String },
    /// Every mechanism of the attach ladder failed; one reason per rung.
    Attach { probe: String, tried: Vec<(Mechanism, LoadError)> },
    /// Reading the probe's maps failed.
    Read { probe: String, why: super::percpu::ReadError },
    /// What the probe points at does not exist: a binary, a symbol in it,
    /// a kernel function.
    Target { probe: String, what: String },
    /// More probes of a family than its compiled limit.
    TooMany { probe: String, what: String },
    /// The spec cannot apply here (e.g. a syscall name this architecture
    /// does not have).
    Spec { probe: String, why: String },
    /// An environment setting latmon reads is invalid (the text names it).
    Env { probe: String, why: String },
}

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unsupported { probe, kind } => {
                write!(f, "probe {probe}: the {kind} probe family is not available in this latmon build")
            }
            Self::KernelFeature { probe, what } => write!(f, "probe {probe}: {what}"),
            Self::Attach { probe, tried } => {
                write!(f, "probe {probe}: cannot attach:")?;
                for (i, (mech, why)) in tried.iter().enumerate() {
                    write!(f, "{} {mech}: {why}", if i == 0 { "" } else { ";" })?;
                }
                Ok(())
            }
            Self::Read { probe, why } => write!(f, "probe {probe}: reading maps: {why}"),
            Self::Target { probe, what } => write!(f, "probe {probe}: {what}"),
            Self::TooMany { probe, what } => write!(f, "probe {probe}: not started: {what}"),
            Self::Spec { probe, why } | Self::Env { probe, why } => write!(f, "probe {probe}: {why}"),
        }
    }
}

impl std::error::Error for ProbeError {}

/// Why one rung of a probe's attach ladder failed: its object did not
/// open, load or attach. Callers branch on the libbpf case (func and
/// timer recognise a missing uprobe symbol, func names the usual fentry
/// and kprobe refusals); the rest is said to the user as it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LoadError {
    /// libbpf refused `step` (open, load, attach NAME, share map NAME):
    /// its error and its last warning line, which names the cause that
    /// libbpf-rs's outer context ("failed to attach BPF program") lacks.
    Libbpf { step: String, err: String, warning: String },
    /// The rung needs CO-RE and the kernel has no BTF.
    NoBtf(String),
    /// A tracefs record format the no-BTF build lays its reads out from.
    Format(crate::tpformat::FormatError),
    /// A map of the loaded object cannot be read.
    Read(super::percpu::ReadError),
    /// The object lacks a section or program its build always has.
    Object(String),
    /// Said in words already: the kernel refuses the mechanism.
    Refused(String),
    /// What the probe points at is not there: a binary, a symbol in it.
    Target(String),
    /// LATMON_SKIP_ATTACH named the rung.
    Skipped,
    /// The operating system refused a resource (a thread).
    Os(String),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Libbpf { step, err, warning } if warning.is_empty() => write!(f, "{step}: {err}"),
            Self::Libbpf { step, err, warning } => write!(f, "{step}: {err} (libbpf: {warning})"),
            Self::Format(e) => e.fmt(f),
            Self::Read(e) => e.fmt(f),
            Self::NoBtf(why) | Self::Object(why) | Self::Refused(why) | Self::Target(why) | Self::Os(why) => {
                f.write_str(why)
            }
            Self::Skipped => f.write_str("skipped (LATMON_SKIP_ATTACH)"),
        }
    }
}

impl std::error::Error for LoadError {}

impl From<crate::tpformat::FormatError> for LoadError {
    fn from(e: crate::tpformat::FormatError) -> Self {
        Self::Format(e)
    }
}

impl From<super::percpu::ReadError> for LoadError {
    fn from(e: super::percpu::ReadError) -> Self {
        Self::Read(e)
    }
}

/// Why `btf_path` cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BtfPathError {
    Missing(std::path::PathBuf),
    Nul,
    SetTwice,
}

impl fmt::Display for BtfPathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing(p) => write!(f, "btf_path {}: no such file", p.display()),
            Self::Nul => f.write_str("btf_path contains NUL"),
            Self::SetTwice => f.write_str("btf_path set twice"),
        }
    }
}

impl std::error::Error for BtfPathError {}

/// A running probe: attached programs plus the maps to read.
///
/// Families that measure several things at once (syscall per syscall,
/// irq per IRQ number, softirq per vector, chain per stage) are one probe
/// for the family line plus one probe per series, each with its own name
/// (`syscall:nanosleep`, `irq:36 virtio1-req.0`, `softirq:NET_RX`). A
/// series probe is born the first time its series has data, from the
/// family's `new_series()`; see `series.rs`.
pub trait Probe {
    fn info(&self) -> &ProbeInfo;
    /// The cumulative histogram since attach, summed over CPUs, into `out`.
    fn read(&mut self, out: &mut Hist) -> Result<(), ProbeError>;
    /// Move alert records that arrived since the last call into `out`.
    fn drain_alerts(&mut self, _out: &mut Vec<AlertRecord>) {}
    /// The causes of the alerted time since the last call (timer, chain,
    /// runq with an anatomy; bpf/causes.bpf.h) into `out`; None for
    /// probes that tally none. Called once per interval.
    fn causes(&mut self, out: &mut Option<CauseSummary>) -> Result<(), ProbeError> {
        *out = None;
        Ok(())
    }
    /// The family's own data since the last call and since start (core
    /// extra.rs: a cycle probe's counts, a lock line's), into `out`, kept
    /// in place where it is already that family's; None for families
    /// that have none. Called once per interval, after `drain_alerts`.
    fn extra(&mut self, out: &mut Option<ProbeExtra>) -> Result<(), ProbeError> {
        *out = None;
        Ok(())
    }
    /// Before the final summary: wait until the alert reader has taken
    /// every record the kernel wrote so far.
    fn flush_alerts(&mut self) {}
    /// The fds of the loaded BPF programs whose run time is this probe's
    /// cost (src/cost/), valid while the probe lives. Programs shared
    /// with other probes are listed by each of them; the agent splits their
    /// cost. Called once after open. The default (none) reports no cost.
    fn bpf_programs(&self) -> Vec<RawFd> {
        Vec::new()
    }
    /// Series that showed up since the last call, as probes of their own.
    /// Called before each round of `read()`s; a series' probe must be read
    /// after the probe that returned it, in the same round (the agent
    /// appends it to its list, behind its family). Single-series probes
    /// return nothing.
    fn new_series(&mut self) -> Vec<Box<dyn Probe>> {
        Vec::new()
    }
    /// This probe's new name, once, when it changed since the last call
    /// (a lock series is `lock:0xADDR` until its symbol arrives from the
    /// worker, src/probes/symworker.rs); `info()` has it too. The agent
    /// announces it to every output.
    fn rename(&mut self) -> Option<String> {
        None
    }
    /// `cycle,auto`: the loops discovery lists, those to watch marked
    /// (`latmon_core::loops::watch_periodic_rt`). The probe follows the
    /// marked ones from their next timer sleep and fills each one's
    /// `cycle` from its last read. Called every interval, after `extra`;
    /// `scan_at_ns` dates the listing (when its discovery scan began).
    fn watch(&mut self, _loops: &mut [latmon_core::loops::Loop], _scan_at_ns: u64) {}
}

/// Try each rung of an attach ladder in order; the first that loads and
/// attaches wins. Returns the winner and its rung name, or every failure.
pub(crate) fn ladder<T>(
    probe: &str,
    rungs: &[Mechanism],
    mut attempt: impl FnMut(Mechanism) -> Result<T, LoadError>,
) -> Result<(T, Mechanism), ProbeError> {
    let mut tried = Vec::new();
    // LATMON_SKIP_ATTACH=tp_btf,fentry skips rungs: how the fallback paths
    // are tested on kernels where the preferred rung works, and a field
    // workaround for a kernel whose preferred mechanism misbehaves.
    let skip = std::env::var("LATMON_SKIP_ATTACH").unwrap_or_default();
    for &rung in rungs {
        if skip.split(',').any(|s| s.trim() == rung.as_str()) {
            tried.push((rung, LoadError::Skipped));
            continue;
        }
        clear_libbpf_warning();
        match attempt(rung) {
            Ok(t) => {
                log::info!("probe {probe}: attached via {rung}");
                return Ok((t, rung));
            }
            Err(why) => {
                log::debug!("probe {probe}: {rung} failed: {why}");
                tried.push((rung, why));
            }
        }
    }
    Err(ProbeError::Attach { probe: probe.to_string(), tried })
}

/// A loaded skeleton that owns the `OpenObject` storage it borrows from, so
/// probes can live in a `Box<dyn Probe>` without leaking: the skeleton is
/// dropped first, then the storage is freed.
pub(crate) struct Owned<S> {
    skel: ManuallyDrop<S>,
    storage: NonNull<MaybeUninit<OpenObject>>,
}

impl<S> Owned<S> {
    /// `build` opens, configures and loads the skeleton in `storage`.
    pub fn new<E>(build: impl FnOnce(&'static mut MaybeUninit<OpenObject>) -> Result<S, E>) -> Result<Self, E> {
        let storage = NonNull::from(Box::leak(Box::new(MaybeUninit::<OpenObject>::uninit())));
        // SAFETY: the storage stays allocated until Drop, after the skeleton
        // (the only borrower) is gone; on error the borrower is already gone.
        match build(unsafe { &mut *storage.as_ptr() }) {
            Ok(s) => Ok(Owned { skel: ManuallyDrop::new(s), storage }),
            Err(e) => {
                drop(unsafe { Box::from_raw(storage.as_ptr()) });
                Err(e)
            }
        }
    }
}

impl<S> std::ops::Deref for Owned<S> {
    type Target = S;
    fn deref(&self) -> &S {
        &self.skel
    }
}

impl<S> Drop for Owned<S> {
    fn drop(&mut self) {
        // SAFETY: see new(); the skeleton is dropped exactly once, before
        // the storage it borrows.
        unsafe {
            ManuallyDrop::drop(&mut self.skel);
            drop(Box::from_raw(self.storage.as_ptr()));
        }
    }
}

/// A probe's alert threshold in ns (0: none), as its BPF rodata takes
/// it; a threshold beyond u64 ns saturates.
pub(crate) fn threshold_ns(spec: &ProbeSpec) -> u64 {
    spec.threshold.map_or(0, |t| u64::try_from(t.as_nanos()).unwrap_or(u64::MAX))
}

/// An object's `cfg.common` (bpf/latmon.h): the switches its shared BPF
/// headers read. `ringbuf`: alerts through the ring buffer, not the perf
/// buffer (the one `keep_alert_buffer` creates); `anatomy` and
/// `tally_causes`: the families with an anatomy (timer, runq, cycle)
/// account it and tally alerts' causes. Being rodata, what is off is
/// pruned by the verifier, not tested per event.
pub(crate) fn common_config(ringbuf: bool, anatomy: bool, tally_causes: bool) -> latmon_common_config {
    latmon_common_config {
        use_ringbuf: ringbuf.into(),
        anatomy: anatomy.into(),
        tally_causes: tally_causes.into(),
        ..Default::default()
    }
}

/// Test builds only (feature `test-hooks`): `LATMON_RT_HASH_MUTATE=1` keys every new tid-hash entry by
/// the current task instead of the task it is for
/// (LATMON_TASK_SLOT_HASH_MUTATED, bpf/task_slot.bpf.h): the wrong key
/// the live test of the hash path must catch.
#[cfg(feature = "test-hooks")]
pub const HASH_MUTATE_ENV: &str = "LATMON_RT_HASH_MUTATE";

/// The verdict on creating task storage in atomic context on this kernel
/// (src/rtkernel.rs): from uname, unless LATMON_RT_TASK_STORAGE says; an
/// invalid override is the probe's error.
pub(crate) fn task_storage(probe: &str) -> Result<TaskStorage, ProbeError> {
    task_storage_here().map_err(|e| ProbeError::Env { probe: probe.to_string(), why: e.to_string() })
}

/// The verdict on this kernel, as `task_storage` takes it (`latmon check`
/// says it).
pub fn task_storage_here() -> Result<TaskStorage, crate::rtkernel::OverrideError> {
    let (release, version) = uname_release_version();
    let value = std::env::var(crate::rtkernel::ENV).ok();
    TaskStorage::with_override(value.as_deref(), &release, &version)
}

/// This process's loaded BPF maps (/proc/self/fdinfo), for the
/// `map_alloc` verdict (src/rtsafety.rs).
pub fn own_maps() -> Vec<MapFdInfo> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fdinfo") else { return Vec::new() };
    dir.flatten().filter_map(|e| std::fs::read_to_string(e.path()).ok()).filter_map(|t| MapFdInfo::parse(&t)).collect()
}

/// `uname -r` and `uname -v` (empty when uname fails).
fn uname_release_version() -> (String, String) {
    nix::sys::utsname::uname()
        .map(|u| (u.release().to_string_lossy().into_owned(), u.version().to_string_lossy().into_owned()))
        .unwrap_or_default()
}

/// This kernel's upstream version (uname), if it reads as one.
pub fn kernel_version_here() -> Option<crate::rtkernel::KernelVersion> {
    let (release, version) = uname_release_version();
    crate::rtkernel::upstream(&release, &version)
}

/// This kernel's RT-safety verdicts (`latmon check`), the loaded maps
/// judged when `with_maps`.
pub fn rt_safety_here(with_maps: bool) -> RtSafety {
    let (release, version) = uname_release_version();
    let env = std::env::var(ALERT_BUFFER_ENV).ok();
    let maps = if with_maps { own_maps() } else { Vec::new() };
    RtSafety::judge(task_storage_here(), &release, &version, env.as_deref(), &maps)
}

/// The alert buffer for this kernel and LATMON_ALERT_BUFFER.
pub fn alert_buffer_here() -> AlertBuffer {
    let (release, version) = uname_release_version();
    let env = std::env::var(ALERT_BUFFER_ENV).ok();
    AlertBuffer::choose(&RingbufLock::judge(&release, &version), env.as_deref())
}

/// `cfg.common.task_slot` (bpf/latmon.h LATMON_TASK_SLOT_*) for a verdict:
/// the tid hash where task storage is unsafe.
pub(crate) fn task_slot(ts: &TaskStorage) -> u32 {
    use crate::bpf::limits::{TASK_SLOT_HASH, TASK_SLOT_STORAGE};
    let slot = match ts.safe {
        true => TASK_SLOT_STORAGE,
        #[cfg(feature = "test-hooks")]
        false if std::env::var(HASH_MUTATE_ENV).is_ok_and(|v| v == "1") => crate::bpf::limits::TASK_SLOT_HASH_MUTATED,
        false => TASK_SLOT_HASH,
    };
    slot as u32
}

/// The mode words of a family whose per-task state is in tid hashes
/// because task storage is unsafe here: `tid-hash (PREEMPT_RT: CVE-...)`;
/// logged once per probe with the whole verdict.
pub(crate) fn tid_hash_mode(probe: &str, ts: &TaskStorage) -> String {
    log::info!(
        "probe {probe}: task storage created in atomic context is {ts}: per-task state in preallocated tid hashes"
    );
    format!("tid-hash ({})", ts.mode_note())
}

/// A task-storage rung (tp_btf of runq and syscall) refused where
/// creating task storage under the rq lock is unsafe: the ladder goes on
/// to raw_tp's hash.
pub(crate) fn task_storage_refused(ts: &TaskStorage) -> LoadError {
    LoadError::Refused(format!("creates task storage under the rq lock, {ts}"))
}

/// The mode words of a family that skipped its task-storage rung for
/// `mech` (` (tp_btf skipped, PREEMPT_RT: CVE-...)`), logged once with the
/// verdict.
pub(crate) fn storage_rung_skipped(probe: &str, ts: &TaskStorage, mech: Mechanism) -> String {
    log::info!(
        "probe {probe}: tp_btf skipped: task storage created in atomic context is {ts}; {mech} keeps its stamps in a \
         preallocated hash"
    );
    format!(" (tp_btf skipped, {})", ts.mode_note())
}

/// The `mode` words of a probe with threshold alerts (`threshold_ns`
/// above 0): what it sends and through which buffer.
pub(crate) fn alert_mode(threshold_ns: u64, ringbuf: bool) -> String {
    if threshold_ns == 0 {
        return String::new();
    }
    let via = if ringbuf { "ringbuf" } else { "perf buffer" };
    format!(", alerts above {} via {via}", latmon_core::text::fmt_ns(threshold_ns))
}

/// Environment override of where tracepoint format files are read from
/// (a directory laid out as tracefs' `events/`). For tests.
pub const TRACEFS_EVENTS_ENV: &str = "LATMON_TRACEFS_EVENTS";

/// The record layout of tracepoint `sys/event`, from its tracefs format
/// file (tracefs at its own mount point, or under debugfs on old images;
/// `ensure_tracefs` mounts it when missing).
pub fn tracefs_format(sys: &str, event: &str) -> Result<crate::tpformat::Format, crate::tpformat::FormatError> {
    let name = format!("{sys}/{event}");
    let mut why = String::new();
    // LATMON_TRACEFS_EVENTS=DIR reads DIR/<sys>/<event>/format instead:
    // how the tests show a kernel whose record lacks a field (attaching
    // still goes through the real tracefs).
    let roots = match std::env::var(TRACEFS_EVENTS_ENV) {
        Ok(dir) if !dir.is_empty() => vec![dir],
        _ => vec!["/sys/kernel/tracing/events".to_string(), "/sys/kernel/debug/tracing/events".to_string()],
    };
    for root in roots {
        let path = format!("{root}/{name}/format");
        match std::fs::read_to_string(&path) {
            Ok(text) => return crate::tpformat::Format::parse(&name, &text),
            Err(e) if why.is_empty() => why = format!("{path}: {e}"),
            Err(_) => {}
        }
    }
    Err(crate::tpformat::FormatError::Unreadable { event: name, why })
}

/// Set a skeleton's `struct latmon_tp_field` rodata global from field
/// `name` of a parsed format; the error names the event and field.
/// Returns the field.
pub(crate) fn set_tp_field(
    dst: &mut latmon_tp_field,
    format: &crate::tpformat::Format,
    name: &str,
    sizes: &'static [u32],
) -> Result<crate::tpformat::TpField, LoadError> {
    let f = crate::tpformat::TpField::of(format, name, sizes)?;
    dst.offset = f.offset;
    dst.size = f.size;
    dst.is_signed = u8::from(f.signed);
    Ok(f)
}

/// The attach ladder of a family with a no-BTF tracepoint build: without
/// kernel types only its `tracepoint` rung can run (unless the spec pins
/// another, which then fails with the reason).
pub(crate) fn ladder_for(spec: &ProbeSpec) -> Vec<Mechanism> {
    let all = spec.ladder();
    if kernel_btf_present() {
        return all;
    }
    let tp: Vec<Mechanism> = all.iter().copied().filter(|m| *m == Mechanism::Tracepoint).collect();
    if tp.is_empty() {
        all
    } else {
        tp
    }
}

/// The build a rung of a family with a no-BTF tracepoint build runs: the
/// no-BTF one on the classic tracepoint rung, CO-RE on the others.
pub(crate) fn tp_family_build(mech: Mechanism) -> BtfMode {
    if mech == Mechanism::Tracepoint {
        BtfMode::NoBtf
    } else {
        BtfMode::CoRe
    }
}

/// The reason a CO-RE rung cannot run without kernel types.
pub(crate) fn needs_btf(family: Family) -> LoadError {
    LoadError::NoBtf(format!("{}; {family} via tp_btf/raw_tp needs CO-RE (use attach=tracepoint)", no_btf_reason()))
}

/// `mode` of a probe running a no-BTF tracepoint build.
pub(crate) const TP_LAYOUT: &str = "layout from tracefs format";

/// Attach the loaded programs `names`, in that order (order matters when a
/// later program relies on an earlier one already running), and return the
/// links in reverse, so dropping them detaches in the opposite order.
pub(crate) fn attach_in_order(object: &Object, names: &[&str]) -> Result<Vec<Link>, LoadError> {
    let mut links = Vec::with_capacity(names.len());
    for &name in names {
        let prog = object
            .progs_mut()
            .find(|p| p.name().to_string_lossy() == name)
            .ok_or_else(|| LoadError::Object(format!("no program {name} in the object")))?;
        links.push(prog.attach().map_err(|e| libbpf_error(&format!("attach {name}"), &e))?);
    }
    links.reverse();
    Ok(links)
}

/// Copy a comm filter into a skeleton's `filter_comm` rodata.
pub(crate) fn set_comm(dst: &mut [i8], comm: Option<&str>) {
    if let Some(comm) = comm {
        for (d, s) in dst.iter_mut().zip(comm.bytes()) {
            *d = s as i8;
        }
    }
}

/// The last warning libbpf printed: libbpf-rs errors carry only the outer
/// context ("failed to attach BPF program"); libbpf's own line names the
/// cause ("failed to add legacy kprobe event ... -ENOENT").
static LAST_LIBBPF_WARNING: Mutex<String> = Mutex::new(String::new());

/// Route libbpf's own messages to the log (visible with -vv), instead of
/// letting every failed rung of a ladder spray stderr; remember the last
/// warning for error messages.
pub fn route_libbpf_logs() {
    fn print(level: PrintLevel, msg: String) {
        let msg = msg.trim_end().trim_start_matches("libbpf: ");
        match level {
            PrintLevel::Warn => {
                log::debug!("libbpf: {msg}");
                if let Ok(mut last) = LAST_LIBBPF_WARNING.lock() {
                    msg.clone_into(&mut last);
                }
            }
            _ => log::trace!("libbpf: {msg}"),
        }
    }
    libbpf_rs::set_print(Some((PrintLevel::Debug, print)));
}

/// Clear the remembered libbpf warning before an operation.
pub(crate) fn clear_libbpf_warning() {
    if let Ok(mut last) = LAST_LIBBPF_WARNING.lock() {
        last.clear();
    }
}

/// `what: err (libbpf: last warning)`, for errors that reach users.
pub(crate) fn libbpf_error(what: &str, err: &dyn fmt::Display) -> LoadError {
    let warning = LAST_LIBBPF_WARNING.lock().map(|l| l.clone()).unwrap_or_default();
    LoadError::Libbpf { step: what.to_string(), err: err.to_string(), warning }
}

/// Tracepoint and uprobe attachment (and tracefs record formats) need
/// tracefs; minimal board images often do not mount it. Mount it at the
/// standard place when missing, as root; failure is only logged - the
/// probes that need it will say so.
pub fn ensure_tracefs() {
    let tracing = std::path::Path::new("/sys/kernel/tracing");
    if tracing.join("events").exists() || std::path::Path::new("/sys/kernel/debug/tracing/events").exists() {
        return;
    }
    match nix::mount::mount(Some("nodev"), tracing, Some("tracefs"), nix::mount::MsFlags::empty(), None::<&str>) {
        Ok(()) => log::info!("mounted tracefs at {}", tracing.display()),
        Err(e) => log::warn!("tracefs is not mounted and mounting it failed: {e}"),
    }
}

/// An external BTF file for kernels whose BTF ships separately (config key
/// `btf_path`; libbpf's btf_custom_path). Set once, before any probe opens.
static BTF_PATH: OnceLock<CString> = OnceLock::new();

/// Use `path` as the kernel's BTF for CO-RE relocations.
pub fn set_btf_path(path: &std::path::Path) -> Result<(), BtfPathError> {
    if !path.is_file() {
        return Err(BtfPathError::Missing(path.to_path_buf()));
    }
    let c = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| BtfPathError::Nul)?;
    BTF_PATH.set(c).map_err(|_| BtfPathError::SetTwice)
}

/// The fds of an object's loaded programs (those autoloaded), for cost
/// accounting (Probe::bpf_programs).
pub(crate) fn loaded_prog_fds(obj: &libbpf_rs::Object) -> Vec<RawFd> {
    use std::os::fd::AsFd;
    obj.progs().filter(|p| p.autoload()).map(|p| p.as_fd().as_raw_fd()).collect()
}

/// Autoload exactly the programs named in `wanted` (one object carries
/// every variant; the chosen rung's programs load, the others stay out).
pub(crate) fn autoload_only(obj: &mut libbpf_rs::OpenObject, wanted: &[&str]) {
    for mut prog in obj.progs_mut() {
        let on = wanted.iter().any(|w| prog.name().to_string_lossy() == *w);
        prog.set_autoload(on);
    }
}

/// Open options every family passes to its skeleton builder.
pub(crate) fn open_opts() -> libbpf_rs::libbpf_sys::bpf_object_open_opts {
    let mut opts = zeroed_opts::<libbpf_rs::libbpf_sys::bpf_object_open_opts>();
    opts.sz = size_of::<libbpf_rs::libbpf_sys::bpf_object_open_opts>() as _;
    opts.btf_custom_path = BTF_PATH.get().map_or(std::ptr::null(), |p| p.as_ptr());
    opts
}

/// An all-zero libbpf `*_opts` struct. `Default` leaves padding bytes
/// undefined, and libbpf rejects opts whose bytes beyond the fields it knows
/// are non-zero (-EINVAL; seen on armv7, where the layouts have tail padding).
pub(crate) fn zeroed_opts<T>() -> T {
    // SAFETY: only used for libbpf's C opts structs: integers and raw
    // pointers, for which all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

/// `LATMON_FORCE_NO_BTF=1`: behave as on a kernel without BTF and without
/// `btf_path` (CO-RE families refuse, families with a no-BTF build use
/// it). How the no-BTF path is tested on kernels with BTF, and a field
/// workaround for a kernel whose BTF misleads CO-RE.
pub const FORCE_NO_BTF_ENV: &str = "LATMON_FORCE_NO_BTF";

/// Whether `LATMON_FORCE_NO_BTF` is set (to anything but empty or 0).
pub fn no_btf_forced() -> bool {
    std::env::var(FORCE_NO_BTF_ENV).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Why CO-RE cannot run here (when `btf_source()` is None), in words.
pub fn no_btf_reason() -> String {
    if no_btf_forced() {
        format!("kernel BTF and btf_path ignored ({FORCE_NO_BTF_ENV} is set): running as with no BTF")
    } else {
        "kernel has no BTF (/sys/kernel/btf/vmlinux missing) and no btf_path is configured".into()
    }
}

/// Where CO-RE gets kernel types: the external file, or the kernel's own.
pub fn btf_source() -> Option<String> {
    match BTF_PATH.get() {
        _ if no_btf_forced() => None,
        Some(p) => Some(p.to_string_lossy().into_owned()),
        None if std::path::Path::new("/sys/kernel/btf/vmlinux").exists() => Some("/sys/kernel/btf/vmlinux".into()),
        None => None,
    }
}

/// Whether CO-RE programs can be relocated here (kernel or external BTF).
pub fn kernel_btf_present() -> bool {
    btf_source().is_some()
}

/// Whether libbpf said "no such symbol in that ELF file".
pub(crate) fn symbol_missing(e: &LoadError) -> bool {
    let said = |text: &str| text.contains("failed to find symbol") || text.contains("is 0 in symtab");
    matches!(e, LoadError::Libbpf { err, warning, .. } if said(err) || said(warning))
}

/// A readable regular file, or why not, naming it.
pub(crate) fn check_binary(binary: &str) -> Result<(), LoadError> {
    match std::fs::metadata(binary) {
        Ok(m) if m.is_file() => Ok(()),
        Ok(_) => Err(LoadError::Target(format!("binary {binary} is not a regular file"))),
        Err(e) => Err(LoadError::Target(format!("binary {binary}: {e}"))),
    }
}
