// The device-allreduce protocol (lib/collective/cuda/pipeline.cpp) driven
// with a simulated GPU: every stream is a thread executing its queue in
// order with random delays, and events follow CUDA's rules -- a record
// completes when the stream reaches it; a wait issued at time t waits for
// the latest record issued before t (a never-recorded event is no wait).
// Ranks are threads sharing one ControlBlock. If the protocol ever let a rank
// overwrite a slot a peer had not finished reading, or reduce a slot before
// its owner filled it, the (exact, integer-valued) sums would be wrong.
#include "chunk_plan.h"
#include "control_block.h"
#include "pipeline.h"
#include "staged.h"

#include "hvd/common/error.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>

using namespace hvd::collective::cuda::detail;
using namespace std::chrono_literals;

namespace {

struct SimEvent {
  std::atomic<uint64_t> issued{0};  // records issued by the host
  std::mutex mu;
  std::condition_variable cv;
  uint64_t completed = 0;  // records the stream has reached
};

class SimStream {
 public:
  explicit SimStream(uint64_t seed) : rng_(seed), thread_([this] { loop(); }) {}
  ~SimStream() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void enqueue(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> l(mu_);
      queue_.push_back(std::move(task));
    }
    cv_.notify_all();
  }
  void record(SimEvent& ev) {
    const uint64_t gen = ++ev.issued;
    enqueue([&ev, gen] {
      std::lock_guard<std::mutex> l(ev.mu);
      ev.completed = std::max(ev.completed, gen);
      ev.cv.notify_all();
    });
  }
  void wait(SimEvent& ev) {
    const uint64_t target = ev.issued.load();  // the latest record at call time
    enqueue([&ev, target] {
      std::unique_lock<std::mutex> l(ev.mu);
      ev.cv.wait(l, [&] { return ev.completed >= target; });
    });
  }
  void synchronize() {
    SimEvent done;
    record(done);
    std::unique_lock<std::mutex> l(done.mu);
    done.cv.wait(l, [&] { return done.completed >= 1; });
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      if (rng_() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng_() % 300));
      task();
    }
  }
  std::mt19937_64 rng_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

/// Everything the ranks share: exchange slots and events per rank.
struct World {
  World(int n, int slots, std::size_t slot_elems) : n(n), slots(slots), slot_elems(slot_elems) {
    for (int r = 0; r < n; ++r) {
      buffers.emplace_back(static_cast<std::size_t>(slots) * slot_elems, -1.0f);
      ready.emplace_back(slots);
      done.emplace_back(slots);
    }
  }
  int n, slots;
  std::size_t slot_elems;
  std::vector<std::vector<float>> buffers;
  std::vector<std::deque<SimEvent>> ready, done;
};

/// One rank's simulated device: a caller ("reduce") stream and a copy stream.
class SimDevice final : public PipelineDevice {
 public:
  SimDevice(World& w, int me, uint64_t seed) : w_(w), me_(me), reduce_(seed), copy_(seed * 7 + 1) {}
  void set_data(float* data) { data_ = data; }
  SimStream& caller_stream() { return reduce_; }

  void begin() override {
    reduce_.record(start_);
    copy_.wait(start_);
  }
  void copy_wait_done(int rank, int slot) override { copy_.wait(w_.done[rank][slot]); }
  void copy_in(const Chunk& c, int slot) override {
    float* dst = w_.buffers[me_].data() + static_cast<std::size_t>(slot) * w_.slot_elems;
    const float* src = data_ + c.offset / sizeof(float);
    const std::size_t count = c.bytes / sizeof(float);
    copy_.enqueue([=] { std::copy(src, src + count, dst); });
    copy_.record(w_.ready[me_][slot]);
  }
  void reduce_wait_ready(int rank, int slot) override { reduce_.wait(w_.ready[rank][slot]); }
  void reduce_out(const Chunk& c, int slot) override {
    float* out = data_ + c.offset / sizeof(float);
    const std::size_t count = c.bytes / sizeof(float);
    World* w = &w_;
    reduce_.enqueue([=] {
      for (std::size_t i = 0; i < count; ++i) {
        float acc = 0;
        for (int p = 0; p < w->n; ++p) acc += w->buffers[p][static_cast<std::size_t>(slot) * w->slot_elems + i];
        out[i] = acc;
      }
    });
    reduce_.record(w_.done[me_][slot]);
  }

 private:
  World& w_;
  int me_;
  float* data_ = nullptr;
  SimEvent start_;
  SimStream reduce_, copy_;
};

/// `calls` in-place sum allreduces of varying sizes on every rank; rank r's
/// element i of call c holds (r + 1) * 1000 + i % 97 + c, so sums are exact.
void run_world(int n, int slots, std::size_t slot_bytes, const std::vector<std::size_t>& counts) {
  const std::string name = ControlBlock::make_name();
  auto owner = ControlBlock::create(name, n);
  World world(n, slots, slot_bytes / sizeof(float));
  std::vector<std::string> errors(n);
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r) {
    ranks.emplace_back([&, r] {
      try {
        auto block = ControlBlock::open(name, n);
        SimDevice dev(world, r, 1234 + r);
        uint64_t seq = 0;
        // Buffers of all calls stay alive: a later call is enqueued while the
        // previous one may still run (the host never waits for the device).
        std::vector<std::vector<float>> data;
        for (std::size_t c = 0; c < counts.size(); ++c) {
          data.emplace_back(counts[c]);
          for (std::size_t i = 0; i < counts[c]; ++i) data[c][i] = float((r + 1) * 1000 + i % 97 + c);
        }
        for (std::size_t c = 0; c < counts.size(); ++c) {
          dev.set_data(data[c].data());
          const auto steps =
              plan_steps(seq + 1, plan_chunks(counts[c] * sizeof(float), sizeof(float), slot_bytes), slots);
          run_pipeline(block, r, steps, dev, hvd::Deadline::after(20s));
          if (!steps.empty()) seq = steps.back().seq;
        }
        dev.caller_stream().synchronize();
        for (std::size_t c = 0; c < counts.size(); ++c) {
          for (std::size_t i = 0; i < counts[c]; ++i) {
            const float want = float(n * (n + 1) / 2 * 1000 + n * (i % 97 + c));
            if (data[c][i] != want) {
              errors[r] = "call " + std::to_string(c) + " element " + std::to_string(i) + ": " +
                          std::to_string(data[c][i]) + " != " + std::to_string(want);
              break;
            }
          }
          if (!errors[r].empty()) break;
        }
        // Keep the streams (and their pending reads of peers' slots) alive
        // until every rank is done, as the real destructor does.
        for (int p = 0; p < n; ++p) block.wait_at_least(p, Counter::Done, seq, hvd::Deadline::after(20s));
        block.publish(r, Counter::Ready, UINT64_MAX);
        for (int p = 0; p < n; ++p) block.wait_at_least(p, Counter::Ready, UINT64_MAX, hvd::Deadline::after(20s));
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r << " of " << n << ", " << slots << " slots");
    CHECK(errors[r].empty());
    if (!errors[r].empty()) WARN(errors[r]);
  }
}

}  // namespace

TEST_CASE("cuda: device allreduce protocol: exact sums with reused slots and racing streams", "[cuda][pipeline]") {
  // 256-byte slots = 64 floats: most calls take many steps and reuse slots.
  const std::vector<std::size_t> counts = {1, 64, 65, 1000, 7, 64 * 9 + 3, 300};
  for (int n : {2, 3, 4}) {
    for (int slots : {1, 2, 3}) run_world(n, slots, 256, counts);
  }
}

TEST_CASE("cuda: device allreduce protocol: a rank that stops makes peers time out, naming it", "[cuda][pipeline]") {
  auto block = ControlBlock::create(ControlBlock::make_name(), 2);
  World world(2, 2, 64);
  SimDevice dev(world, 0, 1);
  std::vector<float> data(64 * 4, 1.0f);
  dev.set_data(data.data());
  const auto steps = plan_steps(1, plan_chunks(data.size() * 4, 4, 256), 2);
  CHECK_THROWS_WITH(run_pipeline(block, 0, steps, dev, hvd::Deadline::after(150ms)),
                    Catch::Contains("local rank 1") && Catch::Contains("step 1"));
  dev.caller_stream().synchronize();
}

TEST_CASE("cuda: device allreduce protocol: an aborted peer fails the step with IoError", "[cuda][pipeline]") {
  auto block = ControlBlock::create(ControlBlock::make_name(), 2);
  World world(2, 2, 64);
  SimDevice dev(world, 0, 1);
  std::vector<float> data(64 * 4, 1.0f);
  dev.set_data(data.data());
  std::thread peer([&] {
    std::this_thread::sleep_for(30ms);
    block.abort(1);
  });
  const auto steps = plan_steps(1, plan_chunks(data.size() * 4, 4, 256), 2);
  CHECK_THROWS_AS(run_pipeline(block, 0, steps, dev, hvd::Deadline::after(10s)), hvd::IoError);
  peer.join();
  dev.caller_stream().synchronize();
}

namespace {

/// Records which device calls the protocol made; throws from copy_in of the
/// step `fail_at` (0: never).
class CountingDevice final : public PipelineDevice {
 public:
  explicit CountingDevice(uint64_t fail_at = 0) : fail_at_(fail_at) {}
  void begin() override { ++begins; }
  void copy_wait_done(int, int) override { ++calls; }
  void copy_in(const Chunk&, int) override {
    ++copies;
    ++calls;
    if (copies == fail_at_) throw std::runtime_error("simulated CUDA failure");
  }
  void reduce_wait_ready(int, int) override { ++calls; }
  void reduce_out(const Chunk&, int) override { ++calls; }
  int begins = 0;
  int calls = 0;
  uint64_t copies = 0;

 private:
  uint64_t fail_at_;
};

}  // namespace

TEST_CASE("cuda: device allreduce protocol: reports the last step whose device work was enqueued", "[cuda][pipeline]") {
  // DeviceAllreducer's teardown leaves its buffers to process exit (instead
  // of freeing/unmapping while queued work may wait on a dead peer's event)
  // when any step's work was enqueued -- including a call that failed
  // part-way, which never completed and so never advanced its step count.
  const auto chunks = plan_chunks(4 * 256, 4, 256);  // 4 steps
  SECTION("a single rank runs every step") {
    auto block = ControlBlock::create(ControlBlock::make_name(), 1);
    CountingDevice dev;
    uint64_t issued = 0;
    run_pipeline(block, 0, plan_steps(1, chunks, 2), dev, hvd::Deadline::after(5s), &issued);
    CHECK(issued == 4);
    run_pipeline(block, 0, plan_steps(5, chunks, 2), dev, hvd::Deadline::after(5s), &issued);
    CHECK(issued == 8);
  }
  SECTION("a device failure part-way through a call") {
    auto block = ControlBlock::create(ControlBlock::make_name(), 1);
    CountingDevice dev(3);
    uint64_t issued = 0;
    CHECK_THROWS_WITH(run_pipeline(block, 0, plan_steps(1, chunks, 2), dev, hvd::Deadline::after(5s), &issued),
                      Catch::Contains("simulated"));
    CHECK(issued == 3);
  }
  SECTION("a peer that never arrives: the first step's copy was enqueued") {
    auto block = ControlBlock::create(ControlBlock::make_name(), 2);
    CountingDevice dev;
    uint64_t issued = 0;
    CHECK_THROWS_AS(run_pipeline(block, 0, plan_steps(1, chunks, 2), dev, hvd::Deadline::after(100ms), &issued),
                    hvd::TimeoutError);
    CHECK(dev.copies == 1);
    CHECK(issued == 1);
  }
  SECTION("a slot-reuse wait that times out before any device call enqueues nothing") {
    auto block = ControlBlock::create(ControlBlock::make_name(), 2);
    block.publish(1, Counter::Done, 10);  // me (local rank 1); rank 0 is still at 0
    CountingDevice dev;
    uint64_t issued = 0;
    // Step 11 reuses the slot of step 9: waits for every rank's done >= 9.
    CHECK_THROWS_AS(run_pipeline(block, 1, plan_steps(11, chunks, 2), dev, hvd::Deadline::after(100ms), &issued),
                    hvd::TimeoutError);
    CHECK(dev.calls == 0);
    CHECK(issued == 0);
  }
}

namespace {

/// The staged (cross-host) leg on a simulated device: one in-order stream
/// with random delays, two staging buffers.
class SimStaged final : public StagedDevice {
 public:
  SimStaged(std::vector<float>& dev, std::size_t chunk_bytes)
      : dev_(dev), stream_(77), stage_{std::vector<uint8_t>(chunk_bytes), std::vector<uint8_t>(chunk_bytes)} {}
  void begin() override {}
  void d2h(const Chunk& c, int slot) override {
    ++d2h_calls;
    const uint8_t* src = reinterpret_cast<const uint8_t*>(dev_.data()) + c.offset;
    uint8_t* dst = stage_[slot].data();
    const std::size_t n = c.bytes;
    stream_.enqueue([=] { std::copy(src, src + n, dst); });
    stream_.record(copied_[slot]);
  }
  void wait_d2h(int slot) override {
    const uint64_t target = copied_[slot].issued.load();
    std::unique_lock<std::mutex> l(copied_[slot].mu);
    copied_[slot].cv.wait(l, [&] { return copied_[slot].completed >= target; });
  }
  void h2d(const Chunk& c, int slot) override {
    const uint8_t* src = stage_[slot].data();
    uint8_t* dst = reinterpret_cast<uint8_t*>(dev_.data()) + c.offset;
    const std::size_t n = c.bytes;
    stream_.enqueue([=] { std::copy(src, src + n, dst); });
  }
  void finish() override { stream_.synchronize(); }
  uint8_t* staging(int slot) override { return stage_[slot].data(); }
  int d2h_calls = 0;

 private:
  std::vector<float>& dev_;
  SimStream stream_;
  std::vector<uint8_t> stage_[2];
  SimEvent copied_[2];
};

}  // namespace

TEST_CASE("cuda: staged cross-host leg: every chunk reaches the network intact and comes back", "[cuda][staged]") {
  for (std::size_t count : {1u, 64u, 65u, 1000u, 64u * 7 + 5}) {
    const std::size_t chunk_bytes = 256;  // 64 floats
    std::vector<float> dev(count);
    for (std::size_t i = 0; i < count; ++i) dev[i] = float(i % 1000);
    SimStaged sim(dev, chunk_bytes);
    const auto chunks = plan_chunks(count * 4, 4, chunk_bytes);
    std::size_t reduced = 0;
    std::string error;
    run_staged(chunks, sim, [&](uint8_t* data, std::size_t bytes) {
      const Chunk& c = chunks[reduced];
      if (bytes != c.bytes) error = "wrong size";
      // The next chunk's copy is already queued: copies overlap the network.
      if (reduced + 1 < chunks.size() && sim.d2h_calls < static_cast<int>(reduced) + 2) error = "no overlap";
      auto* f = reinterpret_cast<float*>(data);
      for (std::size_t i = 0; i < bytes / 4; ++i) {
        const std::size_t global = c.offset / 4 + i;
        if (f[i] != float(global % 1000)) error = "chunk " + std::to_string(reduced) + " staged stale data";
        f[i] = 3 * f[i] + 1;
      }
      ++reduced;
    });
    INFO("count " << count);
    CHECK(error.empty());
    CHECK(reduced == chunks.size());
    for (std::size_t i = 0; i < count; ++i) {
      if (dev[i] != 3 * float(i % 1000) + 1) {
        FAIL_CHECK("element " << i << " is " << dev[i]);
        break;
      }
    }
  }
}
