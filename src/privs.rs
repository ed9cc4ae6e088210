// SPDX-License-Identifier: MIT
//! Dropping privileges once every probe is attached (config `user`,
//! `group`).
//!
//! Names are resolved by reading /etc/passwd and /etc/group (the product
//! binary is static glibc: no NSS). Two steps:
//! 1. [`prepare`], early, before any thread exists (threads inherit it):
//!    PR_SET_NO_NEW_PRIVS, the capability bounding set emptied, the
//!    inheritable and ambient sets cleared. The effective and permitted
//!    sets are untouched: loading BPF still works.
//! 2. [`drop_to`], after attach: supplementary groups, gid, uid (glibc
//!    applies set*id to every thread, and a uid change from 0 clears every
//!    thread's permitted and effective sets), then capset to empty on this
//!    thread, and a check of /proc/self/task/*/status.
//!
//! What keeps working unprivileged (verified live on 6.18, tests/live/agent.rs):
//! attached links, ring/perf buffer reads (mmap + epoll), map lookups and
//! `bpf_prog_get_info_by_fd` on fds already open. On kernels before 6.5
//! with `kernel.unprivileged_bpf_disabled` set, every bpf() command needs
//! CAP_BPF (CAP_SYS_ADMIN before 5.8), map lookups included; there latmon
//! keeps that one capability (see [`needs_bpf_cap`]) and says so.

use std::io;

/// A resolved user and group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub user: String,
    pub uid: u32,
    pub group: String,
    pub gid: u32,
    /// Supplementary groups: every /etc/group entry listing the user, plus
    /// the primary group.
    pub groups: Vec<u32>,
}

/// `(uid, primary gid)` of `user` (a name or a number) in passwd text.
pub fn passwd_lookup(passwd: &str, user: &str) -> Option<(String, u32, u32)> {
    let by_number = user.parse::<u32>().ok();
    passwd.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        if f.len() < 4 {
            return None;
        }
        let (uid, gid) = (f[2].parse::<u32>().ok()?, f[3].parse::<u32>().ok()?);
        (f[0] == user || by_number == Some(uid)).then(|| (f[0].to_string(), uid, gid))
    })
}

/// `(name, gid)` of `group` (a name or a number) in group text.
pub fn group_lookup(group_text: &str, group: &str) -> Option<(String, u32)> {
    let by_number = group.parse::<u32>().ok();
    group_text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        if f.len() < 3 {
            return None;
        }
        let gid = f[2].parse::<u32>().ok()?;
        (f[0] == group || by_number == Some(gid)).then(|| (f[0].to_string(), gid))
    })
}

/// Groups whose member list (4th field) names `user`.
pub fn member_of(group_text: &str, user: &str) -> Vec<u32> {
    group_text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            if f.len() < 4 || !f[3].split(',').any(|m| m.trim() == user) {
                return None;
            }
            f[2].parse::<u32>().ok()
        })
        .collect()
}

/// Why resolving or dropping privileges failed.
#[derive(Debug)]
pub enum PrivError {
    /// The user or group is not in /etc/passwd or /etc/group.
    Unknown { what: &'static str, name: String, file: &'static str },
    /// A file or system call failed: what was being done, and its error.
    Sys { what: String, err: io::Error },
    /// After the drop a thread still held privileges (each as
    /// `task TID: field value`).
    NotDropped(Vec<String>),
}

impl std::fmt::Display for PrivError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PrivError::Unknown { what, name, file } => write!(f, "{what} {name:?} is not in {file}"),
            PrivError::Sys { what, err } => write!(f, "{what}: {err}"),
            PrivError::NotDropped(bad) => write!(f, "privileges not fully dropped: {}", bad.join("; ")),
        }
    }
}

/// The system error is in the message (not a `source`: a chain would
/// print it twice).
impl std::error::Error for PrivError {}

/// `what` failed with `err`.
fn sys(what: impl Into<String>) -> impl FnOnce(io::Error) -> PrivError {
    let what = what.into();
    move |err| PrivError::Sys { what, err }
}

/// Resolve from passwd and group texts (pure; tests).
pub fn resolve_in(passwd: &str, group_text: &str, user: &str, group: Option<&str>) -> Result<Identity, PrivError> {
    let (name, uid, primary) = passwd_lookup(passwd, user).ok_or_else(|| PrivError::Unknown {
        what: "user",
        name: user.to_string(),
        file: "/etc/passwd",
    })?;
    let (gname, gid) = match group {
        Some(g) => group_lookup(group_text, g).ok_or_else(|| PrivError::Unknown {
            what: "group",
            name: g.to_string(),
            file: "/etc/group",
        })?,
        None => group_lookup(group_text, &primary.to_string()).unwrap_or_else(|| (primary.to_string(), primary)),
    };
    let mut groups = member_of(group_text, &name);
    groups.push(gid);
    groups.sort_unstable();
    groups.dedup();
    Ok(Identity { user: name, uid, group: gname, gid, groups })
}

/// Resolve `user`/`group` from /etc/passwd and /etc/group.
pub fn resolve(user: &str, group: Option<&str>) -> Result<Identity, PrivError> {
    let passwd = std::fs::read_to_string("/etc/passwd").map_err(sys("/etc/passwd"))?;
    let groups = std::fs::read_to_string("/etc/group").map_err(sys("/etc/group"))?;
    resolve_in(&passwd, &groups, user, group)
}

const CAP_SYS_ADMIN: u32 = 21;
const CAP_BPF: u32 = 39;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

fn capget() -> io::Result<[CapData; 2]> {
    let mut h = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    let mut d = [CapData::default(); 2];
    // SAFETY: header and a two-element data array, as version 3 requires.
    let rc = unsafe { libc::syscall(libc::SYS_capget, &mut h as *mut CapHeader, d.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(d)
}

/// Set this thread's effective and permitted sets to `keep` (a 64-bit
/// mask), inheritable to nothing.
fn capset(keep: u64) -> io::Result<()> {
    let mut h = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    let lo = keep as u32;
    let hi = (keep >> 32) as u32;
    let d = [
        CapData { effective: lo, permitted: lo, inheritable: 0 },
        CapData { effective: hi, permitted: hi, inheritable: 0 },
    ];
    // SAFETY: as capget.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &mut h as *mut CapHeader, d.as_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn prctl(op: libc::c_int, a: libc::c_ulong) -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(op, a, 0 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn cap_last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(63)
        .min(63)
}

/// Step 1 (before any thread exists): no new privileges, an empty
/// bounding set, no inheritable or ambient capabilities. The effective and
/// permitted sets stay: BPF loading is not affected.
pub fn prepare() -> Result<(), PrivError> {
    prctl(libc::PR_SET_NO_NEW_PRIVS, 1).map_err(sys("PR_SET_NO_NEW_PRIVS"))?;
    // Ambient capabilities (not inherited past a uid change anyway).
    let _ = prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong);
    for cap in 0..=cap_last_cap() {
        match prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap)) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => break, // beyond this kernel's last cap
            Err(e) => return Err(sys(format!("dropping capability {cap} from the bounding set"))(e)),
        }
    }
    let cur = capget().map_err(sys("capget"))?;
    let keep = u64::from(cur[0].permitted) | (u64::from(cur[1].permitted) << 32);
    // Effective = permitted, inheritable = none.
    capset(keep).map_err(sys("capset (clear inheritable)"))
}

/// The capability latmon must keep to use bpf() on its own fds, if any: on
/// kernels before 6.5 with `kernel.unprivileged_bpf_disabled` non-zero,
/// every bpf() command (map lookups too) needs CAP_BPF (CAP_SYS_ADMIN
/// before 5.8). `LATMON_KEEP_BPF_CAP=1` forces it (tests, odd kernels).
pub fn needs_bpf_cap(release: &str, unprivileged_bpf_disabled: &str) -> Option<u32> {
    let mut v = release.split(|c: char| !c.is_ascii_digit()).filter_map(|x| x.parse::<u32>().ok());
    let (major, minor) = (v.next().unwrap_or(0), v.next().unwrap_or(0));
    let forced = std::env::var("LATMON_KEEP_BPF_CAP").is_ok_and(|v| v == "1");
    let old = (major, minor) < (6, 5) && unprivileged_bpf_disabled.trim() != "0";
    if !(old || forced) {
        return None;
    }
    Some(if (major, minor) < (5, 8) { CAP_SYS_ADMIN } else { CAP_BPF })
}

/// What the process holds after the drop (from /proc/self/status).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Held {
    pub uid: String,
    pub gid: String,
    pub cap_eff: u64,
    pub cap_prm: u64,
    pub cap_inh: u64,
    pub cap_bnd: u64,
    pub cap_amb: u64,
    pub no_new_privs: bool,
}

/// Parse a /proc/PID/status text.
pub fn held_in(status: &str) -> Held {
    let field = |k: &str| status.lines().find_map(|l| l.strip_prefix(k)).map(str::trim).unwrap_or("");
    let hex = |k: &str| u64::from_str_radix(field(k), 16).unwrap_or(u64::MAX);
    Held {
        uid: field("Uid:").to_string(),
        gid: field("Gid:").to_string(),
        cap_eff: hex("CapEff:"),
        cap_prm: hex("CapPrm:"),
        cap_inh: hex("CapInh:"),
        cap_bnd: hex("CapBnd:"),
        cap_amb: hex("CapAmb:"),
        no_new_privs: field("NoNewPrivs:") == "1",
    }
}

/// Step 2: become `id`, keeping no capability (or only `keep_cap`).
/// Verifies every thread of the process afterwards.
pub fn drop_to(id: &Identity, keep_cap: Option<u32>) -> Result<Held, PrivError> {
    let gids: Vec<libc::gid_t> = id.groups.clone();
    // SAFETY: a valid array of gids.
    if unsafe { libc::setgroups(gids.len(), gids.as_ptr()) } != 0 {
        return Err(sys("setgroups")(io::Error::last_os_error()));
    }
    if keep_cap.is_some() {
        prctl(libc::PR_SET_KEEPCAPS, 1).map_err(sys("PR_SET_KEEPCAPS"))?;
    }
    // glibc runs set*id on every thread of the process.
    // SAFETY: plain syscalls wrappers.
    if unsafe { libc::setresgid(id.gid, id.gid, id.gid) } != 0 {
        return Err(sys(format!("setresgid({})", id.gid))(io::Error::last_os_error()));
    }
    // SAFETY: as above.
    if unsafe { libc::setresuid(id.uid, id.uid, id.uid) } != 0 {
        return Err(sys(format!("setresuid({})", id.uid))(io::Error::last_os_error()));
    }
    let keep = keep_cap.map_or(0, |c| 1u64 << c);
    capset(keep).map_err(sys("capset"))?;
    if keep_cap.is_some() {
        let _ = prctl(libc::PR_SET_KEEPCAPS, 0);
    }
    prctl(libc::PR_SET_NO_NEW_PRIVS, 1).map_err(sys("PR_SET_NO_NEW_PRIVS"))?;
    // Verify every thread: the main thread's view and each task's.
    let me = held_in(&std::fs::read_to_string("/proc/self/status").unwrap_or_default());
    let want_uid = format!("{0}\t{0}\t{0}\t{0}", id.uid);
    let mut bad = Vec::new();
    for t in std::fs::read_dir("/proc/self/task").map_err(sys("/proc/self/task"))?.map_while(Result::ok) {
        let h = held_in(&std::fs::read_to_string(t.path().join("status")).unwrap_or_default());
        if h.uid != want_uid || h.cap_eff & !keep != 0 || h.cap_prm & !keep != 0 || h.cap_amb != 0 {
            bad.push(format!(
                "thread {}: uid {} CapEff {:x} CapPrm {:x}",
                t.file_name().to_string_lossy(),
                h.uid,
                h.cap_eff,
                h.cap_prm
            ));
        }
    }
    // setuid(0) must fail now.
    // SAFETY: plain syscall.
    if keep_cap.is_none() && unsafe { libc::setuid(0) } == 0 {
        bad.push("setuid(0) still succeeds".into());
    }
    if !bad.is_empty() {
        return Err(PrivError::NotDropped(bad));
    }
    Ok(me)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\n# comment\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\nlatmon:x:990:985::/var/lib/latmon:/usr/sbin/nologin\nbroken:x\n";
    const GROUP: &str =
        "root:x:0:\ndialout:x:20:latmon,ops\nnogroup:x:65534:\nlatmon:x:985:\ntracing:x:7:ops, latmon\n";

    #[test]
    fn users_and_groups_from_files() {
        let id = resolve_in(PASSWD, GROUP, "latmon", None).unwrap();
        assert_eq!((id.uid, id.gid, id.group.as_str()), (990, 985, "latmon"));
        assert_eq!(id.groups, vec![7, 20, 985], "member groups plus the primary");
        let id = resolve_in(PASSWD, GROUP, "nobody", Some("nogroup")).unwrap();
        assert_eq!((id.uid, id.gid, id.groups.clone()), (65534, 65534, vec![65534]));
        let id = resolve_in(PASSWD, GROUP, "65534", Some("20")).unwrap();
        assert_eq!((id.user.as_str(), id.group.as_str(), id.gid), ("nobody", "dialout", 20));
        assert!(resolve_in(PASSWD, GROUP, "ghost", None).unwrap_err().to_string().contains("not in /etc/passwd"));
        assert!(resolve_in(PASSWD, GROUP, "latmon", Some("ghosts"))
            .unwrap_err()
            .to_string()
            .contains("not in /etc/group"));
        assert!(passwd_lookup(PASSWD, "broken").is_none());
    }

    #[test]
    fn which_kernels_need_cap_bpf_kept() {
        assert_eq!(needs_bpf_cap("6.18.0-1-amd64", "2"), None);
        assert_eq!(needs_bpf_cap("6.5.0", "1"), None);
        assert_eq!(needs_bpf_cap("6.1.0-rt-arm64", "2"), Some(CAP_BPF));
        assert_eq!(needs_bpf_cap("6.1.0", "0"), None);
        assert_eq!(needs_bpf_cap("5.4.0", "1"), Some(CAP_SYS_ADMIN));
    }

    #[test]
    fn status_parsing() {
        let h = held_in("Uid:\t65534\t65534\t65534\t65534\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000008000000000\nCapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\n");
        assert_eq!(h.cap_eff, 1 << 39);
        assert!(h.no_new_privs && h.cap_bnd == 0 && h.uid.starts_with("65534"));
    }
}
