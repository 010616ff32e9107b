/* Process sets through the C ABI only (c_api.h), compiled as C99; run by
 * hvdrun with 3 ranks (collective.hvdrun.np3.process_sets_c). Static sets
 * {0,2} and {1,2} from hvd_init_process_sets: an allreduce on {0,2} whose
 * result (4) differs from the global one (6), rank 1 refused on it, a
 * broadcast on {1,2} from global rank 2, a barrier on each set; then after
 * a re-init with HOROVOD_DYNAMIC_PROCESS_SETS=1, add / use / remove. Also
 * hvd_join beside an allreduce, a barrier and a refused broadcast.
 * Prints "rank R: process_sets ok" and exits 0, else exits 1. */
#define _POSIX_C_SOURCE 200112L
#include "hvd/collective/c_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;
static int me = -1;

#define EXPECT(cond)                                                                                            \
  do {                                                                                                          \
    if (!(cond)) {                                                                                              \
      fprintf(stderr, "rank %d: %s:%d: expected %s (last error: %s)\n", me, __FILE__, __LINE__, #cond,          \
              hvd_last_error());                                                                                \
      ++failures;                                                                                               \
    }                                                                                                           \
  } while (0)

static int sum_on(int set, int value) {
  int32_t v = value;
  hvd_handle_t h = NULL;
  if (hvd_allreduce_async_ps("sum", &v, &v, 1, HVD_INT32, HVD_SUM, 1.0, 1.0, HVD_DEVICE_HOST, NULL, set, &h) !=
      HVD_OK) {
    return -1000;
  }
  if (hvd_wait(h) != HVD_OK) v = -2000;
  hvd_release(h);
  return v;
}

int main(void) {
  const int ranks[4] = {0, 2, 1, 2};
  const int sizes[2] = {2, 2};
  int ids[4] = {0, 0, 0, 0};
  int members[4] = {0, 0, 0, 0};
  hvd_handle_t h = NULL;

  EXPECT(hvd_init_process_sets(ranks, sizes, 2) == HVD_OK);
  me = hvd_rank();
  EXPECT(hvd_size() == 3);
  EXPECT(hvd_process_set_ids(ids, 4) == 3 && ids[0] == 0 && ids[1] == 1 && ids[2] == 2);
  EXPECT(hvd_process_set_ranks(1, members, 4) == 2 && members[0] == 0 && members[1] == 2);
  EXPECT(hvd_process_set_size(2) == 2);
  EXPECT(hvd_process_set_included(1) == (me != 1));
  EXPECT(hvd_process_set_size(9) == HVD_ERR_INVALID);
  if (me != 1) {
    EXPECT(hvd_process_set_rank(1) == me / 2);
    EXPECT(sum_on(1, me + 1) == 4); /* 1 + 3: not the global 6 */
  } else {
    int32_t v = 1;
    EXPECT(hvd_process_set_rank(1) == HVD_ERR_INVALID);
    EXPECT(hvd_allreduce_async_ps("sum", &v, &v, 1, HVD_INT32, HVD_SUM, 1.0, 1.0, HVD_DEVICE_HOST, NULL, 1, &h) ==
           HVD_ERR_INVALID);
    EXPECT(strstr(hvd_last_error(), "is not a member of process set 1") != NULL);
    EXPECT(h == NULL);
  }
  if (me != 0) {
    int32_t b[2] = {me, me};
    EXPECT(hvd_broadcast_async_ps("b", b, b, 2, HVD_INT32, 2, HVD_DEVICE_HOST, NULL, 2, &h) == HVD_OK);
    EXPECT(hvd_wait(h) == HVD_OK);
    hvd_release(h);
    EXPECT(b[0] == 2 && b[1] == 2);
  }
  {
    int set;
    for (set = 1; set <= 2; ++set) {
      if (hvd_process_set_included(set) != 1) continue;
      EXPECT(hvd_barrier_async_ps(NULL, set, &h) == HVD_OK);
      EXPECT(hvd_wait(h) == HVD_OK);
      hvd_release(h);
    }
  }
  EXPECT(sum_on(HVD_GLOBAL_PROCESS_SET, me + 1) == 6);
  /* Join: rank 2 has no more data. The others' allreduce gets zeros from
   * it, their barrier completes with it taking part, a broadcast fails on
   * both with HVD_ERR_JOINED; every rank learns the same last joiner. */
  {
    int last = -1;
    if (me == 2) {
      EXPECT(hvd_join(&last) == HVD_OK);
    } else {
      int32_t b[2] = {me, me};
      EXPECT(sum_on(HVD_GLOBAL_PROCESS_SET, me + 1) == 3); /* 1 + 2 + 0 */
      EXPECT(hvd_barrier_async(NULL, &h) == HVD_OK);
      EXPECT(hvd_wait(h) == HVD_OK);
      hvd_release(h);
      EXPECT(hvd_broadcast_async("jb", b, b, 2, HVD_INT32, 0, &h) == HVD_OK);
      EXPECT(hvd_wait(h) == HVD_ERR_JOINED);
      EXPECT(strstr(hvd_last_error(), "rank 2 has joined") != NULL);
      hvd_release(h);
      EXPECT(b[0] == me && b[1] == me); /* nothing touched */
      EXPECT(hvd_join(&last) == HVD_OK);
    }
    EXPECT(last == 0 || last == 1); /* rank 2 joined first */
    EXPECT(sum_on(HVD_GLOBAL_PROCESS_SET, last) == 3 * last);
  }
  /* Without HOROVOD_DYNAMIC_PROCESS_SETS: refused, as Horovod. */
  EXPECT(hvd_add_process_set(ranks, 2) == HVD_ERR_INVALID);
  EXPECT(strstr(hvd_last_error(), "HOROVOD_DYNAMIC_PROCESS_SETS=1") != NULL);
  EXPECT(hvd_shutdown() == HVD_OK);

  setenv("HOROVOD_DYNAMIC_PROCESS_SETS", "1", 1);
  EXPECT(hvd_init() == HVD_OK);
  EXPECT(hvd_process_set_ids(NULL, 0) == 1);
  {
    const int pair[2] = {1, 0};
    const int id = hvd_add_process_set(pair, 2);
    EXPECT(id == 1);
    EXPECT(hvd_add_process_set(pair, 2) == HVD_ERR_INVALID); /* duplicate */
    if (me != 2) EXPECT(sum_on(id, me + 1) == 3);
    EXPECT(hvd_remove_process_set(id) == HVD_OK);
    EXPECT(hvd_remove_process_set(id) == HVD_ERR_INVALID);
    EXPECT(hvd_remove_process_set(HVD_GLOBAL_PROCESS_SET) == HVD_ERR_INVALID);
  }
  EXPECT(hvd_shutdown() == HVD_OK);
  if (failures != 0) return 1;
  printf("rank %d: process_sets ok\n", me);
  return 0;
}
