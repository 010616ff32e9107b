#pragma once
// The collective algorithm tests' world: n Comms of one job connected over
// loopback TCP through one store, each connect_comm on its own thread (the
// mesh forms only when every rank connects).
#include "hvd/collective/comm.h"
#include "hvd/store/store.h"

#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace hvd_test {

using Comms = std::vector<std::unique_ptr<hvd::collective::Comm>>;

/// Connects ranks 0..n-1 under `prefix`; rethrows the first connect error.
inline Comms make_world(hvd::store::Store& st, int n, const std::string& prefix,
                        const std::string& secret = "job-secret") {
  Comms comms(n);
  std::vector<std::exception_ptr> errs(n);
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) {
    ts.emplace_back([&, r] {
      try {
        hvd::collective::CommOptions o;
        o.rank = r;
        o.size = n;
        o.prefix = prefix;
        o.secret = secret;
        o.timeout = std::chrono::seconds(10);
        comms[r] = hvd::collective::connect_comm(st, o);
      } catch (...) {
        errs[r] = std::current_exception();
      }
    });
  }
  for (auto& t : ts) t.join();
  for (auto& e : errs) {
    if (e) std::rethrow_exception(e);
  }
  return comms;
}

}  // namespace hvd_test
