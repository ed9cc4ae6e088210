#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Host side of a virtual board's UART receive traffic: qemu reads the
guest console UART's input from FIFO (`-chardev file,...,input-path=FIFO`).
Waits for the guest's console line `=== rx-go N GAP_MS` in CONSOLE_LOG,
then writes N bytes into the FIFO one at a time, GAP_MS apart (each byte
arrives in an empty receive FIFO: one receive interrupt), and says on
stderr what it wrote. Exits when the console says `=== done` or after
TIMEOUT seconds.

usage: uart-feed.py CONSOLE_LOG FIFO [TIMEOUT_S]
LATMON_BOARD_FEED=off: answer every rx-go with no bytes (the negative
control: the checks that need the traffic must then fail).
"""
import os
import re
import sys
import time

console, fifo = sys.argv[1:3]
timeout = float(sys.argv[3]) if len(sys.argv) > 3 else 600
# O_RDWR: never blocks on a FIFO (qemu may open its end later), and qemu
# sees no end of file between bursts.
fd = os.open(fifo, os.O_RDWR)
t_end = time.monotonic() + timeout
seen = 0
feed = os.environ.get("LATMON_BOARD_FEED", "on") != "off"
while time.monotonic() < t_end:
    try:
        text = open(console, encoding="utf-8", errors="replace").read()
    except FileNotFoundError:
        text = ""
    # Complete lines only: a line read while qemu was still writing it
    # ("=== rx-go 20") must not be taken, and then taken again whole.
    complete = text[:text.rfind("\n") + 1]
    for m in re.finditer(r"^=== rx-go (\d+) (\d+)\r?$", complete[seen:], re.M):
        n, gap = int(m.group(1)), int(m.group(2)) / 1000
        if not feed:
            print(f"uart-feed: LATMON_BOARD_FEED=off: wrote none of the {n} bytes asked for", file=sys.stderr)
            continue
        t0 = time.monotonic()
        for i in range(n):
            os.write(fd, b"%c" % (0x41 + i % 26))
            time.sleep(gap)
        print(f"uart-feed: wrote {n} bytes, {gap * 1000:.0f} ms apart, in {time.monotonic() - t0:.1f} s",
              file=sys.stderr)
    if "=== done" in text:
        break
    # Only look at new complete lines next time.
    seen = max(seen, len(complete))
    time.sleep(0.05)
