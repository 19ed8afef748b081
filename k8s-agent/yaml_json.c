/* YAML documents (kubeconfig, standalone topology files) loaded with libyaml into jansson trees,
 * so that the rest of the agent reads one representation. */
#define _GNU_SOURCE
#include "agent.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

static json_t *plain_scalar(const char *s, size_t len)
{
    char *end = NULL;
    long long v;
    if ((len == 4 && strcmp(s, "true") == 0) || (len == 4 && strcmp(s, "True") == 0))
        return json_true();
    if ((len == 5 && strcmp(s, "false") == 0) || (len == 5 && strcmp(s, "False") == 0))
        return json_false();
    if (len == 0 || (len == 4 && strcmp(s, "null") == 0) || (len == 1 && s[0] == '~'))
        return json_null();
    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno == 0 && end == s + len && len > 0 && !(len > 1 && s[0] == '0'))
        return json_integer(v);
    return json_stringn(s, len);
}

static json_t *convert(yaml_document_t *doc, yaml_node_t *node, int depth)
{
    json_t *out = NULL;
    if (!node || depth > 64)
        return NULL;
    switch (node->type) {
    case YAML_SCALAR_NODE: {
        const char *s = (const char *)node->data.scalar.value;
        size_t len = node->data.scalar.length;
        if (node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE)
            return plain_scalar(s, len);
        return json_stringn(s, len);
    }
    case YAML_SEQUENCE_NODE: {
        yaml_node_item_t *it;
        out = json_array();
        for (it = node->data.sequence.items.start; out && it < node->data.sequence.items.top;
             it++) {
            json_t *v = convert(doc, yaml_document_get_node(doc, *it), depth + 1);
            if (!v || json_array_append_new(out, v) != 0) {
                json_decref(out);
                return NULL;
            }
        }
        return out;
    }
    case YAML_MAPPING_NODE: {
        yaml_node_pair_t *p;
        out = json_object();
        for (p = node->data.mapping.pairs.start; out && p < node->data.mapping.pairs.top; p++) {
            yaml_node_t *k = yaml_document_get_node(doc, p->key);
            json_t *v;
            if (!k || k->type != YAML_SCALAR_NODE) {
                json_decref(out);
                return NULL;
            }
            v = convert(doc, yaml_document_get_node(doc, p->value), depth + 1);
            if (!v || json_object_setn_new(out, (const char *)k->data.scalar.value,
                                           k->data.scalar.length, v) != 0) {
                json_decref(out);
                return NULL;
            }
        }
        return out;
    }
    default:
        return NULL;
    }
}

json_t *agent_yaml_load(const char *data, size_t len, char *err, size_t errlen)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    json_t *out;
    json_error_t jerr;
    size_t i = 0;

    while (i < len && (data[i] == ' ' || data[i] == '\n' || data[i] == '\t' || data[i] == '\r'))
        i++;
    if (i < len && (data[i] == '{' || data[i] == '[')) {
        out = json_loadb(data, len, 0, &jerr);
        if (!out)
            snprintf(err, errlen, "JSON error at line %d: %s", jerr.line, jerr.text);
        return out;
    }
    if (!yaml_parser_initialize(&parser)) {
        snprintf(err, errlen, "libyaml initialisation failed");
        return NULL;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)data, len);
    if (!yaml_parser_load(&parser, &doc)) {
        snprintf(err, errlen, "YAML error at line %lu: %s",
                 (unsigned long)parser.problem_mark.line + 1,
                 parser.problem ? parser.problem : "unknown");
        yaml_parser_delete(&parser);
        return NULL;
    }
    out = convert(&doc, yaml_document_get_root_node(&doc), 0);
    if (!out)
        snprintf(err, errlen, "empty or unsupported YAML document (mapping keys must be scalars)");
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return out;
}
