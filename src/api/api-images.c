/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The image routes (API-2, DISK-1..DISK-4): reads answer from the store's memory; an import is
 * answered 202 once its record says `importing` on disk, and a delete 204 once the directory is
 * gone. A client that leaves meanwhile cancels nothing.
 */
#include <microhttpd.h>

#include "api-internal.h"

/* ---- JSON (DISK-2) ------------------------------------------------------------------------- */

static int image_json(ApiContext *ctx, const Image *i, json_t **ret)
{
        char created[TIMESTAMP_STRLEN];
        bool ready = i->state == IMAGE_STATE_READY;
        json_auto_t *o = json_pack("{s:s, s:s, s:s, s:s*, s:s*, s:s, s:s*}", "name", i->name,
                                   "state", image_state_to_string(i->state), "source", i->source,
                                   "format", i->format, "sha256", i->sha256, "created_at",
                                   format_timestamp(i->created_at, created), "error", i->error);
        if (!o || json_set(o, "instances",
                           json_integer(image_store_count_users(ctx->images, i->name))) < 0)
                return -ENOMEM;
        if (i->state == IMAGE_STATE_IMPORTING &&
            json_set(o, "progress", json_real(i->progress / 1000.0)) < 0)
                return -ENOMEM;
        if (ready && (json_set(o, "virtual_size_bytes", json_u64(i->virtual_size)) < 0 ||
                      json_set(o, "actual_size_bytes", json_u64(i->actual_size)) < 0))
                return -ENOMEM;
        *ret = TAKE_PTR(o);
        return 0;
}

static int reply_image(ApiContext *ctx, HttpRequest *req, unsigned status, const Image *i)
{
        json_auto_t *o = NULL;
        int r = image_json(ctx, i, &o);
        if (r < 0)
                return r;
        return http_reply_json(req, status, o);
}

static const struct {
        unsigned status;
        const char *code;
} failure_map[_STORAGE_FAILURE_MAX] = {
    [STORAGE_FAILURE_NONE] = {MHD_HTTP_INTERNAL_SERVER_ERROR, "internal"},
    [STORAGE_FAILURE_INVALID_REQUEST] = {MHD_HTTP_BAD_REQUEST, "invalid_request"},
    [STORAGE_FAILURE_NOT_FOUND] = {MHD_HTTP_NOT_FOUND, "not_found"},
    [STORAGE_FAILURE_ALREADY_EXISTS] = {MHD_HTTP_CONFLICT, "already_exists"},
    [STORAGE_FAILURE_BUSY] = {MHD_HTTP_CONFLICT, "busy"},
    [STORAGE_FAILURE_INVALID_STATE] = {MHD_HTTP_CONFLICT, "invalid_state"},
    [STORAGE_FAILURE_INTERNAL] = {MHD_HTTP_INTERNAL_SERVER_ERROR, "internal"},
};

int api_reply_storage_failure(HttpRequest *req, StorageFailure f, const char *error)
{
        if (f >= _STORAGE_FAILURE_MAX)
                f = STORAGE_FAILURE_INTERNAL;
        return http_reply_error(req, failure_map[f].status, failure_map[f].code, "%s",
                                error ? error : "unknown error");
}

/* ---- waiting requests ---------------------------------------------------------------------- */

struct ImageWaiter {
        ApiContext *ctx;
        HttpRequest *req;
        unsigned status; /* on success */
        ImageWaiter *prev, *next;
};

static void waiter_free(ImageWaiter *w)
{
        if (w->prev)
                w->prev->next = w->next;
        else if (w->ctx->image_waiters == w)
                w->ctx->image_waiters = w->next;
        if (w->next)
                w->next->prev = w->prev;
        http_request_unref(w->req);
        free(w);
}

static ImageWaiter *waiter_new(ApiContext *ctx, HttpRequest *req, unsigned status)
{
        ImageWaiter *w = calloc(1, sizeof *w);
        if (!w)
                return NULL;
        *w = (ImageWaiter){
            .ctx = ctx, .req = http_request_ref(req), .status = status, .next = ctx->image_waiters};
        if (w->next)
                w->next->prev = w;
        ctx->image_waiters = w;
        return w;
}

/* OPS-3: at shutdown, the operations stop where their last write left them. */
void api_images_done(ApiContext *ctx)
{
        while (ctx->image_waiters) {
                ImageWaiter *w = ctx->image_waiters;
                (void)http_reply_error(w->req, MHD_HTTP_SERVICE_UNAVAILABLE, "not_ready",
                                       "vgpud is shutting down");
                waiter_free(w);
        }
}

static void on_done(int r, StorageFailure failure, const char *error, const Image *image,
                    void *userdata)
{
        ImageWaiter *w = userdata;
        int k;
        if (r < 0)
                k = api_reply_storage_failure(w->req, failure, error);
        else if (!image)
                k = http_reply(w->req, MHD_HTTP_NO_CONTENT, NULL, NULL, 0);
        else
                k = reply_image(w->ctx, w->req, w->status, image);
        if (k < 0 && k != -ECONNABORTED)
                (void)http_reply_error(w->req, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
                                       "answer: %s", strerror(-k));
        waiter_free(w);
}

/* The name parameter: INST-4's pattern, else 400 before anything is looked up. */
static const char *name_param(HttpRequest *req)
{
        const char *name = http_request_get_param(req, "name");
        if (name && resource_name_is_valid(name))
                return name;
        _cleanup_free_ char *shown =
            escape_text(name ? name : "", name ? strlen(name) : 0, 64, ESCAPE_QUOTE);
        (void)http_reply_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request",
                               "invalid image name %s: ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$ "
                               "expected",
                               shown ? shown : "");
        return NULL;
}

/* ---- the routes ---------------------------------------------------------------------------- */

int api_handle_images_list(HttpRequest *req, void *userdata)
{
        ApiContext *ctx = userdata;
        const Image *const *list = NULL;
        size_t n = image_store_list(ctx->images, &list);
        json_auto_t *a = json_array();
        if (!a)
                return -ENOMEM;
        for (size_t k = 0; k < n; k++) {
                json_t *o = NULL;
                int r = image_json(ctx, list[k], &o);
                if (r < 0)
                        return r;
                if (json_push(a, o) < 0)
                        return -ENOMEM;
        }
        return http_reply_json(req, MHD_HTTP_OK, a);
}

int api_handle_image_get(HttpRequest *req, void *userdata)
{
        ApiContext *ctx = userdata;
        const char *name = name_param(req);
        if (!name)
                return 0;
        const Image *i = image_store_get(ctx->images, name);
        if (!i)
                return http_reply_error(req, MHD_HTTP_NOT_FOUND, "not_found", "image %s not found",
                                        name);
        return reply_image(ctx, req, MHD_HTTP_OK, i);
}

typedef struct ImportBody {
        const char *name, *source, *sha256;
} ImportBody;

static const JsonField import_fields[] = {
    {"name", JSON_FIELD_STRING, true, JSON_AT(ImportBody, name)},
    {"source", JSON_FIELD_STRING, true, JSON_AT(ImportBody, source)},
    {"sha256", JSON_FIELD_STRING, false, JSON_AT(ImportBody, sha256)},
    {},
};

int api_handle_image_import(HttpRequest *req, void *userdata)
{
        ApiContext *ctx = userdata;
        json_t *parsed = NULL;
        if (http_request_parse_json(req, &parsed) < 0)
                return 0; /* answered */
        json_auto_t *body = parsed;
        ImportBody b = {0};
        _cleanup_free_ char *error = NULL;
        if (!json_is_object(body))
                return http_reply_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request",
                                        "the body must be a JSON object");
        if (json_schema_read(body, NULL, import_fields, &b, -EINVAL, &error) < 0)
                return http_reply_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", "%s", error);
        if (api_refuse_unless_ready(ctx, req) != 0)
                return 0;

        ImageWaiter *w = waiter_new(ctx, req, MHD_HTTP_ACCEPTED);
        if (!w)
                return -ENOMEM;
        StorageFailure f = STORAGE_FAILURE_NONE;
        int r = image_store_import(ctx->images, b.name, b.source, b.sha256, on_done, w, &f, &error);
        if (r < 0) {
                waiter_free(w);
                return api_reply_storage_failure(req, f, error);
        }
        return http_request_suspend(req);
}

int api_handle_image_delete(HttpRequest *req, void *userdata)
{
        ApiContext *ctx = userdata;
        const char *name = name_param(req);
        if (!name || api_refuse_body(req) < 0 || api_refuse_unless_ready(ctx, req) != 0)
                return 0;
        ImageWaiter *w = waiter_new(ctx, req, MHD_HTTP_NO_CONTENT);
        if (!w)
                return -ENOMEM;
        StorageFailure f = STORAGE_FAILURE_NONE;
        _cleanup_free_ char *error = NULL;
        int r = image_store_delete(ctx->images, name, on_done, w, &f, &error);
        if (r < 0) {
                waiter_free(w);
                return api_reply_storage_failure(req, f, error);
        }
        return http_request_suspend(req);
}
