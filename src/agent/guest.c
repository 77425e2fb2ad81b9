/* SPDX-License-Identifier: GPL-2.0-or-later */
#include "agent/guest.h"

#include <fcntl.h>

/* A sysfs value is one short line; anything longer is not the file we mean. */
#define GUEST_VALUE_MAX 256

static DIR *open_dir_under(const char *root, const char *rel)
{
        _cleanup_free_ char *path = NULL;
        if (strprintf(&path, "%s/%s", root, rel) < 0) {
                errno = ENOMEM;
                return NULL;
        }
        return opendir(path);
}

/* True when <dir>/<entry>/<file> reads exactly value, with at most one trailing newline. */
static bool entry_value_is(DIR *d, const char *entry, const char *file, const char *value)
{
        _cleanup_free_ char *rel = NULL, *text = NULL;
        size_t size;

        if (strprintf(&rel, "%s/%s", entry, file) < 0)
                return false;
        if (read_file_at(dirfd(d), rel, GUEST_VALUE_MAX, &text, &size) < 0)
                return false;
        if (size > 0 && text[size - 1] == '\n')
                text[--size] = 0;
        return strlen(text) == size && streq(text, value);
}

int guest_find_port_entry(const char *pci_root, char **ret)
{
        _cleanup_closedir_ DIR *d = open_dir_under(pci_root, "class/virtio-ports");
        if (!d)
                return errno == ENOMEM ? -ENOMEM : -ENOENT;

        _cleanup_free_ char *best = NULL;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (de->d_name[0] == '.')
                        continue;
                if (!entry_value_is(d, de->d_name, "name", AGENT_PORT_NAME))
                        continue;
                if (best && strcmp(de->d_name, best) >= 0)
                        continue;
                char *copy = strdup(de->d_name);
                if (!copy)
                        return -ENOMEM;
                free(best);
                best = copy;
        }
        if (!best)
                return -ENOENT;
        *ret = TAKE_PTR(best);
        return 0;
}

int guest_has_nvidia_device(const char *pci_root)
{
        _cleanup_closedir_ DIR *d = open_dir_under(pci_root, "bus/pci/devices");
        if (!d)
                return negative_errno();

        struct dirent *de;
        while ((de = readdir(d)))
                if (de->d_name[0] != '.' && entry_value_is(d, de->d_name, "vendor", NVIDIA_VENDOR))
                        return 1;
        return 0;
}
