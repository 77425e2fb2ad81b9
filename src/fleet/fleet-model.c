/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The pure part of the Placement sync: uuids and names (FLEET-2), inventories (FLEET-3) and
 * traits (FLEET-4) from one FleetHostInput. docs/FLEET.md explains the figures.
 */
#include <ctype.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <sys/param.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fleet/fleet.h"

const uint8_t fleet_uuid_namespace_url[16] = {0x6b, 0xa7, 0xb8, 0x11, 0x9d, 0xad, 0x11, 0xd1,
                                              0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8};

int fleet_uuid5(const uint8_t namespace[16], const char *name, char ret[static FLEET_UUID_STRLEN])
{
        size_t n = strlen(name);
        _cleanup_free_ uint8_t *buf = malloc(16 + n);
        if (!buf)
                return -ENOMEM;
        memcpy(buf, namespace, 16);
        memcpy(buf + 16, name, n);

        uint8_t md[EVP_MAX_MD_SIZE];
        unsigned md_len = 0;
        if (EVP_Digest(buf, 16 + n, md, &md_len, EVP_sha1(), NULL) != 1 || md_len < 16)
                return -EIO;
        md[6] = (uint8_t)((md[6] & 0x0f) | 0x50); /* version 5 */
        md[8] = (uint8_t)((md[8] & 0x3f) | 0x80); /* the RFC 4122 variant */

        static const char hex[] = "0123456789abcdef";
        size_t o = 0;
        for (size_t i = 0; i < 16; i++) {
                if (i == 4 || i == 6 || i == 8 || i == 10)
                        ret[o++] = '-';
                ret[o++] = hex[md[i] >> 4];
                ret[o++] = hex[md[i] & 0xf];
        }
        ret[o] = 0;
        return 0;
}

bool fleet_host_name_is_valid(const char *name)
{
        size_t n = name ? strlen(name) : 0;
        if (n == 0 || n > FLEET_HOST_NAME_MAX)
                return false;
        for (const char *p = name; *p; p++)
                if (!isalnum((unsigned char)*p) && *p != '-' && *p != '.' && *p != '_')
                        return false;
        return true;
}

int fleet_root_uuid(const char *host_name, char ret[static FLEET_UUID_STRLEN])
{
        _cleanup_free_ char *name = NULL;
        if (!fleet_host_name_is_valid(host_name))
                return -EINVAL;
        if (strprintf(&name, "vgpud:%s", host_name) < 0)
                return -ENOMEM;
        return fleet_uuid5(fleet_uuid_namespace_url, name, ret);
}

int fleet_pf_uuid(const char *host_name, const char *pf, char ret[static FLEET_UUID_STRLEN])
{
        _cleanup_free_ char *name = NULL;
        if (!fleet_host_name_is_valid(host_name) || !pci_address_is_valid(pf))
                return -EINVAL;
        if (strprintf(&name, "vgpud:%s:%s", host_name, pf) < 0)
                return -ENOMEM;
        return fleet_uuid5(fleet_uuid_namespace_url, name, ret);
}

int fleet_pf_provider_name(const char *host_name, const char *pf, char **ret)
{
        PciAddress a;
        if (!fleet_host_name_is_valid(host_name) || parse_pci_address(pf, &a) < 0)
                return -EINVAL;
        /* "0000:e3:00.0" → "0000_e3_00_0": the address's own digits, separators as '_'. */
        char tail[PCI_ADDRESS_STRLEN];
        snprintf(tail, sizeof tail, "%s", pf);
        for (char *p = tail; *p; p++)
                if (*p == ':' || *p == '.')
                        *p = '_';
        return strprintf(ret, "%s_pci_%s", host_name, tail) < 0 ? -ENOMEM : 0;
}

bool fleet_custom_name_is_valid(const char *name)
{
        const char *rest = startswith(name, "CUSTOM_");
        if (!rest || !*rest || strlen(name) > 255)
                return false;
        for (const char *p = rest; *p; p++)
                if (!(*p >= 'A' && *p <= 'Z') && !(*p >= '0' && *p <= '9') && *p != '_')
                        return false;
        return true;
}

int fleet_profile_trait(const char *profile, char **ret)
{
        const char *rest = startswith(profile, "NVIDIA ");
        if (!rest)
                rest = profile;
        if (!*rest)
                return -EINVAL;
        _cleanup_free_ char *t = NULL;
        if (strprintf(&t, "CUSTOM_VGPU_PROFILE_%s", rest) < 0)
                return -ENOMEM;
        for (char *p = t + strlen("CUSTOM_VGPU_PROFILE_"); *p; p++)
                *p = isalnum((unsigned char)*p) ? (char)toupper((unsigned char)*p) : '_';
        if (!fleet_custom_name_is_valid(t))
                return -EINVAL;
        *ret = TAKE_PTR(t);
        return 0;
}

int fleet_image_trait(const char *image, char **ret)
{
        if (!*image)
                return -EINVAL;
        _cleanup_free_ char *t = NULL;
        if (strprintf(&t, "CUSTOM_VGPUD_IMAGE_%s", image) < 0)
                return -ENOMEM;
        for (char *p = t + strlen("CUSTOM_VGPUD_IMAGE_"); *p; p++)
                *p = isalnum((unsigned char)*p) ? (char)toupper((unsigned char)*p) : '_';
        if (!fleet_custom_name_is_valid(t))
                return -EINVAL;
        *ret = TAKE_PTR(t);
        return 0;
}

int fleet_place_class(uint64_t size_gib, char **ret)
{
        return strprintf(ret, "CUSTOM_VGPU_PLACE_%" PRIu64 "G", size_gib) < 0 ? -ENOMEM : 0;
}

/* ---- the wanted state's storage ------------------------------------------------------------- */

void fleet_inventories_free(FleetInventory *inv, size_t n)
{
        for (size_t i = 0; inv && i < n; i++)
                free(inv[i].resource_class);
        free(inv);
}

void fleet_provider_done(FleetProvider *p)
{
        free(p->name);
        fleet_inventories_free(p->inventories, p->n_inventories);
        strv_free(p->traits);
        *p = (FleetProvider){};
}

FleetWanted *fleet_wanted_free(FleetWanted *w)
{
        if (!w)
                return NULL;
        for (size_t i = 0; i < w->n_providers; i++)
                fleet_provider_done(&w->providers[i]);
        free(w->providers);
        free(w);
        return NULL;
}

static int inventories_copy(const FleetInventory *inv, size_t n, FleetInventory **ret)
{
        FleetInventory *c = calloc(n ? n : 1, sizeof *c);
        if (!c)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                c[i] = inv[i];
                c[i].resource_class = strdup(inv[i].resource_class);
                if (!c[i].resource_class) {
                        fleet_inventories_free(c, i);
                        return -ENOMEM;
                }
        }
        *ret = c;
        return 0;
}

int fleet_provider_copy(const FleetProvider *p, FleetProvider *ret)
{
        _cleanup_(fleet_provider_done) FleetProvider c = *p;
        c.name = NULL;
        c.inventories = NULL;
        c.n_inventories = 0;
        c.traits = NULL;
        if (strdup_nullable(p->name, &c.name) < 0 ||
            inventories_copy(p->inventories, p->n_inventories, &c.inventories) < 0)
                return -ENOMEM;
        c.n_inventories = p->n_inventories;
        for (char **t = p->traits; t && *t; t++)
                if (strv_push(&c.traits, *t) < 0)
                        return -ENOMEM;
        *ret = c;
        c = (FleetProvider){};
        return 0;
}

const FleetProvider *fleet_wanted_find(const FleetWanted *w, const char *uuid)
{
        for (size_t i = 0; w && i < w->n_providers; i++)
                if (streq(w->providers[i].uuid, uuid))
                        return &w->providers[i];
        return NULL;
}

const FleetInventory *fleet_provider_find_inventory(const FleetProvider *p, const char *rc)
{
        for (size_t i = 0; i < p->n_inventories; i++)
                if (streq(p->inventories[i].resource_class, rc))
                        return &p->inventories[i];
        return NULL;
}

bool fleet_inventories_equal(const FleetInventory *a, size_t n_a, const FleetInventory *b,
                             size_t n_b)
{
        if (n_a != n_b)
                return false;
        for (size_t i = 0; i < n_a; i++)
                if (!streq(a[i].resource_class, b[i].resource_class) || a[i].total != b[i].total ||
                    a[i].reserved != b[i].reserved || a[i].max_unit != b[i].max_unit)
                        return false;
        return true;
}

bool fleet_provider_state_equal(const FleetProvider *a, const FleetProvider *b)
{
        if (!fleet_inventories_equal(a->inventories, a->n_inventories, b->inventories,
                                     b->n_inventories))
                return false;
        size_t n = strv_length(a->traits);
        if (n != strv_length(b->traits))
                return false;
        for (size_t i = 0; i < n; i++)
                if (!streq(a->traits[i], b->traits[i]))
                        return false;
        return true;
}

static int compare_inventories(const void *a, const void *b)
{
        const FleetInventory *x = a, *y = b;
        return strcmp(x->resource_class, y->resource_class);
}

static bool strv_contains(char *const *strv, const char *s)
{
        for (; strv && *strv; strv++)
                if (streq(*strv, s))
                        return true;
        return false;
}

/* Appends a record; Placement wants total >= 1 and 1 <= max_unit <= total. A class whose
 * figure is 0 becomes one fully reserved unit, so that it admits nothing and can still hold
 * allocations made when it had capacity (deleting an inventory in use is refused). */
static int push_inventory(FleetProvider *p, const char *rc, uint64_t total, uint64_t reserved,
                          uint64_t max_unit)
{
        if (total == 0) {
                total = 1;
                reserved = 1;
        }
        reserved = MIN(reserved, total);
        max_unit = MAX(1u, MIN(max_unit, total));

        FleetInventory *n = realloc(p->inventories, (p->n_inventories + 1) * sizeof *n);
        if (!n)
                return -ENOMEM;
        p->inventories = n;
        char *copy = strdup(rc);
        if (!copy)
                return -ENOMEM;
        n[p->n_inventories++] = (FleetInventory){
            .resource_class = copy, .total = total, .reserved = reserved, .max_unit = max_unit};
        return 0;
}

int fleet_inventories_merge(const FleetInventory *wanted, size_t n_wanted,
                            const FleetInventory *current, size_t n_current, FleetInventory **ret,
                            size_t *ret_n)
{
        FleetProvider p = {};
        int r = 0;

        for (size_t i = 0; i < n_wanted && r >= 0; i++)
                r = push_inventory(&p, wanted[i].resource_class, wanted[i].total,
                                   wanted[i].reserved, wanted[i].max_unit);
        for (size_t i = 0; i < n_current && r >= 0; i++) {
                bool found = false;
                for (size_t k = 0; k < n_wanted && !found; k++)
                        found = streq(wanted[k].resource_class, current[i].resource_class);
                if (!found)
                        r = push_inventory(&p, current[i].resource_class, current[i].total,
                                           current[i].total, current[i].max_unit);
        }
        if (r < 0) {
                fleet_provider_done(&p);
                return r;
        }
        if (p.n_inventories > 1)
                qsort(p.inventories, p.n_inventories, sizeof *p.inventories, compare_inventories);
        *ret = p.inventories;
        *ret_n = p.n_inventories;
        return 0;
}

/* ---- FLEET-3 and FLEET-4 --------------------------------------------------------------------- */

static uint64_t gib_of(uint64_t mib)
{
        return mib / 1024;
}

/* A size in GiB, rounded up: what a VF of this size takes from the card, never less. */
static uint64_t gib_ceil(uint64_t mib)
{
        return (mib + 1023) / 1024;
}

uint64_t fleet_gpu_framebuffer_mib(const FleetGpuInput *g)
{
        if (g->framebuffer_mib)
                return g->framebuffer_mib;
        uint64_t best = 0;
        for (size_t i = 0; i < g->n_profiles; i++) {
                const FleetProfileInput *p = &g->profiles[i];
                uint64_t footprint = p->framebuffer_mib * MAX(1u, p->max_instances);
                best = MAX(best, footprint);
        }
        return best;
}

typedef struct SizeFigures {
        uint64_t gib;
        uint64_t maximum;  /* the size's maximum on the card */
        uint64_t free;     /* free placements now */
        uint64_t occupied; /* VFs of this size that hold a slot */
        uint64_t consumer; /* ... of which Placement already counts (FLEET-6 consumers) */
} SizeFigures;

static SizeFigures *size_find(SizeFigures *s, size_t n, uint64_t gib)
{
        for (size_t i = 0; i < n; i++)
                if (s[i].gib == gib)
                        return &s[i];
        return NULL;
}

static int compute_gpu(const FleetHostInput *in, const FleetGpuInput *g, FleetProvider *p)
{
        bool disabled = in->placement_disabled;
        uint64_t readable = 0, vgpu_reserved = 0, fb_used_gib = 0;
        int r;

        for (size_t i = 0; i < g->n_vfs; i++) {
                const FleetVfInput *v = &g->vfs[i];
                if (!v->readable)
                        continue; /* outside total already: counting it again would under-admit */
                readable++;
                if (!v->allocatable && !v->consumer)
                        vgpu_reserved++;
                if (v->occupied && !v->consumer)
                        fb_used_gib += gib_ceil(v->framebuffer_mib);
        }

        /* VGPU: one unit per readable VF (FLEET-3). */
        r = push_inventory(p, FLEET_RC_VGPU, readable, disabled ? readable : vgpu_reserved, 1);
        if (r < 0)
                return r;

        /* The per-size figures, from the catalog. */
        _cleanup_free_ SizeFigures *sizes =
            calloc(g->n_profiles ? g->n_profiles : 1, sizeof *sizes);
        if (!sizes)
                return -ENOMEM;
        size_t n_sizes = 0;
        uint64_t card_gib = gib_of(fleet_gpu_framebuffer_mib(g));
        for (size_t i = 0; i < g->n_profiles; i++) {
                const FleetProfileInput *pr = &g->profiles[i];
                uint64_t gib = gib_of(pr->framebuffer_mib);
                if (gib == 0)
                        continue; /* unknown size: a trait, no class */
                SizeFigures *s = size_find(sizes, n_sizes, gib);
                if (!s) {
                        s = &sizes[n_sizes++];
                        *s = (SizeFigures){.gib = gib};
                }
                uint64_t maximum = pr->max_instances;
                if (maximum == 0) /* NVML's maximum unknown: what the card and its VFs allow */
                        maximum = MIN(card_gib / gib, (uint64_t)g->n_vfs);
                s->maximum = MAX(s->maximum, maximum);
                /* Profiles of one size share their placements: one free is a free slot. */
                s->free = MAX(s->free, pr->available);
        }
        for (size_t i = 0; i < g->n_vfs; i++) {
                const FleetVfInput *v = &g->vfs[i];
                SizeFigures *s = v->readable && v->occupied
                                     ? size_find(sizes, n_sizes, gib_of(v->framebuffer_mib))
                                     : NULL;
                if (!s)
                        continue;
                s->occupied++;
                if (v->consumer)
                        s->consumer++;
        }

        /* CUSTOM_VGPU_FB_GIB: the card's framebuffer; max_unit the largest size with a free
         * placement now; reserved what this host holds outside Placement. */
        uint64_t largest_free = 0;
        for (size_t i = 0; i < n_sizes; i++)
                if (sizes[i].free > 0 && !disabled)
                        largest_free = MAX(largest_free, sizes[i].gib);
        r = push_inventory(p, FLEET_RC_FB, card_gib, disabled ? card_gib : fb_used_gib,
                           largest_free ? largest_free : 1);
        if (r < 0)
                return r;

        /*
         * CUSTOM_VGPU_PLACE_<s>G: reserved = total − free − consumer. A sysfs list names a type
         * on every free VF although the card takes only its maximum less what it holds, so the
         * free figure is capped by that; Placement counts its consumers' VFs in its usage,
         * and the free figure has dropped for them too, so they are given back.
         */
        for (size_t i = 0; i < n_sizes; i++) {
                SizeFigures *s = &sizes[i];
                uint64_t room = s->maximum > s->occupied ? s->maximum - s->occupied : 0;
                uint64_t free = MIN(s->free, room);
                uint64_t reserved = s->maximum;
                if (!disabled)
                        reserved =
                            s->maximum > free + s->consumer ? s->maximum - free - s->consumer : 0;
                _cleanup_free_ char *rc = NULL;
                r = fleet_place_class(s->gib, &rc);
                if (r >= 0)
                        r = push_inventory(p, rc, s->maximum, reserved, s->maximum);
                if (r < 0)
                        return r;
        }
        qsort(p->inventories, p->n_inventories, sizeof *p->inventories, compare_inventories);

        /* FLEET-4. */
        for (size_t i = 0; i < g->n_profiles; i++) {
                _cleanup_free_ char *t = NULL;
                r = fleet_profile_trait(g->profiles[i].name, &t);
                if (r == -EINVAL)
                        continue; /* a name with nothing after the vendor word */
                if (r < 0)
                        return r;
                if (!strv_contains(p->traits, t) && strv_push(&p->traits, t) < 0)
                        return -ENOMEM;
        }
        if (strv_push(&p->traits, g->mixed ? FLEET_TRAIT_MIXED : FLEET_TRAIT_EQUAL) < 0)
                return -ENOMEM;
        /* DISK-12: a scheduler asks for the image, and gets only hosts that hold it. */
        for (size_t i = 0; i < in->n_images; i++) {
                _cleanup_free_ char *t = NULL;
                r = fleet_image_trait(in->images[i], &t);
                if (r == -EINVAL)
                        continue;
                if (r < 0)
                        return r;
                if (!strv_contains(p->traits, t) && strv_push(&p->traits, t) < 0)
                        return -ENOMEM;
        }
        if ((g->drained || disabled || in->stopping) &&
            strv_push(&p->traits, FLEET_TRAIT_DRAINED) < 0)
                return -ENOMEM;
        strv_sort(p->traits);
        return 0;
}

int fleet_wanted_compute(const FleetHostInput *in, FleetWanted **ret)
{
        _cleanup_fleet_wanted_ FleetWanted *w = calloc(1, sizeof *w);
        if (!w)
                return -ENOMEM;
        w->providers = calloc(in->n_gpus + 1, sizeof *w->providers);
        if (!w->providers)
                return -ENOMEM;

        FleetProvider *root = &w->providers[w->n_providers++];
        int r = fleet_root_uuid(in->host_name, root->uuid);
        if (r < 0)
                return r;
        root->name = strdup(in->host_name);
        if (!root->name)
                return -ENOMEM;

        for (size_t i = 0; i < in->n_gpus; i++) {
                const FleetGpuInput *g = &in->gpus[i];
                FleetProvider *p = &w->providers[w->n_providers++];
                r = fleet_pf_uuid(in->host_name, g->address, p->uuid);
                if (r >= 0)
                        r = fleet_pf_provider_name(in->host_name, g->address, &p->name);
                if (r < 0)
                        return r;
                snprintf(p->pf, sizeof p->pf, "%s", g->address);
                memcpy(p->parent_uuid, root->uuid, sizeof p->parent_uuid);
                r = compute_gpu(in, g, p);
                if (r < 0)
                        return r;
        }
        *ret = TAKE_PTR(w);
        return 0;
}

/* ---- tokens and backoff ---------------------------------------------------------------------- */

void fleet_token_done(FleetToken *t)
{
        free(t->value);
        *t = (FleetToken){};
}

static int64_t ts_msec(Timestamp t)
{
        return t.sec * 1000 + (int64_t)(t.nsec / 1000000);
}

bool fleet_token_needs_refresh(const FleetToken *t, Timestamp issued_at, Timestamp now)
{
        if (!t || !t->value)
                return true;
        int64_t lifetime = ts_msec(t->expires_at) - ts_msec(issued_at);
        int64_t margin = MIN(lifetime / 10, (int64_t)5 * 60 * 1000);
        margin = MAX(margin, (int64_t)10 * 1000);
        return ts_msec(now) + margin >= ts_msec(t->expires_at);
}

nsec_t fleet_backoff(unsigned attempt, uint64_t random)
{
        nsec_t d = FLEET_BACKOFF_BASE;
        for (unsigned i = 1; i < attempt && d < FLEET_BACKOFF_MAX; i++)
                d *= 2;
        d = MIN(d, FLEET_BACKOFF_MAX);
        nsec_t half = d / 2;
        return half + random % (d - half + 1);
}

/* ---- the Keystone secret --------------------------------------------------------------------- */

#define SECRET_KEY "placement.keystone.application_credential_secret_file"

int fleet_read_secret_file(const char *path, char **ret, char **error)
{
        char buf[FLEET_SECRET_MAX + 2]; /* one byte over the cap shows an oversize file */
        size_t size = 0;
        int r;

        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0) {
                r = negative_errno();
                return error_set(error, r, SECRET_KEY " %s: %s", path, strerror(-r));
        }
        /* The checks apply to the file actually read. */
        struct stat st;
        if (fstat(fd, &st) < 0) {
                r = negative_errno();
                return error_set(error, r, SECRET_KEY " %s: %s", path, strerror(-r));
        }
        if (!S_ISREG(st.st_mode))
                return error_set(error, -EINVAL, SECRET_KEY " %s: not a regular file", path);
        if (st.st_mode & (S_IRWXG | S_IRWXO))
                return error_set(error, -EPERM,
                                 SECRET_KEY " %s: mode %04o gives group or other access", path,
                                 (unsigned)(st.st_mode & 07777));
        while (size < sizeof buf - 1) {
                ssize_t n = read(fd, buf + size, sizeof buf - 1 - size);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        r = negative_errno();
                        explicit_bzero(buf, sizeof buf);
                        return error_set(error, r, SECRET_KEY " %s: %s", path, strerror(-r));
                }
                if (n == 0)
                        break;
                size += (size_t)n;
        }
        if (size > 0 && buf[size - 1] == '\n')
                size--;
        if (size == 0 || size > FLEET_SECRET_MAX) {
                explicit_bzero(buf, sizeof buf);
                return error_set(error, -EINVAL, SECRET_KEY " %s: %s", path,
                                 size == 0 ? "empty" : "more than 4096 bytes");
        }
        if (memchr(buf, 0, size) || memchr(buf, '\n', size)) {
                explicit_bzero(buf, sizeof buf);
                return error_set(error, -EINVAL, SECRET_KEY " %s: not one line of text", path);
        }
        char *s = strndup(buf, size);
        explicit_bzero(buf, sizeof buf);
        if (!s)
                return error_set_oom(error);
        *ret = s;
        return 0;
}
