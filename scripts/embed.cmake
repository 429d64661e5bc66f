# Turns the file IN into a C source OUT defining NAME[] and NAME_len (NAME default
# sl_default_conf).
if(NOT NAME)
    set(NAME sl_default_conf)
endif()
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" n)
math(EXPR bytes "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
get_filename_component(src ${IN} NAME)
file(WRITE ${OUT} "/* generated from ${src} by scripts/embed.cmake */\n#include <stddef.h>\nconst char ${NAME}[] = {${body}0x00};\nconst size_t ${NAME}_len = ${bytes};\n")
