/* SPDX-License-Identifier: GPL-2.0-or-later */
/* PLACE-9's gate for the owner's writes (write-gate.h). */
#include "write-gate.h"

#include <stdlib.h>

typedef struct WaitingWrite WaitingWrite;
struct WaitingWrite {
        WaitingWrite *next;
        char gpu[PCI_ADDRESS_STRLEN];
        WriteGateGo go;
        void *userdata;
};

struct WriteGate {
        GpuTracker *tracker;
        WriteGateQueries queries;
        WaitingWrite *waiting; /* in arrival order */
};

int write_gate_new(GpuTracker *tracker, WriteGate **ret)
{
        if (!tracker)
                return -EINVAL;
        WriteGate *g = calloc(1, sizeof *g);
        if (!g)
                return -ENOMEM;
        g->tracker = tracker;
        *ret = g;
        return 0;
}

WriteGate *write_gate_free(WriteGate *g)
{
        if (!g)
                return NULL;
        while (g->waiting) {
                WaitingWrite *w = g->waiting;
                g->waiting = w->next;
                free(w);
        }
        free(g);
        return NULL;
}

void write_gate_bind(WriteGate *g, const WriteGateQueries *queries)
{
        g->queries = queries ? *queries : (WriteGateQueries){};
}

static bool is_querying(const WriteGate *g, const char *pf)
{
        return g->queries.is_querying && g->queries.is_querying(pf, g->queries.userdata);
}

static const char *gpu_of(const WriteGate *g, const char *vf)
{
        const GpuHost *h = gpu_tracker_host(g->tracker);
        for (size_t i = 0; vf && h && i < h->n_vfs; i++)
                if (streq(h->vfs[i].address, vf))
                        return h->vfs[i].parent;
        return NULL;
}

int write_gate_pass(WriteGate *g, const char *vf, WriteGateGo go, void *userdata)
{
        if (!g || !go)
                return -EINVAL;
        const char *pf = gpu_of(g, vf);
        if (!pf || !pf[0] || !is_querying(g, pf))
                return 1;

        WaitingWrite *w = calloc(1, sizeof *w), **tail = &g->waiting;
        if (!w)
                return -ENOMEM;
        snprintf(w->gpu, sizeof w->gpu, "%s", pf);
        w->go = go;
        w->userdata = userdata;
        while (*tail)
                tail = &(*tail)->next;
        *tail = w;
        if (g->queries.nudge)
                g->queries.nudge(g->queries.userdata); /* arms the poll that lets it through */
        return 0;
}

void write_gate_cancel(WriteGate *g, void *userdata)
{
        if (!g)
                return;
        for (WaitingWrite **pp = &g->waiting; *pp;) {
                WaitingWrite *w = *pp;
                if (w->userdata == userdata) {
                        *pp = w->next;
                        free(w);
                } else
                        pp = &w->next;
        }
}

/* Each go() may change the list (a cancel, another wait), so the walk starts again after every
 * call. */
bool write_gate_open(WriteGate *g)
{
        for (;;) {
                WaitingWrite **pp = &g->waiting;
                while (*pp && is_querying(g, (*pp)->gpu))
                        pp = &(*pp)->next;
                if (!*pp)
                        return g->waiting != NULL;
                WaitingWrite *w = *pp;
                *pp = w->next;
                WriteGateGo go = w->go;
                void *userdata = w->userdata;
                free(w);
                go(userdata);
        }
}

bool write_gate_is_waiting(const WriteGate *g, const char *pf)
{
        for (const WaitingWrite *w = g->waiting; w; w = w->next)
                if (streq(w->gpu, pf))
                        return true;
        return false;
}

bool write_gate_any_waiting(const WriteGate *g)
{
        return g->waiting != NULL;
}
