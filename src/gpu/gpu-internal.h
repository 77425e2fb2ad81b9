/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* Helpers shared by the files of the gpu module; not part of its interface. */

#include <stddef.h>

/*
 * Copies n bytes of outside input into a NUL-terminated string fit for a message: printable
 * ASCII stays, '"' and '\' get a backslash, every other byte becomes \xNN. NULL on ENOMEM.
 */
char *gpu_escape(const char *s, size_t n);
