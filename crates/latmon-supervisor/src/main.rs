// SPDX-License-Identifier: MIT
//! Example supervisor firmware: latmon frames in on UART0, one JSON line
//! per applied summary out on UART1 (qemu lm3s6965evb; README.md says how
//! to port it). All state is static and fixed: the receiver
//! (`FixedReceiver`: frame buffer, `SERIES` series, `ALERTS` alert
//! records) lives in .bss; nothing is allocated.
//!
//! Lines (one per summary applied, when the next summary begins or the
//! line goes quiet; the last one's totals are the link's
//! totals since the sender started):
//!
//! ```text
//! {"seq": N, "totals": {"NAME": TOTAL_COUNT, ...}, "lost": N, "over_capacity": N, "stack": BYTES}
//! ```
//!
//! Its first line, once UART0 is set up and the loop about to read it:
//!
//! ```text
//! {"ready": {"series": SERIES, "name": NAME, "alerts": ALERTS}}
//! ```
//!
//! (a harness starts the line after it: a byte that arrives before the
//! firmware set UART0 up is not received; qemu's PL011 empties its
//! receive FIFO when the FIFO is switched on), and, when the line has
//! been quiet for a while (~50 ms in qemu) after new bytes, one link
//! line:
//!
//! ```text
//! {"link": {"bytes": N, "frames_good": N, "errors": N, "resyncs": N, "unknown_kinds": N}, "lost": N, "series": N, "series_over_capacity": N, "stack": BYTES, "decode_stack": BYTES}
//! ```

#![no_std]
#![no_main]

mod stack;
mod uart;

use core::fmt::Write as _;

use cortex_m_rt::{entry, exception, ExceptionFrame};
use latmon_core::wire::{Applied, FixedReceiver, FixedTracker, Received};

use uart::{Out, Pl011, Uart};

/// Series kept (probe ids of the sender's table); more are counted as over
/// capacity. 128 covers latmon's default probes with their syscall/irq
/// series on a busy board.
const SERIES: usize = 128;
/// Bytes of a series name kept (longer names are cut).
const NAME: usize = 64;
/// Latest alert records kept.
const ALERTS: usize = 8;
/// Empty polls of UART0 after which the link line is printed (each poll
/// is an MMIO read: tens of ms in qemu, longer on a loaded host; a pause
/// mid-stream only prints it early, which is harmless).
const IDLE_POLLS: u32 = 1 << 16;

type Receiver = FixedReceiver<SERIES, NAME, ALERTS>;
type Tracker = FixedTracker<SERIES, NAME, ALERTS>;

static mut RECEIVER: Receiver = Receiver::new();

#[entry]
fn main() -> ! {
    // SAFETY: UART0 and UART1 are used by nothing else.
    let (mut rx, mut tx) = unsafe { (Pl011::new(uart::UART0), Pl011::new(uart::UART1)) };
    // SAFETY: the only reference to RECEIVER, taken once.
    let r = unsafe { &mut *core::ptr::addr_of_mut!(RECEIVER) };
    stack::paint();
    let _ = writeln!(Out(&mut tx), "{{\"ready\": {{\"series\": {SERIES}, \"name\": {NAME}, \"alerts\": {ALERTS}}}}}");
    let at_feed = stack::now();
    let mut decode_stack = 0;
    let mut buf = [0u8; 16];
    let (mut idle, mut told) = (0u32, 0u64);
    // The summary applied and not yet reported.
    let mut unsaid: Option<u64> = None;
    loop {
        let mut n = 0;
        while n < buf.len() {
            match rx.read_byte() {
                Some(b) => {
                    buf[n] = b;
                    n += 1;
                }
                None => break,
            }
        }
        if n == 0 {
            idle = idle.saturating_add(1);
            if idle >= IDLE_POLLS / 4 {
                if let Some(seq) = unsaid.take() {
                    summary_line(&mut tx, &r.tracker, seq);
                }
            }
            if idle >= IDLE_POLLS && r.stats.bytes != told {
                told = r.stats.bytes;
                link_line(&mut tx, r, decode_stack);
            }
            continue;
        }
        idle = 0;
        r.feed(&buf[..n], |t, got| match got {
            Received::Frame(Applied::Summary { seq, .. }) => {
                // The deepest the receive path has gone below main's frame.
                decode_stack = stack::peak().saturating_sub(at_feed);
                unsaid = Some(seq);
            }
            // A summary is reported once, when the next one begins (its
            // frames all applied) or when the line goes quiet.
            Received::SummaryDone { .. } => {
                if let Some(seq) = unsaid.take() {
                    summary_line(&mut tx, t, seq);
                }
            }
            _ => {}
        });
    }
}

/// `{"seq": N, "totals": {...}, "lost": N, ...}` for the summary just applied.
fn summary_line(tx: &mut Pl011, t: &Tracker, seq: u64) {
    let mut o = Out(tx);
    let _ = write!(o, "{{\"seq\": {seq}, \"totals\": {{");
    let mut sep = "";
    for s in t.series().iter().filter(|s| s.reported()) {
        let _ = o.write_str(sep);
        let _ = o.write_char('"');
        if s.name.is_empty() {
            let _ = write!(o, "#{}", s.id);
        } else {
            json_escaped(&mut o, &s.name);
        }
        let _ = write!(o, "\": {}", s.shown.count);
        sep = ", ";
    }
    let _ = writeln!(
        o,
        "}}, \"lost\": {}, \"over_capacity\": {}, \"stack\": {}}}",
        t.lost(),
        t.series_over_capacity(),
        stack::peak()
    );
}

/// The link's statistics, once the line went quiet.
fn link_line(tx: &mut Pl011, r: &Receiver, decode_stack: usize) {
    let (s, t) = (&r.stats, &r.tracker);
    let _ = writeln!(
        Out(tx),
        "{{\"link\": {{\"bytes\": {}, \"frames_good\": {}, \"errors\": {}, \"resyncs\": {}, \"unknown_kinds\": {}}}, \"lost\": {}, \"series\": {}, \"series_over_capacity\": {}, \"stack\": {}, \"decode_stack\": {}, \"certificate\": \"{}\"}}",
        s.bytes,
        s.frames_good,
        s.errors(),
        s.resyncs,
        s.unknown_kinds,
        t.lost(),
        t.series().len(),
        t.series_over_capacity(),
        stack::peak(),
        decode_stack,
        // The sender's certify verdict (Hello revision 11), kept by the
        // tracker: what the monitored board's latmon costs, at a glance.
        t.certificate.as_ref().map_or("none", |c| c.verdict_str())
    );
}

/// A JSON string's content: `"`, `\` and control characters escaped (a
/// name is whatever the sender said).
fn json_escaped(o: &mut impl core::fmt::Write, s: &str) {
    for c in s.chars() {
        let _ = match c {
            '"' => o.write_str("\\\""),
            '\\' => o.write_str("\\\\"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => write!(o, "\\u{:04x}", c as u32),
            c => o.write_char(c),
        };
    }
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // SAFETY: the firmware is stopping; UART1 is only written.
    let mut tx = unsafe { Pl011::new(uart::UART1) };
    tx.write_all(b"{\"panic\": true}\n");
    loop {
        cortex_m::asm::wfi();
    }
}

#[exception]
unsafe fn HardFault(ef: &ExceptionFrame) -> ! {
    // SAFETY: as in `panic`.
    let mut tx = unsafe { Pl011::new(uart::UART1) };
    let _ = writeln!(Out(&mut tx), "{{\"hardfault\": {{\"pc\": {}, \"lr\": {}}}}}", ef.pc(), ef.lr());
    loop {
        cortex_m::asm::wfi();
    }
}
