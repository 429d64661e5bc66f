/* replay_main.c — runs a libFuzzer target over files without libFuzzer, so the normal build
 * (gcc, no sanitizer runtime needed) replays the seed corpus as a unit test.
 *
 * Usage: fuzz_head_replay DIR_OR_FILE...
 * Each directory's regular files run in name order; a file argument runs by itself (handy for
 * a crash-* file from scripts/fuzz). Exits nonzero when an argument is missing, a directory
 * holds no file, or a file cannot be read; an invariant the target checks aborts the process.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Runs one file; the input gets a buffer of exactly its size, so an overread is an overread. */
static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || st.st_size < 0) {
        fprintf(stderr, "replay: %s: cannot stat\n", path);
        fclose(f);
        return -1;
    }
    size_t n = (size_t)st.st_size;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf || fread(buf, 1, n, f) != n) {
        fprintf(stderr, "replay: %s: short read\n", path);
        free(buf);
        fclose(f);
        return -1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 0;
}

static int only_files(const struct dirent *d) { return d->d_name[0] != '.'; }

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR_OR_FILE...\n", argv[0]);
        return 2;
    }
    int ran = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            bad++;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (run_file(argv[i]) == 0)
                ran++;
            else
                bad++;
            continue;
        }
        struct dirent **list;
        int n = scandir(argv[i], &list, only_files, alphasort);
        if (n < 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            bad++;
            continue;
        }
        int here = 0;
        for (int k = 0; k < n; k++) {
            char path[4096];
            snprintf(path, sizeof(path), "%s/%s", argv[i], list[k]->d_name);
            free(list[k]);
            if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
            if (run_file(path) == 0)
                ran++, here++;
            else
                bad++;
        }
        free(list);
        if (here == 0) {
            fprintf(stderr, "replay: %s: no files\n", argv[i]);
            bad++;
        }
    }
    printf("replay: %d files ran, %d problems\n", ran, bad);
    return bad ? 1 : 0;
}
