// Command line -> Options, through the flag table (flags.h). CLI11 matches
// the flags of the table; this file adds what horovodrun users expect and
// CLI11 cannot express directly:
//  * horovodrun's single-dash long names (Flag::legacy: -np, -cb, -hostfile,
//    -prefix-timestamp) are rewritten to their long forms first, and so are
//    the abbreviations horovodrun's argparse accepts (--num-p, -n, --slots);
//  * the worker command starts at the first positional argument and is
//    passed through untouched (a pre-scan finds it, so CLI11 never sees the
//    worker's own flags);
//  * values go through each row's parser, so messages name the flag as typed;
//  * then the config file and the environment fill, row by row, what the
//    command line left unset, and settings are checked together.
#include "hvd/launcher/options/cli.h"
#include "hvd/launcher/process/report.h"

#include <fmt/format.h>

#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <iterator>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <sstream>

#include "hvd/common/env.h"
#include "hvd/common/job_env.h"
#include "hvd/common/error.h"
#include "hvd/common/logging.h"
#include "hvd/common/text.h"
#include "hvd/launcher/hosts/hosts.h"
#include "hvd/launcher/options/config_file.h"
#include "hvd/launcher/options/flags.h"

#ifndef HVDRUN_VERSION
#error "HVDRUN_VERSION comes from the project version (lib/launcher/CMakeLists.txt)"
#endif

namespace hvd::launcher {

namespace {

/// The most ranks (-np) hvdrun runs, far above any real job: without -H,
/// `-np 99999999` would otherwise plan that many workers on localhost, one
/// environment copy each, and grow by gigabytes before failing (issue 21).
constexpr int kMaxNumProc = 65536;

ParseOutcome usage_error(const std::string& message) {
  ParseOutcome out;
  out.exit_code = exit_code::kUsage;
  out.message = kErrorPrefix + message + "\n";
  return out;
}

ParseOutcome not_supported(const std::string& what, const std::string& feature) {
  ParseOutcome out;
  out.exit_code = exit_code::kNotSupported;
  out.message = fmt::format("{}{} is not supported yet ({})\n", kErrorPrefix, what, feature);
  return out;
}

std::string join(const std::vector<std::string>& items, const std::string& sep, const std::string& last_sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += i + 1 == items.size() ? last_sep : sep;
    out += items[i];
  }
  return out;
}

/// A value typed on the command line (named as the user knows the flag:
/// Flag::shown) or found in an environment variable (named by the
/// variable: "HOROVOD_START_TIMEOUT='soon' is not ...").
class TextReader final : public ValueReader {
 public:
  enum class Origin { CommandLine, Environment };

  TextReader(Origin origin, std::string name, std::vector<std::string> texts)
      : origin_(origin), name_(std::move(name)), texts_(std::move(texts)) {}

  const std::string& name() const override { return name_; }
  std::string text(const std::string&) override { return first(); }
  std::vector<std::string> texts() override { return texts_; }

  long integer(long min, long max) override {
    return checked_integer(min, max,
                           max == std::numeric_limits<long>::max() ? fmt::format("an integer >= {}", min)
                                                                   : fmt::format("an integer in [{}, {}]", min, max));
  }

  double number(double min, double max) override {
    const std::string& t = first();
    auto v = hvd::env::parse_double(t);
    const std::string expected =
        max > 1e300 ? fmt::format("a number >= {}", min) : fmt::format("a number in [{}, {}]", min, max);
    if (!v) fail(fmt::format("{} '{}' is not a number", name_, t), expected);
    if (!(*v >= min && *v <= max)) {
      fail(max > 1e300 ? fmt::format("{} must be >= {}, not {}", name_, min, t)
                       : fmt::format("{} must be in [{}, {}], not {}", name_, min, max, t),
           expected);
    }
    return *v;
  }

  std::chrono::milliseconds seconds() override {
    const std::string& t = first();
    auto v = hvd::env::parse_double(t);
    if (!v) fail(fmt::format("{} '{}' is not a number of seconds", name_, t), "a positive number of seconds");
    if (!(*v > 0) || *v > 1e6) {
      fail(fmt::format("{} must be a number of seconds > 0, not {}", name_, t), "a positive number of seconds");
    }
    return std::chrono::milliseconds(std::max(1LL, std::llround(*v * 1000)));
  }

  std::chrono::seconds whole_seconds(long min, long max) override {
    const std::string expected =
        min == 1 ? std::string("a positive number of seconds") : fmt::format("a number of seconds >= {}", min);
    return std::chrono::seconds(checked_integer(min, max, expected));
  }

  bool boolean() override {
    const std::string& t = first();
    if (t == "true" || t == "1") return true;
    if (t == "false" || t == "0") return false;
    fail(fmt::format("{} '{}' is not true or false", name_, t), "true or false");
  }

  std::pair<int, int> seconds_range() override {
    HVD_ENFORCE(texts_.size() == 2, "{} takes exactly two values", name_);
    int bounds[2];
    for (size_t k = 0; k < 2; ++k) {
      auto v = hvd::env::parse_int(texts_[k]);
      if (!v || *v < 0 || *v > 1000000000L) {
        fail(fmt::format("{}: '{}' is not a number of seconds >= 0", name_, texts_[k]), "two numbers of seconds >= 0");
      }
      bounds[k] = static_cast<int>(*v);
    }
    if (bounds[0] > bounds[1]) {
      fail(fmt::format("{}: MIN {} is greater than MAX {}", name_, bounds[0], bounds[1]), "MIN <= MAX");
    }
    return {bounds[0], bounds[1]};
  }

 protected:
  std::string rejection(const std::string& message, const std::string&) const override { return message; }

 private:
  const std::string& first() const {
    HVD_ENFORCE(!texts_.empty(), "{}: no value", name_);
    return texts_.front();
  }

  /// On the command line: "-np 'x' is not an integer", "-np must be at
  /// least 1, not 0", "value N is too large"; from the environment:
  /// "VAR='x' is not <env_expected>".
  long checked_integer(long min, long max, const std::string& env_expected) {
    const std::string& t = first();
    auto v = hvd::env::parse_int(t);
    if (!v) fail(fmt::format("{} '{}' is not an integer", name_, t), env_expected);
    if (*v < min) fail(fmt::format("{} must be at least {}, not {}", name_, min, *v), env_expected);
    if (*v > max) fail(fmt::format("value {} is too large", *v), env_expected);
    return static_cast<long>(*v);
  }

  [[noreturn]] void fail(const std::string& command_line_message, const std::string& env_expected) const {
    if (origin_ == Origin::CommandLine) throw InvalidArgument(command_line_message);
    throw InvalidArgument(fmt::format("{}='{}' is not {}", name_, join(texts_, " ", " "), env_expected));
  }

  Origin origin_;
  std::string name_;
  std::vector<std::string> texts_;
};

/// CLI11's generic "Usage: hvdrun [OPTIONS]" hides the worker command. The
/// usage line names the program as it was invoked (hvdrun or horovodrun).
class HelpFormatter : public CLI::Formatter {
 public:
  explicit HelpFormatter(std::string program) : program_(std::move(program)) {}
  std::string make_usage(const CLI::App*, std::string) const override {
    return fmt::format("Usage: {} -np N [-H host1:n1,host2:n2 | --hostfile FILE] [options] command [args...]\n",
                       program_);
  }

 private:
  std::string program_;
};

/// The CLI11 app, one option per spelling of every row of the table. The
/// values a row was given land in its Slot; nothing is keyed by name.
class CommandLine {
 public:
  explicit CommandLine(const std::string& program)
      : app_("hvdrun: run a Horovod job (a C++ horovodrun)", program), slots_(flags().size()) {
    app_.formatter(std::make_shared<HelpFormatter>(program));
    std::vector<std::string> legacy;
    const auto& table = flags();
    for (size_t i = 0; i < table.size(); ++i) {
      const Flag& f = table[i];
      legacy.insert(legacy.end(), f.legacy.begin(), f.legacy.end());
      for (const Spelling& spelling : f.spellings) slots_[i].options.push_back(add(f, spelling, slots_[i]));
    }
    app_.footer(
        fmt::format("Everything from the first positional argument on is the worker command, passed through\n"
                    "untouched. horovodrun's spellings {} are accepted,\n"
                    "and so are the abbreviations horovodrun accepts (-n for -np, --slots for --slots-per-host).\n"
                    "See docs/cli.md for every flag and environment variable.",
                    join(legacy, ", ", " and ")));
  }

  CLI::App& app() { return app_; }

  /// Number of tokens `token` consumes after itself, for the pre-scan.
  int values_after(const std::string& token) {
    if (token.rfind("--", 0) == 0) {
      if (token.find('=') != std::string::npos) return 0;
      CLI::Option* opt = app_.get_option_no_throw(token);
      return opt ? std::max(0, opt->get_items_expected_min()) : 0;
    }
    // Short option: "-H" takes the next token; "-Hvalue" carries its value.
    if (token.size() == 2) {
      CLI::Option* opt = app_.get_option_no_throw(token);
      return opt ? std::max(0, opt->get_items_expected_min()) : 0;
    }
    return 0;
  }

  /// The rows given (any spelling), after parsing.
  FlagSet given() const {
    FlagSet out;
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (!used(slots_[i]).empty()) out.insert(&flags()[i]);
    }
    return out;
  }

  /// Reads every given row that fills Options into `o`, in table order.
  /// Throws InvalidArgument on a bad value; contradicting spellings of one
  /// switch (--x --no-x) are reported before any value.
  void read(Options& o) const {
    const auto& table = flags();
    for (size_t i = 0; i < table.size(); ++i) {
      const Flag& f = table[i];
      const std::vector<size_t> spellings = used(slots_[i]);
      if (spellings.size() > 1) {
        throw InvalidArgument(fmt::format("{} and {} contradict each other", f.spellings[spellings[0]].names[0],
                                          f.spellings[spellings[1]].names[0]));
      }
    }
    for (size_t i = 0; i < table.size(); ++i) {
      const Flag& f = table[i];
      const Slot& slot = slots_[i];
      const std::vector<size_t> spellings = used(slot);
      if (spellings.empty() || f.action != Action::Fill) continue;
      if (f.syntax == Syntax::Switch) {
        f.choose(o, spellings[0]);
        continue;
      }
      const bool one = f.syntax == Syntax::Value || f.syntax == Syntax::OptionalValue;
      TextReader in(TextReader::Origin::CommandLine, f.shown(),
                    one ? std::vector<std::string>{slot.value} : slot.values);
      f.parse(o, in);
    }
  }

 private:
  struct Slot {
    std::vector<CLI::Option*> options;  ///< one per Flag::spellings
    std::string value;  ///< Value, OptionalValue
    std::vector<std::string> values;  ///< Repeated, TwoValues
  };

  CLI::Option* add(const Flag& f, const Spelling& spelling, Slot& slot) {
    const std::string names = join(spelling.names, ",", ",");
    const std::string& help = spelling.help;
    CLI::Option* opt = nullptr;
    if (f.action == Action::Help) {
      opt = app_.set_help_flag(names, help);
    } else {
      switch (f.syntax) {
        case Syntax::Switch: opt = app_.add_flag(names, help); break;
        case Syntax::Value: opt = app_.add_option(names, slot.value, help); break;
        case Syntax::OptionalValue: opt = app_.add_option(names, slot.value, help)->expected(0, 1); break;
        case Syntax::Repeated:
          opt = app_.add_option(names, slot.values, help)
                    ->expected(1)
                    ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
          break;
        case Syntax::TwoValues: opt = app_.add_option(names, slot.values, help)->expected(2); break;
      }
      if (!f.value_name.empty()) opt->type_name(f.value_name);
    }
    opt->group(help.empty() ? "" : f.group);  // no group: hidden
    return opt;
  }

  /// Indices of the spellings given.
  static std::vector<size_t> used(const Slot& slot) {
    std::vector<size_t> out;
    for (size_t k = 0; k < slot.options.size(); ++k) {
      if (slot.options[k]->count() > 0) out.push_back(k);
    }
    return out;
  }

  CLI::App app_;
  std::vector<Slot> slots_;  // parallel to flags(); sized once, so bound values never move
};

/// The rows of one kind (elastic-only or not) that `values` (a
/// lower-precedence source) sets and `o` does not yet: copied into `o`.
void fill_unset(Options& o, FlagSet& set, const Options& values, const FlagSet& from, bool elastic_rows) {
  for (const Flag& f : flags()) {
    if (f.elastic_only != elastic_rows || !from.count(&f) || set.count(&f)) continue;
    f.copy(o, values);
    set.insert(&f);
  }
}

/// Environment fallbacks (Flag::env) of the rows of one kind no source set.
void fill_from_environment(Options& o, FlagSet& set, bool elastic_rows) {
  for (const Flag& f : flags()) {
    if (f.env.empty() || f.elastic_only != elastic_rows || set.count(&f)) continue;
    const auto text = hvd::env::get(f.env);
    if (!text) continue;
    TextReader in(TextReader::Origin::Environment, f.env, {*text});
    f.parse(o, in);
    set.insert(&f);
  }
}

/// Is `name` an executable file in a folder of PATH?
bool in_path(const std::string& name) {
  const auto path = hvd::env::get("PATH");
  if (!path) return false;
  std::stringstream ss(*path);
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + name;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(candidate.c_str(), X_OK) == 0) {
      return true;
    }
  }
  return false;
}

/// A discovery script given as one word must exist now: a typo found at
/// the first discovery run would look like a broken script. A command with
/// spaces is left to the shell (its first run reports what went wrong).
void check_discovery_script(const std::string& script) {
  if (script.find_first_of(" \t\n;|&<>()$`'\"") != std::string::npos) return;
  const std::string flag = "--host-discovery-script";
  if (script.find('/') == std::string::npos) {
    if (in_path(script)) return;
    struct stat st {};
    if (::stat(script.c_str(), &st) == 0) {
      throw InvalidArgument(
          fmt::format("{} '{}' is not a command in PATH; give it as a path, e.g. ./{}", flag, script, script));
    }
    throw InvalidArgument(fmt::format("{} '{}': no such file or command", flag, script));
  }
  struct stat st {};
  if (::stat(script.c_str(), &st) != 0) {
    throw InvalidArgument(fmt::format("{} '{}': {}", flag, script, std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) throw InvalidArgument(fmt::format("{} '{}' is a directory", flag, script));
  if (::access(script.c_str(), X_OK) != 0) {
    throw InvalidArgument(fmt::format("{} '{}' is not executable (chmod +x {})", flag, script, script));
  }
}

/// Rows that need another flag (Flag::needs: the --kubernetes-* settings
/// need --kubernetes-selector) mean nothing without it: an error on the
/// command line, ignored with one warning per key from the file.
void check_needs(Options& o, FlagSet& set, const FlagSet& on_command_line) {
  const Options defaults;
  for (const Flag& f : flags()) {
    if (f.needs.empty() || !set.count(&f)) continue;
    const Flag* needed = find_flag(f.needs);
    HVD_ENFORCE(needed, "{}: needs an unknown flag {}", f.name(), f.needs);
    if (set.count(needed)) continue;
    if (on_command_line.count(&f)) throw InvalidArgument(fmt::format("{} needs {}", f.name(), f.needs));
    spdlog::warn("{}: {} ignored: it needs {} ({})", o.config_file.value_or("config file"), f.config_key, f.needs,
                 needed->config_key.empty() ? needed->name() : needed->config_key);
    f.copy(o, defaults);
    set.erase(&f);
  }
}

/// Elastic mode is on exactly when a discovery script is given (command
/// line or file). Then the file's elastic settings, then
/// HOROVOD_ELASTIC_TIMEOUT, fill what the command line left unset, and the
/// settings are checked together. Without a script, elastic flags on the
/// command line are errors and the file's elastic settings are ignored.
void finish_elastic(Options& o, FlagSet& set, const FlagSet& on_command_line, bool script_on_command_line,
                    const ConfigFileValues* file) {
  const Flag* min_np_row = find_flag("--min-np");
  const bool min_np_given = o.elastic.min_np.has_value() || (file && min_np_row && file->given.count(min_np_row));
  check_needs(o, set, on_command_line);
  const bool kubernetes = o.elastic.kubernetes.selector.has_value();
  o.elastic.enabled = o.elastic.host_discovery_script.has_value() || kubernetes || min_np_given;
  if (!o.elastic.enabled) {
    // --slots-per-host also sets the slots of a platform's hosts
    // (--hosts-from; apply_platform refuses it when none is used).
    const bool platform_slots = o.hosts_from != "none" && o.hosts.empty() && !o.hostfile;
    for (const Flag& f : flags()) {
      if (platform_slots && &f == find_flag("--slots-per-host")) continue;
      if (f.elastic_only && on_command_line.count(&f)) {
        throw InvalidArgument(
            fmt::format("{} needs --host-discovery-script or --min-np (elastic mode)", f.name()));
      }
    }
    if (file && file->elastic_given()) {
      spdlog::warn(
          "{}: elastic settings ignored: no host_discovery_script or min_np, nor --host-discovery-script or "
          "--min-np (elastic mode is off)",
          *o.config_file);
    }
    return;
  }
  std::string mode_source =
      !o.elastic.host_discovery_script ? std::string("--min-np")
      : script_on_command_line         ? std::string("--host-discovery-script")
                                       : fmt::format("elastic.host_discovery_script in {}", *o.config_file);
  if (kubernetes) {
    mode_source = on_command_line.count(find_flag("--kubernetes-selector"))
                      ? std::string("--kubernetes-selector")
                      : fmt::format("kubernetes.selector in {}", o.config_file.value_or("the config file"));
    if (o.elastic.host_discovery_script) {
      throw InvalidArgument(
          fmt::format("{} and --host-discovery-script cannot be used together: give one source of hosts", mode_source));
    }
    if (!o.hosts.empty() || o.hostfile) {
      throw InvalidArgument(fmt::format("{} and {} cannot be used together: the Kubernetes pods are the hosts",
                                        mode_source, o.hostfile ? "--hostfile" : "-H/--hosts"));
    }
  }
  if (o.elastic.host_discovery_script) {
    if (!o.hosts.empty()) {
      throw InvalidArgument(fmt::format(
          "{} and -H/--hosts cannot be used together: in elastic mode the discovery script lists the hosts",
          mode_source));
    }
    if (o.hostfile) {
      throw InvalidArgument(fmt::format(
          "{} and --hostfile cannot be used together: in elastic mode the discovery script lists the hosts",
          mode_source));
    }
  }
  if (o.engine == Engine::Mpi) {
    throw InvalidArgument(fmt::format(
        "{} (elastic mode) cannot be used with --mpi: elastic jobs use hvdrun's own controller", mode_source));
  }
  if (file) fill_unset(o, set, file->options, file->given, /*elastic_rows=*/true);
  fill_from_environment(o, set, /*elastic_rows=*/true);
  ElasticOptions& e = o.elastic;
  if (e.min_np && e.max_np && *e.min_np > *e.max_np) {
    throw InvalidArgument(fmt::format("--min-np {} is greater than --max-np {}", *e.min_np, *e.max_np));
  }
  if (!o.num_proc) {
    if (!e.min_np) {
      throw InvalidArgument(
          "-np or --min-np is required in elastic mode (e.g. hvdrun --min-np 2 --host-discovery-script "
          "./discover.sh python train.py)");
    }
    o.num_proc = e.min_np;  // horovodrun starts elastic jobs at --min-np when -np is absent
  }
  if (e.min_np && *e.min_np > *o.num_proc) {
    throw InvalidArgument(fmt::format("--min-np {} is greater than -np {}", *e.min_np, *o.num_proc));
  }
  if (e.max_np && *o.num_proc > *e.max_np) {
    throw InvalidArgument(fmt::format("-np {} is greater than --max-np {}", *o.num_proc, *e.max_np));
  }
  if (e.host_discovery_script) {
    check_discovery_script(*e.host_discovery_script);
  } else if (e.slots_per_host && !kubernetes) {
    throw InvalidArgument(
        "--slots-per-host applies to --host-discovery-script output; with fixed hosts give the slots in -H "
        "(host:N) or the hostfile");
  }
}

/// The first given row with `action`, if any.
const Flag* given_action(const FlagSet& given, Action action) {
  for (const Flag& f : flags()) {
    if (f.action == action && given.count(&f)) return &f;
  }
  return nullptr;
}

/// One option string of the table: a name of a spelling ("--num-proc",
/// "-H") or a legacy name ("-np").
struct OptionString {
  const Flag* flag;
  std::string name;
  bool legacy;

  /// The word CLI11 knows it by: the row's long name for a legacy name.
  const std::string& cli_name() const { return legacy ? flag->name() : name; }
};

std::vector<OptionString> option_strings() {
  std::vector<OptionString> out;
  for (const Flag& f : flags()) {
    for (const Spelling& s : f.spellings) {
      for (const auto& n : s.names) out.push_back({&f, n, false});
    }
    for (const auto& n : f.legacy) out.push_back({&f, n, true});
  }
  return out;
}

bool starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

/// One option word before the worker command, read as horovodrun's argparse
/// reads it, and rewritten to the word CLI11 gets:
///  * an exact option string, or one followed by "=value", is itself (a
///    legacy name becomes its long name: "-np=4" -> "--num-proc=4");
///  * else "--word[=value]" may abbreviate every long name it begins
///    ("--num-p=4" -> "--num-proc=4"), and "-word" every single-dash name
///    it begins ("-n" -> "-np" -> "--num-proc") or be a one-letter option
///    with its value attached ("-Hhost:2", left to CLI11);
///  * one match is taken; several are an error naming them all, as
///    argparse words it, unless exactly one of them is horovodrun's own
///    (Flag::additions): a line horovodrun accepts means the same here;
///  * no match: the word is left as it is, for CLI11 to refuse.
std::string resolve_option(const std::string& word) {
  const std::vector<OptionString> all = option_strings();
  const std::string before_value = word.substr(0, word.find('='));
  for (const OptionString& o : all) {
    if (o.name == word) return o.cli_name();
  }
  for (const OptionString& o : all) {
    if (o.name == before_value) return o.cli_name() + word.substr(before_value.size());
  }
  const bool long_word = starts_with(word, "--");
  if (long_word && before_value.size() <= 2) return word;
  const std::string& prefix = long_word ? before_value : word;
  std::vector<const OptionString*> matches;
  const OptionString* attached = nullptr;  // "-Hhost:2"
  for (const OptionString& o : all) {
    if (!long_word && o.name.size() == 2 && o.name == word.substr(0, 2)) {
      attached = &o;
      matches.push_back(&o);
    } else if (starts_with(o.name, long_word ? "--" : "-") && starts_with(o.name, prefix)) {
      matches.push_back(&o);
    }
  }
  if (matches.size() > 1) {
    std::vector<const OptionString*> horovodrun;
    for (const OptionString* o : matches) {
      if (!o->flag->is_addition(o->name)) horovodrun.push_back(o);
    }
    if (horovodrun.size() != 1) {
      std::vector<std::string> names;
      for (const OptionString* o : matches) names.push_back(o->name);
      throw InvalidArgument(fmt::format("ambiguous option: {} could match {}", prefix, join(names, ", ", ", ")));
    }
    matches = horovodrun;
  }
  if (matches.empty() || matches.front() == attached) return word;
  return matches.front()->cli_name() + (long_word ? word.substr(before_value.size()) : std::string());
}

/// A word resolve_option left as it was: a flag of the table as typed, a
/// short flag with its value attached ("-Hhost:2") -- or a mistake, refused
/// here with what was probably meant, as git and argparse-style tools do:
///   "--timline-filename is not an option; did you mean --timeline-filename? (see horovodrun --help)"
///   "-v2: -v (--version) takes no value (see hvdrun --help)"
void refuse_unknown(CommandLine& cli, const std::string& word) {
  const std::vector<OptionString> all = option_strings();
  const std::string before_value = word.substr(0, word.find('='));
  for (const OptionString& o : all) {
    if (o.name == before_value) return;
  }
  const std::string help = fmt::format("(see {} --help)", cli.app().get_name());
  if (!starts_with(word, "--") && word.size() > 2) {
    for (const OptionString& o : all) {
      if (o.name.size() != 2 || o.name != word.substr(0, 2)) continue;
      if (cli.values_after(o.name) > 0) return;  // "-Hhost:2": the value attached
      throw InvalidArgument(fmt::format("{}: {} ({}) takes no value {}", word, o.name, o.flag->name(), help));
    }
  }
  std::vector<std::string> names;
  for (const OptionString& o : all) names.push_back(o.name);
  const std::string guess = closest_word(before_value, names);
  if (guess.empty()) throw InvalidArgument(fmt::format("{} is not an option {}", word, help));
  throw InvalidArgument(fmt::format("{} is not an option; did you mean {}? {}", word, guess, help));
}

/// -i/--ssh-identity-file must name a readable file now, whether or not
/// any host is reached over SSH: a typo would otherwise surface only on
/// the first remote host, or never.
void check_identity_file(const std::string& path) {
  const std::string flag = "-i/--ssh-identity-file";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw InvalidArgument(fmt::format("{} '{}': {}", flag, path, std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) throw InvalidArgument(fmt::format("{} '{}' is a directory, not a key file", flag, path));
  if (::access(path.c_str(), R_OK) != 0) {
    throw InvalidArgument(fmt::format("{} '{}' is not readable: {}", flag, path, std::strerror(errno)));
  }
}

/// The name hvdrun was invoked as ("hvdrun", "horovodrun"), for --help.
std::string program_name(int argc, char** argv) {
  if (argc < 1 || argv[0] == nullptr || *argv[0] == '\0') return "hvdrun";
  const std::string path = argv[0];
  const size_t slash = path.find_last_of('/');
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  return base.empty() ? std::string("hvdrun") : base;
}

/// The pre-scan: rewrites legacy names and abbreviations in `args` into
/// `ours` and finds where the worker command starts (`command`; nothing
/// after that is rewritten). Throws InvalidArgument.
void prescan(CommandLine& cli, const std::vector<std::string>& args, std::vector<std::string>& ours,
             std::vector<std::string>& command) {
  size_t i = 0;
  while (i < args.size()) {
    if (args[i] == "--") {
      command.assign(args.begin() + static_cast<long>(i) + 1, args.end());
      break;
    }
    if (args[i].size() < 2 || args[i][0] != '-') {
      command.assign(args.begin() + static_cast<long>(i), args.end());
      break;
    }
    std::string token = resolve_option(args[i]);
    if (token == args[i]) refuse_unknown(cli, args[i]);
    ours.push_back(token);
    int n = cli.values_after(token);
    ++i;
    for (int k = 0; k < n && i < args.size(); ++k, ++i) ours.push_back(args[i]);
  }
}

/// One platform layer parsed as a command line of its own: its values and
/// the rows it gave. Throws InvalidArgument naming the layer's origin.
Options read_layer(const PlatformFlagLayer& layer, FlagSet& given) {
  CommandLine cli("hvdrun");
  std::vector<std::string> ours;
  std::vector<std::string> command;
  try {
    prescan(cli, layer.args, ours, command);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("{}: {}", layer.origin, e.what()));
  }
  if (!command.empty()) {
    throw InvalidArgument(fmt::format("{}: '{}' is not an hvdrun flag (only flags may be given there, no command)",
                                      layer.origin, command.front()));
  }
  std::vector<std::string> reversed(ours.rbegin(), ours.rend());
  try {
    cli.app().parse(reversed);
  } catch (const CLI::CallForHelp&) {
    throw InvalidArgument(fmt::format("{}: --help cannot be given there", layer.origin));
  } catch (const CLI::ParseError& e) {
    throw InvalidArgument(fmt::format("{}: {}", layer.origin, e.what()));
  }
  given = cli.given();
  for (Action action : {Action::Version, Action::Refuse}) {
    if (const Flag* f = given_action(given, action)) {
      throw InvalidArgument(fmt::format("{}: {} cannot be given there", layer.origin, f->name()));
    }
  }
  Options values;
  try {
    cli.read(values);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("{}: {}", layer.origin, e.what()));
  }
  return values;
}

}  // namespace

namespace {

/// `text` as a log level, or nothing when it is not one of horovodrun's
/// names (any case; WARN and CRITICAL as spdlog has them).
std::optional<spdlog::level::level_enum> known_log_level(const std::string& text) {
  static const char* const kLevels[] = {"trace", "debug", "info", "warning", "warn", "error", "fatal", "critical"};
  std::string low = text;
  std::transform(low.begin(), low.end(), low.begin(), [](unsigned char c) { return std::tolower(c); });
  if (std::find(std::begin(kLevels), std::end(kLevels), low) == std::end(kLevels)) return std::nullopt;
  return hvd::parse_log_level(low);
}

}  // namespace

void init_launcher_logging(const Options& o) {
  spdlog::level::level_enum level = spdlog::level::warn;  // horovodrun's default HOROVOD_LOG_LEVEL
  std::vector<std::string> bad;  // variables whose value is not a level
  auto from_env = [&bad](const char* name) -> std::optional<spdlog::level::level_enum> {
    const auto text = hvd::env::get(name);
    if (!text || text->empty()) return std::nullopt;
    auto level = known_log_level(*text);
    if (!level) bad.push_back(fmt::format("{}='{}'", name, *text));
    return level;
  };
  const auto launcher_only = from_env("HVDRUN_LOG_LEVEL");
  const auto horovod = o.tuning.log_level ? std::nullopt : from_env(hvd::job_env::kLogLevel);
  if (o.verbose) {
    level = spdlog::level::debug;
  } else if (launcher_only) {
    level = *launcher_only;
  } else if (o.tuning.log_level) {
    level = hvd::parse_log_level(*o.tuning.log_level);
  } else if (horovod) {
    level = *horovod;
  }
  bool with_time = true;
  if (o.tuning.log_hide_timestamp) {
    with_time = !*o.tuning.log_hide_timestamp;
  } else if (const auto hide = hvd::env::get(hvd::job_env::kLogHideTime)) {
    with_time = !(*hide == "1" || *hide == "true" || *hide == "TRUE");
  }
  hvd::init_logging("hvdrun", level, with_time);
  static bool said_bad_level = false;  // once a process, however many times the options are applied
  if (!bad.empty() && !said_bad_level) {
    said_bad_level = true;
    for (const auto& b : bad) {
      spdlog::warn("{} is not a log level (TRACE, DEBUG, INFO, WARNING, ERROR or FATAL); ignored by hvdrun", b);
    }
  }
}

ParseOutcome parse_command_line(int argc, char** argv) { return parse_command_line(argc, argv, PlatformFlags{}); }

ParseOutcome parse_command_line(int argc, char** argv, const PlatformFlags& platform) {
  // Messages during parsing (config warnings) must go to stderr, never
  // into --dry-run output on stdout. Warnings only until the options say
  // more (init_launcher_logging).
  hvd::init_logging("hvdrun", spdlog::level::warn);

  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);

  CommandLine cli(program_name(argc, argv));
  // Pre-scan: rewrite legacy names and abbreviations, and find where the
  // worker command starts (nothing after that is rewritten).
  std::vector<std::string> ours;
  std::vector<std::string> command;
  try {
    prescan(cli, args, ours, command);
  } catch (const InvalidArgument& e) {
    return usage_error(e.what());
  }

  std::vector<std::string> reversed(ours.rbegin(), ours.rend());
  try {
    cli.app().parse(reversed);
  } catch (const CLI::CallForHelp&) {
    ParseOutcome out;
    out.exit_code = exit_code::kOk;
    out.message = cli.app().help();
    out.message_to_stdout = true;
    return out;
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    // CLI11 names an option by its long name; -np is how everyone types this one.
    if (what.rfind("--num-proc:", 0) == 0) what = "-np/" + what;
    return usage_error(fmt::format("{} (see {} --help)", what, cli.app().get_name()));
  }
  const FlagSet on_command_line = cli.given();
  if (given_action(on_command_line, Action::Version)) {
    ParseOutcome out;
    out.exit_code = exit_code::kOk;
    out.message = "hvdrun " HVDRUN_VERSION "\n";
    out.message_to_stdout = true;
    return out;
  }
  if (const Flag* refused = given_action(on_command_line, Action::Refuse)) {
    return not_supported(refused->name(), refused->refusal);
  }

  Options o;
  try {
    cli.read(o);
    if (o.ssh_identity_file) check_identity_file(*o.ssh_identity_file);
    if (!o.hosts.empty() && o.hostfile) {
      throw InvalidArgument("-H/--hosts and --hostfile cannot be used together; give hosts one way");
    }
    const bool script_on_command_line = o.elastic.host_discovery_script.has_value();
    FlagSet set = on_command_line;  // the rows with a value so far
    // A platform's flags (OCI's HOROVOD_ARGS, ...) beneath the command line.
    for (const auto& layer : platform.layers) {
      FlagSet layer_given;
      const Options values = read_layer(layer, layer_given);
      fill_unset(o, set, values, layer_given, /*elastic_rows=*/false);
      fill_unset(o, set, values, layer_given, /*elastic_rows=*/true);
    }
    std::optional<ConfigFileValues> file;
    if (o.config_file) {
      file = load_config_file(*o.config_file);
      for (const auto& why : file->ignored) spdlog::warn("{}: {}; ignored", *o.config_file, why);
      fill_unset(o, set, file->options, file->given, /*elastic_rows=*/false);
    }
    fill_from_environment(o, set, /*elastic_rows=*/false);
    finish_elastic(o, set, on_command_line, script_on_command_line, file ? &*file : nullptr);
  } catch (const InvalidArgument& e) {
    return usage_error(e.what());
  }
  init_launcher_logging(o);

  if (o.check_build) {
    ParseOutcome out;
    out.options = std::move(o);
    return out;
  }
  // Without -np a platform's slots may be the default: whether one is here
  // is the host-source layer's question (choose_host_source), asked after
  // parsing, which never reads the machine. Only when nothing could give
  // the slots is -np's absence an error already.
  if (!o.num_proc && (o.hosts_from == "none" || !o.hosts.empty() || o.hostfile)) {
    return usage_error("-np/--num-proc is required (e.g. hvdrun -np 4 python train.py)");
  }
  if (o.num_proc && *o.num_proc > kMaxNumProc) {
    return usage_error(fmt::format("-np {} is more than hvdrun runs: at most {} ranks", *o.num_proc, kMaxNumProc));
  }
  if (command.empty()) command = platform.default_command;
  if (command.empty()) return usage_error("no command given (e.g. hvdrun -np 2 python train.py)");
  if (looks_like_host_entry(command.front())) {
    // The `-H a:2 b:2 python x.py` typo: b:2 would become the command.
    std::vector<std::string> more;
    for (const auto& c : command) {
      if (!looks_like_host_entry(c)) break;
      more.push_back(c);
    }
    std::string joined = o.hosts;
    for (const auto& h : more) joined += (joined.empty() ? "" : ",") + h;
    if (!o.hosts.empty()) {
      return usage_error(fmt::format("'{}' looks like a host; join hosts with commas: -H {}", command.front(), joined));
    }
    return usage_error(
        fmt::format("'{}' looks like a host, not a command; give hosts with -H {}", command.front(), joined));
  }
  o.command = std::move(command);
  ParseOutcome out;
  out.options = std::move(o);
  return out;
}

}  // namespace hvd::launcher
