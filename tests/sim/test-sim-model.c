/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests of the simulator's model and tree, without FUSE (SPEC §14). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "model.h"
#include "tree.h"

#include <inttypes.h>

static const char default_host[] = "driver_version: \"580.159.01\"\n"
                                   "gpus:\n"
                                   "  - {address: \"0000:e3:00.0\", model: L40S, mode: mixed, "
                                   "vfs: 32}\n"
                                   "  - {address: \"0001:c8:00.0\", model: L40S, mode: equal, "
                                   "vfs: 32}\n";

static const char a40_host[] = "driver_version: \"550.90.05\"\n"
                               "gpus:\n"
                               "  - address: \"0000:41:00.0\"\n"
                               "    model: A40-mdev\n"
                               "    vfs: 4\n";

enum { MIXED = 0, EQUAL = 1 };

static SimHost *host_from(const char *yaml)
{
        SimHost *h = NULL;
        char *error = NULL;
        int r = sim_host_parse_yaml(yaml, strlen(yaml), &h, &error);
        if (r < 0)
                fail_msg("parse host: %s", error ? error : strerror(-r));
        return h;
}

static int set_type(SimHost *h, size_t g, size_t v, uint32_t id)
{
        return sim_vf_set_type(h, g, v, id, 0);
}

static const SimType *type_named(const SimGpu *g, const char *name)
{
        for (size_t i = 0; i < g->model->n_types; i++)
                if (streq(g->model->types[i].name, name))
                        return &g->model->types[i];
        fail_msg("no type %s", name);
        return NULL;
}

/* The names a VF's creatable_vgpu_types lists, joined by spaces. */
static char *listed(const SimGpu *g, size_t v)
{
        char *s = NULL;
        for (size_t i = 0; i < g->model->n_types; i++)
                if (sim_vf_lists_type(g, v, &g->model->types[i]))
                        assert_int_equal(
                            strextend(&s, "%s%s", s ? " " : "",
                                      g->model->types[i].name + strlen("NVIDIA L40S-")),
                            0);
        return s ? s : strdup("");
}

static size_t placements(const SimGpu *g, const char *name)
{
        uint32_t starts[64];
        size_t n;
        assert_int_equal(sim_gpu_placements(g, type_named(g, name), starts, 64, &n), 0);
        return n;
}

/* ---- host file ---------------------------------------------------------------------------------
 */

static void test_host_layout(void **state)
{
        /* SIM-2, SIM-20 */
        _cleanup_sim_host_ SimHost *h = host_from(default_host);

        assert_string_equal(h->driver_version, "580.159.01");
        assert_int_equal(h->n_gpus, 2);
        assert_string_equal(h->gpus[0].address, "0000:e3:00.0");
        assert_int_equal(h->gpus[0].mode, SIM_MODE_MIXED);
        assert_int_equal(h->gpus[1].mode, SIM_MODE_EQUAL);
        assert_int_equal(h->gpus[0].n_vfs, 32);
        assert_string_equal(h->gpus[0].vfs[0].address, "0000:e3:00.4");
        assert_string_equal(h->gpus[0].vfs[3].address, "0000:e3:00.7");
        assert_string_equal(h->gpus[0].vfs[4].address, "0000:e3:01.0");
        assert_string_equal(h->gpus[0].vfs[31].address, "0000:e3:04.3");
        assert_string_equal(h->gpus[1].vfs[0].address, "0001:c8:00.4");
        /* Groups and vfio numbers count up across the host in file order. */
        assert_int_equal(h->gpus[0].vfs[0].iommu_group, 0);
        assert_int_equal(h->gpus[1].vfs[0].iommu_group, 32);
        assert_int_equal(h->gpus[1].vfs[31].vfio, 63);
        assert_int_equal(h->next_iommu_group, 64);

        size_t g, v;
        assert_int_equal(sim_host_find_vf(h, "0001:c8:00.5", &g, &v), 0);
        assert_int_equal(g, 1);
        assert_int_equal(v, 1);
        assert_int_equal(sim_host_find_vf(h, "0000:e3:00.0", &g, &v), -ENOENT);

        _cleanup_sim_host_ SimHost *a = host_from(a40_host);
        assert_int_equal(a->gpus[0].mode, SIM_MODE_EQUAL);
        assert_int_equal(a->gpus[0].vfs[0].vfio, -1);
}

static void test_host_yaml_errors(void **state)
{
        /* SIM-2: the host file is parsed strictly */
        static const struct {
                const char *yaml;
                const char *error;
        } cases[] = {
            {"driver_version: \"1\"\ngpus: []\nextra: 1\n", "3:1: unknown key \"extra\""},
            {"driver_version: \"1\"\ndriver_version: \"2\"\ngpus: []\n",
             "2:1: duplicate key \"driver_version\""},
            {"gpus: []\n", "1:1: missing key \"driver_version\""},
            {"driver_version: \"1\"\n", "1:1: missing key \"gpus\""},
            {"driver_version: \"1\"\ngpus: {}\n", "2:7: gpus must be a list"},
            {"driver_version: \"1\"\ngpus:\n  - {address: \"0000:e3:00.1\", model: L40S, vfs: "
             "4}\n",
             "3:15: invalid PF address \"0000:e3:00.1\" (want dddd:bb:00.0)"},
            {"driver_version: \"1\"\ngpus:\n  - {address: \"0000:E3:00.0\", model: L40S, vfs: "
             "4}\n",
             "3:15: invalid PF address \"0000:E3:00.0\" (want dddd:bb:00.0)"},
            {"driver_version: \"1\"\ngpus:\n  - {address: \"0000:e3:00.0\", model: H100, vfs: "
             "4}\n",
             "3:38: unknown model \"H100\" (L40S or A40-mdev)"},
            {"driver_version: \"1\"\ngpus:\n  - {address: \"0000:e3:00.0\", model: A40-mdev, "
             "mode: mixed, vfs: 4}\n",
             "3:54: model A40-mdev has no mixed-size mode"},
            {"driver_version: \"1\"\ngpus:\n  - {address: \"0000:e3:00.0\", model: L40S, mode: "
             "half, vfs: 4}\n",
             "3:50: invalid mode \"half\" (equal or mixed)"},
            {"driver_version: \"1\"\ngpus:\n  - {address: \"0000:e3:00.0\", model: L40S, vfs: "
             "33}\n",
             "3:49: vfs must be an integer between 1 and 32"},
            {"driver_version: \"1\"\ngpus:\n  - {address: \"0000:e3:00.0\", model: L40S, vfs: "
             "\"4\"}\n",
             "3:49: vfs must be an integer between 1 and 32"},
            {"driver_version: \"1\"\ngpus:\n  - {address: \"0000:e3:00.0\", model: L40S}\n",
             "3:5: missing key \"vfs\""},
            {"driver_version: \"1\"\ngpus:\n  - {address: \"0000:e3:00.0\", model: L40S, vfs: 1}\n"
             "  - {address: \"0000:e3:00.0\", model: L40S, vfs: 1}\n",
             "4:5: duplicate PF address"},
            {"driver_version: \"has space\"\ngpus: []\n",
             "1:17: invalid driver_version \"has space\""},
            {"driver_version: \"1\"\ngpus: []\n---\ndriver_version: \"2\"\n",
             "host file holds more than one document"},
            /* SIM-13, NVML-3a: the fake library's placement list versions */
            {"driver_version: \"1\"\ngpus: []\nnvml_struct_versions: 2\n",
             "3:23: nvml_struct_versions must be a list"},
            {"driver_version: \"1\"\ngpus: []\nnvml_struct_versions: [3]\n",
             "3:24: nvml_struct_versions lists 1 and 2 only"},
            {"driver_version: \"1\"\ngpus: []\nnvml_struct_versions: [\"1\"]\n",
             "3:24: nvml_struct_versions lists 1 and 2 only"},
            {"driver_version: \"1\"\ngpus: []\nnvml_struct_versions: [1, 1]\n",
             "3:27: nvml_struct_versions lists 1 twice"},
            {"[1, 2]\n", "1:1: expected a mapping"},
            {"", "empty host file"},
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                SimHost *h = NULL;
                _cleanup_free_ char *error = NULL;
                int r = sim_host_parse_yaml(cases[i].yaml, strlen(cases[i].yaml), &h, &error);
                assert_int_equal(r, -EINVAL);
                assert_null(h);
                assert_non_null(error);
                assert_string_equal(error, cases[i].error);
        }

        /* Broken YAML reports where the parser stopped. */
        _cleanup_free_ char *error = NULL;
        SimHost *h = NULL;
        assert_int_equal(sim_host_parse_yaml("a: [\n", 5, &h, &error), -EINVAL);
        assert_non_null(strstr(error, "2:1: "));
}

/* ---- catalogs ----------------------------------------------------------------------------------
 */

static void test_catalogs(void **state)
{
        /* SIM-4, SIM-5 */
        static const char *const sizes[] = {"1", "2", "3", "4", "6", "8", "12", "16", "24", "48"};
        static const uint32_t q_max[] = {32, 24, 16, 12, 8, 6, 4, 3, 2, 1};
        const SimGpuModel *l40s = sim_gpu_model_find("L40S");
        const SimGpuModel *a40 = sim_gpu_model_find("A40-mdev");
        char name[64];

        assert_non_null(l40s);
        assert_int_equal(l40s->device_id, 0x26b9);
        assert_int_equal(l40s->n_types, 22);
        assert_string_equal(sim_gpu_model_find_type(l40s, 1145)->name, "NVIDIA L40S-1B");
        assert_string_equal(sim_gpu_model_find_type(l40s, 1146)->name, "NVIDIA L40S-2B");
        for (size_t i = 0; i < ELEMENTSOF(sizes); i++) {
                const SimType *q = sim_gpu_model_find_type(l40s, (uint32_t)(1147 + i));
                const SimType *a = sim_gpu_model_find_type(l40s, (uint32_t)(1157 + i));
                snprintf(name, sizeof(name), "NVIDIA L40S-%sQ", sizes[i]);
                assert_string_equal(q->name, name);
                snprintf(name, sizeof(name), "NVIDIA L40S-%sA", sizes[i]);
                assert_string_equal(a->name, name);
                assert_int_equal(sim_type_max_instances(l40s, q), q_max[i]);
                assert_int_equal(sim_type_max_instances(l40s, a), q_max[i]);

                const SimType *m = &a40->types[i];
                snprintf(name, sizeof(name), "NVIDIA A40-%sQ", sizes[i]);
                assert_string_equal(m->name, name);
                snprintf(name, sizeof(name), "nvidia-%zu", 900 + i);
                assert_string_equal(m->mdev_type, name);
                assert_ptr_equal(sim_gpu_model_find_mdev_type(a40, name), m);
                assert_int_equal(sim_type_max_instances(a40, m), q_max[i]);
        }
        assert_null(sim_gpu_model_find_type(l40s, 1144));
        assert_null(sim_gpu_model_find_type(l40s, 1167));
        assert_int_equal(a40->device_id, 0x2235);

        const SimGpuModel *m;
        const SimType *t;
        assert_int_equal(sim_type_find_any(905, &m, &t), 0);
        assert_ptr_equal(m, a40);
        assert_int_equal(sim_type_find_any(4, &m, &t), -ENOENT);
}

/* ---- equal-size (SIM-7, SIM-8) -----------------------------------------------------------------
 */

static void test_equal_size_lists(void **state)
{
        /* SIM-7, SIM-8 */
        _cleanup_sim_host_ SimHost *h = host_from(default_host);
        SimGpu *g = &h->gpus[EQUAL];
        _cleanup_free_ char *all = listed(g, 0), *after_2q = NULL, *full = NULL, *after_48q = NULL,
                            *restored = NULL;

        assert_int_equal(strlen(all) > 0, 1);
        assert_non_null(strstr(all, "1B 2B 1Q 2Q 3Q 4Q 6Q 8Q 12Q 16Q 24Q 48Q 1A"));

        assert_int_equal(set_type(h, EQUAL, 0, 1148), 0); /* 2Q */
        after_2q = listed(g, 1);
        assert_string_equal(after_2q, "2B 2Q 2A");
        /* The configured VF itself lists nothing. */
        _cleanup_free_ char *configured = listed(g, 0);
        assert_string_equal(configured, "");
        /* Another size is refused, the same size is fine. */
        assert_int_equal(set_type(h, EQUAL, 1, 1150), -EINVAL);
        assert_int_equal(set_type(h, EQUAL, 1, 1158), 0); /* 2A */

        /* 2 GiB types reach their maximum of 24; then every free VF shows only the header. */
        for (size_t v = 2; v < 24; v++)
                assert_int_equal(set_type(h, EQUAL, v, 1146), 0);
        assert_int_equal(sim_gpu_vgpus(g), 24);
        full = listed(g, 24);
        assert_string_equal(full, "");
        assert_int_equal(set_type(h, EQUAL, 24, 1148), -ENOSPC);
        _cleanup_free_ char *text = NULL;
        assert_int_equal(sim_vf_format_creatable(g, 24, &text), 0);
        assert_string_equal(text, "ID    : vGPU Name\n");

        for (size_t v = 0; v < 24; v++)
                assert_int_equal(set_type(h, EQUAL, v, 0), 0);
        assert_int_equal(set_type(h, EQUAL, 5, 1156), 0); /* 48Q */
        after_48q = listed(g, 6);
        assert_string_equal(after_48q, "");
        assert_int_equal(set_type(h, EQUAL, 6, 1156), -ENOSPC);
        assert_int_equal(set_type(h, EQUAL, 6, 1147), -EINVAL);

        assert_int_equal(set_type(h, EQUAL, 5, 0), 0);
        restored = listed(g, 6);
        assert_string_equal(restored, all);
}

static void test_creatable_format(void **state)
{
        /* SIM-3: the driver's table, header first, type ID then name */
        _cleanup_sim_host_ SimHost *h = host_from(default_host);
        _cleanup_free_ char *text = NULL;

        assert_int_equal(set_type(h, EQUAL, 0, 1156), 0);
        assert_int_equal(set_type(h, EQUAL, 0, 0), 0);
        assert_int_equal(set_type(h, EQUAL, 0, 1147), 0); /* 1Q */
        assert_int_equal(sim_vf_format_creatable(&h->gpus[EQUAL], 1, &text), 0);
        assert_string_equal(text, "ID    : vGPU Name\n"
                                  "1145  : NVIDIA L40S-1B\n"
                                  "1147  : NVIDIA L40S-1Q\n"
                                  "1157  : NVIDIA L40S-1A\n");
}

/* ---- mixed-size (SIM-9, SIM-10, SIM-17, SIM-18) ------------------------------------------------
 */

static void test_mixed_sequence(void **state)
{
        /* SIM-17, SIM-18 */
        _cleanup_sim_host_ SimHost *h = host_from(default_host);
        SimGpu *g = &h->gpus[MIXED];
        const SimType *q4 = type_named(g, "NVIDIA L40S-4Q");
        size_t v = 0;

        for (int i = 0; i < 9; i++) {
                assert_int_equal(set_type(h, MIXED, v, 1150), 0);
                assert_int_equal(g->vfs[v++].placement, (uint32_t)i * 4);
        }
        static const struct {
                uint32_t type, slot, vgpus;
                size_t free_4q;
                bool lists_4q;
        } steps[] = {
            {1147, 36, 10, 2, true}, /* the first of two 1Q; not one of SIM-17's checks */
            {1147, 37, 11, 2, true},  {1147, 38, 12, 2, false},
            {1150, 40, 13, 1, false}, {1150, 44, 14, 0, false},
        };
        for (size_t s = 0; s < ELEMENTSOF(steps); s++) {
                /* The 4Q writes succeed although no free VF lists 4Q (SIM-18). */
                assert_int_equal(set_type(h, MIXED, v, steps[s].type), 0);
                assert_int_equal(g->vfs[v++].placement, steps[s].slot);
                assert_int_equal(sim_gpu_vgpus(g), steps[s].vgpus);
                assert_int_equal(placements(g, "NVIDIA L40S-4Q"), steps[s].free_4q);
                for (size_t free_vf = v; free_vf < g->n_vfs; free_vf++)
                        assert_int_equal(sim_vf_lists_type(g, free_vf, q4), steps[s].lists_4q);
        }
        /* Full: a 4Q has no placement left. */
        assert_int_equal(set_type(h, MIXED, v, 1150), -ENOSPC);
        /* Slot 39 is the only free one. */
        uint32_t starts[4];
        size_t n;
        assert_int_equal(sim_gpu_placements(g, type_named(g, "NVIDIA L40S-1Q"), starts, 4, &n), 0);
        assert_int_equal(n, 1);
        assert_int_equal(starts[0], 39);
}

static void test_mixed_rules(void **state)
{
        /* SIM-9 */
        _cleanup_sim_host_ SimHost *h = host_from(default_host);
        SimGpu *g = &h->gpus[MIXED];
        uint32_t starts[64];
        size_t n;

        /* Placements start at multiples of the size, lowest first. */
        assert_int_equal(sim_gpu_placements(g, type_named(g, "NVIDIA L40S-6Q"), starts, 64, &n), 0);
        assert_int_equal(n, 8);
        assert_int_equal(starts[7], 42);
        assert_int_equal(set_type(h, MIXED, 0, 1147), 0); /* 1Q at 0 */
        assert_int_equal(set_type(h, MIXED, 1, 1151), 0); /* 6Q skips 0..5: at 6 */
        assert_int_equal(g->vfs[1].placement, 6);
        assert_int_equal(set_type(h, MIXED, 2, 1147), 0); /* 1Q fills the gap: at 1 */
        assert_int_equal(g->vfs[2].placement, 1);
        /* A cap smaller than the count still reports the count. */
        assert_int_equal(sim_gpu_placements(g, type_named(g, "NVIDIA L40S-1Q"), starts, 2, &n), 0);
        assert_int_equal(n, 48 - 2 - 6);
        assert_int_equal(starts[0], 2);
        assert_int_equal(starts[1], 3);
        for (size_t v = 0; v < 3; v++)
                assert_int_equal(set_type(h, MIXED, v, 0), 0);

        /* At most 32 vGPUs, even with slots free. */
        for (size_t v = 0; v < 32; v++)
                assert_int_equal(set_type(h, MIXED, v, 1157), 0); /* 1A */
        assert_int_equal(placements(g, "NVIDIA L40S-1Q"), 0);
        _cleanup_sim_host_ SimHost *big = host_from(default_host);
        assert_int_equal(
            sim_gpu_placements(&h->gpus[EQUAL], type_named(g, "NVIDIA L40S-1Q"), starts, 64, &n),
            -EOPNOTSUPP);

        /* 48Q needs an empty card. */
        assert_int_equal(set_type(big, MIXED, 0, 1145), 0);
        assert_int_equal(set_type(big, MIXED, 1, 1156), -ENOSPC);
        assert_int_equal(set_type(big, MIXED, 0, 0), 0);
        assert_int_equal(set_type(big, MIXED, 1, 1156), 0);
        assert_int_equal(placements(&big->gpus[MIXED], "NVIDIA L40S-1B"), 0);
}

/* ---- refused writes (SIM-11) -------------------------------------------------------------------
 */

static void test_store_refusals(void **state)
{
        /* SIM-11 */
        _cleanup_sim_host_ SimHost *h = host_from(default_host);
        static const char *const invalid[] = {"",   "\n",    "abc", "12a",        "+1",
                                              " 1", "1\n\n", "-1",  "4294967296", "1150 "};

        for (size_t i = 0; i < ELEMENTSOF(invalid); i++)
                assert_int_equal(sim_vf_store_type(h, MIXED, 0, invalid[i], strlen(invalid[i]), 0),
                                 -EINVAL);
        assert_int_equal(sim_vf_store_type(h, MIXED, 0, "9999", 4, 0), -EINVAL); /* unknown */
        assert_int_equal(sim_vf_store_type(h, MIXED, 0, "0", 1, 0), 0); /* 0 on a free VF */
        assert_int_equal(sim_vf_store_type(h, MIXED, 0, "1150\n", 5, 0), 0);
        assert_int_equal(h->gpus[MIXED].vfs[0].type, 1150);
        assert_int_equal(sim_vf_store_type(h, MIXED, 0, "1150", 4, 0), 0); /* the same again */
        assert_int_equal(sim_vf_store_type(h, MIXED, 0, "1148", 4, 0), -EBUSY);

        /* 0 while the VFIO node is open, and for the release lag after the last close. */
        sim_vf_open(h, MIXED, 0);
        sim_vf_open(h, MIXED, 0);
        assert_int_equal(sim_vf_store_type(h, MIXED, 0, "0", 1, 100), -EBUSY);
        sim_vf_close(h, MIXED, 0, 100);
        assert_int_equal(sim_vf_store_type(h, MIXED, 0, "0", 1, 100), -EBUSY);
        sim_vf_close(h, MIXED, 0, 1000);
        assert_int_equal(h->gpus[MIXED].vfs[0].open_handles, 0);
        assert_int_equal(sim_host_ctl(h, "release-lag 0000:e3:00.4 500", NULL), 0);
        assert_int_equal(sim_vf_store_type(h, MIXED, 0, "0", 1, 1499), -EBUSY);
        assert_int_equal(h->gpus[MIXED].vfs[0].type, 1150);
        assert_int_equal(sim_vf_store_type(h, MIXED, 0, "0", 1, 1500), 0);
        assert_int_equal(h->gpus[MIXED].vfs[0].type, 0);
}

/* ---- mdev (SIM-5, SIM-6) -----------------------------------------------------------------------
 */

static void test_mdev(void **state)
{
        /* SIM-5, SIM-6 */
        _cleanup_sim_host_ SimHost *h = host_from(a40_host);
        SimGpu *g = &h->gpus[0];
        const SimType *q2 = sim_gpu_model_find_mdev_type(g->model, "nvidia-901");
        const SimType *q4 = sim_gpu_model_find_mdev_type(g->model, "nvidia-903");
        static const char uuid[] = "7B5C2E8A-1F3D-4C6B-9A0E-2D4F6B8C0A1E\n";
        static const char lower[] = "7b5c2e8a-1f3d-4c6b-9a0e-2d4f6b8c0a1e";
        size_t fg, fv;

        assert_int_equal(sim_mdev_available(g, 0, q2), 1);
        assert_int_equal(sim_mdev_store_create(h, 0, 0, q2, "not-a-uuid", 10, 0), -EINVAL);
        assert_int_equal(sim_mdev_store_create(h, 0, 0, q2, uuid, strlen(uuid), 0), 0);
        assert_string_equal(g->vfs[0].mdev_uuid, lower);
        assert_int_equal(g->vfs[0].type, 901);
        assert_int_equal(g->vfs[0].mdev_group, 4); /* after the VFs' groups 0..3 */
        assert_int_equal(h->layout_generation, 1);
        assert_int_equal(sim_host_find_mdev(h, lower, &fg, &fv), 0);
        assert_int_equal(fv, 0);

        /* One mdev per VF; the size class holds as in equal-size mode. */
        assert_int_equal(sim_mdev_available(g, 0, q2), 0);
        assert_int_equal(sim_mdev_available(g, 1, q2), 1);
        assert_int_equal(sim_mdev_available(g, 1, q4), 0);
        assert_int_equal(
            sim_mdev_store_create(h, 0, 0, q2, "11111111-2222-3333-4444-555555555555", 36, 0),
            -EBUSY);
        assert_int_equal(sim_mdev_store_create(h, 0, 1, q2, lower, strlen(lower), 0), -EEXIST);
        assert_int_equal(
            sim_mdev_store_create(h, 0, 1, q4, "11111111-2222-3333-4444-555555555555", 36, 0),
            -EINVAL);
        assert_int_equal(sim_vf_set_type(h, 0, 1, 901, 0), -EOPNOTSUPP);

        /* Remove: "1" only, refused while open. */
        assert_int_equal(sim_mdev_store_remove(h, 0, 0, "0", 1, 0), -EINVAL);
        sim_vf_open(h, 0, 0);
        assert_int_equal(sim_mdev_store_remove(h, 0, 0, "1", 1, 0), -EBUSY);
        sim_vf_close(h, 0, 0, 0);
        assert_int_equal(sim_mdev_store_remove(h, 0, 0, "1\n", 2, 0), 0);
        assert_int_equal(g->vfs[0].type, 0);
        assert_string_equal(g->vfs[0].mdev_uuid, "");
        assert_int_equal(h->layout_generation, 2);
        assert_int_equal(sim_mdev_store_remove(h, 0, 0, "1", 1, 0), -ENODEV);
        assert_int_equal(sim_mdev_available(g, 1, q4), 1);
}

/* ---- spans (DEV-11, PLACE-9) -------------------------------------------------------------------
 */

static void test_write_and_query_spans(void **state)
{
        /* DEV-11, PLACE-9 */
        _cleanup_sim_host_ SimHost *h = host_from(default_host);
        SimGpu *g = &h->gpus[MIXED];

        sim_vf_write_begin(h, MIXED, 0);
        sim_vf_write_begin(h, MIXED, 0);
        sim_vf_write_end(h, MIXED, 0);
        sim_vf_write_end(h, MIXED, 0);
        sim_vf_write_begin(h, MIXED, 0);
        sim_vf_write_end(h, MIXED, 0);
        assert_int_equal(g->vfs[0].max_concurrent_writes, 2);
        assert_int_equal(g->vfs[0].writes_in_flight, 0);

        /* A query alone, a query that starts during a write, a write that starts mid-query. */
        assert_int_equal(sim_gpu_query_begin(h, MIXED, "1-1"), 0);
        assert_int_equal(sim_gpu_query_begin(h, MIXED, "1-1"), -EEXIST);
        assert_int_equal(sim_gpu_query_end(h, MIXED, "1-1"), 0);
        assert_int_equal(g->query_write_overlaps, 0);
        sim_vf_write_begin(h, MIXED, 3);
        assert_int_equal(sim_gpu_query_begin(h, MIXED, "1-2"), 0);
        sim_vf_write_end(h, MIXED, 3);
        assert_int_equal(sim_gpu_query_end(h, MIXED, "1-2"), 0);
        assert_int_equal(g->query_write_overlaps, 1);
        assert_int_equal(sim_gpu_query_begin(h, MIXED, "1-3"), 0);
        sim_vf_write_begin(h, MIXED, 3);
        sim_vf_write_end(h, MIXED, 3);
        assert_int_equal(sim_gpu_query_end(h, MIXED, "1-3"), 0);
        assert_int_equal(g->query_write_overlaps, 2);
        /* A write to the other GPU does not count here. */
        assert_int_equal(sim_gpu_query_begin(h, MIXED, "1-4"), 0);
        sim_vf_write_begin(h, EQUAL, 0);
        assert_int_equal(sim_gpu_query_end(h, MIXED, "1-4"), 0);
        assert_int_equal(g->query_write_overlaps, 2);
        assert_int_equal(sim_gpu_query_end(h, MIXED, "1-4"), -ENOENT);
        assert_int_equal(sim_gpu_query_begin(h, MIXED, "has space"), -EINVAL);

        /* Abandoned queries never pile up beyond the cap. */
        char token[16];
        for (int i = 0; i < SIM_MAX_QUERIES_IN_FLIGHT + 5; i++) {
                snprintf(token, sizeof(token), "t-%d", i);
                assert_int_equal(sim_gpu_query_begin(h, MIXED, token), 0);
        }
        assert_int_equal(g->n_queries, SIM_MAX_QUERIES_IN_FLIGHT);
}

/* ---- control commands (SIM-14) -----------------------------------------------------------------
 */

static int ctl(SimHost *h, const char *command, char **error)
{
        free(*error);
        *error = NULL;
        return sim_host_ctl(h, command, error);
}

static void test_ctl_commands(void **state)
{
        /* SIM-14, SIM-15 */
        _cleanup_sim_host_ SimHost *h = host_from(default_host);
        _cleanup_free_ char *error = NULL;

        assert_int_equal(ctl(h, "wedge 0000:e3:00.6", &error), 0);
        assert_true(h->gpus[MIXED].vfs[2].wedged);
        assert_int_equal(ctl(h, "unwedge 0000:e3:00.6", &error), 0);
        assert_false(h->gpus[MIXED].vfs[2].wedged);
        assert_int_equal(ctl(h, "wedge 0000:e3:00.0", &error), -ENOENT);
        assert_string_equal(error, "unknown VF \"0000:e3:00.0\"");

        assert_int_equal(ctl(h, "mode 0001:c8:00.0 mixed", &error), 0);
        assert_int_equal(h->gpus[EQUAL].mode, SIM_MODE_MIXED);
        assert_int_equal(set_type(h, EQUAL, 0, 1150), 0);
        assert_int_equal(ctl(h, "mode 0001:c8:00.0 equal", &error), -EBUSY);
        assert_string_equal(error, "GPU 0001:c8:00.0 holds 1 vGPU(s)");
        assert_int_equal(ctl(h, "mode 0001:c8:00.0 mixed", &error), 0); /* no change */
        assert_int_equal(ctl(h, "mode 0001:c8:00.0 half", &error), -EINVAL);

        assert_int_equal(ctl(h, "nvml latency 20", &error), 0);
        assert_int_equal(h->nvml_latency_ms, 20);
        assert_int_equal(ctl(h, "nvml hang on", &error), 0);
        assert_true(h->nvml_hang);
        assert_int_equal(ctl(h, "nvml hang off", &error), 0);
        assert_false(h->nvml_hang);
        assert_int_equal(ctl(h, "nvml error nvmlDeviceGetName GPU_IS_LOST count=2", &error), 0);
        assert_int_equal(h->nvml_errors[0].code, 15);
        assert_int_equal(h->nvml_errors[0].remaining, 2);
        assert_int_equal(ctl(h, "nvml error nvmlDeviceGetName 3", &error), 0); /* replaces */
        assert_int_equal(h->n_nvml_errors, 1);
        assert_int_equal(h->nvml_errors[0].remaining, 0);
        assert_int_equal(ctl(h, "nvml consume nvmlDeviceGetName", &error), 0); /* unlimited */
        assert_int_equal(h->n_nvml_errors, 1);
        assert_int_equal(ctl(h, "nvml error nvmlDeviceGetName NVML_ERROR_TIMEOUT count=1", &error),
                         0);
        assert_int_equal(h->nvml_errors[0].code, 10);
        assert_int_equal(ctl(h, "nvml consume nvmlDeviceGetName", &error), 0);
        assert_int_equal(h->n_nvml_errors, 0);
        assert_int_equal(ctl(h, "nvml consume nvmlDeviceGetName", &error), -ENOENT);
        assert_int_equal(ctl(h, "nvml error nvmlBogus 3", &error), -EINVAL);
        assert_string_equal(error, "unknown NVML function \"nvmlBogus\"");
        assert_int_equal(ctl(h, "nvml error nvmlShutdown LOTS", &error), -EINVAL);
        assert_int_equal(ctl(h, "nvml error nvmlShutdown 3", &error), 0);
        assert_int_equal(ctl(h, "nvml error nvmlShutdown SUCCESS", &error), 0); /* clears */
        assert_int_equal(h->n_nvml_errors, 0);
        assert_int_equal(ctl(h, "nvml query-begin 0000:e3:00.0 7-1", &error), 0);
        assert_int_equal(ctl(h, "nvml query-end 0000:e3:00.0 7-1", &error), 0);
        assert_int_equal(ctl(h, "nvml query-end 0000:e3:00.0 7-1", &error), -ENOENT);
        assert_true(sim_ctl_is_internal("nvml query-end 0000:e3:00.0 7-1"));
        assert_false(sim_ctl_is_internal("nvml clear"));
        assert_int_equal(ctl(h, "nvml clear", &error), 0);
        assert_int_equal(h->nvml_latency_ms, 0);

        assert_int_equal(ctl(h, "qemu render-01 ignore-sigterm", &error), 0);
        assert_int_equal(ctl(h, "qemu render-01 exit-early:500", &error), 0);
        assert_int_equal(ctl(h, "qemu render-01 ignore-sigterm", &error), 0);
        const SimQemu *q = sim_host_find_qemu(h, "render-01");
        assert_non_null(q);
        assert_int_equal(strv_length(q->flags), 2);
        assert_int_equal(ctl(h, "qemu Render ignore-sigterm", &error), -EINVAL);
        assert_int_equal(ctl(h, "qemu render-01 fly", &error), -EINVAL);

        assert_int_equal(ctl(h, "release-lag 0000:e3:00.4 250", &error), 0);
        assert_int_equal(h->gpus[MIXED].vfs[0].release_lag_ms, 250);
        assert_int_equal(ctl(h, "release-lag 0000:e3:00.4 soon", &error), -EINVAL);

        assert_int_equal(ctl(h, "", &error), -EINVAL);
        assert_int_equal(ctl(h, "clear-faults\nwedge 0000:e3:00.4", &error), -EINVAL);
        assert_string_equal(error, "one command per write");
        assert_int_equal(ctl(h, "reboot", &error), -EINVAL);
        assert_string_equal(error, "unknown command \"reboot\"");
}

static void test_faults(void **state)
{
        /* SIM-14 */
        _cleanup_sim_host_ SimHost *h = host_from(default_host);
        _cleanup_free_ char *error = NULL;
        _cleanup_strv_free_ char **aliases = NULL;
        SimFaultAction a;
        static const char path[] = "sys/devices/pci0000:e3/0000:e3:00.4/nvidia/current_vgpu_type";

        assert_int_equal(ctl(h,
                             "fault write sys/bus/pci/devices/*/nvidia/current_vgpu_type EIO "
                             "count=2",
                             &error),
                         0);
        assert_int_equal(ctl(h, "fault read data/* delay:150", &error), 0);
        assert_int_equal(ctl(h, "fault fsync data/gpu/* hang", &error), 0);
        assert_int_equal(ctl(h, "fault write sys/* EWHAT", &error), -EINVAL);
        assert_string_equal(error, "unknown errno name \"EWHAT\"");
        assert_int_equal(ctl(h, "fault chmod sys/* EIO", &error), -EINVAL);
        assert_int_equal(ctl(h, "fault write sys/* EIO count=0", &error), -EINVAL);
        assert_int_equal(ctl(h, "fault write sys/* delay:x", &error), -EINVAL);

        /* The canonical path matches through its sys/bus/pci/devices alias, twice. */
        assert_int_equal(sim_path_aliases(path, &aliases), 0);
        assert_string_equal(aliases[0],
                            "sys/bus/pci/devices/0000:e3:00.4/nvidia/current_vgpu_type");
        assert_int_equal(sim_host_take_fault(h, SIM_FAULT_READ, path, aliases, &a), 0);
        for (int i = 0; i < 2; i++) {
                assert_int_equal(sim_host_take_fault(h, SIM_FAULT_WRITE, path, aliases, &a), 1);
                assert_int_equal(a.kind, SIM_FAULT_ERRNO);
                assert_int_equal(a.error, EIO);
        }
        assert_int_equal(sim_host_take_fault(h, SIM_FAULT_WRITE, path, aliases, &a), 0);

        /* `*` crosses `/`; unlimited faults stay. */
        for (int i = 0; i < 3; i++) {
                assert_int_equal(
                    sim_host_take_fault(h, SIM_FAULT_READ, "data/instances/x/y", NULL, &a), 1);
                assert_int_equal(a.kind, SIM_FAULT_DELAY);
                assert_int_equal(a.delay_ms, 150);
        }
        assert_int_equal(
            sim_host_take_fault(h, SIM_FAULT_FSYNC, "data/gpu/vf-health.json.tmp", NULL, &a), 1);
        assert_int_equal(a.kind, SIM_FAULT_HANG);

        uint64_t clears = h->fault_clears;
        assert_int_equal(ctl(h, "clear-faults", &error), 0);
        assert_int_equal(h->n_faults, 0);
        assert_int_equal(h->fault_clears, clears + 1);
        assert_int_equal(sim_host_take_fault(h, SIM_FAULT_READ, "data/x", NULL, &a), 0);
}

static void test_path_aliases(void **state)
{
        /* SIM-14: fault globs may name a device the way vgpud does */
        _cleanup_strv_free_ char **a = NULL, **b = NULL, **c = NULL;

        assert_int_equal(sim_path_aliases("sys/devices/pci0000:41/0000:41:00.4/"
                                          "7b5c2e8a-1f3d-4c6b-9a0e-2d4f6b8c0a1e/remove",
                                          &a),
                         0);
        assert_int_equal(strv_length(a), 3);
        assert_string_equal(a[0], "sys/bus/pci/devices/0000:41:00.4/"
                                  "7b5c2e8a-1f3d-4c6b-9a0e-2d4f6b8c0a1e/remove");
        assert_string_equal(a[1], "sys/class/mdev_bus/0000:41:00.4/"
                                  "7b5c2e8a-1f3d-4c6b-9a0e-2d4f6b8c0a1e/remove");
        assert_string_equal(a[2],
                            "sys/bus/mdev/devices/7b5c2e8a-1f3d-4c6b-9a0e-2d4f6b8c0a1e/remove");
        assert_int_equal(sim_path_aliases("sys/devices/pci0000:41/0000:41:00.4", &b), 0);
        assert_string_equal(b[0], "sys/bus/pci/devices/0000:41:00.4");
        assert_int_equal(sim_path_aliases("data/gpu/vf-health.json", &c), 0);
        assert_int_equal(strv_length(c), 0);
}

/* ---- tree --------------------------------------------------------------------------------------
 */

static char *read_node(const SimHost *h, const SimTree *t, const char *path)
{
        const SimNode *n = sim_tree_lookup(t, path);
        char *s = NULL;
        if (!n)
                fail_msg("no node %s", path);
        assert_int_equal(sim_node_read(h, n, &s), 0);
        return s;
}

static const char *link_of(const SimTree *t, const char *path)
{
        const SimNode *n = sim_tree_lookup(t, path);
        if (!n || n->kind != SIM_NODE_LINK)
                fail_msg("no link %s", path);
        return n->target;
}

static void test_tree_vendor(void **state)
{
        /* SIM-3, SIM-12 */
        _cleanup_sim_host_ SimHost *h = host_from(default_host);
        _cleanup_sim_tree_ SimTree *t = NULL;
        _cleanup_strv_free_ char **devices = NULL, **vf = NULL, **mdev_bus = NULL,
                                 **vfio_dev = NULL;

        assert_int_equal(sim_tree_build(h, &t), 0);
        assert_int_equal(sim_tree_list(t, "sys/bus/pci/devices", &devices), 0);
        assert_int_equal(strv_length(devices), 66);
        assert_int_equal(sim_tree_list(t, "sys/class/mdev_bus", &mdev_bus), 0);
        assert_int_equal(strv_length(mdev_bus), 0); /* present and empty on vendor-VFIO hosts */
        assert_string_equal(link_of(t, "sys/bus/pci/devices/0000:e3:00.4"),
                            "../../../devices/pci0000:e3/0000:e3:00.4");
        assert_string_equal(link_of(t, "sys/devices/pci0000:e3/0000:e3:00.4/physfn"),
                            "../0000:e3:00.0");
        assert_string_equal(link_of(t, "sys/devices/pci0000:e3/0000:e3:00.0/virtfn31"),
                            "../0000:e3:04.3");
        assert_string_equal(link_of(t, "sys/devices/pci0001:c8/0001:c8:00.5/iommu_group"),
                            "../../../kernel/iommu_groups/33");
        assert_string_equal(link_of(t, "sys/kernel/iommu_groups/33/devices/0001:c8:00.5"),
                            "../../../../devices/pci0001:c8/0001:c8:00.5");
        assert_string_equal(link_of(t, "sys/devices/pci0000:e3/0000:e3:00.4/driver"),
                            "../../../bus/pci/drivers/nvidia");
        assert_int_equal(
            sim_tree_list(t, "sys/devices/pci0001:c8/0001:c8:00.5/vfio-dev", &vfio_dev), 0);
        assert_int_equal(strv_length(vfio_dev), 1);
        assert_string_equal(vfio_dev[0], "vfio33");
        assert_non_null(sim_tree_lookup(t, "dev/vfio/33"));
        assert_non_null(sim_tree_lookup(t, "dev/vfio/devices/vfio33"));
        assert_null(sim_tree_lookup(t, "dev/vfio/64"));
        /* No nvidia/ on the PF, so discovery never mistakes it for a VF (DISC-4). */
        assert_null(sim_tree_lookup(t, "sys/devices/pci0000:e3/0000:e3:00.0/nvidia"));
        assert_int_equal(sim_tree_list(t, "sys/devices/pci0000:e3/0000:e3:00.4", &vf), 0);
        assert_int_equal(
            sim_tree_list(t, "sys/devices/pci0000:e3/0000:e3:00.4/vendor", &(char **){NULL}),
            -ENOTDIR);

        _cleanup_free_ char *vendor = read_node(h, t, "sys/devices/pci0000:e3/0000:e3:00.0/vendor");
        _cleanup_free_ char *device = read_node(h, t, "sys/devices/pci0000:e3/0000:e3:00.4/device");
        _cleanup_free_ char *total =
            read_node(h, t, "sys/devices/pci0000:e3/0000:e3:00.0/sriov_totalvfs");
        _cleanup_free_ char *numvfs =
            read_node(h, t, "sys/devices/pci0000:e3/0000:e3:00.0/sriov_numvfs");
        _cleanup_free_ char *version = read_node(h, t, "sys/module/nvidia/version");
        _cleanup_free_ char *current =
            read_node(h, t, "sys/devices/pci0000:e3/0000:e3:00.4/nvidia/current_vgpu_type");
        assert_string_equal(vendor, "0x10de\n");
        assert_string_equal(device, "0x26b9\n");
        assert_string_equal(total, "32\n");
        assert_string_equal(numvfs, "32\n");
        assert_string_equal(version, "580.159.01\n");
        assert_string_equal(current, "0\n");
}

static void test_tree_writes(void **state)
{
        /* SIM-11, SIM-16 */
        _cleanup_sim_host_ SimHost *h = host_from(default_host);
        _cleanup_sim_tree_ SimTree *t = NULL;
        static const char *const forbidden[] = {
            "sys/devices/pci0000:e3/0000:e3:00.0/sriov_numvfs",
            "sys/bus/pci/drivers/nvidia/unbind",
            "sys/devices/pci0000:e3/0000:e3:00.4/driver_override",
            "sys/devices/pci0000:e3/0000:e3:00.4/remove",
            "sys/devices/pci0000:e3/0000:e3:00.0/reset",
        };

        assert_int_equal(sim_tree_build(h, &t), 0);
        for (size_t i = 0; i < ELEMENTSOF(forbidden); i++) {
                const SimNode *n = sim_tree_lookup(t, forbidden[i]);
                assert_non_null(n);
                assert_true(sim_attr_writable(n->attr));
                assert_int_equal(sim_node_write(h, n, "1", 1, 0), -EPERM);
        }
        assert_int_equal(strv_length(h->forbidden_writes), ELEMENTSOF(forbidden));
        assert_string_equal(h->forbidden_writes[1], "sys/bus/pci/drivers/nvidia/unbind");

        const SimNode *cur = sim_tree_lookup(t, "sys/devices/pci0000:e3/0000:e3:00.5/nvidia/"
                                                "current_vgpu_type");
        assert_int_equal(sim_node_write(h, cur, "1150\n", 5, 0), 0);
        assert_int_equal(h->gpus[MIXED].vfs[1].type, 1150);
        size_t g, v;
        assert_int_equal(sim_node_vf(h, cur, &g, &v), 0);
        assert_int_equal(v, 1);
        const SimNode *types = sim_tree_lookup(t, "sys/devices/pci0000:e3/0000:e3:00.5/nvidia/"
                                                  "creatable_vgpu_types");
        assert_false(sim_attr_writable(types->attr));
        assert_int_equal(sim_node_write(h, types, "1", 1, 0), -EACCES);
        assert_int_equal(sim_node_vf(h, types, &g, &v), -ENOENT);
}

static void test_tree_mdev(void **state)
{
        /* SIM-5, SIM-6 */
        _cleanup_sim_host_ SimHost *h = host_from(a40_host);
        _cleanup_sim_tree_ SimTree *t = NULL, *t2 = NULL, *t3 = NULL;
        _cleanup_strv_free_ char **parents = NULL, **types = NULL, **mdevs = NULL;
        static const char uuid[] = "7b5c2e8a-1f3d-4c6b-9a0e-2d4f6b8c0a1e";
        static const char vf[] = "sys/devices/pci0000:41/0000:41:00.5";
        char path[256];

        assert_int_equal(sim_tree_build(h, &t), 0);
        assert_int_equal(sim_tree_list(t, "sys/class/mdev_bus", &parents), 0);
        assert_int_equal(strv_length(parents), 4);
        assert_string_equal(link_of(t, "sys/class/mdev_bus/0000:41:00.5"),
                            "../../devices/pci0000:41/0000:41:00.5");
        snprintf(path, sizeof(path), "%s/mdev_supported_types", vf);
        assert_int_equal(sim_tree_list(t, path, &types), 0);
        assert_int_equal(strv_length(types), 10);
        assert_string_equal(types[0], "nvidia-900");
        /* No vendor-VFIO attributes on an mdev VF, and no VF node in dev/vfio. */
        snprintf(path, sizeof(path), "%s/nvidia", vf);
        assert_null(sim_tree_lookup(t, path));
        assert_null(sim_tree_lookup(t, "dev/vfio/1"));

        snprintf(path, sizeof(path), "%s/mdev_supported_types/nvidia-903/description", vf);
        _cleanup_free_ char *description = read_node(h, t, path);
        assert_string_equal(description, "num_heads=4, frl_config=60, framebuffer=4096M, "
                                         "max_resolution=5120x2880, max_instance=12\n");
        snprintf(path, sizeof(path), "%s/mdev_supported_types/nvidia-903/name", vf);
        _cleanup_free_ char *name = read_node(h, t, path);
        assert_string_equal(name, "NVIDIA A40-4Q\n");
        snprintf(path, sizeof(path), "%s/mdev_supported_types/nvidia-903/available_instances", vf);
        _cleanup_free_ char *avail = read_node(h, t, path);
        assert_string_equal(avail, "1\n");

        snprintf(path, sizeof(path), "%s/mdev_supported_types/nvidia-903/create", vf);
        assert_int_equal(sim_node_write(h, sim_tree_lookup(t, path), uuid, strlen(uuid), 0), 0);
        assert_int_equal(sim_tree_build(h, &t2), 0);
        snprintf(path, sizeof(path), "sys/bus/mdev/devices/%s", uuid);
        assert_string_equal(link_of(t2, path), "../../../devices/pci0000:41/0000:41:00.5/"
                                               "7b5c2e8a-1f3d-4c6b-9a0e-2d4f6b8c0a1e");
        snprintf(path, sizeof(path), "%s/%s/mdev_type", vf, uuid);
        assert_string_equal(link_of(t2, path), "../mdev_supported_types/nvidia-903");
        snprintf(path, sizeof(path), "%s/%s/iommu_group", vf, uuid);
        assert_string_equal(link_of(t2, path), "../../../../kernel/iommu_groups/4");
        snprintf(path, sizeof(path), "%s/mdev_supported_types/nvidia-903/devices", vf);
        assert_int_equal(sim_tree_list(t2, path, &mdevs), 0);
        assert_int_equal(strv_length(mdevs), 1);
        const SimNode *node = sim_tree_lookup(t2, "dev/vfio/4");
        assert_non_null(node);
        size_t g, v;
        assert_int_equal(sim_node_vf(h, node, &g, &v), 0);
        assert_int_equal(v, 1);

        snprintf(path, sizeof(path), "%s/%s/remove", vf, uuid);
        SimNode remove;
        assert_int_equal(sim_node_copy(sim_tree_lookup(t2, path), &remove), 0);
        assert_int_equal(sim_node_write(h, &remove, "1", 1, 0), 0);
        /* An open handle of a removed mdev's node finds it gone. */
        assert_int_equal(sim_node_write(h, &remove, "1", 1, 0), -ENODEV);
        assert_int_equal(sim_node_vf(h, node, &g, &v), -ENODEV);
        sim_node_clear(&remove);
        assert_int_equal(sim_tree_build(h, &t3), 0);
        assert_null(sim_tree_lookup(t3, "dev/vfio/4"));
}

/* ---- mdev ages and SR-IOV cycles (SIM-6, SIM-14) ---------------------------------------------
 */

static void test_ctl_age(void **state)
{
        /* SIM-6, SIM-14: `age <uuid> <seconds>` moves an mdev's creation time back (REC-8) */
        _cleanup_sim_host_ SimHost *h = host_from(a40_host), *back = NULL;
        _cleanup_free_ char *error = NULL, *json = NULL;
        static const char uuid[] = "7b5c2e8a-1f3d-4c6b-9a0e-2d4f6b8c0a1e";
        const SimType *q2 = sim_gpu_model_find_type(h->gpus[0].model, 901);
        int64_t birth;

        assert_int_equal(sim_mdev_store_create(h, 0, 1, q2, uuid, strlen(uuid), 5000), 0);
        assert_int_equal(sim_mdev_birth_ms(h, uuid, &birth), 0);
        assert_int_equal(birth, 5000);
        uint64_t generation = h->layout_generation;

        assert_int_equal(ctl(h, "age 7b5c2e8a-1f3d-4c6b-9a0e-2d4f6b8c0a1e 2", &error), 0);
        assert_int_equal(sim_mdev_birth_ms(h, uuid, &birth), 0);
        assert_int_equal(birth, 3000);
        /* Ages add up, the UUID in any case; past the clock's origin the time is negative. */
        assert_int_equal(ctl(h, "age 7B5C2E8A-1F3D-4C6B-9A0E-2D4F6B8C0A1E 600", &error), 0);
        assert_int_equal(sim_mdev_birth_ms(h, uuid, &birth), 0);
        assert_int_equal(birth, 5000 - 602 * 1000);
        assert_int_equal(h->gpus[0].vfs[1].mdev_aged_s, 602);
        assert_int_equal(ctl(h, "age 7b5c2e8a-1f3d-4c6b-9a0e-2d4f6b8c0a1e 0", &error), 0);
        assert_int_equal(h->gpus[0].vfs[1].mdev_aged_s, 602);
        /* The tree does not change: only the time its nodes report. */
        assert_int_equal(h->layout_generation, generation);

        /* Shown in state.json, and kept through a reload. */
        assert_int_equal(sim_host_to_json(h, &json), 0);
        assert_non_null(strstr(json, "\"created_ms\": 5000,\n"));
        assert_non_null(strstr(json, "\"aged_s\": 602\n"));
        assert_int_equal(sim_host_from_json(json, strlen(json), &back, &error), 0);
        assert_int_equal(sim_mdev_birth_ms(back, uuid, &birth), 0);
        assert_int_equal(birth, 5000 - 602 * 1000);

        /* Refusals change nothing. */
        assert_int_equal(ctl(h, "age 11111111-2222-3333-4444-555555555555 60", &error), -ENOENT);
        assert_string_equal(error, "unknown mdev \"11111111-2222-3333-4444-555555555555\"");
        static const char *const malformed[] = {
            "age",
            "age 7b5c2e8a-1f3d-4c6b-9a0e-2d4f6b8c0a1e",
            "age 7b5c2e8a-1f3d-4c6b-9a0e 60",
            "age 7b5c2e8a-1f3d-4c6b-9a0e-2d4f6b8c0a1e -1",
            "age 7b5c2e8a-1f3d-4c6b-9a0e-2d4f6b8c0a1e 5m",
            "age 7b5c2e8a-1f3d-4c6b-9a0e-2d4f6b8c0a1e 315360001",
            "age 7b5c2e8a-1f3d-4c6b-9a0e-2d4f6b8c0a1e 60 60",
        };
        for (size_t i = 0; i < ELEMENTSOF(malformed); i++) {
                assert_int_equal(ctl(h, malformed[i], &error), -EINVAL);
                assert_string_equal(error, "usage: age <uuid> <seconds> (seconds at most "
                                           "315360000)");
        }
        /* The bound holds for the sum too. */
        assert_int_equal(ctl(h, "age 7b5c2e8a-1f3d-4c6b-9a0e-2d4f6b8c0a1e 315360000", &error),
                         -EINVAL);
        assert_string_equal(error, "mdev 7b5c2e8a-1f3d-4c6b-9a0e-2d4f6b8c0a1e would be aged "
                                   "315360602 s, more than 10 years");
        assert_int_equal(h->gpus[0].vfs[1].mdev_aged_s, 602);
        assert_int_equal(ctl(h, "age 7b5c2e8a-1f3d-4c6b-9a0e-2d4f6b8c0a1e 315359398", &error), 0);
        assert_int_equal(h->gpus[0].vfs[1].mdev_aged_s, SIM_AGE_MAX_S);

        /* A new mdev on the VF starts young. */
        assert_int_equal(sim_mdev_store_remove(h, 0, 1, "1", 1, 0), 0);
        assert_int_equal(sim_mdev_birth_ms(h, uuid, &birth), -ENOENT);
        assert_int_equal(ctl(h, "age 7b5c2e8a-1f3d-4c6b-9a0e-2d4f6b8c0a1e 60", &error), -ENOENT);
        assert_int_equal(sim_mdev_store_create(h, 0, 1, q2, uuid, strlen(uuid), 9000), 0);
        assert_int_equal(sim_mdev_birth_ms(h, uuid, &birth), 0);
        assert_int_equal(birth, 9000);
}

static void test_tree_mdev_times(void **state)
{
        /* SIM-6: every node of an mdev names it, so the FUSE side can show its creation time */
        _cleanup_sim_host_ SimHost *h = host_from(a40_host);
        _cleanup_sim_tree_ SimTree *t = NULL;
        static const char uuid[] = "7b5c2e8a-1f3d-4c6b-9a0e-2d4f6b8c0a1e";
        static const char *const of_mdev[] = {
            "sys/bus/mdev/devices/7b5c2e8a-1f3d-4c6b-9a0e-2d4f6b8c0a1e",
            "sys/devices/pci0000:41/0000:41:00.6/7b5c2e8a-1f3d-4c6b-9a0e-2d4f6b8c0a1e",
            "sys/devices/pci0000:41/0000:41:00.6/7b5c2e8a-1f3d-4c6b-9a0e-2d4f6b8c0a1e/mdev_type",
            "sys/devices/pci0000:41/0000:41:00.6/7b5c2e8a-1f3d-4c6b-9a0e-2d4f6b8c0a1e/remove",
            "sys/kernel/iommu_groups/4",
            "dev/vfio/4",
        };
        const SimType *q2 = sim_gpu_model_find_type(h->gpus[0].model, 901);

        assert_int_equal(sim_mdev_store_create(h, 0, 2, q2, uuid, strlen(uuid), 0), 0);
        assert_int_equal(sim_tree_build(h, &t), 0);
        for (size_t i = 0; i < ELEMENTSOF(of_mdev); i++) {
                const SimNode *n = sim_tree_lookup(t, of_mdev[i]);
                if (!n)
                        fail_msg("no node %s", of_mdev[i]);
                assert_string_equal(n->uuid, uuid);
        }
        /* The VF's own nodes are not the mdev's. */
        const SimNode *vf = sim_tree_lookup(t, "sys/devices/pci0000:41/0000:41:00.6");
        assert_non_null(vf);
        assert_string_equal(vf->uuid, "");
}

static size_t list_length(const SimTree *t, const char *dir)
{
        _cleanup_strv_free_ char **names = NULL;
        assert_int_equal(sim_tree_list(t, dir, &names), 0);
        return strv_length(names);
}

static void test_ctl_sriov(void **state)
{
        /* SIM-14: `sriov <pf> off|on`, an SR-IOV cycle as `sriov-manage -d`/`-e` make it */
        _cleanup_sim_host_ SimHost *h = host_from(default_host), *back = NULL;
        _cleanup_sim_tree_ SimTree *before = NULL, *off = NULL, *on = NULL;
        _cleanup_free_ char *error = NULL, *json = NULL, *again = NULL, *numvfs = NULL;
        static const char pf_dir[] = "sys/devices/pci0000:e3/0000:e3:00.0";
        static const char cur_path[] = "sys/devices/pci0000:e3/0000:e3:00.5/nvidia/"
                                       "current_vgpu_type";
        SimGpu *g = &h->gpus[MIXED];
        SimNode stale;
        size_t fg, fv;

        assert_int_equal(set_type(h, MIXED, 0, 1150), 0);
        assert_int_equal(set_type(h, MIXED, 1, 1147), 0);
        assert_int_equal(ctl(h, "wedge 0000:e3:00.6", &error), 0);
        assert_int_equal(ctl(h, "release-lag 0000:e3:00.6 300", &error), 0);
        sim_vf_write_begin(h, MIXED, 3);
        assert_int_equal(sim_tree_build(h, &before), 0);
        assert_int_equal(sim_node_copy(sim_tree_lookup(before, cur_path), &stale), 0);
        assert_false(sim_node_vf_gone(h, &stale));

        /* EBUSY, and no change, while a VFIO node of one VF is open. */
        sim_vf_open(h, MIXED, 1);
        uint64_t generation = h->layout_generation;
        assert_int_equal(ctl(h, "sriov 0000:e3:00.0 off", &error), -EBUSY);
        assert_string_equal(
            error, "GPU 0000:e3:00.0: a VFIO node of VF 0000:e3:00.5 is open (1 handle(s))");
        assert_int_equal(g->n_vfs, 32);
        assert_false(g->sriov_off);
        assert_int_equal(g->mode, SIM_MODE_MIXED);
        assert_int_equal(g->vfs[0].type, 1150);
        assert_int_equal(h->layout_generation, generation);
        sim_vf_close(h, MIXED, 1, 100);

        /* off: the VFs, their vGPUs and nodes go; the PF stays, in equal-size mode. */
        uint32_t next_group = h->next_iommu_group;
        assert_int_equal(ctl(h, "sriov 0000:e3:00.0 off", &error), 0);
        assert_int_equal(g->n_vfs, 0);
        assert_true(g->sriov_off);
        assert_int_equal(g->sriov_cycles, 1);
        assert_int_equal(g->mode, SIM_MODE_EQUAL);
        assert_int_equal(sim_gpu_vgpus(g), 0);
        assert_int_equal(h->layout_generation, generation + 1);
        assert_int_equal(h->next_iommu_group, next_group);
        assert_int_equal(sim_host_find_vf(h, "0000:e3:00.4", &fg, &fv), -ENOENT);
        assert_int_equal(ctl(h, "wedge 0000:e3:00.4", &error), -ENOENT);
        assert_int_equal(ctl(h, "release-lag 0000:e3:00.6 10", &error), -ENOENT);
        /* The other PF is untouched. */
        assert_int_equal(h->gpus[EQUAL].n_vfs, 32);
        assert_false(h->gpus[EQUAL].sriov_off);

        assert_int_equal(sim_tree_build(h, &off), 0);
        assert_int_equal(list_length(off, "sys/bus/pci/devices"), 34);
        assert_int_equal(list_length(off, pf_dir), 9); /* no virtfn<i> */
        assert_null(sim_tree_lookup(off, "sys/devices/pci0000:e3/0000:e3:00.0/virtfn0"));
        assert_null(sim_tree_lookup(off, "sys/devices/pci0000:e3/0000:e3:00.4"));
        assert_null(sim_tree_lookup(off, cur_path));
        assert_null(sim_tree_lookup(off, "sys/bus/pci/devices/0000:e3:04.3"));
        assert_null(sim_tree_lookup(off, "sys/bus/pci/drivers/nvidia/0000:e3:00.4"));
        assert_null(sim_tree_lookup(off, "sys/kernel/iommu_groups/0"));
        assert_null(sim_tree_lookup(off, "dev/vfio/31"));
        assert_null(sim_tree_lookup(off, "dev/vfio/devices/vfio0"));
        assert_non_null(sim_tree_lookup(off, "dev/vfio/32"));
        assert_int_equal(list_length(off, "sys/kernel/iommu_groups"), 32);
        numvfs = read_node(h, off, "sys/devices/pci0000:e3/0000:e3:00.0/sriov_numvfs");
        assert_string_equal(numvfs, "0\n");

        /* A handle opened before the cycle finds its device gone. */
        char *text = NULL;
        assert_true(sim_node_vf_gone(h, &stale));
        assert_int_equal(sim_node_read(h, &stale, &text), -ENODEV);
        assert_int_equal(sim_node_write(h, &stale, "1150", 4, 0), -ENODEV);
        assert_int_equal(sim_node_vf(h, &stale, &fg, &fv), -ENODEV);

        /* Shown in state.json: no VFs, and the count `on` brings back. */
        assert_int_equal(sim_host_to_json(h, &json), 0);
        assert_non_null(strstr(json, "\"sriov\": {\n        \"enabled\": false,\n"
                                     "        \"vfs\": 32,\n        \"cycles\": 1\n      }"));
        assert_int_equal(sim_host_from_json(json, strlen(json), &back, &error), 0);
        assert_int_equal(sim_host_to_json(back, &again), 0);
        assert_string_equal(json, again);
        assert_true(back->gpus[MIXED].sriov_off);
        assert_int_equal(back->gpus[MIXED].n_vfs, 0);
        assert_int_equal(back->gpus[EQUAL].vfs[0].iommu_group, 32);

        /* The card can be set to mixed while it has no VFs; `off` again changes nothing. */
        assert_int_equal(ctl(h, "mode 0000:e3:00.0 mixed", &error), 0);
        assert_int_equal(ctl(h, "sriov 0000:e3:00.0 off", &error), 0);
        assert_int_equal(g->sriov_cycles, 1);
        assert_int_equal(g->mode, SIM_MODE_MIXED);
        assert_int_equal(ctl(h, "mode 0000:e3:00.0 equal", &error), 0);

        /* on: the same addresses, groups and vfio numbers, unconfigured and fresh. */
        assert_int_equal(ctl(h, "sriov 0000:e3:00.0 on", &error), 0);
        assert_int_equal(g->n_vfs, 32);
        assert_false(g->sriov_off);
        assert_int_equal(g->sriov_cycles, 1);
        assert_int_equal(h->layout_generation, generation + 2);
        assert_int_equal(g->mode, SIM_MODE_EQUAL);
        for (size_t v = 0; v < g->n_vfs; v++) {
                char address[32];
                snprintf(address, sizeof(address), "0000:e3:%02x.%u", (unsigned)((4 + v) >> 3),
                         (unsigned)((4 + v) & 7));
                assert_string_equal(g->vfs[v].address, address);
                assert_int_equal(g->vfs[v].iommu_group, v);
                assert_int_equal(g->vfs[v].vfio, (int32_t)v);
                assert_int_equal(g->vfs[v].type, 0);
                assert_false(g->vfs[v].wedged);
                assert_int_equal(g->vfs[v].release_lag_ms, 0);
                assert_false(g->vfs[v].closed_once);
                assert_int_equal(g->vfs[v].writes_in_flight, 0);
                assert_int_equal(g->vfs[v].max_concurrent_writes, 0);
        }
        _cleanup_free_ char *listed_all = listed(g, 3);
        assert_non_null(strstr(listed_all, "1B 2B 1Q"));
        assert_int_equal(sim_tree_build(h, &on), 0);
        assert_int_equal(list_length(on, "sys/bus/pci/devices"), 66);
        assert_string_equal(link_of(on, "sys/devices/pci0000:e3/0000:e3:00.0/virtfn31"),
                            "../0000:e3:04.3");
        assert_non_null(sim_tree_lookup(on, "dev/vfio/devices/vfio0"));
        _cleanup_free_ char *numvfs_on =
            read_node(h, on, "sys/devices/pci0000:e3/0000:e3:00.0/sriov_numvfs");
        assert_string_equal(numvfs_on, "32\n");
        /* The old handle stays gone; a new lookup works. */
        assert_true(sim_node_vf_gone(h, &stale));
        assert_int_equal(sim_node_write(h, &stale, "1150", 4, 0), -ENODEV);
        assert_int_equal(sim_node_write(h, sim_tree_lookup(on, cur_path), "1150", 4, 0), 0);
        assert_int_equal(g->vfs[1].type, 1150);
        sim_node_clear(&stale);

        /* `on` again changes nothing; unknown PFs and bad words are refused. */
        assert_int_equal(ctl(h, "sriov 0000:e3:00.0 on", &error), 0);
        assert_int_equal(h->layout_generation, generation + 2);
        assert_int_equal(g->vfs[1].type, 1150);
        assert_int_equal(ctl(h, "sriov 0000:e3:00.4 off", &error), -ENOENT);
        assert_string_equal(error, "unknown GPU \"0000:e3:00.4\"");
        assert_int_equal(ctl(h, "sriov 0000:e3:00.0", &error), -EINVAL);
        assert_string_equal(error, "usage: sriov <pf> off|on");
        assert_int_equal(ctl(h, "sriov 0000:e3:00.0 cycle", &error), -EINVAL);
        assert_int_equal(ctl(h, "sriov 0000:e3:00.0 off now", &error), -EINVAL);
        assert_int_equal(g->n_vfs, 32);
}

static void test_ctl_sriov_mdev(void **state)
{
        /* SIM-14, SIM-6: an SR-IOV cycle takes the mdevs with the VFs */
        _cleanup_sim_host_ SimHost *h = host_from(a40_host);
        _cleanup_sim_tree_ SimTree *off = NULL, *on = NULL;
        _cleanup_free_ char *error = NULL;
        static const char uuid[] = "7b5c2e8a-1f3d-4c6b-9a0e-2d4f6b8c0a1e";
        const SimType *q2 = sim_gpu_model_find_type(h->gpus[0].model, 901);
        SimGpu *g = &h->gpus[0];
        size_t fg, fv;

        assert_int_equal(sim_mdev_store_create(h, 0, 2, q2, uuid, strlen(uuid), 0), 0);
        assert_int_equal(ctl(h, "age 7b5c2e8a-1f3d-4c6b-9a0e-2d4f6b8c0a1e 600", &error), 0);
        /* The mdev's node counts towards its VF. */
        sim_vf_open(h, 0, 2);
        assert_int_equal(ctl(h, "sriov 0000:41:00.0 off", &error), -EBUSY);
        assert_int_equal(sim_host_find_mdev(h, uuid, &fg, &fv), 0);
        sim_vf_close(h, 0, 2, 0);

        assert_int_equal(ctl(h, "sriov 0000:41:00.0 off", &error), 0);
        assert_int_equal(sim_host_find_mdev(h, uuid, &fg, &fv), -ENOENT);
        assert_int_equal(ctl(h, "age 7b5c2e8a-1f3d-4c6b-9a0e-2d4f6b8c0a1e 60", &error), -ENOENT);
        assert_int_equal(sim_tree_build(h, &off), 0);
        assert_int_equal(list_length(off, "sys/class/mdev_bus"), 0);
        assert_int_equal(list_length(off, "sys/bus/mdev/devices"), 0);
        assert_null(sim_tree_lookup(off, "dev/vfio/4"));
        assert_int_equal(list_length(off, "sys/kernel/iommu_groups"), 0);

        /* Back with no mdev; a new one gets a group never used before. */
        assert_int_equal(ctl(h, "sriov 0000:41:00.0 on", &error), 0);
        assert_int_equal(sim_tree_build(h, &on), 0);
        assert_int_equal(list_length(on, "sys/class/mdev_bus"), 4);
        assert_int_equal(list_length(on, "sys/bus/mdev/devices"), 0);
        assert_int_equal(g->vfs[2].mdev_uuid[0], 0);
        assert_int_equal(sim_mdev_available(g, 2, q2), 1);
        assert_int_equal(sim_mdev_store_create(h, 0, 2, q2, uuid, strlen(uuid), 0), 0);
        assert_int_equal(g->vfs[2].mdev_group, 5);
        assert_int_equal(g->vfs[2].mdev_aged_s, 0);
}

/* ---- state.json --------------------------------------------------------------------------------
 */

static void test_state_round_trip(void **state)
{
        /* SIM-14 */
        _cleanup_sim_host_ SimHost *h = host_from(default_host), *back = NULL;
        _cleanup_sim_host_ SimHost *a = host_from(a40_host), *a_back = NULL;
        _cleanup_free_ char *json = NULL, *again = NULL, *a_json = NULL, *a_again = NULL,
                            *error = NULL;
        static const char *const commands[] = {
            "fault write sys/*/current_vgpu_type EIO count=3",
            "fault fsync data/* hang",
            "fault read dev/* delay:25",
            "nvml latency 20",
            "nvml hang on",
            "nvml error nvmlDeviceGetName 15 count=2",
            "nvml error nvmlInit_v2 DRIVER_NOT_LOADED",
            "qemu vm-1 silent-agent",
            "qemu vm-1 hang-qmp",
            "wedge 0000:e3:00.5",
            "release-lag 0000:e3:00.6 300",
            "nvml query-begin 0000:e3:00.0 9-9",
        };

        for (size_t i = 0; i < ELEMENTSOF(commands); i++)
                assert_int_equal(sim_host_ctl(h, commands[i], NULL), 0);
        assert_int_equal(set_type(h, MIXED, 0, 1150), 0);
        assert_int_equal(set_type(h, MIXED, 1, 1147), 0);
        assert_int_equal(set_type(h, EQUAL, 3, 1152), 0);
        sim_vf_open(h, MIXED, 0);
        sim_vf_close(h, MIXED, 1, 12345);
        sim_vf_write_begin(h, MIXED, 2);
        assert_int_equal(sim_host_record_forbidden(h, "sys/bus/pci/drivers/nvidia/unbind"), 0);

        assert_int_equal(sim_host_to_json(h, &json), 0);
        assert_int_equal(sim_host_from_json(json, strlen(json), &back, &error), 0);
        assert_int_equal(sim_host_to_json(back, &again), 0);
        assert_string_equal(json, again);
        assert_true(back->gpus[MIXED].vfs[1].closed_once);
        assert_int_equal(back->gpus[MIXED].vfs[1].last_close_ms, 12345);
        assert_int_equal(back->gpus[MIXED].queries[0].overlapped, true);

        const SimType *q2 = sim_gpu_model_find_type(a->gpus[0].model, 901);
        assert_int_equal(
            sim_mdev_store_create(a, 0, 2, q2, "11111111-2222-3333-4444-555555555555", 36, 0), 0);
        assert_int_equal(sim_host_to_json(a, &a_json), 0);
        assert_int_equal(sim_host_from_json(a_json, strlen(a_json), &a_back, &error), 0);
        assert_int_equal(sim_host_to_json(a_back, &a_again), 0);
        assert_string_equal(a_json, a_again);
        assert_string_equal(a_back->gpus[0].vfs[2].mdev_uuid,
                            "11111111-2222-3333-4444-555555555555");
}

static void expect_state_error(const char *json, const char *from, const char *to,
                               const char *error_part)
{
        _cleanup_free_ char *edited = NULL, *error = NULL;
        const char *at = strstr(json, from);
        SimHost *h = NULL;

        if (!at)
                fail_msg("%s not in the state", from);
        assert_int_equal(
            strprintf(&edited, "%.*s%s%s", (int)(at - json), json, to, at + strlen(from)), 0);
        assert_int_equal(sim_host_from_json(edited, strlen(edited), &h, &error), -EINVAL);
        assert_null(h);
        if (!strstr(error, error_part))
                fail_msg("error \"%s\" lacks \"%s\"", error, error_part);
}

static void test_state_rejects(void **state)
{
        /* SIM-14: the state file is parsed strictly */
        _cleanup_sim_host_ SimHost *h = host_from(default_host);
        _cleanup_free_ char *json = NULL;

        assert_int_equal(set_type(h, MIXED, 0, 1150), 0);
        assert_int_equal(sim_host_to_json(h, &json), 0);

        expect_state_error(json, "\"version\": 1", "\"version\": 2", "unsupported version 2");
        expect_state_error(json, "\"version\": 1", "\"version\": 1, \"extra\": 0", "extra");
        expect_state_error(json, "\"version\": 1", "\"version\": 1, \"version\": 1", "duplicate");
        expect_state_error(json, "\"address\": \"0000:e3:00.5\"", "\"address\": \"0000:e3:00.9\"",
                           "does not match the layout");
        expect_state_error(json, "\"type\": 1150", "\"type\": 1146", "profile does not match");
        expect_state_error(json, "\"placement\": 0", "\"placement\": 2", "invalid placement");
        expect_state_error(json, "\"model\": \"L40S\"", "\"model\": \"A40-mdev\"", "GPU 0");
        expect_state_error(json, "\"wedged\": false", "\"wedged\": 0", "VF 0");
        expect_state_error(json, "\"latency_ms\": 0", "\"latency_ms\": -1", "nvml settings");
        expect_state_error(json, "\"forbidden_writes\": []", "\"forbidden_writes\": [1]",
                           "not a string");
        expect_state_error(json, "{", "[", "invalid simulator state");
        /* SIM-14: the SR-IOV state must agree with the VF list. */
        expect_state_error(json, "\"enabled\": true", "\"enabled\": false", "GPU 0 is invalid");
        expect_state_error(json, "\"vfs\": 32", "\"vfs\": 31", "GPU 0 is invalid");
        expect_state_error(json, "\"vfs\": 32", "\"vfs\": 0", "GPU 0 is invalid");
        expect_state_error(json, "\"cycles\": 0", "\"cycles\": -1", "GPU 0 is invalid");
        expect_state_error(json, "\"cycles\": 0", "\"cycles\": 0, \"x\": 1", "GPU 0 is invalid");

        _cleanup_sim_host_ SimHost *a = host_from(a40_host);
        _cleanup_free_ char *a_json = NULL, *off_json = NULL;
        const SimType *q2 = sim_gpu_model_find_type(a->gpus[0].model, 901);
        assert_int_equal(
            sim_mdev_store_create(a, 0, 0, q2, "11111111-2222-3333-4444-555555555555", 36, 7), 0);
        assert_int_equal(sim_host_to_json(a, &a_json), 0);
        expect_state_error(a_json, "\"aged_s\": 0", "\"aged_s\": 315360001", "invalid mdev");
        expect_state_error(a_json, "\"created_ms\": 7", "\"created_ms\": -7", "invalid mdev");
        expect_state_error(a_json, "\"created_ms\": 7,", "", "invalid mdev");

        /* Off: no VFs may be listed, and an off PF went through at least one cycle. */
        assert_int_equal(sim_host_ctl(h, "sriov 0001:c8:00.0 off", NULL), 0);
        assert_int_equal(sim_host_to_json(h, &off_json), 0);
        expect_state_error(off_json, "\"cycles\": 1", "\"cycles\": 0", "GPU 1 is invalid");
        expect_state_error(off_json, "\"vfs\": []", "\"vfs\": [{}]", "GPU 1 is invalid");
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_host_layout),
            cmocka_unit_test(test_host_yaml_errors),
            cmocka_unit_test(test_catalogs),
            cmocka_unit_test(test_equal_size_lists),
            cmocka_unit_test(test_creatable_format),
            cmocka_unit_test(test_mixed_sequence),
            cmocka_unit_test(test_mixed_rules),
            cmocka_unit_test(test_store_refusals),
            cmocka_unit_test(test_mdev),
            cmocka_unit_test(test_write_and_query_spans),
            cmocka_unit_test(test_ctl_commands),
            cmocka_unit_test(test_ctl_age),
            cmocka_unit_test(test_tree_mdev_times),
            cmocka_unit_test(test_ctl_sriov),
            cmocka_unit_test(test_ctl_sriov_mdev),
            cmocka_unit_test(test_faults),
            cmocka_unit_test(test_path_aliases),
            cmocka_unit_test(test_tree_vendor),
            cmocka_unit_test(test_tree_writes),
            cmocka_unit_test(test_tree_mdev),
            cmocka_unit_test(test_state_round_trip),
            cmocka_unit_test(test_state_rejects),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
