/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * make-seed: writes a NoCloud seed ISO with the seed module, for tests that boot a real cloud
 * image without vgpud (tests/e2e/test-e2e-image.py). Not installed.
 *
 *   make-seed DIR NAME --instance-id ID --hostname NAME [--ssh-key-file FILE]...
 *             [--user-data-file FILE] [--vendor-data-file FILE]
 *             [--network none | nat MAC IP PREFIX GATEWAY | bridge MAC [IP PREFIX [GATEWAY]]]
 *
 * The cloud_init part goes through seed_cloud_init_from_json(), as a create body's would.
 * Exit 0, or 1 with the seed module's message on stderr, 2 on a usage error.
 */
#include <fcntl.h>
#include <jansson.h>

#include "base/json-util.h"
#include "seed/seed.h"

static int usage(void)
{
        fprintf(stderr, "usage: make-seed DIR NAME --instance-id ID --hostname NAME "
                        "[--ssh-key-file FILE]... [--user-data-file FILE] "
                        "[--vendor-data-file FILE] [--network none | nat MAC IP PREFIX GATEWAY "
                        "| bridge MAC [IP PREFIX [GATEWAY]]]\n");
        return 2;
}

static int fail(const char *what, const char *error)
{
        fprintf(stderr, "make-seed: %s: %s\n", what, error);
        return 1;
}

/* A key file's first line. */
static int read_line(const char *path, char **ret)
{
        _cleanup_free_ char *text = NULL;
        int r = read_file_at(AT_FDCWD, path, SEED_SSH_KEY_MAX + 2, &text, NULL);
        if (r < 0)
                return r;
        text[strcspn(text, "\n")] = 0;
        *ret = TAKE_PTR(text);
        return 0;
}

int main(int argc, char **argv)
{
        if (argc < 3)
                return usage();
        const char *dir = argv[1], *name = argv[2];
        const char *id = NULL, *hostname = NULL, *vendor_path = NULL;
        json_auto_t *body = json_object(), *keys = json_array();
        SeedNetwork net = {.mode = SEED_NETWORK_NONE};
        unsigned prefix = 0;
        for (int i = 3; i < argc; i++) {
                const char *a = argv[i];
                bool more = i + 1 < argc;
                if (streq(a, "--instance-id") && more)
                        id = argv[++i];
                else if (streq(a, "--hostname") && more)
                        hostname = argv[++i];
                else if (streq(a, "--ssh-key-file") && more) {
                        _cleanup_free_ char *line = NULL;
                        if (read_line(argv[++i], &line) < 0)
                                return fail(argv[i], "cannot read");
                        if (json_push(keys, json_string(line)) < 0)
                                return fail(argv[i], "not a valid key string");
                } else if (streq(a, "--user-data-file") && more) {
                        _cleanup_free_ char *text = NULL;
                        if (read_file_at(AT_FDCWD, argv[++i], SEED_USER_DATA_MAX + 1, &text, NULL) <
                            0)
                                return fail(argv[i], "cannot read");
                        if (json_set(body, "user_data", json_string(text)) < 0)
                                return fail(argv[i], "not UTF-8");
                } else if (streq(a, "--vendor-data-file") && more)
                        vendor_path = argv[++i];
                else if (streq(a, "--network") && more) {
                        const char *mode = argv[++i];
                        int left = argc - i - 1;
                        if (streq(mode, "none"))
                                net.mode = SEED_NETWORK_NONE;
                        else if (streq(mode, "nat") && left >= 4) {
                                net = (SeedNetwork){.mode = SEED_NETWORK_NAT,
                                                    .mac = argv[i + 1],
                                                    .ip = argv[i + 2],
                                                    .gateway = argv[i + 4]};
                                if (parse_uint32(argv[i + 3], &prefix) < 0)
                                        return usage();
                                i += 4;
                        } else if (streq(mode, "bridge") && left >= 1) {
                                net = (SeedNetwork){.mode = SEED_NETWORK_BRIDGE, .mac = argv[++i]};
                                if (i + 2 < argc && !startswith(argv[i + 1], "--")) {
                                        net.ip = argv[i + 1];
                                        if (parse_uint32(argv[i + 2], &prefix) < 0)
                                                return usage();
                                        i += 2;
                                        if (i + 1 < argc && !startswith(argv[i + 1], "--"))
                                                net.gateway = argv[++i];
                                }
                        } else
                                return usage();
                } else
                        return usage();
        }
        if (!id || !hostname)
                return usage();
        net.prefix = prefix;
        if (json_array_size(keys) > 0 &&
            json_set(body, "ssh_authorized_keys", json_incref(keys)) < 0)
                return fail("keys", ERROR_OUT_OF_MEMORY);

        _cleanup_free_ char *error = NULL, *vendor = NULL;
        _cleanup_(seed_cloud_init_done) SeedCloudInit c = {0};
        if (seed_cloud_init_from_json(body, "cloud_init", -EINVAL, &c, &error) < 0)
                return fail("cloud_init", error);
        if (vendor_path && seed_read_vendor_data(vendor_path, &vendor, &error) < 0)
                return fail("vendor data", error);
        SeedInput in = {.instance_id = id,
                        .hostname = hostname,
                        .cloud_init = &c,
                        .network = net,
                        .vendor_data = vendor};
        _cleanup_(seed_files_done) SeedFiles files = {0};
        if (seed_render(&in, &files, &error) < 0)
                return fail("render", error);
        _cleanup_close_ int dfd = open(dir, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
        if (dfd < 0)
                return fail(dir, strerror(errno));
        if (seed_iso_write_at(dfd, name, &files, &error) < 0)
                return fail(name, error);
        return 0;
}
