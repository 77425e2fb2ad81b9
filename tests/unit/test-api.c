/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The api module's kept bodies (PERF-1, MET-4): a body is rendered once per key and served from
 * memory while the key stays, and rendered again as soon as any part of the key moves: each
 * source's generation, a source's identity, the placement_disabled_reason text. Then the key
 * read from real sources: a health store change (API-18, HEALTH-20) and a worker pool call that
 * is abandoned and later returns (GEN-4) move it at once, so the next read shows the change.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "api/api.h"
#include "testlib.h"

/* A renderer that counts its calls and says which call made the bytes. */
typedef struct Renderer {
        unsigned calls;
        int fail; /* < 0: the next render fails with it */
} Renderer;

static Renderer renderer;

static int render_counting(const ApiContext *ctx, char **ret, size_t *ret_size)
{
        (void)ctx;
        renderer.calls++;
        if (renderer.fail < 0) {
                int r = renderer.fail;
                renderer.fail = 0;
                return r;
        }
        char *text = NULL;
        int n = asprintf(&text, "render %u", renderer.calls);
        assert_true(n > 0);
        *ret = text;
        *ret_size = (size_t)n;
        return 0;
}

static int reset(void **state)
{
        (void)state;
        renderer = (Renderer){};
        return 0;
}

/* A key with every source set, generations 1, and the given reason (copied). */
static ApiViewKey key_with(const void *const *sources, const uint64_t *generations,
                           const char *reason)
{
        ApiViewKey k = {};
        for (size_t i = 0; i < _API_SOURCE_MAX; i++) {
                k.source[i] = sources[i];
                k.generation[i] = generations[i];
        }
        if (reason)
                assert_non_null(k.disabled_reason = strdup(reason));
        return k;
}

/* Gets body b for a copy of the key; returns the text (valid until the next get of b). */
static const char *get(ApiBodyCache *c, ApiBody b, const void *const *sources,
                       const uint64_t *generations, const char *reason)
{
        ApiViewKey k = key_with(sources, generations, reason);
        const char *text = NULL;
        size_t size = 0;
        assert_int_equal(api_body_cache_get(c, b, &k, render_counting, NULL, &text, &size), 0);
        assert_null(k.disabled_reason); /* taken over */
        assert_int_equal(size, strlen(text));
        return text;
}

static const int objects[_API_SOURCE_MAX];

static void sources_init(const void **sources)
{
        for (size_t i = 0; i < _API_SOURCE_MAX; i++)
                sources[i] = &objects[i];
}

/* PERF-1: the same key gives the same bytes without rendering again; MET-4 follows. */
static void test_same_key_same_bytes(void **state)
{
        ApiBodyCache c = {};
        const void *sources[_API_SOURCE_MAX];
        uint64_t gens[_API_SOURCE_MAX] = {1, 1, 1, 1, 1, 1};
        sources_init(sources);

        const char *a = get(&c, API_BODY_RESOURCES, sources, gens, NULL);
        assert_string_equal(a, "render 1");
        for (int i = 0; i < 100; i++) {
                const char *b = get(&c, API_BODY_RESOURCES, sources, gens, NULL);
                assert_ptr_equal(b, a);
                assert_string_equal(b, "render 1");
        }
        assert_int_equal(renderer.calls, 1);
        assert_int_equal(c.body[API_BODY_RESOURCES].renders, 1);

        /* The slots are apart: another body renders for itself, once. */
        assert_string_equal(get(&c, API_BODY_GPUS, sources, gens, NULL), "render 2");
        assert_string_equal(get(&c, API_BODY_GPUS, sources, gens, NULL), "render 2");
        assert_string_equal(get(&c, API_BODY_RESOURCES, sources, gens, NULL), "render 1");
        assert_int_equal(renderer.calls, 2);
        api_body_cache_done(&c);
}

/* PERF-1: any one source's generation moved renders again, and the new bytes are kept. */
static void test_each_generation_renders(void **state)
{
        ApiBodyCache c = {};
        const void *sources[_API_SOURCE_MAX];
        uint64_t gens[_API_SOURCE_MAX] = {1, 1, 1, 1, 1, 1};
        sources_init(sources);

        (void)get(&c, API_BODY_GAUGES, sources, gens, NULL);
        for (size_t i = 0; i < _API_SOURCE_MAX; i++) {
                unsigned before = renderer.calls;
                gens[i]++;
                const char *t = get(&c, API_BODY_GAUGES, sources, gens, NULL);
                assert_int_equal(renderer.calls, before + 1);
                char want[32];
                snprintf(want, sizeof want, "render %u", before + 1);
                assert_string_equal(t, want);
                /* And kept for that key. */
                assert_string_equal(get(&c, API_BODY_GAUGES, sources, gens, NULL), want);
                assert_int_equal(renderer.calls, before + 1);
        }
        api_body_cache_done(&c);
}

/* A source set later (or replaced) and the placement_disabled_reason are part of the key. */
static void test_identity_and_reason(void **state)
{
        ApiBodyCache c = {};
        const void *sources[_API_SOURCE_MAX] = {};
        uint64_t gens[_API_SOURCE_MAX] = {};

        (void)get(&c, API_BODY_RESOURCES, sources, gens, NULL);
        sources[API_SOURCE_HEALTH] = &objects[API_SOURCE_HEALTH]; /* generation still 0 */
        assert_string_equal(get(&c, API_BODY_RESOURCES, sources, gens, NULL), "render 2");
        sources[API_SOURCE_HEALTH] = &objects[API_SOURCE_NVML];
        assert_string_equal(get(&c, API_BODY_RESOURCES, sources, gens, NULL), "render 3");

        /* The reason compares by text: an equal copy is the same key, another text is not. */
        assert_string_equal(get(&c, API_BODY_RESOURCES, sources, gens, "scan failed"), "render 4");
        assert_string_equal(get(&c, API_BODY_RESOURCES, sources, gens, "scan failed"), "render 4");
        assert_string_equal(get(&c, API_BODY_RESOURCES, sources, gens, "scan failed!"), "render 5");
        assert_string_equal(get(&c, API_BODY_RESOURCES, sources, gens, NULL), "render 6");
        assert_int_equal(renderer.calls, 6);
        api_body_cache_done(&c);
}

/* A failed render keeps nothing: the next request renders again, and gets the error first. */
static void test_render_failure(void **state)
{
        ApiBodyCache c = {};
        const void *sources[_API_SOURCE_MAX];
        uint64_t gens[_API_SOURCE_MAX] = {1, 1, 1, 1, 1, 1};
        sources_init(sources);

        (void)get(&c, API_BODY_GPUS, sources, gens, NULL);
        gens[API_SOURCE_TRACKER]++;
        renderer.fail = -ENOMEM;
        ApiViewKey k = key_with(sources, gens, "x");
        const char *text = NULL;
        size_t size = 0;
        assert_int_equal(
            api_body_cache_get(&c, API_BODY_GPUS, &k, render_counting, NULL, &text, &size),
            -ENOMEM);
        assert_null(k.disabled_reason);
        assert_false(c.body[API_BODY_GPUS].valid);
        assert_string_equal(get(&c, API_BODY_GPUS, sources, gens, NULL), "render 3");

        k = key_with(sources, gens, NULL);
        assert_int_equal(
            api_body_cache_get(&c, _API_BODY_MAX, &k, render_counting, NULL, &text, &size),
            -EINVAL);
        api_body_cache_done(&c);
        api_body_cache_done(&c); /* idempotent */
}

/* ---- keys read from real sources ------------------------------------------------------------ */

/* A body that shows the store's quarantine of one VF, as /gpus would. */
static int render_quarantine(const ApiContext *ctx, char **ret, size_t *ret_size)
{
        renderer.calls++;
        const char *s =
            health_store_is_quarantined(ctx->health, "0000:e3:00.4") ? "quarantined" : "free";
        assert_non_null(*ret = strdup(s));
        *ret_size = strlen(s);
        return 0;
}

static const char *get_ctx(ApiContext *ctx, ApiRenderFunc render)
{
        ApiViewKey k;
        const char *text = NULL;
        size_t size = 0;
        assert_int_equal(api_view_key_read(ctx, &k), 0);
        assert_int_equal(
            api_body_cache_get(&ctx->cache, API_BODY_GPUS, &k, render, ctx, &text, &size), 0);
        return text;
}

/*
 * API-18, HEALTH-20: an operator quarantine and its clear show in the next read, with no
 * render in between reads that saw no change.
 */
static void test_health_store_moves_key(void **state)
{
        _cleanup_test_tree_ TestTree *tree = NULL;
        _cleanup_health_store_ HealthStore *store = NULL;
        _cleanup_free_ char *error = NULL;
        HealthOptions o = HEALTH_OPTIONS_DEFAULT;

        assert_int_equal(test_tree_new("test-api", &tree), 0);
        assert_int_equal(health_store_new(tree->fd, &o, &store), 0);
        assert_int_equal(health_store_load(store, &error), 0);
        ApiContext ctx = {.health = store};

        assert_string_equal(get_ctx(&ctx, render_quarantine), "free");
        assert_string_equal(get_ctx(&ctx, render_quarantine), "free");
        assert_int_equal(renderer.calls, 1);

        char *vfs[] = {"0000:e3:00.4", NULL};
        assert_int_equal(health_store_quarantine(store, vfs, "bad fan", &error), 0);
        assert_string_equal(get_ctx(&ctx, render_quarantine), "quarantined");
        assert_string_equal(get_ctx(&ctx, render_quarantine), "quarantined");
        assert_int_equal(renderer.calls, 2);

        assert_int_equal(health_store_clear(store, vfs, &error), 0);
        assert_string_equal(get_ctx(&ctx, render_quarantine), "free");
        assert_int_equal(renderer.calls, 3);

        /* A request that changes nothing moves nothing (HEALTH-11's no-op). */
        assert_int_equal(health_store_clear(store, vfs, &error), 0);
        assert_string_equal(get_ctx(&ctx, render_quarantine), "free");
        assert_int_equal(renderer.calls, 3);
        api_context_done(&ctx);
}

/* ---- the worker pool: an abandoned call and its return (GEN-4) ------------------------------ */

typedef struct Gate {
        pthread_mutex_t m;
        pthread_cond_t c;
        bool entered, open;
} Gate;

static bool gate_entered(Gate *g)
{
        pthread_mutex_lock(&g->m);
        bool e = g->entered;
        pthread_mutex_unlock(&g->m);
        return e;
}

static int run_gated(void *data, char **error)
{
        Gate *g = data;
        pthread_mutex_lock(&g->m);
        g->entered = true;
        while (!g->open)
                pthread_cond_wait(&g->c, &g->m);
        pthread_mutex_unlock(&g->m);
        return 0;
}

static int render_uncertain(const ApiContext *ctx, char **ret, size_t *ret_size)
{
        renderer.calls++;
        const char *s =
            worker_pool_key_is_uncertain(ctx->workers, "0000:e3:00.4") ? "uncertain" : "certain";
        assert_non_null(*ret = strdup(s));
        *ret_size = strlen(s);
        return 0;
}

/*
 * GEN-4: the pool's turn that finds a call past its deadline makes its key uncertain and moves
 * the generation; the call's return, on its worker thread, moves it again. A read after either
 * shows it.
 */
static void test_worker_pool_moves_key(void **state)
{
        TestClock clock;
        test_clock_init(&clock, 1000 * NSEC_PER_SEC);
        WorkerPoolConfig wc = WORKER_POOL_CONFIG_SYSFS;
        wc.clock = &clock.clock;
        /* A loop with no source: test_wait_step() then only paces the polls. */
        _cleanup_(sd_event_unrefp) sd_event *event = NULL;
        assert_int_equal(sd_event_new(&event), 0);
        WorkerPool *pool = NULL;
        Gate g = {.m = PTHREAD_MUTEX_INITIALIZER, .c = PTHREAD_COND_INITIALIZER};
        _cleanup_free_ char *error = NULL;

        assert_int_equal(worker_pool_new(&wc, &pool), 0);
        ApiContext ctx = {.workers = pool};
        assert_string_equal(get_ctx(&ctx, render_uncertain), "certain");

        uint64_t g0 = worker_pool_generation(pool);
        assert_int_equal(worker_pool_submit(pool,
                                            &(WorkerJob){.key = "0000:e3:00.4",
                                                         .timeout = NSEC_PER_SEC,
                                                         .run = run_gated,
                                                         .data = &g},
                                            &error),
                         0);
        TestWait w = test_wait_begin(event, 10 * NSEC_PER_SEC);
        while (!gate_entered(&g))
                assert_int_equal(test_wait_step(&w), 0);

        /* Past the deadline by the pool's clock, but nothing decided yet: same key. */
        test_clock_advance(&clock, 2 * NSEC_PER_SEC);
        assert_int_equal(worker_pool_generation(pool), g0);
        assert_string_equal(get_ctx(&ctx, render_uncertain), "certain");
        assert_int_equal(renderer.calls, 1);

        /* The pool's turn (its timer, here called by hand) abandons it. */
        assert_int_equal(worker_pool_dispatch_completions(pool), 1); /* its -ETIMEDOUT */
        assert_int_equal(worker_pool_get_stuck_count(pool), 1);
        assert_true(worker_pool_generation(pool) > g0);
        assert_string_equal(get_ctx(&ctx, render_uncertain), "uncertain");
        assert_int_equal(renderer.calls, 2);

        /* The call returns on its thread: the key moves without any turn of the pool. */
        uint64_t g1 = worker_pool_generation(pool);
        pthread_mutex_lock(&g.m);
        g.open = true;
        pthread_cond_broadcast(&g.c);
        pthread_mutex_unlock(&g.m);
        TestWait w2 = test_wait_begin(event, 10 * NSEC_PER_SEC);
        while (worker_pool_generation(pool) == g1)
                assert_int_equal(test_wait_step(&w2), 0);
        assert_string_equal(get_ctx(&ctx, render_uncertain), "certain");
        assert_int_equal(renderer.calls, 3);

        api_context_done(&ctx);
        (void)worker_pool_dispatch_completions(pool);
        worker_pool_free(pool);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup(test_same_key_same_bytes, reset),
            cmocka_unit_test_setup(test_each_generation_renders, reset),
            cmocka_unit_test_setup(test_identity_and_reason, reset),
            cmocka_unit_test_setup(test_render_failure, reset),
            cmocka_unit_test_setup(test_health_store_moves_key, reset),
            cmocka_unit_test_setup(test_worker_pool_moves_key, reset),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
