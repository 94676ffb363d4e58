/* traceana.load._scan: one pass over a Kineto trace's JSON text, straight into columns.

   The Python loader (traceana.load.columns.build_trace) decodes every event into a typed
   struct and then splits the structs into columns in a Python loop; this module does both in
   C, on the text itself, fed in pieces (so a gzip file is inflated and scanned piece by piece,
   and the whole text never has to be in memory at once).

   What it produces is exactly what the Python loader produces: the same name and thread codes
   in the same order, the same numbers (numbers are parsed correctly rounded, as Python and
   msgspec do), the same raw shape arguments. Where the two could differ it does not guess:
   - a value whose conversion needs Python's rules (an id written as a string, a byte count
     as a string, a launch grid too large for exact doubles) is handed back as a "fixup"
     (column, row, raw JSON) and converted in Python by the same functions the Python
     loader uses;
   - anything the typed decoder would refuse or treat specially (a wrong type, invalid JSON,
     an escaped key or category, a lone surrogate, a truncated text, a bare event list) raises
     Unsupported, and the caller loads the file the Python way, whose error handling and
     lenient fallbacks decide what the file says.

   Feeding: feed(buffer, final) scans what it can and returns how many bytes it consumed;
   the caller keeps the rest and passes it again, followed by more text. State between calls
   is only the position in the document's structure (before the document, between its keys,
   inside the event list), so every event is parsed from one contiguous buffer. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- tokens */

enum { T_ABSENT = 0, T_STR, T_ESTR, T_INT, T_FLOAT, T_NULL, T_BOOL, T_ARR, T_OBJ };

typedef struct {
    const char *p; /* the value's JSON text (a string's includes its quotes) */
    Py_ssize_t n;
    int t;
} tok;

enum { J_OK = 0, J_MORE, J_BAD, J_UNSUP };

#define MAX_DEPTH 200

/* JSON whitespace, by byte. */
static const unsigned char WS[256] = {[' '] = 1, ['\n'] = 1, ['\r'] = 1, ['\t'] = 1};

static inline uint64_t load64(const unsigned char *q);

static inline const char *skip_ws(const char *p, const char *e)
{
    while (p < e) {
        unsigned char c = (unsigned char)*p;
        if (c > ' ' || !WS[c])
            return p;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && defined(__GNUC__)
        if (c == ' ' && e - p >= 8) {  /* a run of spaces (the indentation): up to eight a step */
            uint64_t v = load64((const unsigned char *)p) ^ 0x2020202020202020ULL;
            p += v ? (__builtin_ctzll(v) >> 3) : 8;  /* the first byte that is not a space */
            continue;
        }
#endif
        p++;
    }
    return p;
}

static inline int is_digit(char c) { return c >= '0' && c <= '9'; }

static int hexval(unsigned char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Eight bytes at a time (SWAR): a word of the text, and whether any of its bytes is one a string scan must
   stop at ('"', '\\', a control character below 0x20, or a byte >= 0x80 that starts UTF-8 to check). Each
   test is exact about whether such a byte is present (not where), which is all the skip needs. */
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

static inline uint64_t load64(const unsigned char *q)
{
    uint64_t v;
    memcpy(&v, q, 8);
    return v;
}

static inline uint64_t str_stop(uint64_t v)
{
    uint64_t quote = v ^ (ONES * '"'), slash = v ^ (ONES * '\\');
    return ((quote - ONES) & ~quote) | ((slash - ONES) & ~slash) | ((v - ONES * 0x20) & ~v) | v;
}

/* Length of the valid UTF-8 sequence at q (first byte >= 0x80), 0 if invalid, -1 if cut. */
static int utf8_len(const unsigned char *q, const unsigned char *e)
{
    unsigned c = q[0], lo = 0x80, hi = 0xBF;
    int n;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c == 0xE0) { n = 3; lo = 0xA0; }
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) n = 3;
    else if (c == 0xED) { n = 3; hi = 0x9F; }
    else if (c == 0xF0) { n = 4; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) n = 4;
    else if (c == 0xF4) { n = 4; hi = 0x8F; }
    else return 0;
    if (q + n > e) return -1;
    if (q[1] < lo || q[1] > hi) return 0;
    for (int i = 2; i < n; i++)
        if (q[i] < 0x80 || q[i] > 0xBF) return 0;
    return n;
}

/* The string starting at p (a '"'): *out just past its closing quote, *esc when it has escapes. */
static int scan_str(const char *p, const char *e, const char **out, int *esc)
{
    const unsigned char *q = (const unsigned char *)p + 1, *E = (const unsigned char *)e;
    int has = 0;
    for (;;) {
        while (E - q >= 8) {  /* plain ASCII: eight bytes a step */
            uint64_t m = str_stop(load64(q)) & HIGHS;
            if (m) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && defined(__GNUC__)
                q += __builtin_ctzll(m) >> 3;  /* the first byte to look at (the lowest flag is exact) */
#endif
                break;
            }
            q += 8;
        }
        while (q < E && *q != '"' && *q != '\\' && *q >= 0x20 && *q < 0x80)
            q++;
        if (q >= E) return J_MORE;
        unsigned c = *q;
        if (c == '"') {
            *out = (const char *)q + 1;
            *esc = has;
            return J_OK;
        }
        if (c == '\\') {
            has = 1;
            if (q + 1 >= E) return J_MORE;
            unsigned d = q[1];
            if (d == 'u') {
                if (q + 6 > E) return J_MORE;
                unsigned v = 0;
                for (int i = 2; i < 6; i++) {
                    int h = hexval(q[i]);
                    if (h < 0) return J_BAD;
                    v = v * 16 + (unsigned)h;
                }
                if (v >= 0xD800 && v <= 0xDFFF) return J_UNSUP; /* surrogates: the full decoder's call */
                q += 6;
            } else if (d == '"' || d == '\\' || d == '/' || d == 'b' || d == 'f' || d == 'n' || d == 'r' || d == 't') {
                q += 2;
            } else {
                return J_BAD;
            }
            continue;
        }
        if (c < 0x20) return J_BAD;
        int k = utf8_len(q, E);
        if (k < 0) return J_MORE;
        if (k == 0) return J_BAD;
        q += k;
    }
}

/* Does the number d.ddd x 10^e10 (its significant digits from `first` up to `end`, a '.' and an
   exponent skipped) round beyond the largest double? Yes from the midpoint between DBL_MAX and
   2^1024 on: (2^54 - 1) * 2^970,
   all its 309 digits below. */
static int beyond_double(const char *first, const char *end, long e10)
{
    static const char mid[] = "179769313486231580793728971405303415079934132710037826936173778980444968292764750946649017977587207096330286416692887910946555547851940402630657488671505820681908902000708383676273854845817711531764475730270069855571366959622842914819860834936475292719074168444365510704342711559699508093042880177904174497792";
    if (e10 != 308) return e10 > 308;
    const char *m = mid;
    for (const char *d = first; d < end && *d != 'e' && *d != 'E'; d++) {
        if (*d == '.') continue;
        if (!*m) return 1; /* equal so far and longer: above the midpoint */
        if (*d != *m) return *d > *m;
        m++;
    }
    return !*m; /* all digits equal the midpoint's: rounds to even, 2^1024 */
}

/* A JSON number at p; *isint when it has no fraction or exponent. J_UNSUP for a float that may
   be beyond a double's range (>= 1e308), wherever it is, read or skipped: the typed decoder
   refuses such a number in a field it reads (and reads fields this scanner skips), so the
   Python loader decides what the file says and warns, the same on both paths. */
static int scan_num(const char *p, const char *e, const char **out, int *isint)
{
    const char *q = p;
    int fl = 0;
    long digits = 0, ex = 0, zeros = 0; /* integer part's digits (0 for "0"), exponent, 0.000ddd's zeros */
    const char *first = NULL; /* the first significant digit */
    if (*q == '-') q++;
    if (q >= e) return J_MORE;
    if (*q == '0') q++;
    else if (*q >= '1' && *q <= '9') {
        const char *d = first = q;
        while (q < e && is_digit(*q)) q++;
        digits = q - d;
    }
    else return J_BAD;
    if (q < e && *q == '.') {
        q++;
        fl = 1;
        if (q >= e) return J_MORE;
        if (!is_digit(*q)) return J_BAD;
        while (q < e && is_digit(*q)) {
            if (!first) {
                if (*q != '0') first = q;
                else zeros++;
            }
            q++;
        }
    }
    if (q < e && (*q == 'e' || *q == 'E')) {
        q++;
        fl = 1;
        int neg = 0;
        if (q < e && (*q == '+' || *q == '-')) neg = *q++ == '-';
        if (q >= e) return J_MORE;
        if (!is_digit(*q)) return J_BAD;
        while (q < e && is_digit(*q)) {
            if (ex < 100000) ex = ex * 10 + (*q - '0');
            q++;
        }
        if (neg) ex = -ex;
    }
    if (q >= e) return J_MORE; /* inside an array or object a delimiter must follow */
    if (fl && first && beyond_double(first, q, (digits ? digits - 1 : -(zeros + 1)) + ex)) return J_UNSUP;
    *out = q;
    *isint = !fl;
    return J_OK;
}

static int scan_value(const char *p, const char *e, const char **out, tok *t, int depth);

enum { J_NEXT = -1 };

/* After a member of an object or array: J_NEXT with *qp past the comma when another follows,
   J_OK with *out past the closing bracket, or J_MORE / J_BAD. */
static inline int after_member(const char **qp, const char *e, char close, const char **out)
{
    const char *q = skip_ws(*qp, e);
    if (q >= e) return J_MORE;
    if (*q == ',') {
        *qp = skip_ws(q + 1, e);
        return J_NEXT;
    }
    if (*q == close) {
        *out = q + 1;
        return J_OK;
    }
    return J_BAD;
}

static int scan_container(const char *p, const char *e, const char **out, int depth)
{
    if (depth > MAX_DEPTH) return J_UNSUP;
    int obj = *p == '{';
    char close = obj ? '}' : ']';
    const char *q = skip_ws(p + 1, e);
    int r, esc;
    tok t;
    if (q >= e) return J_MORE;
    if (*q == close) {
        *out = q + 1;
        return J_OK;
    }
    for (;;) {
        if (obj) {
            if (q >= e) return J_MORE;
            if (*q != '"') return J_BAD;
            if ((r = scan_str(q, e, &q, &esc))) return r;
            q = skip_ws(q, e);
            if (q >= e) return J_MORE;
            if (*q != ':') return J_BAD;
            q = skip_ws(q + 1, e);
        }
        if ((r = scan_value(q, e, &q, &t, depth + 1))) return r;
        if ((r = after_member(&q, e, close, out)) != J_NEXT) return r;
    }
}

static int literal(const char *p, const char *e, const char *word, size_t n, const char **out)
{
    if ((size_t)(e - p) < n) return memcmp(p, word, (size_t)(e - p)) ? J_BAD : J_MORE;
    if (memcmp(p, word, n)) return J_BAD;
    *out = p + n;
    return J_OK;
}

static int scan_value(const char *p, const char *e, const char **out, tok *t, int depth)
{
    int r, flag;
    if (p >= e) return J_MORE;
    switch (*p) {
    case '"':
        if ((r = scan_str(p, e, out, &flag))) return r;
        t->t = flag ? T_ESTR : T_STR;
        break;
    case '{':
    case '[':
        if ((r = scan_container(p, e, out, depth))) return r;
        t->t = *p == '{' ? T_OBJ : T_ARR;
        break;
    case 't':
        if ((r = literal(p, e, "true", 4, out))) return r;
        t->t = T_BOOL;
        break;
    case 'f':
        if ((r = literal(p, e, "false", 5, out))) return r;
        t->t = T_BOOL;
        break;
    case 'n':
        if ((r = literal(p, e, "null", 4, out))) return r;
        t->t = T_NULL;
        break;
    default:
        if (*p != '-' && !is_digit(*p)) return J_BAD;
        if ((r = scan_num(p, e, out, &flag))) return r;
        t->t = flag ? T_INT : T_FLOAT;
    }
    t->p = p;
    t->n = *out - p;
    return J_OK;
}

/* ---------------------------------------------------------------- numbers */

/* An int token that fits int64 (checked at scan time). */
static int64_t tok_i64(const tok *t)
{
    const char *p = t->p, *e = t->p + t->n;
    int neg = *p == '-';
    uint64_t v = 0;
    for (p += neg; p < e; p++) v = v * 10 + (uint64_t)(*p - '0');
    return neg ? (int64_t)(0 - v) : (int64_t)v;
}

/* Does the int token fit int64? Up to 18 digits always does. */
static int int_fits(const tok *t)
{
    Py_ssize_t digits = t->n - (t->p[0] == '-');
    if (digits <= 18) return 1;
    if (digits > 19) return 0;
    const char *p = t->p + (t->p[0] == '-');
    const char *lim = t->p[0] == '-' ? "9223372036854775808" : "9223372036854775807";
    return memcmp(p, lim, 19) <= 0;
}

static const double POW10[23] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* q (plus a nonzero fraction below its last bit when sticky) times 2^exp2, correctly rounded
   (to nearest, ties to even) to a double. q has at least 55 bits, or is exact (sticky 0). */
static double round_u128(unsigned __int128 q, int sticky, int exp2)
{
#if defined(__GNUC__)
    uint64_t hi = (uint64_t)(q >> 64), lo = (uint64_t)q;  /* n: the bit length of q */
    int n = hi ? 128 - __builtin_clzll(hi) : lo ? 64 - __builtin_clzll(lo) : 0;
#else
    int n = 0;
    for (unsigned __int128 x = q; x; x >>= 1) n++;
#endif
    if (n <= 53) return ldexp((double)(uint64_t)q, exp2);
    int drop = n - 53;
    unsigned __int128 mant = q >> drop, rem = q & (((unsigned __int128)1 << drop) - 1);
    unsigned __int128 half = (unsigned __int128)1 << (drop - 1);
    if (rem > half || (rem == half && (sticky || (mant & 1)))) mant++;
    if (mant >> 53) {
        mant >>= 1;
        drop++;
    }
    return ldexp((double)(uint64_t)mant, exp2 + drop);
}

#if defined(__GLIBC__) || defined(__APPLE__)
#include <locale.h>
#ifdef __APPLE__
#include <xlocale.h>
#endif
static locale_t c_locale;
#define HAVE_STRTOD_L 1
#endif

/* The float token as a correctly rounded double; 0 when not finite (out of range) or when it
   needs the interpreter's parser and the GIL is not held (needs_gil is then set). */
static int tok_double(const tok *t, double *out, int *needs_gil)
{
    const char *p = t->p, *e = t->p + t->n;
    int neg = 0, digits = 0, exp10 = 0;
    uint64_t m = 0;
    if (*p == '-') { neg = 1; p++; }
    for (; p < e && is_digit(*p); p++) {
        if (digits || *p != '0') digits++;
        m = m * 10 + (uint64_t)(*p - '0');
    }
    if (p < e && *p == '.') {
        for (p++; p < e && is_digit(*p); p++) {
            if (digits || *p != '0') digits++;
            m = m * 10 + (uint64_t)(*p - '0');
            exp10--;
        }
    }
    if (digits <= 19 && p < e && (*p == 'e' || *p == 'E')) {
        int es = 1, ev = 0;
        p++;
        if (*p == '+' || *p == '-') { es = *p == '-' ? -1 : 1; p++; }
        for (; p < e && is_digit(*p) && ev < 100000; p++) ev = ev * 10 + (*p - '0');
        if (p < e) digits = 99; /* an absurd exponent: the slow path */
        exp10 += es * ev;
    }
    if (digits <= 19 && m) {
        double v;
        if (m <= (1ULL << 53) && exp10 >= -22 && exp10 <= 22) {
            /* Clinger's fast path: both operands exact, one correctly rounded operation */
            v = (double)m;
            v = exp10 >= 0 ? v * POW10[exp10] : v / POW10[-exp10];
        } else if (exp10 < 0 && exp10 >= -19) {
            /* m / 10^k exactly: shift m to 127 bits, divide in 128-bit integers; the quotient
               has >= 63 bits and the remainder says whether anything was cut */
            unsigned __int128 P = 1;
            for (int i = 0; i < -exp10; i++) P *= 10;
            int bits = 0;
            for (uint64_t x = m; x; x >>= 1) bits++;
            int shift = 127 - bits;
            unsigned __int128 num = (unsigned __int128)m << shift, quo = num / P;
            v = round_u128(quo, num - quo * P != 0, -shift); /* (one 128-bit division, not two) */
        } else if (exp10 >= 0 && exp10 <= 19) {
            unsigned __int128 P = 1;
            for (int i = 0; i < exp10; i++) P *= 10;
            v = round_u128((unsigned __int128)m * P, 0, 0);
        } else {
            goto slow;
        }
        *out = neg ? -v : v;
        return 1;
    }
    if (digits == 0) { /* zero, whatever its exponent */
        *out = neg ? -0.0 : 0.0;
        return 1;
    }
slow:;
    char small[64], *buf = small;
    if (t->n >= (Py_ssize_t)sizeof small) {
        buf = PyMem_RawMalloc((size_t)t->n + 1);
        if (!buf) return 0;
    }
    memcpy(buf, t->p, (size_t)t->n);
    buf[t->n] = 0;
    double v;
#ifdef HAVE_STRTOD_L
    (void)needs_gil;
    v = strtod_l(buf, NULL, c_locale); /* correctly rounded (glibc, macOS), whatever the locale */
#else
    if (needs_gil) { /* PyOS_string_to_double needs the interpreter: the caller takes the GIL */
        if (buf != small) PyMem_RawFree(buf);
        *needs_gil = 1;
        return 0;
    }
    v = PyOS_string_to_double(buf, NULL, NULL);
    if (v == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        v = NAN;
    }
#endif
    if (buf != small) PyMem_RawFree(buf);
    if (!isfinite(v)) return 0;
    *out = v;
    return 1;
}

/* ---------------------------------------------------------------- growable columns */

typedef struct {
    char *p;
    size_t n, cap; /* bytes */
} vec;

static int vgrow(vec *v, size_t need)
{
    size_t cap = v->cap ? v->cap : 4096;
    while (cap < v->n + need) cap *= 2;
    char *p = PyMem_RawRealloc(v->p, cap);
    if (!p) return -1;
    v->p = p;
    v->cap = cap;
    return 0;
}

#define DEFINE_PUSH(fn, T)                                                \
    static inline int fn(vec *v, T x)                                     \
    {                                                                     \
        if (v->n + sizeof(T) > v->cap && vgrow(v, sizeof(T))) return -1;  \
        memcpy(v->p + v->n, &x, sizeof(T));                               \
        v->n += sizeof(T);                                                \
        return 0;                                                         \
    }
DEFINE_PUSH(push_d, double)
DEFINE_PUSH(push_l, int64_t)
DEFINE_PUSH(push_i, int32_t)
DEFINE_PUSH(push_b, int8_t)

/* ---------------------------------------------------------------- interning table */

typedef struct {
    uint64_t h;
    char *k; /* NULL: empty slot */
    Py_ssize_t n;
    int32_t v;
    int32_t borrowed; /* k points into a str the scanner's lists hold (a name): not the table's to free */
} ent;

typedef struct {
    ent *e;
    size_t cap, used;
} table;

static uint64_t hash_bytes(const char *p, Py_ssize_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        h = (h ^ v) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
        p += 8;
        n -= 8;
    }
    uint64_t v = 0;
    memcpy(&v, p, (size_t)n);
    h = (h ^ v) * 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 29;
    return h;
}

/* The slot for key (found: its k is set; else empty and ready for tput). */
static ent *tfind(table *t, const char *k, Py_ssize_t n, uint64_t h)
{
    size_t mask = t->cap - 1, i = (size_t)h & mask;
    for (;;) {
        ent *s = &t->e[i];
        if (!s->k || (s->h == h && s->n == n && !memcmp(s->k, k, (size_t)n))) return s;
        i = (i + 1) & mask;
    }
}

static int tinit(table *t)
{
    t->cap = 1024;
    t->used = 0;
    t->e = PyMem_RawCalloc(t->cap, sizeof(ent));
    return t->e ? 0 : -1;
}

static int tgrow(table *t)
{
    table n = {PyMem_RawCalloc(t->cap * 2, sizeof(ent)), t->cap * 2, t->used};
    if (!n.e) return -1;
    for (size_t i = 0; i < t->cap; i++)
        if (t->e[i].k) *tfind(&n, t->e[i].k, t->e[i].n, t->e[i].h) = t->e[i];
    PyMem_RawFree(t->e);
    *t = n;
    return 0;
}

/* Store key -> v in the empty slot s (found by tfind); may move the table. *kept: the key's
   copy, which stays where it is when the table grows. `borrow`: the same n bytes, held elsewhere for
   as long as the table lives (a name's str in the scanner's list: its ASCII text is the token's), used
   instead of a copy (a trace of 200,000 distinct 700-byte kernel names: 140 MB less while it loads). */
static int tput_key(table *t, ent *s, const char *k, Py_ssize_t n, uint64_t h, int32_t v, char **kept,
                    const char *borrow)
{
    char *copy = (char *)borrow;
    if (!copy) {
        copy = PyMem_RawMalloc(n ? (size_t)n : 1);
        if (!copy) return -1;
        memcpy(copy, k, (size_t)n);
    }
    if (kept) *kept = copy;
    s->h = h;
    s->k = copy;
    s->n = n;
    s->v = v;
    s->borrowed = borrow != NULL;
    if (++t->used * 2 > t->cap) return tgrow(t);
    return 0;
}

static inline int tput(table *t, ent *s, const char *k, Py_ssize_t n, uint64_t h, int32_t v, char **kept)
{
    return tput_key(t, s, k, n, h, v, kept, NULL);
}

static void tfree(table *t)
{
    if (!t->e) return;
    for (size_t i = 0; i < t->cap; i++)
        if (t->e[i].k && !t->e[i].borrowed) PyMem_RawFree(t->e[i].k);
    PyMem_RawFree(t->e);
    t->e = NULL;
}

/* ---------------------------------------------------------------- the scanner */

/* args keys the loader reads (as the typed decoder names them) */
enum { A_EXT, A_EXT21, A_CORR, A_DIMS, A_TYPES, A_STRIDES, A_CONC, A_DEVICE, A_STREAM, A_BYTES,
       A_GRID, A_BLOCK, A_KFLOP, A_KGB, A_KERNEL, A_GNODE, A_SEQ,
       /* typed Any: any JSON value is accepted; what is not an int (or a number) is a fixup */
       A_STACK, A_HIER, A_PY_ID, A_PY_PARENT, A_PY_MODULE, A_ADDR, A_MBYTES, A_TALLOC, A_TRES, A_DTYPE, A_DID,
       A_N };

/* columns a fixup can name (traceana.load.stream mirrors this list) */
enum { F_GP_DEVICE, F_GP_PID, F_GP_STREAM, F_GP_CORR, F_GP_EXT, F_GP_GNODE, F_GP_BYTES, F_GP_BLOCKS,
       F_OP_EXT, F_OP_KFLOP, F_OP_KGB, F_LA_CORR, F_LA_EXT,
       F_PY_ID, F_PY_PARENT, F_PY_MODULE, F_ME_ADDR, F_ME_NBYTES, F_ME_ALLOC, F_ME_RESERVED, F_ME_DTYPE,
       F_ME_DEVICE, F_OP_SEQ };

/* document states between feeds */
enum { S_START, S_KEY_FIRST, S_KEY, S_AFTER_VALUE, S_EV_FIRST, S_EV, S_EV_AFTER, S_DONE };

enum { NAME_STEP = 1, NAME_COMM = 2 };

/* why a feed stopped: the exception is raised once the GIL is back */
enum { E_NONE, E_UNSUP, E_NOMEM, E_PY };

typedef struct {
    char *k;
    Py_ssize_t n;
} span;

/* The scan runs without the GIL (the reading thread inflates the next piece meanwhile); it
   takes the GIL back only for what touches Python objects, which happens once per distinct
   name, thread or odd value, not per event. */
typedef struct {
    PyObject_HEAD
    PyObject *loads;        /* msgspec.json.decode: strings with escapes, odd values */
    PyThreadState *ts;      /* set while the GIL is released */
    int err;
    const char *msg;
    int state;
    int seen_events;
    int done;
    /* a fragment: a run of whole events from the middle of traceEvents (just after a comma), scanned by a
       second thread while the first scans the text before it; its columns are then appended to the first
       scanner's by adopt(). It stops, without error, before anything other than an event and a comma (the
       list's end, or text that is not an event: the primary scanner reads that itself, and decides) */
    int fragment;
    int adopted;
    int between;            /* the last feed's text ended just after an event's comma (all of it consumed) */
    /* names: raw text -> code; the str of each code; str -> code (escaped spellings meet) */
    table names_t;
    PyObject *names, *names_d;
    vec name_flags;         /* int8 per code: NAME_STEP / NAME_COMM */
    /* names met while the GIL is released, made into str at the end of the feed (pend: one pend_t per code
       past the list's end); n_names counts every code given. Once a name with escapes is met, names go the
       GIL's way (its str may equal one already made: names_d finds it) */
    vec pend, py_pend;
    int32_t n_names, n_py_names;
    vec late;               /* fixups and collective events met without the GIL (a late_t each), listed with it */
    int escaped_names;
    table threads_t;
    PyObject *threads, *threads_d;
    table raw_t;            /* shape args, call stacks: raw text -> index of the distinct value */
    vec raw_vals;           /* span per index */
    /* python_function and [memory] events: names and threads coded apart (local codes: raw text ->
       index into py_names / py_threads / me_threads), given their codes after the scan (stream.py),
       after every other event's, as the Python loader does */
    table py_names_t, py_threads_t, me_threads_t;
    PyObject *py_names, *py_threads, *me_threads;
    vec op_stack, op_hier;  /* int32 pairs (op row, raw index) of non-empty "Call stack" / "Module Hierarchy" */
    /* columns */
    vec gp_name, gp_kind, gp_dev, gp_pid, gp_stream, gp_ts, gp_dur, gp_corr, gp_ext, gp_bytes, gp_blocks, gp_groups, gp_gnode;
    vec gp_ord, op_ord;     /* int64 place of the event in traceEvents (traceana.annotate) */
    vec op_name, op_thread, op_ts, op_end, op_ext, op_seq, op_kflop, op_kgb, op_dims, op_types, op_strides, op_conc;
    vec la_name, la_thread, la_ts, la_end, la_corr, la_ext, la_kernel;
    vec an_name, an_thread, an_ts, an_end;
    vec py_name, py_thread, py_ts, py_end, py_id, py_parent, py_module;
    vec me_thread, me_ts, me_addr, me_nbytes, me_alloc, me_reserved, me_dtype, me_device;
    PyObject *fixups;       /* [(column, row, raw bytes)] */
    PyObject *comm;         /* [(op row, raw event bytes)]: record_param_comms with args */
    PyObject *doc;          /* [(key, raw bytes)]: the document's other keys */
    Py_ssize_t n_events, no_ph, bad_time, legacy;
    double t_min, t_max;
} Scanner;

static PyObject *Unsupported;

/* A fixup (col >= 0: column, row, the value's raw text) or a collective event (col < 0: its op row, the
   event's raw text) met while the GIL is released: a copy of the text until the end of the feed. */
typedef struct {
    int col;
    Py_ssize_t row;
    char *p;
    Py_ssize_t n;
} late_t;

static int park_late(vec *v, int col, Py_ssize_t row, const char *p, Py_ssize_t n)
{
    late_t e = {col, row, PyMem_RawMalloc(n ? (size_t)n : 1), n};
    if (!e.p) return -1;
    memcpy(e.p, p, (size_t)n);
    if (v->n + sizeof e > v->cap && vgrow(v, sizeof e)) {
        PyMem_RawFree(e.p);
        return -1;
    }
    memcpy(v->p + v->n, &e, sizeof e);
    v->n += sizeof e;
    return 0;
}

static void free_late(vec *v)
{
    late_t *e = (late_t *)v->p;
    for (size_t i = 0; i < v->n / sizeof(late_t); i++) PyMem_RawFree(e[i].p);
    v->n = 0;
}

#define VECS(s) {&s->name_flags, &s->pend, &s->py_pend, &s->late, &s->raw_vals, &s->gp_name, &s->gp_kind, &s->gp_dev, &s->gp_pid, &s->gp_stream, \
    &s->gp_ts, &s->gp_dur, &s->gp_corr, &s->gp_ext, &s->gp_bytes, &s->gp_blocks, &s->gp_groups, &s->gp_gnode,    \
    &s->gp_ord, &s->op_ord, &s->op_name,                                                                      \
    &s->op_thread, &s->op_ts, &s->op_end, &s->op_ext, &s->op_kflop, &s->op_kgb, &s->op_dims, &s->op_types,      \
    &s->op_strides, &s->op_conc, &s->la_name, &s->la_thread, &s->la_ts, &s->la_end, &s->la_corr, &s->la_ext,    \
    &s->la_kernel, &s->an_name, &s->an_thread, &s->an_ts, &s->an_end, &s->op_stack, &s->op_hier, &s->py_name,    \
    &s->py_thread, &s->py_ts, &s->py_end, &s->py_id, &s->py_parent, &s->py_module, &s->me_thread, &s->me_ts,     \
    &s->me_addr, &s->me_nbytes, &s->me_alloc, &s->me_reserved, &s->me_dtype, &s->me_device, &s->op_seq}

static void Scanner_dealloc(Scanner *s)
{
    Py_XDECREF(s->loads);
    tfree(&s->names_t);
    tfree(&s->threads_t);
    tfree(&s->raw_t);
    tfree(&s->py_names_t);
    tfree(&s->py_threads_t);
    tfree(&s->me_threads_t);
    Py_XDECREF(s->py_names);
    Py_XDECREF(s->py_threads);
    Py_XDECREF(s->me_threads);
    Py_XDECREF(s->names);
    Py_XDECREF(s->names_d);
    Py_XDECREF(s->threads);
    Py_XDECREF(s->threads_d);
    free_late(&s->late);
    vec *vs[] = VECS(s);
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) PyMem_RawFree(vs[i]->p);
    Py_XDECREF(s->fixups);
    Py_XDECREF(s->comm);
    Py_XDECREF(s->doc);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static int Scanner_init(Scanner *s, PyObject *args, PyObject *kw)
{
    PyObject *loads;
    int fragment = 0;
    static char *kwlist[] = {"loads", "fragment", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|p", kwlist, &loads, &fragment)) return -1;
    if (s->names) {
        PyErr_SetString(PyExc_RuntimeError, "Scanner is initialised once");
        return -1;
    }
    Py_INCREF(loads);
    s->loads = loads;
    s->fragment = fragment;
    s->state = fragment ? S_EV : S_START;
    s->t_min = INFINITY;
    s->t_max = -INFINITY;
    if (tinit(&s->names_t) || tinit(&s->threads_t) || tinit(&s->raw_t) || tinit(&s->py_names_t) ||
        tinit(&s->py_threads_t) || tinit(&s->me_threads_t)) {
        PyErr_NoMemory();
        return -1;
    }
    s->names = PyList_New(0);
    s->names_d = PyDict_New();
    s->threads = PyList_New(0);
    s->threads_d = PyDict_New();
    s->fixups = PyList_New(0);
    s->comm = PyList_New(0);
    s->doc = PyList_New(0);
    s->py_names = PyList_New(0);
    s->py_threads = PyList_New(0);
    s->me_threads = PyList_New(0);
    if (!s->names || !s->names_d || !s->threads || !s->threads_d || !s->fixups || !s->comm || !s->doc ||
        !s->py_names || !s->py_threads || !s->me_threads)
        return -1;
    return 0;
}

/* Take the GIL if the scan released it; give_gil(s, 1) releases it again. */
static inline int take_gil(Scanner *s)
{
    if (!s->ts) return 0;
    PyEval_RestoreThread(s->ts);
    s->ts = NULL;
    return 1;
}

static inline void give_gil(Scanner *s, int had)
{
    if (had) s->ts = PyEval_SaveThread();
}

static int unsup(Scanner *s, const char *msg)
{
    s->err = E_UNSUP;
    s->msg = msg;
    return -1;
}

static int nomem(Scanner *s)
{
    s->err = E_NOMEM;
    return -1;
}

/* The Python value of a scalar token: int, str or None (others through loads). GIL held. */
static PyObject *tok_object(Scanner *s, const tok *t)
{
    switch (t->t) {
    case T_ABSENT:
    case T_NULL:
        Py_RETURN_NONE;
    case T_INT:
        if (int_fits(t)) return PyLong_FromLongLong(tok_i64(t));
        break;
    case T_STR:
        return PyUnicode_DecodeUTF8(t->p + 1, t->n - 2, "strict");
    default:
        break;
    }
    PyObject *raw = PyBytes_FromStringAndSize(t->p, t->n);
    if (!raw) return NULL;
    PyObject *v = PyObject_CallOneArg(s->loads, raw);
    Py_DECREF(raw);
    return v;
}

/* A name met without the GIL: its text is the table's copy until its str is made. */
typedef struct {
    char *k;
    Py_ssize_t n;
    uint64_t h;
} pend_t;

static const char *ascii_text(PyObject *str, Py_ssize_t n);

/* Park a new name's table key (the table's own copy) until the GIL is held again. */
static int park(vec *v, char *kept, Py_ssize_t n, uint64_t h)
{
    pend_t e = {kept, n, h};
    if (v->n + sizeof e > v->cap && vgrow(v, sizeof e)) return -1;
    memcpy(v->p + v->n, &e, sizeof e);
    v->n += sizeof e;
    return 0;
}

/* The parked names' str appended to list (and entered in dict when given), in code order; a name's table
   key then borrows its str's text when that is the same bytes (ASCII), as names made at once do. GIL held. */
static int unpark(vec *v, table *t, PyObject *list, PyObject *dict)
{
    pend_t *e = (pend_t *)v->p;
    size_t n = v->n / sizeof(pend_t), i = 0;
    int r = 0;
    for (; i < n; i++) {
        PyObject *str = PyUnicode_DecodeUTF8(e[i].k, e[i].n, "strict");
        if (!str) {
            r = -1;
            break;
        }
        PyObject *co = dict ? PyLong_FromSsize_t(PyList_GET_SIZE(list)) : NULL;
        if ((dict && (!co || PyDict_SetItem(dict, str, co))) || PyList_Append(list, str)) r = -1;
        Py_XDECREF(co);
        if (!r) {
            const char *b = ascii_text(str, e[i].n);
            ent *slot = b ? tfind(t, e[i].k, e[i].n, e[i].h) : NULL;
            if (slot && slot->k == e[i].k) {
                PyMem_RawFree(slot->k);
                slot->k = (char *)b;
                slot->borrowed = 1;
            }
        }
        Py_DECREF(str);
        if (r) {
            i++;
            break;
        }
    }
    if (i) {  /* (an empty vec has no buffer at all) */
        memmove(v->p, v->p + i * sizeof(pend_t), v->n - i * sizeof(pend_t));
        v->n -= i * sizeof(pend_t);
    }
    return r;
}

/* Every parked name made into its str. GIL held. */
static int append_item(Scanner *s, PyObject *list, PyObject *item);

static int unpark_all(Scanner *s)
{
    if (unpark(&s->pend, &s->names_t, s->names, s->names_d) || unpark(&s->py_pend, &s->py_names_t, s->py_names, NULL)) {
        s->err = E_PY;
        return -1;
    }
    late_t *e = (late_t *)s->late.p;
    int r = 0;
    for (size_t i = 0; i < s->late.n / sizeof(late_t) && !r; i++) {
        PyObject *item = e[i].col >= 0 ? Py_BuildValue("(iny#)", e[i].col, e[i].row, e[i].p, e[i].n)
                                       : Py_BuildValue("(ny#)", e[i].row, e[i].p, e[i].n);
        r = append_item(s, e[i].col >= 0 ? s->fixups : s->comm, item);
    }
    free_late(&s->late);
    if (r) {
        s->err = E_PY;
        return -1;
    }
    return 0;
}

/* A name's flags from its text. */
static int8_t name_flags_of(const char *k, Py_ssize_t n)
{
    int8_t f = 0;
    if (n >= 13 && !memcmp(k, "ProfilerStep#", 13)) f |= NAME_STEP;
    if (n == 18 && !memcmp(k, "record_param_comms", 18)) f |= NAME_COMM;
    return f;
}

/* A new name's code (its str made, met with an escaped spelling of the same). GIL held. */
static int32_t new_name(Scanner *s, const tok *t)
{
    PyObject *str = (t->t == T_STR || t->t == T_ESTR) ? tok_object(s, t) : PyUnicode_FromStringAndSize("", 0);
    if (!str) return -1;
    int32_t code = -1;
    if (!PyUnicode_Check(str)) {
        PyErr_SetString(Unsupported, "a name that is not a string");
        goto out;
    }
    PyObject *have = PyDict_GetItemWithError(s->names_d, str);
    if (have) {
        code = (int32_t)PyLong_AsLong(have);
        goto out;
    }
    if (PyErr_Occurred()) goto out;
    int32_t c = (int32_t)PyList_GET_SIZE(s->names);
    PyObject *co = PyLong_FromLong(c), *pre = PyUnicode_FromString("ProfilerStep#");
    PyObject *comm = PyUnicode_FromString("record_param_comms");
    if (co && pre && comm && !PyDict_SetItem(s->names_d, str, co) && !PyList_Append(s->names, str)) {
        Py_ssize_t m = PyUnicode_Tailmatch(str, pre, 0, PY_SSIZE_T_MAX, -1);
        int eq = PyUnicode_Compare(str, comm) == 0;
        if (m >= 0 && !PyErr_Occurred()) {
            if (push_b(&s->name_flags, (int8_t)((m > 0 ? NAME_STEP : 0) | (eq ? NAME_COMM : 0))))
                PyErr_NoMemory();
            else
                code = c;
        }
    }
    Py_XDECREF(co);
    Py_XDECREF(pre);
    Py_XDECREF(comm);
out:
    Py_DECREF(str);
    return code;
}

/* The text of str when it is ASCII of n bytes (then it is the unescaped token's, byte for byte), else NULL.
   The str is held by one of the scanner's lists for the scanner's life. */
static const char *ascii_text(PyObject *str, Py_ssize_t n)
{
    if (!PyUnicode_Check(str) || !PyUnicode_IS_COMPACT_ASCII(str) || PyUnicode_GET_LENGTH(str) != n) return NULL;
    return (const char *)PyUnicode_DATA(str);
}

/* The code of a name (a string token, or "" for null / absent); -1 with s->err set. */
static int32_t name_code(Scanner *s, const tok *t)
{
    const char *k = "";
    Py_ssize_t n = 0;
    if (t->t == T_STR || t->t == T_ESTR) {
        k = t->p + 1;
        n = t->n - 2;
    }
    uint64_t h = hash_bytes(k, n);
    ent *slot = tfind(&s->names_t, k, n, h);
    if (slot->k) return (int32_t)slot->v;
    if (t->t != T_ESTR && !s->escaped_names) {  /* its str is made at the end of the feed */
        int32_t code = s->n_names;
        char *kept;
        if (push_b(&s->name_flags, name_flags_of(k, n)) || tput(&s->names_t, slot, k, n, h, code, &kept) ||
            park(&s->pend, kept, n, h))
            return nomem(s);
        s->n_names++;
        return code;
    }
    if (s->fragment) return unsup(s, "an escaped name in a fragment (the primary scanner reads it)");
    int had = take_gil(s);
    if (unpark_all(s)) {
        give_gil(s, had);
        return -1;
    }
    if (t->t == T_ESTR) s->escaped_names = 1;
    int32_t code = new_name(s, t);
    const char *borrow = code >= 0 && t->t == T_STR ? ascii_text(PyList_GET_ITEM(s->names, code), n) : NULL;
    s->n_names = (int32_t)PyList_GET_SIZE(s->names);
    give_gil(s, had);
    if (code < 0) {
        s->err = E_PY;
        return -1;
    }
    if (tput_key(&s->names_t, slot, k, n, h, code, NULL, borrow)) return nomem(s);
    return code;
}

/* A new (pid, tid)'s code. GIL held. */
static int32_t new_thread(Scanner *s, const tok *pid, const tok *tid)
{
    PyObject *p = tok_object(s, pid), *t = p ? tok_object(s, tid) : NULL;
    PyObject *pair = t ? PyTuple_Pack(2, p, t) : NULL;
    Py_XDECREF(p);
    Py_XDECREF(t);
    if (!pair) return -1;
    int32_t code = -1;
    PyObject *have = PyDict_GetItemWithError(s->threads_d, pair);
    if (have) {
        code = (int32_t)PyLong_AsLong(have);
    } else if (!PyErr_Occurred()) {
        int32_t c = (int32_t)PyList_GET_SIZE(s->threads);
        PyObject *co = PyLong_FromLong(c);
        if (co && !PyDict_SetItem(s->threads_d, pair, co) && !PyList_Append(s->threads, pair)) code = c;
        Py_XDECREF(co);
    }
    Py_DECREF(pair);
    return code;
}

/* A (pid, tid) pair new to a late table (python_function / [memory] events): its tuple appended to
   list, the local code its index. GIL held. */
static int32_t new_late_thread(Scanner *s, PyObject *list, const tok *pid, const tok *tid)
{
    PyObject *p = tok_object(s, pid), *t = p ? tok_object(s, tid) : NULL;
    PyObject *pair = t ? PyTuple_Pack(2, p, t) : NULL;
    Py_XDECREF(p);
    Py_XDECREF(t);
    int32_t code = (int32_t)PyList_GET_SIZE(list);
    if (!pair || PyList_Append(list, pair)) code = -1;
    Py_XDECREF(pair);
    return code;
}

/* The code of (pid, tid): in the threads table (list NULL), or the local code in a late table. */
static int32_t thread_code_in(Scanner *s, table *tb, PyObject *list, const tok *pid, const tok *tid)
{
    char small[256], *key = small;
    Py_ssize_t n = pid->n + tid->n + 3;
    if (n > (Py_ssize_t)sizeof small && !(key = PyMem_RawMalloc((size_t)n))) return nomem(s);
    key[0] = (char)('A' + pid->t);
    if (pid->n) memcpy(key + 1, pid->p, (size_t)pid->n);
    key[1 + pid->n] = (char)('A' + tid->t);
    if (tid->n) memcpy(key + 2 + pid->n, tid->p, (size_t)tid->n);
    key[n - 1] = 0;
    uint64_t h = hash_bytes(key, n);
    ent *slot = tfind(tb, key, n, h);
    int32_t code;
    if (slot->k) {
        code = (int32_t)slot->v;
    } else {
        int had = take_gil(s);
        code = list ? new_late_thread(s, list, pid, tid) : new_thread(s, pid, tid);
        give_gil(s, had);
        if (code < 0) s->err = E_PY;
        else if (tput(tb, slot, key, n, h, code, NULL)) code = nomem(s);
    }
    if (key != small) PyMem_RawFree(key);
    return code;
}

static inline int32_t thread_code(Scanner *s, const tok *pid, const tok *tid)
{
    return thread_code_in(s, &s->threads_t, NULL, pid, tid);
}

/* The local code of a python_function event's name (its str appended to py_names when new). */
static int32_t py_name_code(Scanner *s, const tok *t)
{
    const char *k = "";
    Py_ssize_t n = 0;
    if (t->t == T_STR || t->t == T_ESTR) {
        k = t->p + 1;
        n = t->n - 2;
    }
    uint64_t h = hash_bytes(k, n);
    ent *slot = tfind(&s->py_names_t, k, n, h);
    if (slot->k) return (int32_t)slot->v;
    if (t->t != T_ESTR) {  /* its str is made at the end of the feed */
        int32_t code = s->n_py_names;
        char *kept;
        if (tput(&s->py_names_t, slot, k, n, h, code, &kept) || park(&s->py_pend, kept, n, h)) return nomem(s);
        s->n_py_names++;
        return code;
    }
    if (s->fragment) return unsup(s, "an escaped name in a fragment (the primary scanner reads it)");
    int had = take_gil(s);
    if (unpark_all(s)) {
        give_gil(s, had);
        return -1;
    }
    int32_t code = (int32_t)PyList_GET_SIZE(s->py_names);
    s->n_py_names = code + 1;
    PyObject *str = (t->t == T_STR || t->t == T_ESTR) ? tok_object(s, t) : PyUnicode_FromStringAndSize("", 0);
    if (!str || PyList_Append(s->py_names, str)) code = -1;
    const char *borrow = code >= 0 && t->t == T_STR ? ascii_text(str, n) : NULL; /* (the list holds it) */
    Py_XDECREF(str);
    give_gil(s, had);
    if (code < 0) {
        s->err = E_PY;
        return -1;
    }
    if (tput_key(&s->py_names_t, slot, k, n, h, code, NULL, borrow)) return nomem(s);
    return code;
}

/* The index of a shape argument's distinct raw text (-1: absent); -2 when out of memory. */
static int32_t raw_index(Scanner *s, const tok *t)
{
    if (t->t == T_ABSENT) return -1;
    uint64_t h = hash_bytes(t->p, t->n);
    ent *slot = tfind(&s->raw_t, t->p, t->n, h);
    if (slot->k) return (int32_t)slot->v;
    int32_t ix = (int32_t)(s->raw_vals.n / sizeof(span));
    span sp = {NULL, t->n};
    if (tput(&s->raw_t, slot, t->p, t->n, h, ix, &sp.k)) return -2;
    if (s->raw_vals.n + sizeof sp > s->raw_vals.cap && vgrow(&s->raw_vals, sizeof sp)) return -2;
    memcpy(s->raw_vals.p + s->raw_vals.n, &sp, sizeof sp);
    s->raw_vals.n += sizeof sp;
    return ix;
}

/* Append (item built by fmt) to list, taking the GIL for it. */
static int append_item(Scanner *s, PyObject *list, PyObject *item)
{
    int r = item ? PyList_Append(list, item) : -1;
    Py_XDECREF(item);
    return r;
}

static int add_fixup(Scanner *s, int col, Py_ssize_t row, const tok *t)
{
    return park_late(&s->late, col, row, t->p, t->n) ? nomem(s) : 0;
}

/* An id (int / str / null): int64, -1 when absent; strings are fixups (_as_int in Python). */
static int push_id(Scanner *s, vec *v, int col, const tok *t)
{
    int64_t x = -1;
    if (t->t == T_INT) x = tok_i64(t);
    else if ((t->t == T_STR || t->t == T_ESTR) && add_fixup(s, col, (Py_ssize_t)(v->n / sizeof(int64_t)), t))
        return -1;
    return push_l(v, x) ? nomem(s) : 0;
}

/* A float token's double, taking the GIL where the platform's parser needs it. */
static int number(Scanner *s, const tok *t, double *x)
{
    int needs_gil = 0;
    if (tok_double(t, x, &needs_gil)) return 1;
    if (!needs_gil) return 0;
    int had = take_gil(s);
    int ok = tok_double(t, x, NULL);
    give_gil(s, had);
    return ok;
}

/* A number column (int / float / str / null): double, nan when absent; strings are fixups. */
static int push_num(Scanner *s, vec *v, int col, const tok *t)
{
    double x = NAN;
    if (t->t == T_INT) x = (double)tok_i64(t);
    else if (t->t == T_FLOAT) {
        if (!number(s, t, &x)) return unsup(s, "a number out of range");
    } else if ((t->t == T_STR || t->t == T_ESTR) && add_fixup(s, col, (Py_ssize_t)(v->n / sizeof(double)), t)) {
        return -1;
    }
    return push_d(v, x) ? nomem(s) : 0;
}

/* An int column from a value typed Any (python ids, [memory] fields): an int64 int as is, `missing`
   when absent or null; anything else (a string, a float, a bool, an int beyond int64, an array...)
   is a fixup, converted by _as_int in Python. */
static int push_any_int(Scanner *s, vec *v, int col, const tok *t, int64_t missing)
{
    int64_t x = missing;
    if (t->t == T_INT && int_fits(t)) x = tok_i64(t);
    else if (t->t != T_ABSENT && t->t != T_NULL) {
        double d;
        if (t->t == T_FLOAT && !number(s, t, &d)) return unsup(s, "a number out of range");
        if (add_fixup(s, col, (Py_ssize_t)(v->n / sizeof(int64_t)), t)) return -1;
    }
    return push_l(v, x) ? nomem(s) : 0;
}

/* A float column from a value typed Any: a number as a double, nan when absent or null; anything
   else (a string, a bool, an int beyond int64, ...) is a fixup (_finite in Python). */
static int push_any_num(Scanner *s, vec *v, int col, const tok *t)
{
    double x = NAN;
    if (t->t == T_INT && int_fits(t)) x = (double)tok_i64(t);
    else if (t->t == T_FLOAT) {
        if (!number(s, t, &x)) return unsup(s, "a number out of range");
    } else if (t->t != T_ABSENT && t->t != T_NULL) {
        if (add_fixup(s, col, (Py_ssize_t)(v->n / sizeof(double)), t)) return -1;
    }
    return push_d(v, x) ? nomem(s) : 0;
}

/* An op's "Call stack" / "Module Hierarchy" text: (row, index of its distinct raw text) when it is
   a non-empty string (the Python loader keeps only those). */
static int push_text(Scanner *s, vec *v, Py_ssize_t row, const tok *t)
{
    if (!((t->t == T_STR && t->n > 2) || t->t == T_ESTR)) return 0;
    int32_t ix = raw_index(s, t);
    if (ix < 0) return nomem(s);
    return push_i(v, (int32_t)row) || push_i(v, ix) ? nomem(s) : 0;
}

/* The 1-3 positive ints of a launch's grid or block array into d: their count; 0 when the token is
   not such an array; -1 when one is beyond int64 (the caller's fixup or hand-over decides). */
static int dims3(const tok *t, uint64_t d[3])
{
    if (t->t != T_ARR) return 0;
    const char *p = skip_ws(t->p + 1, t->p + t->n), *e = t->p + t->n;
    int count = 0, big = 0;
    tok el;
    while (*p != ']') {
        if (scan_value(p, e, &p, &el, 1) != J_OK || el.t != T_INT || el.p[0] == '-' || count == 3) return 0;
        if (!int_fits(&el)) big = 1;
        else {
            int64_t g = tok_i64(&el);
            if (g <= 0) return 0;
            d[count] = (uint64_t)g;
        }
        count++;
        p = skip_ws(p, e);
        if (*p == ',') p = skip_ws(p + 1, e);
    }
    return big ? -1 : count;
}

/* Thread blocks of a launch grid [x, y, z]: their product when 1-3 positive ints, else nan. */
static int push_blocks(Scanner *s, const tok *t)
{
    double x = NAN;
    uint64_t d[3], prod = 1;
    int n = dims3(t, d), big = n < 0;
    for (int i = 0; i < n && !big; i++) {
        if (d[i] > (1ULL << 53) / prod) big = 1;
        else prod *= d[i];
    }
    if (big) {
        if (add_fixup(s, F_GP_BLOCKS, (Py_ssize_t)(s->gp_blocks.n / sizeof(double)), t)) return -1;
    } else if (n > 0) {
        x = (double)prod;
    }
    return push_d(&s->gp_blocks, x) ? nomem(s) : 0;
}

/* Thread blocks of a grid recorded in work-items (hipExtModuleLaunchKernel's global work size):
   per dimension ceil(grid / block), multiplied; nan unless grid and block are 1-3 positive ints of
   the same length (columns._groups). Beyond 2^53 the file goes to the Python loader. */
static int push_groups(Scanner *s, const tok *grid, const tok *block)
{
    double x = NAN;
    uint64_t g[3], b[3], prod = 1;
    int ng = dims3(grid, g), nb = dims3(block, b);
    if (ng < 0 || nb < 0) return unsup(s, "a launch grid beyond int64");
    if (ng > 0 && ng == nb) {
        for (int i = 0; i < ng; i++) {
            uint64_t q = g[i] / b[i] + (g[i] % b[i] != 0);
            if (q > (1ULL << 53) / prod) return unsup(s, "a launch grid beyond 2^53 blocks");
            prod *= q;
        }
        x = (double)prod;
    }
    return push_d(&s->gp_groups, x) ? nomem(s) : 0;
}

static inline int key_is(const char *k, Py_ssize_t n, const char *word, Py_ssize_t wn)
{
    return n == wn && !memcmp(k, word, (size_t)n);
}

#define KEY(word) key_is(k, kn, word, (Py_ssize_t)sizeof(word) - 1)

static int args_key(const char *k, Py_ssize_t kn)
{
    switch (kn) {
    case 4: return KEY("grid") ? A_GRID : KEY("Addr") ? A_ADDR : -1;
    case 5: return KEY("bytes") ? A_BYTES : KEY("block") ? A_BLOCK : KEY("Bytes") ? A_MBYTES : -1;
    case 6: return KEY("device") ? A_DEVICE : KEY("stream") ? A_STREAM : KEY("kernel") ? A_KERNEL : -1;
    case 9: return KEY("Python id") ? A_PY_ID : KEY("Device Id") ? A_DID : -1;
    case 10: return KEY("Input Dims") ? A_DIMS : KEY("Input type") ? A_TYPES : KEY("Call stack") ? A_STACK : -1;
    case 11: return KEY("External id") ? A_EXT : KEY("external id") ? A_EXT21 : KEY("correlation") ? A_CORR
                    : KEY("kernel_flop") ? A_KFLOP : KEY("Device Type") ? A_DTYPE : -1;
    case 13: return KEY("Input Strides") ? A_STRIDES : KEY("kernel_num_gb") ? A_KGB : KEY("graph node id") ? A_GNODE : -1;
    case 14: return KEY("Total Reserved") ? A_TRES : -1;
    case 15: return KEY("Concrete Inputs") ? A_CONC : KEY("Total Allocated") ? A_TALLOC
                    : KEY("Sequence number") ? A_SEQ : -1;
    case 16: return KEY("Python parent id") ? A_PY_PARENT : KEY("Python module id") ? A_PY_MODULE
                    : KEY("Module Hierarchy") ? A_HIER : -1;
    default: return -1;
    }
}

typedef struct {
    tok ph, cat, name, pid, tid, ts, dur;
    int args; /* T_ABSENT, T_NULL or T_OBJ */
    tok a[A_N];
    int nset;          /* the args keys set in a[] (their indices in set[]) */
    int8_t set[A_N];
} event;

/* Every field absent again for the next event: only the type of each field read is reset (a field's text
   is read only when its type says it is there), not the whole struct (two memsets of ~0.8 KB per event
   were a tenth of the scan) */
static inline void event_reset(event *ev)
{
    ev->ph.t = ev->cat.t = ev->name.t = ev->pid.t = ev->tid.t = ev->ts.t = ev->dur.t = T_ABSENT;
    ev->args = T_ABSENT;
    for (int i = 0; i < ev->nset; i++) ev->a[ev->set[i]].t = T_ABSENT;
    ev->nset = 0;
}

/* An object key at p: *k / *kn its text; J_UNSUP when escaped (the typed decoder unescapes). */
static int scan_key(const char *p, const char *e, const char **out, const char **k, Py_ssize_t *kn)
{
    int r, esc;
    const char *q;
    if (p >= e) return J_MORE;
    if (*p != '"') return J_BAD;
    if ((r = scan_str(p, e, &q, &esc))) return r;
    if (esc) return J_UNSUP;
    *k = p + 1;
    *kn = q - p - 2;
    q = skip_ws(q, e);
    if (q >= e) return J_MORE;
    if (*q != ':') return J_BAD;
    *out = skip_ws(q + 1, e);
    return J_OK;
}

static int scan_args(const char *p, const char *e, const char **out, event *ev)
{
    const char *q = skip_ws(p + 1, e), *k;
    Py_ssize_t kn;
    int r;
    tok t;
    if (q >= e) return J_MORE;
    if (*q == '}') {
        *out = q + 1;
        return J_OK;
    }
    for (;;) {
        if ((r = scan_key(q, e, &q, &k, &kn))) return r;
        int i = args_key(k, kn);
        if (i >= 0) { /* scanned straight into its field (a copy after the call stalled on its stores) */
            if (ev->a[i].t != T_ABSENT) return J_UNSUP; /* a key twice: the typed decoder checks both copies */
            if ((r = scan_value(q, e, &q, &ev->a[i], 2))) return r;
            ev->set[ev->nset++] = (int8_t)i;
        } else if ((r = scan_value(q, e, &q, &t, 2))) {
            return r;
        }
        if ((r = after_member(&q, e, '}', out)) != J_NEXT) return r;
    }
}

static int scan_event(const char *p, const char *e, const char **out, event *ev)
{
    const char *q, *k;
    Py_ssize_t kn;
    int r;
    tok t;
    event_reset(ev);
    if (p >= e) return J_MORE;
    if (*p != '{') return J_UNSUP; /* not an object: the typed decoder refuses it */
    q = skip_ws(p + 1, e);
    if (q >= e) return J_MORE;
    if (*q == '}') {
        *out = q + 1;
        return J_OK;
    }
    for (;;) {
        if ((r = scan_key(q, e, &q, &k, &kn))) return r;
        if (q >= e) return J_MORE;
        if (kn == 4 && !memcmp(k, "args", 4)) {
            if (ev->args != T_ABSENT) return J_UNSUP; /* "args" twice */
            if (*q == '{') {
                if ((r = scan_args(q, e, &q, ev))) return r;
                ev->args = T_OBJ;
            } else {
                if ((r = scan_value(q, e, &q, &t, 1))) return r;
                if (t.t != T_NULL) return J_UNSUP;
                ev->args = T_NULL;
            }
        } else {
            tok *slot = NULL;
            switch (kn) {
            case 2:
                slot = KEY("ph") ? &ev->ph : KEY("ts") ? &ev->ts : NULL;
                break;
            case 3:
                slot = KEY("cat") ? &ev->cat : KEY("pid") ? &ev->pid : KEY("tid") ? &ev->tid
                     : KEY("dur") ? &ev->dur : NULL;
                break;
            case 4:
                slot = KEY("name") ? &ev->name : NULL;
                break;
            default: break;
            }
            /* a key twice: the typed decoder checks (and may refuse) the first copy too, the Python loader
               then decides; here only the last would be read */
            if (slot && slot->t != T_ABSENT) return J_UNSUP;
            if ((r = scan_value(q, e, &q, slot ? slot : &t, 1))) return r;
        }
        if ((r = after_member(&q, e, '}', out)) != J_NEXT) return r;
    }
}

/* The typed decoder's field types: anything else makes it refuse the file. */
static int typed_ok(const event *ev)
{
#define IS(x, m) ((1 << (x).t) & (m))
    const int str = 1 << T_STR | 1 << T_ESTR, none = 1 << T_ABSENT | 1 << T_NULL;
    const int id = str | none | 1 << T_INT, num = none | 1 << T_INT | 1 << T_FLOAT;
    if (!IS(ev->ph, 1 << T_ABSENT | 1 << T_STR)) return 0;
    if (!IS(ev->cat, 1 << T_STR | none) || !IS(ev->name, str | none)) return 0;
    if (!IS(ev->pid, id) || !IS(ev->tid, id) || !IS(ev->ts, num) || !IS(ev->dur, num)) return 0;
    const tok *ints[] = {&ev->pid, &ev->tid, &ev->ts, &ev->dur, &ev->a[A_EXT], &ev->a[A_EXT21], &ev->a[A_CORR],
                         &ev->a[A_DEVICE], &ev->a[A_STREAM], &ev->a[A_GNODE], &ev->a[A_BYTES], &ev->a[A_KFLOP],
                         &ev->a[A_KGB], &ev->a[A_SEQ]};
    if (ev->args == T_OBJ) {
        int ids[] = {A_EXT, A_EXT21, A_CORR, A_DEVICE, A_STREAM, A_GNODE, A_SEQ};
        for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
            if (!IS(ev->a[ids[i]], id)) return 0;
        if (!IS(ev->a[A_BYTES], num | str) || !IS(ev->a[A_KFLOP], num | str) || !IS(ev->a[A_KGB], num | str))
            return 0;
    }
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (ints[i]->t == T_INT && !int_fits(ints[i])) return 0; /* beyond int64: the Python loader's call */
    return 1;
#undef IS
}

/* The category's role: 0 GPU event, 1 cpu op, 2 launch, 3 annotation, 4 Python call; -1 none. */
static int cat_role(const tok *t, int *kind, int *legacy)
{
    if (t->t != T_STR) return -1;
    const char *k = t->p + 1;
    Py_ssize_t kn = t->n - 2;
    *kind = 0;
    *legacy = 0;
    switch (kn) {
    case 6:
        if (KEY("cpu_op")) return 1;
        if (KEY("Kernel")) { *legacy = 1; return 0; }
        if (KEY("kernel")) return 0;
        if (KEY("Memcpy")) { *kind = 1; return 0; }
        if (KEY("Memset")) { *kind = 2; return 0; }
        if (KEY("Driver")) return 2;
        return -1;
    case 7:
        if (KEY("Runtime")) { *legacy = 1; return 2; }
        return -1;
    case 8:
        if (KEY("Operator")) { *legacy = 1; return 1; }
        if (KEY("operator")) return 1;
        return -1;
    case 10:
        if (KEY("gpu_memcpy")) { *kind = 1; return 0; }
        if (KEY("gpu_memset")) { *kind = 2; return 0; }
        return -1;
    case 11:
        return KEY("cuda_driver") ? 2 : -1;
    case 12:
        return KEY("cuda_runtime") ? 2 : -1;
    case 15:
        return KEY("user_annotation") ? 3 : KEY("python_function") ? 4 : -1;
    default:
        return -1;
    }
}

static int time_of(Scanner *s, const tok *t, double *out)
{
    if (t->t == T_INT) {
        *out = (double)tok_i64(t);
        return 1;
    }
    if (t->t == T_FLOAT) return number(s, t, out) ? 1 : -1;
    return 0;
}

#define NOMEM(x) do { if (x) return nomem(s); } while (0)

/* A [memory] instant event (profile_memory=True) into the memory columns. */
static int take_memory(Scanner *s, const event *ev)
{
    if (ev->name.t == T_ESTR) return unsup(s, "an escaped [memory] name"); /* rare: the decoder unescapes */
    double ts;
    int a = time_of(s, &ev->ts, &ts);
    if (a < 0) return unsup(s, "a time out of range");
    if (!a || ts != ts || fabs(ts) > 1e17) {
        s->bad_time++;
        return 0;
    }
    int32_t thread = thread_code_in(s, &s->me_threads_t, s->me_threads, &ev->pid, &ev->tid);
    if (thread < 0) return -1;
    const tok *A = ev->a;
    NOMEM(push_d(&s->me_ts, ts) || push_i(&s->me_thread, thread));
    if (push_any_int(s, &s->me_addr, F_ME_ADDR, &A[A_ADDR], 0) ||
        push_any_int(s, &s->me_nbytes, F_ME_NBYTES, &A[A_MBYTES], 0) ||
        push_any_num(s, &s->me_alloc, F_ME_ALLOC, &A[A_TALLOC]) ||
        push_any_num(s, &s->me_reserved, F_ME_RESERVED, &A[A_TRES]) ||
        push_any_int(s, &s->me_dtype, F_ME_DTYPE, &A[A_DTYPE], -1) ||
        push_any_int(s, &s->me_device, F_ME_DEVICE, &A[A_DID], -1))
        return -1;
    return 0;
}

/* One parsed event into the columns (the rules of columns.build_trace); -1 with s->err set. */
static int take_event(Scanner *s, const event *ev, const char *raw, Py_ssize_t raw_n)
{
    if (!typed_ok(ev)) return unsup(s, "an event field of a type the typed decoder refuses");
    if (!(ev->ph.t == T_STR && ev->ph.n == 3 && ev->ph.p[1] == 'X')) {
        if (ev->ph.t == T_STR && ev->ph.n == 3 && ev->ph.p[1] == 'i' &&
            ((ev->name.t == T_STR && ev->name.n == 10 && !memcmp(ev->name.p, "\"[memory]\"", 10)) ||
             ev->name.t == T_ESTR))
            return take_memory(s, ev);
        s->no_ph += ev->ph.t == T_ABSENT || ev->ph.n == 2;
        return 0;
    }
    int kind, legacy;
    if (ev->cat.t == T_ESTR) return unsup(s, "an escaped category");
    int role = cat_role(&ev->cat, &kind, &legacy);
    if (role < 0) return 0;
    double ts, dur;
    int a = time_of(s, &ev->ts, &ts), b = time_of(s, &ev->dur, &dur);
    if (a < 0 || b < 0) return unsup(s, "a time out of range");
    if (!a || !b || ts != ts || dur != dur || dur < 0 || fabs(ts) > 1e17 || dur > 1e13) {
        s->bad_time++;
        return 0;
    }
    const tok *A = ev->a; /* all absent when args is null or missing */
    if (role == 4) { /* a Python call: not an op, nor part of the trace's span */
        int32_t name = py_name_code(s, &ev->name);
        if (name < 0) return -1;
        int32_t thread = thread_code_in(s, &s->py_threads_t, s->py_threads, &ev->pid, &ev->tid);
        if (thread < 0) return -1;
        NOMEM(push_i(&s->py_name, name) || push_i(&s->py_thread, thread) || push_d(&s->py_ts, ts) ||
              push_d(&s->py_end, ts + dur));
        if (push_any_int(s, &s->py_id, F_PY_ID, &A[A_PY_ID], -1) ||
            push_any_int(s, &s->py_parent, F_PY_PARENT, &A[A_PY_PARENT], -1) ||
            push_any_int(s, &s->py_module, F_PY_MODULE, &A[A_PY_MODULE], -1))
            return -1;
        return 0;
    }
    s->legacy += legacy;
    int32_t code = name_code(s, &ev->name);
    if (code < 0) return -1;
    double end = ts + dur;
    if (ts < s->t_min) s->t_min = ts;
    if (end > s->t_max) s->t_max = end;
    const tok *ext = (A[A_EXT].t != T_ABSENT && A[A_EXT].t != T_NULL) ? &A[A_EXT] : &A[A_EXT21];
    if (role == 0) {
        const tok *stream = (A[A_STREAM].t != T_ABSENT && A[A_STREAM].t != T_NULL) ? &A[A_STREAM] : &ev->tid;
        NOMEM(push_i(&s->gp_name, code) || push_b(&s->gp_kind, (int8_t)kind) || push_d(&s->gp_ts, ts) ||
              push_d(&s->gp_dur, dur) || push_l(&s->gp_ord, (int64_t)(s->n_events - 1)));
        if (push_id(s, &s->gp_pid, F_GP_PID, &ev->pid) || push_id(s, &s->gp_dev, F_GP_DEVICE, &A[A_DEVICE]) ||
            push_id(s, &s->gp_stream, F_GP_STREAM, stream) || push_id(s, &s->gp_corr, F_GP_CORR, &A[A_CORR]) ||
            push_id(s, &s->gp_ext, F_GP_EXT, ext) || push_num(s, &s->gp_bytes, F_GP_BYTES, &A[A_BYTES]) ||
            push_blocks(s, &A[A_GRID]) || push_groups(s, &A[A_GRID], &A[A_BLOCK]) ||
            push_id(s, &s->gp_gnode, F_GP_GNODE, &A[A_GNODE]))
            return -1;
        return 0;
    }
    int32_t thread = thread_code(s, &ev->pid, &ev->tid);
    if (thread < 0) return -1;
    int8_t flags = ((int8_t *)s->name_flags.p)[code];
    if (role == 3 || (role == 1 && (flags & NAME_STEP))) {
        NOMEM(push_i(&s->an_name, code) || push_i(&s->an_thread, thread) || push_d(&s->an_ts, ts) ||
              push_d(&s->an_end, end));
        return 0;
    }
    if (role == 1) {
        Py_ssize_t row = (Py_ssize_t)(s->op_ts.n / sizeof(double));
        NOMEM(push_i(&s->op_name, code) || push_i(&s->op_thread, thread) || push_d(&s->op_ts, ts) ||
              push_d(&s->op_end, end) || push_l(&s->op_ord, (int64_t)(s->n_events - 1)));
        if (push_id(s, &s->op_ext, F_OP_EXT, ext) || push_id(s, &s->op_seq, F_OP_SEQ, &A[A_SEQ]) ||
            push_num(s, &s->op_kflop, F_OP_KFLOP, &A[A_KFLOP]) ||
            push_num(s, &s->op_kgb, F_OP_KGB, &A[A_KGB]) || push_text(s, &s->op_stack, row, &A[A_STACK]) ||
            push_text(s, &s->op_hier, row, &A[A_HIER]))
            return -1;
        vec *cols[4] = {&s->op_dims, &s->op_types, &s->op_strides, &s->op_conc};
        int keys[4] = {A_DIMS, A_TYPES, A_STRIDES, A_CONC};
        for (int i = 0; i < 4; i++) {
            int32_t ix = raw_index(s, &A[keys[i]]);
            NOMEM(ix < -1 || push_i(cols[i], ix));
        }
        if ((flags & NAME_COMM) && ev->args == T_OBJ) {
            if (park_late(&s->late, -1, row, raw, raw_n)) return nomem(s);
        }
        return 0;
    }
    /* role 2: a launch */
    int32_t kcode = -1;
    const tok *kt = &A[A_KERNEL];
    if ((kt->t == T_STR && kt->n > 2) || kt->t == T_ESTR) {
        kcode = name_code(s, kt);
        if (kcode < 0) return -1;
    }
    NOMEM(push_i(&s->la_name, code) || push_i(&s->la_thread, thread) || push_d(&s->la_ts, ts) ||
          push_d(&s->la_end, end) || push_i(&s->la_kernel, kcode));
    if (push_id(s, &s->la_corr, F_LA_CORR, &A[A_CORR]) || push_id(s, &s->la_ext, F_LA_EXT, ext)) return -1;
    return 0;
}

/* Scan as much of [p, e) as there is whole items for; the position reached. Runs without
   the GIL; returns the parser's code (J_MORE: the rest needs more text), s->err set on error. */
static int scan_doc(Scanner *s, const char *base, const char *e, const char **at)
{
    const char *p = base, *q, *k;
    Py_ssize_t kn;
    int r = J_OK;
    tok t;
    event ev;
    memset(&ev, 0, sizeof ev); /* then each event resets what the last one set (event_reset) */
    for (;;) {
        p = skip_ws(p, e);
        if (s->state == S_DONE) {
            if (p < e) r = J_BAD;
            break;
        }
        if (p >= e) {
            r = J_MORE;
            break;
        }
        switch (s->state) {
        case S_START:
            if (*p != '{') { r = J_UNSUP; goto stop; } /* a bare event list: the Python loader's */
            p++;
            s->state = S_KEY_FIRST;
            break;
        case S_KEY_FIRST:
            if (*p == '}') { p++; s->state = S_DONE; break; }
            s->state = S_KEY;
            /* fall through */
        case S_KEY:
            if ((r = scan_key(p, e, &q, &k, &kn))) goto stop;
            if (KEY("traceEvents")) {
                if (q >= e) { r = J_MORE; goto stop; }
                if (*q != '[' || s->seen_events++) { r = J_UNSUP; goto stop; } /* null, another type, twice */
                p = q + 1;
                s->state = S_EV_FIRST;
                break;
            }
            if ((r = scan_value(q, e, &q, &t, 1))) goto stop;
            {
                int had = take_gil(s);
                int bad = append_item(s, s->doc, Py_BuildValue("(s#y#)", k, kn, t.p, t.n));
                give_gil(s, had);
                if (bad) { s->err = E_PY; goto stop; }
            }
            p = q;
            s->state = S_AFTER_VALUE;
            break;
        case S_AFTER_VALUE:
            if (*p == ',') { p++; s->state = S_KEY; break; }
            if (*p == '}') { p++; s->state = S_DONE; break; }
            r = J_BAD;
            goto stop;
        case S_EV_FIRST:
            if (*p == ']') { p++; s->state = S_AFTER_VALUE; break; }
            s->state = S_EV;
            /* fall through */
        case S_EV:
            if ((r = scan_event(p, e, &q, &ev))) {
                if (s->fragment) r = J_MORE; /* not an event (or not yet whole): the fragment ends before it */
                goto stop;
            }
            s->n_events++;
            if (take_event(s, &ev, p, q - p)) goto stop;
            p = q;
            s->state = S_EV_AFTER;
            break;
        case S_EV_AFTER:
            if (*p == ',') { p++; s->state = S_EV; break; }
            if (s->fragment) { r = J_MORE; goto stop; } /* the list's end (or worse): the primary scanner's */
            if (*p == ']') { p++; s->state = S_AFTER_VALUE; break; }
            r = J_BAD;
            goto stop;
        }
    }
stop:
    *at = p;
    return r;
}

/* feed(buffer, final=False) -> bytes consumed */
static PyObject *Scanner_feed(Scanner *s, PyObject *args)
{
    Py_buffer view;
    int final = 0;
    if (!PyArg_ParseTuple(args, "y*|p", &view, &final)) return NULL;
    if (s->done || s->err) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_RuntimeError, "feed after the final piece or an error");
        return NULL;
    }
    const char *base = view.buf, *at = base;
    s->ts = PyEval_SaveThread();
    int r = scan_doc(s, base, base + view.len, &at);
    take_gil(s);
    s->between = !s->err && r == J_MORE && at == base + view.len && s->state == S_EV;
    /* the names met in this piece: their str, while the GIL is held anyway (a fragment keeps them parked
       as text: adopt() gives them the primary scanner's codes) */
    if (!s->err && !s->fragment) unpark_all(s);
    PyBuffer_Release(&view);
    if (s->err == E_UNSUP) PyErr_SetString(Unsupported, s->msg);
    else if (s->err == E_NOMEM) PyErr_NoMemory();
    else if (s->err == E_PY) {
        if (!PyErr_Occurred()) PyErr_SetString(Unsupported, "a value Python could not convert");
    } else if (r == J_OK || r == J_MORE) {
        if (!final) return PyLong_FromSsize_t(at - base);
        s->done = 1;
        if (s->state == S_DONE) return PyLong_FromSsize_t(at - base);
        PyErr_SetString(Unsupported, "the text ends early");
    } else {
        PyErr_SetString(Unsupported, r == J_BAD ? "not JSON the loader reads" : "left to the Python loader");
    }
    if (!s->err) s->err = E_UNSUP;
    return NULL;
}

static PyObject *vec_out(vec *v)
{
    PyObject *b = PyByteArray_FromStringAndSize(v->p ? v->p : "", (Py_ssize_t)v->n);
    PyMem_RawFree(v->p);
    v->p = NULL;
    v->n = v->cap = 0;
    return b;
}

/* A list of the shape arguments' bytes objects, one per op, shared per distinct value. */
static PyObject *raw_list(PyObject *values, PyObject *empty, vec *ix)
{
    Py_ssize_t n = (Py_ssize_t)(ix->n / sizeof(int32_t));
    const int32_t *p = (const int32_t *)ix->p;
    PyObject *out = PyList_New(n);
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b = p[i] < 0 ? empty : PyList_GET_ITEM(values, p[i]);
        Py_INCREF(b);
        PyList_SET_ITEM(out, i, b);
    }
    return out;
}

/* {op row: raw JSON text} of the (row, index) pairs, the bytes shared per distinct text. */
static PyObject *raw_dict(PyObject *values, vec *pairs)
{
    Py_ssize_t n = (Py_ssize_t)(pairs->n / (2 * sizeof(int32_t)));
    const int32_t *p = (const int32_t *)pairs->p;
    PyObject *out = PyDict_New();
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *row = PyLong_FromLong(p[2 * i]);
        if (!row || PyDict_SetItem(out, row, PyList_GET_ITEM(values, p[2 * i + 1]))) Py_CLEAR(out);
        Py_XDECREF(row);
    }
    return out;
}

static int set_new(PyObject *d, const char *k, PyObject *v)
{
    int r = v ? PyDict_SetItemString(d, k, v) : -1;
    Py_XDECREF(v);
    return r;
}

/* result() -> dict of the columns (bytearrays of int8/int32/int64/float64, lists) and counts.
   The columns move out: call once, after the final feed. */
static PyObject *Scanner_result(Scanner *s, PyObject *noargs)
{
    if (!s->done || s->err || s->state != S_DONE || !s->seen_events) {
        PyErr_SetString(Unsupported, "no complete {\"traceEvents\": [...]} document");
        return NULL;
    }
    s->err = E_UNSUP; /* once */
    PyObject *d = PyDict_New(), *values = NULL, *empty = NULL;
    if (!d) return NULL;
    struct { const char *k; vec *v; } cols[] = {
        {"gp_name", &s->gp_name}, {"gp_kind", &s->gp_kind}, {"gp_device", &s->gp_dev}, {"gp_pid", &s->gp_pid},
        {"gp_stream", &s->gp_stream}, {"gp_ts", &s->gp_ts}, {"gp_dur", &s->gp_dur}, {"gp_corr", &s->gp_corr},
        {"gp_ext", &s->gp_ext}, {"gp_bytes", &s->gp_bytes}, {"gp_blocks", &s->gp_blocks}, {"gp_groups", &s->gp_groups},
        {"gp_gnode", &s->gp_gnode}, {"gp_ord", &s->gp_ord}, {"op_ord", &s->op_ord},
        {"op_name", &s->op_name}, {"op_thread", &s->op_thread}, {"op_ts", &s->op_ts}, {"op_end", &s->op_end},
        {"op_ext", &s->op_ext}, {"op_seq", &s->op_seq}, {"op_kflop", &s->op_kflop}, {"op_kgb", &s->op_kgb},
        {"la_name", &s->la_name}, {"la_thread", &s->la_thread}, {"la_ts", &s->la_ts}, {"la_end", &s->la_end},
        {"la_corr", &s->la_corr}, {"la_ext", &s->la_ext}, {"la_kernel", &s->la_kernel},
        {"an_name", &s->an_name}, {"an_thread", &s->an_thread}, {"an_ts", &s->an_ts}, {"an_end", &s->an_end},
        {"py_name", &s->py_name}, {"py_thread", &s->py_thread}, {"py_ts", &s->py_ts}, {"py_end", &s->py_end},
        {"py_id", &s->py_id}, {"py_parent", &s->py_parent}, {"py_module", &s->py_module},
        {"me_thread", &s->me_thread}, {"me_ts", &s->me_ts}, {"me_addr", &s->me_addr}, {"me_nbytes", &s->me_nbytes},
        {"me_alloc", &s->me_alloc}, {"me_reserved", &s->me_reserved}, {"me_dtype", &s->me_dtype},
        {"me_device", &s->me_device},
    };
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++)
        if (set_new(d, cols[i].k, vec_out(cols[i].v))) goto bad;
    Py_ssize_t nv = (Py_ssize_t)(s->raw_vals.n / sizeof(span));
    const span *sp = (const span *)s->raw_vals.p;
    if (!(values = PyList_New(nv)) || !(empty = PyBytes_FromStringAndSize("", 0))) goto bad;
    for (Py_ssize_t i = 0; i < nv; i++) {
        PyObject *b = PyBytes_FromStringAndSize(sp[i].k, sp[i].n);
        if (!b) goto bad;
        PyList_SET_ITEM(values, i, b);
    }
    if (set_new(d, "op_dims", raw_list(values, empty, &s->op_dims)) ||
        set_new(d, "op_types", raw_list(values, empty, &s->op_types)) ||
        set_new(d, "op_strides", raw_list(values, empty, &s->op_strides)) ||
        set_new(d, "op_concrete", raw_list(values, empty, &s->op_conc)) ||
        set_new(d, "op_stack", raw_dict(values, &s->op_stack)) || set_new(d, "op_hierarchy", raw_dict(values, &s->op_hier)))
        goto bad;
    struct { const char *k; PyObject *o; } objs[] = {
        {"names", s->names}, {"threads", s->threads}, {"fixups", s->fixups}, {"comm", s->comm}, {"doc", s->doc},
        {"late_names", s->py_names}, {"late_py_threads", s->py_threads}, {"late_me_threads", s->me_threads},
    };
    for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++)
        if (PyDict_SetItemString(d, objs[i].k, objs[i].o)) goto bad;
    PyObject *nums = Py_BuildValue("{s:n,s:n,s:n,s:n,s:d,s:d}", "n_events", s->n_events, "no_ph", s->no_ph,
                                   "bad_time", s->bad_time, "legacy", s->legacy, "t_min", s->t_min, "t_max", s->t_max);
    if (!nums || PyDict_Update(d, nums)) {
        Py_XDECREF(nums);
        goto bad;
    }
    Py_DECREF(nums);
    Py_DECREF(values);
    Py_DECREF(empty);
    return d;
bad:
    Py_XDECREF(values);
    Py_XDECREF(empty);
    Py_DECREF(d);
    return NULL;
}


/* ---------------------------------------------------------------- adopting a fragment */

static int vcat(vec *dst, const vec *src)
{
    if (!src->n) return 0;
    if (dst->n + src->n > dst->cap && vgrow(dst, src->n)) return -1;
    memcpy(dst->p + dst->n, src->p, src->n);
    dst->n += src->n;
    return 0;
}

/* src's int32 codes through map (negative codes, "none", kept as they are) appended to dst. */
static int vcat_mapped(vec *dst, const vec *src, const int32_t *map)
{
    size_t n = src->n / sizeof(int32_t);
    if (dst->n + src->n > dst->cap && vgrow(dst, src->n)) return -1;
    const int32_t *a = (const int32_t *)src->p;
    int32_t *b = (int32_t *)(dst->p + dst->n);
    for (size_t i = 0; i < n; i++) b[i] = a[i] < 0 ? a[i] : map[a[i]];
    dst->n += src->n;
    return 0;
}

/* src's int64 event places moved by `by`, appended to dst. */
static int vcat_moved(vec *dst, const vec *src, int64_t by)
{
    size_t n = src->n / sizeof(int64_t);
    if (dst->n + src->n > dst->cap && vgrow(dst, src->n)) return -1;
    const int64_t *a = (const int64_t *)src->p;
    int64_t *b = (int64_t *)(dst->p + dst->n);
    for (size_t i = 0; i < n; i++) b[i] = a[i] + by;
    dst->n += src->n;
    return 0;
}

/* A string token over a copy of k with its quotes (the name lookups read a token's text). */
static int quoted(const char *k, Py_ssize_t n, char **buf, size_t *cap, tok *t)
{
    if ((size_t)n + 2 > *cap) {
        size_t c = (size_t)n + 2 > 2 * *cap ? (size_t)n + 2 : 2 * *cap;
        char *b = PyMem_RawRealloc(*buf, c);
        if (!b) return -1;
        *buf = b;
        *cap = c;
    }
    (*buf)[0] = '"';
    memcpy(*buf + 1, k, (size_t)n);
    (*buf)[n + 1] = '"';
    t->p = *buf;
    t->n = n + 2;
    t->t = T_STR;
    return 0;
}

/* The fragment's codes for its parked names (in the order it met them) in s's codes: each looked up, or
   given the next code, exactly as if s had met it where the fragment did. */
static int32_t *map_names(Scanner *s, vec *pend, int py)
{
    size_t n = pend->n / sizeof(pend_t);
    int32_t *map = PyMem_RawMalloc(n ? n * sizeof(int32_t) : 1);
    char *buf = NULL;
    size_t cap = 0;
    const pend_t *e = (const pend_t *)pend->p;
    tok t;
    for (size_t i = 0; map && i < n; i++) {
        if (quoted(e[i].k, e[i].n, &buf, &cap, &t)) { PyMem_RawFree(map); map = NULL; nomem(s); break; }
        int32_t c = py ? py_name_code(s, &t) : name_code(s, &t);
        if (c < 0) { PyMem_RawFree(map); map = NULL; break; }
        map[i] = c;
    }
    if (!map && !s->err) nomem(s);
    PyMem_RawFree(buf);
    return map;
}

/* The fragment's thread codes in s's: by the (pid, tid) pair's value, in the fragment's order. GIL held. */
static int32_t *map_threads(Scanner *s, Scanner *w)
{
    Py_ssize_t n = PyList_GET_SIZE(w->threads);
    int32_t *map = PyMem_RawMalloc(n ? (size_t)n * sizeof(int32_t) : 1);
    if (!map) { nomem(s); return NULL; }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyList_GET_ITEM(w->threads, i), *have = PyDict_GetItemWithError(s->threads_d, pair);
        if (have) { map[i] = (int32_t)PyLong_AsLong(have); continue; }
        PyObject *co = PyErr_Occurred() ? NULL : PyLong_FromSsize_t(PyList_GET_SIZE(s->threads));
        if (!co || PyDict_SetItem(s->threads_d, pair, co) || PyList_Append(s->threads, pair)) {
            Py_XDECREF(co);
            PyMem_RawFree(map);
            s->err = E_PY;
            return NULL;
        }
        map[i] = (int32_t)(PyList_GET_SIZE(s->threads) - 1);
        Py_DECREF(co);
    }
    return map;
}

/* A late table's local codes (python_function / [memory] threads: by raw text, a tuple each) in s's. */
static int32_t *map_late_threads(Scanner *s, table *st, PyObject *slist, table *wt, PyObject *wlist)
{
    Py_ssize_t n = PyList_GET_SIZE(wlist);
    int32_t *map = PyMem_RawMalloc(n ? (size_t)n * sizeof(int32_t) : 1);
    ent **by_code = PyMem_RawCalloc(n ? (size_t)n : 1, sizeof(ent *));
    if (!map || !by_code) goto fail_mem;
    for (size_t i = 0; i < wt->cap; i++)
        if (wt->e[i].k && wt->e[i].v >= 0 && wt->e[i].v < n) by_code[wt->e[i].v] = &wt->e[i];
    for (Py_ssize_t i = 0; i < n; i++) {
        ent *we = by_code[i];
        if (!we) goto fail_mem; /* (every local code has its key) */
        ent *slot = tfind(st, we->k, we->n, we->h);
        if (slot->k) { map[i] = slot->v; continue; }
        int32_t c = (int32_t)PyList_GET_SIZE(slist);
        if (PyList_Append(slist, PyList_GET_ITEM(wlist, i))) { s->err = E_PY; goto fail; }
        if (tput(st, slot, we->k, we->n, we->h, c, NULL)) goto fail_mem;
        map[i] = c;
    }
    PyMem_RawFree(by_code);
    return map;
fail_mem:
    nomem(s);
fail:
    PyMem_RawFree(map);
    PyMem_RawFree(by_code);
    return NULL;
}

/* The fragment's distinct raw values (shape args, stacks) in s's indices. */
static int32_t *map_raw(Scanner *s, Scanner *w)
{
    size_t n = w->raw_vals.n / sizeof(span);
    int32_t *map = PyMem_RawMalloc(n ? n * sizeof(int32_t) : 1);
    if (!map) { nomem(s); return NULL; }
    const span *sp = (const span *)w->raw_vals.p;
    for (size_t i = 0; i < n; i++) {
        tok t = {sp[i].k, sp[i].n, T_STR};
        int32_t ix = raw_index(s, &t);
        if (ix < 0) { PyMem_RawFree(map); nomem(s); return NULL; }
        map[i] = ix;
    }
    return map;
}

/* Which rows a fixup's column counts: 0 GPU events, 1 ops, 2 launches, 3 Python calls, 4 [memory]. */
static int fixup_group(int col)
{
    switch (col) {
    case F_GP_DEVICE: case F_GP_PID: case F_GP_STREAM: case F_GP_CORR: case F_GP_EXT: case F_GP_GNODE:
    case F_GP_BYTES: case F_GP_BLOCKS:
        return 0;
    case F_OP_EXT: case F_OP_KFLOP: case F_OP_KGB: case F_OP_SEQ:
        return 1;
    case F_LA_CORR: case F_LA_EXT:
        return 2;
    case F_PY_ID: case F_PY_PARENT: case F_PY_MODULE:
        return 3;
    default:
        return 4;
    }
}

#define ROWS(v, T) ((Py_ssize_t)((v).n / sizeof(T)))

/* adopt(fragment): the fragment's events appended to this scanner's, as if it had scanned them itself
   where the fragment's text starts (this scanner must have stopped exactly there, between two events):
   names, threads and raw values given this scanner's codes in the order the fragment met them, rows and
   event places moved past this scanner's, fixups and collective events moved with their rows. */
static PyObject *Scanner_adopt(Scanner *s, PyObject *arg)
{
    if (!PyObject_TypeCheck(arg, Py_TYPE(s))) {
        PyErr_SetString(PyExc_TypeError, "adopt() takes a Scanner");
        return NULL;
    }
    Scanner *w = (Scanner *)arg;
    if (!w->fragment || w->adopted || w->err || s->fragment || s->done || s->err || !s->between) {
        PyErr_SetString(PyExc_RuntimeError, "adopt() needs a fresh fragment and a scanner between events");
        return NULL;
    }
    w->adopted = 1;
    int32_t *names = NULL, *py_names = NULL, *threads = NULL, *py_threads = NULL, *me_threads = NULL, *raw = NULL;
    int ok = 0;
    if (!(names = map_names(s, &w->pend, 0)) || !(py_names = map_names(s, &w->py_pend, 1)) ||
        !(threads = map_threads(s, w)) ||
        !(py_threads = map_late_threads(s, &s->py_threads_t, s->py_threads, &w->py_threads_t, w->py_threads)) ||
        !(me_threads = map_late_threads(s, &s->me_threads_t, s->me_threads, &w->me_threads_t, w->me_threads)) ||
        !(raw = map_raw(s, w)))
        goto out;
    Py_ssize_t rows[5] = {ROWS(s->gp_ts, double), ROWS(s->op_ts, double), ROWS(s->la_ts, double),
                          ROWS(s->py_ts, double), ROWS(s->me_ts, double)};
    int64_t by = (int64_t)s->n_events;
#define BOTH(f) {&s->f, &w->f}
    struct { vec *d, *src; } plain[] = {
        BOTH(gp_kind), BOTH(gp_dev), BOTH(gp_pid), BOTH(gp_stream), BOTH(gp_ts), BOTH(gp_dur), BOTH(gp_corr),
        BOTH(gp_ext), BOTH(gp_bytes), BOTH(gp_blocks), BOTH(gp_groups), BOTH(gp_gnode), BOTH(op_ts), BOTH(op_end),
        BOTH(op_ext), BOTH(op_seq), BOTH(op_kflop), BOTH(op_kgb), BOTH(la_ts), BOTH(la_end), BOTH(la_corr),
        BOTH(la_ext), BOTH(an_ts), BOTH(an_end), BOTH(py_ts), BOTH(py_end), BOTH(py_id), BOTH(py_parent),
        BOTH(py_module), BOTH(me_ts), BOTH(me_addr), BOTH(me_nbytes), BOTH(me_alloc), BOTH(me_reserved),
        BOTH(me_dtype), BOTH(me_device)
    };
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        if (vcat(plain[i].d, plain[i].src)) { nomem(s); goto out; }
    struct { struct { vec *d, *src; } v; const int32_t *map; } mapped[] = {
        {BOTH(gp_name), names}, {BOTH(op_name), names}, {BOTH(la_name), names},
        {BOTH(la_kernel), names}, {BOTH(an_name), names},
        {BOTH(op_thread), threads}, {BOTH(la_thread), threads},
        {BOTH(an_thread), threads}, {BOTH(py_name), py_names},
        {BOTH(py_thread), py_threads}, {BOTH(me_thread), me_threads},
        {BOTH(op_dims), raw}, {BOTH(op_types), raw}, {BOTH(op_strides), raw},
        {BOTH(op_conc), raw},
    };
    for (size_t i = 0; i < sizeof mapped / sizeof mapped[0]; i++)
        if (vcat_mapped(mapped[i].v.d, mapped[i].v.src, mapped[i].map)) { nomem(s); goto out; }
    if (vcat_moved(&s->gp_ord, &w->gp_ord, by) || vcat_moved(&s->op_ord, &w->op_ord, by)) { nomem(s); goto out; }
    vec *pairs_s[] = {&s->op_stack, &s->op_hier}, *pairs_w[] = {&w->op_stack, &w->op_hier};
#undef BOTH
    for (int k = 0; k < 2; k++) {
        const int32_t *a = (const int32_t *)pairs_w[k]->p;
        for (size_t i = 0; i < pairs_w[k]->n / (2 * sizeof(int32_t)); i++)
            if (push_i(pairs_s[k], (int32_t)(a[2 * i] + rows[1])) || push_i(pairs_s[k], raw[a[2 * i + 1]])) {
                nomem(s);
                goto out;
            }
    }
    /* fixups and collective events: their text moves over (the fragment frees none of it) */
    late_t *le = (late_t *)w->late.p;
    size_t nl = w->late.n / sizeof(late_t);
    if (nl && s->late.n + w->late.n > s->late.cap && vgrow(&s->late, w->late.n)) { nomem(s); goto out; }
    for (size_t i = 0; i < nl; i++) {
        late_t e = le[i];
        e.row += rows[e.col >= 0 ? fixup_group(e.col) : 1];
        memcpy(s->late.p + s->late.n, &e, sizeof e);
        s->late.n += sizeof e;
    }
    w->late.n = 0;
    s->n_events += w->n_events;
    s->no_ph += w->no_ph;
    s->bad_time += w->bad_time;
    s->legacy += w->legacy;
    if (w->t_min < s->t_min) s->t_min = w->t_min;
    if (w->t_max > s->t_max) s->t_max = w->t_max;
    s->state = w->state;
    s->between = w->between; /* the fragment read all its text, up to just after an event's comma: so has this */
    ok = !unpark_all(s);
out:
    PyMem_RawFree(names);
    PyMem_RawFree(py_names);
    PyMem_RawFree(threads);
    PyMem_RawFree(py_threads);
    PyMem_RawFree(me_threads);
    PyMem_RawFree(raw);
    if (ok) Py_RETURN_NONE;
    /* this scanner's columns may be half appended: it is done for (the loader reads the file its other way) */
    int err = s->err ? s->err : E_PY;
    s->err = err;
    if (err == E_NOMEM) PyErr_NoMemory();
    else if (err == E_UNSUP) PyErr_SetString(Unsupported, s->msg);
    else if (!PyErr_Occurred()) PyErr_SetString(Unsupported, "a fragment could not be adopted");
    return NULL;
}

static PyObject *Scanner_between(Scanner *s, void *closure) { return PyBool_FromLong(s->between); }

static PyObject *Scanner_events(Scanner *s, void *closure) { return PyLong_FromSsize_t(s->n_events); }

static PyMethodDef Scanner_methods[] = {
    {"feed", (PyCFunction)Scanner_feed, METH_VARARGS,
     "feed(buffer, final=False) -> bytes consumed; keep the rest and pass it again with more text"},
    {"result", (PyCFunction)Scanner_result, METH_NOARGS, "result() -> dict of columns, after the final feed"},
    {"adopt", (PyCFunction)Scanner_adopt, METH_O,
     "adopt(fragment): a fragment scanner's events appended, as if scanned here (see between_events)"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Scanner_getset[] = {
    {"n_events", (getter)Scanner_events, NULL, "events scanned so far", NULL},
    {"between_events", (getter)Scanner_between, NULL,
     "True when the last feed's text was all consumed and ends just after an event's comma in traceEvents "
     "(where a fragment may start: adopt() needs it)",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "traceana.load._scan.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Scanner(loads): a Kineto trace's text, fed in pieces, into columns",
    .tp_methods = Scanner_methods,
    .tp_getset = Scanner_getset,
    .tp_init = (initproc)Scanner_init,
    .tp_new = PyType_GenericNew,
};

/* ---------------------------------------------------------------- splice (traceana.annotate) */

/* A growable output buffer. */
typedef struct {
    char *p;
    size_t n, cap;
} obuf;

static int oput(obuf *o, const char *s, size_t n)
{
    if (!n) return 0; /* (nothing to copy: o->p may still be NULL, and memcpy(NULL, s, 0) is undefined) */
    if (o->n + n > o->cap) {
        size_t cap = o->cap ? o->cap : 1 << 16;
        while (cap < o->n + n) cap *= 2;
        char *q = PyMem_RawRealloc(o->p, cap);
        if (!q) return -1;
        o->p = q;
        o->cap = cap;
    }
    memcpy(o->p + o->n, s, n);
    o->n += n;
    return 0;
}

enum { SP_MORE = 0, SP_END, SP_SLOW, SP_TOO_MANY };

/* The top-level members of the object [p, e) (p at '{'): *args the args value (absent: t = T_ABSENT),
   *close the object's closing brace. J_UNSUP for an escaped key (the Python way decides what it is). */
static int event_args(const char *p, const char *e, tok *args, const char **close)
{
    const char *q = skip_ws(p + 1, e), *k;
    int r, esc;
    tok t;
    args->t = T_ABSENT;
    if (q < e && *q == '}') {
        *close = q;
        return J_OK;
    }
    for (;;) {
        if (q >= e || *q != '"') return J_BAD;
        k = q;
        if ((r = scan_str(q, e, &q, &esc))) return r;
        if (esc) return J_UNSUP;
        int is_args = q - k == 6 && !memcmp(k, "\"args\"", 6);
        q = skip_ws(q, e);
        if (q >= e || *q != ':') return J_BAD;
        q = skip_ws(q + 1, e);
        if ((r = scan_value(q, e, &q, &t, 2))) return r;
        if (is_args) *args = t;
        q = skip_ws(q, e);
        if (q >= e) return J_BAD;
        if (*q == '}') {
            *close = q;
            return J_OK;
        }
        if (*q != ',') return J_BAD;
        q = skip_ws(q + 1, e);
    }
}

/* splice(buf, pos, after, codes, k, payloads, key) -> (out, pos, after, k, annotated, skipped, state)

   Copies the events of a traceEvents list from buf[pos:] to `out`, byte for byte, with
   `KEY:payloads[codes[k]]` inserted before the closing brace of the args of the k-th event
   (counted from the list's start) when codes[k] >= 0; KEY is `key`, a JSON string with its quotes
   (b'"traceana"': the key the file does not use, traceana.annotate.keys). An event with no args gets
   `"args":{KEY:{...,"args_added":true}}`; one whose args is not an object is copied as it
   is and counted as skipped). `after`: pos is just after an event (a separator comes next), else at
   an event. It stops at the list's `]` (state SP_END, pos at it), where the buffer ends before a
   whole event or separator (SP_MORE: call again with more text from pos), at an event it leaves to
   the Python way (SP_SLOW: JSON it does not take, or an escaped key), or when there are more events
   than codes (SP_TOO_MANY). Everything here is traceana.annotate.rewrite's, in C: the same output
   but for the separators, which are kept as they are. */
static PyObject *splice(PyObject *self, PyObject *args)
{
    Py_buffer buf, codes;
    Py_ssize_t pos, k;
    int after;
    PyObject *payloads;
    const char *key;
    Py_ssize_t key_n;
    if (!PyArg_ParseTuple(args, "y*npy*nO!y#", &buf, &pos, &after, &codes, &k, &PyList_Type, &payloads, &key,
                          &key_n))
        return NULL;
    const char *base = buf.buf, *e = base + buf.len, *p = base + (pos < 0 ? 0 : pos), *q;
    const int32_t *code = codes.buf;
    Py_ssize_t n_codes = codes.len / (Py_ssize_t)sizeof(int32_t), annotated = 0, skipped = 0;
    Py_ssize_t n_pay = PyList_GET_SIZE(payloads);
    obuf o = {NULL, 0, 0};
    int state = SP_MORE, r, bad = 0;
    const char *copied = p; /* the text before this is in `out` */
    static const char added[] = ",\"args_added\":true}}";
    for (;;) {
        if (after) {
            q = skip_ws(p, e);
            if (q >= e) break;
            if (*q == ']') {
                p = q;
                state = SP_END;
                break;
            }
            if (*q != ',') { p = q; state = SP_SLOW; break; }
            p = q + 1;
            after = 0;
        }
        q = skip_ws(p, e);
        if (q >= e) break;
        if (*q == ']') { p = q; state = SP_SLOW; break; } /* `,]`: not JSON; the Python way says so */
        const char *start = q, *end;
        tok t;
        r = scan_value(start, e, &end, &t, 1);
        if (r == J_MORE) { p = start; break; }
        if (r) { p = start; state = SP_SLOW; break; }
        if (k >= n_codes) { p = start; state = SP_TOO_MANY; break; }
        int32_t c = code[k];
        if (c >= 0 && c < n_pay && t.t == T_OBJ) {
            tok a;
            const char *close;
            r = event_args(start, end, &a, &close);
            if (r) { p = start; state = SP_SLOW; break; }
            PyObject *pl = PyList_GET_ITEM(payloads, c);
            if (!PyBytes_Check(pl) || PyBytes_GET_SIZE(pl) < 2) { bad = 1; break; }
            const char *ps = PyBytes_AS_STRING(pl);
            size_t pn = (size_t)PyBytes_GET_SIZE(pl);
            if (a.t == T_OBJ) {
                const char *at = a.p + a.n - 1; /* the args' closing brace */
                int empty = skip_ws(a.p + 1, at) == at;
                if (oput(&o, copied, (size_t)(at - copied)) || oput(&o, ",", empty ? 0 : 1) ||
                    oput(&o, key, (size_t)key_n) || oput(&o, ":", 1) || oput(&o, ps, pn)) {
                    bad = 2;
                    break;
                }
                copied = at;
                annotated++;
            } else if (a.t == T_ABSENT) {
                int empty = skip_ws(start + 1, close) == close;
                if (oput(&o, copied, (size_t)(close - copied)) || oput(&o, ",", empty ? 0 : 1) ||
                    oput(&o, "\"args\":{", 8) || oput(&o, key, (size_t)key_n) || oput(&o, ":", 1) ||
                    oput(&o, ps, pn - 1) || oput(&o, added, sizeof added - 1)) {
                    bad = 2;
                    break;
                }
                copied = close;
                annotated++;
            } else {
                skipped++;
            }
        } else if (c >= 0) {
            skipped++;
        }
        k++;
        p = end;
        after = 1;
    }
    if (!bad && oput(&o, copied, (size_t)(p - copied))) bad = 2;
    PyBuffer_Release(&buf);
    PyBuffer_Release(&codes);
    if (bad) {
        PyMem_RawFree(o.p);
        if (bad == 1) PyErr_SetString(PyExc_TypeError, "splice: payloads are JSON objects as bytes");
        else PyErr_NoMemory();
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(o.p ? o.p : "", (Py_ssize_t)o.n);
    PyMem_RawFree(o.p);
    if (!out) return NULL;
    return Py_BuildValue("(Nninnni)", out, (Py_ssize_t)(p - base), after, k, annotated, skipped, state);
}

static PyMethodDef scan_functions[] = {
    {"splice", splice, METH_VARARGS,
     "splice(buf, pos, after, codes, k, payloads, key): traceEvents with verdicts added under key"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef scan_module = {
    PyModuleDef_HEAD_INIT, "traceana.load._scan",
    "Kineto trace text -> columns in one pass (traceana.load.stream drives it).", -1, scan_functions,
};

PyMODINIT_FUNC PyInit__scan(void)
{
#ifdef HAVE_STRTOD_L
    if (!c_locale && !(c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0))) return PyErr_NoMemory();
#endif
    if (PyType_Ready(&ScannerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&scan_module);
    if (!m) return NULL;
    Unsupported = PyErr_NewException("traceana.load._scan.Unsupported", PyExc_ValueError, NULL);
    Py_INCREF(&ScannerType);
    if (!Unsupported || PyModule_AddObject(m, "Scanner", (PyObject *)&ScannerType) ||
        PyModule_AddObject(m, "Unsupported", Unsupported) ||
        PyModule_AddIntConstant(m, "SPLICE_KEYED", 1)) { /* splice takes the args key (annotate/keys.py) */
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(Unsupported);
    return m;
}
