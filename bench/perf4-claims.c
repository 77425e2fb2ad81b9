/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * PERF-4 at the claim flow alone: 20 simultaneous claims of `NVIDIA L40S-2Q` on a mixed-size
 * 2×L40S simulated host with a fake NVML latency of 20 ms per call, all submitted to the Claimer
 * in one loop turn, without the API, the instance records or a VMM. The figure is the largest
 * nvml_ms (PLACE-22) of a burst; one warm-up burst, then the median of 5. It is an info row:
 * SPEC's target applies to creates through the API (bench/perf4-instances.py), whose claims
 * arrive spread over the record writes; this one shows what the Claimer's batching gives when
 * they arrive together. Runs under tests/integration/run-with-sim.sh (bench/host-perf4.yaml);
 * argv[1] is the fake libnvidia-ml.so.1. Prints one bench/run row.
 */
#include "../tests/integration/claim-harness.h"

#define CLAIMS 20
#define RUNS 5
#define UPSTREAM_MS 400.0

static int cmp_u64(const void *a, const void *b)
{
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
        return x < y ? -1 : x > y;
}

/* One burst: the largest nvml_ms, or -errno. */
static int64_t burst(Harness *h)
{
        ClaimOutcome o[CLAIMS] = {};
        uint64_t worst = 0;
        int64_t r = 0;

        for (size_t i = 0; i < CLAIMS; i++) {
                char id[32];
                snprintf(id, sizeof id, "perf4-%02zu", i);
                ClaimRequest req = {.instance_id = id, .profile = "NVIDIA L40S-2Q"};
                if (claimer_claim(h->cl, &req, harness_on_claim, &o[i]) < 0)
                        return -ENOMEM;
        }
        Waiting w = {.o = o, .n = CLAIMS};
        if (harness_run_until(h, harness_all_done, &w, 120 * NSEC_PER_SEC) < 0)
                return -ETIMEDOUT;
        for (size_t i = 0; i < CLAIMS; i++) {
                if (o[i].r < 0) {
                        fprintf(stderr, "perf4: claim %zu failed: %s\n", i, o[i].error);
                        r = -EIO;
                }
                if (getenv("PERF4_VERBOSE"))
                        fprintf(stderr, "perf4: claim %zu nvml_ms %" PRIu64 " vf %s\n", i,
                                o[i].nvml_ms, o[i].vf);
                if (o[i].nvml_ms > worst)
                        worst = o[i].nvml_ms;
                claim_outcome_clear(&o[i]);
        }
        /* Back to an empty host for the next burst. */
        h->n_claims = 0;
        for (size_t i = 0; i < h->n_saves; i++)
                free(h->saved_vfs[i]);
        h->n_saves = h->n_clears = 0;
        int k = harness_reset_all(h);
        if (k < 0)
                return k;
        return r < 0 ? r : (int64_t)worst;
}

int main(int argc, char **argv)
{
        Harness h = {};
        const char *step;
        uint64_t ms[RUNS];

        if (argc != 2) {
                fprintf(stderr, "usage: %s LIBNVIDIA_ML\n", argv[0]);
                return 2;
        }
        log_set_max_level(LOG_LEVEL_ERR);
        int r = harness_start(&h, argv[1], 5 * NSEC_PER_SEC, &step);
        if (r < 0) {
                fprintf(stderr, "perf4: %s: %s\n", step, strerror(-r));
                return 1;
        }
        if (harness_ctl(&h, "nvml latency 20") < 0) {
                fprintf(stderr, "perf4: nvml latency 20 refused\n");
                return 1;
        }
        for (int run = -1; run < RUNS; run++) {
                int64_t worst = burst(&h);
                if (worst < 0) {
                        fprintf(stderr, "perf4: burst failed: %s\n", strerror((int)-worst));
                        harness_stop(&h);
                        return 1;
                }
                if (run >= 0)
                        ms[run] = (uint64_t)worst;
                fprintf(stderr,
                        "perf4: burst %d: largest nvml_ms %" PRId64 " (rounds %" PRIu64
                        ", discoveries %" PRIu64 ")\n",
                        run, worst, claimer_get_stats(h.cl)->rounds,
                        claimer_get_stats(h.cl)->discoveries);
        }
        harness_stop(&h);
        qsort(ms, RUNS, sizeof ms[0], cmp_u64);
        uint64_t median = ms[RUNS / 2];
        printf("row\tPERF-4\tclaim flow alone, 20 claims in one turn, NVML latency 20 ms: largest "
               "nvml_ms vs upstream\t%" PRIu64 "\t%.0f\t%.2f\t-\tinfo\n",
               median, UPSTREAM_MS, (double)median / UPSTREAM_MS);
        return 0;
}
