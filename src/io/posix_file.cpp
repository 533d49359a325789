// The POSIX FileSystem: O_DIRECT files whose read batches and write batches go through a
// per-file io_uring, with the fallbacks described in file.h (buffered + fadvise, pread/pwrite).
#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "io/file.h"

namespace leoam {

namespace {

// The most one read or write syscall is asked for. Linux moves at most 0x7ffff000 bytes per call
// anyway, and io_uring's length is 32 bits; 1 GiB is a multiple of kDirectIoAlignment, so what
// remains of a longer request stays aligned for O_DIRECT.
constexpr size_t kMaxIoBytes = size_t{1} << 30;

bool is_aligned(uint64_t n) { return n % kDirectIoAlignment == 0; }

std::string errno_text(int err) { return std::strerror(err); }

void append_note(std::string& notes, const std::string& note) {
  if (!notes.empty()) notes += "; ";
  notes += note;
}

// "<path>: read of 65536 bytes at offset 131072 failed: Input/output error"
Status op_failure(const std::string& path, const char* op, uint64_t offset, size_t n_bytes,
                  const std::string& why) {
  return io_error(path + ": " + op + " of " + std::to_string(n_bytes) + " bytes at offset " +
                  std::to_string(offset) + " failed: " + why);
}

int open_retrying(const std::string& path, int flags) {
  int fd;
  do {
    fd = ::open(path.c_str(), flags, 0600);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

class PosixFile final : public RandomAccessFile {
 public:
  PosixFile(std::string path, int fd, bool read_only, bool direct, std::string fallback_note)
      : path_(std::move(path)), fd_(fd), read_only_(read_only) {
    info_.direct = direct;
    info_.fallback_note = std::move(fallback_note);
  }
  ~PosixFile() override {
    // read() never returns with requests in flight (nor finish_reads(), which must follow every
    // start_reads()), so tearing the ring down cannot leave the kernel writing into a caller's
    // buffer. A started batch the caller never finished is waited for here, for the same reason.
    if (started_uring_) (void)drive(started_pass_);
    if (info_.uring) io_uring_queue_exit(&ring_);
    ::close(fd_);
  }
  PosixFile(const PosixFile&) = delete;
  PosixFile& operator=(const PosixFile&) = delete;

  // Sets up the ring, or records why reads will use pread instead.
  void init_uring(int queue_depth) {
    const char* no_uring = std::getenv("LEOAM_NO_IO_URING");
    if (no_uring != nullptr && std::strcmp(no_uring, "1") == 0) {
      append_note(info_.fallback_note, "io_uring disabled by LEOAM_NO_IO_URING=1: pread");
      return;
    }
    const int ret = io_uring_queue_init(static_cast<unsigned>(queue_depth), &ring_, 0);
    if (ret < 0) {
      append_note(info_.fallback_note, "io_uring unavailable (" + errno_text(-ret) + "): pread");
      return;
    }
    info_.uring = true;
    slots_.resize(static_cast<size_t>(queue_depth));
    free_slots_.reserve(slots_.size());
  }

  const std::string& path() const override { return path_; }
  FileIoInfo io_info() const override { return info_; }

  Status read(std::span<const ReadRequest> requests) override {
    for (const ReadRequest& r : requests) {
      LEOAM_RETURN_IF_ERROR(check_alignment("read", r.offset, r.n_bytes, r.dst));
    }
    if (info_.uring) return run_uring(requests);
    return run_sync(requests);
  }

  // Through the ring: the first queue_depth requests submitted now, the rest by drive(). Without
  // it, the default: read() in finish_reads().
  Status start_reads(std::span<const ReadRequest> requests) override {
    if (!info_.uring) return RandomAccessFile::start_reads(requests);
    for (const ReadRequest& r : requests) {
      LEOAM_RETURN_IF_ERROR(check_alignment("read", r.offset, r.n_bytes, r.dst));
    }
    started_uring_ = true;
    started_pass_ = begin_pass(requests);
    // A failed submit leaves the entries queued: drive() submits them again and handles the error.
    if (started_pass_.n_in_flight > 0) (void)io_uring_submit(&ring_);
    return Status::ok();
  }

  Status finish_reads() override {
    if (!std::exchange(started_uring_, false)) return RandomAccessFile::finish_reads();
    return drive(started_pass_);
  }

  Status write(uint64_t offset, const void* src, size_t n_bytes) override {
    if (read_only_) return invalid_argument(path_ + ": write to a file opened read-only");
    LEOAM_RETURN_IF_ERROR(check_alignment("write", offset, n_bytes, src));
    LEOAM_RETURN_IF_ERROR(write_pwrite(offset, src, n_bytes));
    // Without O_DIRECT the written pages would stay in the page cache and crowd out the host
    // tier's memory; dropping them keeps buffered mode close to direct I/O. Advisory only, so a
    // failure changes nothing the caller could act on.
    if (!info_.direct && n_bytes > 0) {
      (void)::posix_fadvise(fd_, static_cast<off_t>(offset), static_cast<off_t>(n_bytes),
                            POSIX_FADV_DONTNEED);
    }
    return Status::ok();
  }

  // Direct writes through the ring; buffered ones one write() at a time (each with its fadvise).
  Status write_batch(std::span<const WriteRequest> requests) override {
    if (read_only_) return invalid_argument(path_ + ": write to a file opened read-only");
    for (const WriteRequest& w : requests) {
      LEOAM_RETURN_IF_ERROR(check_alignment("write", w.offset, w.n_bytes, w.src));
    }
    if (info_.uring && info_.direct) return run_uring(requests);
    return RandomAccessFile::write_batch(requests);
  }

  Status sync() override {
    if (::fdatasync(fd_) != 0) return io_error(path_ + ": fdatasync failed: " + errno_text(errno));
    return Status::ok();
  }

  Result<uint64_t> size() const override {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) return io_error(path_ + ": cannot stat: " + errno_text(errno));
    return static_cast<uint64_t>(st.st_size);
  }

 private:
  // One request in flight in the ring: which request, and how many of its bytes have arrived.
  struct Slot {
    size_t request = 0;
    size_t n_done = 0;
  };

  // A caller bug in direct mode, named clearly rather than left to the kernel's bare EINVAL.
  Status check_alignment(const char* op, uint64_t offset, size_t n_bytes, const void* buffer) const {
    if (!info_.direct) return Status::ok();
    std::string bad;
    if (!is_aligned(offset)) bad += " offset";
    if (!is_aligned(n_bytes)) bad += " length";
    if (!is_aligned(reinterpret_cast<uintptr_t>(buffer))) bad += " buffer-address";
    if (bad.empty()) return Status::ok();
    return invalid_argument(path_ + ": " + op + " of " + std::to_string(n_bytes) + " bytes at offset " +
                            std::to_string(offset) + " is misaligned for O_DIRECT (" + bad.substr(1) +
                            "): offsets, lengths and buffer addresses must be multiples of " +
                            std::to_string(kDirectIoAlignment) + "; use AlignedBuffer and align_up");
  }

  // After `n_done` of a request's bytes have arrived: ok to ask for the rest, or the short-read
  // error. A partial answer is the OS stopping at the end of the file (or at kMaxIoBytes); an
  // answer of 0 bytes, or one that leaves a direct read misaligned, can only be the end of file.
  Status check_progress(const ReadRequest& r, size_t n_done, size_t n_last) const {
    if (n_last > 0 && (!info_.direct || is_aligned(n_done))) return Status::ok();
    std::string why = "short read, got " + std::to_string(n_done) + " bytes";
    const Result<uint64_t> n_file = size();
    if (n_file.is_ok()) why += " (the file has " + std::to_string(*n_file) + ")";
    return op_failure(path_, "read", r.offset, r.n_bytes, why);
  }
  // The same for a write: a regular file takes part of a write only when it is running out of
  // room (the next attempt then says why), but one that takes nothing, or leaves a direct write
  // misaligned, would loop for ever.
  Status check_progress(const WriteRequest& w, size_t n_done, size_t n_last) const {
    if (n_last > 0 && (!info_.direct || is_aligned(n_done))) return Status::ok();
    return op_failure(path_, "write", w.offset, w.n_bytes,
                      "the OS wrote " + std::to_string(n_done) + " bytes and stopped");
  }

  Status write_pwrite(uint64_t offset, const void* src, size_t n_bytes) const {
    const WriteRequest w{offset, n_bytes, src};
    const auto* bytes = static_cast<const uint8_t*>(src);
    size_t done = 0;
    while (done < n_bytes) {
      const size_t n = std::min(n_bytes - done, kMaxIoBytes);
      const ssize_t k = ::pwrite(fd_, bytes + done, n, static_cast<off_t>(offset + done));
      if (k < 0) {
        if (errno == EINTR) continue;
        return op_failure(path_, "write", offset, n_bytes, errno_text(errno));
      }
      done += static_cast<size_t>(k);
      if (done < n_bytes) LEOAM_RETURN_IF_ERROR(check_progress(w, done, static_cast<size_t>(k)));
    }
    return Status::ok();
  }

  // Without the ring: one syscall after the other.
  Status run_sync(std::span<const ReadRequest> requests) const {
    for (const ReadRequest& r : requests) {
      auto* dst = static_cast<uint8_t*>(r.dst);
      size_t n_done = 0;
      while (n_done < r.n_bytes) {
        const size_t n = std::min(r.n_bytes - n_done, kMaxIoBytes);
        const ssize_t k = ::pread(fd_, dst + n_done, n, static_cast<off_t>(r.offset + n_done));
        if (k < 0) {
          if (errno == EINTR) continue;
          return op_failure(path_, "read", r.offset, r.n_bytes, errno_text(errno));
        }
        n_done += static_cast<size_t>(k);
        if (n_done < r.n_bytes) LEOAM_RETURN_IF_ERROR(check_progress(r, n_done, static_cast<size_t>(k)));
      }
    }
    return Status::ok();
  }
  Status run_sync(std::span<const WriteRequest> requests) const {
    for (const WriteRequest& w : requests) LEOAM_RETURN_IF_ERROR(write_pwrite(w.offset, w.src, w.n_bytes));
    return Status::ok();
  }

  static const char* op_name(const ReadRequest&) { return "read"; }
  static const char* op_name(const WriteRequest&) { return "write"; }
  void prep(io_uring_sqe* sqe, const ReadRequest& r, size_t n_done, size_t n) const {
    io_uring_prep_read(sqe, fd_, static_cast<uint8_t*>(r.dst) + n_done, static_cast<unsigned>(n), r.offset + n_done);
  }
  void prep(io_uring_sqe* sqe, const WriteRequest& w, size_t n_done, size_t n) const {
    io_uring_prep_write(sqe, fd_, static_cast<const uint8_t*>(w.src) + n_done, static_cast<unsigned>(n),
                        w.offset + n_done);
  }

  // Queues what remains of slot `slot`'s request; the caller has made room.
  template <class Request>
  void queue_op(size_t slot, std::span<const Request> requests) {
    const Slot& s = slots_[slot];
    const Request& r = requests[s.request];
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    // At most queue_depth requests are queued or in flight, and the ring has at least that many
    // entries, so there is always room.
    assert(sqe != nullptr);
    prep(sqe, r, s.n_done, std::min(r.n_bytes - s.n_done, kMaxIoBytes));
    io_uring_sqe_set_data64(sqe, slot);
  }

  // One batch of requests through the ring: which come next, how many are out.
  template <class Request>
  struct Pass {
    std::span<const Request> requests;
    size_t next = 0;         // the first request not yet started
    size_t n_in_flight = 0;  // requests queued or submitted, not yet reaped
    Status first_error;
  };

  // Queues requests of the pass while slots are free (none after an error).
  template <class Request>
  void fill(Pass<Request>& p) {
    while (p.first_error.is_ok() && p.next < p.requests.size() && !free_slots_.empty()) {
      if (p.requests[p.next].n_bytes == 0) {
        ++p.next;
        continue;
      }
      const size_t slot = free_slots_.back();
      free_slots_.pop_back();
      slots_[slot] = Slot{p.next++, 0};
      queue_op(slot, p.requests);
      ++p.n_in_flight;
    }
  }

  template <class Request>
  Pass<Request> begin_pass(std::span<const Request> requests) {
    free_slots_.clear();
    for (size_t i = slots_.size(); i-- > 0;) free_slots_.push_back(i);
    Pass<Request> p;
    p.requests = requests;
    fill(p);
    return p;
  }

  template <class Request>
  Status run_uring(std::span<const Request> requests) {
    Pass<Request> p = begin_pass(requests);
    return drive(p);
  }

  // Keeps up to queue_depth reads (or writes) in flight: submit, reap what completed, refill,
  // until every request is done. After an error nothing new is started, but the batch still
  // waits for what is in flight, because those use the caller's buffers.
  template <class Request>
  Status drive(Pass<Request>& p) {
    const std::span<const Request> requests = p.requests;
    for (;;) {
      fill(p);
      if (p.n_in_flight == 0) return p.first_error;

      const int ret = io_uring_submit_and_wait(&ring_, 1);
      if (ret == -EINTR) continue;
      if (ret < 0) return abandon_ring(requests, p.n_in_flight, -ret);

      io_uring_cqe* cqe = nullptr;
      while (io_uring_peek_cqe(&ring_, &cqe) == 0) {
        const size_t slot = static_cast<size_t>(io_uring_cqe_get_data64(cqe));
        const int res = cqe->res;
        io_uring_cqe_seen(&ring_, cqe);
        --p.n_in_flight;
        Slot& s = slots_[slot];
        const Request& r = requests[s.request];
        if (p.first_error.is_ok()) {
          if (res == -EINTR || res == -EAGAIN) {  // nothing done; ask again
            queue_op(slot, requests);
            ++p.n_in_flight;
            continue;
          }
          if (res < 0) {
            p.first_error = op_failure(path_, op_name(r), r.offset, r.n_bytes, errno_text(-res));
          } else {
            s.n_done += static_cast<size_t>(res);
            if (s.n_done < r.n_bytes) {
              p.first_error = check_progress(r, s.n_done, static_cast<size_t>(res));
              if (p.first_error.is_ok()) {
                queue_op(slot, requests);
                ++p.n_in_flight;
                continue;
              }
            }
          }
        }
        free_slots_.push_back(slot);
      }
    }
  }

  // io_uring_enter itself failed (not a request: the ring). Waits for the requests the kernel
  // already took, drops the ring, and runs the whole batch again one syscall at a time, now and
  // from here on.
  template <class Request>
  Status abandon_ring(std::span<const Request> requests, size_t n_in_flight, int err) {
    size_t n_taken = n_in_flight - io_uring_sq_ready(&ring_);
    while (n_taken > 0) {
      io_uring_cqe* cqe = nullptr;
      const int ret = io_uring_wait_cqe(&ring_, &cqe);
      if (ret == -EINTR) continue;
      if (ret < 0) {
        return io_error(path_ + ": io_uring failed (" + errno_text(err) + "), then waiting for its requests failed (" +
                        errno_text(-ret) + ")");
      }
      io_uring_cqe_seen(&ring_, cqe);
      --n_taken;
    }
    io_uring_queue_exit(&ring_);
    info_.uring = false;
    append_note(info_.fallback_note, "io_uring submit failed (" + errno_text(err) + "): pread");
    return run_sync(requests);
  }

  std::string path_;
  int fd_;
  bool read_only_;
  FileIoInfo info_;
  io_uring ring_{};
  std::vector<Slot> slots_;         // [queue_depth], indexed by the reads' user data
  std::vector<size_t> free_slots_;  // slots with no read in flight
  bool started_uring_ = false;  // start_reads() went through the ring: started_pass_ until finish_reads()
  Pass<ReadRequest> started_pass_;
};

class PosixFileSystem final : public FileSystem {
 public:
  Result<std::unique_ptr<RandomAccessFile>> open(const std::string& path, const FileOpenOptions& options) override {
    if (options.uring && options.queue_depth < 1) {
      return invalid_argument(path + ": io_uring queue depth must be at least 1, not " +
                              std::to_string(options.queue_depth));
    }
    if (options.read_only && options.truncate) {
      return invalid_argument(path + ": cannot truncate a file opened read-only");
    }
    int flags = (options.read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC;
    if (options.create) flags |= O_CREAT;
    if (options.truncate) flags |= O_TRUNC;

    std::string note;
    int fd = -1;
    bool direct = false;
    if (options.direct) {
      fd = open_retrying(path, flags | O_DIRECT);
      direct = fd >= 0;
      if (fd < 0 && errno == EINVAL) {
        note = "O_DIRECT refused by the file system (" + errno_text(EINVAL) +
               "): buffered I/O with posix_fadvise(DONTNEED) after each write";
      }
    }
    if (fd < 0 && (!options.direct || !note.empty())) fd = open_retrying(path, flags);
    if (fd < 0) {
      const int err = errno;
      const std::string message = path + ": cannot open: " + errno_text(err);
      if (err == ENOENT) return not_found(message + (options.create ? "" : " (open with create to make it)"));
      return io_error(message);
    }

    auto file = std::make_unique<PosixFile>(path, fd, options.read_only, direct, std::move(note));
    if (options.uring) file->init_uring(options.queue_depth);
    return std::unique_ptr<RandomAccessFile>(std::move(file));
  }

  Status remove(const std::string& path) override {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return io_error(path + ": cannot remove: " + errno_text(errno));
    }
    return Status::ok();
  }

  Status create_dirs(const std::string& path) override {
    if (path.empty()) return invalid_argument("create_dirs: empty path");
    // Each prefix ending before a '/', then the whole path: "a/b/c" makes a, a/b, a/b/c.
    for (size_t end = path.find('/', 1);; end = path.find('/', end + 1)) {
      const std::string dir = path.substr(0, end);
      if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
        return io_error(dir + ": cannot create directory: " + errno_text(errno));
      }
      if (end == std::string::npos) break;
    }
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return io_error(path + ": cannot stat: " + errno_text(errno));
    if (!S_ISDIR(st.st_mode)) return io_error(path + ": cannot create directory: a file of that name exists");
    return Status::ok();
  }

  bool exists(const std::string& path) override {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0;
  }
};

}  // namespace

FileSystem& posix_file_system() {
  static PosixFileSystem fs;
  return fs;
}

}  // namespace leoam
