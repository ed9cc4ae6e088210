// SPDX-License-Identifier: MIT
pub mod bpf;
