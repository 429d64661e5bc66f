/* log.c — JSON lines on stderr, one write(2) per line so threads never interleave. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

int sl_log_level = SL_LOG_INFO;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void sl_log_init_from_env(void) {
    const char *v = getenv("SLUICE_LOG_LEVEL");
    if (!v) return;
    for (int i = 0; i < 4; i++)
        if (strcmp(v, level_names[i]) == 0 || (i == 3 && strcmp(v, "err") == 0)) sl_log_level = i;
}

void sl_log_kv(int level, const char *const *fields, size_t nfields, const char *fmt, ...) {
    if (level < sl_log_level) return;
    char line[4096], msg[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (n < 0) return;

    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char ts[40];
    size_t tl = strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);

    sl_wbuf_t b = {line, 0, sizeof(line) - 2};
    SL_WBUF_LIT(&b, "{\"ts\":\"");
    sl_wbuf_put(&b, ts, tl);
    char frac[8];
    int fl = snprintf(frac, sizeof(frac), ".%03dZ", (int)(tv.tv_usec / 1000));
    sl_wbuf_put(&b, frac, (size_t)fl);
    SL_WBUF_LIT(&b, "\",\"level\":\"");
    sl_wbuf_put(&b, level_names[level], strlen(level_names[level]));
    SL_WBUF_LIT(&b, "\",\"msg\":\"");
    sl_wbuf_json_str(&b, (sl_str_t){msg, SL_MIN((size_t)n, sizeof(msg) - 1)});
    sl_wbuf_put(&b, "\"", 1);
    for (size_t i = 0; i + 1 < nfields * 2; i += 2) {
        if (!fields[i + 1]) continue;
        SL_WBUF_LIT(&b, ",\"");
        sl_wbuf_json_str(&b, (sl_str_t){fields[i], strlen(fields[i])});
        SL_WBUF_LIT(&b, "\":\"");
        sl_wbuf_json_str(&b, (sl_str_t){fields[i + 1], strlen(fields[i + 1])});
        sl_wbuf_put(&b, "\"", 1);
    }
    line[b.len++] = '}';
    line[b.len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, b.len);
    (void)w;
}
