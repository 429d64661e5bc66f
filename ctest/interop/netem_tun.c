/* netem_tun.c — a userspace network impairer between two network namespaces (issue 27).
 *
 * The kernel this project tests on has no netem (CONFIG_NET_SCH_NETEM unset, no modules), so
 * the interop matrix's impaired link is this program: two TUN devices, one created inside
 * each namespace, and one thread that reads every IP packet from one and writes it to the
 * other after applying, per direction and independently:
 *
 *   loss     --loss PCT          each packet is dropped with probability PCT/100
 *   rate     --rate-kbit N       a serialising link of N kbit/s: a packet leaves when the
 *                                ones queued before it have been sent; a packet that would
 *                                wait more than --queue-ms (default 100) is tail-dropped
 *   delay    --delay-ms MS       every packet is held MS ms after it left the rate stage
 *   reorder  --reorder PCT       a packet is held --reorder-extra-ms (default 10) more with
 *                                probability PCT/100, so later packets overtake it
 *   limit    --limit N           at most N packets held per direction (default 10000); more
 *                                are dropped (dropped_limit), as netem's `limit`
 *
 * Command line
 *   netem_tun --ns-a PATH --dev-a NAME --ns-b PATH --dev-b NAME [impairments above]
 *             [--seed N] [--stats PATH] [--ready-file PATH]
 *   PATH is a network namespace file (/var/run/netns/NAME, /proc/PID/ns/net). The devices
 *   are made with IFF_TUN|IFF_NO_PI; the caller gives them addresses and brings them up
 *   (ip -n NS addr add A peer B dev NAME; ip -n NS link set NAME up). Once both exist the
 *   ready file gets "ready\n". The devices go away with the process.
 *
 * Counters: SIGUSR1 writes them to --stats (JSON, renamed into place), and so does the exit
 * on SIGTERM/SIGINT (exit 0). Per direction ("a_to_b", "b_to_a") and "total": in,
 * forwarded, bytes, dropped_loss, dropped_queue, dropped_limit, write_failed (the device
 * refused the packet), reordered (packets written after a packet that came in after them),
 * held (queued now), delayed_max_us (the longest a forwarded packet was held), and the seed
 * (a run is reproduced with --seed).
 */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define MAX_PKT 65536
#define BATCH 64

typedef struct {
    int64_t due_ns;
    uint64_t seq;
    int64_t in_ns;
    uint32_t len;
    unsigned char *data;
} pkt_t;

typedef struct {
    const char *name;
    int in_fd, out_fd;
    pkt_t *heap;
    size_t n, cap;
    int64_t link_free_ns; /* the rate stage's next free moment */
    uint64_t next_seq, max_sent_seq;
    int sent_any;
    uint64_t in, forwarded, bytes, dropped_loss, dropped_queue, dropped_limit, reordered, write_failed;
    int64_t delayed_max_ns;
} dir_t;

static double g_loss, g_reorder;
static int64_t g_delay_ns, g_reorder_extra_ns, g_queue_ns = 100 * 1000000LL;
static uint64_t g_rate_bps;
static size_t g_limit = 10000;
static uint64_t g_seed, g_rng;
static const char *g_stats;
static volatile sig_atomic_t g_stop, g_dump;

static void die(const char *what)
{
    fprintf(stderr, "netem_tun: %s: %s\n", what, strerror(errno));
    exit(2);
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* xorshift64*: a uniform double in [0, 1) */
static double rnd(void)
{
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return (double)((g_rng * 2685821657736338717ULL) >> 11) / 9007199254740992.0;
}

static int before(const pkt_t *x, const pkt_t *y)
{
    return x->due_ns < y->due_ns || (x->due_ns == y->due_ns && x->seq < y->seq);
}

static void heap_push(dir_t *d, pkt_t p)
{
    if (d->n == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 256;
        d->heap = realloc(d->heap, d->cap * sizeof *d->heap);
        if (!d->heap)
            die("realloc");
    }
    size_t i = d->n++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!before(&p, &d->heap[up]))
            break;
        d->heap[i] = d->heap[up];
        i = up;
    }
    d->heap[i] = p;
}

static pkt_t heap_pop(dir_t *d)
{
    pkt_t top = d->heap[0], last = d->heap[--d->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= d->n)
            break;
        if (c + 1 < d->n && before(&d->heap[c + 1], &d->heap[c]))
            c++;
        if (!before(&d->heap[c], &last))
            break;
        d->heap[i] = d->heap[c];
        i = c;
    }
    if (d->n)
        d->heap[i] = last;
    return top;
}

/* One packet read from d->in_fd at `now`: dropped, or queued with its due time. */
static void admit(dir_t *d, const unsigned char *buf, size_t len, int64_t now)
{
    d->in++;
    if (g_loss > 0 && rnd() < g_loss) {
        d->dropped_loss++;
        return;
    }
    if (d->n >= g_limit) {
        d->dropped_limit++;
        return;
    }
    int64_t depart = now;
    if (g_rate_bps) {
        int64_t start = d->link_free_ns > now ? d->link_free_ns : now;
        if (start - now > g_queue_ns) {
            d->dropped_queue++;
            return;
        }
        depart = start + (int64_t)((uint64_t)len * 8 * 1000000000ULL / g_rate_bps);
        d->link_free_ns = depart;
    }
    int64_t due = depart + g_delay_ns;
    if (g_reorder > 0 && rnd() < g_reorder)
        due += g_reorder_extra_ns;
    pkt_t p = {.due_ns = due, .seq = d->next_seq++, .in_ns = now, .len = (uint32_t)len};
    p.data = malloc(len);
    if (!p.data)
        die("malloc");
    memcpy(p.data, buf, len);
    heap_push(d, p);
}

static void read_side(dir_t *d, unsigned char *buf)
{
    for (int i = 0; i < BATCH; i++) {
        ssize_t r = read(d->in_fd, buf, MAX_PKT);
        if (r < 0) {
            if (errno == EAGAIN || errno == EINTR)
                return;
            die("read tun");
        }
        if (r > 0)
            admit(d, buf, (size_t)r, now_ns());
    }
}

static void send_due(dir_t *d, int64_t now)
{
    while (d->n && d->heap[0].due_ns <= now) {
        pkt_t p = heap_pop(d);
        /* a write that fails (the device went down) loses the packet, as a wire would */
        if (write(d->out_fd, p.data, p.len) == (ssize_t)p.len) {
            d->forwarded++;
            d->bytes += p.len;
            if (d->sent_any && p.seq < d->max_sent_seq)
                d->reordered++;
            else
                d->max_sent_seq = p.seq;
            d->sent_any = 1;
            if (now - p.in_ns > d->delayed_max_ns)
                d->delayed_max_ns = now - p.in_ns;
        } else if (!d->write_failed++) {
            fprintf(stderr, "netem_tun: %s: write: %s (counted in write_failed)\n", d->name, strerror(errno));
        }
        free(p.data);
    }
}

/* One direction's counters as a JSON member; with b, the sum of a's and b's. */
static void dir_json(FILE *f, const char *name, const dir_t *a, const dir_t *b)
{
    static const dir_t zero;
    if (!b)
        b = &zero;
    fprintf(f,
            "\"%s\": {\"in\": %llu, \"forwarded\": %llu, \"bytes\": %llu, \"dropped_loss\": %llu, "
            "\"dropped_queue\": %llu, \"dropped_limit\": %llu, \"write_failed\": %llu, "
            "\"reordered\": %llu, \"held\": %llu, \"delayed_max_us\": %lld}",
            name, (unsigned long long)(a->in + b->in), (unsigned long long)(a->forwarded + b->forwarded),
            (unsigned long long)(a->bytes + b->bytes), (unsigned long long)(a->dropped_loss + b->dropped_loss),
            (unsigned long long)(a->dropped_queue + b->dropped_queue),
            (unsigned long long)(a->dropped_limit + b->dropped_limit),
            (unsigned long long)(a->write_failed + b->write_failed),
            (unsigned long long)(a->reordered + b->reordered), (unsigned long long)(a->n + b->n),
            (long long)((a->delayed_max_ns > b->delayed_max_ns ? a->delayed_max_ns : b->delayed_max_ns) / 1000));
}

static void write_stats(const dir_t *a, const dir_t *b)
{
    if (!g_stats)
        return;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", g_stats);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return;
    fprintf(f, "{\"seed\": %llu, ", (unsigned long long)g_seed);
    dir_json(f, a->name, a, NULL);
    fputs(", ", f);
    dir_json(f, b->name, b, NULL);
    fputs(", ", f);
    dir_json(f, "total", a, b);
    fputs("}\n", f);
    fclose(f);
    rename(tmp, g_stats);
}

/* A TUN device named `dev` made inside the namespace at `ns_path`; the calling thread is
 * left in that namespace (the caller returns to its own). */
static int tun_in(const char *ns_path, const char *dev)
{
    int ns = open(ns_path, O_RDONLY | O_CLOEXEC);
    if (ns < 0)
        die(ns_path);
    if (setns(ns, CLONE_NEWNET) < 0)
        die("setns");
    close(ns);
    int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    if (fd < 0)
        die("/dev/net/tun");
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
    snprintf(ifr.ifr_name, IFNAMSIZ, "%s", dev);
    if (ioctl(fd, TUNSETIFF, &ifr) < 0)
        die("TUNSETIFF");
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0)
        die("fcntl");
    return fd;
}

static void on_signal(int sig)
{
    if (sig == SIGUSR1)
        g_dump = 1;
    else
        g_stop = 1;
}

static double num(const char *flag, const char *v)
{
    char *end;
    double x = strtod(v, &end);
    if (!*v || *end || x < 0) {
        fprintf(stderr, "netem_tun: %s wants a number >= 0, not '%s'\n", flag, v);
        exit(2);
    }
    return x;
}

int main(int argc, char **argv)
{
    const char *ns_a = NULL, *ns_b = NULL, *dev_a = NULL, *dev_b = NULL, *ready = NULL;
    g_seed = (uint64_t)now_ns() ^ ((uint64_t)getpid() << 32);
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "netem_tun: %s needs a value\n", f);
            return 2;
        }
        i++;
        if (!strcmp(f, "--ns-a"))
            ns_a = v;
        else if (!strcmp(f, "--ns-b"))
            ns_b = v;
        else if (!strcmp(f, "--dev-a"))
            dev_a = v;
        else if (!strcmp(f, "--dev-b"))
            dev_b = v;
        else if (!strcmp(f, "--delay-ms"))
            g_delay_ns = (int64_t)(num(f, v) * 1e6);
        else if (!strcmp(f, "--loss"))
            g_loss = num(f, v) / 100.0;
        else if (!strcmp(f, "--reorder"))
            g_reorder = num(f, v) / 100.0;
        else if (!strcmp(f, "--reorder-extra-ms"))
            g_reorder_extra_ns = (int64_t)(num(f, v) * 1e6);
        else if (!strcmp(f, "--rate-kbit"))
            g_rate_bps = (uint64_t)(num(f, v) * 1000.0);
        else if (!strcmp(f, "--queue-ms"))
            g_queue_ns = (int64_t)(num(f, v) * 1e6);
        else if (!strcmp(f, "--limit"))
            g_limit = (size_t)num(f, v);
        else if (!strcmp(f, "--seed"))
            g_seed = strtoull(v, NULL, 10);
        else if (!strcmp(f, "--stats"))
            g_stats = v;
        else if (!strcmp(f, "--ready-file"))
            ready = v;
        else {
            fprintf(stderr, "netem_tun: unknown flag %s (the grammar is at the top of netem_tun.c)\n", f);
            return 2;
        }
    }
    if (!ns_a || !ns_b || !dev_a || !dev_b) {
        fprintf(stderr, "netem_tun: --ns-a, --dev-a, --ns-b and --dev-b are required\n");
        return 2;
    }
    if (g_reorder > 0 && !g_reorder_extra_ns)
        g_reorder_extra_ns = 10 * 1000000LL;
    g_rng = g_seed ? g_seed : 0x9e3779b97f4a7c15ULL;

    int self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (self < 0)
        die("/proc/self/ns/net");
    int fa = tun_in(ns_a, dev_a), fb = tun_in(ns_b, dev_b);
    if (setns(self, CLONE_NEWNET) < 0)
        die("setns back");
    close(self);

    sigset_t block, none;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGUSR1);
    sigprocmask(SIG_BLOCK, &block, NULL);
    sigemptyset(&none);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);

    dir_t a = {.name = "a_to_b", .in_fd = fa, .out_fd = fb};
    dir_t b = {.name = "b_to_a", .in_fd = fb, .out_fd = fa};
    if (ready) {
        FILE *f = fopen(ready, "w");
        if (!f)
            die(ready);
        fputs("ready\n", f);
        fclose(f);
    }
    static unsigned char buf[MAX_PKT];
    struct pollfd pf[2] = {{.fd = fa, .events = POLLIN}, {.fd = fb, .events = POLLIN}};
    while (!g_stop) {
        int64_t now = now_ns(), next = -1;
        send_due(&a, now);
        send_due(&b, now);
        if (a.n)
            next = a.heap[0].due_ns;
        if (b.n && (next < 0 || b.heap[0].due_ns < next))
            next = b.heap[0].due_ns;
        struct timespec ts, *tsp = NULL;
        if (next >= 0) {
            int64_t wait = next - now_ns();
            if (wait < 0)
                wait = 0;
            ts.tv_sec = wait / 1000000000LL;
            ts.tv_nsec = wait % 1000000000LL;
            tsp = &ts;
        }
        int r = ppoll(pf, 2, tsp, &none);
        if (r < 0 && errno != EINTR)
            die("ppoll");
        if (r > 0) {
            if (pf[0].revents & POLLIN)
                read_side(&a, buf);
            if (pf[1].revents & POLLIN)
                read_side(&b, buf);
            if ((pf[0].revents | pf[1].revents) & (POLLERR | POLLHUP | POLLNVAL)) {
                fprintf(stderr, "netem_tun: a device failed\n");
                break;
            }
        }
        if (g_dump) {
            g_dump = 0;
            write_stats(&a, &b);
        }
    }
    write_stats(&a, &b);
    return 0;
}
