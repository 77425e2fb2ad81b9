#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-network.py VGPUD OPENAPI_YAML FAKE_NVML FAKE_QEMU VGPUCTL
#
# Instance networking (SPEC §20) through the real vgpud with fake-qemu as its VMM (SIM-15), in
# run-sim-test.sh's private PID, mount and network namespaces (NET-11, REL-9): the simulator's
# dev/net/tun is the real tun device bound over it (tests/lib/sim.sh), so every TAP, bridge and
# address below is real and lives in the test's network namespace only. `ip` reads what the
# kernel holds; vgpud itself never runs it. Output is TAP; every check names its requirements.
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from vgpud_test import (  # noqa: E402 (after the path)
    MNT, eq, exit_status, metric, mint, ok, parse_metrics, poll, run_group, sim_ctl, start, stop,
    write_secret)
from vgpud_instances import (  # noqa: E402
    INSTANCES, KERNEL, alive, console_text, create, delete, delete_when_idle, finish_run, get,
    log_has, make_images, pid_of, post, record, vmm_config, wait_exited)

NAT_BRIDGE = "vgpud0"
OPERATOR_BRIDGE = "br-test"
SUBNET = "10.233.0.0/29"  # five guest addresses: .2 to .6
TUN = os.path.join(MNT, "dev", "net", "tun")
VGPUCTL = sys.argv[5] if len(sys.argv) > 5 else None


# ---- what the kernel holds ------------------------------------------------------------------


def ip_json(*args):
    """`ip -j -d <args>` parsed; None when ip fails (no such device)."""
    r = subprocess.run(["ip", "-j", "-d"] + list(args), capture_output=True, text=True)
    return json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else None


def link(name):
    links = ip_json("link", "show", "dev", name)
    return links[0] if links else None


def taps():
    """The names of every vgt* TAP in the namespace."""
    return sorted(l["ifname"] for l in ip_json("link", "show") or []
                  if l["ifname"].startswith("vgt"))


def addresses(name):
    a = ip_json("addr", "show", "dev", name) or []
    return ["%s/%d" % (x["local"], x["prefixlen"]) for l in a for x in l.get("addr_info", [])
            if x.get("family") == "inet"]


def ip(*args):
    subprocess.run(["ip"] + list(args), check=True, capture_output=True)


def tap_of(iid):
    return "vgt" + iid[:12]


def mac_of(iid):
    """NET-2, computed here independently: 52:54:00 and SHA-256(id)'s first three bytes."""
    h = hashlib.sha256(iid.encode()).hexdigest()
    return "52:54:00:%s:%s:%s" % (h[0:2], h[2:4], h[4:6])


def nat(name, ports=None, **extra):
    n = {"mode": "nat"}
    if ports is not None:
        n["ports"] = ports
    return dict(extra, network=n)


def created(c, name, **extra):
    st, b = create(c, name, **extra)
    ok(st == 201 and b.get("state") == "Running", "%s is created and Running" % name, (st, b))
    return b if st == 201 else None


def vmm_holds_tap(pid):
    """Whether the VMM's fd 3 is the tun device (NET-3, VMM-3)."""
    try:
        st = os.stat("/proc/%d/fd/3" % pid)
    except OSError:
        return False
    return os.major(st.st_rdev) == 10 and os.minor(st.st_rdev) == 200


def holds_tun(pid):
    """Whether pid holds any descriptor of the tun device."""
    d = "/proc/%d/fd" % pid
    for fd in os.listdir(d):
        try:
            st = os.stat(os.path.join(d, fd))
        except OSError:
            continue
        if os.major(st.st_rdev) == 10 and os.minor(st.st_rdev) == 200:
            return True
    return False


def table():
    """`nft list table inet vgpud`, or "" without one."""
    r = subprocess.run(["nft", "list", "table", "inet", "vgpud"], capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else ""


def metrics(c):
    return parse_metrics(c.get("/metrics").body.decode())


def netns(name, addr, mac=None, gateway="10.233.0.1", bridge=NAT_BRIDGE):
    """A namespace standing in for a guest or a remote client: a veth pair, one end in the
    namespace with addr (and mac), the other on bridge (None: left in this namespace)."""
    host_end, ns_end = name + "h", name + "g"
    ip("netns", "add", name)
    ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end)
    ip("link", "set", ns_end, "netns", name)
    if mac:
        ip("-n", name, "link", "set", ns_end, "address", mac)
    if addr:
        ip("-n", name, "addr", "add", addr, "dev", ns_end)
    ip("-n", name, "link", "set", ns_end, "up")
    ip("-n", name, "link", "set", "lo", "up")
    if bridge:
        ip("link", "set", host_end, "master", bridge)
    ip("link", "set", host_end, "up")
    if addr and gateway:
        ip("-n", name, "route", "add", "default", "via", gateway)
    return host_end


def netns_del(name):
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    subprocess.run(["ip", "link", "del", name + "h"], capture_output=True)


LISTENER = """
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8080))
s.listen(8)
print("listening", flush=True)
while True:
    c, peer = s.accept()
    c.sendall(b"hello from the guest, you are %s\\n" % peer[0].encode())
    c.close()
"""


def fetch(addr, port, source=None):
    try:
        with socket.create_connection((addr, port), timeout=3, source_address=source) as s:
            return s.recv(200).decode()
    except OSError as e:
        return "error: %s" % e


def in_netns(name, *argv, timeout=20):
    return subprocess.run(["ip", "netns", "exec", name] + list(argv), capture_output=True,
                          text=True, timeout=timeout)


def dnsmasq_pids():
    pids = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open("/proc/%s/cmdline" % p, "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"dnsmasq"):
                pids.append(int(p))
    return pids


# ---- the checks -----------------------------------------------------------------------------


def check_nat(c, d):
    a = created(c, "net-a")
    if not a:
        return
    iid, tap = a["id"], tap_of(a["id"])
    n = a.get("network", {})
    # NET-1, NET-2, NET-5, NET-9: a body without network gets nat, the derived MAC and the
    # lowest free address, with the bridge, prefix and gateway of the NAT subnet.
    eq(n.get("mode"), "nat", "NET-1: no network in the body is network.default_mode (nat)")
    eq(n.get("mac"), mac_of(iid), "NET-2: the MAC is 52:54:00 and SHA-256(id)'s first bytes")
    eq(n.get("ip"), "10.233.0.2", "NET-5: the lowest free address (gateway excluded)")
    eq((n.get("bridge"), n.get("prefix"), n.get("gateway")), (NAT_BRIDGE, 29, "10.233.0.1"),
       "NET-9: bridge, prefix and gateway of the NAT network")
    eq(n.get("tap"), tap, "NET-9: tap while the VMM runs, vgt and 12 characters of the id")
    rn = (record(iid) or {}).get("network", {})
    eq((rn.get("mac"), rn.get("ip")), (n.get("mac"), n.get("ip")),
       "NET-2, NET-5, INST-2: MAC and address are persisted in the record")
    ok("tap" not in rn, "INST-2: the record holds no runtime TAP name", rn)

    # NET-4: the NAT bridge with the gateway address, up.
    br = link(NAT_BRIDGE)
    ok(br and br.get("linkinfo", {}).get("info_kind") == "bridge" and "UP" in br["flags"],
       "NET-4: the NAT bridge exists and is up", br)
    ok("10.233.0.1/29" in addresses(NAT_BRIDGE), "NET-4: it holds <subnet>.1/<prefix>",
       addresses(NAT_BRIDGE))

    # NET-3: the TAP on the bridge, up, the bridge's MTU, isolated.
    t = link(tap)
    ok(t and t.get("master") == NAT_BRIDGE, "NET-3: the TAP is a port of the NAT bridge", t)
    ok(t and "UP" in t["flags"], "NET-3: the TAP is up", t)
    ok(t and br and t.get("mtu") == br.get("mtu"), "NET-3: the TAP has the bridge's MTU",
       (t or {}).get("mtu"))
    slave = (t or {}).get("linkinfo", {}).get("info_slave_data", {})
    ok(slave.get("isolated") is True, "NET-3: network.nat.isolate makes the port isolated", slave)
    ok(t and t.get("linkinfo", {}).get("info_data", {}).get("type") == "tap",
       "NET-3: it is a TAP", t)
    flags = (t or {}).get("linkinfo", {}).get("info_data", {})
    ok(flags.get("pi") is False and flags.get("vnet_hdr") is True,
       "NET-3: IFF_NO_PI and IFF_VNET_HDR", flags)

    # NET-3, VMM-3, SIM-15: fd 3 of the VMM is the TAP; vgpud closed its own copies.
    pid = pid_of(iid)
    ok(pid and vmm_holds_tap(pid), "NET-3, VMM-3: the VMM holds the TAP as fd 3")
    ok(("fake-qemu: nic net0 tap=%s mac=%s vhost=off" % (tap, mac_of(iid))) in
       console_text(c, iid), "SIM-15: fake-qemu found the instance's TAP on fd 3")
    ok(not holds_tun(d.proc.pid), "NET-3: vgpud keeps no TAP descriptor after the spawn")

    # NET-2, NET-5: stop and start keep MAC and address; the TAP goes with the VMM and comes back.
    st, b = post(c, iid, "stop")
    ok(st == 200 and b.get("state") == "Stopped", "stop", (st, b))
    ok(poll(lambda: link(tap) is None, 10), "NET-3: no TAP after the VMM stopped")
    ok("tap" not in b.get("network", {}), "NET-9: no tap while stopped", b.get("network"))
    st, b = post(c, iid, "start")
    ok(st == 200 and b.get("state") == "Running", "start", (st, b))
    eq((b.get("network", {}).get("mac"), b.get("network", {}).get("ip")),
       (n.get("mac"), n.get("ip")), "NET-2, NET-5: stop and start keep MAC and address")
    ok(link(tap) is not None and link(tap).get("master") == NAT_BRIDGE,
       "NET-3: the TAP is back on the bridge after the start")

    # Decision 14: kill -9 of the VMM leaves no TAP.
    pid = pid_of(iid)
    os.kill(pid, signal.SIGKILL)
    ok(wait_exited(c, iid, "Stopped") or wait_exited(c, iid, "Failed"),
       "INST-19: the killed VMM is seen to exit")
    ok(poll(lambda: link(tap) is None, 10), "NET-3: no TAP left after the VMM is killed -9")
    eq(get(c, iid)["network"].get("ip"), "10.233.0.2", "NET-5: the address stays with the record")

    # NET-5: a second instance gets the next address and its own MAC.
    b2 = created(c, "net-b")
    if b2:
        eq(b2["network"].get("ip"), "10.233.0.3", "NET-5: the next instance the next address")
        ok(b2["network"].get("mac") != n.get("mac"), "NET-2: and a MAC of its own")
        eq(delete(c, b2["id"])[0], 204, "net-b is deleted")
        ok(poll(lambda: link(tap_of(b2["id"])) is None, 10), "NET-3: no TAP after the delete")
    eq(delete_when_idle(c, iid)[0], 204, "net-a is deleted")
    # NET-5: released at delete: the lowest address is free again.
    b3 = created(c, "net-c")
    if b3:
        eq(b3["network"].get("ip"), "10.233.0.2", "NET-5: a deleted instance's address is free")
        eq(delete(c, b3["id"])[0], 204, "net-c is deleted")


def check_body(c):
    # NET-1: the body's refusals, each 400 invalid_request naming the field.
    cases = [
        ("a bridge in nat mode", {"mode": "nat", "bridge": OPERATOR_BRIDGE}, "network.bridge"),
        ("bridge mode without a bridge", {"mode": "bridge"}, "network.bridge"),
        ("an address in nat mode", {"mode": "nat", "ip": "10.233.0.9", "prefix": 29},
         "network.ip"),
        ("ports in bridge mode", {"mode": "bridge", "bridge": OPERATOR_BRIDGE,
                                  "ports": [{"host": 20001, "guest": 22, "protocol": "tcp"}]},
         "network.ports"),
        ("a mac chosen by the client", {"mode": "nat", "mac": "52:54:00:00:00:01"}, "mac"),
        ("an unknown mode", {"mode": "routed"}, "network.mode"),
        ("17 ports", {"mode": "nat", "ports": [{"host": 20000 + k, "guest": 22,
                                                "protocol": "tcp"} for k in range(17)]},
         "network.ports"),
        ("a port twice", {"mode": "nat", "ports": [{"host": 20001, "guest": 22,
                                                    "protocol": "tcp"},
                                                   {"host": 20001, "guest": 23,
                                                    "protocol": "tcp"}]}, "network.ports[1]"),
        ("a port outside network.nat.port_range",
         {"mode": "nat", "ports": [{"host": 8080, "guest": 80, "protocol": "tcp"}]},
         "network.nat.port_range"),
        ("a bridge not in network.bridges", {"mode": "bridge", "bridge": "eth0"},
         "network.bridges"),
        ("host port 0", {"mode": "nat", "ports": [{"host": 0, "guest": 22, "protocol": "tcp"}]},
         "network.ports[0].host must be 1..65535"),
        ("host port 65536", {"mode": "nat", "ports": [{"host": 65536, "guest": 22,
                                                      "protocol": "tcp"}]},
         "network.ports[0].host must be 1..65535"),
        ("guest port 0", {"mode": "nat", "ports": [{"host": 20001, "guest": 0,
                                                    "protocol": "tcp"}]},
         "network.ports[0].guest must be 1..65535"),
        ("protocol sctp", {"mode": "nat", "ports": [{"host": 20001, "guest": 22,
                                                     "protocol": "sctp"}]},
         "network.ports[0].protocol must be tcp or udp"),
    ]
    # REL-13: of these, the hostile ones: a bridge not in network.bridges, a host port given
    # twice (overlapping forwards), ports out of range and outside network.nat.port_range.
    for name, net, field in cases:
        st, b = create(c, "bad-net", network=net)
        ok(st == 400 and b.get("code") == "invalid_request" and field in b.get("message", ""),
           "NET-1, REL-13: %s is 400 invalid_request naming %s" % (name, field), (st, b))
    eq(c.get("/instances").json(), [], "NET-1: no refused body left an instance behind")
    eq(taps(), [], "NET-1: nor a TAP")


def check_ports(c):
    # NET-1: a host port is forwarded to one guest; a second claim names the holder.
    port = [{"host": 20001, "guest": 22, "protocol": "tcp"}]
    a = created(c, "fwd-a", **nat("fwd-a", port))
    if not a:
        return
    eq(a["network"].get("ports"), port, "NET-9: the instance shows its port forwards")
    st, b = create(c, "fwd-b", **nat("fwd-b", port))
    ok(st == 409 and b.get("code") == "already_exists" and "fwd-a" in b.get("message", ""),
       "NET-1, REL-13: a host port another instance forwards is 409 already_exists naming it",
       (st, b))
    udp = [{"host": 20001, "guest": 53, "protocol": "udp"}]
    b2 = created(c, "fwd-udp", **nat("fwd-udp", udp))
    ok(b2 is not None, "NET-1: the same port number in udp is another forward")
    for x in (a, b2):
        if x:
            eq(delete(c, x["id"])[0], 204, "%s is deleted" % x["name"])


def check_exhausted(c):
    # NET-5: five guest addresses in a /29; the sixth nat instance is refused and leaves nothing.
    made = [created(c, "full-%d" % k) for k in range(5)]
    eq(sorted(x["network"]["ip"] for x in made if x),
       ["10.233.0.%d" % k for k in range(2, 7)], "NET-5: the five addresses of the /29")
    st, b = create(c, "full-5")
    ok(st == 409 and b.get("code") == "insufficient_resources" and
       "no free address" in b.get("message", ""),
       "NET-5: an exhausted subnet is 409 insufficient_resources", (st, b))
    eq(len(taps()), 5, "NET-5: the refusal made no TAP")
    st, b = create(c, "none-0", network={"mode": "none"})
    ok(st == 201, "NET-1: mode none needs no address", (st, b))
    if st == 201:
        ok("mac" not in b["network"] and "ip" not in b["network"],
           "NET-1: mode none has no MAC and no address", b["network"])
        ok("fake-qemu: nic" not in console_text(c, b["id"]),
           "VMM-1, NET-1: mode none gives QEMU no NIC")
        made.append(b)
    for x in made:
        if x:
            eq(delete(c, x["id"])[0], 204, "%s is deleted" % x["name"])
    eq(taps(), [], "NET-3: every TAP went with its VMM")


def check_bridge_mode(c):
    # NET-7: the operator's bridge, from network.bridges; the TAP joins it, not isolated.
    ip("link", "add", OPERATOR_BRIDGE, "type", "bridge")
    try:
        net = {"mode": "bridge", "bridge": OPERATOR_BRIDGE}
        st, b = create(c, "br-down", network=net)
        ok(st == 409 and b.get("code") == "invalid_state" and
           b.get("message", "").endswith("bridge %s is missing or down" % OPERATOR_BRIDGE),
           "NET-7: a bridge that is down is 409 invalid_state", (st, b))
        eq([i["name"] for i in c.get("/instances").json()], [],
           "NET-8: the failed create left no record")
        eq(taps(), [], "NET-8: and no TAP")
        ip("link", "set", OPERATOR_BRIDGE, "up")
        static = dict(net, ip="192.0.2.10", prefix=24, gateway="192.0.2.1", dns=["192.0.2.53"])
        a = created(c, "br-a", network=static)
        if not a:
            return
        n = a["network"]
        eq((n.get("mode"), n.get("bridge"), n.get("ip"), n.get("prefix"), n.get("gateway")),
           ("bridge", OPERATOR_BRIDGE, "192.0.2.10", 24, "192.0.2.1"),
           "NET-1, NET-9: bridge mode keeps the static addressing it was given")
        t = link(tap_of(a["id"]))
        ok(t and t.get("master") == OPERATOR_BRIDGE and "UP" in t["flags"],
           "NET-3, NET-7: the TAP joins the operator's bridge", t)
        slave = (t or {}).get("linkinfo", {}).get("info_slave_data", {})
        ok(slave.get("isolated") is False, "NET-3: isolated is for nat mode only", slave)
        ok(addresses(OPERATOR_BRIDGE) == [], "NET-7: vgpud sets no address on it")
        # NET-7 at start: the bridge went away while the instance was stopped.
        st, _ = post(c, a["id"], "stop")
        eq(st, 200, "stop")
        ip("link", "del", OPERATOR_BRIDGE)
        st, b = post(c, a["id"], "start")
        ok(st == 409 and b.get("code") == "invalid_state" and
           "bridge %s is missing or down" % OPERATOR_BRIDGE in b.get("message", ""),
           "NET-7: a missing bridge fails the start with 409 invalid_state", (st, b))
        eq((get(c, a["id"]) or {}).get("state"), "Stopped", "NET-8: the instance stays Stopped")
        eq(taps(), [], "NET-8: no TAP is left behind")
        eq(delete(c, a["id"])[0], 204, "br-a is deleted")
    finally:
        subprocess.run(["ip", "link", "del", OPERATOR_BRIDGE], capture_output=True)


def check_nat_host(c, work):
    # NET-4: ip_forward, and one DNAT per forward in prerouting and output, in table vgpud.
    web = created(c, "web", **nat("web", [{"host": 20001, "guest": 8080, "protocol": "tcp"}]))
    if not web:
        return
    gip, gmac = web["network"]["ip"], web["network"]["mac"]
    dnat = "fib daddr type local tcp dport 20001 dnat ip to %s:8080" % gip
    ok(poll(lambda: table().count(dnat) == 2, 10),
       "NET-4: the forward is a DNAT in prerouting and in output", table())
    with open("/proc/sys/net/ipv4/ip_forward") as f:
        eq(f.read().strip(), "1", "NET-4: net.ipv4.ip_forward is 1 (the test's namespace)")
    hosts = os.path.join(work, "run", "network", "hosts")
    dhcp_hosts = os.path.join(work, "run", "network", "dhcp-hosts")
    ok(poll(lambda: os.path.exists(hosts) and
            open(hosts).read() == "%s web.vgpud.internal web\n" % gip, 10),
       "NET-6: the hosts file names the instance under vgpud.internal")
    eq(open(dhcp_hosts).read(), "%s,%s,web\n" % (gmac, gip),
       "NET-6: the DHCP hosts file gives its MAC its address")
    ok(poll(lambda: metric(metrics(c), "vgpud_network_dnsmasq_up") == 1, 10),
       "NET-6, NET-10: dnsmasq runs")
    # NET-9: GET /network shows the host side.
    net = c.get("/network").json()
    eq((net["default_mode"], net["bridges"], net["nat"]["bridge"], net["nat"]["subnet"],
        net["nat"]["gateway"]), ("nat", [OPERATOR_BRIDGE], NAT_BRIDGE, SUBNET, "10.233.0.1"),
       "NET-9: /network shows the modes, bridges and the NAT network")
    eq(net["nat"]["in_use"], [{"ip": gip, "mac": gmac, "instance_id": web["id"], "name": "web"}],
       "NET-9: /network shows the addresses in use")
    eq(net["nat"]["addresses"], {"allocated": 1, "free": 4}, "NET-9: and how many are free")
    eq(net["nat"]["port_forwards"], [{"host": 20001, "protocol": "tcp", "guest": 8080,
                                      "ip": gip, "instance_id": web["id"]}],
       "NET-9: /network shows the port forwards")
    ok(net["nat"]["dnsmasq"]["up"] and "error" not in net["nat"],
       "NET-9: /network shows dnsmasq up and no failure", net["nat"])
    fams = metrics(c)
    eq((metric(fams, "vgpud_network_addresses", state="allocated"),
        metric(fams, "vgpud_network_addresses", state="free")), (1, 4),
       "NET-10: addresses allocated and free")

    listener = None
    try:
        # A guest-side namespace at the instance's address stands in for the guest's NIC.
        netns("g1", gip + "/29")
        listener = subprocess.Popen(["ip", "netns", "exec", "g1", sys.executable, "-c", LISTENER],
                                    stdout=subprocess.PIPE, text=True)
        ok(listener.stdout.readline().strip() == "listening", "the guest's listener runs")
        # From this host, to a local address of it.
        got = fetch("10.233.0.1", 20001)
        ok(got.startswith("hello from the guest"),
           "NET-4, NET-1: a TCP connection through the port forward from this host", got)
        # From another host: a client namespace routed through this one.
        netns("c1", "192.0.2.2/24", gateway="192.0.2.1", bridge=None)
        ip("addr", "add", "192.0.2.1/24", "dev", "c1h")
        got = in_netns("c1", sys.executable, "-c",
                       "import socket; s = socket.create_connection(('192.0.2.1', 20001), 3); "
                       "print(s.recv(200).decode(), end='')").stdout
        ok(got.startswith("hello from the guest, you are 192.0.2.2"),
           "NET-4: and from another host, the client's address kept", got)

        # NET-6: DHCP for the instance's MAC answers its address; DNS its name.
        netns("g2", None, mac=gmac)
        r = in_netns("g2", "busybox", "udhcpc", "-i", "g2g", "-n", "-q", "-f", "-t", "5",
                     "-T", "1", "-s", "/bin/true")
        ok("lease of %s obtained" % gip in r.stdout + r.stderr,
           "NET-6: dnsmasq answers a DHCP request for the instance's MAC with its address",
           r.stdout + r.stderr)
        r = subprocess.run(["busybox", "nslookup", "web.vgpud.internal", "10.233.0.1"],
                           capture_output=True, text=True, timeout=20)
        ok(gip in r.stdout.split("web.vgpud.internal", 1)[-1],
           "NET-6: dnsmasq resolves <name>.vgpud.internal", r.stdout + r.stderr)

        # REL-14: dnsmasq killed is restarted, and answers again.
        before = metric(metrics(c), "vgpud_network_dnsmasq_restarts_total")
        for pid in dnsmasq_pids():
            os.kill(pid, signal.SIGKILL)
        ok(poll(lambda: metric(metrics(c), "vgpud_network_dnsmasq_restarts_total") == before + 1
                and metric(metrics(c), "vgpud_network_dnsmasq_up") == 1, 15),
           "REL-14, NET-6, NET-10: a killed dnsmasq is restarted and counted")
        ok(poll(lambda: gip in subprocess.run(
            ["busybox", "nslookup", "web.vgpud.internal", "10.233.0.1"], capture_output=True,
            text=True, timeout=20).stdout.split("web.vgpud.internal", 1)[-1], 10),
           "REL-14: the restarted dnsmasq resolves the name again")

        # REL-14: table vgpud flushed by hand is restored by the next reconcile pass.
        subprocess.run(["nft", "flush", "table", "inet", "vgpud"], check=True)
        ok(dnat not in table(), "the table was flushed")
        ok(poll(lambda: table().count(dnat) == 2, 20),
           "REL-14: the next pass restores table vgpud")
        got = []
        ok(poll(lambda: got.append(fetch("10.233.0.1", 20001)) or
                got[-1].startswith("hello from the guest"), 10),
           "REL-14: and the forward works again",
           (got, table(), subprocess.run(["ip", "neigh"], capture_output=True, text=True).stdout))
    finally:
        if listener:
            listener.kill()
            listener.wait()
        for n in ("g1", "g2", "c1"):
            netns_del(n)

    # NET-4, NET-6: the delete takes the forward and the names away.
    eq(delete(c, web["id"])[0], 204, "web is deleted")
    ok(poll(lambda: dnat not in table() and open(hosts).read() == "" and
            open(dhcp_hosts).read() == "", 10),
       "NET-4, NET-6: table and hosts files follow the delete")


def check_faults(c):
    # REL-14: the NAT bridge deleted behind vgpud's back is made again by the next start.
    a = created(c, "fault-a")
    if not a:
        return
    # REL-14: deleted under a running guest, the next pass makes it again with the TAP on it.
    ip("link", "del", NAT_BRIDGE)
    ok(poll(lambda: (link(tap_of(a["id"])) or {}).get("master") == NAT_BRIDGE and
            "10.233.0.1/29" in addresses(NAT_BRIDGE), 20),
       "REL-14: the next pass makes the NAT bridge again and re-attaches running guests' TAPs")
    post(c, a["id"], "stop")
    ip("link", "del", NAT_BRIDGE)
    st, b = post(c, a["id"], "start")
    ok(st == 200 and link(NAT_BRIDGE) is not None and
       "10.233.0.1/29" in addresses(NAT_BRIDGE),
       "REL-14, NET-4: a deleted NAT bridge is made again, with its address", (st, b))
    ok((link(tap_of(a["id"])) or {}).get("master") == NAT_BRIDGE,
       "REL-14: the TAP is on the new bridge")
    eq(delete_when_idle(c, a["id"])[0], 204, "fault-a is deleted")

    # REL-14, NET-8: /dev/net/tun missing fails the create naming the step, and rolls back.
    subprocess.run(["umount", TUN], check=True)
    try:
        sim_ctl("fault open dev/net/tun ENOENT")
        st, b = create(c, "fault-b")
        ok(st == 500 and b.get("code") == "internal" and
           "network: open TAP vgt" in b.get("message", "") and
           "<dev_root>/net/tun: No such file or directory" in b.get("message", ""),
           "REL-14, NET-8: a missing tun device fails the create with the step named", (st, b))
        eq(c.get("/instances").json(), [], "NET-8: the record and its address are gone")
        sim_ctl("clear-faults")
    finally:
        subprocess.run(["mount", "--bind", "/dev/net/tun", TUN], check=True)
    b2 = created(c, "fault-c")
    if b2:
        eq(b2["network"].get("ip"), "10.233.0.2",
           "NET-8: the failed create's address was never held")
        eq(delete(c, b2["id"])[0], 204, "fault-c is deleted")


def check_nft_refusing(c):
    # REL-14, NET-8: nft refusing the replace (another process owns a table of that name):
    # nat creates fail closed naming the step, running VMs are untouched; once nft accepts
    # again, the next pass brings creates back.
    keep = created(c, "keep")
    if not keep:
        return
    owner = subprocess.Popen(["nft", "-i"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, text=True)
    try:
        owner.stdin.write("delete table inet vgpud\nadd table inet vgpud { flags owner; }\n")
        owner.stdin.flush()
        ok(poll(lambda: "nftables" in c.get("/network").json()["nat"].get("error", ""), 20),
           "REL-14: the next pass fails at nft and says so", c.get("/network").json()["nat"])
        ok(metric(metrics(c), "vgpud_network_errors_total", step="nft") >= 1,
           "NET-10: the failure is counted under step nft")
        st, b = create(c, "refused")
        ok(st == 503 and b.get("code") == "placement_disabled" and
           b.get("message", "").startswith("network unavailable: network: nftables: replace "
                                            "table vgpud: "),
           "NET-8: a nat create fails closed, 503 naming the step", (st, b))
        st, b = create(c, "no-nic", network={"mode": "none"})
        ok(st == 201, "NET-8: a create without a NIC is not affected", (st, b))
        if st == 201:
            eq(delete(c, b["id"])[0], 204, "no-nic is deleted")
        ok((get(c, keep["id"]) or {}).get("state") == "Running" and
           (link(tap_of(keep["id"])) or {}).get("master") == NAT_BRIDGE,
           "REL-14: the running VM is untouched")
    finally:
        owner.stdin.close()
        owner.wait()
    ok(poll(lambda: "error" not in c.get("/network").json()["nat"] and
            "masquerade" in table(), 20),
       "REL-14: once nft accepts again, the next pass restores the table")
    again = created(c, "accepted")
    for x in (keep, again):
        if x:
            eq(delete(c, x["id"])[0], 204, "%s is deleted" % x["name"])


def check_crash(work, config, secret, sock, daemons):
    # Decision 14, NET-5: kill -9 of vgpud and of every VMM; the restart finds no TAP and no
    # address held twice, and the instances start again with their own.
    d, c = start(work, "crash", config, secret, sock)
    daemons.append(d)
    if not c:
        return
    made = [created(c, "crash-%d" % k) for k in range(3)]
    pids = [pid_of(x["id"]) for x in made if x]
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait()
    for pid in pids:
        if pid and alive(pid):
            os.kill(pid, signal.SIGKILL)
    ok(poll(lambda: taps() == [], 10), "decision 14: no TAP outlives its killed VMM", taps())
    old = dnsmasq_pids()
    ok(len(old) == 1, "the killed vgpud's dnsmasq runs on", old)
    d2, c2 = start(work, "crash-restart", config, secret, sock)
    daemons.append(d2)
    if not c2:
        return
    # NET-6: the restarted vgpud stops the dnsmasq its predecessor left, and runs its own.
    ok(poll(lambda: len(dnsmasq_pids()) == 1 and dnsmasq_pids() != old and
            metric(metrics(c2), "vgpud_network_dnsmasq_up") == 1, 15),
       "NET-6: after a kill -9 of vgpud, the restart runs exactly one dnsmasq, its own",
       dnsmasq_pids())
    insts = c2.get("/instances").json()
    ips = [i["network"].get("ip") for i in insts]
    eq(sorted(ips), sorted(set(ips)), "NET-5: after the restart no address is held twice")
    eq(sorted(ips), ["10.233.0.2", "10.233.0.3", "10.233.0.4"],
       "NET-5: each record kept its address")
    eq(taps(), [], "decision 14: the restart leaves no TAP")
    for i in insts:
        st, b = post(c2, i["id"], "start")
        if st == 409:  # INST-19's exit operation may still run
            poll(lambda: (get(c2, i["id"]) or {}).get("state") in ("Stopped", "Failed"), 10)
            st, b = post(c2, i["id"], "start")
        ok(st == 200 and b["network"]["ip"] == i["network"]["ip"] and
           link(tap_of(i["id"])) is not None,
           "NET-5, NET-3: %s starts again with its address and a TAP" % i["name"], (st, b))
    for i in insts:
        eq(delete_when_idle(c2, i["id"])[0], 204, "%s is deleted" % i["name"])
    eq(taps(), [], "and no TAP is left")
    stop(d2)


def check_vgpuctl(c, work, secret, sock):
    # OPS-7, NET-1, NET-9: vgpuctl's create flags make a body the daemon takes, `instances get`
    # shows the forward, and `instances ssh` runs ssh (a fake on PATH that prints its arguments)
    # to the address or, with --via HOST, to HOST and the forward to guest port 22.
    if not ok(VGPUCTL, "vgpuctl given as the fifth argument"):
        return
    bin_dir = os.path.join(work, "fake-bin")
    os.makedirs(bin_dir, exist_ok=True)
    with open(os.path.join(bin_dir, "ssh"), "w") as f:
        f.write('#!/bin/sh\nfor a in "$@"; do printf \'%s\\n\' "$a"; done\n')
    os.chmod(os.path.join(bin_dir, "ssh"), 0o755)
    env = dict(os.environ, PATH=bin_dir + ":/usr/sbin:/usr/bin:/sbin:/bin",
               VGPUD_TOKEN=mint(secret))
    base = [VGPUCTL, "--unix", sock]

    def ctl(*args):
        return subprocess.run(base + list(args), capture_output=True, text=True, env=env,
                              timeout=60)

    r = ctl("instances", "create", "--name", "ctl-a", "--vcpus", "1", "--memory-mb", "256",
            "--kernel", KERNEL, "--network", "nat", "--port", "20005:22", "--port",
            "20006:53/udp")
    ok(r.returncode == 0 and "ports    20005->22/tcp, 20006->53/udp" in r.stdout,
       "OPS-7, NET-1: vgpuctl create --network nat --port makes the forwards", r.stdout + r.stderr)
    a = next((i for i in c.get("/instances").json() if i["name"] == "ctl-a"), None)
    if not a:
        return
    eq(a["network"].get("ports"), [{"host": 20005, "guest": 22, "protocol": "tcp"},
                                   {"host": 20006, "guest": 53, "protocol": "udp"}],
       "NET-9: the daemon holds the forwards vgpuctl asked for")
    r = ctl("instances", "ssh", a["id"], "--", "-l", "root", "hostname")
    eq((r.returncode, r.stdout.split("\n")),
       (0, ["-o", "StrictHostKeyChecking=accept-new", a["network"]["ip"], "-l", "root",
            "hostname", ""]),
       "OPS-7: vgpuctl instances ssh runs ssh to the instance's address")
    r = ctl("instances", "ssh", "--via", "127.0.0.1", a["id"])
    eq((r.returncode, r.stdout.split("\n")),
       (0, ["-o", "StrictHostKeyChecking=accept-new", "-p", "20005", "127.0.0.1", ""]),
       "OPS-7: with --via, that host and the forward to port 22")
    r = ctl("instances", "create", "--name", "ctl-b", "--vcpus", "1", "--memory-mb", "256",
            "--kernel", KERNEL, "--network", "none")
    b = next((i for i in c.get("/instances").json() if i["name"] == "ctl-b"), None)
    ok(r.returncode == 0 and b and "ip" not in b["network"], "OPS-7: vgpuctl create --network "
       "none", r.stdout + r.stderr)
    if b:
        r = ctl("instances", "ssh", b["id"])
        eq((r.returncode, r.stdout, r.stderr),
           (1, "", "error: instance %s has no address vgpud knows (network mode none)\n"
            % b["id"]), "OPS-7: ssh to an instance without an address is refused")
        eq(delete(c, b["id"])[0], 204, "ctl-b is deleted")
    eq(delete(c, a["id"])[0], 204, "ctl-a is deleted")


def edit_record(iid, **network):
    """A hand edit of instance.json's network, written as an operator's editor would: whole,
    then renamed into place (vgpud only reads records of a stopped daemon here)."""
    path = os.path.join(INSTANCES, iid, "instance.json")
    rec = record(iid)
    rec["network"].update(network)
    with open(path + ".edit", "w") as f:
        json.dump(rec, f)
    os.rename(path + ".edit", path)


def check_records_disagree(work, config, secret, sock, daemons):
    # NET-5, NET-8: records naming an address twice, or one outside the subnet, keep nat creates
    # refused (503 with the reason) from start-up until the record is deleted or corrected;
    # bridge and none creates still work and the running VM is untouched.
    d, c = start(work, "records", config, secret, sock)
    daemons.append(d)
    if not c:
        return
    a, b = created(c, "rec-a"), created(c, "rec-b")
    if not a or not b:
        return
    st, _ = post(c, b["id"], "stop")
    eq(st, 200, "rec-b is stopped")
    a_pid = pid_of(a["id"])
    stop(d, " (records)")
    edit_record(b["id"], ip=a["network"]["ip"])

    d, c = start(work, "records-twice", config, secret, sock)
    daemons.append(d)
    if not c:
        return
    reason = "instances %s and %s both hold address %s" % (
        min(a["id"], b["id"]), max(a["id"], b["id"]), a["network"]["ip"])
    ok(poll(lambda: log_has(d, "records disagree on NAT addresses.*" + reason), 10),
       "NET-5: the disagreement is logged at start-up", d.log_text()[-2000:])
    st, body = create(c, "rec-c")
    eq((st, body.get("code"), body.get("message")),
       (503, "placement_disabled", "network unavailable: " + reason),
       "NET-5, NET-8: a nat create is refused 503 with the reason")
    eq(c.get("/network").json()["nat"].get("error"), reason,
       "NET-5, NET-9: GET /network says why nat creates are refused")
    none = created(c, "rec-none", network={"mode": "none"})
    ok(none is not None, "NET-5: a create without a NIC still works")
    ip("link", "add", OPERATOR_BRIDGE, "type", "bridge")
    try:
        ip("link", "set", OPERATOR_BRIDGE, "up")
        br = created(c, "rec-br", network={"mode": "bridge", "bridge": OPERATOR_BRIDGE})
        ok(br is not None, "NET-5: a bridge create still works")
        for x in (none, br):
            if x:
                eq(delete(c, x["id"])[0], 204, "%s is deleted" % x["name"])
    finally:
        subprocess.run(["ip", "link", "del", OPERATOR_BRIDGE], capture_output=True)
    ga = get(c, a["id"]) or {}
    ok(ga.get("state") == "Running" and pid_of(a["id"]) == a_pid and alive(a_pid) and
       (link(tap_of(a["id"])) or {}).get("master") == NAT_BRIDGE,
       "NET-5, NET-8: the running VM is untouched", ga)

    # Fixed by deleting the record: the next nat create works, and the fix is logged.
    eq(delete(c, b["id"])[0], 204, "rec-b, the record holding the address twice, is deleted")
    c2 = created(c, "rec-c")
    ok(c2 is not None and c2["network"]["ip"] != a["network"]["ip"],
       "NET-5: once the record is deleted, nat creates work again with a free address", c2)
    ok(log_has(d, "records agree on NAT addresses again"), "NET-5: the fix is logged")
    ok("error" not in c.get("/network").json()["nat"], "NET-9: and /network shows no reason")
    if not c2:
        return
    st, _ = post(c, c2["id"], "stop")
    eq(st, 200, "rec-c is stopped")

    # A record placed by hand while vgpud runs is taken in by the next pass (REC-3), and its
    # address held twice is found then.
    copy_id = "z" * 20
    rec = record(c2["id"])
    rec.update(id=copy_id, name="rec-copy")
    rec["network"]["mac"] = "52:54:00:ff:ff:fe"
    os.makedirs(os.path.join(INSTANCES, copy_id))
    with open(os.path.join(INSTANCES, copy_id, "instance.json"), "w") as f:
        json.dump(rec, f)
    reason = "instances %s and %s both hold address %s" % (c2["id"], copy_id,
                                                            c2["network"]["ip"])
    ok(poll(lambda: c.get("/network").json()["nat"].get("error") == reason, 20),
       "NET-5: a record taken in by a pass that holds an address twice is found",
       c.get("/network").json()["nat"])
    ok(log_has(d, "records disagree on NAT addresses.*" + reason), "NET-5: and logged")
    st, body = create(c, "rec-d")
    eq((st, body.get("message")), (503, "network unavailable: " + reason),
       "NET-5, NET-8: nat creates are refused again")
    eq(delete(c, copy_id)[0], 204, "the copied record is deleted")
    ok("error" not in c.get("/network").json()["nat"], "NET-5: the reason is gone with it")
    stop(d, " (records-twice)")

    # An address outside the subnet, then corrected by hand.
    edit_record(c2["id"], ip="192.0.2.77")
    d, c = start(work, "records-outside", config, secret, sock)
    daemons.append(d)
    if not c:
        return
    reason = "instance %s holds address 192.0.2.77 outside network.nat.subnet" % c2["id"]
    st, body = create(c, "rec-d")
    eq((st, body.get("code"), body.get("message")),
       (503, "placement_disabled", "network unavailable: " + reason),
       "NET-5, NET-8: an address outside the subnet refuses nat creates, 503 with the reason")
    ok(log_has(d, "records disagree on NAT addresses.*" + reason),
       "NET-5: the address outside the subnet is logged")
    eq(c.get("/instances").json().__len__(), 2, "NET-8: the refusal left no record")
    stop(d, " (records-outside)")
    edit_record(c2["id"], ip=c2["network"]["ip"])
    d, c = start(work, "records-corrected", config, secret, sock)
    daemons.append(d)
    if not c:
        return
    e = created(c, "rec-d")
    ok(e is not None, "NET-5: once the record is corrected, nat creates work again")
    for i in c.get("/instances").json():
        eq(delete_when_idle(c, i["id"])[0], 204, "%s is deleted" % i["name"])
    eq(taps(), [], "and no TAP is left")
    stop(d, " (records-corrected)")


def main():
    work = tempfile.mkdtemp(prefix="vgpud-network-")
    # dnsmasq reads its hosts files as nobody once it dropped root, as from /run/vgpud (0755).
    os.chmod(work, 0o755)
    daemons = []
    try:
        make_images()
        secret = write_secret(work)
        config = vmm_config(os.path.join(work, "vgpud.yaml"), work, extra_vmm="""network:
  bridges: [%s]
  nat:
    subnet: %s
    port_range: 20000-20010
""" % (OPERATOR_BRIDGE, SUBNET))
        sock = os.path.join(work, "api.sock")
        if not os.path.exists("/dev/net/tun") or os.geteuid() != 0:
            print("1..0 # SKIP NET-11: needs root and /dev/net/tun")
            return 0
        d, c = start(work, "main", config, secret, sock)
        daemons.append(d)
        if c:
            run_group("nat", lambda: check_nat(c, d))
            run_group("nat-host", lambda: check_nat_host(c, work))
            run_group("body", lambda: check_body(c))
            run_group("ports", lambda: check_ports(c))
            run_group("exhausted", lambda: check_exhausted(c))
            run_group("bridge", lambda: check_bridge_mode(c))
            run_group("faults", lambda: check_faults(c))
            run_group("nft-refusing", lambda: check_nft_refusing(c))
            run_group("vgpuctl", lambda: check_vgpuctl(c, work, secret, sock))
            stop(d)
        run_group("crash", lambda: check_crash(work, config, secret, sock, daemons))
        run_group("records", lambda: check_records_disagree(work, config, secret, sock, daemons))
    finally:
        finish_run(daemons, work)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
