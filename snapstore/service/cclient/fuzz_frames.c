/* Fuzz the native client's side of the protocol: the relay of the service's frames (the real
 * relay() of snapstore.c, fed through a socketpair) and the marshal writer of requests.
 *
 *   libFuzzer:   clang -g -fsanitize=fuzzer,address,undefined -include CONFIG fuzz_frames.c
 *   standalone:  cc -g -fsanitize=address,undefined -DFUZZ_STANDALONE -include CONFIG fuzz_frames.c
 *                ./fuzz_frames ITERATIONS SEED      (seeded random and mutated frame streams)
 *                ./fuzz_frames --marshal            (stdin: records of a 4-byte LE length and bytes;
 *                                                    stdout: each as the client's marshal str)
 * `make fuzz` runs libFuzzer when clang is there; the tests run the standalone driver under
 * AddressSanitizer and UndefinedBehaviorSanitizer, and check the marshal writer against Python.
 */
#define main snapstore_main
#include "snapstore.c"
#undef main

#include <fcntl.h>

#ifdef FUZZ_STANDALONE
static void quiet_outputs(void) {
    static int done;
    if (done) return;
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(null, 2);
    close(null);
    signal(SIGPIPE, SIG_IGN);
    done = 1;
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
#ifdef FUZZ_STANDALONE
    quiet_outputs(); /* (under libFuzzer, -close_fd_mask=3 does this and keeps its own stderr) */
#else
    signal(SIGPIPE, SIG_IGN);
#endif
    if (size > 65536) return 0;
    /* 1. The relay, as the client runs it, over a socket holding the input. */
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0) return 0;
    int bufsize = 1 << 20;
    setsockopt(pair[0], SOL_SOCKET, SO_SNDBUF, &bufsize, sizeof bufsize);
    setsockopt(pair[1], SOL_SOCKET, SO_RCVBUF, &bufsize, sizeof bufsize);
    size_t off = 0;
    while (off < size) {
        ssize_t n = write(pair[0], data + off, size - off);
        if (n <= 0) break;
        off += (size_t)n;
    }
    close(pair[0]);
    int wrote = 0, silent = 0;
    int code = relay(pair[1], &wrote, &silent);
    close(pair[1]);
    if (code < -1 || code > 255) __builtin_trap(); /* an exit status is one byte, or "stopped" */
    /* 2. The marshal writer: well-formed for any bytes ('u', a length, that many bytes). */
    struct buf b = {0};
    if (m_strn(&b, (const char *)data, size)) {
        uint32_t n = (uint32_t)(uint8_t)b.data[1] | (uint32_t)(uint8_t)b.data[2] << 8 | (uint32_t)(uint8_t)b.data[3] << 16 |
                     (uint32_t)(uint8_t)b.data[4] << 24;
        if (b.data[0] != 'u' || (size_t)n + 5 != b.len || b.len < size + 5) __builtin_trap();
    }
    free(b.data);
    return 0;
}

#ifdef FUZZ_STANDALONE
static uint64_t g_rng;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)g_rng;
}

/* A stream of frames, mostly well-formed, with the kinds of damage a broken peer sends. */
static size_t make_input(uint8_t *out, size_t cap) {
    size_t len = 0;
    int frames = 1 + (int)(rnd() % 6);
    static const char channels[] = "oexxaqg\0\377";
    for (int f = 0; f < frames && len + 5 < cap; f++) {
        char ch = channels[rnd() % (sizeof channels - 1)];
        uint32_t n = rnd() % 64;
        if (rnd() % 8 == 0) n = rnd();          /* a length beyond any frame */
        if (rnd() % 8 == 0) n = MAX_FRAME + (rnd() % 3) - 1;
        out[len++] = (uint8_t)ch;
        out[len++] = (uint8_t)(n >> 24), out[len++] = (uint8_t)(n >> 16), out[len++] = (uint8_t)(n >> 8), out[len++] = (uint8_t)n;
        uint32_t body = n < cap - len ? n : (uint32_t)(cap - len);
        if (rnd() % 4 == 0 && body) body = rnd() % body; /* truncated */
        for (uint32_t i = 0; i < body; i++) {
            if (ch == 'x') out[len++] = (uint8_t)("-0123456789x "[rnd() % 13]);
            else out[len++] = (uint8_t)rnd();
        }
    }
    if (rnd() % 5 == 0) /* plain random bytes */
        for (size_t i = 0; i < len; i++) out[i] = (uint8_t)rnd();
    return len;
}

static int marshal_mode(void) {
    struct buf in = {0};
    char chunk[65536];
    ssize_t n;
    while ((n = read(0, chunk, sizeof chunk)) > 0)
        if (!buf_add(&in, chunk, (size_t)n)) return 1;
    if (n < 0) return 1;
    size_t off = 0;
    while (off + 4 <= in.len) {
        uint32_t n = (uint32_t)(uint8_t)in.data[off] | (uint32_t)(uint8_t)in.data[off + 1] << 8 |
                     (uint32_t)(uint8_t)in.data[off + 2] << 16 | (uint32_t)(uint8_t)in.data[off + 3] << 24;
        off += 4;
        struct buf b = {0};
        if (off + n > in.len || !m_strn(&b, in.data + off, n)) {
            free(in.data);
            return 1;
        }
        uint8_t le[4] = {(uint8_t)b.len, (uint8_t)(b.len >> 8), (uint8_t)(b.len >> 16), (uint8_t)(b.len >> 24)};
        if (!write_all(1, (const char *)le, 4) || !write_all(1, b.data, b.len)) return 1;
        free(b.data);
        off += n;
    }
    free(in.data);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--marshal") == 0) return marshal_mode();
    long iterations = argc > 1 ? atol(argv[1]) : 10000;
    g_rng = argc > 2 ? strtoull(argv[2], NULL, 10) | 1 : 88172645463325252ull;
    static uint8_t input[65536];
    for (long i = 0; i < iterations; i++) {
        size_t n = make_input(input, rnd() % 8 == 0 ? sizeof input : 512);
        LLVMFuzzerTestOneInput(input, n);
    }
    return 0;
}
#endif
