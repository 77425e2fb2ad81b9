/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vgpu-agent: the guest agent (SPEC §9). Parses the options, runs the loop, exits 0 on
 * SIGTERM; 2 for a bad command line, 1 when the loop cannot be set up or fails.
 */
#include "agent/agent.h"
#include "config.h"

int main(int argc, char **argv)
{
        AgentOptions options;
        AgentArgs what;
        _cleanup_free_ char *error = NULL;

        agent_options_init(&options);
        if (agent_parse_args(argc, argv, &options, &what, &error) < 0) {
                log_error("vgpu-agent: %s (see --help)", error);
                return 2;
        }
        if (what == AGENT_ARGS_VERSION) {
                printf("vgpu-agent %s\n", VGPUD_VERSION);
                return 0;
        }
        if (what == AGENT_ARGS_HELP) {
                fputs(agent_usage(), stdout);
                return 0;
        }

        _cleanup_(agent_freep) Agent *agent = NULL;
        if (agent_new(&options, &agent, &error) < 0) {
                log_error("vgpu-agent: %s", error);
                return 1;
        }
        agent_start(agent, agent_now());
        return agent_run(agent) < 0 ? 1 : 0;
}
