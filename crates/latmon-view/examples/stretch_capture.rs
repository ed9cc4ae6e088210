// SPDX-License-Identifier: MIT
//! `stretch_capture BASE.bin SECONDS OUT.bin`: a capture of SECONDS from a
//! real one (tests/stretch/mod.rs says how), for the report's scale
//! figures: `cargo run --release -p latmon-view --example stretch_capture
//! -- cap.bin 28800 8h.bin`.

#[path = "../tests/stretch/mod.rs"]
mod stretch;

use std::io::BufWriter;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [base, secs, out] = args.as_slice() else {
        eprintln!("usage: stretch_capture BASE.bin SECONDS OUT.bin");
        return ExitCode::FAILURE;
    };
    let run = || -> Result<stretch::Stretched, String> {
        let secs: u64 = secs.parse().map_err(|_| format!("SECONDS {secs:?}: expected a whole number"))?;
        let input = std::fs::File::open(base).map_err(|e| format!("{base}: {e}"))?;
        let mut w = BufWriter::new(std::fs::File::create(out).map_err(|e| format!("{out}: {e}"))?);
        let s = stretch::stretch(std::io::BufReader::new(input), secs, &mut w)?;
        std::io::Write::flush(&mut w).map_err(|e| format!("{out}: {e}"))?;
        Ok(s)
    };
    match run() {
        Ok(s) => {
            println!("{out}: {} bytes, {} summaries, {} alerts over {} s", s.bytes, s.summaries, s.alerts, s.span_s);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("stretch_capture: {e}");
            ExitCode::FAILURE
        }
    }
}
