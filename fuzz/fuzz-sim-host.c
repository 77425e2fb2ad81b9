/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vgpu-sim's host YAML (SIM-2, SIM-20; STYLE rule 14). Invariants beyond "no crash":
 *  - a rejected file gets a one-line message;
 *  - an accepted file lays the host out as SIM-2 says: VF i of a PF at devfn 4 + i on the PF's
 *    bus, IOMMU groups and vfio numbers counting up across the host in file order, no vGPU yet;
 *  - the host written back as canonical YAML parses to the same model, so the parser keeps
 *    nothing it was given but what the model holds;
 *  - its state.json is a fixed point of sim_host_from_json() + sim_host_to_json().
 */
#include "model.h"

#include <inttypes.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_layout(const SimHost *h)
{
        uint32_t group = 0, vfio = 0;

        for (size_t i = 0; i < h->n_gpus; i++) {
                const SimGpu *g = &h->gpus[i];
                PciAddress pf;
                if (parse_pci_address(g->address, &pf) < 0 || pf.device != 0 || pf.function != 0 ||
                    g->n_vfs < 1 || g->n_vfs > g->model->max_vfs ||
                    (g->mode == SIM_MODE_MIXED && !g->model->mixed_capable))
                        abort();
                for (size_t v = 0; v < g->n_vfs; v++) {
                        const SimVf *vf = &g->vfs[v];
                        PciAddress a;
                        if (parse_pci_address(vf->address, &a) < 0 || a.domain != pf.domain ||
                            a.bus != pf.bus || a.device * 8u + a.function != 4 + v ||
                            vf->iommu_group != group++ || vf->type != 0 || vf->mdev_uuid[0])
                                abort();
                        if (g->model->mdev ? vf->vfio != -1 : vf->vfio != (int32_t)vfio++)
                                abort();
                }
        }
        if (h->next_iommu_group != group)
                abort();
}

/* The host as the shortest YAML the parser must take back. */
static char *host_to_yaml(const SimHost *h)
{
        _cleanup_free_ char *s = NULL;
        int r = strextend(&s, "driver_version: \"");
        /* A driver version is printable ASCII without spaces; only these two need escapes. */
        for (const char *c = h->driver_version; r >= 0 && *c; c++)
                r = strextend(&s, "%s%c", *c == '"' || *c == '\\' ? "\\" : "", *c);
        if (r >= 0)
                r = strextend(&s, "\"\ngpus:%s\n", h->n_gpus == 0 ? " []" : "");
        for (size_t i = 0; r >= 0 && i < h->n_gpus; i++)
                r = strextend(&s, "  - {address: \"%s\", model: %s, mode: %s, vfs: %zu}\n",
                              h->gpus[i].address, h->gpus[i].model->key,
                              sim_mode_to_string(h->gpus[i].mode), h->gpus[i].n_vfs);
        if (r < 0)
                abort();
        return TAKE_PTR(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        _cleanup_sim_host_ SimHost *h = NULL, *again = NULL, *loaded = NULL;
        _cleanup_free_ char *error = NULL, *yaml = NULL, *json = NULL, *json_again = NULL,
                            *json_loaded = NULL;

        int r = sim_host_parse_yaml((const char *)data, size, &h, &error);
        if (r < 0) {
                if (r != -ENOMEM && (!error || !*error || strchr(error, '\n')))
                        abort();
                return 0;
        }
        check_layout(h);

        yaml = host_to_yaml(h);
        if (sim_host_parse_yaml(yaml, strlen(yaml), &again, NULL) < 0)
                abort();
        if (sim_host_to_json(h, &json) < 0 || sim_host_to_json(again, &json_again) < 0 ||
            !streq(json, json_again))
                abort();

        if (sim_host_from_json(json, strlen(json), &loaded, NULL) < 0 ||
            sim_host_to_json(loaded, &json_loaded) < 0 || !streq(json, json_loaded))
                abort();
        return 0;
}
