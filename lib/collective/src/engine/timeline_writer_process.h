#pragma once
/// The timeline's writer process (docs/collective.md "Timeline"): forked by
/// the writer thread when the timeline starts, named hvd-timeline, it owns
/// the file. It reads frames ([u32 length][length bytes of complete items],
/// at most kTimelineMaxUnit bytes) from a socket and writes each one, with a
/// new closing bracket, over the previous one. A SIGKILL of the rank then
/// cannot interrupt a write: the process writes what it was sent and exits
/// when the socket ends (the rank closed it or died). A frame the rank did
/// not finish sending is dropped.
///
/// After fork() the process makes only system calls on memory allocated
/// before it (the rank has other threads), releases its copy of the rank's
/// memory and closes every descriptor of the rank's but the file and its
/// socket. It exits 0 at the end of the stream, or with the errno of a
/// failed write (the rank reports it).
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace hvd::collective::detail {

/// pwrite(2) of all `size` bytes at `offset`; false (errno set) on failure.
bool timeline_pwrite_all(int fd, const char* data, std::size_t size, int64_t offset);

/// The rank's side of a started writer process.
struct TimelineWriterProcess {
  pid_t pid = -1;
  int sock = -1;  ///< the rank's end of the socket: frames go here
};

/// Forks the writer process, which writes frames to `fd` from offset `pos`
/// (where the closing bracket starts). Call it from the thread that will
/// send the frames: the process keeps only that thread's stack and TLS.
/// The caller still holds `fd` (the process has its own copy) and may close
/// it. False (nothing started, nothing left open) with `error` set when the
/// socket, the buffer or the fork fails.
bool start_timeline_writer_process(int fd, int64_t pos, TimelineWriterProcess& out, std::string& error);

}  // namespace hvd::collective::detail
