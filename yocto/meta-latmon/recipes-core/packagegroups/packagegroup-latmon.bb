# SPDX-License-Identifier: MIT
SUMMARY = "latmon and the tools to exercise it on a board"
DESCRIPTION = "The latmon agent with its service and board config, and \
               rt-tests (cyclictest, hackbench) to load a real-time board \
               while latmon measures."

SECTION = "utils"

inherit packagegroup

RDEPENDS:${PN} = "\
    latmon \
    rt-tests \
"
