/* train_digits: an example of training through kiln's public API.
 *
 *   train_digits MODEL IMAGES.npy LABELS.npy EPOCHS [OUT.onnx]
 *
 * Trains a digit classifier (input "x", float32 [batch, 64]: each 8x8 image flat; output
 * logits [batch, 10]) with SGD and momentum on the images, in batches of 32 in file
 * order, printing the loss of each epoch; then evaluates the accuracy on the same
 * images and, given OUT.onnx, saves the trained model. Exits 0 when it trained (and the
 * accuracy is above 90%), 1 otherwise. Build against an installed kiln with
 *   cc train_digits.c $(pkg-config --cflags --libs kiln)
 * The small .npy reader below handles C-ordered little-endian float32 and int64. */
#include <kiln.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static int fail(kiln_trainer *t, const char *what) {
  fprintf(stderr, "train_digits: %s: %s\n", what, t ? kiln_trainer_error(t) : "out of memory");
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: train_digits MODEL IMAGES.npy LABELS.npy EPOCHS [OUT.onnx]\n");
    return 2;
  }
  array images, labels;
  if (!read_npy(argv[2], "<f4", 4, &images) || !read_npy(argv[3], "<i8", 8, &labels) ||
      images.dims[0] != labels.count) {
    fprintf(stderr, "train_digits: cannot read %s and %s as float32 images and int64 labels "
            "of as many\n", argv[2], argv[3]);
    return 1;
  }
  int epochs = atoi(argv[4]);
  int64_t n = labels.count, per = images.count / n, batch = 32;
  kiln_options *o = NULL;
  kiln_trainer *t = NULL;
  if (kiln_options_create(&o) != KILN_OK) return 1;
  kiln_options_set_string(o, "optimizer", "sgd");
  kiln_options_set_float(o, "lr", 0.05);
  kiln_options_set_float(o, "momentum", 0.9);
  if (kiln_trainer_create(argv[1], o, &t) != KILN_OK) return fail(t, "create");
  int rank = 2; /* [N, 64]: the images flat */
  const float *x = images.data;
  const int64_t *y = labels.data;
  for (int e = 0; e < epochs; e++) {
    double sum = 0;
    int steps = 0;
    for (int64_t at = 0; at < n; at += batch) {
      int64_t m = n - at < batch ? n - at : batch;
      int64_t xd[2] = {m, per}, yd[1] = {m};
      double loss;
      if (kiln_trainer_set_input(t, "x", KILN_DTYPE_FLOAT32, rank, xd, x + at * per,
                                 (size_t)(m * per) * sizeof(float)) != KILN_OK ||
          kiln_trainer_set_input(t, "target", KILN_DTYPE_INT64, 1, yd, y + at,
                                 (size_t)m * sizeof(int64_t)) != KILN_OK)
        return fail(t, "bind");
      if (kiln_trainer_step(t, &loss) != KILN_OK) return fail(t, "step");
      sum += loss;
      steps++;
    }
    printf("epoch %d: mean loss %.4f\n", e + 1, sum / steps);
  }
  /* accuracy, the whole set as one batch, in inference form */
  int64_t xd[2] = {n, per};
  kiln_tensor_info info;
  const void *out;
  if (kiln_trainer_set_input(t, "x", KILN_DTYPE_FLOAT32, rank, xd, x,
                             (size_t)images.count * sizeof(float)) != KILN_OK ||
      kiln_trainer_evaluate(t, &info, &out) != KILN_OK)
    return fail(t, "evaluate");
  const float *logits = out;
  int64_t right = 0;
  for (int64_t i = 0; i < n; i++) {
    int best = 0;
    for (int c = 1; c < 10; c++)
      if (logits[i * 10 + c] > logits[i * 10 + best]) best = c;
    right += best == y[i];
  }
  double acc = (double)right / (double)n;
  printf("accuracy after %lld steps: %.4f\n", (long long)kiln_trainer_steps(t), acc);
  if (argc > 5 && kiln_trainer_save(t, argv[5]) != KILN_OK) return fail(t, "save");
  kiln_trainer_free(t);
  kiln_options_free(o);
  free(images.data);
  free(labels.data);
  return acc > 0.9 ? 0 : 1;
}
