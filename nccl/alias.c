/* libnccl-alias.so: an empty library whose SONAME is libnccl.so and whose one dependency is
 * kcoll's libnccl.so.2. A program that opens NCCL by its unversioned name
 * (dlopen("libnccl.so"): TensorRT-LLM's user-buffer allocator) is not answered by a preloaded
 * libnccl.so.2 and would load NVIDIA's NCCL beside it, then hand it kcoll's communicators.
 * libnccl.so.2 loads this library from its own folder when it loads (misc.c, nccl_load_alias;
 * the webhook also preloads it after libnccl.so.2): it then answers that name, and dlsym on its
 * handle finds libnccl.so.2's functions (a handle's lookup covers its dependencies). */
typedef int kcoll_nccl_alias_unit; /* nothing of its own to define */
