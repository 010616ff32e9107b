#pragma once
/// Pods -> hosts (pure): which pods count, what each is called and how many
/// slots it offers (docs/kubernetes.md, "Built-in pod discovery"). The one
/// place of these rules: the built-in source (--kubernetes-selector) and
/// scripts/kubernetes/discover_hosts.sh (through `hvdrun
/// --kubernetes-pod-hosts`, pod_list_hosts.h) both apply them.
///
/// A pod counts when its phase is Running, its Ready condition is True and
/// it has no deletionTimestamp (it is not terminating). Its name is its
/// status.podIP (--kubernetes-host-names ip) or `<spec.hostname or
/// metadata.name>.<spec.subdomain>` (dns: the StatefulSet name through the
/// headless service; `service` replaces the subdomain). Slots
/// (--kubernetes-slots): auto = the annotation hvdrun.io/slots if present,
/// else the sum of the containers' nvidia.com/gpu limits if > 0, else
/// --slots-per-host or 1; gpu = that sum (a pod with none is not used);
/// annotation:KEY = that annotation (a pod without it is not used); N = N.
/// The script's auto asks another annotation (or none) and the GPUs only
/// when told (auto_annotation, auto_gpus), and a bad annotation there falls
/// back to the next source with a warning instead of leaving the pod out.
#include <nlohmann/json_fwd.hpp>

#include <map>
#include <string>
#include <vector>

#include "hvd/launcher/hosts/hosts.h"
#include "hvd/launcher/options/options.h"

namespace hvd::launcher::kube {

inline constexpr const char* kSlotsAnnotation = "hvdrun.io/slots";

struct PodHostRules {
  KubernetesSlots slots;
  KubernetesHostNames host_names = KubernetesHostNames::Ip;
  int default_slots = 1;  ///< --slots-per-host, else 1 (auto without annotation or GPUs)
  /// Dns names: `<name>.<service>` for every pod instead of its
  /// spec.subdomain (empty: the subdomain).
  std::string service;
  /// Auto: the annotation asked first (empty: none), and whether the GPU
  /// limits come next.
  std::string auto_annotation = kSlotsAnnotation;
  bool auto_gpus = true;
  /// Auto: an annotation that is empty counts as absent, and one that is not
  /// a positive integer falls back to the next source (PodHost::warning)
  /// instead of leaving the pod out.
  bool bad_annotation_falls_back = false;
};

/// One pod as discovery sees it.
struct PodHost {
  std::string pod;  ///< metadata.name
  bool usable = false;
  /// Why a pod is not used ("not Ready", "terminating", "phase Pending",
  /// "no pod IP yet", "annotation hvdrun.io/slots 'x' is not a positive
  /// integer"); empty when usable.
  std::string why_not;
  /// Dns names: not used because it has no spec.subdomain (and no service
  /// was given), so no DNS name.
  bool no_dns_name = false;
  /// A usable pod's slots came from a fallback: why ("annotation
  /// hvdrun.io/slots=many is not a positive integer; using 1 slots").
  std::string warning;
  HostSpec host;  ///< when usable
  /// "<uid>/<pod IP>/<sum of container restart counts>": changes when the
  /// pod is replaced (a StatefulSet's new pod keeps the name, not the UID)
  /// or its container restarts in place.
  std::string incarnation;
};

/// A slot count from text (an annotation, a GPU limit, --slots): a positive
/// integer up to a million, else 0.
int pod_count(const std::string& text);

/// Reads one pod object (the API's JSON). Never throws: a pod it cannot use
/// says why.
PodHost pod_host(const nlohmann::json& pod, const PodHostRules& rules);

/// The hosts of the usable pods, in pod-name order (numbers in names
/// compare as numbers: w-2 before w-10). Pods that share a host name (host
/// networking) add their slots to one host.
std::vector<HostSpec> hosts_of(const std::map<std::string, PodHost>& pods);

/// Host name -> the incarnations of its usable pods (joined by ','; pods in
/// name order), for DiscoveryResult::incarnations.
std::map<std::string, std::string> incarnations_of(const std::map<std::string, PodHost>& pods);

/// Compares pod names with runs of digits as numbers ("w-2" < "w-10").
bool natural_less(const std::string& a, const std::string& b);

/// "w-0 -> 10.0.0.5:2, w-1 -> 10.0.0.6:2" for logs (usable pods only), and
/// "w-2 (not Ready)" lists of the others.
std::string describe_usable(const std::map<std::string, PodHost>& pods);
std::string describe_unusable(const std::map<std::string, PodHost>& pods);

}  // namespace hvd::launcher::kube
