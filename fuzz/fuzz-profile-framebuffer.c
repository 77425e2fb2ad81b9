/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Fuzzes what is derived from a profile name: its framebuffer size (DISC-14), its model
 * (DISC-17) and the DISC-13 name check. The input, NUL-terminated, is the name.
 */
#include <inttypes.h>

#include "base/base.h"
#include "gpu/gpu.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        char *name = malloc(size + 1);
        if (!name)
                return 0;
        memcpy(name, data, size);
        name[size] = 0;

        /* A size is whole GiB, and needs a "-" followed by digits and a size letter. */
        uint64_t mib = gpu_profile_framebuffer_mib(name);
        if (mib % 1024 != 0 || (mib > 0 && !strchr(name, '-')))
                abort();

        char *model = NULL;
        int r = gpu_profile_model(name, &model);
        if (r >= 0) {
                /* The model is a proper prefix ending just before the last "-". */
                size_t n = strlen(model);
                if (n == 0 || strncmp(name, model, n) != 0 || strrchr(name, '-') != name + n)
                        abort();
                free(model);
        } else if (r != -EINVAL && r != -ENOMEM)
                abort();

        bool valid = gpu_profile_name_is_valid(name);
        if (valid && (strlen(name) == 0 || strlen(name) > GPU_PROFILE_NAME_MAX))
                abort();
        free(name);
        return 0;
}
