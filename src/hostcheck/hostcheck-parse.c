/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The readers behind the host checks: /proc/cpuinfo, the driver version, QEMU's device list and
 * /proc/locks. Pure functions on text already read, so the unit tests feed them fixtures.
 */
#include "hostcheck.h"

#include <inttypes.h>
#include <sys/sysmacros.h>

/* The line [s, end of line) and where the next one starts. */
static const char *next_line(const char *s, size_t *ret_len)
{
        size_t n = strcspn(s, "\n");
        *ret_len = n;
        return s[n] ? s + n + 1 : s + n;
}

/* Whether the whitespace-separated word occurs in line[0..n). */
static bool line_has_word(const char *line, size_t n, const char *word)
{
        size_t w = strlen(word);
        for (size_t i = 0; i + w <= n; i++) {
                bool starts = i == 0 || line[i - 1] == ' ' || line[i - 1] == '\t';
                bool ends = i + w == n || line[i + w] == ' ' || line[i + w] == '\t';
                if (starts && ends && memcmp(line + i, word, w) == 0)
                        return true;
        }
        return false;
}

int host_check_parse_cpuinfo(const char *cpuinfo, const char **ret_flag, unsigned *ret_with,
                             unsigned *ret_cpus)
{
        /* Intel VT-x and AMD-V; vgpud runs x86-64 guests only (qemu-system-x86_64). */
        static const char *const flags[] = {"vmx", "svm"};
        unsigned with[ELEMENTSOF(flags)] = {}, cpus = 0;

        for (const char *p = cpuinfo; *p;) {
                size_t n;
                const char *line = p;
                p = next_line(p, &n);
                /* "flags\t\t: fpu vme ..." once per CPU; "vmx flags" lines are something else. */
                if (n < 5 || memcmp(line, "flags", 5) != 0)
                        continue;
                size_t colon = 5 + strspn(line + 5, " \t");
                if (colon >= n || line[colon] != ':')
                        continue;
                cpus++;
                for (size_t i = 0; i < ELEMENTSOF(flags); i++)
                        with[i] += line_has_word(line, n, flags[i]);
        }
        if (cpus == 0)
                return -ENOENT;
        for (size_t i = 0; i < ELEMENTSOF(flags); i++)
                if (with[i] > 0) {
                        *ret_flag = flags[i];
                        *ret_with = with[i];
                        *ret_cpus = cpus;
                        return 0;
                }
        return -ENXIO;
}

int host_check_parse_driver_branch(const char *version, unsigned *ret)
{
        /* "<branch>.<minor>[.<patch>]", as module/nvidia/version and NVML print it. */
        size_t n = strspn(version, "0123456789");
        if (n == 0 || n > 4 || version[n] != '.' || !version[n + 1])
                return -EINVAL;
        unsigned branch = 0;
        for (size_t i = 0; i < n; i++)
                branch = branch * 10 + (unsigned)(version[i] - '0');
        *ret = branch;
        return 0;
}

bool host_check_qemu_lists_device(const char *help, const char *device)
{
        /* QEMU prints one device a line: `name "vfio-pci", bus PCI, desc "..."`. */
        _cleanup_free_ char *needle = NULL;
        if (strprintf(&needle, "name \"%s\"", device) < 0)
                return false;
        size_t w = strlen(needle);
        for (const char *p = help; *p;) {
                size_t n;
                const char *line = p;
                p = next_line(p, &n);
                line += strspn(line, " \t");
                if ((size_t)(p - line) >= w && memcmp(line, needle, w) == 0 &&
                    (line[w] == ',' || line[w] == '\n' || line[w] == '\0'))
                        return true;
        }
        return false;
}

/*
 * One /proc/locks line: "<id>: [-> ]<class> <ADVISORY|MANDATORY> <READ|WRITE|UNLCK> <pid>
 * <maj>:<min>:<ino> <start> <end>", major and minor in hex, the inode in decimal. A "->" line
 * is a waiter, not a holder.
 */
static bool lock_line_matches(char *line, dev_t dev, ino_t ino, pid_t *ret_pid)
{
        char *save = NULL, *words[8];
        size_t n = 0;
        for (char *w = strtok_r(line, " \t", &save); w && n < ELEMENTSOF(words);
             w = strtok_r(NULL, " \t", &save))
                words[n++] = w;
        if (n < 6 || !streq(words[1], "FLOCK") || !streq(words[3], "WRITE"))
                return false;

        unsigned maj, min;
        uint64_t file_ino, pid;
        int used = 0;
        if (sscanf(words[5], "%x:%x:%" SCNu64 "%n", &maj, &min, &file_ino, &used) != 3 ||
            words[5][used] != '\0' || parse_uint64(words[4], &pid) < 0 || pid > INT32_MAX)
                return false;
        if (maj != major(dev) || min != minor(dev) || file_ino != (uint64_t)ino)
                return false;
        *ret_pid = (pid_t)pid;
        return true;
}

int host_check_find_flock(const char *locks, dev_t dev, ino_t ino, pid_t *ret_pid)
{
        for (const char *p = locks; *p;) {
                size_t n;
                const char *line = p;
                p = next_line(p, &n);
                _cleanup_free_ char *copy = strndup(line, n);
                if (!copy)
                        return -ENOMEM;
                pid_t pid;
                if (lock_line_matches(copy, dev, ino, &pid)) {
                        *ret_pid = pid;
                        return 1;
                }
        }
        return 0;
}
