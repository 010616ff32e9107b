#include "hvd/launcher/job/job_services.h"

#include "hvd/common/error.h"
#include "hvd/common/logging.h"
#include "hvd/common/secret.h"
#include "hvd/launcher/hosts/network.h"
#include "hvd/launcher/options/cli.h"

#include <spdlog/spdlog.h>

#include <cstdio>

namespace hvd::launcher {

namespace {

void report(const std::string& message) { std::fprintf(stderr, "hvdrun: error: %s\n", message.c_str()); }

/// Logging first: the signal guard's member initialiser follows.
const Options& with_logging(const Options& options) {
  init_launcher_logging(options);
  return options;
}

}  // namespace

JobServices::JobServices(const Options& options) : options_(with_logging(options)) {}

JobServices::~JobServices() {
  signals_.stop_watching();
  if (store_) store_->stop();
}

int JobServices::open_output(int num_workers, bool lazy_worker_dirs) {
  try {
    OutputOptions oo;
    oo.num_workers = num_workers;
    oo.lazy_worker_dirs = lazy_worker_dirs;
    oo.timestamp = options_.prefix_output_with_timestamp;
    oo.directory = options_.output_filename;
    output_ = std::make_unique<OutputRouter>(oo);
  } catch (const IoError& e) {
    report(std::string("--output-filename: ") + e.what());
    return exit_code::kUsage;
  }
  return open_events();
}

int JobServices::open_events() {
  try {
    events_ = open_event_log(options_.events_file ? &*options_.events_file : nullptr);
  } catch (const IoError& e) {
    report(e.what());
    return exit_code::kUsage;
  }
  return exit_code::kOk;
}

int JobServices::choose_address(const std::vector<HostSpec>& hosts, std::string& address) {
  try {
    address = choose_driver_address(options_.network_interfaces, hosts);
    return exit_code::kOk;
  } catch (const InvalidArgument& e) {
    report(e.what());
    return exit_code::kUsage;
  } catch (const std::exception& e) {
    report(e.what());
    return exit_code::kLaunch;
  }
}

int JobServices::start_store(const std::string& bind_address) {
  secret_ = random_secret();
  store::ServerOptions so;
  so.bind_address = bind_address;
  so.port = 0;
  so.secret = secret_;
  so.allow_unauthenticated = options_.insecure_store;
  store_ = std::make_unique<store::HttpStoreServer>(so);
  try {
    store_->start();
  } catch (const std::exception& e) {
    report("cannot start the rendezvous store on " + bind_address + ": " + e.what());
    store_.reset();
    return exit_code::kLaunch;
  }
  return exit_code::kOk;
}

uint16_t JobServices::store_port() const { return store_ ? store_->port() : 0; }

EnvMap JobServices::rendezvous_env(const std::string& driver_address) const {
  return launcher::rendezvous_env(driver_address, store_port(), secret_);
}

int JobServices::supervise(std::vector<HostLaunch> hosts, std::optional<std::chrono::milliseconds> kill_grace) {
  SupervisorOptions so;
  so.start_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(options_.start_timeout);
  so.kill_grace = kill_grace.value_or(options_.kill_grace);
  so.events = events_.get();
  Supervisor supervisor(so, output_.get());
  signals_.watch([&supervisor](int sig) { supervisor.interrupt(sig); });
  struct StopWatching {
    SignalGuard& guard;
    ~StopWatching() { guard.stop_watching(); }  // before `supervisor` goes away
  } stop_watching{signals_};
  return supervisor.run(std::move(hosts));
}

void JobServices::emit(const std::string& event, std::initializer_list<std::pair<const char*, EventValue>> fields) {
  if (events_) events_->emit(event, fields);
}

int JobServices::finish(int code) {
  if (finished_) return code;
  finished_ = true;
  if (store_) store_->stop();
  if (events_) events_->emit("job_end", {{"code", code}});
  return code;
}

}  // namespace hvd::launcher
