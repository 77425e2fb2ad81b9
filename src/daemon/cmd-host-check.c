/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vgpud host-check [--config PATH] [--set KEY=VALUE]... [--json]: is this host ready for vgpud?
 * (SPEC §23, HOSTCHK-1, HOSTCHK-2)
 *
 * Loads the configuration as the daemon would (CFG-1, CFG-2), runs the checks of hostcheck/
 * and prints one line per check:
 *
 *      PASS|WARN|FAIL  <check>  <evidence>[  -> <what to do>]
 *
 * or, with --json, one array of {"check", "status", "evidence", "remedy"} (remedy null when
 * there is nothing to do). Exit status: 0 when no check failed, 1 when one did, 2 for a command
 * line it cannot take.
 *
 * Decisions:
 *  - a configuration that cannot be read or is invalid is the config check's FAIL, not a usage
 *    error: the point of the command is to say what is wrong with the host, the configuration
 *    included. The other checks then run with the defaults in place of what failed to load
 *    (--set values that load still apply), and the config line says so;
 *  - the whole run is bounded to 10 s: the checks run on a thread of their own, since a sysfs
 *    or FUSE read can block in the kernel with no deadline of its own. At the bound, the check
 *    in progress and those after it are reported as failed, and the process exits at once
 *    without waiting for the blocked thread.
 */
#include <getopt.h>
#include <jansson.h>
#include <pthread.h>
#include <time.h>

#include "base/base.h"
#include "base/json-util.h"
#include "commands.h"
#include "config/config.h"
#include "hostcheck/hostcheck.h"

#define HOST_CHECK_USAGE "usage: vgpud host-check [--config PATH] [--set KEY=VALUE]... [--json]\n"

/* HOSTCHK-1's bound on the whole run, and the part of it the checks' helpers may use. */
#define RUN_BOUND (10 * NSEC_PER_SEC)
#define HELPER_BOUND (9 * NSEC_PER_SEC)

/* The width of the check column: the longest name ("runtime-dir"). */
#define CHECK_WIDTH 11

/* The results, handed from the checks' thread to the one that prints them. */
typedef struct Collector {
        pthread_mutex_t lock;
        pthread_cond_t changed;
        HostCheckResult results[HOST_CHECK_COUNT];
        size_t n;
        bool finished;
        int r; /* host_check_run's */
        const HostCheckSetup *setup;
} Collector;

static void collect(HostCheckResult *r, void *userdata)
{
        Collector *c = userdata;
        pthread_mutex_lock(&c->lock);
        if (c->n < HOST_CHECK_COUNT)
                c->results[c->n++] = *r;
        else
                host_check_result_done(r);
        pthread_cond_signal(&c->changed);
        pthread_mutex_unlock(&c->lock);
}

static void *run_checks(void *userdata)
{
        Collector *c = userdata;
        int r = host_check_run(c->setup, collect, c);
        pthread_mutex_lock(&c->lock);
        c->r = r;
        c->finished = true;
        pthread_cond_signal(&c->changed);
        pthread_mutex_unlock(&c->lock);
        return NULL;
}

static nsec_t now_monotonic(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (nsec_t)ts.tv_sec * NSEC_PER_SEC + (nsec_t)ts.tv_nsec;
}

/* ---- output -------------------------------------------------------------------------------- */

/* One line of outside text: control characters (a newline in an error) become spaces. */
static void put_line_text(const char *s, FILE *f)
{
        for (; *s; s++)
                fputc((unsigned char)*s < 0x20 || *s == 0x7f ? ' ' : *s, f);
}

static void print_text(const HostCheckResult *r, FILE *f)
{
        fprintf(f, "%s  %-*s  ", host_check_status_to_string(r->status), CHECK_WIDTH, r->check);
        put_line_text(r->evidence, f);
        if (r->remedy) {
                fputs("  -> ", f);
                put_line_text(r->remedy, f);
        }
        fputc('\n', f);
}

static int print_json(const HostCheckResult *results, size_t n, FILE *f)
{
        json_auto_t *a = json_array();
        if (!a)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                const HostCheckResult *r = &results[i];
                json_t *o = json_object();
                if (json_push(a, o) < 0 || json_set(o, "check", json_string(r->check)) < 0 ||
                    json_set(o, "status", json_string(host_check_status_to_string(r->status))) <
                        0 ||
                    json_set(o, "evidence", json_string(r->evidence)) < 0 ||
                    json_set(o, "remedy", r->remedy ? json_string(r->remedy) : json_null()) < 0)
                        return -ENOMEM;
        }
        if (json_dumpf(a, f, JSON_INDENT(2) | JSON_PRESERVE_ORDER) < 0)
                return -EIO;
        fputc('\n', f);
        return 0;
}

/*
 * At the bound: the check in progress and the ones after it fail. The strings are static and
 * the process exits right after printing, so nothing is freed.
 */
static size_t add_unfinished(Collector *c)
{
        size_t n = c->n;
        for (size_t i = n; i < HOST_CHECK_COUNT; i++)
                c->results[i] = (HostCheckResult){
                    .check = host_check_names[i],
                    .status = HOST_CHECK_FAIL,
                    .evidence = (char *)(i == n ? "no answer within the 10 s bound of host-check"
                                                : "not run: the 10 s bound was reached"),
                    .remedy = (char *)(i == n ? "something it reads blocks: look for a hung "
                                                "driver, mount or helper"
                                              : NULL),
                };
        c->n = HOST_CHECK_COUNT; /* a result that comes in late is dropped */
        return HOST_CHECK_COUNT;
}

/*
 * Waits for the checks and prints them: text as each is decided, JSON once all are. Returns
 * the exit status.
 */
static int report(Collector *c, bool json, nsec_t bound)
{
        size_t printed = 0;
        bool timed_out = false;

        pthread_mutex_lock(&c->lock);
        for (;;) {
                while (!json && printed < c->n)
                        print_text(&c->results[printed++], stdout);
                fflush(stdout);
                if (c->finished)
                        break;
                nsec_t now = now_monotonic();
                if (now >= bound) {
                        timed_out = true;
                        break;
                }
                struct timespec until = {.tv_sec = (time_t)(bound / NSEC_PER_SEC),
                                         .tv_nsec = (long)(bound % NSEC_PER_SEC)};
                (void)pthread_cond_timedwait(&c->changed, &c->lock, &until);
        }

        size_t n = timed_out ? add_unfinished(c) : c->n;
        if (!timed_out && c->r < 0) {
                pthread_mutex_unlock(&c->lock);
                fprintf(stderr, "vgpud host-check: %s\n", strerror(-c->r));
                return 1;
        }
        while (!json && printed < n)
                print_text(&c->results[printed++], stdout);
        int r = json ? print_json(c->results, n, stdout) : 0;
        bool failed = false;
        for (size_t i = 0; i < n; i++)
                failed |= c->results[i].status == HOST_CHECK_FAIL;
        pthread_mutex_unlock(&c->lock);

        if (r >= 0 && fflush(stdout) != 0)
                r = negative_errno();
        if (r >= 0 && ferror(stdout))
                r = -EIO;
        if (r < 0) {
                fprintf(stderr, "vgpud host-check: write output: %s\n", strerror(-r));
                return 1;
        }
        if (timed_out)
                _exit(1); /* the checks' thread is blocked in the kernel; leave it there */
        return failed ? 1 : 0;
}

/* ---- the configuration --------------------------------------------------------------------- */

/*
 * CFG-1, CFG-2 as the daemon loads them, except that a failure does not end the command: it is
 * kept as *ret_error for the config check, and the --set values still apply where they load.
 * *ret_source says what was read, for the evidence.
 */
static int load_config(const char *path, bool explicit_path, char **sets, Config *c,
                       char **ret_source, char **ret_error)
{
        _cleanup_free_ char *error = NULL, *source = NULL;
        int r = config_load_file(c, path, explicit_path, &error);
        if (r == -ENOMEM)
                return r;
        if (r == 0 && strprintf(&source, "no %s, built-in defaults", path) < 0)
                return -ENOMEM;
        if (r != 0 && !(source = strdup(path)))
                return -ENOMEM;

        size_t n_sets = 0;
        for (char **s = sets; s && *s; s++, n_sets++) {
                _cleanup_free_ char *set_error = NULL;
                r = config_set(c, *s, &set_error);
                if (r == -ENOMEM)
                        return r;
                if (r < 0 && !error)
                        error = TAKE_PTR(set_error);
        }
        if (n_sets > 0 && strextend(&source, " with %zu --set", n_sets) < 0)
                return -ENOMEM;
        *ret_source = TAKE_PTR(source);
        *ret_error = TAKE_PTR(error);
        return 0;
}

#define usage_error(...) command_usage_error("host-check", HOST_CHECK_USAGE, __VA_ARGS__)

int cmd_host_check(int argc, char **argv)
{
        enum { OPT_CONFIG = 0x100, OPT_SET, OPT_JSON, OPT_HELP };
        static const struct option options[] = {
            {"config", required_argument, NULL, OPT_CONFIG},
            {"set", required_argument, NULL, OPT_SET},
            {"json", no_argument, NULL, OPT_JSON},
            {"help", no_argument, NULL, OPT_HELP},
            {},
        };
        const char *path = CONFIG_DEFAULT_PATH;
        bool explicit_path = false, json = false;
        _cleanup_strv_free_ char **sets = NULL;
        int c;

        /* getopt's state is libc's; start it afresh and let us word the errors. */
        optind = 0;
        opterr = 0;
        while ((c = getopt_long(argc, argv, "+:", options, NULL)) >= 0) {
                switch (c) {
                case OPT_CONFIG:
                        path = optarg;
                        explicit_path = true;
                        break;
                case OPT_SET:
                        if (strv_push(&sets, optarg) < 0) {
                                fprintf(stderr, "vgpud host-check: %s\n", ERROR_OUT_OF_MEMORY);
                                return 1;
                        }
                        break;
                case OPT_JSON:
                        json = true;
                        break;
                case OPT_HELP:
                        fputs(HOST_CHECK_USAGE, stdout);
                        return 0;
                case ':':
                        return usage_error("option %s needs a value", argv[optind - 1]);
                default:
                        if (optopt == OPT_JSON || optopt == OPT_HELP)
                                return usage_error("option %s takes no value", argv[optind - 1]);
                        return usage_error("unknown option %s", argv[optind - 1]);
                }
        }
        if (optind < argc)
                return usage_error("unexpected argument \"%s\"", argv[optind]);

        nsec_t started = now_monotonic();

        /* The findings are the output; the modules' own log lines would only repeat them. */
        log_set_max_level(LOG_LEVEL_ERR);

        Config config = {};
        _cleanup_free_ char *source = NULL, *config_error = NULL;
        int r = config_init_defaults(&config);
        if (r >= 0)
                r = load_config(path, explicit_path, sets, &config, &source, &config_error);
        if (r < 0) {
                config_done(&config);
                fprintf(stderr, "vgpud host-check: %s\n", strerror(-r));
                return 1;
        }

        HostCheckSetup setup = {
            .config = &config,
            .config_error = config_error,
            .config_source = source,
            .deadline = started + HELPER_BOUND,
        };
        Collector collector = {.setup = &setup};
        pthread_condattr_t attr;
        pthread_t thread;
        pthread_mutex_init(&collector.lock, NULL);
        pthread_condattr_init(&attr);
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        pthread_cond_init(&collector.changed, &attr);
        pthread_condattr_destroy(&attr);

        r = -pthread_create(&thread, NULL, run_checks, &collector);
        if (r < 0) {
                config_done(&config);
                fprintf(stderr, "vgpud host-check: start the checks: %s\n", strerror(-r));
                return 1;
        }
        int status = report(&collector, json, started + RUN_BOUND);

        pthread_join(thread, NULL);
        for (size_t i = 0; i < collector.n; i++)
                host_check_result_done(&collector.results[i]);
        pthread_cond_destroy(&collector.changed);
        pthread_mutex_destroy(&collector.lock);
        config_done(&config);
        return status;
}
