/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vgpuctl's command line (OPS-6, OPS-7). Hand-written rather than getopt_long: getopt keeps
 * its position in globals, which would not survive the tests running many command lines in
 * one process, and it accepts abbreviations and repeated options that a strict parser refuses.
 */
#include <fcntl.h>

#include "ctl.h"

const char ctl_usage[] =
    "usage: vgpuctl [--url URL | --unix PATH] [--token T | --token-file F] [--json] COMMAND\n"
    "\n"
    "Commands:\n"
    "  resources                          capacity summary and profile availability\n"
    "  gpus                               GPUs and their VFs\n"
    "  health list                        VF health records and the quarantine breaker\n"
    "  health quarantine VF --reason R    keep a VF out of placement\n"
    "  health clear VF                    delete a VF's health record\n"
    "  health drain GPU --reason R        keep every VF of a GPU out of placement\n"
    "  health undrain GPU                 lift a GPU's drain (its VF records stay)\n"
    "  health clear-gpu GPU               delete the health records of a GPU's VFs\n"
    "  health breaker-reset               close an open quarantine breaker\n"
    "  token mint --secret-file F [--ttl D] [--sub S]\n"
    "                                     print a bearer token (default TTL 1h)\n"
    "\n"
    "Options:\n"
    "  --url URL         the daemon's base URL (default $VGPUD_URL, else " CTL_DEFAULT_URL ")\n"
    "  --unix PATH       talk to the daemon's Unix socket instead\n"
    "  --token T         bearer token (default $VGPUD_TOKEN)\n"
    "  --token-file F    read the bearer token from F\n"
    "  --json            print the daemon's JSON instead of tables\n"
    "  --help, --version\n"
    "\n"
    "Exit status: 0 success, 1 API error, 2 usage error, 3 connection error.\n";

typedef enum CtlOption {
        OPT_URL,
        OPT_UNIX,
        OPT_TOKEN,
        OPT_TOKEN_FILE,
        OPT_JSON,
        OPT_HELP,
        OPT_VERSION,
        OPT_REASON,
        OPT_SECRET_FILE,
        OPT_TTL,
        OPT_SUB,
        _OPT_MAX,
} CtlOption;

static const struct {
        const char *name;
        bool has_value;
} options[_OPT_MAX] = {
    [OPT_URL] = {"--url", true},
    [OPT_UNIX] = {"--unix", true},
    [OPT_TOKEN] = {"--token", true},
    [OPT_TOKEN_FILE] = {"--token-file", true},
    [OPT_JSON] = {"--json", false},
    [OPT_HELP] = {"--help", false},
    [OPT_VERSION] = {"--version", false},
    [OPT_REASON] = {"--reason", true},
    [OPT_SECRET_FILE] = {"--secret-file", true},
    [OPT_TTL] = {"--ttl", true},
    [OPT_SUB] = {"--sub", true},
};

/* The command words, with the options each command takes besides the global ones. */
static const struct {
        const char *words[2];
        CtlCommand command;
        bool takes_address;
        bool needs_reason;
} commands[] = {
    {{"resources", NULL}, CTL_COMMAND_RESOURCES, false, false},
    {{"gpus", NULL}, CTL_COMMAND_GPUS, false, false},
    {{"health", "list"}, CTL_COMMAND_HEALTH_LIST, false, false},
    {{"health", "quarantine"}, CTL_COMMAND_HEALTH_QUARANTINE, true, true},
    {{"health", "clear"}, CTL_COMMAND_HEALTH_CLEAR, true, false},
    {{"health", "drain"}, CTL_COMMAND_HEALTH_DRAIN, true, true},
    {{"health", "undrain"}, CTL_COMMAND_HEALTH_UNDRAIN, true, false},
    {{"health", "clear-gpu"}, CTL_COMMAND_HEALTH_CLEAR_GPU, true, false},
    {{"health", "breaker-reset"}, CTL_COMMAND_HEALTH_BREAKER_RESET, false, false},
    {{"token", "mint"}, CTL_COMMAND_TOKEN_MINT, false, false},
};

void ctl_args_done(CtlArgs *a)
{
        free(a->url);
        free(a->unix_socket);
        free(a->token);
        free(a->address);
        free(a->reason);
        free(a->secret_file);
        free(a->subject);
        *a = (CtlArgs){};
}

/* A base URL: http or https, something after the scheme, nothing a shell or header mangles. */
static int url_normalize(const char *source, const char *url, char **ret, char **error)
{
        const char *rest = startswith(url, "http://");
        if (!rest)
                rest = startswith(url, "https://");
        if (!rest || !*rest || *rest == '/')
                return error_set(error, -EINVAL,
                                 "%s: invalid URL \"%s\": expected http://HOST:PORT or "
                                 "https://HOST:PORT",
                                 source, url);
        for (const char *p = url; *p; p++)
                if ((unsigned char)*p <= ' ' || *p == 0x7f || *p == '?' || *p == '#')
                        return error_set(error, -EINVAL,
                                         "%s: invalid URL \"%s\": no spaces, control "
                                         "characters, query or fragment allowed",
                                         source, url);

        /* API paths are appended to it and the API never strips a trailing slash (API-3). */
        size_t n = strlen(url);
        while (n > 0 && url[n - 1] == '/')
                n--;
        char *copy = strndup(url, n);
        if (!copy)
                return error_set_oom(error);
        *ret = copy;
        return 0;
}

/* Whatever goes into the Authorization header must be visible ASCII and fit it (API-12). */
static int token_check(const char *source, const char *token, char **error)
{
        size_t n = strlen(token);
        if (n == 0)
                return error_set(error, -EINVAL, "%s: the token is empty", source);
        if (n > CTL_TOKEN_MAX)
                return error_set(error, -EINVAL, "%s: the token is longer than %d bytes", source,
                                 CTL_TOKEN_MAX);
        for (const char *p = token; *p; p++)
                if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f)
                        return error_set(error, -EINVAL,
                                         "%s: the token contains a character not allowed in "
                                         "an HTTP header",
                                         source);
        return 0;
}

static int token_read_file(const char *path, char **ret, char **error)
{
        _cleanup_free_ char *buf = NULL;
        size_t size;

        /* Room for the token and the newline that `token mint > file` leaves. */
        int r = read_file_at(AT_FDCWD, path, CTL_TOKEN_MAX + 2, &buf, &size);
        if (r == -EFBIG)
                return error_set(error, r, "--token-file %s: larger than a token can be", path);
        if (r < 0)
                return error_set(error, r, "--token-file %s: %s", path, strerror(-r));
        if (strlen(buf) != size)
                return error_set(error, -EINVAL, "--token-file %s: contains a NUL byte", path);
        if (size > 0 && buf[size - 1] == '\n')
                buf[size - 1] = 0;

        _cleanup_free_ char *source = NULL;
        if (strprintf(&source, "--token-file %s", path) < 0)
                return error_set_oom(error);
        r = token_check(source, buf, error);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(buf);
        return 0;
}

static int option_find(const char *arg, size_t len)
{
        for (size_t i = 0; i < _OPT_MAX; i++)
                if (strlen(options[i].name) == len && strncmp(options[i].name, arg, len) == 0)
                        return (int)i;
        return -ENOENT;
}

static bool is_valid_utf8(const char *s)
{
        json_t *j = json_string(s);
        json_decref(j);
        return j != NULL;
}

/* Options that only some commands take, with the commands that take them. */
static int check_command_options(CtlCommand c, bool takes_reason, const char *const *values,
                                 const char *words, char **error)
{
        static const CtlOption mint_only[] = {OPT_SECRET_FILE, OPT_TTL, OPT_SUB};

        if (values[OPT_REASON] && !takes_reason)
                return error_set(error, -EINVAL, "option --reason does not apply to \"%s\"", words);
        if (c != CTL_COMMAND_TOKEN_MINT)
                for (size_t i = 0; i < ELEMENTSOF(mint_only); i++)
                        if (values[mint_only[i]])
                                return error_set(error, -EINVAL,
                                                 "option %s does not apply to \"%s\"",
                                                 options[mint_only[i]].name, words);
        return 0;
}

static int parse_mint(const char *const *values, CtlArgs *a, char **error)
{
        if (!values[OPT_SECRET_FILE])
                return error_set(error, -EINVAL, "token mint needs --secret-file");
        a->secret_file = strdup(values[OPT_SECRET_FILE]);
        if (!a->secret_file)
                return error_set_oom(error);

        a->ttl = CTL_DEFAULT_TTL;
        if (values[OPT_TTL]) {
                nsec_t ttl;
                if (parse_duration(values[OPT_TTL], &ttl) < 0 || ttl < NSEC_PER_SEC)
                        return error_set(error, -EINVAL,
                                         "--ttl \"%s\": expected a duration of at least 1s, "
                                         "such as 30m, 1h or 1h30m",
                                         values[OPT_TTL]);
                a->ttl = ttl;
        }
        if (values[OPT_SUB]) {
                if (!*values[OPT_SUB] || !is_valid_utf8(values[OPT_SUB]))
                        return error_set(error, -EINVAL, "--sub must be non-empty UTF-8 text");
                a->subject = strdup(values[OPT_SUB]);
                if (!a->subject)
                        return error_set_oom(error);
        }
        return 0;
}

/* Where to connect and with which token: the command line first, then the environment. */
static int parse_connection(const char *const *values, const CtlEnv *env, CtlArgs *a, char **error)
{
        int r;

        if (values[OPT_URL] && values[OPT_UNIX])
                return error_set(error, -EINVAL, "--url and --unix exclude each other");
        if (values[OPT_UNIX]) {
                size_t n = strlen(values[OPT_UNIX]);
                if (n == 0 || n > CTL_UNIX_SOCKET_PATH_MAX)
                        return error_set(error, -EINVAL,
                                         "--unix: a socket path needs 1 to %d bytes",
                                         CTL_UNIX_SOCKET_PATH_MAX);
                a->unix_socket = strdup(values[OPT_UNIX]);
                if (!a->unix_socket)
                        return error_set_oom(error);
        } else if (values[OPT_URL]) {
                r = url_normalize("--url", values[OPT_URL], &a->url, error);
                if (r < 0)
                        return r;
        } else {
                bool from_env = env->url && *env->url;
                r = url_normalize(from_env ? "VGPUD_URL" : "default URL",
                                  from_env ? env->url : CTL_DEFAULT_URL, &a->url, error);
                if (r < 0)
                        return r;
        }

        if (values[OPT_TOKEN] && values[OPT_TOKEN_FILE])
                return error_set(error, -EINVAL, "--token and --token-file exclude each other");
        if (values[OPT_TOKEN_FILE])
                return token_read_file(values[OPT_TOKEN_FILE], &a->token, error);

        const char *token = values[OPT_TOKEN], *source = "--token";
        if (!token && env->token && *env->token) {
                token = env->token;
                source = "VGPUD_TOKEN";
        }
        if (!token)
                return 0;
        r = token_check(source, token, error);
        if (r < 0)
                return r;
        a->token = strdup(token);
        return a->token ? 0 : error_set_oom(error);
}

static int parse_command(const char *const *words, size_t n_words, const char *const *values,
                         const CtlEnv *env, CtlArgs *a, char **error)
{
        size_t n_cmd = 0;
        size_t i = 0;
        for (; i < ELEMENTSOF(commands); i++) {
                n_cmd = commands[i].words[1] ? 2 : 1;
                if (n_words >= n_cmd && streq(words[0], commands[i].words[0]) &&
                    (n_cmd == 1 || streq(words[1], commands[i].words[1])))
                        break;
        }
        if (i == ELEMENTSOF(commands)) {
                if (n_words >= 2 && (streq(words[0], "health") || streq(words[0], "token")))
                        return error_set(error, -EINVAL, "unknown command \"%s %s\"", words[0],
                                         words[1]);
                return error_set(error, -EINVAL, "unknown command \"%s\"", words[0]);
        }

        _cleanup_free_ char *name = NULL;
        if (strprintf(&name, "%s%s%s", commands[i].words[0], n_cmd == 2 ? " " : "",
                      n_cmd == 2 ? commands[i].words[1] : "") < 0)
                return error_set_oom(error);

        size_t n_args = commands[i].takes_address ? 1 : 0;
        if (n_words < n_cmd + n_args)
                return error_set(error, -EINVAL, "\"%s\" needs a PCI address", name);
        if (n_words > n_cmd + n_args)
                return error_set(error, -EINVAL, "unexpected argument \"%s\"",
                                 words[n_cmd + n_args]);

        a->command = commands[i].command;
        int r = check_command_options(a->command, commands[i].needs_reason, values, name, error);
        if (r < 0)
                return r;

        if (commands[i].takes_address) {
                /* Checked here as well as by the daemon: the address becomes part of a URL. */
                if (!pci_address_is_valid(words[n_cmd]))
                        return error_set(error, -EINVAL,
                                         "invalid PCI address \"%s\": expected dddd:bb:dd.f in "
                                         "lowercase hex",
                                         words[n_cmd]);
                a->address = strdup(words[n_cmd]);
                if (!a->address)
                        return error_set_oom(error);
        }
        if (commands[i].needs_reason) {
                const char *reason = values[OPT_REASON];
                if (!reason)
                        return error_set(error, -EINVAL, "\"%s\" needs --reason", name);
                size_t n = strlen(reason);
                if (n < 1 || n > CTL_REASON_MAX || !is_valid_utf8(reason))
                        return error_set(error, -EINVAL,
                                         "--reason must be UTF-8 text of 1 to %d bytes",
                                         CTL_REASON_MAX);
                a->reason = strdup(reason);
                if (!a->reason)
                        return error_set_oom(error);
        }

        if (a->command == CTL_COMMAND_TOKEN_MINT)
                return parse_mint(values, a, error);
        return parse_connection(values, env, a, error);
}

int ctl_args_parse(int argc, char *const *argv, const CtlEnv *env, CtlArgs *ret, char **error)
{
        _cleanup_(ctl_args_done) CtlArgs a = {};
        _cleanup_free_ const char **words = calloc(argc > 0 ? (size_t)argc : 1, sizeof(char *));
        const char *values[_OPT_MAX] = {};
        bool flags[_OPT_MAX] = {};
        size_t n_words = 0;
        bool options_done = false;

        if (!words)
                return error_set_oom(error);

        for (int i = 1; i < argc; i++) {
                const char *arg = argv[i];

                if (options_done || arg[0] != '-' || arg[1] == 0) {
                        words[n_words++] = arg;
                        continue;
                }
                if (streq(arg, "--")) {
                        options_done = true;
                        continue;
                }

                const char *eq = strchr(arg, '=');
                size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
                int o = streq(arg, "-h") ? OPT_HELP : option_find(arg, len);
                if (o < 0)
                        return error_set(error, -EINVAL, "unknown option \"%.*s\"", (int)len, arg);
                if (flags[o] || values[o])
                        return error_set(error, -EINVAL, "option %s given twice", options[o].name);
                if (!options[o].has_value) {
                        if (eq)
                                return error_set(error, -EINVAL, "option %s takes no value",
                                                 options[o].name);
                        flags[o] = true;
                        continue;
                }
                if (eq)
                        values[o] = eq + 1;
                else if (i + 1 < argc)
                        values[o] = argv[++i];
                else
                        return error_set(error, -EINVAL, "option %s needs a value",
                                         options[o].name);
        }

        a.json = flags[OPT_JSON];
        if (flags[OPT_HELP]) {
                a.command = CTL_COMMAND_HELP;
        } else if (flags[OPT_VERSION]) {
                a.command = CTL_COMMAND_VERSION;
        } else if (n_words == 0) {
                return error_set(error, -EINVAL, "no command given");
        } else {
                int r = parse_command(words, n_words, values, env, &a, error);
                if (r < 0)
                        return r;
        }

        *ret = a;
        a = (CtlArgs){};
        return 0;
}
