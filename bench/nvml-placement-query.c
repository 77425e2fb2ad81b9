/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * NVML-3a's cost: the NVML client's placement queries against the fake NVML of one driver
 * branch, on the mixed-size L40S of tests/integration/host-claim-mixed*.yaml. bench/run runs it
 * twice in one run, on the R570 host (the v2 list answers) and on the R550 one (v2 refused once,
 * then v1 for the library's lifetime), and prints the ratio as information rows.
 *
 * Two figures, each the median of 5 repetitions after one warm-up:
 *  - first: the first cache refresh of a fresh client (load, nvmlInit_v2, mode, catalog and the
 *    placements of all 22 types), the one that pays R550's refused v2 call; each repetition is
 *    a new client in this process, so the library is loaded and initialised again;
 *  - query: one claim-time query of NVIDIA L40S-4Q (PLACE-9), the mean of 20 in a row.
 *
 * Runs under tests/integration/run-with-sim.sh; argv[1] is the fake libnvidia-ml.so.1, argv[2]
 * the branch's name. Prints "<name> <first_ms> <query_ms>" on stdout; fails when NVML does not
 * answer with placements.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "nvml/nvml.h"

#define MIXED_PF "0000:e3:00.0"
#define TYPE_4Q 1150
#define RUNS 5
#define QUERIES 20
#define WAIT (60 * NSEC_PER_SEC)

typedef struct Bench {
        sd_event *event;
        NvmlClient *client;
        bool refreshed;
        bool answered;
        bool answer_ok;
} Bench;

static void on_refreshed(NvmlClient *c, void *userdata)
{
        ((Bench *)userdata)->refreshed = true;
}

static void on_answer(NvmlClient *c, const NvmlAnswer *a, void *userdata)
{
        Bench *b = userdata;
        const NvmlGpuAnswer *g = nvml_answer_find_gpu(a, MIXED_PF);
        b->answered = true;
        b->answer_ok = a->host_fallback == NVML_FALLBACK_NONE && g &&
                       g->fallback == NVML_FALLBACK_NONE &&
                       nvml_gpu_answer_find_placements(g, TYPE_4Q);
}

static int run_until(Bench *b, const bool *flag)
{
        nsec_t deadline = mono_clock_now(&mono_clock_system) + WAIT;
        while (!*flag) {
                if (mono_clock_now(&mono_clock_system) > deadline)
                        return -ETIMEDOUT;
                int r = sd_event_run(b->event, 100 * 1000);
                if (r < 0)
                        return r;
        }
        return 0;
}

static void bench_done(Bench *b)
{
        b->client = nvml_client_free(b->client);
        b->event = sd_event_unref(b->event);
}

/* A fresh client and its first refresh; *ret_ns is that refresh's wall time. */
static int bench_start(Bench *b, const char *library, nsec_t *ret_ns)
{
        *b = (Bench){};
        NvmlClientConfig cfg = {
            .library = library,
            .timeout = 30 * NSEC_PER_SEC,
            .refreshed = on_refreshed,
            .userdata = b,
        };
        char *pfs[] = {MIXED_PF};
        int r = sd_event_new(&b->event);
        if (r < 0 || (r = nvml_client_new(&cfg, &b->client)) < 0 ||
            (r = nvml_client_attach_event(b->client, b->event)) < 0 ||
            (r = nvml_client_set_gpus(b->client, pfs, 1)) < 0)
                return r;

        nsec_t t0 = mono_clock_now(&mono_clock_system);
        if ((r = nvml_client_request_refresh(b->client, true)) < 0 ||
            (r = run_until(b, &b->refreshed)) < 0)
                return r;
        *ret_ns = mono_clock_now(&mono_clock_system) - t0;
        if (nvml_client_get_gpu_fallback(b->client, MIXED_PF, NULL) != NVML_FALLBACK_NONE) {
                fprintf(stderr, "nvml-placement-query: GPU %s falls back (%s)\n", MIXED_PF,
                        nvml_fallback_to_string(
                            nvml_client_get_gpu_fallback(b->client, MIXED_PF, NULL)));
                return -EIO;
        }
        return 0;
}

/* QUERIES claim-time queries in a row; *ret_ns is their mean. */
static int bench_queries(Bench *b, nsec_t *ret_ns)
{
        nvmlVgpuTypeId_t types[] = {TYPE_4Q};
        nsec_t t0 = mono_clock_now(&mono_clock_system);

        for (int i = 0; i < QUERIES; i++) {
                NvmlGpuRequest g;
                int r = nvml_client_prepare_gpu_request(b->client, MIXED_PF, types, 1, &g);
                if (r < 0)
                        return r;
                NvmlRequest req = {.gpus = &g, .n_gpus = 1};
                b->answered = false;
                r = nvml_client_query(b->client, &req, on_answer, b);
                nvml_gpu_request_done(&g);
                if (r < 0 || (r = run_until(b, &b->answered)) < 0)
                        return r;
                if (!b->answer_ok) {
                        fprintf(stderr, "nvml-placement-query: query %d has no placements\n", i);
                        return -EIO;
                }
        }
        *ret_ns = (mono_clock_now(&mono_clock_system) - t0) / QUERIES;
        return 0;
}

static int cmp_nsec(const void *a, const void *b)
{
        nsec_t x = *(const nsec_t *)a, y = *(const nsec_t *)b;
        return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
        nsec_t first[RUNS], query[RUNS];

        if (argc != 3) {
                fprintf(stderr, "usage: %s LIBNVIDIA_ML NAME\n", argv[0]);
                return 2;
        }
        log_set_max_level(LOG_LEVEL_WARNING);
        for (int run = -1; run < RUNS; run++) {
                Bench b;
                nsec_t f = 0, q = 0;
                int r = bench_start(&b, argv[1], &f);
                if (r >= 0)
                        r = bench_queries(&b, &q);
                bench_done(&b);
                if (r < 0) {
                        fprintf(stderr, "nvml-placement-query: %s: %s\n", argv[2], strerror(-r));
                        return 1;
                }
                if (run < 0)
                        continue; /* the warm-up */
                first[run] = f;
                query[run] = q;
        }
        qsort(first, RUNS, sizeof *first, cmp_nsec);
        qsort(query, RUNS, sizeof *query, cmp_nsec);
        printf("%s %.3f %.3f\n", argv[2], (double)first[RUNS / 2] / 1e6,
               (double)query[RUNS / 2] / 1e6);
        return 0;
}
