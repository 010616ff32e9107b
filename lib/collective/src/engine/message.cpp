#include "engine/message.h"

#include "hvd/common/error.h"

#include <fmt/format.h>

#include <cstring>

namespace hvd::collective::detail {

const char* op_type_name(OpType type) {
  switch (type) {
    case OpType::Allreduce: return "allreduce";
    case OpType::Allgather: return "allgather";
    case OpType::Broadcast: return "broadcast";
    case OpType::Alltoall: return "alltoall";
    case OpType::Reducescatter: return "reducescatter";
    case OpType::Barrier: return "barrier";
    case OpType::Join: return "join";
  }
  return "unknown";
}

bool Request::operator==(const Request& o) const {
  return name == o.name && type == o.type && dtype == o.dtype && op == o.op && root == o.root &&
         prescale == o.prescale && postscale == o.postscale && shape == o.shape && splits == o.splits &&
         device == o.device;
}

int64_t num_elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string describe_tensor(DataType dtype, const std::vector<int64_t>& shape) {
  return fmt::format("{}[{}]", dtype_name(dtype), fmt::join(shape, ","));
}

namespace {

// Limits that keep a corrupt message from making us allocate unbounded memory.
constexpr uint32_t kMaxCount = 1u << 24;
constexpr uint32_t kMaxString = 1u << 16;
// Version 2 added Request::device, 3 OpType::Join. Every rank of a job runs
// the same library, so a peer with another version is rejected, not
// translated.
constexpr uint8_t kVersion = 3;

class Writer {
 public:
  void u8(uint8_t v) { out_.push_back(v); }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void f64(double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    u64(bits);
  }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    out_.insert(out_.end(), s.begin(), s.end());
  }
  void i64s(const std::vector<int64_t>& v) {
    u32(static_cast<uint32_t>(v.size()));
    for (int64_t x : v) i64(x);
  }
  std::vector<uint8_t> take() { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
};

class Reader {
 public:
  Reader(const uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  uint8_t u8() {
    need(1);
    return data_[pos_++];
  }
  uint32_t u32() {
    need(4);
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(data_[pos_++]) << (8 * i);
    return v;
  }
  uint64_t u64() {
    need(8);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(data_[pos_++]) << (8 * i);
    return v;
  }
  int64_t i64() { return static_cast<int64_t>(u64()); }
  double f64() {
    uint64_t bits = u64();
    double v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
  }
  uint32_t count(uint32_t limit) {
    uint32_t n = u32();
    if (n > limit) fail(fmt::format("count {} exceeds limit {}", n, limit));
    return n;
  }
  std::string str() {
    uint32_t n = count(kMaxString);
    need(n);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }
  std::vector<int64_t> i64s() {
    uint32_t n = count(kMaxCount);
    need(static_cast<std::size_t>(n) * 8);
    std::vector<int64_t> v(n);
    for (auto& x : v) x = i64();
    return v;
  }
  bool done() const { return pos_ == size_; }
  [[noreturn]] void fail(const std::string& why) const {
    throw IoError(fmt::format("malformed negotiation message from a peer: {}", why));
  }

 private:
  void need(std::size_t n) const {
    if (size_ - pos_ < n) fail("truncated");
  }
  const uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

}  // namespace

std::vector<uint8_t> encode(const RankMessage& m) {
  Writer w;
  w.u8(kVersion);
  w.u8(m.shutdown ? 1 : 0);
  w.u32(static_cast<uint32_t>(m.requests.size()));
  for (const Request& r : m.requests) {
    w.str(r.name);
    w.u8(static_cast<uint8_t>(r.type));
    w.u8(static_cast<uint8_t>(r.dtype));
    w.u8(static_cast<uint8_t>(r.op));
    w.u32(static_cast<uint32_t>(r.root));
    w.f64(r.prescale);
    w.f64(r.postscale);
    w.i64s(r.shape);
    w.i64s(r.splits);
    w.u32(static_cast<uint32_t>(r.device));
  }
  // Cache hits as a bitset trimmed after the highest set bit.
  uint32_t max_id = 0;
  for (uint32_t id : m.cache_hits) max_id = std::max(max_id, id + 1);
  std::vector<uint8_t> bits((max_id + 7) / 8, 0);
  for (uint32_t id : m.cache_hits) bits[id / 8] |= static_cast<uint8_t>(1u << (id % 8));
  w.u32(static_cast<uint32_t>(bits.size()));
  for (uint8_t b : bits) w.u8(b);
  w.u32(static_cast<uint32_t>(m.stalled.size()));
  for (const auto& s : m.stalled) w.str(s);
  return w.take();
}

RankMessage decode(const uint8_t* data, std::size_t size) {
  Reader r(data, size);
  RankMessage m;
  uint8_t version = r.u8();
  if (version != kVersion) r.fail(fmt::format("protocol version {} (expected {})", version, kVersion));
  uint8_t flags = r.u8();
  if (flags > 1) r.fail("bad flags");
  m.shutdown = flags == 1;
  uint32_t n = r.count(kMaxCount);
  m.requests.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    Request q;
    q.name = r.str();
    uint8_t type = r.u8();
    if (type > static_cast<uint8_t>(OpType::Join)) r.fail("bad op type");
    q.type = static_cast<OpType>(type);
    uint8_t dtype = r.u8();
    if (dtype > static_cast<uint8_t>(DataType::Int16)) r.fail("bad dtype");
    q.dtype = static_cast<DataType>(dtype);
    uint8_t op = r.u8();
    if (op > static_cast<uint8_t>(ReduceOp::Adasum)) r.fail("bad reduce op");
    q.op = static_cast<ReduceOp>(op);
    q.root = static_cast<int32_t>(r.u32());
    q.prescale = r.f64();
    q.postscale = r.f64();
    q.shape = r.i64s();
    q.splits = r.i64s();
    q.device = static_cast<int32_t>(r.u32());
    if (q.device < -1) r.fail(fmt::format("bad device {}", q.device));
    m.requests.push_back(std::move(q));
  }
  uint32_t nbytes = r.count(kMaxCount);
  for (uint32_t i = 0; i < nbytes; ++i) {
    uint8_t b = r.u8();
    for (uint32_t bit = 0; bit < 8; ++bit) {
      if (b & (1u << bit)) m.cache_hits.push_back(i * 8 + bit);
    }
  }
  uint32_t ns = r.count(kMaxCount);
  for (uint32_t i = 0; i < ns; ++i) m.stalled.push_back(r.str());
  if (!r.done()) r.fail("trailing bytes");
  return m;
}

}  // namespace hvd::collective::detail
