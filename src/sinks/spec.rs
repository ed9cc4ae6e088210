// SPDX-License-Identifier: MIT
//! SINK and SOURCE words: `-`, `serial:/dev/ttyS1[@BAUD][,OPT=V...]`,
//! `tcp://HOST:PORT`, `udp://HOST:PORT`, `unix:/path`, `file:PATH`, each
//! optionally followed by `,format=text|json|frames`. Pure (no I/O).

use std::fmt;

use crate::config::Format;

/// Serial parity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parity {
    None,
    Even,
    Odd,
}

/// Serial flow control.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    None,
    /// RTS/CTS.
    Hardware,
    /// XON/XOFF (unsuitable for binary frames: 0x11/0x13 are data).
    Software,
}

/// A serial line's settings (8N1 at 115200 baud by default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SerialSpec {
    pub path: String,
    pub baud: u32,
    pub parity: Parity,
    pub flow: Flow,
    pub data_bits: u8,
    pub stop_bits: u8,
}

pub const DEFAULT_BAUD: u32 = 115_200;

/// Where bytes go (or come from).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `-`: stdout for outputs, stdin for sources.
    Stdio,
    Serial(SerialSpec),
    /// `HOST:PORT`: listen (outputs) or connect (sources).
    Tcp(String),
    /// `HOST:PORT`: send to (outputs) or bind (sources).
    Udp(String),
    Unix(String),
    File(String),
}

/// A parsed SINK or SOURCE word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkSpec {
    pub endpoint: Endpoint,
    /// `,format=...`; None: decided by the format rule.
    pub format: Option<Format>,
}

/// Why a SINK/SOURCE word is not valid.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SpecError {
    /// The word starts with none of the known schemes.
    UnknownScheme(String),
    /// The scheme is there but the address after it is empty or malformed.
    BadAddress { spec: String, why: String },
    /// An option is not KEY=VALUE, not known for this scheme, or has a bad value.
    BadOption { spec: String, why: String },
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownScheme(s) => write!(
                f,
                "unknown output/source {s:?}: expected -, serial:/dev/ttyX[@BAUD], tcp://HOST:PORT, udp://HOST:PORT, unix:/PATH or file:PATH"
            ),
            Self::BadAddress { spec, why } => write!(f, "{spec:?}: {why}"),
            Self::BadOption { spec, why } => write!(f, "{spec:?}: {why}"),
        }
    }
}

impl std::error::Error for SpecError {}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Stdio => f.write_str("-"),
            Endpoint::Serial(s) => write!(f, "serial:{}@{}", s.path, s.baud),
            Endpoint::Tcp(a) => write!(f, "tcp://{a}"),
            Endpoint::Udp(a) => write!(f, "udp://{a}"),
            Endpoint::Unix(p) => write!(f, "unix:{p}"),
            Endpoint::File(p) => write!(f, "file:{p}"),
        }
    }
}

fn host_port(spec: &str, a: &str) -> Result<String, SpecError> {
    let ok = a.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
    if ok {
        Ok(a.to_string())
    } else {
        Err(SpecError::BadAddress { spec: spec.into(), why: "expected HOST:PORT, e.g. 0.0.0.0:7070 or [::1]:7070".into() })
    }
}

impl LinkSpec {
    pub fn parse(spec: &str) -> Result<LinkSpec, SpecError> {
        let spec = spec.trim();
        let mut parts = spec.split(',');
        let head = parts.next().unwrap_or("");
        let bad_opt = |why: String| SpecError::BadOption { spec: spec.into(), why };
        let bad_addr = |why: &str| SpecError::BadAddress { spec: spec.into(), why: why.into() };
        let mut endpoint = if head == "-" {
            Endpoint::Stdio
        } else if let Some(rest) = head.strip_prefix("serial:") {
            let (path, baud) = match rest.rsplit_once('@') {
                Some((p, b)) => {
                    let baud: u32 = b.parse().map_err(|_| bad_addr("baud rate must be a number, e.g. @115200"))?;
                    if !(50..=4_000_000).contains(&baud) {
                        return Err(bad_addr("baud rate must be 50..4000000"));
                    }
                    (p, baud)
                }
                None => (rest, DEFAULT_BAUD),
            };
            if path.is_empty() {
                return Err(bad_addr("expected serial:/dev/ttyX[@BAUD]"));
            }
            Endpoint::Serial(SerialSpec {
                path: path.into(),
                baud,
                parity: Parity::None,
                flow: Flow::None,
                data_bits: 8,
                stop_bits: 1,
            })
        } else if let Some(a) = head.strip_prefix("tcp://") {
            Endpoint::Tcp(host_port(spec, a)?)
        } else if let Some(a) = head.strip_prefix("udp://") {
            Endpoint::Udp(host_port(spec, a)?)
        } else if let Some(p) = head.strip_prefix("unix:") {
            if p.is_empty() {
                return Err(bad_addr("expected unix:/path/to/socket"));
            }
            Endpoint::Unix(p.into())
        } else if let Some(p) = head.strip_prefix("file:") {
            if p.is_empty() {
                return Err(bad_addr("expected file:PATH"));
            }
            Endpoint::File(p.into())
        } else {
            return Err(SpecError::UnknownScheme(spec.into()));
        };
        let mut format = None;
        for opt in parts {
            let (k, v) = opt.split_once('=').ok_or_else(|| bad_opt(format!("option {opt:?} is not KEY=VALUE")))?;
            let (k, v) = (k.trim(), v.trim());
            if k == "format" {
                format = Some(Format::parse(v).ok_or_else(|| bad_opt(format!("format must be text, json or frames, not {v:?}")))?);
                continue;
            }
            let Endpoint::Serial(s) = &mut endpoint else {
                return Err(bad_opt(format!("unknown option {k:?} (only format=... here)")));
            };
            match k {
                "parity" => {
                    s.parity = match v {
                        "none" | "n" => Parity::None,
                        "even" | "e" => Parity::Even,
                        "odd" | "o" => Parity::Odd,
                        _ => return Err(bad_opt(format!("parity must be none, even or odd, not {v:?}"))),
                    }
                }
                "flow" => {
                    s.flow = match v {
                        "none" => Flow::None,
                        "hw" | "rtscts" | "hardware" => Flow::Hardware,
                        "sw" | "xonxoff" | "software" => Flow::Software,
                        _ => return Err(bad_opt(format!("flow must be none, hw or sw, not {v:?}"))),
                    }
                }
                "data" => {
                    s.data_bits = v
                        .parse()
                        .ok()
                        .filter(|b| (5..=8).contains(b))
                        .ok_or_else(|| bad_opt("data bits must be 5..8".into()))?
                }
                "stop" => {
                    s.stop_bits =
                        v.parse().ok().filter(|b| *b == 1 || *b == 2).ok_or_else(|| bad_opt("stop bits must be 1 or 2".into()))?
                }
                _ => return Err(bad_opt(format!("unknown serial option {k:?} (parity, flow, data, stop, format)"))),
            }
        }
        Ok(LinkSpec { endpoint, format })
    }

    /// The format rule (docs/wire-format.md): the sink's own `format=`,
    /// else the global `--format`/config format, else text on stdout and
    /// frames everywhere else.
    pub fn effective_format(&self, global: Option<Format>) -> Format {
        self.format.or(global).unwrap_or(match self.endpoint {
            Endpoint::Stdio => Format::Text,
            _ => Format::Frames,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words() {
        let s = LinkSpec::parse("serial:/dev/ttyS1@9600,parity=even,flow=hw,format=text").unwrap();
        assert_eq!(
            s.endpoint,
            Endpoint::Serial(SerialSpec {
                path: "/dev/ttyS1".into(),
                baud: 9600,
                parity: Parity::Even,
                flow: Flow::Hardware,
                data_bits: 8,
                stop_bits: 1
            })
        );
        assert_eq!(s.format, Some(Format::Text));
        match LinkSpec::parse("serial:/dev/ttyUSB0").unwrap().endpoint {
            Endpoint::Serial(s) => assert_eq!((s.baud, s.parity, s.flow, s.data_bits, s.stop_bits), (115_200, Parity::None, Flow::None, 8, 1)),
            e => panic!("{e:?}"),
        }
        assert_eq!(LinkSpec::parse("tcp://0.0.0.0:7070").unwrap().endpoint, Endpoint::Tcp("0.0.0.0:7070".into()));
        assert_eq!(LinkSpec::parse("tcp://[::1]:7070").unwrap().endpoint, Endpoint::Tcp("[::1]:7070".into()));
        assert_eq!(LinkSpec::parse("udp://10.0.0.2:9000").unwrap().endpoint, Endpoint::Udp("10.0.0.2:9000".into()));
        assert_eq!(LinkSpec::parse("unix:/run/latmon.sock").unwrap().endpoint, Endpoint::Unix("/run/latmon.sock".into()));
        assert_eq!(LinkSpec::parse("file:/var/log/latmon.bin").unwrap().endpoint, Endpoint::File("/var/log/latmon.bin".into()));
        assert_eq!(LinkSpec::parse("-").unwrap().endpoint, Endpoint::Stdio);
    }

    #[test]
    fn bad_words_name_the_problem() {
        for (w, needle) in [
            ("ttyS1", "unknown output"),
            ("serial:", "serial:/dev/ttyX"),
            ("serial:/dev/ttyS1@fast", "baud rate must be a number"),
            ("serial:/dev/ttyS1@10", "50..4000000"),
            ("serial:/dev/ttyS1,parity=mark", "parity must be"),
            ("serial:/dev/ttyS1,flow=maybe", "flow must be"),
            ("serial:/dev/ttyS1,data=9", "data bits"),
            ("serial:/dev/ttyS1,stop=3", "stop bits"),
            ("serial:/dev/ttyS1,colour=red", "unknown serial option"),
            ("tcp://nohost", "HOST:PORT"),
            ("tcp://h:99999", "HOST:PORT"),
            ("tcp://h:1,parity=even", "only format"),
            ("unix:", "unix:/path"),
            ("file:", "file:PATH"),
            ("-,format=xml", "format must be"),
            ("-,format", "KEY=VALUE"),
        ] {
            let e = LinkSpec::parse(w).unwrap_err().to_string();
            assert!(e.contains(needle), "{w}: {e}");
        }
    }

    #[test]
    fn format_rule() {
        let f = |w: &str, g| LinkSpec::parse(w).unwrap().effective_format(g);
        assert_eq!(f("-", None), Format::Text);
        assert_eq!(f("serial:/dev/ttyS1", None), Format::Frames);
        assert_eq!(f("tcp://h:1", None), Format::Frames);
        assert_eq!(f("serial:/dev/ttyS1", Some(Format::Text)), Format::Text);
        assert_eq!(f("-", Some(Format::Json)), Format::Json);
        assert_eq!(f("-,format=frames", Some(Format::Json)), Format::Frames);
        assert_eq!(f("serial:/dev/ttyS1,format=frames", Some(Format::Text)), Format::Frames);
    }
}
