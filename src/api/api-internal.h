/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* Pieces shared between the api module's files. */

#include <jansson.h>

#include "api.h"
#include "base/json-util.h"

/* One health record as API-10 shows it: the HEALTH-1 keys, then "gpu" (when known) and
 * "present". */
int api_health_record_json(const ApiContext *ctx, const HealthRecord *rec, json_t **ret);

/* The "breaker" object of API-10, also the answer of DELETE /gpu/health/breaker. */
int api_breaker_json(const ApiContext *ctx, json_t **ret);

/* Between the route files: 503 not_ready while starting or stopping (API-17, OPS-3): 1 when
 * answered. */
int api_refuse_unless_ready(ApiContext *ctx, HttpRequest *req);
/* 400 for a body on a POST that takes none: -EINVAL when answered. */
int api_refuse_body(HttpRequest *req);

/* api-instances.c: API-7's instance object and the instance routes. */
void api_instances_done(ApiContext *ctx);
int api_instance_json(const InstanceRecord *r, json_t **ret);
int api_handle_instances_list(HttpRequest *req, void *userdata);
/* GET /network (NET-9), api-network.c. */
int api_handle_network(HttpRequest *req, void *userdata);
int api_handle_instance_create(HttpRequest *req, void *userdata);
int api_handle_instance_get(HttpRequest *req, void *userdata);
int api_handle_instance_delete(HttpRequest *req, void *userdata);
int api_handle_instance_start(HttpRequest *req, void *userdata);
int api_handle_instance_stop(HttpRequest *req, void *userdata);
int api_handle_instance_volume_attach(HttpRequest *req, void *userdata); /* DISK-8 */
int api_handle_instance_volume_detach(HttpRequest *req, void *userdata);
int api_handle_instance_standby(HttpRequest *req, void *userdata);
int api_handle_instance_snapshot(HttpRequest *req, void *userdata);
int api_handle_instance_fork(HttpRequest *req, void *userdata);
int api_handle_instance_console(HttpRequest *req, void *userdata);
int api_handle_instance_console_attach(HttpRequest *req, void *userdata);

/* api-images.c: the image store's routes (DISK-1..DISK-4); a store's refusal as API-21 says. */
int api_reply_storage_failure(HttpRequest *req, StorageFailure f, const char *error);
void api_images_done(ApiContext *ctx);
int api_handle_images_list(HttpRequest *req, void *userdata);
int api_handle_image_import(HttpRequest *req, void *userdata);
int api_handle_image_get(HttpRequest *req, void *userdata);
int api_handle_image_delete(HttpRequest *req, void *userdata);

/* api-volumes.c: the volume routes (DISK-7). */
int api_handle_volumes_list(HttpRequest *req, void *userdata);
int api_handle_volume_create(HttpRequest *req, void *userdata);
int api_handle_volume_get(HttpRequest *req, void *userdata);
int api_handle_volume_delete(HttpRequest *req, void *userdata);

/* api-ui.c: the web VF map at /ui/, public (API-12), its files embedded at build time. */
extern const char api_ui_index_html[], api_ui_vgpud_js[], api_ui_vgpud_css[];
extern const size_t api_ui_index_html_size, api_ui_vgpud_js_size, api_ui_vgpud_css_size;
/* xterm.js for the console (CONS-5), its style sheet and its licence. */
extern const char api_ui_xterm_js[], api_ui_xterm_css[], api_ui_xterm_license[];
extern const size_t api_ui_xterm_js_size, api_ui_xterm_css_size, api_ui_xterm_license_size;
int api_handle_ui_xterm_js(HttpRequest *req, void *userdata);
int api_handle_ui_xterm_css(HttpRequest *req, void *userdata);
int api_handle_ui_xterm_license(HttpRequest *req, void *userdata);
int api_handle_ui_index(HttpRequest *req, void *userdata);
int api_handle_ui_js(HttpRequest *req, void *userdata);
int api_handle_ui_css(HttpRequest *req, void *userdata);
int api_handle_ui_redirect(HttpRequest *req, void *userdata);
