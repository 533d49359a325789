// The one file interface all KV disk I/O goes through, so that tests can inject faults (short
// reads, EIO, ENOSPC, flipped bits) without touching the store. The POSIX implementation opens
// files O_DIRECT and batches reads and writes through io_uring, falling back where the system
// refuses, and says which in io_info(), so the caller can report it:
//
//   O_DIRECT refused (tmpfs, some FUSE): buffered I/O, posix_fadvise(DONTNEED) after each write
//   io_uring unavailable (old kernel, seccomp): one pread (pwrite) per request
//
// LEOAM_NO_IO_URING=1 in the environment forces the pread path (read at open), so tests and
// benchmarks can measure both. Files are created with mode 0600, directories with 0700.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "core/status.h"

namespace leoam {

// O_DIRECT granularity: the logical block size of every disk we target (4Kn and 512e alike). In
// direct mode every offset, length and buffer address must be a multiple of it. Callers align
// always (they cannot know the mode in advance); buffered mode accepts anything.
inline constexpr size_t kDirectIoAlignment = 4096;

constexpr uint64_t align_up(uint64_t n, uint64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

struct ReadRequest {
  uint64_t offset = 0;
  size_t n_bytes = 0;
  void* dst = nullptr;
};

struct WriteRequest {
  uint64_t offset = 0;
  size_t n_bytes = 0;
  const void* src = nullptr;
};

// How a file is really being accessed.
struct FileIoInfo {
  bool direct = false;        // O_DIRECT in effect
  bool uring = false;         // reads (and direct writes) batched through io_uring
  std::string fallback_note;  // empty, or why direct/uring is off ("O_DIRECT refused by the file system ...")
};

// Used by one thread at a time (the io_uring ring is per file and not shared); different files
// may be used from different threads.
class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;

  virtual const std::string& path() const = 0;
  virtual FileIoInfo io_info() const = 0;

  // Reads every request in full, up to the queue depth in flight at once: when the OS answers
  // part of a request, the rest is asked for again. A request reaching past the end of the file
  // is an error (kIoError, "short read"), as is any errno; the message names the path, offset and
  // length. The bytes of a failed batch are unspecified, but no read of it is still in flight.
  // In direct mode a misaligned request is a caller bug, rejected with kInvalidArgument before
  // any I/O.
  [[nodiscard]] virtual Status read(std::span<const ReadRequest> requests) = 0;
  // read() in two halves, so that the caller can compute while the reads are in flight:
  // start_reads() queues the requests and returns without waiting for them where the file batches
  // through io_uring (up to the queue depth go out at once; the rest when finish_reads() reaps the
  // first); finish_reads() waits for all of them and returns what read() would have. Every
  // start_reads() that returns ok must be followed by finish_reads() before any other call on
  // the file; until then the requests and their buffers belong to the file, and must stay valid.
  // This default starts nothing: finish_reads() calls read().
  [[nodiscard]] virtual Status start_reads(std::span<const ReadRequest> requests) {
    started_ = requests;
    return Status::ok();
  }
  [[nodiscard]] virtual Status finish_reads() { return read(std::exchange(started_, {})); }
  // Writes [src, src + n_bytes) at `offset`, extending the file as needed: all of it, or fails
  // (ENOSPC and EIO come back as kIoError naming the path, the offset and the errno text; a
  // misaligned write in direct mode as kInvalidArgument, before any I/O).
  [[nodiscard]] virtual Status write(uint64_t offset, const void* src, size_t n_bytes) = 0;
  // Writes every request as write() would; where reads are batched (io_uring), up to the queue
  // depth are in flight at once. On an error, the requests other than the one it names may or
  // may not have been written. This default writes them one after the other.
  [[nodiscard]] virtual Status write_batch(std::span<const WriteRequest> requests) {
    for (const WriteRequest& w : requests) LEOAM_RETURN_IF_ERROR(write(w.offset, w.src, w.n_bytes));
    return Status::ok();
  }
  // Makes written data durable (fdatasync).
  [[nodiscard]] virtual Status sync() = 0;
  virtual Result<uint64_t> size() const = 0;

 private:
  std::span<const ReadRequest> started_;  // the default start_reads()'s requests, read at finish_reads()
};

struct FileOpenOptions {
  bool create = false;     // create the file if missing (mode 0600)
  bool truncate = false;   // empty an existing file
  bool read_only = false;
  bool direct = true;      // try O_DIRECT; fall back to buffered + fadvise where refused
  bool uring = true;       // try io_uring for read (and direct write) batches; fall back to pread/pwrite
  int queue_depth = 32;    // io_uring entries: requests in flight per read() batch
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;

  virtual Result<std::unique_ptr<RandomAccessFile>> open(const std::string& path, const FileOpenOptions& options) = 0;
  // Removes a file; a missing file is not an error.
  [[nodiscard]] virtual Status remove(const std::string& path) = 0;
  // Creates `path` and its missing parents (mode 0700); an existing directory is fine.
  [[nodiscard]] virtual Status create_dirs(const std::string& path) = 0;
  virtual bool exists(const std::string& path) = 0;
};

// The process's real file system (POSIX, io_uring where available). Stateless; thread-safe.
FileSystem& posix_file_system();

}  // namespace leoam
