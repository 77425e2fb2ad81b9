#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-fleet-keystone.py VGPUD OPENAPI_YAML FAKE_NVML FAKE_QEMU
#
# FLEET-1's Keystone half. No real Keystone runs here, so a small stub plays it: it issues
# tokens for one application credential (POST /identity/v3/auth/tokens, X-Subject-Token and
# token.expires_at) and stands in front of a real placement-api (noauth2) at /placement, letting
# a request through only with a live token it issued (else 401). Checked: the credential and
# the login exchange, the token on every Placement request, its renewal before expires_at, a
# revoked token renewed after one 401, and the secret file's mode rules (API-14) at start-up.
# Runs under tests/sim/run-sim-test.sh.
import datetime
import json
import os
import sys
import threading
import uuid

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import placement_api  # noqa: E402
from vgpud_instances import MIXED_PF, vmm_config  # noqa: E402
from vgpud_test import (  # noqa: E402
    Daemon, ok, poll, run_group, start, stop, write_secret)

HOST = "fleet-ks-1"
ROOT_UUID = str(uuid.uuid5(uuid.NAMESPACE_URL, "vgpud:" + HOST))
CRED_ID, CRED_SECRET = "app-cred-0123", "s3cret-of-the-credential"
LIFETIME = 15  # seconds: vgpud renews such a token 10 s before it ends


class Stub(placement_api.Front):
    """The Keystone stand-in and the token-checking front of placement-api."""

    def __init__(self, backend):
        self.lock = threading.Lock()
        self.tokens = {}  # token -> expiry (UTC datetime)
        self.logins = []  # the credential each login used
        self.refused = 0  # Placement requests answered 401
        self.expired_used = 0  # requests with a token past its expires_at
        self.forwarded = 0
        super().__init__(backend)

    def route(self, handler, data):
        if handler.path == "/identity/v3/auth/tokens" and handler.command == "POST":
            return self.login(handler, data)
        if handler.path.startswith("/placement"):
            return self.check_token(handler, data)
        handler.reply(404)

    def login(self, handler, data):
        try:
            ident = json.loads(data)["auth"]["identity"]
            cred = ident["application_credential"]
            good = (ident["methods"] == ["application_credential"] and
                    cred["id"] == CRED_ID and cred["secret"] == CRED_SECRET)
        except (ValueError, KeyError, TypeError):
            cred, good = None, False
        with self.lock:
            self.logins.append(cred)
        if not good:
            return handler.reply(401)
        token = "tok-" + uuid.uuid4().hex
        exp = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=LIFETIME)
        with self.lock:
            self.tokens[token] = exp
        body = json.dumps({"token": {"expires_at": exp.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                                     "methods": ["application_credential"]}}).encode()
        handler.reply(201, body, [("X-Subject-Token", token),
                                  ("Content-Type", "application/json")])

    def check_token(self, handler, data):
        token = handler.headers.get("X-Auth-Token")
        now = datetime.datetime.now(datetime.timezone.utc)
        with self.lock:
            exp = self.tokens.get(token)
            if exp is not None and exp <= now:
                self.expired_used += 1
            live = exp is not None and exp > now
            if not live:
                self.refused += 1
            else:
                self.forwarded += 1
        if not live:
            return handler.reply(401, b'{"error": "unauthorized"}')
        self.forward(handler, handler.path[len("/placement"):] or "/", data)

    def revoke_all(self):
        with self.lock:
            self.tokens.clear()


def write_cred_secret(work, mode):
    path = os.path.join(work, "placement.secret")
    with open(path, "w") as f:
        f.write(CRED_SECRET + "\n")
    os.chmod(path, mode)
    return path


def keystone_config(work, stub, secret_file):
    config = vmm_config(os.path.join(work, "vgpud.yaml"), work, reconcile="5s")
    with open(config, "a") as f:
        f.write("""placement:
  url: "%s/placement"
  auth: keystone
  host_name: %s
  sync_interval: 5s
  keystone:
    auth_url: "%s/identity"
    application_credential_id: %s
    application_credential_secret_file: %s
""" % (stub.url, HOST, stub.url, CRED_ID, secret_file))
    return config


def check_bad_secret(work, stub):
    # FLEET-1, API-14: a secret file readable by others stops start-up with its reason.
    write_secret(work)  # the JWT secret, checked before
    secret_file = write_cred_secret(work, 0o644)
    config = keystone_config(work, stub, secret_file)
    d = Daemon(work, "bad-secret", config)
    rc = d.stop(timeout=20) if poll(lambda: not d.alive(), 20, 0.1) else d.stop()
    ok(rc != 0 and "application_credential_secret_file %s: mode 0644 gives group or other "
       "access" % secret_file in d.log_text(),
       "FLEET-1, API-14: a group- or other-readable secret file stops start-up", d.log_text())
    os.chmod(secret_file, 0o600)


def check_tokens(work, stub, p, daemons):
    config = keystone_config(work, stub, write_cred_secret(work, 0o600))
    secret = write_secret(work)
    sock = os.path.join(work, "api.sock")
    d, c = start(work, "keystone", config, secret, sock)
    daemons.append(d)
    if not c:
        return
    ok(poll(lambda: len(p.tree(ROOT_UUID)) == 3, 40, 0.2),
       "FLEET-2: the providers are created through the token-checking front", p.tree(ROOT_UUID))
    ok(stub.logins and stub.logins[0] == {"id": CRED_ID, "secret": CRED_SECRET},
       "FLEET-1: vgpud logs in with the application credential from the secret file",
       stub.logins[:1])
    # Renewal before expires_at: the full check runs every 5 s, the token lives 15 s.
    ok(poll(lambda: len(stub.logins) >= 3, 60, 0.2),
       "FLEET-1: the token is renewed before it expires", len(stub.logins))
    ok(stub.expired_used == 0, "FLEET-1: no request ever carries an expired token",
       stub.expired_used)
    # A token revoked early: one 401, a new login, and the change still goes through.
    logins, refused = len(stub.logins), stub.refused
    stub.revoke_all()
    vf = [v for g in c.get("/gpus").json()["gpus"] if g["address"] == MIXED_PF
          for v in g["vfs"]][3]["address"]
    c.request("POST", "/gpu/vfs/%s/quarantine" % vf, {"reason": "keystone test"})
    pf = str(uuid.uuid5(uuid.NAMESPACE_URL, "vgpud:%s:%s" % (HOST, MIXED_PF)))
    ok(poll(lambda: (p.inventories(pf) or {}).get("VGPU", {}).get("reserved") == 1, 40, 0.2),
       "FLEET-1, FLEET-5: after a revoked token the change reaches Placement")
    ok(stub.refused > refused and len(stub.logins) > logins,
       "FLEET-1: a 401 renews the token and repeats the request",
       (refused, stub.refused, logins, len(stub.logins)))
    c.request("DELETE", "/gpu/vfs/%s/quarantine" % vf)
    stop(d)


def main():
    def body(work, p, stub, daemons):
        run_group("bad-secret", lambda: check_bad_secret(work, stub))
        run_group("tokens", lambda: check_tokens(work, stub, p, daemons))
    return placement_api.run_fronted("vgpud-fleet-ks-", Stub, body)


if __name__ == "__main__":
    sys.exit(main())
