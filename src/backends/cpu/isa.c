/* CPU feature detection and the choice of ISA level (isa.h says what and why). */
#include "backends/cpu/isa.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define KL_X86 1
#else
#define KL_X86 0
#endif

#if KL_X86 && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
/* From the kernel's arch/x86/include/uapi/asm/prctl.h (5.16+); older libc headers lack
 * them. */
#ifndef ARCH_GET_XCOMP_PERM
#define ARCH_GET_XCOMP_PERM 0x1022
#endif
#ifndef ARCH_REQ_XCOMP_PERM
#define ARCH_REQ_XCOMP_PERM 0x1023
#endif
#define KL_XFEATURE_XTILEDATA 18
#endif

static const char *const level_names[KL_ISA_COUNT] = {"generic", "avx2", "avx512",
                                                      "avx512_bf16", "amx"};

const char *kl_isa_level_name(kl_isa isa) {
  return isa >= 0 && isa < KL_ISA_COUNT ? level_names[isa] : "?";
}

bool kl_isa_parse(const char *s, kl_isa *out) {
  for (int i = 0; s && i < KL_ISA_COUNT; i++)
    if (strcmp(s, level_names[i]) == 0) {
      *out = (kl_isa)i;
      return true;
    }
  return false;
}

/* ---- detection ---- */

#if KL_X86
/* XCR0 through the instruction itself: the _xgetbv intrinsic would need -mxsave. */
static unsigned long long read_xcr0(void) {
  unsigned int lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((unsigned long long)hi << 32) | lo;
}

static bool bit(unsigned int reg, int b) { return (reg >> b) & 1u; }

static void detect_strings(kl_cpu_features *f, const unsigned int vendor[3]) {
  memcpy(f->vendor, vendor, 12);
  unsigned int r[4], words[12];
  if (__get_cpuid(0x80000000u, &r[0], &r[1], &r[2], &r[3]) && r[0] >= 0x80000004u) {
    for (unsigned int leaf = 0; leaf < 3; leaf++)
      __get_cpuid(0x80000002u + leaf, &words[leaf * 4], &words[leaf * 4 + 1],
                  &words[leaf * 4 + 2], &words[leaf * 4 + 3]);
    memcpy(f->brand, words, 48);
  }
  /* the brand string is padded with leading and trailing spaces on some CPUs */
  size_t n = strlen(f->brand), s = 0;
  while (n > 0 && f->brand[n - 1] == ' ') f->brand[--n] = '\0';
  while (f->brand[s] == ' ') s++;
  memmove(f->brand, f->brand + s, n - s + 1);
}

static void detect_x86(kl_cpu_features *f) {
  unsigned int a = 0, b = 0, c = 0, d = 0, vendor[3] = {0, 0, 0};
  /* the vendor string is ebx, edx, ecx */
  if (!__get_cpuid(0, &a, &vendor[0], &vendor[2], &vendor[1])) return;
  unsigned int max_leaf = a;
  detect_strings(f, vendor);
  __get_cpuid(1, &a, &b, &c, &d);
  bool osxsave = bit(c, 27);
  f->fma = bit(c, 12);
  f->avx = bit(c, 28);
  f->f16c = bit(c, 29);
  if (max_leaf >= 7) {
    __get_cpuid_count(7, 0, &a, &b, &c, &d);
    f->avx2 = bit(b, 5);
    f->avx512f = bit(b, 16);
    f->avx512dq = bit(b, 17);
    f->avx512bw = bit(b, 30);
    f->avx512vl = bit(b, 31);
    f->avx512_vbmi = bit(c, 1);
    f->amx_bf16 = bit(d, 22);
    f->amx_tile = bit(d, 24);
    f->amx_int8 = bit(d, 25);
    unsigned int subleaves = a;
    if (subleaves >= 1) {
      __get_cpuid_count(7, 1, &a, &b, &c, &d);
      f->avx512_bf16 = bit(a, 5);
    }
  }
  if (!osxsave) return; /* xgetbv itself would fault */
  unsigned long long xcr0 = read_xcr0();
  f->os_avx = (xcr0 & 0x6) == 0x6;           /* SSE, AVX */
  f->os_avx512 = f->os_avx && (xcr0 & 0xe0) == 0xe0; /* opmask, ZMM_Hi256, Hi16_ZMM */
  f->os_amx = (xcr0 & 0x60000) == 0x60000;   /* XTILECFG, XTILEDATA */
}
#endif

/* Linux hands out the large tile-data state only to processes that ask for it; a
 * process that uses AMX without asking is killed. */
static bool request_amx(void) {
#if KL_X86 && defined(__linux__)
  if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, KL_XFEATURE_XTILEDATA) != 0) return false;
  unsigned long long perm = 0;
  if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &perm) != 0) return false;
  return (perm >> KL_XFEATURE_XTILEDATA) & 1u;
#else
  return false;
#endif
}

static bool has_avx2(const kl_cpu_features *f) { return f->avx2 && f->fma && f->os_avx; }
static bool has_avx512(const kl_cpu_features *f) {
  return has_avx2(f) && f->avx512f && f->avx512bw && f->avx512dq && f->avx512vl &&
         f->os_avx512;
}
static bool has_amx_hw(const kl_cpu_features *f) {
  return f->amx_tile && f->amx_bf16 && f->amx_int8 && f->os_amx;
}

kl_isa kl_isa_supported(const kl_cpu_features *f) {
  if (!has_avx2(f)) return KL_ISA_GENERIC;
  if (!has_avx512(f)) return KL_ISA_AVX2;
  if (!f->avx512_bf16) return KL_ISA_AVX512;
  if (!has_amx_hw(f) || !f->amx_permitted) return KL_ISA_AVX512_BF16;
  return KL_ISA_AMX;
}

/* Why the hardware stops at level l: what the next level up lacks. */
static const char *hw_limit(const kl_cpu_features *f, kl_isa l) {
  switch (l) {
  case KL_ISA_GENERIC:
    return !f->avx2 || !f->fma ? "the CPU lacks AVX2+FMA"
                               : "the OS does not save the AVX registers (XCR0)";
  case KL_ISA_AVX2:
    return !(f->avx512f && f->avx512bw && f->avx512dq && f->avx512vl)
               ? "the CPU lacks AVX-512 F/BW/DQ/VL"
               : "the OS does not save the AVX-512 registers (XCR0)";
  case KL_ISA_AVX512: return "the CPU lacks AVX512_BF16";
  case KL_ISA_AVX512_BF16:
    if (!(f->amx_tile && f->amx_bf16 && f->amx_int8)) return "the CPU lacks AMX-TILE/BF16/INT8";
    if (!f->os_amx) return "the OS does not save the AMX tile state (XCR0)";
    return "Linux did not grant AMX tile-data permission (arch_prctl)";
  default: return "the CPU has every level kiln knows";
  }
}

kl_isa kl_isa_choose(const kl_cpu_features *f, const char *env, char *why, size_t len) {
  kl_isa hw = kl_isa_supported(f), cap = KL_ISA_AMX;
  bool set = env && env[0], known = set && kl_isa_parse(env, &cap);
  kl_isa level = known && cap < hw ? cap : hw;
  /* below amx the tile permission is not asked (detect_once): the CPU's level is amx */
  bool amx_unasked = hw == KL_ISA_AVX512_BF16 && has_amx_hw(f) && !f->amx_permitted;
  if (known && cap < hw)
    snprintf(why, len, "KILN_ISA=%s lowers it from %s", env,
             level_names[amx_unasked && cap < KL_ISA_AMX ? KL_ISA_AMX : hw]);
  else if (known && cap > hw)
    snprintf(why, len, "%s; KILN_ISA=%s cannot raise it", hw_limit(f, hw), env);
  else if (set && !known)
    snprintf(why, len, "%s; KILN_ISA=%s ignored (expected generic, avx2, avx512, "
             "avx512_bf16 or amx)", hw_limit(f, hw), env);
  else
    snprintf(why, len, "%s", hw_limit(f, hw));
  return level;
}

const char *kl_isa_feature_list(const kl_cpu_features *f, char *buf, size_t len) {
  const struct { bool on; const char *name; } list[] = {
      {f->avx, "avx"}, {f->avx2, "avx2"}, {f->fma, "fma"}, {f->f16c, "f16c"},
      {f->avx512f, "avx512f"}, {f->avx512bw, "avx512bw"}, {f->avx512dq, "avx512dq"},
      {f->avx512vl, "avx512vl"}, {f->avx512_vbmi, "avx512_vbmi"},
      {f->avx512_bf16, "avx512_bf16"},
      {f->amx_tile, "amx_tile"}, {f->amx_bf16, "amx_bf16"}, {f->amx_int8, "amx_int8"},
      {f->os_avx, "os:avx"}, {f->os_avx512, "os:avx512"}, {f->os_amx, "os:amx"},
      {f->amx_permitted, "amx_permitted"}};
  size_t used = 0;
  if (len) buf[0] = '\0';
  for (size_t i = 0; i < sizeof list / sizeof list[0]; i++) {
    if (!list[i].on || used >= len) continue;
    int w = snprintf(buf + used, len - used, "%s%s", used ? " " : "", list[i].name);
    used += w > 0 ? (size_t)w : 0;
  }
  return buf;
}

/* ---- the once-per-process state ---- */

typedef struct isa_state {
  kl_cpu_features f;
  kl_isa level;
  char why[320]; /* "level: " + the reason */
} isa_state;

static isa_state g_isa; /* written once under g_once, read-only afterwards */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void detect_once(void) {
  kl_cpu_features f;
  memset(&f, 0, sizeof f);
#if KL_X86
  detect_x86(&f);
#endif
  const char *env = getenv("KILN_ISA");
  if (env && !*env) env = NULL; /* set but empty: as if unset */
  kl_isa cap = KL_ISA_AMX;
  bool known = env && kl_isa_parse(env, &cap);
  /* ask only when AMX would be used, so KILN_ISA below amx leaves the process as it was */
  if (has_amx_hw(&f) && f.avx512_bf16 && has_avx512(&f) && (!known || cap == KL_ISA_AMX))
    f.amx_permitted = request_amx();
  char why[256];
  kl_isa level = kl_isa_choose(&f, env, why, sizeof why);
  g_isa.f = f;
  g_isa.level = level;
  snprintf(g_isa.why, sizeof g_isa.why, "%s: %s", level_names[level], why);
}

static const isa_state *isa_get(void) {
  pthread_once(&g_once, detect_once);
  return &g_isa;
}

const kl_cpu_features *kl_isa_features(void) { return &isa_get()->f; }
kl_isa kl_isa_level(void) { return isa_get()->level; }
const char *kl_isa_reason(void) { return isa_get()->why; }
