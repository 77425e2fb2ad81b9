/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vgpud: with a subcommand name first, one of the offline commands; otherwise (no arguments, or
 * options only) the daemon.
 */
#include <stdio.h>

#include "base/base.h"
#include "commands.h"
#include "config.h"

typedef struct Command {
        const char *name;
        int (*run)(int argc, char **argv);
        const char *usage;
} Command;

static const Command commands[] = {
    {"inventory", cmd_inventory, "inventory [--sysfs-root DIR] [--json]"},
    {"health-check", cmd_health_check, "health-check FILE [--threshold N]"},
};

static void usage(FILE *f)
{
        fprintf(f, "usage: vgpud [--config PATH] [--set KEY=VALUE]... [--check-config]\n"
                   "       vgpud --version\n");
        for (size_t i = 0; i < ELEMENTSOF(commands); i++)
                fprintf(f, "       vgpud %s\n", commands[i].usage);
}

int main(int argc, char **argv)
{
        if (argc >= 2 && streq(argv[1], "--help")) {
                usage(stdout);
                return 0;
        }
        for (size_t i = 0; argc >= 2 && i < ELEMENTSOF(commands); i++)
                if (streq(argv[1], commands[i].name))
                        return commands[i].run(argc - 1, argv + 1);
        if (argc >= 2 && argv[1][0] != '-') {
                usage(stderr);
                return 2;
        }
        return cmd_daemon(argc, argv);
}
