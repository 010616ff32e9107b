// The launcher <-> agent frames (agent_protocol.h). Only the standard
// library: the lean agent links this file.
#include "hvd/launcher/spawn/agent_protocol.h"

#include <cstdio>
#include <cstring>

namespace hvd::launcher {

namespace {

const char* type_name(unsigned char type) {
  switch (type) {
    case 'H': return "Hello";
    case 'S': return "Spawn";
    case 'K': return "Signal";
    case 'D': return "Done";
    case 'O': return "Output";
    case 'X': return "Exit";
    case 'E': return "Error";
    default: return nullptr;
  }
}

std::string byte_text(unsigned char b) {
  char buf[16];
  if (b >= 0x21 && b < 0x7f) {
    std::snprintf(buf, sizeof buf, "'%c' (0x%02x)", b, b);
  } else {
    std::snprintf(buf, sizeof buf, "0x%02x", b);
  }
  return buf;
}

class Writer {
 public:
  explicit Writer(char type) : out_(4, '\0') { out_.push_back(type); }
  void u8(unsigned v) { out_.push_back(static_cast<char>(v & 0xff)); }
  void u32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void str(const std::string& s) {
    check_room(s.size() + 4);
    u32(static_cast<std::uint32_t>(s.size()));
    out_ += s;
  }
  void list(const std::vector<std::string>& l) {
    u32(static_cast<std::uint32_t>(l.size()));
    for (const auto& s : l) str(s);
  }
  void raw(const std::string& s) {
    check_room(s.size());
    out_ += s;
  }
  std::string finish() {
    check_room(0);
    const auto n = static_cast<std::uint32_t>(out_.size() - 4);
    for (int i = 0; i < 4; ++i) out_[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
    return std::move(out_);
  }

 private:
  void check_room(std::size_t more) const {
    if (out_.size() - 4 + more > kMaxAgentFrame) {
      throw AgentProtocolError(std::string("a ") + type_name(static_cast<unsigned char>(out_[4])) +
                               " frame would take more than " + std::to_string(kMaxAgentFrame) +
                               " bytes, the most the agent accepts");
    }
  }
  std::string out_;
};

class Reader {
 public:
  Reader(const char* data, std::size_t len, const char* what) : p_(data), end_(data + len), what_(what) {}
  std::uint32_t u32(const char* field) {
    need(4, field);
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(static_cast<unsigned char>(p_[i])) << (8 * i);
    p_ += 4;
    return v;
  }
  unsigned u8(const char* field) {
    need(1, field);
    return static_cast<unsigned char>(*p_++);
  }
  std::string str(const char* field) {
    const std::uint32_t n = u32(field);
    need(n, field);
    std::string s(p_, n);
    p_ += n;
    return s;
  }
  std::vector<std::string> list(const char* field) {
    const std::uint32_t n = u32(field);
    // Each string takes at least its 4-byte count: a count that cannot fit
    // is refused before anything is allocated.
    if (n > static_cast<std::size_t>(end_ - p_) / 4) {
      throw fail(std::string(field) + " claims " + std::to_string(n) + " strings but only " +
                 std::to_string(end_ - p_) + " bytes follow");
    }
    std::vector<std::string> l;
    l.reserve(n);
    for (std::uint32_t i = 0; i < n; ++i) l.push_back(str(field));
    return l;
  }
  std::string rest() {
    std::string s(p_, static_cast<std::size_t>(end_ - p_));
    p_ = end_;
    return s;
  }
  void end() {
    if (p_ != end_) throw fail(std::to_string(end_ - p_) + " unexpected byte(s) after the last field");
  }
  AgentProtocolError fail(const std::string& why) const {
    return AgentProtocolError(std::string("bad ") + what_ + " frame: " + why);
  }

 private:
  void need(std::size_t n, const char* field) {
    if (static_cast<std::size_t>(end_ - p_) < n) {
      throw fail(std::string("it ends inside ") + field + " (" + std::to_string(n) + " byte(s) needed, " +
                 std::to_string(end_ - p_) + " left)");
    }
  }
  const char* p_;
  const char* end_;
  const char* what_;
};

char code_for(int sig) {
  for (const auto& c : kAgentSignalCodes) {
    if (c.sig == sig) return c.code;
  }
  return 0;
}

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

}  // namespace

bool agent_can_signal(int sig) { return code_for(sig) != 0; }

const char* agent_message_name(const AgentMessage& message) {
  static const char* const names[] = {"Hello", "Spawn", "Signal", "Done", "Output", "Exit", "Error"};
  return names[message.index()];
}

std::string encode_agent_message(const AgentMessage& message) {
  return std::visit(
      Overloaded{
          [](const agent_msg::Hello& m) {
            Writer w('H');
            w.u32(m.version);
            w.u32(m.value);
            return w.finish();
          },
          [](const agent_msg::Spawn& m) {
            if (m.argv.empty()) throw AgentProtocolError("a Spawn frame needs a command (argv is empty)");
            Writer w('S');
            w.u32(m.id);
            w.list(m.argv);
            w.list(m.env);
            w.str(m.cwd);
            return w.finish();
          },
          [](const agent_msg::Signal& m) {
            const char code = code_for(m.sig);
            if (code == 0) {
              throw AgentProtocolError("signal " + std::to_string(m.sig) +
                                       " cannot be sent to a worker through the agent (only INT, TERM, HUP, KILL)");
            }
            Writer w('K');
            w.u32(m.id);
            w.u8(static_cast<unsigned char>(code));
            return w.finish();
          },
          [](const agent_msg::Done&) { return Writer('D').finish(); },
          [](const agent_msg::Output& m) {
            if (m.stream != 1 && m.stream != 2) throw AgentProtocolError("an Output frame's stream must be 1 or 2");
            Writer w('O');
            w.u32(m.id);
            w.u8(static_cast<unsigned>(m.stream));
            w.raw(m.data);
            return w.finish();
          },
          [](const agent_msg::Exit& m) {
            Writer w('X');
            w.u32(m.id);
            w.u32(m.status);
            w.u32(m.signal);
            return w.finish();
          },
          [](const agent_msg::Error& m) {
            Writer w('E');
            w.str(m.message);
            return w.finish();
          },
      },
      message);
}

AgentMessage decode_agent_frame(const char* data, std::size_t len) {
  if (len == 0) throw AgentProtocolError("bad frame: it is empty (no type byte)");
  const auto type = static_cast<unsigned char>(data[0]);
  const char* name = type_name(type);
  if (name == nullptr) throw AgentProtocolError("bad frame: unknown type " + byte_text(type));
  Reader r(data + 1, len - 1, name);
  switch (type) {
    case 'H': {
      agent_msg::Hello m;
      m.version = r.u32("the version");
      m.value = r.u32("the value");
      r.end();
      return m;
    }
    case 'S': {
      agent_msg::Spawn m;
      m.id = r.u32("the id");
      m.argv = r.list("argv");
      m.env = r.list("env");
      m.cwd = r.str("cwd");
      r.end();
      if (m.argv.empty()) throw r.fail("argv is empty");
      for (const auto& e : m.env) {
        const auto eq = e.find('=');
        if (eq == std::string::npos || eq == 0) {
          throw r.fail("environment entry '" + e.substr(0, 64) + "' is not NAME=value");
        }
      }
      return m;
    }
    case 'K': {
      agent_msg::Signal m;
      m.id = r.u32("the id");
      const unsigned code = r.u8("the signal code");
      r.end();
      for (const auto& c : kAgentSignalCodes) {
        if (static_cast<unsigned char>(c.code) == code) m.sig = c.sig;
      }
      if (m.sig == 0) throw r.fail("unknown signal code " + byte_text(static_cast<unsigned char>(code)));
      return m;
    }
    case 'D': r.end(); return agent_msg::Done{};
    case 'O': {
      agent_msg::Output m;
      m.id = r.u32("the id");
      m.stream = static_cast<int>(r.u8("the stream"));
      if (m.stream != 1 && m.stream != 2) throw r.fail("stream " + std::to_string(m.stream) + " is neither 1 nor 2");
      m.data = r.rest();
      return m;
    }
    case 'X': {
      agent_msg::Exit m;
      m.id = r.u32("the id");
      m.status = r.u32("the status");
      m.signal = r.u32("the signal");
      r.end();
      if (m.status > 255) throw r.fail("status " + std::to_string(m.status) + " is out of range");
      if (m.signal > 64) throw r.fail("signal " + std::to_string(m.signal) + " is out of range");
      return m;
    }
    default: {  // 'E'
      agent_msg::Error m;
      m.message = r.str("the message");
      r.end();
      return m;
    }
  }
}

void AgentFrameReader::feed(const char* data, std::size_t len) {
  if (offset_ > 0 && offset_ == buffer_.size()) {
    buffer_.clear();
    offset_ = 0;
  }
  buffer_.append(data, len);
}

std::optional<AgentMessage> AgentFrameReader::next() {
  if (!failed_.empty()) throw AgentProtocolError(failed_);
  if (buffer_.size() - offset_ < 4) return std::nullopt;
  const auto* p = reinterpret_cast<const unsigned char*>(buffer_.data() + offset_);
  const std::uint32_t n = static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
                          (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
  if (n == 0 || n > kMaxAgentFrame) {
    failed_ = "bad frame length " + std::to_string(n) + " (1 to " + std::to_string(kMaxAgentFrame) +
              " allowed): the stream is not the hvdrun agent protocol";
    throw AgentProtocolError(failed_);
  }
  if (buffer_.size() - offset_ - 4 < n) return std::nullopt;
  try {
    AgentMessage m = decode_agent_frame(buffer_.data() + offset_ + 4, n);
    offset_ += 4 + n;
    if (offset_ > (1u << 16) && offset_ * 2 > buffer_.size()) {
      buffer_.erase(0, offset_);
      offset_ = 0;
    }
    return m;
  } catch (const AgentProtocolError& e) {
    failed_ = e.what();
    throw;
  }
}

}  // namespace hvd::launcher
