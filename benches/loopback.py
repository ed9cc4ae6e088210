#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Network softirq load: push MB megabytes through a loopback TCP connection
in 1 KiB writes (NET_RX / NET_TX softirqs).  usage: loopback.py [MB]"""
import socket
import sys
import threading

mb = int(sys.argv[1]) if len(sys.argv) > 1 else 100
total = mb << 20
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(1)


def sink():
    conn, _ = srv.accept()
    got = 0
    while got < total:
        got += len(conn.recv(65536))


t = threading.Thread(target=sink)
t.start()
c = socket.create_connection(srv.getsockname())
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
chunk = b"x" * 1024
for _ in range(total // len(chunk)):
    c.sendall(chunk)
t.join()
