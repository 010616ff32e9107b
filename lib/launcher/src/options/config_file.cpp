#include "hvd/launcher/options/config_file.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "hvd/common/error.h"
#include "hvd/common/text.h"

namespace hvd::launcher {

namespace {

/// A key the file may hold that no flag has: its value is checked (a count,
/// as horovodrun's), then ignored with a warning saying why.
struct IgnoredKey {
  const char* key;
  const char* why;
};

constexpr IgnoredKey kIgnoredKeys[] = {
    {"library_options.ccl_bgt_affinity", "only applies to CCL"},
};

const IgnoredKey* find_ignored(const std::string& key) {
  for (const auto& k : kIgnoredKeys) {
    if (key == k.key) return &k;
  }
  return nullptr;
}

/// Is `name` a section (params, elastic, ...): the part before the dot of
/// some row's config key or of an ignored key?
bool is_section(const std::string& name) {
  const std::string prefix = name + ".";
  auto in = [&prefix](const std::string& key) { return key.rfind(prefix, 0) == 0; };
  for (const Flag& f : flags()) {
    if (in(f.config_key) || std::any_of(f.config_aliases.begin(), f.config_aliases.end(), in)) return true;
  }
  return std::any_of(std::begin(kIgnoredKeys), std::end(kIgnoredKeys),
                     [&in](const IgnoredKey& k) { return in(k.key); });
}

/// One value of the file; messages are "origin:LINE: key: expected X, got Y".
class ConfigReader final : public ValueReader {
 public:
  ConfigReader(const YAML::Node& node, std::string key, const std::string& origin)
      : node_(node), key_(std::move(key)), origin_(origin) {}

  const std::string& name() const override { return key_; }

  std::string text(const std::string& expected) override {
    if (!node_.IsScalar()) fail(node_, expected);
    return node_.Scalar();
  }

  std::vector<std::string> texts() override {
    if (node_.IsScalar()) return {node_.Scalar()};
    std::vector<std::string> out;
    if (!node_.IsSequence()) fail(node_, "a string or a list of strings");
    for (const auto& item : node_) {
      if (!item.IsScalar()) fail(item, "a string");
      out.push_back(item.Scalar());
    }
    return out;
  }

  long integer(long min, long max) override { return integer_at(node_, min, max); }

  double number(double min, double max) override {
    const double d = as_double();
    if (!(d >= min && d <= max)) {
      fail(node_, max > 1e300 ? fmt::format("a number >= {}", min) : fmt::format("a number in [{}, {}]", min, max));
    }
    return d;
  }

  std::chrono::milliseconds seconds() override {
    const double d = as_double();
    if (!(d > 0) || d > 1e6) fail(node_, "a number of seconds > 0");
    return std::chrono::milliseconds(std::max(1LL, std::llround(d * 1000)));
  }

  std::chrono::seconds whole_seconds(long min, long max) override {
    return std::chrono::seconds(integer_at(node_, min, max));
  }

  bool boolean() override {
    if (!node_.IsScalar()) fail(node_, "true or false");
    try {
      return node_.as<bool>();
    } catch (const YAML::Exception&) {
      fail(node_, "true or false");
    }
  }

  std::pair<int, int> seconds_range() override {
    if (!node_.IsSequence() || node_.size() != 2) fail(node_, "a list [MIN, MAX] of seconds");
    const long lo = integer_at(node_[0], 0, 1000000000L);
    const long hi = integer_at(node_[1], 0, 1000000000L);
    if (lo > hi) fail(node_, "a list [MIN, MAX] with MIN <= MAX");
    return {static_cast<int>(lo), static_cast<int>(hi)};
  }

 protected:
  std::string rejection(const std::string&, const std::string& expected) const override {
    return message(node_, expected);
  }

 private:
  std::string message(const YAML::Node& value, const std::string& expected) const {
    std::string got =
        value.IsScalar() ? fmt::format("'{}'", value.Scalar()) : (value.IsSequence() ? "a list" : "a mapping");
    return fmt::format("{}:{}: {}: expected {}, got {}", origin_, value.Mark().line + 1, key_, expected, got);
  }

  [[noreturn]] void fail(const YAML::Node& value, const std::string& expected) const {
    throw InvalidArgument(message(value, expected));
  }

  double as_double() const {
    if (!node_.IsScalar()) fail(node_, "a number");
    try {
      return node_.as<double>();
    } catch (const YAML::Exception&) {
      fail(node_, "a number");
    }
  }

  long integer_at(const YAML::Node& v, long min, long max) const {
    if (!v.IsScalar()) fail(v, "an integer");
    long n = 0;
    try {
      n = v.as<long>();
    } catch (const YAML::Exception&) {
      fail(v, "an integer");
    }
    if (n < min) fail(v, fmt::format("an integer >= {}", min));
    if (n > max) fail(v, "a smaller integer");
    return n;
  }

  YAML::Node node_;
  std::string key_;
  std::string origin_;
};

/// One key with a value: through its row into `out`.
void read_key(ConfigFileValues& out, const Flag& flag, const YAML::Node& value, const std::string& key,
              const std::string& origin) {
  ConfigReader in(value, key, origin);
  flag.parse(out.options, in);
  out.given.insert(&flag);
}

/// The settings of one section (`params:`, ...).
void read_section(ConfigFileValues& out, const std::string& section, const YAML::Node& settings,
                  const std::string& origin) {
  for (auto it = settings.begin(); it != settings.end(); ++it) {
    const std::string name = it->first.Scalar();
    const std::string key = section + "." + name;
    const Flag* flag = find_config_key(key);
    const IgnoredKey* ignored = find_ignored(key);
    if (key == "logging.hide_timestamp" && !it->second.IsNull()) {
      // Horovod's own example config spells logging.with_timestamp so (its
      // horovodrun drops the key silently): the intent is plain, so honour
      // it -- true hides the time -- through the with_timestamp row.
      const Flag* with_timestamp = find_config_key("logging.with_timestamp");
      YAML::Node inverted = it->second;
      if (it->second.IsScalar() && (it->second.Scalar() == "true" || it->second.Scalar() == "false")) {
        inverted = YAML::Node(it->second.Scalar() == "true" ? "false" : "true");
      }
      if (with_timestamp && !out.sets(*with_timestamp)) read_key(out, *with_timestamp, inverted, key, origin);
      continue;
    }
    if (!flag && !ignored) {
      std::vector<std::string> known;
      for (const Flag& f : flags()) {
        if (f.config_key.rfind(section + ".", 0) == 0) known.push_back(f.config_key.substr(section.size() + 1));
      }
      const std::string guess = closest_word(name, known);
      spdlog::warn("{}:{}: unknown key '{}' in '{}' (ignored{})", origin, it->first.Mark().line + 1, name, section,
                   guess.empty() ? "" : "; did you mean " + guess + "?");
      continue;
    }
    if (it->second.IsNull()) continue;
    if (flag) {
      read_key(out, *flag, it->second, key, origin);
    } else {
      ConfigReader(it->second, key, origin).integer(0, std::numeric_limits<long>::max());
      out.ignored.push_back(fmt::format("{} {}", key, ignored->why));
    }
  }
  // A present section can imply a switch its keys leave out (horovodrun:
  // an autotune: section without `enabled` means autotune off).
  for (const Flag& f : flags()) {
    if (f.section_default && f.config_key.rfind(section + ".", 0) == 0 && !out.sets(f)) {
      f.choose(out.options, *f.section_default);
      out.given.insert(&f);
    }
  }
}

}  // namespace

bool ConfigFileValues::elastic_given() const {
  return std::any_of(given.begin(), given.end(), [](const Flag* f) { return f->elastic_only; });
}

ConfigFileValues parse_config_text(const std::string& text, const std::string& origin) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw InvalidArgument(fmt::format("{}:{}: YAML syntax error: {}", origin, e.mark.line + 1, e.msg));
  }
  ConfigFileValues out;
  if (root.IsNull()) return out;
  if (!root.IsMap()) {
    throw InvalidArgument(
        fmt::format("{}:{}: expected a mapping of sections (params:, autotune:, ...)", origin, root.Mark().line + 1));
  }
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string key = it->first.Scalar();
    const YAML::Node value = it->second;
    const int line = it->first.Mark().line + 1;
    if (value.IsNull()) continue;
    if (const Flag* flag = find_config_key(key)) {  // a top-level setting: controller
      read_key(out, *flag, value, key, origin);
    } else if (!is_section(key)) {
      if (value.IsMap()) {
        spdlog::warn("{}:{}: unknown section '{}' (ignored)", origin, line, key);
      } else {
        spdlog::warn("{}:{}: unknown key '{}' (ignored)", origin, line, key);
      }
    } else if (!value.IsMap()) {
      throw InvalidArgument(fmt::format("{}:{}: {}: expected a mapping of settings", origin, line, key));
    } else {
      read_section(out, key, value, origin);
    }
  }
  return out;
}

ConfigFileValues load_config_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InvalidArgument(fmt::format("cannot read config file '{}': {}", path, std::strerror(errno)));
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_config_text(ss.str(), path);
}

}  // namespace hvd::launcher
