/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vgpud health-check FILE [--threshold N]
 *
 * Validates a VF health file offline, typically after a hand edit and before SIGHUP, with the
 * same parser the daemon loads it with. It prints "ok: <n> records, <q> quarantined", where
 * q counts the quarantines the daemon would hold after its load-time re-evaluation with
 * threshold N (HEALTH-8), or the load error as one line. It never writes: the re-evaluation
 * happens in memory only.
 *
 * Exit status: 0 valid, 1 invalid or unreadable, 2 usage.
 */
#include <fcntl.h>

#include "base/base.h"
#include "commands.h"
#include "health/health.h"

#define USAGE "usage: vgpud health-check FILE [--threshold N]\n"

#define usage_error(...) command_usage_error("health-check", USAGE, __VA_ARGS__)

int cmd_health_check(int argc, char **argv)
{
        const char *file = NULL, *threshold_arg = NULL;

        for (int i = 1; i < argc; i++) {
                const char *value;
                if (streq(argv[i], "--threshold")) {
                        if (i + 1 >= argc)
                                return usage_error("%s needs a value", argv[i]);
                        threshold_arg = argv[++i];
                } else if ((value = startswith(argv[i], "--threshold=")))
                        threshold_arg = value;
                else if (streq(argv[i], "--help")) {
                        fputs(USAGE, stdout);
                        return 0;
                } else if (argv[i][0] == '-' && argv[i][1])
                        return usage_error("unknown option %s", argv[i]);
                else if (file)
                        return usage_error("unexpected argument \"%s\"", argv[i]);
                else
                        file = argv[i];
        }
        if (!file)
                return usage_error("missing FILE");

        uint64_t threshold = HEALTH_THRESHOLD_DEFAULT;
        if (threshold_arg &&
            (parse_uint64(threshold_arg, &threshold) < 0 || !health_threshold_is_valid(threshold)))
                return usage_error("--threshold must be an integer between 1 and 64, got \"%s\"",
                                   threshold_arg);

        _cleanup_health_state_ HealthState *state = NULL;
        _cleanup_free_ char *error = NULL;
        int r = health_state_load_at(AT_FDCWD, file, false, &state, &error);
        if (r < 0) {
                fprintf(stderr, "%s\n", error);
                return 1;
        }

        /* As the daemon's load would, skipped while the breaker is open (HEALTH-9). */
        if (!state->breaker_open &&
            health_state_reevaluate(state, (unsigned)threshold, clock_now(&clock_realtime)) < 0) {
                fprintf(stderr, "re-evaluate VF health state: %s\n", strerror(ENOMEM));
                return 1;
        }
        printf("ok: %zu records, %zu quarantined\n", state->n_records,
               health_state_count_quarantined(state));
        return 0;
}
