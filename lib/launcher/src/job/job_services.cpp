#include "hvd/launcher/job/job_services.h"

#include "hvd/common/error.h"
#include "hvd/common/logging.h"
#include "hvd/common/secret.h"
#include "hvd/launcher/hosts/network.h"
#include "hvd/launcher/options/cli.h"
#include "hvd/launcher/process/report.h"

#include <spdlog/spdlog.h>

namespace hvd::launcher {

namespace {

/// Logging first: the signal guard's member initialiser follows.
JobServicesOptions with_logging(JobServicesOptions options) {
  if (options.start_logging) {
    options.start_logging();
  } else {
    init_logging("hvdrun", options.verbose ? spdlog::level::debug : spdlog::level::info);
  }
  return options;
}

}  // namespace

JobServicesOptions job_services_options(const Options& options) {
  JobServicesOptions out;
  out.start_logging = [&options] { init_launcher_logging(options); };
  out.verbose = options.verbose;
  out.output_filename = options.output_filename;
  out.prefix_output_with_timestamp = options.prefix_output_with_timestamp;
  out.events_file = options.events_file;
  out.network_interfaces = options.network_interfaces;
  out.insecure_store = options.insecure_store;
  out.start_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(options.start_timeout);
  out.kill_grace = options.kill_grace;
  return out;
}

JobServices::JobServices(JobServicesOptions options) : options_(with_logging(std::move(options))) {}

JobServices::~JobServices() {
  signals_.stop_watching();
  if (store_) store_->stop();
}

int JobServices::run(const std::function<int()>& body) {
  int code = exit_code::kInternal;
  try {
    code = body();
  } catch (const JobError& e) {
    report_error(e.what());
    code = e.code();
  }
  return finish(code);
}

void JobServices::open_output(int num_workers, bool lazy_worker_dirs) {
  try {
    OutputOptions oo;
    oo.num_workers = num_workers;
    oo.lazy_worker_dirs = lazy_worker_dirs;
    oo.timestamp = options_.prefix_output_with_timestamp;
    oo.directory = options_.output_filename;
    output_ = std::make_unique<OutputRouter>(oo);
  } catch (const IoError& e) {
    throw JobError(exit_code::kUsage, std::string("--output-filename: ") + e.what());
  }
  open_events();
}

void JobServices::open_events() {
  try {
    events_ = open_event_log(options_.events_file ? &*options_.events_file : nullptr);
  } catch (const IoError& e) {
    throw JobError(exit_code::kUsage, e.what());
  }
}

std::string JobServices::choose_address(const std::vector<HostSpec>& hosts) {
  try {
    return choose_address_now(hosts);
  } catch (const InvalidArgument& e) {
    throw JobError(exit_code::kUsage, e.what());
  } catch (const std::exception& e) {
    throw JobError(exit_code::kLaunch, e.what());
  }
}

std::string JobServices::choose_address_now(const std::vector<HostSpec>& hosts) const {
  return choose_driver_address(options_.network_interfaces, hosts);
}

void JobServices::start_store(const std::string& bind_address) {
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
    store_.reset();
    throw JobError(exit_code::kLaunch, "cannot start the rendezvous store on " + bind_address + ": " + e.what());
  }
}

JobServices::ServedStore JobServices::rebind_store(const std::string& address) {
  const uint16_t old_port = store_port();
  if (address == "127.0.0.1") return {&store_->store(), old_port};  // where it listens already
  store::ServerOptions so;
  so.bind_address = address;
  so.secret = secret_;
  so.allow_unauthenticated = options_.insecure_store;
  std::unique_ptr<store::HttpStoreServer> moved;
  for (uint16_t port : {old_port, uint16_t(0)}) {
    so.port = port;
    auto server = std::make_unique<store::HttpStoreServer>(so);
    try {
      server->start();
    } catch (const std::exception& e) {
      if (port == 0) throw;
      spdlog::debug("store: port {} is taken on {} ({}); using another", port, address, e.what());
      continue;
    }
    moved = std::move(server);
    break;
  }
  store_->stop();  // nothing reached it: no worker had started
  retired_store_ = std::move(store_);
  store_ = std::move(moved);
  spdlog::info("the rendezvous store moved from 127.0.0.1:{} to {}:{}", old_port, address, store_->port());
  return {&store_->store(), store_->port()};
}

uint16_t JobServices::store_port() const { return store_ ? store_->port() : 0; }

EnvMap JobServices::rendezvous_env(const std::string& driver_address) const {
  return launcher::rendezvous_env(driver_address, store_port(), secret_);
}

void JobServices::add_rendezvous_env(JobPlan& plan, const std::string& driver_address) const {
  launcher::add_rendezvous_env(plan, driver_address, store_port(), secret_);
}

int JobServices::supervise(std::vector<HostLaunch> hosts, std::optional<std::chrono::milliseconds> kill_grace) {
  SupervisorOptions so;
  so.start_timeout = options_.start_timeout;
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
