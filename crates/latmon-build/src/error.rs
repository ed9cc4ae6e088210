// SPDX-License-Identifier: MIT
//! The one error type of the post-processing (a leaf).

use std::fmt;

/// Why an object or a skeleton could not be processed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// Not a little-endian ELF64 file.
    NotElf64Le,
    /// A header, section or record reaches past its file or section.
    Truncated(&'static str),
    /// A `.BTF` or `.BTF.ext` section without the BTF magic.
    BadMagic(&'static str),
    /// A skeleton without what libbpf-cargo generates (named).
    Skeleton(&'static str),
    /// The shared skeleton has no Rust type for this struct of latmon.h.
    NotShared(String),
    /// A skeleton's copy of this struct differs from the shared one.
    Differs(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotElf64Le => f.write_str("not an ELF64 little-endian object"),
            Error::Truncated(what) => write!(f, "truncated: {what}"),
            Error::BadMagic(section) => write!(f, "{section} magic"),
            Error::Skeleton(what) => write!(f, "the skeleton has no {what}"),
            Error::NotShared(name) => write!(f, "the shared skeleton has no struct {name}"),
            Error::Differs(name) => write!(f, "struct {name} differs from the shared one"),
        }
    }
}

impl std::error::Error for Error {}
