/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Fuzzes the mdev type description reader (DISC-16): the input, NUL-terminated, is a
 * mdev_supported_types/<type>/description file. A size it reports must be spelled in the input
 * as a "framebuffer=<digits>M" token.
 */
#include <inttypes.h>

#include "base/base.h"
#include "gpu/gpu.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        char *text = malloc(size + 1);
        if (!text)
                return 0;
        memcpy(text, data, size);
        text[size] = 0;

        uint64_t mib = gpu_mdev_description_framebuffer_mib(text);
        if (mib > 0) {
                char token[48];
                snprintf(token, sizeof token, "framebuffer=%" PRIu64 "M", mib);
                /* Leading zeros may pad the digits; without them the token must appear. */
                if (!strstr(text, token) && !strstr(text, "framebuffer=0")) {
                        fprintf(stderr, "reported %" PRIu64 " MiB not in the input\n", mib);
                        abort();
                }
        }
        free(text);
        return 0;
}
