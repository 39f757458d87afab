/* The compiled load generator of bench/cube/bench_lookup.py: the same client for both peers.

   loadgen cube|redis HOST PORT THREADS SECONDS WARMUP BATCHFILE DIM

   BATCHFILE: B batches of 1000 little-endian uint64 keys. Each thread owns one keep-alive
   TCP connection (TCP_NODELAY) and sends batches i, i+T, i+2T, ... one at a time:
     cube   HTTP/1.1 POST /v1/lookup, body = the keys (the binary protocol); the reply's
            head is scanned for Content-Length, the 32-byte header checked, rows copied
     redis  RESP MGET with each key as its 8 raw bytes; the reply array is parsed in place
            (no allocation per key) and each value copied into the rows (nil: zeros)
   Both sides copy the rows into one float32 [1000, dim] array per thread: equal client
   work. A request counts when it started after the warm-up; the run ends at SECONDS.
   Prints one line: keys_measured requests seconds p50_ms p99_ms p999_ms keys_total errors.
   Build: gcc -O2 -pthread -o loadgen loadgen.c (the bench does). `loadgen mem` below
   measures the memory system for the bench's memory-bound estimate.

   loadgen http HOST PORT THREADS SECONDS WARMUP REQFILE   (bench/serving/run.py)

   REQFILE: whole HTTP/1.1 requests, each preceded by its length (uint32, little-endian).
   Each thread owns one keep-alive connection and sends requests i, i+T, ... one at a time;
   a reply is its head (status, Content-Length) and that many body bytes, read and dropped.
   Prints "start" when the warm-up ends (the caller's CPU window opens), then, once every
   thread is done, one line: requests_measured seconds p50_ms p99_ms p999_ms non_200 errors. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 1000
#define MAX_SAMPLES (1 << 18) /* per thread */

static int mode_redis, mode_http, port, nthreads, dim;
static double seconds, warmup;
static const char *host;
static char **reqs;
static size_t *req_len;
static size_t nbatches;
static double t_start;

typedef struct {
  int id;
  double *lat;
  size_t nlat;
  uint64_t keys_measured, keys_total, errors, non_200;
} worker_t;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int dial(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  inet_pton(AF_INET, host, &a.sin_addr);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    perror("connect");
    exit(2);
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

static int write_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Read more into buf (cap bytes) after len; returns the new length, -1 on EOF/error. */
static ssize_t fill(int fd, char *buf, size_t len, size_t cap) {
  for (;;) {
    ssize_t r = read(fd, buf + len, cap - len);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    return (ssize_t)(len + r);
  }
}

/* One cube reply: 0 ok, -1 error. */
static int read_cube(int fd, char *buf, size_t cap, float *rows) {
  size_t len = 0;
  char *end = NULL;
  for (;;) {
    ssize_t n = fill(fd, buf, len, cap);
    if (n < 0) return -1;
    len = (size_t)n;
    end = memmem(buf, len, "\r\n\r\n", 4);
    if (end) break;
  }
  size_t head = (size_t)(end - buf) + 4;
  if (memcmp(buf, "HTTP/1.1 200", 12) != 0) return -1;
  size_t clen = 0;
  for (char *p = buf; p < end; p++) {
    if ((*p == '\n') && strncasecmp(p + 1, "content-length:", 15) == 0) {
      clen = strtoul(p + 16, NULL, 10);
      break;
    }
  }
  while (len < head + clen) {
    ssize_t n = fill(fd, buf, len, cap);
    if (n < 0) return -1;
    len = (size_t)n;
  }
  if (len != head + clen || clen != 32 + (size_t)BATCH * dim * 4) return -1;
  if (memcmp(buf + head, "CUB1", 4) != 0) return -1;
  memcpy(rows, buf + head + 32, (size_t)BATCH * dim * 4);
  return 0;
}

/* Parse "<c><digits>\r\n" at *pos; returns the number, sets *pos after it; -2 incomplete. */
static long resp_int(const char *buf, size_t len, size_t *pos, char c) {
  size_t p = *pos;
  if (p >= len) return -2;
  if (buf[p] != c) return -3;
  p++;
  int neg = 0;
  if (p < len && buf[p] == '-') neg = 1, p++;
  long v = 0;
  while (p < len && buf[p] >= '0' && buf[p] <= '9') v = v * 10 + (buf[p++] - '0');
  if (p + 1 >= len) return -2;
  if (buf[p] != '\r' || buf[p + 1] != '\n') return -3;
  *pos = p + 2;
  return neg ? -1 : v;
}

static int read_redis(int fd, char *buf, size_t cap, float *rows) {
  size_t len = 0, pos = 0;
  long count = -2;
  size_t row = 0, width = (size_t)dim * 4;
  for (;;) {
    if (count == -2) {
      size_t p = pos;
      long v = resp_int(buf, len, &p, '*');
      if (v == -3) return -1;
      if (v >= 0) {
        count = v;
        pos = p;
        if (count != BATCH) return -1;
      }
    }
    while (count >= 0 && row < (size_t)count) {
      size_t p = pos;
      long v = resp_int(buf, len, &p, '$');
      if (v == -3) return -1;
      if (v == -2) break;
      if (v == -1) {
        memset((char *)rows + row * width, 0, width);
      } else {
        if (p + (size_t)v + 2 > len) break;
        if ((size_t)v != width) return -1;
        memcpy((char *)rows + row * width, buf + p, width);
        p += (size_t)v + 2;
      }
      pos = p;
      row++;
    }
    if (count >= 0 && row == (size_t)count) return pos == len ? 0 : -1;
    ssize_t n = fill(fd, buf, len, cap);
    if (n < 0) return -1;
    len = (size_t)n;
  }
}

/* One HTTP reply with a Content-Length body: its status (0: malformed or closed). */
static int read_http(int fd, char *buf, size_t cap) {
  size_t len = 0;
  char *end = NULL;
  for (;;) {
    ssize_t n = fill(fd, buf, len, cap);
    if (n < 0) return 0;
    len = (size_t)n;
    end = memmem(buf, len, "\r\n\r\n", 4);
    if (end) break;
    if (len == cap) return 0;
  }
  if (len < 12 || memcmp(buf, "HTTP/1.", 7) != 0) return 0;
  int status = atoi(buf + 9);
  size_t head = (size_t)(end - buf) + 4, clen = 0;
  int found = 0;
  for (char *p = buf; p < end; p++) {
    if ((*p == '\n') && strncasecmp(p + 1, "content-length:", 15) == 0) {
      clen = strtoul(p + 16, NULL, 10);
      found = 1;
      break;
    }
  }
  if (!found || head + clen > cap) return 0;
  while (len < head + clen) {
    ssize_t n = fill(fd, buf, len, cap);
    if (n < 0) return 0;
    len = (size_t)n;
  }
  return len == head + clen ? status : 0;
}

static void *run(void *arg) {
  worker_t *w = arg;
  size_t cap = 8u << 20;
  char *buf = malloc(cap);
  float *rows = malloc((size_t)BATCH * (dim > 0 ? dim : 1) * 4);
  int fd = dial();
  double t_measure = t_start + warmup, t_end = t_measure + seconds;
  size_t j = (size_t)w->id;
  for (;;) {
    double t0 = now();
    if (t0 >= t_end) break;
    size_t b = j % nbatches;
    j += (size_t)nthreads;
    int rc = write_all(fd, reqs[b], req_len[b]), status = 200;
    if (rc == 0 && mode_http) {
      status = read_http(fd, buf, cap);
      rc = status ? 0 : -1;
    } else if (rc == 0) {
      rc = mode_redis ? read_redis(fd, buf, cap, rows) : read_cube(fd, buf, cap, rows);
    }
    double t1 = now();
    if (rc != 0) {
      w->errors++;
      close(fd);
      fd = dial();
      continue;
    }
    if (status != 200) {
      if (t0 >= t_measure) w->non_200++;
      continue;
    }
    w->keys_total += mode_http ? 1 : BATCH;
    if (t0 >= t_measure) {
      w->keys_measured += mode_http ? 1 : BATCH;
      if (w->nlat < MAX_SAMPLES) w->lat[w->nlat++] = t1 - t0;
    }
  }
  close(fd);
  free(buf);
  free(rows);
  return NULL;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* loadgen mem MIB LINES: independent random 64-byte reads over MIB MiB, 16 in flight
   (prefetched ahead, as the lookup does): prints ns per cache line. The memory-bound
   estimate of a lookup is a few such lines per key (hash slot, row number, row). */
static int mem_bench(size_t mib, size_t lines) {
  size_t size = mib << 20, nlines = size / 64;
  char *a = malloc(size);
  memset(a, 1, size); /* real pages, not the shared zero page */
  uint64_t x = 88172645463325252ULL, sum = 0;
  size_t idx[16];
  for (int k = 0; k < 16; k++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    idx[k] = (size_t)(((x >> 32) * (uint64_t)nlines) >> 32); /* no division */
  }
  double t0 = now();
  for (size_t i = 0; i < lines; i++) {
    size_t slot = i % 16;
    sum += (uint64_t)a[idx[slot] * 64];
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    idx[slot] = (size_t)(((x >> 32) * (uint64_t)nlines) >> 32);
    __builtin_prefetch(a + idx[slot] * 64);
  }
  double t = now() - t0;
  printf("%.3f %llu\n", t / (double)lines * 1e9, (unsigned long long)(sum & 1));
  return 0;
}

static worker_t *start_workers(pthread_t **ts) {
  worker_t *ws = calloc((size_t)nthreads, sizeof *ws);
  *ts = calloc((size_t)nthreads, sizeof **ts);
  t_start = now();
  for (int i = 0; i < nthreads; i++) {
    ws[i].id = i;
    ws[i].lat = malloc(sizeof(double) * MAX_SAMPLES);
    pthread_create(&(*ts)[i], NULL, run, &ws[i]);
  }
  return ws;
}

/* Every thread's latencies, sorted; *n their count. */
static double *join_workers(worker_t *ws, pthread_t *ts, size_t *n) {
  size_t total = 0;
  for (int i = 0; i < nthreads; i++) {
    pthread_join(ts[i], NULL);
    total += ws[i].nlat;
  }
  double *all = malloc(sizeof(double) * (total + 1));
  *n = 0;
  for (int i = 0; i < nthreads; i++) {
    memcpy(all + *n, ws[i].lat, ws[i].nlat * sizeof(double));
    *n += ws[i].nlat;
  }
  qsort(all, *n, sizeof(double), cmp);
  return all;
}

#define PCT(q) (n ? all[(size_t)((q) * (n - 1))] * 1e3 : 0.0)

static int http_main(FILE *f, size_t size) {
  char *data = malloc(size);
  if (fread(data, 1, size, f) != size) return 2;
  fclose(f);
  size_t cap = 0;
  for (size_t off = 0; off + 4 <= size; nbatches++) {
    uint32_t l;
    memcpy(&l, data + off, 4);
    off += 4 + l;
    if (off > size) {
      fprintf(stderr, "REQFILE: a request runs past the end\n");
      return 2;
    }
    if (nbatches == cap) {
      cap = cap ? 2 * cap : 64;
      reqs = realloc(reqs, cap * sizeof *reqs);
      req_len = realloc(req_len, cap * sizeof *req_len);
    }
    reqs[nbatches] = data + off - l;
    req_len[nbatches] = l;
  }
  if (!nbatches) {
    fprintf(stderr, "REQFILE: no request\n");
    return 2;
  }
  pthread_t *ts;
  worker_t *ws = start_workers(&ts);
  struct timespec until = {.tv_sec = (time_t)warmup,
                           .tv_nsec = (long)((warmup - (double)(time_t)warmup) * 1e9)};
  while (nanosleep(&until, &until) != 0 && errno == EINTR) {
  }
  printf("start\n");
  fflush(stdout);
  size_t n;
  double *all = join_workers(ws, ts, &n);
  uint64_t non_200 = 0, err = 0;
  for (int i = 0; i < nthreads; i++) non_200 += ws[i].non_200, err += ws[i].errors;
  printf("%zu %.3f %.4f %.4f %.4f %llu %llu\n", n, seconds, PCT(0.5), PCT(0.99), PCT(0.999),
         (unsigned long long)non_200, (unsigned long long)err);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "mem") == 0)
    return mem_bench(strtoul(argv[2], NULL, 10), strtoul(argv[3], NULL, 10));
  mode_http = argc == 8 && strcmp(argv[1], "http") == 0;
  if (argc != 9 && !mode_http) {
    fprintf(stderr, "usage: loadgen cube|redis HOST PORT THREADS SECONDS WARMUP BATCHFILE DIM\n"
                    "       loadgen http HOST PORT THREADS SECONDS WARMUP REQFILE\n");
    return 2;
  }
  mode_redis = strcmp(argv[1], "redis") == 0;
  host = argv[2];
  port = atoi(argv[3]);
  nthreads = atoi(argv[4]);
  seconds = atof(argv[5]);
  warmup = atof(argv[6]);
  dim = mode_http ? 0 : atoi(argv[8]);
  FILE *f = fopen(argv[7], "rb");
  if (!f) {
    perror(argv[7]);
    return 2;
  }
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  if (mode_http) return http_main(f, (size_t)size);
  nbatches = (size_t)size / (8 * BATCH);
  uint64_t *keys = malloc((size_t)size);
  if (fread(keys, 1, (size_t)size, f) != (size_t)size) return 2;
  fclose(f);
  reqs = calloc(nbatches, sizeof *reqs);
  req_len = calloc(nbatches, sizeof *req_len);
  for (size_t b = 0; b < nbatches; b++) {
    char *r = malloc(64 * BATCH + 256), *p = r;
    const uint64_t *k = keys + b * BATCH;
    if (mode_redis) {
      p += sprintf(p, "*%d\r\n$4\r\nMGET\r\n", BATCH + 1);
      for (int i = 0; i < BATCH; i++) {
        p += sprintf(p, "$8\r\n");
        memcpy(p, &k[i], 8);
        p += 8;
        *p++ = '\r';
        *p++ = '\n';
      }
    } else {
      p += sprintf(p,
                   "POST /v1/lookup HTTP/1.1\r\nHost: b\r\nContent-Type: "
                   "application/octet-stream\r\nContent-Length: %d\r\n\r\n",
                   8 * BATCH);
      memcpy(p, k, 8 * BATCH);
      p += 8 * BATCH;
    }
    reqs[b] = r;
    req_len[b] = (size_t)(p - r);
  }
  pthread_t *ts;
  worker_t *ws = start_workers(&ts);
  size_t n;
  double *all = join_workers(ws, ts, &n);
  uint64_t km = 0, kt = 0, err = 0;
  for (int i = 0; i < nthreads; i++) {
    km += ws[i].keys_measured;
    kt += ws[i].keys_total;
    err += ws[i].errors;
  }
  printf("%llu %zu %.3f %.4f %.4f %.4f %llu %llu\n", (unsigned long long)km, n, seconds, PCT(0.5),
         PCT(0.99), PCT(0.999), (unsigned long long)kt, (unsigned long long)err);
  return 0;
}
