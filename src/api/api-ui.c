/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The web VF map at /ui/: its static files (src/api/ui/, xterm.js for the console among them,
 * CONS-5), embedded at build time and served
 * verbatim, without a token like /healthz (API-12): they hold no host data. The page asks for
 * the token itself and reads the authenticated routes with it, so nothing about the host leaves
 * without one.
 *
 * Every answer carries a strict Content-Security-Policy (no inline script or style, no other
 * origin, no framing, no form posts), nosniff and no-referrer. The data shown comes from the
 * host (quarantine reasons, instance names), so the page is written as if it were hostile: the
 * policy is the second line behind the script's textContent-only rendering.
 */
#include <microhttpd.h>

#include "api-internal.h"

#define UI_CSP                                                                            \
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " \
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

/* Name, value pairs on every /ui answer, the redirect's included. */
#define UI_SECURITY_HEADERS                                                                        \
        "Content-Security-Policy", UI_CSP, "X-Content-Type-Options", "nosniff", "Referrer-Policy", \
            "no-referrer"

/* no-cache, not a max-age: after an upgrade the next load revalidates and gets the new files. */
static const char *const ui_headers[] = {UI_SECURITY_HEADERS, "Cache-Control", "no-cache", NULL};

static int reply_file(HttpRequest *req, const char *content_type, const char *body, size_t size)
{
        return http_reply_with_headers(req, MHD_HTTP_OK, content_type, body, size, ui_headers);
}

int api_handle_ui_index(HttpRequest *req, void *userdata)
{
        return reply_file(req, "text/html; charset=utf-8", api_ui_index_html,
                          api_ui_index_html_size);
}

int api_handle_ui_js(HttpRequest *req, void *userdata)
{
        return reply_file(req, "text/javascript; charset=utf-8", api_ui_vgpud_js,
                          api_ui_vgpud_js_size);
}

int api_handle_ui_css(HttpRequest *req, void *userdata)
{
        return reply_file(req, "text/css; charset=utf-8", api_ui_vgpud_css, api_ui_vgpud_css_size);
}

int api_handle_ui_xterm_js(HttpRequest *req, void *userdata)
{
        return reply_file(req, "text/javascript; charset=utf-8", api_ui_xterm_js,
                          api_ui_xterm_js_size);
}

int api_handle_ui_xterm_css(HttpRequest *req, void *userdata)
{
        return reply_file(req, "text/css; charset=utf-8", api_ui_xterm_css, api_ui_xterm_css_size);
}

int api_handle_ui_xterm_license(HttpRequest *req, void *userdata)
{
        return reply_file(req, "text/plain; charset=utf-8", api_ui_xterm_license,
                          api_ui_xterm_license_size);
}

/*
 * "/ui" without the slash: a permanent redirect to "/ui/" rather than the page itself, since
 * the page's relative asset links ("vgpud.js") resolve against "/ui/" only.
 */
int api_handle_ui_redirect(HttpRequest *req, void *userdata)
{
        static const char *const headers[] = {"Location", "/ui/", UI_SECURITY_HEADERS, NULL};
        return http_reply_with_headers(req, MHD_HTTP_PERMANENT_REDIRECT, NULL, NULL, 0, headers);
}
