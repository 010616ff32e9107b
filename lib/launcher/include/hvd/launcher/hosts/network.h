#pragma once
/// Which hosts are this machine, and which address workers should use to
/// reach hvdrun. Nothing here probes other hosts (horovodrun's
/// host-to-host interface probing costs seconds); name resolution, where
/// needed, is bounded in time so a broken resolver cannot hang the launch.
#include <chrono>
#include <string>
#include <vector>

#include "hvd/common/net.h"
#include "hvd/launcher/hosts/hosts.h"

namespace hvd::launcher {

/// An address assigned to a local network interface (hvd::net::interface_addresses).
using InterfaceAddress = net::InterfaceAddress;

/// All addresses of all local interfaces that are up.
std::vector<InterfaceAddress> local_interface_addresses();

/// True for localhost, 127.0.0.0/8, ::1, this machine's host name (short or
/// as gethostname reports it), any address of a local interface, and names
/// that resolve (within `resolve_timeout`) only to such addresses. A name
/// that does not resolve in time counts as remote. Brackets around IPv6
/// literals are accepted.
bool is_local_host(const std::string& host,
                   std::chrono::milliseconds resolve_timeout = std::chrono::milliseconds(2000));

/// The source address the kernel would use to reach `host` (a UDP socket is
/// connect()ed, nothing is sent). Throws hvd::IoError if the name does not
/// resolve in time or there is no route.
std::string route_source_address(const std::string& host,
                                 std::chrono::milliseconds resolve_timeout = std::chrono::milliseconds(2000));

/// The address workers use to reach hvdrun:
///  1. from `interfaces` (--network-interface, in order): the first that
///     exists here and has an IPv4 address (else an IPv6 one); names that do
///     not exist here are skipped (hosts may name interfaces differently);
///     none usable -> hvd::InvalidArgument listing the interfaces that exist;
///  2. else the route source address towards the first remote host;
///  3. else (all hosts local) "127.0.0.1".
std::string choose_driver_address(const std::vector<std::string>& interfaces, const std::vector<HostSpec>& hosts);

}  // namespace hvd::launcher
