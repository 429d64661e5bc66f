# Turns the file IN into a C source OUT defining sl_default_conf[] and sl_default_conf_len.
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" n)
math(EXPR bytes "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
file(WRITE ${OUT} "/* generated from conf/sluice.yaml by scripts/embed.cmake */\n#include <stddef.h>\nconst char sl_default_conf[] = {${body}0x00};\nconst size_t sl_default_conf_len = ${bytes};\n")
