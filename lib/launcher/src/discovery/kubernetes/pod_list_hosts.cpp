// hvdrun --kubernetes-pod-hosts (pod_list_hosts.h).
#include "hvd/launcher/discovery/kubernetes/pod_list_hosts.h"

#include "hvd/launcher/discovery/kubernetes/pod_hosts.h"

#include "hvd/common/text.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <iostream>
#include <iterator>
#include <map>

namespace hvd::launcher::kube {

namespace {

/// Exit status for input that is not a pod list (the script's "the API
/// request failed").
constexpr int kNotAPodList = 1;

}  // namespace

int pod_list_hosts(const std::vector<std::string>& args, std::istream& in, std::ostream& out, std::ostream& err) {
  std::string prog = "hvdrun";
  PodHostRules rules;
  rules.host_names = KubernetesHostNames::Dns;
  bool use_ip = false;
  bool from_gpu = false;
  std::string annotation;
  int slots = 1;
  auto usage = [&](const std::string& why) {
    err << prog << ": error: " << why << "\n";
    return exit_code::kUsage;
  };
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](std::string& to) {
      if (i + 1 >= args.size()) return false;
      to = args[++i];
      return true;
    };
    std::string v;
    if (a == "--ip") {
      use_ip = true;
    } else if (a == "--slots-from-gpu") {
      from_gpu = true;
    } else if (a == "--prog" && value(v)) {
      prog = v;
    } else if (a == "--service" && value(v)) {
      rules.service = v;
    } else if (a == "--slots-annotation" && value(v)) {
      annotation = v;
    } else if (a == "--slots" && value(v)) {
      slots = pod_count(v);
      if (slots == 0) return usage(fmt::format("--slots '{}' is not a positive integer", shown(v)));
    } else {
      return usage(fmt::format("--kubernetes-pod-hosts: unknown or incomplete argument '{}'", shown(a)));
    }
  }
  if (use_ip) rules.host_names = KubernetesHostNames::Ip;
  if (!from_gpu && annotation.empty()) {
    rules.slots.mode = KubernetesSlots::Mode::Fixed;
    rules.slots.count = slots;
  } else {
    rules.slots.mode = KubernetesSlots::Mode::Auto;
    rules.auto_annotation = annotation;
    rules.auto_gpus = from_gpu;
    rules.bad_annotation_falls_back = true;
  }
  rules.default_slots = slots;

  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const nlohmann::json list = nlohmann::json::parse(text, nullptr, false);
  if (list.is_discarded() || !list.is_object() || !list.contains("items") || !list.at("items").is_array()) {
    err << prog << ": error: the input is not a pod list (kubectl get pods -o json)\n";
    return kNotAPodList;
  }
  std::map<std::string, PodHost> pods;
  for (const auto& item : list.at("items")) {
    PodHost p = pod_host(item, rules);
    if (p.no_dns_name) {
      err << prog << ": error: pod " << shown(p.pod)
          << " has no spec.subdomain (not a StatefulSet pod?); pass --service NAME or --ip\n";
      return exit_code::kUsage;
    }
    if (p.usable && !p.warning.empty()) err << prog << ": pod " << shown(p.pod) << ": " << p.warning << "\n";
    const std::string name = p.pod;
    pods.insert_or_assign(name, std::move(p));
  }
  for (const HostSpec& h : hosts_of(pods)) out << format_host(h) << "\n";
  out.flush();
  return exit_code::kOk;
}

int pod_list_hosts_main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 2, argv + argc);
  return pod_list_hosts(args, std::cin, std::cout, std::cerr);
}

}  // namespace hvd::launcher::kube
