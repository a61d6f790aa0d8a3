/* classify_digits: an example of embedding kiln through its public API.
 *
 *   classify_digits MODEL IMAGES.npy LABELS.npy
 *
 * Loads a digit classifier (input float32 [batch,1,8,8], output logits [batch,10]),
 * classifies each image as a batch of one, and prints the accuracy, a few predictions
 * and the mean latency per image. Build against an installed kiln with
 *   cc classify_digits.c $(pkg-config --cflags --libs kiln)
 * The small .npy reader below handles the two files this example needs: C-ordered
 * little-endian float32 and int64 arrays. */
#include <kiln.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct array {
  void *data;
  int rank;
  int64_t dims[8];
  int64_t count;
} array;

/* Read a .npy (version 1 or 2) whose dtype descriptor is `descr`. */
static int read_npy(const char *path, const char *descr, size_t elem, array *a) {
  FILE *f = fopen(path, "rb");
  unsigned char head[12];
  char header[4096];
  int ok = 0;
  if (!f) return 0;
  if (fread(head, 1, 10, f) != 10 || memcmp(head, "\x93NUMPY", 6) != 0) goto done;
  size_t hlen = head[8] | (size_t)head[9] << 8;
  if (head[6] >= 2) { /* version 2+: a 4-byte header length */
    if (fread(head + 10, 1, 2, f) != 2) goto done;
    hlen = head[8] | (size_t)head[9] << 8 | (size_t)head[10] << 16 | (size_t)head[11] << 24;
  }
  if (hlen >= sizeof header || fread(header, 1, hlen, f) != hlen) goto done;
  header[hlen] = '\0';
  if (!strstr(header, descr) || strstr(header, "'fortran_order': True")) goto done;
  char *p = strstr(header, "'shape'");
  if (!p || !(p = strchr(p, '('))) goto done;
  a->rank = 0;
  a->count = 1;
  for (p++; *p && *p != ')' && a->rank < 8;) {
    char *end;
    long long d = strtoll(p, &end, 10);
    if (end == p) break;
    a->dims[a->rank++] = d;
    a->count *= d;
    p = end + strspn(end, ", ");
  }
  a->data = malloc((size_t)a->count * elem + 1);
  ok = a->data && fread(a->data, elem, (size_t)a->count, f) == (size_t)a->count;
done:
  fclose(f);
  return ok;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s MODEL IMAGES.npy LABELS.npy\n", argv[0]);
    return 2;
  }
  array images = {0}, labels = {0};
  if (!read_npy(argv[2], "'<f4'", 4, &images) || images.rank != 4 ||
      !read_npy(argv[3], "'<i8'", 8, &labels) || labels.count != images.dims[0]) {
    fprintf(stderr, "%s: cannot read images [N,1,8,8] float32 and labels [N] int64\n",
            argv[0]);
    return 1;
  }
  kiln_model *model = NULL;
  kiln_session *session = NULL;
  kiln_tensor_info in, out;
  int rc = 1;
  if (kiln_model_load(argv[1], NULL, &model) != KILN_OK) {
    fprintf(stderr, "load failed: %s\n", kiln_model_error(model));
    goto done;
  }
  if (kiln_session_create(model, NULL, &session) != KILN_OK) {
    fprintf(stderr, "session failed: %s\n", kiln_session_error(session));
    goto done;
  }
  kiln_model_input_info(model, 0, &in);
  int logits_at = kiln_model_output_index(model, "logits"); /* the output, by name */
  if (logits_at < 0) {
    fprintf(stderr, "%s: the model has no output named 'logits'\n", argv[1]);
    goto done;
  }
  int64_t n = images.dims[0], pixels = images.count / n, correct = 0;
  int64_t dims[4] = {1, images.dims[1], images.dims[2], images.dims[3]};
  double total_ms = 0;
  for (int64_t i = 0; i < n; i++) {
    const float *img = (const float *)images.data + i * pixels;
    double t0 = now_ms();
    if (kiln_session_set_input(session, in.name, KILN_DTYPE_FLOAT32, 4, dims, img,
                               (size_t)pixels * sizeof(float)) != KILN_OK ||
        kiln_session_run(session) != KILN_OK) {
      fprintf(stderr, "image %lld: %s\n", (long long)i, kiln_session_error(session));
      goto done;
    }
    const float *logits;
    kiln_session_get_output(session, logits_at, &out, (const void **)&logits);
    total_ms += now_ms() - t0;
    int best = 0;
    for (int k = 1; k < out.dims[1]; k++)
      if (logits[k] > logits[best]) best = k;
    int64_t label = ((const int64_t *)labels.data)[i];
    correct += best == label;
    if (i < 8)
      printf("image %lld: predicted %d, label %lld%s\n", (long long)i, best, (long long)label,
             best == label ? "" : "  (wrong)");
  }
  printf("accuracy: %.4f (%lld of %lld held-out images)\n", (double)correct / (double)n,
         (long long)correct, (long long)n);
  printf("latency: %.4f ms per image (batch 1, mean of %lld)\n", total_ms / (double)n,
         (long long)n);
  rc = 0;
done:
  kiln_session_free(session);
  kiln_model_free(model);
  free(images.data);
  free(labels.data);
  return rc;
}
