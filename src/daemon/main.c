/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vgpud: with a subcommand name first, one of the offline commands; otherwise (no arguments, or
 * options only) the daemon.
 */
#include <stdio.h>

#include "base/base.h"
#include "commands.h"
#include "config.h"
#include "config/config.h"

typedef struct Command {
        const char *name;
        int (*run)(int argc, char **argv);
        const char *usage;
        const char *help; /* what it does, then its options, for vgpud --help */
} Command;

static const Command commands[] = {
    {"inventory", cmd_inventory, "inventory [--sysfs-root DIR] [--json]",
     "  inventory            run discovery once and print the GPUs, VFs and profiles found;\n"
     "                       reads sysfs only (no NVML, no changes)\n"
     "    --sysfs-root DIR   the sysfs root (default /sys)\n"
     "    --json             one JSON object instead of text\n"},
    {"health-check", cmd_health_check, "health-check FILE [--threshold N]",
     "  health-check FILE    validate a VF health file offline, e.g. after a hand edit and\n"
     "                       before SIGHUP; never writes\n"
     "    --threshold N      the quarantine threshold to re-evaluate with (1..64, default 2)\n"},
    {"host-check", cmd_host_check, "host-check [--config PATH] [--set KEY=VALUE]... [--json]",
     "  host-check           check that this host is ready for vgpud: CPU, KVM, IOMMU, VFIO,\n"
     "                       GPUs and SR-IOV, driver, NVML, QEMU, data_dir, runtime_dir, the\n"
     "                       configuration and the lock; one PASS, WARN or FAIL line each, exit 1\n"
     "                       when one failed; read-only, at most 10 s\n"
     "    --config PATH      the configuration to check with (default " CONFIG_DEFAULT_PATH ")\n"
     "    --set KEY=VALUE    override one configuration key (dotted, repeatable)\n"
     "    --json             a JSON array of {check, status, evidence, remedy} instead\n"},
};

static void usage(FILE *f)
{
        fprintf(f, "usage: vgpud [--config PATH] [--set KEY=VALUE]... [--check-config]\n"
                   "       vgpud --version | --help\n");
        for (size_t i = 0; i < ELEMENTSOF(commands); i++)
                fprintf(f, "       vgpud %s\n", commands[i].usage);
}

/*
 * Every option and subcommand, one line each, so that an operator on a host without the man
 * page still has the whole command line (tests/man checks vgpud(8) against this text).
 */
void vgpud_help(FILE *f)
{
        usage(f);
        fputs("\n"
              "The NVIDIA SR-IOV vGPU host daemon: runs VMs in QEMU on vGPU VFs and serves the\n"
              "REST API and metrics. Without a command, vgpud runs the daemon.\n"
              "\n"
              "Options:\n"
              "  --config PATH        the configuration file (default " CONFIG_DEFAULT_PATH ")\n"
              "  --set KEY=VALUE      override one configuration key (dotted, repeatable)\n"
              "  --check-config       validate the configuration and the JWT secret, print the\n"
              "                       configuration in effect and exit\n"
              "  --version            print the version and exit\n"
              "  --help               print this text and exit\n"
              "\n"
              "Commands:\n",
              f);
        for (size_t i = 0; i < ELEMENTSOF(commands); i++)
                fputs(commands[i].help, f);
        fputs("\n"
              "Exit status: 0 success (the daemon: stopped by SIGTERM or SIGINT), 1 a failure,\n"
              "2 a usage error. See vgpud(8) and vgpud.yaml(5).\n",
              f);
}

int main(int argc, char **argv)
{
        if (argc >= 2 && streq(argv[1], "--help")) {
                vgpud_help(stdout);
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
