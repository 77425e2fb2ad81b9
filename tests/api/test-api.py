#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-api.py VGPUD OPENAPI_YAML FAKE_NVML
#
# The real vgpud against a mounted vgpu-sim (SIM-20's host), over 127.0.0.1 and a Unix socket,
# with the fake NVML library. Run by tests/sim/run-sim-test.sh, which mounts the simulator in a
# private PID namespace (SIM-21) and exports VGPU_SIM_MOUNT and VGPU_SIM_CONTROL; this program
# starts and stops every vgpud it needs and always stops them, whatever happens. Output is TAP.
# Each check names the SPEC requirements it covers. The helpers it shares with
# test-api-faults.py are tests/lib/vgpud_test.py.
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from vgpud_test import (  # noqa: E402 (after the path)
    CATALOG, CTL, HEALTH_FILE, OPENAPI, VGPUD, Client, Daemon, configure, configure_held,
    copy_secret, eq, error_of, exit_status, figures, finish, free_port, metric, mint, ok,
    parse_metrics, poll, profile_gib, read_creatable, readyz, run_group, sim_ctl, sim_state, skip,
    stop, truth, write_config, write_secret)

MIXED, EQUAL = "0000:e3:00.0", "0001:c8:00.0"
UNAUTHORIZED = {"code": "unauthorized", "message": "invalid or missing bearer token"}

# ---- metrics --------------------------------------------------------------------------------

MET2 = [
    ("vgpud_resources_gpu_slots", "gauge", "kind", ["total", "used", "allocatable", "quarantined"]),
    ("vgpud_resources_gpu_profile_slots", "gauge", None, None),
    ("vgpud_resources_gpu_vfs", "gauge", "state",
     ["free", "reserved", "claimed", "dirty", "quarantined", "uncertain", "unreadable"]),
    ("vgpud_resources_gpu_placement_disabled", "gauge", None, []),
    ("vgpud_resources_gpu_nvml_fallbacks_total", "counter", "reason",
     ["equal_size", "error", "unavailable", "timeout", "stuck"]),
    ("vgpud_instances_vgpu_sentinel_checks_total", "counter", "result",
     ["ok", "failed", "unknown", "rpc_error", "unsupported_agent", "list_error"]),
    ("vgpud_instances_vgpu_sentinel_init_failures_total", "counter", None, []),
    ("vgpud_instances_vgpu_sentinel_quarantines_total", "counter", None, []),
    ("vgpud_instances_vgpu_quarantined_vfs", "gauge", None, []),
    ("vgpud_instances_vgpu_vf_health_store_unavailable", "gauge", None, []),
    ("vgpud_instances_vgpu_reconcile_failures_total", "counter", "stage",
     ["list_instances", "release_stale", "reset_unclaimed_vfs", "reconcile_devices", "storage"]),
    ("vgpud_instances_vgpu_stale_release_failures_total", "counter", None, []),
    ("vgpud_instances_vgpu_reconcile_liveness_uncertain_total", "counter", None, []),
    ("vgpud_instances", "gauge", "state",
     ["Creating", "Running", "Stopping", "Stopped", "Failed", "Deleting"]),
    ("vgpud_instances_vmm_forced_kills_total", "counter", "in_grace", ["true", "false"]),
    ("vgpud_instances_vgpu_quarantine_breaker_open", "gauge", None, []),
    # NET-10
    ("vgpud_network_addresses", "gauge", "state", ["allocated", "free"]),
    ("vgpud_network_dnsmasq_up", "gauge", None, []),
    ("vgpud_network_dnsmasq_restarts_total", "counter", None, []),
    ("vgpud_network_errors_total", "counter", "step", ["tap", "link", "nft", "dnsmasq"]),
    ("vgpud_http_requests_total", "counter", "code", None),
    ("vgpud_build_info", "gauge", None, None),
]

# ---- the checks -----------------------------------------------------------------------------


def check_cli(work, config):
    # CFG-2: --version prints the version and exits.
    r = subprocess.run([VGPUD, "--version"], capture_output=True, text=True, timeout=10)
    ok(r.returncode == 0 and re.fullmatch(r"vgpud \d+\.\d+\.\d+\n", r.stdout) is not None,
       "CFG-2: --version prints the version and exits 0", r)

    # CFG-2: --check-config validates and exits 0 (printing the effective configuration).
    r = subprocess.run([VGPUD, "--config", config, "--check-config"], capture_output=True,
                       text=True, timeout=10)
    ok(r.returncode == 0 and "reconcile_interval: 5s" in r.stdout and r.stderr == "",
       "CFG-2: --check-config exits 0 for a valid configuration", r)

    # CFG-4, GEN-10: a configuration error is exit 1 and one error line.
    r = subprocess.run([VGPUD, "--config", config, "--set", "gpu.reconcile_interval=1s"],
                       capture_output=True, text=True, timeout=10)
    eq((r.returncode, r.stderr),
       (1, '<3>--set gpu.reconcile_interval=1s: gpu.reconcile_interval must be a duration '
           'between 5s and 1h0m0s, got "1s"\n'),
       "CFG-4, GEN-10: a --set error exits 1 with one error line")
    r = subprocess.run([VGPUD, "--config", config, "--check-config", "--set", "bogus=1"],
                       capture_output=True, text=True, timeout=10)
    eq((r.returncode, r.stderr), (1, '<3>--set bogus=1: unknown key "bogus"\n'),
       "CFG-2: --check-config exits 1 for an invalid configuration")
    bad = os.path.join(work, "bad.yaml")
    with open(bad, "w") as f:
        f.write("gpu:\n  sentinel_intervall: 5s\n")
    r = subprocess.run([VGPUD, "--config", bad], capture_output=True, text=True, timeout=10)
    eq((r.returncode, r.stderr), (1, '<3>%s:2:3: unknown key "gpu.sentinel_intervall"\n' % bad),
       "CFG-4: a file error names file, line and column")
    r = subprocess.run([VGPUD, "--config", os.path.join(work, "missing.yaml")],
                       capture_output=True, text=True, timeout=10)
    eq((r.returncode, r.stderr.count("\n")), (1, 1), "CFG-1: a missing explicit file exits 1")


def check_public(c, openapi):
    for via in ("unix", "tcp"):
        r = c.get("/healthz", via=via, token=None)
        eq((r.status, r.json()), (200, {"status": "ok"}), "API-17: /healthz without token (%s)" % via)
        r = c.get("/readyz", via=via, token=None)
        eq(r.status, 200, "API-17: /readyz is 200 after the first pass (%s)" % via)
    r = c.get("/openapi.yaml", token=None)
    eq((r.status, r.header("content-type"), r.body), (200, "application/yaml", openapi),
       "API-19: /openapi.yaml served verbatim as application/yaml without token")


def check_auth(c, secret):
    # API-12: every other route needs a token, on both listeners.
    routes = [("GET", "/resources"), ("GET", "/gpus"), ("GET", "/gpu/health"),
              ("GET", "/metrics"), ("DELETE", "/gpu/health/breaker"),
              ("POST", "/gpu/vfs/0000:e3:00.4/quarantine"),
              ("DELETE", "/gpu/vfs/0000:e3:00.4/quarantine"),
              ("POST", "/gpu/gpus/0000:e3:00.0/drain"), ("DELETE", "/gpu/gpus/0000:e3:00.0/drain")]
    for method, path in routes:
        for via in ("unix", "tcp"):
            r = c.request(method, path, via=via, token=None)
            eq(error_of(r), (401, UNAUTHORIZED),
               "API-12: %s %s without token is 401 (%s)" % (method, path, via))
    bad = [("Bearer " + mint(b"x" * 32), "a token signed with another secret"),
           ("Bearer " + mint(secret, exp_delta=-10), "an expired token"),
           ("Bearer " + mint(secret, alg="HS512"), "an HS512 token"),
           ("Basic Zm9vOmJhcg==", "another scheme")]
    for value, what in bad:
        r = c.get("/resources", token=value)
        eq(error_of(r), (401, UNAUTHORIZED), "API-13: %s is 401" % what)
    eq(c.get("/resources", via="tcp").status, 200, "API-12: a valid token is accepted on TCP")


def check_routing(c):
    r = c.get("/nope")
    eq((r.status, r.json()["code"]), (404, "not_found"), "API-3: unknown path is 404 not_found")
    r = c.get("/resources/")
    eq((r.status, r.json()["code"]), (404, "not_found"), "API-3: a trailing slash is not stripped")
    r = c.request("POST", "/resources")
    eq((r.status, r.json()["code"], r.header("allow")), (405, "method_not_allowed", "GET"),
       "API-3: another method is 405 with Allow")
    r = c.request("PUT", "/gpu/vfs/0000:e3:00.4/quarantine")
    eq((r.status, r.header("allow")), (405, "DELETE, POST"),
       "API-3: Allow lists every method of the path")
    r = c.get("/resources?verbose=1")
    eq((r.status, r.json()["code"]), (400, "invalid_request"),
       "API-3: an unknown query parameter is 400 invalid_request")


# VF address -> its open /dev/vfio/<group> (configure_held), closed when the run ends
HOLDS = {}


def check_resources_track_sim(c):
    """API-4, API-5, PLACE-21, DISC-20: /resources follows the simulator through configures."""
    r = c.get("/resources")
    body = r.json()
    g = body["gpu"]
    names = [p["name"] for p in g["profiles"]]
    ok(r.status == 200 and g["mode"] == "vgpu" and names == sorted(names) and
       set(names) == set(CATALOG) and "placement_disabled_reason" not in g,
       "API-4, API-5: /resources shape, profiles sorted by name", body)
    sizes_ok = all(p["framebuffer_mb"] == profile_gib(p["name"]) * 1024 for p in g["profiles"])
    ok(sizes_ok, "API-4: framebuffer_mb of every profile (DISC-14)")

    def matches(quarantined=()):
        def f():
            want = truth(quarantined)
            got = figures(c.get("/resources").json())
            return got == want and (got, want)
        return f

    res = poll(matches(), 30, 0.5)
    ok(bool(res), "API-5, PLACE-21: figures equal the simulator's on an empty host",
       json.dumps(figures(c.get("/resources").json())) + "\n" + json.dumps(truth()))

    q4 = CATALOG["NVIDIA L40S-4Q"]
    q1 = CATALOG["NVIDIA L40S-1Q"]
    q2 = CATALOG["NVIDIA L40S-2Q"]
    mixed_vfs = ["0000:e3:%02x.%d" % ((4 + i) // 8, (4 + i) % 8) for i in range(32)]
    equal_vfs = ["0001:c8:%02x.%d" % ((4 + i) // 8, (4 + i) % 8) for i in range(32)]

    steps = [
        ("nine 4Q on the mixed GPU and one 2Q on the equal GPU",
         [(mixed_vfs[i], q4) for i in range(9)] + [(equal_vfs[0], q2)]),
        ("two 1Q, then one more 1Q on the mixed GPU (SIM-17/18: lists hide 4Q, NVML does not)",
         [(mixed_vfs[9], q1), (mixed_vfs[10], q1), (mixed_vfs[11], q1)]),
        ("a 4Q written although no list shows it, and releases",
         [(mixed_vfs[12], q4), (mixed_vfs[0], 0), (equal_vfs[0], 0)]),
    ]
    for what, writes in steps:
        for vf, t in writes:
            if t:
                HOLDS[vf] = configure_held(vf, t)
            else:
                HOLDS.pop(vf).close()
                configure(vf, 0)
        res = poll(matches(), 40, 0.5)
        ok(bool(res), "DISC-20, PLACE-21: figures follow the simulator after %s" % what,
           json.dumps(figures(c.get("/resources").json())) + "\n" + json.dumps(truth()))
    # Leave the host as it is: a configured VF is "dirty" in /gpus (no claim owns it).
    return mixed_vfs, equal_vfs


def check_gpus(c, mixed_vfs, equal_vfs):
    r = c.get("/gpus")
    body = r.json()
    gpus = body["gpus"]
    eq([g["address"] for g in gpus], [MIXED, EQUAL], "API-6: /gpus lists both GPUs in order")
    g0, g1 = gpus
    eq((g0["model"], g0["framework"], g0["mode"], g0["nvml"]),
       ("NVIDIA L40S", "vendor-vfio", "mixed", "ok"), "API-6: the mixed GPU's fields")
    eq((g1["mode"], g1["nvml"]), ("equal", "equal_size"),
       "API-6, NVML-11: the equal-size GPU falls back alone")
    eq([v["address"] for v in g0["vfs"]], mixed_vfs, "API-6: VFs sorted by address")
    st = {v["address"]: v for v in sim_state()["gpus"][0]["vfs"]}
    want = []
    for v in g0["vfs"]:
        s = st[v["address"]]
        want.append({"address": v["address"], "parent": MIXED,
                     "state": "dirty" if s["type"] else "free", "failures": 0,
                     **({"profile": s["profile"]} if s["type"] else {})})
    eq(g0["vfs"], want, "API-6: VF states and profiles match the simulator (configured = dirty)")
    eq(sorted(v["address"] for v in g0["vfs"] if v["state"] == "dirty"),
       sorted(vf for vf in HOLDS if vf.startswith(MIXED[:8])),
       "REC-6: the configured VFs, held open, are still dirty after the passes")


def check_health_routes(c, mixed_vfs):
    vf = mixed_vfs[20]
    before = figures(c.get("/resources").json())

    # API-18 errors first.
    r = c.request("POST", "/gpu/vfs/0000:E3:00.4/quarantine", {"reason": "x"})
    eq(error_of(r)[0:1] + (r.json()["code"],), (400, "invalid_address"),
       "API-18: an uppercase address is 400 invalid_address")
    r = c.request("POST", "/gpu/vfs/nonsense/quarantine", {"reason": "x"})
    eq((r.status, r.json()["code"]), (400, "invalid_address"),
       "API-18: a malformed address is 400 invalid_address")
    r = c.request("POST", "/gpu/vfs/0000:e3:1f.7/quarantine", {"reason": "x"})
    eq(error_of(r), (404, {"code": "not_found", "message": "no VF 0000:e3:1f.7 on this host"}),
       "API-18: quarantine of an undiscovered VF is 404")
    for body, what in [({}, "a missing reason"), ({"reason": ""}, "an empty reason"),
                       ({"reason": "x" * 257}, "a 257-byte reason"),
                       ({"reason": "x", "extra": 1}, "an unknown key"),
                       ({"reason": 5}, "a number"), ("{\"reason\": ", "truncated JSON"),
                       ('{"reason": "a", "reason": "b"}', "a duplicate key")]:
        r = c.request("POST", "/gpu/vfs/%s/quarantine" % vf, body)
        eq((r.status, r.json()["code"]), (400, "invalid_request"),
           "API-9: %s is 400 invalid_request" % what)
    r = c.request("POST", "/gpu/vfs/%s/quarantine" % vf, "reason", content_type="text/plain")
    eq((r.status, r.json()["code"]), (415, "unsupported_media_type"),
       "API-11: a body that is not JSON is 415")
    r = c.request("POST", "/gpu/gpus/%s/drain" % mixed_vfs[0], {"reason": "x"})
    eq((r.status, r.json()["code"]), (404, "not_found"), "API-18: drain of a VF address is 404")
    r = c.request("DELETE", "/gpu/gpus/0000:99:00.0/drain")
    eq((r.status, r.json()["code"]), (404, "not_found"), "API-18: undrain of an unknown PF is 404")
    r = c.request("DELETE", "/gpu/vfs/0000:e3:1f.7/quarantine")
    eq((r.status, r.json()["code"]), (404, "not_found"),
       "API-18: clear of a VF with neither discovery nor record is 404")

    # Quarantine: durable before the answer, visible in /resources and /metrics at once.
    r = c.request("POST", "/gpu/vfs/%s/quarantine" % vf, {"reason": "bad fan"})
    body = r.json()
    rec = body["records"][0] if body.get("records") else {}
    ok(r.status == 200 and len(body["records"]) == 1 and body["running_instances"] == [] and
       rec.get("vf_address") == vf and rec.get("source") == "operator" and
       rec.get("reason") == "bad fan" and rec.get("gpu") == MIXED and rec.get("present") is True
       and "quarantined_at" in rec,
       "API-18, HEALTH-25: quarantine answers the resulting record", body)
    with open(HEALTH_FILE) as f:
        disk = json.load(f)
    ok(any(x["vf_address"] == vf and x.get("source") == "operator" for x in disk["records"]),
       "HEALTH-25: the quarantine is on disk when the API answers", disk)
    eq(disk.get("driver_version"), sim_state()["driver_version"],
       "HEALTH-30: the host driver version is recorded in the health file")
    got = figures(c.get("/resources").json())
    eq((got["quarantined_slots"], got["allocatable_slots"]),
       (before["quarantined_slots"] + 1, before["allocatable_slots"] - 1),
       "API-5: the quarantine shows in /resources at once")
    eq(got, truth(quarantined={vf}), "PLACE-21: figures with a quarantined VF equal the model's")
    fams = parse_metrics(c.get("/metrics").body.decode())
    eq((metric(fams, "vgpud_resources_gpu_slots", kind="quarantined"),
        metric(fams, "vgpud_instances_vgpu_quarantined_vfs"),
        metric(fams, "vgpud_resources_gpu_vfs", state="quarantined")),
       (1.0, 1.0, 1.0), "MET-2: the quarantine shows in /metrics")
    r = c.request("POST", "/gpu/vfs/%s/quarantine" % vf, {"reason": "bad fan"})
    eq((r.status, r.json()["records"][0]["reason"]), (200, "bad fan"),
       "API-18: repeating a quarantine answers the same record")
    h = c.get("/gpu/health").json()
    ok(h["available"] is True and h["threshold"] == 2 and
       [x["vf_address"] for x in h["records"]] == [vf] and h["records"][0]["present"] is True and
       h["breaker"] == {"enabled": True, "open": False, "window": "1h0m0s",
                        "max_quarantines": 4},
       "API-10: /gpu/health shows store, threshold, breaker and records", h)
    gv = [v for v in c.get("/gpus").json()["gpus"][0]["vfs"] if v["address"] == vf][0]
    eq(gv["state"], "quarantined", "API-6: a quarantined VF's state")

    # Clear.
    r = c.request("DELETE", "/gpu/vfs/%s/quarantine" % vf)
    eq((r.status, r.json()), (200, {"records": [], "running_instances": []}),
       "API-18, HEALTH-25: clear deletes the record")
    eq(figures(c.get("/resources").json()), before, "API-5: clear restores the figures")
    r = c.request("DELETE", "/gpu/vfs/%s/quarantine" % vf)
    eq((r.status, r.json()["records"]), (200, []), "API-18: clearing again is a no-op")

    # Drain and undrain a PF (HEALTH-26 as revised: a mark on the PF, VF records untouched).
    r = c.request("POST", "/gpu/gpus/%s/drain" % MIXED, {"reason": "maintenance"})
    eq((r.status, r.json()), (200, {"records": [], "running_instances": []}),
       "API-18, HEALTH-26: drain answers the PF's VF records, which it does not touch")
    with open(HEALTH_FILE) as f:
        disk = json.load(f)
    drains = disk.get("drains", [])
    ok(len(drains) == 1 and drains[0]["gpu"] == MIXED and drains[0]["reason"] == "maintenance"
       and "drained_at" in drains[0] and disk["records"] == [],
       "HEALTH-26: the drain is a mark on the PF in the file when the API answers", disk)
    got = figures(c.get("/resources").json())
    eq(got, truth(quarantined=set(mixed_vfs)), "PLACE-21: figures of a drained GPU")
    fams = parse_metrics(c.get("/metrics").body.decode())
    eq((metric(fams, "vgpud_resources_gpu_slots", kind="quarantined"),
        metric(fams, "vgpud_instances_vgpu_quarantined_vfs")), (32.0, 0.0),
       "MET-2, HEALTH-26: drained VFs are quarantined slots, not quarantined records")
    g0 = c.get("/gpus").json()["gpus"][0]
    ok(g0.get("drained", {}).get("reason") == "maintenance" and
       g0["drained"].get("drained_at") == drains[0]["drained_at"] and
       all(v["state"] == "quarantined" for v in g0["vfs"]),
       "API-6, HEALTH-26: /gpus shows the GPU drained and its VFs quarantined",
       {k: g0.get(k) for k in ("address", "drained")})
    r = c.request("POST", "/gpu/gpus/%s/drain" % MIXED, {"reason": "maintenance 2"})
    with open(HEALTH_FILE) as f:
        disk = json.load(f)
    ok(r.status == 200 and [x["reason"] for x in disk.get("drains", [])] == ["maintenance 2"],
       "HEALTH-26: draining again replaces the mark's reason", disk)
    r = c.request("DELETE", "/gpu/gpus/%s/drain" % MIXED)
    eq((r.status, r.json()), (200, {"records": [], "running_instances": []}),
       "API-18, HEALTH-26: undrain removes the mark")
    with open(HEALTH_FILE) as f:
        disk = json.load(f)
    ok("drains" not in disk, "HEALTH-3, HEALTH-26: no drains key once no PF is drained", disk)
    eq(figures(c.get("/resources").json()), before, "API-5: undrain restores the figures")
    ok("drained" not in c.get("/gpus").json()["gpus"][0], "API-6: the GPU is no longer drained")

    # The breaker (HEALTH-29): closed, so closing it changes nothing.
    r = c.request("DELETE", "/gpu/health/breaker")
    eq((r.status, r.json()),
       (200, {"breaker": {"enabled": True, "open": False, "window": "1h0m0s",
                          "max_quarantines": 4}}),
       "HEALTH-29: DELETE /gpu/health/breaker answers the breaker")


def check_drain_keeps_wedge(c, daemon, mixed_vfs):
    """Issue 10 item 9: a drain cycle never forgets what the sentinel learned."""
    wedged, tallied, manual = mixed_vfs[3], mixed_vfs[4], mixed_vfs[5]
    before = figures(c.get("/resources").json())
    with open(HEALTH_FILE) as f:
        disk = json.load(f)
    # An automatic quarantine and a tally, as the sentinel leaves them (HEALTH-12).
    reason = "NVRM: GPU 0000:00:06.0: RmInitAdapter failed! (0x22:0x65:884)"
    auto = {"vf_address": wedged,
            "failures": [{"instance_id": "inst-w1", "assigned_at": "2026-09-02T20:00:00Z",
                          "reported_at": "2026-09-02T20:01:00Z"},
                         {"instance_id": "inst-w2", "assigned_at": "2026-09-02T20:05:00Z",
                          "reported_at": "2026-09-02T20:06:00Z"}],
            "quarantined_at": "2026-09-02T20:06:00Z", "reason": reason, "source": "auto"}
    tally = {"vf_address": tallied,
             "failures": [{"instance_id": "inst-t1", "assigned_at": "2026-09-02T20:00:00Z",
                           "reported_at": "2026-09-02T20:01:00Z"}]}
    disk["records"] = sorted(disk["records"] + [auto, tally], key=lambda r: r["vf_address"])
    with open(HEALTH_FILE + ".test", "w") as f:
        f.write(json.dumps(disk, indent=2) + "\n")
    os.replace(HEALTH_FILE + ".test", HEALTH_FILE)
    daemon.proc.send_signal(signal.SIGHUP)
    ok(poll(lambda: any(r["vf_address"] == wedged for r in c.get("/gpu/health").json()["records"]),
            10, 0.1), "HEALTH-22: the automatic quarantine is loaded")

    def records():
        return {r["vf_address"]: r for r in c.get("/gpu/health").json()["records"]}

    # HEALTH-25: an operator quarantine never overwrites an automatic one.
    r = c.request("POST", "/gpu/vfs/%s/quarantine" % wedged, {"reason": "operator says"})
    rec = records().get(wedged, {})
    ok(r.status == 200 and rec.get("source") == "auto" and rec.get("reason") == reason and
       rec.get("quarantined_at") == "2026-09-02T20:06:00Z",
       "HEALTH-25: quarantining an automatically quarantined VF keeps its record unchanged", rec)
    r = c.request("POST", "/gpu/vfs/%s/quarantine" % manual, {"reason": "first"})
    r = c.request("POST", "/gpu/vfs/%s/quarantine" % manual, {"reason": "second"})
    eq(records().get(manual, {}).get("reason"), "second",
       "HEALTH-25: an operator quarantine gets the new reason")

    # HEALTH-26: drain, undrain; the wedge, the tally and the operator quarantine survive.
    r = c.request("POST", "/gpu/gpus/%s/drain" % MIXED, {"reason": "unrelated maintenance"})
    eq([x["vf_address"] for x in r.json().get("records", [])], sorted([wedged, tallied, manual]),
       "API-18: drain answers the PF's existing VF records")
    rec = records().get(wedged, {})
    ok(rec.get("source") == "auto" and rec.get("reason") == reason,
       "HEALTH-26: a drain leaves the automatic quarantine's source and reason", rec)
    r = c.request("DELETE", "/gpu/gpus/%s/drain" % MIXED)
    recs = records()
    ok(r.status == 200 and recs.get(wedged, {}).get("source") == "auto" and
       recs.get(wedged, {}).get("reason") == reason and
       len(recs.get(tallied, {}).get("failures", [])) == 1 and
       recs.get(manual, {}).get("reason") == "second",
       "HEALTH-26: undrain keeps the automatic quarantine, the tally and the operator quarantine",
       recs)
    vfs = {v["address"]: v for v in c.get("/gpus").json()["gpus"][0]["vfs"]}
    eq((vfs[wedged]["state"], vfs[tallied]["state"] != "quarantined"), ("quarantined", True),
       "HEALTH-26, API-6: after the drain cycle the wedged VF is still out of placement")
    got = figures(c.get("/resources").json())
    eq(got["quarantined_slots"], before["quarantined_slots"] + 2,
       "API-5: the wedged and the operator-quarantined VF stay quarantined slots")

    # HEALTH-26, API-18: the explicit wipe after a recovery.
    r = c.request("DELETE", "/gpu/gpus/%s/records" % mixed_vfs[0])
    eq((r.status, r.json()["code"]), (404, "not_found"),
       "API-18: clearing the records of a VF address is 404")
    r = c.request("DELETE", "/gpu/gpus/0000:E3:00.0/records")
    eq((r.status, r.json()["code"]), (400, "invalid_address"),
       "API-18: clearing the records of a malformed address is 400")
    r = c.request("DELETE", "/gpu/gpus/%s/records" % MIXED)
    eq((r.status, r.json()), (200, {"records": [], "running_instances": []}),
       "HEALTH-26, API-18: DELETE /gpu/gpus/{address}/records deletes every VF record of the PF")
    with open(HEALTH_FILE) as f:
        disk = json.load(f)
    ok(not [x for x in disk["records"] if x["vf_address"] in mixed_vfs],
       "HEALTH-26: the records are gone from the file when the API answers", disk)
    eq(figures(c.get("/resources").json()), before, "API-5: the wipe restores the figures")


def check_operator_reason(c, mixed_vfs):
    """Issue 10 item 8: an operator's reason is outside text, sanitised as the guest's is."""
    vf = mixed_vfs[6]
    r = c.request("POST", "/gpu/vfs/%s/quarantine" % vf, {"reason": "fan\x1b[31m\tdead\u00e9"})
    rec = r.json()["records"][0] if r.status == 200 else {}
    # HEALTH-12's rule: every byte outside printable ASCII becomes '?' (é is two bytes).
    eq((r.status, rec.get("reason")), (200, "fan?[31m?dead??"),
       "HEALTH-12, HEALTH-25, API-9: control characters in an operator reason become '?'")
    with open(HEALTH_FILE) as f:
        disk = json.load(f)
    eq([x.get("reason") for x in disk["records"] if x["vf_address"] == vf], ["fan?[31m?dead??"],
       "HEALTH-25: the file stores the sanitised reason")
    r = c.request("POST", "/gpu/gpus/%s/drain" % MIXED, {"reason": "a\nb"})
    with open(HEALTH_FILE) as f:
        disk = json.load(f)
    eq([x.get("reason") for x in disk.get("drains", [])], ["a?b"],
       "HEALTH-26: a drain's reason is sanitised the same way")
    c.request("DELETE", "/gpu/gpus/%s/drain" % MIXED)
    c.request("DELETE", "/gpu/vfs/%s/quarantine" % vf)


def check_metrics(c):
    r = c.get("/metrics")
    eq(r.header("content-type"), "text/plain; version=0.0.4; charset=utf-8",
       "MET-1: the exposition's content type")
    text = r.body.decode()
    fams = parse_metrics(text)
    for name, typ, label, values in MET2:
        f = fams.get(name)
        if not ok(f is not None and f.get("type") == typ and f.get("help"),
                  "MET-1, MET-2: family %s has HELP and TYPE %s" % (name, typ)):
            continue
        if values is not None:
            got = [l.get(label) for _, l, _ in f["samples"]] if label else \
                [None for _ in f["samples"]]
            want = values if label else [None]
            eq(got, want, "MET-3: %s exports its fixed label values" % name)
    eq([n for n in fams], [m[0] for m in MET2], "MET-2: families in order and nothing else")
    res = c.get("/resources").json()["gpu"]
    fams = parse_metrics(c.get("/metrics").body.decode())
    got = {k: metric(fams, "vgpud_resources_gpu_slots", kind=k)
           for k in ("total", "used", "allocatable", "quarantined")}
    eq(got, {k: float(res[k + "_slots"]) for k in ("total", "used", "allocatable", "quarantined")},
       "MET-4: slot gauges equal /resources")
    prof = {l["profile"]: v for _, l, v in fams["vgpud_resources_gpu_profile_slots"]["samples"]}
    eq(prof, {p["name"]: float(p["available"]) for p in res["profiles"]},
       "MET-3, MET-4: one profile series per /resources profile")
    bi = fams["vgpud_build_info"]["samples"]
    ok(len(bi) == 1 and bi[0][2] == 1.0 and re.fullmatch(r"\d+\.\d+\.\d+", bi[0][1]["version"])
       and bi[0][1]["commit"], "MET-2: vgpud_build_info{version,commit} 1", bi)
    ok(metric(fams, "vgpud_http_requests_total", code="401") >= 1,
       "API-20: responses are counted by status")
    promtool = shutil.which("promtool")
    if promtool:
        p = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=30)
        ok(p.returncode == 0, "MET-5: promtool check metrics accepts /metrics", p)
    else:
        skip("MET-5: promtool check metrics accepts /metrics", "promtool absent")


def check_corrupt_store(c, daemon, mixed_vfs):
    with open(HEALTH_FILE, "rb") as f:
        good = f.read()
    with open(HEALTH_FILE, "w") as f:
        f.write("{garbage")
    daemon.proc.send_signal(signal.SIGHUP)

    def disabled():
        g = c.get("/resources").json()["gpu"]
        return g.get("placement_disabled_reason") and g
    g = poll(disabled, 10)
    ok(bool(g) and g["placement_disabled_reason"].startswith(
        "VF health state unavailable: unmarshal VF health state: "),
       "HEALTH-16, HEALTH-22: a corrupt file after SIGHUP disables placement with the reason", g)
    if g:
        ok(g["allocatable_slots"] == 0 and all(p["available"] == 0 for p in g["profiles"]),
           "API-5: allocatable and available are 0 while placement is disabled")
    fams = parse_metrics(c.get("/metrics").body.decode())
    eq((metric(fams, "vgpud_resources_gpu_placement_disabled"),
        metric(fams, "vgpud_instances_vgpu_vf_health_store_unavailable"),
        metric(fams, "vgpud_resources_gpu_slots", kind="allocatable")),
       (1.0, 1.0, 0.0), "MET-2: placement_disabled and store_unavailable gauges are 1")
    r = c.request("POST", "/gpu/vfs/%s/quarantine" % mixed_vfs[20], {"reason": "x"})
    ok(r.status == 503 and r.json()["code"] == "health_store_unavailable" and
       r.json()["message"].startswith("VF health state unavailable: "),
       "API-18, HEALTH-17: a mutation is refused 503 while the file does not load", r.body)
    h = c.get("/gpu/health").json()
    ok(h["available"] is False and h["unavailable_reason"].startswith(
        "VF health state unavailable: unmarshal VF health state: "),
       "API-10: /gpu/health shows the unavailable store", h)
    with open(HEALTH_FILE, "rb") as f:
        ok(f.read() == b"{garbage", "HEALTH-17: the operator's broken file is left untouched")

    # Repaired on disk: reads schedule the repair (HEALTH-21) and placement comes back, without
    # a restart and without another SIGHUP.
    with open(HEALTH_FILE, "wb") as f:
        f.write(good)

    def enabled():
        g = c.get("/resources").json()["gpu"]
        return "placement_disabled_reason" not in g and g
    g = poll(enabled, 15, 0.25)
    ok(bool(g) and g["allocatable_slots"] > 0,
       "HEALTH-21: placement comes back once the file is repaired", g)


def check_discovery_failure(c, mixed_vfs):
    """DISC-6, DISC-7: unreadable VFs, then a failed discovery that keeps the last table."""
    vf = mixed_vfs[30]
    try:
        sim_ctl("fault read sys/devices/pci0000:e3/%s/nvidia/current_vgpu_type EIO" % vf)

        def unreadable():
            vfs = c.get("/gpus").json()["gpus"][0]["vfs"]
            v = [x for x in vfs if x["address"] == vf]
            return v and v[0]["state"] == "unreadable" and v[0]
        v = poll(unreadable, 20, 0.5)
        ok(bool(v), "DISC-6, API-6: an unreadable VF is in /gpus with state unreadable", v)
        g = c.get("/resources").json()["gpu"]
        eq((g["total_slots"], "placement_disabled_reason" in g), (63, False),
           "DISC-6, API-5: an unreadable VF counts in no slot figure")
        fams = parse_metrics(c.get("/metrics").body.decode())
        eq(metric(fams, "vgpud_resources_gpu_vfs", state="unreadable"), 1.0,
           "MET-2: the unreadable VF in vgpud_resources_gpu_vfs")

        sim_ctl("fault read sys/devices/*/*/nvidia/current_vgpu_type EIO")

        def failed():
            g = c.get("/resources").json()["gpu"]
            return g.get("placement_disabled_reason") and g
        g = poll(failed, 20, 0.5)
        ok(bool(g) and g["placement_disabled_reason"].startswith("discover vendor VFIO VFs: ") and
           g["total_slots"] == 63 and g["allocatable_slots"] == 0,
           "DISC-7: a failed discovery keeps the last VF table and disables placement", g)
        fams = parse_metrics(c.get("/metrics").body.decode())
        eq(metric(fams, "vgpud_resources_gpu_placement_disabled"), 1.0,
           "MET-2: placement_disabled is 1 after a failed discovery")
        r = c.get("/gpus")
        eq((r.status, len(r.json()["gpus"])), (200, 2), "DISC-7: /gpus keeps the last table")
    finally:
        sim_ctl("clear-faults")

    def recovered():
        g = c.get("/resources").json()["gpu"]
        return "placement_disabled_reason" not in g and g["total_slots"] == 64 and g
    ok(bool(poll(recovered, 20, 0.5)), "DISC-7: placement comes back with a good discovery")


def check_lock(work, config):
    # CFG-9: a second daemon on the same runtime_dir exits 1 with the lock text.
    r = subprocess.run([VGPUD, "--config", config], capture_output=True, text=True, timeout=20,
                       env=dict(os.environ, VGPU_SIM_CONTROL=CTL))
    eq((r.returncode, r.stderr),
       (1, "<3>another vgpud holds %s/run/vgpud.lock\n" % work),
       "CFG-9: a second vgpud exits 1 with the lock message")


def check_listener_failure(work):
    # GEN-10: a listener that cannot bind ends start-up with status 1 and one line.
    cfg = os.path.join(work, "busy.yaml")
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    other = os.path.join(work, "other")
    os.mkdir(other)
    copy_secret(work, other)
    write_config(cfg, other, listen="127.0.0.1:%d" % port)
    try:
        r = subprocess.run([VGPUD, "--config", cfg], capture_output=True, text=True, timeout=40,
                           env=dict(os.environ, VGPU_SIM_CONTROL=CTL))
    finally:
        busy.close()
    lines = r.stderr.splitlines()
    errors = [l for l in lines if l.startswith("<3>")]
    eq((r.returncode, errors), (1, ["<3>listen 127.0.0.1:%d: Address already in use" % port]),
       "GEN-10: a listener failure exits 1 with one error line")


def check_not_ready(work, secret):
    """API-17: /readyz and mutating routes answer 503 not_ready until the first pass ends."""
    cfg = os.path.join(work, "slow.yaml")
    slow = os.path.join(work, "slow")
    os.mkdir(slow)
    copy_secret(work, slow)
    write_config(cfg, slow, listen="127.0.0.1:%d" % free_port())
    # Every discovery reads the driver version file; slowing it holds the first pass open.
    sim_ctl("fault read sys/module/nvidia/version delay:2500")
    d = Daemon(work, "slow", cfg)
    c = Client(os.path.join(slow, "api.sock"), 0, mint(secret))
    try:
        sock = os.path.join(slow, "api.sock")
        up = poll(lambda: os.path.exists(sock) or not d.alive(), 20)
        ok(up and d.alive(), "GEN-10: listeners start before the first reconcile pass")
        r = c.get("/readyz", token=None)
        eq(error_of(r)[0], 503, "API-17: /readyz is 503 before the first pass ends")
        eq(r.json()["code"], "not_ready", "API-17: the code is not_ready")
        r = c.request("POST", "/gpu/vfs/0000:e3:00.4/quarantine", {"reason": "x"})
        eq((r.status, r.json()["code"]), (503, "not_ready"),
           "API-17: mutating routes are 503 not_ready before the first pass ends")
        eq(c.get("/healthz", token=None).status, 200, "API-17: /healthz answers meanwhile")
        ready = poll(lambda: c.get("/readyz", token=None).status == 200, 30, 0.2)
        ok(ready, "API-17: /readyz turns 200 after the first pass")
        d.read_notify()
        ok(any("READY=1" in m for m in d.messages), "OPS-2: READY=1 is sent", d.messages)
    finally:
        sim_ctl("clear-faults")
        rc = d.stop()
    eq(rc, 0, "OPS-3: SIGTERM exits 0")
    ok(any("STOPPING=1" in m for m in d.messages), "OPS-2: STOPPING=1 at shutdown", d.messages)
    ok(not os.path.exists(os.path.join(slow, "api.sock")),
       "OPS-3: the Unix socket is removed at exit")


def fd_limits(pid):
    """(soft, hard) of "Max open files" in /proc/<pid>/limits ("unlimited" as RLIM_INFINITY)."""
    with open("/proc/%d/limits" % pid) as f:
        for line in f:
            if line.startswith("Max open files"):
                soft, hard = line.split()[3:5]
                return tuple(resource.RLIM_INFINITY if v == "unlimited" else int(v)
                             for v in (soft, hard))
    return None


def main():
    work = tempfile.mkdtemp(prefix="vgpud-api.", dir=os.environ.get("TMPDIR", "/tmp"))
    daemons = []
    try:
        secret = write_secret(work)
        with open(OPENAPI, "rb") as f:
            openapi = f.read()
        for type_id, name in read_creatable("0000:e3:00.4"):
            CATALOG[name] = type_id

        port = free_port()
        config = os.path.join(work, "vgpud.yaml")
        write_config(config, work, listen="127.0.0.1:%d" % port)

        groups = [("cli", lambda: check_cli(work, config))]
        for name, fn in groups:
            run_group(name, fn)

        # free_port() closes the port before vgpud binds it, so a parallel test may take it
        # in between: then vgpud exits with EADDRINUSE and starts again on another port.
        # vgpud raises its soft descriptor limit to the hard one (one pidfd per VM it runs):
        # it starts here with a soft limit of 256 inherited from this script.
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        low = min(256, hard)
        for attempt in range(5):
            resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))
            try:
                d = Daemon(work, "main", config)
            finally:
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            daemons.append(d)
            c = Client(os.path.join(work, "api.sock"), port, mint(secret))
            ready = poll(lambda: not d.alive() or readyz(c, os.path.join(work, "api.sock")), 30,
                         0.1)
            if d.alive() or "Address already in use" not in d.log_text():
                break
            d.stop()
            port = free_port()
            write_config(config, work, listen="127.0.0.1:%d" % port)
        if not ok(ready and d.alive(), "GEN-10: vgpud becomes ready", d.log_text()[-3000:]):
            return 1
        d.read_notify()
        ok(any("READY=1" in m for m in d.messages), "OPS-2: READY=1 after the first pass",
           d.messages)
        eq(fd_limits(d.proc.pid), (hard, hard),
           "INST-21: vgpud raises its soft open-file limit (%d at exec) to the hard one" % low)

        state = {}
        run_group("public", lambda: check_public(c, openapi))
        run_group("auth", lambda: check_auth(c, secret))
        run_group("routing", lambda: check_routing(c))
        run_group("lock", lambda: check_lock(work, config))
        run_group("resources", lambda: state.update(
            zip(("mixed", "equal"), check_resources_track_sim(c))))
        mixed = state.get("mixed") or ["0000:e3:%02x.%d" % ((4 + i) // 8, (4 + i) % 8)
                                       for i in range(32)]
        equal = state.get("equal") or []
        run_group("gpus", lambda: check_gpus(c, mixed, equal))
        run_group("health", lambda: check_health_routes(c, mixed))
        run_group("drain-cycle", lambda: check_drain_keeps_wedge(c, d, mixed))
        run_group("operator-reason", lambda: check_operator_reason(c, mixed))
        run_group("metrics", lambda: check_metrics(c))
        run_group("discovery", lambda: check_discovery_failure(c, mixed))
        run_group("corrupt", lambda: check_corrupt_store(c, d, mixed))

        daemons.remove(d)
        stop(d)

        run_group("listener", lambda: check_listener_failure(work))
        run_group("not-ready", lambda: check_not_ready(work, secret))
        return 0
    finally:
        for f in HOLDS.values():
            f.close()
        finish(daemons, work)


if __name__ == "__main__":
    main()
    sys.exit(exit_status())
