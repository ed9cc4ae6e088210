# SPDX-License-Identifier: MIT
"""A PLC stand-in for the Modbus tests: pymodbus reads latmon's register
map (docs/modbus-map.md) and prints what it decoded as JSON. The decoding
of 32/64-bit values is pymodbus's own (convert_from_registers, big word
order), not latmon's.

  pyclient.py read  (--tcp HOST PORT | --rtu PATH BAUD PARITY) [--unit N] [--blocks N]
  pyclient.py exceptions --tcp HOST PORT
  pyclient.py cycles --tcp HOST PORT N
  pyclient.py loops --tcp HOST PORT [--blocks N]
"""
import argparse
import json
import sys

from pymodbus.client import ModbusSerialClient, ModbusTcpClient

HEADER = 32
BLOCK = 40
U16, U32, U64 = "u16", "u32", "u64"
HEADER_FIELDS = [
    (0, "magic", U16), (1, "version", U16), (2, "probe_count", U16), (3, "block_size", U16),
    (4, "first_block", U16), (5, "status", U16), (6, "boot_id", U32), (8, "seq", U64),
    (12, "interval_us", U32), (14, "uptime_s", U32), (16, "attached", U16), (17, "failed", U16),
    (18, "read_errors", U32), (20, "bad_requests", U32),
]
BLOCK_FIELDS = [
    (0, "state", U16), (1, "mechanism", U16), (2, "kind", U16), (3, "index", U16),
    (4, "total_count", U64), (8, "count", U32), (10, "p50_us", U32), (12, "p90_us", U32),
    (14, "p99_us", U32), (16, "p999_us", U32), (18, "max_us", U32), (20, "alerts", U32),
    (22, "drops", U32), (24, "min_us", U32), (26, "mean_us", U32), (28, "total_alerts", U32),
    (30, "total_drops", U32),
]
LOOPS = 45056
LOOPS_HEADER_FIELDS = [
    (0, "listed", U16), (1, "watched", U16), (2, "blocks", U16), (3, "block_size", U16),
    (4, "first_block", U16), (5, "unwatched", U16), (6, "unlisted", U16), (7, "capacity", U16),
]
LOOP_FIELDS = [
    (0, "tid", U32), (2, "pid", U32), (4, "policy", U16), (5, "prio", U16), (6, "period_us", U32),
    (8, "period_source", U16), (9, "counted", U16), (10, "total_cycles", U64), (14, "cycles", U32),
    (16, "misses", U32), (18, "total_misses", U32), (20, "total_overruns", U32), (22, "total_rules", U32),
    (24, "cycle_period_us", U32), (26, "reserved0", U32), (28, "reserved1", U32), (30, "reserved2", U32),
]


def client_from(a):
    if a.tcp:
        c = ModbusTcpClient(a.tcp[0], port=int(a.tcp[1]), timeout=2, retries=0)
    else:
        path, baud, parity = a.rtu
        c = ModbusSerialClient(port=path, baudrate=int(baud), parity=parity, stopbits=1, bytesize=8,
                               timeout=1, retries=0)
    if not c.connect():
        sys.exit("cannot connect")
    return c


def decode(c, regs, fields, base):
    out = {}
    for off, name, kind in fields:
        at = base + off
        if kind == U16:
            out[name] = regs[at]
        elif kind == U32:
            out[name] = c.convert_from_registers(regs[at:at + 2], c.DATATYPE.UINT32, word_order="big")
        else:
            out[name] = c.convert_from_registers(regs[at:at + 4], c.DATATYPE.UINT64, word_order="big")
    return out


def read_map(c, fn, unit, blocks):
    n = HEADER + blocks * BLOCK
    r = fn(0, count=n, device_id=unit)
    if r.isError():
        sys.exit(f"read failed: {r}")
    regs = r.registers
    out = decode(c, regs, HEADER_FIELDS, 0)
    out["blocks"] = []
    for i in range(blocks):
        base = HEADER + i * BLOCK
        b = decode(c, regs, BLOCK_FIELDS, base)
        name = c.convert_from_registers(regs[base + 32:base + 40], c.DATATYPE.STRING)
        b["name"] = name.rstrip("\x00")
        out["blocks"].append(b)
    return out


def cmd_read(a):
    c = client_from(a)
    # FC04 then FC03: the same image, so the same values when both land in
    # one interval (retried until they do).
    for _ in range(5):
        inp = read_map(c, c.read_input_registers, a.unit, a.blocks)
        hold = read_map(c, c.read_holding_registers, a.unit, a.blocks)
        if inp["seq"] == hold["seq"]:
            break
    c.close()
    print(json.dumps({"input": inp, "holding": hold}))


def seq_of(c):
    r = c.read_input_registers(8, count=4, device_id=1)
    if r.isError():
        sys.exit(f"read failed: {r}")
    return c.convert_from_registers(r.registers, c.DATATYPE.UINT64, word_order="big")


def cmd_loops(a):
    # The loops area and the header's sequence number are separate
    # requests: the area is from interval S when S is read before and
    # after it (the image only moves forward). Its header and the first
    # two blocks come in one request (88 registers), further blocks three
    # a request (125 at most); the layout is the area's own header's.
    c = client_from(a)
    for _ in range(10):
        before = seq_of(c)
        regs = []
        while len(regs) < 8 + 40 * a.blocks:
            count = min(8 + 40 * a.blocks - len(regs), 88 if not regs else 120)
            r = c.read_input_registers(LOOPS + len(regs), count=count, device_id=1)
            if r.isError():
                sys.exit(f"read failed: {r}")
            regs += r.registers
        if seq_of(c) == before:
            break
    else:
        sys.exit("ten reads straddled an interval each")
    out = decode(c, regs, LOOPS_HEADER_FIELDS, 0)
    out["seq"] = before
    out["loops"] = []
    for i in range(a.blocks):
        base = out["first_block"] - LOOPS + i * out["block_size"]
        b = decode(c, regs, LOOP_FIELDS, base)
        b["comm"] = c.convert_from_registers(regs[base + 32:base + 40], c.DATATYPE.STRING).rstrip("\x00")
        out["loops"].append(b)
    c.close()
    print(json.dumps(out))


def exc(r):
    if r.isError():
        return getattr(r, "exception_code", str(r))
    return "ok"


def cmd_exceptions(a):
    c = client_from(a)
    out = {
        "write_register": exc(c.write_register(0, 7, device_id=1)),
        "write_registers": exc(c.write_registers(8, [1, 2, 3], device_id=1)),
        "write_coil": exc(c.write_coil(0, True, device_id=1)),
        "write_coils": exc(c.write_coils(0, [True, False], device_id=1)),
        "read_coils": exc(c.read_coils(0, count=8, device_id=1)),
        "read_discrete_inputs": exc(c.read_discrete_inputs(0, count=8, device_id=1)),
        "input_out_of_range": exc(c.read_input_registers(60000, count=2, device_id=1)),
        "holding_past_end": exc(c.read_holding_registers(0, count=125, device_id=1)),
        "mask_write_register": exc(c.mask_write_register(address=0, and_mask=0, or_mask=1, device_id=1)),
        "readwrite_registers": exc(c.readwrite_registers(read_address=0, read_count=2, write_address=0,
                                                         values=[1], device_id=1)),
        "header_after": exc(c.read_input_registers(0, count=2, device_id=1)),
    }
    c.close()
    print(json.dumps(out))


def cmd_cycles(a):
    ok = 0
    for _ in range(a.n):
        c = client_from(a)
        r = c.read_input_registers(0, count=2, device_id=1)
        if not r.isError() and r.registers == [0x4C4D, 1]:
            ok += 1
        c.close()
    print(json.dumps({"cycles": a.n, "ok": ok}))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("cmd", choices=["read", "exceptions", "cycles", "loops"])
    p.add_argument("n", nargs="?", type=int, default=0)
    p.add_argument("--tcp", nargs=2, metavar=("HOST", "PORT"))
    p.add_argument("--rtu", nargs=3, metavar=("PATH", "BAUD", "PARITY"))
    p.add_argument("--unit", type=int, default=1)
    p.add_argument("--blocks", type=int, default=1)
    a = p.parse_args()
    {"read": cmd_read, "exceptions": cmd_exceptions, "cycles": cmd_cycles, "loops": cmd_loops}[a.cmd](a)


if __name__ == "__main__":
    main()
