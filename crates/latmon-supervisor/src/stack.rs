// SPDX-License-Identifier: MIT
//! Stack high-water mark: the free stack is painted at start and the
//! lowest word no longer painted is the deepest the stack has been.

use core::ptr::{addr_of, read_volatile, write_volatile};

const PAINT: u32 = 0x5A5A_A5A5;

extern "C" {
    /// cortex-m-rt's link.x: the end of .bss/.uninit (the stack's floor)
    /// and the initial stack pointer (its top).
    static __sheap: u32;
    static _stack_start: u32;
}

fn floor() -> usize {
    addr_of!(__sheap) as usize
}

fn top() -> usize {
    addr_of!(_stack_start) as usize
}

/// Paint the free stack below the caller's frame (keep 256 bytes for
/// this function and what it calls).
#[inline(never)]
pub fn paint() {
    let sp = cortex_m::register::msp::read() as usize;
    let mut p = floor().next_multiple_of(4);
    while p + 256 < sp {
        // SAFETY: between the end of .bss and the live stack: unused RAM.
        unsafe { write_volatile(p as *mut u32, PAINT) };
        p += 4;
    }
}

/// Bytes of stack used at most since `paint` (from the top of RAM).
pub fn peak() -> usize {
    let mut p = floor().next_multiple_of(4);
    // SAFETY: reads of RAM between the end of .bss and the stack top.
    while p < top() && unsafe { read_volatile(p as *const u32) } == PAINT {
        p += 4;
    }
    top() - p
}

/// Bytes of stack in use now.
pub fn now() -> usize {
    top() - cortex_m::register::msp::read() as usize
}
