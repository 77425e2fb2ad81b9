/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Replays a fuzz target's corpus without libFuzzer: every file named on the command line, or
 * found in a directory named there, is passed to LLVMFuzzerTestOneInput once. A crash or a
 * sanitizer report fails the test; a missing or empty corpus fails it too, so a target cannot
 * silently test nothing.
 */
#include <fcntl.h>

#include "base/base.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REPLAY_INPUT_MAX (16u << 20)

static int replay_file(int dirfd, const char *path)
{
        _cleanup_free_ char *buf = NULL;
        size_t size;
        int r = read_file_at(dirfd, path, REPLAY_INPUT_MAX, &buf, &size);
        if (r < 0) {
                fprintf(stderr, "read %s: %s\n", path, strerror(-r));
                return r;
        }
        LLVMFuzzerTestOneInput((const uint8_t *)buf, size);
        return 1;
}

static int replay_path(const char *path)
{
        _cleanup_closedir_ DIR *d = opendir(path);
        if (!d)
                return errno == ENOTDIR ? replay_file(AT_FDCWD, path) : negative_errno();

        int n = 0;
        struct dirent *de;
        while ((de = readdir(d)))
                if (de->d_name[0] != '.') {
                        int r = replay_file(dirfd(d), de->d_name);
                        if (r < 0)
                                return r;
                        n += r;
                }
        return n;
}

int main(int argc, char **argv)
{
        int total = 0;
        for (int i = 1; i < argc; i++) {
                int r = replay_path(argv[i]);
                if (r < 0) {
                        fprintf(stderr, "replay %s: %s\n", argv[i], strerror(-r));
                        return 1;
                }
                total += r;
        }
        if (total == 0) {
                fprintf(stderr, "no corpus inputs replayed\n");
                return 1;
        }
        printf("replayed %d inputs\n", total);
        return 0;
}
