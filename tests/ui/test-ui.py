#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-ui.py VGPUD OPENAPI_YAML FAKE_NVML FAKE_QEMU UI_DIR SCREENSHOT
#
# The web VF map (GET /ui/) in a real browser: Debian's headless Chromium driven through
# chromedriver over the W3C WebDriver protocol (plain HTTP on loopback, urllib only), against
# the real vgpud on SIM-20's host with fake-qemu as the VMM. It checks what the page promises:
# no data request and a sign-in prompt without a token; the files served verbatim and public
# with a strict CSP while the API stays behind the token (API-12); one cell per VF in /gpus'
# state (API-6), instance names from /instances, a quarantine, a drain and a disabled
# placement shown within a refresh (API-5, API-10); hostile text from the host rendered as
# text; a 401 back to the sign-in; the token in sessionStorage only; every request on loopback
# (REL-9); no console error, so no CSP violation. It saves a screenshot (SCREENSHOT).
#
# Runs under tests/sim/run-sim-test.sh (a private PID namespace with only loopback). Chromium
# and chromedriver are killed by pid, whatever happens.
import base64
import json
import os
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from vgpud_test import (  # noqa: E402 (after the path)
    eq, exit_status, free_port, gpu_body, mint, ok, poll, run_group, sim_ctl, start,
    stop, write_secret)
from vgpud_instances import (  # noqa: E402
    PROFILE, console_file, create_running, delete_all, finish_run, make_images, vmm_config)

UI_DIR, SCREENSHOT = sys.argv[5], sys.argv[6]
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the W3C web element key
TOKEN_KEY = "vgpud.token"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
DATA_PATHS = ("/gpus", "/gpu/health", "/resources", "/instances")
UI_FILES = {"/ui/": ("index.html", "text/html; charset=utf-8"),
            "/ui/vgpud.js": ("vgpud.js", "text/javascript; charset=utf-8"),
            "/ui/vgpud.css": ("vgpud.css", "text/css; charset=utf-8"),
            # CONS-5: xterm.js from the npm registry, embedded at build time, and its licence.
            "/ui/xterm.js": ("vendor/xterm/xterm.js", "text/javascript; charset=utf-8"),
            "/ui/xterm.css": ("vendor/xterm/xterm.css", "text/css; charset=utf-8"),
            "/ui/xterm-LICENSE.txt": ("vendor/xterm/LICENSE", "text/plain; charset=utf-8")}
# What the page itself loads: its files and the terminal's, never the licence.
PAGE_FILES = sorted(p for p in UI_FILES if p != "/ui/xterm-LICENSE.txt")
# Markup in a quarantine reason: it must show as these characters, never become an element.
HOSTILE = '<img src=x onerror="document.body.dataset.pwned=1"><b>bold</b>'
# Bounds for waits: the page refreshes every 5 s, and other builds share the machine's 2 cores.
REFRESH_WAIT = 40


# ---- WebDriver over urllib ----------------------------------------------------------------------


class WebDriverError(Exception):
    pass


class Browser:
    """chromedriver on a free loopback port and one Chromium session. Every network request and
    browser log entry read so far is kept (reading a WebDriver log drains it)."""

    def __init__(self, work):
        self.work = work
        self.profile = os.path.join(work, "chromium-profile")
        self.port = free_port()
        self.session = None
        self.requests = []  # URLs of Network.requestWillBeSent, in order
        self.console = []  # browser log entries
        self.log = open(os.path.join(work, "chromedriver.log"), "w")
        # A session (and so a process group) of its own: Chromium and its helpers, which
        # chromedriver starts, stay in it and are killed with it.
        # HOME and the XDG directories in the run's tree: nothing Chromium writes outlives it.
        env = dict(os.environ, HOME=work, XDG_CONFIG_HOME=os.path.join(work, "config"),
                   XDG_CACHE_HOME=os.path.join(work, "cache"))
        self.proc = subprocess.Popen(
            [CHROMEDRIVER, "--port=%d" % self.port, "--allowed-ips=127.0.0.1"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log, env=env,
            start_new_session=True)
        ready = poll(self._ready, 30, 0.1)
        if not ready:
            raise WebDriverError("chromedriver did not become ready")

    def _ready(self):
        if self.proc.poll() is not None:
            raise WebDriverError("chromedriver exited with %s" % self.proc.returncode)
        try:
            return self.call("GET", "/status", timeout=2).get("ready")
        except (OSError, WebDriverError):
            return False

    def call(self, method, path, body=None, timeout=60):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.port, path), data=data,
                                     method=method,
                                     headers={"Content-Type": "application/json; charset=utf-8"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return json.load(r).get("value")
        except urllib.error.HTTPError as e:
            try:
                v = json.load(e).get("value", {})
            except ValueError:
                v = {}
            raise WebDriverError("%s %s: %s: %s" % (method, path, v.get("error", e.code),
                                                    str(v.get("message", ""))[:500]))

    def new_session(self):
        args = ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--disable-dev-shm-usage", "--disable-extensions",
                "--disable-default-apps", "--no-default-browser-check", "--mute-audio",
                "--window-size=1280,800", "--user-data-dir=" + self.profile]
        caps = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
            "goog:loggingPrefs": {"performance": "ALL", "browser": "ALL"}}}}
        v = self.call("POST", "/session", caps, timeout=120)
        self.session = v["sessionId"]

    def s(self, method, path, body=None, timeout=60):
        return self.call(method, "/session/%s%s" % (self.session, path), body, timeout)

    def go(self, url):
        self.s("POST", "/url", {"url": url})

    def reload(self):
        self.s("POST", "/refresh", {})

    def js(self, script, *args):
        return self.s("POST", "/execute/sync", {"script": script, "args": list(args)})

    def find(self, css):
        v = self.s("POST", "/element", {"using": "css selector", "value": css})
        if not isinstance(v, dict) or ELEMENT not in v:
            raise WebDriverError("find %s: %r" % (css, v))
        return v[ELEMENT]

    def type(self, element, text):
        self.s("POST", "/element/%s/value" % element, {"text": text})

    def click(self, element):
        self.s("POST", "/element/%s/click" % element, {})

    def _log(self, kind):
        try:
            return self.s("POST", "/se/log", {"type": kind})
        except WebDriverError:
            return self.s("POST", "/log", {"type": kind})  # older chromedrivers

    def drain_logs(self):
        """Reads both logs; returns the browser log entries that are new."""
        for e in self._log("performance"):
            m = json.loads(e["message"])["message"]
            if m.get("method") == "Network.requestWillBeSent":
                self.requests.append(m["params"]["request"]["url"])
        new = self._log("browser")
        self.console.extend(new)
        return new

    def viewport(self, width, height):
        """Sizes the window so that the page itself is width x height."""
        self.s("POST", "/window/rect", {"width": width, "height": height})
        inner = self.js("return [window.innerWidth, window.innerHeight];")
        self.s("POST", "/window/rect", {"width": 2 * width - inner[0],
                                         "height": 2 * height - inner[1]})
        return self.js("return [window.innerWidth, window.innerHeight];")

    def screenshot(self):
        return base64.b64decode(self.s("GET", "/screenshot"))

    def quit(self):
        if self.session:
            try:
                self.s("DELETE", "", timeout=20)
            except (OSError, WebDriverError):
                pass
            self.session = None
        # chromedriver's process group (Chromium included), then anything still running with
        # this run's profile directory, each by its pid.
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(5)
                break
            except subprocess.TimeoutExpired:
                pass
        self.proc.poll()
        for pid in profile_processes(self.profile):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.log.close()


def profile_processes(profile):
    pids = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % p, "rb") as f:
                if ("--user-data-dir=" + profile).encode() in f.read():
                    pids.append(int(p))
        except OSError:
            pass
    return pids


# ---- reading the page ---------------------------------------------------------------------------

PAGE = """
const q = (s) => Array.from(document.querySelectorAll(s));
const shown = (id) => { const e = document.getElementById(id); return !!e && !e.hidden; };
return {
  signin: shown("signin"), console: shown("console"),
  message: document.getElementById("signin-message").textContent,
  banner: shown("placement-banner") ?
    document.getElementById("placement-banner").textContent : null,
  breaker: document.getElementById("breaker").dataset.state || null,
  health: document.getElementById("health").dataset.available || null,
  updated: shown("updated") ? document.getElementById("updated").dataset.refreshes : null,
  images: document.images.length + q("img").length,
  pwned: document.body.dataset.pwned || null,
  gpus: q(".gpu[data-address]").map((g) => ({
    address: g.dataset.address,
    drained: g.classList.contains("drained"),
    mode: (g.querySelector(".gpu-mode") || {}).textContent,
    nvml: (g.querySelector(".gpu-nvml") || {}).textContent,
    model: (g.querySelector(".gpu-model") || {}).textContent,
    vfs: Array.from(g.querySelectorAll(".vf[data-address]")).map((v) => ({
      address: v.dataset.address,
      classes: Array.from(v.classList),
      instance: (v.querySelector(".vf-instance") || {}).textContent || null,
      reason: (v.querySelector(".vf-reason") || {}).textContent || null,
    })),
  })),
  profiles: Object.fromEntries(q("#profiles tr[data-profile]").map((r) =>
    [r.dataset.profile, Number(r.querySelector(".profile-available").textContent)])),
  records: q("#records tr[data-vf]").map((r) => [r.dataset.vf, r.querySelector(".record-text") ?
    r.querySelector(".record-text").textContent : null]),
};
"""


def page(b):
    return b.js(PAGE)


def state_classes(classes):
    return sorted(c for c in classes if c.startswith("vf-"))


def want_classes(vf):
    """The state class of an API-6 VF, and vf-uncertain when it is flagged."""
    return sorted(["vf-" + vf["state"]] + (["vf-uncertain"] if vf.get("uncertain") else []))


def map_mismatch(p, gpus):
    """What differs between the page's GPUs and /gpus; [] when they agree."""
    diff = []
    shown = {g["address"]: g for g in p["gpus"]}
    if sorted(shown) != sorted(g["address"] for g in gpus):
        return ["GPUs: page %s, /gpus %s" % (sorted(shown), [g["address"] for g in gpus])]
    for g in gpus:
        s = shown[g["address"]]
        if (s["mode"], s["nvml"], s["model"]) != (g["mode"], g["nvml"], g["model"]):
            diff.append("%s: page %r, /gpus %r" % (g["address"], (s["mode"], s["nvml"], s["model"]),
                                                   (g["mode"], g["nvml"], g["model"])))
        if s["drained"] != ("drained" in g):
            diff.append("%s drained: page %s" % (g["address"], s["drained"]))
        cells = {v["address"]: v for v in s["vfs"]}
        if (len(s["vfs"]) != len(g["vfs"]) or
                sorted(cells) != sorted(v["address"] for v in g["vfs"])):
            diff.append("%s: %d cells for %d VFs" % (g["address"], len(s["vfs"]), len(g["vfs"])))
            continue
        for vf in g["vfs"]:
            got = state_classes(cells[vf["address"]]["classes"])
            if got != want_classes(vf):
                diff.append("%s: page %s, /gpus %s" % (vf["address"], got, want_classes(vf)))
    return diff


def disagreement(b, c):
    """What differs between the page and /gpus once they agree ([]), or at the end of the
    wait: the page may show the answer of a refresh ago."""
    last = []

    def agree():
        last[:] = map_mismatch(page(b), c.get("/gpus").json()["gpus"])
        return not last
    poll(agree, REFRESH_WAIT, 0.5)
    return last


def severe(entries):
    return [e for e in entries if e.get("level") in ("SEVERE", "WARNING")]


# ---- the checks ---------------------------------------------------------------------------------


def check_served(c, port):
    # API-12: the page and its files need no token, on TCP and the Unix socket alike, and are
    # the repository's files byte for byte (embedded at build time), each with the headers.
    for path, (name, ctype) in UI_FILES.items():
        with open(os.path.join(UI_DIR, name), "rb") as f:
            want = f.read()
        for via in ("tcp", "unix"):
            r = c.get(path, via=via, token=None)
            eq((r.status, r.header("content-type"), r.body == want), (200, ctype, True),
               "API-12: GET %s without token is 200, %s, the source file verbatim (%s)"
               % (path, ctype, via))
        eq((r.header("content-security-policy"), r.header("x-content-type-options"),
            r.header("referrer-policy"), r.header("cache-control")),
           (CSP, "nosniff", "no-referrer", "no-cache"),
           "GET %s: strict CSP, nosniff, no-referrer, no-cache" % path)
    r = c.get("/ui", via="tcp", token=None)
    eq((r.status, r.header("location"), r.body), (308, "/ui/", b""),
       "GET /ui redirects permanently to /ui/")
    # API-12: everything else still needs the token.
    for path in DATA_PATHS:
        r = c.get(path, via="tcp", token=None)
        eq(r.status, 401, "API-12: GET %s without token is still 401" % path)
    eq(c.get("/ui/other.js", via="tcp", token=None).status, 404,
       "API-3: no other file under /ui/")


def check_without_token(b, base):
    b.go(base + "/ui/")
    p = poll(lambda: (lambda p: p["signin"] and p)(page(b)), 30, 0.1)
    ok(bool(p) and not p["console"] and not p["gpus"],
       "without a token the page shows the sign-in prompt and no GPU grid", p)
    b.drain_logs()
    paths = [u[len(base):] for u in b.requests if u.startswith(base)]
    ok(not any(u.startswith(d) for u in paths for d in DATA_PATHS) and
       sorted(set(paths)) == PAGE_FILES,
       "without a token the page requests its files (xterm.js's among them) and no data",
       b.requests)


def check_sign_in(b, c, token):
    b.type(b.find("#token"), token)
    b.click(b.find("#signin-submit"))
    p = poll(lambda: (lambda p: p["console"] and p["gpus"] and p)(page(b)), REFRESH_WAIT, 0.2)
    ok(bool(p) and not p["signin"], "signed in: the console replaces the sign-in prompt", p)
    # API-6: one cell per VF of /gpus for every GPU, in its state; mode and NVML shown.
    diff = disagreement(b, c)
    ok(not diff, "API-6: one cell per VF of every GPU, each with /gpus' state class; the GPU's "
       "model, mode and NVML state shown", diff)
    p = page(b)
    eq(sum(len(g["vfs"]) for g in p["gpus"]), 64, "SIM-20's host: 64 VF cells")
    # API-10: the breaker and the store's availability.
    h = c.get("/gpu/health").json()
    want_breaker = "disabled" if not h["breaker"]["enabled"] else (
        "open" if h["breaker"]["open"] else "closed")
    eq((p["breaker"], p["health"]), (want_breaker, "true" if h["available"] else "false"),
       "API-10: the breaker state and the health store's availability shown")
    # API-5: per-profile availability as /resources has it.
    want = {x["name"]: x["available"] for x in gpu_body(c)["profiles"]}
    eq(p["profiles"], want, "API-5: each profile's availability as /resources shows it")


def check_token_storage(b, token, port):
    s = b.js("return {session: sessionStorage.getItem(arguments[0]), local: localStorage.length,"
             " cookie: document.cookie, url: location.href, field: document.getElementById("
             "'token').value};", TOKEN_KEY)
    eq(s, {"session": token, "local": 0, "cookie": "", "url": "http://127.0.0.1:%d/ui/" % port,
           "field": ""},
       "API-12: the token is in sessionStorage only: no localStorage, no cookie, not in the URL, "
       "not left in the form")


def check_instances(b, c):
    # API-7: a claimed VF shows its instance's name.
    made = [create_running(c, name, profile) for name, profile in
            (("render-01", PROFILE), ("render-02", PROFILE), ("train-01", "NVIDIA L40S-4Q"),
             ("viz-01", "NVIDIA L40S-1B"))]
    names = {i["id"]: i["name"] for i in made}

    def shown():
        cells = [v for g in page(b)["gpus"] for v in g["vfs"]]
        return {v["instance"] for v in cells if "vf-claimed" in v["classes"]} == set(
            names.values())
    ok(poll(shown, REFRESH_WAIT, 0.5), "API-6, API-7: the claimed VFs show their instances' names",
       page(b)["gpus"])
    diff = disagreement(b, c)
    ok(not diff, "API-6: the map still agrees with /gpus after the claims", diff)


def check_console(b, c):
    # CONS-5: an instance's Console button opens xterm.js on the console's WebSocket, with the
    # token offered as a subprotocol; typing goes to the guest (fake-qemu's console echoes, as a
    # guest's tty does) and its output shows in the terminal; the CSP stays as it is.
    inst = create_running(c, "console-ui")
    iid = inst["id"]
    button = 'button[data-instance-id="%s"]' % iid
    ok(poll(lambda: b.js("const e = document.querySelector(arguments[0]);"
                         "return !!e && !e.disabled;", button), REFRESH_WAIT, 0.5),
       "CONS-5: the instance is listed with an enabled Console button")
    b.click(b.find(button))
    ok(poll(lambda: b.js("return document.getElementById('term-status').textContent;") ==
            "connected", 20, 0.2),
       "CONS-5: the console connects (WebSocket, token as subprotocol bearer.<JWT>)",
       b.js("return document.getElementById('term-status').textContent;"))
    b.type(b.find("#term .xterm-helper-textarea"), "echo hello-from-the-browser\n")
    rows = lambda: b.js("const r = document.querySelector('#term .xterm-rows');"  # noqa: E731
                        "return r ? r.textContent : '';")
    ok(poll(lambda: "echo hello-from-the-browser" in rows(), 20, 0.2),
       "CONS-5: what is typed in the page reaches the guest and its output shows in the "
       "terminal", rows()[-300:])
    ok(poll(lambda: "echo hello-from-the-browser" in console_file(iid), 10, 0.1),
       "CONS-5, CONS-1: the session is in console.log")
    other = c.request("GET", "/instances/%s/console/attach" % iid, headers={
        "Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Protocol": "vgpud.console.v1"})
    eq(other.status, 409, "CONS-5, CONS-3: while the page is attached, another attach is 409")
    # An artefact beside the map's: the console as the operator sees it.
    shot = os.path.join(os.path.dirname(SCREENSHOT), "console.png")
    with open(shot, "wb") as f:
        f.write(b.screenshot())
    print("# screenshot: %s" % os.path.abspath(shot))
    b.click(b.find("#term-close"))
    ok(poll(lambda: b.js("return document.getElementById('term-panel').hidden;"), 10, 0.2),
       "CONS-5: Close closes the console panel")
    eq(b.js("const m = document.querySelector('meta[http-equiv]'); return m ? 1 : 0;"), 0,
       "CONS-5: the page adds no policy of its own")


def quarantine(c, vf, reason):
    r = c.request("POST", "/gpu/vfs/%s/quarantine" % vf, {"reason": reason})
    return eq(r.status, 200, "API-18: quarantine %s" % vf)


def cell(b, vf):
    return [v for g in page(b)["gpus"] for v in g["vfs"] if v["address"] == vf][0]


def check_quarantine(b, c, vf, other):
    # API-6, API-10: a quarantine shows within a refresh, its reason as plain text even when
    # it is markup.
    quarantine(c, vf, HOSTILE)
    ok(poll(lambda: "vf-quarantined" in cell(b, vf)["classes"], REFRESH_WAIT, 0.5),
       "API-6: the quarantined VF's cell turns vf-quarantined", cell(b, vf))
    p = page(b)
    eq((cell(b, vf)["reason"], p["images"], p["pwned"]), (HOSTILE, 0, None),
       "the quarantine reason renders as text: no <img> element, its handler never ran")
    ok([vf, HOSTILE] in p["records"], "API-10: the health records list the reason as text",
       p["records"])
    # The map a README shows: a quarantine with an ordinary reason.
    r = c.request("DELETE", "/gpu/vfs/%s/quarantine" % vf)
    eq(r.status, 200, "API-18: clear the quarantine")
    quarantine(c, other, "guest GPU init failed twice (Xid 119)")
    ok(poll(lambda: "vf-quarantined" not in cell(b, vf)["classes"] and
            "vf-quarantined" in cell(b, other)["classes"], REFRESH_WAIT, 0.5),
       "API-6: a cleared quarantine goes, another shows", (cell(b, vf), cell(b, other)))


def check_drain(b, c, pf):
    before = page(b)["profiles"]
    r = c.request("POST", "/gpu/gpus/%s/drain" % pf, {"reason": "maintenance: driver upgrade"})
    eq(r.status, 200, "API-18: drain %s" % pf)
    api = {}

    def shown():
        p = page(b)
        api.update({x["name"]: x["available"] for x in gpu_body(c)["profiles"]})
        g = [g for g in p["gpus"] if g["address"] == pf][0]
        return g["drained"] and p["profiles"] == api and p["profiles"] != before and p
    p = poll(shown, REFRESH_WAIT, 0.5)
    ok(bool(p), "HEALTH-26, API-5: the drained GPU is marked and the profiles' availability "
       "follows /resources", (page(b)["profiles"], api, before))


def check_placement_disabled(b, c):
    # DISC-7, API-5: a failed discovery disables placement; the banner shows the reason and goes
    # once discovery works again.
    sim_ctl("fault read sys/bus/pci/devices EIO")
    try:
        g = poll(lambda: (lambda g: "placement_disabled_reason" in g and g)(gpu_body(c)), 30, 0.2)
        ok(bool(g), "DISC-7: the failed discovery disables placement", gpu_body(c))
        reason = g and g["placement_disabled_reason"]
        p = poll(lambda: (lambda p: p["banner"] and reason in p["banner"] and p)(page(b)),
                 REFRESH_WAIT, 0.5)
        ok(bool(p), "API-5: the placement banner shows placement_disabled_reason",
           (reason, page(b)["banner"]))
    finally:
        sim_ctl("clear-faults")
    ok(poll(lambda: "placement_disabled_reason" not in gpu_body(c), 30, 0.2),
       "DISC-7: placement comes back once discovery succeeds")
    ok(poll(lambda: page(b)["banner"] is None, REFRESH_WAIT, 0.5),
       "API-5: the banner goes with the reason", page(b)["banner"])


def check_unauthorized(b):
    # API-12: a refused token is forgotten and the sign-in prompt comes back with a message.
    b.js("sessionStorage.setItem(arguments[0], arguments[1]);", TOKEN_KEY, "not.a.token")
    b.reload()
    p = poll(lambda: (lambda p: p["signin"] and p["message"] and p)(page(b)), REFRESH_WAIT, 0.2)
    ok(bool(p) and not p["gpus"] and "401" in p["message"],
       "API-12: a 401 shows the sign-in prompt again with a message, and no GPU grid", p)
    eq(b.js("return sessionStorage.getItem(arguments[0]);", TOKEN_KEY), None,
       "API-12: the refused token is dropped from sessionStorage")


def check_network(b, port):
    # REL-9: every request the page made went to vgpud on loopback.
    b.drain_logs()
    base = "http://127.0.0.1:%d/" % port
    # The browser's own pages (its first tab's chrome://new-tab-page) and data: URLs never
    # touch the network.
    away = [u for u in b.requests
            if not u.startswith(base) and not u.startswith(("chrome://", "data:", "about:"))]
    ok(b.requests and not away, "REL-9: every request went to http://127.0.0.1 (%d requests)"
       % len(b.requests), away[:10])


def check_csp_enforced(b):
    # The policy holds in the browser, and its violations reach the log the checks above read:
    # an inline script put into the page does not run, and is reported.
    seen = len(b.console)
    b.js("const s = document.createElement('script');"
         "s.textContent = 'document.body.dataset.inline = 1';"
         "document.head.append(s);")
    ran = b.js("return document.body.dataset.inline || null;")
    reported = poll(lambda: b.drain_logs() is not None and [
        e for e in b.console[seen:] if "Content Security Policy" in e.get("message", "")], 10, 0.2)
    ok(ran is None and bool(reported),
       "the CSP holds: an injected inline script is refused and the violation is logged",
       (ran, b.console[seen:]))


def run(c, port, token, work):
    b = Browser(work)
    try:
        b.new_session()
        ok(True, "chromedriver started headless Chromium")
        base = "http://127.0.0.1:%d" % port
        check_without_token(b, base)
        check_sign_in(b, c, token)
        check_token_storage(b, token, port)
        gpus = c.get("/gpus").json()["gpus"]
        check_instances(b, c)
        # VFs nothing claims: the last of each GPU.
        check_quarantine(b, c, gpus[1]["vfs"][-1]["address"], gpus[0]["vfs"][-2]["address"])
        # The artefact (and docs/vf-map.png): claims, a quarantine, every state in the legend.
        eq(b.viewport(1280, 800), [1280, 800], "the page is 1280x800")
        png = b.screenshot()
        with open(SCREENSHOT, "wb") as f:
            f.write(png)
        ok(png.startswith(b"\x89PNG\r\n\x1a\n"), "a PNG screenshot of the map")
        print("# screenshot: %s" % os.path.abspath(SCREENSHOT))

        check_drain(b, c, gpus[1]["address"])
        check_console(b, c)
        b.drain_logs()
        noise = severe(b.console)
        ok(not noise, "no console error or warning (so no CSP violation) while signed in", noise)

        check_placement_disabled(b, c)
        seen = len(b.console)
        b.drain_logs()
        noise = severe(b.console[seen:])
        ok(not noise, "no console error while placement is disabled", noise)

        check_unauthorized(b)
        b.drain_logs()
        # The refused requests log themselves as network errors; anything else is a fault.
        refused = tuple("%s%s - " % (base, p) for p in DATA_PATHS)
        noise = [e for e in severe(b.console[seen:])
                 if not (e.get("source") == "network" and e.get("message", "").startswith(refused)
                         and "status of 401" in e.get("message", ""))]
        ok(not noise, "after the 401 only the refused requests are logged, no script error or "
           "CSP violation", noise)
        check_network(b, port)
        print("# %d browser log entries, %d of them refused requests after the 401" % (
            len(b.console), len([e for e in b.console if e.get("source") == "network"])))
        check_csp_enforced(b)
    finally:
        b.quit()
    ok(poll(lambda: not profile_processes(b.profile), 20, 0.1),
       "chromedriver and Chromium are gone", profile_processes(b.profile))


def main():
    work = tempfile.mkdtemp(prefix="vgpud-ui-", dir=os.environ.get("TMPDIR", "/tmp"))
    daemons = []
    try:
        for prog in (CHROMIUM, CHROMEDRIVER):
            if not ok(os.access(prog, os.X_OK), "%s is installed (scripts/deps.sh)" % prog):
                return exit_status()
        make_images()
        secret = write_secret(work)
        port = free_port()
        config = vmm_config(os.path.join(work, "vgpud.yaml"), work)
        # The browser speaks TCP: listen on loopback.
        with open(config) as f:
            text = f.read()
        with open(config, "w") as f:
            f.write(text.replace('listen: ""', 'listen: "127.0.0.1:%d"' % port, 1))
        d, c = start(work, "ui", config, secret, os.path.join(work, "api.sock"))
        daemons.append(d)
        if c:
            c.port = port
            run_group("served", lambda: check_served(c, port))
            run_group("browser", lambda: run(c, port, mint(secret), work))
            left = delete_all(c)
            eq(left, [], "every instance deleted")
            daemons.remove(d)
            stop(d)
    finally:
        finish_run(daemons, work)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
