#pragma once
// The controller tests' world: the N Contexts of one job as threads over one
// InMemoryStore. Creation is concurrent because the rendezvous (and static
// process sets) are collective: each Context::create blocks until the mesh
// has formed.
#include "hvd/collective/context.h"
#include "hvd/store/memory_store.h"

#include <chrono>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <thread>
#include <vector>

namespace hvd_test {

using hvd::collective::Context;
using hvd::collective::Settings;

/// `s` with a 500 µs cycle time, so that tests negotiate quickly.
inline Settings fast_cycle(Settings s = {}) {
  s.cycle_time = std::chrono::microseconds(500);
  return s;
}

/// Creates the n Contexts of one job (rank r: rank and local rank r of n,
/// the rest from `base`); rethrows the first creation error.
inline std::vector<std::unique_ptr<Context>> make_job(int n, const Settings& base = {}) {
  auto store = std::make_shared<hvd::store::InMemoryStore>();
  std::vector<std::unique_ptr<Context>> contexts(n);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        Settings s = base;
        s.rank = r;
        s.size = n;
        s.local_rank = r;
        s.local_size = n;
        s.secret = "test-secret";
        s.start_timeout = std::chrono::seconds(10);
        contexts[r] = Context::create(s, store);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return contexts;
}

/// Runs fn(context, rank) on every rank concurrently; rethrows the first error.
inline void run_on_every_rank(std::vector<std::unique_ptr<Context>>& contexts,
                              const std::function<void(Context&, int)>& fn) {
  std::vector<std::future<void>> fs;
  for (int r = 0; r < static_cast<int>(contexts.size()); ++r) {
    fs.push_back(std::async(std::launch::async, [&, r] { fn(*contexts[r], r); }));
  }
  for (auto& f : fs) f.get();
}

/// make_job and run_on_every_rank as one object.
class ThreadJob {
 public:
  explicit ThreadJob(int n, const Settings& base = {}) : contexts_(make_job(n, base)) {}
  int size() const { return static_cast<int>(contexts_.size()); }
  Context& operator[](int r) { return *contexts_[r]; }
  void run(const std::function<void(Context&, int)>& fn) { run_on_every_rank(contexts_, fn); }

 private:
  std::vector<std::unique_ptr<Context>> contexts_;
};

}  // namespace hvd_test
