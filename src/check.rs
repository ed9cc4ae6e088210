// SPDX-License-Identifier: MIT
//! `latmon check`: the kernel's BTF and attach mechanisms, the config and
//! its outputs as `latmon run` would open them, the rung each probe
//! attaches on and latmon's own BPF cost. An I/O edge (it loads the
//! probes); src/main.rs only parses the arguments and prints.

use std::io::Write;
use std::time::Duration;

use crate::error::Result;
use latmon_core::ident::{BtfMode, Mechanism};
use serde::Serialize;

use crate::config::Config;
use crate::probes::{self, features};
use crate::{agent, certify, cost, hygiene, privs, sinks};

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
struct Placement {
    cpus: Vec<u32>,
    /// Why those CPUs.
    why: String,
    /// `SCHED_OTHER nice 10` or `SCHED_IDLE`: never a real-time policy.
    sched: String,
    /// Memory locked (mlockall): asked for, and granted where check could
    /// try.
    mlockall: bool,
}

#[derive(Serialize)]
pub struct CheckReport {
    kernel: String,
    /// The kernel exposes its own BTF.
    btf: bool,
    /// Where CO-RE relocations take kernel types from (kernel or btf_path).
    #[serde(skip_serializing_if = "Option::is_none")]
    btf_source: Option<String>,
    /// LATMON_FORCE_NO_BTF is set: BTF is ignored, as if there were none.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    force_no_btf: bool,
    /// Whether task storage may be created from the scheduler's
    /// tracepoints here (src/rtkernel.rs), and why; or why
    /// LATMON_RT_TASK_STORAGE is invalid.
    task_storage: String,
    /// Each PREEMPT_RT hazard's verdict and the path taken
    /// (src/rtsafety.rs); the maps are judged once the probes loaded.
    rt_safety: crate::rtsafety::RtSafety,
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
    /// Where latmon's threads would run and how (src/hygiene.rs).
    #[serde(skip_serializing_if = "Option::is_none")]
    placement: Option<Placement>,
    /// Page faults of this process in the measurement's second half,
    /// reading the probes as the agent does (0: none in steady state).
    #[serde(skip_serializing_if = "Option::is_none")]
    steady_page_faults: Option<u64>,
    /// The user latmon would drop to (`user`/`group`), resolved.
    #[serde(skip_serializing_if = "Option::is_none")]
    drop_to: Option<String>,
    /// The kernel's RV rtapp monitor (6.17+), one line: the cycle probe's
    /// sleep rules are latmon's own either way.
    rv_rtapp: String,
    /// The observer-effect certificate stored for this config
    /// (`latmon certify`; src/certify/store.rs), when one was made.
    #[serde(skip_serializing_if = "Option::is_none")]
    certificate: Option<certify::store::Summary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    certificate_error: Option<String>,
}

/// Where tracefs may hold the RV interface.
const RV_DIRS: [&str; 2] = ["/sys/kernel/tracing/rv", "/sys/kernel/debug/tracing/rv"];

/// The rtapp monitors of an RV `available_monitors` list (one monitor a
/// line, a nested one as `rtapp:sleep`; a line may carry a description
/// after a space on some kernels): the `rtapp` container and its `sleep`.
fn rtapp_monitors(list: &str) -> Vec<&str> {
    list.lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(|m| m.trim_end_matches(':'))
        .filter(|m| *m == "rtapp" || m.starts_with("rtapp:") || *m == "sleep")
        .collect()
}

/// `latmon check`'s RV line (an I/O edge: reads tracefs).
fn rv_rtapp_line() -> String {
    let mut unreadable = None;
    for dir in RV_DIRS {
        let path = format!("{dir}/available_monitors");
        match std::fs::read_to_string(&path) {
            Ok(list) => {
                let found = rtapp_monitors(&list);
                return if found.is_empty() {
                    format!("absent (not in {path}); the cycle sleep rules are latmon's own")
                } else {
                    format!("present ({} in {path}); the cycle sleep rules are latmon's own", found.join(", "))
                };
            }
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => unreadable = Some(format!("{path}: {e}")),
            Err(_) => {}
        }
    }
    match unreadable {
        Some(e) => format!("unknown ({e}); the cycle sleep rules are latmon's own"),
        None => "absent (no RV interface in tracefs); the cycle sleep rules are latmon's own".into(),
    }
}

/// The outputs of a config with their budgets (frames outputs only send
/// deltas and keyframes within one; Modbus and Prometheus serve on
/// request).
fn output_plans(c: &Config) -> Vec<OutputPlan> {
    use crate::sinks::spec::{Endpoint, LinkSpec};
    c.outputs
        .iter()
        .zip(sinks::check_all(&c.outputs, c.format))
        .map(|(w, verdict)| {
            let (ok, error, note) = match verdict {
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
                if format == crate::config::Format::Frames {
                    plan.budget_bps = spec.budget_bps();
                }
                plan.output = spec.endpoint.to_string();
                plan.format = Some(format!("{format:?}").to_lowercase());
            }
            plan
        })
        .collect()
}

/// Check everything `latmon run` would do with `cfg` (loaded from
/// `config_name`), attaching every probe and measuring their cost for
/// `measure` (zero: not measured). Also returned: whether latmon has the
/// privileges BPF needs (the report is still worth printing without).
pub fn run(config_name: String, cfg: Result<Config>, measure: Duration) -> (CheckReport, Result<()>) {
    let kernel = nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".into());
    let mut rep = CheckReport {
        kernel,
        btf: std::path::Path::new("/sys/kernel/btf/vmlinux").exists(),
        btf_source: None,
        force_no_btf: probes::no_btf_forced(),
        task_storage: match probes::task_storage_here() {
            Ok(ts) if ts.safe => ts.to_string(),
            Ok(ts) => format!("{ts}: runq and syscall via raw_tp, timer, chain and irq threads in tid hashes"),
            Err(e) => format!("invalid: {e}"),
        },
        rt_safety: probes::rt_safety_here(false),
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
        placement: None,
        steady_page_faults: None,
        drop_to: None,
        rv_rtapp: rv_rtapp_line(),
        certificate: None,
        certificate_error: None,
    };
    let cfg = cfg.and_then(|c| c.validate().map(|()| c).map_err(Into::into)).and_then(|c| {
        // What run would apply: CPUs that exist, a user that resolves.
        if !c.housekeeping_cpus.is_empty() {
            let online = hygiene::online_cpu_list();
            if !c.housekeeping_cpus.iter().any(|x| online.contains(x)) {
                crate::bail!("housekeeping_cpus {:?}: none is online (online: {online:?})", c.housekeeping_cpus);
            }
        }
        if let Some(u) = &c.user {
            privs::resolve(u, c.group.as_deref())?;
        }
        Ok(c)
    });
    if let Ok(c) = &cfg {
        rep.outputs = output_plans(c);
        rep.housekeeping_cpus = c.housekeeping_cpus.clone();
        let (cpus, why) = hygiene::placement(c);
        rep.placement = Some(Placement {
            cpus,
            why,
            sched: match c.sched {
                crate::config::Sched::Other => format!("SCHED_OTHER nice {}", c.nice),
                crate::config::Sched::Idle => "SCHED_IDLE".into(),
            },
            mlockall: c.mlockall,
        });
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
            // The maps loaded are those `latmon run` would load.
            rep.rt_safety = probes::rt_safety_here(true);
            if !measure.is_zero() && !opened_ok.is_empty() {
                let (at, mut ps): (Vec<usize>, Vec<_>) = opened_ok.into_iter().unzip();
                match agent::measure(&mut ps, measure) {
                    Ok((costs, wall, cpus, faults)) => {
                        rep.measure_ns = wall;
                        rep.steady_page_faults = Some(faults);
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
                    Err(e) => rep.measure_error = Some(format!("BPF_ENABLE_STATS: {e}")),
                }
            }
            // After the measurement: at nice 10 and with every page being
            // locked, check would load and measure after the load it was
            // started beside (tests/live/kernel_misses.rs). Applied to
            // learn whether `latmon run`'s mlockall would be granted.
            match hygiene::apply(cfg) {
                Ok(applied) => rep.placement.iter_mut().for_each(|p| p.mlockall = applied.mlocked),
                Err(e) => log::warn!("check: {e}"),
            }
        }
        (Ok(_), Err(_)) => {}
    }
    (rep, privileged)
}

impl CheckReport {
    /// The config or an output is invalid: `latmon run` would refuse to
    /// start (exit code 2).
    pub fn config_invalid(&self) -> bool {
        !self.config_ok || self.outputs.iter().any(|o| !o.ok)
    }

    /// Show the certificate stored at `path`, if any.
    pub fn read_certificate(&mut self, path: &std::path::Path) {
        match certify::store::read(path) {
            Ok(c) => self.certificate = c.map(|c| c.summary(path)),
            Err(e) => self.certificate_error = Some(e),
        }
    }

    /// Every configured probe attached.
    pub fn all_probes_ok(&self) -> bool {
        self.probes.iter().all(|p| p.ok)
    }
}

fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

/// `latmon check` in words, on stdout.
pub fn print_text(r: &CheckReport) {
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
    let _ = writeln!(o, "rt safety    each PREEMPT_RT hazard's verdict, then what latmon does");
    for (hazard, v) in r.rt_safety.rows() {
        let _ = writeln!(o, "  {hazard:<12} {}\n  {:<12} -> {}", v.verdict, "", v.path);
    }
    match &r.config_error {
        None => {
            let _ = writeln!(o, "config       ok ({})", r.config);
        }
        Some(e) => {
            let _ = writeln!(o, "config       INVALID ({}): {e}", r.config);
        }
    }
    let _ = writeln!(o, "rv rtapp     {}", r.rv_rtapp);
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
    if let Some(p) = &r.placement {
        let _ = writeln!(
            o,
            "runs on      CPUs {:?} ({}), {}{}",
            p.cpus,
            p.why,
            p.sched,
            if p.mlockall { ", memory locked (mlockall)" } else { ", memory NOT locked (mlockall = false)" }
        );
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
    if let Some(f) = r.steady_page_faults {
        let _ = writeln!(
            o,
            "page faults  {f} in steady state (the measurement's second half, reading the probes){}",
            if f == 0 { "" } else { ": memory not locked?" }
        );
    }
    if let Some(e) = &r.measure_error {
        let _ = writeln!(o, "own cost     not measured: {e}");
    }
    match (&r.certificate, &r.certificate_error) {
        (Some(c), _) => {
            let _ = writeln!(o, "certificate  {} ({})", c.verdict_text, c.path);
        }
        (_, Some(e)) => {
            let _ = writeln!(o, "certificate  unreadable: {e}");
        }
        _ => {}
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

#[cfg(test)]
mod tests {
    use super::rtapp_monitors;

    #[test]
    fn the_rtapp_monitors_are_found_in_an_rv_list() {
        assert_eq!(
            rtapp_monitors("wip\nwwnr\nrtapp\nrtapp:pagefault\nrtapp:sleep\n"),
            ["rtapp", "rtapp:pagefault", "rtapp:sleep"]
        );
        assert_eq!(rtapp_monitors("sleep: the RT sleep monitor\n"), ["sleep"]);
        assert!(rtapp_monitors("wip\nwwnr\nsnroc\n").is_empty());
        assert!(rtapp_monitors("").is_empty());
    }
}
