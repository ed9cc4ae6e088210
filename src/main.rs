// SPDX-License-Identifier: MIT
//! latmon command line. Everything else lives in the library.

#[cfg(all(panic = "abort", target_env = "musl"))]
mod no_unwinder;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use latmon::error::{Context, Error, Result};

use latmon::config::{parse_duration, Config, Format, ProbeSpec};
use latmon::probes;
use latmon::{agent, board_view, certify, check, hygiene, privs, sinks};

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
    latmon run --hist                          # histograms (bcc style) under the table
    latmon run --probe runq,hist=true --probe syscall --sort count   # runq's histogram; busiest syscalls first
    latmon run --config /etc/latmon/latmon.toml
    latmon check                               # what this kernel can attach, and the plan
    latmon check --config board.toml --json    # board bring-up: exit 0 ok, 1 probe fails, 2 invalid
    latmon certify --config board.toml         # what latmon costs an RT thread here, stored beside the config
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
    /// Measure what latmon costs a real-time thread on this board (root):
    /// interleaved epochs with nothing attached, the probes attached with
    /// empty bodies, and the probes running; a verdict on the p99.9 shift.
    /// Stored beside the config (docs/agent.md "Observer-effect certificate").
    Certify(CertifyArgs),
    /// Live terminal view of a frame stream (the table of `latmon run`,
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
    /// ,hist=true (its histogram under the text table); syscall: ,waits=alert (calls that
    /// wait, e.g. ppoll, alert too)
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
    /// Text outputs: every probe's and series' histogram (bcc style) under
    /// the table, and every alert record. One probe's only: its spec's
    /// ,hist=true.
    #[arg(long)]
    hist: bool,
    /// Text outputs: order of a family's series in the table (the top 10
    /// shown, the rest summed): worst p99 first, or most events first.
    #[arg(long, value_parser = ["p99", "count"], default_value = "p99")]
    sort: String,
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
    /// The stored certificate to show (default: beside --config's file,
    /// else /etc/latmon/certificate.json).
    #[arg(long, value_name = "PATH")]
    certificate: Option<PathBuf>,
}

#[derive(clap::Args)]
struct CertifyArgs {
    #[command(flatten)]
    common: Common,
    /// Measured time, split into rounds of three epochs (attach and
    /// detach come on top).
    #[arg(long, value_name = "DURATION", default_value = "60s")]
    duration: String,
    /// One epoch (at least 1s: half a second of each is left out).
    #[arg(long, value_name = "DURATION", default_value = "2s")]
    epoch: String,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
    /// Where to store the certificate (default: certificate.json beside
    /// --config's file, else /etc/latmon/certificate.json); - stores none.
    #[arg(long, value_name = "PATH")]
    certificate: Option<PathBuf>,
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
        probes::set_btf_path(std::path::Path::new(p)).map_err(Error::msg)?;
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
        latmon::bail!("config {}: larger than {max} bytes", path.display());
    }
    String::from_utf8(bytes).map_err(|_| Error::msg(format!("config {}: not UTF-8 text", path.display())))
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
    // Read again at each reload: a certificate made while latmon runs
    // shows from the next session on.
    cfg.certificate = Some(certify::store::path_for(a.common.config.as_deref()));
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
        Some(u) => Some(privs::resolve(u, cfg.group.as_deref()).context("user/group")?),
        None => None,
    };
    let applied = hygiene::apply(&cfg)?;
    log::info!("threads: {applied}");
    for (hazard, v) in probes::rt_safety_here(false).rows() {
        log::info!("rt safety: {hazard}: {}; {}", v.verdict, v.path);
    }
    if identity.is_some() {
        privs::prepare().context("preparing the privilege drop")?;
    }
    let text = latmon_core::table::TextStyle {
        sort: latmon_core::table::SortBy::parse(&a.sort).unwrap_or_default(),
        hist_all: a.hist,
        crlf: false,
    };
    // Outputs start (bind, open) before the agent: mistakes fail early.
    let mut sinks = sinks::open_all(&cfg.outputs, cfg.format, text).map_err(Error::msg)?;
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

fn cmd_check(a: CheckArgs) -> Result<ExitCode> {
    let config_name = a.common.config.as_ref().map_or("built-in default".into(), |p| p.display().to_string());
    let measure = parse_duration(&a.measure)?;
    if measure > latmon::config::MAX_INTERVAL {
        latmon::bail!("--measure {}: at most {:?}", a.measure, latmon::config::MAX_INTERVAL);
    }
    let (mut rep, privileged) = check::run(config_name, load_config(&a.common), measure);
    rep.read_certificate(&a.certificate.unwrap_or_else(|| certify::store::path_for(a.common.config.as_deref())));
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rep)?);
    } else {
        check::print_text(&rep);
    }
    // An output latmon run would refuse is a config error: the service
    // would not start.
    if rep.config_invalid() {
        return Ok(ExitCode::from(2));
    }
    privileged?;
    Ok(if rep.all_probes_ok() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn cmd_certify(a: CertifyArgs) -> Result<ExitCode> {
    let cfg = load_config(&a.common)?;
    let mut opts = certify::Options::new(parse_duration(&a.duration)?, cfg.probes);
    // The samples are kept in memory (16 bytes a millisecond: 58 MB an hour).
    if opts.duration > latmon::config::MAX_INTERVAL {
        latmon::bail!("--duration {}: at most {:?}", a.duration, latmon::config::MAX_INTERVAL);
    }
    opts.epoch = parse_duration(&a.epoch)?;
    if opts.epoch < std::time::Duration::from_secs(1) {
        latmon::bail!("--epoch {}: at least 1s", a.epoch);
    }
    let cert = certify::run(&opts)?;
    let path = a.certificate.unwrap_or_else(|| certify::store::path_for(a.common.config.as_deref()));
    if path.as_os_str() != "-" {
        certify::store::write(&path, &cert)
            .with_context(|| format!("storing the certificate in {}", path.display()))?;
        log::info!("certificate stored in {}", path.display());
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&cert)?);
    } else {
        certify::print_text(&cert, &mut std::io::stdout().lock())?;
    }
    Ok(match cert.figures.verdict {
        certify::model::Verdict::Pass => ExitCode::SUCCESS,
        certify::model::Verdict::Fail => ExitCode::from(3),
    })
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
        Cmd::Certify(a) => cmd_certify(a),
        Cmd::View(a) => {
            source_duration(&a).and_then(|d| board_view::run_view(&a.source, d)).map(|()| ExitCode::SUCCESS)
        }
        Cmd::Decode(a) => {
            source_duration(&a).and_then(|d| board_view::run_decode(&a.source, d)).map(|_| ExitCode::SUCCESS)
        }
    };
    match res {
        Ok(code) => code,
        Err(e) => {
            eprintln!("latmon: {e:#}");
            ExitCode::FAILURE
        }
    }
}
