/* bug.c — the report of an SL_BUG_ON (bug.h). */
#include "base/bug.h"

#include <stdio.h>
#include <stdlib.h>

void sl_bug(const char *file, int line, const char *cond) {
    /* stderr, unbuffered, and nothing that allocates: the process may be in any state */
    fprintf(stderr, "sluice: BUG at %s:%d: %s\n", file, line, cond);
    abort();
}
