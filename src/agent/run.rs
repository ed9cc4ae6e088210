// SPDX-License-Identifier: MIT
//! The agent's main loop: start, drop privileges, tick on absolute
//! deadlines, reload on SIGHUP, stop on SIGINT/SIGTERM or `duration`.

use std::time::{Duration, Instant};

use crate::error::Result;

use super::signals::wait_signal;
use super::{require_bpf_privilege, Agent, Notifier};
use crate::config::Config;
use crate::cost::{self, StatsGuard};
use crate::privs;
use crate::probes;
use crate::sinks::Sink;

use super::block_signals;

/// Knobs of [`run_with`] beyond the config.
#[derive(Default)]
pub struct RunOptions<'a> {
    /// Re-read the configuration on SIGHUP (None: SIGHUP is logged and
    /// ignored).
    pub reload: Option<&'a dyn Fn() -> Result<Config>>,
    /// Drop to this identity once every probe is attached.
    pub drop_to: Option<privs::Identity>,
}

/// How long outputs may take to flush at exit.
const FLUSH_AT_EXIT: Duration = Duration::from_secs(2);

/// Run the agent until stopped. Returns an error only when nothing can run.
/// Outputs are flushed and closed before returning.
pub fn run(cfg: &Config, sinks: &mut [Box<dyn Sink>]) -> Result<()> {
    run_with(cfg, sinks, RunOptions::default())
}

/// [`run`] with SIGHUP reloads and the privilege drop.
pub fn run_with(cfg: &Config, sinks: &mut [Box<dyn Sink>], opts: RunOptions<'_>) -> Result<()> {
    let notify = Notifier::from_env();
    let res = run_loop(cfg, sinks, &opts, &notify);
    notify.send("STOPPING=1");
    for s in sinks.iter_mut() {
        s.close(FLUSH_AT_EXIT);
    }
    res
}

/// Turn on BPF run-time statistics for as long as the guard lives.
pub fn enable_cost_stats() -> Option<StatsGuard> {
    match cost::enable_stats() {
        Ok(g) => Some(g),
        Err(e) => {
            log::warn!("BPF run-time statistics unavailable (BPF_ENABLE_STATS: {e}; needs CAP_SYS_ADMIN and kernel >= 5.8): latmon's own cost is not measured");
            None
        }
    }
}

fn run_loop(cfg: &Config, sinks: &mut [Box<dyn Sink>], opts: &RunOptions<'_>, notify: &Notifier) -> Result<()> {
    let sigs = block_signals()?;
    require_bpf_privilege()?;
    probes::route_libbpf_logs();
    probes::ensure_tracefs();
    let stats = enable_cost_stats();
    let mut agent = Agent::start(cfg.clone(), stats)?;
    if let Some(id) = &opts.drop_to {
        agent.drop_privileges(id)?;
    }
    notify.send(&format!("READY=1\nSTATUS=monitoring {} probes\nMAINPID={}", agent.slots.len(), std::process::id()));

    let start = Instant::now();
    let end = cfg.duration.map(|d| start + d);
    let mut interval = agent.cfg.interval;
    let mut next = start + interval;
    let mut next_wd = notify.watchdog.map(|p| start + p);
    let mut was_degraded = false;
    loop {
        let mut deadline = end.map_or(next, |e| e.min(next));
        if let Some(w) = next_wd {
            deadline = deadline.min(w);
        }
        let sig = wait_signal(&sigs, deadline);
        let now = Instant::now();
        if let (Some(w), Some(p)) = (next_wd, notify.watchdog) {
            if now >= w {
                notify.send("WATCHDOG=1");
                next_wd = Some(now + p);
            }
        }
        if sig == Some(libc::SIGHUP) {
            match opts.reload {
                Some(reload) => {
                    notify.send("RELOADING=1");
                    match reload() {
                        Ok(new) => {
                            log::info!("SIGHUP: configuration reloaded");
                            agent.reload(new);
                            interval = agent.cfg.interval;
                            next = Instant::now() + interval;
                        }
                        Err(e) => eprintln!("latmon: SIGHUP: reload failed, keeping the running configuration: {e:#}"),
                    }
                    notify.send("READY=1");
                }
                None => log::warn!("SIGHUP: no configuration file to reload"),
            }
            continue;
        }
        if let Some(s) = sig {
            log::info!("signal {s}: stopping");
        }
        let finished = sig.is_some() || end.is_some_and(|e| now >= e);
        if !finished && now < next {
            continue; // a watchdog wake-up
        }
        agent.tick(finished, sinks);
        let degraded = agent.report.agent.degraded;
        if degraded != was_degraded {
            notify.send(if degraded {
                "STATUS=degraded: a probe was detached over overhead_budget"
            } else {
                "STATUS=monitoring"
            });
            was_degraded = degraded;
        }
        if finished {
            break;
        }
        // Absolute deadlines: intervals do not drift with processing time;
        // after a stall, skip to the next future tick instead of bursting.
        next += interval;
        let now = Instant::now();
        if next <= now {
            let behind = now.duration_since(next).as_nanos() / interval.as_nanos().max(1) + 1;
            next += interval * behind as u32;
        }
    }
    // Probes drop here: links destroyed, programs unloaded.
    drop(agent);
    Ok(())
}
