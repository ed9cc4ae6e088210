// SPDX-License-Identifier: MIT
//! The board configs and what the Yocto layer (yocto/meta-latmon) takes
//! from them; the layer's generated crate list. The Yocto tool checks
//! (oelint-adv, kas, systemd-analyze, kernel options) are in
//! tests/yocto/check.sh.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::latmon;
use latmon::config::{Config, ProbeKind};
use latmon::sinks::spec::{Endpoint, LinkSpec};

const TOP: &str = env!("CARGO_MANIFEST_DIR");

/// Targets scripts/build-static.sh (and .cargo/config.toml) build (aarch64: musl).
const TARGETS: &[&str] = &["aarch64-unknown-linux-musl", "armv7-unknown-linux-gnueabihf", "x86_64-unknown-linux-gnu"];

/// Baud rates a Linux serial port can be set to with termios' Bxxx names.
const BAUDS: &[u32] = &[
    9600, 19200, 38400, 57600, 115200, 230400, 460800, 500000, 576000, 921600, 1000000, 1152000, 1500000, 2000000,
    2500000, 3000000, 3500000, 4000000,
];

fn board_configs() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(Path::new(TOP).join("board-configs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    v.sort();
    assert!(v.len() >= 7, "board-configs/ lost files: {v:?}");
    v
}

fn stem(p: &Path) -> String {
    p.file_stem().unwrap().to_string_lossy().into_owned()
}

fn parse(p: &Path) -> Config {
    Config::from_toml(&std::fs::read_to_string(p).unwrap()).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Every output must be a valid SINK word; the serial ones as
/// (device under /dev, baud, whether the word names the baud).
fn serial_outputs(name: &str, c: &Config) -> Vec<(String, u32, bool)> {
    c.outputs
        .iter()
        .filter_map(|o| match LinkSpec::parse(o).unwrap_or_else(|e| panic!("{name}: output {o:?}: {e}")).endpoint {
            Endpoint::Serial(s) => {
                let dev = s.path.strip_prefix("/dev/").unwrap_or_else(|| panic!("{name}: {o}: not under /dev"));
                Some((dev.to_string(), s.baud, o.split(',').next().unwrap().contains('@')))
            }
            _ => None,
        })
        .collect()
}

/// Every config names its board (= file name) and a target triple we build,
/// and its outputs are valid SINK words (`latmon check` does not parse them);
/// the real boards (not the qemu-* virtual ones) also their link UART with
/// its baud rate, the agent's housekeeping CPUs, and alert thresholds.
#[test]
fn board_configs_name_target_link_uart_and_housekeeping_cpus() {
    for p in board_configs() {
        let name = stem(&p);
        let c = parse(&p);
        assert_eq!(c.board.as_deref(), Some(name.as_str()), "{name}: board must match the file name");
        let target = c.target.as_deref().unwrap_or_else(|| panic!("{name}: no target"));
        assert!(TARGETS.contains(&target), "{name}: target {target} is not one of {TARGETS:?}");
        let serial = serial_outputs(&name, &c);
        if name.starts_with("qemu-") {
            continue;
        }
        assert_eq!(serial.len(), 1, "{name}: one serial link output expected, have {:?}", c.outputs);
        let (dev, baud, named) = &serial[0];
        assert!(named, "{name}: the link {dev} must name its baud (serial:/dev/{dev}@BAUD)");
        assert!(BAUDS.contains(baud), "{name}: baud {baud} is not a termios rate");
        let cpus = Some(&c.housekeeping_cpus)
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| panic!("{name}: no housekeeping_cpus"));
        assert!(!cpus.is_empty());
        assert!(c.probes.iter().any(|s| s.threshold.is_some()), "{name}: no probe has an alert threshold");
    }
}

/// `latmon check --config` on every board config, on this machine. What it
/// can prove here is that the config is valid: exit 2 (invalid config) must
/// never happen. The probes are then really loaded; this x86_64 host has no
/// kprobes and refuses fentry, so a kfunc probe cannot attach here (exit 1),
/// and a board's kernel function may not exist on this kernel at all. Any
/// other family (runq today) must attach, as it would on the board. A
/// `btf_path` names a file of the board's image (a kernel without BTF); it
/// does not exist here, so that config is checked with this kernel's own BTF
/// file in its place.
#[test]
fn every_board_config_passes_latmon_check_here() {
    let root = nix::unistd::geteuid().is_root();
    let tmp = std::env::temp_dir().join(format!("latmon-yocto-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    for p in board_configs() {
        let name = stem(&p);
        let c = parse(&p);
        let mut path = p.clone();
        if let Some(btf) = c.btf_path.as_deref().filter(|b| !Path::new(b).exists()) {
            let host_btf = "/sys/kernel/btf/vmlinux";
            assert!(Path::new(host_btf).exists(), "this test needs {host_btf}");
            let text = std::fs::read_to_string(&p).unwrap().replace(&format!("\"{btf}\""), &format!("\"{host_btf}\""));
            path = tmp.join(format!("{name}.toml"));
            std::fs::write(&path, text).unwrap();
        }
        let out = latmon().args(["check", "--json", "--config"]).arg(&path).output().unwrap();
        let code = out.status.code();
        let report = String::from_utf8_lossy(&out.stdout);
        let ctx = format!("{name}: exit {code:?}\n{report}\n{}", String::from_utf8_lossy(&out.stderr));
        assert_ne!(code, Some(2), "{ctx}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{ctx}\n{e}"));
        assert_eq!(v["config_ok"], true, "{ctx}");
        if !root {
            // Without privileges check stops after validating the config.
            continue;
        }
        let plans = v["probes"].as_array().unwrap();
        assert_eq!(plans.len(), c.probes.len(), "{ctx}");
        for (spec, plan) in c.probes.iter().zip(plans) {
            assert_eq!(plan["name"].as_str(), Some(spec.name.as_str()), "{ctx}");
            if plan["ok"] != true {
                // Acceptable here only: kernel functions this kprobe-less,
                // fentry-refusing host cannot attach, and functions of a
                // binary that exists only in the board's image.
                let board_only = matches!(&spec.kind, ProbeKind::Ufunc { binary, .. } if !Path::new(binary).exists());
                assert!(
                    matches!(spec.kind, ProbeKind::Kfunc(_)) || board_only,
                    "{name}: probe {} failed here: {ctx}",
                    spec.name
                );
            }
        }
        let all_ok = plans.iter().all(|p| p["ok"] == true);
        assert_eq!(code, Some(if all_ok { 0 } else { 1 }), "{ctx}");
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

/// What the recipe's do_install derives from a board config for the service
/// files (yocto/meta-latmon/recipes-support/latmon/files/latmon-service-files.sh,
/// plain sed) agrees with latmon's own parse of that config, for every config.
#[test]
fn service_files_take_link_uart_and_cpus_from_the_config() {
    let files = Path::new(TOP).join("yocto/meta-latmon/recipes-support/latmon/files");
    let out_root = std::env::temp_dir().join(format!("latmon-svc-{}", std::process::id()));
    for p in board_configs() {
        let name = stem(&p);
        let c = parse(&p);
        let out_dir = out_root.join(&name);
        let out = Command::new("sh")
            .arg(files.join("latmon-service-files.sh"))
            .arg(&p)
            .arg(&files)
            .arg(&out_dir)
            .args(["/usr/bin", "/etc", "CAP_BPF CAP_PERFMON"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let facts: BTreeMap<String, String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
            .collect();
        let want_tty = serial_outputs(&name, &c).into_iter().next().map(|(dev, _, _)| dev).unwrap_or_default();
        let want_cpus = c.housekeeping_cpus.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        assert_eq!(facts["LINK_TTY"], want_tty, "{name}");
        assert_eq!(facts["HOUSEKEEPING_CPUS"], want_cpus, "{name}");
        let unit = std::fs::read_to_string(out_dir.join("latmon.service")).unwrap();
        assert!(!unit.contains('@'), "{name}: placeholder left in the unit:\n{unit}");
        if want_tty.is_empty() {
            assert!(!unit.lines().any(|l| l.starts_with("Wants=") || l.starts_with("After=")), "{name}");
        } else {
            let dev_unit = format!("dev-{}.device", want_tty.replace('-', "\\x2d").replace('/', "-"));
            assert!(unit.contains(&format!("\nWants={dev_unit}\nAfter={dev_unit}\n")), "{name}:\n{unit}");
        }
        if want_cpus.is_empty() {
            assert!(!unit.lines().any(|l| l.starts_with("CPUAffinity=")), "{name}");
        } else {
            assert!(unit.contains(&format!("\nCPUAffinity={}\n", want_cpus.replace(',', " "))), "{name}:\n{unit}");
        }
        let init = std::fs::read_to_string(out_dir.join("latmon.init")).unwrap();
        assert!(init.contains(&format!("\nLINK_TTY=\"{want_tty}\"\n")), "{name}");
        assert!(init.contains(&format!("\nHOUSEKEEPING_CPUS=\"{want_cpus}\"\n")), "{name}");
        assert!(!init.contains("@BINDIR@") && !init.contains("@SYSCONFDIR@"), "{name}");
        let syntax = Command::new("sh").arg("-n").arg(out_dir.join("latmon.init")).status().unwrap();
        assert!(syntax.success(), "{name}: latmon.init is not valid sh");
    }
    let _ = std::fs::remove_dir_all(&out_root);
}

/// latmon-crates.inc lists exactly the crates and checksums of every Cargo.lock,
/// as `bitbake -c update_crates latmon` would write it. When Cargo.lock
/// changes, run scripts/gen-latmon-crates-inc.py.
#[test]
fn latmon_crates_inc_matches_cargo_lock() {
    let out = Command::new("python3")
        .arg(Path::new(TOP).join("scripts/gen-latmon-crates-inc.py"))
        .arg("--check")
        .output()
        .expect("python3");
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    // And independently of the script: every crates.io package of every
    // Cargo.lock git tracks (oe-core's class reads all of the fetched
    // tree's: the root's and the supervisor firmware's), with its
    // checksum, is in the .inc, and nothing else.
    let tracked =
        Command::new("git").args(["-C", TOP, "ls-files", "--", "Cargo.lock", "*/Cargo.lock"]).output().expect("git");
    let locks: Vec<String> = String::from_utf8_lossy(&tracked.stdout).lines().map(str::to_string).collect();
    assert!(locks.iter().any(|l| l == "Cargo.lock"), "git ls-files found no Cargo.lock: {locks:?}");
    let lock: String =
        locks.iter().map(|l| std::fs::read_to_string(Path::new(TOP).join(l)).unwrap()).collect::<Vec<_>>().join("\n");
    let inc =
        std::fs::read_to_string(Path::new(TOP).join("yocto/meta-latmon/recipes-support/latmon/latmon-crates.inc"))
            .unwrap();
    let mut want = Vec::new();
    for pkg in lock.split("[[package]]").skip(1) {
        let field = |k: &str| {
            pkg.lines().find_map(|l| l.strip_prefix(&format!("{k} = \"")).map(|v| v.trim_end_matches('"').to_string()))
        };
        if !field("source").is_some_and(|s| s.contains("crates.io")) {
            continue;
        }
        let (name, version, sum) = (field("name").unwrap(), field("version").unwrap(), field("checksum").unwrap());
        want.push(format!("crate://crates.io/{name}/{version}"));
        want.push(format!("SRC_URI[{name}-{version}.sha256sum] = \"{sum}\""));
    }
    let have: Vec<String> = inc
        .lines()
        .map(|l| l.trim().trim_end_matches('\\').trim().to_string())
        .filter(|l| l.starts_with("crate://") || l.starts_with("SRC_URI["))
        .collect();
    let (mut want_sorted, mut have_sorted) = (want.clone(), have.clone());
    want_sorted.sort();
    have_sorted.sort();
    assert_eq!(have_sorted, want_sorted);
}
