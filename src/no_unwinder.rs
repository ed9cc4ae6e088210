// SPDX-License-Identifier: MIT
//! The static musl binary's unwinder, as the functions std calls: none of
//! them can do anything here. The release profile aborts on panic, so
//! nothing unwinds, and scripts/no-unwind.ld drops the unwind tables a
//! RUST_BACKTRACE backtrace would walk; yet std's panic and backtrace code
//! still names these, which pulled all of LLVM's libunwind (and the libc
//! it uses: dladdr, stdio) into the binary, 66 KB of code that could not
//! run (aarch64, 2026-12). Defined here, the linker takes none of it. A
//! backtrace is empty (it already was: no tables), a panic still prints
//! its message and aborts.
//!
//! Only where the binary ships this way (musl, panic = "abort"): tests
//! unwind, and glibc's static libc has its own uses of its unwinder.

use std::ffi::{c_int, c_void};

/// `_URC_END_OF_STACK`: the walk ends at once.
const END_OF_STACK: c_int = 5;

#[no_mangle]
extern "C" fn _Unwind_Backtrace(_trace: *mut c_void, _arg: *mut c_void) -> c_int {
    END_OF_STACK
}

#[no_mangle]
extern "C" fn _Unwind_Resume(_exception: *mut c_void) -> ! {
    std::process::abort()
}

#[no_mangle]
extern "C" fn _Unwind_FindEnclosingFunction(_pc: *mut c_void) -> *mut c_void {
    std::ptr::null_mut()
}

#[no_mangle]
extern "C" fn _Unwind_GetLanguageSpecificData(_ctx: *mut c_void) -> *mut c_void {
    std::ptr::null_mut()
}

#[no_mangle]
extern "C" fn _Unwind_GetIPInfo(_ctx: *mut c_void, before: *mut c_int) -> usize {
    if !before.is_null() {
        // SAFETY: the caller passes a pointer to its int, or null.
        unsafe { *before = 0 };
    }
    0
}

#[no_mangle]
extern "C" fn _Unwind_SetGR(_ctx: *mut c_void, _reg: c_int, _value: usize) {}

#[no_mangle]
extern "C" fn _Unwind_SetIP(_ctx: *mut c_void, _value: usize) {}

/// The getters of a frame's addresses: there is no frame.
macro_rules! no_address {
    ($($name:ident),*) => {$(
        #[no_mangle]
        extern "C" fn $name(_ctx: *mut c_void) -> usize {
            0
        }
    )*};
}
no_address!(_Unwind_GetIP, _Unwind_GetCFA, _Unwind_GetRegionStart, _Unwind_GetDataRelBase, _Unwind_GetTextRelBase);
