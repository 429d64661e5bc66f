/* outq.h — bytes queued for one direction of a connection, written with one writev at a
 * time: a head, a few body slices (framed as chunks when the direction is chunked) and
 * the last chunk. The queue only points at bytes; their owner keeps them alive until the
 * write completes. Owned by whoever owns the direction (a request); worker thread only.
 */
#ifndef SL_OUTQ_H
#define SL_OUTQ_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#define SL_SPANS 16                     /* body slices queued per write */
#define SL_IOV (SL_SPANS * 3 + 4)       /* head + 100-continue + spans (size, data, CRLF) + end */

/** Bytes queued for one direction, written with one writev at a time. */
typedef struct {
    uv_buf_t iov[SL_IOV];
    char sizes[SL_SPANS + 1][20]; /**< chunk-size lines when re-chunking */
    uint16_t niov, nsizes;
    uint8_t writing;              /**< a write is in flight */
    uint8_t chunked;              /**< spans are framed as chunks */
} sl_outq_t;

/** An empty queue, not chunked, no write in flight: its arrays are left as they are (nothing
 *  reads them past niov and nsizes). */
void sl_outq_init(sl_outq_t *q);
/** Empties the queue (the chunked flag stays). */
void sl_outq_reset(sl_outq_t *q);
/** Queues n bytes as they are; false when the queue is full. */
bool sl_outq_add(sl_outq_t *q, const char *p, size_t n);
/** Queues a body slice, framed as one chunk when q->chunked; false when full. */
bool sl_outq_span(sl_outq_t *q, const char *p, size_t n);
/** Queues the last chunk when q->chunked; false when full. */
bool sl_outq_end_chunks(sl_outq_t *q);
/** How many more body slices fit. */
uint32_t sl_outq_room(const sl_outq_t *q);
/** Copies the queue's bytes from position (*qi, *qoff) into buf, at most len, and moves the
 *  position past them: the bytes copied. The queue is taken whole when *qi == q->niov. */
size_t sl_outq_copy(const sl_outq_t *q, uint16_t *qi, size_t *qoff, uint8_t *buf, size_t len);
/** Writes the queue on a plain TCP stream: 1 when written at once (the queue is empty,
 *  no callback follows), 0 when a write is in flight (cb follows), <0 on error. */
int sl_outq_write(sl_outq_t *q, uv_stream_t *s, uv_write_t *wr, uv_write_cb cb);

#endif
