/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * kmsg records as vgpu-agent reads them (REL-5, AGENT-6). The input is cut into lines as the
 * watcher cuts a stream, and every line goes to the matcher. Invariants beyond "no crash": the
 * matcher agrees with a second, plainly written reading of AGENT-6's rule, and a message it
 * returns is the record's trimmed message, printable ASCII (it goes into a JSON string and a
 * log line), starting with "NVRM:" and holding "RmInitAdapter failed!".
 */
#include "agent/kmsg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* AGENT-6 read word by word: a second implementation to compare with. */
static bool rule_says_match(const char *line, size_t n)
{
        if (n == 0 || line[0] == ' ')
                return false;
        size_t semi = 0;
        while (semi < n && line[semi] != ';')
                semi++;
        if (semi == n)
                return false;
        size_t comma = 0;
        while (comma < semi && line[comma] != ',')
                comma++;
        if (comma == semi || comma == 0 || comma > 10)
                return false;
        uint64_t v = 0;
        for (size_t i = 0; i < comma; i++) {
                if (line[i] < '0' || line[i] > '9')
                        return false;
                v = v * 10 + (uint64_t)(line[i] - '0');
        }
        if (v > 7)
                return false;
        size_t b = semi + 1, e = n;
        while (b < e && strchr(" \t\r\n\v\f", line[b]) && line[b])
                b++;
        while (e > b && strchr(" \t\r\n\v\f", line[e - 1]) && line[e - 1])
                e--;
        if (e - b < 5 || memcmp(line + b, "NVRM:", 5) != 0)
                return false;
        const char *phrase = "RmInitAdapter failed!";
        size_t pl = strlen(phrase);
        for (size_t i = b; i + pl <= e; i++)
                if (memcmp(line + i, phrase, pl) == 0)
                        return true;
        return false;
}

static void check_line(const char *line, size_t n)
{
        char *message = NULL;
        int r = kmsg_record_match(line, n, &message);
        if (r < 0)
                return; /* out of memory */
        if ((r == 1) != rule_says_match(line, n))
                abort();
        if (r == 0) {
                if (message)
                        abort();
                return;
        }
        if (!message || !startswith(message, "NVRM:") || !strstr(message, "RmInitAdapter failed!"))
                abort();
        for (const char *p = message; *p; p++)
                if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
                        abort();
        /* nothing but escapes were added: unescaped, it is no longer than the line */
        if (strlen(message) > 4 * n)
                abort();
        free(message);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        const char *s = (const char *)data;
        size_t start = 0;

        /* The whole input as one record's first line, then line by line as a stream. */
        check_line(s, size);
        for (size_t i = 0; i <= size; i++)
                if (i == size || s[i] == '\n') {
                        if (i > start || i < size)
                                check_line(s + start, i - start);
                        start = i + 1;
                }
        return 0;
}
