/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * What instance-record.c shares with instance-files.c and instance-devices.c, and nothing else:
 * the checked encoder behind instance_record_to_json() (with its message, for the save path),
 * INST-6's form, and the record's device fields (disk, volumes, network, cloud_init), which
 * instance-devices.c reads, writes, copies and frees for instance-record.c.
 */

#include <jansson.h>

#include "base/json-util.h"
#include "instances.h"

/*
 * instance_record_to_json() with a message: refuses (-EINVAL) a record that would not load
 * again, so that a file we write is always one we can read.
 */
int instance_record_encode(const InstanceRecord *r, char **ret, size_t *ret_size, char **error);

/* INST-6's form of a path: absolute, at most INSTANCE_PATH_MAX bytes, no "." or ".." component. */
bool instance_path_form_is_valid(const char *path);

/* Adds value under key unless it is NULL (INST-2: absent values are omitted); -EINVAL when it
 * is not UTF-8. */
int instance_json_put_string(json_t *o, const char *key, const char *value);
/* Adds child under key, taking it over; an empty object or array is omitted (INST-2). */
int instance_json_put_child(json_t *o, const char *key, json_t *child);

/* ---- the device fields (instance-devices.c) ---- */

typedef struct InstanceDiskView {
        const char *image;
        json_int_t size_gb;
} InstanceDiskView;

typedef struct InstanceVolumeView {
        const char *id, *state;
        bool readonly;
} InstanceVolumeView;

typedef struct InstancePortView {
        json_int_t host, guest;
        const char *protocol;
} InstancePortView;

typedef struct InstanceNetworkView {
        const char *mode, *bridge, *mac, *ip, *gateway;
        json_int_t prefix;
        json_t *dns, *ports;
} InstanceNetworkView;

/* The record's view of its device fields: each object, and what its table read from it. */
typedef struct InstanceDevicesView {
        json_t *disk, *volumes, *network, *cloud_init;
        InstanceDiskView disk_v;
        InstanceNetworkView network_v;
} InstanceDevicesView;

/* The tables the record's own table refers to, and the check of each volume. */
extern const JsonField instance_disk_fields[];
extern const JsonField instance_volume_fields[];
extern const JsonField instance_network_fields[];
/* NET-1: the create body's "network" (instance_network_fields without the derived mac). */
extern const JsonField instance_network_body_fields[];
/*
 * The network object o, as a table read it into v, checked (the mode's name, interface name,
 * MAC and address forms, the prefix's range) into *ret; code and a message naming the field on
 * failure.
 */
int instance_network_from_view(const InstanceNetworkView *v, json_t *o, int code,
                               InstanceNetwork *ret, char **error);
/*
 * NET-1's rules within a create body (instance-network.c): a bridge only and always in bridge
 * mode; ip, prefix, gateway and dns only in bridge mode, ip and prefix together, gateway and dns
 * only with them; ports only in nat mode, each host port and protocol once. The rules that need
 * the configuration or the other records are instance_network_plan()'s.
 */
int instance_network_body_check(const InstanceNetwork *n, int code, char **error);
int instance_volume_check(const void *element, const char *path, void *view, int code,
                          char **error);

/* The record's table entries of the device fields, for a view type holding an
 * InstanceDevicesView as member. */
#define INSTANCE_DEVICE_FIELDS(type, member)                                             \
        {"disk",                                                                         \
         JSON_FIELD_OBJECT,                                                              \
         false,                                                                          \
         JSON_AT(type, member.disk),                                                     \
         .fields = instance_disk_fields,                                                 \
         .nested_offset = JSON_AT(type, member.disk_v)},                                 \
            {"volumes",                                                                  \
             JSON_FIELD_ARRAY,                                                           \
             false,                                                                      \
             JSON_AT(type, member.volumes),                                              \
             .max = INSTANCE_VOLUMES_MAX,                                                \
             .element_type = JSON_FIELD_OBJECT,                                          \
             .element_fields = instance_volume_fields,                                   \
             .element_size = sizeof(InstanceVolumeView),                                 \
             .each = instance_volume_check},                                             \
            {"network",                                                                  \
             JSON_FIELD_OBJECT,                                                          \
             false,                                                                      \
             JSON_AT(type, member.network),                                              \
             .fields = instance_network_fields,                                          \
             .nested_offset = JSON_AT(type, member.network_v)},                          \
        {                                                                                \
                /* SEED-1: read and checked by the seed module, the one validator */     \
                "cloud_init", JSON_FIELD_OBJECT, false, JSON_AT(type, member.cloud_init) \
        }

/* Takes the device fields the table read into r, after checking their values. */
int instance_devices_from_view(const InstanceDevicesView *v, int code, InstanceRecord *r,
                               char **error);
/* Adds r's device fields to the record object root, in INST-2's order. */
int instance_devices_to_json(json_t *root, const InstanceRecord *r);
/* Deep copy into to (whose device fields are empty); -ENOMEM. */
int instance_devices_copy(const InstanceRecord *from, InstanceRecord *to);
/* Frees r's device fields and empties them. */
void instance_devices_done(InstanceRecord *r);
