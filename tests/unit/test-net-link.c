/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * src/net against the kernel (NET-11): TAPs, bridges, ports and addresses over rtnetlink. The
 * program first moves itself into a network namespace and a mount namespace of its own (root
 * only; otherwise it skips), so it never sees the host's interfaces (REL-9), and gives
 * net_tap_open() a dev root of its own: a temporary directory with the tun device bind-mounted
 * at net/tun, as the integration tests give the simulator's dev/. Everything it makes dies with
 * the namespaces when the process exits, whatever fails.
 */
#include <fcntl.h>
#include <linux/if_tun.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <nftables/libnftables.h>

#include "base/base.h"
#include "net/net.h"

#define ID "k3x9q2m8v1c4z7n5b0wd"
#define ID2 "z9y8x7w6v5u4t3s2r1q0"

static char dev_root[] = "/tmp/vgpud-net-test.XXXXXX";
static int dev_fd = -1;

static NetLink *nl_open(void)
{
        NetLink *l = NULL;
        assert_int_equal(net_link_open(&l), 0);
        return l;
}

/* NET-3: a TAP of the derived name, with exactly NET-3's flags, alive as long as its fd. */
static void test_tap_lifetime(void **state)
{
        _cleanup_(net_link_freep) NetLink *l = nl_open();
        _cleanup_free_ char *error = NULL;
        char name[IFNAMSIZ], got[IFNAMSIZ];
        assert_int_equal(net_tap_name(ID, name), 0);
        int fd = -1;
        assert_int_equal(net_tap_open(dev_fd, name, &fd, &error), 0);
        assert_true(fd > STDERR_FILENO);
        assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
        struct ifreq ifr = {0};
        assert_int_equal(ioctl(fd, TUNGETIFF, &ifr), 0);
        assert_int_equal(ifr.ifr_flags & (IFF_TAP | IFF_NO_PI | IFF_VNET_HDR | IFF_TUN),
                         IFF_TAP | IFF_NO_PI | IFF_VNET_HDR);
        assert_int_equal(net_tap_get_name(fd, got), 0);
        assert_string_equal(got, name);
        NetLinkInfo info;
        assert_int_equal(net_link_get(l, name, &info), 0);
        assert_false(info.up);
        assert_false(info.bridge);

        /* A second TAP of the same name while the first lives is refused, never shared. */
        int fd2 = -1;
        assert_int_equal(net_tap_open(dev_fd, name, &fd2, &error), -EEXIST);
        assert_non_null(strstr(error, "create TAP vgtk3x9q2m8v1c4"));
        assert_int_equal(fd2, -1);

        /* Decision 14: the descriptor is the device. */
        close(fd);
        assert_int_equal(net_link_get(l, name, &info), -ENODEV);
}

static void test_tap_get_name_not_tap(void **state)
{
        char got[IFNAMSIZ];
        _cleanup_close_ int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        assert_int_equal(net_tap_get_name(fd, got), -EBADFD);
}

/* REL-14: /dev/net/tun missing fails the TAP with the path named; no vhost-net is no failure. */
static void test_tap_no_tun(void **state)
{
        _cleanup_free_ char *error = NULL;
        char empty[] = "/tmp/vgpud-net-empty.XXXXXX";
        assert_non_null(mkdtemp(empty));
        _cleanup_close_ int efd = open(empty, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        int fd = -1;
        assert_int_equal(net_tap_open(efd, "vgtnotun", &fd, &error), -ENOENT);
        assert_string_equal(error,
                            "network: open TAP vgtnotun: <dev_root>/net/tun: No such file or "
                            "directory");
        assert_int_equal(net_vhost_open(efd, &fd), -ENOENT);
        assert_int_equal(fd, -1);
        rmdir(empty);
}

/* NET-4: the NAT bridge is made with its gateway address and up; a second pass changes nothing. */
static void test_nat_bridge_ensure(void **state)
{
        _cleanup_(net_link_freep) NetLink *l = nl_open();
        _cleanup_free_ char *error = NULL;
        NetSubnet s;
        assert_int_equal(net_subnet_parse("10.233.0.0/24", &s), 0);
        assert_int_equal(net_nat_bridge_ensure(l, "vgpud0", &s, &error), 0);
        NetLinkInfo br, again;
        assert_int_equal(net_link_get(l, "vgpud0", &br), 0);
        assert_true(br.bridge);
        assert_true(br.up);
        assert_string_equal(br.kind, "bridge");
        bool has = false;
        assert_int_equal(net_link_has_address(l, br.ifindex, 0x0ae90001, 24, &has), 0);
        assert_true(has);
        assert_int_equal(net_link_has_address(l, br.ifindex, 0x0ae90002, 24, &has), 0);
        assert_false(has);
        assert_int_equal(net_nat_bridge_ensure(l, "vgpud0", &s, &error), 0);
        assert_int_equal(net_link_get(l, "vgpud0", &again), 0);
        assert_int_equal(again.ifindex, br.ifindex);

        /* REL-14: deleted behind its back, the next pass makes it again. */
        assert_int_equal(net_link_delete(l, "vgpud0"), 0);
        assert_int_equal(net_link_get(l, "vgpud0", &br), -ENODEV);
        assert_int_equal(net_nat_bridge_ensure(l, "vgpud0", &s, &error), 0);
        assert_int_equal(net_link_get(l, "vgpud0", &br), 0);
        assert_true(br.up);
        assert_int_equal(net_link_has_address(l, br.ifindex, 0x0ae90001, 24, &has), 0);
        assert_true(has);
        assert_int_equal(net_link_delete(l, "vgpud0"), 0);
        assert_int_equal(net_link_delete(l, "vgpud0"), -ENODEV);
}

/* NET-4: a name held by an interface that is no bridge is refused, and left alone. */
static void test_nat_bridge_name_taken(void **state)
{
        _cleanup_(net_link_freep) NetLink *l = nl_open();
        _cleanup_free_ char *error = NULL;
        NetSubnet s;
        assert_int_equal(net_subnet_parse("10.233.0.0/24", &s), 0);
        _cleanup_close_ int fd = -1;
        assert_int_equal(net_tap_open(dev_fd, "vgpudx", &fd, &error), 0);
        assert_int_equal(net_nat_bridge_ensure(l, "vgpudx", &s, &error), -EEXIST);
        assert_string_equal(error, "network: bridge vgpudx: an interface of that name is a tun, "
                                   "not a bridge");
}

/* NET-3: the TAP takes the bridge's MTU, joins it, is isolated when asked, and comes up. */
static void test_port_attach(void **state)
{
        _cleanup_(net_link_freep) NetLink *l = nl_open();
        _cleanup_free_ char *error = NULL;
        NetSubnet s;
        assert_int_equal(net_subnet_parse("10.233.0.0/24", &s), 0);
        assert_int_equal(net_nat_bridge_ensure(l, "vgpud0", &s, &error), 0);
        NetLinkInfo br;
        assert_int_equal(net_link_get(l, "vgpud0", &br), 0);
        assert_int_equal(net_link_set_mtu(l, br.ifindex, 1400), 0);

        char a[IFNAMSIZ], b[IFNAMSIZ];
        assert_int_equal(net_tap_name(ID, a), 0);
        assert_int_equal(net_tap_name(ID2, b), 0);
        _cleanup_close_ int fa = -1, fb = -1;
        assert_int_equal(net_tap_open(dev_fd, a, &fa, &error), 0);
        assert_int_equal(net_tap_open(dev_fd, b, &fb, &error), 0);
        assert_int_equal(net_port_attach(l, a, "vgpud0", true, &error), 0);
        assert_int_equal(net_port_attach(l, b, "vgpud0", false, &error), 0);
        /* Idempotent: a second attach of a port that is right changes nothing. */
        assert_int_equal(net_port_attach(l, a, "vgpud0", true, &error), 0);

        NetLinkInfo pa, pb;
        assert_int_equal(net_link_get(l, a, &pa), 0);
        assert_int_equal(net_link_get(l, b, &pb), 0);
        assert_int_equal(pa.master, br.ifindex);
        assert_int_equal(pa.mtu, 1400);
        assert_true(pa.up);
        assert_true(pa.isolated);
        assert_int_equal(pb.master, br.ifindex);
        assert_false(pb.isolated);

        _cleanup_strv_free_ char **ports = NULL;
        assert_int_equal(net_link_list_ports(l, br.ifindex, &ports), 0);
        assert_int_equal(strv_length(ports), 2);
        assert_string_equal(ports[0], a);
        assert_string_equal(ports[1], b);

        /* A VMM's death closes its TAP: the port leaves the bridge with it. */
        close(TAKE_FD(fa));
        strv_free(TAKE_PTR(ports));
        assert_int_equal(net_link_list_ports(l, br.ifindex, &ports), 0);
        assert_int_equal(strv_length(ports), 1);
        assert_string_equal(ports[0], b);
        assert_int_equal(net_link_delete(l, "vgpud0"), 0);
}

/* NET-7: a bridge that is missing or down refuses the port with NET-7's text. */
static void test_port_bridge_missing_or_down(void **state)
{
        _cleanup_(net_link_freep) NetLink *l = nl_open();
        _cleanup_free_ char *error = NULL;
        _cleanup_close_ int fd = -1;
        assert_int_equal(net_tap_open(dev_fd, "vgtport", &fd, &error), 0);
        assert_int_equal(net_port_attach(l, "vgtport", "br-none", false, &error), -ENETDOWN);
        assert_string_equal(error, "bridge br-none is missing or down");
        free(TAKE_PTR(error));
        assert_int_equal(net_link_add_bridge(l, "br-down"), 0);
        assert_int_equal(net_link_add_bridge(l, "br-down"), -EEXIST);
        assert_int_equal(net_port_attach(l, "vgtport", "br-down", false, &error), -ENETDOWN);
        assert_string_equal(error, "bridge br-down is missing or down");
        NetLinkInfo info;
        assert_int_equal(net_link_get(l, "vgtport", &info), 0);
        assert_int_equal(info.master, 0);
        free(TAKE_PTR(error));
        /* Not a bridge at all: the same refusal. */
        assert_int_equal(net_port_attach(l, "vgtport", "lo", false, &error), -ENETDOWN);
        assert_int_equal(net_link_delete(l, "br-down"), 0);
}

/* nft(8)'s commands through libnftables, as another program on the host would run them. */
static int nft_run(const char *commands)
{
        struct nft_ctx *nft = nft_ctx_new(NFT_CTX_DEFAULT);
        assert_non_null(nft);
        assert_int_equal(nft_ctx_buffer_output(nft), 0);
        int r = nft_run_cmd_from_buffer(nft, commands);
        nft_ctx_free(nft);
        return r;
}

/* NET-4: the table replaces itself as a whole; other tables are never touched. */
static void test_nft_apply(void **state)
{
        _cleanup_free_ char *error = NULL, *listed = NULL, *again = NULL, *text1 = NULL,
                            *text2 = NULL;
        NetSubnet s;
        assert_int_equal(net_subnet_parse("10.233.0.0/24", &s), 0);
        const NetForward fw[] = {{.host = 20022, .guest = 22, .guest_addr = 0x0ae90002}};
        NetNatRules rules = {
            .bridge = "vgpud0", .subnet = s, .isolate = true, .forwards = fw, .n_forwards = 1};
        assert_int_equal(net_nft_list(&listed, &error), -ENOENT);
        free(TAKE_PTR(error));

        /* Someone else's table, which must survive every replace. */
        assert_int_equal(nft_run("table inet other {\n"
                                 "\tchain input {\n"
                                 "\t\ttype filter hook input priority 0; policy accept;\n"
                                 "\t\tiifname \"vgpud0\" accept\n"
                                 "\t}\n"
                                 "}\n"),
                         0);
        assert_int_equal(net_nft_render(&rules, &text1), 0);
        if (net_nft_apply(text1, &error) < 0)
                fail_msg("%s", error);
        assert_int_equal(net_nft_list(&listed, &error), 0);
        assert_non_null(strstr(listed, "tcp dport 20022 dnat ip to 10.233.0.2:22"));
        assert_non_null(strstr(listed, "masquerade"));

        /* The forward goes with the next replace: nothing of the old table stays. */
        rules.n_forwards = 0;
        assert_int_equal(net_nft_render(&rules, &text2), 0);
        assert_int_equal(net_nft_apply(text2, &error), 0);
        assert_int_equal(net_nft_list(&again, &error), 0);
        assert_null(strstr(again, "dport 20022"));
        assert_non_null(strstr(again, "masquerade"));

        /* A refused ruleset changes nothing and says why (NET-8). */
        assert_int_equal(net_nft_apply("table inet vgpud { chain c { nonsense; } }\n", &error),
                         -EIO);
        assert_true(startswith(error, "network: nftables: replace table vgpud: Error: "));
        free(TAKE_PTR(listed));
        assert_int_equal(net_nft_list(&listed, &error), 0);
        assert_string_equal(listed, again);
        assert_int_equal(nft_run("list table inet other"), 0);
}

/*
 * NET-4: with the shared context opened while descriptors were few, the table is replaced and
 * listed while more than FD_SETSIZE are open, as on a host that adopted a thousand VMs. A
 * context opened then would get a socket above 1024, and libnftables' select() would abort.
 */
static void test_nft_many_descriptors(void **state)
{
        assert_int_equal(net_nft_open_shared(), 0);
        struct rlimit rl;
        assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
        if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < FD_SETSIZE + 64)
                skip(); /* a hard limit this low cannot get past FD_SETSIZE at all */
        struct rlimit raised = {.rlim_cur = FD_SETSIZE + 64, .rlim_max = rl.rlim_max};
        assert_int_equal(setrlimit(RLIMIT_NOFILE, &raised), 0);
        int fds[FD_SETSIZE + 64], n = 0;
        for (int fd = -1; fd < FD_SETSIZE + 8; n++) {
                fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
                assert_true(fd >= 0);
                fds[n] = fd;
        }

        NetSubnet sub;
        assert_int_equal(net_subnet_parse("10.234.0.0/24", &sub), 0);
        const NetForward fw[] = {{.host = 20080, .guest = 80, .guest_addr = 0x0aea0002}};
        NetNatRules rules = {.bridge = "vgpud0", .subnet = sub, .forwards = fw, .n_forwards = 1};
        _cleanup_free_ char *error = NULL, *text = NULL, *listed = NULL;
        assert_int_equal(net_nft_render(&rules, &text), 0);
        if (net_nft_apply(text, &error) < 0)
                fail_msg("%s", error);
        assert_int_equal(net_nft_list(&listed, &error), 0);
        assert_non_null(strstr(listed, "tcp dport 20080 dnat ip to 10.234.0.2:80"));

        while (n > 0)
                close(fds[--n]);
        assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
}

static int enter_namespaces(void)
{
        if (geteuid() != 0 || unshare(CLONE_NEWNET | CLONE_NEWNS) < 0)
                return -1;
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                return -2;
        if (!mkdtemp(dev_root))
                return -3;
        char path[sizeof dev_root + 16];
        snprintf(path, sizeof path, "%s/net", dev_root);
        if (mkdir(path, 0755) < 0)
                return -4;
        snprintf(path, sizeof path, "%s/net/tun", dev_root);
        int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0)
                return -5;
        close(fd);
        /* The mount goes with this process's mount namespace. */
        if (mount("/dev/net/tun", path, NULL, MS_BIND, NULL) < 0)
                return -6;
        dev_fd = open(dev_root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        return dev_fd < 0 ? -7 : 0;
}

static void remove_dev_root(void)
{
        char path[sizeof dev_root + 16];
        snprintf(path, sizeof path, "%s/net/tun", dev_root);
        (void)umount2(path, MNT_DETACH);
        (void)unlink(path);
        snprintf(path, sizeof path, "%s/net", dev_root);
        (void)rmdir(path);
        (void)rmdir(dev_root);
}

int main(void)
{
        int r = enter_namespaces();
        if (r == -1) {
                printf("1..0 # SKIP needs root for a network namespace (NET-11)\n");
                return 0;
        }
        if (r < 0) {
                fprintf(stderr, "cannot set up the test's namespaces (step %d): %m\n", -r);
                remove_dev_root();
                return 1;
        }
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_tap_lifetime),
            cmocka_unit_test(test_tap_get_name_not_tap),
            cmocka_unit_test(test_tap_no_tun),
            cmocka_unit_test(test_nat_bridge_ensure),
            cmocka_unit_test(test_nat_bridge_name_taken),
            cmocka_unit_test(test_port_attach),
            cmocka_unit_test(test_port_bridge_missing_or_down),
            cmocka_unit_test(test_nft_apply),
            cmocka_unit_test(test_nft_many_descriptors),
        };
        r = cmocka_run_group_tests_name("net-link", tests, NULL, NULL);
        remove_dev_root();
        return r;
}
