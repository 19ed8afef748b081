# Warning flags for every kcoll target: -Wall -Wextra (and -Werror unless COLL_WERROR=OFF).
add_library(coll_warnings INTERFACE)
target_compile_options(coll_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:C>:-Wall -Wextra -Wshadow -Wformat=2 -Wstrict-prototypes -Wmissing-prototypes
    -Wno-unused-parameter>)
if(COLL_WERROR)
  target_compile_options(coll_warnings INTERFACE $<$<COMPILE_LANGUAGE:C>:-Werror>)
endif()
