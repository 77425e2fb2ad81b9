# SPDX-License-Identifier: GPL-2.0-or-later
#
# vgpud_ws: a small RFC 6455 client for the console tests (CONS-3), written from the RFC so
# that a test can also send what no library would: unmasked, oversized, text and reserved
# frames. Frames from the server are read strictly: unmasked, minimal lengths.
import base64
import hashlib
import os
import socket
import struct

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
SUBPROTOCOL = "vgpud.console.v1"

OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0, 1, 2, 8, 9, 10


def frame(opcode, payload=b"", fin=True, mask=True, rsv=0, length=None):
    """One frame; length overrides the header's length (a lie for hostile tests)."""
    n = len(payload) if length is None else length
    head = bytes([(0x80 if fin else 0) | (rsv << 4) | opcode])
    m = 0x80 if mask else 0
    if n < 126:
        head += bytes([m | n])
    elif n <= 0xFFFF:
        head += bytes([m | 126]) + struct.pack(">H", n)
    else:
        head += bytes([m | 127]) + struct.pack(">Q", n)
    if not mask:
        return head + payload
    key = os.urandom(4)
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


class Closed(Exception):
    def __init__(self, code, reason):
        super().__init__("closed %s %r" % (code, reason))
        self.code, self.reason = code, reason


class WebSocket:
    """Connects to the API (Unix socket or TCP) and upgrades GET path; status and headers of the
    answer are kept; .ok says whether it was 101."""

    def __init__(self, path, unix_path=None, port=None, token=None, protocols=(SUBPROTOCOL,),
                 headers=None, timeout=10, version="13"):
        if unix_path:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(unix_path)
        else:
            self.sock = socket.create_connection(("127.0.0.1", port), timeout)
        self.key = base64.b64encode(os.urandom(16)).decode()
        lines = ["GET %s HTTP/1.1" % path, "Host: localhost", "Upgrade: websocket",
                 "Connection: Upgrade", "Sec-WebSocket-Key: " + self.key,
                 "Sec-WebSocket-Version: " + version]
        if protocols:
            lines.append("Sec-WebSocket-Protocol: " + ", ".join(protocols))
        if token:
            lines.append("Authorization: Bearer " + token)
        for k, v in (headers or {}).items():
            lines.append("%s: %s" % (k, v))
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(4096)
            if not chunk:
                break
            self.buf += chunk
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.decode(errors="replace").split("\r\n")
        self.status = int(lines[0].split()[1]) if lines and len(lines[0].split()) > 1 else 0
        self.headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            self.headers[k.strip().lower()] = v.strip()
        self.ok = self.status == 101
        self.body = b""
        if not self.ok:
            n = int(self.headers.get("content-length", "0"))
            while len(self.buf) < n:
                chunk = self.sock.recv(4096)
                if not chunk:
                    break
                self.buf += chunk
            self.body, self.buf = self.buf[:n], self.buf[n:]

    def accept_ok(self):
        want = base64.b64encode(hashlib.sha1(self.key.encode() + GUID).digest()).decode()
        return self.headers.get("sec-websocket-accept") == want

    def send(self, data, opcode=OP_BINARY):
        self.sock.sendall(frame(opcode, data))

    def send_raw(self, data):
        self.sock.sendall(data)

    def _need(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise Closed(None, "connection closed")
            self.buf += chunk

    def recv_frame(self):
        """(opcode, payload) of the next frame, strictly as a client must read it."""
        self._need(2)
        b0, b1 = self.buf[0], self.buf[1]
        assert b1 & 0x80 == 0, "server frame masked"
        assert b0 & 0x70 == 0, "reserved bits"
        n, pos = b1 & 0x7F, 2
        if n == 126:
            self._need(4)
            n, pos = struct.unpack(">H", self.buf[2:4])[0], 4
        elif n == 127:
            self._need(10)
            n, pos = struct.unpack(">Q", self.buf[2:10])[0], 10
        self._need(pos + n)
        payload, self.buf = self.buf[pos:pos + n], self.buf[pos + n:]
        return b0 & 0x0F, payload

    def recv_data(self, answer_pings=True):
        """The next binary payload; pings are answered; a close raises Closed(code, reason)."""
        while True:
            op, payload = self.recv_frame()
            if op == OP_PING:
                if answer_pings:
                    self.sock.sendall(frame(OP_PONG, payload))
                continue
            if op == OP_PONG:
                continue
            if op == OP_CLOSE:
                code = struct.unpack(">H", payload[:2])[0] if len(payload) >= 2 else None
                raise Closed(code, payload[2:].decode(errors="replace"))
            return payload

    def read_until(self, want, limit=1 << 20):
        got = b""
        while want not in got and len(got) < limit:
            got += self.recv_data()
        return got

    def close_code(self):
        """Reads to the server's close frame: its code (None when the connection just ends)."""
        try:
            while True:
                self.recv_data()
        except Closed as e:
            return e.code
        except OSError:
            return None

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
