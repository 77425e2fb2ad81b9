/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The offline subcommands of vgpud. Each takes the arguments after its name (argv[0] is the
 * subcommand) and returns the process exit status.
 */

#include <stdarg.h>
#include <stdio.h>

#include "base/base.h"

/* The exit status of a command line the subcommand cannot take. */
#define COMMAND_EXIT_USAGE 2

/*
 * "vgpud <name>: <message>" and then the usage text on stderr; returns COMMAND_EXIT_USAGE, so a
 * subcommand can "return command_usage_error(...)".
 */
_printf_(3, 4) static inline int command_usage_error(const char *name, const char *usage,
                                                     const char *fmt, ...)
{
        va_list ap;

        fprintf(stderr, "vgpud %s: ", name);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fprintf(stderr, "\n%s", usage);
        return COMMAND_EXIT_USAGE;
}

int cmd_inventory(int argc, char **argv);
int cmd_health_check(int argc, char **argv);
/* Is this host ready for vgpud? (HOSTCHK-1) */
int cmd_host_check(int argc, char **argv);
/* The daemon itself: vgpud with options only (CFG-1, CFG-2). */
int cmd_daemon(int argc, char **argv);
/* vgpud --help: the synopsis, every option and every subcommand with its options. */
void vgpud_help(FILE *f);
