#pragma once
/// The wire protocol between hvdrun and its per-host agent (`hvdrun-agent`,
/// agent.h): one byte stream each way -- the agent's stdin and stdout, over a
/// socket locally, srun's streams under --launcher srun, one SSH channel
/// remotely. Pure code (no I/O, no logging, only the standard library): the
/// lean agent and the launcher both link it. docs/design.md, "The agent".
///
/// Every frame is
///
///     u32 length (little-endian, 1 .. kMaxAgentFrame; counts what follows)
///     u8  type
///     body (fields below, in order; integers little-endian; a string is a
///           u32 byte count then the bytes; a list is a u32 count then strings)
///
/// hvdrun -> agent                          agent -> hvdrun
///   'H' Hello   u32 version, u32 grace_ms    'H' Hello   u32 version, u32 pid
///   'S' Spawn   u32 id, list argv,           'O' Output  u32 id, u8 stream (1 out, 2 err),
///               list env (NAME=value),                   the rest of the frame: bytes
///               string cwd                   'X' Exit    u32 id, u32 status, u32 signal
///   'K' Signal  u32 id, u8 code (I T H K)    'E' Error   string message (the agent stops)
///   'D' Done    (no more Spawn frames)
///
/// hvdrun sends Hello first, then the Spawn frames of the batch, then Done;
/// Signal frames any time. The agent answers Hello with its own, sends each
/// worker's output as it comes and exactly one Exit per Spawn, after that
/// worker's last Output. EOF on the agent's stdin means hvdrun is gone: the
/// agent stops every worker's group (SIGTERM, SIGKILL after grace_ms). After
/// Done, the agent exits once every worker has exited and been reported.
/// A frame that does not decode is an AgentProtocolError naming what is
/// wrong; neither side ever reads past a frame's length.
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

namespace hvd::launcher {

inline constexpr std::uint32_t kAgentProtocolVersion = 1;
/// The largest frame either side accepts (a Spawn frame carries a worker's
/// whole environment).
inline constexpr std::size_t kMaxAgentFrame = 16u << 20;
/// The agent's exit status when the agent itself failed (bad input, fork
/// failure) -- distinct from the worker statuses it reports.
inline constexpr int kAgentFailureStatus = 125;

namespace agent_msg {
struct Hello {
  std::uint32_t version = kAgentProtocolVersion;
  std::uint32_t value = 0;  ///< hvdrun -> agent: the kill grace in ms; agent -> hvdrun: its pid
};
struct Spawn {
  std::uint32_t id = 0;  ///< the worker's rank (elastic jobs: its serial)
  std::vector<std::string> argv;  ///< not empty
  std::vector<std::string> env;  ///< NAME=value, NAME not empty
  std::string cwd;
};
struct Signal {
  std::uint32_t id = 0;
  int sig = 0;  ///< one of kAgentSignalCodes' signals
};
struct Done {};
struct Output {
  std::uint32_t id = 0;
  int stream = 1;  ///< 1 stdout, 2 stderr
  std::string data;
};
struct Exit {
  std::uint32_t id = 0;
  std::uint32_t status = 0;  ///< as a shell reports it: the code, or 128+N
  std::uint32_t signal = 0;  ///< the signal that killed the worker, or 0
};
struct Error {
  std::string message;
};
}  // namespace agent_msg

using AgentMessage = std::variant<agent_msg::Hello, agent_msg::Spawn, agent_msg::Signal, agent_msg::Done,
                                  agent_msg::Output, agent_msg::Exit, agent_msg::Error>;

/// Signals travel as a portable code, not a number (hosts may differ).
struct AgentSignalCode {
  char code;
  int sig;
};
inline constexpr AgentSignalCode kAgentSignalCodes[] = {{'I', SIGINT}, {'T', SIGTERM}, {'H', SIGHUP}, {'K', SIGKILL}};

/// Whether the protocol can carry `sig` (SIGINT, SIGTERM, SIGHUP, SIGKILL).
bool agent_can_signal(int sig);

/// A frame that does not decode, or one that arrives where it must not.
class AgentProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The whole frame (length prefix included) for `message`. Throws
/// AgentProtocolError for what the protocol cannot carry (a frame over
/// kMaxAgentFrame, an empty argv, a signal without a code, a bad stream).
std::string encode_agent_message(const AgentMessage& message);

/// Decodes one frame's type and body (what follows the length prefix).
/// Throws AgentProtocolError naming the frame type and what is wrong.
AgentMessage decode_agent_frame(const char* data, std::size_t len);

/// Splits a byte stream into messages: feed() what was read, then next()
/// until it returns nullopt. Throws AgentProtocolError for a bad length or
/// frame; after that it stays failed (the stream cannot be resynchronised).
class AgentFrameReader {
 public:
  void feed(const char* data, std::size_t len);
  std::optional<AgentMessage> next();
  /// Bytes received that do not yet make a whole frame (a stream that ends
  /// with some was cut in the middle of a frame).
  std::size_t pending() const { return buffer_.size() - offset_; }

 private:
  std::string buffer_;
  std::size_t offset_ = 0;
  std::string failed_;
};

/// The one-word name of a message type, for errors ("Spawn", "Exit").
const char* agent_message_name(const AgentMessage& message);

}  // namespace hvd::launcher
