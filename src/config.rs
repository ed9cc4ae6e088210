// SPDX-License-Identifier: MIT
//! Configuration: probe specs, durations and the TOML config file. Pure.
//!
//! Probe SPEC (CLI `--probe` and config `probes = [...]` use the same words):
//! `runq`, `timer`, `irq`, `softirq`, `syscall[:NAME]`, `chain`, `kfunc:FUNCTION`,
//! `ufunc:/path/to/binary:SYMBOL`, each optionally followed by
//! `,comm=NAME`, `,pid=N`, `,threshold=250us`, `,name=LABEL`.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use crate::bpf::limits::COMM_LEN;

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
                "unknown probe kind {s:?}: expected runq, timer, irq, softirq, syscall[:NAME], chain, kfunc:FUNCTION or ufunc:PATH:SYMBOL"
            ),
            Self::BadProbe { spec, why } => write!(f, "invalid probe spec {spec:?}: {why}"),
            Self::BadFile(s) => write!(f, "invalid config: {s}"),
            Self::OutOfRange { key, why } => write!(f, "invalid config: {key}: {why}"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Parse `250us`, `1.5ms`, `10s`, `2m`, `100ns` (also `µs`).
pub fn parse_duration(s: &str) -> Result<Duration, ConfigError> {
    let bad = || ConfigError::BadDuration(s.to_string());
    let t = s.trim();
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
    /// Event (timer or IRQ) -> wakeup -> running, in stages, for a named thread.
    Chain,
    Kfunc(String),
    Ufunc { binary: String, symbol: String },
}

impl ProbeKind {
    /// The family word used in specs and output (`kind` in JSON).
    pub fn family(&self) -> &'static str {
        match self {
            Self::Runq => "runq",
            Self::Timer => "timer",
            Self::Irq => "irq",
            Self::Softirq => "softirq",
            Self::Syscall(_) => "syscall",
            Self::Chain => "chain",
            Self::Kfunc(_) => "kfunc",
            Self::Ufunc { .. } => "ufunc",
        }
    }

    /// Families whose series are reported as `NAME:SERIES` beside the family
    /// line (see probes::series).
    pub fn has_series(&self) -> bool {
        matches!(self, Self::Syscall(None) | Self::Irq | Self::Softirq | Self::Chain)
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
        let no_arg = |k: ProbeKind| match arg {
            None => Ok(k),
            Some(_) => Err(bad(&format!("{word} takes no ':' argument"))),
        };
        let kind = match word {
            "runq" => no_arg(ProbeKind::Runq)?,
            "timer" => no_arg(ProbeKind::Timer)?,
            "irq" => no_arg(ProbeKind::Irq)?,
            "softirq" => no_arg(ProbeKind::Softirq)?,
            "chain" => no_arg(ProbeKind::Chain)?,
            "syscall" => match arg {
                None => ProbeKind::Syscall(None),
                Some(n) if valid_ident(n) => ProbeKind::Syscall(Some(n.to_string())),
                Some(_) => return Err(bad("syscall name must be an identifier, e.g. syscall:nanosleep")),
            },
            "kfunc" => match arg {
                Some(f) if valid_ident(f) => ProbeKind::Kfunc(f.to_string()),
                _ => return Err(bad("expected kfunc:FUNCTION, e.g. kfunc:do_nanosleep")),
            },
            "ufunc" => {
                // ufunc:/path/to/binary:SYMBOL; the symbol is after the last ':'.
                let (binary, symbol) = arg
                    .and_then(|a| a.rsplit_once(':'))
                    .filter(|(b, s)| b.starts_with('/') && !s.is_empty())
                    .ok_or_else(|| bad("expected ufunc:/absolute/path/to/binary:SYMBOL"))?;
                ProbeKind::Ufunc { binary: binary.to_string(), symbol: symbol.to_string() }
            }
            "" => return Err(bad("empty probe spec")),
            other => return Err(ConfigError::UnknownProbeKind(other.to_string())),
        };
        let mut p = ProbeSpec { kind, pid: None, comm: None, threshold: None, name: head.to_string() };
        for opt in parts {
            let (k, v) = opt
                .split_once('=')
                .map(|(k, v)| (k.trim(), v.trim()))
                .ok_or_else(|| bad(&format!("option {opt:?} is not KEY=VALUE")))?;
            match k {
                "pid" => p.pid = Some(v.parse().ok().filter(|&n| n > 0).ok_or_else(|| bad("pid must be a positive integer"))?),
                "comm" => {
                    if v.is_empty() || v.len() >= COMM_LEN {
                        return Err(bad(&format!("comm must be 1..{} bytes (the kernel truncates task names)", COMM_LEN - 1)));
                    }
                    p.comm = Some(v.to_string());
                }
                "threshold" => p.threshold = Some(parse_duration(v)?),
                "name" => {
                    if v.is_empty() {
                        return Err(bad("name must not be empty"));
                    }
                    p.name = v.to_string();
                }
                other => return Err(bad(&format!("unknown option {other:?} (expected comm, pid, threshold, name)"))),
            }
        }
        if p.kind == ProbeKind::Chain && p.comm.is_none() && p.pid.is_none() {
            return Err(bad("chain follows one named thread: give comm=NAME or pid=N"));
        }
        Ok(p)
    }
}

fn valid_ident(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
}

/// Output format for text-capable sinks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Text,
    Json,
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
    pub format: Format,
    pub outputs: Vec<String>,
    pub probes: Vec<ProbeSpec>,
}

/// The built-in default: what runs with no config and no --probe.
/// Run-queue, syscall and IRQ latency (architecture.md): each works on any
/// kernel with BTF and tracepoints, and costs about 0.1-0.2 us per event
/// (docs/probes.md).
pub const DEFAULT_PROBES: &[&str] = &["runq", "syscall", "irq"];
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);
pub const MIN_INTERVAL: Duration = Duration::from_millis(10);

impl Default for Config {
    fn default() -> Self {
        Config {
            board: None,
            target: None,
            interval: DEFAULT_INTERVAL,
            duration: None,
            format: Format::Text,
            outputs: vec!["-".into()],
            probes: DEFAULT_PROBES.iter().map(|s| ProbeSpec::parse(s).expect("default spec")).collect(),
        }
    }
}

impl Config {
    /// Parse and validate a TOML config file's text.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::BadFile(e.to_string().trim().to_string()))?;
        let mut c = Config::default();
        c.board = raw.board;
        c.target = raw.target;
        if let Some(i) = raw.interval {
            c.interval = parse_duration(&i)?;
        }
        if let Some(d) = raw.duration {
            c.duration = Some(parse_duration(&d)?);
        }
        if let Some(f) = raw.format {
            c.format = f;
        }
        if let Some(o) = raw.outputs {
            c.outputs = o;
        }
        if let Some(p) = raw.probes {
            c.probes = p.iter().map(|s| ProbeSpec::parse(s)).collect::<Result<_, _>>()?;
        }
        c.validate()?;
        Ok(c)
    }

    /// Range checks shared by the file and the CLI.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.interval < MIN_INTERVAL {
            return Err(ConfigError::OutOfRange { key: "interval", why: format!("must be at least {MIN_INTERVAL:?}") });
        }
        if self.probes.is_empty() {
            return Err(ConfigError::OutOfRange { key: "probes", why: "at least one probe is needed".into() });
        }
        if self.outputs.is_empty() {
            return Err(ConfigError::OutOfRange { key: "outputs", why: "at least one output is needed".into() });
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
        for bad in ["", "10", "s", "1.2.3s", "5 parsecs", "-1s", "1e9s9"] {
            assert!(matches!(parse_duration(bad), Err(ConfigError::BadDuration(_))), "{bad}");
        }
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
        assert_eq!(ProbeSpec::parse("chain,comm=ctrl").unwrap().kind, ProbeKind::Chain);
        for (spec, series) in [("syscall", true), ("syscall:read", false), ("irq", true), ("softirq", true), ("timer", false), ("runq", false)] {
            assert_eq!(ProbeSpec::parse(spec).unwrap().kind.has_series(), series, "{spec}");
        }
        let u = ProbeSpec::parse("ufunc:/lib/x86_64-linux-gnu/libc.so.6:nanosleep,threshold=1ms").unwrap();
        assert_eq!(
            u.kind,
            ProbeKind::Ufunc { binary: "/lib/x86_64-linux-gnu/libc.so.6".into(), symbol: "nanosleep".into() }
        );
        assert_eq!(u.name, "ufunc:/lib/x86_64-linux-gnu/libc.so.6:nanosleep");
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
            ("runq,comm", "KEY=VALUE"),
            ("chain", "named thread"),
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
        assert_eq!(c.format, Format::Json);
        assert_eq!(c.probes[0].comm.as_deref(), Some("ctrl"));
        assert_eq!(c.outputs, vec!["-".to_string()]);
        assert_eq!(Config::from_toml("").unwrap(), Config::default());
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
        ] {
            let e = Config::from_toml(text).unwrap_err().to_string();
            assert!(e.contains(needle), "{text}: {e}");
        }
    }
}
