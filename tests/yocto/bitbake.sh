#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# meta-latmon through the real Yocto tools, offline, from the pinned layer
# snapshots in ../shared/yocto (bitbake 2.18, oe-core, meta-yocto, meta-oe,
# meta-raspberrypi at the commits yocto/kas/ names; see that README):
#   A. the qemuarm64-rt kas build, from a clone of this repository on a
#      detached HEAD without a local "main": bitbake -p; -g latmon-test-image;
#      -n latmon;
#      -e of the kernel (the fragment and KERNEL_DEBUG are there) and of latmon
#      (pinned SRCREV, the UNPACKDIR prefix map); -c fetch and -c unpack of
#      latmon (its crates from the Rust crate registry, checksums checked)
#   B. the raspberrypi4-64 kas build: bitbake -g latmon-test-image (the task
#      graph and signatures; latmon, the kernel and pahole-native in it); -e of
#      linux-raspberrypi (latmon fragment and PREEMPT_RT fragment)
#   C. a standalone copy of the layer (no git checkout around it), without the
#      distro feature, with latmon built through externalsrc: bitbake -p of
#      its recipes and linux-yocto's (BBMASK), bitbake-getvar: the kernel's
#      append applies but adds no latmon fragment; externalsrc keeps the crates
#   D. yocto-check-layer on meta-latmon (meta-oe given as its dependency),
#      beside A, B and C
# BitBake refuses to run as root: everything runs as an unprivileged user
# ($LATMON_YOCTO_USER, created if missing) in a scratch directory it owns.
# The kas files are turned into bblayers.conf/local.conf by kas's own loader
# (checks.py kasconf), so a layer they forget fails here.
# LATMON_YOCTO_PARTS="A B C D" (the default) chooses the parts to run.
# Needs: chrpath diffstat lz4 and the en_US.UTF-8 locale (scripts/install-deps.sh),
# and the kas venv of tests/yocto/check.sh (created there if missing).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
snap=${LATMON_YOCTO_SNAPSHOTS:-$top/../shared/yocto}
user=${LATMON_YOCTO_USER:-latmon-yocto}
venv=${LATMON_YOCTO_VENV:-$top/target/yocto-venv}
[ "$(id -u)" = 0 ] || { echo "bitbake.sh: run as root (it creates and becomes user $user)" >&2; exit 1; }
for t in bitbake-2.18-fae9db31 openembedded-core-wrynose-ef022bf8 meta-yocto-wrynose-904846ae \
         meta-openembedded-wrynose-6bf0d8ad-meta-oe meta-raspberrypi-wrynose-f62c6792; do
  [ -f "$snap/$t.tar.gz" ] || { echo "bitbake.sh: FAIL: $snap/$t.tar.gz missing (set LATMON_YOCTO_SNAPSHOTS)" >&2; exit 1; }
done
[ -x "$venv/bin/python" ] || { echo "bitbake.sh: FAIL: no kas venv at $venv (run tests/yocto/check.sh first)" >&2; exit 1; }

start=$(date +%s)
t_step=$start
step() {
  local now; now=$(date +%s)
  [ -z "${step_name:-}" ] || echo "bitbake: ${step_name}: done in $(( now - t_step )) s"
  step_name="$*"; t_step=$now
  [ -z "$step_name" ] || echo "bitbake: $step_name"
}
die() { echo "bitbake: FAIL: $*" >&2; exit 1; }

id "$user" >/dev/null 2>&1 || useradd --system --create-home --shell /bin/bash "$user"
# Everything BitBake keeps between runs lives in one machine-wide cache
# directory outside the clone ($LATMON_YOCTO_CACHE), as Yocto's own CI keeps
# DL_DIR and SSTATE_DIR: the unpacked layer snapshots, the latmon checkout
# the layer is tested from, the standalone copy, the downloads, and each
# build directory (A B C D) with its parse cache (TMPDIR/cache), codeparser
# cache and hash-equivalence database (PERSISTENT_DIR = TOPDIR/cache).
# The paths never change, so a second run's configuration hash is the
# first's, and BitBake's own cache keys decide what to parse again: each
# recipe's entry is checked against the mtimes of the files it was parsed
# from. So the copies below are refreshed file by file (git checkout,
# rsync --checksum without -t): an unchanged file keeps its mtime and its
# cache entry, a changed one gets a new mtime and is parsed again.
# Each run's logs go to a scratch directory, removed at the end.
W=${LATMON_YOCTO_CACHE:-/var/cache/latmon-yocto}
mkdir -p "$W"
# One run at a time on a machine (two would share the build directories).
exec 9> "$W/.lock"
flock -w 3600 9 || die "another bitbake.sh holds $W/.lock"
O=$(mktemp -d /var/tmp/latmon-bitbake.XXXXXX)
keep=${LATMON_YOCTO_KEEP:-0}
# On the way out, stopped or not: BitBake's servers (they leave the process
# group a kill of this script reaches) and D's background part, then the
# scratch directory. Only BitBake runs as $user.
trap '[ -z "${d_pid:-}" ] || kill "$d_pid" 2>/dev/null; pkill -KILL -u "$user" 2>/dev/null || true; [ "$keep" = 1 ] && echo "bitbake: kept $O" || rm -rf "$O"' EXIT

step "setup: the layer snapshots, the latmon checkout (detached HEAD, no local main) in $W"
# The snapshots are unpacked again only when a tarball changed (their
# checksums are the key); tar restores the archive's mtimes either way.
sums=$(cd "$snap" && sha256sum ./*.tar.gz)
if [ "$(cat "$W/layers.sha256" 2>/dev/null)" != "$sums" ]; then
  echo "bitbake: unpacking the snapshots (new or changed tarballs)"
  rm -rf "$W/layers" "$W/layers.sha256"
  mkdir -p "$W/layers"
  for f in "$snap"/*.tar.gz; do tar -xzf "$f" -C "$W/layers"; done
  echo "$sums" > "$W/layers.sha256"
fi
# The checkout: the committed history (SRCREV_latmon is in it) at this
# clone's HEAD, with the work tree's layer on top, so uncommitted layer
# changes are tested. git checkout rewrites only the files that differ.
[ -d "$W/latmon/.git" ] || git clone --quiet --no-hardlinks --no-checkout "$top" "$W/latmon"
# Root runs git here in a checkout owned by $user: safe.directory on the
# command line (honoured there, like the global config, which is left alone).
lg() { git -c safe.directory='*' -C "$W/latmon" "$@"; }
lg fetch --quiet --no-tags "$top" "+HEAD:refs/remotes/top/HEAD" "+refs/heads/*:refs/remotes/top/*"
lg checkout --quiet --force --detach "$(git -C "$top" rev-parse HEAD)"
lg clean -fdq
for b in $(lg for-each-ref --format='%(refname:short)' refs/heads); do
  lg branch --quiet -D "$b"
done
rsync -rc --delete "$top/yocto/" "$W/latmon/yocto/"
# C's standalone layer: a plain copy, no git checkout around it.
mkdir -p "$W/standalone/meta-latmon"
rsync -rc --delete "$top/yocto/meta-latmon/" "$W/standalone/meta-latmon/"
mkdir -p "$W/downloads" "$W/sstate"
chown -R "$user:" "$W"
L=$W/layers
repos=(latmon="$W/latmon" bitbake="$L/bitbake" openembedded-core="$L/openembedded-core"
       meta-yocto="$L/meta-yocto" meta-openembedded="$L/meta-openembedded" meta-raspberrypi="$L/meta-raspberrypi")

# conf BUILD KASFILE [LOCAL.CONF LINES]: BUILD's conf from the kas file, plus
# what running here takes (offline sanity, shared downloads), plus the lines.
conf() {
  local build=$W/$1 kas=$2; shift 2
  "$venv/bin/python" tests/yocto/checks.py kasconf "$kas" "$build" "${repos[@]}"
  {
    echo '# running here: no network probe, no uninative download (../shared/yocto/README.md)'
    echo 'CONNECTIVITY_CHECK_URIS = ""'
    echo 'INHERIT:remove = "uninative"'
    echo "DL_DIR = \"$W/downloads\""
    echo "SSTATE_DIR = \"$W/sstate\""
    echo 'BB_NUMBER_THREADS = "2"'
    printf '%s\n' "$@"
  } >> "$build/conf/local.conf"
  chown -R "$user:" "$build"
}
# bb BUILD CMD...: CMD in BUILD's BitBake environment, as $user.
bb() {
  local build=$W/$1; shift
  # PYTHONHASHSEED: oe-core builds some configuration values from Python
  # sets (COMBINED_FEATURES), whose order changes with the hash seed; a new
  # order is a new configuration hash, and every command would parse all
  # ~2000 recipes again instead of using the cache. BitBake cleans the
  # environment before it starts its server, so the seed reaches the server
  # only through BB_ENV_PASSTHROUGH_ADDITIONS (measured: without it,
  # COMBINED_FEATURES came out in 4 orders in 5 runs of `bitbake -e`).
  runuser -u "$user" -- env -i HOME="/home/$user" PATH=/usr/local/bin:/usr/bin:/bin LANG=en_US.UTF-8 \
    PYTHONHASHSEED=0 BB_ENV_PASSTHROUGH_ADDITIONS=PYTHONHASHSEED \
    bash -c 'cd "$1" && . ./openembedded-core/oe-init-build-env "$2" >/dev/null && shift 2 && "$@"' \
    bb "$L" "$build" "$@"
}
# warm BUILD: a first parse of the quilt recipes only (seconds), which
# writes BUILD's codeparser cache (cache/bb_codeparser.dat). Measured: the
# configuration hash of a build directory with that file differs from one
# without it, so without this the first two commands of every build would
# each parse all ~2000 recipes (the first one writes the file).
# Once a build has parsed every recipe (A), its codeparser cache holds the
# parsed form of every shell and Python function of oe-core, meta-oe and
# meta-yocto: a copy of it warms B instead, whose first parse then
# skips that work (the cache is keyed by the code's text, not by paths). D
# starts beside A, before that file exists.
warm() {
  if [ -s "$W/$1/cache/bb_codeparser.dat" ]; then
    echo "warm $1: its codeparser cache is there from an earlier run"
    return
  fi
  if [ -s "$W/A/cache/bb_codeparser.dat" ] && [ "$1" = B ]; then
    mkdir -p "$W/$1/cache"
    cp "$W/A/cache/bb_codeparser.dat" "$W/$1/cache/bb_codeparser.dat"
    chown -R "$user:" "$W/$1/cache"
    echo "warm $1: A's codeparser cache ($(( $(stat -c %s "$W/$1/cache/bb_codeparser.dat") / 1024 )) KiB)"
    return
  fi
  bb "$1" env BB_ENV_PASSTHROUGH_ADDITIONS="PYTHONHASHSEED BBMASK" 'BBMASK=^(?!.*/quilt).*\.bb(append)?$' \
    bitbake -p > "$O/$1.warm" 2>&1 || { tail -20 "$O/$1.warm" >&2; die "warm-up parse of $1"; }
  [ -s "$W/$1/cache/bb_codeparser.dat" ] || die "warm-up parse of $1 wrote no codeparser cache"
}
# var BUILD RECIPE NAME: NAME's final value in `bitbake -e RECIPE`, run once
# per BUILD and RECIPE (each run starts a BitBake server and loads the cache).
var() {
  local env=$O/$1.env.$2
  [ -s "$env" ] || bb "$1" bitbake -e "$2" > "$env" 2>&1 || { tail -30 "$env" >&2; rm -f "$env"; die "bitbake -e $2 in $1"; }
  sed -n "s/^$3=\"\(.*\)\"\$/\1/p" "$env"
}
has() { case " $1 " in *" $2 "*) return 0 ;; *) return 1 ;; esac; }

parts=" ${LATMON_YOCTO_PARTS:-A B C D} "
part() { case "$parts" in *" $1 "*) return 0 ;; *) echo "bitbake: part $1 not run (LATMON_YOCTO_PARTS)"; return 1 ;; esac; }

pin=$(sed -n 's/^SRCREV_latmon ??= "\([0-9a-f]*\)"$/\1/p' yocto/meta-latmon/recipes-support/latmon/latmon_git.bb)
pin_conf=()
if ! git -C "$top" cat-file -e "$pin^{commit}" 2>/dev/null; then
  # A shallow clone lacks the pinned commit (tests/yocto/checks.py srcrev
  # checks the pin wherever the history is there): fetch this checkout's
  # HEAD instead, and say so.
  echo "bitbake: WARNING: this clone has no commit $pin (shallow?): A fetches HEAD instead of the pinned SRCREV" >&2
  pin=$(git -C "$top" rev-parse HEAD)
  pin_conf=("SRCREV_latmon = \"$pin\"")
fi

# ---- D: yocto-check-layer --------------------------------------------------------
# D runs beside A, B and C, from the start: most of its ~25 min are world
# signatures, computed in one BitBake server process (one core): run last
# and alone it would leave the second core idle while the rest of CI waits
# on it. Its own build directory and
# server; its output is printed when it has ended.
check_layer() {
step_name=""
step "D. yocto-check-layer --no-auto-dependency --dependency meta-oe meta-latmon (beside A, B and C)"
mkdir -p "$W/D/conf"
cat > "$W/D/conf/bblayers.conf" <<EOF
BBPATH = "\${TOPDIR}"
BBFILES ?= ""
BBLAYERS ?= "$L/openembedded-core/meta $L/meta-yocto/meta-poky"
EOF
printf '%s\n' 'MACHINE ??= "qemuarm64"' 'DISTRO ?= "poky"' 'CONNECTIVITY_CHECK_URIS = ""' 'INHERIT:remove = "uninative"' \
  "DL_DIR = \"$W/downloads\"" "SSTATE_DIR = \"$W/sstate\"" 'BB_NUMBER_THREADS = "2"' > "$W/D/conf/local.conf"
chown -R "$user:" "$W/D"
warm D
# --no-auto-dependency: meta-oe is a dependency to add, not a layer under test.
# Each line of its log gets the seconds since D started, so the log says
# where D's time goes (its world signatures, its parses).
d0=$(date +%s)
bb D yocto-check-layer --no-auto-dependency --dependency "$L/meta-openembedded/meta-oe" -- "$W/latmon/yocto/meta-latmon" 2>&1 \
  | while IFS= read -r line; do printf '+%ss %s\n' "$(( $(date +%s) - d0 ))" "$line"; done > "$O/D.log" || true
grep -E "INFO: (Ran|OK|FAILED|Summary|meta-latmon|Getting|Setting)|INFO: test_|FAIL|ERROR| \.\.\. " "$O/D.log" | tail -40
grep -q "INFO: meta-latmon \.* PASS" "$O/D.log" || { tail -60 "$O/D.log" >&2; die "yocto-check-layer did not PASS meta-latmon"; }
step ""
}
d_pid=
if part D; then
  check_layer > "$O/D.out" 2>&1 &
  d_pid=$!
fi

# ---- A: qemuarm64, linux-yocto-rt, DISTRO_FEATURES latmon ----------------------
if part A; then
conf A yocto/kas/qemuarm64-rt.yml "${pin_conf[@]}"
step "A. bitbake -p (qemuarm64-rt kas config)"
warm A
bb A bitbake -p > "$O/A.parse" 2>&1 || { tail -40 "$O/A.parse" >&2; die "bitbake -p (A)"; }
grep -E "^Parsing recipes|recipes parsed|WARNING|ERROR" "$O/A.parse" | tail -3 || true
if grep -q "^ERROR" "$O/A.parse"; then die "bitbake -p (A) printed errors"; fi
# The image's whole graph and every task's signature with -g; the dry run
# (-n: each task forked into a worker that parses its recipe, then skipped)
# of latmon, the layer's own recipe, with everything it depends on. The
# image's dry run took 12-14 min of both cores (5 621 tasks), the longest
# step of CI, for recipes that are oe-core's.
step "A. bitbake -g latmon-test-image"
rm -f "$W/A/task-depends.dot" "$W/A/pn-buildlist"
bb A bitbake -g latmon-test-image > "$O/A.graph" 2>&1 || { tail -40 "$O/A.graph" >&2; die "bitbake -g latmon-test-image (A)"; }
tasks=$(grep -c '^"[^"]*" \[label=' "$W/A/task-depends.dot" || true)
[ "$tasks" -gt 1000 ] || { tail -20 "$O/A.graph" >&2; die "task graph has '$tasks' tasks"; }
for pn in latmon linux-yocto-rt pahole-native; do
  grep -qx "$pn" "$W/A/pn-buildlist" || die "latmon-test-image's build list (qemuarm64) lacks $pn"
done
echo "bitbake -g latmon-test-image (qemuarm64): $tasks tasks; latmon, linux-yocto-rt and pahole-native in the build list"
step "A. bitbake -n latmon"
bb A bitbake -n latmon > "$O/A.dry" 2>&1 || { tail -40 "$O/A.dry" >&2; die "bitbake -n latmon (A)"; }
tasks=$(sed -n 's/.*Tasks Summary: Attempted \([0-9]*\) tasks.*/\1/p' "$O/A.dry" | tail -1)
[ -n "$tasks" ] && [ "$tasks" -gt 100 ] || { tail -20 "$O/A.dry" >&2; die "dry run attempted '${tasks:-no}' tasks"; }
echo "bitbake -n latmon (qemuarm64): $tasks tasks"
step "A. bitbake -e linux-yocto-rt, latmon"
uri=$(var A linux-yocto-rt SRC_URI)
has "$uri" file://latmon.scc && has "$uri" file://latmon.cfg || die "linux-yocto-rt SRC_URI lacks the latmon fragment: $uri"
kdebug=$(var A linux-yocto-rt KERNEL_DEBUG)
[ "$kdebug" = True ] || die "linux-yocto-rt KERNEL_DEBUG is '$kdebug', not True"
grep -q "^_task_deps=.*'do_kernel_configme': '[^']*pahole-native:do_populate_sysroot" "$O/A.env.linux-yocto-rt" \
  || die "linux-yocto-rt's do_kernel_configme does not depend on pahole-native"
echo "linux-yocto-rt: SRC_URI has latmon.scc latmon.cfg; KERNEL_DEBUG True; pahole-native in do_kernel_configme's depends"
srcrev=$(var A latmon SRCREV_latmon)
[ "$srcrev" = "$pin" ] || die "latmon builds SRCREV '$srcrev', the recipe pins '$pin'"
lsrc=$(var A latmon SRC_URI)
has "$lsrc" "git://$W/latmon;protocol=file;nobranch=1;name=latmon" || die "latmon SRC_URI is not the checkout the layer is in: $lsrc"
unpackdir=$(var A latmon UNPACKDIR)
dbgsrc=$(var A latmon TARGET_DBGSRC_DIR)
cflags=$(var A latmon TARGET_CFLAGS)
has "$cflags" "-ffile-prefix-map=$unpackdir=$dbgsrc" || die "TARGET_CFLAGS lacks -ffile-prefix-map=$unpackdir=...: $cflags"
echo "latmon: SRCREV ${srcrev:0:12} (pinned), SRC_URI the layer's checkout, TARGET_CFLAGS maps UNPACKDIR to $dbgsrc"
step "A. bitbake -c fetch latmon (crates from the registry, checksums checked)"
bb A bitbake -c fetch latmon > "$O/A.fetch" 2>&1 || { tail -40 "$O/A.fetch" >&2; die "bitbake -c fetch latmon"; }
# Unique URIs: the class writes a crate once per Cargo.lock that has it
# (the root's and the supervisor firmware's share 16), BitBake fetches it once.
crates=$(grep '^    crate://' yocto/meta-latmon/recipes-support/latmon/latmon-crates.inc | sort -u | wc -l)
got=$(find "$W/downloads" -maxdepth 1 -name '*.crate' | wc -l)
[ "$got" -ge "$crates" ] || die "fetched $got .crate files, latmon-crates.inc lists $crates"
echo "fetch: $got crates (latmon-crates.inc: $crates) and the git checkout"
step "A. bitbake -c unpack latmon"
bb A bitbake -c unpack latmon > "$O/A.unpack" 2>&1 || { tail -40 "$O/A.unpack" >&2; die "bitbake -c unpack latmon"; }
s=$(var A latmon S)
vend=$(var A latmon CARGO_VENDORING_DIRECTORY)
[ -f "$s/Cargo.toml" ] && [ -f "$s/bpf/latmon.h" ] || die "unpacked S ($s) has no Cargo.toml/bpf/latmon.h"
[ "$(git -C "$top" show "$pin:Cargo.lock" | sha256sum)" = "$(sha256sum < "$s/Cargo.lock")" ] || die "unpacked Cargo.lock is not the pinned commit's"
nv=$(find "$vend" -mindepth 1 -maxdepth 1 -type d | wc -l)
[ "$nv" -ge "$crates" ] || die "$nv crates vendored in $vend, want $crates"
echo "unpack: S has the pinned commit's tree; $nv crates vendored"
fi

# ---- B: raspberrypi4-64 ----------------------------------------------------------
if part B; then
conf B yocto/kas/raspberrypi4-64.yml
# -g, not -n: the graph and every task's signature are computed as for -n
# (a missing provider or a broken append fails here), without the dry run's
# one recipe parse in a forked worker per task (5 396 tasks: 10-20 min on
# 2 cores, for the same recipes A's dry run already exercised).
step "B. bitbake -g latmon-test-image (raspberrypi4-64 kas config)"
warm B
rm -f "$W/B/task-depends.dot" "$W/B/pn-buildlist"
bb B bitbake -g latmon-test-image > "$O/B.graph" 2>&1 || { tail -40 "$O/B.graph" >&2; die "bitbake -g latmon-test-image (B)"; }
tasks=$(grep -c '^"[^"]*" \[label=' "$W/B/task-depends.dot" || true)
[ "$tasks" -gt 1000 ] || { tail -20 "$O/B.graph" >&2; die "task graph has '$tasks' tasks"; }
for pn in latmon linux-raspberrypi pahole-native; do
  grep -qx "$pn" "$W/B/pn-buildlist" || die "latmon-test-image's build list (raspberrypi4-64) lacks $pn"
done
echo "bitbake -g latmon-test-image (raspberrypi4-64): $tasks tasks; latmon, linux-raspberrypi and pahole-native in the build list"
step "B. bitbake -e linux-raspberrypi"
uri=$(var B linux-raspberrypi SRC_URI)
for f in latmon.scc latmon.cfg preempt-rt.cfg; do has "$uri" "file://$f" || die "linux-raspberrypi SRC_URI lacks $f: $uri"; done
[ "$(var B linux-raspberrypi KERNEL_DEBUG)" = True ] || die "linux-raspberrypi KERNEL_DEBUG is not True"
echo "linux-raspberrypi: SRC_URI has latmon.scc latmon.cfg preempt-rt.cfg; KERNEL_DEBUG True"
fi

# ---- C: standalone layer copy, no feature, externalsrc ---------------------------
if part C; then
# Only the recipes C asks about are parsed (BBMASK hides every other .bb
# and .bbappend): the standalone layer's own, and oe-core's linux-yocto
# family its appends extend. A full parse here took 7-8 min of CI's
# critical path and proved nothing A and D's parses do not: C's questions
# are the standalone layer's parse and the values of two recipes.
c_mask='^(?!.*/(standalone/meta-latmon/|meta/recipes-kernel/linux/linux-yocto)).*\.bb(append)?$'
conf C yocto/kas/qemuarm64-rt.yml 'DISTRO_FEATURES:remove = "latmon"' 'INHERIT += "externalsrc"' \
  "EXTERNALSRC:pn-latmon = \"$W/latmon\"" "BBMASK = \"$c_mask\""
sed -i "s#$W/latmon/yocto/meta-latmon#$W/standalone/meta-latmon#" "$W/C/conf/bblayers.conf"
grep -q "$W/standalone/meta-latmon" "$W/C/conf/bblayers.conf" || die "C: the standalone layer is not in bblayers.conf"
step "C. bitbake -p (standalone layer copy, without DISTRO_FEATURES latmon; its recipes and linux-yocto's)"
bb C bitbake -p > "$O/C.parse" 2>&1 || { tail -40 "$O/C.parse" >&2; die "bitbake -p (C: standalone layer)"; }
if grep -q "^ERROR" "$O/C.parse"; then die "bitbake -p (C) printed errors"; fi
grep -E "^Parsing of|recipes parsed" "$O/C.parse" | tail -1 || true
# bitbake-getvar (tinfoil: one recipe parsed with its appends, no
# dependency resolution, which BBMASK's hidden providers would fail).
step "C. bitbake-getvar linux-yocto-rt, latmon (externalsrc)"
getvar() { bb C bitbake-getvar -r "$1" --value "$2" 2> "$O/C.getvar.err" || { cat "$O/C.getvar.err" >&2; die "bitbake-getvar -r $1 $2 in C"; }; }
# The append is applied (it sets this whatever the distro features)...
kfiles=$(getvar linux-yocto-rt LATMON_KERNEL_FILES)
[ "$kfiles" = "$W/standalone/meta-latmon/recipes-kernel/linux/files" ] || die "C: linux-yocto-rt's append is not the standalone layer's: '$kfiles'"
# ...and without the feature it adds nothing to the kernel.
uri=$(getvar linux-yocto-rt SRC_URI)
has "$uri" file://latmon.scc && die "without the feature linux-yocto-rt still gets latmon.scc: $uri"
[ "$(getvar linux-yocto-rt KERNEL_DEBUG)" != True ] || die "without the feature KERNEL_DEBUG is True"
lsrc=$(getvar latmon SRC_URI)
case "$lsrc" in *git://*) die "externalsrc kept the git source: $lsrc" ;; esac
has "$lsrc" crate://crates.io/libbpf-rs/0.27.2 || die "externalsrc dropped the crates: $lsrc"
[ "$(getvar latmon S)" = "$W/latmon" ] || die "externalsrc: S is not the checkout"
echo "standalone layer parses; without the feature the kernel gets no fragment and no KERNEL_DEBUG; externalsrc builds the checkout with the crates"
fi

step ""
if [ -n "$d_pid" ]; then
  d_rc=0
  wait "$d_pid" || d_rc=$?
  d_pid=
  cat "$O/D.out"
  [ "$d_rc" = 0 ] || die "D failed (exit $d_rc)"
fi
echo "bitbake: all checks passed in $(( $(date +%s) - start )) s"
