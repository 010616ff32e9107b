// The flag table itself (flags.h): every row, iterated, against the real
// parser. These tests know no flag by name except where a row needs a file
// that must exist (--config-file, --host-discovery-script, -i). The last
// one holds docs/cli.md's table of every flag against the flag table.
#include <sys/stat.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "hvd/launcher/options/flags.h"
#include "options_test_util.h"

using namespace hvd::launcher;
using hvd_test::DiscoveryScript;
using hvd_test::parse;
using hvd_test::parse_ok;
using hvd_test::TempFile;

namespace {

const Flag& script_row() {
  const Flag* f = find_flag("--host-discovery-script");
  REQUIRE(f);
  return *f;
}

/// The value to use for a row: its example, or a real file where the
/// parser opens or checks one.
std::string value_for(const Flag& f, const DiscoveryScript& script, const TempFile& empty_config) {
  if (&f == &script_row()) return script.path();
  // --config-file reads its file; -i/--ssh-identity-file must name a readable one.
  if (&f == find_flag("--config-file") || &f == find_flag("-i")) return empty_config.path();
  return f.example;
}

std::vector<std::string> words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

/// The command-line tokens that give `value` to a value row.
std::vector<std::string> flag_args(const Flag& f, const std::string& value) {
  switch (f.syntax) {
    case Syntax::OptionalValue: return {f.name() + "=" + value};
    case Syntax::TwoValues: {
      std::vector<std::string> out = {f.name()};
      for (const auto& w : words(value)) out.push_back(w);
      return out;
    }
    default: return {f.name(), value};
  }
}

/// The file's form of a value: "[10, 100]" for two values.
std::string yaml_value(const Flag& f, const std::string& value) {
  if (f.syntax != Syntax::TwoValues) return value;
  const auto w = words(value);
  REQUIRE(w.size() == 2);
  return "[" + w[0] + ", " + w[1] + "]";
}

/// YAML setting `key` ("section.name" or a top-level "name") to `value`.
std::string yaml_setting(const std::string& key, const std::string& value) {
  const size_t dot = key.find('.');
  if (dot == std::string::npos) return key + ": " + value + "\n";
  return key.substr(0, dot) + ":\n  " + key.substr(dot + 1) + ": " + value + "\n";
}

/// -np, plus a discovery script for rows that need elastic mode.
std::vector<std::string> base_args(const Flag& f, const DiscoveryScript& script) {
  std::vector<std::string> out;
  if (&f != find_flag("-np")) out = {"-np", "4"};
  if (f.elastic_only) out.insert(out.end(), {"--host-discovery-script", script.path()});
  if (!f.needs.empty()) {  // the flag it needs, with that row's example
    const Flag* needed = find_flag(f.needs);
    REQUIRE(needed);
    out.insert(out.end(), {needed->name(), needed->example});
  }
  return out;
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// Is `name` in `text` as a whole token (not inside a longer flag name)?
bool mentions(const std::string& text, const std::string& name) {
  auto part_of_name = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'; };
  for (size_t at = text.find(name); at != std::string::npos; at = text.find(name, at + 1)) {
    const bool starts = at == 0 || !part_of_name(text[at - 1]);
    const bool ends = at + name.size() == text.size() || !part_of_name(text[at + name.size()]);
    if (starts && ends) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("flags: every name, legacy spelling and config key finds its own row", "[flags]") {
  size_t keys = 0;
  for (const Flag& f : flags()) {
    INFO(f.name());
    for (const Spelling& s : f.spellings) {
      for (const auto& n : s.names) CHECK(find_flag(n) == &f);
    }
    for (const auto& n : f.legacy) CHECK(find_flag(n) == &f);
    if (!f.config_key.empty()) {
      ++keys;
      CHECK(find_config_key(f.config_key) == &f);
    }
    for (const auto& k : f.config_aliases) CHECK(find_config_key(k) == &f);
  }
  CHECK(keys > 0);
  CHECK(find_flag("--no-such-flag") == nullptr);
  CHECK(find_config_key("params.no_such_key") == nullptr);
}

TEST_CASE("flags: every flag appears in hvdrun --help, hidden spellings do not", "[flags]") {
  const auto help = parse({"--help"});
  REQUIRE(help.exit_code == 0);
  for (const Flag& f : flags()) {
    INFO(f.name());
    for (const Spelling& s : f.spellings) {
      for (const auto& n : s.names) {
        INFO(n);
        CHECK(mentions(help.message, n) == !s.help.empty());
      }
    }
    for (const auto& n : f.legacy) {
      INFO(n);
      CHECK(mentions(help.message, n));
    }
  }
}

TEST_CASE("flags: every value row's example is accepted and fills the row's field", "[flags]") {
  DiscoveryScript script;
  TempFile empty_config("", ".yaml");
  const Options defaults;
  size_t checked = 0;
  for (const Flag& f : flags()) {
    if (f.action != Action::Fill || f.syntax == Syntax::Switch) continue;
    const auto args = concat(concat(base_args(f, script), flag_args(f, value_for(f, script, empty_config))), {"cmd"});
    INFO(f.name() << " " << value_for(f, script, empty_config));
    auto out = parse(args);
    INFO(out.message);
    REQUIRE(out.options);
    CHECK_FALSE(f.same(*out.options, defaults));
    ++checked;
  }
  CHECK(checked > 30);
}

namespace {

/// Every option string of the table: spelling names and legacy names.
std::vector<std::string> option_strings() {
  std::vector<std::string> out;
  for (const Flag& f : flags()) {
    for (const Spelling& s : f.spellings) out.insert(out.end(), s.names.begin(), s.names.end());
    out.insert(out.end(), f.legacy.begin(), f.legacy.end());
  }
  return out;
}

/// The shortest word argparse reads as `name` and nothing else (no other
/// option string begins with it; for a single-dash word, its first two
/// characters are no one-letter option either), or "" when only `name`
/// itself is.
std::string shortest_abbreviation(const std::string& name, const std::vector<std::string>& all) {
  const bool long_name = name.rfind("--", 0) == 0;
  for (size_t n = long_name ? 3 : 2; n < name.size(); ++n) {
    const std::string word = name.substr(0, n);
    bool unique = true;
    for (const auto& other : all) {
      if (other == name) continue;
      if (other.rfind(word, 0) == 0) unique = false;
      if (!long_name && other.size() == 2 && other == word.substr(0, 2)) unique = false;
    }
    if (unique) return word;
  }
  return "";
}

}  // namespace

TEST_CASE("flags: every name's shortest unambiguous abbreviation means the name", "[flags][abbrev]") {
  DiscoveryScript script;
  TempFile empty_config("", ".yaml");
  const Options defaults;
  const auto all = option_strings();
  size_t checked = 0;
  for (const Flag& f : flags()) {
    if (f.action != Action::Fill) continue;
    std::vector<std::string> names = f.legacy;
    for (const Spelling& s : f.spellings) names.insert(names.end(), s.names.begin(), s.names.end());
    for (const auto& name : names) {
      const std::string word = shortest_abbreviation(name, all);
      if (word.empty()) continue;
      INFO(name << " as " << word);
      auto given_as = [&](const std::string& spelt) {
        std::vector<std::string> tokens = {spelt};
        if (f.syntax != Syntax::Switch) {
          tokens = flag_args(f, value_for(f, script, empty_config));
          tokens.front().replace(0, f.name().size(), spelt);
        }
        auto out = parse(concat(concat(base_args(f, script), tokens), {"cmd"}));
        INFO(out.message);
        REQUIRE(out.options);
        return *out.options;
      };
      const Options full = given_as(name);
      const Options abbreviated = given_as(word);
      CHECK(f.same(abbreviated, full));
      CHECK_FALSE(f.same(abbreviated, defaults));
      ++checked;
    }
  }
  CHECK(checked > 40);
}

TEST_CASE("flags: every switch spelling sets its row's field", "[flags]") {
  const Options defaults;
  for (const Flag& f : flags()) {
    if (f.action != Action::Fill || f.syntax != Syntax::Switch) continue;
    std::vector<Options> seen;
    for (const Spelling& s : f.spellings) {
      INFO(s.names.front());
      const Options o = parse_ok({"-np", "1", s.names.front(), "cmd"});
      CHECK_FALSE(f.same(o, defaults));
      for (const auto& other : seen) CHECK_FALSE(f.same(o, other));  // each spelling its own value
      seen.push_back(o);
    }
  }
}

TEST_CASE("flags: every config key round-trips through a YAML file to the flag's value", "[flags][config]") {
  unsetenv("HOROVOD_ELASTIC_TIMEOUT");
  DiscoveryScript script;
  TempFile empty_config("", ".yaml");
  size_t checked = 0;
  for (const Flag& f : flags()) {
    if (f.config_key.empty()) continue;
    // (command-line tokens, the file's value) pairs meaning the same thing.
    std::vector<std::pair<std::vector<std::string>, std::string>> cases;
    if (f.syntax == Syntax::Switch) {
      for (const Spelling& s : f.spellings) cases.push_back({{s.names.front()}, s.config_value});
    } else {
      const std::string value = value_for(f, script, empty_config);
      cases.push_back({flag_args(f, value), yaml_value(f, value)});
    }
    std::vector<std::string> keys = {f.config_key};
    keys.insert(keys.end(), f.config_aliases.begin(), f.config_aliases.end());
    for (const auto& key : keys) {
      for (const auto& [tokens, file_value] : cases) {
        INFO(f.name() << ": " << tokens.front() << " vs " << key << ": " << file_value);
        const Options from_flag = parse_ok(concat(concat(base_args(f, script), tokens), {"cmd"}));
        TempFile yaml(yaml_setting(key, file_value), ".yaml");
        const Options from_file = parse_ok(concat(base_args(f, script), {"--config-file", yaml.path(), "cmd"}));
        CHECK(f.same(from_flag, from_file));
        CHECK_FALSE(f.same(from_file, Options{}));
        ++checked;
      }
    }
  }
  CHECK(checked > 30);
}

TEST_CASE("flags: every environment fallback reads its variable like the flag", "[flags]") {
  DiscoveryScript script;
  TempFile empty_config("", ".yaml");
  size_t checked = 0;
  for (const Flag& f : flags()) {
    if (f.env.empty()) continue;
    INFO(f.name() << " / " << f.env);
    unsetenv(f.env.c_str());
    const std::string value = value_for(f, script, empty_config);
    const Options from_flag = parse_ok(concat(concat(base_args(f, script), flag_args(f, value)), {"cmd"}));
    setenv(f.env.c_str(), value.c_str(), 1);
    const Options from_env = parse_ok(concat(base_args(f, script), {"cmd"}));
    unsetenv(f.env.c_str());
    CHECK(f.same(from_flag, from_env));
    CHECK_FALSE(f.same(from_env, Options{}));
    ++checked;
  }
  CHECK(checked == 5);  // HOROVOD_START_TIMEOUT, HOROVOD_MPI_ARGS, HOROVOD_ELASTIC_TIMEOUT, HVDRUN_HOSTS_FROM, HVDRUN_LAUNCHER
}

TEST_CASE("flags: elastic-only rows are refused without a discovery script or --min-np", "[flags][elastic]") {
  DiscoveryScript script;
  TempFile empty_config("", ".yaml");
  for (const Flag& f : flags()) {
    // --min-np itself turns elastic mode on (fixed hosts, horovodrun's rule).
    if (!f.elastic_only || f.name() == "--min-np") continue;
    INFO(f.name());
    // --hosts-from none: --slots-per-host also applies to a platform's hosts (docs/platforms.md).
    auto out = parse(concat(concat({"-np", "4", "--hosts-from", "none"}, flag_args(f, f.example)), {"cmd"}));
    CHECK(out.exit_code == exit_code::kUsage);
    CHECK(out.message == "hvdrun: error: " + f.name() + " needs --host-discovery-script or --min-np (elastic mode)\n");
    // From the file they are ignored instead (with a warning).
    TempFile yaml(yaml_setting(f.config_key, yaml_value(f, f.example)), ".yaml");
    const Options o = parse_ok({"-np", "4", "--config-file", yaml.path(), "cmd"});
    CHECK(f.same(o, Options{}));
  }
}

namespace {

/// The flag names of docs/cli.md's "Every horovodrun flag" tables: the
/// names each row's first cell gives in backquotes ("`-np`, `--num-proc N`"
/// -> -np, --num-proc), split into the additions tables and the rest, and
/// the names of rows documented as unknown to hvdrun ("error (exit 2)").
struct DocumentedFlags {
  std::set<std::string> horovodrun;
  std::set<std::string> additions;
  std::set<std::string> unknown;
};

DocumentedFlags documented_flags() {
  std::ifstream in(std::string(HVD_SOURCE_DIR) + "/docs/cli.md");
  REQUIRE(in);
  DocumentedFlags out;
  bool inside = false;
  bool additions = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0) inside = line == "## Every horovodrun flag";
    if (!inside) continue;
    if (line.rfind("### ", 0) == 0) additions = line.find("hvdrun's") != std::string::npos;
    if (line.rfind("| `", 0) != 0) continue;
    const size_t first_end = line.find(" | ", 2);
    REQUIRE(first_end != std::string::npos);
    const std::string first = line.substr(2, first_end - 2);
    const bool unknown = line.find("| error (exit 2)") != std::string::npos;
    for (size_t open = first.find('`'); open != std::string::npos; open = first.find('`', open + 1)) {
      const size_t close = first.find('`', open + 1);
      REQUIRE(close != std::string::npos);
      std::string name = first.substr(open + 1, close - open - 1);
      name = name.substr(0, name.find_first_of(" ["));
      (additions ? out.additions : out.horovodrun).insert(name);
      if (unknown) out.unknown.insert(name);
      open = close;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("flags: docs/cli.md lists every name of the flag table", "[flags][docs]") {
  const DocumentedFlags docs = documented_flags();
  REQUIRE(docs.horovodrun.size() > 60);
  REQUIRE(docs.additions.size() > 5);
  size_t names = 0;
  for (const Flag& f : flags()) {
    std::vector<std::string> all = f.legacy;
    for (const Spelling& s : f.spellings) all.insert(all.end(), s.names.begin(), s.names.end());
    for (const auto& name : all) {
      INFO(name);
      ++names;
      if (f.is_addition(name)) {
        CHECK(docs.additions.count(name) == 1);
      } else {
        CHECK(docs.horovodrun.count(name) == 1);
      }
    }
  }
  CHECK(names > 70);
  // And the other way: a documented name is a name of the table, in the
  // table that matches its row, unless documented as unknown to hvdrun.
  for (const auto* set : {&docs.horovodrun, &docs.additions}) {
    for (const auto& name : *set) {
      INFO(name);
      const Flag* f = find_flag(name);
      if (docs.unknown.count(name) != 0) {
        CHECK(f == nullptr);
        continue;
      }
      REQUIRE(f != nullptr);
      CHECK(f->is_addition(name) == (set == &docs.additions));
    }
  }
}
