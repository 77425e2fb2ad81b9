/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Unit tests for src/net, the pure part: NET-2's MAC and its collision rule, NET-3's TAP name,
 * the NAT subnet of CFG-3 and NET-5's allocation, and base/'s IPv4 parsers under them. The
 * kernel side (TAP, bridge, rtnetlink) is tests/unit/test-net-link.c, in a network namespace.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "base/base.h"
#include "net/net.h"
#include "testlib.h"

#define ID "k3x9q2m8v1c4z7n5b0wd"

/* NET-2: 52:54:00 and the first three bytes of SHA-256("k3x9q2m8v1c4z7n5b0wd"). */
static void test_mac_derive(void **state)
{
        char mac[NET_MAC_STRLEN], again[NET_MAC_STRLEN];
        assert_int_equal(net_mac_derive(ID, NULL, NULL, mac), 0);
        assert_true(mac_address_is_valid(mac));
        assert_true(startswith(mac, "52:54:00:"));
        /* Computed independently: printf %s ID | sha256sum | cut -c1-6 */
        assert_string_equal(mac, "52:54:00:35:1d:5b");
        assert_int_equal(net_mac_derive(ID, NULL, NULL, again), 0);
        assert_string_equal(mac, again);
        assert_int_equal(net_mac_derive("", NULL, NULL, mac), -EINVAL);
}

typedef struct Taken {
        const char *const *macs;
        unsigned asked;
} Taken;

static bool taken_in(const char *s, void *userdata)
{
        Taken *t = userdata;
        t->asked++;
        for (const char *const *m = t->macs; *m; m++)
                if (streq(*m, s))
                        return true;
        return false;
}

/* NET-2: on a collision, the next value; the three bytes wrap from ff:ff:ff to 00:00:00. */
static void test_mac_collision(void **state)
{
        char first[NET_MAC_STRLEN], mac[NET_MAC_STRLEN];
        assert_int_equal(net_mac_derive(ID, NULL, NULL, first), 0);
        unsigned v = (unsigned)strtoul(first + 9, NULL, 16) << 16 |
                     (unsigned)strtoul(first + 12, NULL, 16) << 8 |
                     (unsigned)strtoul(first + 15, NULL, 16);
        char next[NET_MAC_STRLEN], after[NET_MAC_STRLEN];
        snprintf(next, sizeof next, "52:54:00:%02x:%02x:%02x", (v + 1) >> 16 & 0xff,
                 (v + 1) >> 8 & 0xff, (v + 1) & 0xff);
        snprintf(after, sizeof after, "52:54:00:%02x:%02x:%02x", (v + 2) >> 16 & 0xff,
                 (v + 2) >> 8 & 0xff, (v + 2) & 0xff);
        const char *const one[] = {first, NULL};
        Taken t = {.macs = one};
        assert_int_equal(net_mac_derive(ID, taken_in, &t, mac), 0);
        assert_string_equal(mac, next);
        const char *const two[] = {first, next, NULL};
        t = (Taken){.macs = two};
        assert_int_equal(net_mac_derive(ID, taken_in, &t, mac), 0);
        assert_string_equal(mac, after);
        assert_int_equal(t.asked, 3);
}

static bool all_taken(const char *s, void *userdata)
{
        return true;
}

static void test_mac_exhausted(void **state)
{
        char mac[NET_MAC_STRLEN] = "unchanged";
        assert_int_equal(net_mac_derive(ID, all_taken, NULL, mac), -EADDRINUSE);
        assert_string_equal(mac, "unchanged");
}

/* NET-3: vgt and the first 12 characters of the id, 15 bytes. */
static void test_tap_name(void **state)
{
        char name[IFNAMSIZ];
        assert_int_equal(net_tap_name(ID, name), 0);
        assert_string_equal(name, "vgtk3x9q2m8v1c4");
        assert_int_equal(strlen(name), IFNAMSIZ - 1);
        assert_int_equal(net_tap_name("short", name), -EINVAL);
        assert_int_equal(net_tap_name(NULL, name), -EINVAL);
}

static void test_ipv4_parse(void **state)
{
        uint32_t a;
        unsigned p;
        char buf[IPV4_STRLEN];
        assert_int_equal(parse_ipv4("10.233.0.1", &a), 0);
        assert_int_equal(a, 0x0ae90001);
        assert_string_equal(format_ipv4(a, buf), "10.233.0.1");
        assert_int_equal(parse_ipv4("010.233.0.1", &a), -EINVAL);
        assert_int_equal(parse_ipv4("10.233.0", &a), -EINVAL);
        assert_int_equal(parse_ipv4("10.233.0.256", &a), -EINVAL);
        assert_int_equal(parse_ipv4(" 10.233.0.1", &a), -EINVAL);
        assert_int_equal(parse_ipv4_network("10.233.0.0/24", 16, 29, &a, &p), 0);
        assert_int_equal(p, 24);
        assert_int_equal(parse_ipv4_network("10.233.0.1/24", 16, 29, &a, &p), -EADDRNOTAVAIL);
        assert_int_equal(parse_ipv4_network("10.0.0.0/8", 16, 29, &a, &p), -ERANGE);
        assert_int_equal(parse_ipv4_network("10.233.0.0/30", 16, 29, &a, &p), -ERANGE);
        assert_int_equal(parse_ipv4_network("10.233.0.0/024", 16, 29, &a, &p), -EINVAL);
        assert_int_equal(parse_ipv4_network("10.233.0.0", 16, 29, &a, &p), -EINVAL);
        assert_int_equal(parse_ipv4_network("10.233.0.0/", 16, 29, &a, &p), -EINVAL);
        uint16_t lo, hi;
        assert_int_equal(parse_port_range("20000-29999", &lo, &hi), 0);
        assert_int_equal(lo, 20000);
        assert_int_equal(hi, 29999);
        assert_int_equal(parse_port_range("80-80", &lo, &hi), 0);
        assert_int_equal(parse_port_range("29999-20000", &lo, &hi), -ERANGE);
        assert_int_equal(parse_port_range("0-10", &lo, &hi), -ERANGE);
        assert_int_equal(parse_port_range("1-65536", &lo, &hi), -ERANGE);
        assert_int_equal(parse_port_range("020-30", &lo, &hi), -EINVAL);
        assert_int_equal(parse_port_range("20000", &lo, &hi), -EINVAL);
        assert_int_equal(parse_port_range("-20000", &lo, &hi), -EINVAL);
}

/* CFG-3: network.nat.subnet is /16../29 without host bits. */
static void test_subnet(void **state)
{
        NetSubnet s;
        char buf[IPV4_STRLEN];
        assert_int_equal(net_subnet_parse("10.233.0.0/24", &s), 0);
        assert_string_equal(format_ipv4(net_subnet_gateway(&s), buf), "10.233.0.1");
        assert_string_equal(format_ipv4(net_subnet_broadcast(&s), buf), "10.233.0.255");
        assert_int_equal(net_subnet_guest_count(&s), 253);
        assert_true(net_subnet_holds_guest(&s, "10.233.0.2"));
        assert_true(net_subnet_holds_guest(&s, "10.233.0.254"));
        assert_false(net_subnet_holds_guest(&s, "10.233.0.1"));
        assert_false(net_subnet_holds_guest(&s, "10.233.0.255"));
        assert_false(net_subnet_holds_guest(&s, "10.233.0.0"));
        assert_false(net_subnet_holds_guest(&s, "10.233.1.2"));
        assert_false(net_subnet_holds_guest(&s, "10.233.0.02"));
        assert_int_equal(net_subnet_parse("10.233.0.0/29", &s), 0);
        assert_int_equal(net_subnet_guest_count(&s), 5);
        assert_int_equal(net_subnet_parse("10.233.0.0/30", &s), -ERANGE);
        assert_int_equal(net_subnet_parse("10.0.0.0/15", &s), -ERANGE);
        assert_int_equal(net_subnet_parse("10.233.0.1/24", &s), -EINVAL);
}

static bool addr_taken(const char *s, void *userdata)
{
        for (const char *const *a = userdata; *a; a++)
                if (streq(*a, s))
                        return true;
        return false;
}

/* NET-5: the lowest free address, gateway and broadcast excluded; full is -EADDRNOTAVAIL. */
static void test_allocate(void **state)
{
        NetSubnet s;
        char a[IPV4_STRLEN];
        assert_int_equal(net_subnet_parse("10.233.0.0/29", &s), 0);
        assert_int_equal(net_addr_allocate(&s, NULL, NULL, a), 0);
        assert_string_equal(a, "10.233.0.2");
        const char *const held[] = {"10.233.0.2", "10.233.0.4", NULL};
        assert_int_equal(net_addr_allocate(&s, addr_taken, (void *)held, a), 0);
        assert_string_equal(a, "10.233.0.3");
        const char *const full[] = {"10.233.0.2", "10.233.0.3", "10.233.0.4",
                                    "10.233.0.5", "10.233.0.6", NULL};
        assert_int_equal(net_addr_allocate(&s, addr_taken, (void *)full, a), -EADDRNOTAVAIL);
        const char *const gap[] = {"10.233.0.2", "10.233.0.3", "10.233.0.4", "10.233.0.5", NULL};
        assert_int_equal(net_addr_allocate(&s, addr_taken, (void *)gap, a), 0);
        assert_string_equal(a, "10.233.0.6");
}

static void assert_golden(const char *rel, const char *got)
{
        _cleanup_free_ char *want = NULL;
        int r = test_golden_check(rel, got, &want);
        if (r != 0)
                fail_msg("%s differs (VGPUD_UPDATE_GOLDEN=1 rewrites it):\n--- got\n%s--- want\n%s",
                         rel, got, want ? want : "(unreadable)\n");
}

/* NET-4, NET-11: the whole table, as a golden file; forwards sorted, tcp before udp */
static void test_nft_render(void **state)
{
        NetSubnet s;
        assert_int_equal(net_subnet_parse("10.233.0.0/24", &s), 0);
        const NetForward forwards[] = {
            {.host = 20443, .guest = 443, .guest_addr = 0x0ae90003},
            {.host = 20053, .guest = 53, .udp = true, .guest_addr = 0x0ae90002},
            {.host = 20022, .guest = 22, .guest_addr = 0x0ae90002},
        };
        NetNatRules rules = {.bridge = "vgpud0",
                             .subnet = s,
                             .isolate = true,
                             .forwards = forwards,
                             .n_forwards = ELEMENTSOF(forwards)};
        _cleanup_free_ char *text = NULL, *plain = NULL, *bad = NULL;
        assert_int_equal(net_nft_render(&rules, &text), 0);
        assert_golden("golden/net/nft-isolated-forwards.txt", text);
        /* Without isolate or forwards: the same table less those rules. */
        rules = (NetNatRules){.bridge = "vgpud0", .subnet = s};
        assert_int_equal(net_nft_render(&rules, &plain), 0);
        assert_golden("golden/net/nft-plain.txt", plain);
        rules.bridge = "bad name";
        assert_int_equal(net_nft_render(&rules, &bad), -EINVAL);
}

/* NET-6, NET-11: dnsmasq's configuration and both hosts files, as golden files */
static void test_dnsmasq_files(void **state)
{
        NetSubnet s;
        assert_int_equal(net_subnet_parse("10.233.0.0/24", &s), 0);
        char *servers[] = {(char *)"192.0.2.53", (char *)"not-an-address", NULL};
        _cleanup_free_ char *conf = NULL, *dhcp = NULL, *dns = NULL, *e1 = NULL, *e2 = NULL;
        assert_int_equal(
            net_dnsmasq_render_conf("vgpud0", &s, "/run/vgpud/network", servers, &conf), 0);
        assert_golden("golden/net/dnsmasq.conf", conf);
        const NetHost hosts[] = {
            {.name = "render-02", .mac = "52:54:00:35:1d:5c", .ip = "10.233.0.10"},
            {.name = "render-01", .mac = "52:54:00:35:1d:5b", .ip = "10.233.0.2"},
        };
        assert_int_equal(net_dnsmasq_render_hosts(hosts, 2, &dhcp, &dns), 0);
        assert_golden("golden/net/dnsmasq-dhcp-hosts", dhcp);
        assert_golden("golden/net/dnsmasq-hosts", dns);
        /* A name or MAC that would not parse back is refused, never written. */
        const NetHost bad[] = {{.name = "a,b", .mac = "52:54:00:35:1d:5b", .ip = "10.233.0.2"}};
        assert_int_equal(net_dnsmasq_render_hosts(bad, 1, &e1, &e2), -EINVAL);
        assert_int_equal(net_dnsmasq_render_conf("vgpud0", &s, "relative", NULL, &e1), -EINVAL);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_mac_derive),    cmocka_unit_test(test_mac_collision),
            cmocka_unit_test(test_mac_exhausted), cmocka_unit_test(test_tap_name),
            cmocka_unit_test(test_ipv4_parse),    cmocka_unit_test(test_subnet),
            cmocka_unit_test(test_allocate),      cmocka_unit_test(test_nft_render),
            cmocka_unit_test(test_dnsmasq_files),
        };
        return cmocka_run_group_tests_name("net", tests, NULL, NULL);
}
