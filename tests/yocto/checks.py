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
  checks.py srcrev RECIPE        SRCREV_latmon is a commit of this repository
                                 whose Cargo.lock is the working tree's
  checks.py kasconf KAS BUILDDIR NAME=PATH...
                                 write BUILDDIR/conf/{bblayers,local}.conf the
                                 way kas does from KAS (includes merged), with
                                 each repo NAME checked out at PATH (tests/yocto/
                                 bitbake.sh: the pinned snapshots)

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
# The targets latmon ships for (scripts/build-static.sh): the crates linked
# into them are what LICENSE must cover. Not "--target all": that resolves
# crates no product links (android_system_properties, Windows crates), which
# `cargo test` never downloads. Not --offline: the 32-bit target's bindgen
# crates are downloaded only by its cross build, which runs after these checks.
PRODUCT_TARGETS = ("aarch64-unknown-linux-musl", "armv7-unknown-linux-gnueabihf", "x86_64-unknown-linux-gnu")


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


# A kernel append may define this layer's own variables (LATMON_*, which no
# task reads unless a guarded include uses them) and require an include, the
# include's name guarded as a whole: the include's values stay out of every
# variable, and so of every task signature, without the feature. Anything
# else would be parsed with or without it.
GUARDS = (
    "bb.utils.contains('DISTRO_FEATURES', 'latmon'",
    "oe.utils.conditional('LATMON_RPI_PREEMPT_RT', '1'",
)
PRIVATE = re.compile(r"^(LATMON_[A-Z_]+)\s*(\?\?=|\?=|:=|=)")
GUARDED_REQUIRE = re.compile(r"^require \$\{@(.*), '([^']+\.inc)', '', d\)\}$")


def check_guards(files):
    errors = []
    for f in files:
        before = len(errors)
        with open(f) as fd:
            text = fd.read().replace("\\\n", " ")
        incs = []
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#") or PRIVATE.match(line):
                continue
            m = GUARDED_REQUIRE.match(line)
            if m and any(line.startswith("require ${@" + g) for g in GUARDS):
                inc = m.group(2)
                found = [p for p in (os.path.join(os.path.dirname(f), inc), os.path.join(TOP, "yocto", "meta-latmon", inc))
                         if os.path.isfile(p)]
                if not found:
                    errors.append("%s: the guarded include %s does not exist" % (f, inc))
                incs.append(inc)
                continue
            errors.append("%s: parsed without the feature (only LATMON_* variables and a guarded "
                          "`require ${@...}` belong in a kernel append): %s" % (f, line))
        if not incs:
            errors.append("%s: requires no guarded include" % f)
        if len(errors) == before:
            print("guards: %s: only guarded includes (%s)" % (os.path.relpath(f, TOP), ", ".join(incs)))
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
        ["cargo", "tree", "--locked", "-e", "normal,no-proc-macro", "--prefix", "none", "-f", "{p}|{l}"]
        + [a for t in PRODUCT_TARGETS for a in ("--target", t)],
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


def check_srcrev(recipe):
    """The recipe builds SRCREV_latmon with latmon-crates.inc, which follows
    the working tree's Cargo.lock: the pinned commit must have that lock."""
    with open(recipe) as fd:
        m = re.search(r'^SRCREV_latmon \?\?= "([0-9a-f]{40})"$', fd.read(), re.M)
    if not m:
        fail(["%s: SRCREV_latmon is not pinned to a 40-digit commit" % recipe])
    rev = m.group(1)
    git = lambda *a: subprocess.run(["git", "-C", TOP] + list(a), capture_output=True, text=True)
    if git("rev-parse", "--is-shallow-repository").stdout.strip() == "true" and git("cat-file", "-e", rev + "^{commit}").returncode:
        print("srcrev: WARNING: shallow clone without %s: SRCREV_latmon not checked" % rev[:12])
        return
    errors = []
    if git("cat-file", "-e", rev + "^{commit}").returncode:
        errors.append("%s: SRCREV_latmon %s is not a commit of this repository" % (recipe, rev))
    elif git("merge-base", "--is-ancestor", rev, "HEAD").returncode:
        errors.append("%s: SRCREV_latmon %s is not an ancestor of HEAD" % (recipe, rev))
    else:
        # Every Cargo.lock the .inc is generated from (the class reads all of
        # the fetched tree's, e.g. the supervisor firmware's own workspace).
        locks = sorted(set(git("ls-files", "--", "Cargo.lock", "*/Cargo.lock").stdout.split()))
        for lock in locks:
            pinned = git("show", "%s:%s" % (rev, lock))
            with open(os.path.join(TOP, lock)) as fd:
                if pinned.returncode or fd.read() != pinned.stdout:
                    errors.append("%s: %s changed since SRCREV_latmon %s: latmon-crates.inc would not match the "
                                  "pinned source; commit, then pin SRCREV_latmon to a commit with this %s"
                                  % (recipe, lock, rev[:12], lock))
    if not errors:
        print("srcrev: SRCREV_latmon %s is an ancestor of HEAD with the same Cargo.lock files (%s)"
              % (rev[:12], ", ".join(locks)))
    fail(errors)


def kas_conf(kasfile, builddir, repo_paths):
    """bblayers.conf and local.conf as kas writes them (kas/libcmds.py
    WriteBBConfig): the layers of every repo in the order kas gives them,
    the local_conf_header sections sorted by name, MACHINE and DISTRO."""
    import argparse

    from kas import context
    from kas.includehandler import IncludeHandler

    context.create_global_context(argparse.Namespace(no_color=True))
    cfg, missing = IncludeHandler([kasfile], use_lock=False).get_config()
    if missing:
        fail(["%s: includes from repos not available: %s" % (kasfile, missing)])
    layers = []
    for name, repo in sorted((cfg.get("repos") or {}).items()):
        repo = repo or {}
        if name not in repo_paths:
            fail(["%s: repo %s: no checkout given (have %s)" % (kasfile, name, ", ".join(sorted(repo_paths)))])
        repo_layers = repo.get("layers")
        if repo_layers is None:  # kas: a repo without "layers" is one layer
            repo_layers = {"": None}
        for layer, enabled in sorted(repo_layers.items()):
            if enabled not in ("disabled", "excluded", "n", "no", "0", "false"):
                layers.append(os.path.normpath(os.path.join(repo_paths[name], layer)))
    os.makedirs(os.path.join(builddir, "conf"), exist_ok=True)
    with open(os.path.join(builddir, "conf", "bblayers.conf"), "w") as fd:
        fd.write("# written by tests/yocto/checks.py kasconf from %s\n" % os.path.relpath(kasfile, TOP))
        for k, v in sorted((cfg.get("bblayers_conf_header") or {}).items()):
            fd.write(v.rstrip("\n") + "\n")
        fd.write('BBPATH = "${TOPDIR}"\nBBFILES ?= ""\nBBLAYERS ?= " \\\n%s"\n' % "".join("    %s \\\n" % l for l in layers))
    with open(os.path.join(builddir, "conf", "local.conf"), "w") as fd:
        fd.write("# written by tests/yocto/checks.py kasconf from %s\n" % os.path.relpath(kasfile, TOP))
        for k, v in sorted((cfg.get("local_conf_header") or {}).items()):
            fd.write("# %s\n%s\n" % (k, v.rstrip("\n")))
        if cfg.get("machine"):
            fd.write('MACHINE ??= "%s"\n' % cfg["machine"])
        if cfg.get("distro"):
            fd.write('DISTRO ??= "%s"\n' % cfg["distro"])
    print("kasconf: %s: %d layers: %s; target %s" % (
        os.path.relpath(kasfile, TOP), len(layers), " ".join(os.path.basename(l) for l in layers), cfg.get("target")))


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
    elif cmd == "srcrev":
        check_srcrev(args[0])
    elif cmd == "kasconf":
        kas_conf(args[0], args[1], dict(a.split("=", 1) for a in args[2:]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
