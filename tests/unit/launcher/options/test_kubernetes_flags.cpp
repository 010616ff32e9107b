// The --kubernetes-* flags and the kubernetes: config section: a selector
// turns elastic mode on with every elastic rule; the other settings need it.
#include "options_test_util.h"

using namespace hvd::launcher;
using hvd_test::DiscoveryScript;
using hvd_test::parse_ok;
using hvd_test::TempFile;
using hvd_test::usage_error;

TEST_CASE("cli: --kubernetes-selector turns elastic mode on, with the other kubernetes settings", "[cli][kubernetes]") {
  const Options o = parse_ok({"-np", "2", "--max-np", "4", "--kubernetes-selector", "app=hvd,role in (w)",
                              "--kubernetes-namespace", "team-a", "--kubernetes-slots", "annotation:x.io/n",
                              "--kubernetes-host-names", "DNS", "--slots-per-host", "2", "cmd"});
  CHECK(o.elastic.enabled);
  CHECK(o.elastic.kubernetes.selector == "app=hvd,role in (w)");
  CHECK(o.elastic.kubernetes.namespace_name == "team-a");
  CHECK(o.elastic.kubernetes.slots.mode == KubernetesSlots::Mode::Annotation);
  CHECK(o.elastic.kubernetes.slots.annotation == "x.io/n");
  CHECK(o.elastic.kubernetes.host_names == KubernetesHostNames::Dns);
  CHECK(o.elastic.slots_per_host == 2);  // the default of auto slots
  CHECK(o.elastic.max_np == 4);
  const Options d = parse_ok({"--min-np", "1", "--kubernetes-selector", "app=hvd", "cmd"});
  CHECK(d.num_proc == 1);
  CHECK(d.elastic.kubernetes.slots.mode == KubernetesSlots::Mode::Auto);
  CHECK(d.elastic.kubernetes.host_names == KubernetesHostNames::Ip);
  CHECK_FALSE(d.elastic.kubernetes.namespace_name);
  CHECK(parse_ok({"-np", "1", "--kubernetes-selector", "a", "--kubernetes-slots", "gpu", "cmd"})
            .elastic.kubernetes.slots.mode == KubernetesSlots::Mode::Gpu);
  const Options fixed = parse_ok({"-np", "1", "--kubernetes-selector", "a", "--kubernetes-slots", "8", "cmd"});
  CHECK(fixed.elastic.kubernetes.slots.mode == KubernetesSlots::Mode::Fixed);
  CHECK(fixed.elastic.kubernetes.slots.count == 8);
}

TEST_CASE("cli: kubernetes usage errors are one line and exit 2", "[cli][kubernetes]") {
  DiscoveryScript script;
  CHECK(usage_error({"-np", "1", "--kubernetes-selector", "app=hvd", "-H", "a:1", "cmd"}) ==
        "--kubernetes-selector and -H/--hosts cannot be used together: the Kubernetes pods are the hosts");
  CHECK(usage_error({"-np", "1", "--kubernetes-selector", "app=hvd", "--hostfile", "hf", "cmd"}) ==
        "--kubernetes-selector and --hostfile cannot be used together: the Kubernetes pods are the hosts");
  CHECK(
      usage_error({"-np", "1", "--kubernetes-selector", "app=hvd", "--host-discovery-script", script.path(), "cmd"}) ==
      "--kubernetes-selector and --host-discovery-script cannot be used together: give one source of hosts");
  CHECK(usage_error({"-np", "1", "--kubernetes-selector", "app=hvd", "--mpi", "cmd"}) ==
        "--kubernetes-selector (elastic mode) cannot be used with --mpi: elastic jobs use hvdrun's own controller");
  CHECK(usage_error({"--kubernetes-selector", "app=hvd", "cmd"}).find("-np or --min-np is required") == 0);
  CHECK(usage_error({"-np", "1", "--kubernetes-namespace", "x", "cmd"}) ==
        "--kubernetes-namespace needs --kubernetes-selector");
  CHECK(usage_error({"-np", "1", "--kubernetes-slots", "gpu", "--host-discovery-script", script.path(), "cmd"}) ==
        "--kubernetes-slots needs --kubernetes-selector");
  CHECK(usage_error({"-np", "1", "--kubernetes-selector", " ", "cmd"}) ==
        "--kubernetes-selector: empty label selector (expected e.g. --kubernetes-selector app=hvdrun)");
  CHECK(usage_error({"-np", "1", "--kubernetes-selector", "a", "--kubernetes-namespace", "Team_A", "cmd"}) ==
        "--kubernetes-namespace: 'Team_A' is not a namespace name (lower-case letters, digits and '-', at most 63)");
  for (const char* bad : {"0", "-1", "two", "annotation:", "gpus", "99999999999"}) {
    INFO(bad);
    CHECK(usage_error({"-np", "1", "--kubernetes-selector", "a", "--kubernetes-slots", bad, "cmd"}) ==
          std::string("--kubernetes-slots: '") + bad + "' is not auto, gpu, annotation:KEY or a positive integer");
  }
  CHECK(usage_error({"-np", "1", "--kubernetes-selector", "a", "--kubernetes-host-names", "fqdn", "cmd"}) ==
        "--kubernetes-host-names: 'fqdn' is not ip or dns");
}

TEST_CASE("config: the kubernetes section - without a selector its keys are ignored with a warning",
          "[config][kubernetes]") {
  TempFile yaml("kubernetes:\n  selector: app=hvd\n  slots: gpu\n  host_names: dns\nelastic:\n  max_np: 8\n", ".yaml");
  const Options o = parse_ok({"-np", "2", "--config-file", yaml.path(), "cmd"});
  CHECK(o.elastic.enabled);
  CHECK(o.elastic.kubernetes.selector == "app=hvd");
  CHECK(o.elastic.kubernetes.slots.mode == KubernetesSlots::Mode::Gpu);
  CHECK(o.elastic.kubernetes.host_names == KubernetesHostNames::Dns);
  CHECK(o.elastic.max_np == 8);
  // The command line wins over the file.
  const Options c = parse_ok({"-np", "2", "--config-file", yaml.path(), "--kubernetes-selector", "app=x", "cmd"});
  CHECK(c.elastic.kubernetes.selector == "app=x");
  CHECK(c.elastic.kubernetes.slots.mode == KubernetesSlots::Mode::Gpu);
  // No selector: the other keys do nothing (a warning says so), not elastic.
  TempFile partial("kubernetes:\n  namespace: team\n  slots: '4'\n", ".yaml");
  const Options p = parse_ok({"-np", "2", "--config-file", partial.path(), "cmd"});
  CHECK_FALSE(p.elastic.enabled);
  CHECK_FALSE(p.elastic.kubernetes.namespace_name);
  CHECK(p.elastic.kubernetes.slots.mode == KubernetesSlots::Mode::Auto);
  TempFile bad("kubernetes:\n  selector: app=hvd\n  slots: [1]\n", ".yaml");
  CHECK(usage_error({"-np", "2", "--config-file", bad.path(), "cmd"}) ==
        bad.path() + ":3: kubernetes.slots: expected auto, gpu, annotation:KEY or a positive integer, got a list");
}
