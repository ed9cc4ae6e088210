#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks of the Yocto layer that need no bitbake (run by tests/yocto/check.sh):

  checks.py kas FILE...          kas files load and validate offline (kas's own
                                 loader and schema), repos pinned, boards exist
  checks.py guards FILE...       every assignment of the kernel appends is
                                 guarded (the rule oelint's noncoreoverride
                                 cannot see; .oelint.cfg)
  checks.py kconfig CONFIG CFG...  every option of the fragments exists in CONFIG
  checks.py caps UNIT...         CapabilityBoundingSet names real capabilities
  checks.py licenses RECIPE      LIC_FILES_CHKSUM follows Cargo.lock's crates

Each prints what it verified and exits non-zero on the first class of errors.
"""
import glob
import hashlib
import os
import re
import subprocess
import sys
import tomllib

TOP = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def fail(errors):
    for e in errors:
        print("FAIL: " + e, file=sys.stderr)
    sys.exit(1 if errors else 0)


def check_kas(files):
    """Load each kas file the way kas does (includes merged, every file
    validated against kas's JSON schema), without touching the network."""
    import argparse

    import jsonschema
    import yaml
    from kas import context
    from kas.configschema import CONFIGSCHEMA
    from kas.includehandler import IncludeHandler

    context.create_global_context(argparse.Namespace(no_color=True))
    boards = {os.path.splitext(os.path.basename(p))[0] for p in glob.glob(os.path.join(TOP, "board-configs", "*.toml"))}
    errors = []
    for f in files:
        before = len(errors)
        with open(f) as fd:
            raw = yaml.safe_load(fd)
        for e in jsonschema.Draft202012Validator(CONFIGSCHEMA).iter_errors(raw):
            errors.append("%s: schema: %s" % (f, e.message))
        try:
            cfg, missing = IncludeHandler([f], use_lock=False).get_config()
        except Exception as e:  # kas raises its own error types
            errors.append("%s: kas cannot load it: %s" % (f, e))
            continue
        if missing:
            errors.append("%s: includes from repos not available offline: %s" % (f, missing))
        repos = cfg.get("repos", {})
        for name, r in repos.items():
            r = r or {}
            if "url" not in r:
                continue
            if not re.fullmatch(r"[0-9a-f]{40}", str(r.get("commit", ""))):
                errors.append("%s: repo %s: no pinned 40-digit commit" % (f, name))
            if not r.get("branch"):
                errors.append("%s: repo %s: no branch (the commit must be on a named release branch)" % (f, name))
        if "bitbake" not in repos:
            errors.append("%s: no bitbake repo" % f)
        layers = ((repos.get("latmon") or {}).get("layers") or {})
        if "yocto/meta-latmon" not in layers or not os.path.isfile(os.path.join(TOP, "yocto/meta-latmon/conf/layer.conf")):
            errors.append("%s: the latmon repo must provide layer yocto/meta-latmon" % f)
        conf = "\n".join((cfg.get("local_conf_header") or {}).values())
        if not re.search(r'^DISTRO_FEATURES:append = ".* latmon', conf, re.M):
            errors.append("%s: DISTRO_FEATURES does not get latmon" % f)
        top_level = os.path.basename(f) != "common.yml"
        if top_level:
            m = re.search(r'^LATMON_BOARD_CONFIG = "([^"]+)"', conf, re.M)
            if not m:
                errors.append("%s: no LATMON_BOARD_CONFIG" % f)
            elif m.group(1) not in boards:
                errors.append("%s: LATMON_BOARD_CONFIG %s is not in board-configs/" % (f, m.group(1)))
            if not cfg.get("machine"):
                errors.append("%s: no machine" % f)
        if len(errors) == before:
            print("kas: %s: valid; machine %s, repos %s" % (
                os.path.relpath(f, TOP), cfg.get("machine", "-"),
                ", ".join("%s@%s" % (k, (v or {}).get("commit", "")[:12] or "(this checkout)") for k, v in repos.items())))
    fail(errors)


# What an unguarded line of a kernel append may do: define this layer's own
# variables or require the shared include.
GUARDS = (
    "bb.utils.contains('DISTRO_FEATURES', 'latmon'",
    "oe.utils.conditional('LATMON_RPI_PREEMPT_RT', '1'",
)
PRIVATE = re.compile(r"^(LATMON_[A-Z_]+)\s*(\?\?=|\?=|:=|=)")


def check_guards(files):
    errors = []
    for f in files:
        before = len(errors)
        with open(f) as fd:
            text = fd.read().replace("\\\n", " ")
        n = 0
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#") or line.startswith("require ") or PRIVATE.match(line):
                continue
            n += 1
            if not any(g in line for g in GUARDS):
                errors.append("%s: not guarded by DISTRO_FEATURES latmon (or LATMON_RPI_PREEMPT_RT): %s" % (f, line))
        if len(errors) == before:
            print("guards: %s: %d assignments, all guarded" % (os.path.relpath(f, TOP), n))
    fail(errors)


def check_kconfig(config, cfgs):
    with open(config) as fd:
        have = set(re.findall(r"^(?:# )?(CONFIG_[A-Za-z0-9_]+)(?:=| is not set)", fd.read(), re.M))
    errors = []
    for c in cfgs:
        before = len(errors)
        with open(c) as fd:
            want = re.findall(r"^(?:# )?(CONFIG_[A-Za-z0-9_]+)(?:=| is not set)", fd.read(), re.M)
        if not want:
            errors.append("%s: no options" % c)
        for opt in want:
            if opt not in have:
                errors.append("%s: %s does not exist in %s" % (c, opt, config))
        if len(errors) == before:
            print("kconfig: %s: %d options, all in %s: %s" % (os.path.relpath(c, TOP), len(want), os.path.basename(config), " ".join(o[7:] for o in want)))
    fail(errors)


def check_caps(units):
    header = "/usr/include/linux/capability.h"
    with open(header) as fd:
        known = set(re.findall(r"^#define (CAP_[A-Z_]+)\s+\d+", fd.read(), re.M))
    errors = []
    for u in units:
        with open(u) as fd:
            caps = [c for line in fd if line.startswith("CapabilityBoundingSet=") for c in line.split("=", 1)[1].split()]
        if not caps:
            errors.append("%s: no CapabilityBoundingSet" % u)
        errors += ["%s: unknown capability %s" % (u, c) for c in caps if c not in known]
        if all(c in known for c in caps):
            print("caps: %s: %s (all in %s)" % (u, " ".join(caps), header))
    fail(errors)


def check_licenses(recipe):
    with open(recipe) as fd:
        text = fd.read()
    with open(os.path.join(TOP, "Cargo.lock"), "rb") as fd:
        lock = {p["name"]: p["version"] for p in tomllib.load(fd)["package"]}
    crate_vars = {"LATMON_LIBBPF_SYS": "libbpf-sys", "LATMON_LIBBPF_RS": "libbpf-rs", "LATMON_SERIALPORT": "serialport", "LATMON_RMODBUS": "rmodbus"}
    names = dict(re.findall(r'^(LATMON_[A-Z_]+) = "([^"]+)"', text, re.M))
    errors = []
    for var, crate in crate_vars.items():
        want = "%s-%s" % (crate, lock.get(crate))
        if names.get(var) != want:
            errors.append("%s: %s is %r but Cargo.lock has %s: update it and review the license texts "
                          "behind LIC_FILES_CHKSUM" % (recipe, var, names.get(var), want))
    registry = glob.glob(os.path.join(os.environ.get("CARGO_HOME", os.path.expanduser("~/.cargo")), "registry", "src", "*"))
    checked, skipped = 0, 0
    block = re.search(r'^LIC_FILES_CHKSUM = "(.*?)"$', text, re.M | re.S)
    if not block:
        fail(["%s: no LIC_FILES_CHKSUM" % recipe])
    for path, params in re.findall(r"file://([^;\s]+)((?:;[^\s\\]+)*)", block.group(1)):
        p = dict(kv.split("=", 1) for kv in params.strip(";").split(";") if kv)
        for var, value in names.items():
            path = path.replace("${%s}" % var, value)
        if path.startswith("${CARGO_VENDORING_DIRECTORY}/"):
            rel = path.split("/", 1)[1]
            found = [os.path.join(r, rel) for r in registry if os.path.isfile(os.path.join(r, rel))]
            if not found:
                skipped += 1
                continue
            real = found[0]
        else:
            real = os.path.join(TOP, path)
        with open(real, "rb") as fd:
            lines = fd.readlines()
        begin, end = int(p.get("beginline", 1)), int(p.get("endline", len(lines)))
        md5 = hashlib.md5(b"".join(lines[begin - 1:end])).hexdigest()
        if md5 != p.get("md5"):
            errors.append("%s: md5 of %s is %s, the recipe says %s" % (recipe, path, md5, p.get("md5")))
        checked += 1
    # Every crate linked into the binary must be covered by LICENSE: each
    # AND-part of its license offers one of the licenses LICENSE names.
    recipe_lics = set(re.findall(r"[A-Za-z0-9.+-]+", re.search(r'^LICENSE = "([^"]+)"', text, re.M).group(1)))
    tree = subprocess.run(
        ["cargo", "tree", "--locked", "--offline", "-e", "normal,no-proc-macro", "--target", "all",
         "--prefix", "none", "-f", "{p}|{l}"],
        cwd=TOP, capture_output=True, text=True)
    if tree.returncode != 0:
        errors.append("cargo tree failed: %s" % tree.stderr.strip())
    crates = sorted({line.removesuffix(" (*)") for line in tree.stdout.splitlines() if "|" in line})
    for line in crates:
        pkg, lic = line.rsplit("|", 1)
        parts = [[a.strip(" ()") for a in re.split(r" OR |/", part)] for part in lic.split(" AND ")]
        if all(any(a in recipe_lics for a in alts) for alts in parts):
            continue
        errors.append("%s: crate %s has license %r, which the recipe's LICENSE does not cover: update LICENSE "
                      "(and LIC_FILES_CHKSUM)" % (recipe, pkg, lic))
    print("licenses: %s: crate names match Cargo.lock; %d license checksums verified%s; the %d crates linked "
          "into latmon are covered by LICENSE" % (
              os.path.relpath(recipe, TOP), checked,
              ", %d skipped (crate sources not in the local cargo registry)" % skipped if skipped else "", len(crates)))
    fail(errors)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "kas":
        check_kas(args)
    elif cmd == "guards":
        check_guards(args)
    elif cmd == "kconfig":
        check_kconfig(args[0], args[1:])
    elif cmd == "caps":
        check_caps(args)
    elif cmd == "licenses":
        check_licenses(args[0])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
