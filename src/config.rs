// SPDX-License-Identifier: MIT
//! Configuration: probe specs, durations and the TOML config file. Pure.
//!
//! Probe SPEC (CLI `--probe` and config `probes = [...]` use the same words):
//! `runq`, `timer`, `irq`, `softirq`, `syscall[:NAME]`, `chain`, `kfunc:FUNCTION`,
//! `ufunc:/path/to/binary:SYMBOL`, each optionally followed by
//! `,comm=NAME`, `,pid=N`, `,threshold=250us`, `,name=LABEL`,
//! `,attach=MECHANISM` (pin one rung of the family's attach ladder),
//! `,hist=true` (its histogram, and its series', under the text table).

use std::fmt;
use std::time::Duration;

use latmon_core::ident::{Family, Mechanism};
use serde::Deserialize;

use crate::bpf::limits::COMM_LEN;
pub use crate::cost::Budget;

/// CPU numbers `housekeeping_cpus` may name (the kernel's CPU_SETSIZE).
pub const MAX_CPUS: usize = 1024;

/// Errors in probe specs, durations or the config file.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A duration such as `250us` could not be parsed.
    BadDuration(String),
    /// A probe spec names a kind latmon does not know.
    UnknownProbeKind(String),
    /// A probe spec is malformed (missing argument, bad option, bad value).
    BadProbe { spec: String, why: String },
    /// The config file is not valid TOML or has unknown/mistyped keys.
    BadFile(String),
    /// A value is outside its allowed range.
    OutOfRange { key: &'static str, why: String },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadDuration(s) => write!(
                f,
                "invalid duration {s:?}: expected a number with a unit ns, us, ms, s or m (e.g. 250us, 1s)"
            ),
            Self::UnknownProbeKind(s) => write!(
                f,
                "unknown probe kind {s:?}: expected runq, timer, irq, softirq, syscall[:NAME], chain, cycle, lock, kfunc:FUNCTION or ufunc:PATH:SYMBOL"
            ),
            Self::BadProbe { spec, why } => write!(f, "invalid probe spec {spec:?}: {why}"),
            Self::BadFile(s) => write!(f, "invalid config: {s}"),
            Self::OutOfRange { key, why } => write!(f, "invalid config: {key}: {why}"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Parse `250us`, `1.5ms`, `10s`, `2m`, `100ns` (also `µs`); a bare `0`
/// is zero (a zero needs no unit: `--measure 0`).
pub fn parse_duration(s: &str) -> Result<Duration, ConfigError> {
    let bad = || ConfigError::BadDuration(s.to_string());
    let t = s.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(bad)?;
    let (num, unit) = t.split_at(split);
    let scale_ns: f64 = match unit.trim() {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "m" | "min" => 60e9,
        _ => return Err(bad()),
    };
    let n: f64 = num.parse().map_err(|_| bad())?;
    let ns = n * scale_ns;
    if !ns.is_finite() || ns < 0.0 || ns > u64::MAX as f64 {
        return Err(bad());
    }
    Ok(Duration::from_nanos(ns.round() as u64))
}

/// What a probe measures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeKind {
    Runq,
    Timer,
    Irq,
    Softirq,
    Syscall(Option<String>),
    /// Event (timer or IRQ) -> wakeup -> running, in stages, for a named
    /// thread; optionally -> the return of an application function.
    Chain {
        response: Option<UserFunc>,
    },
    Kfunc(String),
    Ufunc {
        binary: String,
        symbol: String,
    },
    /// The cycles of a periodic thread (release -> done); `period=`
    /// overrides the detected period, `deadline=` (default: the period)
    /// is what a miss is late against; `timerfd=true` also follows a
    /// loop that blocks in read() on a periodic timerfd (opt-in: it adds
    /// a program to every read() on the machine, docs/probes.md "cycle").
    /// `auto` (`cycle,auto`): the threads are the periodic RT loops loop
    /// discovery finds (docs/agent.md "Loop discovery"), each judged
    /// against its own period; timerfd loops are followed without
    /// `timerfd=`, the read program attached only once one is watched.
    Cycle {
        period: Option<Duration>,
        deadline: Option<Duration>,
        timerfd: bool,
        auto: bool,
    },
    /// The futex waits of named threads, one series per lock; records
    /// (with `threshold=`) name the owner and any priority inversion.
    Lock,
}

/// A function in a user-space binary or shared library: `/path:SYMBOL`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserFunc {
    pub binary: String,
    pub symbol: String,
}

impl UserFunc {
    /// `/absolute/path:SYMBOL`; the symbol is after the last ':' (paths
    /// may hold ':').
    pub fn parse(s: &str) -> Option<Self> {
        let (binary, symbol) = s.rsplit_once(':').filter(|(b, s)| b.starts_with('/') && !s.is_empty())?;
        Some(Self { binary: binary.to_string(), symbol: symbol.to_string() })
    }
}

/// Generates, from one row per family, what a `ProbeKind` knows of its
/// family: `family` and `mechanisms` (exhaustive over the kinds) and
/// `from_arg` (exhaustive over the families), so a kind without its family
/// or ladder, or a family without its kind, does not compile, and a
/// family's registration here is its variant and its row. A row:
/// `Family: the kind's pattern => the kind its spec's ':' argument (`arg`)
/// gives, or why not, [its attach ladder, in the order tried];`.
macro_rules! probe_kinds {
    (|$arg:ident| $($fam:ident: $pat:pat => $parse:expr, [$($mech:ident),*];)*) => {
        impl ProbeKind {
            /// The probe's family (its word: `Family::as_str`).
            pub fn family(&self) -> Family {
                match self {
                    $($pat => Family::$fam,)*
                }
            }

            /// The family's attach ladder: mechanisms in the order they are tried.
            pub fn mechanisms(&self) -> &'static [Mechanism] {
                match self {
                    $($pat => &[$(Mechanism::$mech),*],)*
                }
            }

            /// The kind of a spec naming `family`, from its ':' argument;
            /// else why not (a `BadProbe`'s `why`).
            fn from_arg(family: Family, $arg: Option<&str>) -> Result<Self, String> {
                match family {
                    $(Family::$fam => $parse,)*
                }
            }
        }
    };
}

// Tracepoint: the no-BTF build, record layout from tracefs. The timer
// wakeup path needs trusted task pointers (tp_btf only).
probe_kinds! { |arg|
    Runq: Self::Runq => no_arg(arg, Self::Runq), [TpBtf, RawTp, Tracepoint];
    Syscall: Self::Syscall(_) => match arg {
        None => Ok(Self::Syscall(None)),
        Some(n) if valid_ident(n) => Ok(Self::Syscall(Some(n.to_string()))),
        Some(_) => Err("syscall name must be an identifier, e.g. syscall:nanosleep".into()),
    }, [TpBtf, RawTp, Tracepoint];
    Irq: Self::Irq => no_arg(arg, Self::Irq), [TpBtf, RawTp, Tracepoint];
    Softirq: Self::Softirq => no_arg(arg, Self::Softirq), [TpBtf, RawTp, Tracepoint];
    Timer: Self::Timer => no_arg(arg, Self::Timer), [TpBtf];
    Kfunc: Self::Kfunc(_) => match arg {
        Some(f) if valid_ident(f) => Ok(Self::Kfunc(f.to_string())),
        _ => Err("expected kfunc:FUNCTION, e.g. kfunc:do_nanosleep".into()),
    }, [Fentry, Kprobe];
    Ufunc: Self::Ufunc { .. } => match arg.and_then(UserFunc::parse) {
        Some(UserFunc { binary, symbol }) => Ok(Self::Ufunc { binary, symbol }),
        None => Err("expected ufunc:/absolute/path/to/binary:SYMBOL".into()),
    }, [Uprobe];
    Chain: Self::Chain { .. } => no_arg(arg, Self::Chain { response: None }), [TpBtf];
    Cycle: Self::Cycle { .. } => no_arg(arg, Self::Cycle { period: None, deadline: None, timerfd: false, auto: false }), [TpBtf];
    Lock: Self::Lock => no_arg(arg, Self::Lock), [TpBtf];
}

/// `kind`, for a family whose spec takes no ':' argument.
fn no_arg(arg: Option<&str>, kind: ProbeKind) -> Result<ProbeKind, String> {
    match arg {
        None => Ok(kind),
        Some(_) => Err(format!("{} takes no ':' argument", kind.family().as_str())),
    }
}

impl ProbeKind {
    /// Whether its programs hook classic syscall tracepoints besides its
    /// attach rung: the cycle family's sleeps and reads
    /// (bpf/cycle_sources.bpf.h), the lock family's futex calls
    /// (bpf/lock.bpf.c). Those can be skipped for a map syscall
    /// (`cost::skips_uncounted`).
    pub fn syscall_tracepoints(&self) -> bool {
        matches!(self, Self::Cycle { .. } | Self::Lock)
    }

    /// Why a spec of a family that follows named threads must name them
    /// (`comm=` or `pid=`); `None` for the others.
    fn needs_threads(&self) -> Option<&'static str> {
        match self {
            Self::Chain { .. } => Some("chain follows one named thread: give comm=NAME or pid=N"),
            Self::Cycle { auto: false, .. } => Some(
                "cycle watches a periodic thread: give comm=NAME or pid=TID, or cycle,auto for the loops latmon finds",
            ),
            Self::Lock => Some("lock watches named threads' waits: give comm=NAME or pid=TID"),
            _ => None,
        }
    }

    /// Families whose series are reported as `NAME:SERIES` beside the family
    /// line (see probes::series).
    pub fn has_series(&self) -> bool {
        matches!(
            self,
            Self::Syscall(None) | Self::Irq | Self::Softirq | Self::Chain { .. } | Self::Cycle { .. } | Self::Lock
        )
    }
}

/// One parsed probe spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeSpec {
    pub kind: ProbeKind,
    /// Thread-group (process) id filter.
    pub pid: Option<u32>,
    /// Task comm filter (at most 15 bytes, as the kernel keeps it).
    pub comm: Option<String>,
    pub threshold: Option<Duration>,
    /// Label in output; defaults to the spec without options.
    pub name: String,
    /// `attach=MECH`: only this rung of the ladder (one of
    /// `kind.mechanisms()`), e.g. to prove the kprobe path on a kernel
    /// where fentry works too.
    pub attach: Option<Mechanism>,
    /// `hist=true`: text outputs show this probe's histogram (and its
    /// series') in bcc's style under the table.
    pub hist: bool,
    /// `waits=alert` (syscall): calls whose purpose is to wait alert above
    /// `threshold` too; by default they do not (a timeout is not late).
    pub alert_waits: bool,
    /// The spec as written (for messages and `latmon check`).
    pub spec: String,
}

impl ProbeSpec {
    pub fn parse(spec: &str) -> Result<Self, ConfigError> {
        let bad = |why: &str| ConfigError::BadProbe { spec: spec.to_string(), why: why.to_string() };
        let mut parts = spec.trim().split(',');
        let head = parts.next().unwrap_or("").trim();
        let (word, arg) = match head.split_once(':') {
            Some((w, a)) => (w, Some(a)),
            None => (head, None),
        };
        let family = match Family::parse(word) {
            Some(f) => f,
            None if word.is_empty() => return Err(bad("empty probe spec")),
            None => return Err(ConfigError::UnknownProbeKind(word.to_string())),
        };
        let kind = ProbeKind::from_arg(family, arg).map_err(|why| bad(&why))?;
        let mut p = ProbeSpec {
            kind,
            pid: None,
            comm: None,
            threshold: None,
            name: head.to_string(),
            attach: None,
            hist: false,
            alert_waits: false,
            spec: spec.trim().to_string(),
        };
        for opt in parts {
            if opt.trim() == "auto" {
                let ProbeKind::Cycle { auto, .. } = &mut p.kind else {
                    return Err(bad("auto applies to cycle only (cycle,auto: the loops latmon finds)"));
                };
                *auto = true;
                continue;
            }
            let (k, v) = opt
                .split_once('=')
                .map(|(k, v)| (k.trim(), v.trim()))
                .ok_or_else(|| bad(&format!("option {opt:?} is not KEY=VALUE")))?;
            match k {
                "pid" => {
                    p.pid =
                        Some(v.parse().ok().filter(|&n| n > 0).ok_or_else(|| bad("pid must be a positive integer"))?)
                }
                "comm" => {
                    if v.is_empty() || v.len() >= COMM_LEN {
                        return Err(bad(&format!(
                            "comm must be 1..{} bytes (the kernel truncates task names)",
                            COMM_LEN - 1
                        )));
                    }
                    p.comm = Some(v.to_string());
                }
                "threshold" => {
                    let t = parse_duration(v)?;
                    if t.is_zero() {
                        return Err(bad("threshold must be more than 0 (leave it out for no alerts)"));
                    }
                    p.threshold = Some(t);
                }
                "name" => {
                    if v.is_empty() {
                        return Err(bad("name must not be empty"));
                    }
                    p.name = v.to_string();
                }
                "response" => {
                    let ProbeKind::Chain { response } = &mut p.kind else {
                        return Err(bad("response= applies to chain only"));
                    };
                    let f = UserFunc::parse(v)
                        .ok_or_else(|| bad("expected response=/absolute/path/to/binary:SYMBOL (the function whose return closes the chain)"))?;
                    *response = Some(f);
                }
                "period" | "deadline" => {
                    let ProbeKind::Cycle { period, deadline, .. } = &mut p.kind else {
                        return Err(bad(&format!("{k}= applies to cycle only")));
                    };
                    let t = parse_duration(v)?;
                    if t.is_zero() {
                        return Err(bad(&format!("{k} must be more than 0")));
                    }
                    *(if k == "period" { period } else { deadline }) = Some(t);
                }
                "attach" => {
                    let mechs = p.kind.mechanisms();
                    p.attach = Some(mechs.iter().copied().find(|m| m.as_str() == v).ok_or_else(|| {
                        let words: Vec<&str> = mechs.iter().map(|m| m.as_str()).collect();
                        bad(&format!("attach={v}: {} attaches via {}", p.kind.family(), words.join(" or ")))
                    })?);
                }
                "timerfd" => {
                    let ProbeKind::Cycle { timerfd, .. } = &mut p.kind else {
                        return Err(bad("timerfd= applies to cycle only"));
                    };
                    *timerfd = match v {
                        "true" => true,
                        "false" => false,
                        _ => return Err(bad(&format!("timerfd={v}: expected timerfd=true or timerfd=false"))),
                    }
                }
                "hist" => {
                    p.hist = match v {
                        "true" => true,
                        "false" => false,
                        _ => return Err(bad(&format!("hist={v}: expected hist=true or hist=false"))),
                    }
                }
                "waits" => {
                    if p.kind != ProbeKind::Syscall(None) {
                        return Err(bad("waits= applies to the syscall family (syscall without :NAME) only"));
                    }
                    p.alert_waits = match v {
                        "alert" => true,
                        "quiet" => false,
                        _ => return Err(bad(&format!("waits={v}: expected waits=alert or waits=quiet"))),
                    }
                }
                other => {
                    return Err(bad(&format!(
                        "unknown option {other:?} (expected comm, pid, threshold, name, attach, response, period, deadline, timerfd, hist, waits)"
                    )))
                }
            }
        }
        match p.kind.needs_threads() {
            Some(why) if p.comm.is_none() && p.pid.is_none() => return Err(bad(why)),
            _ => {}
        }
        if let ProbeKind::Cycle { auto: true, period, deadline, timerfd } = &p.kind {
            // Each found loop has its own period: one thread's names and
            // times would apply to all of them.
            let named = [
                (p.comm.is_some(), "comm="),
                (p.pid.is_some(), "pid="),
                (period.is_some(), "period="),
                (deadline.is_some(), "deadline="),
                (*timerfd, "timerfd=true"),
            ];
            if let Some((_, what)) = named.iter().find(|(set, _)| *set) {
                return Err(bad(&format!(
                    "cycle,auto watches the loops latmon finds, each against its own period (timerfd loops included): \
                     {what} names one thread; use cycle,{what}... without auto for that"
                )));
            }
        }
        Ok(p)
    }
}

impl ProbeSpec {
    /// The rungs to try, in order: the family's ladder, or the one rung
    /// `attach=` pins.
    pub fn ladder(&self) -> Vec<Mechanism> {
        match self.attach {
            Some(m) => vec![m],
            None => self.kind.mechanisms().to_vec(),
        }
    }
}

fn valid_ident(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
}

/// Output format of a sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Text,
    Json,
    /// postcard frames (docs/wire-format.md).
    Frames,
}

impl Format {
    /// The word used on the command line and in config files.
    pub fn parse(s: &str) -> Option<Format> {
        match s {
            "text" => Some(Format::Text),
            "json" => Some(Format::Json),
            "frames" => Some(Format::Frames),
            _ => None,
        }
    }
}

/// The config file (TOML). Every key is optional.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    board: Option<String>,
    target: Option<String>,
    interval: Option<String>,
    duration: Option<String>,
    format: Option<Format>,
    outputs: Option<Vec<String>>,
    probes: Option<Vec<String>>,
    btf_path: Option<String>,
    overhead_budget: Option<RawBudget>,
    housekeeping_cpus: Option<Vec<u32>>,
    sched: Option<Sched>,
    nice: Option<i32>,
    mlockall: Option<bool>,
    user: Option<String>,
    group: Option<String>,
}

/// `overhead_budget = { cpu_percent = 1.0, ns_per_event = 500, intervals = 3 }`
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawBudget {
    cpu_percent: Option<f64>,
    ns_per_event: Option<u64>,
    intervals: Option<u32>,
}

/// Scheduling policy of latmon's threads (`sched = "other" | "idle"`).
/// Never a real-time policy: latmon must not compete with the RT threads
/// it watches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Sched {
    /// SCHED_OTHER at `nice`.
    #[default]
    Other,
    /// SCHED_IDLE: runs only when a CPU has nothing else to do.
    Idle,
}

/// A validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub board: Option<String>,
    /// The Rust target triple the board runs (documentation for integrators).
    pub target: Option<String>,
    pub interval: Duration,
    /// Stop after this long; `None` runs until signalled.
    pub duration: Option<Duration>,
    /// Format for every output, when given (`--format` or `format =`);
    /// otherwise stdout is text and other outputs are frames.
    pub format: Option<Format>,
    pub outputs: Vec<String>,
    pub probes: Vec<ProbeSpec>,
    /// External kernel BTF for kernels that ship it separately (libbpf's
    /// btf_custom_path); `None` uses /sys/kernel/btf/vmlinux.
    pub btf_path: Option<String>,
    /// Limits on latmon's own BPF cost (`overhead_budget`); `None`: cost is
    /// measured and reported, never acted on.
    pub overhead_budget: Option<Budget>,
    /// CPUs every latmon thread runs on (`housekeeping_cpus = [0]`); empty:
    /// wherever the scheduler puts them (inherited affinity).
    pub housekeeping_cpus: Vec<u32>,
    pub sched: Sched,
    /// Nice value with `sched = "other"` (default 10: below ordinary work).
    pub nice: i32,
    /// Lock all of latmon's memory (mlockall MCL_CURRENT | MCL_FUTURE;
    /// default true: no page fault in steady state).
    pub mlockall: bool,
    /// Drop to this user (and `group`, else the user's primary group) once
    /// every probe is attached, with every capability cleared.
    pub user: Option<String>,
    pub group: Option<String>,
    /// Where `latmon certify` stored this config's certificate (not a
    /// config key: `latmon run` sets it from `--config`, see
    /// certify::store::path_for); its summary travels in Hello. None:
    /// announce none.
    pub certificate: Option<std::path::PathBuf>,
}

/// Consecutive intervals over budget before a probe is detached, unless
/// `overhead_budget.intervals` says otherwise.
pub const DEFAULT_BUDGET_INTERVALS: u32 = 3;
/// Default nice value of latmon's threads.
pub const DEFAULT_NICE: i32 = 10;

/// The built-in default: what runs with no config and no --probe.
/// Run-queue, syscall and IRQ latency (docs/architecture.md): each works on any
/// kernel with BTF and tracepoints, and costs about 0.1-0.2 us per event
/// (docs/probes.md); and the cycles of the periodic RT loops loop discovery
/// finds (`cycle,auto`, issue 42; tp_btf: refused with its reason where
/// the kernel has no BTF, the others run).
pub const DEFAULT_PROBES: &[&str] = &["runq", "syscall", "irq", "cycle,auto"];
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);
pub const MIN_INTERVAL: Duration = Duration::from_millis(10);
/// The longest `interval`: a summary at least every hour (a longer one
/// hides everything, and intervals are added to clocks).
pub const MAX_INTERVAL: Duration = Duration::from_secs(3600);
/// The longest `duration` / `--duration` (a year; without one latmon runs
/// until stopped). Deadlines are `now + duration`: no overflow below this.
pub const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);
/// Configured probes at most (each is its own BPF object: programs, maps
/// and file descriptors; series of families come on top, see
/// docs/agent.md "Bounds").
pub const MAX_CONFIG_PROBES: usize = 32;
/// The largest config file read.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

impl Default for Config {
    fn default() -> Self {
        Config {
            board: None,
            target: None,
            interval: DEFAULT_INTERVAL,
            duration: None,
            format: None,
            outputs: vec!["-".into()],
            probes: DEFAULT_PROBES.iter().map(|s| ProbeSpec::parse(s).expect("default spec")).collect(),
            btf_path: None,
            overhead_budget: None,
            housekeeping_cpus: Vec::new(),
            sched: Sched::Other,
            nice: DEFAULT_NICE,
            mlockall: true,
            user: None,
            group: None,
            certificate: None,
        }
    }
}

impl Config {
    /// Parse and validate a TOML config file's text.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let raw: RawConfig =
            toml::from_str(text).map_err(|e| ConfigError::BadFile(e.to_string().trim().to_string()))?;
        let mut c = Config { board: raw.board, btf_path: raw.btf_path, target: raw.target, ..Config::default() };
        if let Some(i) = raw.interval {
            c.interval = parse_duration(&i)?;
        }
        if let Some(d) = raw.duration {
            c.duration = Some(parse_duration(&d)?);
        }
        if let Some(f) = raw.format {
            c.format = Some(f);
        }
        if let Some(o) = raw.outputs {
            c.outputs = o;
        }
        if let Some(p) = raw.probes {
            c.probes = p.iter().map(|s| ProbeSpec::parse(s)).collect::<Result<_, _>>()?;
        }
        if let Some(b) = raw.overhead_budget {
            c.overhead_budget = Some(Budget {
                cpu_percent: b.cpu_percent,
                ns_per_event: b.ns_per_event,
                intervals: b.intervals.unwrap_or(DEFAULT_BUDGET_INTERVALS),
            });
        }
        if let Some(cpus) = raw.housekeeping_cpus {
            // Written but empty is a mistake; leaving the key out means
            // "wherever the scheduler puts latmon".
            if cpus.is_empty() {
                return Err(ConfigError::OutOfRange {
                    key: "housekeeping_cpus",
                    why: "give at least one CPU, or leave the key out".into(),
                });
            }
            c.housekeeping_cpus = cpus;
        }
        c.sched = raw.sched.unwrap_or_default();
        c.nice = raw.nice.unwrap_or(DEFAULT_NICE);
        c.mlockall = raw.mlockall.unwrap_or(true);
        c.user = raw.user;
        c.group = raw.group;
        c.validate()?;
        Ok(c)
    }

    /// Range checks shared by the file and the CLI.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.interval < MIN_INTERVAL {
            return Err(ConfigError::OutOfRange { key: "interval", why: format!("must be at least {MIN_INTERVAL:?}") });
        }
        if self.interval > MAX_INTERVAL {
            return Err(ConfigError::OutOfRange { key: "interval", why: format!("must be at most {MAX_INTERVAL:?}") });
        }
        check_duration(self.duration)?;
        if self.probes.is_empty() {
            return Err(ConfigError::OutOfRange { key: "probes", why: "at least one probe is needed".into() });
        }
        if self.probes.len() > MAX_CONFIG_PROBES {
            return Err(ConfigError::OutOfRange {
                key: "probes",
                why: format!("{} probes configured; at most {MAX_CONFIG_PROBES}", self.probes.len()),
            });
        }
        if self.outputs.is_empty() {
            return Err(ConfigError::OutOfRange { key: "outputs", why: "at least one output is needed".into() });
        }
        if let Some(b) = &self.overhead_budget {
            let bad = |why: &str| Err(ConfigError::OutOfRange { key: "overhead_budget", why: why.into() });
            match (b.cpu_percent, b.ns_per_event) {
                (None, None) => return bad("give cpu_percent and/or ns_per_event"),
                (Some(p), _) if !(p > 0.0 && p <= 100.0) => return bad("cpu_percent must be in (0, 100]"),
                (_, Some(0)) => return bad("ns_per_event must be at least 1"),
                _ => {}
            }
            if b.intervals == 0 {
                return bad("intervals must be at least 1");
            }
        }
        if let Some(&c) = self.housekeeping_cpus.iter().find(|&&c| c as usize >= MAX_CPUS) {
            return Err(ConfigError::OutOfRange {
                key: "housekeeping_cpus",
                why: format!("CPU {c} is out of range (0..{MAX_CPUS})"),
            });
        }
        let mut sorted = self.housekeeping_cpus.clone();
        sorted.sort_unstable();
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return Err(ConfigError::OutOfRange {
                key: "housekeeping_cpus",
                why: format!("CPU {} is listed twice", w[0]),
            });
        }
        if !(-20..=19).contains(&self.nice) {
            return Err(ConfigError::OutOfRange { key: "nice", why: "must be in -20..=19".into() });
        }
        for (key, v) in [("user", &self.user), ("group", &self.group)] {
            if v.as_deref().is_some_and(|n| n.is_empty() || n.contains([':', '\n', '/'])) {
                return Err(ConfigError::OutOfRange { key, why: "not a valid user or group name".into() });
            }
        }
        if self.group.is_some() && self.user.is_none() {
            return Err(ConfigError::OutOfRange { key: "group", why: "needs user as well".into() });
        }
        let mut names: Vec<&str> = self.probes.iter().map(|p| p.name.as_str()).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(ConfigError::OutOfRange {
                key: "probes",
                why: format!("two probes are named {:?}; give one a name=LABEL", w[0]),
            });
        }
        // A family's series are named FAMILY:SERIES; no other probe may be.
        for fam in self.probes.iter().filter(|p| p.kind.has_series()) {
            let prefix = format!("{}:", fam.name);
            if let Some(other) = self.probes.iter().find(|p| p.name.starts_with(&prefix)) {
                return Err(ConfigError::OutOfRange {
                    key: "probes",
                    why: format!(
                        "{:?} could clash with the series of {:?} (named {prefix}...); give one a name=LABEL",
                        other.name, fam.name
                    ),
                });
            }
        }
        Ok(())
    }
}

/// `duration` / `--duration`: more than 0 (leave it out to run until
/// stopped) and at most [`MAX_DURATION`].
pub fn check_duration(d: Option<Duration>) -> Result<(), ConfigError> {
    match d {
        Some(d) if d.is_zero() => Err(ConfigError::OutOfRange {
            key: "duration",
            why: "must be more than 0 (leave it out to run until stopped)".into(),
        }),
        Some(d) if d > MAX_DURATION => Err(ConfigError::OutOfRange {
            key: "duration",
            why: format!("must be at most {MAX_DURATION:?} (366 days)"),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        assert_eq!(parse_duration("250µs").unwrap(), Duration::from_micros(250));
        assert_eq!(parse_duration("1.5ms").unwrap(), Duration::from_micros(1500));
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("7ns").unwrap(), Duration::from_nanos(7));
        for bad in ["", "10", "s", "1.2.3s", "5 parsecs", "-1s", "1e9s9", "00", "0x"] {
            assert!(matches!(parse_duration(bad), Err(ConfigError::BadDuration(_))), "{bad}");
        }
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO, "a zero needs no unit (check --measure 0)");
        assert_eq!(parse_duration(" 0 ").unwrap(), Duration::ZERO);
    }

    #[test]
    fn lock_specs_name_their_threads() {
        let p = ProbeSpec::parse("lock,comm=ctrl,threshold=300us").unwrap();
        assert_eq!((p.kind.family(), p.kind.has_series(), p.comm.as_deref()), (Family::Lock, true, Some("ctrl")));
        assert_eq!(p.ladder(), [Mechanism::TpBtf]);
        assert_eq!(ProbeSpec::parse("lock,pid=42").unwrap().pid, Some(42));
        let err = |s: &str| ProbeSpec::parse(s).unwrap_err().to_string();
        assert!(err("lock").contains("give comm=NAME or pid=TID"), "{}", err("lock"));
        assert!(err("lock:x,comm=c").contains("takes no ':' argument"));
        assert!(err("lock,comm=c,attach=raw_tp").contains("lock attaches via tp_btf"));
    }

    #[test]
    fn cycle_specs_name_their_thread_and_their_times() {
        let p = ProbeSpec::parse("cycle,comm=ctrl,period=1ms,deadline=800us").unwrap();
        assert_eq!(
            p.kind,
            ProbeKind::Cycle {
                period: Some(Duration::from_millis(1)),
                deadline: Some(Duration::from_micros(800)),
                timerfd: false,
                auto: false
            }
        );
        assert_eq!((p.kind.family(), p.kind.has_series()), (Family::Cycle, true));
        assert_eq!(ProbeSpec::parse("cycle,pid=42").unwrap().pid, Some(42));
        let err = |s: &str| ProbeSpec::parse(s).unwrap_err().to_string();
        assert!(err("cycle").contains("give comm=NAME or pid=TID"), "{}", err("cycle"));
        assert!(err("cycle,comm=c,period=0").contains("period must be more than 0"));
        assert!(err("cycle,comm=c,deadline=soon").contains("invalid duration \"soon\""));
        assert!(err("runq,period=1ms").contains("period= applies to cycle only"));
        assert!(matches!(
            ProbeSpec::parse("cycle,comm=c,timerfd=true").unwrap().kind,
            ProbeKind::Cycle { timerfd: true, .. }
        ));
        assert!(err("cycle,comm=c,timerfd=yes").contains("expected timerfd=true or timerfd=false"));
        assert!(err("runq,timerfd=true").contains("timerfd= applies to cycle only"));
        assert!(err("cycle,comm=c,attach=raw_tp").contains("cycle attaches via tp_btf"));
        assert!(matches!(ProbeSpec::parse("cycle,auto").unwrap().kind, ProbeKind::Cycle { auto: true, .. }));
        assert!(err("cycle").contains("or cycle,auto"), "{}", err("cycle"));
        for one in ["comm=c", "pid=4", "period=1ms", "deadline=1ms", "timerfd=true"] {
            let e = err(&format!("cycle,auto,{one}"));
            assert!(e.contains("watches the loops latmon finds") && e.contains(one.split('=').next().unwrap()), "{e}");
        }
        assert!(err("runq,auto").contains("auto applies to cycle only"));
    }

    /// Adversarial values found accepted silently: each is refused, naming
    /// the key and the limit.
    #[test]
    fn intervals_durations_and_probe_counts_are_bounded() {
        let refused = |toml: &str, needle: &str| {
            let e = Config::from_toml(toml).expect_err(toml).to_string();
            assert!(e.contains(needle), "{toml}: {e}");
        };
        refused("interval = \"18446744073s\"", "interval: must be at most");
        refused("interval = \"7200s\"", "interval: must be at most");
        refused("duration = \"0s\"", "duration: must be more than 0");
        refused("duration = \"0\"", "duration: must be more than 0");
        refused("duration = \"18446744073s\"", "duration: must be at most");
        let many: Vec<String> = (0..=MAX_CONFIG_PROBES).map(|i| format!("\"runq,name=r{i}\"")).collect();
        refused(
            &format!("probes = [{}]", many.join(",")),
            &format!("33 probes configured; at most {MAX_CONFIG_PROBES}"),
        );
        refused("probes = [\"runq,threshold=0s\"]", "threshold");
        let ok: Vec<String> = (0..MAX_CONFIG_PROBES).map(|i| format!("\"runq,name=r{i}\"")).collect();
        let c =
            Config::from_toml(&format!("probes = [{}]\ninterval = \"60m\"\nduration = \"1s\"", ok.join(","))).unwrap();
        assert_eq!((c.probes.len(), c.interval), (MAX_CONFIG_PROBES, MAX_INTERVAL));
    }

    #[test]
    fn probe_specs() {
        let p = ProbeSpec::parse("runq,comm=ctrl,pid=42,threshold=250us,name=rq").unwrap();
        assert_eq!(p.kind, ProbeKind::Runq);
        assert_eq!((p.pid, p.comm.as_deref(), p.name.as_str()), (Some(42), Some("ctrl"), "rq"));
        assert_eq!(p.threshold, Some(Duration::from_micros(250)));
        assert_eq!(ProbeSpec::parse("runq").unwrap().name, "runq");
        assert_eq!(ProbeSpec::parse("syscall:nanosleep").unwrap().kind, ProbeKind::Syscall(Some("nanosleep".into())));
        assert_eq!(ProbeSpec::parse("kfunc:do_nanosleep").unwrap().kind, ProbeKind::Kfunc("do_nanosleep".into()));
        assert_eq!(ProbeSpec::parse("chain,comm=ctrl").unwrap().kind, ProbeKind::Chain { response: None });
        assert_eq!(
            ProbeSpec::parse("chain,comm=ctrl,response=/opt/robot/bin/ctrl:cycle_done").unwrap().kind,
            ProbeKind::Chain {
                response: Some(UserFunc { binary: "/opt/robot/bin/ctrl".into(), symbol: "cycle_done".into() })
            }
        );
        for (spec, series) in [
            ("syscall", true),
            ("syscall:read", false),
            ("irq", true),
            ("softirq", true),
            ("timer", false),
            ("runq", false),
        ] {
            assert_eq!(ProbeSpec::parse(spec).unwrap().kind.has_series(), series, "{spec}");
        }
        let u = ProbeSpec::parse("ufunc:/lib/x86_64-linux-gnu/libc.so.6:nanosleep,threshold=1ms").unwrap();
        assert_eq!(
            u.kind,
            ProbeKind::Ufunc { binary: "/lib/x86_64-linux-gnu/libc.so.6".into(), symbol: "nanosleep".into() }
        );
        assert_eq!(u.name, "ufunc:/lib/x86_64-linux-gnu/libc.so.6:nanosleep");
        assert_eq!(u.ladder(), [Mechanism::Uprobe]);
        let k = ProbeSpec::parse("kfunc:do_nanosleep").unwrap();
        assert_eq!(k.ladder(), [Mechanism::Fentry, Mechanism::Kprobe]);
        let k = ProbeSpec::parse("kfunc:do_nanosleep,attach=kprobe").unwrap();
        assert_eq!((k.attach, k.ladder()), (Some(Mechanism::Kprobe), vec![Mechanism::Kprobe]));
        assert_eq!(k.name, "kfunc:do_nanosleep", "options are not part of the name");
        let h = ProbeSpec::parse("syscall,hist=true").unwrap();
        assert_eq!((h.hist, h.name.as_str()), (true, "syscall"));
        assert!(!ProbeSpec::parse("syscall,hist=false").unwrap().hist);
        assert!(!ProbeSpec::parse("syscall").unwrap().hist);
        assert!(ProbeSpec::parse("syscall,waits=alert").unwrap().alert_waits);
        assert!(!ProbeSpec::parse("syscall,waits=quiet").unwrap().alert_waits);
        assert!(!ProbeSpec::parse("syscall").unwrap().alert_waits);
        let c = Config::from_toml("probes = [\"runq,hist=true\", \"syscall\"]").unwrap();
        assert_eq!(c.probes.iter().map(|p| p.hist).collect::<Vec<_>>(), [true, false]);
    }

    #[test]
    fn bad_probe_specs_name_the_problem() {
        assert_eq!(ProbeSpec::parse("runqq"), Err(ConfigError::UnknownProbeKind("runqq".into())));
        for (spec, needle) in [
            ("runq:x", "no ':' argument"),
            ("kfunc", "kfunc:FUNCTION"),
            ("ufunc:relative:sym", "absolute"),
            ("runq,pid=0", "positive"),
            ("runq,pid=abc", "positive"),
            ("runq,comm=averyveryverylongname", "comm must be"),
            ("runq,colour=red", "unknown option"),
            ("runq,hist=yes", "hist=yes: expected hist=true or hist=false"),
            ("runq,hist", "KEY=VALUE"),
            ("syscall,waits=yes", "waits=yes: expected waits=alert or waits=quiet"),
            ("syscall:read,waits=alert", "waits= applies to the syscall family"),
            ("runq,waits=alert", "waits= applies to the syscall family"),
            ("runq,comm", "KEY=VALUE"),
            ("kfunc:f,attach=uprobe", "kfunc attaches via fentry or kprobe"),
            ("ufunc:/bin/x:f,attach=kprobe", "ufunc attaches via uprobe"),
            ("chain", "named thread"),
            ("runq,response=/bin/x:f", "response= applies to chain only"),
            ("chain,comm=c,response=x:f", "response=/absolute/path"),
            ("chain,comm=c,response=/bin/x:", "response=/absolute/path"),
            ("", "empty"),
        ] {
            let e = ProbeSpec::parse(spec).unwrap_err().to_string();
            assert!(e.contains(needle), "{spec}: {e}");
        }
        assert!(matches!(ProbeSpec::parse("runq,threshold=fast"), Err(ConfigError::BadDuration(_))));
    }

    #[test]
    fn config_file() {
        let c = Config::from_toml(
            "board = \"qemu\"\ninterval = \"500ms\"\nformat = \"json\"\nprobes = [\"runq,comm=ctrl\"]\n",
        )
        .unwrap();
        assert_eq!(c.interval, Duration::from_millis(500));
        assert_eq!(c.format, Some(Format::Json));
        assert_eq!(c.probes[0].comm.as_deref(), Some("ctrl"));
        assert_eq!(c.outputs, vec!["-".to_string()]);
        assert_eq!(Config::from_toml("").unwrap(), Config::default());
        let c = Config::from_toml("housekeeping_cpus = [0, 3]").unwrap();
        assert_eq!(c.housekeeping_cpus, vec![0, 3]);
    }

    #[test]
    fn agent_keys() {
        let c = Config::from_toml(
            "overhead_budget = { cpu_percent = 1.0, ns_per_event = 500, intervals = 3 }\n\
             housekeeping_cpus = [0]\nsched = \"idle\"\nnice = 5\nmlockall = true\n\
             user = \"latmon\"\ngroup = \"dialout\"\n",
        )
        .unwrap();
        assert_eq!(c.overhead_budget, Some(Budget { cpu_percent: Some(1.0), ns_per_event: Some(500), intervals: 3 }));
        assert_eq!(c.housekeeping_cpus, vec![0]);
        assert_eq!((c.sched, c.nice, c.mlockall), (Sched::Idle, 5, true));
        assert_eq!((c.user.as_deref(), c.group.as_deref()), (Some("latmon"), Some("dialout")));
        let d = Config::from_toml("overhead_budget = { ns_per_event = 300 }").unwrap();
        assert_eq!(d.overhead_budget.unwrap().intervals, DEFAULT_BUDGET_INTERVALS);
        let z = Config::default();
        assert_eq!(
            (z.sched, z.nice, z.mlockall, z.user, z.overhead_budget),
            (Sched::Other, DEFAULT_NICE, true, None, None)
        );
    }

    #[test]
    fn bad_config_files() {
        for (text, needle) in [
            ("intervall = \"1s\"", "unknown field"),
            ("interval = 5", "invalid type"),
            ("interval = \"1ms\"", "at least"),
            ("probes = []", "at least one probe"),
            ("probes = [\"runq\", \"runq\"]", "two probes are named"),
            ("probes = [\"syscall\", \"syscall:read\"]", "could clash"),
            ("format = \"xml\"", "unknown variant"),
            ("probes = [\"bogus\"]", "unknown probe kind"),
            ("overhead_budget = { intervals = 3 }", "cpu_percent and/or ns_per_event"),
            ("overhead_budget = { cpu_percent = 0.0 }", "cpu_percent must be"),
            ("overhead_budget = { ns_per_event = 0 }", "at least 1"),
            ("overhead_budget = { cpu_percent = 1.0, intervals = 0 }", "intervals must be"),
            ("overhead_budget = { cpu = 1.0 }", "unknown field"),
            ("housekeeping_cpus = [0, 5000]", "CPU 5000"),
            ("sched = \"fifo\"", "unknown variant"),
            ("nice = 40", "-20..=19"),
            ("group = \"latmon\"", "needs user"),
            ("user = \"\"", "not a valid user"),
        ] {
            let e = Config::from_toml(text).unwrap_err().to_string();
            assert!(e.contains(needle), "{text}: {e}");
        }
    }
}
