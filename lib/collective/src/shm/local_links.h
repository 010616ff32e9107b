#pragma once
// The hook where a communicator chooses the link to each peer: after the
// TCP mesh is formed, peers on this host get shared-memory links
// (lib/transport shm.h) instead, unless HVD_TRANSPORT=tcp.
#include "hvd/collective/comm.h"
#include "hvd/common/io.h"

#include <memory>
#include <vector>

namespace hvd::transport {
class Link;
}

namespace hvd::collective::detail {

/// `links` has one entry per rank (null for our own), each a connected,
/// authenticated TCP link. Every rank exchanges a small hello with every
/// peer over those links (its host identity, or none when shared memory is
/// off for it); pairs that share a host then pair over an abstract AF_UNIX
/// socket and their TCP links are replaced by shared-memory links. Logs
/// the chosen data path (one line at info on the lowest local rank, with
/// --verbose; debug elsewhere). `use_shm` false still takes part in the
/// hello (so peers stay on TCP with us). Throws IoError / TimeoutError when
/// pairing fails.
void choose_local_links(std::vector<std::unique_ptr<transport::Link>>& links, const CommOptions& options, bool use_shm,
                        Deadline deadline);

}  // namespace hvd::collective::detail
