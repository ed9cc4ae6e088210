// SPDX-License-Identifier: MIT
//! The record layout of a classic tracepoint, from the text of its tracefs
//! `events/<sys>/<event>/format` file. Pure: no I/O (the reader lives in
//! `probes::tracefs_format`).
//!
//! Kernels without BTF give BPF no types, but every tracepoint describes
//! its record in tracefs: one `field:<decl>; offset:N; size:N; signed:N;`
//! line per field. The no-BTF builds of the runq, syscall, irq and softirq
//! families read their fields at the offsets and sizes found here (set as
//! `const volatile` rodata before load), so one object serves 64- and
//! 32-bit kernels, and kernels whose common header differs (PREEMPT_RT's
//! `common_preempt_lazy_count`).

use std::fmt;

/// One field of a tracepoint record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    /// The C declaration as the kernel prints it (`pid_t prev_pid`).
    pub decl: String,
    /// Bytes from the start of the record.
    pub offset: u32,
    /// Bytes (an array's whole size).
    pub size: u32,
    pub signed: bool,
}

/// A parsed `format` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Format {
    /// `sys/event`, as errors name it.
    pub event: String,
    pub fields: Vec<Field>,
    /// The `print fmt:` line's text (empty when absent).
    pub print_fmt: String,
}

/// Why a format cannot serve a probe.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FormatError {
    /// The format file could not be read (no tracefs, no such event).
    Unreadable { event: String, why: String },
    /// A `field:` line that does not parse.
    Malformed { event: String, line: String },
    /// The record has no field of this name.
    MissingField { event: String, field: String },
    /// The field exists with a size the probe cannot read.
    UnexpectedSize { event: String, field: String, size: u32, expected: &'static [u32] },
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unreadable { event, why } => write!(f, "tracepoint {event}: format unreadable: {why}"),
            Self::Malformed { event, line } => write!(f, "tracepoint {event}: malformed format line {line:?}"),
            Self::MissingField { event, field } => {
                write!(f, "tracepoint {event}: its record has no field `{field}` (tracefs format)")
            }
            Self::UnexpectedSize { event, field, size, expected } => write!(
                f,
                "tracepoint {event}: field `{field}` is {size} bytes, expected {}",
                expected.iter().map(u32::to_string).collect::<Vec<_>>().join(" or ")
            ),
        }
    }
}

impl std::error::Error for FormatError {}

/// `key:value` of one `;`-separated part of a field line, trimmed.
fn part<'a>(parts: &[&'a str], key: &str) -> Option<&'a str> {
    parts.iter().find_map(|p| p.trim().strip_prefix(key)?.strip_prefix(':')).map(str::trim)
}

/// The field name of a declaration: the last identifier before any `[`.
/// (`char prev_comm[16]` -> prev_comm, `__data_loc char[] name` -> name.)
fn decl_name(decl: &str) -> Option<&str> {
    let base = decl.trim();
    let base = match base.rfind(' ') {
        Some(i) => &base[i + 1..],
        None => base,
    };
    let name = base.split('[').next()?.trim();
    (!name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')).then_some(name)
}

impl Format {
    /// Parse the text of `events/<event>/format`.
    pub fn parse(event: &str, text: &str) -> Result<Format, FormatError> {
        let mut fields = Vec::new();
        let mut print_fmt = String::new();
        for line in text.lines() {
            let line = line.trim();
            if let Some(p) = line.strip_prefix("print fmt:") {
                print_fmt = p.trim().to_string();
                continue;
            }
            if !line.starts_with("field:") {
                continue;
            }
            let bad = || FormatError::Malformed { event: event.into(), line: line.into() };
            let parts: Vec<&str> = line.split(';').collect();
            let decl = part(&parts, "field").ok_or_else(bad)?;
            let num = |k: &str| part(&parts, k).and_then(|v| v.parse::<u32>().ok()).ok_or_else(bad);
            let (offset, size) = (num("offset")?, num("size")?);
            // Kernels before 2.6.32 printed no `signed:`; treat as unsigned.
            let signed = part(&parts, "signed").is_some_and(|v| v == "1");
            let name = decl_name(decl).ok_or_else(bad)?;
            fields.push(Field { name: name.into(), decl: decl.into(), offset, size, signed });
        }
        if fields.is_empty() {
            return Err(FormatError::Malformed { event: event.into(), line: "(no field lines)".into() });
        }
        Ok(Format { event: event.into(), fields, print_fmt })
    }

    /// Field `name`, whose size must be one of `sizes`.
    pub fn field(&self, name: &str, sizes: &'static [u32]) -> Result<&Field, FormatError> {
        let f = self
            .fields
            .iter()
            .find(|f| f.name == name)
            .ok_or_else(|| FormatError::MissingField { event: self.event.clone(), field: name.into() })?;
        if !sizes.contains(&f.size) {
            return Err(FormatError::UnexpectedSize {
                event: self.event.clone(),
                field: name.into(),
                size: f.size,
                expected: sizes,
            });
        }
        Ok(f)
    }

    /// sched_switch only: the `prev_state` bit the kernel sets for a task
    /// preempted while runnable (TASK_REPORT_MAX, since 4.14). A task is
    /// still runnable ("R" in the print fmt) when no bit below it is set.
    /// Read from the print fmt's `__print_flags(REC->prev_state ..., { 0x80,
    /// "I" })` table: one above its highest flag. None when absent.
    pub fn sched_switch_report_max(&self) -> Option<u64> {
        let flags = self.print_fmt.split("__print_flags(").nth(1)?;
        // The table starts at the first `{` (the mask before it has its
        // own parentheses) and ends with the call's `)`.
        let table = flags[flags.find('{')?..].split(')').next()?;
        let mut max = 0u64;
        for entry in table.split('{').skip(1) {
            let hex = entry.trim().strip_prefix("0x")?;
            let hex: String = hex.chars().take_while(char::is_ascii_hexdigit).collect();
            max = max.max(u64::from_str_radix(&hex, 16).ok()?);
        }
        (max > 0 && max.is_power_of_two()).then_some(max << 1)
    }
}

/// A field of a record as the BPF side reads it (`struct latmon_tp_field`
/// in bpf/latmon.h, filled into rodata by the probe).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TpField {
    pub offset: u16,
    pub size: u8,
    pub signed: bool,
}

impl TpField {
    /// `name` of `format`, which must be one of `sizes` bytes.
    pub fn of(format: &Format, name: &str, sizes: &'static [u32]) -> Result<TpField, FormatError> {
        let f = format.field(name, sizes)?;
        let size = u8::try_from(f.size).ok();
        let offset = u16::try_from(f.offset).ok();
        match (offset, size) {
            (Some(offset), Some(size)) => Ok(TpField { offset, size, signed: f.signed }),
            _ => Err(FormatError::UnexpectedSize {
                event: format.event.clone(),
                field: name.into(),
                size: f.size,
                expected: sizes,
            }),
        }
    }
}

impl fmt::Display for TpField {
    /// `@OFFSET(SIZE)`, as the logs show a layout: `prev_state@36(4)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "@{}({})", self.offset, self.size)
    }
}

/// Sizes the BPF reader accepts for an integer field.
pub const INT_SIZES: &[u32] = &[1, 2, 4, 8];
/// `pid_t` (and `int`) fields.
pub const PID_SIZES: &[u32] = &[4];
/// `long` fields: 8 bytes on 64-bit kernels, 4 on 32-bit ones.
pub const LONG_SIZES: &[u32] = &[4, 8];
/// `char comm[TASK_COMM_LEN]` fields.
pub const COMM_SIZES: &[u32] = &[16];

#[cfg(test)]
mod tests {
    use super::*;

    /// This host's (6.18, x86_64) sched_switch format, verbatim.
    const SCHED_SWITCH_X86_64: &str = "name: sched_switch
ID: 372
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;
\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;
\tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;
\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;
\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;
\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;
\tfield:int next_prio;\toffset:60;\tsize:4;\tsigned:1;

print fmt: \"prev_comm=%s prev_pid=%d prev_prio=%d prev_state=%s%s ==> next_comm=%s next_pid=%d next_prio=%d\", REC->prev_comm, REC->prev_pid, REC->prev_prio, (REC->prev_state & ((((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) - 1)) ? __print_flags(REC->prev_state & ((((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) - 1), \"|\", { 0x00000001, \"S\" }, { 0x00000002, \"D\" }, { 0x00000004, \"T\" }, { 0x00000008, \"t\" }, { 0x00000010, \"X\" }, { 0x00000020, \"Z\" }, { 0x00000040, \"P\" }, { 0x00000080, \"I\" }) : \"R\", REC->prev_state & (((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) ? \"+\" : \"\", REC->next_comm, REC->next_pid, REC->next_prio
";

    /// Synthetic: a 32-bit kernel with PREEMPT_RT's extra common field -
    /// `long` is 4 bytes and every offset moves (the layout a hand-written
    /// struct gets wrong: armv7 boards run such kernels).
    const SCHED_SWITCH_ARM32_RT: &str = "name: sched_switch
ID: 280
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;
\tfield:unsigned char common_preempt_lazy_count;\toffset:8;\tsize:1;\tsigned:0;

\tfield:char prev_comm[16];\toffset:12;\tsize:16;\tsigned:0;
\tfield:pid_t prev_pid;\toffset:28;\tsize:4;\tsigned:1;
\tfield:int prev_prio;\toffset:32;\tsize:4;\tsigned:1;
\tfield:long prev_state;\toffset:36;\tsize:4;\tsigned:1;
\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;
\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;
\tfield:int next_prio;\toffset:60;\tsize:4;\tsigned:1;

print fmt: \"...\", (REC->prev_state & 0xff) ? __print_flags(REC->prev_state & 0xff, \"|\", { 0x01, \"S\" }, { 0x02, \"D\" }) : \"R\"
";

    /// Debian's armmp kernel (6.1.0-50-armmp, 32-bit, no BTF), with the
    /// offsets latmon read on the virtual board (tests/board): a 4-byte
    /// `long prev_state`, so next_comm and next_pid sit 4 bytes lower than
    /// on x86_64.
    const SCHED_SWITCH_ARMMP: &str = "name: sched_switch
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;
\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;
\tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;
\tfield:long prev_state;\toffset:32;\tsize:4;\tsigned:1;
\tfield:char next_comm[16];\toffset:36;\tsize:16;\tsigned:0;
\tfield:pid_t next_pid;\toffset:52;\tsize:4;\tsigned:1;
\tfield:int next_prio;\toffset:56;\tsize:4;\tsigned:1;
";

    const SYS_ENTER_X86_64: &str = "name: sys_enter
ID: 443
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:long id;\toffset:8;\tsize:8;\tsigned:1;
\tfield:unsigned long args[6];\toffset:16;\tsize:48;\tsigned:0;

print fmt: \"NR %ld (%lx, %lx, %lx, %lx, %lx, %lx)\", REC->id, REC->args[0], REC->args[1], REC->args[2], REC->args[3], REC->args[4], REC->args[5]
";

    const IRQ_HANDLER_ENTRY: &str = "name: irq_handler_entry
ID: 225
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:int irq;\toffset:8;\tsize:4;\tsigned:1;
\tfield:__data_loc char[] name;\toffset:12;\tsize:4;\tsigned:0;

print fmt: \"irq=%d name=%s\", REC->irq, __get_str(name)
";

    #[test]
    fn sched_switch_fields_on_this_host() {
        let f = Format::parse("sched/sched_switch", SCHED_SWITCH_X86_64).unwrap();
        assert_eq!(f.fields.len(), 11);
        let pid = f.field("prev_pid", PID_SIZES).unwrap();
        assert_eq!((pid.offset, pid.size, pid.signed), (24, 4, true));
        assert_eq!(pid.decl, "pid_t prev_pid");
        let state = f.field("prev_state", LONG_SIZES).unwrap();
        assert_eq!((state.offset, state.size, state.signed), (32, 8, true));
        let comm = f.field("prev_comm", COMM_SIZES).unwrap();
        assert_eq!((comm.offset, comm.size, comm.signed), (8, 16, false));
        assert_eq!(f.field("next_pid", PID_SIZES).unwrap().offset, 56);
        assert_eq!(f.field("common_type", INT_SIZES).unwrap().size, 2);
        assert_eq!(TpField::of(&f, "next_pid", PID_SIZES), Ok(TpField { offset: 56, size: 4, signed: true }));
        assert_eq!(TpField::of(&f, "prev_state", LONG_SIZES).unwrap().to_string(), "@32(8)");
        // TASK_REPORT_MAX: 0x80 ("I") is the highest flag.
        assert_eq!(f.sched_switch_report_max(), Some(0x100));
    }

    #[test]
    fn a_32_bit_rt_layout_moves_every_offset() {
        let f = Format::parse("sched/sched_switch", SCHED_SWITCH_ARM32_RT).unwrap();
        assert_eq!(TpField::of(&f, "prev_pid", PID_SIZES), Ok(TpField { offset: 28, size: 4, signed: true }));
        assert_eq!(TpField::of(&f, "prev_state", LONG_SIZES), Ok(TpField { offset: 36, size: 4, signed: true }));
        assert_eq!(f.field("common_preempt_lazy_count", INT_SIZES).unwrap().offset, 8);
        assert_eq!(f.sched_switch_report_max(), Some(0x04));
    }

    #[test]
    fn the_armmp_board_layout() {
        let f = Format::parse("sched/sched_switch", SCHED_SWITCH_ARMMP).unwrap();
        let got: Vec<String> = ["prev_pid", "prev_state", "next_pid"]
            .iter()
            .map(|n| format!("{n}{}", TpField::of(&f, n, LONG_SIZES).unwrap()))
            .collect();
        // What the board logged: "prev_pid@24(4) ... prev_state@32(4) next_pid@52(4)".
        assert_eq!(got, ["prev_pid@24(4)", "prev_state@32(4)", "next_pid@52(4)"]);
        assert_eq!(f.sched_switch_report_max(), None, "no print fmt in this excerpt: the default applies");
    }

    #[test]
    fn arrays_and_data_loc_fields_are_named_without_their_brackets() {
        let f = Format::parse("raw_syscalls/sys_enter", SYS_ENTER_X86_64).unwrap();
        let args = f.field("args", &[48]).unwrap();
        assert_eq!((args.offset, args.signed), (16, false));
        assert_eq!(TpField::of(&f, "id", LONG_SIZES), Ok(TpField { offset: 8, size: 8, signed: true }));
        assert!(f.print_fmt.starts_with("\"NR %ld"));
        assert_eq!(f.sched_switch_report_max(), None, "no prev_state flags table here");
        let irq = Format::parse("irq/irq_handler_entry", IRQ_HANDLER_ENTRY).unwrap();
        assert_eq!(irq.field("name", &[4]).unwrap().decl, "__data_loc char[] name");
        assert_eq!(TpField::of(&irq, "irq", PID_SIZES), Ok(TpField { offset: 8, size: 4, signed: true }));
    }

    #[test]
    fn errors_name_the_event_and_field() {
        let f = Format::parse("raw_syscalls/sys_enter", SYS_ENTER_X86_64).unwrap();
        let e = f.field("nr", LONG_SIZES).unwrap_err();
        assert_eq!(e, FormatError::MissingField { event: "raw_syscalls/sys_enter".into(), field: "nr".into() });
        assert_eq!(e.to_string(), "tracepoint raw_syscalls/sys_enter: its record has no field `nr` (tracefs format)");
        let e = TpField::of(&f, "id", PID_SIZES).unwrap_err();
        assert_eq!(e.to_string(), "tracepoint raw_syscalls/sys_enter: field `id` is 8 bytes, expected 4");
        let sw = Format::parse("sched/sched_switch", SCHED_SWITCH_X86_64).unwrap();
        let e = sw.field("prev_state", PID_SIZES);
        assert!(matches!(e, Err(FormatError::UnexpectedSize { size: 8, .. })), "{e:?}");
    }

    #[test]
    fn garbage_is_malformed_not_a_panic() {
        assert!(matches!(Format::parse("x/y", ""), Err(FormatError::Malformed { .. })));
        assert!(matches!(Format::parse("x/y", "name: y\nID: 1\n"), Err(FormatError::Malformed { .. })));
        let e = Format::parse("x/y", "\tfield:int a;\toffset:zz;\tsize:4;\tsigned:1;\n").unwrap_err();
        assert!(matches!(&e, FormatError::Malformed { event, .. } if event == "x/y"), "{e:?}");
        assert!(Format::parse("x/y", "\tfield:int a;\tsize:4;\n").is_err(), "offset missing");
        assert!(Format::parse("x/y", "\tfield:;\toffset:0;\tsize:4;\n").is_err(), "no name");
        // Without `signed:` (very old kernels): unsigned.
        let f = Format::parse("x/y", "\tfield:int a;\toffset:8;\tsize:4;\n").unwrap();
        assert!(!f.fields[0].signed);
        // Offsets beyond what the BPF side holds are refused, not truncated.
        let f = Format::parse("x/y", "\tfield:int a;\toffset:70000;\tsize:4;\tsigned:1;\n").unwrap();
        assert!(TpField::of(&f, "a", PID_SIZES).is_err());
        // A flags table that is not powers of two gives no guess.
        let f =
            Format { event: "x".into(), fields: vec![], print_fmt: "__print_flags(x, \"|\", { 0x03, \"S\" })".into() };
        assert_eq!(f.sched_switch_report_max(), None);
    }
}
