// SPDX-License-Identifier: MIT
//! What latmon reads from /proc and how it parses it (a leaf: it imports
//! nothing of this crate). The parsers are pure; the readers return
//! nothing rather than an error, as the names they give are labels only.

use std::collections::HashMap;

/// IRQ number -> action names from /proc/interrupts; empty if unreadable.
pub fn interrupt_names() -> HashMap<u32, String> {
    std::fs::read_to_string("/proc/interrupts").map(|t| parse_interrupts(&t)).unwrap_or_default()
}

/// IRQ number -> action names, from the text of /proc/interrupts. Per line:
/// `N:`, one count per CPU, the chip, the hardware IRQ and trigger
/// (`5-edge` on x86, `27 Level` on a GIC), then the action names.
pub fn parse_interrupts(text: &str) -> HashMap<u32, String> {
    let mut lines = text.lines();
    let ncpus = lines.next().map_or(0, |h| h.split_whitespace().count());
    let mut names = HashMap::new();
    for line in lines {
        let Some((irq, rest)) = line.split_once(':') else { continue };
        let Ok(irq) = irq.trim().parse::<u32>() else { continue };
        // Past the per-CPU counts and the chip, the hardware IRQ: `5-edge`,
        // or `27` followed by `Level`/`Edge`.
        let mut fields = rest.split_whitespace().skip(ncpus).skip(1).peekable();
        if let Some(hw) = fields.peek() {
            let digits = hw.split('-').next().unwrap_or("");
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                let joined = hw.contains('-');
                fields.next();
                if !joined && fields.peek().is_some_and(|t| matches!(*t, "Level" | "Edge")) {
                    fields.next();
                }
            }
        }
        let name = fields.collect::<Vec<_>>().join(" ");
        if !name.is_empty() {
            names.insert(irq, name);
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interrupt_names_on_x86_and_gic_layouts() {
        let x86 = "           CPU0       CPU1       \n \
 24:          1          0  IO-APIC   5-edge      ACPI:Ged\n \
 36:          0     110320 PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0\n \
 40:          3          0 PCI-MSIX-0000:00:04.0   0-edge      eth0, eth0-tx\n\
NMI:          0          0   Non-maskable interrupts\n\
ERR:          0\n";
        let n = parse_interrupts(x86);
        assert_eq!(n.get(&24).map(String::as_str), Some("ACPI:Ged"));
        assert_eq!(n.get(&36).map(String::as_str), Some("virtio1-req.0"));
        assert_eq!(n.get(&40).map(String::as_str), Some("eth0, eth0-tx"));
        assert_eq!(n.len(), 3, "named rows (NMI, ERR) are not IRQ numbers");

        let gic = "           CPU0       CPU1       CPU2       CPU3       \n \
 11:     123456     234567     345678     456789     GICv3  27 Level     arch_timer\n \
 47:          0          0          0          0     GICv3  79 Edge      virtio0\n \
 70:          1          0          0          0  ITS-MSI 16384 Edge      nvme0q0\n";
        let n = parse_interrupts(gic);
        assert_eq!(n.get(&11).map(String::as_str), Some("arch_timer"));
        assert_eq!(n.get(&47).map(String::as_str), Some("virtio0"));
        assert_eq!(n.get(&70).map(String::as_str), Some("nvme0q0"));
    }
}
