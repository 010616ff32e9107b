/* The stable C ABI of libhvd_collective, for bindings (Python ctypes, ...).
 *
 * Conventions:
 *  - Every function returning int returns HVD_OK (0) or a negative HVD_ERR_*
 *    code; hvd_last_error() then gives this thread's message for the last
 *    failed call (valid until the next failing call on the same thread).
 *  - Handles are opaque; every handle returned must be released with
 *    hvd_release(), finished or not (an unfinished operation still runs).
 *  - dtype values are HVD_UINT8..HVD_BOOL, op values HVD_SUM..HVD_ADASUM;
 *    both match hvd::collective::DataType / ReduceOp and never change.
 *  - Input and output memory must stay valid until the handle is finished.
 *  - The header is C89/C99 and C++ compatible. */
#ifndef HVD_COLLECTIVE_C_API_H
#define HVD_COLLECTIVE_C_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes. */
#define HVD_OK 0
#define HVD_ERR_INVALID (-1) /* bad argument / environment variable */
#define HVD_ERR_IO (-2) /* communicator failed: peer died, link dropped */
#define HVD_ERR_TIMEOUT (-3) /* rendezvous timed out or tensor stalled */
#define HVD_ERR_MISMATCH (-4) /* ranks disagree on a tensor's parameters */
#define HVD_ERR_NOT_INITIALIZED (-5) /* hvd_init() not called, or after hvd_shutdown() */
#define HVD_ERR_SHUTDOWN (-6) /* the job shut down before the operation ran */
#define HVD_ERR_INTERNAL (-7) /* anything else (a bug: please report) */
/* Elastic jobs (docs/elastic.md). HVD_ERR_PEER_FAILURE is the HVD_ERR_IO of a
 * communicator whose peer died or whose link dropped mid-operation (every
 * communicator failure reports it): restore the last commit, call
 * hvd_elastic_reset() and go on. */
#define HVD_ERR_PEER_FAILURE (-8)
#define HVD_ERR_HOSTS_UPDATED (-9) /* a new world was published: hvd_elastic_reset() */
#define HVD_ERR_REMOVED (-10) /* this worker is no longer in the job (or it ended) */
/* An op other than an allreduce of host buffers or a barrier while some rank
 * has joined (hvd_join); it fails on every rank, as Horovod's. */
#define HVD_ERR_JOINED (-11)

/* Data types. */
#define HVD_UINT8 0
#define HVD_INT8 1
#define HVD_INT32 2
#define HVD_INT64 3
#define HVD_FLOAT16 4
#define HVD_BFLOAT16 5
#define HVD_FLOAT32 6
#define HVD_FLOAT64 7
#define HVD_BOOL 8 /* allgather, broadcast, alltoall only */
#define HVD_INT16 9

/* Reduce operations. */
#define HVD_SUM 0
#define HVD_AVERAGE 1
#define HVD_MIN 2
#define HVD_MAX 3
#define HVD_PRODUCT 4
#define HVD_ADASUM 5 /* allreduce of float16/32/64 host tensors, power-of-two ranks (docs/collective.md) */

typedef struct hvd_handle* hvd_handle_t;

/* Allocates `bytes` for an output of shape[0..ndim) (called on the library's
 * background thread). Return NULL to fail the operation. */
typedef void* (*hvd_alloc_fn)(void* user, int ndim, const int64_t* shape, size_t bytes);

int hvd_init(void);
int hvd_shutdown(void);
int hvd_is_initialized(void);
/* Return the value, or -1 (with hvd_last_error set) when not initialised. */
int hvd_rank(void);
int hvd_size(void);
int hvd_local_rank(void);
int hvd_local_size(void);
int hvd_cross_rank(void);
int hvd_cross_size(void);

/* This thread's message for its last failed call ("" if none). */
const char* hvd_last_error(void);

/* Elementwise reduction of `count` elements; in may equal out. */
int hvd_allreduce_async(const char* name, const void* in, void* out, int64_t count, int dtype, int op, double prescale,
                        double postscale, hvd_handle_t* out_handle);
/* Concatenation along the first dimension of shape[0..ndim) (which may
 * differ per rank). Output from alloc (may be NULL: the handle owns it). */
int hvd_allgather_async(const char* name, const void* in, int ndim, const int64_t* shape, int dtype, hvd_alloc_fn alloc,
                        void* alloc_user, hvd_handle_t* out_handle);
/* `count` elements from root's in to every rank's out (in may equal out). */
int hvd_broadcast_async(const char* name, const void* in, void* out, int64_t count, int dtype, int root,
                        hvd_handle_t* out_handle);
/* splits: hvd_size() entries, rows sent to each rank, or NULL for even. */
int hvd_alltoall_async(const char* name, const void* in, int ndim, const int64_t* shape, int dtype,
                       const int64_t* splits, hvd_alloc_fn alloc, void* alloc_user, hvd_handle_t* out_handle);
int hvd_reducescatter_async(const char* name, const void* in, int ndim, const int64_t* shape, int dtype, int op,
                            double prescale, double postscale, hvd_alloc_fn alloc, void* alloc_user,
                            hvd_handle_t* out_handle);
/* name may be NULL. */
int hvd_barrier_async(const char* name, hvd_handle_t* out_handle);
/* Horovod's join: this rank has no more data; until every rank joined,
 * allreduces of host buffers the other ranks submit run with zeros from this
 * one, their barriers with this one taking part, and any other op fails on
 * every rank with HVD_ERR_JOINED. Blocks
 * until every rank joined; *last_rank (may be NULL) receives the rank that
 * joined last. */
int hvd_join(int* last_rank);

/* CUDA device buffers (docs/cuda.md, "Operations on device buffers").
 * `device`: the CUDA device both buffers are on (>= 0), HVD_DEVICE_HOST, or
 * HVD_DEVICE_AUTO (the library asks CUDA; host memory in a build without
 * CUDA). `cuda_stream`: a cudaStream_t of that device; the operation runs
 * after the work queued on it (NULL: the legacy default stream). The handle
 * finishes once the result is in `out`. Every rank must pass device buffers
 * or every rank host buffers (else HVD_ERR_MISMATCH on every rank); device
 * buffers in a library built without CUDA fail with HVD_ERR_INVALID on
 * every rank. With HVD_DEVICE_HOST these equal the functions above. */
#define HVD_DEVICE_HOST (-1)
#define HVD_DEVICE_AUTO (-2)
int hvd_allreduce_async_ex(const char* name, const void* in, void* out, int64_t count, int dtype, int op,
                           double prescale, double postscale, int device, void* cuda_stream, hvd_handle_t* out_handle);
int hvd_broadcast_async_ex(const char* name, const void* in, void* out, int64_t count, int dtype, int root, int device,
                           void* cuda_stream, hvd_handle_t* out_handle);
/* Allgather, alltoall and reducescatter of device buffers: the data goes
 * through host memory (docs/cuda.md); `alloc` must return memory on
 * `device`, or be NULL: the handle then owns device memory, and
 * hvd_handle_output gives its device pointer (hvd_handle_output_device). */
int hvd_allgather_async_ex(const char* name, const void* in, int ndim, const int64_t* shape, int dtype,
                           hvd_alloc_fn alloc, void* alloc_user, int device, void* cuda_stream,
                           hvd_handle_t* out_handle);
int hvd_alltoall_async_ex(const char* name, const void* in, int ndim, const int64_t* shape, int dtype,
                          const int64_t* splits, hvd_alloc_fn alloc, void* alloc_user, int device, void* cuda_stream,
                          hvd_handle_t* out_handle);
int hvd_reducescatter_async_ex(const char* name, const void* in, int ndim, const int64_t* shape, int dtype, int op,
                               double prescale, double postscale, hvd_alloc_fn alloc, void* alloc_user, int device,
                               void* cuda_stream, hvd_handle_t* out_handle);
/* 1 when the library was built with the CUDA component, else 0. */
int hvd_cuda_built(void);
/* Number of CUDA devices visible (0 without CUDA, driver or device). */
int hvd_cuda_device_count(void);

/* Process sets (docs/collective.md, "Process sets"): a set of ranks with its
 * own communicator, negotiation and fusion, so ops on different sets run
 * independently. HVD_GLOBAL_PROCESS_SET (0) is every rank.
 *
 * hvd_init_process_sets: hvd_init that also registers static sets (Horovod's
 * init(process_sets=[...])): set i has sizes[i] ranks, taken in order from
 * `ranks`, and gets id i + 1. Every rank passes the same sets. */
#define HVD_GLOBAL_PROCESS_SET 0
int hvd_init_process_sets(const int* ranks, const int* sizes, int nsets);
/* Collective over every rank (same arguments, same order on every rank);
 * needs HOROVOD_DYNAMIC_PROCESS_SETS=1. Returns the new id (> 0), or a
 * negative HVD_ERR_*: HVD_ERR_INVALID when dynamic sets are off, for an empty
 * set, a repeated or out-of-range rank, a set some registered set already
 * has, or ranks that called differently. */
int hvd_add_process_set(const int* ranks, int nranks);
/* Collective like hvd_add_process_set. HVD_ERR_INVALID for id 0 or an
 * unknown id; operations still pending on the set fail (HVD_ERR_SHUTDOWN). */
int hvd_remove_process_set(int id);

/* The timeline (docs/collective.md, "Timeline"; Horovod's start_timeline):
 * rank 0 writes a Chrome-trace JSON file at `path` from now on (truncated;
 * CYCLE_START marks when mark_cycles != 0); other ranks return HVD_OK and
 * write nothing. HVD_ERR_IO when the file cannot be created, HVD_ERR_INVALID
 * for a null or empty path. hvd_stop_timeline flushes and closes it. */
int hvd_start_timeline(const char* path, int mark_cycles);
int hvd_stop_timeline(void);
/* The set's size, this rank's index in it (HVD_ERR_INVALID when this rank is
 * not a member), whether this rank is a member (1/0); HVD_ERR_INVALID for an
 * unknown id, HVD_ERR_NOT_INITIALIZED before hvd_init. */
int hvd_process_set_size(int id);
int hvd_process_set_rank(int id);
int hvd_process_set_included(int id);
/* The number of registered sets (the global one included); writes up to
 * `capacity` ids, ascending (ids may be NULL when capacity is 0). */
int hvd_process_set_ids(int* ids, int capacity);
/* The set's size; writes up to `capacity` of its global ranks, ascending. */
int hvd_process_set_ranks(int id, int* ranks, int capacity);
/* Operations on a process set: the _ex functions plus `process_set` (an id).
 * A broadcast root is a global rank (a member of the set); alltoall splits
 * has hvd_process_set_size(process_set) entries, and allgather/alltoall/
 * reducescatter order rows by the set's ranks. On a set this rank is not a
 * member of, or an unknown id: HVD_ERR_INVALID at submission. */
int hvd_allreduce_async_ps(const char* name, const void* in, void* out, int64_t count, int dtype, int op,
                           double prescale, double postscale, int device, void* cuda_stream, int process_set,
                           hvd_handle_t* out_handle);
int hvd_allgather_async_ps(const char* name, const void* in, int ndim, const int64_t* shape, int dtype,
                           hvd_alloc_fn alloc, void* alloc_user, int device, void* cuda_stream, int process_set,
                           hvd_handle_t* out_handle);
int hvd_broadcast_async_ps(const char* name, const void* in, void* out, int64_t count, int dtype, int root, int device,
                           void* cuda_stream, int process_set, hvd_handle_t* out_handle);
int hvd_alltoall_async_ps(const char* name, const void* in, int ndim, const int64_t* shape, int dtype,
                          const int64_t* splits, hvd_alloc_fn alloc, void* alloc_user, int device, void* cuda_stream,
                          int process_set, hvd_handle_t* out_handle);
int hvd_reducescatter_async_ps(const char* name, const void* in, int ndim, const int64_t* shape, int dtype, int op,
                               double prescale, double postscale, hvd_alloc_fn alloc, void* alloc_user, int device,
                               void* cuda_stream, int process_set, hvd_handle_t* out_handle);
int hvd_barrier_async_ps(const char* name, int process_set, hvd_handle_t* out_handle);

/* 1 when finished (then hvd_wait returns at once), 0 while running, <0 on a
 * bad handle. */
int hvd_poll(hvd_handle_t handle);
/* Blocks until finished; returns the operation's outcome. */
int hvd_wait(hvd_handle_t handle);
/* After a successful hvd_wait: the output of allgather/alltoall/
 * reducescatter (owned by the handle unless an allocator was given). */
int hvd_handle_output(hvd_handle_t handle, const void** data, size_t* bytes);
/* After a successful hvd_wait: the CUDA device of hvd_handle_output's
 * memory in *device, or -1 for host memory. */
int hvd_handle_output_device(hvd_handle_t handle, int* device);
/* Output shape: writes up to `capacity` dims, stores the rank in *ndim. */
int hvd_handle_output_shape(hvd_handle_t handle, int64_t* shape, int capacity, int* ndim);
/* Alltoall: rows received from each rank (capacity >= hvd_size()). */
int hvd_handle_recv_splits(hvd_handle_t handle, int64_t* splits, int capacity);
/* Frees the handle (and a handle-owned output). NULL is ignored. */
void hvd_release(hvd_handle_t handle);

/* Synchronous conveniences: submit, wait, release. */
int hvd_allreduce(const char* name, const void* in, void* out, int64_t count, int dtype, int op);
int hvd_broadcast(const char* name, const void* in, void* out, int64_t count, int dtype, int root);
int hvd_barrier(void);

/* Elastic mode (hvdrun --host-discovery-script; hvd/collective/elastic.h).
 * 1 when this process runs in an elastic job (HOROVOD_ELASTIC=1), else 0. */
int hvd_elastic_enabled(void);
/* 1 when a world newer than the current one has been published, else 0
 * (never blocks; always 0 outside an elastic job). */
int hvd_elastic_hosts_updated(void);
/* The world version this process is a member of (0 before joining or
 * outside an elastic job). */
int64_t hvd_elastic_world_version(void);
/* Collective: HVD_ERR_HOSTS_UPDATED on every rank if any rank has seen a
 * newer world, else HVD_OK (also outside an elastic job). */
int hvd_elastic_check_host_updates(void);
/* Leaves the current communicator and joins the newest world (new rank,
 * size, ...). HVD_ERR_REMOVED when this worker was removed or the job is
 * ending; HVD_ERR_TIMEOUT after HOROVOD_ELASTIC_TIMEOUT; HVD_ERR_INVALID
 * outside an elastic job. */
int hvd_elastic_reset(void);
/* Tells hvdrun that this process holds the state of its current world:
 * call it after the broadcast of your state that follows every
 * hvd_elastic_reset() (and the first join). hvdrun then counts this worker
 * as holding the job's trained state when hosts are dropped (a keeper, a
 * call-back: docs/elastic.md). HVD_OK; a no-op outside an elastic job. */
int hvd_elastic_state_synced(void);

#ifdef __cplusplus
}
#endif

#endif /* HVD_COLLECTIVE_C_API_H */
