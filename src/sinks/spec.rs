// SPDX-License-Identifier: MIT
//! SINK and SOURCE words: `-`, `serial:/dev/ttyS1[@BAUD][,OPT=V...]`,
//! `tcp://HOST:PORT`, `udp://HOST:PORT`, `unix:/path`, `file:PATH`, each
//! optionally followed by `,format=text|json|frames`; and the Modbus
//! outputs' words ([`ModbusSpec`]). Pure (no I/O).

use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

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
    /// `,budget=...`; None: the default (serial lines
    /// [`DEFAULT_SERIAL_BUDGET_PERCENT`] of the line rate, others unlimited).
    pub budget: Option<BudgetSpec>,
    /// `,clients=N` (tcp:// and unix: outputs): clients served at once;
    /// None: [`STREAM_DEFAULT_CLIENTS`].
    pub clients: Option<usize>,
}

/// An output's byte budget as written: `budget=30%` (of a serial line's
/// rate), `budget=2000B/s`, `budget=none` (unlimited).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetSpec {
    Percent(u8),
    BytesPerSecond(u32),
    Unlimited,
}

/// A serial output's default budget: half the line, leaving room for
/// alert frames and retries.
pub const DEFAULT_SERIAL_BUDGET_PERCENT: u8 = 50;
/// The smallest budget that still carries a Hello and a summary (B/s).
pub const MIN_BUDGET_BPS: u32 = 16;

impl SerialSpec {
    /// Bytes per second the line carries: start, data, parity and stop bits
    /// per character.
    pub fn bytes_per_s(&self) -> u32 {
        let bits = 1 + self.data_bits as u32 + u32::from(self.parity != Parity::None) + self.stop_bits as u32;
        self.baud / bits
    }
}

impl BudgetSpec {
    fn parse(v: &str) -> Result<BudgetSpec, String> {
        if v == "none" || v == "unlimited" {
            return Ok(BudgetSpec::Unlimited);
        }
        if let Some(p) = v.strip_suffix('%') {
            return p
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|p| (1..=100).contains(p))
                .map(BudgetSpec::Percent)
                .ok_or_else(|| format!("budget percent must be 1..100, not {v:?}"));
        }
        let n = v.strip_suffix("B/s").or_else(|| v.strip_suffix("b/s")).ok_or_else(|| {
            format!("budget must be PERCENT% (of a serial line), BYTESB/s or none, e.g. budget=30% or budget=2000B/s, not {v:?}")
        })?;
        let range = || format!("budget must be {MIN_BUDGET_BPS}..{}B/s (or none), not {v:?}", u32::MAX);
        let n: u64 = n.trim().parse().map_err(|_| range())?;
        u32::try_from(n).ok().filter(|n| *n >= MIN_BUDGET_BPS).map(BudgetSpec::BytesPerSecond).ok_or_else(range)
    }
}

/// tcp:// and unix: outputs: clients served at once unless `,clients=N`.
pub const STREAM_DEFAULT_CLIENTS: usize = 8;
/// The most `,clients=N` may ask for.
pub const STREAM_MAX_CLIENTS: usize = 64;

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
        Err(SpecError::BadAddress {
            spec: spec.into(),
            why: "expected HOST:PORT, e.g. 0.0.0.0:7070 or [::1]:7070".into(),
        })
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
        let mut budget = None;
        let mut clients = None;
        for opt in parts {
            let (k, v) = opt.split_once('=').ok_or_else(|| bad_opt(format!("option {opt:?} is not KEY=VALUE")))?;
            let (k, v) = (k.trim(), v.trim());
            if k == "format" {
                format = Some(
                    Format::parse(v)
                        .ok_or_else(|| bad_opt(format!("format must be text, json or frames, not {v:?}")))?,
                );
                continue;
            }
            if k == "budget" {
                let b = BudgetSpec::parse(v).map_err(bad_opt)?;
                if matches!(b, BudgetSpec::Percent(_)) && !matches!(endpoint, Endpoint::Serial(_)) {
                    return Err(bad_opt(format!(
                        "budget={v} needs a line rate (serial outputs); give bytes, e.g. budget=2000B/s"
                    )));
                }
                budget = Some(b);
                continue;
            }
            if k == "clients" && matches!(endpoint, Endpoint::Tcp(_) | Endpoint::Unix(_)) {
                clients = Some(
                    v.parse::<usize>()
                        .ok()
                        .filter(|n| (1..=STREAM_MAX_CLIENTS).contains(n))
                        .ok_or_else(|| bad_opt(format!("clients must be 1..{STREAM_MAX_CLIENTS}, not {v:?}")))?,
                );
                continue;
            }
            let Endpoint::Serial(s) = &mut endpoint else {
                let known = if matches!(endpoint, Endpoint::Tcp(_) | Endpoint::Unix(_)) {
                    "format, budget, clients"
                } else {
                    "only format=... and budget=... here"
                };
                return Err(bad_opt(format!("unknown option {k:?} ({known})")));
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
                    s.stop_bits = v
                        .parse()
                        .ok()
                        .filter(|b| *b == 1 || *b == 2)
                        .ok_or_else(|| bad_opt("stop bits must be 1 or 2".into()))?
                }
                _ => {
                    return Err(bad_opt(format!(
                        "unknown serial option {k:?} (parity, flow, data, stop, format, budget)"
                    )))
                }
            }
        }
        Ok(LinkSpec { endpoint, format, budget, clients })
    }

    /// The output's byte budget in bytes per second (None: unlimited).
    pub fn budget_bps(&self) -> Option<u32> {
        let line = match &self.endpoint {
            Endpoint::Serial(s) => Some(s.bytes_per_s()),
            _ => None,
        };
        match (self.budget, line) {
            (Some(BudgetSpec::Unlimited), _) => None,
            (Some(BudgetSpec::BytesPerSecond(b)), _) => Some(b),
            (Some(BudgetSpec::Percent(p)), Some(l)) => {
                Some((l as u64 * p as u64 / 100).max(MIN_BUDGET_BPS as u64) as u32)
            }
            (None, Some(l)) => {
                Some((l as u64 * DEFAULT_SERIAL_BUDGET_PERCENT as u64 / 100).max(MIN_BUDGET_BPS as u64) as u32)
            }
            (Some(BudgetSpec::Percent(_)), None) | (None, None) => None,
        }
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

/// Modbus TCP: clients served at once unless `,clients=N`.
pub const MODBUS_DEFAULT_CLIENTS: usize = 8;
/// Modbus TCP: a client silent this long is disconnected unless `,idle=D`.
pub const MODBUS_DEFAULT_IDLE: Duration = Duration::from_secs(60);
/// Modbus TCP: the bind address when the word names no host.
pub const MODBUS_DEFAULT_HOST: &str = "127.0.0.1";
/// Modbus RTU: the line speed when the word names none (the Modbus serial
/// line specification's default, 19200 8E1).
pub const MODBUS_DEFAULT_BAUD: u32 = 19_200;

/// An address block of the Modbus TCP client allowlist: `10.0.0.5`,
/// `192.168.1.0/24`, `fd00::/8`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl IpNet {
    pub fn parse(s: &str) -> Option<IpNet> {
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = a.trim().parse().ok()?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            Some(p) => p.trim().parse().ok().filter(|p| *p <= max)?,
            None => max,
        };
        Some(IpNet { addr, prefix })
    }

    /// Whether `ip` is in this block (an IPv4 client seen on an IPv6
    /// socket, `::ffff:a.b.c.d`, matches IPv4 blocks).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - self.prefix as u32).unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX.checked_shl(128 - self.prefix as u32).unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// Modbus TCP server settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModbusTcpSpec {
    /// `HOST:PORT` to listen on.
    pub addr: String,
    pub max_clients: usize,
    pub idle: Duration,
    /// Empty: every client may connect.
    pub allow: Vec<IpNet>,
}

/// Where a Modbus output serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModbusTransport {
    Tcp(ModbusTcpSpec),
    Rtu(SerialSpec),
}

/// A Modbus output word: `modbus-tcp://[HOST]:PORT[,unit=N][,clients=N]
/// [,idle=DURATION][,allow=NET+NET...]` or
/// `modbus-rtu:serial:/dev/ttyX[@BAUD][,unit=N][,parity=..][,stop=..]...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModbusSpec {
    pub transport: ModbusTransport,
    /// The unit identifier served. None (TCP only): answer every unit id.
    pub unit: Option<u8>,
}

/// Whether a SINK word is a Modbus output (parsed by [`ModbusSpec::parse`]).
pub fn is_modbus(word: &str) -> bool {
    let w = word.trim_start();
    w.starts_with("modbus-tcp:") || w.starts_with("modbus-rtu:")
}

impl fmt::Display for ModbusSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.transport {
            ModbusTransport::Tcp(t) => write!(f, "modbus-tcp://{}", t.addr),
            ModbusTransport::Rtu(s) => write!(f, "modbus-rtu:serial:{}@{}", s.path, s.baud),
        }
    }
}

impl ModbusSpec {
    pub fn parse(spec: &str) -> Result<ModbusSpec, SpecError> {
        let spec = spec.trim();
        let bad_opt = |why: String| SpecError::BadOption { spec: spec.into(), why };
        let bad_addr = |why: &str| SpecError::BadAddress { spec: spec.into(), why: why.into() };
        let mut parts = spec.split(',');
        let head = parts.next().unwrap_or("");
        let mut unit: Option<u8> = None;
        let mut clients = None;
        let mut idle = None;
        let mut allow = Vec::new();
        let mut serial_opts = Vec::new();
        for opt in parts {
            let (k, v) = opt.split_once('=').ok_or_else(|| bad_opt(format!("option {opt:?} is not KEY=VALUE")))?;
            let (k, v) = (k.trim(), v.trim());
            match k {
                "unit" => unit = Some(v.parse().map_err(|_| bad_opt(format!("unit must be 0..255, not {v:?}")))?),
                "clients" => {
                    clients = Some(
                        v.parse::<usize>()
                            .ok()
                            .filter(|n| (1..=256).contains(n))
                            .ok_or_else(|| bad_opt(format!("clients must be 1..256, not {v:?}")))?,
                    )
                }
                "idle" => {
                    let d = crate::config::parse_duration(v).map_err(|e| bad_opt(format!("idle: {e}")))?;
                    if d < Duration::from_millis(100) {
                        return Err(bad_opt("idle must be at least 100ms".into()));
                    }
                    idle = Some(d)
                }
                "allow" => {
                    for net in v.split('+').filter(|n| !n.trim().is_empty()) {
                        allow.push(IpNet::parse(net).ok_or_else(|| {
                            bad_opt(format!(
                                "allow: {net:?} is not an address or ADDRESS/PREFIX (e.g. 10.0.0.5/32+192.168.1.0/24)"
                            ))
                        })?);
                    }
                    if allow.is_empty() {
                        return Err(bad_opt("allow needs at least one address".into()));
                    }
                }
                "format" => return Err(bad_opt("a Modbus output has no format= (it serves a register map)".into())),
                _ => serial_opts.push((k, opt)),
            }
        }
        if let Some(a) = head.strip_prefix("modbus-tcp://") {
            if let Some((k, _)) = serial_opts.first() {
                return Err(bad_opt(format!("unknown option {k:?} (unit, clients, idle, allow)")));
            }
            let (host, port) = a
                .rsplit_once(':')
                .filter(|(_, p)| p.parse::<u16>().is_ok())
                .ok_or_else(|| bad_addr("expected modbus-tcp://[HOST]:PORT, e.g. modbus-tcp://127.0.0.1:502"))?;
            let host = if host.is_empty() { MODBUS_DEFAULT_HOST } else { host };
            Ok(ModbusSpec {
                transport: ModbusTransport::Tcp(ModbusTcpSpec {
                    addr: format!("{host}:{port}"),
                    max_clients: clients.unwrap_or(MODBUS_DEFAULT_CLIENTS),
                    idle: idle.unwrap_or(MODBUS_DEFAULT_IDLE),
                    allow,
                }),
                unit,
            })
        } else if let Some(rest) = head.strip_prefix("modbus-rtu:") {
            if !rest.starts_with("serial:") {
                return Err(bad_addr("expected modbus-rtu:serial:/dev/ttyX[@BAUD]"));
            }
            if clients.is_some() || idle.is_some() || !allow.is_empty() {
                return Err(bad_opt("clients, idle and allow are Modbus TCP options".into()));
            }
            let mut serial_word = rest.to_string();
            for (_, opt) in &serial_opts {
                serial_word.push(',');
                serial_word.push_str(opt);
            }
            let mut s = match LinkSpec::parse(&serial_word) {
                Ok(LinkSpec { endpoint: Endpoint::Serial(s), .. }) => s,
                Ok(_) => return Err(bad_addr("expected modbus-rtu:serial:/dev/ttyX[@BAUD]")),
                Err(SpecError::BadOption { why, .. }) => {
                    return Err(bad_opt(
                        why.replace("(parity, flow, data, stop, format, budget)", "(unit, parity, flow, data, stop)"),
                    ))
                }
                Err(SpecError::BadAddress { why, .. }) => return Err(bad_addr(&why)),
                Err(e) => return Err(bad_addr(&e.to_string())),
            };
            if !rest.contains('@') {
                s.baud = MODBUS_DEFAULT_BAUD;
            }
            if !serial_opts.iter().any(|(k, _)| *k == "parity") {
                s.parity = Parity::Even;
            }
            let unit = unit.unwrap_or(1);
            if !(1..=247).contains(&unit) {
                return Err(bad_opt(format!("unit must be 1..247 on a serial line, not {unit}")));
            }
            Ok(ModbusSpec { transport: ModbusTransport::Rtu(s), unit: Some(unit) })
        } else {
            Err(SpecError::UnknownScheme(spec.into()))
        }
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
            Endpoint::Serial(s) => assert_eq!(
                (s.baud, s.parity, s.flow, s.data_bits, s.stop_bits),
                (115_200, Parity::None, Flow::None, 8, 1)
            ),
            e => panic!("{e:?}"),
        }
        assert_eq!(LinkSpec::parse("tcp://0.0.0.0:7070").unwrap().endpoint, Endpoint::Tcp("0.0.0.0:7070".into()));
        assert_eq!(LinkSpec::parse("tcp://[::1]:7070").unwrap().endpoint, Endpoint::Tcp("[::1]:7070".into()));
        assert_eq!(LinkSpec::parse("udp://10.0.0.2:9000").unwrap().endpoint, Endpoint::Udp("10.0.0.2:9000".into()));
        assert_eq!(
            LinkSpec::parse("unix:/run/latmon.sock").unwrap().endpoint,
            Endpoint::Unix("/run/latmon.sock".into())
        );
        assert_eq!(
            LinkSpec::parse("file:/var/log/latmon.bin").unwrap().endpoint,
            Endpoint::File("/var/log/latmon.bin".into())
        );
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
            ("tcp://h:1,parity=even", "unknown option \"parity\" (format, budget, clients)"),
            ("udp://h:1,parity=even", "only format"),
            ("tcp://h:1,budget=30%", "needs a line rate"),
            ("serial:/dev/ttyS1,budget=0%", "1..100"),
            ("serial:/dev/ttyS1,budget=fast", "budget must be PERCENT%"),
            ("file:x,budget=3B/s", "must be 16..4294967295B/s"),
            ("file:x,budget=99999999999B/s", "must be 16..4294967295B/s (or none), not \"99999999999B/s\""),
            ("file:x,budget=-5B/s", "must be 16..4294967295B/s"),
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
    fn budgets() {
        let b = |w: &str| LinkSpec::parse(w).unwrap().budget_bps();
        assert_eq!(b("serial:/dev/ttyS1"), Some(5_760), "half of 115200 8N1 (11 520 B/s)");
        assert_eq!(b("serial:/dev/ttyS1@9600"), Some(480));
        assert_eq!(b("serial:/dev/ttyS1@9600,parity=even"), Some(436), "8E1: 11 bits a byte");
        assert_eq!(b("serial:/dev/ttyS1,budget=30%"), Some(3_456));
        assert_eq!(b("serial:/dev/ttyS1,budget=2000B/s"), Some(2_000));
        assert_eq!(b("serial:/dev/ttyS1,budget=none"), None);
        assert_eq!(b("file:/x"), None, "files are unlimited unless set");
        assert_eq!(b("tcp://h:1,budget=2000B/s"), Some(2_000));
        assert_eq!(b("-"), None);
    }

    #[test]
    fn stream_listeners_take_a_client_limit() {
        assert_eq!(LinkSpec::parse("tcp://127.0.0.1:7070,clients=3").unwrap().clients, Some(3));
        assert_eq!(LinkSpec::parse("unix:/run/l.sock,clients=64,format=json").unwrap().clients, Some(64));
        assert_eq!(LinkSpec::parse("tcp://127.0.0.1:7070").unwrap().clients, None);
        for bad in ["tcp://127.0.0.1:7070,clients=0", "tcp://127.0.0.1:7070,clients=65", "unix:/x,clients=many"] {
            let e = LinkSpec::parse(bad).unwrap_err().to_string();
            assert!(e.contains("clients must be 1..64"), "{bad}: {e}");
        }
        for no in ["udp://127.0.0.1:7070,clients=2", "file:/tmp/x,clients=2", "serial:/dev/ttyS0,clients=2"] {
            assert!(LinkSpec::parse(no).unwrap_err().to_string().contains("\"clients\""), "{no}");
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

    #[test]
    fn modbus_words() {
        let m = ModbusSpec::parse("modbus-tcp://:502").unwrap();
        assert_eq!(m.unit, None);
        assert_eq!(
            m.transport,
            ModbusTransport::Tcp(ModbusTcpSpec {
                addr: "127.0.0.1:502".into(),
                max_clients: 8,
                idle: Duration::from_secs(60),
                allow: Vec::new()
            })
        );
        assert_eq!(m.to_string(), "modbus-tcp://127.0.0.1:502");
        let m = ModbusSpec::parse(
            "modbus-tcp://0.0.0.0:1502,unit=17,clients=2,idle=5s,allow=10.0.0.5/32+192.168.1.0/24+::1",
        )
        .unwrap();
        assert_eq!(m.unit, Some(17));
        let ModbusTransport::Tcp(t) = m.transport else { panic!() };
        assert_eq!((t.addr.as_str(), t.max_clients, t.idle), ("0.0.0.0:1502", 2, Duration::from_secs(5)));
        assert_eq!(
            t.allow.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
            ["10.0.0.5/32", "192.168.1.0/24", "::1/128"]
        );
        assert_eq!(ModbusSpec::parse("modbus-tcp://[::]:502").unwrap().to_string(), "modbus-tcp://[::]:502");

        let m = ModbusSpec::parse("modbus-rtu:serial:/dev/ttyS1@9600,unit=17,parity=none,stop=2").unwrap();
        assert_eq!(m.unit, Some(17));
        assert_eq!(
            m.transport,
            ModbusTransport::Rtu(SerialSpec {
                path: "/dev/ttyS1".into(),
                baud: 9600,
                parity: Parity::None,
                flow: Flow::None,
                data_bits: 8,
                stop_bits: 2
            })
        );
        let m = ModbusSpec::parse("modbus-rtu:serial:/dev/ttyUSB0").unwrap();
        assert_eq!(m.unit, Some(1));
        let ModbusTransport::Rtu(s) = &m.transport else { panic!() };
        assert_eq!((s.baud, s.parity), (19_200, Parity::Even), "Modbus serial default 19200 8E1");
        assert_eq!(m.to_string(), "modbus-rtu:serial:/dev/ttyUSB0@19200");
        assert!(is_modbus("modbus-tcp://:502") && is_modbus("modbus-rtu:serial:/dev/x") && !is_modbus("tcp://h:1"));
    }

    #[test]
    fn bad_modbus_words_name_the_problem() {
        for (w, needle) in [
            ("modbus-tcp://host", "[HOST]:PORT"),
            ("modbus-tcp://:70000", "[HOST]:PORT"),
            ("modbus-tcp://:502,unit=256", "unit must be 0..255"),
            ("modbus-tcp://:502,clients=0", "clients must be 1..256"),
            ("modbus-tcp://:502,idle=10ms", "at least 100ms"),
            ("modbus-tcp://:502,idle=soon", "idle"),
            ("modbus-tcp://:502,allow=10.0.0.0/33", "allow"),
            ("modbus-tcp://:502,allow=", "at least one"),
            ("modbus-tcp://:502,parity=even", "unknown option"),
            ("modbus-tcp://:502,format=json", "no format"),
            ("modbus-rtu:/dev/ttyS1", "modbus-rtu:serial:"),
            ("modbus-rtu:serial:/dev/ttyS1,unit=0", "1..247"),
            ("modbus-rtu:serial:/dev/ttyS1,unit=248", "1..247"),
            ("modbus-rtu:serial:/dev/ttyS1,clients=2", "Modbus TCP options"),
            ("modbus-rtu:serial:/dev/ttyS1,colour=red", "(unit, parity"),
            ("modbus-rtu:serial:/dev/ttyS1@fast", "baud rate"),
            ("modbus-udp://:502", "unknown output"),
        ] {
            let e = ModbusSpec::parse(w).unwrap_err().to_string();
            assert!(e.contains(needle), "{w}: {e}");
        }
    }

    #[test]
    fn allowlist_matching() {
        let n = IpNet::parse("192.168.1.0/24").unwrap();
        assert!(n.contains("192.168.1.77".parse().unwrap()));
        assert!(n.contains("::ffff:192.168.1.77".parse().unwrap()), "v4-mapped client on a v6 socket");
        assert!(!n.contains("192.168.2.1".parse().unwrap()));
        assert!(!n.contains("fe80::1".parse().unwrap()));
        assert!(IpNet::parse("0.0.0.0/0").unwrap().contains("8.8.8.8".parse().unwrap()));
        assert!(IpNet::parse("10.0.0.5").unwrap().contains("10.0.0.5".parse().unwrap()));
        assert!(!IpNet::parse("10.0.0.5").unwrap().contains("10.0.0.6".parse().unwrap()));
        let v6 = IpNet::parse("fd00::/8").unwrap();
        assert!(v6.contains("fd12::1".parse().unwrap()) && !v6.contains("fe12::1".parse().unwrap()));
        assert!(IpNet::parse("::/0").unwrap().contains("::1".parse().unwrap()));
        assert_eq!(IpNet::parse("nope"), None);
    }
}
