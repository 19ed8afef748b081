/* Serving certificate and key, reloaded when the files change.
 *
 * libmicrohttpd asks for the certificate on every TLS handshake through a gnutls callback; the
 * callback first stat()s both files (cheap) and reloads the pair when either changed, so new
 * connections see a rotated certificate (cert-manager renewal, a re-rendered chart Secret) without
 * a restart. A pair that fails to load, or whose key does not match its certificate (files caught
 * halfway through an update), is logged once and the previous pair keeps being served. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "webhook.h"

#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define MAX_CHAIN 16
/* A replaced pair stays allocated this long: gnutls keeps pointers to the pair it was handed
 * until the handshake ends, and libmicrohttpd times idle connections out well before this. */
#define RETIRE_GRACE_S 600

struct identity {
    gnutls_pcert_st chain[MAX_CHAIN];
    unsigned int chain_len;
    gnutls_privkey_t key;
    time_t retired_at;
    struct identity *next;
};

struct file_stamp {
    int ok;
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime, ctime;
};

struct agent_tls {
    char *cert_path, *key_path;
    pthread_mutex_t lock;
    struct identity *current;
    struct identity *retired;              /* list, newest first */
    struct file_stamp cert_seen, key_seen; /* stamps of the last attempted load */
};

/* The callback libmicrohttpd hands to gnutls carries no user pointer; the webhook serves one
 * certificate pair per process, so the active pair lives here. */
static struct agent_tls *active_tls;

static void identity_free(struct identity *id)
{
    if (id == NULL)
        return;
    for (unsigned int i = 0; i < id->chain_len; i++)
        gnutls_pcert_deinit(&id->chain[i]);
    if (id->key != NULL)
        gnutls_privkey_deinit(id->key);
    free(id);
}

static void stamp_of(const char *path, struct file_stamp *st)
{
    struct stat sb;
    memset(st, 0, sizeof(*st));
    if (stat(path, &sb) != 0)
        return;
    st->ok = 1;
    st->dev = sb.st_dev;
    st->ino = sb.st_ino;
    st->size = sb.st_size;
    st->mtime = sb.st_mtim;
    st->ctime = sb.st_ctim;
}

static int stamp_eq(const struct file_stamp *a, const struct file_stamp *b)
{
    return a->ok == b->ok && a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec &&
           a->ctime.tv_sec == b->ctime.tv_sec && a->ctime.tv_nsec == b->ctime.tv_nsec;
}

static int key_id(gnutls_pubkey_t pub, unsigned char *out, size_t *len)
{
    return gnutls_pubkey_get_key_id(pub, GNUTLS_KEYID_USE_SHA256, out, len);
}

static void describe_cert(const gnutls_pcert_st *pc, char *buf, size_t len)
{
    gnutls_x509_crt_t crt;
    snprintf(buf, len, "(unknown)");
    if (gnutls_x509_crt_init(&crt) < 0)
        return;
    if (gnutls_x509_crt_import(crt, &pc->cert, GNUTLS_X509_FMT_DER) >= 0) {
        char dn[256];
        size_t dnlen = sizeof(dn);
        time_t exp = gnutls_x509_crt_get_expiration_time(crt);
        struct tm tm;
        char when[32] = "?";
        if (gnutls_x509_crt_get_dn(crt, dn, &dnlen) < 0)
            snprintf(dn, sizeof(dn), "?");
        if (gmtime_r(&exp, &tm) != NULL)
            strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
        snprintf(buf, len, "subject=\"%s\" expires=%s", dn, when);
    }
    gnutls_x509_crt_deinit(crt);
}

/* Loads one pair; on failure writes a reason into err and returns NULL. */
static struct identity *identity_load(const char *cert_path, const char *key_path, char *err,
                                      size_t errlen)
{
    gnutls_datum_t cert_pem = {NULL, 0}, key_pem = {NULL, 0};
    gnutls_pubkey_t pub = NULL;
    struct identity *id = calloc(1, sizeof(*id));
    int rc;

    if (id == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if ((rc = gnutls_load_file(cert_path, &cert_pem)) < 0) {
        snprintf(err, errlen, "cannot read certificate %s: %s", cert_path, gnutls_strerror(rc));
        goto fail;
    }
    if ((rc = gnutls_load_file(key_path, &key_pem)) < 0) {
        snprintf(err, errlen, "cannot read key %s: %s", key_path, gnutls_strerror(rc));
        goto fail;
    }
    id->chain_len = MAX_CHAIN;
    rc = gnutls_pcert_list_import_x509_raw(id->chain, &id->chain_len, &cert_pem,
                                           GNUTLS_X509_FMT_PEM, 0);
    if (rc < 0 || id->chain_len == 0) {
        id->chain_len = 0;
        snprintf(err, errlen, "%s holds no PEM certificate: %s", cert_path,
                 rc < 0 ? gnutls_strerror(rc) : "empty");
        goto fail;
    }
    if ((rc = gnutls_privkey_init(&id->key)) < 0 ||
        (rc = gnutls_privkey_import_x509_raw(id->key, &key_pem, GNUTLS_X509_FMT_PEM, NULL, 0)) <
            0) {
        snprintf(err, errlen, "%s holds no PEM private key: %s", key_path, gnutls_strerror(rc));
        goto fail;
    }

    /* The key must belong to the leaf certificate: compare the public key ids. */
    unsigned char a[64], b[64];
    size_t alen = sizeof(a), blen = sizeof(b);
    if ((rc = gnutls_pubkey_init(&pub)) < 0 ||
        (rc = gnutls_pubkey_import_privkey(pub, id->key, 0, 0)) < 0 ||
        (rc = key_id(pub, a, &alen)) < 0 || (rc = key_id(id->chain[0].pubkey, b, &blen)) < 0) {
        snprintf(err, errlen, "cannot compare key and certificate: %s", gnutls_strerror(rc));
        goto fail;
    }
    if (alen != blen || memcmp(a, b, alen) != 0) {
        snprintf(err, errlen, "key %s does not belong to certificate %s", key_path, cert_path);
        goto fail;
    }
    gnutls_pubkey_deinit(pub);
    gnutls_free(cert_pem.data);
    gnutls_free(key_pem.data);
    return id;

fail:
    if (pub != NULL)
        gnutls_pubkey_deinit(pub);
    gnutls_free(cert_pem.data);
    if (key_pem.data != NULL) {
        memset(key_pem.data, 0, key_pem.size);
        gnutls_free(key_pem.data);
    }
    identity_free(id);
    return NULL;
}

struct agent_tls *agent_tls_open(const char *cert_path, const char *key_path)
{
    char err[512], desc[384];
    struct agent_tls *tls = calloc(1, sizeof(*tls));
    if (tls == NULL)
        return NULL;
    tls->cert_path = strdup(cert_path);
    tls->key_path = strdup(key_path);
    pthread_mutex_init(&tls->lock, NULL);
    if (tls->cert_path == NULL || tls->key_path == NULL) {
        agent_tls_close(tls);
        return NULL;
    }
    stamp_of(cert_path, &tls->cert_seen);
    stamp_of(key_path, &tls->key_seen);
    tls->current = identity_load(cert_path, key_path, err, sizeof(err));
    if (tls->current == NULL) {
        agent_error("AGENT-WEBHOOK-CERT-LOAD-FAIL",
                    "%s; mount the serving certificate and key (PEM) and pass --cert/--key", err);
        agent_tls_close(tls);
        return NULL;
    }
    describe_cert(&tls->current->chain[0], desc, sizeof(desc));
    agent_info("AGENT-WEBHOOK-CERT-LOADED", "cert=%s %s chain=%u", cert_path, desc,
               tls->current->chain_len);
    return tls;
}

/* Called with tls->lock held. */
static void maybe_reload(struct agent_tls *tls)
{
    struct file_stamp c, k;
    char err[512], desc[384];
    time_t now = time(NULL);

    stamp_of(tls->cert_path, &c);
    stamp_of(tls->key_path, &k);
    if (stamp_eq(&c, &tls->cert_seen) && stamp_eq(&k, &tls->key_seen))
        return;
    tls->cert_seen = c;
    tls->key_seen = k;

    struct identity *fresh = identity_load(tls->cert_path, tls->key_path, err, sizeof(err));
    if (fresh == NULL) {
        agent_warn("AGENT-WEBHOOK-CERT-RELOAD-FAIL", "%s; still serving the previous certificate",
                   err);
        return;
    }
    tls->current->retired_at = now;
    tls->current->next = tls->retired;
    tls->retired = tls->current;
    tls->current = fresh;
    describe_cert(&fresh->chain[0], desc, sizeof(desc));
    agent_info("AGENT-WEBHOOK-CERT-RELOADED", "cert=%s %s", tls->cert_path, desc);

    /* Free pairs retired long enough ago that no handshake can still use them. */
    for (struct identity **pp = &tls->retired; *pp != NULL;) {
        if (now - (*pp)->retired_at > RETIRE_GRACE_S) {
            struct identity *old = *pp;
            *pp = old->next;
            identity_free(old);
        } else {
            pp = &(*pp)->next;
        }
    }
}

static int retrieve_cert(gnutls_session_t session, const gnutls_datum_t *req_ca_rdn, int nreqs,
                         const gnutls_pk_algorithm_t *pk_algos, int pk_algos_length,
                         gnutls_pcert_st **pcert, unsigned int *pcert_length,
                         gnutls_privkey_t *pkey)
{
    struct agent_tls *tls = active_tls;
    (void)session;
    (void)req_ca_rdn;
    (void)nreqs;
    (void)pk_algos;
    (void)pk_algos_length;
    if (tls == NULL)
        return -1;
    pthread_mutex_lock(&tls->lock);
    maybe_reload(tls);
    *pcert = tls->current->chain;
    *pcert_length = tls->current->chain_len;
    *pkey = tls->current->key;
    pthread_mutex_unlock(&tls->lock);
    return 0;
}

void agent_tls_activate(struct agent_tls *tls)
{
    active_tls = tls;
}

gnutls_certificate_retrieve_function2 *agent_tls_callback(void)
{
    return retrieve_cert;
}

void agent_tls_close(struct agent_tls *tls)
{
    if (tls == NULL)
        return;
    if (active_tls == tls)
        active_tls = NULL;
    identity_free(tls->current);
    while (tls->retired != NULL) {
        struct identity *next = tls->retired->next;
        identity_free(tls->retired);
        tls->retired = next;
    }
    pthread_mutex_destroy(&tls->lock);
    free(tls->cert_path);
    free(tls->key_path);
    free(tls);
}
