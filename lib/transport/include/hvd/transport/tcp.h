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
#include <mutex>
#include <optional>
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

/// Environment variable that sets TcpOptions::peer_timeout's default.
inline constexpr const char* kPeerTimeoutEnv = "HVD_TRANSPORT_PEER_TIMEOUT_MS";
/// Default silent-peer limit when kPeerTimeoutEnv is unset.
inline constexpr std::chrono::milliseconds kDefaultPeerTimeout{1500};

/// kPeerTimeoutEnv's value (milliseconds, 0 = off), kDefaultPeerTimeout when
/// unset; InvalidArgument naming the variable for garbage or negative values.
std::chrono::milliseconds peer_timeout_from_env();

/// Socket tuning applied to every link.
struct TcpOptions {
  /// SO_SNDBUF/SO_RCVBUF in bytes; 0 keeps the kernel's auto-tuning.
  int socket_buffer_bytes = 0;
  /// Silent-peer limit: a peer whose host died or whose network was cut
  /// never sends FIN or RST, so without a limit a survivor would wait for
  /// it forever. Two mechanisms bound the wait (0 turns both off):
  ///  * TCP keepalive on every link (SO_KEEPALIVE, TCP_KEEPIDLE/INTVL/CNT,
  ///    whole seconds, see keepalive_for) for links with nothing in flight:
  ///    the peer's kernel answers the probes, so a live peer that is merely
  ///    slow (not sending, not reading) is never failed;
  ///  * check_peer(), called by progress() while it waits on the link:
  ///    sent data that no ACK has answered for this long, a keepalive probe
  ///    or two window probes unanswered this long, fail the link.
  /// TCP_USER_TIMEOUT is deliberately not used: since Linux 5.11 it also
  /// aborts a connection whose receive window stays closed that long, i.e.
  /// a live peer that is busy and not reading yet.
  std::chrono::milliseconds peer_timeout = peer_timeout_from_env();
};

/// The keepalive settings for a peer timeout (all in whole seconds, as the
/// kernel takes them): idle before the first probe, the interval between
/// probes, and how many unanswered probes end the connection. A silent
/// peer is dropped after idle + interval * count, which is at least 2 s.
struct KeepaliveSettings {
  int idle_s = 0;
  int interval_s = 0;
  int count = 0;
};
KeepaliveSettings keepalive_for(std::chrono::milliseconds peer_timeout);

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
  std::chrono::milliseconds peer_check_interval() const override;
  void check_peer() override;

  /// The limit this link was created with (TcpOptions::peer_timeout).
  std::chrono::milliseconds peer_timeout() const { return peer_timeout_; }

 private:
  /// Marks the link failed with `reason` (later calls report it) and shuts
  /// the socket down so every thread waiting on it wakes.
  [[noreturn]] void fail(const std::string& reason);
  /// The IoError text for a failed send/recv (errno `err`).
  std::string io_error_text(const char* what, int err) const;
  std::string failure_text() const;

  UniqueFd fd_;
  int peer_;
  std::string peer_address_;
  std::chrono::milliseconds peer_timeout_{0};
  std::atomic<bool> shut_{false};
  /// Guards the liveness bookkeeping (progress() may check the link from
  /// the caller's and the send helper's thread) and failure_.
  mutable std::mutex mu_;
  /// When check_peer() first saw unacknowledged data (no value: none seen).
  std::optional<std::chrono::steady_clock::time_point> outstanding_since_;
  std::string failure_;
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
  std::unique_ptr<TcpLink> accept(const Handshake& hs, const std::function<bool(int)>& wanted, Deadline deadline,
                                  const TcpOptions& options = {});

 private:
  UniqueFd fd_;
  std::string address_;
  uint16_t port_ = 0;
};

/// Connects to `endpoint` ("host:port") and authenticates as hs.self_rank
/// towards `peer`. Retries refused connections until the deadline (the peer
/// may not be listening yet). Throws IoError when the peer fails the
/// handshake (wrong secret), TimeoutError at the deadline.
std::unique_ptr<TcpLink> connect(const std::string& endpoint, int peer, const Handshake& hs, Deadline deadline,
                                 const TcpOptions& options = {});

/// Splits "host:port" / "[v6]:port"; InvalidArgument on malformed input.
void split_endpoint(const std::string& endpoint, std::string& host, uint16_t& port);

/// The local source address the kernel would use to reach `host` (no packet
/// is sent: a UDP socket is connected and queried). Empty on failure.
std::string source_address_for(const std::string& host);

}  // namespace hvd::transport
