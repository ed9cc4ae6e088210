// SPDX-License-Identifier: MIT
//! One request, answered: what the agent and the server threads share
//! (the current image, the stop flag, the error counts) and the answer
//! to a complete ADU, TCP or RTU alike.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmodbus::consts::ModbusFunction;
use rmodbus::server::{ModbusFrame, Read as FrameRead};
use rmodbus::{ErrorKind, ModbusProto};

use super::map::{Image, MapError};

/// The longest Modbus TCP ADU: 7-byte MBAP header + 253-byte PDU.
pub const TCP_ADU_MAX: usize = 260;
/// The longest Modbus RTU ADU: address + 253-byte PDU + CRC.
pub const RTU_ADU_MAX: usize = 256;
/// Server threads look at the stop flag at least this often.
pub(super) const TICK: Duration = Duration::from_millis(100);

/// What the agent thread and a server thread share.
#[derive(Default)]
pub(super) struct Shared {
    pub(super) image: Mutex<Arc<Image>>,
    pub(super) stop: AtomicBool,
    /// Malformed or damaged requests (bad MBAP header, broken PDU, CRC).
    pub(super) bad_requests: AtomicU64,
    /// RTU: the serial device failed or could not be opened.
    pub(super) link_failed: AtomicBool,
}

impl Shared {
    pub(super) fn current(&self) -> Arc<Image> {
        Arc::clone(&self.image.lock().unwrap_or_else(|e| e.into_inner()))
    }

    pub(super) fn bad(&self) {
        self.bad_requests.fetch_add(1, Ordering::Relaxed);
    }
}

/// Why a request got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Unanswered {
    /// Not for this unit, or a broadcast read: silence is the answer.
    NotForUs,
    /// Too short, bad length or CRC: dropped (rmodbus's verdict).
    Malformed(ErrorKind),
}

/// Answer one complete request ADU from `image` into `resp` (with MBAP
/// header or CRC as `proto` wants). Reads of input (FC04) and holding
/// (FC03) registers are served from the same image; every write function
/// and every function without data here (coils, discrete inputs) gets
/// exception 01, unknown functions 01 (rmodbus), addresses past the map 02,
/// quantities of 0 or above 125 03.
pub(super) fn answer(
    adu: &[u8],
    proto: ModbusProto,
    unit: Option<u8>,
    image: &Image,
    resp: &mut Vec<u8>,
) -> Result<(), Unanswered> {
    let tcp = proto == ModbusProto::TcpUdp;
    if adu.get(if tcp { 7 } else { 1 }).is_some_and(|&fc| fc >= 0x80) {
        return refuse_exception_code(adu, tcp, unit, resp);
    }
    // On TCP without a configured unit: whatever unit id the client uses.
    let unit_id = unit.unwrap_or_else(|| adu.get(6).copied().unwrap_or(0));
    // Unit 0 is a broadcast on serial lines only.
    let broadcast: &[u8] = if tcp { &[] } else { &[0] };
    let mut frame = ModbusFrame::new(unit_id, adu, proto, resp).with_broadcast_units(broadcast);
    frame.parse().map_err(Unanswered::Malformed)?;
    let write = matches!(
        frame.func,
        ModbusFunction::SetCoil
            | ModbusFunction::SetHolding
            | ModbusFunction::SetCoilsBulk
            | ModbusFunction::SetHoldingsBulk
    );
    let refused =
        frame.processing_required && matches!(frame.func, ModbusFunction::GetCoils | ModbusFunction::GetDiscretes);
    if write || refused {
        // Read-only map: the function is refused before its data is checked.
        frame.error = None;
        frame.set_modbus_error_if_unset(&ErrorKind::IllegalFunction).map_err(Unanswered::Malformed)?;
    } else if frame.processing_required {
        let result = match frame.get_external_read() {
            Ok(FrameRead::Words(w)) => match image.read(w.address, w.count) {
                Ok(regs) => {
                    for (out, r) in w.buf.chunks_exact_mut(2).zip(regs) {
                        out.copy_from_slice(&r.to_be_bytes());
                    }
                    Ok(())
                }
                Err(MapError::ZeroCount) => Err(ErrorKind::IllegalDataValue),
                Err(_) => Err(ErrorKind::IllegalDataAddress),
            },
            Ok(FrameRead::Bits(_)) => Err(ErrorKind::IllegalFunction),
            Err(e) => Err(e),
        };
        frame.process_external_read(result).map_err(Unanswered::Malformed)?;
    }
    if !frame.response_required {
        return Err(Unanswered::NotForUs);
    }
    frame.finalize_response().map_err(Unanswered::Malformed)
}

/// A request whose function code is 0x80 or more (the codes of exception
/// responses: no function has one). rmodbus would answer with function
/// byte fc + 0x80, wrapped (0x84 -> `04 01`, a malformed reply; an
/// overflow panic in a debug build): answer exception 01 with the
/// function byte as received (its exception bit is already set).
pub(super) fn refuse_exception_code(
    adu: &[u8],
    tcp: bool,
    unit: Option<u8>,
    resp: &mut Vec<u8>,
) -> Result<(), Unanswered> {
    resp.clear();
    let illegal_function = 0x01;
    if tcp {
        // MBAP header checked by the caller; the PDU is at least the byte.
        let (Some(&unit_id), Some(&fc)) = (adu.get(6), adu.get(7)) else {
            return Err(Unanswered::Malformed(ErrorKind::FrameBroken));
        };
        if unit.is_some_and(|u| u != unit_id) {
            return Err(Unanswered::NotForUs);
        }
        resp.extend_from_slice(&[adu[0], adu[1], 0, 0, 0, 3, unit_id, fc, illegal_function]);
        return Ok(());
    }
    if adu.len() < 4 {
        return Err(Unanswered::Malformed(ErrorKind::FrameBroken));
    }
    let (body, crc) = adu.split_at(adu.len() - 2);
    if crc16(body) != u16::from_le_bytes([crc[0], crc[1]]) {
        return Err(Unanswered::Malformed(ErrorKind::FrameCRCError));
    }
    // Unit 0 (broadcast) and other units get no reply on a serial line.
    if unit.is_none_or(|u| u != body[0]) {
        return Err(Unanswered::NotForUs);
    }
    resp.extend_from_slice(&[body[0], body[1], illegal_function]);
    let c = crc16(resp);
    resp.extend_from_slice(&c.to_le_bytes());
    Ok(())
}

/// The Modbus RTU CRC (CRC-16/MODBUS: reflected 0x8005, init 0xFFFF),
/// sent low byte first.
pub(super) fn crc16(data: &[u8]) -> u16 {
    let mut crc = 0xFFFFu16;
    for &b in data {
        crc ^= u16::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xA001 } else { crc >> 1 };
        }
    }
    crc
}
