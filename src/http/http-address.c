/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Listen addresses and the sockets bound to them. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "http-internal.h"

int http_address_parse(const char *s, bool allow_port_zero, HttpAddress *ret)
{
        char host[INET6_ADDRSTRLEN];
        const char *port;
        bool v6 = s[0] == '[';

        if (v6) {
                const char *end = strchr(s, ']');
                if (!end || end[1] != ':' || (size_t)(end - s - 1) >= sizeof host)
                        return -EINVAL;
                memcpy(host, s + 1, (size_t)(end - s - 1));
                host[end - s - 1] = 0;
                port = end + 2;
        } else {
                const char *colon = strchr(s, ':');
                if (!colon || (size_t)(colon - s) >= sizeof host)
                        return -EINVAL;
                memcpy(host, s, (size_t)(colon - s));
                host[colon - s] = 0;
                port = colon + 1;
        }

        uint64_t p;
        int r = parse_uint64_range(port, allow_port_zero ? 0 : 1, 65535, &p);
        if (r < 0)
                return -EINVAL;

        /* inet_pton takes literals only (no host names, no IPv4 in octal or short forms). */
        HttpAddress a = {0};
        if (v6) {
                struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&a.sa;
                if (inet_pton(AF_INET6, host, &sin6->sin6_addr) != 1)
                        return -EINVAL;
                sin6->sin6_family = AF_INET6;
                sin6->sin6_port = htons((uint16_t)p);
                a.len = sizeof *sin6;
        } else {
                struct sockaddr_in *sin = (struct sockaddr_in *)&a.sa;
                if (inet_pton(AF_INET, host, &sin->sin_addr) != 1)
                        return -EINVAL;
                sin->sin_family = AF_INET;
                sin->sin_port = htons((uint16_t)p);
                a.len = sizeof *sin;
        }
        *ret = a;
        return 0;
}

char *http_address_format(const HttpAddress *a, char buf[static HTTP_ADDRESS_STRLEN])
{
        char host[INET6_ADDRSTRLEN] = "?";

        if (a->sa.ss_family == AF_INET6) {
                const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)&a->sa;
                inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof host);
                snprintf(buf, HTTP_ADDRESS_STRLEN, "[%s]:%u", host, ntohs(sin6->sin6_port));
        } else {
                const struct sockaddr_in *sin = (const struct sockaddr_in *)&a->sa;
                inet_ntop(AF_INET, &sin->sin_addr, host, sizeof host);
                snprintf(buf, HTTP_ADDRESS_STRLEN, "%s:%u", host, ntohs(sin->sin_port));
        }
        return buf;
}

int http_listen_tcp(const HttpAddress *a, int *ret_fd, HttpAddress *ret_bound)
{
        int family = a->sa.ss_family, one = 1;
        _cleanup_close_ int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return negative_errno();
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0)
                return negative_errno();
        /* "[::]:port" means IPv6 only; IPv4 clients get their own listen value. */
        if (family == AF_INET6 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) < 0)
                return negative_errno();
        if (bind(fd, (const struct sockaddr *)&a->sa, a->len) < 0)
                return negative_errno();
        if (listen(fd, SOMAXCONN) < 0)
                return negative_errno();

        HttpAddress bound = {.len = sizeof bound.sa};
        if (getsockname(fd, (struct sockaddr *)&bound.sa, &bound.len) < 0)
                return negative_errno();
        *ret_bound = bound;
        *ret_fd = TAKE_FD(fd);
        return 0;
}

/*
 * Whether a socket file is left over from an earlier run: nobody accepts on it. The daemon's
 * lock (CFG-9) already keeps a second vgpud away; this keeps a test or a misconfiguration from
 * taking over a socket that some other live server holds.
 */
static int unix_socket_is_stale(const struct sockaddr_un *sun)
{
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return negative_errno();
        if (connect(fd, (const struct sockaddr *)sun, sizeof *sun) == 0 || errno == EAGAIN)
                return false;
        return errno == ECONNREFUSED ? true : negative_errno();
}

int http_listen_unix(const char *path, mode_t mode, int *ret_fd, struct stat *ret_st)
{
        struct sockaddr_un sun = {.sun_family = AF_UNIX};

        if (path[0] != '/')
                return -EINVAL;
        if (strlen(path) >= sizeof sun.sun_path)
                return -ENAMETOOLONG;
        strcpy(sun.sun_path, path);

        struct stat st;
        if (lstat(path, &st) == 0) {
                if (!S_ISSOCK(st.st_mode))
                        return -EEXIST;
                int r = unix_socket_is_stale(&sun);
                if (r < 0)
                        return r;
                if (!r)
                        return -EADDRINUSE;
                if (unlink(path) < 0 && errno != ENOENT)
                        return negative_errno();
        } else if (errno != ENOENT)
                return negative_errno();

        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return negative_errno();
        if (bind(fd, (const struct sockaddr *)&sun, sizeof sun) < 0)
                return negative_errno();
        /*
         * The mode is set before listen(): until then nobody can connect, so the moment between
         * bind() (umask mode) and chmod() grants nothing. umask itself is process-wide and
         * other threads create files.
         */
        int r = 0;
        if (chmod(path, mode) < 0 || lstat(path, &st) < 0 || listen(fd, SOMAXCONN) < 0)
                r = negative_errno();
        if (r < 0) {
                (void)unlink(path);
                return r;
        }
        *ret_st = st;
        *ret_fd = TAKE_FD(fd);
        return 0;
}
