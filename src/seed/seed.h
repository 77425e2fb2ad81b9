/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * seed: the cloud-init NoCloud seed of an instance (SPEC SEED-1, SEED-2, SEED-3, SEED-4).
 *
 * It knows nothing of instances: the caller hands it the instance's id, the guest's host name,
 * the create body's `cloud_init` and the NIC's facts, and gets back the seed's files and the
 * ISO that carries them. Three parts:
 *
 *  - validation (SEED-1): a create body's `cloud_init` object, strictly, with INST-7's messages
 *    naming the field (`cloud_init.ssh_authorized_keys[2] ...`);
 *  - rendering (SEED-2, SEED-3): `meta-data`, `user-data`, `network-config` and the optional
 *    `vendor-data`. Every YAML document is emitted by libyaml's emitter, each scalar as a
 *    plain value whose text is the input's (quoted by the emitter wherever YAML needs it), so
 *    no input can add a key, a document or a comment. Pure functions: no file, no clock;
 *  - the ISO (SEED-2): ISO 9660 with Joliet and Rock Ridge, volume id `cidata`, written
 *    crash-safely (tmp, fsync, rename, fsync of the directory) to a directory fd and a name.
 *    Blocking: run it on a worker (the disk pool).
 *
 * And SEED-4's view of the record for `GET /instances/{id}`: the keys' fingerprints, and
 * whether user data was given, never the data.
 *
 * Promises: int returns are >= 0 or -errno; functions taking `char **error` set it on every
 * failure; out-parameters are written only on success.
 */

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/base.h"

#define SEED_SSH_KEYS_MAX 64                /* SEED-1 */
#define SEED_SSH_KEY_MAX 16384              /* SEED-1: bytes of one key line */
#define SEED_USER_DATA_MAX 65536            /* SEED-1: bytes */
#define SEED_VENDOR_DATA_MAX 65536          /* cloud_init.vendor_data_file (CFG-3 table), bytes */
#define SEED_VOLUME_ID "cidata"             /* SEED-2: what NoCloud looks for */
#define SEED_SEARCH_DOMAIN "vgpud.internal" /* SEED-3 */

/* ---- SEED-1: the create body's cloud_init ---------------------------------------------------- */

typedef struct SeedCloudInit {
        char **ssh_authorized_keys; /* NULL-terminated; NULL when none */
        char *user_data;            /* NULL when not given */
        char *hostname;             /* NULL when not given (the instance name is used) */
} SeedCloudInit;

/* Frees the members (not c itself) and zeroes c; c may be NULL. */
void seed_cloud_init_done(SeedCloudInit *c);

/* A deep copy into *ret; -ENOMEM. */
int seed_cloud_init_copy(const SeedCloudInit *c, SeedCloudInit *ret);

/* Whether anything was given: an empty object is the same as none. */
bool seed_cloud_init_is_empty(const SeedCloudInit *c);

/*
 * Reads a create body's `cloud_init` object (SEED-1): only the keys ssh_authorized_keys (an
 * array of strings), user_data and hostname (strings), each as seed_cloud_init_check() says.
 * path names the object in messages ("cloud_init"). Failures: code (the caller's, -EINVAL for
 * a 400), with a message naming the field; -ENOMEM.
 */
int seed_cloud_init_from_json(json_t *o, const char *path, int code, SeedCloudInit *ret,
                              char **error);

/*
 * SEED-1's rules on values already read (a record's, or a body's through the function above):
 *  - each key is one OpenSSH public key line, at most SEED_SSH_KEY_MAX bytes: a type
 *    (ssh-ed25519, ssh-rsa, ecdsa-sha2-nistp256|384|521, sk-ssh-ed25519@openssh.com,
 *    sk-ecdsa-sha2-nistp256@openssh.com), one space, the key in padded base64 whose decoded
 *    blob starts with the same type, then optionally one space and a comment of UTF-8 without
 *    control characters; at most SEED_SSH_KEYS_MAX keys;
 *  - user_data: at most SEED_USER_DATA_MAX bytes of UTF-8 without NUL, starting with
 *    `#cloud-config`, `#!` or `Content-Type: multipart/`; and not together with keys;
 *  - hostname as INST-4.
 * Returns 0, or code with a message naming path's field.
 */
int seed_cloud_init_check(const SeedCloudInit *c, const char *path, int code, char **error);

/* One key line by the rule above; code and a message naming path (`cloud_init.ssh_...[1]`). */
int seed_ssh_key_check(const char *key, const char *path, int code, char **error);

/* ---- SEED-4: what GET /instances/{id} shows ------------------------------------------------- */

/*
 * The fingerprint of a key line that passed seed_ssh_key_check(), as `ssh-keygen -l` prints it:
 * "SHA256:" and the SHA-256 of the decoded key blob in base64 without padding. -EINVAL for a
 * line that does not pass, -ENOMEM.
 */
int seed_ssh_key_fingerprint(const char *key, char **ret);

/*
 * The `cloud_init` object of an instance's JSON: {"hostname"?, "ssh_authorized_keys":
 * [{"type", "fingerprint", "comment"?}...] (omitted when none), "user_data": true|false}.
 * Never the user data itself (it may hold secrets). c may be NULL (no cloud_init given):
 * {"user_data": false}. NULL when out of memory (or a stored key no longer parses).
 */
json_t *seed_cloud_init_to_json(const SeedCloudInit *c);

/* ---- SEED-2, SEED-3: the seed's files ------------------------------------------------------- */

typedef enum SeedNetworkMode {
        SEED_NETWORK_NONE,   /* no NIC: network-config lists none */
        SEED_NETWORK_NAT,    /* vgpud's NAT bridge: static address, gateway, vgpud.internal */
        SEED_NETWORK_BRIDGE, /* an operator's bridge: static values when given, else DHCP */
} SeedNetworkMode;

/*
 * The NIC's facts, as the record's `network` holds them (NET-1, NET-2, NET-5); borrowed
 * strings. For NAT: mac, ip, prefix and gateway are required. For bridge: mac is required; ip
 * with prefix makes it static (gateway and dns optional), no ip means DHCP. For none: nothing.
 */
typedef struct SeedNetwork {
        SeedNetworkMode mode;
        const char *mac;     /* "52:54:00:.." as QEMU gets it */
        const char *ip;      /* IPv4 dotted quad, or NULL */
        unsigned prefix;     /* 1..32 with ip */
        const char *gateway; /* IPv4, or NULL */
        char *const *dns;    /* NULL-terminated IPv4 addresses, or NULL */
} SeedNetwork;

/* What the seed is made from; borrowed. */
typedef struct SeedInput {
        const char *instance_id;         /* meta-data instance-id (INST-3) */
        const char *hostname;            /* INST-4: cloud_init.hostname, else the instance name */
        const SeedCloudInit *cloud_init; /* may be NULL */
        SeedNetwork network;
        const char *vendor_data; /* the operator's text, or NULL for no vendor-data file */
} SeedInput;

typedef struct SeedFile {
        char *data; /* NUL-terminated; NULL when the file is not part of the seed */
        size_t size;
} SeedFile;

typedef struct SeedFiles {
        SeedFile meta_data, user_data, network_config, vendor_data;
} SeedFiles;

void seed_files_done(SeedFiles *f);

/*
 * Renders every file of the seed (SEED-2, SEED-3):
 *  - meta-data: {instance-id, local-hostname};
 *  - user-data: cloud_init.user_data verbatim, else "#cloud-config" and a document with
 *    hostname and, when given, ssh_authorized_keys;
 *  - network-config: version 2 (SEED-3);
 *  - vendor-data: input->vendor_data verbatim, when given.
 * Input that breaks seed_cloud_init_check() or the network's rules above fails with -EINVAL
 * and a message; -ENOMEM.
 */
int seed_render(const SeedInput *input, SeedFiles *ret, char **error);

/* The single documents, for tests and for callers that need one. */
int seed_render_meta_data(const char *instance_id, const char *hostname, SeedFile *ret,
                          char **error);
int seed_render_user_data(const SeedCloudInit *c, const char *hostname, SeedFile *ret,
                          char **error);
int seed_render_network_config(const SeedNetwork *n, SeedFile *ret, char **error);

/*
 * Reads the operator's vendor-data file (an absolute path from the configuration): a regular
 * file of at most SEED_VENDOR_DATA_MAX bytes without NUL. Blocking (a worker's job).
 */
int seed_read_vendor_data(const char *path, char **ret, char **error);

/* ---- SEED-2: the ISO ------------------------------------------------------------------------ */

/* A seed ISO is small; this bounds its buffer (the files' caps plus the filesystem's own). */
#define SEED_ISO_MAX (4 * 1024 * 1024)

/*
 * The ISO 9660 image (Joliet and Rock Ridge, volume id `cidata`) holding the files, in memory.
 * -EIO with libisofs's message on failure, -EFBIG past SEED_ISO_MAX.
 */
int seed_iso_build(const SeedFiles *files, void **ret, size_t *ret_size, char **error);

/*
 * seed_iso_build(), then written crash-safely to dirfd/name (write_file_atomic_at(): name.tmp,
 * fsync, rename, fsync of dirfd), mode 0600: the old seed stays whole until the new one is.
 * Blocking: a worker's job.
 */
int seed_iso_write_at(int dirfd, const char *name, const SeedFiles *files, char **error);
