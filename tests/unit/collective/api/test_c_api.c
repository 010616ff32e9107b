/* Compiled as C99: proves c_api.h is a C header, and exercises the ABI in a
 * job of size 1 (no hvdrun environment). Exit status 0 = pass. */
#define _POSIX_C_SOURCE 200809L /* mkstemp, close */

#include "hvd/collective/c_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures = 0;

#define EXPECT(cond)                                                                                         \
  do {                                                                                                       \
    if (!(cond)) {                                                                                           \
      fprintf(stderr, "%s:%d: expected %s (last error: %s)\n", __FILE__, __LINE__, #cond, hvd_last_error()); \
      ++failures;                                                                                            \
    }                                                                                                        \
  } while (0)

static void* my_alloc(void* user, int ndim, const int64_t* shape, size_t bytes) {
  (void)ndim;
  (void)shape;
  return bytes <= 64 ? user : NULL;
}

int main(void) {
  float data[4] = {1, 2, 3, 4};
  float out[4];
  int32_t gin[3] = {7, 8, 9};
  int32_t gbuf[16];
  int64_t shape[1] = {3};
  int64_t got_shape[2] = {0, 0};
  int ndim = 0;
  const void* p = NULL;
  size_t bytes = 0;
  hvd_handle_t h = NULL;

  EXPECT(hvd_rank() == -1);
  EXPECT(strstr(hvd_last_error(), "not initialised") != NULL);
  EXPECT(hvd_allreduce("x", data, out, 4, HVD_FLOAT32, HVD_SUM) == HVD_ERR_NOT_INITIALIZED);

  EXPECT(hvd_init() == HVD_OK);
  EXPECT(hvd_is_initialized() == 1);
  EXPECT(hvd_rank() == 0);
  EXPECT(hvd_size() == 1);

  EXPECT(hvd_allreduce_async("x", data, out, 4, HVD_FLOAT32, HVD_SUM, 2.0, 1.0, &h) == HVD_OK);
  EXPECT(hvd_wait(h) == HVD_OK);
  EXPECT(hvd_poll(h) == 1);
  hvd_release(h);
  EXPECT(out[3] == 8.0f);

  EXPECT(hvd_allgather_async("g", gin, 1, shape, HVD_INT32, my_alloc, gbuf, &h) == HVD_OK);
  EXPECT(hvd_wait(h) == HVD_OK);
  EXPECT(hvd_handle_output(h, &p, &bytes) == HVD_OK);
  EXPECT(p == (const void*)gbuf);
  EXPECT(bytes == 3 * sizeof(int32_t));
  EXPECT(hvd_handle_output_shape(h, got_shape, 2, &ndim) == HVD_OK);
  EXPECT(ndim == 1 && got_shape[0] == 3);
  EXPECT(gbuf[2] == 9);
  hvd_release(h);

  EXPECT(hvd_broadcast("b", data, data, 4, HVD_FLOAT32, 0) == HVD_OK);
  EXPECT(hvd_broadcast("b2", data, data, 4, HVD_FLOAT32, 1) == HVD_ERR_INVALID);
  EXPECT(strstr(hvd_last_error(), "root rank 1 is out of range") != NULL);
  EXPECT(hvd_allreduce("bad", data, out, 4, 99, HVD_SUM) == HVD_ERR_INVALID);
  /* Adasum of one rank is the input (times the scale factors); integer
   * tensors are refused. */
  EXPECT(hvd_allreduce_async("ada", data, out, 4, HVD_FLOAT32, HVD_ADASUM, 2.0, 1.5, &h) == HVD_OK);
  EXPECT(hvd_wait(h) == HVD_OK);
  hvd_release(h);
  EXPECT(out[3] == data[3] * 3.0f);
  EXPECT(hvd_allreduce("ada.i", gin, gin, 3, HVD_INT32, HVD_ADASUM) == HVD_ERR_INVALID);
  EXPECT(strstr(hvd_last_error(), "Adasum supports float16, float32 and float64") != NULL);
  EXPECT(hvd_allreduce_async("x", data, out, 4, HVD_FLOAT32, HVD_SUM, 1.0, 1.0, NULL) == HVD_ERR_INVALID);
  EXPECT(hvd_barrier() == HVD_OK);
  EXPECT(hvd_poll(NULL) == HVD_ERR_INVALID);

  /* The _ex functions: host buffers said explicitly or found by AUTO (host
   * memory is host memory with or without CUDA); bad device values. */
  EXPECT(hvd_cuda_built() == 0 || hvd_cuda_built() == 1);
  EXPECT(hvd_cuda_device_count() >= 0);
  EXPECT(hvd_allreduce_async_ex("ex", data, out, 4, HVD_FLOAT32, HVD_SUM, 3.0, 1.0, HVD_DEVICE_HOST, NULL, &h) ==
         HVD_OK);
  EXPECT(hvd_wait(h) == HVD_OK);
  hvd_release(h);
  EXPECT(out[3] == 12.0f);
  EXPECT(hvd_allreduce_async_ex("ex.auto", data, out, 4, HVD_FLOAT32, HVD_SUM, 1.0, 1.0, HVD_DEVICE_AUTO, NULL, &h) ==
         HVD_OK);
  EXPECT(hvd_wait(h) == HVD_OK);
  hvd_release(h);
  EXPECT(out[3] == 4.0f);
  EXPECT(hvd_broadcast_async_ex("ex.b", data, out, 4, HVD_FLOAT32, 0, HVD_DEVICE_HOST, NULL, &h) == HVD_OK);
  EXPECT(hvd_wait(h) == HVD_OK);
  hvd_release(h);
  {
    /* allgather/alltoall/reducescatter _ex on host memory (AUTO and HOST);
     * the output stays host memory the handle owns. */
    const int64_t shape[1] = {4};
    const void* res = NULL;
    size_t res_bytes = 0;
    int where = 7;
    EXPECT(hvd_allgather_async_ex("ex.g", data, 1, shape, HVD_FLOAT32, NULL, NULL, HVD_DEVICE_AUTO, NULL, &h) ==
           HVD_OK);
    EXPECT(hvd_wait(h) == HVD_OK);
    EXPECT(hvd_handle_output(h, &res, &res_bytes) == HVD_OK);
    EXPECT(res_bytes == 16 && memcmp(res, data, 16) == 0);
    EXPECT(hvd_handle_output_device(h, &where) == HVD_OK);
    EXPECT(where == -1);
    hvd_release(h);
    EXPECT(hvd_alltoall_async_ex("ex.t", data, 1, shape, HVD_FLOAT32, NULL, NULL, NULL, HVD_DEVICE_HOST, NULL, &h) ==
           HVD_OK);
    EXPECT(hvd_wait(h) == HVD_OK);
    hvd_release(h);
    EXPECT(hvd_reducescatter_async_ex("ex.r", data, 1, shape, HVD_FLOAT32, HVD_SUM, 2.0, 1.0, NULL, NULL,
                                      HVD_DEVICE_HOST, NULL, &h) == HVD_OK);
    EXPECT(hvd_wait(h) == HVD_OK);
    EXPECT(hvd_handle_output(h, &res, &res_bytes) == HVD_OK);
    EXPECT(res_bytes == 16 && ((const float*)res)[3] == 2.0f * data[3]);
    hvd_release(h);
    EXPECT(hvd_allgather_async_ex("ex.g.bad", data, 1, shape, HVD_FLOAT32, NULL, NULL, -9, NULL, &h) ==
           HVD_ERR_INVALID);
    EXPECT(strstr(hvd_last_error(), "device -9 is not valid") != NULL);
  }
  EXPECT(hvd_allreduce_async_ex("ex.bad", data, out, 4, HVD_FLOAT32, HVD_SUM, 1.0, 1.0, -7, NULL, &h) ==
         HVD_ERR_INVALID);
  EXPECT(strstr(hvd_last_error(), "device -7 is not valid") != NULL);
  if (!hvd_cuda_built()) {
    /* Without the CUDA component a device buffer is refused by negotiation
     * (every rank's handle fails alike); the memory is never touched. */
    EXPECT(hvd_allreduce_async_ex("ex.dev", data, out, 4, HVD_FLOAT32, HVD_SUM, 1.0, 1.0, 0, NULL, &h) == HVD_OK);
    EXPECT(hvd_wait(h) == HVD_ERR_INVALID);
    EXPECT(strstr(hvd_last_error(), "built without the CUDA component") != NULL);
    hvd_release(h);
    {
      const int64_t shape[1] = {4};
      EXPECT(hvd_allgather_async_ex("ex.g.dev", data, 1, shape, HVD_FLOAT32, NULL, NULL, 0, NULL, &h) == HVD_OK);
      EXPECT(hvd_wait(h) == HVD_ERR_INVALID);
      EXPECT(strstr(hvd_last_error(), "built without the CUDA component") != NULL);
      hvd_release(h);
    }
    EXPECT(hvd_barrier() == HVD_OK);
  }

  /* Process sets in a job of size 1: only the global one exists. */
  {
    int ids[2] = {-1, -1};
    const int zero = 0;
    EXPECT(hvd_process_set_ids(ids, 2) == 1 && ids[0] == HVD_GLOBAL_PROCESS_SET);
    EXPECT(hvd_process_set_size(0) == 1 && hvd_process_set_rank(0) == 0 && hvd_process_set_included(0) == 1);
    EXPECT(hvd_process_set_size(5) == HVD_ERR_INVALID);
    EXPECT(hvd_add_process_set(&zero, 1) == HVD_ERR_INVALID); /* HOROVOD_DYNAMIC_PROCESS_SETS unset */
    EXPECT(hvd_add_process_set(NULL, 1) == HVD_ERR_INVALID);
    EXPECT(hvd_allreduce_async_ps("ps", data, out, 4, HVD_FLOAT32, HVD_SUM, 1.0, 1.0, HVD_DEVICE_HOST, NULL, 5, &h) ==
           HVD_ERR_INVALID);
    EXPECT(strstr(hvd_last_error(), "process set 5 is not registered") != NULL);
    EXPECT(hvd_allreduce_async_ps("ps", data, out, 4, HVD_FLOAT32, HVD_SUM, 1.0, 1.0, HVD_DEVICE_HOST, NULL,
                                  HVD_GLOBAL_PROCESS_SET, &h) == HVD_OK);
    EXPECT(hvd_wait(h) == HVD_OK);
    hvd_release(h);
  }

  /* The timeline: rank 0 (this process) writes a JSON array. */
  {
    char path[] = "/tmp/hvd-c-api-timeline-XXXXXX";
    char text[4096];
    size_t n = 0;
    FILE* f = NULL;
    int fd = mkstemp(path);
    EXPECT(fd >= 0);
    if (fd >= 0) close(fd);
    EXPECT(hvd_start_timeline(NULL, 0) == HVD_ERR_INVALID);
    EXPECT(hvd_start_timeline("/nonexistent-dir-hvd/t.json", 0) == HVD_ERR_IO);
    EXPECT(strstr(hvd_last_error(), "/nonexistent-dir-hvd/t.json") != NULL);
    EXPECT(hvd_start_timeline(path, 1) == HVD_OK);
    EXPECT(hvd_allreduce("timeline.x", data, out, 4, HVD_FLOAT32, HVD_SUM) == HVD_OK);
    EXPECT(hvd_stop_timeline() == HVD_OK);
    EXPECT(hvd_stop_timeline() == HVD_OK); /* no-op when none is open */
    f = fopen(path, "r");
    EXPECT(f != NULL);
    if (f) {
      n = fread(text, 1, sizeof text - 1, f);
      fclose(f);
    }
    text[n] = 0;
    EXPECT(n > 2 && text[0] == '[' && strcmp(text + n - 3, "\n]\n") == 0);
    EXPECT(strstr(text, "\"timeline.x\"") != NULL && strstr(text, "NEGOTIATE_ALLREDUCE") != NULL);
    EXPECT(strstr(text, "CYCLE_START") != NULL);
    remove(path);
  }

  EXPECT(hvd_shutdown() == HVD_OK);
  EXPECT(hvd_is_initialized() == 0);
  EXPECT(hvd_process_set_size(0) == HVD_ERR_NOT_INITIALIZED);
  if (failures == 0) printf("c_api: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
