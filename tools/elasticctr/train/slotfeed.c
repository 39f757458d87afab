/* ectl-slotfeed: ElasticCTR sample lines -> Paddle MultiSlot text, one leased byte range.
 *
 * Built and cached by elasticctr.train.native (gcc -O2); docs/training.md "Native path".
 * Paddle's QueueDataset runs `cat <spec file> | ectl-slotfeed ARGS` for every file of its
 * file list, so each spec file names one byte range to read:
 *
 *   stdin:  PATH \t START \t END \t STATS_OUT \t HELDOUT_OUT [\t BASE] \n  (END -1 = end of file)
 *   args:   --slots 0,1,... [--sparse-dim N] [--heldout all|skip|save|only]
 *           [--lease-file PATH --lease-seconds S]
 *   stdout: per sample, for every slot in --slots order "<n> id ...", then "1 <click>",
 *           "1 <show>", "1 <click>" (label, show, click); an empty slot is "1 0" (the
 *           padding feasign 0, as elasticctr.train.feeds.PAD_FEASIGN).
 *
 * Exactly the lines that BEGIN at an offset in [START, END) are read (the last to its
 * end), as elasticctr.data.parser.BatchStream does, so ranges never split or duplicate a
 * line. A local PATH is mapped; with BASE, PATH is a stream (a FIFO the trainer's store
 * client fills: elasticctr.train.native) whose first byte is the file's byte BASE
 * (START - 1, or 0), read sequentially to its end; the same lines are read. A file or
 * stream that ends before END (END >= 0) ends the range "incomplete" (stopped 2): the
 * file was truncated, or the store client failed and closed the stream. Lines are validated as that parser does (`show click feasign:slot ...`, unsigned
 * 64-bit integers of at most 20 digits, click <= show, separators space/tab/CR); bad lines
 * are skipped and counted, features of slots not in --slots ignored, feasigns reduced
 * modulo --sparse-dim when it is > 0.
 *
 * Held-out rule: the hash of elasticctr.train.elastic.heldout_mask (1 sample in 10, a
 * function of the features only). --heldout all: every sample is emitted; skip: held-out
 * samples are dropped; save: dropped and their raw lines appended to HELDOUT_OUT; only:
 * nothing is emitted, held-out raw lines go to HELDOUT_OUT.
 *
 * Lease (elastic trainers): with --lease-file the range is read only while that file
 * exists and its mtime is at most --lease-seconds old (the trainer touches it at every
 * heartbeat the coordinator accepted and removes it when one is refused). Checked when
 * a range starts and before every write of the output buffer (64 KiB, whole samples):
 * once the lease is lost the buffered samples are dropped, nothing more is written and
 * the range ends "stopped", so Paddle's train_from_dataset ends early.
 *
 * STATS_OUT receives one line when the range is done (or stopped):
 *   lines samples blank malformed ignored heldout emitted stopped bad_offset...(at most 5)
 * `emitted` counts the samples written to stdout; stopped is 1 if the lease was lost, 2
 * if the input ended before END (offsets are the file's, also for a stream).
 * The Python side checks the malformed share and re-diagnoses the bad lines by offset.
 * Exit status 2 = usage or I/O error (message on stderr).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_DIGITS 20
#define HOLDOUT_MOD 10
#define MAX_BAD_OFFSETS 5

enum { HELD_ALL, HELD_SKIP, HELD_SAVE, HELD_ONLY };

static uint64_t *slot_ids;  /* --slots, in order */
static size_t nslots;
static int32_t *direct;     /* slot id -> index when every slot id < direct_size */
static uint64_t direct_size;
static uint64_t sparse_dim;
static int heldout_mode = HELD_ALL;
static const char *lease_file;
static double lease_seconds;

static void die(const char *msg, const char *arg) {
  fprintf(stderr, "ectl-slotfeed: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
  exit(2);
}

static int slot_index(uint64_t slot) {
  if (direct) return slot < direct_size ? direct[slot] : -1;
  for (size_t j = 0; j < nslots; j++)
    if (slot_ids[j] == slot) return (int)j;
  return -1;
}

static uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

/* --- lease --------------------------------------------------------------------------- */

/* 1 when the trainer's lease is gone: the file removed, or not renewed for lease_seconds
 * (then the coordinator has expired it too: it renews a lease only on a heartbeat). */
static int lease_lost(void) {
  if (!lease_file) return 0;
  struct stat st;
  if (stat(lease_file, &st) != 0) return 1;
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  double age = (double)(now.tv_sec - st.st_mtim.tv_sec) +
               (double)(now.tv_nsec - st.st_mtim.tv_nsec) / 1e9;
  return age > lease_seconds;
}

/* --- output buffer ------------------------------------------------------------------ */

#define OBUF_FLUSH (64 << 10) /* one pipe's worth: the lease is checked per write */

static char *obuf;
static size_t olen, ocap;
static uint64_t obuf_samples; /* whole samples in obuf */
static uint64_t written;      /* samples written to stdout */
static int stopped;           /* the lease was lost: write nothing more */

static void oflush(void) {
  if (!stopped && olen && lease_lost()) stopped = 1;
  if (stopped) { /* drop the buffered samples */
    olen = obuf_samples = 0;
    return;
  }
  size_t off = 0;
  while (off < olen) {
    ssize_t w = write(1, obuf + off, olen - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EPIPE) exit(0); /* the reader went away (Paddle stopped) */
      die("write to stdout failed", strerror(errno));
    }
    off += (size_t)w;
  }
  olen = 0;
  written += obuf_samples;
  obuf_samples = 0;
}

/* Room for one whole sample of at most `need` bytes: output is flushed only between
 * samples, so what reaches Paddle always ends with a whole line. */
static void ospace(size_t need) {
  if (olen && olen + need > OBUF_FLUSH) oflush();
  if (olen + need > ocap) {
    ocap = olen + need > 2 * OBUF_FLUSH ? olen + need : 2 * OBUF_FLUSH;
    obuf = realloc(obuf, ocap);
    if (!obuf) die("out of memory", NULL);
  }
}

static inline void ou64(uint64_t v) {
  char tmp[24];
  int n = 0;
  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  while (n) obuf[olen++] = tmp[--n];
}

/* --- one line ------------------------------------------------------------------------ */

typedef struct {
  uint64_t *fea;
  int32_t *slot;
  size_t cap;
} Pairs;

static Pairs pairs;
static uint32_t *counts, *starts;
static uint64_t *sorted;
static size_t sorted_cap;

static inline int is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\r'; }
static inline int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

/* Parses digits at *p (stops at a non-digit); 0 on overflow / no digit / > 20 digits. */
static inline int parse_u64(const unsigned char **p, const unsigned char *e, uint64_t *out) {
  const unsigned char *s = *p;
  uint64_t v = 0;
  int n = 0;
  while (s < e && is_digit(*s)) {
    if (++n > MAX_DIGITS) return 0;
    uint64_t d = (uint64_t)(*s - '0');
    if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, d, &v)) return 0;
    s++;
  }
  *p = s;
  *out = v;
  return n > 0;
}

enum { LINE_BLANK, LINE_BAD, LINE_OK };

/* Validates and tokenises [s, e) (no '\n'); fills pairs; returns LINE_*. */
static int parse_line(const unsigned char *s, const unsigned char *e, uint64_t *show,
                      uint64_t *click, size_t *npairs, size_t *ignored) {
  const unsigned char *p = s;
  size_t n = 0, ign = 0;
  int tok = 0;
  for (;;) {
    while (p < e && is_space(*p)) p++;
    if (p >= e) break;
    if (tok < 2) {
      uint64_t v;
      if (!parse_u64(&p, e, &v)) return LINE_BAD;
      if (p < e && !is_space(*p)) return LINE_BAD; /* ':' or another byte in show/click */
      if (tok == 0) *show = v; else *click = v;
    } else {
      uint64_t f, sl;
      if (!parse_u64(&p, e, &f)) return LINE_BAD;
      if (p >= e || *p != ':') return LINE_BAD;
      p++;
      if (!parse_u64(&p, e, &sl)) return LINE_BAD;
      if (p < e && !is_space(*p)) return LINE_BAD;
      int j = slot_index(sl);
      if (j < 0) {
        ign++;
      } else {
        if (n == pairs.cap) {
          pairs.cap = pairs.cap ? pairs.cap * 2 : 256;
          pairs.fea = realloc(pairs.fea, pairs.cap * sizeof *pairs.fea);
          pairs.slot = realloc(pairs.slot, pairs.cap * sizeof *pairs.slot);
          if (!pairs.fea || !pairs.slot) die("out of memory", NULL);
        }
        pairs.fea[n] = sparse_dim ? f % sparse_dim : f;
        pairs.slot[n] = j;
        n++;
      }
    }
    tok++;
  }
  if (tok == 0) return LINE_BLANK;
  if (tok < 2 || *click > *show) return LINE_BAD;
  *npairs = n;
  *ignored = ign;
  return LINE_OK;
}

/* --- one range ----------------------------------------------------------------------- */

typedef struct {
  uint64_t lines, samples, blank, malformed, ignored, heldout, emitted, stopped;
  uint64_t bad[MAX_BAD_OFFSETS];
  int nbad;
} Stats;

static void emit_sample(uint64_t show, uint64_t click, size_t n) {
  /* counting sort of the pairs by slot index (order within a slot kept) */
  memset(counts, 0, nslots * sizeof *counts);
  for (size_t i = 0; i < n; i++) counts[pairs.slot[i]]++;
  uint32_t acc = 0;
  for (size_t j = 0; j < nslots; j++) {
    starts[j] = acc;
    acc += counts[j];
  }
  if (n > sorted_cap) {
    sorted_cap = n * 2;
    sorted = realloc(sorted, sorted_cap * sizeof *sorted);
    if (!sorted) die("out of memory", NULL);
  }
  for (size_t i = 0; i < n; i++) sorted[starts[pairs.slot[i]]++] = pairs.fea[i];
  size_t at = 0;
  ospace(24 * nslots + n * 21 + 80);
  for (size_t j = 0; j < nslots; j++) {
    uint32_t c = counts[j];
    if (c == 0) {
      memcpy(obuf + olen, "1 0 ", 4);
      olen += 4;
      continue;
    }
    ou64(c);
    for (uint32_t k = 0; k < c; k++) {
      obuf[olen++] = ' ';
      ou64(sorted[at++]);
    }
    obuf[olen++] = ' ';
  }
  memcpy(obuf + olen, "1 ", 2);
  olen += 2;
  ou64(click);
  memcpy(obuf + olen, " 1 ", 3);
  olen += 3;
  ou64(show);
  memcpy(obuf + olen, " 1 ", 3);
  olen += 3;
  ou64(click);
  obuf[olen++] = '\n';
  obuf_samples++;
}

static int is_heldout(size_t n) {
  /* Sum per slot of mix(id + 2j + 1), then h = mix(h ^ sum_j ^ (j + 1)), slots in order:
   * elasticctr.train.elastic.heldout_mask. */
  static uint64_t *sums;
  static size_t sums_cap;
  if (sums_cap < nslots) {
    sums = realloc(sums, nslots * sizeof *sums);
    if (!sums) die("out of memory", NULL);
    sums_cap = nslots;
  }
  memset(sums, 0, nslots * sizeof *sums);
  for (size_t i = 0; i < n; i++) {
    int32_t j = pairs.slot[i];
    sums[j] += mix(pairs.fea[i] + (uint64_t)(2 * j + 1));
  }
  uint64_t h = 0;
  for (size_t j = 0; j < nslots; j++) h = mix(h ^ sums[j] ^ (uint64_t)(j + 1));
  return h % HOLDOUT_MOD == 0;
}

/* One line [p, le) at file offset `off`: counted, validated, emitted or held out. */
static void one_line(const unsigned char *p, const unsigned char *le, uint64_t off, Stats *s,
                     FILE *held) {
  uint64_t show = 0, click = 0;
  size_t n = 0, ign = 0;
  s->lines++;
  int kind = parse_line(p, le, &show, &click, &n, &ign);
  if (kind == LINE_BLANK) {
    s->blank++;
  } else if (kind == LINE_BAD) {
    s->malformed++;
    if (s->nbad < MAX_BAD_OFFSETS) s->bad[s->nbad++] = off;
  } else {
    s->samples++;
    s->ignored += ign;
    int hold = heldout_mode != HELD_ALL && is_heldout(n);
    if (hold) {
      s->heldout++;
      if (held) {
        fwrite(p, 1, (size_t)(le - p), held);
        fputc('\n', held);
      }
    } else if (heldout_mode != HELD_ONLY) {
      emit_sample(show, click, n);
    }
  }
}

/* The lines of [p, e) that begin before file offset `lim`; p is a line start at file
 * offset `off`. A last line without '\n' is read only when `eof` (else it is left for
 * more input). Returns where reading stopped; *done = 1 once a line beginning at or
 * after `lim` is reached. */
static const unsigned char *read_lines(const unsigned char *p, const unsigned char *e,
                                       uint64_t off, uint64_t lim, int eof, Stats *s,
                                       FILE *held, int *done) {
  const unsigned char *p0 = p;
  while (!stopped) {
    if (off + (uint64_t)(p - p0) >= lim) {
      *done = 1;
      break;
    }
    if (p >= e) break;
    const unsigned char *nl = memchr(p, '\n', (size_t)(e - p));
    if (!nl && !eof) break;
    const unsigned char *le = nl ? nl : e;
    one_line(p, le, off + (uint64_t)(p - p0), s, held);
    p = nl ? nl + 1 : e;
  }
  return p;
}

/* A local file, mapped. Returns 1 when it ends before `end` (end >= 0). */
static int map_range(int fd, const char *path, uint64_t b, long long end, Stats *s,
                     FILE *held) {
  struct stat st;
  if (fstat(fd, &st) != 0) die("cannot stat data file", path);
  uint64_t size = (uint64_t)st.st_size;
  uint64_t lim = (end < 0 || (uint64_t)end > size) ? size : (uint64_t)end;
  if (size > 0 && b < size) {
    const unsigned char *data = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data == MAP_FAILED) die("cannot map data file", path);
    madvise((void *)data, size, MADV_SEQUENTIAL);
    const unsigned char *e = data + size;
    const unsigned char *p = data + b;
    if (b > 0 && data[b - 1] != '\n') { /* the line containing `start` belongs to the range before */
      const unsigned char *nl = memchr(p, '\n', (size_t)(e - p));
      p = nl ? nl + 1 : e;
    }
    int done = 0;
    read_lines(p, e, (uint64_t)(p - data), lim, 1, s, held, &done);
    munmap((void *)data, size);
  }
  return end >= 0 && (uint64_t)end > size;
}

/* A stream whose first byte is the file's byte `base` (<= b - 1 when b > 0), read to its
 * end or until a line beginning at or after `end`. Returns 1 when it ends before `end`. */
static int stream_range(int fd, const char *path, uint64_t base, uint64_t b, long long end,
                        Stats *s, FILE *held) {
  if (b > 0 ? base > b - 1 : base != 0) die("BASE must be START - 1 or less (0 for START 0)", path);
  uint64_t lim = end < 0 ? UINT64_MAX : (uint64_t)end;
  size_t cap = 1 << 20, len = 0;
  unsigned char *buf = malloc(cap);
  if (!buf) die("out of memory", NULL);
  uint64_t off = base;   /* file offset of buf[0] */
  int synced = b == 0;   /* buf[0] is a line start at or after b */
  int eof = 0, done = 0;
  while (!stopped && !done) {
    if (!eof) {
      if (len == cap) {
        cap *= 2;
        buf = realloc(buf, cap);
        if (!buf) die("out of memory", NULL);
      }
      ssize_t got = read(fd, buf + len, cap - len);
      if (got < 0) {
        if (errno == EINTR) continue;
        die("read from stream failed", path);
      }
      if (got == 0) eof = 1;
      len += (size_t)got;
    }
    size_t used = 0;
    if (!synced) { /* the line beginning at b is ours only if byte b-1 ends a line */
      /* index of byte b-1, or 0 once past it: the first '\n' at or after b-1 ends it */
      uint64_t skip = off < b - 1 ? b - 1 - off : 0;
      if (len <= skip) {
        used = len;
      } else {
        unsigned char *nl = memchr(buf + skip, '\n', len - skip);
        if (nl) {
          used = (size_t)(nl + 1 - buf);
          synced = 1;
        } else {
          used = len;
        }
      }
    }
    if (synced) {
      const unsigned char *q = read_lines(buf + used, buf + len, off + used, lim, eof, s, held, &done);
      used = (size_t)(q - buf);
    }
    memmove(buf, buf + used, len - used);
    len -= used;
    off += used;
    if (eof && (len == 0 || done)) break;
  }
  free(buf);
  return !stopped && !done && end >= 0 && off < lim;
}

static void run_range(const char *path, long long start, long long end, const char *stats_out,
                      const char *held_out, long long base) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) die(base >= 0 ? "cannot open stream" : "cannot open data file", path);
  uint64_t b = start < 0 ? 0 : (uint64_t)start;
  FILE *held = NULL;
  if (heldout_mode == HELD_SAVE || heldout_mode == HELD_ONLY) {
    if (!held_out || !*held_out || strcmp(held_out, "-") == 0)
      die("--heldout save/only needs a HELDOUT_OUT path in the spec", NULL);
    held = fopen(held_out, "ab");
    if (!held) die("cannot open held-out output", held_out);
  }
  Stats s = {0};
  uint64_t written0 = written;
  int incomplete = 0;
  if (lease_lost()) stopped = 1;
  if (!stopped) {
    incomplete = base >= 0 ? stream_range(fd, path, (uint64_t)base, b, end, &s, held)
                           : map_range(fd, path, b, end, &s, held);
  }
  close(fd); /* a stream's writer sees the reader gone (EPIPE) when it stopped early */
  if (incomplete) { /* whole samples only: drop what is buffered, as for a lost lease */
    olen = obuf_samples = 0;
  }
  oflush();
  s.emitted = written - written0;
  s.stopped = stopped ? 1 : incomplete ? 2 : 0;
  if (held && fclose(held) != 0) die("cannot write held-out output", held_out);
  if (stats_out && *stats_out && strcmp(stats_out, "-") != 0) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", stats_out);
    FILE *f = fopen(tmp, "w");
    if (!f) die("cannot write stats", tmp);
    fprintf(f, "%llu %llu %llu %llu %llu %llu %llu %llu", (unsigned long long)s.lines,
            (unsigned long long)s.samples, (unsigned long long)s.blank,
            (unsigned long long)s.malformed, (unsigned long long)s.ignored,
            (unsigned long long)s.heldout, (unsigned long long)s.emitted,
            (unsigned long long)s.stopped);
    for (int i = 0; i < s.nbad; i++) fprintf(f, " %llu", (unsigned long long)s.bad[i]);
    fputc('\n', f);
    if (fclose(f) != 0 || rename(tmp, stats_out) != 0) die("cannot write stats", stats_out);
  }
}

static void parse_slots(const char *arg) {
  size_t cap = 16;
  slot_ids = malloc(cap * sizeof *slot_ids);
  const unsigned char *p = (const unsigned char *)arg, *e = p + strlen(arg);
  uint64_t max = 0;
  while (p < e) {
    uint64_t v;
    if (!parse_u64(&p, e, &v)) die("bad --slots (comma-separated slot ids)", arg);
    if (p < e && *p++ != ',') die("bad --slots (comma-separated slot ids)", arg);
    for (size_t j = 0; j < nslots; j++)
      if (slot_ids[j] == v) die("duplicate slot id in --slots", arg);
    if (nslots == cap) slot_ids = realloc(slot_ids, (cap *= 2) * sizeof *slot_ids);
    slot_ids[nslots++] = v;
    if (v > max) max = v;
  }
  if (!nslots) die("--slots is empty", NULL);
  if (max < (1u << 20)) {
    direct_size = max + 1;
    direct = malloc(direct_size * sizeof *direct);
    for (uint64_t i = 0; i < direct_size; i++) direct[i] = -1;
    for (size_t j = 0; j < nslots; j++) direct[slot_ids[j]] = (int32_t)j;
  }
  counts = malloc(nslots * sizeof *counts);
  starts = malloc(nslots * sizeof *starts);
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (i + 1 >= argc) die("missing value for", a);
    const char *v = argv[++i];
    if (strcmp(a, "--slots") == 0) {
      parse_slots(v);
    } else if (strcmp(a, "--sparse-dim") == 0) {
      const unsigned char *p = (const unsigned char *)v;
      if (!parse_u64(&p, p + strlen(v), &sparse_dim) || *p) die("bad --sparse-dim", v);
    } else if (strcmp(a, "--lease-file") == 0) {
      lease_file = v;
    } else if (strcmp(a, "--lease-seconds") == 0) {
      char *x;
      errno = 0;
      lease_seconds = strtod(v, &x);
      if (*x || errno || !(lease_seconds > 0)) die("bad --lease-seconds (> 0)", v);
    } else if (strcmp(a, "--heldout") == 0) {
      if (strcmp(v, "all") == 0) heldout_mode = HELD_ALL;
      else if (strcmp(v, "skip") == 0) heldout_mode = HELD_SKIP;
      else if (strcmp(v, "save") == 0) heldout_mode = HELD_SAVE;
      else if (strcmp(v, "only") == 0) heldout_mode = HELD_ONLY;
      else die("--heldout must be all, skip, save or only", v);
    } else {
      die("unknown argument", a);
    }
  }
  if (!nslots) die("usage: ectl-slotfeed --slots 0,1,... [--sparse-dim N] [--heldout MODE]", NULL);
  if (lease_file && !(lease_seconds > 0)) die("--lease-file needs --lease-seconds", NULL);
  char *line = NULL;
  size_t cap = 0;
  ssize_t got;
  int ranges = 0;
  while ((got = getline(&line, &cap, stdin)) > 0) {
    while (got && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = 0;
    if (!got) continue;
    char *f[6] = {0};
    int nf = 0;
    for (char *tok = strtok(line, "\t"); tok && nf < 6; tok = strtok(NULL, "\t")) f[nf++] = tok;
    if (nf < 3)
      die("spec line must be PATH<TAB>START<TAB>END[<TAB>STATS[<TAB>HELDOUT[<TAB>BASE]]]", line);
    char *x;
    errno = 0;
    long long start = strtoll(f[1], &x, 10);
    if (*x || errno) die("bad START", f[1]);
    long long end = strtoll(f[2], &x, 10);
    if (*x || errno) die("bad END", f[2]);
    long long base = -1;
    if (nf > 5) {
      base = strtoll(f[5], &x, 10);
      if (*x || errno || base < 0) die("bad BASE", f[5]);
    }
    run_range(f[0], start, end, nf > 3 ? f[3] : NULL, nf > 4 ? f[4] : NULL, base);
    ranges++;
  }
  free(line);
  return ranges ? 0 : (fprintf(stderr, "ectl-slotfeed: no range spec on stdin\n"), 2);
}
