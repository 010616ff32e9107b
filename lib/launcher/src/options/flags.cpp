// The flag table (flags.h). Rows are listed in --help order; each binds its
// spellings, its Options field and its parser in one place. Parsers are
// written against ValueReader, so one row checks a value the same way
// whether it came from the command line, the config file or the
// environment; only the wording of messages differs by source.
#include "hvd/launcher/options/flags.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <limits>

#include "hvd/common/error.h"
#include "hvd/common/job_env.h"

namespace hvd::launcher {

namespace {

using Names = std::vector<std::string>;

/// Counts that end up in an int (ranks, slots, limits): larger values are
/// refused ("value N is too large").
constexpr long kMaxCount = 1000000000L;
constexpr long kUnbounded = std::numeric_limits<long>::max();
constexpr double kUnboundedNumber = 1e308;

// Field accessors: a pointer-to-member path into Options, usable on a const
// or mutable Options. A field name that does not exist, or whose type the
// row's parser cannot produce, does not compile.
template <typename T>
auto at(T Options::*member) {
  return [member](auto& o) -> auto& { return o.*member; };
}
template <typename S, typename T>
auto at(S Options::*part, T S::*member) {
  return [ part, member ](auto& o) -> auto& { return (o.*part).*member; };
}
template <typename T>
auto tuning(T TuningOptions::*member) {
  return at(&Options::tuning, member);
}
template <typename T>
auto elastic(T ElasticOptions::*member) {
  return at(&Options::elastic, member);
}

/// A row under construction: the typed builders below set the spellings
/// and the binding, these setters the rest.
struct Row {
  Flag f;

  Row& group(std::string g) {
    f.group = std::move(g);
    return *this;
  }
  Row& legacy(std::string name) {
    f.legacy.push_back(std::move(name));
    return *this;
  }
  Row& message_name(std::string name) {
    f.message_name = std::move(name);
    return *this;
  }
  Row& example(std::string value) {
    f.example = std::move(value);
    return *this;
  }
  Row& syntax(Syntax s) {
    f.syntax = s;
    return *this;
  }
  Row& config(std::string key, Names aliases = {}) {
    f.config_key = std::move(key);
    f.config_aliases = std::move(aliases);
    return *this;
  }
  /// Switch rows: the file's value for each spelling, in order (toggles
  /// default to "true", "false"; a key that means the opposite of the
  /// flag, like stall_check.enabled for --no-stall-check, swaps them).
  Row& config_values(Names values) {
    HVD_ENFORCE(values.size() == f.spellings.size(), "{}: one config value per spelling", f.name());
    for (size_t i = 0; i < values.size(); ++i) f.spellings[i].config_value = std::move(values[i]);
    return *this;
  }
  Row& absent_in_section_means(const std::string& spelling) {
    for (size_t i = 0; i < f.spellings.size(); ++i) {
      if (f.spellings[i].names.front() == spelling) f.section_default = i;
    }
    HVD_ENFORCE(f.section_default, "{}: no spelling {}", f.name(), spelling);
    return *this;
  }
  Row& env(std::string variable) {
    f.env = std::move(variable);
    return *this;
  }
  Row& needs(std::string flag) {
    f.needs = std::move(flag);
    return *this;
  }
  Row& elastic_only() {
    f.elastic_only = true;
    return *this;
  }
  /// Every name of the row is hvdrun's own (Flag::additions).
  Row& addition() {
    for (const Spelling& s : f.spellings) f.additions.insert(f.additions.end(), s.names.begin(), s.names.end());
    f.additions.insert(f.additions.end(), f.legacy.begin(), f.legacy.end());
    return *this;
  }
  /// One alias of a horovodrun row is hvdrun's own: --jsm.
  Row& addition(std::string name) {
    f.additions.push_back(std::move(name));
    return *this;
  }
};

template <typename Field>
void bind_field(Flag& f, Field field) {
  f.copy = [field](Options& to, const Options& from) { field(to) = field(from); };
  f.same = [field](const Options& a, const Options& b) { return field(a) == field(b); };
}

/// A flag with a value: `parse` reads it from any source; its result is
/// stored in `field`.
template <typename Field, typename Parse>
Row value(Names names, std::string value_name, std::string help, Field field, Parse parse) {
  Row r;
  r.f.spellings = {Spelling{std::move(names), std::move(help), ""}};
  r.f.syntax = Syntax::Value;
  r.f.value_name = std::move(value_name);
  r.f.parse = [field, parse](Options& o, ValueReader& in) { field(o) = parse(in); };
  bind_field(r.f, field);
  return r;
}

/// Switches that share one field: spellings[i] stores values[i].
template <typename Field, typename T>
Row choice(Field field, std::vector<Spelling> spellings, std::vector<T> values) {
  HVD_ENFORCE(spellings.size() == values.size(), "one value per spelling");
  Row r;
  r.f.spellings = std::move(spellings);
  r.f.choose = [field, values](Options& o, size_t i) { field(o) = values.at(i); };
  bind_field(r.f, field);
  return r;
}

/// A switch that sets a bool: --verbose.
template <typename Field>
Row flag(Names names, std::string help, Field field) {
  return choice(field, {Spelling{std::move(names), std::move(help), ""}}, std::vector<bool>{true});
}

/// --x / --no-x into an optional<bool>: true / false. The second spelling
/// is hidden from --help, as in horovodrun.
template <typename Field>
Row toggle(Names yes, Names no, std::string help, Field field) {
  return choice(field, {Spelling{std::move(yes), std::move(help), "true"}, Spelling{std::move(no), "", "false"}},
                std::vector<bool>{true, false});
}

/// A flag that fills nothing: help, version.
Row action(Names names, std::string help, Action what) {
  Row r;
  r.f.spellings = {Spelling{std::move(names), std::move(help), ""}};
  r.f.action = what;
  return r;
}

/// A flag of a feature hvdrun does not have yet: parsed, then refused
/// (exit 4) naming `feature`.
Row refused(Names names, std::string help, std::string feature) {
  Row r = action(std::move(names), std::move(help), Action::Refuse);
  r.f.refusal = std::move(feature);
  return r;
}

// Parsers shared by several rows.

int count(ValueReader& in, long min) { return static_cast<int>(in.integer(min, kMaxCount)); }
int positive_count(ValueReader& in) { return count(in, 1); }
long non_negative(ValueReader& in) { return in.integer(0, kUnbounded); }
double non_negative_number(ValueReader& in) { return in.number(0, kUnboundedNumber); }
std::string any_text(ValueReader& in) { return in.text(); }
std::chrono::milliseconds seconds(ValueReader& in) { return in.seconds(); }

/// Text that must not be empty; `problem` completes "NAME: problem".
auto not_empty(const char* problem, const char* expected) {
  return [problem, expected](ValueReader& in) {
    std::string text = in.text();
    if (text.empty()) in.reject(fmt::format("{}: {}", in.name(), problem), expected);
    return text;
  };
}

std::string upper(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return text;
}

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

/// horovodrun's log levels, any case -> upper case.
std::string log_level(ValueReader& in) {
  const char* levels = "one of TRACE, DEBUG, INFO, WARNING, ERROR, FATAL";
  const std::string level = in.text(levels);
  const std::string up = upper(level);
  for (const char* ok : {"TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL"}) {
    if (up == ok) return up;
  }
  in.reject(fmt::format("{}: log level '{}' is not {}", in.name(), level, levels), levels);
}

int port(ValueReader& in) {
  const int p = count(in, 1);
  if (p > 65535) in.reject(fmt::format("{} {} is not a port number", in.name(), p), "a port number (1 to 65535)");
  return p;
}

/// --network-interface: comma lists, repeatable; duplicates dropped.
std::vector<std::string> interfaces(ValueReader& in) {
  std::vector<std::string> out;
  for (const auto& item : in.texts()) {
    size_t start = 0;
    while (start <= item.size()) {
      size_t comma = item.find(',', start);
      if (comma == std::string::npos) comma = item.size();
      std::string nic = item.substr(start, comma - start);
      if (!nic.empty() && std::find(out.begin(), out.end(), nic) == out.end()) out.push_back(nic);
      start = comma + 1;
    }
  }
  if (out.empty()) in.reject(fmt::format("{}: empty interface list", in.name()), "interface names");
  return out;
}

/// -x NAME or -x NAME=VALUE, in order.
std::vector<std::string> env_exports(ValueReader& in) {
  std::vector<std::string> out;
  for (const auto& item : in.texts()) {
    const std::string name = item.substr(0, item.find('='));
    if (name.empty() || name.find_first_of(" \t\n") != std::string::npos) {
      in.reject(fmt::format("{} '{}': expected -x NAME or -x NAME=VALUE", in.name(), item), "NAME or NAME=VALUE");
    }
    out.push_back(item);
  }
  return out;
}

DryRunFormat dry_run(ValueReader& in) {
  const std::string format = in.text();
  if (format.empty() || format == "text") return DryRunFormat::Text;
  if (format == "json") return DryRunFormat::Json;
  in.reject(fmt::format("{}={}: expected --dry-run, --dry-run=text or --dry-run=json", in.name(), format),
            "text or json");
}

std::string discovery_script(ValueReader& in) {
  std::string script = in.text();
  if (script.find_first_not_of(" \t") == std::string::npos) {
    in.reject(fmt::format("{}: empty script (expected e.g. --host-discovery-script ./discover.sh)", in.name()),
              "a script path or command");
  }
  return script;
}

/// --kubernetes-selector: a label selector as kubectl takes it (-l); the
/// API server checks its grammar, this only refuses what cannot be one.
std::string kubernetes_selector(ValueReader& in) {
  std::string selector = in.text("a label selector");
  if (selector.find_first_not_of(" \t") == std::string::npos) {
    in.reject(fmt::format("{}: empty label selector (expected e.g. --kubernetes-selector app=hvdrun)", in.name()),
              "a label selector such as app=hvdrun");
  }
  if (selector.find_first_of("\n\r") != std::string::npos) {
    in.reject(fmt::format("{}: a label selector is one line", in.name()), "a label selector on one line");
  }
  return selector;
}

/// --kubernetes-namespace: a DNS label (RFC 1123), as Kubernetes requires.
std::string kubernetes_namespace(ValueReader& in) {
  const std::string ns = in.text("a namespace name");
  bool ok = !ns.empty() && ns.size() <= 63 && ns.front() != '-' && ns.back() != '-';
  for (char c : ns) ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-');
  if (!ok) {
    in.reject(
        fmt::format("{}: '{}' is not a namespace name (lower-case letters, digits and '-', at most 63)", in.name(), ns),
        "a namespace name");
  }
  return ns;
}

/// --kubernetes-slots: auto, gpu, annotation:KEY or a positive integer.
KubernetesSlots kubernetes_slots(ValueReader& in) {
  const char* expected = "auto, gpu, annotation:KEY or a positive integer";
  const std::string text = in.text(expected);
  KubernetesSlots s;
  if (text == "auto") return s;
  if (text == "gpu") {
    s.mode = KubernetesSlots::Mode::Gpu;
    return s;
  }
  if (text.rfind("annotation:", 0) == 0 && text.size() > 11) {
    s.mode = KubernetesSlots::Mode::Annotation;
    s.annotation = text.substr(11);
    return s;
  }
  if (!text.empty() && text.size() <= 9 &&
      std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    s.mode = KubernetesSlots::Mode::Fixed;
    s.count = std::stoi(text);
    if (s.count >= 1) return s;
  }
  in.reject(fmt::format("{}: '{}' is not {}", in.name(), text, expected), expected);
}

KubernetesHostNames kubernetes_host_names(ValueReader& in) {
  const std::string text = lower(in.text("ip or dns"));
  if (text == "ip") return KubernetesHostNames::Ip;
  if (text == "dns") return KubernetesHostNames::Dns;
  in.reject(fmt::format("{}: '{}' is not ip or dns", in.name(), text), "ip or dns");
}

}  // namespace

const std::vector<std::string>& implemented_platforms() {
  static const std::vector<std::string> names = {"sagemaker", "vertex", "slurm", "lsf", "oci"};
  return names;
}

const std::vector<std::string>& planned_platforms() {
  static const std::vector<std::string> names = {};
  return names;
}

namespace {

/// --launcher: auto, ssh or srun.
std::string launcher_choice(ValueReader& in) {
  const char* expected = "auto, ssh or srun";
  const std::string text = lower(in.text(expected));
  if (text == "auto" || text == "ssh" || text == "srun") return text;
  in.reject(fmt::format("{}: '{}' is not a launcher (expected {})", in.name(), text, expected), expected);
}

/// --hosts-from: auto, none or an implemented platform; the platforms the
/// issue plans but this build lacks are refused by name.
std::string hosts_from(ValueReader& in) {
  std::string expected = "auto, none";
  for (const auto& p : implemented_platforms()) expected += ", " + p;
  const std::string text = lower(in.text(expected));
  if (text == "auto" || text == "none") return text;
  for (const auto& p : implemented_platforms()) {
    if (p == text) return text;
  }
  for (const auto& p : planned_platforms()) {
    if (p == text) {
      in.reject(fmt::format("{}: platform '{}' is not implemented yet (expected {}; see docs/platforms.md)", in.name(),
                            text, expected),
                expected);
    }
  }
  in.reject(fmt::format("{}: '{}' is not {}", in.name(), text, expected), expected);
}

template <typename T>
auto kubernetes(T KubernetesOptions::*member) {
  return [member](auto& o) -> auto& { return o.elastic.kubernetes.*member; };
}

/// The file's value of a Switch row: a boolean when the spellings' config
/// values are true/false, else one of the words (case-insensitive).
void bind_switch_config(Flag& f) {
  std::vector<std::string> words;
  for (const Spelling& s : f.spellings) {
    HVD_ENFORCE(!s.config_value.empty(), "{}: spelling {} has no config value", f.name(), s.names.front());
    words.push_back(s.config_value);
  }
  const bool is_bool =
      std::all_of(words.begin(), words.end(), [](const std::string& w) { return w == "true" || w == "false"; });
  std::string expected = is_bool ? "true or false" : words.front();
  for (size_t i = 1; i < words.size(); ++i) expected += (i + 1 == words.size() ? " or " : ", ") + words[i];
  auto choose = f.choose;
  f.parse = [choose, words, is_bool, expected](Options& o, ValueReader& in) {
    const std::string word = is_bool ? (in.boolean() ? "true" : "false") : lower(in.text(expected));
    for (size_t i = 0; i < words.size(); ++i) {
      if (words[i] == word) return choose(o, i);
    }
    in.reject(fmt::format("{}: '{}' is not {}", in.name(), word, expected), expected);
  };
}

/// Invariants every row keeps; a broken one is a bug in the table.
void check_row(const Flag& f) {
  HVD_ENFORCE(!f.spellings.empty() && !f.spellings.front().names.empty(), "a row without a name");
  HVD_ENFORCE(f.name().rfind("--", 0) == 0 || f.name().size() == 2, "{}: the first name is the long name", f.name());
  HVD_ENFORCE(!f.group.empty(), "{}: no --help group", f.name());
  const bool fills = f.action == Action::Fill;
  HVD_ENFORCE(!fills || (f.copy && f.same), "{}: no field", f.name());
  HVD_ENFORCE(!fills || f.syntax != Syntax::Switch || f.choose, "{}: a switch that sets nothing", f.name());
  HVD_ENFORCE(!fills || f.syntax == Syntax::Switch || (f.parse && !f.example.empty()),
              "{}: a value row needs a parser and an example", f.name());
  HVD_ENFORCE(f.spellings.size() == 1 || f.syntax == Syntax::Switch, "{}: only switches have several spellings",
              f.name());
  HVD_ENFORCE(f.config_key.empty() || f.parse, "{}: a config key without a parser", f.name());
  HVD_ENFORCE(f.env.empty() || f.syntax == Syntax::Value, "{}: environment fallbacks take one value", f.name());
  HVD_ENFORCE(f.action != Action::Refuse || !f.refusal.empty(), "{}: refused without a reason", f.name());
  HVD_ENFORCE(f.needs.empty() || f.needs != f.name(), "{}: needs itself", f.name());
  for (const auto& a : f.additions) {
    bool spelt = std::find(f.legacy.begin(), f.legacy.end(), a) != f.legacy.end();
    for (const Spelling& s : f.spellings) {
      spelt = spelt || std::find(s.names.begin(), s.names.end(), a) != s.names.end();
    }
    HVD_ENFORCE(spelt, "{}: addition {} is not one of its names", f.name(), a);
  }
}

std::vector<Flag> build_table() {
  const char* general = "General";
  const char* placement = "Placement";
  const char* output = "Output";
  const char* ssh = "SSH";
  const char* tune = "Tuning (become HOROVOD_* variables for workers)";
  const char* controller = "Controller";
  const char* elastic_group = "Elastic (on with --host-discovery-script; see docs/elastic.md)";
  const char* additions = "hvdrun additions";

  std::vector<Flag> t;
  auto add = [&t](Row& r) { t.push_back(std::move(r.f)); };

  add(action({"--help", "-h"}, "Show this help and exit", Action::Help).group("Options"));
  add(action({"--version", "-v"}, "Show hvdrun's version and exit", Action::Version).group(general));
  add(value({"--num-proc"}, "N",
            "-np/--num-proc N: total number of worker processes (required; default with a platform: its slots)",
            at(&Options::num_proc), positive_count)
          .group(placement)
          .legacy("-np")
          .message_name("-np")
          .example("4"));
  add(flag({"--check-build"}, "-cb/--check-build: show what this build provides and exit", at(&Options::check_build))
          .group(general)
          .legacy("-cb"));
  add(value({"--hosts", "-H"}, "LIST", "Hosts and slots: host1:2,host2:4 (a bare host has 1 slot; default localhost:N)",
            at(&Options::hosts), not_empty("empty host list (expected e.g. -H host1:2,host2:2)", "a host list"))
          .group(placement)
          .message_name("-H")
          .example("host1:2,host2:2"));
  add(value({"--hostfile"}, "FILE", "-hostfile/--hostfile FILE: lines 'host slots=N' (# comments allowed)",
            at(&Options::hostfile), any_text)
          .group(placement)
          .legacy("-hostfile")
          .example("hosts.txt"));
  add(flag({"--disable-cache"}, "Accepted for compatibility (hvdrun keeps no check cache)", at(&Options::disable_cache))
          .group(general));
  add(value({"--start-timeout"}, "SECONDS", "Seconds to start all workers (default 30, or HOROVOD_START_TIMEOUT)",
            at(&Options::start_timeout), [](ValueReader& in) { return in.whole_seconds(1, kUnbounded); })
          .group(general)
          .env(job_env::kStartTimeout)
          .example("60"));
  add(value({"--network-interface", "--network-interfaces"}, "NAME[,NAME...]",
            "Interface(s) for the driver address and Gloo; comma list, repeatable", at(&Options::network_interfaces),
            interfaces)
          .syntax(Syntax::Repeated)
          .group(general)
          .example("eth0,ib0"));
  add(value({"--output-filename"}, "DIR", "Also write each rank's output to DIR/rank.N/{stdout,stderr}",
            at(&Options::output_filename), not_empty("empty directory name", "a directory name"))
          .group(output)
          .example("logs"));
  add(flag({"--prefix-output-with-timestamp"}, "-prefix-timestamp: timestamp each output line",
           at(&Options::prefix_output_with_timestamp))
          .group(output)
          .legacy("-prefix-timestamp"));
  add(flag({"--verbose"}, "More messages from hvdrun", at(&Options::verbose)).group(output));
  add(value({"--events-file"}, "FILE", "Write one JSON object per job event (start, exits, worlds, end) to FILE",
            at(&Options::events_file), not_empty("empty file name", "a file name"))
          .group(output)
          .addition()
          .example("events.jsonl"));
  add(value({"--config-file"}, "FILE", "horovodrun YAML config file; command-line flags override it",
            at(&Options::config_file), any_text)
          .group(general)
          .example("hvdrun.yaml"));
  add(value({"--ssh-port", "-p"}, "PORT", "SSH port on all hosts", at(&Options::ssh_port), port)
          .group(ssh)
          .message_name("-p/--ssh-port")
          .example("2222"));
  add(value({"--ssh-identity-file", "-i"}, "FILE", "SSH private key file", at(&Options::ssh_identity_file), any_text)
          .group(ssh)
          .example("~/.ssh/id_ed25519"));
  add(flag({"--ssh-strict-host-key-checking"},
           "Refuse hosts not in known_hosts, over ~/.ssh/config's StrictHostKeyChecking (default: the config's, "
           "else accept and record new hosts)",
           at(&Options::ssh_strict_host_key_checking))
          .group(ssh)
          .addition());
  add(value({"--ssh-keepalive"}, "SECONDS",
            "TCP keepalive interval of SSH connections; a host silent for about 4 intervals is lost (default 5)",
            at(&Options::ssh_keepalive), [](ValueReader& in) { return in.whole_seconds(1, kUnbounded); })
          .group(ssh)
          .addition()
          .example("10"));

  // Tuning parameters -> HOROVOD_* variables (plan/worker_env.cpp).
  add(value({"--fusion-threshold-mb"}, "MB", "Fusion buffer threshold in MB (HOROVOD_FUSION_THRESHOLD, bytes)",
            tuning(&TuningOptions::fusion_threshold_mb), non_negative_number)
          .group(tune)
          .config("params.fusion_threshold_mb")
          .example("32"));
  add(value({"--cycle-time-ms"}, "MS", "Fusion cycle time in ms (HOROVOD_CYCLE_TIME)",
            tuning(&TuningOptions::cycle_time_ms), non_negative_number)
          .group(tune)
          .config("params.cycle_time_ms")
          .example("2.5"));
  add(value({"--cache-capacity"}, "N", "Response cache capacity (HOROVOD_CACHE_CAPACITY)",
            tuning(&TuningOptions::cache_capacity), non_negative)
          .group(tune)
          .config("params.cache_capacity")
          .example("1024"));
  add(toggle({"--hierarchical-allreduce"}, {"--no-hierarchical-allreduce"}, "HOROVOD_HIERARCHICAL_ALLREDUCE=1/0",
             tuning(&TuningOptions::hierarchical_allreduce))
          .group(tune)
          .config("params.hierarchical_allreduce"));
  add(toggle({"--hierarchical-allgather"}, {"--no-hierarchical-allgather"}, "HOROVOD_HIERARCHICAL_ALLGATHER=1/0",
             tuning(&TuningOptions::hierarchical_allgather))
          .group(tune)
          .config("params.hierarchical_allgather"));
  add(toggle({"--torus-allreduce"}, {"--no-torus-allreduce"}, "HOROVOD_TORUS_ALLREDUCE=1/0 (no effect yet: warns)",
             tuning(&TuningOptions::torus_allreduce))
          .group(tune)
          .config("params.torus_allreduce"));
  add(toggle({"--autotune"}, {"--no-autotune"}, "HOROVOD_AUTOTUNE=1", tuning(&TuningOptions::autotune))
          .group(tune)
          .config("autotune.enabled")
          .absent_in_section_means("--no-autotune"));
  add(value({"--autotune-log-file"}, "FILE", job_env::kAutotuneLog, tuning(&TuningOptions::autotune_log_file), any_text)
          .group(tune)
          .config("autotune.log_file")
          .example("autotune.csv"));
  add(value({"--autotune-warmup-samples"}, "N", job_env::kAutotuneWarmupSamples,
            tuning(&TuningOptions::autotune_warmup_samples), non_negative)
          .group(tune)
          .config("autotune.warmup_samples")
          .example("5"));
  add(value({"--autotune-steps-per-sample"}, "N", job_env::kAutotuneStepsPerSample,
            tuning(&TuningOptions::autotune_steps_per_sample), non_negative)
          .group(tune)
          .config("autotune.steps_per_sample")
          .example("20"));
  add(value({"--autotune-bayes-opt-max-samples"}, "N", job_env::kAutotuneBayesOptMaxSamples,
            tuning(&TuningOptions::autotune_bayes_opt_max_samples), non_negative)
          .group(tune)
          .config("autotune.bayes_opt_max_samples")
          .example("30"));
  add(value({"--autotune-gaussian-process-noise"}, "X", "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE, in [0, 1]",
            tuning(&TuningOptions::autotune_gaussian_process_noise), [](ValueReader& in) { return in.number(0, 1); })
          .group(tune)
          .config("autotune.gaussian_process_noise")
          .example("0.5"));
  add(value({"--timeline-filename"}, "FILE", job_env::kTimeline, tuning(&TuningOptions::timeline_filename), any_text)
          .group(tune)
          .config("timeline.filename")
          .example("timeline.json"));
  add(toggle({"--timeline-mark-cycles"}, {"--no-timeline-mark-cycles"}, "HOROVOD_TIMELINE_MARK_CYCLES=1",
             tuning(&TuningOptions::timeline_mark_cycles))
          .group(tune)
          .config("timeline.mark_cycles"));
  add(toggle({"--no-stall-check"}, {"--stall-check"}, "HOROVOD_STALL_CHECK_DISABLE=1",
             tuning(&TuningOptions::no_stall_check))
          .group(tune)
          .config("stall_check.enabled")
          .config_values({"false", "true"})
          .absent_in_section_means("--stall-check"));
  add(value({"--stall-check-warning-time-seconds"}, "SECONDS", job_env::kStallCheckTimeSeconds,
            tuning(&TuningOptions::stall_check_warning_time_seconds), non_negative)
          .group(tune)
          .config("stall_check.warning_time_seconds")
          .example("120"));
  add(value({"--stall-check-shutdown-time-seconds"}, "SECONDS", job_env::kStallShutdownTimeSeconds,
            tuning(&TuningOptions::stall_check_shutdown_time_seconds), non_negative)
          .group(tune)
          .config("stall_check.shutdown_time_seconds")
          .example("240"));
  add(value({"--log-level"}, "LEVEL", "HOROVOD_LOG_LEVEL: TRACE, DEBUG, INFO, WARNING, ERROR or FATAL",
            tuning(&TuningOptions::log_level), log_level)
          .group(tune)
          .config("logging.level")
          .example("WARNING"));
  add(toggle({"--log-without-timestamp", "--log-hide-timestamp"}, {"--log-with-timestamp", "--no-log-hide-timestamp"},
             "HOROVOD_LOG_HIDE_TIME=1", tuning(&TuningOptions::log_hide_timestamp))
          .group(tune)
          .config("logging.with_timestamp")
          .config_values({"false", "true"}));
  add(value({"--num-nccl-streams"}, "N", job_env::kNumNcclStreams, tuning(&TuningOptions::num_nccl_streams),
            non_negative)
          .group(tune)
          .config("library_options.num_nccl_streams")
          .example("2"));
  add(value({"--thread-affinity"}, "N", job_env::kThreadAffinity, tuning(&TuningOptions::thread_affinity), non_negative)
          .group(tune)
          .config("library_options.thread_affinity")
          .example("1"));
  add(value({"--gloo-timeout-seconds"}, "SECONDS", job_env::kGlooTimeoutSeconds,
            tuning(&TuningOptions::gloo_timeout_seconds), non_negative)
          .group(tune)
          .config("library_options.gloo_timeout_seconds")
          .example("60"));
  add(flag({"--tcp"}, "NCCL_IB_DISABLE=1 (TCP only)", at(&Options::tcp_flag)).group(tune));
  add(value({"--binding-args"}, "ARGS", "mpirun binding arguments, replacing -bind-to none -map-by slot (mpirun mode)",
            at(&Options::binding_args), any_text)
          .group(tune)
          .example("-bind-to core -map-by core"));

  // Controllers.
  add(choice(at(&Options::engine),
             {Spelling{{"--gloo"}, "Gloo-compatible controller (hvdrun's native engine; the default)", "gloo"},
              Spelling{{"--mpi"}, "Start workers through mpirun (Open MPI, MPICH, Intel MPI; see docs/mpi.md)", "mpi"}},
             std::vector<Engine>{Engine::Gloo, Engine::Mpi})
          .group(controller)
          .config("controller"));
  add(refused({"--jsrun", "--jsm"}, "jsrun launcher (not supported)", "jsrun/LSF mode")
          .group(controller)
          .addition("--jsm"));
  add(value({"--mpi-args"}, "ARGS", "Extra arguments for mpirun, split shell-style (with --mpi)",
            at(&Options::mpi_args), any_text)
          .group(controller)
          .env("HOROVOD_MPI_ARGS")
          .example("--map-by ppr:4:node"));
  add(toggle({"--mpi-threads-disable"}, {"--no-mpi-threads-disable"},
             "HOROVOD_MPI_THREADS_DISABLE=1/0 for workers (MPI threading off)",
             tuning(&TuningOptions::mpi_threads_disable))
          .group(controller)
          .config("library_options.mpi_threads_disable"));

  // Elastic (issue 5): on when a discovery script is given.
  add(value({"--host-discovery-script"}, "SCRIPT",
            "Script (or shell command) printing 'host' or 'host:slots' lines; turns elastic mode on",
            elastic(&ElasticOptions::host_discovery_script), discovery_script)
          .group(elastic_group)
          .config("elastic.host_discovery_script")
          .example("./discover.sh"));
  add(value({"--min-np", "--min-num-proc"}, "N", "Fewest workers to train with (default: -np)",
            elastic(&ElasticOptions::min_np), positive_count)
          .group(elastic_group)
          .config("elastic.min_np", {"elastic.min_num_proc"})
          .elastic_only()
          .example("2"));
  add(value({"--max-np", "--max-num-proc"}, "N", "Most workers to run (default: no limit)",
            elastic(&ElasticOptions::max_np), positive_count)
          .group(elastic_group)
          .config("elastic.max_np", {"elastic.max_num_proc"})
          .elastic_only()
          .example("8"));
  add(value({"--slots-per-host"}, "N", "Slots of a discovered host printed without :slots (default 1)",
            elastic(&ElasticOptions::slots_per_host), positive_count)
          .group(elastic_group)
          .config("elastic.slots_per_host", {"elastic.slots"})
          .elastic_only()
          .example("4"));
  add(value({"--elastic-timeout"}, "SECONDS",
            "Give up after this long below --min-np (default 600, or HOROVOD_ELASTIC_TIMEOUT)",
            elastic(&ElasticOptions::elastic_timeout), [](ValueReader& in) { return in.whole_seconds(1, kMaxCount); })
          .group(elastic_group)
          .config("elastic.elastic_timeout")
          .env(job_env::kElasticTimeout)
          .elastic_only()
          .example("120"));
  add(value({"--reset-limit"}, "N", "Give up after this many re-formations (default: no limit)",
            elastic(&ElasticOptions::reset_limit), [](ValueReader& in) { return count(in, 0); })
          .group(elastic_group)
          .config("elastic.reset_limit")
          .elastic_only()
          .example("3"));
  add(value({"--blacklist-cooldown-range"}, "MIN MAX",
            "MIN MAX seconds a blacklisted host is ignored (grows on repeated failures)",
            elastic(&ElasticOptions::blacklist_cooldown_range), [](ValueReader& in) { return in.seconds_range(); })
          .syntax(Syntax::TwoValues)
          .group(elastic_group)
          .config("elastic.blacklist_cooldown_range", {"elastic.cooldown_range"})
          .elastic_only()
          .example("10 100"));
  add(value({"--discovery-interval"}, "SECONDS", "Seconds between discovery runs (default 1, fractions allowed)",
            elastic(&ElasticOptions::discovery_interval), seconds)
          .group(elastic_group)
          .addition()
          .config("elastic.discovery_interval")
          .elastic_only()
          .example("0.5"));
  add(value({"--discovery-timeout"}, "SECONDS", "A discovery run taking longer is killed (default 10)",
            elastic(&ElasticOptions::discovery_timeout), seconds)
          .group(elastic_group)
          .addition()
          .config("elastic.discovery_timeout")
          .elastic_only()
          .example("4"));
  add(value({"--blacklist-failures"}, "N",
            "Worker failures on one host within --blacklist-window that blacklist it (default 3)",
            elastic(&ElasticOptions::blacklist_failures), positive_count)
          .group(elastic_group)
          .addition()
          .config("elastic.blacklist_failures")
          .elastic_only()
          .example("5"));
  add(value({"--blacklist-window"}, "SECONDS", "Window for --blacklist-failures (default 60)",
            elastic(&ElasticOptions::blacklist_window), seconds)
          .group(elastic_group)
          .addition()
          .config("elastic.blacklist_window")
          .elastic_only()
          .example("90"));
  add(value({"--elastic-drain-timeout"}, "SECONDS",
            "Longest a worker of a host discovery dropped trains on to its next commit before it is stopped "
            "(default 60; 0: stop it at once and roll the others back to their last commit). Also the longest "
            "the last worker holding the trained state stays after its host was dropped, until newcomers have it",
            elastic(&ElasticOptions::drain_timeout),
            [](ValueReader& in) { return std::chrono::milliseconds(in.whole_seconds(0, kMaxCount)); })
          .group(elastic_group)
          .addition()
          .config("elastic.drain_timeout")
          .elastic_only()
          .example("120"));

  // Built-in Kubernetes pod discovery (docs/kubernetes.md): a selector turns
  // elastic mode on, with the pods as hosts.
  const char* kube_group = "Kubernetes pod discovery (elastic; see docs/kubernetes.md)";
  add(value({"--kubernetes-selector"}, "SELECTOR",
            "Label selector of the pods to use as hosts (the API, no kubectl); turns elastic mode on",
            kubernetes(&KubernetesOptions::selector), kubernetes_selector)
          .group(kube_group)
          .addition()
          .config("kubernetes.selector")
          .example("app=hvdrun"));
  add(value({"--kubernetes-namespace"}, "NS",
            "Namespace of the pods (default: the pod's own, else the kubeconfig context's, else default)",
            kubernetes(&KubernetesOptions::namespace_name), kubernetes_namespace)
          .group(kube_group)
          .addition()
          .needs("--kubernetes-selector")
          .config("kubernetes.namespace")
          .example("default"));
  add(value({"--kubernetes-slots"}, "auto|gpu|annotation:KEY|N",
            "Slots of a pod (default auto: annotation hvdrun.io/slots, else nvidia.com/gpu limits, else "
            "--slots-per-host or 1)",
            kubernetes(&KubernetesOptions::slots), kubernetes_slots)
          .group(kube_group)
          .addition()
          .needs("--kubernetes-selector")
          .config("kubernetes.slots")
          .example("2"));
  add(value({"--kubernetes-host-names"}, "ip|dns",
            "A pod's host name: its IP (default) or <hostname>.<subdomain> (StatefulSet DNS)",
            kubernetes(&KubernetesOptions::host_names), kubernetes_host_names)
          .group(kube_group)
          .addition()
          .needs("--kubernetes-selector")
          .config("kubernetes.host_names")
          .example("dns"));

  // Platform host sources (docs/platforms.md).
  add(value({"--hosts-from"}, "auto|none|sagemaker|vertex|slurm|lsf|oci",
            "Hosts from a platform's description when no -H/--hostfile/discovery is given (default auto: the first "
            "platform detected; none: localhost:np)",
            at(&Options::hosts_from), hosts_from)
          .group(placement)
          .addition()
          .config("hosts_from")
          .env("HVDRUN_HOSTS_FROM")
          .example("none"));

  add(value({"--launcher"}, "auto|ssh|srun",
            "How workers on other hosts start: ssh, or srun inside a Slurm allocation (an agent per worker through "
            "srun --overlap; no SSH between nodes). auto (default): srun when the hosts are the Slurm allocation's",
            at(&Options::launcher), launcher_choice)
          .group(placement)
          .addition()
          .config("launcher")
          .env("HVDRUN_LAUNCHER")
          .example("ssh"));

  // hvdrun additions.
  add(value({"--dry-run"}, "[=text|json]", "--dry-run[=text|json]: print placement and worker commands; start nothing",
            at(&Options::dry_run), dry_run)
          .syntax(Syntax::OptionalValue)
          .group(additions)
          .addition()
          .example("json"));
  add(value({"-x"}, "NAME[=VALUE]",
            "-x NAME or -x NAME=VALUE: forward or set a worker environment variable (repeatable)",
            at(&Options::env_exports), env_exports)
          .syntax(Syntax::Repeated)
          .group(additions)
          .addition()
          .example("NCCL_DEBUG=INFO"));
  add(flag({"--forward-loader-env"}, "Also forward LD_PRELOAD-style loader variables", at(&Options::forward_loader_env))
          .group(additions)
          .addition());
  add(flag({"--insecure-store"}, "Serve unauthenticated Horovod-style store requests", at(&Options::insecure_store))
          .group(additions)
          .addition());
  add(value({"--kill-grace-ms"}, "MS", "Milliseconds between SIGTERM and SIGKILL on teardown (default 3000)",
            at(&Options::kill_grace), [](ValueReader& in) { return std::chrono::milliseconds(non_negative(in)); })
          .group(additions)
          .addition()
          .example("5000"));

  for (Flag& f : t) {
    if (f.syntax == Syntax::Switch && !f.config_key.empty()) bind_switch_config(f);
    check_row(f);
  }
  return t;
}

}  // namespace

void ValueReader::reject(const std::string& message, const std::string& expected) const {
  throw InvalidArgument(rejection(message, expected));
}

const std::vector<Flag>& flags() {
  static const std::vector<Flag> table = build_table();
  return table;
}

const Flag* find_flag(const std::string& name) {
  for (const Flag& f : flags()) {
    if (std::find(f.legacy.begin(), f.legacy.end(), name) != f.legacy.end()) return &f;
    for (const Spelling& s : f.spellings) {
      if (std::find(s.names.begin(), s.names.end(), name) != s.names.end()) return &f;
    }
  }
  return nullptr;
}

const Flag* find_config_key(const std::string& key) {
  if (key.empty()) return nullptr;
  for (const Flag& f : flags()) {
    if (f.config_key == key) return &f;
    if (std::find(f.config_aliases.begin(), f.config_aliases.end(), key) != f.config_aliases.end()) return &f;
  }
  return nullptr;
}

}  // namespace hvd::launcher
