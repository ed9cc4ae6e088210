// SPDX-License-Identifier: MIT
//! Hello's observer-effect certificate (revision 11): the summary of the
//! `latmon certify` run stored for the agent's config, so that whoever
//! reads the board's frames sees what latmon costs there without a shell
//! on it. Scalars only: the no_std receiver reads it without allocating.

#[cfg(feature = "std")]
use serde::ser::SerializeStruct;
use serde::ser::SerializeTuple;
use serde::{Deserialize, Serialize, Serializer};

/// `WireCertificate::verdict`: the p99.9 shift is within the goal.
pub const CERT_PASS: u8 = 1;
/// `WireCertificate::verdict`: above the goal.
pub const CERT_FAIL: u8 = 2;
/// `WireCertificate::flags` bit: the certificate was made on another
/// kernel release than the Hello's `kernel` (it describes that kernel,
/// not this one; receivers say so).
pub const CERT_OTHER_KERNEL: u8 = 1;
/// `WireCertificate::method`: certify's stored format 1 (rounds of one
/// epoch per state, the order rotated each round; bootstrap CI of the
/// p99.9 shift, 1000 resamples).
pub const CERT_METHOD_1: u8 = 1;

/// The certificate summary a Hello carries (docs/wire-format.md, Hello).
/// Serialized by hand: on the wire (postcard) its fields in order; as JSON
/// (`latmon decode`) an object a reader needs no table for (the verdict
/// as a word, the day, the flag spelled out).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct WireCertificate {
    /// [`CERT_PASS`], [`CERT_FAIL`]; another value is a newer sender's
    /// (shown as unknown, never refused).
    pub verdict: u8,
    /// [`CERT_OTHER_KERNEL`]; other bits 0 (a newer sender's: ignored).
    pub flags: u8,
    /// How it was measured ([`CERT_METHOD_1`]).
    pub method: u8,
    /// The certify run's length, seconds.
    pub duration_s: u32,
    /// When it was made, Unix seconds (UTC).
    pub made_at_unix: u64,
    /// p99.9 wakeup latency of the measuring thread without latmon...
    pub p999_none_ns: u64,
    /// ...and with every probe attached.
    pub p999_full_ns: u64,
    /// p99.9 full − none (signed: noise can make it negative).
    pub shift_p999_ns: i64,
    /// The shift's 95 % bootstrap interval.
    pub ci95_lo_ns: i64,
    pub ci95_hi_ns: i64,
    /// The allowed shift the verdict was judged against.
    pub goal_ns: u64,
}

impl WireCertificate {
    /// "pass", "fail", or "unknown" for a newer sender's verdict.
    pub fn verdict_str(&self) -> &'static str {
        match self.verdict {
            CERT_PASS => "pass",
            CERT_FAIL => "fail",
            _ => "unknown",
        }
    }

    pub fn other_kernel(&self) -> bool {
        self.flags & CERT_OTHER_KERNEL != 0
    }

    /// The day it was made, (year, month, day) UTC.
    pub fn made_on(&self) -> (i64, u32, u32) {
        civil_from_days((self.made_at_unix / 86_400) as i64)
    }

    /// One line for a header: `certified: p99.9 +0.8 us [-1.2, 2.9] (pass,
    /// 60 s, 2026-12-07)`, and `, made on another kernel` when it was. Only
    /// numbers: nothing of it needs escaping.
    #[cfg(feature = "std")]
    pub fn line(&self) -> std::string::String {
        let us = |ns: i64| ns as f64 / 1000.0;
        let (y, m, d) = self.made_on();
        let other = if self.other_kernel() { ", made on another kernel" } else { "" };
        std::format!(
            "certified: p99.9 {:+.1} us [{:.1}, {:.1}] ({}, {} s, {y:04}-{m:02}-{d:02}{other})",
            us(self.shift_p999_ns),
            us(self.ci95_lo_ns),
            us(self.ci95_hi_ns),
            self.verdict_str(),
            self.duration_s,
        )
    }
}

impl Serialize for WireCertificate {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[cfg(feature = "std")]
        if s.is_human_readable() {
            let (y, m, d) = self.made_on();
            let mut o = s.serialize_struct("certificate", 14)?;
            o.serialize_field("verdict", self.verdict_str())?;
            o.serialize_field("other_kernel", &self.other_kernel())?;
            o.serialize_field("flags", &self.flags)?;
            o.serialize_field("method", &self.method)?;
            o.serialize_field("duration_s", &self.duration_s)?;
            o.serialize_field("made_at_unix", &self.made_at_unix)?;
            o.serialize_field("made_on", &std::format!("{y:04}-{m:02}-{d:02}"))?;
            o.serialize_field("p999_none_ns", &self.p999_none_ns)?;
            o.serialize_field("p999_full_ns", &self.p999_full_ns)?;
            o.serialize_field("shift_p999_ns", &self.shift_p999_ns)?;
            o.serialize_field("ci95_ns", &[self.ci95_lo_ns, self.ci95_hi_ns])?;
            o.serialize_field("goal_ns", &self.goal_ns)?;
            o.serialize_field("line", &self.line())?;
            return o.end();
        }
        let mut t = s.serialize_tuple(11)?;
        t.serialize_element(&self.verdict)?;
        t.serialize_element(&self.flags)?;
        t.serialize_element(&self.method)?;
        t.serialize_element(&self.duration_s)?;
        t.serialize_element(&self.made_at_unix)?;
        t.serialize_element(&self.p999_none_ns)?;
        t.serialize_element(&self.p999_full_ns)?;
        t.serialize_element(&self.shift_p999_ns)?;
        t.serialize_element(&self.ci95_lo_ns)?;
        t.serialize_element(&self.ci95_hi_ns)?;
        t.serialize_element(&self.goal_ns)?;
        t.end()
    }
}

/// (year, month, day) of a day count since 1970-01-01 (proleptic
/// Gregorian; H. Hinnant's days_from_civil inverse).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_name_their_date() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(59), (1970, 3, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        // 2026-12-07 00:00 UTC = 1 796 601 600 s.
        assert_eq!(civil_from_days(1_796_601_600 / 86_400), (2026, 12, 7));
    }

    #[cfg(feature = "std")]
    #[test]
    fn the_line_says_shift_interval_verdict_length_and_day() {
        let c = WireCertificate {
            verdict: CERT_PASS,
            method: CERT_METHOD_1,
            duration_s: 60,
            made_at_unix: 1_796_601_600 + 3_600,
            shift_p999_ns: 800,
            ci95_lo_ns: -1_200,
            ci95_hi_ns: 2_900,
            ..WireCertificate::default()
        };
        assert_eq!(c.line(), "certified: p99.9 +0.8 us [-1.2, 2.9] (pass, 60 s, 2026-12-07)");
        let other = WireCertificate { verdict: 9, flags: CERT_OTHER_KERNEL, ..c };
        assert_eq!(
            other.line(),
            "certified: p99.9 +0.8 us [-1.2, 2.9] (unknown, 60 s, 2026-12-07, made on another kernel)"
        );
    }
}
