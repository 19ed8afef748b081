# COLL_SANITIZE=ON builds everything with ASan + UBSan; UBSan findings abort so tests fail on them.
if(COLL_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()
