// SPDX-License-Identifier: MIT
//! latmon command line. Everything else lives in the library.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use serde::Serialize;

use latmon::config::{parse_duration, Config, Format, ProbeSpec};
use latmon::ident::{BtfMode, Mechanism};
use latmon::probes::{self, features};
use latmon::{agent, cost, hygiene, privs, sinks, view};

const EXAMPLES: &str = "\
EXAMPLES:
    latmon run                                 # built-in default: run-queue, syscall and IRQ latency, text, 1 s
    latmon run --probe runq --interval 1s --duration 5s --format json
    latmon run --probe runq,comm=ctrl_loop     # only the control loop's threads
    latmon run --probe ufunc:/opt/robot/bin/ctrl:control_cycle,threshold=1ms
    latmon run --probe kfunc:do_nanosleep      # fentry, else kprobe
    latmon run --probe timer,comm=ctrl_loop    # its timer wakeup latency (what cyclictest measures)
    latmon run --probe syscall,pid=1234        # per-syscall latency of one process
    latmon run --probe chain,comm=ctrl_loop    # timer/IRQ -> wakeup -> running, in stages
    latmon run --config /etc/latmon/latmon.toml
    latmon check                               # what this kernel can attach, and the plan
    latmon check --config board.toml --json    # board bring-up: exit 0 ok, 1 probe fails, 2 invalid
    latmon run --output serial:/dev/ttyS1@115200            # postcard frames on the UART
    latmon run --output serial:/dev/ttyS1 --format text     # readable text for minicom/screen
    latmon run --output - --output tcp://0.0.0.0:7070       # text here, frames to every TCP client
    latmon run --output modbus-tcp://0.0.0.0:502,allow=10.0.0.5   # a PLC polls registers (docs/modbus-map.md)
    latmon run --output modbus-rtu:serial:/dev/ttyS1@19200,unit=17 # ...or over RS-485
    latmon view serial:/dev/ttyUSB0@115200     # technician's live view of a board's UART
    latmon decode tcp://robot1:7070            # frames -> JSON lines";

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
    /// Live terminal view of a frame stream (histograms, percentiles,
    /// alerts, link quality).
    View(SourceArgs),
    /// Decode a frame stream into JSON lines, one per frame.
    Decode(SourceArgs),
}

#[derive(clap::Args)]
struct SourceArgs {
    /// SOURCE: - (stdin) | serial:/dev/ttyX[@BAUD][,parity=..,flow=..] |
    /// tcp://HOST:PORT (connect) | udp://HOST:PORT (bind) | unix:/PATH | file:PATH
    #[arg(value_name = "SOURCE")]
    source: String,
    /// Stop after this long (default: until the source ends, or forever).
    #[arg(long, value_name = "DURATION")]
    duration: Option<String>,
}

#[derive(clap::Args)]
struct Common {
    /// TOML config file (see board-configs/). Without it and without
    /// --probe, the built-in default runs.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Probe SPEC, repeatable; replaces the config's probe list.
    /// runq | timer | irq | softirq | syscall[:NAME] | chain | kfunc:FUNC | ufunc:/path:SYM,
    /// each with optional ,comm=NAME ,pid=N ,threshold=250us ,name=LABEL ,attach=MECH
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
    /// Output format for every output. Without it: text on stdout,
    /// frames (docs/wire-format.md) on every other output. A SINK's own
    /// ,format=text|json|frames wins over both.
    #[arg(long, value_parser = ["text", "json", "frames"])]
    format: Option<String>,
    /// Output SINK, repeatable: - (stdout) | serial:/dev/ttyX[@BAUD][,parity=none|even|odd][,flow=none|hw|sw] |
    /// tcp://HOST:PORT[,clients=8] (listen) | udp://HOST:PORT | unix:/PATH[,clients=8] (listen) | file:PATH |
    /// modbus-tcp://[HOST]:PORT[,unit=N][,clients=8][,idle=60s][,allow=NET+NET] (HOST defaults to 127.0.0.1) |
    /// modbus-rtu:serial:/dev/ttyX[@19200][,unit=1][,parity=even] (register map: docs/modbus-map.md)
    #[arg(long = "output", value_name = "SINK", allow_hyphen_values = true)]
    outputs: Vec<String>,
}

#[derive(clap::Args)]
struct CheckArgs {
    #[command(flatten)]
    common: Common,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
    /// Measure latmon's own BPF cost this long with every probe attached
    /// (under whatever load the machine has); 0 skips it.
    #[arg(long, value_name = "DURATION", default_value = "1s")]
    measure: String,
}

fn load_config(c: &Common) -> Result<Config> {
    let mut cfg = match &c.config {
        Some(path) => {
            let text = read_config_file(path)?;
            Config::from_toml(&text).with_context(|| format!("config {}", path.display()))?
        }
        None => Config::default(),
    };
    if !c.probes.is_empty() {
        cfg.probes = c.probes.iter().map(|s| ProbeSpec::parse(s)).collect::<Result<_, _>>()?;
    }
    if let Some(p) = &cfg.btf_path {
        probes::set_btf_path(std::path::Path::new(p)).map_err(anyhow::Error::msg)?;
    }
    Ok(cfg)
}

/// The config file's text, refused beyond `MAX_CONFIG_BYTES` (read with a
/// limit: a path such as /dev/zero must not fill memory).
fn read_config_file(path: &std::path::Path) -> Result<String> {
    use std::io::Read;
    let max = latmon::config::MAX_CONFIG_BYTES;
    let f = std::fs::File::open(path).with_context(|| format!("reading config {}", path.display()))?;
    let mut bytes = Vec::new();
    f.take(max + 1).read_to_end(&mut bytes).with_context(|| format!("reading config {}", path.display()))?;
    if bytes.len() as u64 > max {
        anyhow::bail!("config {}: larger than {max} bytes", path.display());
    }
    String::from_utf8(bytes).map_err(|_| anyhow::anyhow!("config {}: not UTF-8 text", path.display()))
}

/// The config of `latmon run`: the file (or default), then the flags.
fn run_config(a: &RunArgs) -> Result<Config> {
    let mut cfg = load_config(&a.common)?;
    if let Some(i) = &a.interval {
        cfg.interval = parse_duration(i)?;
    }
    if let Some(d) = &a.duration {
        cfg.duration = Some(parse_duration(d)?);
    }
    if let Some(f) = &a.format {
        cfg.format = Format::parse(f);
    }
    if !a.outputs.is_empty() {
        cfg.outputs = a.outputs.clone();
    }
    cfg.validate()?;
    Ok(cfg)
}

fn cmd_run(a: RunArgs) -> Result<ExitCode> {
    // Before any thread exists, so that every thread inherits them: the
    // signal mask, the CPU set and policy, and (with `user`) the bounding
    // set and no_new_privs.
    agent::block_signals()?;
    let cfg = run_config(&a)?;
    let identity = match &cfg.user {
        Some(u) => Some(privs::resolve(u, cfg.group.as_deref()).map_err(anyhow::Error::msg).context("user/group")?),
        None => None,
    };
    let applied = hygiene::apply(&cfg).map_err(anyhow::Error::msg)?;
    log::info!("threads: {applied}");
    if identity.is_some() {
        privs::prepare().map_err(anyhow::Error::msg).context("preparing the privilege drop")?;
    }
    // Outputs start (bind, open) before the agent: mistakes fail early.
    let mut sinks = cfg
        .outputs
        .iter()
        .map(|o| sinks::open(o, cfg.format))
        .collect::<Result<Vec<_>, _>>()
        .map_err(anyhow::Error::msg)?;
    let reload = || run_config(&a);
    let opts = agent::RunOptions {
        reload: a.common.config.is_some().then_some(&reload as &dyn Fn() -> Result<Config>),
        drop_to: identity,
    };
    agent::run_with(&cfg, &mut sinks, opts)?;
    Ok(ExitCode::SUCCESS)
}

fn source_duration(a: &SourceArgs) -> Result<Option<std::time::Duration>> {
    let d = match &a.duration {
        Some(d) => Some(parse_duration(d)?),
        None => None,
    };
    latmon::config::check_duration(d)?;
    Ok(d)
}

#[derive(Serialize)]
struct OutputPlan {
    /// The word as written.
    spec: String,
    /// The endpoint it names, normalised (serial baud filled in); the word
    /// itself when it does not parse.
    output: String,
    ok: bool,
    /// Why `latmon run` would refuse it.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// Worth knowing, not an error (a serial device absent now).
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    format: Option<String>,
    /// Bytes per second the output may use (None: unlimited).
    budget_bps: Option<u32>,
    /// A serial line's rate in bytes per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    line_bps: Option<u32>,
}

#[derive(Serialize)]
struct ProbePlan {
    spec: String,
    name: String,
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    attach: Option<Mechanism>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mode: Option<String>,
    /// Which build of the probe's BPF object runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    btf_mode: Option<BtfMode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// latmon's own cost, measured during check (see `measure_ns`).
    #[serde(skip_serializing_if = "Option::is_none")]
    cost: Option<PlanCost>,
}

#[derive(Serialize)]
struct PlanCost {
    bpf_runs: u64,
    bpf_run_time_ns: u64,
    bpf_ns_per_event: u64,
    events_per_s: u64,
    bpf_cpu_percent: f64,
    /// Runs of the probe's programs the kernel skipped during the
    /// measurement (`recursion_misses`).
    bpf_missed: u64,
    /// Over `overhead_budget` (if configured) during the measurement.
    over_budget: bool,
}

#[derive(Serialize)]
struct CheckReport {
    kernel: String,
    /// The kernel exposes its own BTF.
    btf: bool,
    /// Where CO-RE relocations take kernel types from (kernel or btf_path).
    #[serde(skip_serializing_if = "Option::is_none")]
    btf_source: Option<String>,
    /// LATMON_FORCE_NO_BTF is set: BTF is ignored, as if there were none.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    force_no_btf: bool,
    config: String,
    config_ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    config_error: Option<String>,
    features: Vec<features::KindStatus>,
    /// Every output, checked as `latmon run` would open it.
    outputs: Vec<OutputPlan>,
    probes: Vec<ProbePlan>,
    /// How long latmon's own cost was measured (0: not measured).
    measure_ns: u64,
    /// Why the cost could not be measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    measure_error: Option<String>,
    /// CPU share of all probes' BPF during the measurement.
    #[serde(skip_serializing_if = "Option::is_none")]
    bpf_cpu_percent: Option<f64>,
    /// The CPUs latmon's threads would run on (`housekeeping_cpus`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    housekeeping_cpus: Vec<u32>,
    /// The user latmon would drop to (`user`/`group`), resolved.
    #[serde(skip_serializing_if = "Option::is_none")]
    drop_to: Option<String>,
}

/// The outputs of a config with their budgets (frames outputs only send
/// deltas and keyframes within one; Modbus and Prometheus serve on
/// request).
fn output_plans(c: &latmon::config::Config) -> Vec<OutputPlan> {
    use latmon::sinks::spec::{Endpoint, LinkSpec};
    c.outputs
        .iter()
        .map(|w| {
            let (ok, error, note) = match sinks::check(w, c.format) {
                Ok(note) => (true, None, note),
                Err(e) => (false, Some(e), None),
            };
            let mut plan = OutputPlan {
                spec: w.clone(),
                output: w.clone(),
                ok,
                error,
                note,
                format: None,
                budget_bps: None,
                line_bps: None,
            };
            if let Ok(spec) = LinkSpec::parse(w) {
                let format = spec.effective_format(c.format);
                plan.line_bps = match &spec.endpoint {
                    Endpoint::Serial(s) => Some(s.bytes_per_s()),
                    _ => None,
                };
                if format == latmon::config::Format::Frames {
                    plan.budget_bps = spec.budget_bps();
                }
                plan.output = spec.endpoint.to_string();
                plan.format = Some(format!("{format:?}").to_lowercase());
            }
            plan
        })
        .collect()
}

fn cmd_check(a: CheckArgs) -> Result<ExitCode> {
    let config_name = a.common.config.as_ref().map_or("built-in default".into(), |p| p.display().to_string());
    let kernel = nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".into());
    let mut rep = CheckReport {
        kernel,
        btf: std::path::Path::new("/sys/kernel/btf/vmlinux").exists(),
        btf_source: None,
        force_no_btf: probes::no_btf_forced(),
        config: config_name,
        config_ok: true,
        config_error: None,
        features: Vec::new(),
        outputs: Vec::new(),
        probes: Vec::new(),
        measure_ns: 0,
        measure_error: None,
        bpf_cpu_percent: None,
        housekeeping_cpus: Vec::new(),
        drop_to: None,
    };
    let measure = parse_duration(&a.measure)?;
    if measure > latmon::config::MAX_INTERVAL {
        anyhow::bail!("--measure {}: at most {:?}", a.measure, latmon::config::MAX_INTERVAL);
    }
    let cfg = load_config(&a.common).and_then(|c| c.validate().map(|()| c).map_err(Into::into)).and_then(|c| {
        // What run would apply: CPUs that exist, a user that resolves.
        if !c.housekeeping_cpus.is_empty() {
            let online = hygiene::online_cpu_list();
            if !c.housekeeping_cpus.iter().any(|x| online.contains(x)) {
                anyhow::bail!("housekeeping_cpus {:?}: none is online (online: {online:?})", c.housekeeping_cpus);
            }
        }
        if let Some(u) = &c.user {
            privs::resolve(u, c.group.as_deref()).map_err(anyhow::Error::msg)?;
        }
        Ok(c)
    });
    if let Ok(c) = &cfg {
        rep.outputs = output_plans(c);
        rep.housekeeping_cpus = c.housekeeping_cpus.clone();
        rep.drop_to = c
            .user
            .as_ref()
            .and_then(|u| privs::resolve(u, c.group.as_deref()).ok())
            .map(|i| format!("{}:{} (uid {} gid {})", i.user, i.group, i.uid, i.gid));
    }
    let privileged = agent::require_bpf_privilege();
    rep.btf_source = probes::btf_source();
    match (&cfg, &privileged) {
        (Err(e), _) => {
            rep.config_ok = false;
            rep.config_error = Some(format!("{e:#}"));
        }
        (Ok(cfg), Ok(())) => {
            probes::route_libbpf_logs();
            probes::ensure_tracefs();
            rep.features = features::detect();
            let mut opened_ok = Vec::new();
            for (spec, opened) in cfg.probes.iter().zip(probes::open_all(&cfg.probes)) {
                let mut plan = ProbePlan {
                    spec: spec.spec.clone(),
                    name: spec.name.clone(),
                    ok: false,
                    attach: None,
                    mode: None,
                    btf_mode: None,
                    error: None,
                    cost: None,
                };
                match opened {
                    Ok(p) => {
                        plan.ok = true;
                        plan.attach = Some(p.info().attach);
                        plan.mode = Some(p.info().mode.clone());
                        plan.btf_mode = Some(p.info().btf_mode);
                        opened_ok.push((rep.probes.len(), p));
                    }
                    Err(e) => plan.error = Some(e.to_string()),
                }
                rep.probes.push(plan);
            }
            if !measure.is_zero() && !opened_ok.is_empty() {
                let (at, mut ps): (Vec<usize>, Vec<_>) = opened_ok.into_iter().unzip();
                match agent::measure(&mut ps, measure) {
                    Ok((costs, wall, cpus)) => {
                        rep.measure_ns = wall;
                        let mut all = cost::Cost::default();
                        for c in &costs {
                            all.add(*c);
                        }
                        rep.bpf_cpu_percent = Some(round4(all.cpu_percent(wall, cpus)));
                        let b = cfg.overhead_budget;
                        for (i, c) in at.into_iter().zip(costs) {
                            let over = b.is_some_and(|b| {
                                b.ns_per_event
                                    .is_some_and(|l| c.runs >= cost::MIN_RUNS_FOR_NS_BUDGET && c.ns_per_event() > l)
                                    || b.cpu_percent.is_some_and(|l| all.cpu_percent(wall, cpus) > l)
                            });
                            rep.probes[i].cost = Some(PlanCost {
                                bpf_runs: c.runs,
                                bpf_run_time_ns: c.run_time_ns,
                                bpf_ns_per_event: c.ns_per_event(),
                                events_per_s: c.events_per_s(wall),
                                bpf_cpu_percent: round4(c.cpu_percent(wall, cpus)),
                                bpf_missed: c.missed,
                                over_budget: over,
                            });
                        }
                    }
                    Err(e) => rep.measure_error = Some(e),
                }
            }
        }
        (Ok(_), Err(_)) => {}
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rep)?);
    } else {
        print_check(&rep);
    }
    // An output latmon run would refuse is a config error: the service
    // would not start.
    if !rep.config_ok || rep.outputs.iter().any(|o| !o.ok) {
        return Ok(ExitCode::from(2));
    }
    privileged?;
    Ok(if rep.probes.iter().all(|p| p.ok) { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

fn print_check(r: &CheckReport) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "kernel       {}", r.kernel);
    let _ = writeln!(
        o,
        "btf          {}{}",
        if r.btf { "yes (/sys/kernel/btf/vmlinux)" } else { "no" },
        match &r.btf_source {
            _ if r.force_no_btf => format!("; ignored ({} is set)", probes::FORCE_NO_BTF_ENV),
            Some(s) if !r.btf => format!("; CO-RE uses {s}"),
            _ => String::new(),
        }
    );
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
    if !r.housekeeping_cpus.is_empty() {
        let _ = writeln!(o, "housekeeping CPUs {:?}", r.housekeeping_cpus);
    }
    for out in &r.outputs {
        if let Some(e) = &out.error {
            let _ = writeln!(o, "output       {} INVALID: {e}", out.spec);
            continue;
        }
        let budget = match (out.budget_bps, out.line_bps) {
            (Some(b), Some(l)) => format!(
                "budget {b} B/s ({}% of the line's {l} B/s): delta summaries, keyframes, degradation steps if needed",
                b as u64 * 100 / l.max(1) as u64
            ),
            (Some(b), None) => format!("budget {b} B/s: delta summaries, keyframes, degradation steps if needed"),
            (None, _) => "unlimited".to_string(),
        };
        let note = out.note.as_ref().map_or(String::new(), |n| format!(" ({n})"));
        let _ =
            writeln!(o, "output       {} ({}): {budget}; ok{note}", out.output, out.format.as_deref().unwrap_or("-"));
    }
    if let Some(d) = &r.drop_to {
        let _ = writeln!(o, "drops to     {d} after attach");
    }
    if r.measure_ns > 0 {
        let _ = writeln!(
            o,
            "own cost     measured over {:.2}s: BPF {:.4}% of the machine's CPU (per probe below)",
            r.measure_ns as f64 / 1e9,
            r.bpf_cpu_percent.unwrap_or(0.0)
        );
    }
    if let Some(e) = &r.measure_error {
        let _ = writeln!(o, "own cost     not measured: {e}");
    }
    if !r.probes.is_empty() {
        let _ = writeln!(o, "probes");
        for p in &r.probes {
            match (&p.attach, &p.error) {
                (Some(at), _) => {
                    let _ = writeln!(
                        o,
                        "  {:<20} ok via {}, {} build ({})",
                        p.name,
                        at,
                        p.btf_mode.map_or("?", |b| b.as_str()),
                        p.mode.as_deref().unwrap_or("")
                    );
                    if let Some(c) = &p.cost {
                        let _ = writeln!(
                            o,
                            "  {:<20} cost: BPF {} ns/event, {} events/s, {:.4}% CPU{}{}",
                            "",
                            c.bpf_ns_per_event,
                            c.events_per_s,
                            c.bpf_cpu_percent,
                            if c.over_budget { "  OVER BUDGET" } else { "" },
                            if c.bpf_missed > 0 {
                                format!("  MISSED {} runs (the kernel skipped them)", c.bpf_missed)
                            } else {
                                String::new()
                            }
                        );
                    }
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
        Cmd::View(a) => source_duration(&a).and_then(|d| view::run_view(&a.source, d)).map(|()| ExitCode::SUCCESS),
        Cmd::Decode(a) => source_duration(&a).and_then(|d| view::run_decode(&a.source, d)).map(|_| ExitCode::SUCCESS),
    };
    match res {
        Ok(code) => code,
        Err(e) => {
            eprintln!("latmon: {e:#}");
            ExitCode::FAILURE
        }
    }
}
