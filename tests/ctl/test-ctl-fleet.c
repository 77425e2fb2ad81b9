/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Tests of `vgpuctl fleet`'s pure parts (SPEC FLEET-7): the hosts file and its errors, the
 * allocation candidates of a Placement 1.39 answer and their order, the mapping of a candidate
 * to a host and a PF (FLEET-2's names and uuids, checked against Python's uuid.uuid5), the
 * reschedule decision, and the fleet commands' usage errors (OPS-8's exit 2). Nothing here
 * talks to a network: tests/fleet/test-fleet-two-hosts.py runs the commands against a real
 * placement-api and two simulated hosts.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "ctl/ctl.h"
#include "testlib.h"

/* uuid.uuid5(uuid.NAMESPACE_URL, "vgpud:host-a") and friends. */
#define ROOT_A "03c5e244-fa3e-56e8-88a8-509ab56f6ad0"
#define ROOT_B "ea4ea78e-460b-534a-b5fd-c19555540629"
#define A_E3 "0ea5d9b5-5975-50b9-a724-5cc2f4b37aac" /* vgpud:host-a:0000:e3:00.0 */
#define A_C8 "64991806-be6d-59d8-a4a4-c08d8dc324be" /* vgpud:host-a:0001:c8:00.0 */
#define B_E3 "23e2c853-b1f3-5fda-b79c-6ad8fc5e3ff2" /* vgpud:host-b:0000:e3:00.0 */
#define FOREIGN "11111111-2222-4333-8444-555555555555"

#define TWO_HOSTS                                                                   \
        "{\"hosts\": [{\"name\": \"host-a\", \"url\": \"http://127.0.0.1:8081/\", " \
        "\"token_file\": \"a.token\"}, {\"name\": \"host-b\", \"url\": "            \
        "\"http://127.0.0.1:8082\", "                                               \
        "\"token_file\": \"/etc/b.token\"}]}"

static int parse(const char *text, CtlFleetHosts *ret, char **error)
{
        return ctl_fleet_hosts_parse(text, strlen(text), "/srv/fleet", ret, error);
}

/* FLEET-7: the hosts file's form; relative token files are the hosts file's neighbours. */
static void test_hosts_parse(void **state)
{
        _cleanup_(ctl_fleet_hosts_done) CtlFleetHosts h = {};
        _cleanup_free_ char *error = NULL;

        assert_int_equal(parse(TWO_HOSTS, &h, &error), 0);
        assert_int_equal(h.n_hosts, 2);
        assert_string_equal(h.hosts[0].name, "host-a");
        assert_string_equal(h.hosts[0].url, "http://127.0.0.1:8081"); /* as --url: no slash */
        assert_string_equal(h.hosts[0].token_file, "/srv/fleet/a.token");
        assert_string_equal(h.hosts[1].token_file, "/etc/b.token");
        assert_null(h.hosts[0].token); /* parsing reads no file */
        /* FLEET-2: the root provider's uuid, as Placement holds it. */
        assert_string_equal(h.hosts[0].root_uuid, ROOT_A);
        assert_string_equal(h.hosts[1].root_uuid, ROOT_B);
        assert_ptr_equal(ctl_fleet_hosts_find(&h, "host-b"), &h.hosts[1]);
        assert_null(ctl_fleet_hosts_find(&h, "host-c"));

        /* token_file is optional, and without a directory a relative one stays as written. */
        ctl_fleet_hosts_done(&h);
        const char *one = "{\"hosts\": [{\"name\": \"h.1_x\", \"url\": \"https://h1:8443\"}]}";
        assert_int_equal(ctl_fleet_hosts_parse(one, strlen(one), NULL, &h, &error), 0);
        assert_null(h.hosts[0].token_file);
        ctl_fleet_hosts_done(&h);
        const char *rel = "{\"hosts\": [{\"name\": \"h\", \"url\": \"http://h:1\", \"token_file\": "
                          "\"t\"}]}";
        assert_int_equal(ctl_fleet_hosts_parse(rel, strlen(rel), NULL, &h, &error), 0);
        assert_string_equal(h.hosts[0].token_file, "t");
}

/* FLEET-7: every malformed hosts file is refused with a message naming what is wrong. */
static void test_hosts_parse_errors(void **state)
{
        static const struct {
                const char *text;
                const char *message; /* a part of the error */
        } cases[] = {
            {"", "line"},
            {"{\"hosts\": [", "line 1"},
            {"[]", "expected {\"hosts\""},
            {"{}", "hosts"},
            {"{\"hosts\": [], \"x\": 1}", "x"},
            {"{\"hosts\": {}}", "list of 1 to 1024"},
            {"{\"hosts\": []}", "list of 1 to 1024"},
            {"{\"hosts\": [{\"name\": \"a\", \"name\": \"b\", \"url\": \"http://a:1\"}]}",
             "duplicate"},
            {"{\"hosts\": [{\"name\": \"a\"}]}", "host 1"},
            {"{\"hosts\": [{\"name\": \"a\", \"url\": \"http://a:1\", \"port\": 1}]}", "port"},
            {"{\"hosts\": [{\"name\": 7, \"url\": \"http://a:1\"}]}", "host 1"},
            {"{\"hosts\": [\"a\"]}", "host 1"},
            {"{\"hosts\": [{\"name\": \"a b\", \"url\": \"http://a:1\"}]}", "invalid name"},
            {"{\"hosts\": [{\"name\": \"\", \"url\": \"http://a:1\"}]}", "invalid name"},
            {"{\"hosts\": [{\"name\": "
             "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\", "
             "\"url\": \"http://a:1\"}]}",
             "invalid name"},
            {"{\"hosts\": [{\"name\": \"a\", \"url\": \"ftp://a\"}]}", "host a: url"},
            {"{\"hosts\": [{\"name\": \"a\", \"url\": \"http://a:1/?x\"}]}", "host a: url"},
            {"{\"hosts\": [{\"name\": \"a\", \"url\": \"http://a:1\", \"token_file\": \"\"}]}",
             "token_file is empty"},
            {"{\"hosts\": [{\"name\": \"a\", \"url\": \"http://a:1\"}, {\"name\": \"a\", "
             "\"url\": \"http://b:1\"}]}",
             "host a is listed twice"},
            {"{\"hosts\": [{\"name\": \"a\", \"url\": \"http://a:1\"}, {\"name\": \"b\", "
             "\"url\": \"http://a:1/\"}]}",
             "same url"},
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                CtlFleetHosts h = {.n_hosts = 99}; /* untouched on failure */
                _cleanup_free_ char *error = NULL;
                int r = parse(cases[i].text, &h, &error);
                if (r != -EINVAL || !error || !strstr(error, cases[i].message))
                        fail_msg("case %zu (%s): r=%d error=%s", i, cases[i].text, r,
                                 error ? error : "(none)");
                assert_int_equal(h.n_hosts, 99);
        }
}

static int write_text(const char *path, const char *text)
{
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0)
                return -errno;
        return write_all(fd, text, strlen(text));
}

/* FLEET-7: loading reads each token file, relative to the hosts file; unusable ones fail. */
static void test_hosts_load(void **state)
{
        _cleanup_test_tree_ TestTree *t = NULL;
        _cleanup_free_ char *hosts = NULL, *tok = NULL, *error = NULL;
        _cleanup_(ctl_fleet_hosts_done) CtlFleetHosts h = {};

        assert_int_equal(test_tree_new("ctl-fleet", &t), 0);
        assert_non_null(hosts = test_tree_path(t, "hosts.json"));
        assert_non_null(tok = test_tree_path(t, "a.token"));

        /* No file. */
        int r = ctl_fleet_hosts_load(hosts, &h, &error);
        assert_int_equal(r, -ENOENT);
        assert_non_null(strstr(error, "--hosts"));

        /* A missing token file names the host and the file. */
        assert_int_equal(write_text(hosts,
                                    "{\"hosts\": [{\"name\": \"host-a\", \"url\": "
                                    "\"http://127.0.0.1:1\", \"token_file\": \"a.token\"}]}"),
                         0);
        free(error);
        error = NULL;
        assert_int_equal(ctl_fleet_hosts_load(hosts, &h, &error), -ENOENT);
        assert_non_null(strstr(error, "host host-a: token_file"));
        assert_non_null(strstr(error, "a.token"));

        /* A token with a space cannot go into a header. */
        assert_int_equal(write_text(tok, "two words\n"), 0);
        free(error);
        error = NULL;
        assert_int_equal(ctl_fleet_hosts_load(hosts, &h, &error), -EINVAL);
        assert_non_null(strstr(error, "not allowed in an HTTP header"));

        /* One trailing newline is dropped, as --token-file does. */
        assert_int_equal(write_text(tok, "abc.def.ghi\n"), 0);
        assert_int_equal(ctl_fleet_hosts_load(hosts, &h, &error), 0);
        assert_string_equal(h.hosts[0].token, "abc.def.ghi");
        assert_string_equal(h.hosts[0].token_file, tok);
}

/* FLEET-2's PF provider names read back as PF addresses (FLEET-7's candidate → PF). */
static void test_pf_from_provider_name(void **state)
{
        char pf[PCI_ADDRESS_STRLEN];

        assert_int_equal(ctl_fleet_pf_from_provider_name("host-a", "host-a_pci_0000_e3_00_0", pf),
                         0);
        assert_string_equal(pf, "0000:e3:00.0");
        assert_int_equal(ctl_fleet_pf_from_provider_name("h_pci", "h_pci_pci_0001_c8_1f_7", pf), 0);
        assert_string_equal(pf, "0001:c8:1f.7");

        static const char *const bad[] = {
            "host-b_pci_0000_e3_00_0", /* another host */
            "host-a",                  /* the root */
            "host-a_pci_0000_e3_00",   /* short */
            "host-a_pci_0000_e3_00_00",
            "host-a_pci_0000_E3_00_0", /* addresses are lowercase */
            "host-a_pci_0000:e3:00.0",
            "host-a_pci_0000_e3_00_8", /* function 0..7 */
            "host-a_gpu_0000_e3_00_0",
            "",
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                if (ctl_fleet_pf_from_provider_name("host-a", bad[i], pf) != -EINVAL)
                        fail_msg("\"%s\" was read as a PF", bad[i]);
        assert_int_equal(
            ctl_fleet_pf_from_provider_name("bad name", "bad name_pci_0000_e3_00_0", pf), -EINVAL);
}

/* FLEET-7: a candidate's root names the host, its name the PF, and the uuid must agree. */
static void test_candidate_map(void **state)
{
        _cleanup_(ctl_fleet_hosts_done) CtlFleetHosts h = {};
        _cleanup_free_ char *error = NULL;
        char pf[PCI_ADDRESS_STRLEN] = "untouched";
        size_t host = 99;

        assert_int_equal(parse(TWO_HOSTS, &h, &error), 0);
        assert_int_equal(
            ctl_fleet_candidate_map(&h, B_E3, ROOT_B, "host-b_pci_0000_e3_00_0", &host, pf, &error),
            0);
        assert_int_equal(host, 1);
        assert_string_equal(pf, "0000:e3:00.0");
        assert_int_equal(
            ctl_fleet_candidate_map(&h, A_C8, ROOT_A, "host-a_pci_0001_c8_00_0", &host, pf, &error),
            0);
        assert_int_equal(host, 0);
        assert_string_equal(pf, "0001:c8:00.0");

        /* A tree no host of the file has: nothing to call. */
        host = 99;
        assert_int_equal(ctl_fleet_candidate_map(&h, A_E3, FOREIGN, "host-a_pci_0000_e3_00_0",
                                                 &host, pf, &error),
                         -ENOENT);
        assert_non_null(strstr(error, "no host of the hosts file"));
        assert_int_equal(host, 99);
        /* Host B's name under host A's root. */
        assert_int_equal(
            ctl_fleet_candidate_map(&h, A_E3, ROOT_A, "host-b_pci_0000_e3_00_0", &host, pf, &error),
            -EINVAL);
        /* A provider named like a PF whose uuid is not FLEET-2's: not vgpud's. */
        assert_int_equal(
            ctl_fleet_candidate_map(&h, A_C8, ROOT_A, "host-a_pci_0000_e3_00_0", &host, pf, &error),
            -EINVAL);
        assert_non_null(strstr(error, A_E3));
        /* The root itself. */
        assert_int_equal(ctl_fleet_candidate_map(&h, ROOT_A, ROOT_A, "host-a", &host, pf, &error),
                         -EINVAL);
        assert_int_equal(host, 99);
}

/* An allocation request on one provider. */
#define REQUEST(uuid) "{\"allocations\": {\"" uuid "\": {\"resources\": {\"VGPU\": 1}}}}"
#define SUMMARY(uuid, root, capacity, used)                                                       \
        "\"" uuid "\": {\"resources\": {\"VGPU\": {\"capacity\": " #capacity ", \"used\": " #used \
        "}}, \"root_provider_uuid\": \"" root "\", \"parent_provider_uuid\": \"" root "\"}"

/* FLEET-7: the candidates vgpuctl can act on, packed: fewest free VGPU first, then the hosts
 * file's order, then the uuid. */
static void test_candidates_parse(void **state)
{
        _cleanup_(ctl_fleet_hosts_done) CtlFleetHosts h = {};
        _cleanup_free_ char *error = NULL;
        _cleanup_free_ CtlFleetCandidate *c = NULL;
        size_t n = 0;

        assert_int_equal(parse(TWO_HOSTS, &h, &error), 0);
        /* host-b's PF, host-a's two PFs, a foreign tree, and a request split over two
         * providers; free VGPU 30, 30, 1 and 12. */
        /* clang-format off */
        static const char answer[] =
            "{\"allocation_requests\": ["
            REQUEST(B_E3) ", "
            REQUEST(A_C8) ", "
            REQUEST(FOREIGN) ", "
            REQUEST(A_E3) ", "
            "{\"allocations\": {\"" A_E3 "\": {\"resources\": {\"VGPU\": 1}}, "
            "\"" B_E3 "\": {\"resources\": {\"CUSTOM_VGPU_FB_GIB\": 4}}}}], "
            "\"provider_summaries\": {"
            SUMMARY(B_E3, ROOT_B, 32, 2) ", "
            SUMMARY(A_C8, ROOT_A, 32, 2) ", "
            SUMMARY(FOREIGN, FOREIGN, 32, 31) ", "
            SUMMARY(A_E3, ROOT_A, 32, 20) "}}";
        /* clang-format on */
        json_auto_t *body = json_loads(answer, 0, NULL);
        assert_non_null(body);
        assert_int_equal(ctl_fleet_candidates_parse(body, &h, &c, &n, &error), 0);
        /* The foreign tree and the split request are left out. */
        assert_int_equal(n, 3);
        assert_string_equal(c[0].provider_uuid, A_E3); /* 12 free */
        assert_int_equal(c[0].free_vgpu, 12);
        assert_int_equal(c[0].host, 0);
        assert_string_equal(c[1].provider_uuid, A_C8); /* 30 free, host-a before host-b */
        assert_string_equal(c[1].root_uuid, ROOT_A);
        assert_string_equal(c[2].provider_uuid, B_E3);
        assert_int_equal(c[2].host, 1);
        assert_int_equal(json_integer_value(json_object_get(c[2].resources, "VGPU")), 1);

        /* Nothing to do. */
        free(c);
        c = NULL;
        json_auto_t *none =
            json_loads("{\"allocation_requests\": [], \"provider_summaries\": {}}", 0, NULL);
        assert_int_equal(ctl_fleet_candidates_parse(none, &h, &c, &n, &error), 0);
        assert_null(c);
        assert_int_equal(n, 0);

        /* Not 1.39's shape. */
        static const char *const bad[] = {
            "{}",
            "{\"allocation_requests\": {}, \"provider_summaries\": {}}",
            "{\"allocation_requests\": [{}], \"provider_summaries\": {}}",
            "{\"allocation_requests\": [" REQUEST(A_E3) "], \"provider_summaries\": {}}",
            "{\"allocation_requests\": [{\"allocations\": {\"x\": {\"resources\": {}}}}], "
            "\"provider_summaries\": {\"x\": {\"root_provider_uuid\": \"" ROOT_A "\"}}}",
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                json_auto_t *j = json_loads(bad[i], 0, NULL);
                assert_non_null(j);
                n = 7;
                if (ctl_fleet_candidates_parse(j, &h, &c, &n, &error) != -EBADMSG)
                        fail_msg("case %zu was accepted", i);
                assert_int_equal(n, 7);
        }
}

/* FLEET-6, FLEET-7: what a host's answer means for the reschedule. */
static void test_classify(void **state)
{
        assert_int_equal(ctl_fleet_classify(201, NULL), CTL_FLEET_CREATED);
        assert_int_equal(ctl_fleet_classify(200, "anything"), CTL_FLEET_CREATED);
        assert_int_equal(ctl_fleet_classify(409, "insufficient_resources"), CTL_FLEET_REFUSED);
        assert_int_equal(ctl_fleet_classify(503, "placement_disabled"), CTL_FLEET_REFUSED);
        /* The request itself is wrong everywhere, or this host failed: no move. */
        assert_int_equal(ctl_fleet_classify(409, "already_exists"), CTL_FLEET_FAILED);
        assert_int_equal(ctl_fleet_classify(409, "invalid_state"), CTL_FLEET_FAILED);
        assert_int_equal(ctl_fleet_classify(409, NULL), CTL_FLEET_FAILED);
        assert_int_equal(ctl_fleet_classify(503, "not_ready"), CTL_FLEET_FAILED);
        assert_int_equal(ctl_fleet_classify(400, "invalid_request"), CTL_FLEET_FAILED);
        assert_int_equal(ctl_fleet_classify(401, "unauthorized"), CTL_FLEET_FAILED);
        assert_int_equal(ctl_fleet_classify(500, "internal"), CTL_FLEET_FAILED);
}

/* FLEET-7: a refusal moves the allocation to the next candidate up to 3 times. */
static void test_next_step(void **state)
{
        assert_int_equal(ctl_fleet_next_step(CTL_FLEET_CREATED, 1, 1), CTL_FLEET_STEP_DONE);
        assert_int_equal(ctl_fleet_next_step(CTL_FLEET_CREATED, 4, 10), CTL_FLEET_STEP_DONE);
        for (unsigned tried = 1; tried <= CTL_FLEET_MOVES_MAX; tried++)
                assert_int_equal(ctl_fleet_next_step(CTL_FLEET_REFUSED, tried, 10),
                                 CTL_FLEET_STEP_MOVE);
        /* Three moves made: the fourth host's refusal ends it. */
        assert_int_equal(ctl_fleet_next_step(CTL_FLEET_REFUSED, CTL_FLEET_MOVES_MAX + 1, 10),
                         CTL_FLEET_STEP_GIVE_UP);
        /* No candidate left. */
        assert_int_equal(ctl_fleet_next_step(CTL_FLEET_REFUSED, 1, 1), CTL_FLEET_STEP_GIVE_UP);
        assert_int_equal(ctl_fleet_next_step(CTL_FLEET_REFUSED, 2, 2), CTL_FLEET_STEP_GIVE_UP);
        assert_int_equal(ctl_fleet_next_step(CTL_FLEET_REFUSED, 1, 2), CTL_FLEET_STEP_MOVE);
        assert_int_equal(ctl_fleet_next_step(CTL_FLEET_FAILED, 1, 10), CTL_FLEET_STEP_FAIL);
}

/* ---- the command line ---------------------------------------------------------------------- */

typedef struct Run {
        char *out, *err;
        size_t out_size, err_size;
} Run;

static void run_done(Run *r)
{
        free(r->out);
        free(r->err);
}

static int run_ctl(Run *run, const char *first, ...)
{
        const char *argv[64] = {"vgpuctl", first};
        int argc = 2;
        va_list ap;
        va_start(ap, first);
        for (const char *a; (a = va_arg(ap, const char *));)
                argv[argc++] = a;
        va_end(ap);

        FILE *out = open_memstream(&run->out, &run->out_size);
        FILE *err = open_memstream(&run->err, &run->err_size);
        assert_non_null(out);
        assert_non_null(err);
        const CtlEnv env = {
            .clock = clock_realtime,
            .connect_timeout_ms = 1000,
            .timeout_ms = 1000,
            .lifecycle_timeout_ms = 1000,
            .out = out,
            .err = err,
        };
        int status = ctl_run(argc, (char *const *)argv, &env);
        fclose(out);
        fclose(err);
        return status;
}

#define CREATE_ARGS                                                                          \
        "--profile", "NVIDIA L40S-4Q", "--name", "vm", "--vcpus", "1", "--memory-mb", "256", \
            "--kernel", "/k"

/* FLEET-7, OPS-8: the fleet commands' usage errors exit 2 before any request. */
static void test_usage(void **state)
{
        static const struct {
                const char *argv[24];
                const char *message;
        } cases[] = {
            {{"fleet", "hosts", "--hosts", "h.json"}, "needs --placement"},
            {{"fleet", "resources", "--placement", "http://p:1"}, "needs --hosts"},
            {{"fleet", "hosts", "--placement", "p:1", "--hosts", "h.json"}, "--placement"},
            {{"fleet", "create", "--placement", "http://p:1", "--hosts", "h.json", "--name", "vm",
              "--vcpus", "1", "--memory-mb", "256", "--kernel", "/k"},
             "needs --profile"},
            {{"fleet", "create", "--placement", "http://p:1", "--hosts", "h.json", CREATE_ARGS,
              "--count", "0"},
             "--count"},
            {{"fleet", "create", "--placement", "http://p:1", "--hosts", "h.json", CREATE_ARGS,
              "--count", "1001"},
             "--count"},
            {{"fleet", "hosts", "--placement", "http://p:1", "--hosts", "h.json", "--url",
              "http://x:1"},
             "does not apply to fleet"},
            {{"fleet", "hosts", "--placement", "http://p:1", "--hosts", "h.json", "--token", "t"},
             "does not apply to fleet"},
            {{"fleet", "hosts", "--placement", "http://p:1", "--hosts", "h.json", "--count", "2"},
             "does not apply"},
            {{"fleet", "delete", "--hosts", "h.json", "--host", "a"}, "needs an instance id"},
            {{"fleet", "delete", "abc", "--hosts", "h.json", "--host", "a"}, "invalid instance"},
            {{"fleet", "delete", "k3x9q2m8v1c4z7n5b0wd", "--hosts", "h.json"}, "needs --host"},
            {{"fleet", "delete", "k3x9q2m8v1c4z7n5b0wd", "--hosts", "h.json", "--host", "a b"},
             "--host"},
            {{"fleet", "hosts", "--placement", "http://p:1", "--hosts", "/nonexistent/h.json"},
             "--hosts /nonexistent/h.json"},
            {{"fleet", "hosts", "--placement", "http://p:1", "--hosts", "h.json",
              "--placement-token-file", "/nonexistent/t"},
             "--placement-token-file /nonexistent/t"},
            {{"fleet", "create", "--placement", "http://p:1", "--hosts", "/nonexistent/h.json",
              CREATE_ARGS},
             "--hosts /nonexistent/h.json"},
            {{"fleet", "list"}, "unknown command \"fleet list\""},
            /* DISK-12: an image is a name; with one, neither --kernel nor --disk is needed
             * (the hosts file is the first thing then found missing). */
            {{"fleet", "create", "--placement", "http://p:1", "--hosts", "h.json", CREATE_ARGS,
              "--image", "Not An/Image"},
             "--image \"Not An/Image\": expected an image name"},
            {{"fleet", "create", "--placement", "http://p:1", "--hosts", "/nonexistent/h.json",
              "--profile", "NVIDIA L40S-4Q", "--name", "vm", "--vcpus", "1", "--memory-mb", "256",
              "--image", "debian-12"},
             "--hosts /nonexistent/h.json"},
            {{"fleet", "create", "--placement", "http://p:1", "--hosts", "/nonexistent/h.json",
              "--profile", "NVIDIA L40S-4Q", "--name", "vm", "--vcpus", "1", "--memory-mb", "256"},
             "needs --image, --kernel or --disk"},
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_(run_done) Run run = {};
                const char *const *a = cases[i].argv;
                const char *argv[24] = {};
                for (size_t k = 0; a[k]; k++)
                        argv[k] = a[k];
                int status = run_ctl(&run, argv[0], argv[1], argv[2], argv[3], argv[4], argv[5],
                                     argv[6], argv[7], argv[8], argv[9], argv[10], argv[11],
                                     argv[12], argv[13], argv[14], argv[15], argv[16], argv[17],
                                     argv[18], argv[19], argv[20], argv[21], argv[22], NULL);
                if (status != CTL_EXIT_USAGE || !strstr(run.err, cases[i].message))
                        fail_msg("case %zu: status %d, stderr: %s", i, status, run.err);
                assert_int_equal(run.out_size, 0);
        }
}

/* FLEET-7: a hosts file that parses but names a profile without a size, or a --host it lacks,
 * is a usage error too; and a Placement that cannot be reached is OPS-8's exit 3. */
static void test_usage_with_file(void **state)
{
        _cleanup_test_tree_ TestTree *t = NULL;
        _cleanup_free_ char *hosts = NULL;

        assert_int_equal(test_tree_new("ctl-fleet", &t), 0);
        assert_non_null(hosts = test_tree_path(t, "hosts.json"));
        assert_int_equal(write_text(hosts, "{\"hosts\": [{\"name\": \"host-a\", \"url\": "
                                           "\"http://127.0.0.1:1\"}]}"),
                         0);
        {
                _cleanup_(run_done) Run run = {};
                int status = run_ctl(&run, "fleet", "create", "--placement", "http://127.0.0.1:1",
                                     "--hosts", hosts, "--profile", "NVIDIA L40S", "--name", "vm",
                                     "--vcpus", "1", "--memory-mb", "256", "--kernel", "/k", NULL);
                assert_int_equal(status, CTL_EXIT_USAGE);
                assert_non_null(strstr(run.err, "no framebuffer size"));
        }
        {
                _cleanup_(run_done) Run run = {};
                int status = run_ctl(&run, "fleet", "delete", "k3x9q2m8v1c4z7n5b0wd", "--hosts",
                                     hosts, "--host", "host-b", NULL);
                assert_int_equal(status, CTL_EXIT_USAGE);
                assert_non_null(strstr(run.err, "--host host-b: not in"));
        }
        {
                /* Port 1 on loopback: nothing listens there. */
                _cleanup_(run_done) Run run = {};
                int status = run_ctl(&run, "fleet", "hosts", "--placement", "http://127.0.0.1:1",
                                     "--hosts", hosts, NULL);
                assert_int_equal(status, CTL_EXIT_CONNECT);
                assert_non_null(strstr(run.err, "cannot reach Placement at http://127.0.0.1:1"));
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_hosts_parse),   cmocka_unit_test(test_hosts_parse_errors),
            cmocka_unit_test(test_hosts_load),    cmocka_unit_test(test_pf_from_provider_name),
            cmocka_unit_test(test_candidate_map), cmocka_unit_test(test_candidates_parse),
            cmocka_unit_test(test_classify),      cmocka_unit_test(test_next_step),
            cmocka_unit_test(test_usage),         cmocka_unit_test(test_usage_with_file),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
