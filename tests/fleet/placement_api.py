# SPDX-License-Identifier: GPL-2.0-or-later
#
# placement_api: what the fleet tests share: one real placement-api process (python3-placement,
# sqlite, noauth2) on a free loopback port, started and stopped by pid, a small client of its
# API with the admin token noauth2 expects, and an HTTP front a test can put before it.
import http.server
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import urllib.error
import urllib.request

from vgpud_instances import make_images
from vgpud_test import exit_status, finish, free_port, ok, poll


class Placement:
    """One placement-api process (sqlite allows one) on a free loopback port."""

    def __init__(self, work):
        self.dir = os.path.join(work, "placement")
        os.makedirs(self.dir, exist_ok=True)
        self.conf = os.path.join(self.dir, "placement.conf")
        with open(self.conf, "w") as f:
            f.write("[DEFAULT]\ndebug = false\n[api]\nauth_strategy = noauth2\n"
                    "[placement_database]\nconnection = sqlite:///%s/placement.db\n" % self.dir)
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.proc = None
        self.log = None

    def db_sync(self):
        p = subprocess.run(["placement-manage", "--config-file", self.conf, "db", "sync"],
                           capture_output=True, text=True, timeout=120)
        return p.returncode == 0, p.stderr[-2000:]

    def start(self):
        env = dict(os.environ, OS_PLACEMENT_CONFIG_DIR=self.dir)
        self.log = open(os.path.join(self.dir, "api.log"), "a")
        self.proc = subprocess.Popen(["placement-api", "--port", str(self.port), "--host",
                                      "127.0.0.1"], stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, env=env, start_new_session=True)
        return poll(lambda: self.proc.poll() is None and self.root() is not None, 60, 0.2)

    def root(self):
        try:
            with urllib.request.urlopen(self.url + "/", timeout=2) as r:
                return json.load(r)
        except (OSError, ValueError):
            return None

    def stop(self):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None
        if self.log:
            self.log.close()
            self.log = None

    def call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method, headers={
            "X-Auth-Token": "admin", "OpenStack-API-Version": "placement 1.39",
            "Accept": "application/json", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                text = r.read()
                return r.status, json.loads(text) if text else None
        except urllib.error.HTTPError as e:
            text = e.read()
            return e.code, json.loads(text) if text else None

    def get(self, path):
        st, b = self.call("GET", path)
        return b if st == 200 else None

    def tree(self, root):
        b = self.get("/resource_providers?in_tree=" + root)
        return sorted(b["resource_providers"], key=lambda p: p["name"]) if b else []

    def inventories(self, uuid):
        b = self.get("/resource_providers/%s/inventories" % uuid)
        return b["inventories"] if b else None

    def traits(self, uuid):
        b = self.get("/resource_providers/%s/traits" % uuid)
        return set(b["traits"]) if b else None


def start_checked(work, cls=Placement):
    """(placement, ready): a cls (Placement or a test's subclass) started for a test, each step
    a TAP check. python3-placement missing is a failure, not a skip: scripts/deps.sh installs
    it, and FLEET-8 must run. The caller stops it (when not None) whatever happens."""
    if not ok(bool(shutil.which("placement-api") and shutil.which("placement-manage")),
              "python3-placement is installed (scripts/deps.sh)"):
        return None, False
    p = cls(work)
    synced, err = p.db_sync()
    ready = ok(synced, "placement-manage db sync", err) and \
        ok(p.start(), "placement-api answers GET / on loopback")
    return p, ready



class Front:
    """An HTTP server on a free loopback port before a placement-api at backend. Every request
    goes to route(), which forwards it with noauth2's admin token; a test overrides route() to
    answer some requests itself. close() stops it."""

    def __init__(self, backend):
        self.backend = backend
        front = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def reply(self, status, body=b"", headers=()):
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def handle_any(self):
                n = int(self.headers.get("Content-Length") or 0)
                front.route(self, self.rfile.read(n) if n else None)

            do_GET = do_POST = do_PUT = do_DELETE = handle_any

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def route(self, handler, data):
        self.forward(handler, handler.path, data)

    def forward(self, handler, path, data):
        """The request to placement-api at path, and its answer back to the client."""
        headers = {k: v for k, v in handler.headers.items()
                   if k.lower() in ("content-type", "accept", "openstack-api-version")}
        headers["X-Auth-Token"] = "admin"
        req = urllib.request.Request(self.backend + path, data=data, method=handler.command,
                                     headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                handler.reply(r.status, r.read(), [("Content-Type", "application/json")])
        except urllib.error.HTTPError as e:
            handler.reply(e.code, e.read(), [("Content-Type", "application/json")])

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def run_fronted(prefix, front_cls, body):
    """The frame of a test with a front: a work directory, placement-api with a front_cls
    before it, body(work, placement, front, daemons), and everything stopped whatever
    happens. Returns the exit status."""
    work = tempfile.mkdtemp(prefix=prefix)
    daemons, p, front = [], None, None
    try:
        p, ready = start_checked(work)
        if ready:
            front = front_cls(p.url)
            make_images()
            body(work, p, front, daemons)
    finally:
        if front:
            front.close()
        if p:
            p.stop()
        finish(daemons, work)
    return exit_status()
