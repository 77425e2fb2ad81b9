/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The Authorization header (API-12): the Bearer scheme around a token that src/jwt checks. */
#include "http-internal.h"

int http_auth_check(const JwtSecret *secret, const char *authorization, Timestamp now,
                    char **ret_subject, char **error)
{
        return http_auth_check_cached(NULL, secret, authorization, now, ret_subject, error);
}

int http_auth_check_cached(JwtTokenCache *cache, const JwtSecret *secret, const char *authorization,
                           Timestamp now, char **ret_subject, char **error)
{
        if (!authorization)
                return error_set(error, -EACCES, "no Authorization header");
        if (strnlen(authorization, JWT_AUTHORIZATION_MAX + 1) > JWT_AUTHORIZATION_MAX)
                return error_set(error, -EACCES, "Authorization header longer than %d bytes",
                                 JWT_AUTHORIZATION_MAX);
        if (strncasecmp(authorization, "Bearer ", 7) != 0)
                return error_set(error, -EACCES, "Authorization scheme is not Bearer");

        const char *token = authorization + 7;
        token += strspn(token, " ");
        return jwt_verify_cached(cache, secret, token, now, ret_subject, error);
}
