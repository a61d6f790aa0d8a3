/* libFuzzer target: the files that `kiln check` and `kiln run --output-dir` read and
 * write (tools/cmd_check.c, tools/cmd_run.c, tools/cli_io.c) in a folder a hostile user
 * filled. One input describes a small tree; the target makes it under a fresh root,
 * beside folders of its own that the commands must never reach ("outside"), runs
 * `kiln check` on folders of the tree and `kiln run --output-dir` into it in-process
 * (the commands' library, kiln_cli), and checks that nothing outside the root was read
 * or written.
 *
 * The process's temporary folder BASE ($TMPDIR or /tmp, kiln_fuzz_cli.PID.XXXXXX,
 * removed at exit; one left by a process that died is removed by the next) holds
 *
 *   BASE/root/           the tree of one input, made afresh for each input
 *   BASE/out/            what links may point at: model.onnx (a valid model whose
 *                        output is named OUTSIDE_SENTINEL_y), input_0.pb, output_0.pb,
 *                        test_data_set_0/ (those two), case/ (a whole passing test
 *                        case: model.onnx and test_data_set_0/) and victim (text)
 *   BASE/hard/victim     what hard links point at (the bytes of %model, below)
 *   BASE/abs/etc/passwd  a copy of /etc/passwd: links to /etc/passwd lead here when
 *                        this process could write the real one (as root)
 *
 * An input is a list of records, each a header line and, for a file, its bytes:
 *
 *   @@f PATH\n<bytes>        a regular file; its bytes run to the next "\n@@" or the
 *                            end. Bytes that are exactly the name of a built-in file
 *                            (%model, %input, ...: below) stand for it
 *   @@d PATH                 a folder
 *   @@l PATH TARGET          a symbolic link to TARGET, where $OUT, $HARD, $BASE,
 *                            $ROOT and $VICTIM stand for those absolute paths
 *   @@h PATH TARGET          a hard link to $VICTIM (BASE/hard/victim) or to an entry
 *                            of the tree (PATH syntax)
 *   @@p PATH                 a FIFO
 *   @@check DIR              a folder for `kiln check` (at most 4, checked by one
 *                            command; none: the root)
 *   @@run MODEL OUTDIR [pb]  `kiln run MODEL --output-dir OUTDIR [--format pb]` (at
 *                            most 2; none: model.onnx into the root)
 *
 * In every word of a header %HH is any byte but NUL (a space, a newline, a '%').
 * PATH, DIR, MODEL and OUTDIR are relative to the root, '/' separating components:
 * no empty, "." or ".." component and at most 8 of them (DIR and OUTDIR may also be
 * "."); TARGET is taken as it is. Missing parent folders are made. A record whose entry exists already, or
 * whose parent is not a folder, is skipped: the target follows no link while it makes
 * the tree. Any other line is ignored, so are records past MAX_RECORDS.
 *
 * Built-in files: %model is an ONNX model, input x float32[2,3], output y = x + 1;
 * %model2 has inputs x and w and outputs "a/b" = x + w and "a_b" = Relu(x), whose
 * files collide under --output-dir; %input is an input_0.pb (x = 0..5, named "x"), %w
 * the same named "w"; %output is y for %input (so %model, %input and %output make a
 * passing case), %sum is "a/b" for %input and %w (%input is "a_b"); %wrong is y off by
 * one; %npy is x as a .npy file.
 *
 * What the commands are given: only names inside the root. A DIR or MODEL is used when
 * it resolves (links followed) inside the root, an OUTDIR when it does or when it does
 * not exist and its parent does; so whatever is read or written outside the root was
 * reached through something the tree holds. Options: --threads 1, -O2, 1 MiB per
 * tensor, 64 MiB of memory, 10^7 steps per node.
 *
 * Oracles, besides the sanitizers, leaks and libFuzzer's timeout:
 *   - a watchdog thread: the commands on one input end within DEADLINE_S (a FIFO
 *     opened without O_NONBLOCK waits for a writer for ever);
 *   - inotify: no file or folder under BASE/out or BASE/abs is opened, read, written,
 *     made or removed; BASE/hard/victim is not written (it may be read: a hard link in
 *     the tree is the tree's own file); nothing is made in BASE but the root;
 *   - every file and folder under BASE/out, BASE/hard and BASE/abs is as it was:
 *     contents, size, mode and mtime; BASE holds out, hard, abs and root only;
 *   - nothing the commands print contains OUTSIDE_SENTINEL (inputs that hold it are
 *     refused), so no outside model was loaded and no outside output named;
 *   - `kiln check` ends with "P passed, F failed", P + F the folders it was given,
 *     and exits 1 exactly when F > 0; the commands exit 0, 1 or 2.
 *
 * Links: a link whose target resolves outside BASE is removed once the tree is made,
 * unless it resolves to /proc/PID (the process's own folder), one of its files
 * cmdline, environ or status, /dev/null, /dev/zero, or /etc/passwd where this process
 * cannot write it. A dangling link stays only when its target's folder resolves inside
 * BASE. So a command that wrongly followed a link when writing could damage only the
 * sentinels, never the system (the tests run as root on some machines).
 *
 * The commands print to memfds (stdout and stderr swapped for them, then restored);
 * with KILN_FUZZ_VERBOSE=1 in the environment the target shows what they printed.
 */
#include "cli.h"
#include "export/onnx_export.h"
#include "import/fileio.h"
#include "import/tensorfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_RECORDS 64
#define MAX_DEPTH 8
#define MAX_CHECKS 4
#define MAX_RUNS 2
#define MAX_ARG 1024
#define MAX_SNAP 64
#define MARKER "OUTSIDE_SENTINEL"
/* The commands' time on one input before the watchdog calls it a hang: under the
 * tests' 20 s timeout, whose alarm (at 11 s) interrupts a blocked open() with EINTR,
 * so that a FIFO opened without O_NONBLOCK would end in an error, not a timeout. */
#define DEADLINE_S 10

typedef struct record {
  char type[8];
  char a[MAX_ARG], b[MAX_ARG], c[MAX_ARG]; /* the header's words, %HH decoded */
  const uint8_t *data;
  size_t len;
} record;

typedef struct blob {
  const char *name;
  void *data;
  size_t len;
} blob;

/* What a file or folder outside the root was before the commands ran. */
typedef struct snap {
  char path[PATH_MAX];
  mode_t mode;
  off_t size;
  struct timespec mtime;
  uint64_t hash; /* of a file's bytes */
} snap;

static char base[PATH_MAX], root[PATH_MAX], out_dir[PATH_MAX], hard_dir[PATH_MAX],
    abs_dir[PATH_MAX], victim[PATH_MAX], passwd[PATH_MAX];
static blob blobs[8];
static snap before[MAX_SNAP];
static int n_before;
static int ino = -1;
static struct {
  int wd;
  char path[PATH_MAX];
} watches[MAX_SNAP];
static int n_watches;
static FILE *cap_out, *cap_err;
static bool verbose;
static char proc_self[64]; /* "/proc/PID" */

/* ---- small helpers ---- */

/* A finding, or the target itself cannot go on: the message, then a trap. To file
 * descriptor 2, not stderr, which may be a memfd while a command runs. */
static _Noreturn void finding(const char *fmt, const char *arg) {
  dprintf(STDERR_FILENO, "fuzz_cli: ");
  dprintf(STDERR_FILENO, fmt, arg);
  dprintf(STDERR_FILENO, "\n");
  __builtin_trap();
}

static uint64_t hash_bytes(const uint8_t *p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

static void path_join(char *buf, const char *dir, const char *name) {
  if ((size_t)snprintf(buf, PATH_MAX, "%s/%s", dir, name) >= PATH_MAX)
    finding("path too long: %s", name);
}

static void write_file(const char *path, const void *data, size_t len) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  bool ok = fd >= 0 && write(fd, data, len) == (ssize_t)len;
  if (fd < 0 || close(fd) != 0 || !ok) finding("cannot write %s", path);
}

static void make_dir(const char *path) {
  if (mkdir(path, 0755) != 0) finding("cannot make the folder %s", path);
}

/* Whether path is dir or lies under it (both resolved). */
static bool under(const char *dir, const char *path) {
  size_t n = strlen(dir);
  return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

static bool resolves_inside(const char *path) {
  char *real = realpath(path, NULL);
  bool in = real && under(root, real);
  free(real);
  return in;
}

/* ---- the built-in files and the sentinels outside the root ---- */

/* An ONNX model: input x float32[2,3] and out1 = x + 1; with two: input w too, out1 =
 * x + w and out2 = Relu(x). */
static blob make_model(const char *name, const char *out1, const char *out2) {
  kl_err e = {0};
  kl_graph *g = kl_graph_new();
  int64_t dims[2] = {2, 3}, one = 1;
  float *c = out2 ? NULL : malloc(sizeof *c); /* the graph owns it once added */
  if (!g || (!out2 && !c)) finding("out of memory making %s", name);
  int x = kl_graph_add_value(g, "x", &e), w;
  if (out2) {
    w = kl_graph_add_value(g, "w", &e);
  } else {
    *c = 1;
    w = kl_graph_add_const(g, "c", KL_F32, 1, &one, c, sizeof *c, false, &e);
  }
  int y = kl_graph_add_value(g, out1, &e), z = out2 ? kl_graph_add_value(g, out2, &e) : 0;
  blob b = {name, NULL, 0};
  if (x >= 0 && w >= 0 && y >= 0 && z >= 0) {
    for (int v = 0; v < (out2 ? 2 : 1); v++) { /* the inputs' types */
      g->values[v ? w : x].type.dtype = KL_F32;
      kl_type_set_shape(&g->values[v ? w : x].type, 2, dims);
    }
    int in[2] = {x, w};
    if (kl_graph_add_node(g, KL_OP_Add, "add", 2, in, 1, &y, &e) >= 0 &&
        kl_graph_add_input(g, x, &e) == KILN_OK &&
        (!out2 || (kl_graph_add_node(g, KL_OP_Relu, "relu", 1, &x, 1, &z, &e) >= 0 &&
                   kl_graph_add_input(g, w, &e) == KILN_OK)) &&
        kl_graph_add_output(g, y, &e) == KILN_OK &&
        (!out2 || kl_graph_add_output(g, z, &e) == KILN_OK) && kl_graph_infer(g, &e) == KILN_OK)
      kl_onnx_export(g, &b.data, &b.len, &e);
  }
  kl_graph_free(g);
  if (e.code != KILN_OK) finding("cannot make a model: %s", e.msg);
  return b;
}

/* float32[2,3] holding first, first + step, ...; as a .pb named name (NULL: .npy). */
static void write_tensor(const char *path, const char *name, float first, float step) {
  float v[6];
  for (int i = 0; i < 6; i++) v[i] = first + step * (float)i;
  kl_tensor t = {.dtype = KL_F32, .rank = 2, .dims = {2, 3}, .data = v};
  kl_err e = {0};
  if ((name ? kl_tensorpb_write(path, &t, name, &e) : kl_npy_write(path, &t, &e)) != KILN_OK)
    finding("cannot write a tensor: %s", e.msg);
}

static blob tensor_blob(const char *blob_name, const char *name, float first, float step) {
  char path[PATH_MAX];
  path_join(path, base, "scratch");
  write_tensor(path, name, first, step);
  blob b = {blob_name, NULL, 0};
  kl_err e = {0};
  if (kl_file_read(path, 1 << 20, &b.data, &b.len, &e) != KILN_OK || unlink(path) != 0)
    finding("cannot read back %s", path);
  return b;
}

/* dir/model.onnx (the outside model) and dir/test_data_set_0 with its input and
 * output: a test case that passes. */
static void write_outside_case(const char *dir, const blob *model) {
  char path[PATH_MAX], set[PATH_MAX];
  path_join(path, dir, "model.onnx");
  write_file(path, model->data, model->len);
  path_join(set, dir, "test_data_set_0");
  make_dir(set);
  path_join(path, set, "input_0.pb");
  write_tensor(path, "x", 10, 1);
  path_join(path, set, "output_0.pb");
  write_tensor(path, MARKER "_y", 11, 1);
}

static void make_outside(void) {
  char path[PATH_MAX];
  blobs[0] = make_model("%model", "y", NULL);
  blobs[1] = make_model("%model2", "a/b", "a_b");
  blobs[2] = tensor_blob("%input", "x", 0, 1);
  blobs[3] = tensor_blob("%w", "w", 0, 1);
  blobs[4] = tensor_blob("%output", "y", 1, 1);
  blobs[5] = tensor_blob("%sum", "a/b", 0, 2);
  blobs[6] = tensor_blob("%wrong", "y", 2, 1);
  blobs[7] = tensor_blob("%npy", NULL, 0, 1);
  blob sentinel = make_model("outside", MARKER "_y", NULL);
  make_dir(out_dir);
  write_outside_case(out_dir, &sentinel);
  path_join(path, out_dir, "input_0.pb");
  write_tensor(path, "x", 10, 1);
  path_join(path, out_dir, "output_0.pb");
  write_tensor(path, MARKER "_y", 11, 1);
  path_join(path, out_dir, "case");
  make_dir(path);
  write_outside_case(path, &sentinel);
  free(sentinel.data);
  path_join(path, out_dir, "victim");
  write_file(path, "keep\n", 5);
  make_dir(hard_dir);
  write_file(victim, blobs[0].data, blobs[0].len);
  /* a stand-in for /etc/passwd where this process could write the real one */
  make_dir(abs_dir);
  path_join(path, abs_dir, "etc");
  make_dir(path);
  void *pw = NULL;
  size_t pw_len = 0;
  kl_err e = {0};
  if (kl_file_read("/etc/passwd", 1 << 20, &pw, &pw_len, &e) != KILN_OK) {
    pw = strdup("root:x:0:0:root:/root:/bin/sh\n");
    pw_len = pw ? strlen(pw) : 0;
  }
  path_join(passwd, path, "passwd");
  write_file(passwd, pw, pw_len);
  free(pw);
  if (access("/etc/passwd", W_OK) != 0) snprintf(passwd, sizeof passwd, "/etc/passwd");
}

/* ---- the oracles outside the root: snapshots and inotify ---- */

static snap *walk_into;
static int walk_n;

static int snap_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)ftw;
  if (walk_n == MAX_SNAP) finding("more than MAX_SNAP entries outside the root at %s", path);
  snap *s = &walk_into[walk_n++];
  memset(s, 0, sizeof *s);
  snprintf(s->path, sizeof s->path, "%s", path);
  s->mode = sb->st_mode;
  s->size = sb->st_size;
  s->mtime = sb->st_mtim;
  if (flag == FTW_F && S_ISREG(sb->st_mode)) {
    void *data = NULL;
    size_t len = 0;
    kl_err e = {0};
    if (kl_file_read(path, 1 << 20, &data, &len, &e) != KILN_OK)
      finding("cannot read the sentinel %s", path);
    s->hash = hash_bytes(data, len);
    free(data);
  }
  return 0;
}

static int cmp_snap(const void *a, const void *b) {
  return strcmp(((const snap *)a)->path, ((const snap *)b)->path);
}

/* Everything under BASE/out, BASE/hard and BASE/abs, sorted by path; the count. */
static int take_snapshot(snap *into) {
  const char *dirs[] = {out_dir, hard_dir, abs_dir};
  walk_into = into;
  walk_n = 0;
  for (int i = 0; i < 3; i++)
    if (nftw(dirs[i], snap_one, 16, FTW_PHYS) != 0) finding("cannot walk %s", dirs[i]);
  qsort(into, (size_t)walk_n, sizeof *into, cmp_snap);
  return walk_n;
}

static void check_snapshot(void) {
  static snap now[MAX_SNAP];
  int n = take_snapshot(now);
  for (int i = 0; i < n || i < n_before; i++) {
    const snap *a = i < n_before ? &before[i] : NULL, *b = i < n ? &now[i] : NULL;
    if (!a || !b || strcmp(a->path, b->path) != 0)
      finding("an entry outside the root was made or removed: %s", (a ? a : b)->path);
    if (a->mode != b->mode || a->size != b->size || a->hash != b->hash ||
        a->mtime.tv_sec != b->mtime.tv_sec || a->mtime.tv_nsec != b->mtime.tv_nsec)
      finding("a sentinel outside the root changed (contents, size, mode or mtime): %s",
              a->path);
  }
  DIR *d = opendir(base);
  if (!d) finding("cannot list %s", base);
  struct dirent *ent;
  while ((ent = readdir(d))) {
    const char *n = ent->d_name;
    if (strcmp(n, ".") && strcmp(n, "..") && strcmp(n, "root") && strcmp(n, "out") &&
        strcmp(n, "hard") && strcmp(n, "abs"))
      finding("a new entry beside the root: %s", n);
  }
  closedir(d);
}

#define WATCH_ALL                                                                        \
  (IN_ACCESS | IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_OPEN | IN_MOVED_FROM |         \
   IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF)
#define WATCH_NAMES (IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF)
/* A hard link in the tree is the tree's file: it may be read, and linking it changes the
 * victim's link count (IN_ATTRIB), but it must never be written. */
#define WATCH_VICTIM (IN_MODIFY | IN_CLOSE_WRITE | IN_DELETE_SELF | IN_MOVE_SELF)

static void watch(const char *path, uint32_t mask) {
  if (ino < 0 || n_watches == MAX_SNAP) return;
  int wd = inotify_add_watch(ino, path, mask | IN_DONT_FOLLOW);
  if (wd < 0) finding("cannot watch %s", path);
  watches[n_watches].wd = wd;
  snprintf(watches[n_watches++].path, PATH_MAX, "%s", path);
}

static void watch_all(void) {
  ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (ino < 0) {
    fprintf(stderr, "fuzz_cli: no inotify (%s): reads outside the root are not seen, only "
            "changes\n", strerror(errno));
    return;
  }
  watch(base, WATCH_NAMES);
  watch(hard_dir, WATCH_NAMES);
  watch(victim, WATCH_VICTIM);
  for (int i = 0; i < n_before; i++)
    if (under(out_dir, before[i].path) || under(abs_dir, before[i].path))
      watch(before[i].path, WATCH_ALL);
}

/* The events since the last call: reported as a finding when report, else dropped. */
static void read_events(bool report) {
  _Alignas(struct inotify_event) char buf[8192];
  ssize_t got;
  while (ino >= 0 && (got = read(ino, buf, sizeof buf)) > 0) {
    for (char *p = buf; p < buf + got;) {
      const struct inotify_event *ev = (const struct inotify_event *)p;
      p += sizeof *ev + ev->len;
      const char *name = ev->len ? ev->name : "";
      const char *where = "?";
      for (int i = 0; i < n_watches; i++)
        if (watches[i].wd == ev->wd) where = watches[i].path;
      if (!report || (strcmp(where, base) == 0 && strcmp(name, "root") == 0)) continue;
      char what[PATH_MAX + 300];
      snprintf(what, sizeof what, "%s%s%s (inotify mask 0x%x%s%s)", where, *name ? "/" : "",
               name, (unsigned)ev->mask, ev->mask & (IN_OPEN | IN_ACCESS) ? ", read" : "",
               ev->mask & (IN_MODIFY | IN_CLOSE_WRITE | IN_CREATE) ? ", written" : "");
      finding("something outside the root was touched: %s", what);
    }
  }
}

/* ---- one input: its records ---- */

static int hex(uint8_t c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* A header word, %HH decoded, into out (MAX_ARG bytes); false when too long or when
 * it decodes to a NUL. */
static bool decode(const uint8_t *p, size_t n, char *out) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++, k++) {
    if (k + 1 == MAX_ARG) return false;
    int hi = i + 2 < n && p[i] == '%' ? hex(p[i + 1]) : -1, lo = hi >= 0 ? hex(p[i + 2]) : -1;
    out[k] = lo >= 0 ? (char)(hi * 16 + lo) : (char)p[i];
    if (lo >= 0) i += 2;
    if (!out[k]) return false;
  }
  out[k] = '\0';
  return true;
}

/* The index of the '\n' of the first "\n@@" at or after from, or n. */
static size_t next_header(const uint8_t *p, size_t n, size_t from) {
  for (size_t j = from; j + 2 < n; j++)
    if (p[j] == '\n' && p[j + 1] == '@' && p[j + 2] == '@') return j;
  return n;
}

/* The header line h (after "@@") into r; false when malformed. */
static bool parse_header(const uint8_t *h, size_t n, record *r) {
  char *words[4] = {r->type, r->a, r->b, r->c};
  memset(r->type, 0, sizeof r->type);
  r->a[0] = r->b[0] = r->c[0] = '\0';
  int w = 0;
  for (size_t i = 0; i <= n && w < 4;) {
    size_t j = i;
    while (j < n && h[j] != ' ') j++;
    if (w == 0 ? j - i >= sizeof r->type || j == i : !decode(h + i, j - i, words[w]))
      return false;
    if (w == 0) memcpy(r->type, h + i, j - i);
    w++;
    i = j + 1;
  }
  return true;
}

/* The records of an input into r; their count, or -1 when a header word decodes to
 * something holding the marker. */
static int parse(const uint8_t *p, size_t n, record *r) {
  int count = 0;
  size_t i = n >= 2 && p[0] == '@' && p[1] == '@' ? 0 : next_header(p, n, 0) + 1;
  while (i + 2 <= n && count < MAX_RECORDS) {
    size_t eol = i + 2;
    while (eol < n && p[eol] != '\n') eol++;
    size_t end = next_header(p, n, eol);
    record *rec = &r[count];
    if (parse_header(p + i + 2, eol - i - 2, rec)) {
      if (strstr(rec->a, MARKER) || strstr(rec->b, MARKER) || strstr(rec->c, MARKER))
        return -1;
      rec->data = eol < end ? p + eol + 1 : p + end;
      rec->len = eol < end ? end - eol - 1 : 0;
      count++;
    }
    i = end + 1;
  }
  return count;
}

/* ---- one input: its tree ---- */

/* Whether p is a PATH: 1 to MAX_DEPTH components, none empty, "." or "..". */
static bool path_ok(const char *p) {
  for (int depth = 1; depth <= MAX_DEPTH; depth++) {
    const char *slash = strchr(p, '/');
    size_t len = slash ? (size_t)(slash - p) : strlen(p);
    if (len == 0 || (p[0] == '.' && (len == 1 || (len == 2 && p[1] == '.')))) return false;
    if (!slash) return true;
    p = slash + 1;
  }
  return false;
}

/* The folder of the tree that holds path's last component, opened without following
 * a link, missing folders made when make; *name gets the last component. -1 when path
 * is not a PATH or a folder on the way is not one. */
static int open_parent(const char *path, bool make, const char **name) {
  char buf[MAX_ARG];
  snprintf(buf, sizeof buf, "%s", path);
  int fd = path_ok(path) ? open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
  char *s = buf, *slash;
  while (fd >= 0 && (slash = strchr(s, '/'))) {
    *slash = '\0';
    if (make) mkdirat(fd, s, 0755);
    int sub = openat(fd, s, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    close(fd);
    fd = sub;
    s = slash + 1;
  }
  *name = path + (s - buf);
  return fd;
}

/* TARGET with $OUT, $HARD, $BASE, $ROOT and $VICTIM replaced, and /etc/passwd by its
 * stand-in where this process could write it. */
static void expand_target(const char *t, char *out) {
  static const struct {
    const char *token;
    const char *path;
  } tokens[] = {{"$OUT", out_dir}, {"$HARD", hard_dir}, {"$BASE", base}, {"$ROOT", root},
                {"$VICTIM", victim}};
  size_t k = 0;
  if (strcmp(t, "/etc/passwd") == 0) t = passwd;
  while (*t && k + 1 < PATH_MAX) {
    size_t i = 0, len = 0;
    for (; i < sizeof tokens / sizeof tokens[0]; i++)
      if (strncmp(t, tokens[i].token, len = strlen(tokens[i].token)) == 0) break;
    const char *put = i < sizeof tokens / sizeof tokens[0] ? tokens[i].path : NULL;
    if (put) {
      k += (size_t)snprintf(out + k, PATH_MAX - k, "%s", put);
      t += len;
    } else {
      out[k++] = *t++;
    }
  }
  out[k < PATH_MAX ? k : PATH_MAX - 1] = '\0';
}

static const blob *find_blob(const uint8_t *data, size_t len) {
  for (size_t i = 0; i < sizeof blobs / sizeof blobs[0]; i++)
    if (len == strlen(blobs[i].name) && memcmp(data, blobs[i].name, len) == 0)
      return &blobs[i];
  return NULL;
}

static void make_entry(const record *r) {
  const char *name;
  int dir = open_parent(r->a, true, &name);
  if (dir < 0) return;
  if (strcmp(r->type, "f") == 0) {
    const blob *b = find_blob(r->data, r->len);
    int fd = openat(dir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0) {
      if (write(fd, b ? b->data : r->data, b ? b->len : r->len) < 0)
        finding("cannot write %s", r->a);
      close(fd);
    }
  } else if (strcmp(r->type, "d") == 0) {
    mkdirat(dir, name, 0755);
  } else if (strcmp(r->type, "l") == 0 && r->b[0]) {
    char target[PATH_MAX];
    expand_target(r->b, target);
    symlinkat(target, dir, name);
  } else if (strcmp(r->type, "h") == 0 && strcmp(r->b, "$VICTIM") == 0) {
    linkat(AT_FDCWD, victim, dir, name, 0);
  } else if (strcmp(r->type, "h") == 0) {
    const char *from;
    int src = open_parent(r->b, false, &from);
    if (src >= 0) {
      linkat(src, from, dir, name, 0); /* a link is linked, not followed */
      close(src);
    }
  } else if (strcmp(r->type, "p") == 0) {
    mkfifoat(dir, name, 0644);
  }
  close(dir);
}

/* Where a link may lead outside BASE: the process's own /proc folder and a few of its
 * files, the null and zero devices, and /etc/passwd where this process cannot write
 * it. Nothing a wrong write through the link could damage. */
static bool safe_outside(const char *real) {
  size_t n = strlen(proc_self);
  if (strncmp(real, proc_self, n) == 0 &&
      (!real[n] || strcmp(real + n, "/cmdline") == 0 || strcmp(real + n, "/environ") == 0 ||
       strcmp(real + n, "/status") == 0))
    return true;
  return strcmp(real, "/dev/null") == 0 || strcmp(real, "/dev/zero") == 0 ||
         (strcmp(real, "/etc/passwd") == 0 && access(real, W_OK) != 0);
}

static bool link_allowed(const char *path) {
  char *real = realpath(path, NULL);
  if (real || errno == ELOOP) {
    bool ok = !real || under(base, real) || safe_outside(real);
    free(real);
    return ok;
  }
  /* dangling: what a write through it would make must be in BASE */
  char target[PATH_MAX], where[2 * PATH_MAX];
  ssize_t n = readlink(path, target, sizeof target - 1);
  if (n <= 0) return false;
  target[n] = '\0';
  if (target[0] == '/') {
    snprintf(where, sizeof where, "%s", target);
  } else {
    snprintf(where, sizeof where, "%s", path);
    snprintf(strrchr(where, '/') + 1, PATH_MAX, "%s", target);
  }
  *strrchr(where, '/') = '\0';
  real = realpath(*where ? where : "/", NULL);
  bool ok = real && under(base, real);
  free(real);
  return ok;
}

static int prune_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)ftw;
  if ((flag == FTW_SL || flag == FTW_SLN) && !link_allowed(path) && unlink(path) != 0)
    finding("cannot remove the link %s", path);
  return 0;
}

static int remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  if (remove(path) != 0) finding("cannot remove %s", path);
  return 0;
}

static void remove_tree(const char *dir) {
  if (nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS) != 0) finding("cannot remove %s", dir);
}

static void remove_base(void) { remove_tree(base); }

/* ---- the commands ---- */

static FILE *capture(const char *name) {
  int fd = memfd_create(name, MFD_CLOEXEC);
  FILE *f = fd >= 0 ? fdopen(fd, "w+") : NULL;
  if (!f) finding("cannot make the memfd %s", name);
  return f;
}

/* What f holds since it was last emptied, NUL-terminated and malloc'd; f emptied. */
static char *take(FILE *f) {
  fflush(f);
  long n = ftell(f);
  char *text = malloc((size_t)(n > 0 ? n : 0) + 1);
  if (!text) finding("out of memory for %s", "the output");
  ssize_t got = n > 0 ? pread(fileno(f), text, (size_t)n, 0) : 0;
  text[got > 0 ? got : 0] = '\0';
  rewind(f);
  if (ftruncate(fileno(f), 0) != 0) finding("cannot empty the %s memfd", "output");
  return text;
}

/* cmd(argv) with its stdout and stderr in the memfds; its exit code. What it printed
 * must not name the outside model. */
static int run_cli(int (*cmd)(int, char **), int argc, char **argv, char **printed) {
  FILE *so = stdout, *se = stderr;
  stdout = cap_out;
  stderr = cap_err;
  int rc = cmd(argc, argv);
  stdout = so;
  stderr = se;
  char *err = take(cap_err);
  *printed = take(cap_out);
  if (verbose) fprintf(stderr, "kiln %s: exit %d\n%s%s", argv[0], rc, *printed, err);
  if (rc < 0 || rc > 2) finding("kiln %s: an exit code other than 0, 1, 2", argv[0]);
  if (strstr(*printed, MARKER) || strstr(err, MARKER))
    finding("kiln %s printed the outside model's name: something outside was read",
            argv[0]);
  free(err);
  return rc;
}

/* argv: the command, then the options every run gets, then room for the rest. */
static int common_args(char **argv, const char *cmd) {
  static const char *const opts[] = {"--threads", "1", "--max-tensor-bytes", "1048576",
                                     "--memory-limit", "67108864", "--max-work", "10000000"};
  argv[0] = (char *)cmd;
  for (int i = 0; i < 8; i++) argv[1 + i] = (char *)opts[i];
  return 9;
}

/* DIR, MODEL or OUTDIR (a PATH, or "." for DIR and OUTDIR) joined to the root. */
static bool tree_path(const char *rel, bool dot, char *full) {
  if (dot && strcmp(rel, ".") == 0) {
    snprintf(full, PATH_MAX, "%s", root);
    return true;
  }
  return path_ok(rel) && (size_t)snprintf(full, PATH_MAX, "%s/%s", root, rel) < PATH_MAX;
}

/* `kiln check` over the DIRs that resolve inside the root (none asked: the root). Its
 * last line must count them, and its exit code say whether one failed. */
static void run_check(const record *r, int n) {
  static char dirs[MAX_CHECKS][PATH_MAX];
  char *argv[16], *printed;
  int argc = common_args(argv, "check"), n_dirs = 0;
  bool asked = false;
  for (int i = 0; i < n; i++) {
    if (strcmp(r[i].type, "check") != 0) continue;
    asked = true;
    if (n_dirs < MAX_CHECKS && tree_path(r[i].a, true, dirs[n_dirs]) &&
        resolves_inside(dirs[n_dirs])) {
      argv[argc + n_dirs] = dirs[n_dirs];
      n_dirs++;
    }
  }
  if (!asked && tree_path(".", true, dirs[0])) argv[argc + n_dirs++] = dirs[0];
  if (n_dirs == 0) return;
  int rc = run_cli(cmd_check, argc + n_dirs, argv, &printed);
  const char *last = printed;
  for (const char *p = printed; *p; p++)
    if (*p == '\n' && p[1]) last = p + 1;
  int passed, failed;
  if (sscanf(last, "%d passed, %d failed", &passed, &failed) != 2 ||
      passed + failed != n_dirs || (rc != EXIT_OK && rc != EXIT_FAIL) ||
      (failed > 0) != (rc == EXIT_FAIL))
    finding("kiln check: its last line does not count its folders, or its exit code "
            "disagrees: %s", last);
  free(printed);
}

/* `kiln run MODEL --output-dir OUTDIR`, when MODEL resolves inside the root or is not
 * there at all, and OUTDIR resolves inside it or is not there and its parent does. */
static void run_one(const record *r) {
  static char model[PATH_MAX], out[PATH_MAX];
  char parent[PATH_MAX], *argv[16], *printed;
  struct stat sb;
  if (!tree_path(r->a, false, model) || !tree_path(r->b, true, out)) return;
  snprintf(parent, sizeof parent, "%s", out);
  *strrchr(parent, '/') = '\0';
  bool model_ok = resolves_inside(model) || (lstat(model, &sb) != 0 && errno == ENOENT);
  bool out_ok = resolves_inside(out) ||
                (lstat(out, &sb) != 0 && errno == ENOENT && resolves_inside(parent));
  if (!model_ok || !out_ok) return;
  int argc = common_args(argv, "run");
  argv[argc++] = model;
  argv[argc++] = "--output-dir";
  argv[argc++] = out;
  if (strcmp(r->c, "pb") == 0) {
    argv[argc++] = "--format";
    argv[argc++] = "pb";
  }
  run_cli(cmd_run, argc, argv, &printed);
  free(printed);
}

static void run_runs(const record *r, int n) {
  static const record default_run = {.type = "run", .a = "model.onnx", .b = "."};
  int n_runs = 0;
  for (int i = 0; i < n; i++)
    if (strcmp(r[i].type, "run") == 0 && n_runs++ < MAX_RUNS) run_one(&r[i]);
  if (n_runs == 0) run_one(&default_run);
}

/* ---- the watchdog ---- */

static pthread_mutex_t dog_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t dog_cv = PTHREAD_COND_INITIALIZER;
static struct timespec dog_deadline;
static bool dog_armed;

static void *watchdog(void *arg) {
  (void)arg;
  pthread_mutex_lock(&dog_mu);
  for (;;) {
    if (!dog_armed) {
      pthread_cond_wait(&dog_cv, &dog_mu);
    } else if (pthread_cond_timedwait(&dog_cv, &dog_mu, &dog_deadline) == ETIMEDOUT &&
               dog_armed) {
      dprintf(STDERR_FILENO, "fuzz_cli: the commands ran for %d s: a call that waits for "
              "ever (a FIFO opened without O_NONBLOCK?) or a loop that never ends\n",
              DEADLINE_S);
      abort(); /* libFuzzer's deadly-signal handler saves the input */
    }
  }
  return NULL;
}

static void arm(bool on) {
  pthread_mutex_lock(&dog_mu);
  clock_gettime(CLOCK_REALTIME, &dog_deadline);
  dog_deadline.tv_sec += DEADLINE_S;
  dog_armed = on;
  pthread_cond_signal(&dog_cv);
  pthread_mutex_unlock(&dog_mu);
}

static void start_watchdog(void) {
  /* every signal blocked in the thread: libFuzzer's alarm must reach the fuzzing one */
  sigset_t all, old;
  pthread_t t;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  if (pthread_create(&t, NULL, watchdog, NULL) != 0) finding("cannot start the %s", "watchdog");
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_detach(t);
}

/* BASE folders of fuzz_cli processes that ended without their atexit (a finding). */
static int remove_quietly(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  remove(path);
  return 0;
}

static void remove_stale(const char *tmp) {
  DIR *d = opendir(tmp);
  struct dirent *ent;
  while (d && (ent = readdir(d))) {
    long pid;
    char path[PATH_MAX];
    if (sscanf(ent->d_name, "kiln_fuzz_cli.%ld.", &pid) != 1 || pid <= 0 ||
        kill((pid_t)pid, 0) == 0 || errno != ESRCH)
      continue;
    path_join(path, tmp, ent->d_name);
    nftw(path, remove_quietly, 16, FTW_DEPTH | FTW_PHYS);
  }
  if (d) closedir(d);
}

/* ---- the target ---- */

static void setup(void) {
  const char *tmp = getenv("TMPDIR"), *v = getenv("KILN_FUZZ_VERBOSE");
  char templ[PATH_MAX];
  verbose = v && *v && strcmp(v, "0") != 0;
  tmp = tmp && *tmp ? tmp : "/tmp";
  remove_stale(tmp);
  snprintf(templ, sizeof templ, "%s/kiln_fuzz_cli.%ld.XXXXXX", tmp, (long)getpid());
  if (!mkdtemp(templ) || !realpath(templ, base)) finding("cannot make %s", templ);
  atexit(remove_base);
  snprintf(proc_self, sizeof proc_self, "/proc/%ld", (long)getpid());
  path_join(root, base, "root");
  path_join(out_dir, base, "out");
  path_join(hard_dir, base, "hard");
  path_join(abs_dir, base, "abs");
  path_join(victim, hard_dir, "victim");
  make_outside();
  cap_out = capture("fuzz_cli_stdout");
  cap_err = capture("fuzz_cli_stderr");
  /* The oracle's premise: the outside case passes when it is read. */
  char case_dir[PATH_MAX], *argv[16], *printed;
  path_join(case_dir, out_dir, "case");
  int argc = common_args(argv, "check");
  argv[argc++] = case_dir;
  FILE *so = stdout;
  stdout = cap_out;
  int rc = cmd_check(argc, argv);
  stdout = so;
  printed = take(cap_out);
  if (rc != EXIT_OK || strncmp(printed, "pass ", 5) != 0)
    finding("the outside test case does not pass: %s", printed);
  free(printed);
  n_before = take_snapshot(before);
  watch_all();
  start_watchdog();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static record records[MAX_RECORDS];
  if (!base[0]) setup();
  /* what the commands print must not name the outside model: nor may the input */
  if (memmem(data, size, MARKER, strlen(MARKER))) return -1;
  int n = parse(data, size, records);
  if (n < 0) return -1;
  read_events(false); /* the snapshot's own reads, last time */
  make_dir(root);
  for (int i = 0; i < n; i++) make_entry(&records[i]);
  if (nftw(root, prune_one, 16, FTW_PHYS) != 0) finding("cannot walk %s", root);
  arm(true);
  run_check(records, n);
  run_runs(records, n);
  arm(false);
  read_events(true);
  check_snapshot();
  remove_tree(root);
  return 0;
}
