/* The hello example through the C ABI only (c_api.h), as a binding would
 * use it: error codes plus hvd_last_error(), opaque handles.
 *   hvdrun -np 2 -H localhost:2 build/apps/examples/hello_c */
#include "hvd/collective/c_api.h"

#include <stdio.h>

static int fail(const char* what, int rc) {
  fprintf(stderr, "hello_c: %s failed (%d): %s\n", what, rc, hvd_last_error());
  return 1;
}

int main(void) {
  int rc = hvd_init();
  int rank, size, i, ok = 1;
  double x[16];
  int32_t mine[2];
  int64_t shape[1] = {2};
  const void* out = NULL;
  size_t bytes = 0;
  hvd_handle_t h = NULL;

  if (rc != HVD_OK) return fail("hvd_init", rc);
  rank = hvd_rank();
  size = hvd_size();
  printf("hello from rank %d of %d (C ABI)\n", rank, size);

  for (i = 0; i < 16; ++i) x[i] = rank + 1;
  rc = hvd_allreduce_async("x", x, x, 16, HVD_FLOAT64, HVD_AVERAGE, 1.0, 1.0, &h);
  if (rc == HVD_OK) rc = hvd_wait(h);
  hvd_release(h);
  if (rc != HVD_OK) return fail("allreduce", rc);
  for (i = 0; i < 16; ++i) ok = ok && x[i] == (size + 1) / 2.0;
  printf("rank %d: allreduce %s\n", rank, ok ? "ok" : "FAILED");

  mine[0] = rank;
  mine[1] = -rank;
  rc = hvd_allgather_async("g", mine, 1, shape, HVD_INT32, NULL, NULL, &h);
  if (rc == HVD_OK) rc = hvd_wait(h);
  if (rc == HVD_OK) rc = hvd_handle_output(h, &out, &bytes);
  if (rc != HVD_OK) {
    hvd_release(h);
    return fail("allgather", rc);
  }
  for (i = 0; i < size; ++i) {
    const int32_t* g = (const int32_t*)out;
    ok = ok && g[2 * i] == i && g[2 * i + 1] == -i;
  }
  ok = ok && bytes == (size_t)size * 2 * sizeof(int32_t);
  hvd_release(h);
  printf("rank %d: allgather %s\n", rank, ok ? "ok" : "FAILED");

  rc = hvd_barrier();
  if (rc != HVD_OK) return fail("barrier", rc);
  hvd_shutdown();
  return ok ? 0 : 1;
}
