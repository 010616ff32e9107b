#pragma once
/// TCP links with mutual authentication by the job secret.
///
/// Handshake (never sends the secret; both sides prove they know it):
///   listener  -> connector : "HVDL1" + 16-byte nonce_l
///   connector -> listener  : "HVDC1" + from_rank + to_rank + 16-byte nonce_c
///                            + HMAC-SHA256(secret, "c" | scope | from | to | nonce_l | nonce_c)
///   listener  -> connector : HMAC-SHA256(secret, "l" | scope | from | to | nonce_l | nonce_c)
///                            or, refusing, "HVDR" + u32 reason + 24 zero bytes
///                            (1: wrong proof, 2: not the rank asked for,
///                            3: a rank it does not expect or already has)
/// `scope` (the communicator's store prefix) binds the link to one
/// communicator generation, so a stale peer from an earlier generation is
/// refused like a stranger. A refusal is not authenticated (anyone could
/// forge one, as anyone can reset the connection); it only lets a real peer
/// say why. The listener runs every handshake concurrently (one poll loop,
/// non-blocking sockets): a connection that sends garbage, the wrong proof,
/// an unexpected rank, or nothing within handshake_timeout of being
/// accepted is dropped and logged (once, then counted) without delaying
/// anyone else, and at most kMaxPendingHandshakes are in progress at once
/// (the oldest goes to make room); the listener keeps waiting for the right
/// peers.
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
#include <vector>

namespace hvd::transport {

/// Who we are on the wire: shared by both ends of every link of one Comm.
struct Handshake {
  /// The job secret (HVDRUN_SECRET); may be empty only in tests.
  std::string secret;
  /// Binds links to one communicator generation (the store prefix).
  std::string scope;
  /// Our rank.
  int self_rank = 0;
  /// Upper bound for one peer's handshake on the listener, counted from
  /// accept (a real peer answers within a round trip; handshakes run
  /// concurrently, so a silent connection delays nobody, it only holds one
  /// of the kMaxPendingHandshakes places for this long).
  std::chrono::milliseconds handshake_timeout{3000};
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
  /// connect(): retry a refused connection until the deadline (the peer may
  /// not listen yet). False when the peer's address was published after it
  /// started listening (a communicator's links): refused then means the
  /// peer is gone, and connect() fails at once with IoError. A peer the
  /// network cannot reach (EHOSTUNREACH, ENETUNREACH, ETIMEDOUT: a link that
  /// just came back) is retried until the deadline either way.
  bool retry_refused = true;
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

/// Handshakes a listener runs at once; a new connection beyond this closes
/// the oldest one still in its handshake.
inline constexpr std::size_t kMaxPendingHandshakes = 64;

/// A listening TCP socket on an ephemeral (or given) port (SOCK_CLOEXEC,
/// non-blocking; accepted sockets too).
class TcpListener {
 public:
  /// Binds `address` ("127.0.0.1", "0.0.0.0", "::1", a hostname) and
  /// `port` (0 = ephemeral). Throws IoError with the address on failure.
  TcpListener(const std::string& address, uint16_t port = 0, int backlog = 128);
  /// Closes the listener and every handshake still in progress.
  ~TcpListener();
  TcpListener(TcpListener&&) noexcept;
  TcpListener& operator=(TcpListener&&) noexcept;

  /// The bound address as given and the actual port.
  const std::string& address() const { return address_; }
  uint16_t port() const { return port_; }
  /// "host:port" ("[v6]:port" for IPv6), ready to publish in a store.
  std::string endpoint() const;

  /// Accepts connections and runs their handshakes concurrently until one
  /// completes claiming a rank for which `wanted(rank)` is true (the
  /// listener's own rank is the handshake's to_rank). Failed handshakes are
  /// refused with their reason, logged (the first, then a count every 5 s)
  /// and dropped. Handshakes still in progress when it returns carry on at
  /// the next call (the same `hs` is expected). Throws TimeoutError when the
  /// deadline passes first.
  std::unique_ptr<TcpLink> accept(const Handshake& hs, const std::function<bool(int)>& wanted, Deadline deadline,
                                  const TcpOptions& options = {});

  /// Handshakes in progress (for tests).
  std::size_t pending_handshakes() const { return pending_.size(); }

  /// Stops listening: a thread blocked in accept() wakes and accept() throws
  /// IoError; peers that connect later are refused by the kernel. May be
  /// called from any thread, once accept() is running or not. Idempotent.
  void shutdown();

 private:
  struct Pending;
  struct Logs;

  UniqueFd fd_;
  std::string address_;
  uint16_t port_ = 0;
  std::vector<std::unique_ptr<Pending>> pending_;
  std::unique_ptr<Logs> logs_;
};

/// Connects to `endpoint` ("host:port") and authenticates as hs.self_rank
/// towards `peer`. Retries refused connections until the deadline (the peer
/// may not be listening yet). Throws IoError saying what happened when the
/// handshake fails: the peer refused us (and why: our proof of the secret,
/// the rank we asked for, a rank it does not expect), failed to prove the
/// secret itself, or closed the connection without a verdict (it gave up
/// or failed); TimeoutError at the deadline.
std::unique_ptr<TcpLink> connect(const std::string& endpoint, int peer, const Handshake& hs, Deadline deadline,
                                 const TcpOptions& options = {});

/// Splits "host:port" / "[v6]:port"; InvalidArgument on malformed input.
void split_endpoint(const std::string& endpoint, std::string& host, uint16_t& port);

/// The local source address the kernel would use to reach `host` (no packet
/// is sent: a UDP socket is connected and queried). Empty on failure.
std::string source_address_for(const std::string& host);

}  // namespace hvd::transport
