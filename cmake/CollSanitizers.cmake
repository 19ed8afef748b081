# COLL_SANITIZE=ON builds everything with ASan + UBSan; UBSan findings abort so tests fail on them.
# C sources only: nvcc does not take -fsanitize (CUDA objects are linked into sanitized binaries
# uninstrumented).
if(COLL_SANITIZE)
  add_compile_options(
    "$<$<COMPILE_LANGUAGE:C>:-fsanitize=address,undefined;-fno-sanitize-recover=all;-fno-omit-frame-pointer>")
  add_link_options(-fsanitize=address,undefined)
endif()
