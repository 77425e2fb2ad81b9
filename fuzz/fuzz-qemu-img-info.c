/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * `qemu-img info --output=json` (REL-5, GEN-5, DISK-3). Invariants beyond "no crash": a refused
 * answer gets a one-line message; an accepted one has a format, and DISK-3's check of it either
 * passes only raw and qcow2 without backing file, data file or encryption, or says why not on
 * one line.
 */
#include "storage/storage.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        _cleanup_(qemu_img_info_done) QemuImgInfo info = {0};
        _cleanup_free_ char *error = NULL;

        if (qemu_img_info_parse((const char *)data, size, &info, &error) < 0) {
                if (!error || strchr(error, '\n'))
                        abort();
                return 0;
        }
        if (!info.format)
                abort();
        if (qemu_img_info_check(&info, info.format, UINT64_C(1) << 41, &error) < 0) {
                if (!error || strchr(error, '\n'))
                        abort();
                return 0;
        }
        if ((strcmp(info.format, "raw") != 0 && strcmp(info.format, "qcow2") != 0) ||
            info.backing || info.data_file || info.encrypted || info.corrupt)
                abort();
        return 0;
}
