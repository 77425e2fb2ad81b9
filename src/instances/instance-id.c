/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The shapes of what names an instance (INST-3, INST-4): ids drawn from getrandom(), names, and
 * the form of a boot path before INST-6 looks at the file. An id is checked here before it ever
 * becomes a path.
 */
#include <string.h>

#include "instance-record-internal.h"

int instance_id_generate(char ret[static INSTANCE_ID_LEN + 1])
{
        return random_id_generate(ret);
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
        return resource_name_is_valid(name);
}

bool instance_path_form_is_valid(const char *path)
{
        return host_path_form_is_valid(path);
}
