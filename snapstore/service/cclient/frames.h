/* The thin client's wire pieces, kept apart so that the fuzz harness (fuzz_frames.c) exercises
 * exactly what the client runs: frames (1-byte channel, 4-byte big-endian length, payload) and
 * the subset of Python's marshal format a request uses (dict '{'...'0', list '[' + int32 LE
 * count, str 'u' + int32 LE length + UTF-8 with surrogates, as marshal writes them).
 * Bytes that are not UTF-8 are written as Python's surrogateescape would decode them (U+DC80 to
 * U+DCFF), so the service sees the same str the Python client would send. */
#ifndef SNAPSTORE_FRAMES_H
#define SNAPSTORE_FRAMES_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

#define FRAME_HEADER 5
#define MAX_FRAME (1u << 26) /* protocol.MAX_FRAME */
#define MAX_STDIN (128u << 20) /* protocol.MAX_STDIN */

struct buf {
    char *data;
    size_t len, cap;
};

static int buf_add(struct buf *b, const void *data, size_t n) {
    if (n > MAX_FRAME || b->len + n > MAX_FRAME) return 0;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) cap *= 2;
        char *grown = realloc(b->data, cap);
        if (!grown) return 0;
        b->data = grown;
        b->cap = cap;
    }
    if (n) memcpy(b->data + b->len, data, n);
    b->len += n;
    return 1;
}

static int buf_byte(struct buf *b, char c) { return buf_add(b, &c, 1); }

static int m_u32(struct buf *b, uint32_t v) {
    unsigned char le[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
    return buf_add(b, le, 4);
}

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0 when it is not one.  Surrogates
 * (ED A0..BF) are not valid UTF-8: Python's surrogateescape decodes them byte by byte too. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07;
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF))) return 0;
    if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
    return len;
}

/* A str of n bytes, in marshal's TYPE_UNICODE form. */
static int m_strn(struct buf *b, const char *s, size_t n) {
    struct buf enc = {0};
    const unsigned char *u = (const unsigned char *)s;
    int ok = 1;
    for (size_t i = 0; ok && i < n;) {
        size_t len = utf8_len(u + i, n - i);
        if (len) {
            ok = buf_add(&enc, u + i, len);
            i += len;
        } else { /* the lone byte as U+DC00+byte, encoded as marshal's surrogatepass does */
            uint32_t cp = 0xDC00u + u[i];
            unsigned char three[3] = {(unsigned char)(0xE0 | (cp >> 12)), (unsigned char)(0x80 | ((cp >> 6) & 0x3F)),
                                      (unsigned char)(0x80 | (cp & 0x3F))};
            ok = buf_add(&enc, three, 3);
            i++;
        }
    }
    ok = ok && buf_byte(b, 'u') && m_u32(b, (uint32_t)enc.len) && buf_add(b, enc.data, enc.len);
    free(enc.data);
    return ok;
}

static int m_str(struct buf *b, const char *s) { return m_strn(b, s, strlen(s)); }

/* channel and length of a frame header; 0 for a length over MAX_FRAME. */
static int parse_header(const uint8_t h[FRAME_HEADER], char *channel, uint32_t *length) {
    *channel = (char)h[0];
    *length = ((uint32_t)h[1] << 24) | ((uint32_t)h[2] << 16) | ((uint32_t)h[3] << 8) | (uint32_t)h[4];
    return *length <= MAX_FRAME;
}

/* An exit code frame's payload: ASCII digits, optionally negative (as Python's str(int)). */
static int parse_exit(const char *s, uint32_t n, int *code) {
    if (n == 0 || n > 11) return 0;
    uint32_t i = s[0] == '-' ? 1 : 0;
    if (i == n) return 0;
    long v = 0;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        v = v * 10 + (s[i] - '0');
        if (v > 255) v = 255; /* an exit status is one byte; never overflow */
    }
    *code = (int)(s[0] == '-' ? (256 - v) & 0xFF : v);
    return 1;
}

static int recv_exact(int fd, uint8_t *out, size_t n) {
    while (n) {
        ssize_t got = recv(fd, out, n, 0);
        if (got < 0 && errno == EINTR) return 0; /* a signal: the caller decides */
        if (got <= 0) return 0;
        out += got;
        n -= (size_t)got;
    }
    return 1;
}

static int send_frame(int fd, char channel, const char *payload, size_t n) {
    if (n > MAX_FRAME) return 0;
    uint8_t h[FRAME_HEADER] = {(uint8_t)channel, (uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
    struct buf b = {0};
    int ok = buf_add(&b, h, sizeof h) && buf_add(&b, payload, n);
    for (size_t off = 0; ok && off < b.len;) {
        ssize_t sent = send(fd, b.data + off, b.len - off, MSG_NOSIGNAL);
        if (sent < 0 && errno == EINTR) continue;
        if (sent <= 0) ok = 0;
        else off += (size_t)sent;
    }
    free(b.data);
    return ok;
}

#endif
