// The CUDA component's entry points in a build without CUDA
// (HVD_WITH_CUDA=OFF or no nvcc): truthful answers, and a clear error for
// anything that would need a device.
#include "device_executor.h"
#include "hvd/collective/cuda.h"
#include "staging_pool.h"

namespace hvd::collective::cuda {

namespace {
[[noreturn]] void not_built(const char* what) {
  throw InvalidArgument(
      fmt::format("{} needs the CUDA component, but this hvd_collective was built without CUDA "
                  "(configure with nvcc available and -DHVD_WITH_CUDA=ON)",
                  what));
}
}  // namespace

bool cuda_built() { return false; }
bool nccl_built() { return false; }
std::string nccl_version() { return ""; }
int device_count() { return 0; }
bool is_device_pointer(const void*) { return false; }
int pointer_device(const void*) { return -1; }
void copy(void*, const void*, std::size_t) { not_built("cuda::copy"); }

struct DeviceAllreducer::Impl {};

DeviceAllreducer::DeviceAllreducer(store::Store&, const DeviceAllreducerOptions&) { not_built("DeviceAllreducer"); }
DeviceAllreducer::~DeviceAllreducer() = default;
void DeviceAllreducer::allreduce(void*, std::size_t, DataType, ReduceOp, CUstream_st*, double, double) {
  not_built("DeviceAllreducer::allreduce");
}
void DeviceAllreducer::abort() noexcept {}
const DeviceAllreducerOptions& DeviceAllreducer::options() const { not_built("DeviceAllreducer::options"); }
uint64_t DeviceAllreducer::steps() const { return 0; }

struct StagedAllreducer::Impl {};
StagedAllreducer::StagedAllreducer(const StagedAllreducerOptions&) { not_built("StagedAllreducer"); }
StagedAllreducer::~StagedAllreducer() = default;
void StagedAllreducer::allreduce(void*, std::size_t, DataType, CUstream_st*, const HostAllreduce&) {
  not_built("StagedAllreducer::allreduce");
}

DeviceFusionBuffer::DeviceFusionBuffer(int, std::size_t) { not_built("DeviceFusionBuffer"); }
DeviceFusionBuffer::~DeviceFusionBuffer() = default;
void* DeviceFusionBuffer::pack(const std::vector<Tensor>&, CUstream_st*, std::size_t&) {
  not_built("DeviceFusionBuffer::pack");
}
void DeviceFusionBuffer::unpack(const std::vector<Tensor>&, CUstream_st*) { not_built("DeviceFusionBuffer::unpack"); }

void batched_copy(const std::vector<CopyItem>&, CUstream_st*) { not_built("cuda::batched_copy"); }
void reduce(const std::vector<const void*>&, void*, std::size_t, DataType, ReduceOp, double, double, CUstream_st*) {
  not_built("cuda::reduce");
}

namespace detail {
std::unique_ptr<HostAllocator> make_pinned_allocator() { not_built("the pinned staging allocator"); }

struct DeviceExecutor::Impl {};
DeviceExecutor::DeviceExecutor(std::shared_ptr<store::Store>, const DeviceExecutorOptions&) {
  not_built("an operation on device buffers");
}
DeviceExecutor::~DeviceExecutor() = default;
void DeviceExecutor::allreduce(const std::vector<int32_t>&, const std::vector<DeviceTensor>&, DataType, ReduceOp,
                               double, double, const HostAllreduce&, const GroupHostAllreduce&) {
  not_built("allreduce of device buffers");
}
void DeviceExecutor::broadcast(const std::vector<int32_t>&, const DeviceTensor&, int, const HostBroadcast&) {
  not_built("broadcast of device buffers");
}
void DeviceExecutor::to_host(int, const DeviceTensor&, void*) { not_built("an operation on device buffers"); }
void check_visible_device(int) { not_built("a device buffer"); }
std::shared_ptr<CUevent_st> record_ready_event(int, CUstream_st*) { not_built("an operation on device buffers"); }
void DeviceExecutor::to_device(int, const void*, void*, std::size_t, CUevent_st*) { not_built("an operation on device buffers"); }
void DeviceExecutor::with_device(int, const std::function<void()>&) { not_built("an operation on device buffers"); }
std::shared_ptr<void> allocate_device_memory(int, std::size_t) { not_built("device memory"); }
void DeviceExecutor::abort() noexcept {}
std::size_t DeviceExecutor::intra_host_created() const { return 0; }
std::size_t DeviceExecutor::nccl_created() const { return 0; }
}  // namespace detail

}  // namespace hvd::collective::cuda
