#pragma once
/// OpenSSH client configuration (ssh_config(5)) for the keys that decide how
/// hvdrun connects to a host: `Host` blocks, `Include`, `HostName`, `Port`,
/// `User`, `IdentityFile`, `IdentitiesOnly`, `IdentityAgent`,
/// `StrictHostKeyChecking`, `UserKnownHostsFile`, `HostKeyAlias`,
/// `ConnectTimeout`, `ConnectionAttempts`, `AddressFamily`, `BindAddress`,
/// `BindInterface`,
/// `ProxyJump` and `ProxyCommand` (docs/ssh.md has the full story).
///
/// OpenSSH's rules are kept:
///  * files are read in order (~/.ssh/config, then /etc/ssh/ssh_config) and,
///    for each keyword, the FIRST value obtained for the host wins; only
///    `IdentityFile` accumulates (every line adds a key, in order);
///    `ProxyJump` and `ProxyCommand` compete: whichever comes first wins,
///    and `none` in either means a direct connection;
///  * a `Host` line holds several patterns (`*`, `?` wildcards, `!negation`);
///    it matches when one plain pattern matches the host name as given (the
///    alias, not the HostName) and no negated pattern does; keywords before
///    the first `Host` line apply to every host;
///  * `Include` (glob patterns; relative paths are under ~/.ssh for the user
///    file and /etc/ssh for the system file) reads files in place, inside
///    the current `Host` block's condition;
///  * `Match` blocks with the criteria `all`, `host`, `originalhost`,
///    `user`, `localuser`, `exec`, `canonical` and `final` (each may be
///    negated with `!`), evaluated as OpenSSH does when the line is reached:
///    `host` against the HostName obtained so far (else the alias), `user`
///    against the User so far (else the local user), `exec` runs the command
///    (tokens expanded) with the user's shell, a `final` block in a second
///    pass; other criteria (`localnetwork`, `tagged`, ...) give one warning
///    naming file:line and the block is skipped;
///  * keywords are case-insensitive, `Keyword=value` works, arguments may be
///    double-quoted.
/// Keywords that would change how the connection is made but that hvdrun
/// does not implement (CertificateFile, AddressFamily, ...) give one warning each
/// when they apply to a host; cosmetic ones (ForwardX11, LogLevel, ...) are
/// listed under --verbose.
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace hvd::launcher::ssh {

/// StrictHostKeyChecking. `ask` reads as Yes: hvdrun cannot ask anyone.
enum class HostKeyPolicy { Yes, AcceptNew, No };

/// "yes" / "accept-new" / "no".
const char* policy_name(HostKeyPolicy policy);

/// Parses a StrictHostKeyChecking value (yes, ask, accept-new, no, off;
/// also true/false); nullopt if invalid.
std::optional<HostKeyPolicy> parse_host_key_policy(const std::string& value);

/// Whether `host` matches one ssh_config pattern (`*`, `?`; no negation),
/// case-insensitively.
bool match_pattern(const std::string& host, const std::string& pattern);

/// Whether `host` matches a whole `Host` line's patterns (see above).
bool match_host_line(const std::string& host, const std::vector<std::string>& patterns);

/// Splits a config line into its keyword and arguments (whitespace or one
/// '=' after the keyword; double quotes group). Comment and blank lines give
/// an empty vector. Throws hvd::InvalidArgument on an unterminated quote.
std::vector<std::string> split_config_line(const std::string& line);
/// What follows the keyword and its separator (whitespace or '='), as
/// written, trailing blanks cut.
std::string config_line_rest(const std::string& line);

/// An ssh_config time (OpenSSH's convtime): "30", "30s", "1m30s", "2h";
/// nullopt if invalid.
std::optional<std::chrono::seconds> parse_config_time(const std::string& text);
/// Expands `~/` and `~` (to `home`) at the start of a path.
std::string expand_tilde(const std::string& path, const std::string& home);

/// The invoking user's name and home directory ($USER/$HOME, else passwd).
std::string default_user();
std::string default_home();

/// Values for the % tokens of IdentityFile, UserKnownHostsFile and HostName.
struct TokenValues {
  std::string home;  // %d
  std::string local_user;  // %u
  std::string host;  // %h: HostName (the alias for HostName itself)
  std::string remote_user;  // %r
  std::string alias;  // %n: the host name as given
  int port = 22;  // %p
  bool port_from_flag = false;  // true: `port` wins over the config's Port for %p
  bool user_from_flag = false;  // true: `remote_user` wins over the config's User (Match user, %r)
  std::string local_host;  // %l
};

/// Replaces %%, %d, %u, %h, %r, %n, %p, %l, %i. Throws hvd::InvalidArgument
/// naming the token for an unknown or truncated one.
std::string expand_tokens(const std::string& text, const TokenValues& values);

/// One hop of a ProxyJump list: `[user@]host[:port]` or
/// `ssh://[user@]host[:port]` (an IPv6 address in brackets).
struct JumpHost {
  std::string user;  // empty: the jump host's own configuration decides
  std::string host;  // an alias: resolved through the configuration like any host
  int port = 0;  // 0: the jump host's own configuration decides
  /// "user@host:port" as written
  std::string text;
};

/// Parses one ProxyJump hop; nullopt (with `why`) if it is not one.
std::optional<JumpHost> parse_jump_host(const std::string& text, std::string* why);

/// One `Match` line's criteria (all must hold).
struct MatchBlock {
  enum class Kind { All, Canonical, Final, Exec, Host, OriginalHost, User, LocalUser };
  struct Criterion {
    Kind kind = Kind::All;
    bool negate = false;
    std::string arg;  // pattern list (comma-separated) or exec command
  };
  std::vector<Criterion> criteria;
  std::string file;
  int line = 0;
  bool uses_final() const;
  std::string where() const;
};

/// One keyword line, with the `Host` conditions it sits under.
struct ConfigEntry {
  std::string keyword;  // lower case
  std::string keyword_as_written;
  std::vector<std::string> args;
  /// The line after the keyword and its separator, as written (trailing
  /// blanks cut): ProxyCommand's command.
  std::string rest;
  std::string file;
  int line = 0;
  /// Every `Host` line (outer file's block, then the included file's block)
  /// that must match; empty: applies to every host.
  std::vector<std::vector<std::string>> conditions;
  /// Every `Match` line (an outer file's block, then an included file's)
  /// that must hold too.
  std::vector<std::shared_ptr<const MatchBlock>> matches;
  bool in_match_block = false;  // under an unsupported `Match`: never applies
  /// "file:line"
  std::string where() const;
};

/// One algorithm list keyword (Ciphers, MACs, KexAlgorithms,
/// HostKeyAlgorithms), applied when connecting (spawn/ssh/ssh_algorithms.h).
struct AlgorithmSetting {
  std::string keyword;  // as written
  std::string value;  // OpenSSH syntax: "a,b", "+a", "-a*", "^a"
  std::string where;  // "file:line"
  /// From a file under $HOME (names libssh2 lacks are warned about; from a
  /// system file, e.g. a distribution's crypto policy, only under --verbose).
  bool user_file = false;
};

/// What the configuration says about one host. Unset fields: not configured.
struct HostConfig {
  std::string alias;  // the host as given
  std::optional<std::string> hostname;  // HostName, tokens expanded
  std::optional<int> port;
  std::optional<std::string> user;
  std::vector<std::string> identity_files;  // expanded, in order
  std::optional<bool> identities_only;
  /// IdentityAgent: the agent socket to use ("" for none: no agent); unset:
  /// $SSH_AUTH_SOCK.
  std::optional<std::string> identity_agent;
  /// HostKeyAlias: the name host keys are looked up and recorded under
  /// (with the port, as for a HostName); unset: the HostName, else the alias.
  std::optional<std::string> host_key_alias;
  /// ConnectTimeout: bounds the TCP connection and the SSH handshake (0: no
  /// bound of its own); --start-timeout bounds them in any case.
  std::optional<std::chrono::seconds> connect_timeout;
  /// AddressFamily: AF_UNSPEC (any), AF_INET or AF_INET6.
  std::optional<int> address_family;
  /// BindAddress: the local address literal connections start from.
  std::optional<std::string> bind_address;
  /// BindInterface: connections start from this interface's address (when
  /// no BindAddress is set).
  std::optional<std::string> bind_interface;
  std::string bind_interface_where;  // "file:line"
  /// ConnectionAttempts: TCP connection tries, one second apart (OpenSSH's
  /// rhythm), within --start-timeout.
  std::optional<int> connection_attempts;
  std::string connect_timeout_where;  // "file:line" (the spawner logs it under --verbose)
  std::optional<HostKeyPolicy> host_key_policy;
  std::string host_key_policy_where;  // "file:line" of the StrictHostKeyChecking that won
  std::vector<std::string> known_hosts_files;  // UserKnownHostsFile, expanded
  /// GlobalKnownHostsFile, expanded (read, never written; `none`: empty).
  /// Unset: /etc/ssh/ssh_known_hosts and /etc/ssh/ssh_known_hosts2.
  std::optional<std::vector<std::string>> global_known_hosts_files;
  /// Lower-case keyword ("ciphers", "macs", "kexalgorithms",
  /// "hostkeyalgorithms") -> its first value.
  std::map<std::string, AlgorithmSetting> algorithms;
  /// ProxyCommand, tokens expanded (%h is the HostName, %p the port, %r
  /// the user, %n the alias): run with the user's shell, its stdin and
  /// stdout carry the SSH connection. Unset: none.
  std::optional<std::string> proxy_command;
  /// ProxyJump: the hops, outermost first (the host is reached through the
  /// last, which is reached through the one before, ...). Empty: none.
  std::vector<JumpHost> proxy_jump;
  std::string proxy_where;  // "file:line" of the ProxyJump / ProxyCommand that won
  /// One line per keyword hvdrun does not implement although it would
  /// change the connection ("~/.ssh/config:7: CertificateFile is not
  /// supported by hvdrun (...); ignored").
  std::vector<std::string> unsupported;
  /// One line per keyword that does not matter to hvdrun (for --verbose).
  std::vector<std::string> ignored;
};

class SshConfig {
 public:
  /// Reads the files in order; a missing file is skipped (a missing
  /// explicit Include file too, as OpenSSH does). `home` expands `~`.
  /// Problems that do not stop the file from being used (an unsupported
  /// `Match` criterion, an unreadable Include, an unknown keyword) are
  /// appended to `warnings`, each one line starting with "file:line: ".
  /// Throws hvd::InvalidArgument ("file:line: ...") for a line that cannot
  /// be parsed (a `Match` criterion without its argument included).
  static SshConfig load(const std::vector<std::string>& files, const std::string& home,
                        std::vector<std::string>* warnings);
  /// Parses `text` as if it were the file `name` (relative Includes are
  /// resolved under `include_dir`).
  static SshConfig parse(const std::string& text, const std::string& name, const std::string& home,
                         const std::string& include_dir, std::vector<std::string>* warnings);

  /// The settings for `alias` (first value wins). `tokens` supplies %d, %u,
  /// %l; the rest come from the resolution itself. Throws
  /// hvd::InvalidArgument ("file:line: Port 'x' is not a port number") for
  /// an invalid value of a keyword hvdrun implements.
  HostConfig resolve(const std::string& alias, const TokenValues& tokens) const;
  /// `resolve`, passing over a line whose value hvdrun cannot use (the
  /// spawner reports it when it connects); never throws (at worst only
  /// `alias` is set).
  HostConfig resolve_lenient(const std::string& alias, const TokenValues& tokens) const;

  const std::vector<ConfigEntry>& entries() const { return entries_; }

 private:
  /// The conditions lines inherit from the file that includes theirs.
  struct Scope {
    std::vector<std::vector<std::string>> hosts;
    std::vector<std::shared_ptr<const MatchBlock>> matches;
  };
  void read_file(const std::string& path, const std::string& home, const std::string& include_dir, const Scope& outer,
                 int depth, std::vector<std::string>* warnings);
  void read_text(const std::string& text, const std::string& name, const std::string& home,
                 const std::string& include_dir, const Scope& outer, int depth, std::vector<std::string>* warnings);

  HostConfig resolve_impl(const std::string& alias, const TokenValues& tokens, bool lenient) const;

  std::vector<ConfigEntry> entries_;
};

/// How hvdrun's SSH spawner would reach `alias`, for code that must route
/// to a host before connecting (the driver address): `hostname` is the
/// HostName of ~/.ssh/config or /etc/ssh/ssh_config ($HOME's), else `alias`
/// itself; `proxy` is "" (directly), else "ProxyJump bastion" /
/// "ProxyCommand" (so the driver address cannot be routed to it with
/// certainty). Never throws (an unusable file gives `alias` and ""; the
/// spawner reports it).
struct ConfiguredRoute {
  std::string hostname;
  std::string proxy;
};
ConfiguredRoute configured_route(const std::string& alias);

}  // namespace hvd::launcher::ssh
