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
 *  - the whole run is bounded to 10 s. A read of a hung driver's sysfs file (or of a FUSE tree)
 *    blocks in the kernel, uninterruptibly once the request is out, and no thread of the
 *    blocked process can end the process before the read returns. So the checks run in a
 *    forked child (single-threaded at the fork; it never execs, so posix_spawn's reasons do not
 *    apply) that sends each result as one JSON line through a pipe. At the bound the parent
 *    reports the check in progress and the ones after it as failed, kills the child and exits
 *    without waiting for it; the child holds none of the caller's descriptors, so nothing of
 *    the caller waits on it either.
 */
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
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

/* What the child may send: HOST_CHECK_COUNT lines of one evidence and one remedy each. */
#define RESULTS_MAX ((size_t)1024 * 1024)

static nsec_t now_monotonic(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (nsec_t)ts.tv_sec * NSEC_PER_SEC + (nsec_t)ts.tv_nsec;
}

/* ---- results as JSON ----------------------------------------------------------------------- */

static json_t *result_to_json(const HostCheckResult *r)
{
        json_auto_t *o = json_object();
        if (!o || json_set(o, "check", json_string(r->check)) < 0 ||
            json_set(o, "status", json_string(host_check_status_to_string(r->status))) < 0 ||
            json_set(o, "evidence", json_string(r->evidence)) < 0 ||
            json_set(o, "remedy", r->remedy ? json_string(r->remedy) : json_null()) < 0)
                return NULL;
        return json_incref(o);
}

/*
 * One line from the child, as result_to_json() made it, for check number i. The check name is
 * the parent's own (static) string. -EBADMSG for anything else.
 */
static int result_from_json(const char *line, size_t i, HostCheckResult *ret)
{
        json_auto_t *o = json_loads(line, JSON_REJECT_DUPLICATES, NULL);
        const char *check, *status, *evidence, *remedy = NULL;
        json_t *remedy_json;
        HostCheckStatus st;

        if (!o || i >= HOST_CHECK_COUNT ||
            json_unpack(o, "{s:s, s:s, s:s, s:o!}", "check", &check, "status", &status, "evidence",
                        &evidence, "remedy", &remedy_json) < 0 ||
            !streq(check, host_check_names[i]) ||
            !(json_is_null(remedy_json) || (remedy = json_string_value(remedy_json))))
                return -EBADMSG;
        if (streq(status, "PASS"))
                st = HOST_CHECK_PASS;
        else if (streq(status, "WARN"))
                st = HOST_CHECK_WARN;
        else if (streq(status, "FAIL"))
                st = HOST_CHECK_FAIL;
        else
                return -EBADMSG;

        _cleanup_free_ char *e = strdup(evidence), *what = remedy ? strdup(remedy) : NULL;
        if (!e || (remedy && !what))
                return -ENOMEM;
        *ret = (HostCheckResult){.check = host_check_names[i],
                                 .status = st,
                                 .evidence = TAKE_PTR(e),
                                 .remedy = TAKE_PTR(what)};
        return 0;
}

/* ---- output -------------------------------------------------------------------------------- */

/* The evidence is printable ASCII already (hostcheck escapes it); the remedies are ours. */
static void print_text(const HostCheckResult *r, FILE *f)
{
        fprintf(f, "%s  %-*s  %s", host_check_status_to_string(r->status), CHECK_WIDTH, r->check,
                r->evidence);
        if (r->remedy)
                fprintf(f, "  -> %s", r->remedy);
        fputc('\n', f);
}

static int print_json(const HostCheckResult *results, size_t n, FILE *f)
{
        json_auto_t *a = json_array();
        if (!a)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                if (json_push(a, result_to_json(&results[i])) < 0)
                        return -ENOMEM;
        if (json_dumpf(a, f, JSON_INDENT(2) | JSON_PRESERVE_ORDER) < 0)
                return -EIO;
        fputc('\n', f);
        return 0;
}

/* ---- the child ----------------------------------------------------------------------------- */

typedef struct Sender {
        int fd;
        int r;
} Sender;

static void send_result(HostCheckResult *r, void *userdata)
{
        Sender *s = userdata;
        json_auto_t *o = result_to_json(r);
        _cleanup_free_ char *line = o ? json_dumps(o, JSON_COMPACT) : NULL;
        host_check_result_done(r);
        if (s->r < 0)
                return;
        if (!line || strextend(&line, "\n") < 0)
                s->r = -ENOMEM;
        else
                s->r = write_all(s->fd, line, strlen(line));
}

/*
 * The child: stdout and stderr become descriptors nothing can be written through (an O_PATH
 * descriptor of "/"), so that the caller's pipes close when the parent exits, whatever the
 * child is blocked in; then the checks, each result a line on fd. Never returns.
 */
_Noreturn static void run_child(const HostCheckSetup *setup, int fd)
{
        Sender sender = {.fd = fd};
        int hole = open("/", O_PATH | O_CLOEXEC);
        if (hole < 0 || dup2(hole, STDOUT_FILENO) < 0 || dup2(hole, STDERR_FILENO) < 0)
                _exit(1);
        int r = host_check_run(setup, send_result, &sender);
        _exit(r < 0 || sender.r < 0 ? 1 : 0);
}

/* ---- the parent ---------------------------------------------------------------------------- */

typedef struct Collector {
        HostCheckResult results[HOST_CHECK_COUNT];
        size_t n;
        char *buf; /* what came after the last complete line */
        size_t size;
} Collector;

static void collector_done(Collector *c)
{
        for (size_t i = 0; i < c->n; i++)
                host_check_result_done(&c->results[i]);
        free(c->buf);
}

/* Takes the complete lines out of c->buf. 0, -EBADMSG, -ENOMEM. */
static int take_lines(Collector *c)
{
        char *start = c->buf, *nl;
        while (c->buf && (nl = memchr(start, '\n', c->size - (size_t)(start - c->buf)))) {
                *nl = '\0';
                int r = result_from_json(start, c->n, &c->results[c->n]);
                if (r < 0)
                        return r;
                c->n++;
                start = nl + 1;
        }
        if (c->buf && start != c->buf) {
                c->size -= (size_t)(start - c->buf);
                memmove(c->buf, start, c->size);
        }
        return 0;
}

/* Reads what the child sends until EOF (1) or the bound (0); -errno when it cannot. */
static int collect(Collector *c, int fd, nsec_t bound, bool json)
{
        char chunk[4096];
        size_t printed = 0;

        for (;;) {
                nsec_t now = now_monotonic();
                if (now >= bound)
                        return 0;
                struct pollfd p = {.fd = fd, .events = POLLIN};
                int n = poll(&p, 1, (int)((bound - now + NSEC_PER_MSEC - 1) / NSEC_PER_MSEC));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return negative_errno();
                if (n == 0)
                        continue;
                ssize_t got = read(fd, chunk, sizeof chunk);
                if (got < 0 && errno == EINTR)
                        continue;
                if (got < 0)
                        return negative_errno();
                if (got == 0)
                        return c->size == 0 ? 1 : -EBADMSG;
                if (c->size + (size_t)got > RESULTS_MAX)
                        return -EFBIG;
                char *grown = realloc(c->buf, c->size + (size_t)got + 1);
                if (!grown)
                        return -ENOMEM;
                memcpy(grown + c->size, chunk, (size_t)got);
                c->size += (size_t)got;
                c->buf = grown;
                int r = take_lines(c);
                if (r < 0)
                        return r;
                /* Text goes out as each check is decided. */
                for (; !json && printed < c->n; printed++)
                        print_text(&c->results[printed], stdout);
                fflush(stdout);
        }
}

/*
 * At the bound: the check in progress and the ones after it fail. Their texts are static and
 * the process exits right after printing them, so they are never freed.
 */
static void add_unfinished(Collector *c)
{
        for (size_t i = c->n; i < HOST_CHECK_COUNT; i++)
                c->results[i] = (HostCheckResult){
                    .check = host_check_names[i],
                    .status = HOST_CHECK_FAIL,
                    .evidence = (char *)(i == c->n ? "no answer within the 10 s bound of "
                                                     "host-check"
                                                   : "not run: the 10 s bound was reached"),
                    .remedy = (char *)(i == c->n ? "something it reads blocks: look for a hung "
                                                   "driver, mount or helper"
                                                 : "run host-check again once the check above "
                                                   "answers"),
                };
}

/*
 * Runs the checks in a child and reports them: text as each is decided, JSON once all are.
 * Returns the exit status.
 */
static int run_and_report(const HostCheckSetup *setup, bool json, nsec_t bound)
{
        _cleanup_(collector_done) Collector c = {};
        int fds[2];

        if (pipe2(fds, O_CLOEXEC) < 0) {
                fprintf(stderr, "vgpud host-check: pipe: %m\n");
                return 1;
        }
        fflush(NULL); /* nothing buffered twice */
        pid_t pid = fork();
        if (pid < 0) {
                fprintf(stderr, "vgpud host-check: fork: %m\n");
                close(fds[0]);
                close(fds[1]);
                return 1;
        }
        if (pid == 0) {
                close(fds[0]);
                run_child(setup, fds[1]);
        }
        close(fds[1]);
        _cleanup_close_ int fd = fds[0];

        int r = collect(&c, fd, bound, json);
        if (r == 0) {
                /* The bound: the child may be blocked for good; it is not waited for. */
                (void)kill(pid, SIGKILL);
                size_t printed = c.n;
                add_unfinished(&c);
                for (size_t i = printed; !json && i < HOST_CHECK_COUNT; i++)
                        print_text(&c.results[i], stdout);
                r = json ? print_json(c.results, HOST_CHECK_COUNT, stdout) : 0;
                if (fflush(stdout) != 0 || r < 0)
                        fprintf(stderr, "vgpud host-check: write output: %m\n");
                _exit(1);
        }

        if (r < 0) {
                /* Not waited for either: a child that sends nonsense may be stuck as well. */
                (void)kill(pid, SIGKILL);
                fprintf(stderr, "vgpud host-check: read the checks' results: %s\n", strerror(-r));
                return 1;
        }

        /* EOF: the child has closed its end, which it does only by exiting. */
        int status = 0;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
        if (c.n != HOST_CHECK_COUNT || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                fprintf(stderr, "vgpud host-check: the checks ended after %zu of %d results\n", c.n,
                        HOST_CHECK_COUNT);
                return 1;
        }
        if (json)
                r = print_json(c.results, c.n, stdout);
        if (r >= 0 && fflush(stdout) != 0)
                r = negative_errno();
        if (r >= 0 && ferror(stdout))
                r = -EIO;
        if (r < 0) {
                fprintf(stderr, "vgpud host-check: write output: %s\n", strerror(-r));
                return 1;
        }
        for (size_t i = 0; i < c.n; i++)
                if (c.results[i].status == HOST_CHECK_FAIL)
                        return 1;
        return 0;
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
        int status = run_and_report(&setup, json, started + RUN_BOUND);
        config_done(&config);
        return status;
}
