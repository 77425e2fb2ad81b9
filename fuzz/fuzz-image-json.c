/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * image.json (REL-5, DISK-1). Invariants beyond "no crash": a refused record gets a one-line
 * message; an accepted one is named as its directory, has a state and an absolute source.
 */
#include "storage/storage.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        _cleanup_(image_done) Image image = {0};
        _cleanup_free_ char *error = NULL;

        if (image_record_parse((const char *)data, size, "base", &image, &error) < 0) {
                if (!error || strchr(error, '\n'))
                        abort();
                return 0;
        }
        if (strcmp(image.name, "base") != 0 || !image_state_to_string(image.state) ||
            !image.source || image.source[0] != '/' || timestamp_is_zero(image.created_at))
                abort();
        return 0;
}
