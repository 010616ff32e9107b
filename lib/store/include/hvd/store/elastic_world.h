#pragma once
/// The elastic membership contract between hvdrun (which decides who is in
/// the job) and the collective library (which re-forms communicators).
/// Both sides only meet in the job's authenticated rendezvous store, so this
/// header is the whole protocol (docs/elastic.md, "Protocol"):
///
///  * hvdrun publishes world versions 1, 2, 3, ... in order. Version v is the
///    JSON value of world_key(v) (written first) and then "elastic/version"
///    is set to v (decimal). A key world_key(v) never changes once written;
///    hvdrun erases it, and everything under comm_prefix(v), once no live
///    worker can use world v any more (ElasticDriver::oldest_world_in_use).
///  * A worker process is identified by HVDRUN_WORKER_ID (stable for the
///    process's life; a restarted slot gets a new id). A freshly started
///    worker sets ready_key(id) once it can take part, then waits for the
///    first world that lists its id. hvdrun admits it in the next version.
///  * Members of world v rendezvous under comm_prefix(v) with the rank,
///    local and cross ranks the world gives them. A member learns that a
///    newer world exists by waiting on world_key(v + 1) (a long-poll over
///    the authenticated store: no file polling, no extra port).
///  * A member that leaves world v with no newer world published (its
///    communicator failed, or v did not form) writes reset_key(v, id);
///    when every live member of v did, hvdrun publishes v + 1 with them.
///  * A world with `final` set ends the job: no member re-forms after it.
///  * A world with `hold` set is never formed: hvdrun publishes one when
///    workers must drain but too few would remain for a world (--min-np).
///    Members raise HostsUpdatedInterrupt at their next commit as for any
///    newer world, then wait (keeping their live state) for the next world
///    that lists them; a drained worker finds itself not listed and leaves.
///  * A world's `draining` list names workers it no longer lists that are
///    still running and leave at their next commit (a host discovery no
///    longer lists: Horovod's scale-down, no rollback). A member of an older
///    world does not treat their absence as a failure; it raises
///    HostsUpdatedInterrupt at its next commit like for a scale-up. If one
///    of them fails or overstays hvdrun's drain timeout before then, hvdrun
///    writes drain_failed_key(id) and the members abort that world at once.
///    A draining worker whose own world failed before that commit (a peer
///    died) does not leave at once: it waits until a newer world lists it
///    as a member (hvdrun called it back: nobody else holds the trained
///    state), stops listing it as draining, or has formed (formed_key)
///    listing another worker among its `holders` -- then it leaves. (A
///    worker that never completed a State::sync holds nothing worth
///    keeping and leaves at once.)
///  * "Holding the trained state" is decided by hvdrun from synced_key: a
///    member that completed State::sync in world v writes v there; it holds
///    the job's trained state when world v listed a worker that did (its
///    `holders`), or when no running worker did (the job's first world, or
///    after every holder was lost: the members' own state is all there
///    is). An arrival barrier that completed (formed_key) is not enough: a
///    newcomer whose world failed during the sync has only its initial
///    state.
#include <cstdint>
#include <string>
#include <vector>

namespace hvd::store::elastic {

/// Latest published version, as decimal text. Absent before version 1.
inline constexpr const char* kVersionKey = "elastic/version";

/// "elastic/world/<v>": the JSON of World v.
std::string world_key(uint64_t version);

/// "elastic/ready/<worker_id>": set by a new worker once it is ready to join.
std::string ready_key(const std::string& worker_id);

/// "elastic/gen<v>/": the store prefix members of world v rendezvous under.
std::string comm_prefix(uint64_t version);

/// comm_prefix(v) + "formed": written by the last member of world v to
/// arrive, once every member did (the library's join barrier), or by the
/// one member of a world of one once its Context exists; hvdrun reads it to
/// know which worlds formed, a stranded draining worker to know that
/// another holder of the trained state is in a newer world.
std::string formed_key(uint64_t version);

/// comm_prefix(v) + "reset/<worker_id>": written by a member of world v that
/// left it with no newer world to go to (its communicator failed while
/// every process may still be alive -- a network blip -- or the world did
/// not form). Its value is one line: what the member saw. Once every live
/// member of the newest world wrote it, hvdrun publishes a new world with
/// the same members (Horovod's driver does the same once every worker
/// recorded a failure).
std::string reset_key(uint64_t version, const std::string& worker_id);

/// comm_prefix(v) + "failure/first": the first failure of world v's
/// communicator, as its ranks agreed on it (collective::FailureBoard, which
/// writes "<prefix>failure/first" for any communicator). hvdrun names it
/// when it re-forms a failed world.
std::string failure_key(uint64_t version);

/// "elastic/drain-failed/<worker_id>": written by hvdrun when a draining
/// worker (World::draining) failed or was stopped before it left at a
/// commit. Its value is one line: what happened. Members of a world that
/// still lists it abort that world's communicator.
std::string drain_failed_key(const std::string& worker_id);

/// A counter hvdrun adds 1 to right after each drain_failed_key it writes,
/// so members watching draining workers read one key per watch slice, and
/// their ids' keys only when it changed.
inline constexpr const char* kDrainFailuresKey = "elastic/drain-failures";

/// "elastic/left/<worker_id>": written by a worker once it learned that the
/// newest world no longer lists it (just before its reset() throws
/// WorkerRemovedError). Its value is the version of that world. hvdrun
/// reads it when the worker exits: a draining worker that wrote it left at
/// a commit, whatever its exit status (a script may let the error end it).
std::string left_key(const std::string& worker_id);

/// "elastic/synced/<worker_id>": written by a worker each time it completed
/// State::sync (or, for programs without a State, hvd_elastic_state_synced)
/// in a world; its value is that world's version (decimal). hvdrun reads it
/// to know who holds the job's trained state (the header comment).
std::string synced_key(const std::string& worker_id);

/// One worker's place in a world. hvdrun computes the local and cross ranks
/// with the placement rule static jobs use (horovodrun's; the launcher's
/// plan/placement.h); this contract only carries them.
struct Member {
  std::string worker_id;
  std::string host;
  int rank = 0;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
  bool operator==(const Member& o) const {
    return worker_id == o.worker_id && host == o.host && rank == o.rank && local_rank == o.local_rank &&
           local_size == o.local_size && cross_rank == o.cross_rank && cross_size == o.cross_size;
  }
};

/// One version of the job's membership. Members are ordered by rank and
/// ranks are 0..size-1.
struct World {
  uint64_t version = 0;
  std::vector<Member> members;
  /// One line for logs: why this version exists ("worker h1#2 failed").
  std::string reason;
  /// The job is ending; members must not wait for another version.
  bool final = false;
  /// Workers not listed in this world that are still running and leave at
  /// their next commit (see the header comment). Never a member's id.
  std::vector<std::string> draining;
  /// Never formed: members wait for the next world (see the header comment).
  bool hold = false;
  /// Members hvdrun knew, when it published this world, to hold the job's
  /// trained state (synced_key), in rank order. Each is a member.
  std::vector<std::string> holders;

  int size() const { return static_cast<int>(members.size()); }
  /// The member with this id, or null.
  const Member* find(const std::string& worker_id) const;
};

/// JSON text of a world.
std::string encode_world(const World& world);

/// Parses encode_world's output. Throws hvd::InvalidArgument with a one-line
/// reason on malformed input (bad JSON, missing fields, ranks that are not
/// exactly 0..size-1 in order, duplicate worker ids, a draining id that is
/// empty, repeated or a member's, a holder that is not a member or is
/// repeated).
World decode_world(const std::string& text);

}  // namespace hvd::store::elastic
