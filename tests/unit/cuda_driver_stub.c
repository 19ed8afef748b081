/* A stand-in for the CUDA driver, built as libcuda.so.1 in a directory of its own, for
 * test_cuda_ptr: cuPointerGetAttribute reports "device" for one registered range and "managed
 * device" for another; any other pointer is unknown to CUDA (host memory). */
#include <stddef.h>
#include <stdint.h>

static uintptr_t dev_lo, dev_hi, man_lo, man_hi;

void stub_set_ranges(const void *dev, size_t dev_len, const void *man, size_t man_len);
int cuPointerGetAttribute(void *data, int attribute, unsigned long long ptr);

void stub_set_ranges(const void *dev, size_t dev_len, const void *man, size_t man_len)
{
    dev_lo = (uintptr_t)dev;
    dev_hi = dev_lo + dev_len;
    man_lo = (uintptr_t)man;
    man_hi = man_lo + man_len;
}

int cuPointerGetAttribute(void *data, int attribute, unsigned long long ptr)
{
    int dev = ptr >= dev_lo && ptr < dev_hi, man = ptr >= man_lo && ptr < man_hi;
    if (!dev && !man)
        return 1; /* CUDA_ERROR_INVALID_VALUE: not a CUDA allocation */
    if (attribute == 2) {
        *(unsigned int *)data = 2; /* CU_MEMORYTYPE_DEVICE */
        return 0;
    }
    if (attribute == 8) {
        *(unsigned int *)data = man ? 1u : 0u; /* CU_POINTER_ATTRIBUTE_IS_MANAGED */
        return 0;
    }
    return 1;
}
