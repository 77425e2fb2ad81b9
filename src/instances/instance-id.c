/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The shapes of what names an instance (INST-3, INST-4): ids drawn from getrandom(), names, and
 * the form of a boot path before INST-6 looks at the file. An id is checked here before it ever
 * becomes a path.
 */
#include <string.h>
#include <sys/random.h>

#include "instance-record-internal.h"

static const char id_alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";

int instance_id_generate(char ret[static INSTANCE_ID_LEN + 1])
{
        /*
         * 252 is the largest multiple of 36 that fits a byte: bytes at or above it are dropped,
         * so that byte % 36 gives every character the same chance (no modulo bias).
         */
        const unsigned alphabet = sizeof id_alphabet - 1, limit = 256 / alphabet * alphabet;
        char id[INSTANCE_ID_LEN + 1];
        size_t n = 0;

        while (n < INSTANCE_ID_LEN) {
                uint8_t buf[32];
                ssize_t k = getrandom(buf, sizeof buf, 0);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return negative_errno();
                }
                if (k == 0)
                        return -EIO;
                for (ssize_t i = 0; i < k && n < INSTANCE_ID_LEN; i++)
                        if (buf[i] < limit)
                                id[n++] = id_alphabet[buf[i] % alphabet];
        }
        id[n] = 0;
        memcpy(ret, id, sizeof id);
        return 0;
}

static bool is_lower_alnum(char c)
{
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

bool instance_id_is_valid(const char *id)
{
        if (!id)
                return false;
        size_t n = 0;
        for (; id[n]; n++)
                if (n >= INSTANCE_ID_LEN || !is_lower_alnum(id[n]))
                        return false;
        return n == INSTANCE_ID_LEN;
}

bool instance_name_is_valid(const char *name)
{
        return dns_label_is_valid(name);
}

bool instance_path_form_is_valid(const char *path)
{
        size_t n = path ? strlen(path) : 0;
        if (n == 0 || n > INSTANCE_PATH_MAX || path[0] != '/')
                return false;
        for (const char *c = path; *c;) {
                while (*c == '/')
                        c++;
                size_t len = strcspn(c, "/");
                if ((len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.'))
                        return false;
                c += len;
        }
        return true;
}
