/* log.c — JSON lines on stderr, one write(2) per line so threads never interleave. */
#include "base/log.h"
#include "base/wbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <pthread.h>

int sl_log_level = SL_LOG_INFO;

#define CAPTURE_MAX (1u << 20)
static pthread_mutex_t capture_mu = PTHREAD_MUTEX_INITIALIZER;
static int capture_on;
static char *capture_buf;
static size_t capture_len;

void sl_log_capture(int on) {
    pthread_mutex_lock(&capture_mu);
    capture_on = on;
    capture_len = 0;
    if (on && !capture_buf) capture_buf = malloc(CAPTURE_MAX);
    if (!capture_buf) capture_on = 0;
    pthread_mutex_unlock(&capture_mu);
}

size_t sl_log_captured(char *out, size_t cap) {
    pthread_mutex_lock(&capture_mu);
    size_t n = SL_MIN(cap, capture_len);
    if (n) memcpy(out, capture_buf + (capture_len - n), n);
    pthread_mutex_unlock(&capture_mu);
    return n;
}

static void capture(const char *line, size_t n) {
    pthread_mutex_lock(&capture_mu);
    if (capture_on && n < CAPTURE_MAX) {
        if (capture_len + n > CAPTURE_MAX) {
            /* keep the newer half */
            size_t keep = CAPTURE_MAX / 2;
            memmove(capture_buf, capture_buf + capture_len - keep, keep);
            capture_len = keep;
        }
        memcpy(capture_buf + capture_len, line, n);
        capture_len += n;
    }
    pthread_mutex_unlock(&capture_mu);
}

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

    sl_wbuf_t b = SL_WBUF_BOUNDED(line, sizeof(line) - 2);
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
    if (__atomic_load_n(&capture_on, __ATOMIC_RELAXED)) capture(line, b.len);
    if (__atomic_load_n(&capture_on, __ATOMIC_RELAXED) && getenv("SLUICE_TEST_QUIET")) return;
    ssize_t w = write(STDERR_FILENO, line, b.len);
    (void)w;
}
