// SPDX-License-Identifier: MIT
//! Reading the probes' maps: one per-CPU reader for every per-CPU map of
//! a plain type (histograms, alert drops, cause tallies' counters), and
//! [`ReadError`], what a failed read says. A leaf of `probes`.

use std::fmt;
use std::marker::PhantomData;
use std::mem::size_of;
use std::os::fd::{AsRawFd, RawFd};

use latmon_core::hist::{Hist, BUCKETS};
use libbpf_rs::MapCore;

use crate::bpf::shared::types::latmon_hist;

/// A failed read of a probe's BPF maps. The agent counts it for the
/// probe (`read_errors`), logs it and reads again next interval; it is
/// never fatal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// The kernel refused a lookup or an iteration of `map`: why, as
    /// libbpf or the errno says.
    Map { map: String, why: String },
    /// A value of `map` is not the size bpf/latmon.h gives its type: user
    /// space and the BPF object disagree (a build mismatch).
    Layout { map: String, got: usize, want: usize },
    /// The number of possible CPUs (/sys/devices/system/cpu/possible) is
    /// unreadable: per-CPU values cannot be laid out.
    Cpus(String),
    /// The alert records' reader (its ring or perf buffer, its thread)
    /// could not start.
    Feed(String),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Map { map, why } => write!(f, "map {map}: {why}"),
            Self::Layout { map, got, want } => write!(f, "map {map}: value is {got} bytes, expected {want}"),
            Self::Cpus(why) => write!(f, "possible CPUs: {why}"),
            Self::Feed(why) => write!(f, "alert records: {why}"),
        }
    }
}

impl std::error::Error for ReadError {}

impl ReadError {
    /// The error of the last failed syscall, for `map`.
    pub(crate) fn last_os(map: &str) -> Self {
        Self::Map { map: map.into(), why: std::io::Error::last_os_error().to_string() }
    }

    /// A libbpf error on `map`.
    pub(crate) fn libbpf(map: &str, err: &dyn fmt::Display) -> Self {
        Self::Map { map: map.into(), why: err.to_string() }
    }
}

/// A map's name as errors give it.
pub(crate) fn map_name(map: &dyn MapCore) -> String {
    map.name().to_string_lossy().into_owned()
}

/// Reads one key of a per-CPU map (array or hash) of `T` into a buffer
/// sized once (no allocation per interval), visiting each CPU's value.
pub(crate) struct PerCpu<T> {
    fd: RawFd,
    name: String,
    buf: Vec<u8>,
    /// The kernel copies per-CPU values at an 8-byte stride.
    stride: usize,
    _t: PhantomData<T>,
}

impl<T: plain::Plain + Default> PerCpu<T> {
    /// `map` must outlive the reader (both live in the same probe struct).
    pub(crate) fn new(map: &dyn MapCore) -> Result<Self, ReadError> {
        let name = map_name(map);
        let ncpus = libbpf_rs::num_possible_cpus().map_err(|e| ReadError::Cpus(e.to_string()))?;
        let got = map.value_size() as usize;
        if got != size_of::<T>() {
            return Err(ReadError::Layout { map: name, got, want: size_of::<T>() });
        }
        let stride = got.next_multiple_of(8);
        Ok(PerCpu { fd: map.as_fd().as_raw_fd(), name, buf: vec![0; stride * ncpus], stride, _t: PhantomData })
    }

    /// Visit each CPU's value of key `key` (a u32: arrays).
    pub(crate) fn read(&mut self, key: u32, each: impl FnMut(&T)) -> Result<(), ReadError> {
        self.read_key(&key, each)
    }

    /// `read` for maps with other key types (e.g. a per-CPU hash keyed by
    /// a struct); `K` must be the map's key type.
    pub(crate) fn read_key<K: plain::Plain>(&mut self, key: &K, mut each: impl FnMut(&T)) -> Result<(), ReadError> {
        // SAFETY: buf holds stride * possible-CPUs bytes, as the kernel
        // writes; key points to a plain value of the map's key size.
        let rc = unsafe {
            libbpf_rs::libbpf_sys::bpf_map_lookup_elem(self.fd, (key as *const K).cast(), self.buf.as_mut_ptr().cast())
        };
        if rc != 0 {
            return Err(ReadError::last_os(&self.name));
        }
        let mut v = T::default();
        for chunk in self.buf.chunks_exact(self.stride) {
            // The size was checked in `new`: a chunk holds a whole T.
            plain::copy_from_bytes(&mut v, &chunk[..size_of::<T>()]).map_err(|_| ReadError::Layout {
                map: self.name.clone(),
                got: chunk.len(),
                want: size_of::<T>(),
            })?;
            each(&v);
        }
        Ok(())
    }
}

// SAFETY: a #[repr(C)] struct of u64s generated from latmon.h.
unsafe impl plain::Plain for latmon_hist {}
// The Rust model and the C struct must agree on the bucket count.
const _: () = assert!(size_of::<latmon_hist>() == 6 * 8 + BUCKETS * 8);

impl latmon_hist {
    fn merge_into(&self, h: &mut Hist) {
        h.merge(&Hist {
            count: self.count,
            sum_ns: self.sum_ns,
            min_ns: self.min_ns,
            max_ns: self.max_ns,
            drops: self.drops,
            alerts: self.alerts,
            alerts_dropped: 0,
            slots: self.slots,
        });
    }
}

/// The per-CPU histogram maps (`latmon_hist` values): one key summed over
/// CPUs into a [`Hist`].
pub(crate) struct PerCpuHist(PerCpu<latmon_hist>);

impl PerCpuHist {
    pub fn new(map: &dyn MapCore) -> Result<Self, ReadError> {
        PerCpu::new(map).map(PerCpuHist)
    }

    pub fn read(&mut self, key: u32, out: &mut Hist) -> Result<(), ReadError> {
        self.read_key(&key, out)
    }

    /// On error `out` keeps what it held.
    pub fn read_key<K: plain::Plain>(&mut self, key: &K, out: &mut Hist) -> Result<(), ReadError> {
        let mut sum = Hist::default();
        self.0.read_key(key, |raw| raw.merge_into(&mut sum))?;
        *out = sum;
        Ok(())
    }
}
