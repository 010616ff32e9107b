#pragma once
/// OCI Data Science's variables of a MAIN or WORKER run as the compose file
/// sets them (conf/oci/docker-compose.yaml). Shared by the OCI platform and
/// job-mode tests.
#include <map>
#include <string>

namespace hvd::launcher::fakes {

inline std::map<std::string, std::string> oci_compose_env(const std::string& mode = "MAIN") {
  return {{"OCI__MODE", mode},
          {"OCI__WORK_DIR", "/work"},
          {"OCI__WORKER_COUNT", "1"},
          {"OCI__ENTRY_SCRIPT", "/code/train.py"},
          {"OCI__ENTRY_SCRIPT_ARGS", ""},
          {"OCI__SYNC_DIR", "/work/sync"},
          {"MIN_NP", "2"},
          {"MAX_NP", "2"},
          {"SLOTS", "1"},
          {"WORKER_PORT", "12345"},
          {"START_TIMEOUT", "600"},
          {"ENABLE_TIMELINE", "0"},
          {"HOROVOD_ARGS", "--verbose"}};
}

}  // namespace hvd::launcher::fakes
