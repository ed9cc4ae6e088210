// SPDX-License-Identifier: MIT
//! JSON at its output edge (`run --format json`, `decode`, `latmon-view
//! decode`). serde_json escapes `"`, `\` and C0 controls only; strings the
//! board's processes control (a comm, an IRQ's name) may also hold DEL,
//! C1 controls (U+009B is CSI, U+009D OSC: a terminal showing the line
//! obeys them) and bidi overrides (U+202A..U+202E, U+2066..U+2069: the
//! line renders reversed). They are written as `\uXXXX` here, once; a
//! JSON reader gets the same string back.

use std::io;

use serde::Serialize;

use crate::summary::{IntervalReport, Named};

/// DEL, C1 and the bidi embedding, override and isolate controls.
pub fn needs_escape(c: char) -> bool {
    matches!(c, '\u{7f}'..='\u{9f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// serde_json's compact format, with [`needs_escape`]'s characters escaped.
pub struct Safe;

impl serde_json::ser::Formatter for Safe {
    fn write_string_fragment<W: ?Sized + io::Write>(&mut self, w: &mut W, fragment: &str) -> io::Result<()> {
        let mut start = 0;
        for (i, c) in fragment.char_indices().filter(|&(_, c)| needs_escape(c)) {
            w.write_all(&fragment.as_bytes()[start..i])?;
            write!(w, "\\u{:04x}", c as u32)?;
            start = i + c.len_utf8();
        }
        w.write_all(&fragment.as_bytes()[start..])
    }
}

/// `serde_json::to_writer` with [`Safe`] escaping.
pub fn to_writer<W: io::Write, T: Serialize + ?Sized>(w: W, v: &T) -> serde_json::Result<()> {
    v.serialize(&mut serde_json::Serializer::with_formatter(w, Safe))
}

/// `serde_json::to_string` with [`Safe`] escaping.
pub fn to_string<T: Serialize + ?Sized>(v: &T) -> serde_json::Result<String> {
    let mut b = Vec::with_capacity(128);
    to_writer(&mut b, v)?;
    // Only whole UTF-8 strings and ASCII escapes were written.
    String::from_utf8(b).map_err(|e| serde_json::Error::io(io::Error::new(io::ErrorKind::InvalidData, e)))
}

/// Bytes of alert records one JSON line carries at most (with their
/// commas). A line is its summary (a few hundred bytes per probe line)
/// plus these: it fits the output's 256 KiB queue whole, so the summary
/// always goes out; the records past the bound are cut, counted in the
/// line's `alert_records_cut` (docs/agent.md "Bounds").
pub const ALERT_RECORD_BYTES_MAX: usize = 192 * 1024;

/// Counts what would be written.
struct Count(usize);

impl io::Write for Count {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0 += b.len();
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// How many of `r`'s alert records, in order, fit in `bytes` of JSON.
pub fn alert_records_within(r: &IntervalReport, bytes: usize) -> usize {
    alert_records_fit(r, bytes).0
}

/// How many of `r`'s alert records, in order, fit in `bytes` of JSON,
/// and the bytes they take (with their commas): at most `bytes`.
pub fn alert_records_fit(r: &IntervalReport, bytes: usize) -> (usize, usize) {
    let mut used = 0usize;
    for (i, a) in r.alert_records.iter().enumerate() {
        let mut c = Count(usize::from(i > 0));
        let _ = to_writer(&mut c, &Named { name: r.probe_name(a.id), record: a });
        if used.saturating_add(c.0) > bytes {
            return (i, used);
        }
        used = used.saturating_add(c.0);
    }
    (r.alert_records.len(), used)
}

/// One JSON line of `r` (no newline) into `out`, its alert records cut at
/// `bytes` of them; returns how many were cut (also in the line).
pub fn report_line(out: &mut Vec<u8>, r: &IntervalReport, bytes: usize) -> serde_json::Result<usize> {
    let keep = alert_records_within(r, bytes);
    r.serialize_keeping(&mut serde_json::Serializer::with_formatter(out, Safe), keep)?;
    Ok(r.alert_records.len() - keep)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 40: a line with 600 lock records (~300 KiB) was dropped
    /// whole by the 256 KiB queue. Cut at the bound, it stays valid JSON,
    /// says how many were cut, and keeps the summary.
    #[test]
    fn a_line_cuts_alert_records_at_its_bound_and_counts_them() {
        let mut r = IntervalReport { seq: 7, ..Default::default() };
        r.probes.push(crate::summary::ProbeReport { name: "lock".into(), ..crate::summary::ProbeReport::empty() });
        let rec = crate::summary::AlertRecord {
            id: crate::ident::ProbeId::at(0),
            pid: 1,
            tid: 2,
            comm: "worker_with_a_long_name".into(),
            cpu: 1,
            latency_ns: 123_456,
            time_ns: 99,
            anatomy: None,
            cycle: None,
        };
        r.alert_records = vec![rec; 3_000];
        let mut out = Vec::new();
        let cut = report_line(&mut out, &r, ALERT_RECORD_BYTES_MAX).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let kept = v["alert_records"].as_array().unwrap().len();
        assert!(cut > 0 && kept + cut == 3_000, "kept {kept} cut {cut}");
        assert_eq!(v["alert_records_cut"], cut);
        assert_eq!((v["seq"].as_u64(), v["probes"][0]["name"].as_str()), (Some(7), Some("lock")));
        let records = serde_json::to_vec(&v["alert_records"]).unwrap().len();
        assert!(records <= ALERT_RECORD_BYTES_MAX + 2, "{records} bytes of records");
        assert!(out.len() < 256 * 1024, "{} bytes: fits an output queue", out.len());
        // Under the bound: the line as before, no count.
        r.alert_records.truncate(10);
        out.clear();
        assert_eq!(report_line(&mut out, &r, ALERT_RECORD_BYTES_MAX).unwrap(), 0);
        assert_eq!(out, to_string(&r).unwrap().into_bytes());
        assert!(!String::from_utf8(out).unwrap().contains("alert_records_cut"));
    }

    #[test]
    fn terminal_controls_and_bidi_overrides_leave_escaped_and_read_back_the_same() {
        let evil = "a\u{1b}]0;x\u{7}\u{7f}b\u{9b}2J\u{9d}c\u{202e}d\u{2066}é✓";
        let s = to_string(&evil).unwrap();
        assert_eq!(s, r#""a\u001b]0;x\u0007\u007fb\u009b2J\u009dc\u202ed\u2066é✓""#);
        assert!(!s.chars().any(|c| c.is_control() || needs_escape(c)), "{s:?}");
        assert_eq!(serde_json::from_str::<String>(&s).unwrap(), evil, "a reader gets the string back");
        // Plain text is untouched, and matches serde_json's.
        let plain = serde_json::json!({"comm": "ctrl_loop", "n": 3});
        assert_eq!(to_string(&plain).unwrap(), serde_json::to_string(&plain).unwrap());
    }
}
