// SPDX-License-Identifier: MIT
//! The BPF bucket function (bits.bpf.h) and hist::bucket_index() agree:
//! the BPF side runs in the kernel through BPF_PROG_TEST_RUN.

use std::mem::MaybeUninit;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::ProgramInput;

use latmon::bpf::limits::SELFTEST_VALUES;
use latmon::bpf::selftest::SelftestSkelBuilder;
use latmon_core::hist::{bucket_bounds, bucket_index, BUCKETS};

fn inputs() -> Vec<u64> {
    let mut v: Vec<u64> = (0..=20).collect();
    for k in 3..64u32 {
        let p = 1u64 << k;
        v.extend([p - 1, p, p + 1]);
    }
    for i in 0..BUCKETS.min(120) {
        let (lo, hi) = bucket_bounds(i);
        v.push(lo);
        v.push(hi.saturating_sub(1));
    }
    v.extend([10_000_000_000, u64::MAX, u64::MAX - 1]);
    // Fill the rest with a fixed pseudo-random spread over all magnitudes.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    while v.len() < SELFTEST_VALUES {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.push(x >> (x % 64));
    }
    v.truncate(SELFTEST_VALUES);
    v
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn bpf_and_rust_buckets_agree() {
    let mut storage = MaybeUninit::uninit();
    let open = SelftestSkelBuilder::default().open(&mut storage).expect("open selftest");
    let mut skel = open.load().expect("load selftest (run as root)");
    let values = inputs();
    skel.maps.bss_data.as_deref_mut().unwrap().in_ns.copy_from_slice(&values);
    let out = skel.progs.bucket_selftest.test_run(ProgramInput::default()).expect("BPF_PROG_TEST_RUN");
    assert_eq!(out.return_value, 0);
    let got = skel.maps.bss_data.as_deref().unwrap().out_bucket;
    let mut checked = 0;
    for (v, b) in values.iter().zip(got.iter()) {
        assert_eq!(*b as usize, bucket_index(*v), "value {v}");
        checked += 1;
    }
    assert_eq!(checked, SELFTEST_VALUES);
}
