// SPDX-License-Identifier: MIT
//! Serial lines (UART, USB-serial) through the serialport crate, built
//! without libudev so the binary stays static-capable.

use std::io::{self, Read};
use std::sync::Arc;
use std::time::Duration;

use latmon_core::wire::{Frame, FrameDecoder, REQUEST_HELLO};
use serialport::{DataBits, FlowControl, SerialPort, StopBits, TTYPort};

use super::queue::Queue;

use super::spec::{Flow, Parity, SerialSpec};

/// Open and configure a serial device (raw mode, the spec's framing).
/// Reads and writes give up after `timeout`.
pub fn open(s: &SerialSpec, timeout: Duration) -> io::Result<TTYPort> {
    let data = match s.data_bits {
        5 => DataBits::Five,
        6 => DataBits::Six,
        7 => DataBits::Seven,
        _ => DataBits::Eight,
    };
    let parity = match s.parity {
        Parity::None => serialport::Parity::None,
        Parity::Even => serialport::Parity::Even,
        Parity::Odd => serialport::Parity::Odd,
    };
    let flow = match s.flow {
        Flow::None => FlowControl::None,
        Flow::Hardware => FlowControl::Hardware,
        Flow::Software => FlowControl::Software,
    };
    let stop = if s.stop_bits == 2 { StopBits::Two } else { StopBits::One };
    let port = serialport::new(&s.path, s.baud)
        .data_bits(data)
        .parity(parity)
        .stop_bits(stop)
        .flow_control(flow)
        .timeout(timeout)
        // Another reader (minicom on the same port) must not lock us out.
        .exclusive(false)
        .open_native()
        .map_err(io::Error::from)?;
    // Bytes a previous user left in the driver are not ours to decode.
    let _ = port.clear(serialport::ClearBuffer::Input);
    Ok(port)
}

/// Listen on the receive side of an output's serial line for a receiver's
/// Request (kind 6): `latmon view`/`decode` ask for the whole table when
/// they open the line. The thread ends with the port (unplugged, read
/// error) or when the output closes. Bytes that are not a Request frame
/// are ignored.
pub fn watch_requests(port: &TTYPort, q: Arc<Queue>, name: &str) {
    let Ok(mut rx) = port.try_clone_native() else { return };
    let (name, thread) = (name.to_string(), format!("latmon-rx {name}"));
    let label = name.clone();
    let spawned = super::link::spawn_blocked(&thread, move || {
        let mut dec = FrameDecoder::new();
        let mut buf = [0u8; 256];
        while q.deadline().is_none() {
            match rx.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => dec.feed(&buf[..n], &mut |f| {
                    if let Ok(Frame::Request(r)) = f {
                        if r.what == REQUEST_HELLO {
                            log::info!("output {name}: a receiver asked for the probe table");
                            q.request_resync();
                        }
                    }
                }),
                Err(e) if e.kind() == io::ErrorKind::TimedOut || e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => break,
            }
        }
    });
    if let Err(e) = spawned {
        log::warn!("output {label}: cannot listen for requests: {e}");
    }
}

/// The Request frame a receiver sends when it opens a serial line.
pub fn hello_request() -> Vec<u8> {
    latmon_core::wire::encode_to_vec(&Frame::Request(latmon_core::wire::Request { what: REQUEST_HELLO }))
        .unwrap_or_default()
}
