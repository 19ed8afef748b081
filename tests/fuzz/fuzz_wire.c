/*
 * What arrives from the network before a peer is trusted: connection hellos (colli_hello_verify),
 * member records (colli_member_from_wire), unique ids as raw bytes (colli_uid_decode,
 * coll_unique_id_to_string) and the fingerprint of a received frame as printed in mismatch
 * errors (colli_fp_desc). The first input byte selects the target; for hellos its bits also ask
 * for a correct MAC and tag, so that the checks behind the MAC are reached.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "base/member.h"
#include "base/util.h"
#include "bootstrap/bootstrap.h"
#include "fuzz.h"
#include "plan/op.h"

static const uint8_t secret[16] = {0x6b, 0x63, 0x6f, 0x6c, 0x6c, 0x2d, 0x66, 0x75,
                                   0x7a, 0x7a, 0x2d, 0x6b, 0x65, 0x79, 0x21, 0x00};

static void hello(uint8_t sel, const uint8_t *d, size_t n)
{
    colli_hello_t h;
    memset(&h, 0, sizeof(h));
    memcpy(&h, d, n < sizeof(h) ? n : sizeof(h));
    if (sel & 0x10) {
        h.magic = COLLI_HELLO_MAGIC;
        h.proto = COLLI_PROTO_VERSION;
    }
    if (sel & 0x20)
        h.comm_tag = colli_comm_tag(secret);
    if (sel & 0x40)
        colli_siphash128(secret, &h, offsetof(colli_hello_t, mac), h.mac);
    const char *why = NULL;
    bool ok = colli_hello_verify(&h, secret, &why);
    if (ok && (h.magic != COLLI_HELLO_MAGIC || h.proto != COLLI_PROTO_VERSION ||
               h.comm_tag != colli_comm_tag(secret)))
        fuzz_fail("verify accepted a hello with a wrong magic, protocol or tag");
    if (ok && !(sel & 0x40)) {
        uint8_t mac[16];
        colli_siphash128(secret, &h, offsetof(colli_hello_t, mac), mac);
        if (memcmp(mac, h.mac, 16) != 0)
            fuzz_fail("verify accepted a wrong MAC");
    }
    if (!ok && (why == NULL || why[0] == '\0'))
        fuzz_fail("verify rejected a hello without saying why");
    if ((sel & 0x70) == 0x70 && !ok)
        fuzz_fail("verify rejected a correctly made hello");
}

static void member(const uint8_t *d, size_t n)
{
    colli_wire_member_t w;
    memset(&w, 0, sizeof(w));
    memcpy(&w, d, n < sizeof(w) ? n : sizeof(w));
    colli_member_t m;
    if (colli_member_from_wire(&w, &m) != COLL_SUCCESS)
        return;
    if (strnlen(m.version, sizeof(m.version)) == sizeof(m.version) ||
        strnlen(m.hostname, sizeof(m.hostname)) == sizeof(m.hostname) ||
        strnlen(m.host_id, sizeof(m.host_id)) == sizeof(m.host_id) ||
        strnlen(m.ifname, sizeof(m.ifname)) == sizeof(m.ifname))
        fuzz_fail("a decoded member record has an unterminated string");
    if (m.addr.ss_family != AF_INET && m.addr.ss_family != AF_INET6)
        fuzz_fail("a decoded member record has no usable address");
    if (m.nstreams < 1 || m.nstreams > 16)
        fuzz_fail("a decoded member record has an invalid stream count");
    colli_wire_member_t w2;
    colli_member_to_wire(&m, &w2);
    colli_member_t m2;
    if (colli_member_from_wire(&w2, &m2) != COLL_SUCCESS)
        fuzz_fail("a re-encoded member record does not decode");
    if (memcmp(&m, &m2, sizeof(m)) != 0)
        fuzz_fail("decode(encode(member)) != member");
    char desc[200];
    struct sockaddr_storage a = m.addr;
    colli_sockaddr_str(&a, desc, sizeof(desc));
}

static void uid(uint8_t sel, const uint8_t *d, size_t n)
{
    coll_unique_id_t id;
    memset(&id, 0, sizeof(id));
    memcpy(&id, d, n < sizeof(id) ? n : sizeof(id));
    struct sockaddr_storage root;
    uint8_t sec[16];
    coll_result_t rc = colli_uid_decode(&id, &root, sec);
    char buf[COLL_UNIQUE_ID_STRLEN];
    size_t len = (size_t)(sel >> 2) * 4 + 1; /* 1 .. 253: also too small buffers */
    if (len > sizeof(buf))
        len = sizeof(buf);
    memset(buf, 'X', sizeof(buf));
    coll_result_t r2 = coll_unique_id_to_string(&id, buf, len);
    if ((rc == COLL_SUCCESS) != (r2 == COLL_SUCCESS) && len == sizeof(buf))
        fuzz_fail("to_string and decode disagree about an id");
    if (r2 == COLL_SUCCESS) {
        if (strnlen(buf, len) >= len)
            fuzz_fail("to_string returned an unterminated string");
        coll_unique_id_t again;
        if (coll_unique_id_from_string(&again, buf) != COLL_SUCCESS)
            fuzz_fail("a printed id does not parse");
        struct sockaddr_storage root2;
        uint8_t sec2[16];
        if (colli_uid_decode(&again, &root2, sec2) != COLL_SUCCESS || memcmp(sec, sec2, 16) != 0)
            fuzz_fail("print/parse lost the secret");
    }
}

static void fingerprint(const uint8_t *d, size_t n)
{
    colli_fp_t fp;
    memset(&fp, 0, sizeof(fp));
    memcpy(&fp, d, n < sizeof(fp) ? n : sizeof(fp));
    char buf[160];
    size_t len = n > sizeof(fp) ? 1 + d[sizeof(fp)] % sizeof(buf) : sizeof(buf);
    colli_fp_desc(&fp, buf, len);
    if (strnlen(buf, len) >= len)
        fuzz_fail("colli_fp_desc returned an unterminated string");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t sel = data[0];
    switch (sel & 3) {
    case 0:
        hello(sel, data + 1, size - 1);
        break;
    case 1:
        member(data + 1, size - 1);
        break;
    case 2:
        uid(sel, data + 1, size - 1);
        break;
    default:
        fingerprint(data + 1, size - 1);
        break;
    }
    return 0;
}
