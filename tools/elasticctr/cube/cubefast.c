/* The cube shard's native lookup path (a CPython extension, built by cube/native.py).

   Same answers as format.ShardFile.find/lookup + protocol.encode_response, byte for byte:
   the same hash index (home slot (fmix64(key) >> 32) & (S - 1), an empty slot proving
   absence; numpy asks the sorted keys for a key past its window of 8, this code follows
   the key's run of slots, see resolve), absent keys answered with zero rows and counted.

   table(mmap, dim, count, slots, tail, sentinel, keys_off, values_off, tkeys_off, trows_off)
       -> a capsule over the shard file's mapping (it holds a buffer of the mmap: the
          mapping lives as long as the capsule). Offsets and sizes are checked.
   lookup(table, buf, offset, n, shard, version, http) -> (bytes, missing)
       the n keys at buf[offset:] answered as the protocol's body (32-byte header + rows);
       with http=True the whole HTTP/1.1 200 response (server.py's headers) before it.
   parse(buf, max_header, max_body) -> None | (consumed, body_offset, body_len, version, table)
       a complete, plain `POST /v1/lookup HTTP/1.1` at the start of buf: token header
       names, exactly one Content-Length (digits, <= max_body, a multiple of 8), no
       Transfer-Encoding, Expect or Connection other than keep-alive, at most one
       X-Cube-Version and X-Cube-Table (returned as str, else None), head <= max_header.
       Anything else is None: the Python layer (elasticctr.httpd) handles it with every
       rule and error of docs/http.md. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 8
#define PREFETCH 16
#define CAPSULE "elasticctr.cube.table"

typedef struct {
  Py_buffer view;
  const uint64_t *keys;
  const float *values;
  const uint64_t *tkeys;
  const uint32_t *trows;
  uint64_t count, slots, length, sentinel;
  uint32_t dim;
} table_t;

static inline uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDULL;
  x ^= x >> 33;
  x *= 0xC4CEB9FE1A85EC53ULL;
  x ^= x >> 33;
  return x;
}

static void table_free(PyObject *cap) {
  table_t *t = PyCapsule_GetPointer(cap, CAPSULE);
  if (t) {
    PyBuffer_Release(&t->view);
    PyMem_Free(t);
  }
}

static PyObject *py_table(PyObject *self, PyObject *args) {
  PyObject *mm;
  unsigned long long dim, count, slots, tail, sentinel, k_off, v_off, tk_off, tr_off;
  if (!PyArg_ParseTuple(args, "OKKKKKKKKK", &mm, &dim, &count, &slots, &tail, &sentinel, &k_off,
                        &v_off, &tk_off, &tr_off))
    return NULL;
  table_t *t = PyMem_Calloc(1, sizeof *t);
  if (!t) return PyErr_NoMemory();
  if (PyObject_GetBuffer(mm, &t->view, PyBUF_SIMPLE) != 0) {
    PyMem_Free(t);
    return NULL;
  }
  uint64_t size = (uint64_t)t->view.len, length = slots + tail;
  int ok = dim >= 1 && dim < (1u << 20) && slots >= 16 && (slots & (slots - 1)) == 0 &&
           tail >= WINDOW - 1 && count <= 0xFFFFFFFEULL && k_off % 8 == 0 && v_off % 4 == 0 &&
           tk_off % 8 == 0 && tr_off % 4 == 0 && k_off + 8 * count <= size &&
           v_off + 4 * dim * count <= size && tk_off + 8 * length <= size &&
           tr_off + 4 * length <= size;
  if (!ok) {
    PyBuffer_Release(&t->view);
    PyMem_Free(t);
    PyErr_SetString(PyExc_ValueError, "shard geometry does not fit the mapping");
    return NULL;
  }
  const char *base = t->view.buf;
  t->keys = (const uint64_t *)(base + k_off);
  t->values = (const float *)(base + v_off);
  t->tkeys = (const uint64_t *)(base + tk_off);
  t->trows = (const uint32_t *)(base + tr_off);
  t->count = count;
  t->slots = slots;
  t->length = length;
  t->sentinel = sentinel;
  t->dim = (uint32_t)dim;
  PyObject *cap = PyCapsule_New(t, CAPSULE, table_free);
  if (!cap) {
    PyBuffer_Release(&t->view);
    PyMem_Free(t);
  }
  return cap;
}

/* Row of key q, -1 when absent, -2 when the index names a row past the end (corrupt). */
static inline int64_t resolve(const table_t *t, uint64_t q, uint64_t home) {
  if (q == t->sentinel) return -1; /* the sentinel marks empty slots; it is not a key */
  /* The build puts every key in the run of occupied slots that starts at its home
     (linear probing, no wrap-around): scanning from the home slot meets the key before
     any empty slot, and an empty slot proves absence (format.py reads the window of 8 the
     same way). A key displaced past its window is found further along its run, where
     format.py asks the sorted keys; same answer, since a key is always in its run. Most
     keys sit at or next to their home: the scan reads one cache line, rarely the next
     (both prefetched). A run longer than 8 windows (structured keys) is left to the
     binary search of the sorted keys. */
  for (uint64_t s = home, stop = home + 8 * WINDOW; s < t->length && s < stop; s++) {
    uint64_t k = t->tkeys[s];
    if (k == q) {
      uint32_t r = t->trows[s];
      return r < t->count ? (int64_t)r : -2;
    }
    if (k == t->sentinel) return -1;
  }
  uint64_t lo = 0, hi = t->count;
  while (lo < hi) {
    uint64_t mid = lo + (hi - lo) / 2;
    if (t->keys[mid] < q)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < t->count && t->keys[lo] == q ? (int64_t)lo : -1;
}

/* Row numbers of n keys into rows (-1 where absent); returns the missing count, or -2 for
   a corrupt index. Runs without the GIL. */
static Py_ssize_t find_rows(const table_t *t, const char *kp, Py_ssize_t n, int64_t *rows) {
  Py_ssize_t missing = 0;
  if (t->count == 0) {
    for (Py_ssize_t i = 0; i < n; i++) rows[i] = -1;
    return n;
  }
  const uint64_t mask = t->slots - 1;
  uint64_t homes[PREFETCH];
  /* Resolve key j = i - PREFETCH (its slots are in cache by now), then hash key i and
     prefetch its window into the ring slot j used; a found row is prefetched for the copy. */
  for (Py_ssize_t i = 0; i < n + PREFETCH; i++) {
    Py_ssize_t j = i - PREFETCH;
    if (j >= 0) {
      uint64_t q;
      memcpy(&q, kp + 8 * j, 8);
      int64_t r = resolve(t, q, homes[j % PREFETCH]);
      if (r == -2) return -2;
      rows[j] = r;
      if (r >= 0)
        __builtin_prefetch(t->values + (size_t)r * t->dim);
      else
        missing++;
    }
    if (i < n) {
      uint64_t q;
      memcpy(&q, kp + 8 * i, 8);
      uint64_t h = (mix64(q) >> 32) & mask;
      homes[i % PREFETCH] = h;
      __builtin_prefetch(t->tkeys + h);
      __builtin_prefetch(t->tkeys + h + WINDOW - 1);
      __builtin_prefetch(t->trows + h);
    }
  }
  return missing;
}

/* The rows themselves (zeros where absent) into out. Runs without the GIL. */
static void copy_rows(const table_t *t, const int64_t *rows, Py_ssize_t n, char *out) {
  const size_t width = (size_t)t->dim * 4;
  for (Py_ssize_t i = 0; i < n; i++, out += width) {
    if (rows[i] >= 0)
      memcpy(out, t->values + (size_t)rows[i] * t->dim, width);
    else
      memset(out, 0, width);
  }
}

static PyObject *py_lookup(PyObject *self, PyObject *args) {
  PyObject *cap, *bufobj;
  Py_ssize_t offset, n;
  unsigned int shard;
  const char *version;
  Py_ssize_t vlen;
  int http;
  if (!PyArg_ParseTuple(args, "OOnnIy#p", &cap, &bufobj, &offset, &n, &shard, &version, &vlen,
                        &http))
    return NULL;
  table_t *t = PyCapsule_GetPointer(cap, CAPSULE);
  if (!t) return NULL;
  if (vlen > 64) {
    PyErr_SetString(PyExc_ValueError, "version too long");
    return NULL;
  }
  Py_buffer in;
  if (PyObject_GetBuffer(bufobj, &in, PyBUF_SIMPLE) != 0) return NULL;
  if (offset < 0 || n < 0 || n > (PY_SSIZE_T_MAX - 4096) / 8 / (Py_ssize_t)t->dim ||
      offset > in.len || n > (in.len - offset) / 8) {
    PyBuffer_Release(&in);
    PyErr_SetString(PyExc_ValueError, "keys out of the buffer");
    return NULL;
  }
  int64_t stack[2048];
  int64_t *rows = n <= 2048 ? stack : PyMem_Malloc(sizeof(int64_t) * (size_t)n);
  if (!rows) {
    PyBuffer_Release(&in);
    return PyErr_NoMemory();
  }
  const char *kp = (const char *)in.buf + offset;
  int big = n > 4096; /* a big batch lets a version load (sha256 in a thread) run beside it */
  Py_ssize_t missing;
  if (big) {
    Py_BEGIN_ALLOW_THREADS;
    missing = find_rows(t, kp, n, rows);
    Py_END_ALLOW_THREADS;
  } else {
    missing = find_rows(t, kp, n, rows);
  }
  PyBuffer_Release(&in);
  PyObject *outobj = NULL;
  if (missing == -2) {
    PyErr_SetString(PyExc_IndexError, "shard index names a row past the end (corrupt file)");
    goto done;
  }
  size_t body = 32 + (size_t)n * t->dim * 4;
  char head[320];
  int head_len = 0;
  if (http) {
    head_len = snprintf(head, sizeof head,
                        "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                        "Content-Length: %zu\r\nX-Cube-Version: %.*s\r\nX-Cube-Missing: %zd\r\n\r\n",
                        body, (int)vlen, version, missing);
    if (head_len < 0 || (size_t)head_len >= sizeof head) {
      PyErr_SetString(PyExc_ValueError, "response head too long");
      goto done;
    }
  }
  /* One bytes object, one write: [HTTP head] + protocol header + rows. */
  outobj = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)((size_t)head_len + body));
  if (!outobj) goto done;
  char *out = PyBytes_AS_STRING(outobj);
  memcpy(out, head, (size_t)head_len);
  /* Protocol header "<4sIIII12s": CUB1, dim, count, missing, shard, version. */
  char *ph = out + head_len;
  uint32_t fields[4] = {t->dim, (uint32_t)n, (uint32_t)missing, shard};
  memcpy(ph, "CUB1", 4);
  memcpy(ph + 4, fields, 16);
  memset(ph + 20, 0, 12);
  memcpy(ph + 20, version, vlen < 12 ? (size_t)vlen : 12);
  if (big) {
    Py_BEGIN_ALLOW_THREADS;
    copy_rows(t, rows, n, ph + 32);
    Py_END_ALLOW_THREADS;
  } else {
    copy_rows(t, rows, n, ph + 32);
  }
done:
  if (rows != stack) PyMem_Free(rows);
  if (!outobj) return NULL;
  return Py_BuildValue("Nn", outobj, missing);
}

static inline int lower(int c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

static int name_is(const char *p, size_t n, const char *lit) {
  size_t m = strlen(lit);
  if (n != m) return 0;
  for (size_t i = 0; i < n; i++)
    if (lower((unsigned char)p[i]) != lit[i]) return 0;
  return 1;
}

static int is_token(int c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return 1;
  return c != 0 && strchr("!#$%&'*+.^_`|~-", c) != NULL;
}

static PyObject *py_parse(PyObject *self, PyObject *args) {
  PyObject *bufobj;
  Py_ssize_t max_header, max_body;
  if (!PyArg_ParseTuple(args, "Onn", &bufobj, &max_header, &max_body)) return NULL;
  Py_buffer in;
  if (PyObject_GetBuffer(bufobj, &in, PyBUF_SIMPLE) != 0) return NULL;
  const char *b = in.buf;
  Py_ssize_t len = in.len;
  static const char line1[] = "POST /v1/lookup HTTP/1.1\r\n";
  const size_t l1 = sizeof line1 - 1;
  PyObject *result = NULL;
  const char *vp = NULL, *tp = NULL;
  size_t vn = 0, tn = 0;
  long long cl = -1;
  if ((size_t)len < l1 + 2 || memcmp(b, line1, l1) != 0) goto none;
  Py_ssize_t scan = len < max_header + 4 ? len : max_header + 4;
  const char *end = memmem(b, (size_t)scan, "\r\n\r\n", 4);
  if (!end || end - b > max_header) goto none;
  const char *p = b + l1;
  while (p < end + 2) {
    const char *eol = memmem(p, (size_t)(end + 2 - p), "\r\n", 2);
    if (!eol) goto none;
    const char *colon = memchr(p, ':', (size_t)(eol - p));
    if (!colon || colon == p) goto none;
    for (const char *c = p; c < colon; c++)
      if (!is_token((unsigned char)*c)) goto none;
    const char *v = colon + 1, *ve = eol;
    while (v < ve && (*v == ' ' || *v == '\t')) v++;
    while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t')) ve--;
    size_t nl = (size_t)(colon - p), vl = (size_t)(ve - v);
    if (name_is(p, nl, "content-length")) {
      if (cl >= 0 || vl == 0 || vl > 18) goto none;
      cl = 0;
      for (size_t i = 0; i < vl; i++) {
        if (v[i] < '0' || v[i] > '9') goto none;
        cl = cl * 10 + (v[i] - '0');
      }
    } else if (name_is(p, nl, "transfer-encoding") || name_is(p, nl, "expect")) {
      goto none;
    } else if (name_is(p, nl, "connection")) {
      if (!name_is(v, vl, "keep-alive")) goto none;
    } else if (name_is(p, nl, "x-cube-version")) {
      if (vp) goto none;
      vp = v, vn = vl;
    } else if (name_is(p, nl, "x-cube-table")) {
      if (tp) goto none;
      tp = v, tn = vl;
    }
    p = eol + 2;
  }
  if (cl < 0 || cl > max_body || cl % 8) goto none;
  Py_ssize_t start = (end - b) + 4;
  if (len - start < cl) goto none;
  PyObject *ver = vp ? PyUnicode_DecodeLatin1(vp, (Py_ssize_t)vn, NULL) : Py_NewRef(Py_None);
  PyObject *tab = tp ? PyUnicode_DecodeLatin1(tp, (Py_ssize_t)tn, NULL) : Py_NewRef(Py_None);
  if (ver && tab) result = Py_BuildValue("nnnOO", start + (Py_ssize_t)cl, start, (Py_ssize_t)cl, ver, tab);
  Py_XDECREF(ver);
  Py_XDECREF(tab);
  PyBuffer_Release(&in);
  return result;
none:
  PyBuffer_Release(&in);
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"table", py_table, METH_VARARGS, "a shard file's mapping as a lookup table"},
    {"lookup", py_lookup, METH_VARARGS, "(bytes, missing): the answer to n keys"},
    {"parse", py_parse, METH_VARARGS, "a plain binary lookup request at the start of buf"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cubefast", NULL, -1, methods};

PyMODINIT_FUNC PyInit__cubefast(void) { return PyModule_Create(&module); }
