/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vgpu-sim's .sim/state.json (SIM-14; STYLE rule 14), which the fake NVML library and
 * fake-qemu load on every call. Invariants beyond "no crash":
 *  - a rejected state gets a one-line message;
 *  - a state that parses re-serialises, and the result re-parses to the same JSON (the
 *    model's promise that sim_host_to_json() and sim_host_from_json() give back an equal model);
 *  - what parses is already canonical: its re-serialisation is the same JSON value, so the
 *    parser never accepts a value it silently changes (a truncated integer, a dropped entry);
 *  - the queries the fake library answers from a loaded state (creatable lists, mdev
 *    availability, placements) run on whatever the state held.
 */
#include <jansson.h>

#include "model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void query_model(const SimHost *h)
{
        for (size_t i = 0; i < h->n_gpus; i++) {
                const SimGpu *g = &h->gpus[i];
                for (size_t v = 0; v < g->n_vfs; v++) {
                        _cleanup_free_ char *creatable = NULL;
                        if (sim_vf_format_creatable(g, v, &creatable) < 0)
                                abort();
                }
                for (size_t t = 0; t < g->model->n_types; t++) {
                        uint32_t starts[64];
                        size_t n;
                        int r = sim_gpu_placements(g, &g->model->types[t], starts,
                                                   ELEMENTSOF(starts), &n);
                        if (g->mode == SIM_MODE_MIXED ? r < 0 || n > g->model->slots
                                                      : r != -EOPNOTSUPP)
                                abort();
                        if (g->model->mdev && g->n_vfs > 0)
                                (void)sim_mdev_available(g, 0, &g->model->types[t]);
                }
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        _cleanup_sim_host_ SimHost *h = NULL, *again = NULL;
        _cleanup_free_ char *error = NULL, *json = NULL, *json_again = NULL;

        int r = sim_host_from_json((const char *)data, size, &h, &error);
        if (r < 0) {
                if (r != -ENOMEM && (!error || !*error || strchr(error, '\n')))
                        abort();
                return 0;
        }
        query_model(h);

        if (sim_host_to_json(h, &json) < 0)
                abort();
        json_auto_t *input = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
        json_auto_t *output = json_loads(json, JSON_REJECT_DUPLICATES, NULL);
        if (!input || !output || !json_equal(input, output))
                abort();

        if (sim_host_from_json(json, strlen(json), &again, &error) < 0)
                abort();
        if (sim_host_to_json(again, &json_again) < 0 || !streq(json, json_again))
                abort();
        return 0;
}
