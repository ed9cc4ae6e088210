// SPDX-License-Identifier: MIT
//! Modbus outputs: a read-only register image ([`map`],
//! docs/modbus-map.md) served to PLCs over Modbus TCP
//! (`modbus-tcp://HOST:PORT`) or Modbus RTU on a serial line
//! (`modbus-rtu:serial:/dev/ttyX@19200`).
//!
//! The agent thread builds each interval's image off to the side and swaps
//! it in with one pointer store under a mutex that readers also hold only
//! to clone the pointer: a multi-register read is answered from one image,
//! never from two intervals, and the agent never waits for a client.
//!
//! Frames are parsed, checked (RTU CRC) and answered, exceptions included,
//! by the `rmodbus` crate. This module only delimits them: Modbus TCP by
//! the MBAP length field, RTU by the silent interval between frames.
//! Requests are answered from server threads: one poll loop for every TCP
//! client, one thread per serial line.
//!
//! The register map ([`map`]), one request's answer ([`adu`]) and the two
//! transports ([`tcp`], [`rtu`]) are modules of their own; this file is
//! the output that ties them.

mod adu;
pub mod map;
mod rtu;
mod tcp;

pub use adu::{RTU_ADU_MAX, TCP_ADU_MAX};
pub use rtu::rtu_gap;
pub use tcp::DISPLACE_IDLE;

use std::io;
use std::net::TcpListener;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use latmon_core::session::Tick;
use nix::sys::signal::{SigSet, SigmaskHow, Signal};

use super::link::{LinkStats, Sink};
use super::spec::{ModbusSpec, ModbusTcpSpec, ModbusTransport};
use adu::Shared;
use adu::TICK;
use map::{AgentStatus, Image};
use rtu::serve_rtu;
use tcp::serve_tcp;

/// A Modbus output.
pub struct ModbusOutput {
    name: String,
    shared: Arc<Shared>,
    /// The image swapped out last time, rebuilt next time when no reader
    /// holds it any more (no allocation per interval).
    spare: Option<Arc<Image>>,
    /// Agent-wide status the Tick does not carry yet (over budget).
    pub agent: AgentStatus,
    thread: Option<JoinHandle<()>>,
    done: mpsc::Receiver<()>,
}

/// Open a Modbus output from its SINK word (see [`ModbusSpec`]). A TCP
/// address is bound now, so a mistake fails at startup; a serial device
/// that is absent is reported and opened as soon as it appears.
pub fn open(word: &str) -> Result<Box<dyn Sink>, String> {
    let spec = ModbusSpec::parse(word).map_err(|e| e.to_string())?;
    let name = spec.to_string();
    let shared = Arc::new(Shared::default());
    *shared.image.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(Image::empty(0));
    let sh = Arc::clone(&shared);
    let n = name.clone();
    let server: Box<dyn FnOnce() + Send> = match spec.transport {
        ModbusTransport::Tcp(t) => {
            let l = TcpListener::bind(&t.addr).map_err(|e| format!("output {word}: listen: {e}"))?;
            l.set_nonblocking(true).map_err(|e| format!("output {word}: {e}"))?;
            let local = l.local_addr().map(|a| a.to_string()).unwrap_or_default();
            log::info!(
                "output {name}: Modbus TCP on {local}, unit {}, at most {} clients, idle timeout {:?}{}",
                spec.unit.map_or("any".to_string(), |u| u.to_string()),
                t.max_clients,
                t.idle,
                if t.allow.is_empty() { String::new() } else { format!(", clients from {} only", fmt_allow(&t)) }
            );
            let unit = spec.unit;
            Box::new(move || serve_tcp(&n, l, &t, unit, &sh))
        }
        ModbusTransport::Rtu(s) => {
            let unit = spec.unit.unwrap_or(1);
            log::info!("output {name}: Modbus RTU unit {unit}, {:?} parity, {} stop bits", s.parity, s.stop_bits);
            Box::new(move || serve_rtu(&n, &s, unit, &sh))
        }
    };
    let (thread, done) = spawn_server(&name, server).map_err(|e| format!("output {word}: {e}"))?;
    Ok(Box::new(ModbusOutput { name, shared, spare: None, agent: AgentStatus::default(), thread: Some(thread), done }))
}

fn fmt_allow(t: &ModbusTcpSpec) -> String {
    t.allow.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(" ")
}

/// Start a server thread with SIGINT/SIGTERM blocked (the agent collects
/// them synchronously; a server thread must never be the one they hit).
fn spawn_server(name: &str, f: Box<dyn FnOnce() + Send>) -> io::Result<(JoinHandle<()>, mpsc::Receiver<()>)> {
    let mut stop = SigSet::empty();
    stop.add(Signal::SIGINT);
    stop.add(Signal::SIGTERM);
    let old = stop.thread_swap_mask(SigmaskHow::SIG_BLOCK).map_err(io::Error::from)?;
    let (tx, rx) = mpsc::channel();
    let res =
        std::thread::Builder::new().name(format!("latmon-mb {name}").chars().take(15).collect()).spawn(move || {
            f();
            let _ = tx.send(());
        });
    let _ = old.thread_set_mask();
    Ok((res?, rx))
}

impl Sink for ModbusOutput {
    fn name(&self) -> &str {
        &self.name
    }

    fn link_stats(&self) -> Option<LinkStats> {
        Some(LinkStats { dropped: 0, errors: self.shared.bad_requests.load(Ordering::Relaxed) })
    }

    fn emit(&mut self, t: &Tick<'_>) {
        self.agent.over_budget = t.report.over_budget_alarm();
        self.agent.bad_requests = self.shared.bad_requests.load(Ordering::Relaxed);
        self.agent.link_failed = self.shared.link_failed.load(Ordering::Relaxed);
        let mut next = self.spare.take().unwrap_or_default();
        if Arc::get_mut(&mut next).is_none() {
            // A reader still holds it: build into a fresh one.
            next = Arc::default();
        }
        if let Some(img) = Arc::get_mut(&mut next) {
            img.build(t, &self.agent);
        }
        let old = std::mem::replace(&mut *self.shared.image.lock().unwrap_or_else(|e| e.into_inner()), next);
        self.spare = Some(old);
    }

    fn close(&mut self, timeout: Duration) {
        let Some(thread) = self.thread.take() else { return };
        self.shared.stop.store(true, Ordering::Relaxed);
        if self.done.recv_timeout(timeout.max(TICK * 3)).is_ok() {
            let _ = thread.join();
        } else {
            log::warn!("output {}: server did not stop within {timeout:?}", self.name);
        }
    }
}

impl Drop for ModbusOutput {
    fn drop(&mut self) {
        self.close(Duration::from_millis(500));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::adu::*;
    use super::tcp::*;
    use super::*;
    use rmodbus::{ErrorKind, ModbusProto};

    use rmodbus::client::ModbusRequest;

    fn image() -> Image {
        Image::empty(1)
    }

    fn tcp(pdu: &[u8], unit: u8) -> Vec<u8> {
        let mut v = vec![0x12, 0x34, 0, 0];
        v.extend_from_slice(&(pdu.len() as u16 + 1).to_be_bytes());
        v.push(unit);
        v.extend_from_slice(pdu);
        v
    }

    fn ask_tcp(pdu: &[u8], unit: Option<u8>) -> Result<Vec<u8>, Unanswered> {
        let mut r = Vec::new();
        answer(&tcp(pdu, 9), ModbusProto::TcpUdp, unit, &image(), &mut r).map(|()| r)
    }

    #[test]
    fn tcp_reads_both_tables() {
        for fc in [3u8, 4] {
            let r = ask_tcp(&[fc, 0, 0, 0, 2], None).unwrap();
            assert_eq!(r, [0x12, 0x34, 0, 0, 0, 7, 9, fc, 4, 0x4C, 0x4D, 0, 1]);
        }
        let r = ask_tcp(&[4, 0, 71, 0, 1], None).unwrap();
        assert_eq!(&r[7..], &[4, 2, 0, 0], "last register of block 0");
    }

    #[test]
    fn tcp_exceptions() {
        let exc = |pdu: &[u8]| ask_tcp(pdu, None).unwrap_or_else(|e| panic!("{pdu:?}: {e:?}"))[7..].to_vec();
        assert_eq!(exc(&[4, 0, 72, 0, 1]), [0x84, 2], "past the end");
        assert_eq!(exc(&[3, 0xFF, 0xFF, 0, 2]), [0x83, 2], "address wraps");
        assert_eq!(exc(&[3, 0, 0, 0, 126]), [0x83, 3], "more than 125");
        assert_eq!(exc(&[3, 0, 0, 0, 0]), [0x83, 3], "zero registers");
        assert_eq!(exc(&[6, 0, 0, 0, 1]), [0x86, 1]);
        assert_eq!(exc(&[5, 0, 0, 0xFF, 0]), [0x85, 1]);
        assert_eq!(exc(&[0x10, 0, 0, 0, 1, 2, 0, 1]), [0x90, 1]);
        assert_eq!(exc(&[0x10, 0, 0, 0, 124, 2, 0, 1]), [0x90, 1], "a write is refused before its quantity is checked");
        assert_eq!(exc(&[0x0F, 0, 0, 0, 1, 1, 1]), [0x8F, 1]);
        assert_eq!(exc(&[0x16, 0, 0, 0, 0, 0, 0]), [0x96, 1], "mask write");
        assert_eq!(exc(&[0x17, 0, 0, 0, 1, 0, 0, 0, 1, 2, 0, 0]), [0x97, 1], "read/write multiple");
        assert_eq!(exc(&[1, 0, 0, 0, 8]), [0x81, 1], "no coils");
        assert_eq!(exc(&[2, 0, 0, 0, 8]), [0x82, 1], "no discrete inputs");
        assert_eq!(exc(&[8, 0, 0, 0x12, 0x34]), [0x88, 1], "unknown function (diagnostics)");
        assert!(
            matches!(ask_tcp(&[0x2B, 0x0E, 1, 0], None), Err(Unanswered::Malformed(_))),
            "rmodbus drops requests shorter than 6 bytes after the MBAP length field"
        );
    }

    /// Function codes 0x80..=0xFF (exception codes, no function) get
    /// exception 01 with their own function byte, not fc + 0x80 wrapped.
    #[test]
    fn function_codes_with_the_exception_bit_get_exception_01() {
        for fc in [0x80u8, 0x83, 0x84, 0x90, 0xAB, 0xFF] {
            let r = ask_tcp(&[fc, 0, 0, 0, 1], None).unwrap_or_else(|e| panic!("{fc:#x}: {e:?}"));
            assert_eq!(r, [0x12, 0x34, 0, 0, 0, 3, 9, fc, 1], "{fc:#x}");
            assert_eq!(ask_tcp(&[fc, 0, 0, 0, 1], Some(17)), Err(Unanswered::NotForUs));
            assert_eq!(ask_tcp(&[fc], None).map(|r| r[7..].to_vec()), Ok(vec![fc, 1]), "a bare function byte");
            // RTU, CRC checked by rmodbus's client side.
            let mut req = vec![1, fc, 0, 0, 0, 1];
            req.extend_from_slice(&crc16(&req).to_le_bytes());
            let mut r = Vec::new();
            answer(&req, ModbusProto::Rtu, Some(1), &image(), &mut r).unwrap();
            assert_eq!(&r[..3], &[1, fc, 1]);
            assert_eq!(&r[3..], &crc16(&r[..3]).to_le_bytes());
            let mut damaged = req.clone();
            damaged[2] ^= 1;
            assert_eq!(
                answer(&damaged, ModbusProto::Rtu, Some(1), &image(), &mut r),
                Err(Unanswered::Malformed(ErrorKind::FrameCRCError))
            );
            req[0] = 0;
            let n = req.len();
            let c = crc16(&req[..n - 2]);
            req[n - 2..].copy_from_slice(&c.to_le_bytes());
            assert_eq!(
                answer(&req, ModbusProto::Rtu, Some(1), &image(), &mut r),
                Err(Unanswered::NotForUs),
                "broadcast"
            );
        }
        // Our CRC is the one rmodbus checks.
        let mut req = Vec::new();
        ModbusRequest::new(1, ModbusProto::Rtu).generate_get_inputs(0, 2, &mut req).unwrap();
        assert_eq!(&req[req.len() - 2..], &crc16(&req[..req.len() - 2]).to_le_bytes());
    }

    #[test]
    fn tcp_units_and_malformed() {
        assert_eq!(ask_tcp(&[3, 0, 0, 0, 1], Some(17)), Err(Unanswered::NotForUs), "other unit");
        let mut r = Vec::new();
        answer(&tcp(&[3, 0, 0, 0, 1], 17), ModbusProto::TcpUdp, Some(17), &image(), &mut r).unwrap();
        assert_eq!(r[6], 17);
        assert!(matches!(ask_tcp(&[3, 0, 0], None), Err(Unanswered::Malformed(_))), "short PDU");
        let mut bad_proto = tcp(&[3, 0, 0, 0, 1], 1);
        bad_proto[3] = 1;
        assert!(matches!(
            answer(&bad_proto, ModbusProto::TcpUdp, None, &image(), &mut r),
            Err(Unanswered::Malformed(_))
        ));
        // Garbage of every short length: dropped, never a panic.
        for n in 0..12 {
            let g: Vec<u8> = (0..n).map(|i| (i * 37 + 5) as u8).collect();
            let _ = answer(&g, ModbusProto::TcpUdp, None, &image(), &mut r);
            let _ = answer(&g, ModbusProto::Rtu, Some(1), &image(), &mut r);
        }
    }

    #[test]
    fn rtu_crc_units_broadcast() {
        // Requests built and responses checked by rmodbus's client side.
        let mut mreq = ModbusRequest::new(1, ModbusProto::Rtu);
        let mut req = Vec::new();
        mreq.generate_get_inputs(0, 2, &mut req).unwrap();
        let mut r = Vec::new();
        answer(&req, ModbusProto::Rtu, Some(1), &image(), &mut r).unwrap();
        let mut vals = Vec::new();
        mreq.parse_u16(&r, &mut vals).unwrap();
        assert_eq!(vals, [0x4C4D, 1]);
        let mut damaged = req.clone();
        damaged[3] ^= 1;
        assert_eq!(
            answer(&damaged, ModbusProto::Rtu, Some(1), &image(), &mut r),
            Err(Unanswered::Malformed(ErrorKind::FrameCRCError))
        );
        assert_eq!(
            answer(&req[..5], ModbusProto::Rtu, Some(1), &image(), &mut r),
            Err(Unanswered::Malformed(ErrorKind::FrameBroken))
        );
        assert_eq!(
            answer(&req, ModbusProto::Rtu, Some(2), &image(), &mut r),
            Err(Unanswered::NotForUs),
            "another slave's request"
        );
        let mut bcast = Vec::new();
        ModbusRequest::new(0, ModbusProto::Rtu).generate_set_holding(0, 1, &mut bcast).unwrap();
        assert_eq!(
            answer(&bcast, ModbusProto::Rtu, Some(1), &image(), &mut r),
            Err(Unanswered::NotForUs),
            "broadcast: no reply"
        );
        let mut w = Vec::new();
        mreq.generate_set_holding(0, 1, &mut w).unwrap();
        answer(&w, ModbusProto::Rtu, Some(1), &image(), &mut r).unwrap();
        assert_eq!(mreq.parse_ok(&r), Err(ErrorKind::IllegalFunction));
        mreq.generate_get_holdings(200, 1, &mut w).unwrap();
        answer(&w, ModbusProto::Rtu, Some(1), &image(), &mut r).unwrap();
        assert_eq!(mreq.parse_ok(&r), Err(ErrorKind::IllegalDataAddress));
    }

    #[test]
    fn newcomers_displace_the_client_idle_longest_never_a_busy_one() {
        let now = Instant::now();
        let ago = |ms: u64| now - Duration::from_millis(ms);
        // A 1 Hz PLC (asked 0.9 s ago) and slow clients of 12 s.
        assert_eq!(displaced([ago(900), ago(5_000), ago(11_000), ago(2_500)].into_iter(), now, DISPLACE_IDLE), Some(2));
        // Everyone asked within 2 s: nobody is displaced.
        assert_eq!(displaced([ago(900), ago(1_999), ago(10)].into_iter(), now, DISPLACE_IDLE), None);
        assert_eq!(displaced(std::iter::empty(), now, DISPLACE_IDLE), None);
    }

    #[test]
    fn gaps() {
        assert_eq!(rtu_gap(9600), Duration::from_millis(5));
        assert_eq!(rtu_gap(19_200), Duration::from_millis(3));
        assert_eq!(rtu_gap(115_200), Duration::from_millis(2));
    }
}
