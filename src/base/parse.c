/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <arpa/inet.h>
#include <stdio.h>

#include "base.h"

#include <sys/random.h>

static bool is_digit(char c)
{
        return c >= '0' && c <= '9';
}

/* Reads a run of digits at *p, advancing it; -EINVAL when there is none. */
static int take_digits(const char **p, uint64_t *ret)
{
        const char *s = *p;
        uint64_t v = 0;

        if (!is_digit(*s))
                return -EINVAL;
        for (; is_digit(*s); s++) {
                unsigned d = (unsigned)(*s - '0');
                if (v > (UINT64_MAX - d) / 10)
                        return -ERANGE;
                v = v * 10 + d;
        }
        *p = s;
        *ret = v;
        return 0;
}

int parse_uint64(const char *s, uint64_t *ret)
{
        uint64_t v;

        if (!s)
                return -EINVAL;
        int r = take_digits(&s, &v);
        if (r < 0)
                return r;
        if (*s)
                return -EINVAL;
        *ret = v;
        return 0;
}

int parse_uint64_range(const char *s, uint64_t min, uint64_t max, uint64_t *ret)
{
        uint64_t v;
        int r = parse_uint64(s, &v);
        if (r < 0)
                return r;
        if (v < min || v > max)
                return -ERANGE;
        *ret = v;
        return 0;
}

int parse_uint32(const char *s, uint32_t *ret)
{
        uint64_t v;
        int r = parse_uint64_range(s, 0, UINT32_MAX, &v);
        if (r < 0)
                return r;
        *ret = (uint32_t)v;
        return 0;
}

int hex_value(char c)
{
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -EINVAL;
}

int hex_value_lower(char c)
{
        return c >= 'A' && c <= 'F' ? -EINVAL : hex_value(c);
}

/* Reads exactly n lowercase hex digits. */
static int take_hex(const char **p, size_t n, unsigned *ret)
{
        unsigned v = 0;
        for (size_t i = 0; i < n; i++) {
                int d = hex_value_lower((*p)[i]); /* uppercase is not canonical */
                if (d < 0)
                        return -EINVAL;
                v = v * 16 + (unsigned)d;
        }
        *p += n;
        *ret = v;
        return 0;
}

int parse_pci_address(const char *s, PciAddress *ret)
{
        unsigned domain, bus, device;

        if (!s || strlen(s) != PCI_ADDRESS_STRLEN - 1)
                return -EINVAL;
        if (take_hex(&s, 4, &domain) < 0 || *s++ != ':' || take_hex(&s, 2, &bus) < 0 ||
            *s++ != ':' || take_hex(&s, 2, &device) < 0 || *s++ != '.')
                return -EINVAL;
        if (*s < '0' || *s > '7')
                return -EINVAL;
        /* The regex allows any two hex digits for the device, as Linux names them. */
        *ret = (PciAddress){
            .domain = (uint16_t)domain,
            .bus = (uint8_t)bus,
            .device = (uint8_t)device,
            .function = (uint8_t)(*s - '0'),
        };
        return 0;
}

bool uuid_text_is_valid(const char *s, size_t n, bool lowercase_only)
{
        if (n != UUID_STRLEN - 1)
                return false;
        for (size_t i = 0; i < n; i++) {
                bool dash = i == 8 || i == 13 || i == 18 || i == 23;
                if (dash ? s[i] != '-'
                         : (lowercase_only ? hex_value_lower(s[i]) : hex_value(s[i])) < 0)
                        return false;
        }
        return true;
}

bool uuid_is_lowercase(const char *s)
{
        return s && uuid_text_is_valid(s, strlen(s), true);
}

bool pci_address_is_valid(const char *s)
{
        PciAddress a;
        return parse_pci_address(s, &a) >= 0;
}

bool mac_address_is_valid(const char *s)
{
        if (!s || strlen(s) != 17)
                return false;
        for (size_t i = 0; i < 17; i++)
                if (i % 3 == 2 ? s[i] != ':' : hex_value_lower(s[i]) < 0)
                        return false;
        return true;
}

int parse_ipv4(const char *s, uint32_t *ret)
{
        struct in_addr a;
        char again[INET_ADDRSTRLEN];
        if (!s || inet_pton(AF_INET, s, &a) != 1 || !inet_ntop(AF_INET, &a, again, sizeof again) ||
            !streq(again, s))
                return -EINVAL;
        *ret = ntohl(a.s_addr);
        return 0;
}

char *format_ipv4(uint32_t addr, char buf[static IPV4_STRLEN])
{
        snprintf(buf, IPV4_STRLEN, "%u.%u.%u.%u", addr >> 24, (addr >> 16) & 0xff,
                 (addr >> 8) & 0xff, addr & 0xff);
        return buf;
}

int parse_ipv4_network(const char *s, unsigned min_prefix, unsigned max_prefix, uint32_t *ret,
                       unsigned *ret_prefix)
{
        const char *slash = s ? strchr(s, '/') : NULL;
        if (!slash || (size_t)(slash - s) >= IPV4_STRLEN)
                return -EINVAL;
        char addr[IPV4_STRLEN];
        memcpy(addr, s, (size_t)(slash - s));
        addr[slash - s] = 0;
        uint32_t a, prefix;
        if (parse_ipv4(addr, &a) < 0 || parse_uint32(slash + 1, &prefix) < 0 ||
            (slash[1] == '0' && slash[2]))
                return -EINVAL;
        if (prefix < min_prefix || prefix > max_prefix || prefix > 32)
                return -ERANGE;
        uint32_t host_mask = prefix == 0 ? UINT32_MAX : prefix == 32 ? 0 : UINT32_MAX >> prefix;
        if (a & host_mask)
                return -EADDRNOTAVAIL;
        *ret = a;
        *ret_prefix = prefix;
        return 0;
}

bool ifname_is_valid(const char *s)
{
        size_t n = s ? strlen(s) : 0;
        if (n == 0 || n > IFNAME_MAX || streq(s, ".") || streq(s, ".."))
                return false;
        for (const char *c = s; *c; c++)
                if ((unsigned char)*c <= 0x20 || (unsigned char)*c >= 0x7f || *c == '/' ||
                    *c == ':')
                        return false;
        return true;
}

int parse_port_range(const char *s, uint16_t *ret_lo, uint16_t *ret_hi)
{
        const char *dash = s ? strchr(s, '-') : NULL;
        if (!dash || dash == s || (size_t)(dash - s) > 5)
                return -EINVAL;
        char lo_s[6];
        memcpy(lo_s, s, (size_t)(dash - s));
        lo_s[dash - s] = 0;
        uint64_t lo, hi;
        int r = parse_uint64_range(lo_s, 1, UINT16_MAX, &lo);
        if (r >= 0)
                r = parse_uint64_range(dash + 1, 1, UINT16_MAX, &hi);
        if (r < 0)
                return r;
        /* Leading zeros would give one range two spellings. */
        if (lo_s[0] == '0' || dash[1] == '0')
                return -EINVAL;
        if (lo > hi)
                return -ERANGE;
        *ret_lo = (uint16_t)lo;
        *ret_hi = (uint16_t)hi;
        return 0;
}

static bool is_ascii_letter(char c)
{
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

bool qemu_id_is_valid(const char *s)
{
        size_t n = s ? strlen(s) : 0;
        if (n == 0 || n > 31 || !is_ascii_letter(s[0]))
                return false;
        for (const char *p = s; *p; p++)
                if (!is_ascii_letter(*p) && !(*p >= '0' && *p <= '9') && *p != '-' && *p != '.' &&
                    *p != '_')
                        return false;
        return true;
}

int random_id_generate(char ret[static RANDOM_ID_LEN + 1])
{
        static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
        /*
         * 252 is the largest multiple of 36 that fits a byte: bytes at or above it are dropped,
         * so that byte % 36 gives every character the same chance (no modulo bias).
         */
        const unsigned n_alphabet = sizeof alphabet - 1, limit = 256 / n_alphabet * n_alphabet;
        char id[RANDOM_ID_LEN + 1];
        size_t n = 0;

        while (n < RANDOM_ID_LEN) {
                uint8_t buf[32];
                ssize_t k = getrandom(buf, sizeof buf, 0);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return negative_errno();
                }
                if (k == 0)
                        return -EIO;
                for (ssize_t i = 0; i < k && n < RANDOM_ID_LEN; i++)
                        if (buf[i] < limit)
                                id[n++] = alphabet[buf[i] % n_alphabet];
        }
        id[n] = 0;
        memcpy(ret, id, sizeof id);
        return 0;
}

bool random_id_is_valid(const char *id)
{
        size_t n = 0;
        for (; id && id[n]; n++)
                if (n >= RANDOM_ID_LEN ||
                    !((id[n] >= 'a' && id[n] <= 'z') || (id[n] >= '0' && id[n] <= '9')))
                        return false;
        return id && n == RANDOM_ID_LEN;
}

bool resource_name_is_valid(const char *name)
{
        size_t n = name ? strlen(name) : 0;
        if (n == 0 || n > RESOURCE_NAME_MAX)
                return false;
        for (size_t i = 0; i < n; i++) {
                bool alnum =
                    (name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9');
                if (!alnum && (name[i] != '-' || i == 0 || i == n - 1))
                        return false;
        }
        return true;
}

bool host_path_form_is_valid(const char *path)
{
        size_t n = path ? strlen(path) : 0;
        if (n == 0 || n > HOST_PATH_MAX || path[0] != '/')
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

char *pci_address_format(const PciAddress *a, char buf[static PCI_ADDRESS_STRLEN])
{
        snprintf(buf, PCI_ADDRESS_STRLEN, "%04x:%02x:%02x.%u", a->domain, a->bus, a->device,
                 a->function & 7u);
        return buf;
}

int parse_duration(const char *s, nsec_t *ret)
{
        static const struct {
                const char *suffix;
                nsec_t unit;
        } units[] = {
            /* "ms" before "m", so the longer suffix wins */
            {"ms", NSEC_PER_MSEC},
            {"s", NSEC_PER_SEC},
            {"m", NSEC_PER_MIN},
            {"h", NSEC_PER_HOUR},
        };
        nsec_t total = 0;
        size_t last = ELEMENTSOF(units); /* units strictly decrease: "1m1m", "1s1m" are no time */

        if (!s || !*s)
                return -EINVAL;
        while (*s) {
                uint64_t v;
                int r = take_digits(&s, &v);
                if (r < 0)
                        return r;

                size_t i;
                for (i = 0; i < ELEMENTSOF(units); i++)
                        if (startswith(s, units[i].suffix))
                                break;
                if (i >= last)
                        return -EINVAL;
                last = i;
                s += strlen(units[i].suffix);

                if (v > UINT64_MAX / units[i].unit || total > UINT64_MAX - v * units[i].unit)
                        return -ERANGE;
                total += v * units[i].unit;
        }
        *ret = total;
        return 0;
}

/* Writes v's decimal digits ending just before buf[w]; returns the new start. */
static size_t put_int(char *buf, size_t w, uint64_t v)
{
        do {
                buf[--w] = (char)('0' + v % 10);
                v /= 10;
        } while (v > 0);
        return w;
}

/* Writes the prec-digit fraction of v without trailing zeros (and no dot when it is zero). */
static size_t put_frac(char *buf, size_t w, uint64_t *v, int prec)
{
        bool print = false;
        for (int i = 0; i < prec; i++) {
                unsigned digit = (unsigned)(*v % 10);
                print = print || digit != 0;
                if (print)
                        buf[--w] = (char)('0' + digit);
                *v /= 10;
        }
        if (print)
                buf[--w] = '.';
        return w;
}

char *format_duration(nsec_t d, char buf[static DURATION_STRLEN])
{
        char tmp[DURATION_STRLEN];
        size_t w = sizeof tmp;
        uint64_t u = d;

        tmp[--w] = 0;
        tmp[--w] = 's';
        if (u < NSEC_PER_SEC) {
                int prec;
                if (u == 0) {
                        tmp[--w] = '0';
                        return memcpy(buf, tmp + w, sizeof tmp - w);
                } else if (u < NSEC_PER_USEC) {
                        prec = 0;
                        tmp[--w] = 'n';
                } else if (u < NSEC_PER_MSEC) {
                        /*
                         * Go writes the micro sign; logfmt escapes every byte above ASCII, so
                         * log lines would read "\xc2\xb5s". "us", which Go also parses, reads
                         * the same in the log, the API and the journal (GEN-12).
                         */
                        prec = 3;
                        tmp[--w] = 'u';
                } else {
                        prec = 6;
                        tmp[--w] = 'm';
                }
                w = put_frac(tmp, w, &u, prec);
                w = put_int(tmp, w, u);
        } else {
                w = put_frac(tmp, w, &u, 9);
                w = put_int(tmp, w, u % 60);
                u /= 60;
                if (u > 0) {
                        tmp[--w] = 'm';
                        w = put_int(tmp, w, u % 60);
                        u /= 60;
                        if (u > 0) {
                                tmp[--w] = 'h';
                                w = put_int(tmp, w, u);
                        }
                }
        }
        return memcpy(buf, tmp + w, sizeof tmp - w);
}
