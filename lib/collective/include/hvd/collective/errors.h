#pragma once
/// Errors the collective API adds to hvd's hierarchy (hvd/common/error.h).
/// Every operation failure is one of:
///  * hvd::IoError        -- the communicator failed (a peer died, a link
///                           dropped). Every pending and later operation of
///                           the Context fails with it; rebuild to go on.
///  * hvd::TimeoutError   -- a tensor stalled past the stall shutdown time.
///  * MismatchError       -- ranks described the same name differently.
///  * JoinedError         -- some rank joined; only host allreduces can run.
///  * hvd::InvalidArgument-- the call itself was wrong (checked at submit).
///  * ShutdownError       -- the job was shut down before it ran.
#include "hvd/common/error.h"

namespace hvd::collective {

/// The same tensor name was submitted with different parameters on
/// different ranks; the message names the tensor and the ranks that disagree.
class MismatchError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

/// Some rank has joined (join()) and the operation is not one a joined rank
/// can take part in (only allreduce of host buffers and barrier can run until
/// every rank joined). Like Horovod's error there, an internal error, not a
/// bad argument.
class JoinedError : public Error {
 public:
  using Error::Error;
};

/// Some rank called shutdown() (or the Context was destroyed) before the
/// operation could run.
class ShutdownError : public Error {
 public:
  using Error::Error;
};

/// The process-wide API was used before hvd::init() or after shutdown().
class NotInitializedError : public Error {
 public:
  using Error::Error;
};

}  // namespace hvd::collective
