/* h1_head.h — building HTTP/1.1 heads from a request's parsed fields (h1_head.c).
 * Internal: sl__ names. Every builder writes into the request's arena; SL_OK, or
 * SL_ERROR when the head does not fit. */
#ifndef SL_H1_HEAD_H
#define SL_H1_HEAD_H

#include "http/request.h"

/** The head sent upstream into r->uphead: method, path (prefix stripped, or a plugin's),
 *  query, the client's end-to-end headers with the plugins' edits, X-Forwarded-*,
 *  X-Request-ID, the consumer header, framing, and Connection/Upgrade. */
int sl__h1_upstream_head(sl_req_t *r);
/** The head for an HTTP/1 client, from the upstream's parsed response r->rhead, queued
 *  in r->clq; chooses r->clq.chunked (a body_filter re-frames the body as chunked). */
int sl__h1_client_head(sl_req_t *r);
/** The head of a gateway-made answer (status r->status) queued in r->clq. */
int sl__h1_answer_head(sl_req_t *r, sl_str_t ctype, uint64_t content_length);
/** Whether the client asked to keep the connection (HTTP/1.1, or 1.0 with keep-alive). */
bool sl__h1_client_keeps_alive(const sl_req_t *r);
/** Whether the upstream's response lets its connection be reused. */
bool sl__h1_upstream_keeps_alive(const sl_h1_head_t *h);
/** Whether the request goes upstream as an upgrade: HTTP/1.1 with Connection: upgrade and
 *  one Upgrade header whose every protocol the route lists (h2c never). */
bool sl__h1_upgrade_allowed(const sl_req_t *r);

#endif
