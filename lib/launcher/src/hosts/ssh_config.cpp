#include "hvd/launcher/hosts/ssh_config.h"

#include "hvd/common/error.h"
#include "hvd/launcher/process/shell.h"
#include "hvd/launcher/process/subprocess.h"

#include <arpa/inet.h>
#include <glob.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

namespace hvd::launcher::ssh {

namespace {

constexpr int kMaxIncludeDepth = 16;  // OpenSSH's READCONF_MAX_DEPTH

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

/// Keywords that change how ssh would connect or authenticate, which hvdrun
/// does not implement: a warning when they apply to a host.
const std::map<std::string, const char*>& unsupported_keywords() {
  static const std::map<std::string, const char*> table = {
      {"proxyusefdpass", "a ProxyCommand's stdin and stdout carry the connection"},
      {"certificatefile", "no certificate authentication"},
      {"pubkeyacceptedalgorithms", "libssh2's defaults are used"},
      {"pubkeyacceptedkeytypes", "libssh2's defaults are used"},
      {"casignaturealgorithms", "no certificate authentication"},
      {"hostbasedacceptedalgorithms", "no host-based authentication"},
      {"hostbasedauthentication", "hvdrun authenticates with public keys only"},
      {"pubkeyauthentication", "hvdrun authenticates with public keys only"},
      {"preferredauthentications", "hvdrun authenticates with public keys only"},
      {"knownhostscommand", "only the known_hosts files are read"},
      {"revokedhostkeys", "no revocation list support"},
      {"verifyhostkeydns", "no SSHFP lookups"},
      {"canonicalizehostname", "host names are used as given (or as HostName says)"},
      {"canonicaldomains", "host names are used as given (or as HostName says)"},
      {"canonicalizefallbacklocal", "host names are used as given (or as HostName says)"},
      {"canonicalizemaxdots", "host names are used as given (or as HostName says)"},
      {"canonicalizepermittedcnames", "host names are used as given (or as HostName says)"},
      {"remotecommand", "hvdrun runs its own agent"},
      {"requesttty", "hvdrun never requests a terminal"},
      {"sessiontype", "hvdrun runs its own agent"},
      {"setenv", "pass variables with -x (hvdrun forwards its environment)"},
      {"localcommand", "no local commands"},
      {"permitlocalcommand", "no local commands"},
      {"localforward", "no port forwarding"},
      {"remoteforward", "no port forwarding"},
      {"dynamicforward", "no port forwarding"},
      {"tunnel", "no tunnel devices"},
      {"tunneldevice", "no tunnel devices"},
      {"pkcs11provider", "no PKCS#11 keys"},
      {"securitykeyprovider", "no security keys"},
      {"rekeylimit", "libssh2's defaults are used"},
      {"requiredrsasize", "libssh2's defaults are used"},
  };
  return table;
}

/// Keywords that do not matter to hvdrun (listed under --verbose).
const std::map<std::string, const char*>& cosmetic_keywords() {
  static const std::map<std::string, const char*> table = {
      {"sendenv", "hvdrun sends the worker environment itself"},
      {"forwardagent", "no agent forwarding"},
      {"forwardx11", "no X11 forwarding"},
      {"forwardx11trusted", "no X11 forwarding"},
      {"forwardx11timeout", "no X11 forwarding"},
      {"xauthlocation", "no X11 forwarding"},
      {"clearallforwardings", "no port forwarding"},
      {"exitonforwardfailure", "no port forwarding"},
      {"gatewayports", "no port forwarding"},
      {"streamlocalbindmask", "no port forwarding"},
      {"streamlocalbindunlink", "no port forwarding"},
      {"loglevel", "hvdrun logs with --verbose"},
      {"logverbose", "hvdrun logs with --verbose"},
      {"syslogfacility", "hvdrun logs to stderr"},
      {"visualhostkey", "cosmetic"},
      {"fingerprinthash", "hvdrun prints SHA256 fingerprints"},
      {"hashknownhosts", "new entries are written in plain form"},
      {"updatehostkeys", "host keys are only ever appended"},
      {"checkhostip", "the host key is checked under the host name"},
      {"addkeystoagent", "hvdrun never adds keys to ssh-agent"},
      {"usekeychain", "macOS only"},
      {"serveraliveinterval", "hvdrun uses TCP keepalive (--ssh-keepalive)"},
      {"serveralivecountmax", "hvdrun uses TCP keepalive (--ssh-keepalive)"},
      {"tcpkeepalive", "hvdrun always uses TCP keepalive (--ssh-keepalive)"},
      {"escapechar", "no interactive session"},
      {"enableescapecommandline", "no interactive session"},
      {"obscurekeystroketiming", "no interactive session"},
      {"batchmode", "hvdrun never prompts"},
      {"numberofpasswordprompts", "hvdrun never prompts"},
      {"passwordauthentication", "hvdrun authenticates with public keys only"},
      {"kbdinteractiveauthentication", "hvdrun authenticates with public keys only"},
      {"kbdinteractivedevices", "hvdrun authenticates with public keys only"},
      {"challengeresponseauthentication", "hvdrun authenticates with public keys only"},
      {"gssapiauthentication", "hvdrun authenticates with public keys only"},
      {"gssapidelegatecredentials", "hvdrun authenticates with public keys only"},
      {"gssapikeyexchange", "hvdrun authenticates with public keys only"},
      {"gssapitrustdns", "hvdrun authenticates with public keys only"},
      {"gssapikexalgorithms", "hvdrun authenticates with public keys only"},
      {"gssapiclientidentity", "hvdrun authenticates with public keys only"},
      {"gssapiserveridentity", "hvdrun authenticates with public keys only"},
      {"gssapirenewalforcesrekey", "hvdrun authenticates with public keys only"},
      {"compression", "no compression"},
      {"controlmaster", "hvdrun opens one connection per host itself"},
      {"controlpath", "hvdrun opens one connection per host itself"},
      {"controlpersist", "hvdrun opens one connection per host itself"},
      {"ipqos", "default type of service"},
      {"stdinnull", "no interactive session"},
      {"forkafterauthentication", "no interactive session"},
      {"nohostauthenticationforlocalhost", "local hosts do not use SSH"},
      {"enablesshkeysign", "no host-based authentication"},
      {"protocol", "SSH 2 only"},
      {"useroaming", "obsolete"},
      {"ignoreunknown", "applied while reading"},
  };
  return table;
}

/// Algorithm lists: system-wide crypto policies (e.g. RHEL's
/// /etc/crypto-policies/back-ends/openssh.config, included by
/// /etc/ssh/ssh_config) set them for every host; warning about them on every
/// run would bury the warnings users can act on.
bool is_algorithm_policy(const std::string& kw) {
  static const std::set<std::string> keys = {"ciphers",
                                             "macs",
                                             "kexalgorithms",
                                             "hostkeyalgorithms",
                                             "pubkeyacceptedalgorithms",
                                             "pubkeyacceptedkeytypes",
                                             "casignaturealgorithms",
                                             "hostbasedacceptedalgorithms",
                                             "requiredrsasize",
                                             "rekeylimit"};
  return keys.count(kw) != 0;
}

bool is_implemented(const std::string& kw) {
  static const std::set<std::string> keys = {"host",
                                             "match",
                                             "include",
                                             "hostname",
                                             "port",
                                             "user",
                                             "identityfile",
                                             "identitiesonly",
                                             "identityagent",
                                             "hostkeyalias",
                                             "connecttimeout",
                                             "proxyjump",
                                             "addressfamily",
                                             "bindaddress",
                                             "bindinterface",
                                             "connectionattempts",
                                             "proxycommand",
                                             "stricthostkeychecking",
                                             "userknownhostsfile",
                                             "globalknownhostsfile",
                                             "ciphers",
                                             "macs",
                                             "kexalgorithms",
                                             "hostkeyalgorithms"};
  return keys.count(kw) != 0;
}

bool wild_match(const char* s, const char* p) {
  // Iterative '*' / '?' matching (both already lower case).
  const char* star = nullptr;
  const char* resume = nullptr;
  while (*s != '\0') {
    if (*p == '?' || *p == *s) {
      ++s;
      ++p;
    } else if (*p == '*') {
      star = p++;
      resume = s;
    } else if (star != nullptr) {
      p = star + 1;
      s = ++resume;
    } else {
      return false;
    }
  }
  while (*p == '*') ++p;
  return *p == '\0';
}

bool is_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string dirname_of(const std::string& path) {
  auto pos = path.rfind('/');
  if (pos == std::string::npos) return ".";
  return pos == 0 ? "/" : path.substr(0, pos);
}

bool truthy(const std::string& v, bool* out) {
  std::string l = lower(v);
  if (l == "yes" || l == "true") {
    *out = true;
    return true;
  }
  if (l == "no" || l == "false") {
    *out = false;
    return true;
  }
  return false;
}

/// A Match pattern list (comma-separated, `!` negates): false when a negated
/// pattern matches, else true when a plain one does (OpenSSH's
/// match_pattern_list). Host names compare case-insensitively, user names
/// exactly.
bool match_list(const std::string& value, const std::string& list, bool ignore_case) {
  const std::string v = ignore_case ? lower(value) : value;
  bool matched = false;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const bool neg = !item.empty() && item[0] == '!';
    std::string pat = neg ? item.substr(1) : item;
    if (ignore_case) pat = lower(pat);
    if (pat.empty()) continue;
    if (wild_match(v.c_str(), pat.c_str())) {
      if (neg) return false;
      matched = true;
    }
  }
  return matched;
}

constexpr auto kMatchExecTimeout = std::chrono::seconds(10);

/// `Match exec`: runs `command` with the user's shell ($SHELL, else /bin/sh)
/// as `shell -c command`, stdin and stdout on /dev/null, stderr inherited
/// (as OpenSSH). True when it exits 0. At most kMatchExecTimeout, then its
/// process group is killed (false, with `problem` set). Each distinct
/// command runs once per process: hosts resolved again reuse the answer.
bool run_match_exec(const std::string& command, std::string* problem) {
  static std::mutex mu;
  static std::map<std::string, std::pair<bool, std::string>> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(command); it != cache.end()) {
      *problem = it->second.second;
      return it->second.first;
    }
  }
  bool ok = false;
  std::string why;
  SpawnOptions so;
  so.argv = user_shell_argv(command);
  so.stdin_fd = ChildFd::dev_null();
  so.stdout_fd = ChildFd::dev_null();  // stderr: hvdrun's, as OpenSSH
  try {
    Subprocess p = Subprocess::spawn(so);
    if (const auto status = p.reap_until(Deadline::after(kMatchExecTimeout))) {
      ok = exit_status_of(*status) == 0;
    } else {
      p.kill_group_and_reap();
      why = fmt::format("did not finish within {} s (killed)", kMatchExecTimeout.count());
    }
  } catch (const std::exception& e) {  // SpawnError, IoError (fork)
    why = fmt::format("could not be run ({})", e.what());
  }
  std::lock_guard<std::mutex> lock(mu);
  cache.emplace(command, std::make_pair(ok, why));
  *problem = why;
  return ok;
}

/// One `Match` line. nullptr with `unsupported` set for a criterion hvdrun
/// cannot evaluate (the block is then skipped with a warning); throws
/// hvd::InvalidArgument ("file:line: ...") for a malformed line, which
/// OpenSSH refuses too.
std::shared_ptr<const MatchBlock> parse_match(const std::vector<std::string>& args, const std::string& file, int line,
                                              std::string* unsupported) {
  auto b = std::make_shared<MatchBlock>();
  b->file = file;
  b->line = line;
  auto bad = [&](const std::string& what) {
    return InvalidArgument(fmt::format("{}:{}: Match: {}", file, line, what));
  };
  if (args.empty()) throw bad("needs at least one criterion (all, host, originalhost, user, localuser, exec, final)");
  bool saw_all = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    MatchBlock::Criterion c;
    std::string w = args[i];
    c.negate = !w.empty() && w[0] == '!';
    if (c.negate) w = w.substr(1);
    const std::string k = lower(w);
    if (k == "all") {
      c.kind = MatchBlock::Kind::All;
      saw_all = true;
    } else if (k == "canonical") {
      c.kind = MatchBlock::Kind::Canonical;
    } else if (k == "final") {
      c.kind = MatchBlock::Kind::Final;
    } else if (k == "exec" || k == "host" || k == "originalhost" || k == "user" || k == "localuser") {
      c.kind = k == "exec"           ? MatchBlock::Kind::Exec
               : k == "host"         ? MatchBlock::Kind::Host
               : k == "originalhost" ? MatchBlock::Kind::OriginalHost
               : k == "user"         ? MatchBlock::Kind::User
                                     : MatchBlock::Kind::LocalUser;
      if (i + 1 >= args.size() || args[i + 1].empty()) throw bad(fmt::format("'{}' needs an argument", w));
      c.arg = args[++i];
    } else if (k == "localnetwork" || k == "tagged" || k == "version" || k == "sessiontype" || k == "command") {
      *unsupported = fmt::format("the criterion '{}' is not supported by hvdrun", w);
      return nullptr;
    } else {
      *unsupported = fmt::format("'{}' is not a Match criterion hvdrun knows", w);
      return nullptr;
    }
    b->criteria.push_back(std::move(c));
  }
  if (saw_all) {
    // OpenSSH: `all` stands alone, or after `canonical` / `final`.
    for (const auto& c : b->criteria) {
      if (c.kind != MatchBlock::Kind::All && c.kind != MatchBlock::Kind::Canonical &&
          c.kind != MatchBlock::Kind::Final) {
        throw bad("'all' cannot be combined with other criteria (but canonical or final)");
      }
    }
  }
  return b;
}

}  // namespace

std::optional<std::chrono::seconds> parse_config_time(const std::string& text) {
  // OpenSSH's convtime: NUMBER[UNIT]... with s, m, h, d, w (either case);
  // a bare number is seconds.
  if (text.empty()) return std::nullopt;
  long long total = 0;
  std::size_t i = 0;
  while (i < text.size()) {
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) return std::nullopt;
    long long n = 0;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
      n = n * 10 + (text[i++] - '0');
      if (n > 100000000LL) return std::nullopt;
    }
    long long mult = 1;
    if (i < text.size()) {
      switch (std::tolower(static_cast<unsigned char>(text[i]))) {
        case 's': mult = 1; break;
        case 'm': mult = 60; break;
        case 'h': mult = 3600; break;
        case 'd': mult = 86400; break;
        case 'w': mult = 604800; break;
        default: return std::nullopt;
      }
      ++i;
    }
    total += n * mult;
    if (total > 100000000LL) return std::nullopt;
  }
  return std::chrono::seconds(total);
}

bool MatchBlock::uses_final() const {
  return std::any_of(criteria.begin(), criteria.end(), [](const Criterion& c) { return c.kind == Kind::Final; });
}

std::string MatchBlock::where() const { return fmt::format("{}:{}", file, line); }

const char* policy_name(HostKeyPolicy policy) {
  switch (policy) {
    case HostKeyPolicy::Yes: return "yes";
    case HostKeyPolicy::AcceptNew: return "accept-new";
    case HostKeyPolicy::No: return "no";
  }
  return "?";
}

std::optional<HostKeyPolicy> parse_host_key_policy(const std::string& value) {
  const std::string v = lower(value);
  if (v == "yes" || v == "true" || v == "ask") return HostKeyPolicy::Yes;
  if (v == "accept-new") return HostKeyPolicy::AcceptNew;
  if (v == "no" || v == "off" || v == "false") return HostKeyPolicy::No;
  return std::nullopt;
}

bool match_pattern(const std::string& host, const std::string& pattern) {
  const std::string h = lower(host);
  const std::string p = lower(pattern);
  return wild_match(h.c_str(), p.c_str());
}

bool match_host_line(const std::string& host, const std::vector<std::string>& patterns) {
  bool matched = false;
  for (const auto& pat : patterns) {
    if (!pat.empty() && pat[0] == '!') {
      if (match_pattern(host, pat.substr(1))) return false;  // a negated match vetoes the line
    } else if (match_pattern(host, pat)) {
      matched = true;
    }
  }
  return matched;
}

std::vector<std::string> split_config_line(const std::string& line) {
  std::vector<std::string> out;
  std::size_t i = 0;
  const std::size_t n = line.size();
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (i < n && space(line[i])) ++i;
  if (i == n || line[i] == '#') return out;
  // The keyword: up to whitespace or '='.
  std::size_t start = i;
  while (i < n && !space(line[i]) && line[i] != '=') ++i;
  out.push_back(line.substr(start, i - start));
  while (i < n && space(line[i])) ++i;
  if (i < n && line[i] == '=') {
    ++i;
    while (i < n && space(line[i])) ++i;
  }
  while (i < n) {
    if (line[i] == '#') break;  // a trailing comment
    std::string arg;
    if (line[i] == '"') {
      auto close = line.find('"', i + 1);
      if (close == std::string::npos) throw InvalidArgument("unterminated quote");
      arg = line.substr(i + 1, close - i - 1);
      i = close + 1;
    } else {
      start = i;
      while (i < n && !space(line[i])) ++i;
      arg = line.substr(start, i - start);
    }
    out.push_back(arg);
    while (i < n && space(line[i])) ++i;
  }
  return out;
}

static std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    const auto at = s.find(sep, start);
    out.push_back(s.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return out;
    start = at + 1;
  }
}

std::string config_line_rest(const std::string& line) {
  std::size_t i = 0;
  const std::size_t n = line.size();
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (i < n && space(line[i])) ++i;
  while (i < n && !space(line[i]) && line[i] != '=') ++i;
  while (i < n && space(line[i])) ++i;
  if (i < n && line[i] == '=') {
    ++i;
    while (i < n && space(line[i])) ++i;
  }
  std::size_t end = n;
  while (end > i && space(line[end - 1])) --end;
  return line.substr(i, end - i);
}

std::optional<JumpHost> parse_jump_host(const std::string& text, std::string* why) {
  JumpHost j;
  j.text = text;
  std::string s = text;
  const bool uri = s.rfind("ssh://", 0) == 0;
  if (uri) {
    s = s.substr(6);
    if (!s.empty() && s.back() == '/') s.pop_back();
  }
  if (const auto at = s.rfind('@'); at != std::string::npos) {
    j.user = s.substr(0, at);
    s = s.substr(at + 1);
    if (j.user.empty()) {
      *why = "an empty user name before '@'";
      return std::nullopt;
    }
  }
  std::string port;
  if (!s.empty() && s[0] == '[') {
    const auto close = s.find(']');
    if (close == std::string::npos) {
      *why = "'[' without ']'";
      return std::nullopt;
    }
    j.host = s.substr(1, close - 1);
    const std::string tail = s.substr(close + 1);
    if (!tail.empty()) {
      if (tail[0] != ':') {
        *why = "text after ']' that is not ':port'";
        return std::nullopt;
      }
      port = tail.substr(1);
      if (port.empty()) {
        *why = "':' without a port";
        return std::nullopt;
      }
    }
  } else if (const auto colon = s.find(':'); colon != std::string::npos) {
    if (s.find(':', colon + 1) != std::string::npos) {
      *why = "an IPv6 address needs brackets ([addr]:port)";
      return std::nullopt;
    }
    j.host = s.substr(0, colon);
    port = s.substr(colon + 1);
    if (port.empty()) {
      *why = "':' without a port";
      return std::nullopt;
    }
  } else {
    j.host = s;
  }
  if (j.host.empty()) {
    *why = "no host";
    return std::nullopt;
  }
  for (char c : j.host + j.user) {
    if (std::isspace(static_cast<unsigned char>(c)) || c == '/' || c == '\'' || c == '"' || c == ',') {
      *why = "a host or user name cannot hold spaces, quotes, '/' or ','";
      return std::nullopt;
    }
  }
  if (!port.empty()) {
    bool ok = port.size() <= 5 &&
              std::all_of(port.begin(), port.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    if (ok) j.port = std::stoi(port);
    if (!ok || j.port < 1 || j.port > 65535) {
      *why = fmt::format("'{}' is not a port number (1-65535)", port);
      return std::nullopt;
    }
  }
  return j;
}

std::string expand_tilde(const std::string& path, const std::string& home) {
  if (path == "~") return home;
  if (path.rfind("~/", 0) == 0) return home + path.substr(1);
  return path;
}

std::string expand_tokens(const std::string& text, const TokenValues& v) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (i + 1 == text.size()) throw InvalidArgument(fmt::format("'{}' ends with a lone '%'", text));
    const char t = text[++i];
    switch (t) {
      case '%': out += '%'; break;
      case 'd': out += v.home; break;
      case 'u': out += v.local_user; break;
      case 'h': out += v.host; break;
      case 'r': out += v.remote_user; break;
      case 'n': out += v.alias; break;
      case 'p': out += std::to_string(v.port); break;
      case 'l': out += v.local_host; break;
      case 'i': out += std::to_string(::getuid()); break;
      default:
        throw InvalidArgument(
            fmt::format("'{}': the token %{} is not supported by hvdrun (known: %% %d %u %h %r %n %p %l %i)", text, t));
    }
  }
  return out;
}

std::string ConfigEntry::where() const { return fmt::format("{}:{}", file, line); }

SshConfig SshConfig::load(const std::vector<std::string>& files, const std::string& home,
                          std::vector<std::string>* warnings) {
  SshConfig config;
  for (const auto& f : files) {
    std::ifstream in(f);
    if (!in) continue;  // a missing file is the normal case
    config.read_file(f, home, dirname_of(f), Scope{}, 0, warnings);
  }
  return config;
}

SshConfig SshConfig::parse(const std::string& text, const std::string& name, const std::string& home,
                           const std::string& include_dir, std::vector<std::string>* warnings) {
  SshConfig config;
  config.read_text(text, name, home, include_dir, Scope{}, 0, warnings);
  return config;
}

void SshConfig::read_file(const std::string& path, const std::string& home, const std::string& include_dir,
                          const Scope& outer, int depth, std::vector<std::string>* warnings) {
  std::ifstream in(path);
  if (!in) {
    if (warnings) warnings->push_back(fmt::format("{}: cannot read the file; skipped", path));
    return;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  read_text(ss.str(), path, home, include_dir, outer, depth, warnings);
}

void SshConfig::read_text(const std::string& text, const std::string& name, const std::string& home,
                          const std::string& include_dir, const Scope& outer, int depth,
                          std::vector<std::string>* warnings) {
  Scope scope = outer;
  bool in_match = false;  // under a Match hvdrun cannot evaluate: skipped
  std::vector<std::string> ignore_unknown;
  std::istringstream in(text);
  std::string line;
  int lineno = 0;
  auto warn = [&](const std::string& msg) {
    if (warnings) warnings->push_back(fmt::format("{}:{}: {}", name, lineno, msg));
  };
  while (std::getline(in, line)) {
    ++lineno;
    std::vector<std::string> words;
    try {
      words = split_config_line(line);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(fmt::format("{}:{}: {}", name, lineno, e.what()));
    }
    if (words.empty()) continue;
    const std::string kw = lower(words[0]);
    std::vector<std::string> args(words.begin() + 1, words.end());
    if (kw == "host") {
      if (args.empty()) throw InvalidArgument(fmt::format("{}:{}: Host needs at least one pattern", name, lineno));
      scope = outer;
      scope.hosts.push_back(args);
      in_match = false;
      continue;
    }
    if (kw == "match") {
      scope = outer;
      std::string unsupported;
      auto block = parse_match(args, name, lineno, &unsupported);
      in_match = block == nullptr;
      if (in_match) {
        warn(fmt::format("'Match {}': {}; the block up to the next Host or Match line is skipped", fmt::join(args, " "),
                         unsupported));
      } else {
        scope.matches.push_back(std::move(block));
      }
      continue;
    }
    if (kw == "include") {
      if (in_match) continue;  // the Match block is skipped, its Includes too
      if (depth + 1 > kMaxIncludeDepth) {
        throw InvalidArgument(fmt::format("{}:{}: Include nested more than {} deep", name, lineno, kMaxIncludeDepth));
      }
      for (const auto& raw : args) {
        std::string pat = expand_tilde(raw, home);
        if (pat.empty()) continue;
        if (pat[0] != '/') pat = include_dir + "/" + pat;
        glob_t g{};
        int rc = ::glob(pat.c_str(), 0, nullptr, &g);
        std::vector<std::string> matches;
        if (rc == 0) {
          for (std::size_t k = 0; k < g.gl_pathc; ++k) matches.emplace_back(g.gl_pathv[k]);
        }
        ::globfree(&g);
        for (const auto& m : matches) {  // glob() sorts them, as OpenSSH reads them
          if (is_dir(m)) continue;
          read_file(m, home, include_dir, scope, depth + 1, warnings);
        }
      }
      continue;
    }
    if (kw == "ignoreunknown" && !in_match) {
      for (const auto& a : args) {
        for (auto& part : [&] {
               std::vector<std::string> v;
               std::stringstream s(a);
               std::string item;
               while (std::getline(s, item, ',')) v.push_back(item);
               return v;
             }()) {
          ignore_unknown.push_back(part);
        }
      }
    }
    if (!is_implemented(kw) && !unsupported_keywords().count(kw) && !cosmetic_keywords().count(kw)) {
      bool ignored = std::any_of(ignore_unknown.begin(), ignore_unknown.end(),
                                 [&](const std::string& p) { return match_pattern(kw, p); });
      if (!ignored) warn(fmt::format("unknown keyword '{}'; ignored", words[0]));
      continue;
    }
    ConfigEntry e;
    e.keyword = kw;
    e.keyword_as_written = words[0];
    e.args = std::move(args);
    e.rest = config_line_rest(line);
    e.file = name;
    e.line = lineno;
    e.conditions = scope.hosts;
    e.matches = scope.matches;
    e.in_match_block = in_match;
    entries_.push_back(std::move(e));
  }
}

HostConfig SshConfig::resolve(const std::string& alias, const TokenValues& tokens) const {
  return resolve_impl(alias, tokens, false);
}

HostConfig SshConfig::resolve_lenient(const std::string& alias, const TokenValues& tokens) const {
  try {
    return resolve_impl(alias, tokens, true);
  } catch (const std::exception&) {
    HostConfig out;  // e.g. HostName itself with an unknown token
    out.alias = alias;
    return out;
  }
}

HostConfig SshConfig::resolve_impl(const std::string& alias, const TokenValues& tokens, bool lenient) const {
  HostConfig out;
  out.alias = alias;
  std::set<std::string> seen;  // keywords whose first value was taken
  std::vector<const ConfigEntry*> identity_entries;
  const ConfigEntry* known_hosts_entry = nullptr;
  const ConfigEntry* global_known_hosts_entry = nullptr;
  const ConfigEntry* hostname_entry = nullptr;
  const ConfigEntry* agent_entry = nullptr;
  const ConfigEntry* proxy_command_entry = nullptr;
  auto need_arg = [](const ConfigEntry& e) -> const std::string& {
    if (e.args.empty()) throw InvalidArgument(fmt::format("{}: {} needs a value", e.where(), e.keyword_as_written));
    return e.args[0];
  };
  std::set<const ConfigEntry*> identity_seen;  // a final pass must not add a key twice
  auto visit = [&](const ConfigEntry& e) {
    if (e.keyword == "identityfile") {
      need_arg(e);
      if (identity_seen.insert(&e).second) identity_entries.push_back(&e);
      return;
    }
    const std::string& kw = e.keyword;
    // The first value obtained wins; ProxyJump and ProxyCommand share one
    // slot (OpenSSH: whichever comes first stops the other).
    const bool proxy_kw = kw == "proxyjump" || kw == "proxycommand";
    if (!seen.insert(proxy_kw ? std::string("proxy*") : kw).second) return;
    if (auto it = unsupported_keywords().find(kw); it != unsupported_keywords().end()) {
      const std::string v = e.args.empty() ? "" : lower(e.args[0]);
      if (v == "none" || (kw == "pubkeyauthentication" && (v == "yes" || v == "true"))) {
        out.ignored.push_back(fmt::format("{}: {} {} ignored (nothing to do)", e.where(), e.keyword_as_written, v));
        return;
      }
      const bool user_file = !tokens.home.empty() && e.file.rfind(tokens.home + "/", 0) == 0;
      if (is_algorithm_policy(kw) && !user_file) {
        out.ignored.push_back(fmt::format("{}: {} ignored (a system-wide algorithm policy; {})", e.where(),
                                          e.keyword_as_written, it->second));
        return;
      }
      out.unsupported.push_back(
          fmt::format("{}: {} is not supported by hvdrun ({}); ignored", e.where(), e.keyword_as_written, it->second));
      return;
    }
    if (auto it = cosmetic_keywords().find(kw); it != cosmetic_keywords().end()) {
      out.ignored.push_back(fmt::format("{}: {} ignored ({})", e.where(), e.keyword_as_written, it->second));
      return;
    }
    if (kw == "hostname") {
      need_arg(e);
      hostname_entry = &e;
    } else if (kw == "port") {
      const std::string& v = need_arg(e);
      int port = 0;
      bool ok = !v.empty() && v.size() <= 5 &&
                std::all_of(v.begin(), v.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
      if (ok) port = std::stoi(v);
      if (!ok || port < 1 || port > 65535) {
        throw InvalidArgument(fmt::format("{}: Port '{}' is not a port number (1-65535)", e.where(), v));
      }
      out.port = port;
    } else if (kw == "user") {
      out.user = need_arg(e);
    } else if (kw == "identitiesonly") {
      bool b = false;
      if (!truthy(need_arg(e), &b)) {
        throw InvalidArgument(fmt::format("{}: IdentitiesOnly '{}' must be yes or no", e.where(), e.args[0]));
      }
      out.identities_only = b;
    } else if (kw == "stricthostkeychecking") {
      auto p = parse_host_key_policy(need_arg(e));
      if (!p) {
        throw InvalidArgument(fmt::format("{}: StrictHostKeyChecking '{}' must be yes, ask, accept-new, no or off",
                                          e.where(), e.args[0]));
      }
      out.host_key_policy = p;
      out.host_key_policy_where = e.where();
    } else if (kw == "userknownhostsfile") {
      need_arg(e);
      known_hosts_entry = &e;
    } else if (kw == "globalknownhostsfile") {
      need_arg(e);
      global_known_hosts_entry = &e;
    } else if (kw == "ciphers" || kw == "macs" || kw == "kexalgorithms" || kw == "hostkeyalgorithms") {
      const std::string& v = need_arg(e);
      if (e.args.size() > 1) {
        throw InvalidArgument(fmt::format("{}: {} takes one comma-separated list (no blanks), not {} words",
                                          e.where(), e.keyword_as_written, e.args.size()));
      }
      AlgorithmSetting a;
      a.keyword = e.keyword_as_written;
      a.value = v;
      a.where = e.where();
      a.user_file = !tokens.home.empty() && e.file.rfind(tokens.home + "/", 0) == 0;
      out.algorithms[kw] = a;
    } else if (kw == "identityagent") {
      need_arg(e);
      agent_entry = &e;
    } else if (kw == "connecttimeout") {
      const std::string& v = need_arg(e);
      const auto secs = parse_config_time(v);
      if (!secs) {
        throw InvalidArgument(
            fmt::format("{}: ConnectTimeout '{}' is not a time (seconds, or e.g. 30s, 1m30s)", e.where(), v));
      }
      out.connect_timeout = *secs;
      out.connect_timeout_where = e.where();
    } else if (kw == "hostkeyalias") {
      out.host_key_alias = lower(need_arg(e));  // as OpenSSH: lower case, no tokens
    } else if (kw == "addressfamily") {
      const std::string v = lower(need_arg(e));
      if (v == "any") {
        out.address_family = AF_UNSPEC;
      } else if (v == "inet") {
        out.address_family = AF_INET;
      } else if (v == "inet6") {
        out.address_family = AF_INET6;
      } else {
        throw InvalidArgument(fmt::format("{}: AddressFamily '{}' must be any, inet or inet6", e.where(), e.args[0]));
      }
    } else if (kw == "bindaddress") {
      const std::string& v = need_arg(e);
      unsigned char buf[sizeof(in6_addr)];
      if (::inet_pton(AF_INET, v.c_str(), buf) != 1 && ::inet_pton(AF_INET6, v.c_str(), buf) != 1) {
        throw InvalidArgument(
            fmt::format("{}: BindAddress '{}' must be an IPv4 or IPv6 address (hvdrun does not look up local names)",
                        e.where(), v));
      }
      out.bind_address = v;
    } else if (kw == "bindinterface") {
      out.bind_interface = need_arg(e);
      out.bind_interface_where = e.where();
    } else if (kw == "connectionattempts") {
      const std::string& v = need_arg(e);
      const bool ok = !v.empty() && v.size() <= 4 && std::all_of(v.begin(), v.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c));
      });
      if (!ok || std::stoi(v) < 1) {
        throw InvalidArgument(
            fmt::format("{}: ConnectionAttempts '{}' must be a number of attempts (1 or more)", e.where(), v));
      }
      out.connection_attempts = std::stoi(v);
    } else if (kw == "proxycommand") {
      need_arg(e);
      if (e.args.size() == 1 && lower(e.args[0]) == "none") return;  // a direct connection
      proxy_command_entry = &e;
      out.proxy_where = e.where();
    } else if (kw == "proxyjump") {
      const std::string& v = need_arg(e);
      if (e.args.size() > 1) {
        throw InvalidArgument(
            fmt::format("{}: ProxyJump takes one comma-separated list, not {} words", e.where(), e.args.size()));
      }
      if (lower(v) == "none") return;
      for (const std::string& hop : split(v, ',')) {
        std::string why;
        auto j = parse_jump_host(hop, &why);
        if (!j) throw InvalidArgument(fmt::format("{}: ProxyJump '{}': {}", e.where(), hop, why));
        out.proxy_jump.push_back(*j);
      }
      out.proxy_where = e.where();
    }
  };
  // Match criteria see what the lines before them set (OpenSSH evaluates a
  // Match line when it reaches it): the HostName and User obtained so far.
  TokenValues mt = tokens;
  mt.alias = alias;
  auto eval = [&](const MatchBlock& b, bool final_pass) {
    mt.host = alias;
    if (hostname_entry != nullptr) {
      try {
        TokenValues ht = mt;
        mt.host = expand_tokens(hostname_entry->args[0], ht);
      } catch (const InvalidArgument& ex) {
        throw InvalidArgument(fmt::format("{}: HostName {}", hostname_entry->where(), ex.what()));
      }
    }
    mt.remote_user = tokens.user_from_flag ? tokens.remote_user : out.user ? *out.user : tokens.local_user;
    if (out.port && !tokens.port_from_flag) mt.port = *out.port;
    for (const MatchBlock::Criterion& c : b.criteria) {
      bool r = false;
      switch (c.kind) {
        case MatchBlock::Kind::All: r = true; break;
        case MatchBlock::Kind::Canonical: r = false; break;  // hvdrun never canonicalizes host names
        case MatchBlock::Kind::Final: r = final_pass; break;
        case MatchBlock::Kind::Host: r = match_list(mt.host, c.arg, true); break;
        case MatchBlock::Kind::OriginalHost: r = match_list(alias, c.arg, true); break;
        case MatchBlock::Kind::User: r = match_list(mt.remote_user, c.arg, false); break;
        case MatchBlock::Kind::LocalUser: r = match_list(tokens.local_user, c.arg, false); break;
        case MatchBlock::Kind::Exec: {
          std::string cmd;
          try {
            cmd = expand_tokens(c.arg, mt);
          } catch (const InvalidArgument& ex) {
            throw InvalidArgument(fmt::format("{}: Match exec {}", b.where(), ex.what()));
          }
          std::string problem;
          r = run_match_exec(cmd, &problem);
          if (!problem.empty()) {
            out.unsupported.push_back(
                fmt::format("{}: Match exec '{}' {}; taken as a failed command", b.where(), cmd, problem));
          }
          break;
        }
      }
      if (c.negate) r = !r;
      if (!r) return false;  // as OpenSSH, a later exec is not run once the line failed
    }
    return true;
  };
  bool final_pass_wanted = false;
  for (const ConfigEntry& e : entries_) {
    for (const auto& m : e.matches) final_pass_wanted = final_pass_wanted || m->uses_final();
  }
  for (int pass = 0; pass < (final_pass_wanted ? 2 : 1); ++pass) {
    std::map<const MatchBlock*, bool> evaluated;  // once per Match line and pass
    for (const ConfigEntry& e : entries_) {
      if (e.in_match_block) continue;
      bool applies = std::all_of(e.conditions.begin(), e.conditions.end(),
                                 [&](const std::vector<std::string>& c) { return match_host_line(alias, c); });
      for (std::size_t i = 0; applies && i < e.matches.size(); ++i) {
        const MatchBlock* m = e.matches[i].get();
        auto it = evaluated.find(m);
        if (it == evaluated.end()) {
          bool r = false;
          try {
            r = eval(*m, pass == 1);
          } catch (const InvalidArgument&) {
            if (!lenient) throw;
          }
          it = evaluated.emplace(m, r).first;
        }
        applies = it->second;
      }
      if (!applies) continue;
      try {
        visit(e);
      } catch (const InvalidArgument&) {
        if (!lenient) throw;
      }
    }
  }

  // Tokens: HostName sees %h = the alias; the others see the final values.
  TokenValues t = tokens;
  t.alias = alias;
  t.host = alias;
  if (hostname_entry != nullptr) {
    try {
      out.hostname = expand_tokens(hostname_entry->args[0], t);
    } catch (const InvalidArgument& ex) {
      throw InvalidArgument(fmt::format("{}: HostName {}", hostname_entry->where(), ex.what()));
    }
    t.host = *out.hostname;
  }
  if (out.user && !tokens.user_from_flag) t.remote_user = *out.user;
  if (out.port && !tokens.port_from_flag) t.port = *out.port;
  for (const ConfigEntry* e : identity_entries) {
    for (const auto& a : e->args) {
      try {
        out.identity_files.push_back(expand_tilde(expand_tokens(a, t), t.home));
      } catch (const InvalidArgument& ex) {
        throw InvalidArgument(fmt::format("{}: IdentityFile {}", e->where(), ex.what()));
      }
    }
  }
  if (agent_entry != nullptr) {
    // OpenSSH: none (no agent), SSH_AUTH_SOCK (the variable, as without
    // the line), $NAME (that variable), else a path with ~ and % tokens.
    const std::string& v = agent_entry->args[0];
    if (lower(v) == "none") {
      out.identity_agent = "";
    } else if (v == "SSH_AUTH_SOCK" || (v.size() > 1 && v[0] == '$')) {
      const char* env = std::getenv(v[0] == '$' ? v.c_str() + 1 : v.c_str());
      out.identity_agent = env != nullptr ? env : "";
    } else {
      try {
        out.identity_agent = expand_tilde(expand_tokens(v, t), t.home);
      } catch (const InvalidArgument& ex) {
        throw InvalidArgument(fmt::format("{}: IdentityAgent {}", agent_entry->where(), ex.what()));
      }
    }
  }
  if (known_hosts_entry != nullptr) {
    for (const auto& a : known_hosts_entry->args) {
      if (lower(a) == "none") continue;
      try {
        out.known_hosts_files.push_back(expand_tilde(expand_tokens(a, t), t.home));
      } catch (const InvalidArgument& ex) {
        throw InvalidArgument(fmt::format("{}: UserKnownHostsFile {}", known_hosts_entry->where(), ex.what()));
      }
    }
    if (out.known_hosts_files.empty()) out.known_hosts_files.push_back("/dev/null");
  }
  if (global_known_hosts_entry != nullptr) {
    out.global_known_hosts_files.emplace();
    for (const auto& a : global_known_hosts_entry->args) {
      if (lower(a) == "none") continue;
      try {
        out.global_known_hosts_files->push_back(expand_tilde(expand_tokens(a, t), t.home));
      } catch (const InvalidArgument& ex) {
        throw InvalidArgument(
            fmt::format("{}: GlobalKnownHostsFile {}", global_known_hosts_entry->where(), ex.what()));
      }
    }
  }
  if (proxy_command_entry != nullptr) {
    // The rest of the line as written is the command (quotes included), as
    // OpenSSH takes it.
    try {
      out.proxy_command = expand_tokens(proxy_command_entry->rest, t);
    } catch (const InvalidArgument& ex) {
      throw InvalidArgument(fmt::format("{}: ProxyCommand {}", proxy_command_entry->where(), ex.what()));
    }
  }
  return out;
}

std::string default_user() {
  if (const char* u = std::getenv("USER"); u != nullptr && *u != '\0') return u;
  if (passwd* pw = ::getpwuid(::geteuid()); pw != nullptr && pw->pw_name != nullptr) {
    return pw->pw_name;
  }
  return "root";
}

std::string default_home() {
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') return h;
  if (passwd* pw = ::getpwuid(::geteuid()); pw != nullptr && pw->pw_dir != nullptr) {
    return pw->pw_dir;
  }
  return "/";
}

ConfiguredRoute configured_route(const std::string& alias) {
  const std::string home = default_home();
  ConfiguredRoute r{alias, ""};
  try {
    SshConfig config = SshConfig::load({home + "/.ssh/config", "/etc/ssh/ssh_config"}, home, nullptr);
    TokenValues t;
    t.home = home;
    t.local_user = default_user();
    // The spawner resolves the host the same way (Match blocks included); a
    // bad value of another keyword is the spawner's to report.
    const HostConfig hc = config.resolve_lenient(alias, t);
    r.hostname = hc.hostname.value_or(alias);
    if (hc.proxy_command) r.proxy = "ProxyCommand";
    if (!hc.proxy_jump.empty()) r.proxy = "ProxyJump " + hc.proxy_jump.back().text;
  } catch (const std::exception&) {
    // an unreadable file: the spawner reports it
  }
  return r;
}

}  // namespace hvd::launcher::ssh
