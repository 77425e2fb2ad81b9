/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The offline subcommands of vgpud. Each takes the arguments after its name (argv[0] is the
 * subcommand) and returns the process exit status.
 */

int cmd_inventory(int argc, char **argv);
int cmd_health_check(int argc, char **argv);
/* The daemon itself: vgpud with options only (CFG-1, CFG-2). */
int cmd_daemon(int argc, char **argv);
