/* moe_npy_cmp REF DIR RTOL: compares every .npy file of REF with the file
 * of the same name in DIR (both must exist, same shape) and their loss.txt:
 * per tensor max|dir - ref| <= RTOL * max|ref| (a tensor of zeros must stay
 * zero), the losses within RTOL relative.  Prints the worst tensor's error
 * relative to its max; exit 0 when everything agrees, 1 otherwise.  Uses
 * moe/'s own .npy reader, so the layout test needs no NumPy. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npy.h"

static int read_loss(const char* dir, double* v) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/loss.txt", dir);
  FILE* f = fopen(path, "r");
  int ok = f && fscanf(f, "%lf", v) == 1;
  if (f) fclose(f);
  if (!ok) fprintf(stderr, "moe_npy_cmp: cannot read %s\n", path);
  return ok ? 0 : -1;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: moe_npy_cmp REF DIR RTOL\n");
    return 2;
  }
  const char *ref = argv[1], *dir = argv[2];
  double rtol = atof(argv[3]), worst = 0.0;
  const char* worst_name = "-";
  static char worst_buf[256];
  int fail = 0, files = 0;
  DIR* d = opendir(ref);
  if (!d) {
    fprintf(stderr, "moe_npy_cmp: cannot open %s\n", ref);
    return 1;
  }
  for (struct dirent* e; (e = readdir(d)) != NULL;) {
    size_t len = strlen(e->d_name);
    if (len < 5 || strcmp(e->d_name + len - 4, ".npy")) continue;
    char pa[4096], pb[4096], err[4200];
    snprintf(pa, sizeof(pa), "%s/%s", ref, e->d_name);
    snprintf(pb, sizeof(pb), "%s/%s", dir, e->d_name);
    moe_npy_t a = {0}, b = {0};
    if (moe_npy_read(pa, &a, err, sizeof(err)) || moe_npy_read(pb, &b, err, sizeof(err))) {
      fprintf(stderr, "moe_npy_cmp: %s\n", err);
      moe_npy_free(&a);
      fail = 1;
      continue;
    }
    files++;
    int same = a.ndim == b.ndim;
    for (int i = 0; same && i < a.ndim; i++) same = a.shape[i] == b.shape[i];
    if (!same) {
      fprintf(stderr, "moe_npy_cmp: %s: shapes differ\n", e->d_name);
      fail = 1;
    } else {
      double amax = 0.0, dmax = 0.0;
      for (size_t i = 0; i < a.count; i++) {
        double x = fabs((double)a.data[i]), dd = fabs((double)a.data[i] - b.data[i]);
        if (x > amax) amax = x;
        if (dd > dmax || dd != dd) dmax = dd != dd ? INFINITY : dd;
      }
      double rel = amax > 0 ? dmax / amax : (dmax > 0 ? INFINITY : 0.0);
      if (rel > worst) {
        worst = rel;
        snprintf(worst_buf, sizeof(worst_buf), "%s", e->d_name);
        worst_name = worst_buf;
      }
      if (!(rel <= rtol)) {
        fprintf(stderr, "moe_npy_cmp: %s: max|diff| %.3g = %.3g of max|ref| %.3g, over %g\n",
                e->d_name, dmax, rel, amax, rtol);
        fail = 1;
      }
    }
    moe_npy_free(&a);
    moe_npy_free(&b);
  }
  closedir(d);
  double la, lb;
  if (read_loss(ref, &la) || read_loss(dir, &lb)) return 1;
  double lrel = fabs(la - lb) / (fabs(la) > 0 ? fabs(la) : 1.0);
  if (!(lrel <= rtol)) {
    fprintf(stderr, "moe_npy_cmp: loss %.9g against %.9g\n", lb, la);
    fail = 1;
  }
  if (files == 0) {
    fprintf(stderr, "moe_npy_cmp: no .npy in %s\n", ref);
    fail = 1;
  }
  printf("%d tensors, worst %.2g of its max (%s), loss %.2g relative\n", files, worst, worst_name,
         lrel);
  return fail;
}
