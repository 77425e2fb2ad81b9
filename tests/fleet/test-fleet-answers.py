#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-fleet-answers.py VGPUD OPENAPI_YAML FAKE_NVML FAKE_QEMU
#
# Bad answers from Placement (FLEET-1, FLEET-5). A front before a real placement-api answers
# some requests itself with a 200 whose body is wrong: a root document without max_version
# (no provider is made until it is good), a trait list that is not a list, an inventory body
# that is not JSON, a tree listing without its array, and a garbled answer to a PUT that
# Placement never saw. Each run that meets one fails with a text naming the request and counts
# as result="error", and a local create still works; once the front forwards again, the next
# runs converge.
# The fuzz target fuzz-placement-answer covers the readers on their own. Runs under
# tests/sim/run-sim-test.sh.
import os
import re
import sys
import threading

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import placement_api  # noqa: E402
import two_hosts  # noqa: E402
from vgpud_instances import (  # noqa: E402
    EQUAL_PF, MIXED_PF, create_running, delete, vmm_config)
from vgpud_test import (  # noqa: E402
    eq, log_count, metric, ok, parse_metrics, poll, run_group, start, stop, write_secret)

HOST = "fleet-answers-1"
ROOT_UUID = two_hosts.root_uuid(HOST)
SYNC = 40  # seconds a change may take to show: generous, the machine is shared


def pf_uuid(pf):
    return two_hosts.pf_uuid(HOST, pf)


class Mangler(placement_api.Front):
    """Forwards, except a request matching the rule (method, path) gets the rule's 200 body,
    `times` times (None: until cleared)."""

    def __init__(self, backend):
        self.lock = threading.Lock()
        self.rule = None
        self.hits = 0
        super().__init__(backend)

    def set(self, method, path, body, times=None):
        with self.lock:
            self.rule, self.hits, self.left = (method, path, body), 0, times

    def clear(self):
        with self.lock:
            self.rule = None

    def route(self, handler, data):
        with self.lock:
            mine = self.rule and (handler.command, handler.path) == self.rule[:2]
            if mine:
                body = self.rule[2]
                self.hits += 1
                if self.left is not None:
                    self.left -= 1
                    if self.left == 0:
                        self.rule = None
        if mine:
            return handler.reply(200, body, [("Content-Type", "application/json")])
        self.forward(handler, handler.path, data)


def sync_metric(c, **labels):
    fams = parse_metrics(c.get("/metrics").body.decode())
    return metric(fams, "vgpud_placement_sync_total", **labels) or 0


def in_step(p):
    """Placement holds the root and both PFs, each PF with its VGPU inventory and traits."""
    return len(p.tree(ROOT_UUID)) == 3 and all(
        (p.inventories(pf_uuid(pf)) or {}).get("VGPU", {}).get("total") == 32 and
        p.traits(pf_uuid(pf)) for pf in (MIXED_PF, EQUAL_PF))


def failed_line(error):
    return r'^<4>placement sync failed error="%s"$' % re.escape(error)


def check_root_answer(c, d, p, front):
    # FLEET-1: until a root document offers 1.39 vgpud writes nothing to Placement. The front
    # answers GET / badly from before vgpud starts.
    error = "GET %s/: no max_version in the root document" % front.url
    ok(poll(lambda: log_count(d, failed_line(error)) == 1, SYNC, 0.1),
       "FLEET-1: a root document without max_version fails the run: " + error)
    ok(sync_metric(c, result="error") >= 1 and sync_metric(c, result="ok") == 0,
       "FLEET-5: ... counted as vgpud_placement_sync_total{result=\"error\"}")
    eq(p.tree(ROOT_UUID), [], "FLEET-1: ... and no provider is made")
    front.clear()
    ok(poll(lambda: in_step(p) and sync_metric(c, result="ok") >= 1, SYNC, 0.2),
       "FLEET-1, FLEET-2, FLEET-3: with a good root document the providers are made")


def check_bad_answer(c, d, p, front, n, path, body, error, what):
    """One bad GET answer in place until it has failed a run, then forwarding again."""
    errors = sync_metric(c, result="error")
    seen = log_count(d, failed_line(error))
    front.set("GET", path, body)
    try:
        ok(poll(lambda: log_count(d, failed_line(error)) > seen, SYNC, 0.1),
           "FLEET-5: %s fails the run: %s" % (what, error))
        ok(sync_metric(c, result="error") > errors,
           "FLEET-5: ... counted as vgpud_placement_sync_total{result=\"error\"}")
        inst = create_running(c, "answers-%d" % n, "NVIDIA L40S-4Q")
        st, _ = delete(c, inst["id"]) if inst else (None, None)
        ok(inst and st in (202, 204), "FLEET-5: ... and a local create and delete still work",
           st)
    finally:
        front.clear()
    oks = sync_metric(c, result="ok")
    ok(poll(lambda: sync_metric(c, result="ok") > oks and in_step(p), SYNC, 0.2),
       "FLEET-5: once the answers are good again the next run succeeds, in step")


def check_answers(c, d, p, front):
    # The full runs (every placement.sync_interval) read every provider and the tree.
    url = front.url
    mixed, equal = pf_uuid(MIXED_PF), pf_uuid(EQUAL_PF)
    cases = [
        ("/resource_providers/%s/traits" % mixed,
         b'{"traits": "CUSTOM_X", "resource_provider_generation": 1}',
         "GET %s/resource_providers/%s/traits: malformed answer" % (url, mixed),
         "a trait list that is not a list"),
        ("/resource_providers/%s/inventories" % equal, b"<html>not json</html>",
         "GET %s/resource_providers/%s/inventories: malformed answer" % (url, equal),
         "an inventory answer that is not JSON"),
        ("/resource_providers?in_tree=%s" % ROOT_UUID, b'{"providers": []}',
         "GET %s/resource_providers?in_tree=%s: malformed answer" % (url, ROOT_UUID),
         "a tree listing without resource_providers"),
    ]
    for n, (path, body, error, what) in enumerate(cases):
        check_bad_answer(c, d, p, front, n, path, body, error, what)


def check_put_answer(c, d, p, front):
    # A garbled answer to a PUT: vgpud cannot know the new generation, so it reads the
    # provider again and puts what it still wants; the drain's trait lands all the same.
    mixed = pf_uuid(MIXED_PF)
    path = "/resource_providers/%s/traits" % mixed
    error = "PUT %s%s: malformed answer" % (front.url, path)
    line = failed_line(error)
    front.set("PUT", path, b'{"traits": [], "resource_provider_generation": "x"}', times=1)
    r = c.request("POST", "/gpu/gpus/%s/drain" % MIXED_PF, {"reason": "answers test"})
    eq(r.status, 200, "HEALTH-26: drain the mixed-size card")
    ok(poll(lambda: log_count(d, line) == 1, SYNC, 0.1),
       "FLEET-5: a PUT whose answer is garbled fails the run: " + error)
    eq(front.hits, 1, "the front answered that one PUT itself, unseen by Placement")
    ok(poll(lambda: "CUSTOM_VGPUD_DRAINED" in (p.traits(mixed) or ()), SYNC, 0.1),
       "FLEET-4, FLEET-5: the next run re-reads the provider and the drained trait lands")
    c.request("DELETE", "/gpu/gpus/%s/drain" % MIXED_PF)
    ok(poll(lambda: "CUSTOM_VGPUD_DRAINED" not in (p.traits(mixed) or {"x"}), SYNC, 0.1),
       "FLEET-4: undrain removes it")


def main():
    def body(work, p, front, daemons):
        secret = write_secret(work)
        config = vmm_config(os.path.join(work, "vgpud.yaml"), work, reconcile="5s")
        with open(config, "a") as f:
            f.write("placement:\n  url: \"%s\"\n  host_name: %s\n  sync_interval: 5s\n"
                    % (front.url, HOST))
        front.set("GET", "/", b'{"versions": [{"id": "v1.0", "status": "CURRENT"}]}')
        d, c = start(work, "answers", config, secret, os.path.join(work, "api.sock"))
        daemons.append(d)
        if c:
            run_group("root", lambda: check_root_answer(c, d, p, front))
            run_group("get", lambda: check_answers(c, d, p, front))
            run_group("put", lambda: check_put_answer(c, d, p, front))
            stop(d)
    return placement_api.run_fronted("vgpud-fleet-answers-", Mangler, body)


if __name__ == "__main__":
    sys.exit(main())
