/* The OCP float8 formats on the value grid, for the tests (independent of kernels/fp8.h): e4m3
 * nonzero for E4M3 (3 mantissa bits, bias 7, no infinities, largest 448), else E5M2 (2, 15,
 * IEEE-like, largest 57344). Header-only. */
#ifndef KCOLL_TESTS_FP8_REF_H
#define KCOLL_TESTS_FP8_REF_H

#include <math.h>

/* The value of code b. */
static inline double fp8_ref_value(int e4m3, unsigned b)
{
    const unsigned mbits = e4m3 ? 3u : 2u, bias = e4m3 ? 7u : 15u;
    const unsigned exp = (b & 0x7fu) >> mbits, man = b & ((1u << mbits) - 1u);
    double v;
    if (e4m3 && (b & 0x7fu) == 0x7fu)
        v = NAN;
    else if (!e4m3 && exp == 31u)
        v = man ? NAN : INFINITY;
    else if (exp == 0)
        v = ldexp((double)man, 1 - (int)bias - (int)mbits);
    else
        v = ldexp((double)((1u << mbits) + man), (int)exp - (int)bias - (int)mbits);
    return (b & 0x80u) ? -v : v;
}

/* The code of x rounded to nearest even, saturating at the largest finite value (infinities
 * too), NaN kept (E4M3 S.1111.111, E5M2 S.11111.10). */
static inline unsigned fp8_ref_round(int e4m3, double x)
{
    const int mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
    const unsigned maxcode = e4m3 ? 0x7eu : 0x7bu, sign = signbit(x) ? 0x80u : 0u;
    if (isnan(x))
        return sign | (e4m3 ? 0x7fu : 0x7eu);
    double ax = fabs(x);
    if (ax > fp8_ref_value(e4m3, maxcode) * 2) /* also infinity: saturates */
        return sign | maxcode;
    int e;
    frexp(ax, &e); /* ax in [2^(e-1), 2^e) */
    int ulp = e - 1 - mbits;
    if (ulp < 1 - bias - mbits) /* subnormal range: fixed spacing */
        ulp = 1 - bias - mbits;
    double v = ldexp(rint(ldexp(ax, -ulp)), ulp);
    for (unsigned c = 0; c <= maxcode; c++)
        if (fp8_ref_value(e4m3, c) == v)
            return sign | c;
    return sign | maxcode; /* beyond the largest finite value: saturate */
}

#endif
