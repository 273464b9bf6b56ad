/* Logged values into typed lake columns, and the per-value part of the offline W&B ingest, in C.
 *
 * Every source hands history values over as (key, JSON text) pairs. A `.wandb` history record carries them as one
 * item per value, and wandb follows each history record with summary records that restate those items. Done in
 * Python, every item costs a str for its key and one for its value, twice (history and summary), plus the typing:
 * most of the ingest, which could not come within 3x of merely parsing the file (issue #2). Here those items go from
 * the record bytes straight into Arrow-ready buffers (HistoryColumns.history) or a newest-value-per-key table
 * (SummaryFold), with no Python object per value; other sources append their pairs with HistoryColumns.add, or a
 * dict json.loads decoded with HistoryColumns.add_decoded.
 *
 * Only the plain, overwhelmingly common shape of a record is handled: one key (`key` or a single `nested_key`) and a
 * `value_json` per item, valid UTF-8. Anything else -- nested dicts and media (several nested_key parts in history),
 * typed values, summary removals, unknown fields, damaged bytes -- is declined with nothing appended, and the caller
 * decodes that record with wandb's protobuf classes (pipeline.sources.wandb_records), which also say what is damaged.
 *
 * Values are typed as pipeline.values documents (see the KIND_ constants below): strict JSON numbers and the tokens
 * NaN, Infinity and -Infinity are numbers, an integral one of at most 18 characters also exact in int64; every other
 * value (strings, booleans, null, lists, dicts, longer integers, malformed text) is handed back by row index, for
 * Python to classify.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------------ growable buffer */

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Buf;

static int buf_reserve(Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 1024;
    while (cap < b->len + extra) cap *= 2;
    char *p = PyMem_Realloc(b->data, (size_t)cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = p;
    b->cap = cap;
    return 0;
}

static int buf_put(Buf *b, const void *src, Py_ssize_t n) {
    if (buf_reserve(b, n) < 0) return -1;
    if (n) memcpy(b->data + b->len, src, (size_t)n);
    b->len += n;
    return 0;
}

static void buf_free(Buf *b) {
    PyMem_Free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

static PyObject *buf_bytes(Buf *b) { return PyBytes_FromStringAndSize(b->data ? b->data : "", b->len); }

/* ------------------------------------------------------------------------------------------- protobuf wire format */

typedef struct {
    const uint8_t *p, *end;
} Wire;

typedef struct {
    uint64_t number;
    int wire;              /* 0 varint, 2 length-delimited; others are declined */
    const uint8_t *data;   /* length-delimited: the bytes */
    Py_ssize_t len;
    uint64_t varint;       /* varint: the value */
} Field;

static int wire_varint(Wire *w, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (w->p >= w->end) return 0;
        uint8_t byte = *w->p++;
        v |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *out = v;
            return 1;
        }
    }
    return 0;
}

/* Reads the next field; 0 when the bytes are malformed or the wire type is one no field read here uses. */
static int wire_field(Wire *w, Field *f) {
    uint64_t tag, n;
    if (!wire_varint(w, &tag)) return 0;
    f->number = tag >> 3;
    f->wire = (int)(tag & 7);
    if (f->number == 0) return 0;
    if (f->wire == 0) return wire_varint(w, &f->varint);
    if (f->wire != 2 || !wire_varint(w, &n) || n > (uint64_t)(w->end - w->p)) return 0;
    f->data = w->p;
    f->len = (Py_ssize_t)n;
    w->p += n;
    return 1;
}

/* Field numbers, from wandb/proto/wandb_internal.proto (tests/test_items.py checks what they read against wandb's
 * own classes, which would disagree if wandb renumbered a field). */
enum {
    RECORD_NUM = 1, RECORD_HISTORY = 2, RECORD_SUMMARY = 3, RECORD_CONTROL = 16, RECORD_UUID = 19, INFO = 200,
    HISTORY_ITEM = 1, HISTORY_STEP = 2, STEP_NUM = 1,
    SUMMARY_UPDATE = 1,
    ITEM_KEY = 1, ITEM_NESTED_KEY = 2, ITEM_VALUE_JSON = 16,
};

/* The payload of a Record's history or summary field, skipping the bookkeeping fields around it. */
static int record_payload(const char *data, Py_ssize_t n, uint64_t want, Wire *payload) {
    Wire w = {(const uint8_t *)data, (const uint8_t *)data + n};
    Field f;
    int found = 0;
    while (w.p < w.end) {
        if (!wire_field(&w, &f)) return 0;
        if (f.number == want && f.wire == 2 && !found) {
            payload->p = f.data;
            payload->end = f.data + f.len;
            found = 1;
        } else if (!((f.number == RECORD_NUM && f.wire == 0) ||
                     ((f.number == RECORD_CONTROL || f.number == RECORD_UUID || f.number == INFO) && f.wire == 2))) {
            return 0;
        }
    }
    return found;
}

static int utf8_valid(const uint8_t *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (n - i >= 8) {  /* keys and numbers are ASCII: eight bytes at a time */
        uint64_t word;
        memcpy(&word, s + i, 8);
        if (word & 0x8080808080808080ULL) break;
        i += 8;
    }
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int len;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07; }
        else return 0;
        if (n - i < len) return 0;
        for (int k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += len;
    }
    return 1;
}

/* One item: its key parts (nested_key, else key) as spans, and value_json. 0 when it is not the plain shape. */
#define MAX_PARTS 8
typedef struct {
    const uint8_t *part[MAX_PARTS];
    Py_ssize_t part_len[MAX_PARTS];
    int parts;
    const uint8_t *value;
    Py_ssize_t value_len;
} Item;

static int parse_item(const uint8_t *p, Py_ssize_t n, Item *it, int validate) {
    Wire w = {p, p + n};
    Field f;
    const uint8_t *key = NULL;
    Py_ssize_t key_len = 0;
    it->parts = 0;
    it->value = NULL;
    while (w.p < w.end) {
        if (!wire_field(&w, &f) || f.wire != 2 || (validate && !utf8_valid(f.data, f.len))) return 0;
        if (f.number == ITEM_KEY && key == NULL) {
            key = f.data;
            key_len = f.len;
        } else if (f.number == ITEM_NESTED_KEY && it->parts < MAX_PARTS) {
            it->part[it->parts] = f.data;
            it->part_len[it->parts++] = f.len;
        } else if (f.number == ITEM_VALUE_JSON && it->value == NULL) {
            it->value = f.data;
            it->value_len = f.len;
        } else {
            return 0;
        }
    }
    if (it->value == NULL || (key != NULL && it->parts)) return 0;  /* typed values; both key forms at once */
    if (key != NULL) {
        it->part[0] = key;
        it->part_len[0] = key_len;
        it->parts = 1;
    }
    return it->parts > 0;
}

/* ------------------------------------------------------------------------------------------------- value typing */

/* FLOAT: a JSON number with a fraction or exponent, its text left to Arrow's correctly rounded cast (in bulk, far
 * faster than CPython's dtoa); INT: an integral one of at most 18 characters (or an int64 Python decoded), exact in
 * int64 and in the DOUBLE (the conversion of an exact integer rounds correctly); DOUBLE: the DOUBLE is the value,
 * nothing to cast (NaN, Infinity, -Infinity, and floats Python decoded: HistoryColumns.add_decoded); OTHER: for
 * Python. */
enum { KIND_FLOAT = 0, KIND_INT = 1, KIND_DOUBLE = 2, KIND_OTHER = 3 };

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* Whether [s, s+n) is exactly one JSON number; *integral when it has no fraction and no exponent. */
static int json_number(const char *s, Py_ssize_t n, int *integral) {
    Py_ssize_t i = 0;
    if (i < n && s[i] == '-') i++;
    if (i >= n) return 0;
    if (s[i] == '0') {
        i++;
    } else if (s[i] >= '1' && s[i] <= '9') {
        while (i < n && is_digit(s[i])) i++;
    } else {
        return 0;
    }
    *integral = 1;
    if (i < n && s[i] == '.') {
        i++;
        if (i >= n || !is_digit(s[i])) return 0;
        while (i < n && is_digit(s[i])) i++;
        *integral = 0;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= n || !is_digit(s[i])) return 0;
        while (i < n && is_digit(s[i])) i++;
        *integral = 0;
    }
    return i == n;
}

static int classify(const char *s, Py_ssize_t n, double *value, int64_t *exact) {
    int integral = 0;
    *exact = 0;
    *value = 0.0;
    if (n == 3 && memcmp(s, "NaN", 3) == 0) { *value = Py_NAN; return KIND_DOUBLE; }
    if (n == 8 && memcmp(s, "Infinity", 8) == 0) { *value = Py_HUGE_VAL; return KIND_DOUBLE; }
    if (n == 9 && memcmp(s, "-Infinity", 9) == 0) { *value = -Py_HUGE_VAL; return KIND_DOUBLE; }
    if (!json_number(s, n, &integral)) return KIND_OTHER;
    if (!integral) return KIND_FLOAT;
    if (n > 18) return KIND_OTHER;  /* may not fit int64: Python's int keeps it exact */
    int negative = s[0] == '-';
    int64_t v = 0;
    for (Py_ssize_t i = negative; i < n; i++) v = v * 10 + (s[i] - '0');
    *exact = negative ? -v : v;
    *value = (double)*exact;
    return KIND_INT;
}

/* ------------------------------------------------------------------------------------------------- HistoryColumns */

typedef struct {
    PyObject_HEAD
    Buf key_offsets;   /* int32, count + 1 entries */
    Buf key_data;
    Buf value;         /* double */
    Buf value_int;     /* int64 */
    Buf kind;          /* uint8 */
    Buf float_offsets; /* int32: the texts of the FLOAT values, in row order, for Arrow's cast */
    Buf float_data;
    Buf other_rows;    /* int64: rows whose value Python classifies */
    Buf other_offsets; /* int32, one more entry than other_rows */
    Buf other_data;
    Py_ssize_t count;
} Columns;

#define N_BUFS 10
#define COLUMN_BUFS(c) {&(c)->key_offsets, &(c)->key_data, &(c)->value, &(c)->value_int, &(c)->kind, \
                        &(c)->float_offsets, &(c)->float_data, &(c)->other_rows, &(c)->other_offsets, &(c)->other_data}

typedef struct {
    Py_ssize_t len[N_BUFS], count;
} Mark;

static Mark columns_mark(Columns *c) {
    Buf *all[N_BUFS] = COLUMN_BUFS(c);
    Mark m;
    for (int i = 0; i < N_BUFS; i++) m.len[i] = all[i]->len;
    m.count = c->count;
    return m;
}

static void columns_rollback(Columns *c, Mark m) {
    Buf *all[N_BUFS] = COLUMN_BUFS(c);
    for (int i = 0; i < N_BUFS; i++) all[i]->len = m.len[i];
    c->count = m.count;
}

static int columns_reset(Columns *c) {
    Buf *all[N_BUFS] = COLUMN_BUFS(c);
    for (int i = 0; i < N_BUFS; i++) all[i]->len = 0;
    c->count = 0;
    int32_t zero = 0;
    if (buf_put(&c->key_offsets, &zero, 4) < 0 || buf_put(&c->float_offsets, &zero, 4) < 0 ||
        buf_put(&c->other_offsets, &zero, 4) < 0)
        return -1;
    return 0;
}

/* One value whose kind is known; ``text`` is kept for FLOAT (Arrow's cast) and OTHER (Python's), ignored otherwise.
 * Offsets are int32 (Arrow's string type): the caller flushes long before 2 GiB (see nbytes). */
static int columns_store(Columns *c, const char *key, Py_ssize_t key_len, uint8_t kind, double value, int64_t exact,
                         const char *text, Py_ssize_t text_len) {
    if (c->key_data.len + key_len > INT32_MAX || c->other_data.len + c->float_data.len + text_len > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "history batch exceeds 2 GiB of text; flush more often");
        return -1;
    }
    int32_t key_end = (int32_t)(c->key_data.len + key_len);
    if (buf_put(&c->key_data, key, key_len) < 0 || buf_put(&c->key_offsets, &key_end, 4) < 0 ||
        buf_put(&c->value, &value, 8) < 0 || buf_put(&c->value_int, &exact, 8) < 0 || buf_put(&c->kind, &kind, 1) < 0)
        return -1;
    if (kind == KIND_FLOAT) {
        int32_t text_end = (int32_t)(c->float_data.len + text_len);
        if (buf_put(&c->float_data, text, text_len) < 0 || buf_put(&c->float_offsets, &text_end, 4) < 0) return -1;
    } else if (kind == KIND_OTHER) {
        int64_t row = c->count;
        int32_t text_end = (int32_t)(c->other_data.len + text_len);
        if (buf_put(&c->other_rows, &row, 8) < 0 || buf_put(&c->other_data, text, text_len) < 0 ||
            buf_put(&c->other_offsets, &text_end, 4) < 0)
            return -1;
    }
    c->count++;
    return 0;
}

static int columns_append(Columns *c, const char *key, Py_ssize_t key_len, const char *text, Py_ssize_t text_len) {
    double value;
    int64_t exact;
    uint8_t kind = (uint8_t)classify(text, text_len, &value, &exact);  /* before value and exact are read */
    return columns_store(c, key, key_len, kind, value, exact, text, text_len);
}

/* A strict JSON number as a double (float(text) in Python, for _step and _timestamp); 0 for anything else. */
static int json_double(const uint8_t *s, Py_ssize_t n, double *out) {
    int integral = 0;
    char text[64];
    if (n >= (Py_ssize_t)sizeof text || !json_number((const char *)s, n, &integral)) return 0;
    memcpy(text, s, (size_t)n);
    text[n] = '\0';
    *out = PyOS_string_to_double(text, NULL, NULL);
    if (*out == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

static PyObject *Columns_history(Columns *c, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Wire w;
    Field f;
    Item it;
    Mark mark = columns_mark(c);
    int have_step = 0, have_ts = 0, have_step_field = 0;
    int64_t step = 0, step_field = 0;
    double ts = 0.0;
    if (!record_payload(view.buf, view.len, RECORD_HISTORY, &w)) goto decline;
    while (w.p < w.end) {
        if (!wire_field(&w, &f) || f.wire != 2) goto decline;
        if (f.number == HISTORY_STEP) {
            Wire sw = {f.data, f.data + f.len};
            Field sf;
            while (sw.p < sw.end) {
                if (!wire_field(&sw, &sf) || sf.number != STEP_NUM || sf.wire != 0) goto decline;
                step_field = (int64_t)sf.varint;
            }
            have_step_field = 1;
            continue;
        }
        if (f.number == INFO) continue;
        if (f.number != HISTORY_ITEM || !parse_item(f.data, f.len, &it, 1) || it.parts != 1) goto decline;
        if (it.part_len[0] == 5 && memcmp(it.part[0], "_step", 5) == 0) {
            double d;
            /* int(float(text)) in Python; anything odd (a repeat, text, out of range) is Python's to report */
            if (have_step || !json_double(it.value, it.value_len, &d) || !(d > -9.2e18 && d < 9.2e18)) goto decline;
            step = (int64_t)d;
            have_step = 1;
            continue;
        }
        if (!have_ts && it.part_len[0] == 10 && memcmp(it.part[0], "_timestamp", 10) == 0)
            have_ts = json_double(it.value, it.value_len, &ts) ? 1 : -1;
        if (columns_append(c, (const char *)it.part[0], it.part_len[0], (const char *)it.value, it.value_len) < 0)
            goto error;
    }
    if (!have_step && have_step_field) {
        step = step_field;
        have_step = 1;
    }
    if (!have_step) columns_rollback(c, mark);
    PyBuffer_Release(&view);
    return Py_BuildValue("(NNn)", have_step ? PyLong_FromLongLong(step) : Py_NewRef(Py_None),
                         have_ts == 1 ? PyFloat_FromDouble(ts) : Py_NewRef(Py_None), c->count - mark.count);
decline:
    columns_rollback(c, mark);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
error:
    columns_rollback(c, mark);
    PyBuffer_Release(&view);
    return NULL;
}

static const char *utf8_of(PyObject *s, Py_ssize_t *n, PyObject **holder) {
    *holder = NULL;
    if (!PyUnicode_Check(s)) {
        PyErr_Format(PyExc_TypeError, "history keys and texts must be str, not %.100s", Py_TYPE(s)->tp_name);
        return NULL;
    }
    const char *p = PyUnicode_AsUTF8AndSize(s, n);
    if (p != NULL) return p;
    PyErr_Clear();  /* a lone surrogate has no UTF-8: stored as its escape (\ud800), not lost and not fatal */
    *holder = PyUnicode_AsEncodedString(s, "utf-8", "backslashreplace");
    if (*holder == NULL) return NULL;
    *n = PyBytes_GET_SIZE(*holder);
    return PyBytes_AS_STRING(*holder);
}

static PyObject *Columns_add(Columns *c, PyObject *args) {
    PyObject *keys, *texts;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &keys, &PyList_Type, &texts)) return NULL;
    if (PyList_GET_SIZE(keys) != PyList_GET_SIZE(texts)) {
        PyErr_SetString(PyExc_ValueError, "keys and texts differ in length");
        return NULL;
    }
    Mark mark = columns_mark(c);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys); i++) {
        Py_ssize_t key_len, text_len;
        PyObject *key_holder, *text_holder;
        const char *key = utf8_of(PyList_GET_ITEM(keys, i), &key_len, &key_holder);
        if (key == NULL) goto error;
        const char *text = utf8_of(PyList_GET_ITEM(texts, i), &text_len, &text_holder);
        if (text == NULL) {
            Py_XDECREF(key_holder);
            goto error;
        }
        int failed = columns_append(c, key, key_len, text, text_len);
        Py_XDECREF(key_holder);
        Py_XDECREF(text_holder);
        if (failed < 0) goto error;
    }
    Py_RETURN_NONE;
error:
    columns_rollback(c, mark);
    return NULL;
}

/* A value appended from its JSON text, as Columns_add would append it; ``fallback`` makes the text. */
static int append_via_text(Columns *c, const char *key, Py_ssize_t key_len, PyObject *fallback, PyObject *v) {
    Py_ssize_t text_len;
    PyObject *text_holder = NULL;
    PyObject *text = PyObject_CallOneArg(fallback, v);
    if (text == NULL) return -1;
    const char *t = utf8_of(text, &text_len, &text_holder);
    int failed = t == NULL ? -1 : columns_append(c, key, key_len, t, text_len);
    Py_XDECREF(text_holder);
    Py_DECREF(text);
    return failed;
}

/* A dict json.loads decoded, appended as Columns_add would append its values' JSON texts (``fallback``, which is
 * pipeline.values.logged_json, makes them), without making the texts of floats and int64 integers: a float's
 * shortest repr (CPython's dtoa) was a third of a JSONL line's ingest, and the double Arrow would cast that text
 * back to is the float itself. */
static PyObject *Columns_add_decoded(Columns *c, PyObject *args) {
    PyObject *items, *fallback, *key, *v;
    if (!PyArg_ParseTuple(args, "O!O:add_decoded", &PyDict_Type, &items, &fallback)) return NULL;
    Mark mark = columns_mark(c);
    Py_ssize_t pos = 0;
    while (PyDict_Next(items, &pos, &key, &v)) {
        Py_ssize_t key_len;
        PyObject *key_holder;
        const char *k = utf8_of(key, &key_len, &key_holder);
        if (k == NULL) goto error;
        Py_INCREF(v);  /* the fallback runs Python code: key and value must outlive it */
        Py_INCREF(key);
        int failed;
        if (PyFloat_CheckExact(v)) {
            double d = PyFloat_AS_DOUBLE(v);
            failed = columns_store(c, k, key_len, KIND_DOUBLE, d != d ? Py_NAN : d, 0, NULL, 0);
        } else if (PyLong_CheckExact(v)) {
            int overflow = 0;
            long long n = PyLong_AsLongLongAndOverflow(v, &overflow);
            if (n == -1 && PyErr_Occurred())
                failed = -1;
            else if (!overflow)  /* within int64: what Python makes of a longer text (pipeline.values.classify) */
                failed = columns_store(c, k, key_len, KIND_INT, (double)n, (int64_t)n, NULL, 0);
            else
                failed = append_via_text(c, k, key_len, fallback, v);
        } else {
            failed = append_via_text(c, k, key_len, fallback, v);
        }
        Py_DECREF(v);
        Py_DECREF(key);
        Py_XDECREF(key_holder);
        if (failed < 0) goto error;
    }
    return PyLong_FromSsize_t(c->count - mark.count);
error:
    columns_rollback(c, mark);
    return NULL;
}

/* Everything held, as (count, key offsets, key data, value, value_int, kind, float offsets, float data, other rows,
 * other texts); then empty. */
static PyObject *Columns_take(Columns *c, PyObject *Py_UNUSED(ignored)) {
    Py_ssize_t others = c->other_rows.len / 8;
    PyObject *texts = PyList_New(others);
    if (texts == NULL) return NULL;
    const int32_t *ends = (const int32_t *)c->other_offsets.data;
    for (Py_ssize_t i = 0; i < others; i++) {
        PyObject *s = PyUnicode_DecodeUTF8(c->other_data.data + ends[i], ends[i + 1] - ends[i], "replace");
        if (s == NULL) {
            Py_DECREF(texts);
            return NULL;
        }
        PyList_SET_ITEM(texts, i, s);
    }
    PyObject *out = Py_BuildValue("(nNNNNNNNNN)", c->count, buf_bytes(&c->key_offsets), buf_bytes(&c->key_data),
                                  buf_bytes(&c->value), buf_bytes(&c->value_int), buf_bytes(&c->kind),
                                  buf_bytes(&c->float_offsets), buf_bytes(&c->float_data), buf_bytes(&c->other_rows),
                                  texts);
    if (out == NULL || columns_reset(c) < 0) {
        Py_XDECREF(out);
        return NULL;
    }
    return out;
}

static PyObject *Columns_get_count(Columns *c, void *Py_UNUSED(closure)) { return PyLong_FromSsize_t(c->count); }

static PyObject *Columns_get_nbytes(Columns *c, void *Py_UNUSED(closure)) {
    return PyLong_FromSsize_t(c->key_data.len + c->float_data.len + c->other_data.len + c->count * 21);
}

static int Columns_init(Columns *c, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, ":HistoryColumns", kwlist)) return -1;
    return columns_reset(c);
}

static void Columns_dealloc(Columns *c) {
    Buf *all[N_BUFS] = COLUMN_BUFS(c);
    for (int i = 0; i < N_BUFS; i++) buf_free(all[i]);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyMethodDef Columns_methods[] = {
    {"history", (PyCFunction)Columns_history, METH_O,
     "history(record) -> (step, timestamp, n) | None\n\n"
     "Append a history Record's values (all but _step). None: not the plain shape, nothing appended. A step of None\n"
     "means the row has no step and nothing was appended."},
    {"add", (PyCFunction)Columns_add, METH_VARARGS, "add(keys, texts): append values decoded elsewhere."},
    {"add_decoded", (PyCFunction)Columns_add_decoded, METH_VARARGS,
     "add_decoded(items, fallback) -> n\n\n"
     "Append a dict's values as add(list(items), [fallback(v) for v in items.values()]) would, floats and int64\n"
     "integers typed directly; n is the number appended."},
    {"take", (PyCFunction)Columns_take, METH_NOARGS,
     "take() -> (n, key_offsets, key_data, value, value_int, kind, float_offsets, float_data, other_rows,\n"
     "other_texts), and start empty."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Columns_getset[] = {
    {"count", (getter)Columns_get_count, NULL, "values held", NULL},
    {"nbytes", (getter)Columns_get_nbytes, NULL, "approximate bytes held", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ColumnsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pipeline._items.HistoryColumns",
    .tp_doc = "History values of a batch as Arrow-ready buffers: keys, DOUBLE, exact int64, and a kind per value.",
    .tp_basicsize = sizeof(Columns),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Columns_init,
    .tp_dealloc = (destructor)Columns_dealloc,
    .tp_methods = Columns_methods,
    .tp_getset = Columns_getset,
};

/* ---------------------------------------------------------------------------------------------------- SummaryFold */

typedef struct {
    char *key;      /* the key parts, each as uint32 length + bytes */
    Py_ssize_t key_len;
    uint64_t hash;
    Buf value;
} Entry;

typedef struct {
    PyObject_HEAD
    Entry *entries;  /* in first-seen order */
    Py_ssize_t n, cap;
    Py_ssize_t *slots;  /* open addressing: entry index + 1, 0 when empty */
    Py_ssize_t nslots;
    Buf scratch;
} Fold;

static uint64_t hash_bytes(const char *s, Py_ssize_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n, w;
    for (; n >= 8; s += 8, n -= 8) {
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
    }
    w = 0;
    memcpy(&w, s, (size_t)n);
    h ^= w;
    h ^= h >> 33;  /* murmur3's finalizer: the table indexes by the low bits */
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 33);
}

static int fold_grow(Fold *f) {
    Py_ssize_t nslots = f->nslots ? f->nslots * 2 : 256;
    Py_ssize_t *slots = PyMem_Calloc((size_t)nslots, sizeof *slots);
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < f->n; i++) {
        Py_ssize_t s = (Py_ssize_t)(f->entries[i].hash & (uint64_t)(nslots - 1));
        while (slots[s]) s = (s + 1) & (nslots - 1);
        slots[s] = i + 1;
    }
    PyMem_Free(f->slots);
    f->slots = slots;
    f->nslots = nslots;
    return 0;
}

static int fold_set(Fold *f, const char *key, Py_ssize_t key_len, const uint8_t *value, Py_ssize_t value_len) {
    if ((f->n + 1) * 2 > f->nslots && fold_grow(f) < 0) return -1;
    uint64_t h = hash_bytes(key, key_len);
    Py_ssize_t s = (Py_ssize_t)(h & (uint64_t)(f->nslots - 1));
    Entry *e = NULL;
    while (f->slots[s]) {
        Entry *cand = &f->entries[f->slots[s] - 1];
        if (cand->hash == h && cand->key_len == key_len && memcmp(cand->key, key, (size_t)key_len) == 0) {
            e = cand;
            break;
        }
        s = (s + 1) & (f->nslots - 1);
    }
    if (e == NULL) {
        if (f->n == f->cap) {
            Py_ssize_t cap = f->cap ? f->cap * 2 : 256;
            Entry *entries = PyMem_Realloc(f->entries, (size_t)cap * sizeof *entries);
            if (entries == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            f->entries = entries;
            f->cap = cap;
        }
        e = &f->entries[f->n];
        memset(e, 0, sizeof *e);
        e->key = PyMem_Malloc((size_t)(key_len ? key_len : 1));
        if (e->key == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(e->key, key, (size_t)key_len);
        e->key_len = key_len;
        e->hash = h;
        f->slots[s] = ++f->n;
    }
    e->value.len = 0;
    return buf_put(&e->value, value, value_len);
}

static PyObject *Fold_add(Fold *f, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Wire w;
    Field fd;
    Item it;
    int ok = record_payload(view.buf, view.len, RECORD_SUMMARY, &w);
    /* First check the whole record, so that a declined one leaves the fold as it was. */
    for (Wire check = w; ok && check.p < check.end;) {
        ok = wire_field(&check, &fd) && fd.wire == 2 &&
             (fd.number == INFO || (fd.number == SUMMARY_UPDATE && parse_item(fd.data, fd.len, &it, 1)));
    }
    while (ok && w.p < w.end) {
        wire_field(&w, &fd);
        if (fd.number == INFO) continue;
        parse_item(fd.data, fd.len, &it, 0);  /* checked above */
        f->scratch.len = 0;
        for (int k = 0; k < it.parts; k++) {
            uint32_t len = (uint32_t)it.part_len[k];
            if (buf_put(&f->scratch, &len, 4) < 0 || buf_put(&f->scratch, it.part[k], it.part_len[k]) < 0) goto error;
        }
        if (fold_set(f, f->scratch.data, f->scratch.len, it.value, it.value_len) < 0) goto error;
    }
    PyBuffer_Release(&view);
    return PyBool_FromLong(ok);
error:
    PyBuffer_Release(&view);
    return NULL;
}

static void fold_clear(Fold *f) {
    for (Py_ssize_t i = 0; i < f->n; i++) {
        PyMem_Free(f->entries[i].key);
        buf_free(&f->entries[i].value);
    }
    f->n = 0;
    if (f->slots) memset(f->slots, 0, (size_t)f->nslots * sizeof *f->slots);
}

/* (key, value_json) per key in first-seen order; the key is a str, or a tuple of str for a nested path. */
static PyObject *Fold_drain(Fold *f, PyObject *Py_UNUSED(ignored)) {
    PyObject *out = PyList_New(f->n);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < f->n; i++) {
        Entry *e = &f->entries[i];
        PyObject *parts = PyList_New(0), *key, *pair;
        if (parts == NULL) goto error;
        for (Py_ssize_t at = 0; at < e->key_len;) {
            uint32_t len;
            memcpy(&len, e->key + at, 4);
            PyObject *part = PyUnicode_DecodeUTF8(e->key + at + 4, len, "strict");
            if (part == NULL || PyList_Append(parts, part) < 0) {
                Py_XDECREF(part);
                Py_DECREF(parts);
                goto error;
            }
            Py_DECREF(part);
            at += 4 + (Py_ssize_t)len;
        }
        key = PyList_GET_SIZE(parts) == 1 ? Py_NewRef(PyList_GET_ITEM(parts, 0)) : PyList_AsTuple(parts);
        Py_DECREF(parts);
        if (key == NULL) goto error;
        pair = Py_BuildValue("(Ns#)", key, e->value.data ? e->value.data : "", e->value.len);
        if (pair == NULL) goto error;
        PyList_SET_ITEM(out, i, pair);
    }
    fold_clear(f);
    return out;
error:
    Py_DECREF(out);
    return NULL;
}

static int Fold_init(Fold *f, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {NULL};
    return PyArg_ParseTupleAndKeywords(args, kwds, ":SummaryFold", kwlist) ? 0 : -1;
}

static void Fold_dealloc(Fold *f) {
    fold_clear(f);
    PyMem_Free(f->entries);
    PyMem_Free(f->slots);
    buf_free(&f->scratch);
    Py_TYPE(f)->tp_free((PyObject *)f);
}

static PyObject *Fold_len(Fold *f, void *Py_UNUSED(closure)) { return PyLong_FromSsize_t(f->n); }

static PyMethodDef Fold_methods[] = {
    {"add", (PyCFunction)Fold_add, METH_O,
     "add(record) -> bool: fold a summary Record's updates in; False: not the plain shape, nothing folded."},
    {"drain", (PyCFunction)Fold_drain, METH_NOARGS,
     "drain() -> [(key, value_json)]: the newest text per key since the last drain, first-seen order; then empty."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Fold_getset[] = {
    {"count", (getter)Fold_len, NULL, "keys held", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject FoldType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pipeline._items.SummaryFold",
    .tp_doc = "The newest value_json per summary key, over any number of summary records.",
    .tp_basicsize = sizeof(Fold),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Fold_init,
    .tp_dealloc = (destructor)Fold_dealloc,
    .tp_methods = Fold_methods,
    .tp_getset = Fold_getset,
};

/* ---------------------------------------------------------------------------------------------------------- module */

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_items",
    "W&B history and summary items from record bytes, with no Python object per value (see the source's header).",
    -1, NULL,
};

PyMODINIT_FUNC PyInit__items(void) {
    if (PyType_Ready(&ColumnsType) < 0 || PyType_Ready(&FoldType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "HistoryColumns", (PyObject *)&ColumnsType) < 0 ||
        PyModule_AddObjectRef(m, "SummaryFold", (PyObject *)&FoldType) < 0 ||
        PyModule_AddIntConstant(m, "KIND_FLOAT", KIND_FLOAT) < 0 || PyModule_AddIntConstant(m, "KIND_INT", KIND_INT) < 0 ||
        PyModule_AddIntConstant(m, "KIND_DOUBLE", KIND_DOUBLE) < 0 || PyModule_AddIntConstant(m, "KIND_OTHER", KIND_OTHER) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
