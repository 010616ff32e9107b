#pragma once
/// TCP links with mutual authentication by the job secret.
///
/// Handshake (never sends the secret; both sides prove they know it):
///   listener  -> connector : "HVDL1" + 16-byte nonce_l
///   connector -> listener  : "HVDC1" + from_rank + to_rank + 16-byte nonce_c
///                            + HMAC-SHA256(secret, "c" | scope | from | to | nonce_l | nonce_c)
///   listener  -> connector : HMAC-SHA256(secret, "l" | scope | from | to | nonce_l | nonce_c)
/// `scope` (the communicator's store prefix) binds the link to one
/// communicator generation, so a stale peer from an earlier generation is
/// refused like a stranger. A connection that sends garbage, the wrong proof,
/// an unexpected rank, or nothing within the per-handshake limit is dropped
/// and logged; the listener keeps waiting for the right peers.
#include "hvd/common/io.h"
#include "hvd/transport/link.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace hvd::transport {

/// Who we are on the wire: shared by both ends of every link of one Comm.
struct Handshake {
  /// The job secret (HVDRUN_SECRET); may be empty only in tests.
  std::string secret;
  /// Binds links to one communicator generation (the store prefix).
  std::string scope;
  /// Our rank.
  int self_rank = 0;
  /// Upper bound for one peer's handshake, so a silent connection cannot
  /// stall the listener.
  std::chrono::milliseconds handshake_timeout{5000};
};

/// Socket tuning applied to every link.
struct TcpOptions {
  /// SO_SNDBUF/SO_RCVBUF in bytes; 0 keeps the kernel's auto-tuning.
  int socket_buffer_bytes = 0;
};

class TcpLink final : public Link {
 public:
  /// Takes ownership of a connected socket; sets non-blocking and TCP_NODELAY.
  TcpLink(UniqueFd fd, int peer, std::string peer_address, const TcpOptions& options = {});
  ~TcpLink() override;

  int peer() const override { return peer_; }
  std::size_t try_send(const void* data, std::size_t len) override;
  std::size_t try_recv(void* data, std::size_t len) override;
  int poll_fd() const override { return fd_.get(); }
  void shutdown() override;
  bool is_shutdown() const override { return shut_.load(); }
  std::string describe() const override;

 private:
  UniqueFd fd_;
  int peer_;
  std::string peer_address_;
  std::atomic<bool> shut_{false};
};

/// A listening TCP socket on an ephemeral (or given) port.
class TcpListener {
 public:
  /// Binds `address` ("127.0.0.1", "0.0.0.0", "::1", a hostname) and
  /// `port` (0 = ephemeral). Throws IoError with the address on failure.
  TcpListener(const std::string& address, uint16_t port = 0, int backlog = 128);

  /// The bound address as given and the actual port.
  const std::string& address() const { return address_; }
  uint16_t port() const { return port_; }
  /// "host:port" ("[v6]:port" for IPv6), ready to publish in a store.
  std::string endpoint() const;

  /// Accepts connections until one completes the handshake claiming a rank
  /// for which `wanted(rank)` is true (the listener's own rank is the
  /// handshake's to_rank). Failed handshakes are logged and dropped.
  /// Throws TimeoutError when the deadline passes first.
  std::unique_ptr<TcpLink> accept(const Handshake& hs, const std::function<bool(int)>& wanted,
                                  Deadline deadline, const TcpOptions& options = {});

 private:
  UniqueFd fd_;
  std::string address_;
  uint16_t port_ = 0;
};

/// Connects to `endpoint` ("host:port") and authenticates as hs.self_rank
/// towards `peer`. Retries refused connections until the deadline (the peer
/// may not be listening yet). Throws IoError when the peer fails the
/// handshake (wrong secret), TimeoutError at the deadline.
std::unique_ptr<TcpLink> connect(const std::string& endpoint, int peer, const Handshake& hs,
                                 Deadline deadline, const TcpOptions& options = {});

/// Splits "host:port" / "[v6]:port"; InvalidArgument on malformed input.
void split_endpoint(const std::string& endpoint, std::string& host, uint16_t& port);

/// The local source address the kernel would use to reach `host` (no packet
/// is sent: a UDP socket is connected and queried). Empty on failure.
std::string source_address_for(const std::string& host);

}  // namespace hvd::transport
