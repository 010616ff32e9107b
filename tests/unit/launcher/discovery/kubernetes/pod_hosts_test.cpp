// pod_hosts.h: which pods count, their host names and slots.
#include "hvd/launcher/discovery/kubernetes/pod_hosts.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

using namespace hvd::launcher;
using namespace hvd::launcher::kube;
using json = nlohmann::json;

namespace {

/// A pod as the API returns it: Running and Ready unless changed.
json pod(const std::string& name, const std::string& ip = "10.0.0.5", long gpus = 0) {
  json limits = json::object();
  if (gpus) limits["nvidia.com/gpu"] = std::to_string(gpus);
  return {
      {"metadata", {{"name", name}, {"namespace", "default"}, {"annotations", json::object()}}},
      {"spec", {{"containers", json::array({{{"name", "w"}, {"resources", {{"limits", limits}}}}})}}},
      {"status",
       {{"phase", "Running"}, {"podIP", ip}, {"conditions", json::array({{{"type", "Ready"}, {"status", "True"}}})}}}};
}

PodHostRules rules(KubernetesSlots::Mode mode = KubernetesSlots::Mode::Auto, int default_slots = 1) {
  PodHostRules r;
  r.slots.mode = mode;
  r.default_slots = default_slots;
  return r;
}

}  // namespace

TEST_CASE("pod_hosts: only Running, Ready, not terminating pods with an IP count", "[kubernetes]") {
  auto p = pod_host(pod("w-0"), rules());
  CHECK(p.usable);
  CHECK(p.pod == "w-0");
  CHECK(p.host == HostSpec{"10.0.0.5", 1});

  json pending = pod("w-1");
  pending["status"]["phase"] = "Pending";
  p = pod_host(pending, rules());
  CHECK_FALSE(p.usable);
  CHECK(p.why_not == "phase Pending");

  json unready = pod("w-2");
  unready["status"]["conditions"][0]["status"] = "False";
  CHECK(pod_host(unready, rules()).why_not == "not Ready");
  json no_conditions = pod("w-2");
  no_conditions["status"].erase("conditions");
  CHECK(pod_host(no_conditions, rules()).why_not == "not Ready");

  json terminating = pod("w-3");
  terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  CHECK(pod_host(terminating, rules()).why_not == "terminating");

  json no_ip = pod("w-4");
  no_ip["status"].erase("podIP");
  CHECK(pod_host(no_ip, rules()).why_not == "no pod IP yet");

  CHECK(pod_host(json::array(), rules()).why_not == "not a pod object");
}

TEST_CASE("pod_hosts: slots: auto = annotation, else GPU limits, else --slots-per-host", "[kubernetes]") {
  CHECK(pod_host(pod("a"), rules(KubernetesSlots::Mode::Auto, 3)).host.slots == 3);
  CHECK(pod_host(pod("a", "10.0.0.5", 4), rules(KubernetesSlots::Mode::Auto, 3)).host.slots == 4);
  json two = pod("a", "10.0.0.5", 4);
  two["spec"]["containers"].push_back({{"name", "side"}, {"resources", {{"limits", {{"nvidia.com/gpu", 2}}}}}});
  CHECK(pod_host(two, rules()).host.slots == 6);  // summed over containers, numbers too
  json annotated = pod("a", "10.0.0.5", 4);
  annotated["metadata"]["annotations"][kSlotsAnnotation] = "2";
  CHECK(pod_host(annotated, rules()).host.slots == 2);
  annotated["metadata"]["annotations"][kSlotsAnnotation] = "two";
  auto bad = pod_host(annotated, rules());
  CHECK_FALSE(bad.usable);
  CHECK(bad.why_not == "annotation hvdrun.io/slots 'two' is not a positive integer");
  json weird_gpu = pod("a");
  weird_gpu["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "500m";
  CHECK(pod_host(weird_gpu, rules()).why_not == "an nvidia.com/gpu limit is not a whole number");
}

TEST_CASE("pod_hosts: slots: gpu, annotation:KEY and a fixed count", "[kubernetes]") {
  CHECK(pod_host(pod("a", "10.0.0.5", 8), rules(KubernetesSlots::Mode::Gpu)).host.slots == 8);
  CHECK(pod_host(pod("a"), rules(KubernetesSlots::Mode::Gpu)).why_not == "no nvidia.com/gpu limit");
  PodHostRules by_key = rules(KubernetesSlots::Mode::Annotation);
  by_key.slots.annotation = "example.com/workers";
  json annotated = pod("a", "10.0.0.5", 8);
  annotated["metadata"]["annotations"]["example.com/workers"] = "5";
  CHECK(pod_host(annotated, by_key).host.slots == 5);
  CHECK(pod_host(pod("a"), by_key).why_not == "no annotation example.com/workers");
  PodHostRules fixed = rules(KubernetesSlots::Mode::Fixed);
  fixed.slots.count = 7;
  CHECK(pod_host(pod("a", "10.0.0.5", 8), fixed).host.slots == 7);
}

TEST_CASE("pod_hosts: host names: IP (v4, v6) or the StatefulSet DNS name", "[kubernetes]") {
  CHECK(pod_host(pod("a", "fd00::5"), rules()).host.name == "fd00::5");  // -H grammar's IPv6, no brackets
  PodHostRules dns = rules();
  dns.host_names = KubernetesHostNames::Dns;
  json sts = pod("train-0");
  sts["spec"]["subdomain"] = "train";
  CHECK(pod_host(sts, dns).host.name == "train-0.train");
  sts["spec"]["hostname"] = "worker-a";
  CHECK(pod_host(sts, dns).host.name == "worker-a.train");
  auto plain = pod_host(pod("x"), dns);
  CHECK_FALSE(plain.usable);
  CHECK(plain.why_not.find("no spec.subdomain") == 0);
}

TEST_CASE("pod_hosts: hosts in natural pod-name order - pods sharing a host add slots", "[kubernetes]") {
  std::map<std::string, PodHost> pods;
  for (auto [name, ip] : std::vector<std::pair<std::string, std::string>>{
           {"w-10", "10.0.0.10"}, {"w-2", "10.0.0.2"}, {"w-1", "10.0.0.1"}, {"node-a", "10.0.1.1"}}) {
    pods[name] = pod_host(pod(name, ip), rules());
  }
  json unready = pod("w-3", "10.0.0.3");
  unready["status"]["conditions"][0]["status"] = "False";
  pods["w-3"] = pod_host(unready, rules());
  pods["w-1b"] = pod_host(pod("w-1b", "10.0.0.1"), rules());  // host networking: same address
  CHECK(hosts_of(pods) == std::vector<HostSpec>{{"10.0.1.1", 1}, {"10.0.0.1", 2}, {"10.0.0.2", 1}, {"10.0.0.10", 1}});
  CHECK(describe_usable(pods) ==
        "node-a -> 10.0.1.1:1, w-1 -> 10.0.0.1:1, w-1b -> 10.0.0.1:1, w-2 -> 10.0.0.2:1, w-10 -> 10.0.0.10:1");
  CHECK(describe_unusable(pods) == "w-3 (not Ready)");
  CHECK(natural_less("w-2", "w-10"));
  CHECK_FALSE(natural_less("w-10", "w-2"));
  CHECK(natural_less("a", "b"));
  CHECK(natural_less("w-1", "w-1b"));
  CHECK(natural_less("w-01", "w-1"));  // equal numbers: tie broken by text
}

// Issue 29 item 8: a pod IP from the API carrying a newline or an escape
// sequence is not used, and the reason shows it escaped (no forged line).
TEST_CASE("pod_hosts: a pod IP with control characters is refused, shown escaped", "[kubernetes]") {
  auto p = pod_host(pod("w-0", "10.0.0.1\n[0]<stdout>:forged"), rules());
  CHECK_FALSE(p.usable);
  INFO(p.why_not);
  CHECK(p.why_not.find('\n') == std::string::npos);
  CHECK(p.why_not.find("10.0.0.1\\n[0]<stdout>:forged") != std::string::npos);
  p = pod_host(pod("w-1", "10.0.0.\x1b[2J"), rules());
  CHECK_FALSE(p.usable);
  CHECK(p.why_not.find('\x1b') == std::string::npos);
  auto phase = pod("w-2");
  phase["status"]["phase"] = "Pending\x1b[31m";
  CHECK(pod_host(phase, rules()).why_not == "phase Pending\\x1b[31m");
}

// Issue 32: a pod that comes back (a StatefulSet's new pod under the same
// name: a new UID; the same pod's container restarted: restartCount + 1; a
// new IP) has a new incarnation, which the elastic driver treats as a
// fresh host.
TEST_CASE("pod_hosts: incarnations change with the pod's UID, IP and container restarts", "[kubernetes]") {
  json p = pod("w-0", "10.0.0.5");
  p["metadata"]["uid"] = "uid-1";
  p["status"]["containerStatuses"] = json::array({{{"name", "w"}, {"restartCount", 0}}});
  auto incarnation = [](const json& j) {
    std::map<std::string, PodHost> pods{{"w-0", pod_host(j, rules())}};
    return incarnations_of(pods);
  };
  const auto first = incarnation(p);
  CHECK(first == std::map<std::string, std::string>{{"10.0.0.5", "uid-1/10.0.0.5/0"}});
  json restarted = p;
  restarted["status"]["containerStatuses"][0]["restartCount"] = 1;
  CHECK(incarnation(restarted).at("10.0.0.5") == "uid-1/10.0.0.5/1");
  json recreated = p;
  recreated["metadata"]["uid"] = "uid-2";
  CHECK(incarnation(recreated).at("10.0.0.5") == "uid-2/10.0.0.5/0");
  // DNS names: the host keeps its name, the incarnation tells the pods apart.
  PodHostRules dns = rules();
  dns.host_names = KubernetesHostNames::Dns;
  p["spec"]["subdomain"] = "svc";
  recreated["spec"]["subdomain"] = "svc";
  recreated["status"]["podIP"] = "10.0.0.9";
  std::map<std::string, PodHost> a{{"w-0", pod_host(p, dns)}}, b{{"w-0", pod_host(recreated, dns)}};
  CHECK(hosts_of(a) == hosts_of(b));
  CHECK(incarnations_of(a).at("w-0.svc") == "uid-1/10.0.0.5/0");
  CHECK(incarnations_of(b).at("w-0.svc") == "uid-2/10.0.0.9/0");
  // Not usable: no incarnation.
  json unready = p;
  unready["status"]["conditions"][0]["status"] = "False";
  CHECK(incarnation(unready).empty());
}
