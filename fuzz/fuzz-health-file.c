/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vf-health.json (REL-5, HEALTH-1, HEALTH-2, HEALTH-3, HEALTH-4, HEALTH-5, HEALTH-6). Invariants
 * beyond "no crash": a rejected file gets a one-line message; an accepted file formats canonically,
 * and the canonical bytes are a fixed point of parse + format; re-evaluation of what loaded keeps
 * it loadable.
 */
#include "health/health.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        _cleanup_health_state_ HealthState *s = NULL, *again = NULL, *third = NULL;
        _cleanup_free_ char *error = NULL, *out = NULL, *out2 = NULL, *out3 = NULL;
        size_t n;

        if (health_state_parse((const char *)data, size, &s, &error) < 0) {
                if (!error || strchr(error, '\n'))
                        abort();
                return 0;
        }
        if (health_state_format(s, &out, &n) < 0)
                abort();
        if (health_state_parse(out, n, &again, NULL) < 0)
                abort();
        if (health_state_format(again, &out2, NULL) < 0 || !streq(out, out2))
                abort();

        if (health_state_reevaluate(again, 1, (Timestamp){.sec = 1788379200}) < 0)
                abort();
        if (health_state_format(again, &out3, &n) < 0 ||
            health_state_parse(out3, n, &third, NULL) < 0)
                abort();
        return 0;
}
