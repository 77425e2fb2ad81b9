/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vgpud [--config PATH] [--set KEY=VALUE]... [--check-config] [--version]: the daemon's command
 * line (CFG-1, CFG-2). Configuration problems, the lock, a root or a listener end start-up with
 * status 1 and one error line (GEN-10); usage errors with status 2.
 */
#include <getopt.h>
#include <sys/resource.h>

#include "commands.h"
#include "config.h"
#include "config/config.h"
#include "http/http.h"
#include "manager.h"
#include "net/net.h"

#define DAEMON_USAGE \
        "usage: vgpud [--config PATH] [--set KEY=VALUE]... [--check-config] [--version]\n"

static int fail(const char *error)
{
        log_kv(LOG_LEVEL_ERR, 0, "%s", error);
        return 1;
}

/* CFG-1..CFG-5 and API-14: everything start-up would refuse before touching the host. */
/*
 * vgpud holds a pidfd for every VM it runs or adopts (INST-21), its QMP connection, and its
 * HTTP connections: on a large host the 1024 descriptors a shell or a unit without LimitNOFILE
 * leaves as the soft limit run out, and records then fail to load. Nothing in vgpud uses
 * select() (sd-event and libmicrohttpd wait with epoll), so the soft limit goes up to the hard
 * one. The VMMs inherit it; QEMU waits with poll() too.
 */
static void raise_fd_limit(void)
{
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= rl.rlim_max)
                return;
        rlim_t was = rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
                log_warning_errno(-errno, "raise the open file limit from %ju: %m", (uintmax_t)was);
}

static int load_config(const char *path, bool explicit_path, char **sets, Config *ret, char **error)
{
        Config c = {};
        int r = config_init_defaults(&c);
        if (r < 0)
                return error_set(error, r, "configuration: %s", strerror(-r));
        r = config_load_file(&c, path, explicit_path, error);
        for (char **s = sets; r >= 0 && s && *s; s++)
                r = config_set(&c, *s, error);
        if (r >= 0)
                r = config_validate(&c, error);
        if (r >= 0)
                r = config_check_paths(&c, error);
        if (r < 0) {
                config_done(&c);
                return r;
        }
        *ret = c;
        return 0;
}

int cmd_daemon(int argc, char **argv)
{
        enum { OPT_CONFIG = 0x100, OPT_SET, OPT_CHECK, OPT_VERSION, OPT_HELP };
        static const struct option options[] = {
            {"config", required_argument, NULL, OPT_CONFIG},
            {"set", required_argument, NULL, OPT_SET},
            {"check-config", no_argument, NULL, OPT_CHECK},
            {"version", no_argument, NULL, OPT_VERSION},
            {"help", no_argument, NULL, OPT_HELP},
            {},
        };
        nsec_t begun = manager_now(); /* GEN-10's phases are timed from here (start-up phases) */
        const char *path = CONFIG_DEFAULT_PATH;
        bool explicit_path = false, check = false;
        _cleanup_strv_free_ char **sets = NULL;
        int c;

        opterr = 0;
        optind = 1;
        while ((c = getopt_long(argc, argv, "", options, NULL)) >= 0) {
                switch (c) {
                case OPT_CONFIG:
                        path = optarg;
                        explicit_path = true;
                        break;
                case OPT_SET:
                        if (strv_push(&sets, optarg) < 0)
                                return fail(ERROR_OUT_OF_MEMORY);
                        break;
                case OPT_CHECK:
                        check = true;
                        break;
                case OPT_VERSION:
                        printf("vgpud %s\n", VGPUD_VERSION);
                        return 0;
                case OPT_HELP:
                        vgpud_help(stdout);
                        return 0;
                default:
                        fprintf(stderr, "vgpud: invalid option \"%s\"\n%s", argv[optind - 1],
                                DAEMON_USAGE);
                        return 2;
                }
        }
        if (optind < argc) {
                fprintf(stderr, "vgpud: unexpected argument \"%s\"\n%s", argv[optind],
                        DAEMON_USAGE);
                return 2;
        }

        _cleanup_free_ char *error = NULL;
        Config config = {};
        int r = load_config(path, explicit_path, sets, &config, &error);
        if (r < 0)
                return fail(error);
        nsec_t configured = manager_now();

        if (check) {
                /* API-14: the secret is part of what start-up checks before serving. */
                _cleanup_jwt_secret_ JwtSecret *secret = NULL;
                _cleanup_free_ char *dump = NULL;
                r = jwt_secret_load(config.jwt_secret_file, &secret, &error);
                if (r >= 0 && (r = config_dump(&config, &dump)) < 0)
                        (void)error_set(&error, r, "print configuration: %s", strerror(-r));
                config_done(&config);
                if (r < 0)
                        return fail(error);
                fputs(dump, stdout);
                return 0;
        }

        raise_fd_limit();
        /* Before the records load and their VMMs' pidfds push descriptors past 1024 (NET-4). */
        if (config.network.nat.enabled && (r = net_nft_open_shared()) < 0)
                log_line(LOG_LEVEL_WARNING, r, "nftables context not opened", NULL);
        /* OPS-13: under systemd, lines go to the journal with their VF, GPU and instance. */
        r = log_open_journal("vgpud");
        if (r < 0)
                log_line(LOG_LEVEL_WARNING, r, "journal socket unavailable; logging to stderr",
                         NULL);
        _cleanup_manager_ Manager *m = NULL;
        r = manager_new(&m);
        if (r < 0) {
                config_done(&config);
                return fail(ERROR_OUT_OF_MEMORY);
        }
        m->startup[MANAGER_STARTUP_BEGIN] = begun;
        m->startup[MANAGER_STARTUP_CONFIGURED] = configured;
        r = manager_start(m, &config, &error);
        config_done(&config);
        if (r < 0)
                return fail(error);
        return manager_run(m);
}
