// SPDX-License-Identifier: MIT
//! Edits to the skeletons libbpf-cargo generates (text in, text out): one
//! Rust type per struct of bpf/latmon.h for every family, and the object
//! taken from the pack of all of them.

use std::fmt::Write as _;
use std::ops::Range;

use crate::error::Error;

/// The names of the structs a header defines (`struct NAME {` lines).
pub fn header_structs(header: &str) -> Vec<String> {
    header.lines().filter_map(|l| l.strip_prefix("struct ")?.strip_suffix(" {").map(str::to_string)).collect()
}

/// Each skeleton generates its own Rust type for every struct it uses:
/// in `skel`, the copies of `structs` become re-exports of the shared
/// skeleton's (`crate::bpf::shared::types`), so every family reads them
/// through one type. A copy that differs from the shared one (other
/// defines, other layout) is an error; one the skeleton does not have is
/// left out.
pub fn share_types(skel: &str, shared: &str, structs: &[String]) -> Result<String, Error> {
    let mut text = skel.to_string();
    let mut uses = String::new();
    let words = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    for name in structs {
        let head = format!("pub struct {name}");
        let want = item_span(shared, &head).ok_or_else(|| Error::NotShared(name.clone()))?;
        let Some(span) = item_span(&text, &head) else { continue };
        if words(&text[span.clone()]) != words(&shared[want]) {
            return Err(Error::Differs(name.clone()));
        }
        text.replace_range(span, "");
        if let Some(span) = item_span(&text, &format!("impl Default for {name}")) {
            text.replace_range(span, "");
        }
        writeln!(uses, "pub use crate::bpf::shared::types::{name};").unwrap();
    }
    let at = text.find("pub mod types {").ok_or(Error::Skeleton("a types module"))? + "pub mod types {".len();
    text.insert_str(at, &format!("\n{uses}"));
    Ok(text)
}

/// The skeleton's `static DATA: [u8; N] = [..];` (a third of the binary
/// for all of them) as `crate::bpf::Embedded`: the object named `object`
/// in the pack of all of them ([`crate::Pack`]), unpacked at first use.
pub fn embed_object(skel: &str, object: &str) -> Result<String, Error> {
    let start = skel.find("static DATA: [u8; ").ok_or(Error::Skeleton("`static DATA: [u8; N]`"))?;
    let end = start + skel[start..].find("];").ok_or(Error::Skeleton("the end of DATA"))? + 2;
    let embedded = format!("pub(crate) static DATA: crate::bpf::Embedded = crate::bpf::Embedded::packed({object:?});");
    Ok(format!("{}{}{}", &skel[..start], embedded, &skel[end..]))
}

/// The bytes of the item that starts `head` (`pub struct NAME`, `impl
/// Default for NAME`) in generated code: its attributes, through the brace
/// that closes it.
fn item_span(text: &str, head: &str) -> Option<Range<usize>> {
    let mut from = 0;
    while let Some(i) = text[from..].find(head) {
        let at = from + i;
        from = at + head.len();
        let rest = &text[from..];
        let body = rest.trim_start();
        let word_start = text[..at].ends_with(char::is_whitespace);
        if !body.starts_with('{') || !word_start {
            continue;
        }
        let open = from + (rest.len() - body.len());
        let mut depth = 0usize;
        let close = text[open..].char_indices().find_map(|(j, c)| {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(open + j + 1);
                    }
                }
                _ => {}
            }
            None
        })?;
        let mut start = at;
        loop {
            let before = text[..start].trim_end();
            match before.strip_suffix(']').and_then(|b| b.rfind("#[")) {
                Some(attr) => start = attr,
                None => break,
            }
        }
        return Some(start..close);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHARED: &str = "pub mod types {
    #[derive(Debug, Copy, Clone)]
    #[repr(C)]
    pub struct latmon_alert {
        pub pid: u32,
        pub lat: u64,
    }
    impl Default for latmon_alert {
        fn default() -> Self {
            Self { pid: 0, lat: 0 }
        }
    }
}
";

    /// A family's skeleton: its own copy of latmon_alert (other
    /// indentation), a struct of its own, and its embedded object.
    const FAMILY: &str = "pub mod types {
    #[derive(Debug, Copy, Clone)]
    #[repr(C)]
    pub struct latmon_alert {
      pub pid: u32,
      pub lat: u64,
    }
    impl Default for latmon_alert {
        fn default() -> Self {
            Self { pid: 0, lat: 0 }
        }
    }
    pub struct latmon_alert_ids {
        pub n: u32,
    }
}
static DATA: [u8; 3] = [
    1, 2, 3,
];
";

    #[test]
    fn the_structs_of_a_header() {
        let h = "#define X 1\nstruct latmon_alert {\n\tu32 pid;\n};\nstruct latmon_ids {\n};\nstruct fwd;\n";
        assert_eq!(header_structs(h), ["latmon_alert", "latmon_ids"]);
    }

    #[test]
    fn a_familys_copy_becomes_a_re_export_of_the_shared_type() {
        let structs = ["latmon_alert".to_string(), "latmon_hist".to_string()];
        let shared = format!("{SHARED}pub struct latmon_hist {{}}\n");
        let out = share_types(FAMILY, &shared, &structs).unwrap();
        assert!(out.starts_with("pub mod types {\npub use crate::bpf::shared::types::latmon_alert;\n"), "{out}");
        assert!(!out.contains("pub struct latmon_alert {") && !out.contains("impl Default"), "{out}");
        assert!(out.contains("pub struct latmon_alert_ids {"), "a longer name is another struct: {out}");
        assert!(!out.contains("shared::types::latmon_hist"), "a struct the family does not use: {out}");
    }

    #[test]
    fn a_copy_that_differs_or_a_struct_not_shared_is_an_error() {
        let other = FAMILY.replace("pub lat: u64", "pub lat: u32");
        let structs = ["latmon_alert".to_string()];
        assert_eq!(share_types(&other, SHARED, &structs), Err(Error::Differs("latmon_alert".into())));
        let missing = ["latmon_gone".to_string()];
        assert_eq!(share_types(FAMILY, SHARED, &missing), Err(Error::NotShared("latmon_gone".into())));
        assert_eq!(share_types("", SHARED, &[]), Err(Error::Skeleton("a types module")));
    }

    #[test]
    fn the_object_is_embedded_from_the_pack_by_name() {
        let packed = embed_object(FAMILY, "timer.bpf.o").unwrap();
        assert!(
            packed.ends_with(
                "pub(crate) static DATA: crate::bpf::Embedded = crate::bpf::Embedded::packed(\"timer.bpf.o\");\n"
            ),
            "{packed}"
        );
        assert!(!packed.contains("[u8; 3]"));
        assert_eq!(embed_object("", "x"), Err(Error::Skeleton("`static DATA: [u8; N]`")));
    }
}
