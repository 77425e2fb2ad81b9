# SPDX-License-Identifier: GPL-2.0-or-later
#
# vgpud_pty: a program on a pseudo-terminal, as an operator's terminal runs it, for the
# console tests of `vgpuctl instances console --attach` (CONS-4): what it writes, what is
# typed, and the terminal's modes before, during and after.
import os
import pty
import select
import subprocess
import termios
import time


class Pty:
    """vgpuctl on a pty, as an operator's terminal would run it."""

    def __init__(self, argv):
        self.master, self.slave = pty.openpty()
        self.before = termios.tcgetattr(self.slave)
        self.p = subprocess.Popen(argv, stdin=self.slave, stdout=self.slave,
                                  stderr=self.slave, start_new_session=True, close_fds=True)
        self.out = b""

    def read_until(self, want, timeout=10):
        deadline = time.monotonic() + timeout
        while want not in self.out and time.monotonic() < deadline:
            r, _, _ = select.select([self.master], [], [], 0.1)
            if r:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                self.out += chunk
        return want in self.out

    def type(self, data):
        os.write(self.master, data)

    def wait(self, timeout=10):
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            return None

    def raw_now(self):
        a = termios.tcgetattr(self.slave)
        return not (a[3] & (termios.ICANON | termios.ECHO))

    def restored(self):
        return termios.tcgetattr(self.slave) == self.before

    def close(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        for fd in (self.master, self.slave):
            try:
                os.close(fd)
            except OSError:
                pass
