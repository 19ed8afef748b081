/* Text that becomes a JSON string (text.h). */
#include "text.h"

#include <stddef.h>

void agent_utf8_clean(char *s)
{
    unsigned char *p = (unsigned char *)s;
    while (*p != '\0') {
        size_t n = *p < 0x80                  ? 1
                   : *p >= 0xC2 && *p <= 0xDF ? 2
                   : *p >= 0xE0 && *p <= 0xEF ? 3
                   : *p >= 0xF0 && *p <= 0xF4 ? 4
                                              : 0;
        size_t k = 1;
        while (k < n && (p[k] & 0xC0) == 0x80)
            k++;
        /* no overlong forms, UTF-16 surrogates or code points past U+10FFFF */
        const int bad_second =
            (p[0] == 0xE0 && k > 1 && p[1] < 0xA0) || (p[0] == 0xED && k > 1 && p[1] > 0x9F) ||
            (p[0] == 0xF0 && k > 1 && p[1] < 0x90) || (p[0] == 0xF4 && k > 1 && p[1] > 0x8F);
        if (n == 0 || k < n || bad_second) {
            *p++ = '?';
            continue;
        }
        p += n;
    }
}
