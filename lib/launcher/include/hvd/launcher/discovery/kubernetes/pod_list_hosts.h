#pragma once
/// `hvdrun --kubernetes-pod-hosts`: the pod rules (pod_hosts.h) applied to a
/// pod list on stdin, for scripts/kubernetes/discover_hosts.sh, which gets
/// the list through kubectl and prints what this prints (docs/kubernetes.md,
/// "Discovery through kubectl"). So the script and the built-in
/// --kubernetes-selector source decide with the same code.
///
///   hvdrun --kubernetes-pod-hosts [--ip | --service NAME] [--slots N]
///          [--slots-from-gpu] [--slots-annotation KEY] [--prog NAME]
///          < `kubectl get pods -o json`
///
/// Prints one `host:slots` line per host of the usable pods (pod-name
/// order, numbers as numbers) on stdout. Names: the pod IP (--ip), else
/// `<pod>.<service>` (--service), else `<pod>.<spec.subdomain>`. Slots: the
/// annotation KEY when present (one that is not a positive integer: a
/// warning, and the next source decides), else the nvidia.com/gpu limits
/// when > 0 (--slots-from-gpu), else N (default 1). Warnings and errors go
/// to stderr, each line starting with `NAME: ` (--prog; default hvdrun).
/// Exit status: 0; 1 the input is not a pod list; 2 a usage error, or a
/// usable pod without a DNS name (no spec.subdomain, no --service, no --ip).
#include <iosfwd>
#include <string>
#include <vector>

namespace hvd::launcher::kube {

/// The mode over streams (tests): `args` are the words after
/// --kubernetes-pod-hosts.
int pod_list_hosts(const std::vector<std::string>& args, std::istream& in, std::ostream& out, std::ostream& err);

/// `hvdrun --kubernetes-pod-hosts ...` (argv[1] is that word): stdin,
/// stdout, stderr.
int pod_list_hosts_main(int argc, char** argv);

}  // namespace hvd::launcher::kube
