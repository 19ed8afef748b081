/* NCCL's list syntax (see spec.h): the generic matcher and the HCA lists of COLL_IB_HCA. */
#include <stdio.h>
#include <string.h>

#include "base/spec.h"
#include "base/util.h"

bool colli_spec_match(const char *spec, bool (*entry)(char *tok, bool exact, void *arg), void *arg)
{
    if (spec == NULL || *spec == '\0')
        return true;
    bool exclude = false, exact = false;
    if (*spec == '^')
        exclude = true, spec++;
    if (*spec == '=')
        exact = true, spec++;
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", spec);
    bool hit = false;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
        hit = entry(tok, exact, arg) || hit;
    return exclude ? !hit : hit;
}

typedef struct {
    const char *dev;
    int port;
} hca_t;

/* One COLL_IB_HCA entry: "dev" or "dev:port". */
static bool hca_entry(char *tok, bool exact, void *arg)
{
    const hca_t *h = arg;
    char *colon = strchr(tok, ':');
    long want_port = -1;
    if (colon) {
        *colon = '\0';
        if (!colli_parse_long(colon + 1, 1, 255, &want_port))
            return false;
    }
    if (*tok == '\0')
        return false;
    bool name_ok = exact ? strcmp(h->dev, tok) == 0 : strncmp(h->dev, tok, strlen(tok)) == 0;
    return name_ok && (want_port < 0 || want_port == h->port);
}

bool colli_ib_hca_match(const char *spec, const char *dev, int port)
{
    hca_t h = {dev, port};
    return colli_spec_match(spec, hca_entry, &h);
}

bool colli_ib_hca_check(const char *spec, char *why, size_t whylen)
{
    if (spec == NULL || *spec == '\0')
        return true;
    const char *s = spec;
    if (*s == '^')
        s++;
    if (*s == '=')
        s++;
    if (*s == '\0') {
        snprintf(why, whylen, "no device follows \"%.*s\"", (int)(s - spec), spec);
        return false;
    }
    char buf[256];
    if (strlen(s) >= sizeof(buf)) {
        snprintf(why, whylen, "longer than %zu characters", sizeof(buf) - 1);
        return false;
    }
    snprintf(buf, sizeof(buf), "%s", s);
    int entry = 0;
    for (char *tok = buf;; entry++) {
        char *comma = strchr(tok, ',');
        if (comma)
            *comma = '\0';
        if (*tok == '\0') {
            snprintf(why, whylen, "entry %d is empty (\"a,,b\" or a trailing comma)", entry + 1);
            return false;
        }
        char *colon = strchr(tok, ':');
        if (colon == tok) {
            snprintf(why, whylen, "entry \"%s\" has no device name before ':'", tok);
            return false;
        }
        long port;
        if (colon != NULL &&
            (strchr(colon + 1, ':') != NULL || !colli_parse_long(colon + 1, 1, 255, &port))) {
            snprintf(why, whylen,
                     "entry \"%s\": the port after ':' must be an integer from 1 to 255", tok);
            return false;
        }
        if (strpbrk(tok, "^= \t") != NULL) {
            snprintf(why, whylen,
                     "entry \"%s\" contains '^', '=' or a blank ('^' and '=' may only start the "
                     "list)",
                     tok);
            return false;
        }
        if (comma == NULL)
            return true;
        tok = comma + 1;
    }
}
