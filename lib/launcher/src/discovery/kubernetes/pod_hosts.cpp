// Pods -> hosts (pod_hosts.h).
#include "hvd/launcher/discovery/kubernetes/pod_hosts.h"

#include "hvd/common/text.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <optional>

namespace hvd::launcher::kube {

namespace {

using json = nlohmann::json;

std::string text_at(const json& j, const json::json_pointer& p) {
  if (!j.contains(p)) return "";
  const json& v = j.at(p);
  return v.is_string() ? v.get<std::string>() : "";
}

/// Sum of the containers' nvidia.com/gpu limits (quantities are strings, or
/// numbers in hand-written objects); -1 when one is not a whole count.
long gpu_limits(const json& pod) {
  const json::json_pointer containers("/spec/containers");
  if (!pod.contains(containers) || !pod.at(containers).is_array()) return 0;
  long sum = 0;
  for (const auto& c : pod.at(containers)) {
    const json::json_pointer limit("/resources/limits/nvidia.com~1gpu");
    if (!c.contains(limit)) continue;
    const json& v = c.at(limit);
    if (v.is_number_integer()) {
      if (v.get<long>() < 0) return -1;
      sum += v.get<long>();
    } else if (v.is_string()) {
      const std::string s = v.get<std::string>();
      if (s == "0") continue;
      const int n = pod_count(s);
      if (n == 0) return -1;
      sum += n;
    } else {
      return -1;
    }
  }
  return sum;
}

bool ready(const json& pod) {
  const json::json_pointer conditions("/status/conditions");
  if (!pod.contains(conditions) || !pod.at(conditions).is_array()) return false;
  for (const auto& c : pod.at(conditions)) {
    if (c.value("type", "") == "Ready") return c.value("status", "") == "True";
  }
  return false;
}

}  // namespace

int pod_count(const std::string& text) {
  if (text.empty() || text.size() > 7 || text.find_first_not_of("0123456789") != std::string::npos) return 0;
  const int n = std::stoi(text);
  return n >= 1 && n <= 1000000 ? n : 0;
}

PodHost pod_host(const json& pod, const PodHostRules& rules) {
  PodHost out;
  out.pod = text_at(pod, json::json_pointer("/metadata/name"));
  auto not_used = [&out](std::string why) {
    out.why_not = std::move(why);
    return out;
  };
  if (!pod.is_object()) return not_used("not a pod object");
  const json::json_pointer deletion("/metadata/deletionTimestamp");
  if (pod.contains(deletion) && !pod.at(deletion).is_null()) return not_used("terminating");
  const std::string phase = text_at(pod, json::json_pointer("/status/phase"));
  if (phase != "Running") return not_used("phase " + (phase.empty() ? std::string("unknown") : shown(phase)));
  if (!ready(pod)) return not_used("not Ready");

  std::string name;
  if (rules.host_names == KubernetesHostNames::Ip) {
    name = text_at(pod, json::json_pointer("/status/podIP"));
    if (name.empty()) return not_used("no pod IP yet");
  } else {
    const std::string subdomain =
        rules.service.empty() ? text_at(pod, json::json_pointer("/spec/subdomain")) : rules.service;
    if (subdomain.empty()) {
      out.no_dns_name = true;
      return not_used(
          "no spec.subdomain, so no DNS name (a StatefulSet pod with a headless service has one; or use "
          "--kubernetes-host-names ip)");
    }
    std::string hostname = text_at(pod, json::json_pointer("/spec/hostname"));
    if (hostname.empty()) hostname = out.pod;
    name = hostname + "." + subdomain;
  }

  int slots = 0;
  const json::json_pointer annotations("/metadata/annotations");
  auto annotation = [&](const std::string& key) -> std::optional<std::string> {
    if (!pod.contains(annotations) || !pod.at(annotations).is_object()) return std::nullopt;
    const auto& a = pod.at(annotations);
    const auto it = a.find(key);
    if (it == a.end() || !it->is_string()) return std::nullopt;
    return it->get<std::string>();
  };
  auto from_annotation = [&](const std::string& key, const std::string& value) {
    slots = pod_count(value);
    if (slots == 0) out.why_not = fmt::format("annotation {} '{}' is not a positive integer", key, shown(value));
  };
  switch (rules.slots.mode) {
    case KubernetesSlots::Mode::Fixed: slots = rules.slots.count; break;
    case KubernetesSlots::Mode::Annotation: {
      const auto value = annotation(rules.slots.annotation);
      if (!value) return not_used("no annotation " + rules.slots.annotation);
      from_annotation(rules.slots.annotation, *value);
      break;
    }
    case KubernetesSlots::Mode::Gpu: {
      const long gpus = gpu_limits(pod);
      if (gpus < 0) return not_used("an nvidia.com/gpu limit is not a whole number");
      if (gpus == 0) return not_used("no nvidia.com/gpu limit");
      slots = static_cast<int>(gpus);
      break;
    }
    case KubernetesSlots::Mode::Auto: {
      std::optional<std::string> value;
      if (!rules.auto_annotation.empty()) value = annotation(rules.auto_annotation);
      if (value && value->empty() && rules.bad_annotation_falls_back) value.reset();
      if (value) {
        from_annotation(rules.auto_annotation, *value);
        if (slots > 0 || !rules.bad_annotation_falls_back) break;
        out.why_not.clear();
      }
      long gpus = 0;
      if (rules.auto_gpus) {
        gpus = gpu_limits(pod);
        if (gpus < 0) return not_used("an nvidia.com/gpu limit is not a whole number");
      }
      slots = gpus > 0 ? static_cast<int>(gpus) : rules.default_slots;
      if (value) {
        out.warning = fmt::format("annotation {}={} is not a positive integer; using {} slots", rules.auto_annotation,
                                  shown(*value), slots);
      }
      break;
    }
  }
  if (slots == 0) return out;  // why_not set by from_annotation

  // The name must be one -H would take (IPv6 in brackets).
  const std::string entry = name.find(':') != std::string::npos ? "[" + name + "]" : name;
  const HostEntry parsed = try_parse_host_entry(entry, slots);
  if (!parsed.ok()) return not_used(fmt::format("host name '{}': {}", shown(name), *parsed.error));
  out.host = parsed.host;
  out.usable = true;
  long restarts = 0;
  const json::json_pointer statuses("/status/containerStatuses");
  if (pod.contains(statuses) && pod.at(statuses).is_array()) {
    for (const auto& c : pod.at(statuses)) {
      if (c.is_object() && c.contains("restartCount") && c.at("restartCount").is_number_integer()) {
        restarts += c.at("restartCount").get<long>();
      }
    }
  }
  out.incarnation = fmt::format("{}/{}/{}", text_at(pod, json::json_pointer("/metadata/uid")),
                                text_at(pod, json::json_pointer("/status/podIP")), restarts);
  return out;
}

bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const bool da = std::isdigit(static_cast<unsigned char>(a[i])) != 0;
    const bool db = std::isdigit(static_cast<unsigned char>(b[j])) != 0;
    if (da && db) {
      size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      std::string na = a.substr(i, ie - i), nb = b.substr(j, je - j);
      na.erase(0, std::min(na.find_first_not_of('0'), na.size()));
      nb.erase(0, std::min(nb.find_first_not_of('0'), nb.size()));
      if (na.size() != nb.size()) return na.size() < nb.size();
      if (na != nb) return na < nb;
      i = ie;
      j = je;
      continue;
    }
    if (a[i] != b[j]) return a[i] < b[j];
    ++i;
    ++j;
  }
  if ((a.size() - i) != (b.size() - j)) return (a.size() - i) < (b.size() - j);
  return a < b;
}

namespace {
std::vector<const PodHost*> in_order(const std::map<std::string, PodHost>& pods) {
  std::vector<const PodHost*> out;
  for (const auto& [name, p] : pods) out.push_back(&p);
  std::sort(out.begin(), out.end(), [](const PodHost* x, const PodHost* y) { return natural_less(x->pod, y->pod); });
  return out;
}
}  // namespace

std::vector<HostSpec> hosts_of(const std::map<std::string, PodHost>& pods) {
  std::vector<HostSpec> out;
  for (const PodHost* p : in_order(pods)) {
    if (!p->usable) continue;
    auto same = std::find_if(out.begin(), out.end(), [&](const HostSpec& h) { return h.name == p->host.name; });
    if (same != out.end()) {
      same->slots += p->host.slots;
    } else {
      out.push_back(p->host);
    }
  }
  return out;
}

std::map<std::string, std::string> incarnations_of(const std::map<std::string, PodHost>& pods) {
  std::map<std::string, std::string> out;
  for (const PodHost* p : in_order(pods)) {
    if (!p->usable) continue;
    std::string& token = out[p->host.name];
    token += (token.empty() ? "" : ",") + p->incarnation;
  }
  return out;
}

std::string describe_usable(const std::map<std::string, PodHost>& pods) {
  std::string out;
  for (const PodHost* p : in_order(pods)) {
    if (!p->usable) continue;
    out += (out.empty() ? "" : ", ") + p->pod + " -> " + format_host(p->host);
  }
  return out.empty() ? "-" : out;
}

std::string describe_unusable(const std::map<std::string, PodHost>& pods) {
  std::string out;
  for (const PodHost* p : in_order(pods)) {
    if (p->usable) continue;
    out += (out.empty() ? "" : ", ") + p->pod + " (" + p->why_not + ")";
  }
  return out;
}

}  // namespace hvd::launcher::kube
