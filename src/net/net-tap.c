/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * NET-3: the TAP, by TUNSETIFF on a descriptor of <dev_root>/net/tun. Never TUNSETPERSIST: the
 * device goes with its last descriptor, the one QEMU holds.
 */
#include <fcntl.h>
#include <linux/if_tun.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "net/net.h"

int net_tap_open(int dev_dirfd, const char *name, int *ret_fd, char **error)
{
        if (!name || !name[0] || strlen(name) >= IFNAMSIZ)
                return error_set(error, -EINVAL, "network: invalid TAP name");
        _cleanup_close_ int fd = openat_beneath(dev_dirfd, "net/tun", O_RDWR);
        if (fd < 0)
                return error_set(error, fd, "network: open TAP %s: <dev_root>/net/tun: %s", name,
                                 strerror(-fd));
        struct ifreq ifr = {.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR};
        memcpy(ifr.ifr_name, name, strlen(name));
        /*
         * TUNSETIFF attaches to an existing TAP of that name when the caller may: a TAP held by a
         * live VMM would then be shared. IFF_TUN_EXCL refuses instead (EBUSY).
         */
        ifr.ifr_flags |= IFF_TUN_EXCL;
        if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
                int r = errno == EBUSY ? -EEXIST : -errno;
                return error_set(error, r, "network: create TAP %s: %s", name,
                                 r == -EEXIST ? "an interface of that name exists" : strerror(-r));
        }
        *ret_fd = TAKE_FD(fd);
        return 0;
}

int net_tap_get_name(int fd, char ret[static IFNAMSIZ])
{
        struct ifreq ifr = {0};
        if (ioctl(fd, TUNGETIFF, &ifr) < 0)
                return errno == EINVAL || errno == ENOTTY || errno == EBADFD ? -EBADFD : -errno;
        if (!(ifr.ifr_flags & IFF_TAP))
                return -EBADFD;
        memcpy(ret, ifr.ifr_name, IFNAMSIZ);
        ret[IFNAMSIZ - 1] = 0;
        return 0;
}

int net_vhost_open(int dev_dirfd, int *ret_fd)
{
        int fd = openat_beneath(dev_dirfd, "vhost-net", O_RDWR | O_NONBLOCK);
        if (fd < 0)
                return fd;
        *ret_fd = fd;
        return 0;
}
