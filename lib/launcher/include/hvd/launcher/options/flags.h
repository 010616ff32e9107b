#pragma once
/// hvdrun's flags as one table. Each row binds everything about one setting:
/// its spellings on the command line (horovodrun's long name first, then
/// aliases; horovodrun's single-dash legacy spellings beside them), the
/// Options field it fills, the parser that checks its value, its help text
/// and group, its config-file key and its environment fallback. The command
/// line (cli.cpp), --config-file (config_file.cpp), --help and the tests
/// all read this table; nothing else names a flag to fill a field, so a
/// flag cannot be parsed and then dropped by a misspelt lookup key.
///
/// Precedence, row by row: command line > config file > environment
/// (Flag::env) > the default in Options.
#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "hvd/launcher/options/options.h"

namespace hvd::launcher {

/// One value of one flag as one source gave it: command-line text, a node
/// of the YAML config file, or an environment variable. A row's parser is
/// written once against this interface; each source checks the value's
/// form and words its messages its own way:
///   -np 'x' is not an integer
///   c.yaml:3: params.cache_capacity: expected an integer >= 0, got '-1'
///   HOROVOD_START_TIMEOUT='soon' is not a positive number of seconds
/// Every method throws hvd::InvalidArgument on a bad value.
class ValueReader {
 public:
  virtual ~ValueReader() = default;
  /// How messages name the value: "-np", "params.cache_capacity",
  /// "HOROVOD_START_TIMEOUT".
  virtual const std::string& name() const = 0;
  /// The value as text. `expected` words the file's message when the
  /// node is not text ("gloo or mpi").
  virtual std::string text(const std::string& expected = "a string") = 0;
  /// Every value of a repeatable flag, in the order given.
  virtual std::vector<std::string> texts() = 0;
  /// An integer in [min, max].
  virtual long integer(long min, long max) = 0;
  /// A number in [min, max]; NaN never is.
  virtual double number(double min, double max) = 0;
  /// A number of seconds > 0 (at most 1e6), fractions allowed.
  virtual std::chrono::milliseconds seconds() = 0;
  /// A whole number of seconds in [min, max].
  virtual std::chrono::seconds whole_seconds(long min, long max) = 0;
  virtual bool boolean() = 0;
  /// Two whole numbers of seconds, 0 <= MIN <= MAX.
  virtual std::pair<int, int> seconds_range() = 0;
  /// Refuses the value after a row's own check: `message` is the whole
  /// line for the command line and the environment, `expected` completes
  /// the file's "KEY: expected ..., got ...".
  [[noreturn]] void reject(const std::string& message, const std::string& expected) const;

 protected:
  /// The line reject() throws, worded for this source.
  virtual std::string rejection(const std::string& message, const std::string& expected) const = 0;
};

/// How a flag is written on the command line.
enum class Syntax {
  Switch,  ///< no value: each spelling sets the field to its own value (--x / --no-x, --gloo / --mpi)
  Value,  ///< one value: --num-proc 4, --num-proc=4, -H a:2
  OptionalValue,  ///< a value only when attached with '=': --dry-run, --dry-run=json
  Repeated,  ///< one value per occurrence, all kept in order: -x A -x B
  TwoValues,  ///< --blacklist-cooldown-range MIN MAX
};

/// What giving a flag does.
enum class Action {
  Fill,  ///< fills its Options field (every row but the three below)
  Help,  ///< -h/--help: help on stdout, exit 0
  Version,  ///< -v/--version: version on stdout, exit 0
  Refuse,  ///< a flag of a feature hvdrun does not have yet: exit 4, naming Flag::refusal
};

/// One way of writing a flag. Only Switch rows have more than one.
struct Spelling {
  /// horovodrun's long name first ("--hosts"), then aliases ("-H").
  std::vector<std::string> names;
  /// Empty: hidden from --help (as horovodrun hides its --no- forms).
  std::string help;
  /// Switch rows with a config key: the file's value that means this
  /// spelling ("true", "false", "mpi").
  std::string config_value;
};

/// One row of the table. Plain data plus the type-erased binding to
/// Options that flags.cpp builds from a typed field and parser (so a row
/// naming a field of the wrong type does not compile).
struct Flag {
  /// spellings[0] is the flag itself; further ones are the other values of
  /// the same field (--no-hierarchical-allreduce, --mpi).
  std::vector<Spelling> spellings;
  /// horovodrun's single-dash long spellings of spellings[0] ("-np",
  /// "-hostfile"): rewritten to name() before parsing, as horovodrun's
  /// argparse accepted them.
  std::vector<std::string> legacy;
  Syntax syntax = Syntax::Switch;
  Action action = Action::Fill;
  /// The value's placeholder in --help ("N", "SECONDS"); empty for switches.
  std::string value_name;
  /// The --help section ("Placement", "SSH", ...).
  std::string group;
  /// How command-line messages name the flag when not by name(): "-np"
  /// ("-np 'x' is not an integer"), "-p/--ssh-port".
  std::string message_name;
  /// A valid value as typed on the command line ("32"; "10 100" for two
  /// values), for documentation and the table's own tests.
  std::string example;
  /// The config-file key ("params.fusion_threshold_mb", "controller");
  /// empty when the file cannot set it.
  std::string config_key;
  /// Other keys the file may use for it (horovodrun's argparse dest names:
  /// "elastic.min_num_proc").
  std::vector<std::string> config_aliases;
  /// Switch rows with a config key: index of the spelling that a present
  /// section without this key means (horovodrun: an autotune: section
  /// without `enabled` disables autotune).
  std::optional<size_t> section_default;
  /// Environment variable read when neither the command line nor the file
  /// sets the row ("HOROVOD_START_TIMEOUT").
  std::string env;
  /// Only meaningful in elastic mode: an error on the command line without
  /// a discovery script, ignored (with a warning) from the file.
  bool elastic_only = false;
  /// Only meaningful beside this other flag (its long name: the
  /// --kubernetes-* settings need "--kubernetes-selector"): an error on the
  /// command line without it, ignored (with a warning) from the file.
  std::string needs;
  /// Action::Refuse: the missing feature, for the exit-4 message.
  std::string refusal;
  /// The names of this row that hvdrun added and horovodrun does not have
  /// ("--dry-run", the alias "--jsm"). An abbreviation that would be
  /// ambiguous only because of them means horovodrun's flag ("--dis" is
  /// --disable-cache, as in horovodrun, despite --discovery-interval), and
  /// docs/cli.md lists them as additions.
  std::vector<std::string> additions;

  /// Reads a value and stores it in the row's field: every value row from
  /// the command line; every row with a config key from the file; rows
  /// with `env` from the environment.
  std::function<void(Options&, ValueReader&)> parse;
  /// Switch rows: spellings[i] was given.
  std::function<void(Options&, size_t)> choose;
  /// Copies the row's field from another Options (merging sources).
  std::function<void(Options& to, const Options& from)> copy;
  /// Whether two Options hold the same value in the row's field.
  std::function<bool(const Options&, const Options&)> same;

  /// horovodrun's long name: "--num-proc".
  const std::string& name() const { return spellings.front().names.front(); }
  /// The name command-line messages use (message_name, else name()).
  const std::string& shown() const { return message_name.empty() ? name() : message_name; }
  /// Whether `spelling` (one of this row's names) is an hvdrun addition.
  bool is_addition(const std::string& spelling) const {
    for (const auto& a : additions) {
      if (a == spelling) return true;
    }
    return false;
  }
};

/// Every flag, in --help order. Built once; rows never move, so a
/// `const Flag*` is a stable identity (FlagSet).
const std::vector<Flag>& flags();

/// The row with this name, alias, legacy or other spelling ("-np",
/// "--no-autotune"); nullptr if none.
const Flag* find_flag(const std::string& name);

/// The row with this config key or config alias; nullptr if none.
const Flag* find_config_key(const std::string& key);

/// Which rows one source set.
using FlagSet = std::set<const Flag*>;

}  // namespace hvd::launcher
