/* list.h — an intrusive doubly-linked list: a node (sl_list_t) sits inside whatever it links,
 * and the list's head is a node of its own (a sentinel), so the list is circular and never
 * NULL-terminated. Unlinking needs the node alone (not its list), insertion and removal are
 * a few stores with no branch, and an entry can move between lists in O(1).
 *
 * Invariants: a head is initialised (sl_list_init) before use and not moved while linked
 * (its neighbours point at it). A node is either linked, or unlinked: self-linked (after
 * sl_list_init or sl_list_remove) or all zero (a calloc'ed entry never linked);
 * sl_list_remove and sl_list_linked accept both unlinked forms.
 * Owner: whoever owns the head; no locking here.
 */
#ifndef SL_LIST_H
#define SL_LIST_H

#include <stdbool.h>
#include <stddef.h>

#include "base/common.h" /* SL_CONTAINER_OF */

typedef struct sl_list_s {
    struct sl_list_s *prev, *next;
} sl_list_t;

/** An empty list (for a head), or an unlinked node. */
static inline void sl_list_init(sl_list_t *h) { h->prev = h->next = h; }

static inline bool sl_list_empty(const sl_list_t *h) { return h->next == h; }

/** True while n is in a list. */
static inline bool sl_list_linked(const sl_list_t *n) { return n->next != NULL && n->next != n; }

/** Links n (unlinked) right after pos (a head or a linked node). */
static inline void sl_list_insert_after(sl_list_t *pos, sl_list_t *n) {
    n->prev = pos;
    n->next = pos->next;
    pos->next->prev = n;
    pos->next = n;
}

/** Links n first (a stack: sl_list_first pops it next) or last (a queue). */
static inline void sl_list_push_front(sl_list_t *h, sl_list_t *n) { sl_list_insert_after(h, n); }
static inline void sl_list_push_back(sl_list_t *h, sl_list_t *n) { sl_list_insert_after(h->prev, n); }

/** Unlinks n from whatever list holds it and leaves it self-linked; an unlinked n is left
 *  as it is. */
static inline void sl_list_remove(sl_list_t *n) {
    if (!n->next) return;
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->prev = n->next = n;
}

/** The first or last node, or NULL when the list is empty. */
static inline sl_list_t *sl_list_first(const sl_list_t *h) { return h->next == h ? NULL : h->next; }
static inline sl_list_t *sl_list_last(const sl_list_t *h) { return h->prev == h ? NULL : h->prev; }

/** Moves every node of `from` to the end of `to`; `from` is left empty. */
static inline void sl_list_splice(sl_list_t *to, sl_list_t *from) {
    if (sl_list_empty(from)) return;
    from->next->prev = to->prev;
    to->prev->next = from->next;
    from->prev->next = to;
    to->prev = from->prev;
    sl_list_init(from);
}

/** The entry that holds node n in its field `member`. */
#define SL_LIST_ENTRY(n, type, member) SL_CONTAINER_OF(n, type, member)

/** The first or last entry, or NULL when the list is empty. */
#define SL_LIST_FIRST(h, type, member)                                                             \
    (sl_list_empty(h) ? (type *)NULL : SL_LIST_ENTRY((h)->next, type, member))
#define SL_LIST_LAST(h, type, member)                                                              \
    (sl_list_empty(h) ? (type *)NULL : SL_LIST_ENTRY((h)->prev, type, member))

/** Each node n of list h, first to last; the body must not unlink n (see _safe). */
#define sl_list_foreach(n, h) for ((n) = (h)->next; (n) != (h); (n) = (n)->next)
/** Each node n of list h, first to last; the body may unlink n (tmp holds the next one),
 *  but no other node of h. */
#define sl_list_foreach_safe(n, tmp, h)                                                            \
    for ((n) = (h)->next, (tmp) = (n)->next; (n) != (h); (n) = (tmp), (tmp) = (n)->next)

#endif
