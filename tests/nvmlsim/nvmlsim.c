/* nvmlsim: a simulator of the NVML C API functions nodewarden calls.
 *
 * Built as libnvidia-ml.so.1 (-Wl,-soname,libnvidia-ml.so.1) and found through LD_LIBRARY_PATH,
 * nvidia-ml-py (pynvml) loads it exactly as it loads the driver's library: nothing in Python is
 * patched. Symbols, argument types and return codes follow nvml.h (NVML API Reference Guide);
 * the versioned names are the ones pynvml resolves (nvmlDeviceGetCount_v2,
 * nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetPciInfo_v3,
 * nvmlDeviceGetComputeRunningProcesses_v3, ...).
 *
 * Device state is a JSON file named by the environment variable NVMLSIM_STATE, read again on
 * every call so that a test can change a counter, lose a GPU or hang the driver while the
 * process that uses NVML runs. It is parsed only when its bytes changed since the last parse
 * (the read is compared with the parsed copy), and a file that has not changed since it was
 * read (same inode, size and times, its last change over 50 ms ago) is not read again: a call
 * costs a stat, not a read or a parse, as a driver answers from memory, so that a benchmark of
 * the caller does not measure the simulator.
 * The format is described in tests/nvmlsim/__init__.py.
 *
 * Compile with -DNVMLSIM_OLD_DRIVER for a driver before r535, which has
 * nvmlDeviceGetCurrentClocksThrottleReasons but not nvmlDeviceGetCurrentClocksEventReasons, and
 * no NVML_FI_DEV_GET_GPU_RECOVERY_ACTION field (its value answers NVML_ERROR_NOT_SUPPORTED).
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* nvmlReturn_t values (nvml.h) */
enum {
    NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3, NVML_ERROR_NO_PERMISSION = 4, NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7, NVML_ERROR_DRIVER_NOT_LOADED = 9, NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_GPU_IS_LOST = 15, NVML_ERROR_UNKNOWN = 999,
};

typedef struct nvmlDevice_st *nvmlDevice_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

/* ---- a small JSON reader ----------------------------------------------------------------------
 * The whole file is parsed into a flat array of values; strings point into the file's buffer
 * (still escaped: only copy_str unescapes). A parsed file is shared, read-only, by the calls
 * that loaded the same bytes (reference-counted under a mutex), so calls from several threads
 * (and a call sleeping in a simulated hang) never see a parse change under them. */

enum { J_NULL, J_FALSE, J_TRUE, J_NUM, J_STR, J_ARR, J_OBJ };

typedef struct {
    int type;
    double num;
    const char *str; int len;  /* J_STR: raw text between the quotes */
    const char *key; int klen; /* member name when the value is in an object */
    int child, next;           /* first element/member, next sibling; -1: none */
} jval;

typedef struct parsed parsed;

typedef struct {
    char *buf;
    jval *v;
    int n, cap, root;
    const char *p, *end;
    parsed *shared; /* set by doc_load: the parse this doc reads (buf, v and root are its) */
} doc;

/* What names one version of the state file: a writer that replaces it (tests/nvmlsim's
 * write_state renames a new file over it) gives it a new inode, one that rewrites it in place a
 * new size or modification time. */
typedef struct {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime, ctime;
} file_id;

/* One parse of the state file, kept while a call or the cache holds it. */
struct parsed {
    doc d;
    size_t size; /* bytes of the file parsed */
    int refs;
    int has_id;  /* id is the file's as last read with these bytes */
    file_id id;
};

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static parsed *cache; /* the last parse, or NULL */

static void ws(doc *d) {
    while (d->p < d->end && (*d->p == ' ' || *d->p == '\t' || *d->p == '\n' || *d->p == '\r')) d->p++;
}

static int new_val(doc *d, int type) {
    if (d->n == d->cap) {
        int cap = d->cap ? 2 * d->cap : 256;
        jval *v = realloc(d->v, (size_t)cap * sizeof *v);
        if (!v) return -1;
        d->v = v, d->cap = cap;
    }
    d->v[d->n] = (jval){type, 0, NULL, 0, NULL, 0, -1, -1};
    return d->n++;
}

/* The raw text of a string at d->p (which is at the opening quote); 0 on success. */
static int scan_str(doc *d, const char **s, int *len) {
    const char *p = ++d->p;
    while (d->p < d->end && *d->p != '"') d->p += (*d->p == '\\') ? 2 : 1;
    if (d->p >= d->end) return -1;
    *s = p, *len = (int)(d->p - p);
    d->p++;
    return 0;
}

static int parse_val(doc *d, int depth) {
    ws(d);
    if (d->p >= d->end || depth > 32) return -1;
    char c = *d->p;
    int i;
    if (c == '{' || c == '[') {
        int obj = c == '{';
        if ((i = new_val(d, obj ? J_OBJ : J_ARR)) < 0) return -1;
        d->p++;
        int last = -1;
        for (;;) {
            ws(d);
            if (d->p < d->end && *d->p == (obj ? '}' : ']')) { d->p++; return i; }
            if (last >= 0) {
                if (d->p >= d->end || *d->p != ',') return -1;
                d->p++;
                ws(d);
            }
            const char *key = NULL;
            int klen = 0;
            if (obj) {
                if (d->p >= d->end || *d->p != '"' || scan_str(d, &key, &klen)) return -1;
                ws(d);
                if (d->p >= d->end || *d->p != ':') return -1;
                d->p++;
            }
            int e = parse_val(d, depth + 1);
            if (e < 0) return -1;
            d->v[e].key = key, d->v[e].klen = klen;
            if (last < 0) d->v[i].child = e; else d->v[last].next = e;
            last = e;
        }
    }
    if (c == '"') {
        if ((i = new_val(d, J_STR)) < 0 || scan_str(d, &d->v[i].str, &d->v[i].len)) return -1;
        return i;
    }
    static const struct { const char *word; int type; } words[] = {
        {"true", J_TRUE}, {"false", J_FALSE}, {"null", J_NULL}};
    for (unsigned w = 0; w < 3; w++) {
        size_t n = strlen(words[w].word);
        if ((size_t)(d->end - d->p) >= n && !memcmp(d->p, words[w].word, n)) {
            d->p += n;
            return new_val(d, words[w].type);
        }
    }
    char *e;
    double x = strtod(d->p, &e);  /* the buffer is NUL-terminated */
    if (e == d->p) return -1;
    d->p = e;
    if ((i = new_val(d, J_NUM)) < 0) return -1;
    d->v[i].num = x;
    return i;
}

static void parsed_release(parsed *p) { /* under cache_mu */
    if (p && --p->refs == 0) {
        free(p->d.buf);
        free(p->d.v);
        free(p);
    }
}

static void doc_free(doc *d) {
    if (d->shared) {
        pthread_mutex_lock(&cache_mu);
        parsed_release(d->shared);
        pthread_mutex_unlock(&cache_mu);
    }
    d->shared = NULL, d->buf = NULL, d->v = NULL;
}

/* Timestamps are coarse (a clock tick): a file changed in place twice within one tick keeps its
 * modification time. A file whose last change is this recent is read and compared, not trusted
 * by its stat. */
#define SETTLED_NS 50000000L

static int same_id(const file_id *a, const file_id *b) {
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec &&
           a->ctime.tv_sec == b->ctime.tv_sec && a->ctime.tv_nsec == b->ctime.tv_nsec;
}

static int settled(const struct stat *st) {
    struct timespec now;
    if (clock_gettime(CLOCK_REALTIME, &now) != 0) return 0;
    const struct timespec *t = st->st_ctim.tv_sec > st->st_mtim.tv_sec ||
        (st->st_ctim.tv_sec == st->st_mtim.tv_sec && st->st_ctim.tv_nsec > st->st_mtim.tv_nsec)
        ? &st->st_ctim : &st->st_mtim;
    long long age = (long long)(now.tv_sec - t->tv_sec) * 1000000000LL + (now.tv_nsec - t->tv_nsec);
    return age >= SETTLED_NS;
}

/* Read $NVMLSIM_STATE and give `d` its parse: the cached one when the file is the version it
 * was made from (same inode, size and times, changed long enough ago: a stat, no read, as a
 * driver answers from memory) or its bytes are those it was made from, else a new one (which
 * becomes the cache). NVML_ERROR_DRIVER_NOT_LOADED when the file is not there (a node without
 * the driver), NVML_ERROR_UNKNOWN when it does not parse. */
static int doc_load(doc *d) {
    memset(d, 0, sizeof *d);
    d->root = -1;
    const char *path = getenv("NVMLSIM_STATE");
    if (!path || !*path) return NVML_ERROR_DRIVER_NOT_LOADED;
    struct stat st;
    int have_st = stat(path, &st) == 0;
    if (!have_st) return NVML_ERROR_DRIVER_NOT_LOADED;
    file_id id = {st.st_dev, st.st_ino, st.st_size, st.st_mtim, st.st_ctim};
    int trust = settled(&st);
    parsed *p = NULL;
    if (trust) {
        pthread_mutex_lock(&cache_mu);
        if (cache && cache->has_id && same_id(&cache->id, &id)) {
            p = cache;
            p->refs++;
        }
        pthread_mutex_unlock(&cache_mu);
        if (p) {
            *d = p->d;
            d->shared = p;
            return NVML_SUCCESS;
        }
    }
    FILE *f = fopen(path, "rb");
    if (!f) return NVML_ERROR_DRIVER_NOT_LOADED;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1) break;
        char *b = realloc(buf, cap *= 2);
        if (!b) free(buf);
        buf = b;
    }
    fclose(f);
    if (!buf) return NVML_ERROR_UNKNOWN;
    buf[n] = 0;
    pthread_mutex_lock(&cache_mu);
    if (cache && cache->size == n && !memcmp(cache->d.buf, buf, n)) {
        p = cache;
        p->refs++;
        /* the bytes are the parse's: this version may be trusted by its stat from now on (the
         * stat was taken before the read, so a change after it shows as another id) */
        cache->has_id = trust && (size_t)st.st_size == n;
        cache->id = id;
    }
    pthread_mutex_unlock(&cache_mu);
    if (p) {
        free(buf);
    } else {
        p = calloc(1, sizeof *p);
        if (!p) { free(buf); return NVML_ERROR_UNKNOWN; }
        doc *q = &p->d;
        q->buf = buf, q->root = -1, q->p = buf, q->end = buf + n;
        q->root = parse_val(q, 0);
        ws(q);
        if (q->root < 0 || q->p != q->end || q->v[q->root].type != J_OBJ) {
            fprintf(stderr, "nvmlsim: cannot parse %s (a JSON object expected)\n", path);
            free(q->buf);
            free(q->v);
            free(p);
            return NVML_ERROR_UNKNOWN;
        }
        p->size = n;
        p->refs = 2; /* this call's and the cache's */
        p->has_id = trust && (size_t)st.st_size == n;
        p->id = id;
        pthread_mutex_lock(&cache_mu);
        parsed_release(cache);
        cache = p;
        pthread_mutex_unlock(&cache_mu);
    }
    *d = p->d;
    d->shared = p;
    return NVML_SUCCESS;
}

static int get(const doc *d, int obj, const char *key) {
    if (obj < 0 || d->v[obj].type != J_OBJ) return -1;
    size_t n = strlen(key);
    for (int i = d->v[obj].child; i >= 0; i = d->v[i].next)
        if ((size_t)d->v[i].klen == n && !memcmp(d->v[i].key, key, n)) return i;
    return -1;
}

static int item(const doc *d, int arr, long k) {
    if (arr < 0 || d->v[arr].type != J_ARR || k < 0) return -1;
    int i = d->v[arr].child;
    while (i >= 0 && k--) i = d->v[i].next;
    return i;
}

static int count(const doc *d, int arr) {
    int n = 0;
    if (arr >= 0 && d->v[arr].type == J_ARR)
        for (int i = d->v[arr].child; i >= 0; i = d->v[i].next) n++;
    return n;
}

/* A value under `node` by a dotted path: "ecc.corrected.volatile", "nvlink_errors.5.replay". */
static int path(const doc *d, int node, const char *p) {
    char key[64];
    while (node >= 0 && *p) {
        size_t n = strcspn(p, ".");
        if (n >= sizeof key) return -1;
        memcpy(key, p, n);
        key[n] = 0;
        node = d->v[node].type == J_ARR ? item(d, node, strtol(key, NULL, 10)) : get(d, node, key);
        p += n + (p[n] == '.');
    }
    return node;
}

static double num(const doc *d, int node, const char *p, double dflt) {
    int i = path(d, node, p);
    if (i < 0) return dflt;
    switch (d->v[i].type) {
    case J_NUM: return d->v[i].num;
    case J_TRUE: return 1;
    case J_FALSE: return 0;
    default: return dflt;
    }
}

/* Copy a string value, unescaped, NUL-terminated and cut to `size` (as NVML does). */
static void copy_str(const doc *d, int node, const char *p, char *out, unsigned size, const char *dflt) {
    int i = path(d, node, p);
    if (!size) return;
    if (i < 0 || d->v[i].type != J_STR) {
        snprintf(out, size, "%s", dflt);
        return;
    }
    const char *s = d->v[i].str, *e = s + d->v[i].len;
    unsigned o = 0;
    for (; s < e && o + 1 < size; s++) {
        char c = *s;
        if (c == '\\' && s + 1 < e) {
            c = *++s;
            if (c == 'n') c = '\n';
            else if (c == 't') c = '\t';
            else if (c == 'u') { c = '?'; s += (e - s > 4) ? 4 : e - s - 1; }
        }
        out[o++] = c;
    }
    out[o] = 0;
}

static int has_str(const doc *d, int arr, const char *s) {
    size_t n = strlen(s);
    for (int i = item(d, arr, 0); i >= 0; i = d->v[i].next)
        if (d->v[i].type == J_STR && (size_t)d->v[i].len == n && !memcmp(d->v[i].str, s, n)) return 1;
    return 0;
}

/* ---- the simulated driver ------------------------------------------------------------------ */

static int initialized; /* nvmlInit minus nvmlShutdown calls */

static void sleep_for(double s) {
    if (s > 0) {
        struct timespec t = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
        while (nanosleep(&t, &t) && errno == EINTR) {}
    }
}

static void hang(const doc *d, int node) { sleep_for(num(d, node, "hang_seconds", 0)); }

/* $NVMLSIM_CALL_LOG set: one line "<function> <gpu index>" appended per device call, so that a
 * test can count the calls a caller makes (one write(2) per line, O_APPEND: lines never mix). */
static void log_call(const char *fn, nvmlDevice_t dev) {
    const char *p = getenv("NVMLSIM_CALL_LOG");
    if (!p || !*p) return;
    FILE *f = fopen(p, "a");
    if (!f) return;
    char line[128];
    int n = snprintf(line, sizeof line, "%s %ld\n", fn, (long)(intptr_t)dev - 1);
    setvbuf(f, NULL, _IONBF, 0);
    fwrite(line, 1, (size_t)n, f);
    fclose(f);
}

/* Begin a call on a device: load the state, then apply the GPU's simulated faults in the order
 * the driver would meet them (a hang first, then a lost GPU, then an unsupported query).
 * `feature` and `fn` are the names a state's "not_supported" list may use. */
static int begin(doc *d, nvmlDevice_t dev, int *gpu, const char *feature, const char *fn) {
    log_call(fn, dev);
    int rc = doc_load(d);
    if (rc) return rc;
    hang(d, d->root);
    rc = NVML_SUCCESS;
    *gpu = item(d, get(d, d->root, "gpus"), (long)(intptr_t)dev - 1);
    if (!__atomic_load_n(&initialized, __ATOMIC_SEQ_CST)) rc = NVML_ERROR_UNINITIALIZED;
    else if (*gpu < 0) rc = NVML_ERROR_INVALID_ARGUMENT;
    else {
        hang(d, *gpu);
        /* "hang_in": {"<function or feature>": seconds}: only that call hangs. */
        int hi = get(d, *gpu, "hang_in");
        sleep_for(num(d, hi, fn, 0) > 0 ? num(d, hi, fn, 0) : num(d, hi, feature, 0));
        int ns = get(d, *gpu, "not_supported"), cr = get(d, *gpu, "call_returns");
        if (num(d, *gpu, "lost", 0)) rc = NVML_ERROR_GPU_IS_LOST;
        else if (has_str(d, ns, feature) || has_str(d, ns, fn)) rc = NVML_ERROR_NOT_SUPPORTED;
        else if (get(d, cr, fn) >= 0) rc = (int)num(d, cr, fn, 0);       /* "call_returns": {"<function>": rc} */
        else if (get(d, cr, feature) >= 0) rc = (int)num(d, cr, feature, 0);
    }
    if (rc) doc_free(d);
    return rc;
}

#define BEGIN(dev, feature)                                  \
    doc d;                                                   \
    int g, rc_ = begin(&d, dev, &g, feature, __func__);      \
    if (rc_) return rc_

#define END(rc) do { doc_free(&d); return (rc); } while (0)

static int init(void) {
    doc d;
    int rc = doc_load(&d);
    if (rc) return rc;
    hang(&d, d.root);
    rc = (int)num(&d, d.root, "init_error", 0);
    if (!rc) __atomic_add_fetch(&initialized, 1, __ATOMIC_SEQ_CST);
    doc_free(&d);
    return rc;
}

int nvmlInit_v2(void) { return init(); }
int nvmlInit(void) { return init(); }
int nvmlInitWithFlags(unsigned int flags) { (void)flags; return init(); }

int nvmlShutdown(void) {
    int n = __atomic_load_n(&initialized, __ATOMIC_SEQ_CST);
    while (n > 0 && !__atomic_compare_exchange_n(&initialized, &n, n - 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
    return n > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

const char *nvmlErrorString(int result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

static int system_string(char *out, unsigned int size, const char *key, const char *dflt) {
    doc d;
    int rc = doc_load(&d);
    if (rc) return rc;
    hang(&d, d.root);
    if (!__atomic_load_n(&initialized, __ATOMIC_SEQ_CST)) rc = NVML_ERROR_UNINITIALIZED;
    else if (!out) rc = NVML_ERROR_INVALID_ARGUMENT;
    else copy_str(&d, d.root, key, out, size, dflt);
    doc_free(&d);
    return rc;
}

int nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    return system_string(version, length, "driver_version", "550.90.07");
}

int nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    return system_string(version, length, "nvml_version", "12.550.90.07");
}

int nvmlDeviceGetCount_v2(unsigned int *deviceCount) {
    doc d;
    int rc = doc_load(&d);
    if (rc) return rc;
    hang(&d, d.root);
    if (!__atomic_load_n(&initialized, __ATOMIC_SEQ_CST)) rc = NVML_ERROR_UNINITIALIZED;
    else if (!deviceCount) rc = NVML_ERROR_INVALID_ARGUMENT;
    else *deviceCount = (unsigned)count(&d, get(&d, d.root, "gpus"));
    doc_free(&d);
    return rc;
}

int nvmlDeviceGetCount(unsigned int *deviceCount) { return nvmlDeviceGetCount_v2(deviceCount); }

/* Handles are index + 1, so that a handle stays valid while the state file changes; a lost GPU
 * has no handle (nvidia-smi: "Unable to determine the device handle for GPU ...: GPU is lost"). */
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    nvmlDevice_t dev = (nvmlDevice_t)(intptr_t)(index + 1);
    BEGIN(dev, "handle");
    if (!device) END(NVML_ERROR_INVALID_ARGUMENT);
    *device = dev;
    END(NVML_SUCCESS);
}

int nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

int nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    BEGIN(device, "name");
    if (!name) END(NVML_ERROR_INVALID_ARGUMENT);
    copy_str(&d, g, "name", name, length, "NVIDIA H100 80GB HBM3");
    END(NVML_SUCCESS);
}

int nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    BEGIN(device, "uuid");
    if (!uuid) END(NVML_ERROR_INVALID_ARGUMENT);
    char dflt[64];
    snprintf(dflt, sizeof dflt, "GPU-00000000-0000-0000-0000-%012ld", (long)(intptr_t)device - 1);
    copy_str(&d, g, "uuid", uuid, length, dflt);
    END(NVML_SUCCESS);
}

static int pci_info(nvmlDevice_t device, nvmlPciInfo_t *pci, const char *fn) {
    doc d;
    int g, rc = begin(&d, device, &g, "pci_info", fn);
    if (rc) return rc;
    if (!pci) END(NVML_ERROR_INVALID_ARGUMENT);
    memset(pci, 0, sizeof *pci);
    char dflt[32];
    snprintf(dflt, sizeof dflt, "00000000:%02lX:00.0", (long)(intptr_t)device);
    copy_str(&d, g, "pci_bus_id", pci->busId, sizeof pci->busId, dflt);
    unsigned dom = 0, bus = 0, dv = 0, fnum = 0;
    sscanf(pci->busId, "%x:%x:%x.%x", &dom, &bus, &dv, &fnum);
    pci->domain = dom, pci->bus = bus, pci->device = dv;
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.%X", dom & 0xffff, bus, dv, fnum);
    pci->pciDeviceId = (unsigned)num(&d, g, "pci_device_id", 0x233010de);        /* H100 SXM5 */
    pci->pciSubSystemId = (unsigned)num(&d, g, "pci_subsystem_id", 0x16c110de);
    END(NVML_SUCCESS);
}

int nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) { return pci_info(device, pci, __func__); }
int nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci) { return pci_info(device, pci, __func__); }

static int uint_field(nvmlDevice_t device, unsigned int *out, const char *feature, const char *fn,
                      const char *key, double dflt) {
    doc d;
    int g, rc = begin(&d, device, &g, feature, fn);
    if (rc) return rc;
    if (!out) END(NVML_ERROR_INVALID_ARGUMENT);
    *out = (unsigned)num(&d, g, key, dflt);
    END(NVML_SUCCESS);
}

#define UINT_QUERY(fn, feature, key, dflt) \
    int fn(nvmlDevice_t device, unsigned int *out) { return uint_field(device, out, feature, __func__, key, dflt); }

UINT_QUERY(nvmlDeviceGetMinorNumber, "minor_number", "minor_number", (double)((intptr_t)device - 1))
UINT_QUERY(nvmlDeviceGetPowerUsage, "power", "power_mw", 0)
UINT_QUERY(nvmlDeviceGetPcieReplayCounter, "pcie_replay", "pcie.replays", 0)
UINT_QUERY(nvmlDeviceGetCurrPcieLinkGeneration, "pcie_link", "pcie.gen_current", 5)
UINT_QUERY(nvmlDeviceGetMaxPcieLinkGeneration, "pcie_link", "pcie.gen_max", 5)
UINT_QUERY(nvmlDeviceGetGpuMaxPcieLinkGeneration, "pcie_link", "pcie.gen_max", 5)
UINT_QUERY(nvmlDeviceGetCurrPcieLinkWidth, "pcie_link", "pcie.width_current", 16)
UINT_QUERY(nvmlDeviceGetMaxPcieLinkWidth, "pcie_link", "pcie.width_max", 16)

/* errorType: 0 corrected, 1 uncorrected; counterType: 0 volatile, 1 aggregate. */
int nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int errorType, int counterType, unsigned long long *eccCounts) {
    static const char *types[] = {"corrected", "uncorrected"}, *scopes[] = {"volatile", "aggregate"};
    BEGIN(device, "ecc");
    if (!eccCounts || errorType < 0 || errorType > 1 || counterType < 0 || counterType > 1)
        END(NVML_ERROR_INVALID_ARGUMENT);
    char key[64];
    snprintf(key, sizeof key, "ecc.%s.%s", types[errorType], scopes[counterType]);
    *eccCounts = (unsigned long long)num(&d, g, key, 0);
    END(NVML_SUCCESS);
}

/* cause: 0 multiple single-bit ECC errors, 1 a double-bit ECC error. Addresses are made up. */
static int retired_pages(nvmlDevice_t device, int cause, unsigned int *pageCount, unsigned long long *addresses,
                         unsigned long long *timestamps, const char *fn) {
    doc d;
    int g, rc = begin(&d, device, &g, "retired_pages", fn);
    if (rc) return rc;
    if (!pageCount || cause < 0 || cause > 1) END(NVML_ERROR_INVALID_ARGUMENT);
    unsigned n = (unsigned)num(&d, g, cause ? "retired_pages.double_bit_ecc" : "retired_pages.single_bit_ecc", 0);
    if (!n || (addresses && *pageCount >= n)) {
        for (unsigned i = 0; addresses && i < n; i++) {
            addresses[i] = 0x1000ull * (i + 1) + (unsigned long long)cause * 0x100000ull;
            if (timestamps) timestamps[i] = 1700000000ull + i;
        }
        *pageCount = n;
        END(NVML_SUCCESS);
    }
    *pageCount = n;
    END(NVML_ERROR_INSUFFICIENT_SIZE);
}

int nvmlDeviceGetRetiredPages(nvmlDevice_t device, int cause, unsigned int *pageCount, unsigned long long *addresses) {
    return retired_pages(device, cause, pageCount, addresses, NULL, __func__);
}

int nvmlDeviceGetRetiredPages_v2(nvmlDevice_t device, int cause, unsigned int *pageCount,
                                 unsigned long long *addresses, unsigned long long *timestamps) {
    return retired_pages(device, cause, pageCount, addresses, timestamps, __func__);
}

int nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, int *isPending) {
    BEGIN(device, "retired_pages_pending");
    if (!isPending) END(NVML_ERROR_INVALID_ARGUMENT);
    *isPending = num(&d, g, "retired_pages.pending", 0) != 0;
    END(NVML_SUCCESS);
}

int nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows,
                              unsigned int *isPending, unsigned int *failureOccurred) {
    BEGIN(device, "remapped_rows");
    if (!corrRows || !uncRows || !isPending || !failureOccurred) END(NVML_ERROR_INVALID_ARGUMENT);
    *corrRows = (unsigned)num(&d, g, "remapped_rows.correctable", 0);
    *uncRows = (unsigned)num(&d, g, "remapped_rows.uncorrectable", 0);
    *isPending = num(&d, g, "remapped_rows.pending", 0) != 0;
    *failureOccurred = num(&d, g, "remapped_rows.failure", 0) != 0;
    END(NVML_SUCCESS);
}

/* Links 0..nvlink_links-1 exist; "nvlink_down" lists the inactive ones. */
int nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, int *isActive) {
    BEGIN(device, "nvlink");
    if (!isActive || link >= (unsigned)num(&d, g, "nvlink_links", 18)) END(NVML_ERROR_INVALID_ARGUMENT);
    int down = path(&d, g, "nvlink_down");
    *isActive = 1;
    for (int i = item(&d, down, 0); i >= 0; i = d.v[i].next)
        if (d.v[i].type == J_NUM && d.v[i].num == link) *isActive = 0;
    END(NVML_SUCCESS);
}

/* counter: nvmlNvLinkErrorCounter_t 0 DL replay, 1 DL recovery, 2 DL CRC flit, 3 DL CRC data,
 * 4 DL ECC data. State: "nvlink_errors": {"<link>": {"replay": n, ...}}, absent = 0. */
int nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned int link, int counter, unsigned long long *value) {
    static const char *names[] = {"replay", "recovery", "crc_flit", "crc_data", "ecc_data"};
    BEGIN(device, "nvlink_errors");
    if (!value || counter < 0 || counter > 4 || link >= (unsigned)num(&d, g, "nvlink_links", 18))
        END(NVML_ERROR_INVALID_ARGUMENT);
    char key[64];
    snprintf(key, sizeof key, "%u.%s", link, names[counter]);
    *value = (unsigned long long)num(&d, get(&d, g, "nvlink_errors"), key, 0);
    END(NVML_SUCCESS);
}

static int clock_reasons(nvmlDevice_t device, unsigned long long *reasons, const char *fn) {
    doc d;
    int g, rc = begin(&d, device, &g, "clocks_event_reasons", fn);
    if (rc) return rc;
    if (!reasons) END(NVML_ERROR_INVALID_ARGUMENT);
    *reasons = (unsigned long long)num(&d, g, "clocks_event_reasons", 0x1); /* GpuIdle */
    END(NVML_SUCCESS);
}

#ifndef NVMLSIM_OLD_DRIVER
int nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons) {
    return clock_reasons(device, reasons, __func__);
}
#endif

int nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long *reasons) {
    return clock_reasons(device, reasons, __func__);
}

/* sensor: 0 NVML_TEMPERATURE_GPU (the only one). */
int nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int *temp) {
    BEGIN(device, "temperature");
    if (!temp || sensor != 0) END(NVML_ERROR_INVALID_ARGUMENT);
    *temp = (unsigned)num(&d, g, "temperature_c", 30);
    END(NVML_SUCCESS);
}

/* type: nvmlClockType_t 0 graphics, 1 SM, 2 memory, 3 video. */
static int clock_query(nvmlDevice_t device, int type, unsigned int *mhz, const char *what, const char *fn) {
    static const char *names[] = {"graphics", "sm", "mem", "video"};
    doc d;
    int g, rc = begin(&d, device, &g, "clocks", fn);
    if (rc) return rc;
    if (!mhz || type < 0 || type > 3) END(NVML_ERROR_INVALID_ARGUMENT);
    char key[64];
    snprintf(key, sizeof key, "%s.%s", what, names[type]);
    *mhz = (unsigned)num(&d, g, key, 0);
    END(NVML_SUCCESS);
}

int nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned int *clock_mhz) {
    return clock_query(device, type, clock_mhz, "clocks_mhz", __func__);
}

int nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, int type, unsigned int *clock_mhz) {
    return clock_query(device, type, clock_mhz, "max_clocks_mhz", __func__);
}

int nvmlDeviceGetPerformanceState(nvmlDevice_t device, int *pState) {
    BEGIN(device, "pstate");
    if (!pState) END(NVML_ERROR_INVALID_ARGUMENT);
    *pState = (int)num(&d, g, "pstate", 0);
    END(NVML_SUCCESS);
}

/* "processes": [{"pid": n, "used_memory": bytes}]: the size protocol of nvml.h (a short buffer
 * gets NVML_ERROR_INSUFFICIENT_SIZE and the count needed). */
static int processes(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_t *infos, const char *fn) {
    doc d;
    int g, rc = begin(&d, device, &g, "processes", fn);
    if (rc) return rc;
    if (!infoCount) END(NVML_ERROR_INVALID_ARGUMENT);
    int procs = get(&d, g, "processes");
    unsigned n = (unsigned)count(&d, procs);
    if (n && (!infos || *infoCount < n)) {
        *infoCount = n;
        END(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    for (unsigned k = 0; k < n; k++) {
        int p = item(&d, procs, k);
        infos[k] = (nvmlProcessInfo_t){(unsigned)num(&d, p, "pid", 0),
                                       (unsigned long long)num(&d, p, "used_memory", 0), 0xFFFFFFFFu, 0xFFFFFFFFu};
    }
    *infoCount = n;
    END(NVML_SUCCESS);
}

int nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_t *infos) {
    return processes(device, infoCount, infos, __func__);
}

int nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_t *infos) {
    return processes(device, infoCount, infos, __func__);
}

int nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    BEGIN(device, "memory");
    if (!memory) END(NVML_ERROR_INVALID_ARGUMENT);
    memory->total = (unsigned long long)num(&d, g, "memory.total", 85520809984.0);
    memory->used = (unsigned long long)num(&d, g, "memory.used", 0);
    memory->free = memory->total > memory->used ? memory->total - memory->used : 0;
    END(NVML_SUCCESS);
}

int nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    BEGIN(device, "memory");
    if (!memory) END(NVML_ERROR_INVALID_ARGUMENT);
    memory->total = (unsigned long long)num(&d, g, "memory.total", 85520809984.0);
    memory->reserved = (unsigned long long)num(&d, g, "memory.reserved", 0);
    memory->used = (unsigned long long)num(&d, g, "memory.used", 0);
    unsigned long long taken = memory->used + memory->reserved;
    memory->free = memory->total > taken ? memory->total - taken : 0;
    END(NVML_SUCCESS);
}

/* ---- field values (nvml.h: nvmlValue_t, nvmlFieldValue_t, nvmlDeviceGetFieldValues) ---------- */

typedef union {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    long long sllVal;
    int siVal;
    unsigned short usVal;
} nvmlValue_t;

typedef struct {
    unsigned int fieldId, scopeId;
    long long timestamp;   /* microseconds since the epoch */
    long long latencyUsec;
    int valueType;         /* nvmlValueType_t */
    int nvmlReturn;        /* this value's own status */
    nvmlValue_t value;
} nvmlFieldValue_t;

enum { NVML_VALUE_TYPE_UNSIGNED_INT = 1, NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3,
       NVML_FI_DEV_NVLINK_GET_STATE = 165, NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230 };

/* The counter fields (nvml.h NVML_FI_DEV_*) and the state key of the per-counter call that
 * answers the same value: 1 with `feature` and `fn` (that call's feature word and name, either
 * of which in "not_supported" makes the field NOT_SUPPORTED too) and `key` (NULL for an NVLink
 * link the GPU lacks) for a counter field, 0 for another field. */
static int counter_field(const doc *d, int g, unsigned id, const char **feature, const char **fn,
                         const char **key, char *buf, size_t size) {
#define ECC "nvmlDeviceGetTotalEccErrors"
#define RETIRED "nvmlDeviceGetRetiredPages"
#define REMAP "nvmlDeviceGetRemappedRows"
    static const struct { unsigned id; const char *feature, *fn, *key; } fixed[] = {
        {3, "ecc", ECC, "ecc.corrected.volatile"}, {4, "ecc", ECC, "ecc.uncorrected.volatile"},
        {5, "ecc", ECC, "ecc.corrected.aggregate"}, {6, "ecc", ECC, "ecc.uncorrected.aggregate"},
        {29, "retired_pages", RETIRED, "retired_pages.single_bit_ecc"},
        {30, "retired_pages", RETIRED, "retired_pages.double_bit_ecc"},
        {31, "retired_pages_pending", "nvmlDeviceGetRetiredPagesPendingStatus", "retired_pages.pending"},
        {94, "pcie_replay", "nvmlDeviceGetPcieReplayCounter", "pcie.replays"},
        {142, "remapped_rows", REMAP, "remapped_rows.correctable"}, {143, "remapped_rows", REMAP, "remapped_rows.uncorrectable"},
        {144, "remapped_rows", REMAP, "remapped_rows.pending"}, {145, "remapped_rows", REMAP, "remapped_rows.failure"},
    };
    for (unsigned k = 0; k < sizeof fixed / sizeof *fixed; k++)
        if (fixed[k].id == id) { *feature = fixed[k].feature, *fn = fixed[k].fn, *key = fixed[k].key; return 1; }
#undef ECC
#undef RETIRED
#undef REMAP
    /* NVML_FI_DEV_NVLINK_{CRC_FLIT,CRC_DATA,REPLAY,RECOVERY}_ERROR_COUNT_L0..L5 (32-58, 7 ids
     * each, the 7th a total) and _L6..L11 (96-119, 6 ids each). */
    static const char *names[] = {"crc_flit", "crc_data", "replay", "recovery"};
    int counter = -1, link = -1;
    if (id >= 32 && id <= 58 && (id - 32) % 7 < 6) counter = (int)(id - 32) / 7, link = (int)(id - 32) % 7;
    else if (id >= 96 && id <= 119) counter = (int)(id - 96) / 6, link = 6 + (int)(id - 96) % 6;
    if (counter < 0) return 0;
    *feature = "nvlink_errors", *fn = "nvmlDeviceGetNvLinkErrorCounter";
    if (link >= (int)num(d, g, "nvlink_links", 18)) { *key = NULL; return 1; }
    snprintf(buf, size, "nvlink_errors.%d.%s", link, names[counter]);
    *key = buf;
    return 1;
}

/* The call answers NVML_SUCCESS when the request is well formed; each value carries its own
 * nvmlReturn (NVML API Reference, Field Value Queries). Implemented: field 230, the GPU
 * recovery action, from the state's "recovery_action" (nvmlDeviceGpuRecoveryAction_t); no such
 * key: NVML_ERROR_NOT_SUPPORTED, a driver or GPU without the field. The counter fields of
 * counter_field(), with the value and the "not_supported" words of their per-counter calls;
 * NVML_FI_DEV_NVLINK_GET_STATE of the link in scopeId (1 active, 0 inactive), as
 * nvmlDeviceGetNvLinkState answers it.
 * "field_returns": {"<fieldId>": nvmlReturn} forces a value's status; other field ids answer
 * NOT_SUPPORTED. */
int nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values) {
    BEGIN(device, "field_values");
    if (!values || valuesCount < 0) END(NVML_ERROR_INVALID_ARGUMENT);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int forced = get(&d, g, "field_returns"), ns = get(&d, g, "not_supported");
    for (int k = 0; k < valuesCount; k++) {
        nvmlFieldValue_t *v = &values[k];
        char key[16];
        snprintf(key, sizeof key, "%u", v->fieldId);
        v->timestamp = (long long)now.tv_sec * 1000000LL + now.tv_nsec / 1000;
        v->latencyUsec = 0;
        v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        if (path(&d, forced, key) >= 0 && (v->nvmlReturn = (int)num(&d, forced, key, 0)) != NVML_SUCCESS)
            continue;
        v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
#ifndef NVMLSIM_OLD_DRIVER
        if (v->fieldId == NVML_FI_DEV_GET_GPU_RECOVERY_ACTION && path(&d, g, "recovery_action") >= 0) {
            v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
            v->value.uiVal = (unsigned)num(&d, g, "recovery_action", 0);
            v->nvmlReturn = NVML_SUCCESS;
        }
#endif
        if (v->fieldId == NVML_FI_DEV_NVLINK_GET_STATE) { /* scopeId: the link (nvmlDeviceGetNvLinkState's) */
            if (has_str(&d, ns, "nvlink") || has_str(&d, ns, "nvmlDeviceGetNvLinkState")) continue;
            if (v->scopeId >= (unsigned)num(&d, g, "nvlink_links", 18)) continue;
            int down = path(&d, g, "nvlink_down");
            v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
            v->value.uiVal = 1; /* NVML_NVLINK_STATE_ACTIVE */
            for (int i = item(&d, down, 0); i >= 0; i = d.v[i].next)
                if (d.v[i].type == J_NUM && d.v[i].num == v->scopeId) v->value.uiVal = 0;
            v->nvmlReturn = NVML_SUCCESS;
            continue;
        }
        const char *feature, *cfn, *ckey;
        char buf[64];
        if (counter_field(&d, g, v->fieldId, &feature, &cfn, &ckey, buf, sizeof buf)) {
            if (has_str(&d, ns, feature) || has_str(&d, ns, cfn)) continue; /* NOT_SUPPORTED, as its call */
            if (!ckey) continue;                    /* a link the GPU does not have */
            v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
            v->value.ullVal = (unsigned long long)num(&d, g, ckey, 0);
            v->nvmlReturn = NVML_SUCCESS;
        }
    }
    END(NVML_SUCCESS);
}
