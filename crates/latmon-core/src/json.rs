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

#[cfg(test)]
mod tests {
    use super::*;

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
