/* SPDX-License-Identifier: GPL-2.0-or-later */
/* vgpuctl: the process around ctl_run(), which does the work (see ctl.h). */
#include <curl/curl.h>
#include <unistd.h>

#include "ctl.h"

int main(int argc, char **argv)
{
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
                fputs("vgpuctl: cannot initialise libcurl\n", stderr);
                return CTL_EXIT_CONNECT;
        }

        const CtlEnv env = {
            .url = getenv("VGPUD_URL"),
            .token = getenv("VGPUD_TOKEN"),
            .clock = clock_realtime,
            .connect_timeout_ms = CTL_CONNECT_TIMEOUT_MS,
            .timeout_ms = CTL_TIMEOUT_MS,
            .lifecycle_timeout_ms = CTL_LIFECYCLE_TIMEOUT_MS,
            .out = stdout,
            .err = stderr,
            .in_fd = STDIN_FILENO,
        };
        int status = ctl_run(argc, argv, &env);

        curl_global_cleanup();
        return status;
}
