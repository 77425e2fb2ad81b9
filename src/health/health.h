/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * health: the VF health store (SPEC §5, every HEALTH requirement).
 *
 * Two layers:
 *
 *  - HealthState is plain data: the records of <data_dir>/gpu/vf-health.json, the breaker and
 *    the host driver version. health_state_parse() turns file bytes into a state or into the
 *    exact HEALTH-5 error; health_state_format() turns a state into the canonical bytes of
 *    HEALTH-4. Neither touches the disk, so the offline checker and the fuzzer use them too.
 *
 *  - HealthStore owns the file below a data_dir fd, the latched load and write errors
 *    (HEALTH-16/17), the on-disk fingerprint (HEALTH-22/23), the breaker options and the
 *    group-commit queue (HEALTH-20). It is not thread-safe: one thread (the event loop) owns
 *    it. The only parts meant for another thread are health_write_run() and health_read_run(),
 *    which touch nothing but the HealthWrite or HealthRead they are given.
 *
 * Writing. A request changes memory at once (placement sees it) and joins the next write.
 * health_store_begin_write() hands out that write (a snapshot of memory), health_write_run()
 * does the blocking file work, and health_store_finish_write() completes every request it
 * carried with one result: a failure before the rename rolls back exactly those requests, a
 * failure after it keeps them; both latch the error. Requests that arrive while a write is in
 * flight go into the next one together.
 *
 * Reading. After the start-up load the store never reads, stats or opens its file on the
 * owner's thread (ARCHITECTURE.md decision 1). The 5 s check (HEALTH-32), SIGHUP's reload and
 * the retry of a latched load (HEALTH-17, HEALTH-21) are reads: health_store_begin_read()
 * hands one out, health_read_run() does it on a worker, health_store_finish_read() applies what
 * it found, or health_store_abandon_read() records that it did not return in time (the store
 * is then unavailable with that reason, HEALTH-16). A write compares the fingerprint itself,
 * on its worker, before touching the file (HEALTH-22): when the file changed it reads it
 * instead of writing, and finish_write() loads it and queues the write again on top of it.
 * One read or write is in flight at a time; meanwhile memory, the latches and every query
 * answer from the last state.
 *
 * A store whose options have no io_wanted callback is synchronous: every call that queued
 * a read or a write also runs it before returning. With a callback the owner drives
 * begin/run/finish.
 * The health_store_<verb>() convenience functions run the write themselves either way; on an
 * asynchronous store they refuse with -EBUSY while a write is in flight.
 *
 * Error convention: functions return >= 0 or -errno and put the SPEC text in *error (last
 * parameter, may be NULL). A refusal because the store is unavailable is -EAGAIN with the
 * HEALTH-16 or HEALTH-23 text; a malformed request is -EINVAL; a failed write is that write's
 * -errno with its HEALTH-19 text.
 */

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

#include "base/base.h"

/* ---- constants ----------------------------------------------------------------------------- */

#define HEALTH_DIR_NAME "gpu"
#define HEALTH_FILE_NAME "vf-health.json"
#define HEALTH_FILE_PATH HEALTH_DIR_NAME "/" HEALTH_FILE_NAME /* relative to data_dir */
#define HEALTH_FILE_MAX ((size_t)4 << 20)                     /* HEALTH-5 */
#define HEALTH_FAILURES_MAX 64                                /* HEALTH-4 */
#define HEALTH_REASON_MAX 256                                 /* HEALTH-3, HEALTH-12 */

#define HEALTH_THRESHOLD_MIN 1u /* HEALTH-7 */
#define HEALTH_THRESHOLD_MAX 64u
#define HEALTH_THRESHOLD_DEFAULT 2u
#define HEALTH_BREAKER_WINDOW_DEFAULT NSEC_PER_HOUR /* CFG-3 gpu.breaker.* */
#define HEALTH_BREAKER_MAX_DEFAULT 4u

/* How often the owner calls health_store_poll() (HEALTH-32). */
#define HEALTH_POLL_INTERVAL (5 * NSEC_PER_SEC)

/* The reason prefix of quarantines made by load-time re-evaluation (HEALTH-8). */
#define HEALTH_REEVALUATED_PREFIX "re-evaluated at load: "

/* ---- state --------------------------------------------------------------------------------- */

typedef enum HealthSource {
        HEALTH_SOURCE_AUTO,
        HEALTH_SOURCE_OPERATOR,
} HealthSource;

const char *health_source_to_string(HealthSource s);

typedef struct HealthFailure {
        char *instance_id; /* "" is a valid key part (HEALTH-2) */
        char *assigned_at; /* compared as a string, never re-rendered (GEN-8) */
        Timestamp reported_at;
} HealthFailure;

typedef struct HealthRecord {
        char vf_address[PCI_ADDRESS_STRLEN];
        HealthFailure *failures; /* oldest first, at most HEALTH_FAILURES_MAX */
        size_t n_failures;
        bool quarantined;
        Timestamp quarantined_at;
        HealthSource source; /* meaningful while quarantined */
        /*
         * The file had no "source" key, so source was derived (HEALTH-3). It is written back
         * without one, so an upstream file round-trips byte for byte until the record changes.
         */
        bool source_implicit;
        char *reason; /* NULL: absent */
} HealthRecord;

/* A drained PF (HEALTH-26): its VFs leave placement; their records are not touched. */
typedef struct HealthDrain {
        char gpu[PCI_ADDRESS_STRLEN];
        char *reason;
        Timestamp drained_at;
} HealthDrain;

typedef struct HealthState {
        HealthRecord *records; /* sorted by vf_address */
        size_t n_records;
        HealthDrain *drains; /* sorted by gpu; the file's optional "drains" (HEALTH-3) */
        size_t n_drains;
        bool breaker_open;
        Timestamp breaker_opened_at;
        char *breaker_reason;
        char *driver_version;        /* NULL: never seen */
        Timestamp driver_changed_at; /* zero: absent */
        /*
         * Memory only: automatic quarantines at or before this instant do not count towards
         * the breaker, so a reset restarts the window empty (HEALTH-29).
         */
        Timestamp breaker_floor;
} HealthState;

int health_state_new(HealthState **ret);
HealthState *health_state_free(HealthState *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(HealthState *, health_state_free);
#define _cleanup_health_state_ _cleanup_(health_state_freep)
int health_state_copy(const HealthState *s, HealthState **ret);

/*
 * Parses file bytes (HEALTH-1, HEALTH-2, HEALTH-3, HEALTH-4, HEALTH-5, HEALTH-6). On failure the
 * result is -EINVAL (-EFBIG for a file above HEALTH_FILE_MAX) and *error is the HEALTH-5 text:
 * "unmarshal VF health state: ...", "validate VF health state: ..." or "validate VF health state
 * record <i>[ failure <j>]: ..."; or -ENOMEM and `out of memory`. Records more than
 * HEALTH_FAILURES_MAX failures long keep their newest ones.
 */
int health_state_parse(const char *buf, size_t size, HealthState **ret, char **error);

/*
 * Reads and parses dirfd/path. A missing file is -ENOENT with the read error text; callers
 * that treat it as an empty store (HEALTH-1) check for that. own: the store's file under
 * data_dir, opened as INST-2a says (a link, FIFO or device fails at once); otherwise a file an
 * operator named (`vgpud health-check FILE`), which may be a link.
 */
int health_state_load_at(int dirfd, const char *path, bool own, HealthState **ret, char **error);

/* The canonical file bytes (HEALTH-4), NUL-terminated. */
int health_state_format(const HealthState *s, char **ret, size_t *ret_size);

const HealthRecord *health_state_find(const HealthState *s, const char *vf_address);
const HealthDrain *health_state_find_drain(const HealthState *s, const char *gpu);
size_t health_state_count_quarantined(const HealthState *s);

/*
 * HEALTH-8: quarantines every unquarantined record that has at least threshold failures, with
 * source auto and a reason naming the count. Returns how many it quarantined.
 */
int health_state_reevaluate(HealthState *s, unsigned threshold, Timestamp now);

/*
 * HEALTH-12: every byte outside printable ASCII becomes '?', and text above 256 bytes is cut
 * to 253 bytes plus "...". An empty message gives *ret = NULL (reason absent).
 */
int health_sanitize_reason(const char *message, char **ret);

/* ---- store --------------------------------------------------------------------------------- */

typedef struct HealthStore HealthStore;
typedef struct HealthWrite HealthWrite;

typedef struct HealthOptions {
        unsigned threshold; /* 1..64 (HEALTH-7) */
        bool breaker_enabled;
        nsec_t breaker_window;
        unsigned breaker_max_quarantines;
        const Clock *clock; /* NULL: clock_realtime */
        /*
         * The GPU model of a VF (DISC-17), for breaker trip (b) of HEALTH-33. NULL, or a NULL
         * answer, means unknown; unknown models never trip it.
         */
        const char *(*model_of)(const char *vf_address, void *userdata);
        /*
         * The PF of a VF in the last discovery, so a drained PF's VFs count as quarantined
         * (HEALTH-26). NULL, or a NULL answer, means not known: no drain applies then.
         */
        const char *(*gpu_of)(const char *vf_address, void *userdata);
        /*
         * Called when a read or a write is queued and none is in flight: the owner should call
         * health_store_begin_read(), then health_store_begin_write(), soon (from its loop, not
         * from inside this callback). NULL makes the store synchronous.
         */
        void (*io_wanted)(HealthStore *s, void *userdata);
        void *userdata;
} HealthOptions;

/* The CFG-3 defaults. */
#define HEALTH_OPTIONS_DEFAULT                                     \
        ((HealthOptions){                                          \
            .threshold = HEALTH_THRESHOLD_DEFAULT,                 \
            .breaker_enabled = true,                               \
            .breaker_window = HEALTH_BREAKER_WINDOW_DEFAULT,       \
            .breaker_max_quarantines = HEALTH_BREAKER_MAX_DEFAULT, \
        })

bool health_threshold_is_valid(uint64_t threshold);

/*
 * A store over data_dir_fd (borrowed: it must stay open while the store lives). Nothing is
 * read until health_store_load(). -EINVAL for a threshold outside 1..64, a zero window or a
 * zero max_quarantines.
 */
int health_store_new(int data_dir_fd, const HealthOptions *options, HealthStore **ret);
/* The store must not be freed while a write it handed out is still in flight. */
HealthStore *health_store_free(HealthStore *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(HealthStore *, health_store_free);
#define _cleanup_health_store_ _cleanup_(health_store_freep)

/*
 * Start-up load (GEN-10), the one read made on the caller's thread: removes a leftover temp file
 * (HEALTH-19), loads the file (a missing one is an empty store), re-evaluates thresholds and
 * re-persists (HEALTH-8/9). A load error is latched and returned; a failed re-persist keeps the
 * re-evaluated quarantines in memory, latches the write error and returns it (synchronous stores
 * only: an asynchronous store queues that write).
 */
int health_store_load(HealthStore *s, char **error);

/* ---- requests ------------------------------------------------------------------------------ */

typedef enum HealthRequestKind {
        HEALTH_REQUEST_FAILURE,        /* HEALTH-10, HEALTH-11, HEALTH-12: vf_address, instance_id,
                                          assigned_at,        text = the guest's failure message */
        HEALTH_REQUEST_SUCCESS,        /* HEALTH-13, HEALTH-14, HEALTH-15: vf_address, instance_id,
                                          assigned_at */
        HEALTH_REQUEST_QUARANTINE,     /* HEALTH-25/26: vfs, text = the operator's reason */
        HEALTH_REQUEST_CLEAR,          /* HEALTH-25/26: vfs (clear-gpu passes every VF of a PF) */
        HEALTH_REQUEST_DRAIN,          /* HEALTH-26: gpu, text = the operator's reason */
        HEALTH_REQUEST_UNDRAIN,        /* HEALTH-26: gpu */
        HEALTH_REQUEST_BREAKER_RESET,  /* HEALTH-29 */
        HEALTH_REQUEST_DRIVER_VERSION, /* HEALTH-30: text = the version read by the caller */
        HEALTH_REQUEST_REPAIR,         /* HEALTH-21 */
        /*
         * Load-time re-evaluation (HEALTH-8), made by the store itself after each load so it
         * can be replayed like any request; health_store_submit() refuses it.
         */
        HEALTH_REQUEST_REEVALUATE,
} HealthRequestKind;

typedef struct HealthRequest {
        HealthRequestKind kind;
        const char *vf_address;
        const char *instance_id; /* NULL means "" */
        const char *assigned_at; /* NULL means "" */
        const char *text;
        char *const *vfs; /* NULL-terminated */
        const char *gpu;  /* DRAIN, UNDRAIN: the PF */
} HealthRequest;

typedef enum HealthOutcome {
        HEALTH_OUTCOME_UNCHANGED,
        HEALTH_OUTCOME_RECORDED,
        HEALTH_OUTCOME_QUARANTINED,
} HealthOutcome;

/* "unchanged", "recorded", "quarantined". */
const char *health_outcome_to_string(HealthOutcome o);

typedef struct HealthResult {
        bool changed;          /* the request changed memory and was written */
        HealthOutcome outcome; /* FAILURE */
        unsigned failures;     /* FAILURE: the VF's failure count afterwards */
        unsigned threshold;    /* FAILURE */
        bool breaker_tripped;  /* FAILURE: this report opened the breaker (HEALTH-28) */
        unsigned cleared;      /* SUCCESS: failures dropped */
        bool rescinded;        /* SUCCESS: the quarantine was lifted */
        unsigned records;      /* QUARANTINE, CLEAR: records created, changed or deleted */
        bool drained;          /* DRAIN, UNDRAIN: the mark was set or removed */
} HealthResult;

/*
 * Completion of a queued request: r >= 0 and the result (error is NULL), or r < 0 and the
 * error text, never NULL then (the failed write's, or the HEALTH-23 text when a reload before
 * the write refused it). After a failure past the rename r < 0 although the change is kept in
 * memory. A request carried into a later write after a rollback or a reload is applied again,
 * so its result is computed then.
 * Called from whichever store call completes the write or refuses the request (finish_write,
 * begin_write, a reload), never from a thread other than the owner's.
 */
typedef void (*HealthDone)(HealthStore *s, int r, const HealthResult *result, const char *error,
                           void *userdata);

/*
 * Submits a request. Returns 0 when it completed at once (no change, so no I/O, not even the
 * fingerprint check: *ret is the result and done is not called; the 5 s poll picks up an edit
 * that would have made it a change), 1 when it was applied to memory and queued (done is called
 * when its write completes; on a synchronous store that happens before this returns), or
 * -errno when it was refused, with *error set (-EINVAL an invalid request, -EAGAIN the store
 * unavailable, -ENOMEM). ret may be NULL.
 */
int health_store_submit(HealthStore *s, const HealthRequest *request, HealthDone done,
                        void *userdata, HealthResult *ret, char **error);

/*
 * Submits and waits for the write: the synchronous path (CLI, tests, start-up). These and the
 * calls below that take `char **error` set it on every failure.
 */
int health_store_apply(HealthStore *s, const HealthRequest *request, HealthResult *ret,
                       char **error);

int health_store_report_failure(HealthStore *s, const char *vf_address, const char *instance_id,
                                const char *assigned_at, const char *message, HealthResult *ret,
                                char **error);
int health_store_report_success(HealthStore *s, const char *vf_address, const char *instance_id,
                                const char *assigned_at, HealthResult *ret, char **error);
int health_store_quarantine(HealthStore *s, char *const *vfs, const char *reason, char **error);
int health_store_clear(HealthStore *s, char *const *vfs, char **error);
int health_store_reset_breaker(HealthStore *s, char **error);
int health_store_set_driver_version(HealthStore *s, const char *version, char **error);
/* HEALTH-21: retries a latched load, re-persists after a latched write error; else no I/O. */
int health_store_repair(HealthStore *s, char **error);

/* ---- the write cycle (HEALTH-18, HEALTH-19, HEALTH-20) -------------------------------------- */

/* A write is queued and no read or write is in flight. */
bool health_store_write_pending(const HealthStore *s);
/* A read or a write is in flight. */
bool health_store_write_in_flight(const HealthStore *s);

/*
 * Takes every queued request into one write. Returns 0 when there is nothing to write (or a
 * read is queued or in flight: reads go first), or 1 with the write in *ret.
 */
int health_store_begin_write(HealthStore *s, HealthWrite **ret);

/*
 * The blocking part, on any thread. First compares the file with the fingerprint the store
 * last saw (HEALTH-22); when it differs it reads the file and writes nothing, and
 * finish_write() loads what it read and applies the queued requests on top of it, or refuses
 * them with the HEALTH-23 text if it no longer loads. Otherwise: create gpu/, write the temp
 * file, fsync, rename, fsync.
 */
int health_write_run(HealthWrite *w);

/* Marks a write that never ran (the worker pool refused it) as failed before the rename. */
void health_write_set_failed(HealthWrite *w, int r, const char *error);

/* fsync() calls the write made, for benchmarks (the floor is two). */
unsigned health_write_fsyncs(const HealthWrite *w);

/* Completes the requests the write carried; takes ownership of w. */
void health_store_finish_write(HealthStore *s, HealthWrite *w);

HealthWrite *health_write_free(HealthWrite *w);

/* ---- reads (HEALTH-17, HEALTH-21, HEALTH-22, HEALTH-32) ------------------------------------- */

/* A read does not return within this: the store is unavailable until it does (HEALTH-16). */
#define HEALTH_READ_TIMEOUT (5 * NSEC_PER_SEC)

typedef struct HealthRead HealthRead;

typedef enum HealthReadKind {
        HEALTH_READ_CHECK,  /* the 5 s poll: read only when the fingerprint differs */
        HEALTH_READ_RETRY,  /* a latched load error: read again (HEALTH-17, HEALTH-21) */
        HEALTH_READ_RELOAD, /* SIGHUP: read unconditionally */
} HealthReadKind;

/*
 * Takes the queued read, if any: 1 with it in *ret, or 0 when none is queued or a read or
 * write is in flight. Reads queued for several reasons become one, of the strongest kind.
 */
int health_store_begin_read(HealthStore *s, HealthRead **ret);

/* The blocking part (stat, open, read, parse), on any thread. */
void health_read_run(HealthRead *rd);

HealthReadKind health_read_kind(const HealthRead *rd);

/*
 * Applies what the read found and takes ownership of rd. Returns 1 when the file was loaded,
 * 0 when it was unchanged (a CHECK), or -EAGAIN when it failed to load (the load error is
 * latched and the queued requests are refused), with the error in *error.
 */
int health_store_finish_read(HealthStore *s, HealthRead *rd, char **error);

/*
 * The read in flight did not return (the worker pool ended it, at HEALTH_READ_TIMEOUT, or
 * refused it): latches error as the load error, so the store is unavailable with it
 * (HEALTH-16), refuses the queued requests, and from then on refuses mutations at once until a
 * read completes. The read may still be running; its HealthRead is no longer the store's.
 */
void health_store_abandon_read(HealthStore *s, const char *error);

HealthRead *health_read_free(HealthRead *rd);

/*
 * The 5 s timer (HEALTH-32): queues a CHECK. On a synchronous store it runs at once and the
 * result is health_store_finish_read()'s; on an asynchronous one it returns 0.
 */
int health_store_poll(HealthStore *s, char **error);

/*
 * SIGHUP: queues a RELOAD, made before any further write. Synchronous store: the result of
 * health_store_finish_read(). Asynchronous store: 1 (queued; deferred while a write is in
 * flight).
 */
int health_store_reload(HealthStore *s, char **error);

/* ---- queries (HEALTH-16, API-10, MET-*) ---------------------------------------------------- */

/*
 * Pending requests included: placement sees them at once (HEALTH-20). A VF of a drained PF
 * (HEALTH-26) is quarantined too.
 */
bool health_store_is_quarantined(const HealthStore *s, const char *vf_address);

/*
 * NULL while the store is available, else the placement_disabled_reason text:
 * "VF health state unavailable: <err>" or "VF health state unavailable: last write failed: <err>".
 */
const char *health_store_unavailable_reason(const HealthStore *s);

/* The breaker is enabled and open (HEALTH-28). */
bool health_store_breaker_open(const HealthStore *s);

/*
 * The /resources placement_warning while the breaker is open (HEALTH-28):
 * "automatic VF quarantine suspended: <reason>"; *ret = NULL while it is closed.
 */
int health_store_breaker_warning(const HealthStore *s, char **ret);

const HealthState *health_store_state(const HealthStore *s);
const HealthOptions *health_store_options(const HealthStore *s);

/*
 * Moves on (monotonically) whenever what the queries above show may have changed: memory
 * (records, drains, the breaker; pending requests included, HEALTH-20) or the unavailable
 * reason. The API keeps its rendered bodies until it moves (PERF-1).
 */
uint64_t health_store_generation(const HealthStore *s);
