/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Fuzzes the two parsers of the vendor VFIO sysfs attributes: creatable_vgpu_types
 * (DISC-10..DISC-13) and current_vgpu_type (DISC-5), both fed the raw input bytes.
 *
 * Besides "no crash, no leak", a success must keep the parsers' promises: a bounded input, type
 * IDs in 1..4294967295 without repeats, names that pass DISC-13 without repeats, each size as
 * DISC-14 derives it from the name; a failure must come with a message.
 */
#include <inttypes.h>

#include "base/base.h"
#include "gpu/gpu.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x)                                                                                \
        do {                                                                                    \
                if (!(x)) {                                                                     \
                        fprintf(stderr, "%s:%d: broken promise: %s\n", __FILE__, __LINE__, #x); \
                        abort();                                                                \
                }                                                                               \
        } while (0)

static void check_creatable(const char *buf, size_t size)
{
        GpuProfile *p = NULL;
        size_t n = 0;
        char *error = NULL;

        int r = gpu_parse_creatable_types(buf, size, &p, &n, &error);
        if (r < 0) {
                CHECK(r == -EINVAL || r == -EFBIG || r == -ENOMEM);
                CHECK(error || r == -ENOMEM);
                CHECK(r != -EFBIG || size > GPU_CREATABLE_TYPES_MAX);
                CHECK(!p);
                free(error);
                return;
        }
        CHECK(!error);
        CHECK(size <= GPU_CREATABLE_TYPES_MAX);
        for (size_t i = 0; i < n; i++) {
                CHECK(p[i].type_id != 0);
                CHECK(gpu_profile_name_is_valid(p[i].name));
                CHECK(!p[i].mdev_type);
                CHECK(p[i].framebuffer_mib == gpu_profile_framebuffer_mib(p[i].name));
                /* Inputs this size hold few lines; pairwise checks stay cheap enough. */
                for (size_t j = 0; j < i && n < 512; j++) {
                        CHECK(p[j].type_id != p[i].type_id);
                        CHECK(!streq(p[j].name, p[i].name));
                }
        }
        gpu_profiles_free(p, n);
}

static void check_current(const char *buf, size_t size)
{
        uint32_t v = 12345;
        char *error = NULL;

        int r = gpu_parse_current_type(buf, size, &v, &error);
        if (r < 0) {
                CHECK(r == -EINVAL || r == -EFBIG || r == -ENOMEM);
                CHECK(error || r == -ENOMEM);
                CHECK(v == 12345);
                free(error);
                return;
        }
        CHECK(!error);
        CHECK(size >= 1 && size <= GPU_CURRENT_TYPE_MAX);
        /* Only digits and one final newline get through, and they spell v. */
        size_t digits = buf[size - 1] == '\n' ? size - 1 : size;
        char text[GPU_CURRENT_TYPE_MAX + 1];
        snprintf(text, sizeof text, "%" PRIu32, v);
        size_t lead = 0;
        while (lead + 1 < digits && buf[lead] == '0')
                lead++;
        CHECK(digits - lead == strlen(text) && memcmp(buf + lead, text, strlen(text)) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        check_creatable((const char *)data, size);
        check_current((const char *)data, size);
        return 0;
}
