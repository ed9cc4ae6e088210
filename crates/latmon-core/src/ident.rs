// SPDX-License-Identifier: MIT
//! What a probe is, as types: its family, the attach mechanism it runs on
//! and the build of its BPF object. Everything inside latmon carries these;
//! they become words or numbers only at the output edges, each through one
//! function here (`as_str` for JSON, text, frames, Prometheus and logs;
//! `modbus_code` for the register map): a family's word and code are its
//! one row of the `families!` table, a mechanism's the arms of exhaustive
//! `match`es, so a new variant without its word or code is a compile
//! error. Pure: no I/O.

use std::fmt;

use serde::{Serialize, Serializer};

/// Generates [`Family`] from one row per family: its variant, its word and
/// its Modbus code. The row is the family's whole registration in this
/// file (`Family`, `Family::ALL`, `as_str`, `parse`, `modbus_code`), so a
/// family cannot have a word without a code or a place in `ALL` without
/// either. Words and codes are outputs (docs/probes.md, Prometheus labels,
/// docs/modbus-map.md, golden vectors): a row's never change, rows are
/// only added.
macro_rules! families {
    ($($variant:ident => $word:literal, $code:literal;)*) => {
        /// A probe family: what `--probe WORD` names (docs/probes.md).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Family {
            $($variant,)*
        }

        impl Family {
            /// Every family, in the table's order.
            pub const ALL: [Family; [$(stringify!($variant)),*].len()] = [$(Family::$variant),*];

            /// The family word of specs and every output (`kind` in JSON,
            /// frames and Prometheus labels).
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Family::$variant => $word,)*
                }
            }

            /// The family word of a spec, if it names one.
            pub fn parse(word: &str) -> Option<Self> {
                Self::ALL.into_iter().find(|f| f.as_str() == word)
            }

            /// The `kind` register of a probe block (docs/modbus-map.md); 0
            /// is left for "unknown".
            pub fn modbus_code(self) -> u16 {
                match self {
                    $(Family::$variant => $code,)*
                }
            }
        }
    };
}

families! {
    Runq => "runq", 1;
    Syscall => "syscall", 2;
    Irq => "irq", 3;
    Softirq => "softirq", 4;
    Timer => "timer", 5;
    Kfunc => "kfunc", 6;
    Ufunc => "ufunc", 7;
    Chain => "chain", 8;
    Cycle => "cycle", 9;
    Lock => "lock", 10;
}

/// An attach mechanism: one rung of a family's attach ladder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mechanism {
    /// BTF-typed tracepoint (trusted task pointers).
    TpBtf,
    /// Raw tracepoint: the same arguments, untyped.
    RawTp,
    /// Classic tracepoint: the record layout from tracefs (the no-BTF build).
    Tracepoint,
    Fentry,
    Kprobe,
    Uprobe,
}

impl Mechanism {
    pub const ALL: [Mechanism; 6] = [
        Mechanism::TpBtf,
        Mechanism::RawTp,
        Mechanism::Tracepoint,
        Mechanism::Fentry,
        Mechanism::Kprobe,
        Mechanism::Uprobe,
    ];

    /// The mechanism's word in `attach=`, `LATMON_SKIP_ATTACH` and every
    /// output (`attach` in JSON, frames and Prometheus labels).
    pub fn as_str(self) -> &'static str {
        match self {
            Mechanism::TpBtf => "tp_btf",
            Mechanism::RawTp => "raw_tp",
            Mechanism::Tracepoint => "tracepoint",
            Mechanism::Fentry => "fentry",
            Mechanism::Kprobe => "kprobe",
            Mechanism::Uprobe => "uprobe",
        }
    }

    /// The mechanism a word names, if any.
    pub fn parse(word: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.as_str() == word)
    }

    /// The `mechanism` register of a probe block (docs/modbus-map.md); 0
    /// (failed) and 255 (another mechanism) are left for what is not one
    /// of these.
    pub fn modbus_code(self) -> u16 {
        match self {
            Mechanism::TpBtf => 1,
            Mechanism::RawTp => 2,
            Mechanism::Tracepoint => 3,
            Mechanism::Fentry => 4,
            Mechanism::Kprobe => 5,
            Mechanism::Uprobe => 6,
        }
    }
}

/// How a probe's BPF object gets along with kernel types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BtfMode {
    /// CO-RE: relocated against the kernel's BTF (or `btf_path`).
    CoRe,
    /// A build without CO-RE relocations (bpf/nobtf.h), for kernels
    /// without BTF. Only families that read no kernel struct have one.
    NoBtf,
}

impl BtfMode {
    /// As `latmon check` and the logs name it.
    pub fn as_str(self) -> &'static str {
        match self {
            BtfMode::CoRe => "co-re",
            BtfMode::NoBtf => "no-btf",
        }
    }
}

/// A series' place beside its family's latency: a call whose purpose is
/// to wait (nanosleep, ppoll, a futex wait, ...) times its caller's
/// timeout or peer, not the system's service time, so it is kept out of
/// the family line and summed in the family's waits line instead
/// (docs/probes.md, "Waits").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Wait {
    /// Latency: counted in its family line.
    #[default]
    No,
    /// A series whose calls wait (JSON `"wait": true`).
    Series,
    /// The family's waits line, `FAMILY:waits`: the sum of its wait
    /// series (JSON `"waits": true`).
    Sum,
}

impl Wait {
    /// The role's number in Hello's `waits` (docs/wire-format.md); 0 is
    /// never sent.
    pub fn code(self) -> u8 {
        match self {
            Wait::No => 0,
            Wait::Series => 1,
            Wait::Sum => 2,
        }
    }

    /// The role a sender's number names; an unknown number (a later
    /// revision's role) reads as latency, as before it existed.
    pub fn from_code(c: u8) -> Wait {
        match c {
            1 => Wait::Series,
            2 => Wait::Sum,
            _ => Wait::No,
        }
    }
}

// Display (logs, text) and Serialize (JSON) both say `as_str`; Display
// pads, so `{:<11}` lines up as it did for the words.
/// An identity with one word in every output ([`Family`], [`Mechanism`]).
pub trait Named: Copy + Sized + 'static {
    const ALL_WORDS: &'static [Self];
    fn word(self) -> &'static str;
}

impl Named for Family {
    const ALL_WORDS: &'static [Self] = &Family::ALL;
    fn word(self) -> &'static str {
        self.as_str()
    }
}

impl Named for Mechanism {
    const ALL_WORDS: &'static [Self] = &Mechanism::ALL;
    fn word(self) -> &'static str {
        self.as_str()
    }
}

/// A family or mechanism as a report holds it: one this build knows, or
/// the word a sender said that it does not (a newer agent's family, or
/// none: `""` before a Hello names the probe). Serialized as the word,
/// so JSON reads the same either way.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Said<T> {
    Known(T),
    Unknown(String),
}

/// A report's `kind`.
pub type KindSaid = Said<Family>;
/// A report's `attach`.
pub type AttachSaid = Said<Mechanism>;

impl<T> Default for Said<T> {
    fn default() -> Self {
        Said::Unknown(String::new())
    }
}

impl<T: Named + PartialEq> Said<T> {
    /// The identity `word` names, else the word kept as said.
    pub fn parse(word: &str) -> Self {
        match T::ALL_WORDS.iter().find(|t| t.word() == word) {
            Some(&t) => Said::Known(t),
            None => Said::Unknown(word.to_string()),
        }
    }

    /// Set from `word`, allocating only when an unknown word changes.
    pub fn set_word(&mut self, word: &str) {
        if self.as_str() != word {
            *self = Self::parse(word);
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Said::Known(t) => t.word(),
            Said::Unknown(w) => w,
        }
    }

    pub fn known(&self) -> Option<T> {
        match self {
            Said::Known(t) => Some(*t),
            Said::Unknown(_) => None,
        }
    }
}

impl<T: Named + PartialEq> From<&str> for Said<T> {
    fn from(word: &str) -> Self {
        Self::parse(word)
    }
}

impl<T: Named + PartialEq> fmt::Display for Said<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<T: Named + PartialEq> Serialize for Said<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A probe's identity inside latmon: its index in the agent's probe list
/// (the order of `Session::probes`, `IntervalReport::probes` and the
/// wire's probe table, where it is `ProbeDesc::id`). Records, summaries
/// and the tracker carry this; the name is looked up only where text,
/// JSON or a label is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProbeId(pub u16);

impl ProbeId {
    /// What a record carries before the agent stamps it with its probe's
    /// place, and a wire id no table row names.
    pub const NONE: ProbeId = ProbeId(u16::MAX);

    /// The index into the probe list.
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// The id of the probe at `index` (lists are bounded by the wire's
    /// MAX_PROBES, far below u16::MAX).
    pub fn at(index: usize) -> Self {
        ProbeId(u16::try_from(index).unwrap_or(u16::MAX))
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl Serialize for Family {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl Serialize for Mechanism {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl fmt::Display for BtfMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl Serialize for BtfMode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_parse_back_and_codes_are_distinct() {
        for f in Family::ALL {
            assert_eq!(Family::parse(f.as_str()), Some(f));
            assert_eq!(Family::ALL.iter().filter(|g| g.modbus_code() == f.modbus_code()).count(), 1);
            assert_ne!(f.modbus_code(), 0, "0 reads unknown");
        }
        for m in Mechanism::ALL {
            assert_eq!(Mechanism::parse(m.as_str()), Some(m));
            assert_eq!(Mechanism::ALL.iter().filter(|n| n.modbus_code() == m.modbus_code()).count(), 1);
            assert!(!matches!(m.modbus_code(), 0 | 255), "0 and 255 are reserved");
        }
        assert_eq!((Family::parse("bogus"), Mechanism::parse("")), (None, None));
    }

    #[test]
    fn output_words_are_the_documented_ones() {
        // docs/probes.md and docs/modbus-map.md name these; outputs must not drift.
        // (The Modbus codes: src/sinks/modbus/map.rs's `codes` test.)
        let fams: Vec<_> = Family::ALL.iter().map(|f| f.as_str()).collect();
        assert_eq!(fams, ["runq", "syscall", "irq", "softirq", "timer", "kfunc", "ufunc", "chain", "cycle", "lock"]);
        let mechs: Vec<_> = Mechanism::ALL.iter().map(|m| m.as_str()).collect();
        assert_eq!(mechs, ["tp_btf", "raw_tp", "tracepoint", "fentry", "kprobe", "uprobe"]);
        assert_eq!((BtfMode::CoRe.to_string(), BtfMode::NoBtf.to_string()), ("co-re".into(), "no-btf".into()));
        assert_eq!(serde_json::to_string(&Mechanism::TpBtf).unwrap(), "\"tp_btf\"");
        assert_eq!(format!("[{:<8}|{:>7}]", Mechanism::RawTp, Family::Irq), "[raw_tp  |    irq]");
    }
}
