/* snapstore's native thin client (chg-style): hand the command line to the store's resident
 * service over its Unix socket and relay what it writes; exec the Python client whenever that is
 * not certain to give the same result (no service, another version, an unusual locale, anything
 * unexpected).  It speaks the protocol of snapstore/service/protocol.py:
 *
 *   a frame is a 1-byte channel, a 4-byte big-endian length and the payload;
 *   the request ('r') is a dict in Python's marshal format (version 4 subset: dict, list, str);
 *   the service answers 'a' (accepted, with its pid) or 'n' (not here); after 'a' the client
 *   sends 'g' and only then is the command run; then 'o' stdout, 'e' stderr, 'x' exit code.
 *
 * If the connection ends after 'g' without an exit code, the command may have run: a read-only
 * command that printed nothing is run again by the Python client, any other is handed to the
 * Python client with SNAPSTORE_LOST_REQUEST=<id>:<pid>:<command>, which reports what the store
 * recorded (snapstore/service/client/lost.py), never running it twice.
 *
 * Built by `make setup` (python -m snapstore.service.native --install .venv/bin), which defines
 * SNAPSTORE_VERSION_TAG and SNAPSTORE_PYTHON_CLIENT in a header given with -include.
 * Portable C11 and POSIX (built with -std=c11 -Wpedantic): the few calls systems differ in are
 * each behind one #if: the peer's uid (SO_PEERCRED on Linux, getpeereid on macOS and the BSDs,
 * elsewhere the socket file's owner alone: docs/platforms.md) and random bytes (arc4random_buf
 * where the C library has it, else /dev/urandom).  SNAPSTORE_PORTABLE (SNAPSTORE_PLATFORM=portable
 * builds) takes the portable branches on Linux too.
 */
#if defined(__APPLE__)
#define _DARWIN_C_SOURCE /* (POSIX plus getpeereid and arc4random_buf) */
#elif !defined(__FreeBSD__) && !defined(__OpenBSD__) && !defined(__NetBSD__) && !defined(__DragonFly__)
#define _XOPEN_SOURCE 700 /* POSIX.1-2008 with its XSI part (realpath) */
#endif
#if defined(__APPLE__) || defined(__FreeBSD__) || defined(__OpenBSD__) || defined(__NetBSD__) || defined(__DragonFly__)
#define SNAPSTORE_BSD_LIBC 1
#endif
#include <errno.h>
#include <fcntl.h>
#include <langinfo.h>
#include <limits.h>
#include <locale.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "frames.h"

#ifndef SNAPSTORE_VERSION_TAG
#error "build with -DSNAPSTORE_VERSION_TAG (make setup does)"
#endif
#ifndef SNAPSTORE_PYTHON_CLIENT
#error "build with -DSNAPSTORE_PYTHON_CLIENT (make setup does)"
#endif

extern char **environ;

static const char *const LOCAL_COMMANDS[] = {"serve", "init", "relocate", "mcp", "ui", "integrate", "rewind",
                                              "remote", "push", "fetch", "pull", "clone", "maintain", NULL};
static const char *const STDIN_COMMANDS[] = {"hook", NULL};
static const char *const READ_ONLY_COMMANDS[] = {"list", "show", "log", "cat", "diff", "oplog", "verify", "stats", NULL};
/* Global options that take a value (snapstore/cli/lean.py GLOBAL_OPTIONS). */
static const char *const VALUE_OPTIONS[] = {"--store", "-C", "--lock-timeout", NULL};
static const char *const FORWARDED_PREFIXES[] = {"SNAPSTORE_", "TZ", "CLAUDE_PROJECT_DIR", "GEMINI_PROJECT_DIR", "COLUMNS", NULL};

#define CONNECT_TIMEOUT_MS 1000
/* After 'g' the service sends a frame (a heartbeat 'h' at least) every protocol.HEARTBEAT
 * seconds; this long without one, it is taken for stopped (protocol.SILENCE). */
#define SILENCE_MS 5000
#define EXIT_SERVICE_STOPPED 12

static char **g_argv;
/* stdin read for the service (a hook's event): in memory while it fits a request, else (past
 * that) in a temporary file; either is replayed to the Python client if it runs. */
static int g_stdin_fd = -1;
static struct buf g_stdin;
static int g_stdin_read; /* whether stdin was read (then the Python client gets it replayed) */

static int in_list(const char *s, const char *const *list) {
    for (; *list; list++)
        if (strcmp(s, *list) == 0) return 1;
    return 0;
}

/* Whether the command line reads a remote (`--remote NAME`): it then runs in this process with
 * the caller's credentials, never in the service (as the remote commands do). */
static int names_remote(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--remote") == 0 || strncmp(argv[i], "--remote=", 9) == 0) return 1;
    return 0;
}

static int spill_stdin(void);
static int pipe_stdin(void);

/* Run the Python client with the same arguments (and the stdin this process consumed, replayed
 * from its start: from a temporary file, or a pipe when no file can be made and it fits one). */
static void exec_python(const char *lost) {
    int piped = 0;
    if (g_stdin_read && g_stdin_fd < 0 && !spill_stdin()) {
        if (!pipe_stdin()) goto fail;
        piped = 1;
    }
    if (g_stdin_fd >= 0 && ((!piped && lseek(g_stdin_fd, 0, SEEK_SET) != 0) || dup2(g_stdin_fd, 0) != 0)) goto fail;
    if (lost) setenv("SNAPSTORE_LOST_REQUEST", lost, 1);
    g_argv[0] = (char *)SNAPSTORE_PYTHON_CLIENT;
    execv(SNAPSTORE_PYTHON_CLIENT, g_argv);
fail:
    fprintf(stderr, "snapstore: error: cannot run the Python client %s: %s\n", SNAPSTORE_PYTHON_CLIENT, strerror(errno));
    exit(70);
}

/* (command, store, directory) as snapstore.service.client.parse_globals finds them; 0 when unsure. */
static int parse_globals(int argc, char **argv, const char **command, const char **store, const char **directory) {
    *command = *store = *directory = NULL;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--") == 0) break;
        if (strcmp(arg, "-") == 0) return 0;
        const char *name = "", *value = NULL;
        const char *eq = strchr(arg, '=');
        int is_value_opt = 0;
        if (eq && strncmp(arg, "--", 2) == 0) {
            for (const char *const *o = VALUE_OPTIONS; *o; o++)
                if (strlen(*o) == (size_t)(eq - arg) && strncmp(arg, *o, (size_t)(eq - arg)) == 0) is_value_opt = 1;
        }
        if (is_value_opt) {
            name = arg;
            value = eq + 1;
        } else if (in_list(arg, VALUE_OPTIONS)) {
            if (i + 1 >= argc) return 0;
            name = arg;
            value = argv[++i];
        } else if (strncmp(arg, "-C", 2) == 0 && arg[2]) {
            name = "-C";
            value = arg + 2;
        } else if (*command == NULL && arg[0] != '-') {
            *command = arg;
        } else if (*command == NULL && (!strcmp(arg, "-h") || !strcmp(arg, "--help") || !strcmp(arg, "--version"))) {
            return 0;
        }
        if (strncmp(name, "--store", 7) == 0) *store = value;
        else if (strncmp(name, "-C", 2) == 0) *directory = value; /* the last one wins */
    }
    return 1;
}

/* path = a + "/" + b (b absolute: b alone); 0 when too long. */
static int join(char *out, size_t size, const char *a, const char *b) {
    int n = b[0] == '/' ? snprintf(out, size, "%s", b) : snprintf(out, size, "%s/%s", a, b);
    return n > 0 && (size_t)n < size;
}

/* The nearest `.snapstore` directory of this user at or above `start` on its file system.  The
 * service runs the command only for its own store and re-checks discovery itself; this search
 * only decides whether to try. */
static int find_store(const char *start, char *out, size_t size) {
    char dir[PATH_MAX];
    if (!realpath(start, dir)) return 0;
    struct stat top;
    if (stat(dir, &top) != 0) return 0;
    for (;;) {
        struct stat st;
        char candidate[PATH_MAX];
        if (!join(candidate, sizeof candidate, dir, ".snapstore")) return 0;
        if (lstat(candidate, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == getuid())
            return snprintf(out, size, "%s", candidate) < (int)size;
        char *slash = strrchr(dir, '/');
        if (!slash || slash == dir) return 0;
        *slash = '\0';
        if (stat(dir, &st) != 0 || st.st_dev != top.st_dev) return 0;
    }
}

/* Whether the process at the other end of the connected socket ``fd`` runs as this user. */
static int peer_is_me(int fd) {
#if defined(__linux__) && defined(SO_PEERCRED) && !defined(SNAPSTORE_PORTABLE)
    struct {
        int32_t pid;
        uint32_t uid, gid;
    } cred; /* struct ucred's layout (glibc declares it only with _GNU_SOURCE) */
    socklen_t len = sizeof cred;
    return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && len == sizeof cred && cred.uid == getuid();
#elif defined(SNAPSTORE_BSD_LIBC)
    uid_t uid;
    gid_t gid;
    return getpeereid(fd, &uid, &gid) == 0 && uid == getuid();
#else
    (void)fd;
    return 1; /* the weaker mode: the socket file, checked to be this user's before connecting, stands alone */
#endif
}

/* ``n`` random bytes; 0 when none can be had. */
static int random_bytes(uint8_t *out, size_t n) {
#if defined(SNAPSTORE_BSD_LIBC) && !defined(SNAPSTORE_PORTABLE)
    arc4random_buf(out, n);
    return 1;
#else
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, out + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    return got == n;
#endif
}

static int cloexec(int fd) {
    return fd >= 0 && fcntl(fd, F_SETFD, FD_CLOEXEC) == 0;
}

static int connect_socket(const char *store_dir) {
    char path[PATH_MAX];
    struct stat st;
    if (!join(path, sizeof path, store_dir, "service.sock")) return -1;
    if (lstat(path, &st) != 0 || !S_ISSOCK(st.st_mode) || st.st_uid != getuid()) return -1;
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    if (!cloexec(fd)) {
        close(fd);
        return -1;
    }
    struct timeval tv = {CONNECT_TIMEOUT_MS / 1000, (CONNECT_TIMEOUT_MS % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    int ok;
    if (strlen(path) < sizeof addr.sun_path) {
        memcpy(addr.sun_path, path, strlen(path) + 1);
        ok = connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0;
    } else { /* sun_path holds 104-108 bytes: connect by the short name from the directory (one thread here) */
        int here = open(".", O_RDONLY | O_CLOEXEC);
        if (here < 0 || chdir(store_dir) != 0) {
            if (here >= 0) close(here);
            close(fd);
            return -1;
        }
        memcpy(addr.sun_path, "service.sock", sizeof "service.sock");
        ok = connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0;
        if (fchdir(here) != 0) { /* the command must not run elsewhere */
            fprintf(stderr, "snapstore: error: cannot return to the working directory: %s\n", strerror(errno));
            exit(70);
        }
        close(here);
    }
    if (ok) ok = peer_is_me(fd);
    if (!ok) {
        close(fd);
        return -1;
    }
    return fd;
}

static int forwarded(const char *entry) {
    for (const char *const *p = FORWARDED_PREFIXES; *p; p++)
        if (strncmp(entry, *p, strlen(*p)) == 0) return 1;
    return 0;
}

/* The LC_CTYPE locale name the environment gives setlocale(LC_CTYPE, ""): LC_ALL, else
 * LC_CTYPE, else LANG (an empty value counts as unset); "" when none is set. */
static const char *ctype_name(void) {
    static const char *const vars[] = {"LC_ALL", "LC_CTYPE", "LANG", NULL};
    for (const char *const *v = vars; *v; v++) {
        const char *value = getenv(*v);
        if (value && *value) return value;
    }
    return "";
}

/* What Python would choose for sys.stdout: (encoding, errors); 0 when not certain. */
static int stdout_encoding(const char **encoding, const char **errors) {
    if (getenv("PYTHONIOENCODING") || getenv("PYTHONUTF8") || getenv("PYTHONLEGACYWINDOWSSTDIO")) return 0;
    const char *name = ctype_name();
    if (!*name || !strcmp(name, "C") || !strcmp(name, "POSIX") || !strcmp(name, "C.UTF-8") || !strcmp(name, "C.utf8")) {
        /* The C locale, or C.UTF-8 (installed or not): what the code below finds for these
         * without loading the locale database (the C locale is coerced by Python, PEP 538). */
        *encoding = "utf-8";
        *errors = "surrogateescape";
        return 1;
    }
    const char *locale = setlocale(LC_CTYPE, "");
    const char *codeset = locale ? nl_langinfo(CODESET) : "ANSI_X3.4-1968";
    *encoding = "utf-8";
    if (strcmp(codeset, "UTF-8") == 0) {
        /* A UTF-8 locale: strict, unless it is the coerced C locale (C.UTF-8 via PEP 538). */
        *errors = (locale && (strncmp(locale, "C.", 2) == 0 || strcmp(locale, "C") == 0)) ? "surrogateescape" : "strict";
        return 1;
    }
    if (strcmp(codeset, "ANSI_X3.4-1968") == 0) { /* C/POSIX: Python coerces it to UTF-8 */
        *errors = "surrogateescape";
        return 1;
    }
    return 0;
}

static int write_all(int fd, const char *data, size_t len);

/* A new temporary file (g_stdin_fd; in $TMPDIR, else /tmp; unlinked at once) holding the stdin
 * read so far (g_stdin); 0 on an error.  (Never closed: this process execs or exits.) */
static int spill_stdin(void) {
    const char *dir = getenv("TMPDIR");
    char path[PATH_MAX];
    if (!dir || !*dir) dir = "/tmp";
    int n = snprintf(path, sizeof path, "%s/snapstore-stdin.XXXXXX", dir);
    if (n < 0 || (size_t)n >= sizeof path) return 0;
    int fd = mkstemp(path);
    if (fd < 0) return 0;
    unlink(path);
    g_stdin_fd = fd;
    return cloexec(fd) && write_all(fd, g_stdin.data ? g_stdin.data : "", g_stdin.len);
}

/* The stdin read so far (g_stdin) through a pipe (g_stdin_fd: its read end), where no temporary
 * file can be made: what the pipe's buffer takes goes in now, the rest is written by a child
 * process as the reader takes it (it ends when all is written, or when the reader is gone). */
static int pipe_stdin(void) {
    int ends[2];
    if (pipe(ends) != 0) return 0;
    const char *data = g_stdin.data ? g_stdin.data : "";
    size_t len = g_stdin.len, put = 0;
    int ok = fcntl(ends[1], F_SETFL, O_NONBLOCK) == 0;
    while (ok && put < len) {
        ssize_t n = write(ends[1], data + put, len - put);
        if (n > 0) put += (size_t)n;
        else if (n < 0 && errno == EINTR) continue;
        else break; /* (full: EAGAIN) */
    }
    if (ok && put < len) {
        pid_t pid = fork();
        if (pid == 0) {
            close(ends[0]);
            signal(SIGPIPE, SIG_DFL);
            _exit(fcntl(ends[1], F_SETFL, 0) == 0 && write_all(ends[1], data + put, len - put) ? 0 : 1);
        }
        ok = pid > 0;
    }
    close(ends[1]);
    if (!ok) {
        close(ends[0]);
        return 0;
    }
    g_stdin_fd = ends[0];
    return 1;
}

/* Read ``fd`` to its end, or MAX_STDIN + 1 bytes at most (the hook refuses a larger event unread:
 * an endless stdin must not fill the disk or memory): in memory (g_stdin) while it fits a
 * request, past that in a temporary file (g_stdin_fd).  1 when it is all in memory (a request
 * can carry it), 0 otherwise (too large, or an error: the Python client reads it). */
static int keep_stdin(int fd) {
    char chunk[65536];
    uint64_t total = 0;
    g_stdin_read = 1;
    for (;;) {
        uint64_t room = (uint64_t)MAX_STDIN + 1 - total;
        if (room == 0) return g_stdin_fd < 0;
        ssize_t n = read(fd, chunk, room < sizeof chunk ? (size_t)room : sizeof chunk);
        if (n < 0) {
            if (errno == EINTR) continue;
            return 0;
        }
        if (n == 0) return g_stdin_fd < 0;
        if (g_stdin_fd < 0 && g_stdin.len + (size_t)n <= MAX_FRAME / 2) {
            if (!buf_add(&g_stdin, chunk, (size_t)n)) return 0;
        } else if ((g_stdin_fd < 0 && !spill_stdin()) || !write_all(g_stdin_fd, chunk, (size_t)n)) {
            return 0;
        }
        total += (uint64_t)n;
    }
}

static int build_request(struct buf *r, const char *rid, const char *command, int argc, char **argv, const char *cwd,
                         const char *store_dir, const char *encoding, const char *errors) {
    int ok = buf_byte(r, '{');
    ok = ok && m_str(r, "v") && m_str(r, SNAPSTORE_VERSION_TAG);
    ok = ok && m_str(r, "id") && m_str(r, rid);
    ok = ok && m_str(r, "client") && m_str(r, "native");
    ok = ok && m_str(r, "command") && m_str(r, command);
    ok = ok && m_str(r, "argv") && buf_byte(r, '[') && m_u32(r, (uint32_t)(argc - 1));
    for (int i = 1; ok && i < argc; i++) ok = m_str(r, argv[i]);
    ok = ok && m_str(r, "cwd") && m_str(r, cwd);
    ok = ok && m_str(r, "env") && buf_byte(r, '{');
    for (char **e = environ; ok && *e; e++) {
        char *eq = strchr(*e, '=');
        if (!eq || !forwarded(*e)) continue;
        ok = m_strn(r, *e, (size_t)(eq - *e)) && m_str(r, eq + 1);
    }
    struct winsize ws;
    if (ok && !getenv("COLUMNS") && isatty(1) && ioctl(1, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
        char cols[16];
        snprintf(cols, sizeof cols, "%u", (unsigned)ws.ws_col);
        ok = m_str(r, "COLUMNS") && m_str(r, cols);
    }
    ok = ok && buf_byte(r, '0');
    ok = ok && m_str(r, "store") && m_str(r, store_dir);
    ok = ok && m_str(r, "encoding") && m_str(r, encoding);
    ok = ok && m_str(r, "errors") && m_str(r, errors);
    if (ok && g_stdin_read) ok = m_str(r, "stdin") && m_strn(r, g_stdin.data ? g_stdin.data : "", g_stdin.len);
    return ok && buf_byte(r, '0');
}

static int write_all(int fd, const char *data, size_t len) {
    while (len) {
        ssize_t n = write(fd, data, len);
        if (n < 0) {
            if (errno == EINTR) continue;
            return 0;
        }
        data += n;
        len -= (size_t)n;
    }
    return 1;
}

static volatile sig_atomic_t g_interrupted;
static void on_signal(int sig) { g_interrupted = sig; }

/* recv_exact, noting in *silent when it failed because nothing came for SILENCE_MS. */
static int recv_or_silent(int fd, uint8_t *out, size_t n, int *silent) {
    errno = 0;
    if (recv_exact(fd, out, n)) return 1;
    if (errno == EAGAIN || errno == EWOULDBLOCK) *silent = 1;
    return 0;
}

/* Relay frames to stdout/stderr until the exit code; -1 when the service stopped (or went
 * silent: *silent) first.  *wrote tells whether any output was relayed. */
static int relay(int fd, int *wrote, int *silent) {
    char chunk[65536];
    for (;;) {
        uint8_t header[FRAME_HEADER];
        if (!recv_or_silent(fd, header, sizeof header, silent)) return -1;
        char channel;
        uint32_t length;
        if (!parse_header(header, &channel, &length)) return -1;
        if (channel == 'h' && length == 0) continue; /* a heartbeat: the command still runs */
        if (channel == 'x') {
            char digits[16];
            if (length >= sizeof digits || !recv_exact(fd, (uint8_t *)digits, length)) return -1;
            int code;
            return parse_exit(digits, length, &code) ? code : -1;
        }
        int out = channel == 'o' ? 1 : channel == 'e' ? 2 : -1;
        if (out < 0) return -1;
        while (length) {
            uint32_t n = length < sizeof chunk ? length : (uint32_t)sizeof chunk;
            if (!recv_or_silent(fd, (uint8_t *)chunk, n, silent)) return -1;
            if (!write_all(out, chunk, n) && errno != EPIPE) return -1;
            *wrote = 1;
            length -= n;
        }
    }
}

int main(int argc, char **argv) {
    g_argv = argv;
    const char *command, *store, *directory, *encoding, *errors;
    if (getenv("SNAPSTORE_LOST_REQUEST") || getenv("SNAPSTORE_SERVICE_SILENT") || !parse_globals(argc, argv, &command, &store, &directory) || !command ||
        in_list(command, LOCAL_COMMANDS) || names_remote(argc, argv) || !stdout_encoding(&encoding, &errors))
        exec_python(NULL);
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) exec_python(NULL); /* a deleted directory: Python says why */
    const char *base = cwd;
    int stdin_command = in_list(command, STDIN_COMMANDS);
    if (stdin_command && getenv("CLAUDE_PROJECT_DIR") && getenv("CLAUDE_PROJECT_DIR")[0]) base = getenv("CLAUDE_PROJECT_DIR");
    char start[PATH_MAX], store_dir[PATH_MAX];
    if (directory ? !join(start, sizeof start, base, directory) : !join(start, sizeof start, base, ".")) exec_python(NULL);
    if (!store || !*store) store = getenv("SNAPSTORE_STORE");
    if (store && *store) {
        char joined[PATH_MAX];
        if (!join(joined, sizeof joined, start, store) || !realpath(joined, store_dir)) exec_python(NULL);
    } else if (!find_store(start, store_dir, sizeof store_dir)) {
        exec_python(NULL);
    }
    int fd = connect_socket(store_dir);
    if (fd < 0) exec_python(NULL);
    if (stdin_command && !keep_stdin(0)) {
        close(fd);
        exec_python(NULL); /* (a huge or unreadable event: the Python client reads it) */
    }
    uint8_t raw[16];
    char rid[33];
    if (!random_bytes(raw, sizeof raw)) exec_python(NULL);
    for (int i = 0; i < 16; i++) snprintf(rid + 2 * i, 3, "%02x", raw[i]);
    struct buf request = {0};
    if (!build_request(&request, rid, command, argc, argv, base, store_dir, encoding, errors)) exec_python(NULL);
    uint8_t header[FRAME_HEADER];
    char channel;
    uint32_t length;
    char pid[32] = "";
    if (!send_frame(fd, 'r', request.data, request.len) || !recv_exact(fd, header, sizeof header) ||
        !parse_header(header, &channel, &length))
        exec_python(NULL); /* a silent service */
    if (channel == 'n' && length < sizeof pid && recv_exact(fd, (uint8_t *)pid, length)) {
        pid[length] = '\0'; /* why it refused ("version", "store"): the Python client records it */
        setenv("SNAPSTORE_NATIVE_REFUSED", pid, 1);
    }
    if (channel != 'a' || length >= sizeof pid || !recv_exact(fd, (uint8_t *)pid, length))
        exec_python(NULL); /* not accepted: another version, another store */
    pid[length] = '\0';
    /* From here the command is the service's: it runs only after this confirmation. */
    if (!send_frame(fd, 'g', "", 0)) exec_python(NULL);
    struct timeval none = {0, 0}, silence = {SILENCE_MS / 1000, (SILENCE_MS % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &silence, sizeof silence);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof none);
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL); /* no SA_RESTART: a blocked recv returns */
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    int wrote = 0, silent = 0;
    int code = relay(fd, &wrote, &silent);
    close(fd);
    if (code >= 0) return code;
    if (g_interrupted) {
        fprintf(stderr, "snapstore: interrupted: the service finishes what it started (a checkpoint is all or nothing)\n");
        return 128 + g_interrupted;
    }
    if (silent) setenv("SNAPSTORE_SERVICE_SILENT", pid, 1); /* the Python client does not ask it again */
    if (in_list(command, READ_ONLY_COMMANDS)) {
        if (!wrote) exec_python(NULL);
        fprintf(stderr, "snapstore: error: the service stopped before the command ended: its output above may be incomplete\n");
        return EXIT_SERVICE_STOPPED;
    }
    char lost[128];
    snprintf(lost, sizeof lost, "%s:%s:%s", rid, pid, command);
    exec_python(lost);
    return 70;
}
