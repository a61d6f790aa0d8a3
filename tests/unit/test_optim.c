/* kiln's optimizer ops (ops.def "optimizers": ref/optim.c, isa/run_optim.c and
 * optim_*.c, infer_optim.c):
 * - every ISA level this machine has gives the scalar reference's bits, for SGD,
 *   Adagrad, Adam, Lamb, Lars in their variants (float32 and split bfloat16 weights,
 *   float32 and bfloat16 gradients, GradScale), at sizes around the vector widths and
 *   over five steps of random gradients; 1 and 2 threads give the same bytes;
 * - one step after another agrees with PyTorch's single-tensor SGD, Adagrad, Adam,
 *   AdamW (tests/unit/fixtures/optim/golden.bin, tools/make_optim_golden.py) within
 *   PyTorch's default tolerances (rtol 1.3e-6, atol 1e-5);
 * - Lamb's and Lars's trust ratios against the same formulas in double;
 * - split weights: split-then-join is exact for every class of float32 bits (a NaN
 *   with a low-only payload comes back quieted, its top half still a NaN), and N steps
 *   on split weights give the bits of the float32 master weight the float32 op updates;
 * - GradNorm (levels, threads, against a double sum) and ClipCoef;
 * - bad inputs: clean errors from shape inference naming the node, the input and
 *   expected vs found, and run-time errors for bad Hyper values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "backends/backend.h"
#include "backends/cpu/isa.h"
#include "backends/cpu/isa/run.h"
#include "ir/optim.h"

#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t rng = 20240611;

static float nonzero(float lo, float hi) {
  float v = tu_rand_f32(&rng, lo, hi);
  return tu_rand_f32(&rng, 0.0f, 1.0f) < 0.5f ? -v : v;
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  assert_non_null(p);
  return p;
}

static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float float_of(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* ---- one optimizer node and its buffers ---- */

typedef struct opt_case {
  const char *what;
  kl_op op;
  int nesterov, maximize, amsgrad, decoupled, apex;
  float max_trust;
  double hyper[6];
  bool scale, split, g_bf16;
  bool no_state2; /* Adam without MaxExpAvgSq */
} opt_case;

typedef struct bufs {
  int64_t n;
  float *p;            /* float32 Param, or NULL when split */
  uint16_t *top, *trail;
  float *st[KL_OPTIM_MAX_STATE];
  float *g;            /* float32 Grad, or NULL */
  uint16_t *gb;        /* bfloat16 Grad */
  float scale;
  double hyper[6];
} bufs;

typedef struct node_of {
  kl_graph *g;
  int node, n_in;
  const kl_optim_layout *l;
  kl_type types[KL_OPTIM_MAX_IN];
} node_of;

static int n_states(const opt_case *oc) {
  switch (oc->op) {
  case KL_OP_KilnAdam: return oc->no_state2 ? 2 : 3;
  case KL_OP_KilnLamb: return 2;
  case KL_OP_KilnSGD: return oc->hyper[1] != 0 ? 1 : 0;
  default: return 1;
  }
}

static void node_make(node_of *nd, const opt_case *oc) {
  kl_err e = {0};
  nd->l = kl_optim_layout_of(oc->op);
  nd->g = tu_graph_new();
  int ns = n_states(oc);
  nd->n_in = nd->l->n_required;
  if (ns > 0 && nd->l->state[ns - 1] + 1 > nd->n_in) nd->n_in = nd->l->state[ns - 1] + 1;
  if (oc->scale) nd->n_in = nd->l->scale + 1;
  if (oc->split) nd->n_in = nd->l->trail + 1;
  int in[KL_OPTIM_MAX_IN], out = tu_graph_value(nd->g, "ratio");
  for (int i = 0; i < nd->n_in; i++) {
    bool absent = (i == nd->l->scale && !oc->scale) || (i == nd->l->trail && !oc->split);
    for (int s = ns; s < KL_OPTIM_MAX_STATE; s++) absent |= i == nd->l->state[s];
    in[i] = absent ? KL_ABSENT : tu_graph_value(nd->g, NULL);
    nd->types[i] = TY0(KL_F32);
  }
  nd->types[0] = TY(KL_F64, 6);
  nd->node = tu_graph_node(nd->g, oc->op, "opt", nd->n_in, in, 1, &out);
  const char *names[] = {"nesterov", "maximize", "amsgrad", "decoupled", "apex"};
  int vals[] = {oc->nesterov, oc->maximize, oc->amsgrad, oc->decoupled, oc->apex};
  for (int a = 0; a < 5; a++)
    if (vals[a]) assert_int_equal(kl_node_set_int(nd->g, nd->node, names[a], 1, &e), KILN_OK);
  if (oc->max_trust > 0)
    assert_int_equal(kl_node_set_float(nd->g, nd->node, "max_trust", oc->max_trust, &e), KILN_OK);
}

static void bufs_init(bufs *b, const opt_case *oc, int64_t n) {
  memset(b, 0, sizeof *b);
  b->n = n;
  size_t fb = sizeof(float) * (size_t)n, hb = sizeof(uint16_t) * (size_t)n;
  if (oc->split) {
    b->top = xmalloc(hb);
    b->trail = xmalloc(hb);
    for (int64_t i = 0; i < n; i++) kl_split_bf16(nonzero(0.05f, 2.0f), &b->top[i], &b->trail[i]);
  } else {
    b->p = xmalloc(fb);
    for (int64_t i = 0; i < n; i++) b->p[i] = nonzero(0.05f, 2.0f);
  }
  for (int s = 0; s < n_states(oc); s++) {
    b->st[s] = xmalloc(fb);
    /* second moments and Adagrad's sums are >= 0 */
    bool positive = s > 0 || oc->op == KL_OP_KilnAdagrad;
    for (int64_t i = 0; i < n; i++)
      b->st[s][i] = positive ? tu_rand_f32(&rng, 0.0f, 0.02f) : nonzero(0.001f, 0.1f);
  }
  if (oc->g_bf16) b->gb = xmalloc(hb);
  else b->g = xmalloc(fb);
  b->scale = oc->scale ? 0.75f : 1.0f;
  memcpy(b->hyper, oc->hyper, sizeof b->hyper);
}

static void bufs_copy(bufs *d, const bufs *s) {
  *d = *s;
  size_t fb = sizeof(float) * (size_t)s->n, hb = sizeof(uint16_t) * (size_t)s->n;
#define DUP(f, bytes)                      \
  if (s->f) {                              \
    d->f = xmalloc(bytes);                 \
    memcpy(d->f, s->f, bytes);             \
  }
  DUP(p, fb) DUP(top, hb) DUP(trail, hb) DUP(g, fb) DUP(gb, hb)
  for (int k = 0; k < KL_OPTIM_MAX_STATE; k++) DUP(st[k], fb)
#undef DUP
}

static void bufs_free(bufs *b) {
  free(b->p), free(b->top), free(b->trail), free(b->g), free(b->gb);
  for (int k = 0; k < KL_OPTIM_MAX_STATE; k++) free(b->st[k]);
  memset(b, 0, sizeof *b);
}

static void new_grads(bufs *b) {
  for (int64_t i = 0; i < b->n; i++) {
    float g = nonzero(0.001f, 0.5f);
    if (b->gb) b->gb[i] = kl_f32_to_bf16(g);
    else b->g[i] = g;
  }
}

/* Runs fn (a level's kernel, or the reference) on b's buffers; *ratio gets the output. */
static kiln_status run_on(const node_of *nd, const opt_case *oc, bufs *b, kl_kernel_fn fn,
                          int threads, float *ratio, kl_err *e) {
  int64_t dims[1] = {b->n}, hdims[1] = {6};
  kl_tensor t[KL_OPTIM_MAX_IN], out = {KL_F32, 0, {0}, ratio};
  const kl_tensor *in[KL_OPTIM_MAX_IN];
  const kl_optim_layout *l = nd->l;
  for (int i = 0; i < nd->n_in; i++) {
    in[i] = nd->g->nodes[nd->node].in[i] == KL_ABSENT ? NULL : &t[i];
    t[i] = (kl_tensor){KL_F32, 1, {b->n}, NULL};
  }
  t[0] = (kl_tensor){KL_F64, 1, {hdims[0]}, b->hyper};
  t[1] = oc->split ? (kl_tensor){KL_BF16, 1, {dims[0]}, b->top}
                   : (kl_tensor){KL_F32, 1, {dims[0]}, b->p};
  t[2] = b->gb ? (kl_tensor){KL_BF16, 1, {dims[0]}, b->gb} : (kl_tensor){KL_F32, 1, {dims[0]}, b->g};
  for (int s = 0; s < KL_OPTIM_MAX_STATE && l->state[s] >= 0; s++)
    if (l->state[s] < nd->n_in) t[l->state[s]].data = b->st[s];
  if (l->scale >= 0 && l->scale < nd->n_in) t[l->scale] = (kl_tensor){KL_F32, 0, {0}, &b->scale};
  if (oc->split) t[l->trail] = (kl_tensor){KL_U16, 1, {dims[0]}, b->trail};
  kl_tensor *outs[1] = {&out};
  kl_err_clear(e);
  kl_kernel_ctx c = {.node = &nd->g->nodes[nd->node], .n_in = nd->n_in, .in = in, .n_out = 1,
                     .out = outs, .e = e, .threads = threads};
  return fn(&c);
}

static kl_kernel_fn level_kernel(const node_of *nd, kl_isa isa) {
  const kl_type *types[KL_OPTIM_MAX_IN];
  for (int i = 0; i < nd->n_in; i++) types[i] = &nd->types[i];
  kl_cpu_kernel k = kl_cpu_isa_kernel(&nd->g->nodes[nd->node], types, nd->n_in, isa);
  if (!k.run) fail_msg("no ISA kernel at level %s", kl_isa_level_name(isa));
  return k.run;
}

static void expect_same(const char *what, const char *level, int64_t n, int step,
                        const void *a, const void *b, size_t bytes, const char *buf) {
  if (memcmp(a, b, bytes) == 0) return;
  size_t es = bytes / (size_t)n;
  for (int64_t i = 0; i < n; i++)
    if (memcmp((const char *)a + i * es, (const char *)b + i * es, es) != 0)
      fail_msg("%s, %s, n=%lld, step %d: %s[%lld] differs from the reference", what, level,
               (long long)n, step, buf, (long long)i);
}

static void expect_bufs_same(const char *what, const char *level, int step, const bufs *r,
                             const bufs *x) {
  size_t fb = sizeof(float) * (size_t)r->n, hb = sizeof(uint16_t) * (size_t)r->n;
  if (r->p) expect_same(what, level, r->n, step, r->p, x->p, fb, "Param");
  if (r->top) expect_same(what, level, r->n, step, r->top, x->top, hb, "Param (top)");
  if (r->trail) expect_same(what, level, r->n, step, r->trail, x->trail, hb, "Trail");
  for (int s = 0; s < KL_OPTIM_MAX_STATE; s++)
    if (r->st[s]) expect_same(what, level, r->n, step, r->st[s], x->st[s], fb, "state");
}

static const opt_case cases[] = {
    {"SGD", KL_OP_KilnSGD, 0, 0, 0, 0, 0, 0, {0.05, 0, 0, 0, 1, 0}, true, false, false, false},
    {"SGD momentum dampening wd", KL_OP_KilnSGD, 0, 0, 0, 0, 0, 0, {0.03, 0.9, 0.1, 0.01, 1, 0}, false, false, false, false},
    {"SGD nesterov maximize wd scale", KL_OP_KilnSGD, 1, 1, 0, 0, 0, 0, {0.02, 0.8, 0, 0.05, 1, 0}, true, false, false, false},
    {"SplitSGD momentum", KL_OP_KilnSGD, 0, 0, 0, 0, 0, 0, {0.03, 0.9, 0.1, 0.01, 1, 0}, false, true, false, false},
    {"SplitSGD nesterov bf16 grad scale", KL_OP_KilnSGD, 1, 0, 0, 0, 0, 0, {0.02, 0.8, 0, 0.05, 1, 0}, true, true, true, false},
    {"Adagrad lr_decay wd", KL_OP_KilnAdagrad, 0, 0, 0, 0, 0, 0, {0.07, 0.01, 0.02, 1e-6, 1, 0}, false, false, false, false},
    {"Adagrad split bf16 grad scale maximize", KL_OP_KilnAdagrad, 0, 1, 0, 0, 0, 0, {0.1, 0, 0, 1e-10, 1, 0}, true, true, true, false},
    {"Adam", KL_OP_KilnAdam, 0, 0, 0, 0, 0, 0, {1e-3, 0.9, 0.999, 1e-8, 0, 1}, false, false, false, true},
    {"Adam amsgrad wd beta1 0.3 scale", KL_OP_KilnAdam, 0, 0, 1, 0, 0, 0, {1e-2, 0.3, 0.999, 1e-8, 0.01, 1}, true, false, false, false},
    {"AdamW maximize", KL_OP_KilnAdam, 0, 1, 0, 1, 0, 0, {2e-3, 0.9, 0.95, 1e-8, 0.05, 1}, false, false, false, true},
    {"Lamb wd", KL_OP_KilnLamb, 0, 0, 0, 0, 0, 0, {1e-2, 0.9, 0.999, 1e-6, 0.01, 1}, false, false, false, false},
    {"Lamb apex no wd max_trust", KL_OP_KilnLamb, 0, 0, 0, 0, 1, 5.0f, {1e-2, 0.9, 0.999, 1e-6, 0, 1}, true, false, false, false},
    {"Lamb apex wd max_trust split bf16 grad", KL_OP_KilnLamb, 0, 0, 0, 0, 1, 0.5f, {1e-2, 0.8, 0.99, 1e-6, 0.1, 1}, true, true, true, false},
    {"Lamb split", KL_OP_KilnLamb, 0, 0, 0, 0, 0, 0, {1e-2, 0.9, 0.999, 1e-6, 0.01, 1}, false, true, false, false},
    {"Adam split", KL_OP_KilnAdam, 0, 0, 0, 0, 0, 0, {1e-3, 0.9, 0.999, 1e-8, 0, 1}, false, true, false, true},
    {"Adam amsgrad wd beta1 0.3 split bf16 grad scale", KL_OP_KilnAdam, 0, 0, 1, 0, 0, 0, {1e-2, 0.3, 0.999, 1e-8, 0.01, 1}, true, true, true, false},
    {"AdamW maximize split", KL_OP_KilnAdam, 0, 1, 0, 1, 0, 0, {2e-3, 0.9, 0.95, 1e-8, 0.05, 1}, false, true, false, true},
    {"AdamW amsgrad split bf16 grad scale", KL_OP_KilnAdam, 0, 0, 1, 1, 0, 0, {5e-3, 0.9, 0.99, 1e-6, 0.1, 1}, true, true, true, false},
    {"Lars wd scale", KL_OP_KilnLars, 0, 0, 0, 0, 0, 0, {0.1, 0.9, 5e-4, 0.001, 1e-9, 1}, true, false, false, false},
    {"Lars", KL_OP_KilnLars, 0, 0, 0, 0, 0, 0, {0.1, 0.9, 0, 0.02, 0, 1}, false, false, false, false},
    {"Lars wd split bf16 grad scale", KL_OP_KilnLars, 0, 0, 0, 0, 0, 0, {0.1, 0.9, 5e-4, 0.001, 1e-9, 1}, true, true, true, false},
    {"Lars split", KL_OP_KilnLars, 0, 0, 0, 0, 0, 0, {0.1, 0.9, 0, 0.02, 0, 1}, false, true, false, false},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

static int step_slot(kl_op op) { return kl_optim_layout_of(op)->n_hyper - 1; }

/* ---- every level against the reference ---- */

static void test_levels_bitexact(void **state) {
  (void)state;
  static const int64_t sizes[] = {1, 7, 8, 9, 15, 16, 17, 31, 33, 1000, 4099, 40000};
  kl_isa lv[3];
  int n_lv = tu_isa_levels(lv);
  for (int ci = 0; ci < N_CASES; ci++) {
    const opt_case *oc = &cases[ci];
    node_of nd;
    node_make(&nd, oc);
    kl_kernel_fn ref = kl_op_get(oc->op)->ref;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
      int64_t n = sizes[si];
      bufs r, x[3][2];
      bufs_init(&r, oc, n);
      for (int l = 0; l < n_lv; l++)
        for (int th = 0; th < 2; th++) bufs_copy(&x[l][th], &r);
      for (int step = 1; step <= 5; step++) {
        new_grads(&r);
        r.hyper[step_slot(oc->op)] = step;
        kl_err e;
        float want, got;
        assert_int_equal(run_on(&nd, oc, &r, ref, 1, &want, &e), KILN_OK);
        for (int l = 0; l < n_lv; l++)
          for (int th = 0; th < 2; th++) {
            bufs *b = &x[l][th];
            size_t gbytes = (size_t)n * (r.gb ? 2 : 4);
            memcpy(r.gb ? (void *)b->gb : (void *)b->g, r.gb ? (void *)r.gb : (void *)r.g, gbytes);
            b->hyper[step_slot(oc->op)] = step;
            kiln_status st = run_on(&nd, oc, b, level_kernel(&nd, lv[l]), th + 1, &got, &e);
            if (st != KILN_OK) fail_msg("%s: %s", oc->what, e.msg);
            char level[64];
            snprintf(level, sizeof level, "%s, %d thread%s", kl_isa_level_name(lv[l]), th + 1,
                     th ? "s" : "");
            expect_bufs_same(oc->what, level, step, &r, b);
            if (bits_of(want) != bits_of(got))
              fail_msg("%s, %s, n=%lld: ratio %.9g, the reference's %.9g", oc->what, level,
                       (long long)n, (double)got, (double)want);
          }
      }
      bufs_free(&r);
      for (int l = 0; l < n_lv; l++)
        for (int th = 0; th < 2; th++) bufs_free(&x[l][th]);
    }
    kl_graph_free(nd.g);
  }
}

/* The CPU backend takes the ISA kernel for these nodes at the process's level
 * (KILN_ISA lowers it: tests/run_levels.sh runs this at each level). */
static void test_backend_picks_isa(void **state) {
  (void)state;
  for (int ci = 0; ci < N_CASES; ci++) {
    node_of nd;
    node_make(&nd, &cases[ci]);
    const kl_type *types[KL_OPTIM_MAX_IN];
    for (int i = 0; i < nd.n_in; i++) types[i] = &nd.types[i];
    kl_cpu_kernel k = kl_cpu_isa_kernel(&nd.g->nodes[nd.node], types, nd.n_in, kl_isa_level());
    assert_non_null(k.run);
    assert_non_null(k.name);
    kl_graph_free(nd.g);
  }
}

/* ---- PyTorch ---- */

typedef struct reader {
  const uint8_t *p, *end;
} reader;

static void rd(reader *r, void *dst, size_t n) {
  if ((size_t)(r->end - r->p) < n) fail_msg("golden.bin ends early");
  memcpy(dst, r->p, n);
  r->p += n;
}

static void test_pytorch(void **state) {
  (void)state;
  size_t len;
  uint8_t *file = tu_read_file("tests/unit/fixtures/optim/golden.bin", &len);
  reader rdr = {file, file + len};
  int n_cases = 0, exact = 0, total = 0;
  double worst = 0, worst_rel = 0;
  for (;;) {
    int32_t head[8];
    rd(&rdr, head, 4);
    if (head[0] < 0) break;
    rd(&rdr, head + 1, 28);
    static const kl_op ops[] = {KL_OP_KilnSGD, KL_OP_KilnAdagrad, KL_OP_KilnAdam};
    opt_case oc = {"pytorch", ops[head[0]], head[1], head[2], head[3], head[4], 0, 0, {0}, false, false, false, false};
    int n = head[5], steps = head[6], ns = head[7];
    rd(&rdr, oc.hyper, sizeof oc.hyper);
    if (oc.op == KL_OP_KilnAdam && !oc.amsgrad) oc.no_state2 = true;
    node_of nd;
    node_make(&nd, &oc);
    kl_isa lv = kl_isa_level();
    kl_kernel_fn fns[2] = {kl_op_get(oc.op)->ref, level_kernel(&nd, lv)};
    bufs b[2];
    for (int k = 0; k < 2; k++) bufs_init(&b[k], &oc, n);
    assert_int_equal(n_states(&oc), ns);
    float *want = xmalloc(sizeof(float) * (size_t)n);
    /* both copies start from the file's param0 and state0 */
    rd(&rdr, b[0].p, sizeof(float) * (size_t)n);
    memcpy(b[1].p, b[0].p, sizeof(float) * (size_t)n);
    for (int s = 0; s < ns; s++) {
      rd(&rdr, b[0].st[s], sizeof(float) * (size_t)n);
      memcpy(b[1].st[s], b[0].st[s], sizeof(float) * (size_t)n);
    }
    for (int step = 1; step <= steps; step++) {
      rd(&rdr, b[0].g, sizeof(float) * (size_t)n);
      for (int k = 0; k < 2; k++) {
        memcpy(b[k].g, b[0].g, sizeof(float) * (size_t)n);
        b[k].hyper[step_slot(oc.op)] = step;
        kl_err e;
        float ratio;
        if (run_on(&nd, &oc, &b[k], fns[k], 1, &ratio, &e) != KILN_OK) fail_msg("%s", e.msg);
        assert_true(ratio == 1.0f);
      }
      for (int s = -1; s < ns; s++) {
        rd(&rdr, want, sizeof(float) * (size_t)n);
        for (int k = 0; k < 2; k++) {
          const float *got = s < 0 ? b[k].p : b[k].st[s];
          for (int i = 0; i < n; i++) {
            double d = fabs((double)got[i] - want[i]), tol = 1e-5 + 1.3e-6 * fabs(want[i]);
            if (!(d <= tol))
              fail_msg("case %d (op %s), step %d, %s %d: %.9g, PyTorch %.9g", n_cases,
                       kl_op_name(oc.op), step, s < 0 ? "param" : "state", i,
                       (double)got[i], (double)want[i]);
            if (k == 0) {
              total++;
              exact += bits_of(got[i]) == bits_of(want[i]);
              if (d > worst) worst = d;
              if (fabs(want[i]) >= 1e-3 && d / fabs(want[i]) > worst_rel)
                worst_rel = d / fabs(want[i]);
            }
          }
        }
      }
    }
    free(want);
    bufs_free(&b[0]);
    bufs_free(&b[1]);
    kl_graph_free(nd.g);
    n_cases++;
  }
  free(file);
  assert_int_equal(n_cases, 10);
  print_message("PyTorch: %d cases, %d of %d values bit-identical; the largest difference "
                "%.3g, relative (|value| >= 1e-3) %.3g\n", n_cases, exact, total, worst,
                worst_rel);
}

/* ---- trust ratios against the formulas in double ---- */

static double norm2(const float *x, int64_t n, float scale) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += (double)(x[i] * scale) * (double)(x[i] * scale);
  return sqrt(s);
}

static void test_trust_ratios(void **state) {
  (void)state;
  for (int ci = 0; ci < N_CASES; ci++) {
    const opt_case *oc = &cases[ci];
    if ((oc->op != KL_OP_KilnLamb && oc->op != KL_OP_KilnLars) || oc->split) continue;
    node_of nd;
    node_make(&nd, oc);
    bufs b;
    bufs_init(&b, oc, 5000);
    new_grads(&b);
    const double *h = oc->hyper;
    double want, pn = norm2(b.p, b.n, 1.0f);
    if (oc->op == KL_OP_KilnLars) {
      double gn = norm2(b.g, b.n, b.scale);
      want = h[3] * pn / (gn + h[2] * pn + h[4]);
    } else { /* step 1: m = (1 - b1) g, v = (1 - b2) g^2, bias-corrected: g, |g| */
      double un = 0;
      for (int64_t i = 0; i < b.n; i++) {
        double g = (double)(b.g[i] * b.scale);
        double m = b.st[0][i] * h[1] + (1 - h[1]) * g, v = b.st[1][i] * h[2] + (1 - h[2]) * g * g;
        double u = (m / (1 - h[1])) / (sqrt(v / (1 - h[2])) + h[3]) + h[4] * b.p[i];
        un += u * u;
      }
      want = oc->apex && h[4] == 0 ? 1 : pn / sqrt(un);
      if (oc->max_trust > 0 && want > oc->max_trust) want = oc->max_trust;
    }
    float got;
    kl_err e;
    assert_int_equal(run_on(&nd, oc, &b, level_kernel(&nd, kl_isa_level()), 1, &got, &e), KILN_OK);
    if (!(fabs(got - want) <= 1e-5 * fabs(want)))
      fail_msg("%s: trust ratio %.9g, the formula in double %.9g", oc->what, (double)got, want);
    assert_true(got != 1.0f || want == 1.0);
    bufs_free(&b);
    kl_graph_free(nd.g);
  }
}

/* ---- split weights ---- */

static void check_split(uint32_t u) {
  uint16_t top, trail;
  kl_split_bf16(float_of(u), &top, &trail);
  uint32_t back = bits_of(kl_join_bf16(top, trail));
  bool nan = (u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0;
  bool low_only = nan && (u & 0x007f0000u) == 0;
  if (low_only) { /* quieted; the top half a NaN, not an Inf */
    if (back != (u | 0x00400000u) || (top & 0x7f80u) != 0x7f80u || (top & 0x7fu) == 0)
      fail_msg("split of 0x%08x: top 0x%04x trail 0x%04x", u, top, trail);
  } else if (back != u || top != (uint16_t)(u >> 16)) {
    fail_msg("split of 0x%08x: top 0x%04x trail 0x%04x, joined 0x%08x", u, top, trail, back);
  }
  if (nan && !isnan(kl_bf16_to_f32(top))) fail_msg("0x%08x: top half 0x%04x is not a NaN", u, top);
}

static void test_split_join(void **state) {
  (void)state;
  static const uint32_t classes[] = {
      0x00000000u, 0x80000000u,             /* +-0 */
      0x00000001u, 0x80000001u, 0x007fffffu, 0x00012345u, 0x807f0001u, /* subnormals */
      0x00800000u, 0x80800000u, 0x7f7fffffu, 0xff7fffffu,             /* min, max normals */
      0x3f800000u, 0x3f801234u, 0xbf80ffffu, 0x40490fdbu,             /* normals */
      0x7f800000u, 0xff800000u,                                       /* +-Inf */
      0x7fc00000u, 0xffc00000u, 0x7fc00001u, 0x7fffffffu, 0xffc0abcdu, /* quiet NaNs */
      0x7fa00000u, 0x7f810000u, 0xff800001u, 0x7f800001u, 0x7f80ffffu, /* signaling */
  };
  for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++) check_split(classes[i]);
  uint32_t s = 99;
  for (int i = 0; i < 1000000; i++) {
    s ^= s << 13, s ^= s >> 17, s ^= s << 5;
    check_split(s);
  }
  /* every level's vector join and split (kl_optim_fns, what the driver runs over split
   * weights) against kl_join_bf16 and kl_split_bf16, bit for bit: the classes, then
   * random bits, 1000003 in all (a tail past every vector width) */
  enum { N = 1000003 };
  size_t nc = sizeof classes / sizeof classes[0];
  float *in = malloc(sizeof(float) * N), *back = malloc(sizeof(float) * N);
  uint16_t *top = malloc(sizeof(uint16_t) * N), *trail = malloc(sizeof(uint16_t) * N);
  assert_true(in && back && top && trail);
  for (size_t i = 0; i < N; i++) {
    s ^= s << 13, s ^= s >> 17, s ^= s << 5;
    in[i] = float_of(i < nc ? classes[i] : s);
  }
  kl_isa lv[3];
  int n_lv = tu_isa_levels(lv);
  for (int l = 0; l < n_lv; l++) {
    const kl_optim_fns *f = kl_cpu_isa_fns(lv[l])->optim;
    f->split(in, top, trail, N);
    f->join(top, trail, back, N);
    for (size_t i = 0; i < N; i++) {
      uint16_t t, r;
      kl_split_bf16(in[i], &t, &r);
      if (top[i] != t || trail[i] != r || bits_of(back[i]) != bits_of(kl_join_bf16(t, r)))
        fail_msg("%s: 0x%08x split 0x%04x 0x%04x (kl_split_bf16 0x%04x 0x%04x), joined 0x%08x",
                 kl_isa_level_name(lv[l]), bits_of(in[i]), top[i], trail[i], t, r,
                 bits_of(back[i]));
    }
    f->join(top, NULL, back, N); /* a bfloat16 gradient: trail 0 */
    for (size_t i = 0; i < N; i++)
      if (bits_of(back[i]) != (uint32_t)top[i] << 16)
        fail_msg("%s: bfloat16 0x%04x joined 0x%08x", kl_isa_level_name(lv[l]), top[i],
                 bits_of(back[i]));
  }
  free(in);
  free(back);
  free(top);
  free(trail);
}

/* N steps on split weights give the bits of the float32 weights the float32 op updates
 * with the same gradients (bfloat16 ones read as float32), for the reference and every
 * level, at sizes below, at and one past multiples of the vector widths (8, 16), of the
 * driver's float32 runs (512) and of the norms' blocks (16384). */
static void test_split_matches_fp32(void **state) {
  (void)state;
  static const int64_t sizes[] = {1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 511, 512, 513, 4099, 32769};
  enum { N_SIZES = sizeof sizes / sizeof sizes[0] };
  kl_isa lv[3];
  int n_lv = tu_isa_levels(lv);
  int checked[KL_OP_COUNT] = {0};
  for (int ci = 0; ci < N_CASES; ci++) {
    const opt_case *oc = &cases[ci];
    if (!oc->split) continue;
    checked[oc->op]++;
    opt_case twin = *oc;
    twin.split = twin.g_bf16 = false;
    node_of ns, nf;
    node_make(&ns, oc);
    node_make(&nf, &twin);
    for (int run = 0; run < (n_lv + 1) * N_SIZES; run++) {
      int l = run / N_SIZES - 1;
      int64_t n = sizes[run % N_SIZES];
      bufs bs, bf;
      bufs_init(&bs, oc, n);
      bufs_init(&bf, &twin, n);
      for (int64_t i = 0; i < n; i++) bf.p[i] = kl_join_bf16(bs.top[i], bs.trail[i]);
      for (int s = 0; s < KL_OPTIM_MAX_STATE; s++)
        if (bs.st[s]) memcpy(bf.st[s], bs.st[s], sizeof(float) * (size_t)n);
      for (int step = 1; step <= 6; step++) {
        new_grads(&bs);
        for (int64_t i = 0; i < n; i++)
          bf.g[i] = bs.gb ? kl_bf16_to_f32(bs.gb[i]) : bs.g[i];
        bs.hyper[step_slot(oc->op)] = bf.hyper[step_slot(oc->op)] = step;
        kl_err e;
        float r1, r2;
        kl_kernel_fn fs = l < 0 ? kl_op_get(oc->op)->ref : level_kernel(&ns, lv[l]);
        kl_kernel_fn ff = l < 0 ? kl_op_get(oc->op)->ref : level_kernel(&nf, lv[l]);
        assert_int_equal(run_on(&ns, oc, &bs, fs, 1, &r1, &e), KILN_OK);
        assert_int_equal(run_on(&nf, &twin, &bf, ff, 1, &r2, &e), KILN_OK);
        assert_true(bits_of(r1) == bits_of(r2));
        for (int64_t i = 0; i < n; i++) {
          uint32_t a = bits_of(kl_join_bf16(bs.top[i], bs.trail[i])), b = bits_of(bf.p[i]);
          if (a != b)
            fail_msg("%s (%s), n=%lld, step %d, [%lld]: split 0x%08x, float32 0x%08x",
                     oc->what, l < 0 ? "ref" : kl_isa_level_name(lv[l]), (long long)n, step,
                     (long long)i, a, b);
        }
      }
      bufs_free(&bs);
      bufs_free(&bf);
    }
    kl_graph_free(ns.g);
    kl_graph_free(nf.g);
  }
  static const kl_op ops[] = {KL_OP_KilnSGD, KL_OP_KilnAdagrad, KL_OP_KilnAdam, KL_OP_KilnLamb,
                              KL_OP_KilnLars};
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
    if (!checked[ops[k]]) fail_msg("%s has no split-weight case", kl_op_name(ops[k]));
}

/* ---- GradNorm, ClipCoef ---- */

static void test_grad_norm(void **state) {
  (void)state;
  static const int64_t sizes[] = {33, 1000, 40000, 17};
  kl_tensor t[4];
  const kl_tensor *in[4];
  double ss = 0;
  for (int k = 0; k < 4; k++) {
    bool bf = k == 3;
    t[k] = (kl_tensor){bf ? KL_BF16 : KL_F32, 1, {sizes[k]}, xmalloc((size_t)sizes[k] * 4)};
    for (int64_t i = 0; i < sizes[k]; i++) {
      float v = nonzero(0.001f, 1.0f);
      if (bf) {
        ((uint16_t *)t[k].data)[i] = kl_f32_to_bf16(v);
        v = kl_bf16_to_f32(((uint16_t *)t[k].data)[i]);
      } else {
        ((float *)t[k].data)[i] = v;
      }
      ss += (double)v * v;
    }
    in[k] = &t[k];
  }
  kl_graph *g = tu_graph_new();
  int ids[4], out = tu_graph_value(g, "norm");
  for (int k = 0; k < 4; k++) ids[k] = tu_graph_value(g, NULL);
  int node = tu_graph_node(g, KL_OP_KilnGradNorm, "gn", 4, ids, 1, &out);
  kl_type ty[4];
  const kl_type *types[4];
  for (int k = 0; k < 4; k++) ty[k] = TY(t[k].dtype, sizes[k]), types[k] = &ty[k];
  float want, got;
  kl_tensor y = {KL_F32, 0, {0}, &want};
  kl_tensor *outs[1] = {&y};
  kl_err e = {0};
  kl_kernel_ctx c = {.node = &g->nodes[node], .n_in = 4, .in = in, .n_out = 1, .out = outs,
                     .e = &e, .threads = 1};
  assert_int_equal(kl_op_get(KL_OP_KilnGradNorm)->ref(&c), KILN_OK);
  if (!(fabs(want - sqrt(ss)) <= 1e-6 * sqrt(ss)))
    fail_msg("GradNorm %.9g, the double norm %.9g", (double)want, sqrt(ss));
  kl_isa lv[3];
  int n_lv = tu_isa_levels(lv);
  y.data = &got;
  for (int l = 0; l < n_lv; l++)
    for (int th = 1; th <= 2; th++) {
      kl_cpu_kernel k = kl_cpu_isa_kernel(&g->nodes[node], types, 4, lv[l]);
      assert_non_null(k.run);
      c.threads = th;
      assert_int_equal(k.run(&c), KILN_OK);
      if (bits_of(got) != bits_of(want))
        fail_msg("GradNorm at %s, %d threads: %.9g, the reference %.9g", kl_isa_level_name(lv[l]),
                 th, (double)got, (double)want);
    }
  for (int k = 0; k < 4; k++) free(t[k].data);
  kl_graph_free(g);
}

static void test_clip_coef(void **state) {
  tu_fixture *f = *state;
  static const float norms[] = {4.0f, 0.5f, 0.999999f, 0.0f};
  for (int i = 0; i < 4; i++) {
    tu_one_node(f, "kiln.ClipCoef", 1, 1);
    tu_attr_float(f, "max_norm", 1.0f);
    tu_tensor(f, 0, KL_F32, 0, NULL, VALS(norms[i]));
    tu_expect_run(f);
    float want = 1.0f / (norms[i] + 1e-6f);
    want = want > 1.0f ? 1.0f : want;
    tu_assert_f32(&f->tout[0], &want, 1, TU_EXACT);
  }
  tu_one_node(f, "kiln.ClipCoef", 1, 1);
  tu_attr_float(f, "max_norm", 1.0f);
  tu_tensor(f, 0, KL_F32, 0, NULL, VALS(NAN));
  tu_expect_run(f);
  assert_true(isnan(((float *)f->tout[0].data)[0])); /* as clamp: NaN stays */
  tu_one_node(f, "kiln.ClipCoef", 1, 1);
  tu_input(f, 0, TY0(KL_F32));
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "max_norm");
}

/* ---- bad inputs ---- */

/* Shape inference of one optimizer node "opt_w1" on inputs of the given types (dtype
 * KL_UNDEFINED: absent) must fail with code and a message holding every part. */
static void expect_infer_fail(kl_op op, int n_in, const kl_type *types, kiln_status code,
                              const char *const *parts) {
  kl_graph *g = tu_graph_new();
  int in[KL_OPTIM_MAX_IN], out = tu_graph_value(g, "ratio");
  for (int i = 0; i < n_in; i++) {
    if (types[i].dtype == KL_UNDEFINED) {
      in[i] = KL_ABSENT;
      continue;
    }
    int64_t dims[KL_MAX_RANK];
    for (int d = 0; d < types[i].rank; d++) dims[d] = types[i].dims[d].size;
    char name[16];
    snprintf(name, sizeof name, "in%d", i);
    in[i] = tu_graph_input(g, name, types[i].dtype, types[i].rank, dims);
  }
  tu_graph_node(g, op, "opt_w1", n_in, in, 1, &out);
  kl_err e = {0};
  kiln_status st = kl_graph_infer(g, &e);
  if (st != code) fail_msg("status %d (want %d): %s", st, code, e.msg);
  tu_assert_contains(e.msg, "opt_w1");
  for (int k = 0; parts[k]; k++) tu_assert_contains(e.msg, parts[k]);
  kl_graph_free(g);
}

#define PARTS(...) ((const char *const[]){__VA_ARGS__, NULL})

static void test_bad_inputs(void **state) {
  (void)state;
  kl_type none = {.dtype = KL_UNDEFINED, .rank = -1};
  /* Grad's shape is not Param's */
  expect_infer_fail(KL_OP_KilnSGD, 3,
                    (kl_type[]){TY(KL_F64, 5), TY(KL_F32, 4, 3), TY(KL_F32, 3, 4)},
                    KILN_ERR_SHAPE, PARTS("Grad", "float32[3,4]", "float32[4,3]"));
  /* a state of another shape */
  expect_infer_fail(KL_OP_KilnAdam, 5,
                    (kl_type[]){TY(KL_F64, 6), TY(KL_F32, 10), TY(KL_F32, 10), TY(KL_F32, 10),
                                TY(KL_F32, 9)},
                    KILN_ERR_SHAPE, PARTS("ExpAvgSq", "float32[9]", "float32[10]"));
  /* Hyper too short */
  expect_infer_fail(KL_OP_KilnAdam, 5,
                    (kl_type[]){TY(KL_F64, 5), TY(KL_F32, 8), TY(KL_F32, 8), TY(KL_F32, 8),
                                TY(KL_F32, 8)},
                    KILN_ERR_SHAPE, PARTS("Hyper", "has 5 values", "at least 6"));
  /* Hyper of another dtype */
  expect_infer_fail(KL_OP_KilnAdagrad, 4,
                    (kl_type[]){TY(KL_F32, 5), TY(KL_F32, 8), TY(KL_F32, 8), TY(KL_F32, 8)},
                    KILN_ERR_UNSUPPORTED, PARTS("Hyper", "float32", "float64"));
  /* Trail with a float32 Param */
  expect_infer_fail(KL_OP_KilnSGD, 6,
                    (kl_type[]){TY(KL_F64, 5), TY(KL_F32, 8), TY(KL_F32, 8), none, none,
                                TY(KL_U16, 8)},
                    KILN_ERR_DTYPE, PARTS("Param", "float32", "expected bfloat16", "Trail"));
  /* a bfloat16 Param without its Trail */
  expect_infer_fail(KL_OP_KilnLamb, 5,
                    (kl_type[]){TY(KL_F64, 6), TY(KL_BF16, 8), TY(KL_F32, 8), TY(KL_F32, 8),
                                TY(KL_F32, 8)},
                    KILN_ERR_DTYPE, PARTS("Param", "bfloat16", "Trail"));
  /* Trail of another dtype, and of another shape */
  expect_infer_fail(KL_OP_KilnAdagrad, 6,
                    (kl_type[]){TY(KL_F64, 5), TY(KL_BF16, 8), TY(KL_BF16, 8), TY(KL_F32, 8),
                                none, TY(KL_I16, 8)},
                    KILN_ERR_UNSUPPORTED, PARTS("Trail", "int16", "uint16"));
  expect_infer_fail(KL_OP_KilnAdagrad, 6,
                    (kl_type[]){TY(KL_F64, 5), TY(KL_BF16, 8), TY(KL_BF16, 8), TY(KL_F32, 8),
                                none, TY(KL_U16, 7)},
                    KILN_ERR_SHAPE, PARTS("Trail", "uint16[7]", "bfloat16[8]"));
  /* Adam's and Lars's Trail (their last slot) checked alike */
  expect_infer_fail(KL_OP_KilnLars, 6,
                    (kl_type[]){TY(KL_F64, 6), TY(KL_F32, 8), TY(KL_F32, 8), TY(KL_F32, 8),
                                none, TY(KL_U16, 8)},
                    KILN_ERR_DTYPE, PARTS("Param", "float32", "expected bfloat16", "Trail"));
  expect_infer_fail(KL_OP_KilnAdam, 8,
                    (kl_type[]){TY(KL_F64, 6), TY(KL_BF16, 8), TY(KL_BF16, 8), TY(KL_F32, 8),
                                TY(KL_F32, 8), none, none, TY(KL_U16, 7)},
                    KILN_ERR_SHAPE, PARTS("input 7 (Trail)", "uint16[7]", "bfloat16[8]"));
  /* a bfloat16 Grad on float32 weights; GradScale not a scalar */
  expect_infer_fail(KL_OP_KilnLars, 4,
                    (kl_type[]){TY(KL_F64, 6), TY(KL_F32, 8), TY(KL_BF16, 8), TY(KL_F32, 8)},
                    KILN_ERR_UNSUPPORTED, PARTS("Grad", "bfloat16"));
  expect_infer_fail(KL_OP_KilnLars, 5,
                    (kl_type[]){TY(KL_F64, 6), TY(KL_F32, 8), TY(KL_F32, 8), TY(KL_F32, 8),
                                TY(KL_F32, 2)},
                    KILN_ERR_SHAPE, PARTS("GradScale", "float32[2]", "scalar"));
  /* a required input absent */
  expect_infer_fail(KL_OP_KilnAdagrad, 4,
                    (kl_type[]){TY(KL_F64, 5), TY(KL_F32, 8), TY(KL_F32, 8), none},
                    KILN_ERR_INVALID_MODEL, PARTS("input 3"));
}

/* The Hyper values are read at run time: a bad one is an error naming it, from the
 * reference and the ISA kernels alike, and nothing is written. */
static void test_bad_hyper(void **state) {
  (void)state;
  kl_isa lv[3];
  int n_lv = tu_isa_levels(lv);
  for (int l = -1; l < n_lv; l++) {
    opt_case oc = cases[1]; /* SGD with momentum */
    node_of nd;
    node_make(&nd, &oc);
    bufs b;
    bufs_init(&b, &oc, 20);
    new_grads(&b);
    bufs before;
    bufs_copy(&before, &b);
    kl_kernel_fn fn = l < 0 ? kl_op_get(oc.op)->ref : level_kernel(&nd, lv[l]);
    kl_err e;
    float r;
    b.hyper[4] = 0; /* step 0 */
    assert_int_equal(run_on(&nd, &oc, &b, fn, 1, &r, &e), KILN_ERR_INVALID_ARGUMENT);
    tu_assert_contains(e.msg, "step");
    b.hyper[4] = 2.5;
    assert_int_equal(run_on(&nd, &oc, &b, fn, 1, &r, &e), KILN_ERR_INVALID_ARGUMENT);
    expect_bufs_same("bad step", "any", 0, &before, &b);
    /* momentum != 0 without a Momentum input */
    opt_case nom = oc;
    nom.hyper[1] = 0;
    node_of nd2;
    node_make(&nd2, &nom); /* no Momentum slot */
    b.hyper[4] = 1;
    kl_kernel_fn fn2 = l < 0 ? kl_op_get(oc.op)->ref : level_kernel(&nd2, lv[l]);
    assert_int_equal(run_on(&nd2, &nom, &b, fn2, 1, &r, &e), KILN_ERR_INVALID_ARGUMENT);
    tu_assert_contains(e.msg, "Momentum");
    bufs_free(&b);
    bufs_free(&before);
    kl_graph_free(nd.g);
    kl_graph_free(nd2.g);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_levels_bitexact), cmocka_unit_test(test_backend_picks_isa),
      cmocka_unit_test(test_pytorch),         cmocka_unit_test(test_trust_ratios),
      cmocka_unit_test(test_split_join),      cmocka_unit_test(test_split_matches_fp32),
      cmocka_unit_test(test_grad_norm),       TU_TEST(test_clip_coef),
      cmocka_unit_test(test_bad_inputs),      cmocka_unit_test(test_bad_hyper),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
