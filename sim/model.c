/* SPDX-License-Identifier: GPL-2.0-or-later */
#include "model.h"
#include "nvml.h"

#include <ctype.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <jansson.h>
#include <yaml.h>

/* ---- catalogs -------------------------------------------------------------------------------- */

/*
 * L40S type IDs and names as the R580 driver prints them: 1145/1146 are the B series,
 * 1147..1156 the Q series and 1157..1166 the A series, each Q and A size in the same order.
 */
static const SimType l40s_types[] = {
    {1145, "NVIDIA L40S-1B", NULL, 1},   {1146, "NVIDIA L40S-2B", NULL, 2},
    {1147, "NVIDIA L40S-1Q", NULL, 1},   {1148, "NVIDIA L40S-2Q", NULL, 2},
    {1149, "NVIDIA L40S-3Q", NULL, 3},   {1150, "NVIDIA L40S-4Q", NULL, 4},
    {1151, "NVIDIA L40S-6Q", NULL, 6},   {1152, "NVIDIA L40S-8Q", NULL, 8},
    {1153, "NVIDIA L40S-12Q", NULL, 12}, {1154, "NVIDIA L40S-16Q", NULL, 16},
    {1155, "NVIDIA L40S-24Q", NULL, 24}, {1156, "NVIDIA L40S-48Q", NULL, 48},
    {1157, "NVIDIA L40S-1A", NULL, 1},   {1158, "NVIDIA L40S-2A", NULL, 2},
    {1159, "NVIDIA L40S-3A", NULL, 3},   {1160, "NVIDIA L40S-4A", NULL, 4},
    {1161, "NVIDIA L40S-6A", NULL, 6},   {1162, "NVIDIA L40S-8A", NULL, 8},
    {1163, "NVIDIA L40S-12A", NULL, 12}, {1164, "NVIDIA L40S-16A", NULL, 16},
    {1165, "NVIDIA L40S-24A", NULL, 24}, {1166, "NVIDIA L40S-48A", NULL, 48},
};

/* Synthetic mdev types (SIM-5): the directory number doubles as the type ID. */
static const SimType a40_types[] = {
    {900, "NVIDIA A40-1Q", "nvidia-900", 1},   {901, "NVIDIA A40-2Q", "nvidia-901", 2},
    {902, "NVIDIA A40-3Q", "nvidia-902", 3},   {903, "NVIDIA A40-4Q", "nvidia-903", 4},
    {904, "NVIDIA A40-6Q", "nvidia-904", 6},   {905, "NVIDIA A40-8Q", "nvidia-905", 8},
    {906, "NVIDIA A40-12Q", "nvidia-906", 12}, {907, "NVIDIA A40-16Q", "nvidia-907", 16},
    {908, "NVIDIA A40-24Q", "nvidia-908", 24}, {909, "NVIDIA A40-48Q", "nvidia-909", 48},
};

static const SimGpuModel gpu_models[] = {
    {
        .key = "L40S",
        .nvml_name = "NVIDIA L40S",
        .device_id = 0x26b9,
        .slots = 48,
        .max_vfs = 32,
        .max_vgpus = 32,
        .mdev = false,
        .mixed_capable = true,
        .types = l40s_types,
        .n_types = ELEMENTSOF(l40s_types),
    },
    {
        .key = "A40-mdev",
        .nvml_name = "NVIDIA A40",
        .device_id = 0x2235,
        .slots = 48,
        .max_vfs = 32,
        .max_vgpus = 32,
        .mdev = true,
        .mixed_capable = false,
        .types = a40_types,
        .n_types = ELEMENTSOF(a40_types),
    },
};

const SimGpuModel *sim_gpu_model_find(const char *key)
{
        for (size_t i = 0; i < ELEMENTSOF(gpu_models); i++)
                if (streq(gpu_models[i].key, key))
                        return &gpu_models[i];
        return NULL;
}

uint32_t sim_type_max_instances(const SimGpuModel *m, const SimType *t)
{
        uint32_t by_size = m->slots / t->size;
        return by_size < m->max_vgpus ? by_size : m->max_vgpus;
}

const SimType *sim_gpu_model_find_type(const SimGpuModel *m, uint32_t id)
{
        for (size_t i = 0; i < m->n_types; i++)
                if (m->types[i].id == id)
                        return &m->types[i];
        return NULL;
}

const SimType *sim_gpu_model_find_mdev_type(const SimGpuModel *m, const char *mdev_type)
{
        for (size_t i = 0; i < m->n_types; i++)
                if (m->types[i].mdev_type && streq(m->types[i].mdev_type, mdev_type))
                        return &m->types[i];
        return NULL;
}

int sim_type_find_any(uint32_t id, const SimGpuModel **ret_model, const SimType **ret)
{
        for (size_t i = 0; i < ELEMENTSOF(gpu_models); i++) {
                const SimType *t = sim_gpu_model_find_type(&gpu_models[i], id);
                if (t) {
                        *ret_model = &gpu_models[i];
                        *ret = t;
                        return 0;
                }
        }
        return -ENOENT;
}

const char *sim_mode_to_string(SimMode m)
{
        return m == SIM_MODE_MIXED ? "mixed" : "equal";
}

static int sim_mode_from_string(const char *s, SimMode *ret)
{
        if (streq(s, "equal"))
                *ret = SIM_MODE_EQUAL;
        else if (streq(s, "mixed"))
                *ret = SIM_MODE_MIXED;
        else
                return -EINVAL;
        return 0;
}

/* ---- host lifetime and layout ---------------------------------------------------------------- */

static void qemu_clear(SimQemu *q)
{
        free(q->name);
        strv_freep(&q->flags);
}

SimHost *sim_host_free(SimHost *h)
{
        if (!h)
                return NULL;
        free(h->driver_version);
        for (size_t i = 0; i < h->n_gpus; i++) {
                free(h->gpus[i].vfs);
                for (size_t q = 0; q < h->gpus[i].n_queries; q++)
                        free(h->gpus[i].queries[q].token);
                free(h->gpus[i].queries);
        }
        free(h->gpus);
        for (size_t i = 0; i < h->n_faults; i++)
                free(h->faults[i].glob);
        free(h->faults);
        for (size_t i = 0; i < h->n_nvml_errors; i++)
                free(h->nvml_errors[i].function);
        free(h->nvml_errors);
        for (size_t i = 0; i < h->n_qemu; i++)
                qemu_clear(&h->qemu[i]);
        free(h->qemu);
        strv_freep(&h->forbidden_writes);
        free(h);
        return NULL;
}

typedef struct GpuSpec {
        PciAddress address;
        const SimGpuModel *model;
        SimMode mode;
        uint32_t vfs; /* while SR-IOV is on */
        bool sriov_off;
        uint64_t sriov_cycles;
} GpuSpec;

/*
 * Lays the host out from its GPU list (SIM-2): VF i of a PF at dddd:bb:00.0 sits at devfn
 * 4 + i on the same bus; IOMMU groups and vfio numbers count up across the host in file order.
 */
static int host_build(const char *driver_version, const GpuSpec *specs, size_t n, SimHost **ret)
{
        _cleanup_sim_host_ SimHost *h = calloc(1, sizeof(SimHost));
        if (!h)
                return -ENOMEM;
        h->driver_version = strdup(driver_version);
        h->gpus = calloc(n ? n : 1, sizeof(SimGpu));
        if (!h->driver_version || !h->gpus)
                return -ENOMEM;
        h->nvml_struct_versions = SIM_NVML_R570;

        uint32_t group = 0, vfio = 0;
        for (size_t i = 0; i < n; i++) {
                SimGpu *g = &h->gpus[i];
                pci_address_format(&specs[i].address, g->address);
                g->model = specs[i].model;
                g->mode = specs[i].mode;
                g->vfs = calloc(specs[i].vfs, sizeof(SimVf));
                if (!g->vfs)
                        return -ENOMEM;
                h->n_gpus++;
                g->sriov_vfs = specs[i].vfs;
                for (uint32_t v = 0; v < specs[i].vfs; v++) {
                        SimVf *vf = &g->vfs[v];
                        PciAddress a = specs[i].address;
                        a.device = (uint8_t)((4 + v) >> 3);
                        a.function = (uint8_t)((4 + v) & 7);
                        pci_address_format(&a, vf->address);
                        vf->iommu_group = group++;
                        vf->vfio = g->model->mdev ? -1 : (int32_t)vfio++;
                        g->n_vfs++;
                }
                /* A PF cycled off keeps its place in the numbering, without VFs (SIM-14). */
                g->sriov_off = specs[i].sriov_off;
                g->sriov_cycles = specs[i].sriov_cycles;
                if (g->sriov_off)
                        g->n_vfs = 0;
        }
        h->next_iommu_group = group;
        *ret = TAKE_PTR(h);
        return 0;
}

int sim_host_find_gpu(const SimHost *h, const char *address, size_t *ret)
{
        for (size_t i = 0; i < h->n_gpus; i++)
                if (streq(h->gpus[i].address, address)) {
                        *ret = i;
                        return 0;
                }
        return -ENOENT;
}

int sim_host_find_vf(const SimHost *h, const char *address, size_t *ret_gpu, size_t *ret_vf)
{
        for (size_t i = 0; i < h->n_gpus; i++)
                for (size_t v = 0; v < h->gpus[i].n_vfs; v++)
                        if (streq(h->gpus[i].vfs[v].address, address)) {
                                *ret_gpu = i;
                                *ret_vf = v;
                                return 0;
                        }
        return -ENOENT;
}

int sim_host_find_mdev(const SimHost *h, const char *uuid, size_t *ret_gpu, size_t *ret_vf)
{
        for (size_t i = 0; i < h->n_gpus; i++)
                for (size_t v = 0; v < h->gpus[i].n_vfs; v++)
                        if (h->gpus[i].vfs[v].mdev_uuid[0] &&
                            streq(h->gpus[i].vfs[v].mdev_uuid, uuid)) {
                                *ret_gpu = i;
                                *ret_vf = v;
                                return 0;
                        }
        return -ENOENT;
}

uint32_t sim_gpu_vgpus(const SimGpu *g)
{
        uint32_t n = 0;
        for (size_t v = 0; v < g->n_vfs; v++)
                if (g->vfs[v].type != 0)
                        n++;
        return n;
}

/* ---- host YAML (SIM-2) ----------------------------------------------------------------------- */

/*
 * Sets *error to the message, escaped as a whole (ESCAPE_ECHO: its quotes are its own). Messages
 * quote values from the input, and vgpu-sim prints them as one "FILE:line:column: what" line.
 */
static int fail_escaped(char **error, const char *fmt, va_list ap) _printf_(2, 0);
static int fail_escaped(char **error, const char *fmt, va_list ap)
{
        int r = error_setv(error, -EINVAL, fmt, ap);
        if (!error || !*error)
                return r;
        char *safe = escape_text(*error, strlen(*error), SIZE_MAX, ESCAPE_ECHO | ESCAPE_UTF8);
        free(*error);
        *error = safe; /* out of memory: no message rather than an unescaped one */
        return r;
}

static void yaml_parser_deletep(yaml_parser_t *p)
{
        yaml_parser_delete(p);
}

DEFINE_TRIVIAL_CLEANUP_FUNC(yaml_document_t *, yaml_document_delete);

static int yaml_fail(char **error, const yaml_node_t *n, const char *fmt, ...) _printf_(3, 4);
static int yaml_fail(char **error, const yaml_node_t *n, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        int r = fail_escaped(error, fmt, ap);
        va_end(ap);
        return error_prefix(error, r, "%zu:%zu", n->start_mark.line + 1, n->start_mark.column + 1);
}

static const char *yaml_scalar(const yaml_node_t *n)
{
        return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

/* A "\0" escape in a quoted scalar would cut the C string short of what the file says. */
static bool yaml_scalar_has_nul(const yaml_node_t *n)
{
        return strlen((const char *)n->data.scalar.value) != n->data.scalar.length;
}

/*
 * Walks a mapping, checking every key against `keys` (unknown and repeated keys are errors),
 * and stores each value node in values[] at the key's index.
 */
static int yaml_mapping(yaml_document_t *doc, yaml_node_t *map, const char *const *keys,
                        size_t n_keys, yaml_node_t **values, char **error)
{
        if (map->type != YAML_MAPPING_NODE)
                return yaml_fail(error, map, "expected a mapping");
        for (size_t k = 0; k < n_keys; k++)
                values[k] = NULL;
        for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
             p++) {
                yaml_node_t *key = yaml_document_get_node(doc, p->key);
                const char *name = yaml_scalar(key);
                if (!name)
                        return yaml_fail(error, key, "expected a scalar key");
                if (yaml_scalar_has_nul(key))
                        return yaml_fail(error, key, "key contains a NUL byte");
                size_t k = 0;
                while (k < n_keys && !streq(keys[k], name))
                        k++;
                if (k == n_keys)
                        return yaml_fail(error, key, "unknown key \"%s\"", name);
                if (values[k])
                        return yaml_fail(error, key, "duplicate key \"%s\"", name);
                values[k] = yaml_document_get_node(doc, p->value);
        }
        return 0;
}

static int yaml_string(yaml_node_t *n, const char *what, const char **ret, char **error)
{
        const char *s = yaml_scalar(n);
        if (!s)
                return yaml_fail(error, n, "%s must be a string", what);
        if (yaml_scalar_has_nul(n))
                return yaml_fail(error, n, "%s contains a NUL byte", what);
        *ret = s;
        return 0;
}

static bool is_token(const char *s, size_t max)
{
        size_t n = strlen(s);
        if (n == 0 || n > max)
                return false;
        for (; *s; s++)
                if (*s <= ' ' || *s >= 0x7f)
                        return false;
        return true;
}

static int parse_gpu_spec(yaml_document_t *doc, yaml_node_t *node, GpuSpec *ret, char **error)
{
        static const char *const keys[] = {"address", "model", "mode", "vfs"};
        yaml_node_t *v[ELEMENTSOF(keys)];
        const char *address = NULL, *model = NULL, *mode = "equal", *vfs = NULL;
        GpuSpec spec = {};

        int r = yaml_mapping(doc, node, keys, ELEMENTSOF(keys), v, error);
        if (r < 0)
                return r;
        for (size_t k = 0; k < ELEMENTSOF(keys); k++)
                if (!v[k] && !streq(keys[k], "mode"))
                        return yaml_fail(error, node, "missing key \"%s\"", keys[k]);

        if ((r = yaml_string(v[0], "address", &address, error)) < 0 ||
            (r = yaml_string(v[1], "model", &model, error)) < 0 ||
            (v[2] && (r = yaml_string(v[2], "mode", &mode, error)) < 0) ||
            (r = yaml_string(v[3], "vfs", &vfs, error)) < 0)
                return r;

        if (parse_pci_address(address, &spec.address) < 0 || spec.address.device != 0 ||
            spec.address.function != 0)
                return yaml_fail(error, v[0], "invalid PF address \"%s\" (want dddd:bb:00.0)",
                                 address);
        spec.model = sim_gpu_model_find(model);
        if (!spec.model)
                return yaml_fail(error, v[1], "unknown model \"%s\" (L40S or A40-mdev)", model);
        if (sim_mode_from_string(mode, &spec.mode) < 0)
                return yaml_fail(error, v[2], "invalid mode \"%s\" (equal or mixed)", mode);
        if (spec.mode == SIM_MODE_MIXED && !spec.model->mixed_capable)
                return yaml_fail(error, v[2], "model %s has no mixed-size mode", model);
        uint64_t n;
        if (v[3]->data.scalar.style != YAML_PLAIN_SCALAR_STYLE ||
            parse_uint64_range(vfs, 1, spec.model->max_vfs, &n) < 0)
                return yaml_fail(error, v[3], "vfs must be an integer between 1 and %" PRIu32,
                                 spec.model->max_vfs);
        spec.vfs = (uint32_t)n;
        *ret = spec;
        return 0;
}

/*
 * `nvml_struct_versions`: the placement list versions the fake library knows (SIM-13,
 * NVML-3a), a list of distinct 1 and 2; `[]` makes a library that refuses both.
 */
static int parse_struct_versions(yaml_document_t *doc, yaml_node_t *node, unsigned *ret,
                                 char **error)
{
        unsigned mask = 0;

        if (node->type != YAML_SEQUENCE_NODE)
                return yaml_fail(error, node, "nvml_struct_versions must be a list");
        for (yaml_node_item_t *i = node->data.sequence.items.start;
             i < node->data.sequence.items.top; i++) {
                yaml_node_t *item = yaml_document_get_node(doc, *i);
                const char *s = yaml_scalar(item);
                uint64_t v;
                if (!s || item->data.scalar.style != YAML_PLAIN_SCALAR_STYLE ||
                    parse_uint64_range(s, 1, 2, &v) < 0)
                        return yaml_fail(error, item, "nvml_struct_versions lists 1 and 2 only");
                if (mask & (1u << v))
                        return yaml_fail(error, item,
                                         "nvml_struct_versions lists %" PRIu64 " twice", v);
                mask |= 1u << v;
        }
        *ret = mask;
        return 0;
}

int sim_host_parse_yaml(const char *text, size_t size, SimHost **ret, char **error)
{
        _cleanup_(yaml_parser_deletep) yaml_parser_t parser;
        yaml_document_t document;
        _cleanup_(yaml_document_deletep) yaml_document_t *doc = NULL;

        if (size > SIM_HOST_MAX_BYTES)
                return error_set(error, -EFBIG, "host file larger than %u bytes",
                                 SIM_HOST_MAX_BYTES);
        if (!yaml_parser_initialize(&parser))
                return -ENOMEM;
        yaml_parser_set_input_string(&parser, (const unsigned char *)text, size);
        if (!yaml_parser_load(&parser, &document))
                return error_set(error, -EINVAL, "%zu:%zu: %s", parser.problem_mark.line + 1,
                                 parser.problem_mark.column + 1,
                                 parser.problem ? parser.problem : "invalid YAML");
        doc = &document;

        yaml_node_t *root = yaml_document_get_root_node(doc);
        if (!root)
                return error_set(error, -EINVAL, "empty host file");

        /* A second document would be silently ignored otherwise. */
        yaml_document_t extra;
        if (!yaml_parser_load(&parser, &extra))
                return error_set(error, -EINVAL, "%zu:%zu: %s", parser.problem_mark.line + 1,
                                 parser.problem_mark.column + 1,
                                 parser.problem ? parser.problem : "invalid YAML");
        bool more = yaml_document_get_root_node(&extra) != NULL;
        yaml_document_delete(&extra);
        if (more)
                return error_set(error, -EINVAL, "host file holds more than one document");

        static const char *const keys[] = {"driver_version", "gpus", "nvml_struct_versions"};
        yaml_node_t *v[ELEMENTSOF(keys)];
        int r = yaml_mapping(doc, root, keys, ELEMENTSOF(keys), v, error);
        if (r < 0)
                return r;
        unsigned versions = SIM_NVML_R570;
        if (v[2] && (r = parse_struct_versions(doc, v[2], &versions, error)) < 0)
                return r;
        if (!v[0] || !v[1])
                return yaml_fail(error, root, "missing key \"%s\"",
                                 v[0] ? "gpus" : "driver_version");
        const char *driver_version = NULL;
        if ((r = yaml_string(v[0], "driver_version", &driver_version, error)) < 0)
                return r;
        if (!is_token(driver_version, 64))
                return yaml_fail(error, v[0], "invalid driver_version \"%s\"", driver_version);
        if (v[1]->type != YAML_SEQUENCE_NODE)
                return yaml_fail(error, v[1], "gpus must be a list");

        size_t n = (size_t)(v[1]->data.sequence.items.top - v[1]->data.sequence.items.start);
        _cleanup_free_ GpuSpec *specs = calloc(n ? n : 1, sizeof(GpuSpec));
        if (!specs)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                yaml_node_t *item = yaml_document_get_node(doc, v[1]->data.sequence.items.start[i]);
                r = parse_gpu_spec(doc, item, &specs[i], error);
                if (r < 0)
                        return r;
                for (size_t j = 0; j < i; j++)
                        if (memcmp(&specs[j].address, &specs[i].address, sizeof(PciAddress)) == 0)
                                return yaml_fail(error, item, "duplicate PF address");
        }
        _cleanup_sim_host_ SimHost *h = NULL;
        if ((r = host_build(driver_version, specs, n, &h)) < 0)
                return r;
        h->nvml_struct_versions = versions;
        *ret = TAKE_PTR(h);
        return 0;
}

/* ---- capacity rules -------------------------------------------------------------------------- */

static const SimType *vf_type(const SimGpu *g, size_t v)
{
        return g->vfs[v].type ? sim_gpu_model_find_type(g->model, g->vfs[v].type) : NULL;
}

static bool slots_free(const SimGpu *g, uint32_t start, uint32_t size)
{
        for (size_t v = 0; v < g->n_vfs; v++) {
                const SimType *t = vf_type(g, v);
                if (!t)
                        continue;
                uint32_t p = g->vfs[v].placement;
                if (p < start + size && start < p + t->size)
                        return false;
        }
        return true;
}

int sim_gpu_can_take(const SimGpu *g, const SimType *t, uint32_t *ret_placement)
{
        uint32_t n = sim_gpu_vgpus(g);

        if (g->mode == SIM_MODE_EQUAL) {
                /* The first vGPU fixes the card's size class (SIM-7). */
                for (size_t v = 0; v < g->n_vfs; v++) {
                        const SimType *held = vf_type(g, v);
                        if (held && held->size != t->size)
                                return -EINVAL;
                }
                if (n >= sim_type_max_instances(g->model, t))
                        return -ENOSPC;
                *ret_placement = 0;
                return 0;
        }

        if (n >= g->model->max_vgpus)
                return -ENOSPC;
        for (uint32_t start = 0; start + t->size <= g->model->slots; start += t->size)
                if (slots_free(g, start, t->size)) {
                        *ret_placement = start;
                        return 0;
                }
        return -ENOSPC;
}

bool sim_vf_lists_type(const SimGpu *g, size_t v, const SimType *t)
{
        uint32_t placement;

        if (g->vfs[v].type != 0)
                return false;
        if (sim_gpu_can_take(g, t, &placement) < 0)
                return false;
        /* The mixed-size quirk (SIM-10): the list still applies the equal-size maximum. */
        if (g->mode == SIM_MODE_MIXED && sim_gpu_vgpus(g) >= sim_type_max_instances(g->model, t))
                return false;
        return true;
}

int sim_vf_format_creatable(const SimGpu *g, size_t v, char **ret)
{
        _cleanup_free_ char *s = NULL;
        int r = strextend(&s, "%-6s: %s\n", "ID", "vGPU Name");
        for (size_t i = 0; r >= 0 && i < g->model->n_types; i++)
                if (sim_vf_lists_type(g, v, &g->model->types[i]))
                        r = strextend(&s, "%-6" PRIu32 ": %s\n", g->model->types[i].id,
                                      g->model->types[i].name);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(s);
        return 0;
}

int sim_gpu_placements(const SimGpu *g, const SimType *t, uint32_t *starts, size_t cap,
                       size_t *ret_n)
{
        size_t n = 0;

        if (g->mode != SIM_MODE_MIXED)
                return -EOPNOTSUPP;
        if (sim_gpu_vgpus(g) < g->model->max_vgpus)
                for (uint32_t start = 0; start + t->size <= g->model->slots; start += t->size)
                        if (slots_free(g, start, t->size)) {
                                if (n < cap)
                                        starts[n] = start;
                                n++;
                        }
        *ret_n = n;
        return 0;
}

static bool in_release_lag(const SimVf *vf, uint64_t now_ms)
{
        return vf->release_lag_ms > 0 && vf->closed_once &&
               now_ms < vf->last_close_ms + vf->release_lag_ms;
}

/* Whether the driver would still refuse to tear the vGPU down: a handle open, or lagging. */
static int vf_teardown_busy(const SimVf *vf, uint64_t now_ms)
{
        if (vf->open_handles > 0 || in_release_lag(vf, now_ms))
                return -EBUSY;
        return 0;
}

int sim_vf_set_type(SimHost *h, size_t g, size_t v, uint32_t id, uint64_t now_ms)
{
        SimGpu *gpu = &h->gpus[g];
        SimVf *vf = &gpu->vfs[v];

        if (gpu->model->mdev)
                return -EOPNOTSUPP;
        if (id == vf->type)
                return 0;
        if (id == 0) {
                int r = vf_teardown_busy(vf, now_ms);
                if (r < 0)
                        return r;
                vf->type = 0;
                vf->placement = 0;
                return 0;
        }
        const SimType *t = sim_gpu_model_find_type(gpu->model, id);
        if (!t)
                return -EINVAL;
        if (vf->type != 0)
                return -EBUSY;
        uint32_t placement;
        int r = sim_gpu_can_take(gpu, t, &placement);
        if (r < 0)
                return r;
        vf->type = id;
        vf->placement = placement;
        return 0;
}

/* Copies a sysfs store into a string, dropping the one trailing newline the kernel allows. */
static int store_text(const char *buf, size_t size, char *out, size_t out_size)
{
        if (size > 0 && buf[size - 1] == '\n')
                size--;
        if (size == 0 || size >= out_size || memchr(buf, 0, size))
                return -EINVAL;
        memcpy(out, buf, size);
        out[size] = 0;
        return 0;
}

int sim_vf_store_type(SimHost *h, size_t g, size_t v, const char *buf, size_t size, uint64_t now_ms)
{
        char text[16];
        uint32_t id;

        if (store_text(buf, size, text, sizeof(text)) < 0 || parse_uint32(text, &id) < 0)
                return -EINVAL;
        return sim_vf_set_type(h, g, v, id, now_ms);
}

uint32_t sim_mdev_available(const SimGpu *g, size_t v, const SimType *t)
{
        uint32_t placement;
        return g->vfs[v].type == 0 && sim_gpu_can_take(g, t, &placement) >= 0 ? 1 : 0;
}

static int parse_uuid(const char *s, char ret[static SIM_UUID_STRLEN])
{
        char out[SIM_UUID_STRLEN];

        if (strlen(s) != SIM_UUID_STRLEN - 1)
                return -EINVAL;
        for (size_t i = 0; i < SIM_UUID_STRLEN - 1; i++) {
                bool dash = i == 8 || i == 13 || i == 18 || i == 23;
                if (dash ? s[i] != '-' : !isxdigit((unsigned char)s[i]))
                        return -EINVAL;
                out[i] = (char)tolower((unsigned char)s[i]);
        }
        out[SIM_UUID_STRLEN - 1] = 0;
        memcpy(ret, out, SIM_UUID_STRLEN);
        return 0;
}

int sim_mdev_store_create(SimHost *h, size_t g, size_t v, const SimType *t, const char *buf,
                          size_t size, uint64_t now_ms)
{
        SimGpu *gpu = &h->gpus[g];
        SimVf *vf = &gpu->vfs[v];
        char text[SIM_UUID_STRLEN + 1], uuid[SIM_UUID_STRLEN];
        size_t dg, dv;

        if (!gpu->model->mdev)
                return -EOPNOTSUPP;
        if (store_text(buf, size, text, sizeof(text)) < 0 || parse_uuid(text, uuid) < 0)
                return -EINVAL;
        if (sim_host_find_mdev(h, uuid, &dg, &dv) >= 0)
                return -EEXIST;
        if (vf->type != 0)
                return -EBUSY;
        uint32_t placement;
        int r = sim_gpu_can_take(gpu, t, &placement);
        if (r < 0)
                return r;
        vf->type = t->id;
        vf->placement = placement;
        memcpy(vf->mdev_uuid, uuid, SIM_UUID_STRLEN);
        vf->mdev_group = h->next_iommu_group++;
        vf->mdev_created_ms = now_ms;
        vf->mdev_aged_s = 0;
        h->layout_generation++;
        return 0;
}

int sim_mdev_store_remove(SimHost *h, size_t g, size_t v, const char *buf, size_t size,
                          uint64_t now_ms)
{
        SimVf *vf = &h->gpus[g].vfs[v];
        char text[4];

        if (store_text(buf, size, text, sizeof(text)) < 0 || !streq(text, "1"))
                return -EINVAL;
        if (!vf->mdev_uuid[0])
                return -ENODEV;
        int r = vf_teardown_busy(vf, now_ms);
        if (r < 0)
                return r;
        vf->type = 0;
        vf->placement = 0;
        vf->mdev_uuid[0] = 0;
        vf->mdev_group = 0;
        vf->mdev_created_ms = 0;
        vf->mdev_aged_s = 0;
        h->layout_generation++;
        return 0;
}

int sim_mdev_birth_ms(const SimHost *h, const char *uuid, int64_t *ret)
{
        size_t g, v;

        if (sim_host_find_mdev(h, uuid, &g, &v) < 0)
                return -ENOENT;
        const SimVf *vf = &h->gpus[g].vfs[v];
        /* Both are bounded (INT64_MAX and SIM_AGE_MAX_S), so neither the product nor the
         * difference overflows. */
        *ret = (int64_t)vf->mdev_created_ms - (int64_t)(vf->mdev_aged_s * 1000);
        return 0;
}

/* ---- handles and spans ----------------------------------------------------------------------- */

void sim_vf_open(SimHost *h, size_t g, size_t v)
{
        h->gpus[g].vfs[v].open_handles++;
}

void sim_vf_close(SimHost *h, size_t g, size_t v, uint64_t now_ms)
{
        SimVf *vf = &h->gpus[g].vfs[v];
        if (vf->open_handles > 0)
                vf->open_handles--;
        vf->closed_once = true;
        vf->last_close_ms = now_ms;
}

void sim_vf_write_begin(SimHost *h, size_t g, size_t v)
{
        SimGpu *gpu = &h->gpus[g];
        SimVf *vf = &gpu->vfs[v];

        vf->writes_in_flight++;
        if (vf->writes_in_flight > vf->max_concurrent_writes)
                vf->max_concurrent_writes = vf->writes_in_flight;
        for (size_t q = 0; q < gpu->n_queries; q++)
                gpu->queries[q].overlapped = true;
}

void sim_vf_write_end(SimHost *h, size_t g, size_t v)
{
        SimVf *vf = &h->gpus[g].vfs[v];
        if (vf->writes_in_flight > 0)
                vf->writes_in_flight--;
}

static bool gpu_writing(const SimGpu *g)
{
        for (size_t v = 0; v < g->n_vfs; v++)
                if (g->vfs[v].writes_in_flight > 0)
                        return true;
        return false;
}

static void gpu_drop_query(SimGpu *g, size_t q)
{
        free(g->queries[q].token);
        memmove(&g->queries[q], &g->queries[q + 1], (g->n_queries - q - 1) * sizeof(SimQuery));
        g->n_queries--;
}

static ssize_t gpu_find_query(const SimGpu *g, const char *token)
{
        for (size_t q = 0; q < g->n_queries; q++)
                if (streq(g->queries[q].token, token))
                        return (ssize_t)q;
        return -1;
}

int sim_gpu_query_begin(SimHost *h, size_t g, const char *token)
{
        SimGpu *gpu = &h->gpus[g];

        if (!is_token(token, 64))
                return -EINVAL;
        if (gpu_find_query(gpu, token) >= 0)
                return -EEXIST;
        /* A client killed mid-query never ends it; the oldest such entry makes room. */
        if (gpu->n_queries >= SIM_MAX_QUERIES_IN_FLIGHT)
                gpu_drop_query(gpu, 0);
        SimQuery *grown = realloc(gpu->queries, (gpu->n_queries + 1) * sizeof(SimQuery));
        if (!grown)
                return -ENOMEM;
        gpu->queries = grown;
        char *copy = strdup(token);
        if (!copy)
                return -ENOMEM;
        gpu->queries[gpu->n_queries++] = (SimQuery){.token = copy, .overlapped = gpu_writing(gpu)};
        return 0;
}

int sim_gpu_query_end(SimHost *h, size_t g, const char *token)
{
        SimGpu *gpu = &h->gpus[g];
        ssize_t q = gpu_find_query(gpu, token);
        if (q < 0)
                return -ENOENT;
        if (gpu->queries[q].overlapped)
                gpu->query_write_overlaps++;
        gpu_drop_query(gpu, (size_t)q);
        return 0;
}

/* ---- faults, forbidden writes, qemu flags ---------------------------------------------------- */

static const char *const fault_op_names[_SIM_FAULT_OP_MAX] = {
    [SIM_FAULT_READ] = "read",   [SIM_FAULT_WRITE] = "write",   [SIM_FAULT_OPEN] = "open",
    [SIM_FAULT_FSYNC] = "fsync", [SIM_FAULT_RENAME] = "rename",
};

static int fault_op_from_string(const char *s, SimFaultOp *ret)
{
        for (size_t i = 0; i < _SIM_FAULT_OP_MAX; i++)
                if (streq(fault_op_names[i], s)) {
                        *ret = (SimFaultOp)i;
                        return 0;
                }
        return -EINVAL;
}

static void fault_remove(SimHost *h, size_t i)
{
        free(h->faults[i].glob);
        memmove(&h->faults[i], &h->faults[i + 1], (h->n_faults - i - 1) * sizeof(SimFault));
        h->n_faults--;
}

int sim_host_take_fault(SimHost *h, SimFaultOp op, const char *path, char *const *aliases,
                        SimFaultAction *ret)
{
        for (size_t i = 0; i < h->n_faults; i++) {
                SimFault *f = &h->faults[i];
                if (f->op != op)
                        continue;
                bool match = fnmatch(f->glob, path, 0) == 0;
                for (size_t a = 0; !match && aliases && aliases[a]; a++)
                        match = fnmatch(f->glob, aliases[a], 0) == 0;
                if (!match)
                        continue;
                *ret =
                    (SimFaultAction){.kind = f->kind, .error = f->error, .delay_ms = f->delay_ms};
                if (f->remaining > 0 && --f->remaining == 0)
                        fault_remove(h, i);
                return 1;
        }
        return 0;
}

int sim_host_record_forbidden(SimHost *h, const char *path)
{
        return strv_push(&h->forbidden_writes, path);
}

const SimQemu *sim_host_find_qemu(const SimHost *h, const char *name)
{
        for (size_t i = 0; i < h->n_qemu; i++)
                if (streq(h->qemu[i].name, name))
                        return &h->qemu[i];
        return NULL;
}

/* ---- names of errnos and NVML codes ---------------------------------------------------------- */

static const struct {
        const char *name;
        int error;
} errno_names[] = {
    {"EPERM", EPERM},   {"ENOENT", ENOENT},         {"EINTR", EINTR},     {"EIO", EIO},
    {"ENXIO", ENXIO},   {"EAGAIN", EAGAIN},         {"ENOMEM", ENOMEM},   {"EACCES", EACCES},
    {"EBUSY", EBUSY},   {"EEXIST", EEXIST},         {"ENODEV", ENODEV},   {"ENOTDIR", ENOTDIR},
    {"EISDIR", EISDIR}, {"EINVAL", EINVAL},         {"EFBIG", EFBIG},     {"ENOSPC", ENOSPC},
    {"EROFS", EROFS},   {"ETIMEDOUT", ETIMEDOUT},   {"EDQUOT", EDQUOT},   {"ENOTCONN", ENOTCONN},
    {"ESTALE", ESTALE}, {"EOPNOTSUPP", EOPNOTSUPP}, {"ENOTSUP", ENOTSUP}, {"EMFILE", EMFILE},
};

int sim_errno_from_string(const char *s, int *ret)
{
        for (size_t i = 0; i < ELEMENTSOF(errno_names); i++)
                if (streq(errno_names[i].name, s)) {
                        *ret = errno_names[i].error;
                        return 0;
                }
        return -EINVAL;
}

const char *sim_errno_to_string(int error)
{
        for (size_t i = 0; i < ELEMENTSOF(errno_names); i++)
                if (errno_names[i].error == error)
                        return errno_names[i].name;
        return NULL;
}

static const struct {
        const char *name;
        int code;
} nvml_code_names[] = {
    {"SUCCESS", NVML_SUCCESS},
    {"UNINITIALIZED", NVML_ERROR_UNINITIALIZED},
    {"INVALID_ARGUMENT", NVML_ERROR_INVALID_ARGUMENT},
    {"NOT_SUPPORTED", NVML_ERROR_NOT_SUPPORTED},
    {"NO_PERMISSION", NVML_ERROR_NO_PERMISSION},
    {"NOT_FOUND", NVML_ERROR_NOT_FOUND},
    {"INSUFFICIENT_SIZE", NVML_ERROR_INSUFFICIENT_SIZE},
    {"DRIVER_NOT_LOADED", NVML_ERROR_DRIVER_NOT_LOADED},
    {"TIMEOUT", NVML_ERROR_TIMEOUT},
    {"LIBRARY_NOT_FOUND", NVML_ERROR_LIBRARY_NOT_FOUND},
    {"FUNCTION_NOT_FOUND", NVML_ERROR_FUNCTION_NOT_FOUND},
    {"GPU_IS_LOST", NVML_ERROR_GPU_IS_LOST},
    {"LIB_RM_VERSION_MISMATCH", NVML_ERROR_LIB_RM_VERSION_MISMATCH},
    {"IN_USE", NVML_ERROR_IN_USE},
    {"ARGUMENT_VERSION_MISMATCH", NVML_ERROR_ARGUMENT_VERSION_MISMATCH},
    {"GPU_NOT_FOUND", NVML_ERROR_GPU_NOT_FOUND},
    {"UNKNOWN", NVML_ERROR_UNKNOWN},
};

int sim_nvml_code_from_string(const char *s, int *ret)
{
        uint64_t v;

        if (parse_uint64_range(s, 0, 999, &v) >= 0) {
                *ret = (int)v;
                return 0;
        }
        const char *bare = startswith(s, "NVML_ERROR_");
        if (!bare)
                bare = startswith(s, "NVML_") ? s + 5 : s;
        for (size_t i = 0; i < ELEMENTSOF(nvml_code_names); i++)
                if (streq(nvml_code_names[i].name, bare)) {
                        *ret = nvml_code_names[i].code;
                        return 0;
                }
        return -EINVAL;
}

const char *sim_nvml_code_to_string(int code)
{
        for (size_t i = 0; i < ELEMENTSOF(nvml_code_names); i++)
                if (nvml_code_names[i].code == code)
                        return nvml_code_names[i].name;
        return NULL;
}

static const char *const nvml_functions[] = {
    "nvmlInit_v2",
    "nvmlShutdown",
    "nvmlSystemGetDriverVersion",
    "nvmlDeviceGetHandleByPciBusId_v2",
    "nvmlDeviceGetName",
    "nvmlDeviceGetVgpuHeterogeneousMode",
    "nvmlDeviceGetSupportedVgpus",
    "nvmlVgpuTypeGetName",
    "nvmlVgpuTypeGetFramebufferSize",
    "nvmlVgpuTypeGetMaxInstances",
    "nvmlDeviceGetVgpuTypeCreatablePlacements",
};

bool sim_nvml_function_is_known(const char *name)
{
        for (size_t i = 0; i < ELEMENTSOF(nvml_functions); i++)
                if (streq(nvml_functions[i], name))
                        return true;
        return false;
}

/* ---- control commands (SIM-14) --------------------------------------------------------------- */

#define CTL_MAX_WORDS 8

static int ctl_usage(char **error, const char *usage)
{
        return error_set(error, -EINVAL, "usage: %s", usage);
}

/* Parses "count=<n>" (n >= 1) from an optional trailing word; 0 means unlimited. */
static int ctl_count(const char *word, uint64_t *ret)
{
        const char *v;
        uint64_t n = 0;

        if (word) {
                v = startswith(word, "count=");
                if (!v || parse_uint64_range(v, 1, UINT32_MAX, &n) < 0)
                        return -EINVAL;
        }
        *ret = n;
        return 0;
}

static int ctl_ms(const char *s, uint64_t *ret)
{
        /* An hour bounds every delay, so a typo cannot wedge a test run for days. */
        return parse_uint64_range(s, 0, 3600000, ret);
}

static int ctl_vf(const SimHost *h, const char *address, size_t *ret_gpu, size_t *ret_vf,
                  char **error)
{
        if (sim_host_find_vf(h, address, ret_gpu, ret_vf) < 0)
                return error_set(error, -ENOENT, "unknown VF \"%s\"", address);
        return 0;
}

static int ctl_gpu(const SimHost *h, const char *address, size_t *ret, char **error)
{
        if (sim_host_find_gpu(h, address, ret) < 0)
                return error_set(error, -ENOENT, "unknown GPU \"%s\"", address);
        return 0;
}

static int ctl_fault(SimHost *h, char **w, size_t n, char **error)
{
        static const char usage[] = "fault <read|write|open|fsync|rename> <path-glob> "
                                    "<errno-name|delay:<ms>|hang> [count=<n>]";
        SimFault f = {};
        const char *delay;

        if (n < 4 || n > 5 || fault_op_from_string(w[1], &f.op) < 0 || !is_token(w[2], 4096) ||
            ctl_count(n == 5 ? w[4] : NULL, &f.remaining) < 0)
                return ctl_usage(error, usage);
        if (streq(w[3], "hang"))
                f.kind = SIM_FAULT_HANG;
        else if ((delay = startswith(w[3], "delay:"))) {
                f.kind = SIM_FAULT_DELAY;
                if (ctl_ms(delay, &f.delay_ms) < 0)
                        return ctl_usage(error, usage);
        } else if (sim_errno_from_string(w[3], &f.error) >= 0)
                f.kind = SIM_FAULT_ERRNO;
        else
                return error_set(error, -EINVAL, "unknown errno name \"%s\"", w[3]);

        SimFault *grown = realloc(h->faults, (h->n_faults + 1) * sizeof(SimFault));
        if (!grown)
                return -ENOMEM;
        h->faults = grown;
        f.glob = strdup(w[2]);
        if (!f.glob)
                return -ENOMEM;
        h->faults[h->n_faults++] = f;
        return 0;
}

static void clear_faults(SimHost *h)
{
        while (h->n_faults > 0)
                fault_remove(h, h->n_faults - 1);
        h->fault_clears++;
}

static ssize_t nvml_find_error(const SimHost *h, const char *function)
{
        for (size_t i = 0; i < h->n_nvml_errors; i++)
                if (streq(h->nvml_errors[i].function, function))
                        return (ssize_t)i;
        return -1;
}

static void nvml_drop_error(SimHost *h, size_t i)
{
        free(h->nvml_errors[i].function);
        memmove(&h->nvml_errors[i], &h->nvml_errors[i + 1],
                (h->n_nvml_errors - i - 1) * sizeof(SimNvmlError));
        h->n_nvml_errors--;
}

static int ctl_nvml_error(SimHost *h, char **w, size_t n, char **error)
{
        static const char usage[] = "nvml error <function> <code> [count=<n>]";
        int code;
        uint64_t count;

        if (n < 4 || n > 5 || ctl_count(n == 5 ? w[4] : NULL, &count) < 0)
                return ctl_usage(error, usage);
        if (!sim_nvml_function_is_known(w[2]))
                return error_set(error, -EINVAL, "unknown NVML function \"%s\"", w[2]);
        if (sim_nvml_code_from_string(w[3], &code) < 0)
                return error_set(error, -EINVAL, "invalid NVML code \"%s\"", w[3]);

        ssize_t i = nvml_find_error(h, w[2]);
        if (i >= 0)
                nvml_drop_error(h, (size_t)i);
        if (code == NVML_SUCCESS)
                return 0;
        SimNvmlError *grown =
            realloc(h->nvml_errors, (h->n_nvml_errors + 1) * sizeof(SimNvmlError));
        if (!grown)
                return -ENOMEM;
        h->nvml_errors = grown;
        char *copy = strdup(w[2]);
        if (!copy)
                return -ENOMEM;
        h->nvml_errors[h->n_nvml_errors++] =
            (SimNvmlError){.function = copy, .code = code, .remaining = count};
        return 0;
}

static int ctl_nvml(SimHost *h, char **w, size_t n, char **error)
{
        static const char usage[] = "nvml latency <ms> | nvml hang on|off | nvml error <function> "
                                    "<code> [count=<n>] | nvml clear";
        size_t g;
        int r;

        if (n < 2)
                return ctl_usage(error, usage);
        if (streq(w[1], "latency")) {
                uint64_t ms;
                if (n != 3 || ctl_ms(w[2], &ms) < 0)
                        return ctl_usage(error, "nvml latency <ms>");
                h->nvml_latency_ms = ms;
                return 0;
        }
        if (streq(w[1], "hang")) {
                if (n != 3 || (!streq(w[2], "on") && !streq(w[2], "off")))
                        return ctl_usage(error, "nvml hang on|off");
                h->nvml_hang = streq(w[2], "on");
                return 0;
        }
        if (streq(w[1], "error"))
                return ctl_nvml_error(h, w, n, error);
        if (streq(w[1], "clear") && n == 2) {
                h->nvml_latency_ms = 0;
                h->nvml_hang = false;
                while (h->n_nvml_errors > 0)
                        nvml_drop_error(h, h->n_nvml_errors - 1);
                return 0;
        }
        /* The fake library's own calls: one use of a counted error, and query spans. */
        if (streq(w[1], "consume") && n == 3) {
                ssize_t i = nvml_find_error(h, w[2]);
                if (i < 0)
                        return error_set(error, -ENOENT, "no NVML error set for %s", w[2]);
                SimNvmlError *e = &h->nvml_errors[i];
                if (e->remaining > 0 && --e->remaining == 0)
                        nvml_drop_error(h, (size_t)i);
                return 0;
        }
        if ((streq(w[1], "query-begin") || streq(w[1], "query-end")) && n == 4) {
                if ((r = ctl_gpu(h, w[2], &g, error)) < 0)
                        return r;
                r = streq(w[1], "query-begin") ? sim_gpu_query_begin(h, g, w[3])
                                               : sim_gpu_query_end(h, g, w[3]);
                if (r < 0)
                        return error_set(error, r, "%s %s: invalid or unknown token \"%s\"", w[1],
                                         w[2], w[3]);
                return 0;
        }
        return ctl_usage(error, usage);
}

static bool qemu_name_is_valid(const char *s)
{
        size_t n = strlen(s);
        if (n == 0 || n > 63)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!(islower((unsigned char)s[i]) || isdigit((unsigned char)s[i]) ||
                      (s[i] == '-' && i > 0 && i < n - 1)))
                        return false;
        return true;
}

static bool qemu_flag_is_valid(const char *s)
{
        uint64_t ms;
        const char *v = startswith(s, "exit-early:");
        if (v)
                return ctl_ms(v, &ms) >= 0;
        return streq(s, "ignore-sigterm") || streq(s, "hang-qmp") || streq(s, "silent-agent") ||
               streq(s, "hold-devices");
}

static int ctl_qemu(SimHost *h, char **w, size_t n, char **error)
{
        if (n != 3 || !qemu_name_is_valid(w[1]) || !qemu_flag_is_valid(w[2]))
                return ctl_usage(error, "qemu <name> ignore-sigterm|hang-qmp|exit-early:<ms>|"
                                        "silent-agent|hold-devices");
        SimQemu *q = (SimQemu *)sim_host_find_qemu(h, w[1]);
        if (!q) {
                SimQemu *grown = realloc(h->qemu, (h->n_qemu + 1) * sizeof(SimQemu));
                if (!grown)
                        return -ENOMEM;
                h->qemu = grown;
                char *name = strdup(w[1]);
                if (!name)
                        return -ENOMEM;
                q = &h->qemu[h->n_qemu++];
                *q = (SimQemu){.name = name};
        }
        for (char **f = q->flags; f && *f; f++)
                if (streq(*f, w[2]))
                        return 0;
        return strv_push(&q->flags, w[2]);
}

/* `age <uuid> <seconds>` (SIM-6): moves the mdev's creation time back, for REC-8's rule. */
static int ctl_age(SimHost *h, char **w, size_t n, char **error)
{
        char uuid[SIM_UUID_STRLEN];
        uint64_t seconds;
        size_t g, v;

        if (n != 3 || parse_uuid(w[1], uuid) < 0 ||
            parse_uint64_range(w[2], 0, SIM_AGE_MAX_S, &seconds) < 0)
                return ctl_usage(error, "age <uuid> <seconds> (seconds at most 315360000)");
        if (sim_host_find_mdev(h, uuid, &g, &v) < 0)
                return error_set(error, -ENOENT, "unknown mdev \"%s\"", w[1]);
        SimVf *vf = &h->gpus[g].vfs[v];
        /* Ages add up; the sum keeps the bound, so a loop of small ages cannot overflow. */
        if (seconds > SIM_AGE_MAX_S - vf->mdev_aged_s)
                return error_set(error, -EINVAL,
                                 "mdev %s would be aged %" PRIu64 " s, more than 10 years", uuid,
                                 vf->mdev_aged_s + seconds);
        vf->mdev_aged_s += seconds;
        return 0;
}

/*
 * `sriov <pf> off` (SIM-14), as `sriov-manage -d` does it: the VFs go, and with them their
 * vGPUs, mdevs and VFIO nodes; the card falls back to equal-size. Refused while a VMM (or
 * anyone) holds a VFIO node of one of its VFs, since the driver cannot take the VF away then.
 * The VFs' state is cleared now, so what `on` brings back are new, unconfigured devices.
 */
static int gpu_sriov_off(SimHost *h, SimGpu *gpu, char **error)
{
        if (gpu->sriov_off)
                return 0;
        for (size_t v = 0; v < gpu->n_vfs; v++) {
                const SimVf *vf = &gpu->vfs[v];
                if (vf->open_handles > 0)
                        return error_set(error, -EBUSY,
                                         "GPU %s: a VFIO node of VF %s is open (%" PRIu32
                                         " handle(s))",
                                         gpu->address, vf->address, vf->open_handles);
        }
        for (size_t v = 0; v < gpu->n_vfs; v++) {
                SimVf *vf = &gpu->vfs[v];
                /* Only the layout survives; mdev groups are never handed out again. */
                SimVf fresh = {.iommu_group = vf->iommu_group, .vfio = vf->vfio};
                memcpy(fresh.address, vf->address, sizeof(fresh.address));
                *vf = fresh;
        }
        gpu->n_vfs = 0;
        gpu->sriov_off = true;
        gpu->sriov_cycles++;
        gpu->mode = SIM_MODE_EQUAL;
        h->layout_generation++;
        return 0;
}

static int ctl_sriov(SimHost *h, char **w, size_t n, char **error)
{
        size_t g;
        int r;

        if (n != 3 || (!streq(w[2], "off") && !streq(w[2], "on")))
                return ctl_usage(error, "sriov <pf> off|on");
        if ((r = ctl_gpu(h, w[1], &g, error)) < 0)
                return r;
        SimGpu *gpu = &h->gpus[g];
        if (streq(w[2], "off"))
                return gpu_sriov_off(h, gpu, error);
        /* `on` again on a PF whose VFs are there changes nothing, as `mode` does. */
        if (!gpu->sriov_off)
                return 0;
        gpu->n_vfs = gpu->sriov_vfs;
        gpu->sriov_off = false;
        h->layout_generation++;
        return 0;
}

bool sim_ctl_is_internal(const char *command)
{
        return startswith(command, "nvml consume ") || startswith(command, "nvml query-begin ") ||
               startswith(command, "nvml query-end ");
}

int sim_host_ctl(SimHost *h, const char *command, char **error)
{
        _cleanup_free_ char *copy = strdup(command);
        char *w[CTL_MAX_WORDS + 1], *save = NULL;
        size_t n = 0;
        size_t g, v;
        int r;

        if (!copy)
                return -ENOMEM;
        if (strpbrk(copy, "\n\r"))
                return error_set(error, -EINVAL, "one command per write");
        for (char *t = strtok_r(copy, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) {
                if (n == CTL_MAX_WORDS)
                        return error_set(error, -EINVAL, "too many words");
                w[n++] = t;
        }
        w[n] = NULL;
        if (n == 0)
                return error_set(error, -EINVAL, "empty command");

        if (streq(w[0], "fault"))
                return ctl_fault(h, w, n, error);
        if (streq(w[0], "clear-faults") && n == 1) {
                clear_faults(h);
                return 0;
        }
        if (streq(w[0], "wedge") || streq(w[0], "unwedge")) {
                if (n != 2)
                        return ctl_usage(error, "wedge|unwedge <vf>");
                if ((r = ctl_vf(h, w[1], &g, &v, error)) < 0)
                        return r;
                h->gpus[g].vfs[v].wedged = streq(w[0], "wedge");
                return 0;
        }
        if (streq(w[0], "mode")) {
                SimMode m;
                if (n != 3 || sim_mode_from_string(w[2], &m) < 0)
                        return ctl_usage(error, "mode <pf> equal|mixed");
                if ((r = ctl_gpu(h, w[1], &g, error)) < 0)
                        return r;
                SimGpu *gpu = &h->gpus[g];
                if (gpu->mode == m)
                        return 0;
                if (m == SIM_MODE_MIXED && !gpu->model->mixed_capable)
                        return error_set(error, -EINVAL, "GPU %s (%s) has no mixed-size mode",
                                         gpu->address, gpu->model->key);
                uint32_t held = sim_gpu_vgpus(gpu);
                if (held > 0)
                        return error_set(error, -EBUSY, "GPU %s holds %" PRIu32 " vGPU(s)",
                                         gpu->address, held);
                gpu->mode = m;
                return 0;
        }
        if (streq(w[0], "release-lag")) {
                uint64_t ms;
                if (n != 3 || ctl_ms(w[2], &ms) < 0)
                        return ctl_usage(error, "release-lag <vf> <ms>");
                if ((r = ctl_vf(h, w[1], &g, &v, error)) < 0)
                        return r;
                h->gpus[g].vfs[v].release_lag_ms = ms;
                return 0;
        }
        if (streq(w[0], "nvml"))
                return ctl_nvml(h, w, n, error);
        if (streq(w[0], "qemu"))
                return ctl_qemu(h, w, n, error);
        if (streq(w[0], "age"))
                return ctl_age(h, w, n, error);
        if (streq(w[0], "sriov"))
                return ctl_sriov(h, w, n, error);
        return error_set(error, -EINVAL, "unknown command \"%s\"", w[0]);
}

/* ---- state.json ------------------------------------------------------------------------------ */

static json_t *json_uint_or_null(bool present, uint64_t v)
{
        return present ? json_integer((json_int_t)v) : json_null();
}

static json_t *vf_to_json(const SimGpu *g, size_t v)
{
        const SimVf *vf = &g->vfs[v];
        const SimType *t = vf_type(g, v);
        json_t *mdev = vf->mdev_uuid[0] ? json_pack("{s:s, s:I, s:I, s:I}", "uuid", vf->mdev_uuid,
                                                    "iommu_group", (json_int_t)vf->mdev_group,
                                                    "created_ms", (json_int_t)vf->mdev_created_ms,
                                                    "aged_s", (json_int_t)vf->mdev_aged_s)
                                        : json_null();

        return json_pack("{s:s, s:I, s:o, s:I, s:o, s:o, s:o, s:I, s:I, s:I, s:b, s:I, s:o}",
                         "address", vf->address, "iommu_group", (json_int_t)vf->iommu_group, "vfio",
                         vf->vfio >= 0 ? json_integer(vf->vfio) : json_null(), "type",
                         (json_int_t)vf->type, "profile", t ? json_string(t->name) : json_null(),
                         "placement",
                         json_uint_or_null(t && g->mode == SIM_MODE_MIXED, vf->placement), "mdev",
                         mdev, "open_handles", (json_int_t)vf->open_handles, "writes_in_flight",
                         (json_int_t)vf->writes_in_flight, "max_concurrent_writes",
                         (json_int_t)vf->max_concurrent_writes, "wedged", vf->wedged,
                         "release_lag_ms", (json_int_t)vf->release_lag_ms, "last_close_ms",
                         json_uint_or_null(vf->closed_once, vf->last_close_ms));
}

static json_t *gpu_to_json(const SimGpu *g)
{
        json_auto_t *vfs = json_array(), *queries = json_array();
        if (!vfs || !queries)
                return NULL;
        for (size_t v = 0; v < g->n_vfs; v++)
                if (json_array_append_new(vfs, vf_to_json(g, v)) < 0)
                        return NULL;
        for (size_t q = 0; q < g->n_queries; q++)
                if (json_array_append_new(queries,
                                          json_pack("{s:s, s:b}", "token", g->queries[q].token,
                                                    "overlapped", g->queries[q].overlapped)) < 0)
                        return NULL;
        return json_pack("{s:s, s:s, s:s, s:{s:b, s:I, s:I}, s:I, s:O, s:O}", "address", g->address,
                         "model", g->model->key, "mode", sim_mode_to_string(g->mode), "sriov",
                         "enabled", !g->sriov_off, "vfs", (json_int_t)g->sriov_vfs, "cycles",
                         (json_int_t)g->sriov_cycles, "query_write_overlaps",
                         (json_int_t)g->query_write_overlaps, "queries_in_flight", queries, "vfs",
                         vfs);
}

static int fault_action_format(const SimFault *f, char buf[static 32])
{
        switch (f->kind) {
        case SIM_FAULT_HANG:
                snprintf(buf, 32, "hang");
                return 0;
        case SIM_FAULT_DELAY:
                snprintf(buf, 32, "delay:%" PRIu64, f->delay_ms);
                return 0;
        case SIM_FAULT_ERRNO:
                if (!sim_errno_to_string(f->error))
                        return -EINVAL;
                snprintf(buf, 32, "%s", sim_errno_to_string(f->error));
                return 0;
        }
        return -EINVAL;
}

static json_t *host_to_json(const SimHost *h)
{
        json_auto_t *gpus = json_array(), *faults = json_array(), *errors = json_array(),
                    *qemu = json_array(), *forbidden = json_array(), *versions = json_array();
        if (!gpus || !faults || !errors || !qemu || !forbidden || !versions)
                return NULL;

        for (unsigned v = 1; v <= 2; v++)
                if ((h->nvml_struct_versions & (1u << v)) &&
                    json_array_append_new(versions, json_integer(v)) < 0)
                        return NULL;

        for (size_t i = 0; i < h->n_gpus; i++)
                if (json_array_append_new(gpus, gpu_to_json(&h->gpus[i])) < 0)
                        return NULL;
        for (size_t i = 0; i < h->n_faults; i++) {
                char action[32];
                if (fault_action_format(&h->faults[i], action) < 0)
                        return NULL;
                if (json_array_append_new(
                        faults,
                        json_pack("{s:s, s:s, s:s, s:o}", "op", fault_op_names[h->faults[i].op],
                                  "glob", h->faults[i].glob, "action", action, "remaining",
                                  json_uint_or_null(h->faults[i].remaining > 0,
                                                    h->faults[i].remaining))) < 0)
                        return NULL;
        }
        for (size_t i = 0; i < h->n_nvml_errors; i++) {
                const SimNvmlError *e = &h->nvml_errors[i];
                if (json_array_append_new(
                        errors, json_pack("{s:s, s:i, s:o}", "function", e->function, "code",
                                          e->code, "remaining",
                                          json_uint_or_null(e->remaining > 0, e->remaining))) < 0)
                        return NULL;
        }
        for (size_t i = 0; i < h->n_qemu; i++) {
                json_auto_t *flags = json_array();
                if (!flags)
                        return NULL;
                for (char **f = h->qemu[i].flags; f && *f; f++)
                        if (json_array_append_new(flags, json_string(*f)) < 0)
                                return NULL;
                if (json_array_append_new(
                        qemu, json_pack("{s:s, s:O}", "name", h->qemu[i].name, "flags", flags)) < 0)
                        return NULL;
        }
        for (char **f = h->forbidden_writes; f && *f; f++)
                if (json_array_append_new(forbidden, json_string(*f)) < 0)
                        return NULL;

        return json_pack(
            "{s:i, s:s, s:I, s:I, s:I, s:I, s:O, s:O, s:{s:I, s:b, s:O, s:O}, s:O, "
            "s:O}",
            "version", SIM_STATE_VERSION, "driver_version", h->driver_version, "next_iommu_group",
            (json_int_t)h->next_iommu_group, "layout_generation", (json_int_t)h->layout_generation,
            "fault_clears", (json_int_t)h->fault_clears, "operations_delayed",
            (json_int_t)h->operations_delayed, "gpus", gpus, "faults", faults, "nvml", "latency_ms",
            (json_int_t)h->nvml_latency_ms, "hang", h->nvml_hang, "errors", errors,
            "struct_versions", versions, "qemu", qemu, "forbidden_writes", forbidden);
}

int sim_host_to_json(const SimHost *h, char **ret)
{
        json_auto_t *j = host_to_json(h);
        if (!j)
                return -ENOMEM;
        char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (!s)
                return -ENOMEM;
        _cleanup_free_ char *text = s;
        int r = strextend(&text, "\n");
        if (r < 0)
                return r;
        *ret = TAKE_PTR(text);
        return 0;
}

/* -- loading: the layout is rebuilt from the GPU list, then the dynamic state laid over it. -- */

static int state_fail(char **error, const char *fmt, ...) _printf_(2, 3);
static int state_fail(char **error, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        int r = fail_escaped(error, fmt, ap);
        va_end(ap);
        return error_prefix(error, r, "invalid simulator state");
}

/* A non-negative integer no larger than max, or (when nullable) null. */
static int json_uint(const json_t *j, uint64_t max, bool nullable, bool *ret_present, uint64_t *ret)
{
        if (nullable && json_is_null(j)) {
                *ret_present = false;
                *ret = 0;
                return 0;
        }
        if (!json_is_integer(j) || json_integer_value(j) < 0 ||
            (uint64_t)json_integer_value(j) > max)
                return -EINVAL;
        if (ret_present)
                *ret_present = true;
        *ret = (uint64_t)json_integer_value(j);
        return 0;
}

static int vf_from_json(SimHost *h, SimGpu *g, size_t v, json_t *j, char **error)
{
        SimVf *vf = &g->vfs[v];
        const char *address;
        json_t *group, *vfio, *type, *profile, *placement, *mdev, *open, *writes, *maxw, *lag,
            *last;
        int wedged;
        json_error_t err;
        uint64_t u;
        bool present;

        if (json_unpack_ex(j, &err, JSON_STRICT,
                           "{s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:b, s:o, s:o}",
                           "address", &address, "iommu_group", &group, "vfio", &vfio, "type", &type,
                           "profile", &profile, "placement", &placement, "mdev", &mdev,
                           "open_handles", &open, "writes_in_flight", &writes,
                           "max_concurrent_writes", &maxw, "wedged", &wedged, "release_lag_ms",
                           &lag, "last_close_ms", &last) < 0)
                return state_fail(error, "VF %zu of GPU %s: %s", v, g->address, err.text);

        /* The layout part must be what the GPU list implies. */
        if (!streq(address, vf->address) || json_uint(group, UINT32_MAX, false, NULL, &u) < 0 ||
            u != vf->iommu_group ||
            (vf->vfio < 0
                 ? !json_is_null(vfio)
                 : json_uint(vfio, INT32_MAX, false, NULL, &u) < 0 || u != (uint64_t)vf->vfio))
                return state_fail(error, "VF %s does not match the layout of GPU %s", address,
                                  g->address);

        if (json_uint(type, UINT32_MAX, false, NULL, &u) < 0)
                return state_fail(error, "VF %s: invalid type", address);
        vf->type = (uint32_t)u;
        const SimType *t = vf_type(g, v);
        if (vf->type != 0 && !t)
                return state_fail(error, "VF %s: type %" PRIu32 " not in the %s catalog", address,
                                  vf->type, g->model->key);
        if (t ? !json_is_string(profile) || !streq(json_string_value(profile), t->name)
              : !json_is_null(profile))
                return state_fail(error, "VF %s: profile does not match its type", address);

        if (json_uint(placement, g->model->slots, true, &present, &u) < 0 ||
            present != (t && g->mode == SIM_MODE_MIXED) ||
            (present && (u % t->size != 0 || u + t->size > g->model->slots)))
                return state_fail(error, "VF %s: invalid placement", address);
        vf->placement = (uint32_t)u;

        if (json_is_null(mdev)) {
                if (g->model->mdev && t)
                        return state_fail(error, "VF %s: type set without an mdev", address);
        } else {
                const char *uuid;
                json_int_t mgroup, created, aged;
                if (!g->model->mdev || !t ||
                    json_unpack_ex(mdev, &err, JSON_STRICT, "{s:s, s:I, s:I, s:I}", "uuid", &uuid,
                                   "iommu_group", &mgroup, "created_ms", &created, "aged_s",
                                   &aged) < 0 ||
                    parse_uuid(uuid, vf->mdev_uuid) < 0 || !streq(uuid, vf->mdev_uuid) ||
                    mgroup < 0 || mgroup >= (json_int_t)h->next_iommu_group || created < 0 ||
                    aged < 0 || (uint64_t)aged > SIM_AGE_MAX_S)
                        return state_fail(error, "VF %s: invalid mdev", address);
                vf->mdev_group = (uint32_t)mgroup;
                vf->mdev_created_ms = (uint64_t)created;
                vf->mdev_aged_s = (uint64_t)aged;
        }

        if (json_uint(open, UINT32_MAX, false, NULL, &u) < 0)
                return state_fail(error, "VF %s: invalid open_handles", address);
        vf->open_handles = (uint32_t)u;
        if (json_uint(writes, UINT32_MAX, false, NULL, &u) < 0)
                return state_fail(error, "VF %s: invalid writes_in_flight", address);
        vf->writes_in_flight = (uint32_t)u;
        if (json_uint(maxw, UINT32_MAX, false, NULL, &u) < 0)
                return state_fail(error, "VF %s: invalid max_concurrent_writes", address);
        vf->max_concurrent_writes = (uint32_t)u;
        vf->wedged = wedged;
        if (json_uint(lag, 3600000, false, NULL, &vf->release_lag_ms) < 0)
                return state_fail(error, "VF %s: invalid release_lag_ms", address);
        if (json_uint(last, INT64_MAX, true, &vf->closed_once, &vf->last_close_ms) < 0)
                return state_fail(error, "VF %s: invalid last_close_ms", address);
        return 0;
}

static int gpu_from_json(SimHost *h, SimGpu *g, json_t *j, char **error)
{
        json_t *overlaps, *queries, *vfs;
        json_error_t err;
        uint64_t u;

        /* address, model, mode and sriov were read by the layout pass. */
        if (json_unpack_ex(j, &err, JSON_STRICT, "{s:s, s:s, s:s, s:o, s:o, s:o, s:o}", "address",
                           &(const char *){NULL}, "model", &(const char *){NULL}, "mode",
                           &(const char *){NULL}, "sriov", &(json_t *){NULL},
                           "query_write_overlaps", &overlaps, "queries_in_flight", &queries, "vfs",
                           &vfs) < 0)
                return state_fail(error, "GPU %s: %s", g->address, err.text);
        if (json_uint(overlaps, INT64_MAX, false, NULL, &u) < 0)
                return state_fail(error, "GPU %s: invalid query_write_overlaps", g->address);
        g->query_write_overlaps = u;

        if (!json_is_array(queries) || json_array_size(queries) > SIM_MAX_QUERIES_IN_FLIGHT)
                return state_fail(error, "GPU %s: invalid queries_in_flight", g->address);
        size_t i;
        json_t *q;
        json_array_foreach (queries, i, q) {
                const char *token;
                int overlapped;
                if (json_unpack_ex(q, &err, JSON_STRICT, "{s:s, s:b}", "token", &token,
                                   "overlapped", &overlapped) < 0 ||
                    sim_gpu_query_begin(h, (size_t)(g - h->gpus), token) < 0)
                        return state_fail(error, "GPU %s: invalid query in flight", g->address);
                g->queries[g->n_queries - 1].overlapped = overlapped;
        }

        for (size_t v = 0; v < g->n_vfs; v++) {
                int r = vf_from_json(h, g, v, json_array_get(vfs, v), error);
                if (r < 0)
                        return r;
        }

        /* Placements must not overlap: a model that lets two vGPUs share a slot is corrupt. */
        if (g->mode == SIM_MODE_MIXED)
                for (size_t v = 0; v < g->n_vfs; v++) {
                        const SimType *t = vf_type(g, v);
                        for (size_t w = v + 1; t && w < g->n_vfs; w++) {
                                const SimType *o = vf_type(g, w);
                                if (o && g->vfs[w].placement < g->vfs[v].placement + t->size &&
                                    g->vfs[v].placement < g->vfs[w].placement + o->size)
                                        return state_fail(error, "GPU %s: VFs %s and %s overlap",
                                                          g->address, g->vfs[v].address,
                                                          g->vfs[w].address);
                        }
                }
        return 0;
}

static int faults_from_json(SimHost *h, json_t *faults, char **error)
{
        size_t i;
        json_t *f;

        if (!json_is_array(faults))
                return state_fail(error, "faults must be an array");
        json_array_foreach (faults, i, f) {
                const char *op, *glob, *action;
                json_t *remaining;
                json_error_t err;
                char *words[6] = {"fault", NULL, NULL, NULL, NULL, NULL};
                char count[32];
                uint64_t u;
                bool present;

                if (json_unpack_ex(f, &err, JSON_STRICT, "{s:s, s:s, s:s, s:o}", "op", &op, "glob",
                                   &glob, "action", &action, "remaining", &remaining) < 0 ||
                    json_uint(remaining, UINT32_MAX, true, &present, &u) < 0 || (present && u == 0))
                        return state_fail(error, "fault %zu is invalid", i);
                snprintf(count, sizeof(count), "count=%" PRIu64, u);
                words[1] = (char *)op;
                words[2] = (char *)glob;
                words[3] = (char *)action;
                words[4] = present ? count : NULL;
                if (ctl_fault(h, words, present ? 5 : 4, NULL) < 0)
                        return state_fail(error, "fault %zu is invalid", i);
                /* Only the form the simulator writes: "delay:007" or "ENOTSUP" would come back
                 * changed. */
                char canonical[32];
                if (fault_action_format(&h->faults[h->n_faults - 1], canonical) < 0 ||
                    !streq(canonical, action))
                        return state_fail(error, "fault %zu: action \"%s\" is not canonical", i,
                                          action);
        }
        return 0;
}

static int nvml_from_json(SimHost *h, json_t *nvml, char **error)
{
        json_t *latency, *errors, *versions, *e;
        json_error_t err;
        int hang;
        size_t i;

        if (json_unpack_ex(nvml, &err, JSON_STRICT, "{s:o, s:b, s:o, s:o}", "latency_ms", &latency,
                           "hang", &hang, "errors", &errors, "struct_versions", &versions) < 0 ||
            json_uint(latency, 3600000, false, NULL, &h->nvml_latency_ms) < 0 ||
            !json_is_array(errors) || !json_is_array(versions))
                return state_fail(error, "invalid nvml settings");
        h->nvml_hang = hang;
        /* In the order the simulator writes them: each of 1 and 2 at most once, ascending. */
        unsigned mask = 0, last = 0;
        json_array_foreach (versions, i, e) {
                uint64_t v;
                if (json_uint(e, 2, false, NULL, &v) < 0 || v <= last)
                        return state_fail(error, "invalid nvml struct_versions");
                mask |= 1u << v;
                last = (unsigned)v;
        }
        h->nvml_struct_versions = mask;
        json_array_foreach (errors, i, e) {
                const char *function;
                json_int_t code; /* "i" would truncate 4294967311 to 15 */
                json_t *remaining;
                uint64_t u;
                bool present;

                if (json_unpack_ex(e, &err, JSON_STRICT, "{s:s, s:I, s:o}", "function", &function,
                                   "code", &code, "remaining", &remaining) < 0 ||
                    !sim_nvml_function_is_known(function) || code <= 0 || code > 999 ||
                    nvml_find_error(h, function) >= 0 ||
                    json_uint(remaining, UINT32_MAX, true, &present, &u) < 0 || (present && u == 0))
                        return state_fail(error, "nvml error %zu is invalid", i);
                SimNvmlError *grown =
                    realloc(h->nvml_errors, (h->n_nvml_errors + 1) * sizeof(SimNvmlError));
                if (!grown)
                        return -ENOMEM;
                h->nvml_errors = grown;
                char *copy = strdup(function);
                if (!copy)
                        return -ENOMEM;
                h->nvml_errors[h->n_nvml_errors++] =
                    (SimNvmlError){.function = copy, .code = (int)code, .remaining = u};
        }
        return 0;
}

static int qemu_from_json(SimHost *h, json_t *qemu, char **error)
{
        size_t i, k;
        json_t *q, *flag;

        if (!json_is_array(qemu))
                return state_fail(error, "qemu must be an array");
        json_array_foreach (qemu, i, q) {
                const char *name;
                json_t *flags;
                json_error_t err;

                if (json_unpack_ex(q, &err, JSON_STRICT, "{s:s, s:o}", "name", &name, "flags",
                                   &flags) < 0 ||
                    !json_is_array(flags) || json_array_size(flags) == 0 ||
                    sim_host_find_qemu(h, name))
                        return state_fail(error, "qemu entry %zu is invalid", i);
                json_array_foreach (flags, k, flag) {
                        char *words[] = {"qemu", (char *)name, (char *)json_string_value(flag)};
                        if (!words[2] || ctl_qemu(h, words, 3, NULL) < 0)
                                return state_fail(error, "qemu entry %zu is invalid", i);
                }
                /* ctl_qemu() ignores a flag set twice; the state must not list it twice. */
                if (strv_length(h->qemu[h->n_qemu - 1].flags) != json_array_size(flags))
                        return state_fail(error, "qemu entry %zu lists a flag twice", i);
        }
        return 0;
}

int sim_host_from_json(const char *text, size_t size, SimHost **ret, char **error)
{
        json_error_t err;
        const char *driver_version = NULL;
        json_t *gpus, *faults, *nvml, *qemu, *forbidden;
        json_int_t version, next_group, generation, clears, delayed;
        size_t i;
        json_t *item;

        if (size > SIM_STATE_MAX_BYTES)
                return error_set(error, -EFBIG, "simulator state larger than %u bytes",
                                 SIM_STATE_MAX_BYTES);
        json_auto_t *j = json_loadb(text, size, JSON_REJECT_DUPLICATES, &err);
        if (!j)
                return state_fail(error, "%d:%d: %s", err.line, err.column, err.text);
        if (json_unpack_ex(j, &err, JSON_STRICT,
                           "{s:I, s:s, s:I, s:I, s:I, s:I, s:o, s:o, s:o, s:o, s:o}", "version",
                           &version, "driver_version", &driver_version, "next_iommu_group",
                           &next_group, "layout_generation", &generation, "fault_clears", &clears,
                           "operations_delayed", &delayed, "gpus", &gpus, "faults", &faults, "nvml",
                           &nvml, "qemu", &qemu, "forbidden_writes", &forbidden) < 0)
                return state_fail(error, "%s", err.text);
        if (version != SIM_STATE_VERSION)
                return state_fail(error, "unsupported version %" JSON_INTEGER_FORMAT, version);
        if (!is_token(driver_version, 64) || !json_is_array(gpus) || next_group < 0 ||
            next_group > UINT32_MAX || generation < 0 || clears < 0 || delayed < 0 ||
            delayed > UINT32_MAX)
                return state_fail(error, "invalid host fields");

        size_t n = json_array_size(gpus);
        _cleanup_free_ GpuSpec *specs = calloc(n ? n : 1, sizeof(GpuSpec));
        if (!specs)
                return -ENOMEM;
        json_array_foreach (gpus, i, item) {
                const char *address, *model, *mode;
                int enabled;
                json_int_t sriov_vfs, cycles;
                json_t *vfs = json_object_get(item, "vfs");
                if (json_unpack_ex(item, &err, 0, "{s:s, s:s, s:s, s:{s:b, s:I, s:I!}}", "address",
                                   &address, "model", &model, "mode", &mode, "sriov", "enabled",
                                   &enabled, "vfs", &sriov_vfs, "cycles", &cycles) < 0 ||
                    parse_pci_address(address, &specs[i].address) < 0 ||
                    specs[i].address.device != 0 || specs[i].address.function != 0 ||
                    !(specs[i].model = sim_gpu_model_find(model)) ||
                    sim_mode_from_string(mode, &specs[i].mode) < 0 ||
                    (specs[i].mode == SIM_MODE_MIXED && !specs[i].model->mixed_capable) ||
                    sriov_vfs < 1 || sriov_vfs > (json_int_t)specs[i].model->max_vfs ||
                    cycles < 0 || (!enabled && cycles == 0) || !json_is_array(vfs) ||
                    json_array_size(vfs) != (enabled ? (size_t)sriov_vfs : 0))
                        return state_fail(error, "GPU %zu is invalid", i);
                specs[i].vfs = (uint32_t)sriov_vfs;
                specs[i].sriov_off = !enabled;
                specs[i].sriov_cycles = (uint64_t)cycles;
                for (size_t k = 0; k < i; k++)
                        if (memcmp(&specs[k].address, &specs[i].address, sizeof(PciAddress)) == 0)
                                return state_fail(error, "GPU %zu is listed twice", i);
        }

        _cleanup_sim_host_ SimHost *h = NULL;
        int r = host_build(driver_version, specs, n, &h);
        if (r < 0)
                return r;
        if ((uint32_t)next_group < h->next_iommu_group)
                return state_fail(error, "next_iommu_group below the VF groups");
        h->next_iommu_group = (uint32_t)next_group;
        h->layout_generation = (uint64_t)generation;
        h->fault_clears = (uint64_t)clears;
        h->operations_delayed = (uint32_t)delayed;

        for (i = 0; i < n; i++) {
                r = gpu_from_json(h, &h->gpus[i], json_array_get(gpus, i), error);
                if (r < 0)
                        return r;
        }
        if ((r = faults_from_json(h, faults, error)) < 0 ||
            (r = nvml_from_json(h, nvml, error)) < 0 || (r = qemu_from_json(h, qemu, error)) < 0)
                return r;
        if (!json_is_array(forbidden))
                return state_fail(error, "forbidden_writes must be an array");
        json_array_foreach (forbidden, i, item) {
                if (!json_is_string(item))
                        return state_fail(error, "forbidden write %zu is not a string", i);
                r = sim_host_record_forbidden(h, json_string_value(item));
                if (r < 0)
                        return r;
        }
        *ret = TAKE_PTR(h);
        return 0;
}
