/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * What instance-record.c shares with instance-files.c, and nothing else: the checked encoder
 * behind instance_record_to_json() (with its message, for the save path) and INST-6's form.
 */

#include "instances.h"

/*
 * instance_record_to_json() with a message: refuses (-EINVAL) a record that would not load
 * again, so that a file we write is always one we can read.
 */
int instance_record_encode(const InstanceRecord *r, char **ret, size_t *ret_size, char **error);

/* INST-6's form of a path: absolute, at most INSTANCE_PATH_MAX bytes, no "." or ".." component. */
bool instance_path_form_is_valid(const char *path);
