#include "ipc_record.h"

#include "hvd/common/error.h"

#include <cstring>

namespace hvd::collective::cuda::detail {

namespace {

constexpr uint32_t kMagic = 0x43445648;  // "HVDC" little-endian
constexpr uint32_t kVersion = 1;
constexpr int32_t kMaxSlots = 1024;
constexpr std::size_t kMaxName = 255;

class Writer {
 public:
  template <class T>
  void pod(const T& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
  }
  void raw(const uint8_t* p, std::size_t n) { out.insert(out.end(), p, p + n); }
  store::Bytes out;
};

class Reader {
 public:
  Reader(const store::Bytes& in, const std::string& what) : in_(in), what_(what) {}
  template <class T>
  T pod() {
    T v;
    raw(reinterpret_cast<uint8_t*>(&v), sizeof(T));
    return v;
  }
  void raw(uint8_t* p, std::size_t n) {
    if (in_.size() - pos_ < n) {
      throw IoError(fmt::format("CUDA IPC record {} is truncated ({} bytes)", what_, in_.size()));
    }
    std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
  }
  bool done() const { return pos_ == in_.size(); }

 private:
  const store::Bytes& in_;
  std::string what_;
  std::size_t pos_ = 0;
};

}  // namespace

store::Bytes serialize(const IpcRecord& r) {
  HVD_ENFORCE(r.slots >= 0 && r.slots <= kMaxSlots, "slots {} out of range", r.slots);
  HVD_ENFORCE(r.ready_events.size() == static_cast<std::size_t>(r.slots) &&
                  r.done_events.size() == static_cast<std::size_t>(r.slots),
              "event handles ({}, {}) do not match slots {}", r.ready_events.size(), r.done_events.size(), r.slots);
  HVD_ENFORCE(r.control_name.size() <= kMaxName, "control block name too long ({})", r.control_name.size());
  Writer w;
  w.pod(kMagic);
  w.pod(kVersion);
  w.pod(r.local_rank);
  w.pod(r.device);
  w.pod(r.pid);
  w.raw(r.device_uuid.data(), r.device_uuid.size());
  w.raw(r.buffer.data(), r.buffer.size());
  w.pod(r.slot_bytes);
  w.pod(r.slots);
  for (const auto& h : r.ready_events) w.raw(h.data(), h.size());
  for (const auto& h : r.done_events) w.raw(h.data(), h.size());
  w.pod(static_cast<uint32_t>(r.control_name.size()));
  w.raw(reinterpret_cast<const uint8_t*>(r.control_name.data()), r.control_name.size());
  return std::move(w.out);
}

IpcRecord parse_ipc_record(const store::Bytes& bytes, const std::string& what) {
  Reader rd(bytes, what);
  if (rd.pod<uint32_t>() != kMagic) throw IoError(fmt::format("CUDA IPC record {} has a bad magic", what));
  const auto version = rd.pod<uint32_t>();
  if (version != kVersion) {
    throw IoError(
        fmt::format("CUDA IPC record {} has version {}, expected {} (mixed hvd versions?)", what, version, kVersion));
  }
  IpcRecord r;
  r.local_rank = rd.pod<int32_t>();
  r.device = rd.pod<int32_t>();
  r.pid = rd.pod<int32_t>();
  rd.raw(r.device_uuid.data(), r.device_uuid.size());
  rd.raw(r.buffer.data(), r.buffer.size());
  r.slot_bytes = rd.pod<uint64_t>();
  r.slots = rd.pod<int32_t>();
  if (r.slots < 0 || r.slots > kMaxSlots) {
    throw IoError(fmt::format("CUDA IPC record {} has {} slots (at most {})", what, r.slots, kMaxSlots));
  }
  r.ready_events.resize(r.slots);
  r.done_events.resize(r.slots);
  for (auto& h : r.ready_events) rd.raw(h.data(), h.size());
  for (auto& h : r.done_events) rd.raw(h.data(), h.size());
  const auto name_len = rd.pod<uint32_t>();
  if (name_len > kMaxName) throw IoError(fmt::format("CUDA IPC record {} has a {}-byte name", what, name_len));
  r.control_name.resize(name_len);
  rd.raw(reinterpret_cast<uint8_t*>(r.control_name.data()), name_len);
  if (!rd.done()) throw IoError(fmt::format("CUDA IPC record {} has trailing bytes", what));
  return r;
}

std::string ipc_record_key(const std::string& prefix, int local_rank) {
  return fmt::format("{}ipc/rank_{}", prefix, local_rank);
}

void publish_ipc_record(store::Store& store, const std::string& prefix, const IpcRecord& record) {
  store.set(ipc_record_key(prefix, record.local_rank), serialize(record));
}

std::vector<IpcRecord> gather_ipc_records(store::Store& store, const std::string& prefix, const IpcRecord& mine,
                                          int local_size, std::chrono::milliseconds timeout) {
  std::vector<std::string> keys;
  for (int r = 0; r < local_size; ++r) keys.push_back(ipc_record_key(prefix, r));
  store.wait(keys, timeout);
  std::vector<IpcRecord> records;
  for (int r = 0; r < local_size; ++r) {
    IpcRecord rec = parse_ipc_record(store.get(keys[r], timeout), keys[r]);
    if (rec.local_rank != r) {
      throw IoError(fmt::format("CUDA IPC record {} claims local rank {}", keys[r], rec.local_rank));
    }
    if (rec.slots != mine.slots || rec.slot_bytes != mine.slot_bytes) {
      throw InvalidArgument(fmt::format(
          "local rank {} uses {} slots of {} bytes but local rank {} uses {} of {}: every rank must pass the same "
          "DeviceAllreducerOptions (chunk_bytes, slots)",
          r, rec.slots, rec.slot_bytes, mine.local_rank, mine.slots, mine.slot_bytes));
    }
    records.push_back(std::move(rec));
  }
  return records;
}

}  // namespace hvd::collective::cuda::detail
