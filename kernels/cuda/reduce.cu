/*
 * CUDA reduction and copy kernels. The C API and the semantics are in reduce_cuda.h, the launch
 * planning (vector width, head/body/tail, grid) in plan.c, the promises and their limits in
 * docs/gpu.md.
 *
 * One kernel per datatype x op (60 in all; a copy is the uint8 sum of one input). Each kernel
 * grid-strides over whole vectors of 16, 8 or 4 bytes (the width the plan chose for this call's
 * pointers), COLLI_CUDA_UNROLL vectors per thread and iteration with every load of an input
 * issued before any arithmetic on it, then over the head and tail elements one by one.
 *
 * Bit-exactness with the CPU reference: float arithmetic uses the explicitly rounded intrinsics
 * (__fadd_rn, __fmul_rn, __fdiv_rn and their double forms), which are never contracted into FMAs
 * and never replaced by approximations (the build also passes -fmad=false -prec-div=true
 * -ftz=false); float16/bfloat16 go through float32 with the hardware conversions, which round to
 * nearest even like the CPU's; integers wrap in the unsigned type; min/max are the same
 * comparisons as the CPU's, on the bits for the half types.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>
#include <type_traits>

#include "fp8.h"
#include "plan.h"
#include "reduce_cuda.h"

namespace
{

static_assert(COLL_INT8 == 0 && COLL_UINT8 == 1 && COLL_INT32 == 2 && COLL_UINT32 == 3 &&
                  COLL_INT64 == 4 && COLL_UINT64 == 5 && COLL_FLOAT16 == 6 && COLL_BFLOAT16 == 7 &&
                  COLL_FLOAT32 == 8 && COLL_FLOAT64 == 9 && COLL_FLOAT8_E4M3 == 10 &&
                  COLL_FLOAT8_E5M2 == 11 && COLL_NUM_DATATYPES == 12,
              "the kernel table below follows coll_datatype_t");
static_assert(COLL_SUM == 0 && COLL_PROD == 1 && COLL_MIN == 2 && COLL_MAX == 3 && COLL_AVG == 4 &&
                  COLL_NUM_OPS == 5,
              "the kernel table below follows coll_op_t");

/* What one launch needs; passed by value (kernel parameter space). */
struct Args {
    void *dst;
    const void *src[COLLI_CUDA_MAX_SRCS];
    int nsrcs;
    uint32_t divisor; /* COLL_AVG: 0 = no division */
    size_t head, body, tail;
    unsigned vec_bytes;
    unsigned elem_aligned;
};

/* The divisor of COLL_AVG in every form the types need. */
struct Divisor {
    uint32_t u;
    unsigned k; /* log2(u) when pow2 */
    bool pow2;
    float f;  /* (float)u, rounded to nearest as on the CPU */
    double d; /* exact */
};

__device__ __forceinline__ Divisor make_divisor(uint32_t u)
{
    Divisor d;
    d.u = u == 0 ? 1u : u;
    d.pow2 = (d.u & (d.u - 1u)) == 0;
    d.k = (unsigned)(__ffs((int)d.u) - 1);
    d.f = __uint2float_rn(d.u);
    d.d = __uint2double_rn(d.u);
    return d;
}

/* ---- element types: S is the storage type; every function is one step of the CPU kernel ---- */

/* Integers: arithmetic in the unsigned type U (wraps), division in the 64-bit type W. */
template <typename T, typename U, typename W> struct IntType {
    typedef T S;
    static __device__ __forceinline__ S sum(S a, S b)
    {
        return (T)((U)a + (U)b);
    }
    static __device__ __forceinline__ S prod(S a, S b)
    {
        return (T)((U)a * (U)b);
    }
    static __device__ __forceinline__ S min(S a, S b)
    {
        return a < b ? a : b;
    }
    static __device__ __forceinline__ S max(S a, S b)
    {
        return a > b ? a : b;
    }
    /* C division (truncation); a power of two is a shift, rounded toward zero */
    static __device__ __forceinline__ S divide(W s, const Divisor &d)
    {
        if (d.pow2) {
            if constexpr (std::is_signed<W>::value)
                return (T)((s + ((s >> 63) & (W)(d.u - 1u))) >> d.k);
            else
                return (T)(s >> d.k);
        }
        return (T)(s / (W)d.u);
    }
    static __device__ __forceinline__ S sum_div(S a, S b, const Divisor &d)
    {
        return divide((W)sum(a, b), d);
    }
    static __device__ __forceinline__ S div(S a, const Divisor &d)
    {
        return divide((W)a, d);
    }
};

typedef IntType<int8_t, uint32_t, int64_t> I8;
typedef IntType<uint8_t, uint32_t, uint64_t> U8;
typedef IntType<int32_t, uint32_t, int64_t> I32;
typedef IntType<uint32_t, uint32_t, uint64_t> U32;
typedef IntType<int64_t, uint64_t, int64_t> I64;
typedef IntType<uint64_t, uint64_t, uint64_t> U64;

struct F32 {
    typedef float S;
    static __device__ __forceinline__ S sum(S a, S b)
    {
        return __fadd_rn(a, b);
    }
    static __device__ __forceinline__ S prod(S a, S b)
    {
        return __fmul_rn(a, b);
    }
    static __device__ __forceinline__ S min(S a, S b)
    {
        return a < b ? a : b;
    }
    static __device__ __forceinline__ S max(S a, S b)
    {
        return a > b ? a : b;
    }
    static __device__ __forceinline__ S sum_div(S a, S b, const Divisor &d)
    {
        return __fdiv_rn(__fadd_rn(a, b), d.f);
    }
    static __device__ __forceinline__ S div(S a, const Divisor &d)
    {
        return __fdiv_rn(a, d.f);
    }
};

struct F64 {
    typedef double S;
    static __device__ __forceinline__ S sum(S a, S b)
    {
        return __dadd_rn(a, b);
    }
    static __device__ __forceinline__ S prod(S a, S b)
    {
        return __dmul_rn(a, b);
    }
    static __device__ __forceinline__ S min(S a, S b)
    {
        return a < b ? a : b;
    }
    static __device__ __forceinline__ S max(S a, S b)
    {
        return a > b ? a : b;
    }
    static __device__ __forceinline__ S sum_div(S a, S b, const Divisor &d)
    {
        return __ddiv_rn(__dadd_rn(a, b), d.d);
    }
    static __device__ __forceinline__ S div(S a, const Divisor &d)
    {
        return __ddiv_rn(a, d.d);
    }
};

/* float16 / bfloat16 as raw bits. Arithmetic: to float32 (exact), one operation, back with one
 * rounding to nearest even (cvt.rn). min/max compare sign-magnitude keys of the bits, as the CPU
 * does: -0 == +0, a NaN compares false, the result is one input bit for bit. */
template <uint16_t INF> __device__ __forceinline__ bool half_less(uint16_t p, uint16_t q)
{
    int32_t mp = p & 0x7fff, mq = q & 0x7fff;
    int32_t kp = (p & 0x8000) ? -mp : mp, kq = (q & 0x8000) ? -mq : mq;
    return (kp < kq) & (mp <= INF) & (mq <= INF);
}

/* The small float types (float16, bfloat16, float8) as raw bits S: Conv converts to float32 and
 * back, Order compares (min/max select one input bit for bit). */
template <class Conv, class Order> struct SmallFloat {
    typedef typename Conv::S S;
    static __device__ __forceinline__ S sum(S a, S b)
    {
        return Conv::out(__fadd_rn(Conv::in(a), Conv::in(b)));
    }
    static __device__ __forceinline__ S prod(S a, S b)
    {
        return Conv::out(__fmul_rn(Conv::in(a), Conv::in(b)));
    }
    static __device__ __forceinline__ S min(S a, S b)
    {
        return Order::less(a, b) ? a : b;
    }
    static __device__ __forceinline__ S max(S a, S b)
    {
        return Order::less(b, a) ? a : b;
    }
    static __device__ __forceinline__ S sum_div(S a, S b, const Divisor &d)
    {
        return Conv::out(__fdiv_rn(__fadd_rn(Conv::in(a), Conv::in(b)), d.f));
    }
    static __device__ __forceinline__ S div(S a, const Divisor &d)
    {
        return Conv::out(__fdiv_rn(Conv::in(a), d.f));
    }
};

template <uint16_t INF> struct HalfOrder {
    static __device__ __forceinline__ bool less(uint16_t p, uint16_t q)
    {
        return half_less<INF>(p, q);
    }
};

/* float8: the integer conversions of fp8.h that the CPU kernels use, so the two agree bit for
 * bit, saturation included */
template <uint32_t NAN_MIN> struct Fp8Order {
    static __device__ __forceinline__ bool less(uint8_t p, uint8_t q)
    {
        return colli_fp8_less(p, q, NAN_MIN);
    }
};

struct HalfConv {
    typedef uint16_t S;
    static __device__ __forceinline__ float in(uint16_t x)
    {
        return __half2float(__ushort_as_half(x));
    }
    static __device__ __forceinline__ uint16_t out(float f)
    {
        return __half_as_ushort(__float2half_rn(f));
    }
};

struct Bf16Conv {
    typedef uint16_t S;
    static __device__ __forceinline__ float in(uint16_t x)
    {
        return __uint_as_float((uint32_t)x << 16);
    }
    static __device__ __forceinline__ uint16_t out(float f)
    {
        return __bfloat16_as_ushort(__float2bfloat16_rn(f));
    }
};

struct E4m3Conv {
    typedef uint8_t S;
    static __device__ __forceinline__ float in(uint8_t x)
    {
        return colli_e4m3_to_float(x);
    }
    static __device__ __forceinline__ uint8_t out(float f)
    {
        return colli_float_to_e4m3(f);
    }
};

struct E5m2Conv {
    typedef uint8_t S;
    static __device__ __forceinline__ float in(uint8_t x)
    {
        return colli_e5m2_to_float(x);
    }
    static __device__ __forceinline__ uint8_t out(float f)
    {
        return colli_float_to_e5m2(f);
    }
};

typedef SmallFloat<HalfConv, HalfOrder<0x7c00>> F16;
typedef SmallFloat<Bf16Conv, HalfOrder<0x7f80>> BF16;
typedef SmallFloat<E4m3Conv, Fp8Order<0x7fu>> E4M3;
typedef SmallFloat<E5m2Conv, Fp8Order<0x7du>> E5M2;

/* One step of op OP (COLL_AVG sums; its division is the separate last step). */
template <class DT, int OP>
__device__ __forceinline__ typename DT::S step(typename DT::S a, typename DT::S b)
{
    if constexpr (OP == COLL_PROD)
        return DT::prod(a, b);
    else if constexpr (OP == COLL_MIN)
        return DT::min(a, b);
    else if constexpr (OP == COLL_MAX)
        return DT::max(a, b);
    else
        return DT::sum(a, b);
}

/* ---- memory access ---- */
template <int V> struct Raw;
template <> struct Raw<16> {
    typedef uint4 T;
};
template <> struct Raw<8> {
    typedef uint64_t T;
};
template <> struct Raw<4> {
    typedef uint32_t T;
};
template <> struct Raw<2> {
    typedef uint16_t T;
};
template <> struct Raw<1> {
    typedef uint8_t T;
};

/* V bytes seen as raw words (one load or store) or as elements */
template <typename S, int V> union Pack {
    typename Raw<V>::T raw;
    S e[V / sizeof(S)];
};

/* One element at index i; aligned: one access of the element's size, else byte by byte. */
template <typename S> __device__ __forceinline__ S load1(const void *p, size_t i, bool aligned)
{
    typedef typename Raw<sizeof(S)>::T R;
    Pack<S, sizeof(S)> v;
    if (aligned) {
        v.raw = ((const R *)p)[i];
    } else {
        const uint8_t *b = (const uint8_t *)p + i * sizeof(S);
        uint64_t bits = 0;
#pragma unroll
        for (unsigned k = 0; k < sizeof(S); k++)
            bits |= (uint64_t)b[k] << (8 * k);
        v.raw = (R)bits;
    }
    return v.e[0];
}

template <typename S> __device__ __forceinline__ void store1(void *p, size_t i, S x, bool aligned)
{
    typedef typename Raw<sizeof(S)>::T R;
    Pack<S, sizeof(S)> v;
    v.e[0] = x;
    if (aligned) {
        ((R *)p)[i] = v.raw;
    } else {
        uint8_t *b = (uint8_t *)p + i * sizeof(S);
        uint64_t bits = v.raw;
#pragma unroll
        for (unsigned k = 0; k < sizeof(S); k++)
            b[k] = (uint8_t)(bits >> (8 * k));
    }
}

/* ---- the kernel ---- */

/* The body: elements [head, head + body) as whole vectors of V bytes, every pointer aligned. */
template <class DT, int OP, int V> __device__ __forceinline__ void body(const Args &a)
{
    typedef typename DT::S S;
    typedef typename Raw<V>::T R;
    typedef Pack<S, V> P;
    constexpr int N = V / sizeof(S);
    constexpr int UNROLL = COLLI_CUDA_UNROLL;
    const size_t nvec = a.body / N;
    const size_t off = a.head * sizeof(S);
    const size_t stride = (size_t)gridDim.x * blockDim.x * UNROLL;
    const bool divide = OP == COLL_AVG && a.divisor != 0;
    const Divisor d = make_divisor(a.divisor);
    R *dst = (R *)((char *)a.dst + off);
    const R *src0 = (const R *)((const char *)a.src[0] + off);

    for (size_t base = (size_t)blockIdx.x * blockDim.x * UNROLL + threadIdx.x; base < nvec;
         base += stride) {
        P acc[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            const size_t i = base + (size_t)u * blockDim.x;
            acc[u].raw = i < nvec ? src0[i] : R{};
        }
        for (int s = 1; s < a.nsrcs; s++) {
            const R *src = (const R *)((const char *)a.src[s] + off);
            P in[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                const size_t i = base + (size_t)u * blockDim.x;
                in[u].raw = i < nvec ? src[i] : R{};
            }
            if (divide && s == a.nsrcs - 1) {
#pragma unroll
                for (int u = 0; u < UNROLL; u++)
#pragma unroll
                    for (int e = 0; e < N; e++)
                        acc[u].e[e] = DT::sum_div(acc[u].e[e], in[u].e[e], d);
            } else {
#pragma unroll
                for (int u = 0; u < UNROLL; u++)
#pragma unroll
                    for (int e = 0; e < N; e++)
                        acc[u].e[e] = step<DT, OP>(acc[u].e[e], in[u].e[e]);
            }
        }
        if (divide && a.nsrcs == 1) {
#pragma unroll
            for (int u = 0; u < UNROLL; u++)
#pragma unroll
                for (int e = 0; e < N; e++)
                    acc[u].e[e] = DT::div(acc[u].e[e], d);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            const size_t i = base + (size_t)u * blockDim.x;
            if (i < nvec)
                dst[i] = acc[u].raw;
        }
    }
}

/* The singles: elements [0, head) and [head + body, count), one per thread. */
template <class DT, int OP> __device__ __forceinline__ void singles(const Args &a)
{
    typedef typename DT::S S;
    const size_t n = a.head + a.tail;
    const bool aligned = a.elem_aligned != 0;
    const bool divide = OP == COLL_AVG && a.divisor != 0;
    const Divisor d = make_divisor(a.divisor);

    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < n;
         j += (size_t)gridDim.x * blockDim.x) {
        const size_t i = j < a.head ? j : j + a.body;
        S acc = load1<S>(a.src[0], i, aligned);
        for (int s = 1; s < a.nsrcs; s++) {
            const S x = load1<S>(a.src[s], i, aligned);
            acc = divide && s == a.nsrcs - 1 ? DT::sum_div(acc, x, d) : step<DT, OP>(acc, x);
        }
        if (divide && a.nsrcs == 1)
            acc = DT::div(acc, d);
        store1<S>(a.dst, i, acc, aligned);
    }
}

/* __grid_constant__: the inputs are indexed at run time straight from parameter space, with no
 * copy of Args to the stack. */
template <class DT, int OP> __device__ __forceinline__ void run(const Args &a)
{
    typedef typename DT::S S;
    switch (a.vec_bytes) {
    case 16:
        body<DT, OP, 16>(a);
        break;
    case 8:
        if constexpr (sizeof(S) <= 8)
            body<DT, OP, 8>(a);
        break;
    case 4:
        if constexpr (sizeof(S) <= 4)
            body<DT, OP, 4>(a);
        break;
    default:
        break;
    }
    singles<DT, OP>(a);
}

template <class DT, int OP>
__global__ void __launch_bounds__(COLLI_CUDA_BLOCK, COLLI_CUDA_BLOCKS_PER_SM)
    reduce_kernel(const __grid_constant__ Args a)
{
    run<DT, OP>(a);
}

/* The ops of a list, each planned here from the pointers the list holds when the kernel runs
 * (colli_cuda_plan_parts, as the host plans a launch), run by the whole grid one after the
 * other (they do not depend on each other: no grid-wide wait between them). */
template <class DT, int OP>
__global__ void __launch_bounds__(COLLI_CUDA_BLOCK, COLLI_CUDA_BLOCKS_PER_SM)
    list_kernel(const colli_cuda_list_t *l)
{
    const uint32_t n = l->n < COLLI_CUDA_LIST_OPS ? l->n : COLLI_CUDA_LIST_OPS;
    for (uint32_t i = 0; i < n; i++) {
        const colli_cuda_list_op_t *op = &l->ops[i];
        const bool copy = op->nsrcs == 0;
        const int nsrcs = copy ? 1 : op->nsrcs;
        if (nsrcs < 1 || nsrcs > COLLI_CUDA_MAX_SRCS || op->count == 0 || op->dst == NULL)
            continue;
        Args a = {};
        uintptr_t addrs[COLLI_CUDA_MAX_SRCS + 1];
        a.dst = op->dst;
        addrs[0] = (uintptr_t)op->dst;
        for (int s = 0; s < nsrcs; s++) {
            a.src[s] = op->srcs[s];
            addrs[s + 1] = (uintptr_t)op->srcs[s];
        }
        a.nsrcs = nsrcs;
        a.divisor = OP == COLL_AVG && !copy ? op->divisor : 0u;
        colli_cuda_plan_t p;
        colli_cuda_plan_parts(&p, (size_t)op->count, copy ? 1 : sizeof(typename DT::S), addrs,
                              nsrcs + 1);
        a.head = p.head;
        a.body = p.body;
        a.tail = p.tail;
        a.vec_bytes = p.vec_bytes;
        a.elem_aligned = p.elem_aligned;
        if (copy)
            run<U8, COLL_SUM>(a);
        else
            run<DT, OP>(a);
    }
}

/* PreMulSum's first step, dst[i] = src[i] * scalar, as colli_scale computes it (DT::prod: the
 * same rounding as a PROD step); one element per thread and step, grid-strided. The scalar is
 * scalar_bits, or the element at scalar_dev (device memory, read when the kernel runs). */
template <class DT>
__global__ void __launch_bounds__(COLLI_CUDA_BLOCK)
    scale_kernel(void *dst, const void *src, size_t count, uint64_t scalar_bits,
                 const void *scalar_dev, bool aligned)
{
    typedef typename DT::S S;
    Pack<S, sizeof(S)> k;
    k.raw = (typename Raw<sizeof(S)>::T)scalar_bits;
    if (scalar_dev != NULL)
        memcpy(&k.e[0], scalar_dev, sizeof(S)); /* any alignment */
    const size_t step = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += step)
        store1<S>(dst, i, DT::prod(load1<S>(src, i, aligned), k.e[0]), aligned);
}

typedef void (*scale_fn)(void *, const void *, size_t, uint64_t, const void *, bool);

const scale_fn scale_kernels[COLL_NUM_DATATYPES] = {
    scale_kernel<I8>,  scale_kernel<U8>,  scale_kernel<I32>,  scale_kernel<U32>,
    scale_kernel<I64>, scale_kernel<U64>, scale_kernel<F16>,  scale_kernel<BF16>,
    scale_kernel<F32>, scale_kernel<F64>, scale_kernel<E4M3>, scale_kernel<E5M2>,
};

typedef void (*kernel_fn)(const Args);

#define KERNEL_ROW(DT)                                                                             \
    {                                                                                              \
        reduce_kernel<DT, COLL_SUM>, reduce_kernel<DT, COLL_PROD>, reduce_kernel<DT, COLL_MIN>,    \
            reduce_kernel<DT, COLL_MAX>, reduce_kernel<DT, COLL_AVG>                               \
    }

const kernel_fn kernels[COLL_NUM_DATATYPES][COLL_NUM_OPS] = {
    KERNEL_ROW(I8),  KERNEL_ROW(U8),  KERNEL_ROW(I32),  KERNEL_ROW(U32),
    KERNEL_ROW(I64), KERNEL_ROW(U64), KERNEL_ROW(F16),  KERNEL_ROW(BF16),
    KERNEL_ROW(F32), KERNEL_ROW(F64), KERNEL_ROW(E4M3), KERNEL_ROW(E5M2),
};

typedef void (*list_fn)(const colli_cuda_list_t *);

#define LIST_ROW(DT)                                                                               \
    {                                                                                              \
        list_kernel<DT, COLL_SUM>, list_kernel<DT, COLL_PROD>, list_kernel<DT, COLL_MIN>,          \
            list_kernel<DT, COLL_MAX>, list_kernel<DT, COLL_AVG>                                   \
    }

const list_fn list_kernels[COLL_NUM_DATATYPES][COLL_NUM_OPS] = {
    LIST_ROW(I8),  LIST_ROW(U8),   LIST_ROW(I32), LIST_ROW(U32), LIST_ROW(I64),  LIST_ROW(U64),
    LIST_ROW(F16), LIST_ROW(BF16), LIST_ROW(F32), LIST_ROW(F64), LIST_ROW(E4M3), LIST_ROW(E5M2),
};

const size_t elem_size[COLL_NUM_DATATYPES] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8, 1, 1};

int launch(kernel_fn fn, void *dst, const void *const *srcs, int nsrcs, size_t count, size_t esize,
           uint32_t divisor, int sm_count, void *stream)
{
    uintptr_t addrs[COLLI_CUDA_MAX_SRCS + 1];
    Args a = {};

    if (count == 0)
        return cudaSuccess;
    if (dst == NULL)
        return cudaErrorInvalidValue;
    addrs[0] = (uintptr_t)dst;
    for (int s = 0; s < nsrcs; s++) {
        if (srcs[s] == NULL)
            return cudaErrorInvalidValue;
        addrs[s + 1] = (uintptr_t)srcs[s];
        a.src[s] = srcs[s];
    }
    colli_cuda_plan_t p;
    if (colli_cuda_plan(&p, count, esize, addrs, nsrcs + 1, sm_count) != 0)
        return cudaErrorInvalidValue;
    a.dst = dst;
    a.nsrcs = nsrcs;
    a.divisor = divisor;
    a.head = p.head;
    a.body = p.body;
    a.tail = p.tail;
    a.vec_bytes = p.vec_bytes;
    a.elem_aligned = p.elem_aligned;
    void *params[] = {&a};
    return (int)cudaLaunchKernel((const void *)fn, dim3(p.grid), dim3(p.block), params, 0,
                                 (cudaStream_t)stream);
}

} // namespace

extern "C" int colli_cuda_sm_count(int device, int *sm_count)
{
    int n = 0;
    if (sm_count == NULL)
        return cudaErrorInvalidValue;
    cudaError_t err = cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess)
        return (int)err;
    if (n < 1)
        return cudaErrorInvalidDevice;
    *sm_count = n;
    return cudaSuccess;
}

extern "C" int colli_cuda_reduce(void *dst, const void *const *srcs, int nsrcs, size_t count,
                                 coll_datatype_t dt, coll_op_t op, uint32_t divisor, int sm_count,
                                 void *stream)
{
    if ((unsigned)dt >= (unsigned)COLL_NUM_DATATYPES || (unsigned)op >= (unsigned)COLL_NUM_OPS ||
        srcs == NULL || nsrcs < 1 || nsrcs > COLLI_CUDA_MAX_SRCS)
        return cudaErrorInvalidValue;
    return launch(kernels[dt][op], dst, srcs, nsrcs, count, elem_size[dt],
                  op == COLL_AVG ? divisor : 0u, sm_count, stream);
}

extern "C" int colli_cuda_copy(void *dst, const void *src, size_t bytes, int sm_count, void *stream)
{
    const void *srcs[1] = {src};
    return launch(kernels[COLL_UINT8][COLL_SUM], dst, srcs, 1, bytes, 1, 0, sm_count, stream);
}

extern "C" int colli_cuda_reduce_list(const colli_cuda_list_t *list, coll_datatype_t dt,
                                      coll_op_t op, int sm_count, void *stream)
{
    if ((unsigned)dt >= (unsigned)COLL_NUM_DATATYPES || (unsigned)op >= (unsigned)COLL_NUM_OPS ||
        list == NULL || sm_count < 1)
        return cudaErrorInvalidValue;
    size_t grid = (size_t)sm_count * COLLI_CUDA_BLOCKS_PER_SM;
    if (grid > COLLI_CUDA_MAX_GRID)
        grid = COLLI_CUDA_MAX_GRID;
    void *args[] = {(void *)&list};
    return (int)cudaLaunchKernel((const void *)list_kernels[dt][op], dim3((unsigned)grid),
                                 dim3(COLLI_CUDA_BLOCK), args, 0, (cudaStream_t)stream);
}

extern "C" int colli_cuda_scale(void *dst, const void *src, size_t count, coll_datatype_t dt,
                                const void *scalar, int on_device, int sm_count, void *stream)
{
    if ((unsigned)dt >= (unsigned)COLL_NUM_DATATYPES || scalar == NULL || sm_count < 1)
        return cudaErrorInvalidValue;
    if (count == 0)
        return cudaSuccess;
    if (dst == NULL || src == NULL)
        return cudaErrorInvalidValue;
    const size_t e = elem_size[dt];
    uint64_t bits = 0;
    const void *scalar_dev = on_device ? scalar : NULL;
    if (!on_device)
        memcpy(&bits, scalar, e);
    const bool aligned = (((uintptr_t)dst | (uintptr_t)src) & (e - 1)) == 0;
    const size_t want = (count + COLLI_CUDA_BLOCK - 1) / COLLI_CUDA_BLOCK;
    const size_t most = (size_t)sm_count * 8;
    const unsigned grid = (unsigned)(want < most ? want : most);
    void *args[] = {&dst, (void *)&src, &count, &bits, (void *)&scalar_dev, (void *)&aligned};
    return (int)cudaLaunchKernel((const void *)scale_kernels[dt], dim3(grid),
                                 dim3(COLLI_CUDA_BLOCK), args, 0, (cudaStream_t)stream);
}

extern "C" size_t colli_cuda_kernel_symbols(const void **syms, size_t max)
{
    size_t n = 0;
    for (int dt = 0; dt < COLL_NUM_DATATYPES; dt++) {
        for (int op = 0; op < COLL_NUM_OPS; op++) {
            if (n < max)
                syms[n++] = (const void *)kernels[dt][op];
            if (n < max)
                syms[n++] = (const void *)list_kernels[dt][op];
        }
        if (n < max)
            syms[n++] = (const void *)scale_kernels[dt];
    }
    return n;
}

extern "C" const char *colli_cuda_error_name(int err)
{
    return cudaGetErrorName((cudaError_t)err);
}

extern "C" const char *colli_cuda_error_string(int err)
{
    return cudaGetErrorString((cudaError_t)err);
}
