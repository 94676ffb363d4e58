/* traceana.load.pftrace._decode: a Perfetto trace's protobuf packets, straight into a table.

   The C twin of pydecode.py (which documents the table and the rules): the same rows, the same
   codes, the same JSON text for nested values, the same error messages; tested to agree on every
   shared trace's conversions and on damaged files. Only the wire format is read here (varints,
   length-delimited and fixed fields); what the rows mean is decided in table.py, column-wise.

   Decoder(inflate, error, wanted=None): inflate(bytes) -> bytes inflates a compressed_packets chunk
   (and raises what it likes when it cannot); error is the exception class raised for bytes that are
   not a Perfetto trace; wanted, a set of arg names (bytes), keeps only those args (None: all). feed(buffer, final) decodes the whole packets at the start of buffer and returns
   how many bytes it used; result() returns the table as a dict of bytes columns and counts. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- growable buffers */

typedef struct {
    char *p;
    size_t n, cap;
} Buf;

static int buf_grow(Buf *b, size_t more)
{
    if (b->n + more <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + more)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p)
        return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int buf_put(Buf *b, const void *v, size_t n)
{
    if (buf_grow(b, n))
        return -1;
    memcpy(b->p + b->n, v, n);
    b->n += n;
    return 0;
}

static inline int buf_str(Buf *b, const char *s) { return buf_put(b, s, strlen(s)); }

/* ---------------------------------------------------------------- u64 -> i64 map (open addressing) */

typedef struct {
    uint64_t *k;
    int64_t *v;
    uint8_t *used;
    size_t cap, n;
} Map;

static inline uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static void map_free(Map *m)
{
    free(m->k);
    free(m->v);
    free(m->used);
    memset(m, 0, sizeof *m);
}

static int64_t map_get(const Map *m, uint64_t key, int64_t dflt)
{
    if (!m->cap)
        return dflt;
    size_t i = mix64(key) & (m->cap - 1);
    while (m->used[i]) {
        if (m->k[i] == key)
            return m->v[i];
        i = (i + 1) & (m->cap - 1);
    }
    return dflt;
}

static int64_t *map_slot(Map *m, uint64_t key, int *created);

static int map_rehash(Map *m, size_t cap)
{
    Map n = {0};
    n.k = malloc(cap * sizeof *n.k);
    n.v = malloc(cap * sizeof *n.v);
    n.used = calloc(cap, 1);
    if (!n.k || !n.v || !n.used) {
        map_free(&n);
        return -1;
    }
    n.cap = cap;
    for (size_t i = 0; i < m->cap; i++)
        if (m->used[i]) {
            int c;
            *map_slot(&n, m->k[i], &c) = m->v[i];
        }
    map_free(m);
    *m = n;
    return 0;
}

/* the value slot of `key` (created, holding 0, when absent); NULL when out of memory */
static int64_t *map_slot(Map *m, uint64_t key, int *created)
{
    *created = 0;
    if ((m->n + 1) * 4 > m->cap * 3 && map_rehash(m, m->cap ? m->cap * 2 : 16))
        return NULL;
    size_t i = mix64(key) & (m->cap - 1);
    while (m->used[i]) {
        if (m->k[i] == key)
            return &m->v[i];
        i = (i + 1) & (m->cap - 1);
    }
    m->used[i] = 1;
    m->k[i] = key;
    m->v[i] = 0;
    m->n++;
    *created = 1;
    return &m->v[i];
}

static int map_put(Map *m, uint64_t key, int64_t v)
{
    int c;
    int64_t *s = map_slot(m, key, &c);
    if (!s)
        return -1;
    *s = v;
    return 0;
}

/* ---------------------------------------------------------------- the decoder's state */

enum { NUL = 0, INT, UINT, DBL, BOOLV, STR, JSON };
enum { SLICE = 0, INSTANT, COUNTER, OPEN };
enum { PLAIN = 0, PROCESS, THREAD, COUNTER_TRACK };
enum { T_NAMES = 0, T_CATS, T_ANNS, T_STRS, N_TABLES };

#define BOOTTIME 6
#define LEGACY_TRACK (1ULL << 63)
#define MAX_CLOCKS 8
#define MAX_DEPTH 100

typedef struct {
    uint32_t id;
    int inc;
    uint64_t mult;
    int64_t last, own_ns, ref_ns;
    uint32_t ref_clock;
} Clk;

typedef struct {
    int valid;
    Map tab[N_TABLES];
    uint32_t clock_id;
    int has_track;
    uint64_t track;
    int nclocks;
    Clk clocks[MAX_CLOCKS];
    int has_thread;
    int64_t pid, tid, last_us;
} Seq;

typedef struct {
    int32_t *rows;
    size_t n, cap;
} Stack;

enum {
    C_EV_KIND, C_EV_TRACK, C_EV_NAME, C_EV_CAT, C_EV_TS, C_EV_END, C_EV_CLOCK, C_EV_VALUE, C_EV_CORR, C_EV_PKT,
    C_AR_EVENT, C_AR_KEY, C_AR_TYPE, C_AR_INT, C_AR_DBL, C_AR_STR,
    C_FL_EVENT, C_FL_ID, C_FL_TERM,
    C_TR_UUID, C_TR_PARENT, C_TR_KIND, C_TR_PID, C_TR_TID, C_TR_NAME, C_TR_LABELS,
    C_SN_ID, C_SN_CLOCK, C_SN_NS, N_COLS
};
static const char *COL_NAMES[N_COLS] = {
    "ev_kind", "ev_track", "ev_name", "ev_cat", "ev_ts", "ev_end", "ev_clock", "ev_value", "ev_corr", "ev_pkt",
    "ar_event", "ar_key", "ar_type", "ar_int", "ar_dbl", "ar_str",
    "fl_event", "fl_id", "fl_term",
    "tr_uuid", "tr_parent", "tr_kind", "tr_pid", "tr_tid", "tr_name", "tr_labels",
    "sn_id", "sn_clock", "sn_ns"};

typedef struct {
    PyObject_HEAD
    PyObject *inflate, *errcls, *wanted; /* wanted: a set of arg names (bytes) to keep, or None: all */
    int8_t *wflag;                        /* per string code: 0 not asked yet, 1 wanted, 2 not */
    size_t wcap;
    Buf col[N_COLS];
    /* strings: bytes in `sdata`, code i spans soff[i] .. soff[i+1]; `shash` finds a code by content */
    Buf sdata, soff;
    int32_t *shash;
    uint64_t *shval;
    size_t shcap, nstr;
    Seq *seqs;
    size_t nseq, capseq;
    Map seqmap, stackmap, legacy;
    Stack *stacks;
    size_t nstack, capstack;
    int64_t packets, dropped, unmatched_end, unknown_clock, snapshots, primary_clock, bytes;
    int64_t nrows;
    Buf scratch;
    char msg[300];
    int depth;
} Dec;

/* ---------------------------------------------------------------- errors */

enum { OK = 0, ERR = -1, NOMEM = -2, PYERR = -3 };

static int fail(Dec *d, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->msg, sizeof d->msg, fmt, ap);
    va_end(ap);
    return ERR;
}

/* ---------------------------------------------------------------- strings */

static uint64_t hash_bytes(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL ^ n;
    while (n >= 8) {
        uint64_t x;
        memcpy(&x, p, 8);
        h = mix64(h ^ x);
        p += 8;
        n -= 8;
    }
    uint64_t x = 0;
    memcpy(&x, p, n);
    return mix64(h ^ x ^ ((uint64_t)n << 56));
}

static inline const char *str_at(Dec *d, int32_t c, size_t *n)
{
    int64_t *off = (int64_t *)d->soff.p;
    *n = (size_t)(off[c + 1] - off[c]);
    return d->sdata.p + off[c];
}

static int str_rehash(Dec *d, size_t cap)
{
    int32_t *h = malloc(cap * sizeof *h);
    uint64_t *hv = malloc(cap * sizeof *hv);
    if (!h || !hv) {
        free(h);
        free(hv);
        return -1;
    }
    for (size_t i = 0; i < cap; i++)
        h[i] = -1;
    for (size_t i = 0; i < d->shcap; i++)
        if (d->shash[i] >= 0) {
            size_t j = d->shval[i] & (cap - 1);
            while (h[j] >= 0)
                j = (j + 1) & (cap - 1);
            h[j] = d->shash[i];
            hv[j] = d->shval[i];
        }
    free(d->shash);
    free(d->shval);
    d->shash = h;
    d->shval = hv;
    d->shcap = cap;
    return 0;
}

/* the code of the string `p[:n]`, added when new; -1 when out of memory */
static int32_t str_code(Dec *d, const void *p, size_t n)
{
    if ((d->nstr + 1) * 2 > d->shcap && str_rehash(d, d->shcap ? d->shcap * 2 : 1024))
        return -1;
    uint64_t h = hash_bytes(p, n);
    size_t j = h & (d->shcap - 1);
    while (d->shash[j] >= 0) {
        if (d->shval[j] == h) {
            size_t m;
            const char *s = str_at(d, d->shash[j], &m);
            if (m == n && memcmp(s, p, n) == 0)
                return d->shash[j];
        }
        j = (j + 1) & (d->shcap - 1);
    }
    if (d->soff.n == 0) {
        int64_t z = 0;
        if (buf_put(&d->soff, &z, 8))
            return -1;
    }
    if (buf_put(&d->sdata, p, n))
        return -1;
    int64_t end = (int64_t)d->sdata.n;
    if (buf_put(&d->soff, &end, 8))
        return -1;
    d->shash[j] = (int32_t)d->nstr;
    d->shval[j] = h;
    return (int32_t)d->nstr++;
}

/* ---------------------------------------------------------------- the wire format */

#define VARINT 0
#define FIXED64 1
#define LEN 2
#define FIXED32 5

typedef struct {
    uint32_t f;
    int wt;
    uint64_t v;
    const uint8_t *s, *e;
} Fld;

static inline __attribute__((always_inline)) int rd_varint(const uint8_t **pp, const uint8_t *end, uint64_t *out,
                                                           Dec *d)
{
    const uint8_t *p = *pp;
    *out = 0;
    if (p < end && *p < 0x80) { /* most varints here are one byte: keys, small ids, lengths */
        *out = *p;
        *pp = p + 1;
        return OK;
    }
    uint64_t r = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (p >= end)
            return fail(d, "truncated varint");
        uint8_t b = *p++;
        r |= (uint64_t)(b & 0x7F) << (shift < 64 ? shift : 63);
        if (b < 0x80) {
            *out = r;
            *pp = p;
            return OK;
        }
    }
    return fail(d, "varint longer than 10 bytes");
}

/* the next field of the message ending at `end`: 1, 0 at its end, ERR */
static inline __attribute__((always_inline)) int next_field(const uint8_t **pp, const uint8_t *end, Fld *f, Dec *d)
{
    f->v = 0;
    f->f = 0;
    f->wt = 0;
    f->s = f->e = *pp;
    if (*pp >= end)
        return 0;
    uint64_t k = 0;
    if (rd_varint(pp, end, &k, d))
        return ERR;
    if ((k >> 3) > 0x1FFFFFFF)
        return fail(d, "field number %llu out of range", (unsigned long long)(k >> 3));
    f->f = (uint32_t)(k >> 3);
    f->wt = (int)(k & 7);
    if (f->f == 0)
        return fail(d, "field number 0");
    switch (f->wt) {
    case VARINT:
        if (rd_varint(pp, end, &f->v, d))
            return ERR;
        f->s = f->e = *pp;
        return 1;
    case LEN: {
        uint64_t n = 0;
        if (rd_varint(pp, end, &n, d))
            return ERR;
        if (n > (uint64_t)(end - *pp))
            return fail(d, "length-delimited field %u runs past the end of its message", f->f);
        f->s = *pp;
        f->e = *pp + n;
        *pp += n;
        f->v = 0;
        return 1;
    }
    case FIXED64:
        if (end - *pp < 8)
            return fail(d, "truncated 64-bit field %u", f->f);
        memcpy(&f->v, *pp, 8);
        f->s = *pp;
        *pp += 8;
        f->e = *pp;
        return 1;
    case FIXED32: {
        if (end - *pp < 4)
            return fail(d, "truncated 32-bit field %u", f->f);
        uint32_t x;
        memcpy(&x, *pp, 4);
        f->v = x;
        f->s = *pp;
        *pp += 4;
        f->e = *pp;
        return 1;
    }
    default:
        return fail(d, "wire type %d (field %u): not one this format uses", f->wt, f->f);
    }
}

#define FIELDS(s, e, fl, rc)                                                                                      \
    for (const uint8_t *_p = (s); ((rc) = next_field(&_p, (e), &(fl), d)) == 1;)

#define PUT(c, T, x)                                                                                              \
    do {                                                                                                          \
        T _v = (T)(x);                                                                                            \
        if (buf_put(&d->col[c], &_v, sizeof(T)))                                                                  \
            return NOMEM;                                                                                         \
    } while (0)

static inline double as_double(uint64_t v)
{
    double x;
    memcpy(&x, &v, 8);
    return x;
}

/* ---------------------------------------------------------------- sequences */

static Seq *seq_get(Dec *d, uint64_t id)
{
    int created;
    int64_t *s = map_slot(&d->seqmap, id, &created);
    if (!s)
        return NULL;
    if (created) {
        if (d->nseq == d->capseq) {
            size_t cap = d->capseq ? d->capseq * 2 : 8;
            Seq *n = realloc(d->seqs, cap * sizeof *n);
            if (!n)
                return NULL;
            d->seqs = n;
            d->capseq = cap;
        }
        memset(&d->seqs[d->nseq], 0, sizeof(Seq));
        *s = (int64_t)d->nseq++;
    }
    return &d->seqs[*s];
}

static void seq_clear(Seq *q)
{
    for (int i = 0; i < N_TABLES; i++)
        map_free(&q->tab[i]);
    q->valid = 1;
    q->clock_id = 0;
    q->has_track = 0;
    q->nclocks = 0;
}

static int32_t lookup(Seq *q, int table, uint64_t iid) { return (int32_t)map_get(&q->tab[table], iid, -1); }

/* ---------------------------------------------------------------- tracks */

static int track_row(Dec *d, uint64_t uuid, uint64_t parent, int kind, int64_t pid, int64_t tid, int32_t name,
                     int32_t labels)
{
    PUT(C_TR_UUID, uint64_t, uuid);
    PUT(C_TR_PARENT, uint64_t, parent);
    PUT(C_TR_KIND, int8_t, kind);
    PUT(C_TR_PID, int64_t, pid);
    PUT(C_TR_TID, int64_t, tid);
    PUT(C_TR_NAME, int32_t, name);
    PUT(C_TR_LABELS, int32_t, labels);
    return OK;
}

static int legacy_track(Dec *d, int64_t pid, int64_t tid, uint64_t *uuid)
{
    *uuid = LEGACY_TRACK | ((uint64_t)pid & 0x7FFFFFFFULL) << 32 | ((uint64_t)tid & 0xFFFFFFFFULL);
    int created;
    int64_t *s = map_slot(&d->legacy, *uuid, &created);
    if (!s)
        return NOMEM;
    if (created)
        return track_row(d, *uuid, 0, THREAD, pid, tid, -1, -1);
    return OK;
}

static int track_desc(Dec *d, const uint8_t *s, const uint8_t *e)
{
    uint64_t uuid = 0, parent = 0;
    int kind = PLAIN, rc, rc2;
    int64_t pid = 0, tid = 0;
    int32_t name = -1, labels = -1;
    Fld f, g;
    FIELDS(s, e, f, rc)
    {
        if (f.f == 1 && f.wt == VARINT)
            uuid = f.v;
        else if (f.f == 5 && f.wt == VARINT)
            parent = f.v;
        else if ((f.f == 2 || f.f == 10) && f.wt == LEN) {
            if (name < 0 || kind == PLAIN)
                if ((name = str_code(d, f.s, f.e - f.s)) < 0)
                    return NOMEM;
        } else if (f.f == 3 && f.wt == LEN) {
            kind = PROCESS;
            Buf labs = {0};
            int nl = 0;
            FIELDS(f.s, f.e, g, rc2)
            {
                if (g.f == 1 && g.wt == VARINT)
                    pid = (int64_t)g.v;
                else if (g.f == 6 && g.wt == LEN) {
                    if ((name = str_code(d, g.s, g.e - g.s)) < 0)
                        return NOMEM;
                } else if (g.f == 8 && g.wt == LEN) {
                    if ((nl++ && buf_put(&labs, ",", 1)) || buf_put(&labs, g.s, g.e - g.s)) {
                        free(labs.p);
                        return NOMEM;
                    }
                }
            }
            if (rc2 < 0) {
                free(labs.p);
                return rc2;
            }
            if (nl && (labels = str_code(d, labs.p, labs.n)) < 0) {
                free(labs.p);
                return NOMEM;
            }
            free(labs.p);
        } else if (f.f == 4 && f.wt == LEN) {
            kind = THREAD;
            FIELDS(f.s, f.e, g, rc2)
            {
                if (g.f == 1 && g.wt == VARINT)
                    pid = (int64_t)g.v;
                else if (g.f == 2 && g.wt == VARINT)
                    tid = (int64_t)g.v;
                else if (g.f == 5 && g.wt == LEN) {
                    if ((name = str_code(d, g.s, g.e - g.s)) < 0)
                        return NOMEM;
                }
            }
            if (rc2 < 0)
                return rc2;
        } else if (f.f == 8 && f.wt == LEN)
            kind = COUNTER_TRACK;
    }
    if (rc < 0)
        return rc;
    return track_row(d, uuid, parent, kind, pid, tid, name, labels);
}

/* ---------------------------------------------------------------- args */

static int arg_row(Dec *d, int32_t row, int32_t key, int type, int64_t iv, double dv, int32_t sv)
{
    PUT(C_AR_EVENT, int32_t, row);
    PUT(C_AR_KEY, int32_t, key);
    PUT(C_AR_TYPE, int8_t, type);
    PUT(C_AR_INT, int64_t, iv);
    PUT(C_AR_DBL, double, dv);
    PUT(C_AR_STR, int32_t, sv);
    return OK;
}

static int bundle(Dec *d, const uint8_t *s, const uint8_t *e)
{
    Fld f, g;
    int rc, rc2;
    FIELDS(s, e, f, rc)
    {
        if (f.f != 2 || f.wt != LEN)
            continue;
        int32_t name = -1, sv = -1;
        int type = NUL;
        int64_t iv = 0;
        FIELDS(f.s, f.e, g, rc2)
        {
            if (g.f == 1 && g.wt == LEN) {
                if ((name = str_code(d, g.s, g.e - g.s)) < 0)
                    return NOMEM;
            } else if ((g.f == 2 || g.f == 5) && g.wt == LEN) {
                type = g.f == 2 ? STR : JSON;
                if ((sv = str_code(d, g.s, g.e - g.s)) < 0)
                    return NOMEM;
            } else if (g.f == 4 && g.wt == VARINT) {
                type = INT;
                iv = (int64_t)g.v;
            } else if (g.f == 3 && g.wt == VARINT) {
                type = BOOLV;
                iv = g.v != 0;
            }
        }
        if (rc2 < 0)
            return rc2;
        if (name >= 0 && (rc2 = arg_row(d, -1, name, type, iv, 0.0, sv)))
            return rc2;
    }
    return rc;
}

/* ---------------------------------------------------------------- JSON text of nested values */

static int json_string(Dec *d, Buf *out, const char *p, size_t n)
{
    PyObject *u = NULL;
    /* bytes that are not UTF-8: read as Python reads them (U+FFFD for each bad sequence) */
    const unsigned char *q = (const unsigned char *)p;
    int ascii = 1;
    for (size_t i = 0; i < n; i++)
        if (q[i] >= 0x80) {
            ascii = 0;
            break;
        }
    if (!ascii) {
        u = PyUnicode_DecodeUTF8(p, (Py_ssize_t)n, "replace");
        if (!u)
            return PYERR;
        Py_ssize_t m;
        const char *t = PyUnicode_AsUTF8AndSize(u, &m);
        if (!t) {
            Py_DECREF(u);
            return PYERR;
        }
        p = t;
        n = (size_t)m;
    }
    int rc = OK;
    if (buf_put(out, "\"", 1))
        rc = NOMEM;
    size_t run = 0;
    for (size_t i = 0; rc == OK && i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '"' || c == '\\' || c < 0x20) {
            char esc[8];
            if (c < 0x20)
                snprintf(esc, sizeof esc, "\\u%04x", c);
            else {
                esc[0] = '\\';
                esc[1] = (char)c;
                esc[2] = 0;
            }
            if (buf_put(out, p + run, i - run) || buf_str(out, esc))
                rc = NOMEM;
            run = i + 1;
        }
    }
    if (rc == OK && (buf_put(out, p + run, n - run) || buf_put(out, "\"", 1)))
        rc = NOMEM;
    Py_XDECREF(u);
    return rc;
}

static int json_double(Buf *out, double x)
{
    char s[40];
    if (!isfinite(x))
        return buf_str(out, "null") ? NOMEM : OK;
    for (int p = 15; p <= 17; p++) {
        snprintf(s, sizeof s, "%.*g", p, x);
        if (strtod(s, NULL) == x)
            break;
    }
    if (!strpbrk(s, ".en"))
        strcat(s, ".0");
    return buf_str(out, s) ? NOMEM : OK;
}

static int json_int(Buf *out, int64_t v, int is_unsigned)
{
    char s[24];
    int i = 24, neg = !is_unsigned && v < 0;
    uint64_t u = neg ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        s[--i] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (neg)
        s[--i] = '-';
    return buf_put(out, s + i, 24 - i) ? NOMEM : OK;
}

static int nested_json(Dec *d, Buf *out, const uint8_t *s, const uint8_t *e);

typedef struct {
    int kind; /* NUL INT UINT DBL BOOLV STR JSON */
    uint64_t iv;
    double dv;
    const uint8_t *s, *e; /* STR / legacy JSON bytes; or the NestedValue */
    int nested;           /* JSON from a NestedValue (s, e) rather than text */
    int entries, items;
    int32_t name;         /* the annotation's name code (-1: none), when asked */
} Val;

static int scan_value(Dec *d, Seq *q, const uint8_t *s, const uint8_t *e, Val *v, int named)
{
    Fld f;
    int rc;
    memset(v, 0, sizeof *v);
    v->name = -1;
    FIELDS(s, e, f, rc)
    {
        switch (f.f) {
        case 1:
            if (named && f.wt == VARINT)
                v->name = lookup(q, T_ANNS, f.v);
            break;
        case 10:
            if (named && f.wt == LEN && (v->name = str_code(d, f.s, f.e - f.s)) < 0)
                return NOMEM;
            break;
        case 2:
            if (f.wt == VARINT) { v->kind = BOOLV; v->iv = f.v != 0; }
            break;
        case 3:
        case 7:
            if (f.wt == VARINT) { v->kind = UINT; v->iv = f.v; }
            break;
        case 4:
            if (f.wt == VARINT) { v->kind = INT; v->iv = f.v; }
            break;
        case 5:
            if (f.wt == FIXED64) { v->kind = DBL; v->dv = as_double(f.v); }
            break;
        case 6:
            if (f.wt == LEN) { v->kind = STR; v->s = f.s; v->e = f.e; }
            break;
        case 17:
            if (f.wt == VARINT) {
                int32_t c = lookup(q, T_STRS, f.v);
                if (c >= 0) {
                    size_t n;
                    const char *p = str_at(d, c, &n);
                    v->kind = STR;
                    v->s = (const uint8_t *)p;
                    v->e = v->s + n;
                } else
                    v->kind = NUL;
            }
            break;
        case 9:
            if (f.wt == LEN) { v->kind = JSON; v->nested = 0; v->s = f.s; v->e = f.e; }
            break;
        case 8:
            if (f.wt == LEN) { v->kind = JSON; v->nested = 1; v->s = f.s; v->e = f.e; }
            break;
        case 11:
            if (f.wt == LEN) v->entries++;
            break;
        case 12:
            if (f.wt == LEN) v->items++;
            break;
        }
    }
    return rc;
}

static int value_json(Dec *d, Seq *q, Buf *out, const uint8_t *s, const uint8_t *e, int element);

/* a DebugAnnotation's dict or array value as JSON text (v: its scan) */
static int compound_json(Dec *d, Seq *q, Buf *out, const uint8_t *s, const uint8_t *e, const Val *v)
{
    Fld f, g;
    int rc, rc2, first = 1;
    if (++d->depth > MAX_DEPTH)
        return fail(d, "debug annotation nested more than %d deep", MAX_DEPTH);
    if (v->entries) {
        if (buf_put(out, "{", 1))
            return NOMEM;
        FIELDS(s, e, f, rc)
        {
            if (f.f != 11 || f.wt != LEN)
                continue;
            const char *key = "";
            size_t kn = 0;
            FIELDS(f.s, f.e, g, rc2)
            {
                if (g.f == 10 && g.wt == LEN) {
                    key = (const char *)g.s;
                    kn = g.e - g.s;
                } else if (g.f == 1 && g.wt == VARINT) {
                    int32_t c = lookup(q, T_ANNS, g.v);
                    if (c >= 0)
                        key = str_at(d, c, &kn);
                    else {
                        key = "";
                        kn = 0;
                    }
                }
            }
            if (rc2 < 0)
                return rc2;
            if (!first && buf_str(out, ", "))
                return NOMEM;
            first = 0;
            if ((rc2 = json_string(d, out, key, kn)) || buf_str(out, ": "))
                return rc2 ? rc2 : NOMEM;
            if ((rc2 = value_json(d, q, out, f.s, f.e, 0)))
                return rc2;
        }
        if (rc < 0)
            return rc;
        if (buf_put(out, "}", 1))
            return NOMEM;
    } else {
        if (buf_put(out, "[", 1))
            return NOMEM;
        FIELDS(s, e, f, rc)
        {
            if (f.f != 12 || f.wt != LEN)
                continue;
            if (!first && buf_str(out, ", "))
                return NOMEM;
            first = 0;
            if ((rc2 = value_json(d, q, out, f.s, f.e, 1)))
                return rc2;
        }
        if (rc < 0)
            return rc;
        if (buf_put(out, "]", 1))
            return NOMEM;
    }
    d->depth--;
    return OK;
}

static int value_json(Dec *d, Seq *q, Buf *out, const uint8_t *s, const uint8_t *e, int element)
{
    Val v;
    int rc = scan_value(d, q, s, e, &v, 0);
    if (rc < 0)
        return rc;
    if (v.entries || v.items)
        return compound_json(d, q, out, s, e, &v);
    switch (v.kind) {
    case NUL:
        return buf_str(out, element ? "[]" : "null") ? NOMEM : OK;
    case INT:
        return json_int(out, (int64_t)v.iv, 0);
    case UINT:
        return json_int(out, (int64_t)v.iv, 1);
    case BOOLV:
        return buf_str(out, v.iv ? "true" : "false") ? NOMEM : OK;
    case DBL:
        return json_double(out, v.dv);
    case STR:
        return json_string(d, out, (const char *)v.s, v.e - v.s);
    default: /* JSON */
        if (v.nested)
            return nested_json(d, out, v.s, v.e);
        {
            /* legacy JSON text: as Python reads it (bytes that are not UTF-8 replaced) */
            PyObject *u = PyUnicode_DecodeUTF8((const char *)v.s, v.e - v.s, "replace");
            if (!u)
                return PYERR;
            Py_ssize_t m;
            const char *t = PyUnicode_AsUTF8AndSize(u, &m);
            int r = !t ? PYERR : (buf_put(out, t, (size_t)m) ? NOMEM : OK);
            Py_DECREF(u);
            return r;
        }
    }
}

/* a legacy NestedValue as JSON text */
static int nested_json(Dec *d, Buf *out, const uint8_t *s, const uint8_t *e)
{
    Fld f;
    int rc, typ = 0, first = 1;
    FIELDS(s, e, f, rc)
    {
        if (f.f == 1 && f.wt == VARINT)
            typ = (int)f.v;
    }
    if (rc < 0)
        return rc;
    if ((typ == 1 || typ == 2) && ++d->depth > MAX_DEPTH)
        return fail(d, "debug annotation nested more than %d deep", MAX_DEPTH);
    if (typ == 1) { /* dict: keys and values in order */
        const uint8_t *kp = s;
        Fld kf;
        if (buf_put(out, "{", 1))
            return NOMEM;
        FIELDS(s, e, f, rc)
        {
            if (f.f != 3 || f.wt != LEN)
                continue;
            int rk;
            const uint8_t *ks = NULL, *ke = NULL;
            while ((rk = next_field(&kp, e, &kf, d)) == 1)
                if (kf.f == 2 && kf.wt == LEN) {
                    ks = kf.s;
                    ke = kf.e;
                    break;
                }
            if (rk < 0)
                return rk;
            if (!ks) /* more values than keys: the rest are dropped, as zip() drops them */
                break;
            if (!first && buf_str(out, ", "))
                return NOMEM;
            first = 0;
            int r2;
            if ((r2 = json_string(d, out, (const char *)ks, ke - ks)) || buf_str(out, ": "))
                return r2 ? r2 : NOMEM;
            if ((r2 = nested_json(d, out, f.s, f.e)))
                return r2;
        }
        if (rc < 0)
            return rc;
        if (buf_put(out, "}", 1))
            return NOMEM;
    } else if (typ == 2) {
        if (buf_put(out, "[", 1))
            return NOMEM;
        FIELDS(s, e, f, rc)
        {
            if (f.f != 4 || f.wt != LEN)
                continue;
            if (!first && buf_str(out, ", "))
                return NOMEM;
            first = 0;
            int r2 = nested_json(d, out, f.s, f.e);
            if (r2)
                return r2;
        }
        if (rc < 0)
            return rc;
        if (buf_put(out, "]", 1))
            return NOMEM;
    } else {
        Buf sc = {0};
        int r2 = OK, have = 0;
        FIELDS(s, e, f, rc)
        {
            int scalar = (f.f == 5 && f.wt == VARINT) || (f.f == 6 && f.wt == FIXED64) ||
                         (f.f == 7 && f.wt == VARINT) || (f.f == 8 && f.wt == LEN);
            if (!scalar)
                continue;
            sc.n = 0;
            have = 1;
            if (f.f == 5)
                r2 = json_int(&sc, (int64_t)f.v, 0);
            else if (f.f == 6)
                r2 = json_double(&sc, as_double(f.v));
            else if (f.f == 7)
                r2 = buf_str(&sc, f.v ? "true" : "false") ? NOMEM : OK;
            else
                r2 = json_string(d, &sc, (const char *)f.s, f.e - f.s);
            if (r2)
                break;
        }
        if (rc < 0 || r2) {
            free(sc.p);
            return rc < 0 ? rc : r2;
        }
        r2 = have ? (buf_put(out, sc.p, sc.n) ? NOMEM : OK) : (buf_str(out, "null") ? NOMEM : OK);
        free(sc.p);
        if (r2)
            return r2;
        return OK;
    }
    d->depth--;
    return OK;
}

/* is the arg named by string `code` one to keep? 1, 0, or PYERR */
static int key_wanted(Dec *d, int32_t code)
{
    if (!d->wanted || d->wanted == Py_None)
        return 1;
    if ((size_t)code >= d->wcap) {
        size_t cap = d->wcap ? d->wcap : 256;
        while (cap <= (size_t)code)
            cap *= 2;
        int8_t *n = realloc(d->wflag, cap);
        if (!n) {
            PyErr_NoMemory();
            return PYERR;
        }
        memset(n + d->wcap, 0, cap - d->wcap);
        d->wflag = n;
        d->wcap = cap;
    }
    if (!d->wflag[code]) {
        size_t n;
        const char *p = str_at(d, code, &n);
        PyObject *b = PyBytes_FromStringAndSize(p, (Py_ssize_t)n);
        if (!b)
            return PYERR;
        int in = PySet_Contains(d->wanted, b);
        Py_DECREF(b);
        if (in < 0)
            return PYERR;
        d->wflag[code] = in ? 1 : 2;
    }
    return d->wflag[code] == 1;
}

/* a top-level debug annotation of event `row` */
static int annotation(Dec *d, Seq *q, int32_t row, const uint8_t *s, const uint8_t *e)
{
    int rc;
    Val v;
    if ((rc = scan_value(d, q, s, e, &v, 1)) < 0)
        return rc;
    int32_t name = v.name;
    if (name < 0)
        return OK;
    int keep = key_wanted(d, name);
    if (keep != 1)
        return keep;
    if (v.entries || v.items || v.kind == JSON) {
        d->scratch.n = 0;
        d->depth = 0;
        if (v.entries || v.items)
            rc = compound_json(d, q, &d->scratch, s, e, &v);
        else
            rc = value_json(d, q, &d->scratch, s, e, 0);
        if (rc)
            return rc;
        int32_t c = str_code(d, d->scratch.p ? d->scratch.p : "", d->scratch.n);
        return c < 0 ? NOMEM : arg_row(d, row, name, JSON, 0, 0.0, c);
    }
    switch (v.kind) {
    case INT:
    case BOOLV:
        return arg_row(d, row, name, v.kind, (int64_t)v.iv, 0.0, -1);
    case UINT:
        if (v.iv < (1ULL << 63))
            return arg_row(d, row, name, UINT, (int64_t)v.iv, 0.0, -1);
        else {
            char t[32];
            snprintf(t, sizeof t, "%llu", (unsigned long long)v.iv);
            int32_t c = str_code(d, t, strlen(t));
            return c < 0 ? NOMEM : arg_row(d, row, name, JSON, 0, 0.0, c);
        }
    case DBL:
        return arg_row(d, row, name, DBL, 0, v.dv, -1);
    case STR: {
        int32_t c = str_code(d, v.s, v.e - v.s);
        return c < 0 ? NOMEM : arg_row(d, row, name, STR, 0, 0.0, c);
    }
    default:
        return arg_row(d, row, name, NUL, 0, 0.0, -1);
    }
}

/* ---------------------------------------------------------------- packet parts */

static int interned(Dec *d, Seq *q, const uint8_t *s, const uint8_t *e)
{
    Fld f, g;
    int rc, rc2;
    FIELDS(s, e, f, rc)
    {
        int t = f.f == 1 ? T_CATS : f.f == 2 ? T_NAMES : f.f == 3 ? T_ANNS : f.f == 29 ? T_STRS : -1;
        if (t < 0 || f.wt != LEN)
            continue;
        uint64_t iid = 0;
        const uint8_t *ns = f.s, *ne = f.s;
        FIELDS(f.s, f.e, g, rc2)
        {
            if (g.f == 1 && g.wt == VARINT)
                iid = g.v;
            else if (g.f == 2 && g.wt == LEN) {
                ns = g.s;
                ne = g.e;
            }
        }
        if (rc2 < 0)
            return rc2;
        int32_t c = str_code(d, ns, ne - ns);
        if (c < 0 || map_put(&q->tab[t], iid, c))
            return NOMEM;
    }
    return rc;
}

static int defaults(Dec *d, Seq *q, const uint8_t *s, const uint8_t *e)
{
    Fld f, g;
    int rc, rc2;
    FIELDS(s, e, f, rc)
    {
        if (f.f == 58 && f.wt == VARINT)
            q->clock_id = (uint32_t)f.v;
        else if (f.f == 11 && f.wt == LEN) {
            FIELDS(f.s, f.e, g, rc2)
            {
                if (g.f == 11 && g.wt == VARINT) {
                    q->has_track = 1;
                    q->track = g.v;
                }
            }
            if (rc2 < 0)
                return rc2;
        }
    }
    return rc;
}

static int snapshot(Dec *d, Seq *q, const uint8_t *s, const uint8_t *e)
{
    Fld f, g;
    int rc, rc2;
    struct {
        uint32_t id;
        uint64_t ts, mult;
        int inc;
    } ck[32];
    int n = 0;
    FIELDS(s, e, f, rc)
    {
        if (f.f == 1 && f.wt == LEN) {
            uint32_t id = 0;
            uint64_t ts = 0, mult = 1;
            int inc = 0;
            FIELDS(f.s, f.e, g, rc2)
            {
                if (g.f == 1 && g.wt == VARINT)
                    id = (uint32_t)g.v;
                else if (g.f == 2 && g.wt == VARINT)
                    ts = g.v;
                else if (g.f == 3 && g.wt == VARINT)
                    inc = g.v != 0;
                else if (g.f == 4 && g.wt == VARINT)
                    mult = g.v ? g.v : 1;
            }
            if (rc2 < 0)
                return rc2;
            if (n < 32) {
                ck[n].id = id;
                ck[n].ts = ts;
                ck[n].mult = mult;
                ck[n].inc = inc;
                n++;
            }
        } else if (f.f == 2 && f.wt == VARINT)
            d->primary_clock = (int64_t)f.v;
    }
    if (rc < 0)
        return rc;
    int32_t sid = (int32_t)d->snapshots++;
    int ref = -1;
    for (int i = 0; i < n; i++)
        if (ck[i].id < 64) {
            PUT(C_SN_ID, int32_t, sid);
            PUT(C_SN_CLOCK, uint32_t, ck[i].id);
            PUT(C_SN_NS, int64_t, ck[i].ts * ck[i].mult);
            if (ref < 0 || (ck[i].id == BOOTTIME && ck[ref].id != BOOTTIME))
                ref = i;
        }
    if (ref < 0)
        return OK;
    for (int i = 0; i < n; i++) {
        if (ck[i].id < 64)
            continue;
        int j;
        for (j = 0; j < q->nclocks && q->clocks[j].id != ck[i].id; j++)
            ;
        if (j == q->nclocks) {
            if (q->nclocks == MAX_CLOCKS)
                continue;
            q->nclocks++;
        }
        Clk *c = &q->clocks[j];
        c->id = ck[i].id;
        c->inc = ck[i].inc;
        c->mult = ck[i].mult;
        c->last = (int64_t)ck[i].ts;
        c->own_ns = (int64_t)(ck[i].ts * ck[i].mult);
        c->ref_clock = ck[ref].id;
        c->ref_ns = (int64_t)(ck[ref].ts * ck[ref].mult);
    }
    return OK;
}

static int legacy_thread(Dec *d, Seq *q, const uint8_t *s, const uint8_t *e)
{
    Fld f;
    int rc;
    int64_t pid = 0, tid = 0, ref = 0;
    FIELDS(s, e, f, rc)
    {
        if (f.f == 1 && f.wt == VARINT)
            pid = (int64_t)f.v;
        else if (f.f == 2 && f.wt == VARINT)
            tid = (int64_t)f.v;
        else if (f.f == 6 && f.wt == VARINT)
            ref = (int64_t)f.v;
    }
    if (rc < 0)
        return rc;
    q->has_thread = 1;
    q->pid = pid;
    q->tid = tid;
    q->last_us = ref;
    uint64_t u;
    return legacy_track(d, pid, tid, &u);
}

/* ---------------------------------------------------------------- events */

static int stack_of(Dec *d, uint64_t track, Stack **out)
{
    int created;
    int64_t *s = map_slot(&d->stackmap, track, &created);
    if (!s)
        return NOMEM;
    if (created) {
        if (d->nstack == d->capstack) {
            size_t cap = d->capstack ? d->capstack * 2 : 16;
            Stack *n = realloc(d->stacks, cap * sizeof *n);
            if (!n)
                return NOMEM;
            d->stacks = n;
            d->capstack = cap;
        }
        memset(&d->stacks[d->nstack], 0, sizeof(Stack));
        *s = (int64_t)d->nstack++;
    }
    *out = &d->stacks[*s];
    return OK;
}

#define REPEATED_VARINTS(f, body)                                                                                 \
    do {                                                                                                          \
        if ((f).wt == VARINT) {                                                                                   \
            uint64_t x = (f).v;                                                                                   \
            body;                                                                                                 \
        } else if ((f).wt == LEN) {                                                                               \
            const uint8_t *_q = (f).s;                                                                            \
            while (_q < (f).e) {                                                                                  \
                uint64_t x = 0;                                                                                   \
                if (rd_varint(&_q, (f).e, &x, d))                                                                 \
                    return ERR;                                                                                   \
                body;                                                                                             \
            }                                                                                                     \
        }                                                                                                         \
    } while (0)

#define MAX_CATS 16
#define MAX_FLOWS 64
#define MAX_ANNS 64 /* annotation spans kept from the first pass; more: a second pass finds them */

static int event(Dec *d, Seq *q, const uint8_t *s, const uint8_t *e, int has_ts, uint64_t ts, int has_clock,
                 uint32_t clock, int64_t pk)
{
    Fld f, g;
    int rc, rc2;
    int64_t typ = 0;
    int32_t name = -1, cat = -1;
    int32_t cats[MAX_CATS];
    int ncat = 0;
    int has_track = 0;
    uint64_t track = 0;
    double value = NAN;
    int64_t corr = -1;
    const uint8_t *ls = NULL, *le = NULL;
    int has_abs = 0, has_delta = 0;
    int64_t us_abs = 0, us_delta = 0;
    struct {
        uint64_t id;
        int8_t term;
    } flows[MAX_FLOWS];
    int nflow = 0, nann = 0;
    const uint8_t *anns[MAX_ANNS][2];
    FIELDS(s, e, f, rc)
    {
        switch (f.f) {
        case 9:
            if (f.wt == VARINT)
                typ = (int64_t)f.v;
            break;
        case 10:
            if (f.wt == VARINT)
                name = lookup(q, T_NAMES, f.v);
            break;
        case 23:
            if (f.wt == LEN && (name = str_code(d, f.s, f.e - f.s)) < 0)
                return NOMEM;
            break;
        case 3:
            REPEATED_VARINTS(f, {
                if (ncat < MAX_CATS)
                    cats[ncat++] = lookup(q, T_CATS, x);
            });
            break;
        case 22:
            if (f.wt == LEN && ncat < MAX_CATS) {
                if ((cats[ncat++] = str_code(d, f.s, f.e - f.s)) < 0)
                    return NOMEM;
            }
            break;
        case 11:
            if (f.wt == VARINT) {
                has_track = 1;
                track = f.v;
            }
            break;
        case 4:
            if (f.wt != LEN)
                return fail(d, "a debug annotation has wire type %d, not length-delimited", f.wt);
            if (nann < MAX_ANNS) {
                anns[nann][0] = f.s;
                anns[nann][1] = f.e;
            }
            nann++;
            break;
        case 30:
            if (f.wt == VARINT)
                value = (double)(int64_t)f.v;
            break;
        case 44:
            if (f.wt == FIXED64)
                value = as_double(f.v);
            break;
        case 47:
        case 48:
            if (f.wt == FIXED64) {
                if (nflow < MAX_FLOWS) {
                    flows[nflow].id = f.v;
                    flows[nflow++].term = f.f == 48;
                }
            } else if (f.wt == LEN) {
                if ((f.e - f.s) % 8)
                    return fail(d, "a packed list of 64-bit flow ids whose length is not a multiple of 8");
                for (const uint8_t *p = f.s; p < f.e && nflow < MAX_FLOWS; p += 8) {
                    memcpy(&flows[nflow].id, p, 8);
                    flows[nflow++].term = f.f == 48;
                }
            }
            break;
        case 36:
        case 42:
            REPEATED_VARINTS(f, {
                if (nflow < MAX_FLOWS) {
                    flows[nflow].id = x;
                    flows[nflow++].term = f.f == 42;
                }
            });
            break;
        case 52:
            if (f.wt == VARINT)
                corr = (int64_t)(f.v & 0x7FFFFFFFFFFFFFFFULL);
            break;
        case 6:
            if (f.wt == LEN) {
                ls = f.s;
                le = f.e;
            }
            break;
        case 16:
            if (f.wt == VARINT) {
                has_abs = 1;
                us_abs = (int64_t)f.v;
            }
            break;
        case 1:
            if (f.wt == VARINT) {
                has_delta = 1;
                us_delta = (int64_t)f.v;
            }
            break;
        }
    }
    if (rc < 0)
        return rc;
    int has_dur = 0;
    int64_t dur_us = 0;
    if (ls) {
        int64_t phase = 0;
        int has_pid = 0, has_tid = 0;
        int64_t pid_o = 0, tid_o = 0;
        FIELDS(ls, le, g, rc2)
        {
            if (g.f == 2 && g.wt == VARINT)
                phase = (int64_t)g.v;
            else if (g.f == 3 && g.wt == VARINT) {
                has_dur = 1;
                dur_us = (int64_t)g.v;
            } else if (g.f == 1 && g.wt == VARINT && name < 0)
                name = lookup(q, T_NAMES, g.v);
            else if (g.f == 18 && g.wt == VARINT) {
                has_pid = 1;
                pid_o = (int64_t)g.v;
            } else if (g.f == 19 && g.wt == VARINT) {
                has_tid = 1;
                tid_o = (int64_t)g.v;
            }
        }
        if (rc2 < 0)
            return rc2;
        if (typ == 0)
            typ = phase == 'X' ? -1 : phase == 'B' ? 1 : phase == 'E' ? 2 : (phase == 'i' || phase == 'I') ? 3
                                                                                : phase == 'C' ? 4 : 0;
        if (has_pid || has_tid) {
            int64_t bp = q->has_thread ? q->pid : 0, bt = q->has_thread ? q->tid : 0;
            if ((rc2 = legacy_track(d, has_pid ? pid_o : bp, has_tid ? tid_o : bt, &track)))
                return rc2;
            has_track = 1;
        }
    }
    if (typ != -1 && (typ < 1 || typ > 4))
        return OK;
    if (!has_track && q->has_track) {
        has_track = 1;
        track = q->track;
    }
    if (!has_track && q->has_thread) {
        if ((rc2 = legacy_track(d, q->pid, q->tid, &track)))
            return rc2;
        has_track = 1;
    }
    /* the time */
    uint32_t tclock;
    int64_t tns;
    if (!has_ts && has_abs) {
        tclock = BOOTTIME;
        tns = us_abs * 1000;
    } else if (!has_ts && has_delta) {
        q->last_us += us_delta;
        tclock = BOOTTIME;
        tns = q->last_us * 1000;
    } else {
        uint32_t cid = has_clock ? clock : (q->clock_id ? q->clock_id : BOOTTIME);
        if (cid < 64) {
            tclock = cid;
            tns = (int64_t)ts;
        } else {
            int j;
            for (j = 0; j < q->nclocks && q->clocks[j].id != cid; j++)
                ;
            if (j == q->nclocks) {
                d->unknown_clock++;
                return OK;
            }
            Clk *c = &q->clocks[j];
            int64_t v = c->inc ? (int64_t)((uint64_t)c->last + ts) : (int64_t)ts;
            if (c->inc)
                c->last = v;
            tclock = c->ref_clock;
            tns = (int64_t)((uint64_t)c->ref_ns + (uint64_t)v * c->mult - (uint64_t)c->own_ns);
        }
    }
    int32_t row;
    if (typ == 2) {
        Stack *st;
        if ((rc2 = stack_of(d, track, &st)))
            return rc2;
        if (!st->n) {
            d->unmatched_end++;
            return OK;
        }
        row = st->rows[--st->n];
        ((int64_t *)d->col[C_EV_END].p)[row] = tns;
        ((int8_t *)d->col[C_EV_KIND].p)[row] = SLICE;
        if (corr >= 0)
            ((int64_t *)d->col[C_EV_CORR].p)[row] = corr;
    } else {
        row = (int32_t)d->nrows++;
        int kind = typ == 1 ? OPEN : typ == -1 ? SLICE : typ == 3 ? INSTANT : COUNTER;
        if (ncat == 1)
            cat = cats[0];
        else if (ncat > 1) {
            Buf j = {0};
            int first = 1;
            for (int i = 0; i < ncat; i++) {
                if (cats[i] < 0)
                    continue;
                size_t n;
                const char *p = str_at(d, cats[i], &n);
                if ((!first && buf_put(&j, ",", 1)) || buf_put(&j, p, n)) {
                    free(j.p);
                    return NOMEM;
                }
                first = 0;
            }
            cat = str_code(d, j.p ? j.p : "", j.n);
            free(j.p);
            if (cat < 0)
                return NOMEM;
        }
        PUT(C_EV_KIND, int8_t, kind);
        PUT(C_EV_TRACK, uint64_t, has_track ? track : 0);
        PUT(C_EV_NAME, int32_t, name);
        PUT(C_EV_CAT, int32_t, cat);
        PUT(C_EV_TS, int64_t, tns);
        PUT(C_EV_END, int64_t, typ == -1 ? tns + (has_dur ? dur_us : 0) * 1000 : tns);
        PUT(C_EV_CLOCK, uint8_t, tclock);
        PUT(C_EV_VALUE, double, value);
        PUT(C_EV_CORR, int64_t, corr);
        PUT(C_EV_PKT, int64_t, pk);
        if (typ == 1) {
            Stack *st;
            if ((rc2 = stack_of(d, has_track ? track : 0, &st)))
                return rc2;
            if (st->n == st->cap) {
                size_t cap = st->cap ? st->cap * 2 : 16;
                int32_t *n = realloc(st->rows, cap * sizeof *n);
                if (!n)
                    return NOMEM;
                st->rows = n;
                st->cap = cap;
            }
            st->rows[st->n++] = row;
        }
    }
    if (nann && nann <= MAX_ANNS) {
        for (int i = 0; i < nann; i++)
            if ((rc2 = annotation(d, q, row, anns[i][0], anns[i][1])))
                return rc2;
    } else if (nann) {
        FIELDS(s, e, f, rc)
        {
            if (f.f == 4 && (rc2 = annotation(d, q, row, f.s, f.e)))
                return rc2;
        }
        if (rc < 0)
            return rc;
    }
    for (int i = 0; i < nflow; i++) {
        PUT(C_FL_EVENT, int32_t, row);
        PUT(C_FL_ID, uint64_t, flows[i].id);
        PUT(C_FL_TERM, int8_t, flows[i].term);
    }
    return OK;
}

/* ---------------------------------------------------------------- packets and the stream */

static Py_ssize_t feed_bytes(Dec *d, const uint8_t *buf, Py_ssize_t len, int final, int *status);

static int packet(Dec *d, const uint8_t *s, const uint8_t *e)
{
    int64_t pk = d->packets++;
    Fld f;
    int rc;
    int has_ts = 0, has_clock = 0, cleared = 0;
    uint64_t ts = 0, seq_id = 0, flags = 0;
    uint32_t clock = 0;
    const uint8_t *ps[9][2] = {{0}};
    enum { P_INTERNED, P_DEFAULTS, P_EVENT, P_TRACK, P_SNAPSHOT, P_BUNDLE, P_COMPRESSED, P_THREAD };
    FIELDS(s, e, f, rc)
    {
        int slot = -1;
        switch (f.f) {
        case 8:
            if (f.wt == VARINT) { has_ts = 1; ts = f.v; }
            continue;
        case 58:
            if (f.wt == VARINT) { has_clock = 1; clock = (uint32_t)f.v; }
            continue;
        case 10:
            if (f.wt == VARINT) seq_id = f.v;
            continue;
        case 13:
            if (f.wt == VARINT) flags = f.v;
            continue;
        case 41:
            if (f.wt == VARINT) cleared = cleared || f.v;
            continue;
        case 12: slot = P_INTERNED; break;
        case 59: slot = P_DEFAULTS; break;
        case 11: slot = P_EVENT; break;
        case 60: slot = P_TRACK; break;
        case 6: slot = P_SNAPSHOT; break;
        case 5: slot = P_BUNDLE; break;
        case 50: slot = P_COMPRESSED; break;
        case 44: slot = P_THREAD; break;
        default:
            continue;
        }
        if (f.wt != LEN)
            return fail(d, "field %u of a trace packet has wire type %d, not length-delimited", f.f, f.wt);
        ps[slot][0] = f.s;
        ps[slot][1] = f.e;
    }
    if (rc < 0)
        return rc;
    if (ps[P_COMPRESSED][0]) {
        d->packets--;
        PyObject *data = PyObject_CallFunction(d->inflate, "y#", (const char *)ps[P_COMPRESSED][0],
                                               (Py_ssize_t)(ps[P_COMPRESSED][1] - ps[P_COMPRESSED][0]));
        if (!data)
            return PYERR;
        if (!PyBytes_Check(data)) {
            Py_DECREF(data);
            PyErr_SetString(PyExc_TypeError, "inflate must return bytes");
            return PYERR;
        }
        int64_t saved = d->bytes;
        d->bytes = 0;
        int status = OK;
        feed_bytes(d, (const uint8_t *)PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), 1, &status);
        d->bytes = saved;
        Py_DECREF(data);
        if (status == ERR) {
            char inner[sizeof d->msg];
            memcpy(inner, d->msg, sizeof inner);
            return fail(d, "in its compressed packets: %s", inner);
        }
        return status;
    }
    Seq *q = seq_get(d, seq_id);
    if (!q)
        return NOMEM;
    if (cleared || (flags & 1))
        seq_clear(q);
    if (ps[P_TRACK][0] && (rc = track_desc(d, ps[P_TRACK][0], ps[P_TRACK][1])))
        return rc;
    if (ps[P_BUNDLE][0] && (rc = bundle(d, ps[P_BUNDLE][0], ps[P_BUNDLE][1])))
        return rc;
    if (ps[P_SNAPSHOT][0] && (rc = snapshot(d, q, ps[P_SNAPSHOT][0], ps[P_SNAPSHOT][1])))
        return rc;
    if (ps[P_THREAD][0] && (rc = legacy_thread(d, q, ps[P_THREAD][0], ps[P_THREAD][1])))
        return rc;
    if ((flags & 2) && !q->valid) {
        if (ps[P_EVENT][0])
            d->dropped++;
        return OK;
    }
    if (ps[P_DEFAULTS][0] && (rc = defaults(d, q, ps[P_DEFAULTS][0], ps[P_DEFAULTS][1])))
        return rc;
    if (ps[P_INTERNED][0] && (rc = interned(d, q, ps[P_INTERNED][0], ps[P_INTERNED][1])))
        return rc;
    if (ps[P_EVENT][0])
        return event(d, q, ps[P_EVENT][0], ps[P_EVENT][1], has_ts, ts, has_clock, clock, pk);
    return OK;
}

static int complete_varint(const uint8_t *p, const uint8_t *end)
{
    for (int i = 0; i < 10 && p + i < end; i++)
        if (p[i] < 0x80)
            return 1;
    return end - p >= 10;
}

/* decode the whole packets at the start of buf; the bytes used. *status: OK, or the error */
static Py_ssize_t feed_bytes(Dec *d, const uint8_t *buf, Py_ssize_t len, int final, int *status)
{
    const uint8_t *p = buf, *end = buf + len;
    *status = OK;
    while (p < end) {
        const uint8_t *at = p, *q = p;
        uint64_t k = 0, n = 0;
        if (!final && !complete_varint(q, end))
            break;
        if (rd_varint(&q, end, &k, d)) {
            char inner[sizeof d->msg];
            memcpy(inner, d->msg, sizeof inner);
            fail(d, "byte %lld: %s", (long long)(d->bytes + (at - buf)), inner);
            *status = ERR;
            break;
        }
        if (k != ((1 << 3) | LEN)) {
            fail(d, "byte %lld: field %llu (wire type %d) where a trace packet (field 1, length-delimited) should be",
                 (long long)(d->bytes + (at - buf)), (unsigned long long)(k >> 3), (int)(k & 7));
            *status = ERR;
            break;
        }
        if (!final && !complete_varint(q, end))
            break;
        if (rd_varint(&q, end, &n, d)) {
            char inner[sizeof d->msg];
            memcpy(inner, d->msg, sizeof inner);
            fail(d, "byte %lld: %s", (long long)(d->bytes + (at - buf)), inner);
            *status = ERR;
            break;
        }
        if (n > (uint64_t)(end - q)) {
            if (final) {
                fail(d, "the last packet (at byte %lld) is cut short: %llu bytes announced, %lld there",
                     (long long)(d->bytes + (at - buf)), (unsigned long long)n, (long long)(end - q));
                *status = ERR;
            }
            break;
        }
        int rc = packet(d, q, q + n);
        if (rc == PYERR && PyErr_ExceptionMatches(d->errcls)) { /* inflate's own complaint: said like ours */
            PyObject *t, *v, *tb;
            PyErr_Fetch(&t, &v, &tb);
            PyObject *str = v ? PyObject_Str(v) : NULL;
            const char *m = str ? PyUnicode_AsUTF8(str) : NULL;
            snprintf(d->msg, sizeof d->msg, "%s", m ? m : "cannot inflate");
            Py_XDECREF(str);
            Py_XDECREF(t);
            Py_XDECREF(v);
            Py_XDECREF(tb);
            PyErr_Clear();
            rc = ERR;
        }
        if (rc) {
            if (rc == ERR) {
                char inner[sizeof d->msg];
                memcpy(inner, d->msg, sizeof inner);
                fail(d, "packet at byte %lld: %s", (long long)(d->bytes + (at - buf)), inner);
            }
            *status = rc;
            break;
        }
        p = q + n;
    }
    d->bytes += p - buf;
    return p - buf;
}

/* ---------------------------------------------------------------- the Python type */

static int Dec_init(Dec *d, PyObject *args, PyObject *kw)
{
    PyObject *inflate, *errcls, *wanted = Py_None;
    if (!PyArg_ParseTuple(args, "OO|O", &inflate, &errcls, &wanted))
        return -1;
    if (wanted != Py_None && !PyAnySet_Check(wanted)) {
        PyErr_SetString(PyExc_TypeError, "wanted must be a set of bytes or None");
        return -1;
    }
    Py_INCREF(inflate);
    Py_INCREF(errcls);
    Py_INCREF(wanted);
    Py_XSETREF(d->inflate, inflate);
    Py_XSETREF(d->errcls, errcls);
    Py_XSETREF(d->wanted, wanted);
    return 0;
}

static void Dec_free_all(Dec *d)
{
    for (int i = 0; i < N_COLS; i++) {
        free(d->col[i].p);
        d->col[i] = (Buf){0};
    }
    free(d->sdata.p);
    free(d->soff.p);
    free(d->shash);
    free(d->shval);
    d->sdata = d->soff = (Buf){0};
    d->shash = NULL;
    d->shval = NULL;
    d->shcap = d->nstr = 0;
    for (size_t i = 0; i < d->nseq; i++)
        for (int t = 0; t < N_TABLES; t++)
            map_free(&d->seqs[i].tab[t]);
    free(d->seqs);
    d->seqs = NULL;
    d->nseq = d->capseq = 0;
    map_free(&d->seqmap);
    map_free(&d->stackmap);
    map_free(&d->legacy);
    for (size_t i = 0; i < d->nstack; i++)
        free(d->stacks[i].rows);
    free(d->stacks);
    d->stacks = NULL;
    d->nstack = d->capstack = 0;
    free(d->scratch.p);
    d->scratch = (Buf){0};
    free(d->wflag);
    d->wflag = NULL;
    d->wcap = 0;
}

static void Dec_dealloc(Dec *d)
{
    Dec_free_all(d);
    Py_XDECREF(d->inflate);
    Py_XDECREF(d->errcls);
    Py_XDECREF(d->wanted);
    Py_TYPE(d)->tp_free((PyObject *)d);
}

static PyObject *Dec_feed(Dec *d, PyObject *args)
{
    Py_buffer view;
    int final = 0;
    if (!PyArg_ParseTuple(args, "y*|p", &view, &final))
        return NULL;
    if (!d->inflate) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_RuntimeError, "Decoder not initialised");
        return NULL;
    }
    int status;
    Py_ssize_t used = feed_bytes(d, view.buf, view.len, final, &status);
    PyBuffer_Release(&view);
    if (status == ERR) {
        PyErr_SetString(d->errcls, d->msg);
        return NULL;
    }
    if (status == NOMEM)
        return PyErr_NoMemory();
    if (status == PYERR)
        return NULL;
    return PyLong_FromSsize_t(used);
}

static int set_int(PyObject *dict, const char *k, int64_t v)
{
    PyObject *o = PyLong_FromLongLong(v);
    int r = o ? PyDict_SetItemString(dict, k, o) : -1;
    Py_XDECREF(o);
    return r;
}

static PyObject *Dec_result(Dec *d, PyObject *unused)
{
    PyObject *out = PyDict_New();
    if (!out)
        return NULL;
    for (int i = 0; i < N_COLS; i++) {
        PyObject *b = PyBytes_FromStringAndSize(d->col[i].p ? d->col[i].p : "", (Py_ssize_t)d->col[i].n);
        if (!b || PyDict_SetItemString(out, COL_NAMES[i], b)) {
            Py_XDECREF(b);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(b);
    }
    PyObject *strs = PyList_New((Py_ssize_t)d->nstr);
    if (!strs) {
        Py_DECREF(out);
        return NULL;
    }
    for (size_t i = 0; i < d->nstr; i++) {
        size_t n;
        const char *p = str_at(d, (int32_t)i, &n);
        PyObject *u = PyUnicode_DecodeUTF8(p, (Py_ssize_t)n, "replace");
        if (!u) {
            Py_DECREF(strs);
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(strs, (Py_ssize_t)i, u);
    }
    if (PyDict_SetItemString(out, "strings", strs) || set_int(out, "packets", d->packets) ||
        set_int(out, "dropped", d->dropped) || set_int(out, "unmatched_end", d->unmatched_end) ||
        set_int(out, "unknown_clock", d->unknown_clock) || set_int(out, "snapshots", d->snapshots) ||
        set_int(out, "primary_clock", d->primary_clock) || set_int(out, "bytes", d->bytes)) {
        Py_DECREF(strs);
        Py_DECREF(out);
        return NULL;
    }
    Py_DECREF(strs);
    return out;
}

static PyMethodDef Dec_methods[] = {
    {"feed", (PyCFunction)Dec_feed, METH_VARARGS,
     "feed(buffer, final=False) -> bytes used (whole packets); raises the error class on bad bytes"},
    {"result", (PyCFunction)Dec_result, METH_NOARGS, "result() -> the table (a dict of bytes columns and counts)"},
    {NULL, NULL, 0, NULL}};

static PyTypeObject DecType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "traceana.load.pftrace._decode.Decoder",
    .tp_basicsize = sizeof(Dec),
    .tp_dealloc = (destructor)Dec_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Decoder(inflate, error): a Perfetto trace's packets, fed in pieces, into a table",
    .tp_methods = Dec_methods,
    .tp_init = (initproc)Dec_init,
    .tp_new = PyType_GenericNew,
};

static struct PyModuleDef decode_module = {PyModuleDef_HEAD_INIT, "traceana.load.pftrace._decode",
                                           "Perfetto trace packets into a table (see pydecode.py)", -1, NULL};

PyMODINIT_FUNC PyInit__decode(void)
{
    if (PyType_Ready(&DecType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&decode_module);
    if (!m)
        return NULL;
    Py_INCREF(&DecType);
    if (PyModule_AddObject(m, "Decoder", (PyObject *)&DecType) < 0) {
        Py_DECREF(&DecType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
