/* Optional C accelerator for formats: one pass that splits a text at tag strings and counts the
 * default-unit words of every piece.
 *
 *     split_tags(text: str, tags: tuple[str, ...]) -> (parts: list[str], words: list[int])
 *
 * ``parts`` equals ``re.compile("(" + "|".join(map(re.escape, tags)) + ")").split(text)``:
 * text, tag, text, ..., text (tags are tried in the given order at each position, leftmost
 * match first, like a regex alternation).  The tag elements of ``parts`` are the very objects
 * of ``tags`` (so dict lookups keyed by them hit the identity fast path).
 * ``words[k]`` equals ``parallax.formats.units._words(parts[k])``: the number of maximal runs of code
 * points > 32 (1 for a tag, which holds no whitespace).  Every tag must be non-empty and start
 * with '<', so that a '<' search finds all candidate positions (at most 64 tags).
 *
 * Built by setup.py as an optional extension; parallax.formats.units falls back to the pure-Python
 * path (regex split + numpy word count) when it is missing.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_TAGS 64

typedef struct {
    PyObject *obj;    /* borrowed from the tags tuple */
    int kind;
    const void *data;
    Py_ssize_t len;
    Py_UCS4 c1;       /* the character after '<' (len >= 2) */
} Tag;

/* Words of s[a:b) where s has code units of type T: runs of units > 32.  The count is kept in
 * an accumulator of the unit's width, flushed every CHUNK units, so that the compiler vectorises
 * the loop without widening every lane to 64 bits. */
#define DEFINE_WORDS(NAME, T, ACC, CHUNK)                                  \
    static Py_ssize_t NAME(const T *s, Py_ssize_t a, Py_ssize_t b)         \
    {                                                                      \
        if (a >= b)                                                        \
            return 0;                                                      \
        Py_ssize_t w = s[a] > 32;                                          \
        Py_ssize_t i = a + 1;                                              \
        while (i < b) {                                                    \
            Py_ssize_t e = b - i > (CHUNK) ? i + (CHUNK) : b;              \
            ACC acc = 0;                                                   \
            for (; i < e; i++)                                             \
                acc += (s[i] > 32) & (s[i - 1] <= 32);                     \
            w += acc;                                                      \
        }                                                                  \
        return w;                                                          \
    }

DEFINE_WORDS(words_ucs1, Py_UCS1, uint8_t, 255)
DEFINE_WORDS(words_ucs2, Py_UCS2, uint16_t, 65535)
DEFINE_WORDS(words_ucs4, Py_UCS4, uint32_t, 0x3fffffff)

/* Index of the next '<' at or after i, or n. */
#define DEFINE_FIND(NAME, T)                                               \
    static Py_ssize_t NAME(const T *s, Py_ssize_t i, Py_ssize_t n)         \
    {                                                                      \
        for (; i < n; i++)                                                 \
            if (s[i] == '<')                                               \
                return i;                                                  \
        return n;                                                          \
    }

DEFINE_FIND(find_ucs2, Py_UCS2)
DEFINE_FIND(find_ucs4, Py_UCS4)

static Py_ssize_t
find_ucs1(const Py_UCS1 *s, Py_ssize_t i, Py_ssize_t n)
{
    const void *p = i < n ? memchr(s + i, '<', (size_t)(n - i)) : NULL;
    return p ? (const Py_UCS1 *)p - s : n;
}

static Py_ssize_t
count_words(int kind, const void *data, Py_ssize_t a, Py_ssize_t b)
{
    switch (kind) {
    case PyUnicode_1BYTE_KIND:
        return words_ucs1((const Py_UCS1 *)data, a, b);
    case PyUnicode_2BYTE_KIND:
        return words_ucs2((const Py_UCS2 *)data, a, b);
    default:
        return words_ucs4((const Py_UCS4 *)data, a, b);
    }
}

static Py_ssize_t
find_lt(int kind, const void *data, Py_ssize_t i, Py_ssize_t n)
{
    switch (kind) {
    case PyUnicode_1BYTE_KIND:
        return find_ucs1((const Py_UCS1 *)data, i, n);
    case PyUnicode_2BYTE_KIND:
        return find_ucs2((const Py_UCS2 *)data, i, n);
    default:
        return find_ucs4((const Py_UCS4 *)data, i, n);
    }
}

/* Index in tags of the first tag that occurs at position i (where text[i] == '<'), or -1. */
static Py_ssize_t
match_tag(int kind, const void *data, Py_ssize_t i, Py_ssize_t n, const Tag *tags, Py_ssize_t ntags)
{
    Py_UCS4 c1 = i + 1 < n ? PyUnicode_READ(kind, data, i + 1) : 0;
    for (Py_ssize_t t = 0; t < ntags; t++) {
        Py_ssize_t len = tags[t].len;
        if (len == 1)
            return t;
        if (tags[t].c1 != c1 || len > n - i)
            continue;
        int tk = tags[t].kind;
        const void *td = tags[t].data;
        if (tk == kind) { /* same representation: compare the raw code units */
            if (memcmp((const char *)data + i * kind, td, (size_t)(len * kind)) == 0)
                return t;
            continue;
        }
        Py_ssize_t j = 2;
        while (j < len && PyUnicode_READ(kind, data, i + j) == PyUnicode_READ(tk, td, j))
            j++;
        if (j == len)
            return t;
    }
    return -1;
}

/* Append a new reference to list (consumed) and its word count; 0 on success. */
static int
append_part(PyObject *parts, PyObject *words, PyObject *part, Py_ssize_t w)
{
    if (part == NULL)
        return -1;
    int rc = PyList_Append(parts, part);
    Py_DECREF(part);
    if (rc < 0)
        return -1;
    PyObject *wo = PyLong_FromSsize_t(w);
    if (wo == NULL)
        return -1;
    rc = PyList_Append(words, wo);
    Py_DECREF(wo);
    return rc;
}

/* Validate the tags tuple into tags[]; -1 with an exception on error. */
static int
load_tags(PyObject *tup, Tag *tags, Py_ssize_t *ntags)
{
    Py_ssize_t nt = PyTuple_GET_SIZE(tup);
    if (nt > MAX_TAGS) {
        PyErr_Format(PyExc_ValueError, "split_tags: at most %d tags", MAX_TAGS);
        return -1;
    }
    for (Py_ssize_t t = 0; t < nt; t++) {
        PyObject *o = PyTuple_GET_ITEM(tup, t);
#if PY_VERSION_HEX < 0x030C0000
        if (PyUnicode_Check(o) && PyUnicode_READY(o) < 0)
            return -1;
#endif
        if (!PyUnicode_Check(o) || PyUnicode_GET_LENGTH(o) == 0 || PyUnicode_READ_CHAR(o, 0) != '<') {
            PyErr_SetString(PyExc_ValueError, "split_tags: every tag must be a str starting with '<'");
            return -1;
        }
        tags[t].obj = o;
        tags[t].kind = PyUnicode_KIND(o);
        tags[t].data = PyUnicode_DATA(o);
        tags[t].len = PyUnicode_GET_LENGTH(o);
        tags[t].c1 = tags[t].len > 1 ? PyUnicode_READ_CHAR(o, 1) : 0;
    }
    *ntags = nt;
    return 0;
}

static PyObject *
split_tags(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "split_tags(text, tags) takes exactly 2 arguments");
        return NULL;
    }
    PyObject *text = args[0], *tup = args[1];
    if (!PyUnicode_Check(text) || !PyTuple_Check(tup)) {
        PyErr_SetString(PyExc_TypeError, "split_tags: expected (str, tuple of str)");
        return NULL;
    }
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(text) < 0) /* legacy wstr strings (gone in 3.12) */
        return NULL;
#endif
    Tag tags[MAX_TAGS];
    Py_ssize_t ntags = 0;
    if (load_tags(tup, tags, &ntags) < 0)
        return NULL;
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    PyObject *parts = PyList_New(0);
    PyObject *words = PyList_New(0);
    PyObject *result = NULL;
    if (parts == NULL || words == NULL)
        goto done;

    Py_ssize_t start = 0; /* start of the current text piece */
    Py_ssize_t i = 0;
    for (;;) {
        i = find_lt(kind, data, i, n);
        if (i >= n)
            break;
        Py_ssize_t t = match_tag(kind, data, i, n, tags, ntags);
        if (t < 0) {
            i++;
            continue;
        }
        if (append_part(parts, words, PyUnicode_Substring(text, start, i),
                        count_words(kind, data, start, i)) < 0)
            goto done;
        Py_INCREF(tags[t].obj);
        if (append_part(parts, words, tags[t].obj, 1) < 0)
            goto done;
        i += tags[t].len;
        start = i;
    }
    if (append_part(parts, words, PyUnicode_Substring(text, start, n), count_words(kind, data, start, n)) < 0)
        goto done;
    result = PyTuple_Pack(2, parts, words);

done:
    Py_XDECREF(parts);
    Py_XDECREF(words);
    return result;
}

static PyMethodDef methods[] = {
    {"split_tags", (PyCFunction)(void (*)(void))split_tags, METH_FASTCALL,
     "split_tags(text, tags) -> (parts, words): split text at the tag strings (like a regex split "
     "with a capturing alternation) and count the whitespace words of every part."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "parallax.formats._speedups",
    .m_doc = "C accelerator for formats (optional; see parallax.formats.units).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModule_Create(&module);
}
