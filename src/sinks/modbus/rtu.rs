// SPDX-License-Identifier: MIT
//! Modbus RTU on a serial line: frames delimited by the silent interval,
//! the device opened again whenever it fails.

use std::io::{self, Read, Write};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rmodbus::{ErrorKind, ModbusProto};

use super::adu::{answer, Shared, Unanswered, RTU_ADU_MAX, TICK};
use crate::sinks::link::REOPEN_PERIOD;
use crate::sinks::spec::SerialSpec;

/// The silent interval that ends an RTU frame (3.5 character times; a
/// fixed 1.75 ms above 19200 baud, as the serial line spec says), rounded
/// up to the millisecond the tty timeout can express, at least 2 ms.
pub fn rtu_gap(baud: u32) -> Duration {
    let us = if baud > 19_200 { 1_750 } else { 38_500_000u64.div_ceil(baud.max(1) as u64) };
    Duration::from_millis(us.div_ceil(1_000).max(2))
}

/// The Modbus RTU server thread of one serial line.
pub(super) fn serve_rtu(name: &str, spec: &SerialSpec, unit: u8, shared: &Shared) {
    let gap = rtu_gap(spec.baud);
    // A frame whose bytes straggle in (USB-serial latency) is waited for
    // this long before it is judged incomplete.
    let char_us = 11_000_000u64 / spec.baud.max(1) as u64;
    let assemble_max = Duration::from_millis(50) + Duration::from_micros(char_us * RTU_ADU_MAX as u64);
    let mut port: Option<serialport::TTYPort> = None;
    let mut next_try = Instant::now();
    let mut last_err = String::new();
    let mut buf: Vec<u8> = Vec::with_capacity(2 * RTU_ADU_MAX);
    let mut resp = Vec::with_capacity(RTU_ADU_MAX);
    let mut first_byte = Instant::now();
    let mut tmp = [0u8; 512];
    while !shared.stop.load(Ordering::Relaxed) {
        let Some(p) = port.as_mut() else {
            if Instant::now() >= next_try {
                match crate::sinks::serial::open(spec, gap) {
                    Ok(p) => {
                        if last_err.is_empty() {
                            log::info!("output {name}: open");
                        } else {
                            log::warn!("output {name}: open");
                        }
                        last_err.clear();
                        buf.clear();
                        port = Some(p);
                        continue;
                    }
                    Err(e) => {
                        shared.link_failed.store(true, Ordering::Relaxed);
                        if e.to_string() != last_err {
                            log::warn!("output {name}: cannot open ({e}); trying again every {REOPEN_PERIOD:?}");
                            last_err = e.to_string();
                        }
                        next_try = Instant::now() + REOPEN_PERIOD;
                    }
                }
            }
            std::thread::sleep(
                TICK.min(next_try.saturating_duration_since(Instant::now())).max(Duration::from_millis(1)),
            );
            continue;
        };
        let _ = serialport::SerialPort::set_timeout(p, gap);
        match p.read(&mut tmp) {
            Ok(n) if n > 0 => {
                if buf.is_empty() {
                    first_byte = Instant::now();
                }
                if buf.len() + n > 2 * RTU_ADU_MAX {
                    // Noise or a stuck line: no request is this long.
                    shared.bad();
                    buf.clear();
                } else {
                    buf.extend_from_slice(&tmp[..n]);
                }
                continue;
            }
            // Nothing although poll said readable: take it as silence, but
            // never spin on it.
            Ok(_) => std::thread::sleep(gap),
            Err(e) if e.kind() == io::ErrorKind::TimedOut || e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                log::warn!("output {name}: {e}: closing; trying to open again every {REOPEN_PERIOD:?}");
                shared.link_failed.store(true, Ordering::Relaxed);
                last_err = e.to_string();
                port = None;
                next_try = Instant::now() + REOPEN_PERIOD;
                continue;
            }
        }
        // Silence on the line: what has arrived is a frame.
        if buf.is_empty() {
            continue;
        }
        let image = shared.current();
        match answer(&buf, ModbusProto::Rtu, Some(unit), &image, &mut resp) {
            Ok(()) => {
                let _ = serialport::SerialPort::set_timeout(p, Duration::from_secs(1));
                if let Err(e) = p.write_all(&resp).and_then(|()| p.flush()) {
                    log::warn!("output {name}: write: {e}");
                    shared.link_failed.store(true, Ordering::Relaxed);
                }
            }
            Err(Unanswered::NotForUs) => {}
            Err(Unanswered::Malformed(ErrorKind::FrameBroken))
                if buf.len() < RTU_ADU_MAX && first_byte.elapsed() < assemble_max =>
            {
                // Too short so far: the rest may still come.
                continue;
            }
            Err(Unanswered::Malformed(e)) => {
                shared.bad();
                log::debug!("output {name}: {} byte request dropped: {e:?}", buf.len());
            }
        }
        buf.clear();
    }
}
