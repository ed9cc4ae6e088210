# SPDX-License-Identifier: MIT
SUMMARY = "Test image for latmon"
DESCRIPTION = "A minimal image with latmon, its service and board config, \
               rt-tests and an SSH server, on a kernel built with the latmon \
               kernel feature (DISTRO_FEATURES latmon)."
SECTION = "images"
LICENSE = "MIT"

inherit core-image features_check

REQUIRED_DISTRO_FEATURES = "latmon"

IMAGE_FEATURES += "ssh-server-dropbear"
IMAGE_INSTALL = "\
    packagegroup-core-boot \
    packagegroup-latmon \
    ${CORE_IMAGE_EXTRA_INSTALL} \
"
