#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Kernel splats (tests/kernel-splats.txt) in a console log or in the
kernel's log since a mark.

  splats.py FILE            the splat lines of FILE (a board's console)
  splats.py --kmsg-mark     prints the sequence number of the last record
                            in /dev/kmsg now
  splats.py --kmsg-since N  the splat lines among /dev/kmsg's records
                            after sequence number N
Prints each splat line as `splat: LINE`; exit 1 if there is any (or, with
--kmsg-since, if records after N were overwritten before they were read:
then no one can say the window was clean), else 0.
--ignore TEXT (repeatable): lines holding TEXT are not splats (the live
guard's own negative control, tests/live/kmsg_guard.rs, writes such a line
on purpose).
"""
import errno
import os
import re
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_PATTERNS = os.path.join(_HERE, "..", "kernel-splats.txt")


def patterns():
    with open(_PATTERNS, encoding="utf-8") as f:
        return [l.rstrip("\n") for l in f if l.strip() and not l.startswith("#")]


_RE = None


def is_splat(line):
    global _RE
    if _RE is None:
        _RE = re.compile("|".join(f"(?<![A-Za-z0-9_]){re.escape(p)}" for p in patterns()))
    return _RE.search(line) is not None


def splat_lines(text, ignore=()):
    """The lines of `text` that hold a splat pattern (and none of `ignore`)."""
    return [l.rstrip("\r") for l in text.splitlines() if is_splat(l) and not any(i in l for i in ignore)]


def kmsg_records():
    """(seq, message) of every record /dev/kmsg holds now, and whether
    some were overwritten while reading (EPIPE)."""
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    out, lost = [], False
    try:
        while True:
            try:
                rec = os.read(fd, 8192).decode("utf-8", "replace")
            except OSError as e:
                if e.errno == errno.EAGAIN:
                    break
                if e.errno == errno.EPIPE:
                    lost = True
                    continue
                raise
            head, _, msg = rec.partition(";")
            out.append((int(head.split(",")[1]), msg.split("\n")[0]))
    finally:
        os.close(fd)
    return out, lost


def main(argv):
    ignore = []
    args = []
    it = iter(argv)
    for a in it:
        if a == "--ignore":
            ignore.append(next(it))
        else:
            args.append(a)
    if args[:1] == ["--kmsg-mark"]:
        recs, _ = kmsg_records()
        print(recs[-1][0] if recs else -1)
        return 0
    if args[:1] == ["--kmsg-since"]:
        mark = int(args[1])
        recs, lost = kmsg_records()
        after = [(s, m) for s, m in recs if s > mark]
        # The first record kept after the mark is not the next one: the
        # ring buffer overwrote some before this read.
        gap = bool(recs) and recs[0][0] > mark + 1
        bad = splat_lines("\n".join(m for _, m in after), ignore)
        for l in bad:
            print(f"splat: {l}")
        if gap or (lost and mark >= 0):
            print(f"splat: kernel log records after {mark} were overwritten before they were read "
                  f"(first kept: {recs[0][0] if recs else '?'}): the window cannot be shown clean")
            return 1
        return 1 if bad else 0
    with open(args[0], encoding="utf-8", errors="replace") as f:
        bad = splat_lines(f.read(), ignore)
    for l in bad:
        print(f"splat: {l}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
