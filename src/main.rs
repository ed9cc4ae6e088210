// SPDX-License-Identifier: MIT
//! latmon command line. Everything else lives in the library.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use serde::Serialize;

use latmon::config::{parse_duration, Config, Format, ProbeSpec};
use latmon::probes::{self, features};
use latmon::{agent, sinks};

const EXAMPLES: &str = "\
EXAMPLES:
    latmon run                                 # built-in default: run-queue, syscall and IRQ latency, text, 1 s
    latmon run --probe runq --interval 1s --duration 5s --format json
    latmon run --probe runq,comm=ctrl_loop     # only the control loop's threads
    latmon run --probe timer,comm=ctrl_loop    # its timer wakeup latency (what cyclictest measures)
    latmon run --probe syscall,pid=1234        # per-syscall latency of one process
    latmon run --probe chain,comm=ctrl_loop    # timer/IRQ -> wakeup -> running, in stages
    latmon run --config /etc/latmon/latmon.toml
    latmon check                               # what this kernel can attach, and the plan
    latmon check --config board.toml --json    # board bring-up: exit 0 ok, 1 probe fails, 2 invalid";

/// eBPF latency monitor for real-time Linux robot controllers.
///
/// Measures where the microseconds go (run-queue wait, syscalls, interrupts,
/// timer wakeups, ...) with histograms aggregated in the kernel, and ships
/// compact summaries.
#[derive(Parser)]
#[command(name = "latmon", version, after_long_help = EXAMPLES)]
struct Cli {
    /// More log output on stderr (-v info, -vv debug incl. libbpf, -vvv trace).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the agent: attach probes, print a summary every interval.
    Run(RunArgs),
    /// Report kernel features, validate the config and try every probe.
    Check(CheckArgs),
}

#[derive(clap::Args)]
struct Common {
    /// TOML config file (see board-configs/). Without it and without
    /// --probe, the built-in default runs.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Probe SPEC, repeatable; replaces the config's probe list.
    /// runq | timer | irq | softirq | syscall[:NAME] | chain | kfunc:FUNC | ufunc:/path:SYM,
    /// each with optional ,comm=NAME ,pid=N ,threshold=250us ,name=LABEL
    #[arg(long = "probe", value_name = "SPEC")]
    probes: Vec<String>,
}

#[derive(clap::Args)]
struct RunArgs {
    #[command(flatten)]
    common: Common,
    /// Summary interval (e.g. 1s, 250ms); at least 10ms.
    #[arg(long, value_name = "DURATION")]
    interval: Option<String>,
    /// Stop after this long (default: run until SIGINT/SIGTERM).
    #[arg(long, value_name = "DURATION")]
    duration: Option<String>,
    /// Output format.
    #[arg(long, value_parser = ["text", "json"])]
    format: Option<String>,
    /// Output SINK, repeatable ("-" is stdout).
    #[arg(long = "output", value_name = "SINK")]
    outputs: Vec<String>,
}

#[derive(clap::Args)]
struct CheckArgs {
    #[command(flatten)]
    common: Common,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

fn load_config(c: &Common) -> Result<Config> {
    let mut cfg = match &c.config {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading config {}", path.display()))?;
            Config::from_toml(&text).with_context(|| format!("config {}", path.display()))?
        }
        None => Config::default(),
    };
    if !c.probes.is_empty() {
        cfg.probes = c.probes.iter().map(|s| ProbeSpec::parse(s)).collect::<Result<_, _>>()?;
    }
    Ok(cfg)
}

fn cmd_run(a: RunArgs) -> Result<ExitCode> {
    let mut cfg = load_config(&a.common)?;
    if let Some(i) = &a.interval {
        cfg.interval = parse_duration(i)?;
    }
    if let Some(d) = &a.duration {
        cfg.duration = Some(parse_duration(d)?);
    }
    if let Some(f) = &a.format {
        cfg.format = if f == "json" { Format::Json } else { Format::Text };
    }
    if !a.outputs.is_empty() {
        cfg.outputs = a.outputs.clone();
    }
    cfg.validate()?;
    let mut sinks = cfg
        .outputs
        .iter()
        .map(|o| sinks::open(o, cfg.format))
        .collect::<Result<Vec<_>, _>>()
        .map_err(anyhow::Error::msg)?;
    agent::run(&cfg, &mut sinks)?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Serialize)]
struct ProbePlan {
    spec: String,
    name: String,
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    attach: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mode: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Serialize)]
struct CheckReport {
    kernel: String,
    btf: bool,
    config: String,
    config_ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    config_error: Option<String>,
    features: Vec<features::KindStatus>,
    probes: Vec<ProbePlan>,
}

fn cmd_check(a: CheckArgs) -> Result<ExitCode> {
    let config_name = a.common.config.as_ref().map_or("built-in default".into(), |p| p.display().to_string());
    let kernel = nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".into());
    let mut rep = CheckReport {
        kernel,
        btf: probes::kernel_btf_present(),
        config: config_name,
        config_ok: true,
        config_error: None,
        features: Vec::new(),
        probes: Vec::new(),
    };
    let cfg = load_config(&a.common).and_then(|c| c.validate().map(|()| c).map_err(Into::into));
    let privileged = agent::require_bpf_privilege();
    match (&cfg, &privileged) {
        (Err(e), _) => {
            rep.config_ok = false;
            rep.config_error = Some(format!("{e:#}"));
        }
        (Ok(cfg), Ok(())) => {
            probes::route_libbpf_logs();
            probes::ensure_tracefs();
            rep.features = features::detect();
            for (spec, opened) in cfg.probes.iter().zip(probes::open_all(&cfg.probes)) {
                let mut plan = ProbePlan {
                    spec: spec.name.clone(),
                    name: spec.name.clone(),
                    ok: false,
                    attach: None,
                    mode: None,
                    error: None,
                };
                match opened {
                    Ok(p) => {
                        plan.ok = true;
                        plan.attach = Some(p.info().attach.clone());
                        plan.mode = Some(p.info().mode.clone());
                    }
                    Err(e) => plan.error = Some(e.to_string()),
                }
                rep.probes.push(plan);
            }
        }
        (Ok(_), Err(_)) => {}
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rep)?);
    } else {
        print_check(&rep);
    }
    if !rep.config_ok {
        return Ok(ExitCode::from(2));
    }
    privileged?;
    Ok(if rep.probes.iter().all(|p| p.ok) { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn print_check(r: &CheckReport) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "kernel       {}", r.kernel);
    let _ = writeln!(o, "btf          {}", if r.btf { "yes (/sys/kernel/btf/vmlinux)" } else { "no" });
    match &r.config_error {
        None => {
            let _ = writeln!(o, "config       ok ({})", r.config);
        }
        Some(e) => {
            let _ = writeln!(o, "config       INVALID ({}): {e}", r.config);
        }
    }
    if !r.features.is_empty() {
        let _ = writeln!(o, "attach kinds");
        for f in &r.features {
            if f.ok {
                let _ = writeln!(o, "  {:<11} yes", f.kind);
            } else {
                let _ = writeln!(o, "  {:<11} no: {}", f.kind, f.error);
            }
        }
    }
    if !r.probes.is_empty() {
        let _ = writeln!(o, "probes");
        for p in &r.probes {
            match (&p.attach, &p.error) {
                (Some(at), _) => {
                    let _ = writeln!(o, "  {:<20} ok via {} ({})", p.name, at, p.mode.as_deref().unwrap_or(""));
                }
                (_, Some(e)) => {
                    let _ = writeln!(o, "  {:<20} FAILED: {e}", p.name);
                }
                _ => {}
            }
        }
    }
}

/// Minimal stderr logger: the agent must not pull in a logging framework.
struct StderrLog(log::LevelFilter);

impl log::Log for StderrLog {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= self.0
    }
    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            eprintln!("latmon: {}: {}", r.level().as_str().to_ascii_lowercase(), r.args());
        }
    }
    fn flush(&self) {}
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let level = match cli.verbose {
        0 => log::LevelFilter::Warn,
        1 => log::LevelFilter::Info,
        2 => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    };
    let logger: &'static StderrLog = Box::leak(Box::new(StderrLog(level)));
    let _ = log::set_logger(logger);
    log::set_max_level(level);
    let res = match cli.cmd {
        Cmd::Run(a) => cmd_run(a),
        Cmd::Check(a) => cmd_check(a),
    };
    match res {
        Ok(code) => code,
        Err(e) => {
            eprintln!("latmon: {e:#}");
            ExitCode::FAILURE
        }
    }
}
