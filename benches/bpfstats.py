#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Benchmark helper: per-process BPF program run statistics.

Programs are attributed to a tool by the bpf-prog fds its process holds
(/proc/PID/fdinfo), and costed with the kernel's own counters
(kernel.bpf_stats_enabled: run_time_ns / run_cnt per program, from
`bpftool prog show --json`).
"""
import json
import os
import subprocess
import sys


def prog_ids(pid):
    ids = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") != "anon_inode:bpf-prog":
                continue
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                for line in f:
                    if line.startswith("prog_id:"):
                        ids.add(int(line.split()[1]))
        except OSError:
            pass
    return ids


def stats(ids):
    out = subprocess.run(["bpftool", "prog", "show", "--json"], check=True, capture_output=True).stdout
    return {p["id"]: (p.get("name", "?"), p.get("run_time_ns", 0), p.get("run_cnt", 0))
            for p in json.loads(out) if p["id"] in ids}


if __name__ == "__main__":
    cmd, pid = sys.argv[1], int(sys.argv[2])
    ids = prog_ids(pid)
    if not ids:
        sys.exit(f"bpfstats: process {pid} holds no BPF programs")
    print(json.dumps({str(k): v for k, v in stats(ids).items()}))
