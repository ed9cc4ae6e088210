// SPDX-License-Identifier: MIT
//! The one thing the supervisor needs of its hardware: a UART. Porting it
//! to another MCU means implementing [`Uart`] for that MCU's UART (its HAL's
//! serial type, usually a few lines over `embedded-hal-nb`'s `Read`/`Write`).

/// A byte-oriented serial port.
pub trait Uart {
    /// A received byte if one is waiting; never blocks.
    fn read_byte(&mut self) -> Option<u8>;
    /// Send `bytes`, waiting while the transmitter is full.
    fn write_all(&mut self, bytes: &[u8]);
}

/// `core::fmt` output over a [`Uart`] (the JSON lines).
pub struct Out<'a, U: Uart>(pub &'a mut U);

impl<U: Uart> core::fmt::Write for Out<'_, U> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.0.write_all(s.as_bytes());
        Ok(())
    }
}

/// An ARM PrimeCell PL011 UART (the LM3S6965's UART0..2 at 0x4000_C000,
/// 0x4000_D000, 0x4000_E000; qemu's lm3s6965evb connects them to its first
/// three `-serial` backends). Polled: no interrupts, no DMA. On real
/// silicon, also enable the UART's clock (RCGC1) and set IBRD/FBRD for the
/// baud rate; qemu needs neither.
pub struct Pl011 {
    base: usize,
}

const DR: usize = 0x000;
const FR: usize = 0x018;
const LCRH: usize = 0x02C;
const CR: usize = 0x030;
const FR_RXFE: u32 = 1 << 4;
const FR_TXFF: u32 = 1 << 5;
/// 8 data bits, FIFOs on (16 bytes each way).
const LCRH_8N1_FIFO: u32 = 0x60 | 0x10;
/// UART, transmitter and receiver enabled.
const CR_ON: u32 = 0x301;

pub const UART0: usize = 0x4000_C000;
pub const UART1: usize = 0x4000_D000;

impl Pl011 {
    /// # Safety
    /// `base` must be a PL011's register block, used by nothing else.
    pub unsafe fn new(base: usize) -> Self {
        let u = Pl011 { base };
        u.set(LCRH, LCRH_8N1_FIFO);
        u.set(CR, CR_ON);
        u
    }

    fn get(&self, off: usize) -> u32 {
        // SAFETY: a register of the block `new` was given.
        unsafe { core::ptr::read_volatile((self.base + off) as *const u32) }
    }

    fn set(&self, off: usize, v: u32) {
        // SAFETY: as in `get`.
        unsafe { core::ptr::write_volatile((self.base + off) as *mut u32, v) }
    }
}

impl Uart for Pl011 {
    fn read_byte(&mut self) -> Option<u8> {
        if self.get(FR) & FR_RXFE != 0 {
            return None;
        }
        // Bits 8..11 are the byte's framing/parity/break/overrun flags: a
        // damaged byte still goes to the decoder, whose CRC catches it.
        Some(self.get(DR) as u8)
    }

    fn write_all(&mut self, bytes: &[u8]) {
        for &b in bytes {
            while self.get(FR) & FR_TXFF != 0 {}
            self.set(DR, b as u32);
        }
    }
}
