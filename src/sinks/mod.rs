// SPDX-License-Identifier: MIT
//! Where summaries go. Every sink takes the same `IntervalReport`.

use std::io::{self, Write};

use crate::config::Format;
use crate::summary::{render_text, IntervalReport};

/// A destination for interval summaries.
pub trait Sink {
    fn name(&self) -> &str;
    fn emit(&mut self, r: &IntervalReport) -> io::Result<()>;
}

/// Open a sink from its SINK word (`-` is stdout).
pub fn open(spec: &str, format: Format) -> Result<Box<dyn Sink>, String> {
    match spec {
        "-" => Ok(Box::new(Stdout { format, buf: String::with_capacity(16 * 1024) })),
        other => Err(format!(
            "output {other:?}: only '-' (stdout) is available in this build; serial, tcp, udp, unix and file sinks come with the wire format"
        )),
    }
}

/// Text or JSON lines on stdout.
pub struct Stdout {
    format: Format,
    buf: String,
}

impl Sink for Stdout {
    fn name(&self) -> &str {
        "stdout"
    }

    fn emit(&mut self, r: &IntervalReport) -> io::Result<()> {
        self.buf.clear();
        match self.format {
            Format::Text => self.buf.push_str(&render_text(r)),
            Format::Json => {
                self.buf.push_str(&serde_json::to_string(r).map_err(io::Error::other)?);
                self.buf.push('\n');
            }
        }
        let mut out = io::stdout().lock();
        out.write_all(self.buf.as_bytes())?;
        out.flush()
    }
}
