# SPDX-License-Identifier: MIT
SUMMARY = "eBPF latency monitor for real-time Linux robot controllers"
DESCRIPTION = "latmon measures run-queue, function and other latencies with \
               BPF programs that aggregate histograms in the kernel, and ships \
               compact summaries over a serial link, sockets or stdout."
SECTION = "console/utils"
# latmon is MIT. The binary also links, statically: Rust crates that all
# offer MIT except libbpf-rs (LGPL-2.1-only | BSD-2-Clause), libbpf-sys
# (BSD-2-Clause) and serialport (MPL-2.0); and the C libraries libbpf-sys
# builds from its vendored sources: libbpf (LGPL-2.1-only | BSD-2-Clause),
# elfutils' libelf (GPL-2.0-or-later | LGPL-3.0-or-later) and zlib (Zlib).
LICENSE = "MIT & BSD-2-Clause & MPL-2.0 & Apache-2.0 & (LGPL-2.1-only | BSD-2-Clause) & (GPL-2.0-or-later | LGPL-3.0-or-later) & Zlib"
# latmon's files carry SPDX headers (no license file of their own); the
# other texts are in the vendored crates. tests/yocto/check.sh fails when
# Cargo.lock moves to other versions of them, or links a crate whose license
# LICENSE does not name: update these names then, and review the texts
# behind the new checksums.
LATMON_LIBBPF_SYS = "libbpf-sys-1.7.0+v1.7.0"
LATMON_LIBBPF_RS = "libbpf-rs-0.27.2"
LATMON_SERIALPORT = "serialport-4.10.1"
LATMON_RMODBUS = "rmodbus-0.13.0"
LIC_FILES_CHKSUM = "\
    file://src/main.rs;beginline=1;endline=1;md5=6ec41034e04432ee375d0e14fba596f4 \
    file://${CARGO_VENDORING_DIRECTORY}/${LATMON_LIBBPF_RS}/LICENSE.BSD-2-Clause;md5=5d6306d1b08f8df623178dfd81880927 \
    file://${CARGO_VENDORING_DIRECTORY}/${LATMON_LIBBPF_RS}/LICENSE.LGPL-2.1;md5=b370887980db5dd40659b50909238dbd \
    file://${CARGO_VENDORING_DIRECTORY}/${LATMON_LIBBPF_SYS}/LICENSE;md5=0fc46ee3d6ba77bf08d6b5312092f0ef \
    file://${CARGO_VENDORING_DIRECTORY}/${LATMON_LIBBPF_SYS}/libbpf/LICENSE.BSD-2-Clause;md5=67cb4c623fc9a9acea2f039dad14f71a \
    file://${CARGO_VENDORING_DIRECTORY}/${LATMON_LIBBPF_SYS}/libbpf/LICENSE.LGPL-2.1;md5=b370887980db5dd40659b50909238dbd \
    file://${CARGO_VENDORING_DIRECTORY}/${LATMON_LIBBPF_SYS}/elfutils/COPYING-GPLV2;md5=b234ee4d69f5fce4486a80fdaf4a4263 \
    file://${CARGO_VENDORING_DIRECTORY}/${LATMON_LIBBPF_SYS}/elfutils/COPYING-LGPLV3;md5=e6a600fd5e1d9cbde2d983680233ad02 \
    file://${CARGO_VENDORING_DIRECTORY}/${LATMON_LIBBPF_SYS}/zlib/LICENSE;md5=b51a40671bc46e961c0498897742c0b8 \
    file://${CARGO_VENDORING_DIRECTORY}/${LATMON_SERIALPORT}/LICENSE.txt;md5=cc24d078d74f7dbbc6c61b761886f2a4 \
    file://${CARGO_VENDORING_DIRECTORY}/${LATMON_RMODBUS}/LICENSE;md5=86d3f3a95c324c9479bd8986968f4327 \
"

# clang-native: build.rs compiles bpf/*.bpf.c with clang -target bpf.
# libbpf-sys (features static + vendored) builds libbpf, elfutils' libelf
# and zlib from its vendored sources for the target, running autoreconf,
# autopoint, flex, bison, gawk, make and pkg-config (gawk and make are host
# tools, pkg-config comes with the pkgconfig class). For the build host it
# builds libbpf only and links the host's libelf and zlib: libbpf-cargo, a
# build dependency of latmon, uses libbpf-rs too.
DEPENDS += "\
    autoconf-native \
    automake-native \
    bison-native \
    clang-native \
    elfutils-native \
    flex-native \
    gettext-native \
    zlib-native \
"

PV = "0.1.0+git"

# Where the sources come from: one pinned commit of the latmon repository,
# so that a build is reproducible and parsing never runs git (an AUTOREV
# would ask the repository at every parse, and fail the parse of the whole
# build wherever the layer was copied without it). SRCREV_latmon is bumped
# with every release, and whenever Cargo.lock changes: latmon-crates.inc
# lists the crates of the pinned commit's Cargo.lock (tests/yocto/checks.py
# srcrev checks both). The repository is by default the git checkout this
# layer is part of (this file is <checkout>/yocto/meta-latmon/recipes-support/
# latmon/latmon_git.bb); only do_fetch reads it, with nobranch=1 so that any
# clone holding the commit will do (a detached HEAD, no local "main").
#   another clone:        LATMON_GIT_PATH = "git.example.com/latmon.git"
#                         LATMON_GIT_PARAMS = "protocol=https;nobranch=1"
#   a branch's newest:    LATMON_GIT_PARAMS = "protocol=https;branch=main"
#                         SRCREV_latmon = "${AUTOREV}"
#   the checkout as is:   INHERIT += "externalsrc"
#   (uncommitted too)     EXTERNALSRC:pn-latmon = "/path/to/latmon"
LATMON_SRC_DIR := "${@os.path.normpath(os.path.join(d.getVar('THISDIR'), '..', '..', '..', '..'))}"
LATMON_GIT_PATH ??= "${LATMON_SRC_DIR}"
LATMON_GIT_PARAMS ??= "protocol=file;nobranch=1"

SRC_URI = "\
    git://${LATMON_GIT_PATH};${LATMON_GIT_PARAMS};name=latmon \
    file://latmon.service \
    file://latmon.init \
    file://latmon-service-files.sh \
"
require ${BPN}-crates.inc

SRCREV_latmon ??= "f6bb3023229451fb27021e0bb55c93888bfbccf3"
SRCREV_FORMAT = "latmon"

inherit cargo cargo-update-recipe-crates pkgconfig systemd update-rc.d

# The board config installed as /etc/latmon/latmon.toml: a file of the
# source tree's board-configs/ (raspberrypi4-64-rt, imx8mp, beaglebone-black,
# x86_64-generic, qemu-arm64-rt, ...), or LATMON_BOARD_CONFIG_FILE for one of
# your own (e.g. file://my-robot.toml in a bbappend's SRC_URI, and
# LATMON_BOARD_CONFIG_FILE = "${UNPACKDIR}/my-robot.toml").
LATMON_BOARD_CONFIG ??= "qemu-arm64-rt"
LATMON_BOARD_CONFIG_FILE ??= "${S}/board-configs/${LATMON_BOARD_CONFIG}.toml"
# The service's CapabilityBoundingSet (see files/latmon.service). Kernels
# older than 5.8 have no CAP_BPF/CAP_PERFMON: use "CAP_SYS_ADMIN" there.
LATMON_CAPABILITIES ??= "CAP_BPF CAP_PERFMON"

# The BPF compiler, and its debug paths mapped like every C file of the
# build (build.rs already maps the source tree to "."), so no build path
# ends up in the BPF objects embedded in the binary (buildpaths QA).
export CLANG = "${STAGING_BINDIR_NATIVE}/clang"
export LATMON_BPF_CFLAGS = "${DEBUG_PREFIX_MAP}"
# libbpf-sys compiles its vendored C sources inside the vendored crate, in
# cargo's home under UNPACKDIR, outside S and B: map that too. Not through
# DEBUG_PREFIX_MAP_EXTRA, which rust-common.bbclass empties for gcc
# toolchains after the recipe has set it; prepended, like the EXTRA part
# would be, because gcc applies the maps last to first: S's own map (under
# UNPACKDIR) keeps precedence.
DEBUG_PREFIX_MAP:prepend = "-ffile-prefix-map=${UNPACKDIR}=${TARGET_DBGSRC_DIR} "
# 32-bit targets (armv7) regenerate libbpf-sys' bindings with bindgen, which
# loads clang-native's libclang and parses libbpf's headers for the target.
export LIBCLANG_PATH = "${STAGING_LIBDIR_NATIVE}"
export BINDGEN_EXTRA_CLANG_ARGS = "--sysroot=${STAGING_DIR_HOST} ${TUNE_CCARGS}"
# Cargo.toml's release profile strips the binary; leave that to packaging
# (debug info split into latmon-dbg; the already-stripped QA check).
export CARGO_PROFILE_RELEASE_STRIP = "false"

do_install:append() {
    cfg="${LATMON_BOARD_CONFIG_FILE}"
    if [ ! -f "$cfg" ]; then
        bbfatal "latmon: board config $cfg not found (LATMON_BOARD_CONFIG = '${LATMON_BOARD_CONFIG}'; board-configs/ has: $(cd ${S}/board-configs && echo *.toml))"
    fi
    install -d ${D}${sysconfdir}/latmon
    install -m 0644 "$cfg" ${D}${sysconfdir}/latmon/latmon.toml

    # The service files, with the link UART and housekeeping CPUs of the
    # config filled in.
    install -d ${B}/service
    sh ${UNPACKDIR}/latmon-service-files.sh "$cfg" ${UNPACKDIR} ${B}/service \
        ${bindir} ${sysconfdir} "${LATMON_CAPABILITIES}" > ${B}/service/facts
    bbnote "latmon: ${LATMON_BOARD_CONFIG}: $(tr '\n' ' ' < ${B}/service/facts)"
    if ${@bb.utils.contains('DISTRO_FEATURES', 'systemd', 'true', 'false', d)}; then
        install -D -m 0644 ${B}/service/latmon.service ${D}${systemd_system_unitdir}/latmon.service
    fi
    if ${@bb.utils.contains('DISTRO_FEATURES', 'sysvinit', 'true', 'false', d)}; then
        install -D -m 0755 ${B}/service/latmon.init ${D}${sysconfdir}/init.d/latmon
    fi
}

# The config and the service files differ per board (LATMON_BOARD_CONFIG).
PACKAGE_ARCH = "${MACHINE_ARCH}"

CONFFILES:${PN} = "${sysconfdir}/latmon/latmon.toml"
# The sysvinit script pins the agent to the housekeeping CPUs with taskset.
RRECOMMENDS:${PN} += "${@bb.utils.contains('DISTRO_FEATURES', 'sysvinit', 'util-linux-taskset', '', d)}"

SYSTEMD_SERVICE:${PN} = "latmon.service"
INITSCRIPT_NAME = "latmon"
INITSCRIPT_PARAMS = "defaults 90 10"
CVE_PRODUCT = "latmon"
