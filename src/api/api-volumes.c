/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The volume routes (API-2, DISK-7): reads from the store's memory, a volume's attachments
 * derived from the instance records (the one source of truth for who holds what); a create is
 * answered 201 once volume.json is on disk, a delete 204 once the directory is gone.
 */
#include <microhttpd.h>

#include "api-internal.h"

static int volume_json(ApiContext *ctx, const Volume *v, json_t **ret)
{
        char created[TIMESTAMP_STRLEN];
        json_auto_t *attachments = json_array();
        const InstanceRecord *const *list = NULL;
        size_t n = ctx->instances ? instance_manager_list(ctx->instances, &list) : 0;
        if (!attachments)
                return -ENOMEM;
        for (size_t k = 0; k < n; k++)
                for (size_t i = 0; i < list[k]->n_volumes; i++)
                        if (streq(list[k]->volumes[i].id, v->id) &&
                            json_push(attachments,
                                      json_pack("{s:s, s:b}", "instance", list[k]->id, "readonly",
                                                list[k]->volumes[i].readonly)) < 0)
                                return -ENOMEM;
        json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:O}", "id", v->id, "name", v->name, "size_gb",
                              (json_int_t)v->size_gb, "created_at",
                              format_timestamp(v->created_at, created), "attachments", attachments);
        if (!o)
                return -ENOMEM;
        *ret = o;
        return 0;
}

static int reply_volume(ApiContext *ctx, HttpRequest *req, unsigned status, const Volume *v)
{
        json_auto_t *o = NULL;
        int r = volume_json(ctx, v, &o);
        if (r < 0)
                return r;
        return http_reply_json(req, status, o);
}

/* A volume operation that waits for its job; the request is answered once, then dropped. */
typedef struct VolumeWaiter {
        ApiContext *ctx;
        HttpRequest *req;
        unsigned status;
} VolumeWaiter;

static void on_done(int r, StorageFailure failure, const char *error, const Volume *volume,
                    void *userdata)
{
        VolumeWaiter *w = userdata;
        int k;
        if (r < 0)
                k = api_reply_storage_failure(w->req, failure, error);
        else if (!volume)
                k = http_reply(w->req, MHD_HTTP_NO_CONTENT, NULL, NULL, 0);
        else
                k = reply_volume(w->ctx, w->req, w->status, volume);
        if (k < 0 && k != -ECONNABORTED)
                (void)http_reply_error(w->req, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
                                       "answer: %s", strerror(-k));
        http_request_unref(w->req);
        free(w);
}

static VolumeWaiter *waiter_new(ApiContext *ctx, HttpRequest *req, unsigned status)
{
        VolumeWaiter *w = calloc(1, sizeof *w);
        if (w)
                *w = (VolumeWaiter){.ctx = ctx, .req = http_request_ref(req), .status = status};
        return w;
}

static void waiter_drop(VolumeWaiter *w)
{
        http_request_unref(w->req);
        free(w);
}

static const char *id_param(HttpRequest *req)
{
        const char *id = http_request_get_param(req, "id");
        if (id && random_id_is_valid(id))
                return id;
        (void)http_reply_error(req, MHD_HTTP_BAD_REQUEST, "invalid_id",
                               "invalid volume id: 20 characters of [a-z0-9] expected");
        return NULL;
}

int api_handle_volumes_list(HttpRequest *req, void *userdata)
{
        ApiContext *ctx = userdata;
        const Volume *const *list = NULL;
        size_t n = volume_store_list(ctx->volumes, &list);
        json_auto_t *a = json_array();
        if (!a)
                return -ENOMEM;
        for (size_t k = 0; k < n; k++) {
                json_t *o = NULL;
                int r = volume_json(ctx, list[k], &o);
                if (r < 0)
                        return r;
                if (json_push(a, o) < 0)
                        return -ENOMEM;
        }
        return http_reply_json(req, MHD_HTTP_OK, a);
}

int api_handle_volume_get(HttpRequest *req, void *userdata)
{
        ApiContext *ctx = userdata;
        const char *id = id_param(req);
        if (!id)
                return 0;
        const Volume *v = volume_store_get(ctx->volumes, id);
        if (!v || !streq(v->id, id))
                return http_reply_error(req, MHD_HTTP_NOT_FOUND, "not_found", "volume %s not found",
                                        id);
        return reply_volume(ctx, req, MHD_HTTP_OK, v);
}

typedef struct CreateBody {
        const char *name;
        json_int_t size_gb;
} CreateBody;

static const JsonField create_fields[] = {
    {"name", JSON_FIELD_STRING, true, JSON_AT(CreateBody, name)},
    {"size_gb", JSON_FIELD_INTEGER, true, JSON_AT(CreateBody, size_gb)},
    {},
};

int api_handle_volume_create(HttpRequest *req, void *userdata)
{
        ApiContext *ctx = userdata;
        json_t *parsed = NULL;
        if (http_request_parse_json(req, &parsed) < 0)
                return 0; /* answered */
        json_auto_t *body = parsed;
        CreateBody b = {0};
        _cleanup_free_ char *error = NULL;
        if (json_schema_read(body, NULL, create_fields, &b, -EINVAL, &error) < 0)
                return http_reply_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", "%s", error);
        if (api_refuse_unless_ready(ctx, req) != 0)
                return 0;
        VolumeWaiter *w = waiter_new(ctx, req, MHD_HTTP_CREATED);
        if (!w)
                return -ENOMEM;
        StorageFailure f = STORAGE_FAILURE_NONE;
        uint64_t max = ctx->config ? ctx->config->storage.max_disk_gb : 0;
        int r = volume_store_create(ctx->volumes, b.name, b.size_gb < 0 ? 0 : (uint64_t)b.size_gb,
                                    max, on_done, w, &f, &error);
        if (r < 0) {
                waiter_drop(w);
                return api_reply_storage_failure(req, f, error);
        }
        return http_request_suspend(req);
}

int api_handle_volume_delete(HttpRequest *req, void *userdata)
{
        ApiContext *ctx = userdata;
        const char *id = id_param(req);
        if (!id || api_refuse_body(req) < 0 || api_refuse_unless_ready(ctx, req) != 0)
                return 0;
        VolumeWaiter *w = waiter_new(ctx, req, MHD_HTTP_NO_CONTENT);
        if (!w)
                return -ENOMEM;
        StorageFailure f = STORAGE_FAILURE_NONE;
        _cleanup_free_ char *error = NULL;
        int r = volume_store_delete(ctx->volumes, id, on_done, w, &f, &error);
        if (r < 0) {
                waiter_drop(w);
                return api_reply_storage_failure(req, f, error);
        }
        return http_request_suspend(req);
}
