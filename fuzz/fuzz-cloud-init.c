/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * A create body's cloud_init (REL-5, REL-13, SEED-1, SEED-2, SEED-4). Invariants beyond "no
 * crash": a refused object gets a one-line message naming a cloud_init field; an accepted one
 * passes seed_cloud_init_check() again, renders to a user-data document that libyaml parses back as
 * one document whose keys read back exactly as given, and has fingerprints for every key.
 */
#include <yaml.h>

#include "base/json-util.h"
#include "seed/seed.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The user-data document parses as one mapping whose ssh_authorized_keys are c's keys. */
static void check_user_data(const SeedCloudInit *c, const SeedFile *f)
{
        yaml_parser_t p;
        yaml_document_t doc, more;
        if (!yaml_parser_initialize(&p))
                abort();
        yaml_parser_set_input_string(&p, (const unsigned char *)f->data, f->size);
        if (!yaml_parser_load(&p, &doc))
                abort();
        yaml_node_t *root = yaml_document_get_root_node(&doc);
        if (!root || root->type != YAML_MAPPING_NODE)
                abort();
        if (!yaml_parser_load(&p, &more) || yaml_document_get_root_node(&more))
                abort(); /* a second document */
        yaml_document_delete(&more);
        size_t seen = 0;
        for (yaml_node_pair_t *pair = root->data.mapping.pairs.start;
             pair < root->data.mapping.pairs.top; pair++) {
                yaml_node_t *k = yaml_document_get_node(&doc, pair->key);
                yaml_node_t *v = yaml_document_get_node(&doc, pair->value);
                if (strcmp((const char *)k->data.scalar.value, "ssh_authorized_keys") != 0)
                        continue;
                for (yaml_node_item_t *i = v->data.sequence.items.start;
                     i < v->data.sequence.items.top; i++, seen++) {
                        yaml_node_t *s = yaml_document_get_node(&doc, *i);
                        const char *want = c->ssh_authorized_keys[seen];
                        if (s->type != YAML_SCALAR_NODE ||
                            s->data.scalar.style == YAML_PLAIN_SCALAR_STYLE ||
                            s->data.scalar.length != strlen(want) ||
                            memcmp(s->data.scalar.value, want, strlen(want)) != 0)
                                abort();
                }
        }
        if (seen != strv_length(c->ssh_authorized_keys))
                abort();
        yaml_document_delete(&doc);
        yaml_parser_delete(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (json_text_too_deep((const char *)data, size, JSON_DEPTH_MAX))
                return 0;
        json_error_t jerr;
        json_auto_t *o =
            json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
        if (!o)
                return 0;
        SeedCloudInit c = {0};
        _cleanup_free_ char *error = NULL;
        if (seed_cloud_init_from_json(o, "cloud_init", -EINVAL, &c, &error) < 0) {
                if (!error || strchr(error, '\n') || !strstr(error, "cloud_init") || c.hostname ||
                    c.ssh_authorized_keys || c.user_data)
                        abort();
                return 0;
        }
        if (seed_cloud_init_check(&c, "cloud_init", -EINVAL, NULL) < 0)
                abort();
        SeedFile f = {0};
        if (seed_render_user_data(&c, c.hostname ? c.hostname : "fuzz", &f, NULL) < 0)
                abort();
        if (!c.user_data)
                check_user_data(&c, &f);
        else if (strcmp(f.data, c.user_data) != 0)
                abort();
        free(f.data);
        json_auto_t *view = seed_cloud_init_to_json(&c);
        if (!view ||
            json_array_size(json_object_get(view, "ssh_authorized_keys")) !=
                strv_length(c.ssh_authorized_keys) ||
            json_object_get(view, "user_data") == NULL)
                abort();
        seed_cloud_init_done(&c);
        return 0;
}
