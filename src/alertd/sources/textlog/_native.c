/* alertd.sources.textlog._native: the fast path's loop (`alertd.sources.textlog.fast.run`) in C, for the lines it
 * can take whole; every other line is handed back to the Python loop, which stays the fallback and the oracle.
 *
 * `run` parses lines from `start` until the end, the first line it does not take, or CALL_TEXT characters,
 * and returns where it stopped (and whether because of a line handed back) with the state after the lines it
 * took. It takes a line only when it gives exactly what the Python loop gives, through the same steps:
 *
 * - the line is ASCII (so `\w`, `\s`, `\d` and `float()` have their ASCII meaning), and the file's state is
 *   not in a traceback (the caller's check);
 * - its start: a leading time as `parse._TIME` matches it (at the line's start, or as `leading_time` finds
 *   one past blanks or `[`), followed through the pattern's backtracking, the date's epoch asked of
 *   `parse._epoch`; a progress bar's `\r` and a rank's prefix (`[...]:`) are handed back;
 * - its pairs are those of `fast._PAIR_FAST` from the time's end (or of `parse._DICT_PAIR` in an HF dict),
 *   found by a matcher that follows the patterns' own backtracking: the tests hold `pairs` and `dict_pairs`
 *   below to the patterns' `findall` on every string they draw;
 * - each key is in the stream's `known` or IGNORED_KEYS (a new name is classified the Python way), every
 *   value is one float() takes whole (not `nan.0`), at most MAX_VALUES pairs; a line with no pair but a number
 *   at its end (`name value` pairs) or with JSON is handed back.
 *
 * `setup` is called once with the Python objects this needs (the Sample type, the marks of `fast`,
 * IGNORED_KEYS, the cached `parse._epoch`, MAX_VALUES), so that no value of the Python side is repeated here
 * but the patterns' character classes and the shape of a time, which the tests hold to the patterns.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

#define MAX_PAIRS 1024
#define BIG (1LL << 62) /* a step is less (parse's `abs(x) < 2**62`); a counter or step past it: the Python loop's */
#define CALL_TEXT (1 << 20)
enum { GO_ON = 0, HANDED_BACK = 1, OTHER_RANK = 2 }; /* why `run` returned: the end or a pause; a line handed
                                                       back; a line of another rank (or the file's own) */
/* Characters one call of `run` reads at most before it returns (the GIL is held throughout: about a
 * millisecond, as a line of Python would hold it, where a window of long lines could hold it for tens). */

static PyTypeObject *sample_type = NULL;
static PyObject *mark_step = NULL, *mark_ignored = NULL, *mark_dropped = NULL, *ignored_keys = NULL, *epoch_fn = NULL;
static Py_ssize_t max_values = 0;

/* Character classes of ASCII text, as `re` reads a str pattern. */
static unsigned char KEYCH[256];  /* [\w./-] */
static unsigned char ENDCH[256];  /* [\w.:/]: what may not follow a number (`parse._END`) */
static unsigned char SPACE[256];  /* \s: str.isspace() of ASCII (with \x1c-\x1f) */
static unsigned char PLAIN[256];  /* `fast._PLAIN_FIRST` */
static unsigned char STRIP[256];  /* " \t,;|" (the rstrip before the number-at-the-end check) */
static unsigned char NUMEND[256]; /* `parse._NUMBER_ENDS` */

static void init_tables(void) {
    for (int c = 0; c < 256; c++) {
        int word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
        KEYCH[c] = word || c == '.' || c == '/' || c == '-';
        ENDCH[c] = word || c == '.' || c == ':' || c == '/';
        SPACE[c] = c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
        PLAIN[c] = c < 128 && !SPACE[c] && !(c >= '0' && c <= '9') && c != '[';
        STRIP[c] = c == ' ' || c == '\t' || c == ',' || c == ';' || c == '|';
        NUMEND[c] = (c >= '0' && c <= '9') || c == '.' || c == 'n' || c == 'N' || c == 'f' || c == 'F' || c == 'y' ||
                    c == 'Y';
    }
}

#define DIGIT(c) ((c) >= '0' && (c) <= '9')
#define QUOTE(c) ((c) == '\'' || (c) == '"')
#define LOWER(c) ((c) | 0x20)

/* Past the digits from x (none: x). */
static Py_ssize_t skip_digits(const unsigned char *t, Py_ssize_t n, Py_ssize_t x) {
    while (x < n && DIGIT(t[x]))
        x++;
    return x;
}

/* End of `[eE][-+]?\d++` at x, or -1. */
static Py_ssize_t exp_end(const unsigned char *t, Py_ssize_t n, Py_ssize_t x) {
    if (x >= n || (t[x] != 'e' && t[x] != 'E'))
        return -1;
    Py_ssize_t y = x + 1;
    if (y < n && (t[y] == '+' || t[y] == '-'))
        y++;
    if (y >= n || !DIGIT(t[y]))
        return -1;
    return skip_digits(t, n, y);
}

/* A number's ends once its digits end at d, `(?:[eE][-+]?\d++)?` tried greedily: with the exponent, then
 * without; appended from ends[k] on, the new count returned. */
static int with_exponent(const unsigned char *t, Py_ssize_t n, Py_ssize_t d, Py_ssize_t *ends, char *bad, int k) {
    Py_ssize_t x = exp_end(t, n, d);
    if (x >= 0)
        bad[k] = 0, ends[k++] = x;
    bad[k] = 0, ends[k++] = d;
    return k;
}

static int word_at(const unsigned char *t, Py_ssize_t n, Py_ssize_t q, const char *w, Py_ssize_t len) {
    if (q + len > n)
        return 0;
    for (Py_ssize_t i = 0; i < len; i++)
        if (LOWER(t[q + i]) != w[i])
            return 0;
    return 1;
}

/* The ends a match of `parse._NUM` at p may have, in the order `re` tries them (at most 6); `bad[i]`: the
 * spelling float() refuses (nan or inf with `.0`). */
static int num_ends(const unsigned char *t, Py_ssize_t n, Py_ssize_t p, Py_ssize_t *ends, char *bad) {
    int k = 0;
    Py_ssize_t q = p;
    if (q < n && (t[q] == '+' || t[q] == '-'))
        q++;
    if (q < n && DIGIT(t[q])) { /* \d++(?:\.\d*+)?(?:[eE][-+]?\d++)? */
        Py_ssize_t d = skip_digits(t, n, q);
        if (d < n && t[d] == '.')
            k = with_exponent(t, n, skip_digits(t, n, d + 1), ends, bad, k);
        return with_exponent(t, n, d, ends, bad, k);
    }
    if (q + 1 < n && t[q] == '.' && DIGIT(t[q + 1])) /* \.\d++(?:[eE][-+]?\d++)? */
        return with_exponent(t, n, skip_digits(t, n, q + 1), ends, bad, k);
    /* (?ai:nan|inf(?:inity)?)(?:\.0)? */
    Py_ssize_t words[2];
    int w = 0;
    if (word_at(t, n, q, "nan", 3))
        words[w++] = q + 3;
    else if (word_at(t, n, q, "inf", 3)) {
        if (word_at(t, n, q + 3, "inity", 5))
            words[w++] = q + 8;
        words[w++] = q + 3;
    }
    for (int i = 0; i < w; i++) {
        Py_ssize_t e = words[i];
        if (e + 1 < n && t[e] == '.' && t[e + 1] == '0')
            bad[k] = 1, ends[k++] = e + 2;
        bad[k] = 0, ends[k++] = e;
    }
    return k;
}

#define ENDS_OK(t, n, e) ((e) >= (n) || !ENDCH[(t)[e]])

typedef struct {
    Py_ssize_t k0, k1, v0, v1;
    char bad;
} Pair;

/* `fast._PAIR_FAST.findall(text, pos)`: at most `cap` pairs into `out` (the count found, up to cap + 1
 * meaning more). */
static Py_ssize_t find_pairs(const unsigned char *t, Py_ssize_t n, Py_ssize_t pos, Pair *out, Py_ssize_t cap) {
    Py_ssize_t found = 0, i = pos;
    Py_ssize_t ends[6];
    char bad[6];
    while (i < n) {
        unsigned char c = t[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') || (i > 0 && KEYCH[t[i - 1]])) {
            i++;
            continue;
        }
        Py_ssize_t k1 = i + 1;
        while (k1 < n && KEYCH[t[k1]])
            k1++;
        Py_ssize_t q = k1;
        if (q < n && t[q] == ':')
            q++;
        else {
            while (q < n && SPACE[t[q]])
                q++;
            if (q < n && t[q] == '=')
                q++;
            else {
                i = k1;
                continue;
            }
        }
        while (q < n && SPACE[t[q]])
            q++;
        int m = num_ends(t, n, q, ends, bad), j;
        for (j = 0; j < m && !ENDS_OK(t, n, ends[j]); j++)
            ;
        if (j == m) {
            i = k1;
            continue;
        }
        if (found < cap)
            out[found] = (Pair){i, k1, q, ends[j], bad[j]};
        if (++found > cap)
            return found;
        i = ends[j];
    }
    return found;
}

/* `parse._DICT_PAIR.findall(text, start, end)`, as find_pairs. */
static Py_ssize_t find_dict_pairs(const unsigned char *t, Py_ssize_t start, Py_ssize_t n, Pair *out, Py_ssize_t cap) {
    Py_ssize_t found = 0, i = start;
    Py_ssize_t ends[6];
    char bad[6];
    while (i < n) {
        if (!QUOTE(t[i])) {
            i++;
            continue;
        }
        Py_ssize_t k0 = i + 1, k1 = k0;
        while (k1 < n && k1 - k0 < 200 && !QUOTE(t[k1]) && t[k1] != '\n')
            k1++;
        if (k1 == k0 || k1 >= n || !QUOTE(t[k1])) {
            i++;
            continue;
        }
        Py_ssize_t q = k1 + 1;
        while (q < n && SPACE[t[q]])
            q++;
        if (q >= n || t[q] != ':') {
            i++;
            continue;
        }
        q++;
        while (q < n && SPACE[t[q]])
            q++;
        if (q < n && QUOTE(t[q]))
            q++; /* without it, the number would start at a quote: no match either way */
        int m = num_ends(t, n, q, ends, bad), j;
        Py_ssize_t end = -1;
        for (j = 0; j < m; j++) {
            Py_ssize_t e = ends[j];
            if (e < n && QUOTE(t[e])) {
                end = ENDS_OK(t, n, e + 1) ? e + 1 : e;
                break;
            }
            if (ENDS_OK(t, n, e)) {
                end = e;
                break;
            }
        }
        if (end < 0) {
            i++;
            continue;
        }
        if (found < cap)
            out[found] = (Pair){k0, k1, q, ends[j], bad[j]};
        if (++found > cap)
            return found;
        i = end;
    }
    return found;
}

/* The value of t[v0:v1] as float() reads it: 1, 0 when float() would not take all of it (the line is then
 * handed back: the matcher never makes a value up), -1 an error (no memory). */
static int to_double(const unsigned char *t, Py_ssize_t v0, Py_ssize_t v1, double *x) {
    char small[64];
    Py_ssize_t len = v1 - v0;
    char *buf = len < (Py_ssize_t)sizeof(small) ? small : PyMem_Malloc(len + 1);
    if (buf == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(buf, t + v0, len);
    buf[len] = 0;
    char *end;
    *x = PyOS_string_to_double(buf, &end, NULL);
    int ok = end == buf + len;
    if (*x == -1.0 && PyErr_Occurred()) {
        ok = PyErr_ExceptionMatches(PyExc_MemoryError) ? -1 : 0;
        if (ok == 0)
            PyErr_Clear();
    }
    if (buf != small)
        PyMem_Free(buf);
    return ok;
}

typedef struct {
    long long counter, last_step;
    int has_step, has_time;
    double last_time;
    char seen[32];   /* the last whole second and zone asked of `_epoch` (19 + 1 + 6 bytes) ... */
    int seen_len;    /* ... their length (0: none yet) ... */
    double when;     /* ... and its answer ... */
    int when_none;   /* ... (None) */
} State;

/* Ends of `(Z|[+-]\d\d:?\d\d)?` at z, in the order `re` tries them (the last, z itself: no zone). */
static int zone_ends(const unsigned char *t, Py_ssize_t n, Py_ssize_t z, Py_ssize_t *ends) {
    int k = 0;
    if (z < n && t[z] == 'Z')
        ends[k++] = z + 1;
    else if (z + 2 < n && (t[z] == '+' || t[z] == '-') && DIGIT(t[z + 1]) && DIGIT(t[z + 2])) {
        if (z + 5 < n && t[z + 3] == ':' && DIGIT(t[z + 4]) && DIGIT(t[z + 5]))
            ends[k++] = z + 6;
        if (z + 4 < n && DIGIT(t[z + 3]) && DIGIT(t[z + 4]))
            ends[k++] = z + 5;
    }
    ends[k++] = z;
    return k;
}

/* `parse._TIME.match(text[:n], p)` and what the Python loop makes of a match: 1 a match (the state's time
 * set, when `_epoch` knows the date), 0 none, -1 an error. */
static int match_time(const unsigned char *t, Py_ssize_t n, Py_ssize_t p, State *st) {
    static const char shape[] = "dddd-dd-ddTdd:dd:dd";
    if (p < n && t[p] == '[') /* \[? (no backtracking into it helps: a digit must follow) */
        p++;
    if (n - p < 19)
        return 0;
    const unsigned char *d = t + p;
    for (int i = 0; i < 19; i++) {
        char c = shape[i];
        if (c == 'd' ? !DIGIT(d[i]) : c == 'T' ? (d[i] != 'T' && d[i] != ' ') : d[i] != c)
            return 0;
    }
    /* (?:[.,](\d{1,9}))?\s?(Z|[+-]\d\d:?\d\d)?(?![\d]), tried in `re`'s order: the most digits of fraction
     * first (fewer leave a digit next, which fails), then none */
    Py_ssize_t e0 = p + 19, f0 = 0, f1 = 0, zone0 = 0, zone1 = 0;
    int found = 0;
    for (int frac = 1; frac >= 0 && !found; frac--) {
        Py_ssize_t e = e0;
        if (frac) {
            if (!(e + 1 < n && (t[e] == '.' || t[e] == ',') && DIGIT(t[e + 1])))
                continue;
            Py_ssize_t f = e + 1;
            while (f < n && DIGIT(t[f]) && f - e - 1 < 9)
                f++;
            if (f < n && DIGIT(t[f]))
                continue; /* more than 9 digits: every shorter fraction leaves a digit next */
            f0 = e + 1, f1 = f, e = f;
        } else
            f0 = f1 = 0;
        for (int blank = 1; blank >= 0 && !found; blank--) {
            if (blank && !(e < n && SPACE[t[e]]))
                continue;
            Py_ssize_t z = e + blank, ends[3];
            int m = zone_ends(t, n, z, ends);
            for (int j = 0; j < m; j++) {
                if (ends[j] < n && DIGIT(t[ends[j]]))
                    continue;
                zone0 = z, zone1 = ends[j], found = 1;
                break;
            }
        }
    }
    if (!found)
        return 0;
    char key[32];
    Py_ssize_t zl = zone1 - zone0, kl = 19 + 1 + zl;
    memcpy(key, d, 19);
    key[10] = 'T';
    key[19] = zl ? '|' : 0;
    memcpy(key + 20, t + zone0, zl);
    if (st->seen_len != kl || memcmp(st->seen, key, kl) != 0) {
        PyObject *r = zl ? PyObject_CallFunction(epoch_fn, "s#s#", key, (Py_ssize_t)19, key + 20, zl)
                         : PyObject_CallFunction(epoch_fn, "s#O", key, (Py_ssize_t)19, Py_None);
        if (r == NULL)
            return -1;
        st->when_none = r == Py_None;
        st->when = st->when_none ? 0.0 : PyFloat_AsDouble(r);
        Py_DECREF(r);
        if (!st->when_none && st->when == -1.0 && PyErr_Occurred())
            return -1;
        memcpy(st->seen, key, kl);
        st->seen_len = (int)kl;
    }
    if (!st->when_none) {
        double frac = 0.0;
        if (f1 > f0) {
            long long num = 0, den = 1;
            for (Py_ssize_t i = f0; i < f1; i++)
                num = num * 10 + (t[i] - '0'), den *= 10;
            frac = (double)num / (double)den; /* int(frac) / 10 ** len(frac): both exact doubles */
        }
        st->last_time = st->when + frac;
        st->has_time = 1;
    }
    return 1;
}

/* `parse._RANK.match(text, p)` (torchrun's `[default3]:`, `[rank3]:`, `[3]:`): the end of the match and the
 * rank's digits in [*d0, *d1), or -1. The bracket holds `[\w-]` alone: digits (1-6), or a role (a letter or
 * `_` first, at most 64 characters; the lazy role ends where 1-6 digits then `]:` follow) and its digits. */
static Py_ssize_t rank_at(const unsigned char *t, Py_ssize_t n, Py_ssize_t p, Py_ssize_t *d0, Py_ssize_t *d1) {
    if (p >= n || t[p] != '[')
        return -1;
    Py_ssize_t q = p + 1, j = q;
    while (j < n && j - q <= 70 && (KEYCH[t[j]] && t[j] != '.' && t[j] != '/'))
        j++;
    if (j == q || j + 1 >= n || t[j] != ']' || t[j + 1] != ':')
        return -1;
    Py_ssize_t digits = 0;
    while (digits < j - q && DIGIT(t[j - 1 - digits]))
        digits++;
    if (digits == j - q) { /* digits alone */
        if (digits > 6)
            return -1;
    } else {
        unsigned char c = t[q];
        if (digits == 0 || !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'))
            return -1;
        if (digits > 6)
            digits = 6;
        if (j - digits - q > 64)
            return -1;
    }
    *d0 = j - digits, *d1 = j;
    return j + 2;
}

/* `parse.split_rank`'s prefix of an ASCII line (not a bar's `\r` one): the end of the prefix (its inner one,
 * `--tee`'s `[default0]:` before torch's own `[rank0]:`) and the rank as `str(int(digits))` in [*r0, *r1), or -1. */
static Py_ssize_t line_rank(const unsigned char *t, Py_ssize_t n, Py_ssize_t *r0, Py_ssize_t *r1) {
    Py_ssize_t d0, d1, e = rank_at(t, n, 0, &d0, &d1);
    if (e < 0)
        return -1;
    Py_ssize_t i0, i1, inner = rank_at(t, n, e, &i0, &i1);
    if (inner >= 0)
        e = inner, d0 = i0, d1 = i1;
    while (d1 - d0 > 1 && t[d0] == '0')
        d0++;
    *r0 = d0, *r1 = d1;
    return e;
}

/* The line's start, as the Python loop reads it: where its pairs are looked for (`pos`: after a leading
 * date and time, else 0) and its time; 0 taken, -1 hand the line back (a bar's `\r`, a rank's prefix), -2 an
 * error. */
static int line_start(const unsigned char *t, Py_ssize_t n, State *st, Py_ssize_t *pos) {
    *pos = 0;
    if (n == 0 || PLAIN[t[0]])
        return 0;
    unsigned char c = t[0];
    if (DIGIT(c)) { /* `_TIME.match(line)` */
        int r = match_time(t, n, 0, st);
        if (r == 1)
            *pos = 19; /* no pair starts inside the date and time: their letters follow digits */
        return r < 0 ? -2 : 0;
    }
    if (c == '\r')
        return -1;
    if (c == '[') {
        Py_ssize_t r0, r1;
        if (line_rank(t, n, &r0, &r1) >= 0)
            return -1; /* a rank's prefix in what follows one: the Python way */
        if (!(n > 1 && DIGIT(t[1])))
            return 0;
    }
    /* `leading_time(line)`: past the blanks, the first 40 characters, at a digit or `[` */
    Py_ssize_t i = 0;
    while (i < n && SPACE[t[i]])
        i++;
    if (i < n && (DIGIT(t[i]) || t[i] == '['))
        if (match_time(t, i + 40 < n ? i + 40 : n, i, st) < 0)
            return -2;
    return 0;
}

static PyObject *new_sample(PyObject *key, PyObject *t, PyObject *s, double x) {
    PyObject *v = PyFloat_FromDouble(x);
    if (v == NULL)
        return NULL;
    PyObject *o = sample_type->tp_alloc(sample_type, 4);
    if (o == NULL) {
        Py_DECREF(v);
        return NULL;
    }
    Py_INCREF(key);
    Py_INCREF(t);
    Py_INCREF(s);
    PyTuple_SET_ITEM(o, 0, key);
    PyTuple_SET_ITEM(o, 1, t);
    PyTuple_SET_ITEM(o, 2, s);
    PyTuple_SET_ITEM(o, 3, v);
    /* No cycle can pass through a sample (its series key never refers to one), so the collector need not
     * scan it, as CPython leaves alone the tuples of atomic objects: a read of a million lines then adds
     * nothing to the next collection. */
    PyObject_GC_UnTrack(o);
    return o;
}

/* One line: 1 taken (its samples appended, the state moved), 0 handed back (nothing moved), -1 an error. */
static int take_line(const unsigned char *t, Py_ssize_t n, PyObject *known, PyObject *classify, double now,
                     PyObject *out, State *st, Pair *pairs, Py_ssize_t *matched) {
    Py_ssize_t pos;
    State before = *st;
    int r = line_start(t, n, st, &pos);
    if (r == -2)
        return -1;
    if (r == -1)
        return 0;
    Py_ssize_t found;
    const char *brace = n > 0 ? memchr(t, '{', (size_t)n) : NULL;
    if (brace == NULL)
        found = find_pairs(t, n, pos, pairs, max_values);
    else {
        Py_ssize_t start = (const unsigned char *)brace - t, end = n;
        while (end > 0 && t[end - 1] != '}')
            end--;
        if (end <= start + 1)
            found = find_pairs(t, n, pos, pairs, max_values);
        else if (start + 1 < n && t[start + 1] == '\'') {
            found = find_dict_pairs(t, start, end, pairs, max_values);
            if (found == 0)
                found = find_pairs(t, n, pos, pairs, max_values);
        } else {
            *st = before; /* JSON: the Python way */
            return 0;
        }
    }
    if (found == 0) { /* no pairs: nothing, unless a number at the end makes `name value` pairs */
        Py_ssize_t e = n;
        while (e > 0 && STRIP[t[e - 1]])
            e--;
        if (e > 0 && NUMEND[t[e - 1]]) {
            *st = before;
            return 0;
        }
        return 1;
    }
    if (found > max_values) {
        *st = before;
        return 0;
    }
    /* First pass: every key known, every value float()'s; the line's step (the first integral step value). */
    PyObject *kinds[MAX_PAIRS];
    double values[MAX_PAIRS];
    long long step = 0;
    int has_step = 0, any = 0;
    for (Py_ssize_t i = 0; i < found; i++) {
        Pair *p = &pairs[i];
        if (p->bad) {
            *st = before;
            return 0;
        }
        int number = to_double(t, p->v0, p->v1, &values[i]);
        if (number <= 0) {
            *st = before;
            return number;
        }
        PyObject *key = PyUnicode_FromStringAndSize((const char *)t + p->k0, p->k1 - p->k0);
        if (key == NULL)
            return -1;
        PyObject *kind = PyDict_GetItemWithError(known, key); /* borrowed */
        if (kind == NULL && !PyErr_Occurred()) {
            int ignored = PySet_Contains(ignored_keys, key); /* `v_num`: never in `known` */
            kind = ignored > 0 ? mark_ignored : NULL;
            if (ignored == 0) { /* a name not met yet: `fast.classify` files it in `known` (None: no series yet) */
                PyObject *r = PyObject_CallOneArg(classify, key);
                if (r != NULL && r != Py_None)
                    kind = PyDict_GetItemWithError(known, key); /* NULL where `known` is full: the Python way */
                Py_XDECREF(r);
            }
        }
        Py_DECREF(key);
        if (kind == NULL) {
            if (PyErr_Occurred())
                return -1;
            *st = before; /* a name with no series yet: made the Python way */
            return 0;
        }
        kinds[i] = kind;
        if (kind == mark_step) {
            double x = values[i];
            if (!has_step && isfinite(x) && x == trunc(x) && fabs(x) < 4611686018427387904.0)
                step = (long long)x, has_step = 1;
        } else if (kind != mark_ignored)
            any = 1;
    }
    if (any) {
        long long s = has_step ? step : st->has_step ? st->last_step : st->counter + 1;
        PyObject *so = PyLong_FromLongLong(s);
        PyObject *to = so == NULL ? NULL : PyFloat_FromDouble(st->has_time ? st->last_time : now);
        if (to == NULL) {
            Py_XDECREF(so);
            return -1;
        }
        for (Py_ssize_t i = 0; i < found; i++) {
            PyObject *kind = kinds[i];
            if (kind == mark_step || kind == mark_ignored || kind == mark_dropped)
                continue;
            PyObject *o = new_sample(kind, to, so, values[i]);
            if (o == NULL || PyList_Append(out, o) < 0) {
                Py_XDECREF(o);
                Py_DECREF(so);
                Py_DECREF(to);
                return -1;
            }
            Py_DECREF(o);
        }
        Py_DECREF(so);
        Py_DECREF(to);
        st->counter++;
        (*matched)++;
    }
    if (has_step)
        st->last_step = step, st->has_step = 1;
    return 1;
}

static PyObject *native_run(PyObject *self, PyObject *args) {
    PyObject *lines, *last_step, *last_time, *known, *classify, *rank, *out;
    Py_ssize_t start;
    double now;
    if (sample_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "setup() first");
        return NULL;
    }
    PyObject *counter_o;
    if (!PyArg_ParseTuple(args, "OnOOOO!OOdO!", &lines, &start, &counter_o, &last_step, &last_time, &PyDict_Type,
                          &known, &classify, &rank, &now, &PyList_Type, &out))
        return NULL;
    if (rank != Py_None && !(PyUnicode_Check(rank) && PyUnicode_IS_ASCII(rank))) {
        PyErr_SetString(PyExc_TypeError, "rank: an ASCII str or None");
        return NULL;
    }
    const char *ctx = rank == Py_None ? NULL : (const char *)PyUnicode_1BYTE_DATA(rank);
    Py_ssize_t ctx_len = rank == Py_None ? 0 : PyUnicode_GET_LENGTH(rank);
    State st = {0};
    int overflow = 0;
    st.counter = PyLong_AsLongLongAndOverflow(counter_o, &overflow);
    if (st.counter == -1 && PyErr_Occurred())
        return NULL;
    if (!overflow && last_step != Py_None) {
        st.last_step = PyLong_AsLongLongAndOverflow(last_step, &overflow);
        if (st.last_step == -1 && PyErr_Occurred())
            return NULL;
        st.has_step = 1;
    }
    if (overflow || llabs(st.counter) > BIG || llabs(st.last_step) > BIG) /* the Python loop's ints have no end */
        return Py_BuildValue("nOOOniO", start, counter_o, last_step, last_time, (Py_ssize_t)0, HANDED_BACK, Py_None);
    if (last_time != Py_None) {
        st.last_time = PyFloat_AsDouble(last_time);
        if (st.last_time == -1.0 && PyErr_Occurred())
            return NULL;
        st.has_time = 1;
    }
    PyObject *seq = PySequence_Fast(lines, "lines must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), i = start < 0 ? 0 : start, matched = 0;
    Pair *pairs = PyMem_Malloc(sizeof(Pair) * (max_values + 1));
    if (pairs == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    PyObject **items = PySequence_Fast_ITEMS(seq);
    int r = 1, status = GO_ON;
    Py_ssize_t text = 0, r0 = 0, r1 = 0;
    for (; i < n && text < CALL_TEXT; i++) {
        PyObject *line = items[i];
        if (!PyUnicode_Check(line) || !PyUnicode_IS_ASCII(line)) {
            status = HANDED_BACK;
            break;
        }
        const unsigned char *t = PyUnicode_1BYTE_DATA(line);
        Py_ssize_t len = PyUnicode_GET_LENGTH(line), off = 0;
        if (len > 0 && t[0] == '[') {
            off = line_rank(t, len, &r0, &r1);
            if (off >= 0 && !(ctx != NULL && r1 - r0 == ctx_len && memcmp(t + r0, ctx, ctx_len) == 0)) {
                status = OTHER_RANK; /* a rank's line, another rank's state: the caller's to switch */
                break;
            }
        }
        if (off < 0)
            off = 0;
        if (off == 0 && ctx != NULL) {
            r0 = r1 = 0;
            status = OTHER_RANK; /* the file's own line */
            break;
        }
        r = take_line(t + off, len - off, known, classify, now, out, &st, pairs, &matched);
        if (r <= 0) {
            status = HANDED_BACK;
            break;
        }
        text += len;
    }
    PyMem_Free(pairs);
    PyObject *rank_o = NULL;
    if (r >= 0)
        rank_o = status == OTHER_RANK && r1 > r0
                     ? PyUnicode_FromStringAndSize((const char *)PyUnicode_1BYTE_DATA(items[i]) + r0, r1 - r0)
                     : Py_NewRef(Py_None);
    Py_DECREF(seq);
    if (r < 0)
        return NULL;
    PyObject *step_o = st.has_step ? PyLong_FromLongLong(st.last_step) : Py_NewRef(Py_None);
    PyObject *time_o = st.has_time ? PyFloat_FromDouble(st.last_time) : Py_NewRef(Py_None);
    if (step_o == NULL || time_o == NULL || rank_o == NULL) {
        Py_XDECREF(step_o);
        Py_XDECREF(time_o);
        Py_XDECREF(rank_o);
        return NULL;
    }
    return Py_BuildValue("nLNNniN", i, st.counter, step_o, time_o, matched, status, rank_o);
}

static PyObject *pairs_list(const unsigned char *t, Pair *pairs, Py_ssize_t found) {
    PyObject *list = PyList_New(0);
    for (Py_ssize_t i = 0; list != NULL && i < found; i++) {
        PyObject *item = Py_BuildValue("(s#s#)", t + pairs[i].k0, pairs[i].k1 - pairs[i].k0, t + pairs[i].v0,
                                       pairs[i].v1 - pairs[i].v0);
        if (item == NULL || PyList_Append(list, item) < 0) {
            Py_XDECREF(item);
            Py_CLEAR(list);
        }
        Py_XDECREF(item);
    }
    return list;
}

static PyObject *native_pairs(PyObject *self, PyObject *args, int dict) {
    PyObject *text;
    Py_ssize_t a, b = PY_SSIZE_T_MAX;
    if (!PyArg_ParseTuple(args, "Un|n", &text, &a, &b))
        return NULL;
    if (!PyUnicode_IS_ASCII(text)) {
        PyErr_SetString(PyExc_ValueError, "ASCII text only");
        return NULL;
    }
    const unsigned char *t = PyUnicode_1BYTE_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    if (b > n)
        b = n;
    if (a < 0 || a > b)
        return PyList_New(0);
    Py_ssize_t cap = b - a + 1;
    Pair *pairs = PyMem_Malloc(sizeof(Pair) * (cap + 1));
    if (pairs == NULL)
        return PyErr_NoMemory();
    Py_ssize_t found = dict ? find_dict_pairs(t, a, b, pairs, cap) : find_pairs(t, n, a, pairs, cap);
    PyObject *list = pairs_list(t, pairs, found);
    PyMem_Free(pairs);
    return list;
}

static PyObject *native_rank(PyObject *self, PyObject *args) {
    PyObject *text;
    if (!PyArg_ParseTuple(args, "U", &text))
        return NULL;
    if (!PyUnicode_IS_ASCII(text)) {
        PyErr_SetString(PyExc_ValueError, "ASCII text only");
        return NULL;
    }
    Py_ssize_t r0, r1, e = line_rank(PyUnicode_1BYTE_DATA(text), PyUnicode_GET_LENGTH(text), &r0, &r1);
    if (e < 0)
        Py_RETURN_NONE;
    return Py_BuildValue("(s#n)", (const char *)PyUnicode_1BYTE_DATA(text) + r0, r1 - r0, e);
}

static PyObject *native_find_pairs(PyObject *self, PyObject *args) { return native_pairs(self, args, 0); }

static PyObject *native_find_dict_pairs(PyObject *self, PyObject *args) { return native_pairs(self, args, 1); }

static PyObject *native_setup(PyObject *self, PyObject *args) {
    PyObject *tp, *step, *ignored, *dropped, *ignored_set, *epoch;
    Py_ssize_t maxv;
    if (!PyArg_ParseTuple(args, "O!OOOO!On", &PyType_Type, &tp, &step, &ignored, &dropped, &PyFrozenSet_Type,
                          &ignored_set, &epoch, &maxv))
        return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)tp, &PyTuple_Type) || !PyCallable_Check(epoch) || maxv < 1 ||
        maxv > MAX_PAIRS) {
        PyErr_SetString(PyExc_ValueError, "setup(Sample: a tuple type, step, ignored, dropped, ignored keys, epoch, max_values)");
        return NULL;
    }
    Py_XSETREF(sample_type, (PyTypeObject *)Py_NewRef(tp));
    Py_XSETREF(mark_step, Py_NewRef(step));
    Py_XSETREF(mark_ignored, Py_NewRef(ignored));
    Py_XSETREF(mark_dropped, Py_NewRef(dropped));
    Py_XSETREF(ignored_keys, Py_NewRef(ignored_set));
    Py_XSETREF(epoch_fn, Py_NewRef(epoch));
    max_values = maxv;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"setup", native_setup, METH_VARARGS, "setup(Sample, STEP, IGNORED, DROPPED, IGNORED_KEYS, epoch, max_values)"},
    {"run", native_run, METH_VARARGS,
     "run(lines, start, counter, last_step, last_time, known, classify, rank, now, out) -> (stop, counter, "
     "last_step, last_time, matched, why, rank): the lines from start to stop taken, with the state of `rank`'s "
     "lines (None: the file's own); why: 0 the end or a pause, 1 the line at stop is the Python loop's, 2 it is "
     "a line of the returned rank"},
    {"rank", native_rank, METH_VARARGS, "rank(text): (parse.split_rank's rank, where its text starts) or None"},
    {"pairs", native_find_pairs, METH_VARARGS, "pairs(text, pos): fast._PAIR_FAST.findall(text, pos), ASCII text"},
    {"dict_pairs", native_find_dict_pairs, METH_VARARGS,
     "dict_pairs(text, start, end): parse._DICT_PAIR.findall(text, start, end), ASCII text"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__native(void) {
    init_tables();
    return PyModule_Create(&module);
}
