// SPDX-License-Identifier: MIT
//! Serial lines (UART, USB-serial) through the serialport crate, built
//! without libudev so the binary stays static-capable.

use std::io;
use std::time::Duration;

use serialport::{DataBits, FlowControl, SerialPort, StopBits, TTYPort};

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
