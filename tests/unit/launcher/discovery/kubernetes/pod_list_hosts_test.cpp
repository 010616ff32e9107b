// pod_list_hosts.h: hvdrun --kubernetes-pod-hosts, the pod rules that
// scripts/kubernetes/discover_hosts.sh applies to kubectl's pod list.
#include "hvd/launcher/discovery/kubernetes/pod_list_hosts.h"

#include "hvd/launcher/discovery/kubernetes/pod_hosts.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <sstream>

using namespace hvd::launcher;
using namespace hvd::launcher::kube;
using json = nlohmann::json;

namespace {

/// A StatefulSet pod as the API returns it: Running and Ready.
json pod(const std::string& name, const std::string& ip, long gpus = 0, const std::string& subdomain = "job") {
  json limits = json::object();
  if (gpus) limits["nvidia.com/gpu"] = std::to_string(gpus);
  json spec = {{"containers", json::array({{{"name", "w"}, {"resources", {{"limits", limits}}}}})}};
  if (!subdomain.empty()) {
    spec["subdomain"] = subdomain;
    spec["hostname"] = name;
  }
  return {{"metadata", {{"name", name}, {"annotations", json::object()}}},
          {"spec", spec},
          {"status",
           {{"phase", "Running"}, {"podIP", ip}, {"conditions", json::array({{{"type", "Ready"}, {"status", "True"}}})}}}};
}

struct Run {
  int status;
  std::string out;
  std::string err;
};

Run run(const std::vector<std::string>& args, const json& pods) {
  std::istringstream in(json{{"kind", "List"}, {"items", pods}}.dump());
  std::ostringstream out, err;
  const int status = pod_list_hosts(args, in, out, err);
  return {status, out.str(), err.str()};
}

}  // namespace

TEST_CASE("pod list hosts: the pods that count, named by DNS, --service or IP, in pod-name order", "[kubernetes]") {
  json pending = pod("job-3", "10.0.0.3");
  pending["status"]["phase"] = "Pending";
  json terminating = pod("job-5", "10.0.0.5");
  terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  json unready = pod("job-4", "10.0.0.4");
  unready["status"]["conditions"][0]["status"] = "False";
  const json pods = {pod("job-10", "10.0.0.10"), pod("job-2", "10.0.0.2"), pending, terminating, unready,
                     pod("job-1", "10.0.0.1")};
  Run r = run({}, pods);
  CHECK(r.status == 0);
  CHECK(r.out == "job-1.job:1\njob-2.job:1\njob-10.job:1\n");
  CHECK(r.err.empty());
  CHECK(run({"--service", "svc"}, pods).out == "job-1.svc:1\njob-2.svc:1\njob-10.svc:1\n");
  CHECK(run({"--ip", "--slots", "2"}, pods).out == "10.0.0.1:2\n10.0.0.2:2\n10.0.0.10:2\n");
  CHECK(run({}, json::array()).out.empty());
}

TEST_CASE("pod list hosts: slots from --slots, the GPU limits, an annotation with a fallback", "[kubernetes]") {
  json annotated = pod("job-1", "10.0.0.1", 2);
  annotated["metadata"]["annotations"]["hvdrun.io/slots"] = "3";
  json bad = pod("job-2", "10.0.0.2");
  bad["metadata"]["annotations"]["hvdrun.io/slots"] = "many";
  const json pods = {pod("job-0", "10.0.0.0", 4), annotated, bad};
  CHECK(run({"--slots", "2"}, pods).out == "job-0.job:2\njob-1.job:2\njob-2.job:2\n");
  CHECK(run({"--slots-from-gpu"}, pods).out == "job-0.job:4\njob-1.job:2\njob-2.job:1\n");
  Run r = run({"--slots-from-gpu", "--slots-annotation", "hvdrun.io/slots", "--prog", "discover_hosts.sh"}, pods);
  CHECK(r.status == 0);
  CHECK(r.out == "job-0.job:4\njob-1.job:3\njob-2.job:1\n");
  CHECK(r.err ==
        "discover_hosts.sh: pod job-2: annotation hvdrun.io/slots=many is not a positive integer; using 1 slots\n");
  // The annotation without the GPUs: --slots decides for the others.
  CHECK(run({"--slots-annotation", "hvdrun.io/slots", "--slots", "5"}, pods).out == "job-0.job:5\njob-1.job:3\njob-2.job:5\n");
}

TEST_CASE("pod list hosts: a pod without a DNS name, bad input and bad arguments are errors", "[kubernetes]") {
  const json pods = {pod("job-0", "10.0.0.0"), pod("loose", "10.0.0.9", 0, "")};
  Run r = run({"--prog", "discover_hosts.sh"}, pods);
  CHECK(r.status == 2);
  CHECK(r.out.empty());
  CHECK(r.err ==
        "discover_hosts.sh: error: pod loose has no spec.subdomain (not a StatefulSet pod?); pass --service NAME or "
        "--ip\n");
  CHECK(run({"--ip"}, pods).out == "10.0.0.0:1\n10.0.0.9:1\n");
  CHECK(run({"--service", "svc"}, pods).out == "job-0.svc:1\nloose.svc:1\n");

  std::istringstream garbage("not json");
  std::ostringstream out, err;
  CHECK(pod_list_hosts({}, garbage, out, err) == 1);
  CHECK(err.str() == "hvdrun: error: the input is not a pod list (kubectl get pods -o json)\n");
  CHECK(run({"--slots", "0"}, pods).status == 2);
  CHECK(run({"--bogus"}, pods).status == 2);
  CHECK(run({"--service"}, pods).status == 2);
}

TEST_CASE("pod rules: the built-in source's auto slots leave a pod with a bad annotation out", "[kubernetes]") {
  json bad = pod("job-2", "10.0.0.2");
  bad["metadata"]["annotations"]["hvdrun.io/slots"] = "many";
  PodHostRules rules;  // --kubernetes-slots auto
  const PodHost p = pod_host(bad, rules);
  CHECK_FALSE(p.usable);
  CHECK(p.why_not == "annotation hvdrun.io/slots 'many' is not a positive integer");
  rules.bad_annotation_falls_back = true;  // the script's rule
  const PodHost q = pod_host(bad, rules);
  CHECK(q.usable);
  CHECK(q.host == HostSpec{"10.0.0.2", 1});
  CHECK(q.warning == "annotation hvdrun.io/slots=many is not a positive integer; using 1 slots");
}
