#pragma once
// The hook where a communicator chooses the data path of each link: when a
// TCP link to a peer is formed (bootstrap/comm.cpp, at init or lazily at
// first use), a peer on this host gets a shared-memory link (lib/transport
// shm.h) instead, unless HVD_TRANSPORT=tcp.
#include "hvd/collective/comm.h"
#include "hvd/common/io.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

namespace hvd::transport {
class Link;
class TcpLink;
class ShmListener;
}  // namespace hvd::transport

namespace hvd::collective::detail {

/// One per communicator. Each new authenticated TCP link goes through
/// connect_side (the rank that connected) or accept_side (the rank that
/// accepted, on the communicator's acceptor thread):
///
/// 1. Hello: both sides send, over the TCP link, a small record: the host
///    identity (shm_host_id(): same kernel boot, network namespace and uid;
///    empty when shared memory is off for that side); the accepting side
///    adds the abstract name of its pairing socket and a fresh token for
///    this peer. Both sides reach the same verdict: local when both sent
///    the same non-empty identity and the accepting side listens.
/// 2. Pairing (local peers only): the connecting side connects to the
///    accepting side's socket with that token, passing the segment's memfd.
/// 3. The TCP link is closed; the shared-memory link takes its place.
///    Remote peers keep TCP.
///
/// `local_ranks` sizes the rings and the spin (HOROVOD_LOCAL_SIZE under
/// hvdrun). Throws IoError / TimeoutError naming the peer and the step.
class LocalPairing {
 public:
  LocalPairing(const CommOptions& options, bool use_shm, int local_ranks);
  ~LocalPairing();
  LocalPairing(const LocalPairing&) = delete;
  LocalPairing& operator=(const LocalPairing&) = delete;

  std::unique_ptr<transport::Link> connect_side(std::unique_ptr<transport::TcpLink> tcp, Deadline deadline);
  std::unique_ptr<transport::Link> accept_side(std::unique_ptr<transport::TcpLink> tcp, Deadline deadline);

  /// Links that went to shared memory / stayed on TCP so far.
  int shm_links() const { return shm_links_.load(); }
  int tcp_links() const { return tcp_links_.load(); }
  /// For the log: the data path ("shared memory to the peers of this host
  /// (rings of ...), TCP to the others"); `detailed`: the shared-memory
  /// settings alone ("rings of 1024 KiB per direction, spin 20 us, ...").
  std::string describe(bool detailed = false) const;

 private:
  std::unique_ptr<transport::Link> finish(std::unique_ptr<transport::TcpLink> tcp, bool accepting, Deadline deadline);

  int rank_;
  bool use_shm_;
  std::string host_id_;
  std::unique_ptr<transport::ShmListener> listener_;
  int local_ranks_;
  std::chrono::microseconds spin_{0};
  bool offload_ = true;
  std::size_t capacity_ = 0;
  bool populate_ = true;
  std::atomic<int> shm_links_{0};
  std::atomic<int> tcp_links_{0};
};

/// The local rank count the data path is sized for: HOROVOD_LOCAL_SIZE when
/// set and valid, else `fallback` (in-process tests: every rank is local).
int local_ranks_hint(int fallback);

}  // namespace hvd::collective::detail
