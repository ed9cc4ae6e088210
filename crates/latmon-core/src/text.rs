// SPDX-License-Identifier: MIT
//! Pieces of text every renderer shares (pure, a leaf: it imports
//! nothing of this crate): durations, names as a terminal may show them
//! or as a frame bounds them, and lines cut at whole pieces. ASCII only:
//! serial terminals.

/// `123ns`, `4.56us`, `7.89ms`, `1.23s`.
pub fn fmt_ns(ns: u64) -> String {
    Ns(ns).to_string()
}

/// [`fmt_ns`] as a `Display` value: writes without allocating.
#[derive(Clone, Copy, Debug)]
pub struct Ns(pub u64);

impl std::fmt::Display for Ns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (ns, v) = (self.0, self.0 as f64);
        // Bounds where two decimals round up to the next unit: 999_995 ns
        // is 1.00ms, not 1000.00us.
        match ns {
            0..=999 => write!(f, "{ns}ns"),
            1_000..=999_994 => write!(f, "{:.2}us", v / 1e3),
            999_995..=999_994_999 => write!(f, "{:.2}ms", v / 1e6),
            _ => write!(f, "{:.2}s", v / 1e9),
        }
    }
}

/// `text` as a terminal may show it: printable ASCII as is, anything else
/// (control characters, escape sequences, non-ASCII) as `?`. Names and
/// comms come from configs and the kernel (any task may set its comm).
pub fn push_clean(s: &mut String, text: &str) {
    s.extend(text.chars().map(|c| if (' '..='~').contains(&c) { c } else { '?' }));
}

/// `s` cut to at most `max` bytes at a character boundary (names in
/// frames with a byte bound).
pub(crate) fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `text` (printable ASCII, as the renderers write it) as lines of at most
/// `width` bytes, each ended by a newline: the first line indented by
/// `indent`, the others by `indent` and two more spaces. Lines break after
/// a `", "` or `": "` (whole pieces); a piece wider than a line is cut
/// (`~`); what does not fit in `max_lines` is cut at a piece (` ~`).
pub fn wrap_pieces_into(s: &mut String, text: &str, indent: &str, width: usize, max_lines: usize) {
    let (mut rest, lines) = (text, max_lines.max(1));
    for line in 0..lines {
        let lead = if line == 0 { indent.len() } else { indent.len() + 2 };
        s.push_str(indent);
        if line > 0 {
            s.push_str("  ");
        }
        let room = width.saturating_sub(lead).max(1);
        if rest.len() <= room {
            s.push_str(rest);
            s.push('\n');
            return;
        }
        // The last piece boundary (after the separator's comma or colon;
        // its space is dropped) that leaves room: for the line on a new
        // line, or for a `" ~"` on the last line.
        let last = line + 1 == lines;
        let fits = if last { room.saturating_sub(2) } else { room };
        let head = truncate(rest, fits + 1);
        let cut =
            head.rmatch_indices(", ").chain(head.rmatch_indices(": ")).map(|(i, _)| i + 1).filter(|&i| i <= fits).max();
        match cut {
            Some(i) if !last => {
                s.push_str(&rest[..i]);
                s.push('\n');
                rest = rest[i..].trim_start();
            }
            Some(i) => {
                s.push_str(&rest[..i]);
                s.push_str(" ~\n");
                return;
            }
            None => {
                s.push_str(truncate(rest, room - 1));
                s.push_str("~\n");
                return;
            }
        }
    }
}

/// For lines cut at whole pieces: the piece just written at `before`
/// stays if the line (from `start`) is within `width` bytes, with room for
/// a following piece's marker (`", ~"` or `"; ~"`, 3 bytes) when `more`
/// pieces follow; otherwise it is taken back and `marker` (`" ~"`, `", ~"`,
/// `"; ~"`) ends the line. Returns whether it stayed. (A piece that leaves
/// no room for the next marker is taken back too: the next piece, longer
/// than a marker, could not fit, and its marker would overflow.)
pub(crate) fn keep_piece(s: &mut String, start: usize, before: usize, width: usize, more: bool, marker: &str) -> bool {
    let room = if more { 3 } else { 0 };
    if s.len() - start <= width.saturating_sub(room) {
        return true;
    }
    s.truncate(before);
    s.push_str(marker);
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_round_up_into_the_next_unit() {
        assert_eq!(fmt_ns(999), "999ns");
        assert_eq!(fmt_ns(1_500), "1.50us");
        assert_eq!(fmt_ns(2_000_000_000), "2.00s");
        assert_eq!(fmt_ns(999_999_999), "1.00s", "an interval a hair short of 1 s");
        assert_eq!(fmt_ns(999_996), "1.00ms");
        assert_eq!(fmt_ns(999_994), "999.99us");
    }

    #[test]
    fn long_lines_wrap_at_whole_pieces() {
        let mut s = String::new();
        wrap_pieces_into(
            &mut s,
            "wait 1ms on m: inversion 900 us: held by lo[2] FIFO/10, preempted by mid[3] FIFO/50 900 us",
            "  ",
            40,
            3,
        );
        assert_eq!(
            s,
            "  wait 1ms on m: inversion 900 us:\n    held by lo[2] FIFO/10,\n    preempted by mid[3] FIFO/50 900 us\n"
        );
        assert!(s.lines().all(|l| l.len() <= 40), "{s}");
        // Out of lines: the last one is cut; a piece wider than a line too.
        let mut s = String::new();
        wrap_pieces_into(&mut s, "aaaa, bbbb, cccc", "", 9, 2);
        assert_eq!(s, "aaaa,\n  bbbb, ~\n");
        let mut s = String::new();
        wrap_pieces_into(&mut s, "aaaa, bbbbbbbbbb", "", 6, 2);
        assert_eq!(s, "aaaa,\n  bbb~\n");
        let mut s = String::new();
        wrap_pieces_into(&mut s, "short", "  ", 40, 3);
        assert_eq!(s, "  short\n");
    }

    #[test]
    fn names_show_printable_ascii_only() {
        let mut s = String::new();
        push_clean(&mut s, "ok \x1b[2Jé\n~");
        assert_eq!(s, "ok ?[2J??~");
    }

    #[test]
    fn names_are_cut_at_a_character_boundary() {
        assert_eq!(truncate("abc", 3), "abc");
        assert_eq!(truncate("abcd", 3), "abc");
        assert_eq!(truncate("aé", 2), "a", "é is 2 bytes: not cut in half");
    }

    #[test]
    fn a_piece_past_the_width_is_taken_back_for_the_marker() {
        let mut s = String::from("ab");
        let before = s.len();
        s.push_str("cdef");
        assert!(keep_piece(&mut s, 0, before, 9, true, ", ~"), "6 bytes and a marker's 3 fit 9");
        assert!(!keep_piece(&mut s, 0, before, 8, true, ", ~"));
        assert_eq!(s, "ab, ~");
        let mut s = String::from("abcdef");
        assert!(keep_piece(&mut s, 0, 2, 6, false, " ~"), "the last piece needs no room for a marker");
    }
}
