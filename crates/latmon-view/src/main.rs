// SPDX-License-Identifier: MIT
//! latmon-view: the technician's tools on a laptop (Linux, Windows).
//! Argument parsing only; the screen is src/live/ (model, ui, run), the report
//! src/report.rs, the byte sources src/source.rs, and the receiver
//! (wire format, tracker, compact table) is latmon-core.

mod live;
mod report;
mod source;

use std::io::{self, IsTerminal};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use clap::{Parser, Subcommand};

const EXAMPLES: &str = "\
examples:
    latmon-view view serial:/dev/ttyUSB0@115200     # full-screen live view of a board's UART
    latmon-view view serial:COM3                    # the same on Windows
    latmon-view view tcp://10.0.0.7:7070 --plain    # the compact table per interval, no full screen
    latmon-view decode file:capture.bin             # JSON lines, as `latmon decode`
    latmon-view report file:capture.bin -o report.html";

#[derive(Parser)]
#[command(name = "latmon-view", version, about = "latmon's frames, read on the technician's laptop", after_help = EXAMPLES)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Live view of a frame stream: full screen on a terminal (keys: ?),
    /// the compact table per interval otherwise or with --plain.
    View {
        /// -, file:PATH, serial:PORT[@BAUD], tcp://HOST:PORT, udp://HOST:PORT
        source: String,
        /// Print the compact table per interval instead of the full screen.
        #[arg(long)]
        plain: bool,
        /// Stop after this long (e.g. 30s, 5m).
        #[arg(long, value_parser = parse_duration)]
        duration: Option<Duration>,
    },
    /// One JSON line per frame on stdout; link statistics on stderr.
    Decode {
        source: String,
        #[arg(long, value_parser = parse_duration)]
        duration: Option<Duration>,
    },
    /// A self-contained HTML report (inline SVG) of a frames capture.
    Report {
        /// A frames capture: file:PATH or PATH (latmon run --output file:PATH, or a saved serial log).
        capture: String,
        /// Where to write the HTML.
        #[arg(short = 'o', long = "output")]
        output: String,
    },
}

/// `30s`, `1500ms`, `5m`, `2h` or plain seconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = s.find(|c: char| !c.is_ascii_digit()).map_or((s, "s"), |i| s.split_at(i));
    let n: u64 = num.parse().map_err(|_| format!("duration {s:?}: expected a number with ms, s, m or h"))?;
    let ms = match unit {
        "ms" => n,
        "s" => n.saturating_mul(1000),
        "m" => n.saturating_mul(60_000),
        "h" => n.saturating_mul(3_600_000),
        _ => return Err(format!("duration {s:?}: unit must be ms, s, m or h")),
    };
    // As `latmon`'s --duration: 0 would read nothing and look like success.
    if ms == 0 {
        return Err(format!("duration {s:?}: must be more than 0 (leave it out to read until the source ends)"));
    }
    if ms > MAX_DURATION_MS {
        return Err(format!("duration {s:?}: must be at most 366 days"));
    }
    Ok(Duration::from_millis(ms))
}

/// The longest --duration (`latmon`'s bound too).
const MAX_DURATION_MS: u64 = 366 * 24 * 3_600_000;

fn run(cli: Cli) -> Result<()> {
    match cli.cmd {
        Cmd::View { source: word, plain, duration } => {
            let replay = source::Word::parse(&word).map_err(|e| anyhow!(e))?.is_replay();
            let tty = io::stdout().is_terminal();
            if plain || !tty || replay {
                let mut src = source::open(&word, true, false).map_err(|e| anyhow!(e))?;
                // On a terminal the plain screen fits it (every family line).
                let size = || crossterm::terminal::size().ok();
                latmon_core::receiver::run_view_sized(
                    &mut src,
                    tty,
                    replay,
                    duration,
                    &mut io::stdout().lock(),
                    &mut io::stderr(),
                    &size,
                )
                .map_err(Into::into)
            } else {
                let src = source::open(&word, true, true).map_err(|e| anyhow!(e))?;
                live::run(src, duration)
            }
        }
        Cmd::Decode { source: word, duration } => {
            let mut src = source::open(&word, false, false).map_err(|e| anyhow!(e))?;
            latmon_core::receiver::run_decode(&mut src, duration, &mut io::stdout().lock(), &mut io::stderr())
                .map(|_| ())
                .map_err(Into::into)
        }
        Cmd::Report { capture, output } => {
            let path = capture.strip_prefix("file:").unwrap_or(&capture);
            let f = std::fs::File::open(path).with_context(|| format!("capture {path}"))?;
            let c = report::Capture::read(io::BufReader::new(f)).with_context(|| format!("capture {path}"))?;
            let html = report::html(&c, path)?;
            std::fs::write(&output, html).with_context(|| format!("write {output}"))?;
            eprintln!(
                "latmon-view: {output}: {} summaries, {} probes with events, {} alerts",
                c.summaries,
                c.totals.iter().flatten().filter(|t| t.count > 0).count(),
                c.alerts_seen
            );
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("latmon-view: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_bad_ones_say_why() {
        assert_eq!(parse_duration("1500ms").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("7").unwrap(), Duration::from_secs(7));
        assert!(parse_duration("5 parsecs").unwrap_err().contains("unit must be"));
        assert!(parse_duration("x").unwrap_err().contains("expected a number"));
    }

    #[test]
    fn durations_are_refused_as_latmon_refuses_them() {
        for zero in ["0s", "0", "0ms", "0h"] {
            assert!(parse_duration(zero).unwrap_err().contains("must be more than 0"), "{zero}");
        }
        assert!(parse_duration("9000h").unwrap_err().contains("at most 366 days"));
    }
}
