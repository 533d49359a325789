#include "io/fault_injection_file_system.h"

#include <cassert>
#include <cerrno>
#include <cstring>

namespace leoam {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_read_fault(FaultKind kind) {
  return kind == FaultKind::kShortRead || kind == FaultKind::kReadEio || kind == FaultKind::kFlipBit;
}

// The first request holding file byte `offset`, or null.
const ReadRequest* request_covering(std::span<const ReadRequest> requests, uint64_t offset) {
  for (const ReadRequest& r : requests) {
    if (offset >= r.offset && offset - r.offset < r.n_bytes) return &r;
  }
  return nullptr;
}

// Worded like PosixFile's errors, so tests of callers see what production would show.
Status injected_failure(const std::string& path, const char* op, uint64_t offset, size_t n_bytes,
                        const std::string& why) {
  return io_error(path + ": " + op + " of " + std::to_string(n_bytes) + " bytes at offset " +
                  std::to_string(offset) + " failed: " + why + " (injected)");
}

}  // namespace

class FaultInjectionFile final : public RandomAccessFile {
 public:
  FaultInjectionFile(std::unique_ptr<RandomAccessFile> base, FaultInjectionFileSystem& fs)
      : base_(std::move(base)), fs_(fs) {}

  const std::string& path() const override { return base_->path(); }
  FileIoInfo io_info() const override { return base_->io_info(); }

  Status read(std::span<const ReadRequest> requests) override {
    const std::optional<Fault> fault = fs_.fault_for_read(path(), requests);
    if (!fault) return base_->read(requests);
    if (fault->kind == FaultKind::kFlipBit) {
      LEOAM_RETURN_IF_ERROR(base_->read(requests));
      // It matched, so some request covers the byte.
      const ReadRequest* r = request_covering(requests, fault->byte_offset);
      static_cast<uint8_t*>(r->dst)[fault->byte_offset - r->offset] ^= static_cast<uint8_t>(1u << fault->bit);
      return Status::ok();
    }
    // kShortRead or kReadEio; they only match non-empty batches.
    const ReadRequest& first = requests[0];
    const std::string why = fault->kind == FaultKind::kShortRead ? "short read" : std::strerror(EIO);
    return injected_failure(path(), "read", first.offset, first.n_bytes, why);
  }

  Status write(uint64_t offset, const void* src, size_t n_bytes) override {
    const std::optional<Fault> fault = fs_.fault_for_write(path());
    if (!fault) return base_->write(offset, src, n_bytes);
    const int err = fault->kind == FaultKind::kNoSpace ? ENOSPC : EIO;
    return injected_failure(path(), "write", offset, n_bytes, std::strerror(err));
  }

  Status sync() override { return base_->sync(); }
  Result<uint64_t> size() const override { return base_->size(); }

 private:
  std::unique_ptr<RandomAccessFile> base_;
  FaultInjectionFileSystem& fs_;
};

void FaultInjectionFileSystem::arm(const Fault& fault) {
  assert(fault.bit >= 0 && fault.bit < 8 && fault.skip >= 0);
  std::lock_guard lock(mu_);
  armed_.push_back(Armed{fault, 0});
}

void FaultInjectionFileSystem::disarm_all() {
  std::lock_guard lock(mu_);
  armed_.clear();
}

int FaultInjectionFileSystem::n_fired() const {
  std::lock_guard lock(mu_);
  return n_fired_;
}

Result<std::unique_ptr<RandomAccessFile>> FaultInjectionFileSystem::open(const std::string& path,
                                                                        const FileOpenOptions& options) {
  LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, base_.open(path, options));
  return std::unique_ptr<RandomAccessFile>(new FaultInjectionFile(std::move(file), *this));
}

std::optional<Fault> FaultInjectionFileSystem::fault_for_read(const std::string& path,
                                                             std::span<const ReadRequest> requests) {
  return fire_matching(path, /*is_read=*/true, requests);
}

std::optional<Fault> FaultInjectionFileSystem::fault_for_write(const std::string& path) {
  return fire_matching(path, /*is_read=*/false, {});
}

std::optional<Fault> FaultInjectionFileSystem::fire_matching(const std::string& path, bool is_read,
                                                            std::span<const ReadRequest> requests) {
  std::lock_guard lock(mu_);
  std::optional<Fault> fired;
  for (auto it = armed_.begin(); it != armed_.end();) {
    const Fault& f = it->fault;
    bool matches = is_read_fault(f.kind) == is_read && ends_with(path, f.path_suffix);
    if (matches && is_read) {
      matches = f.kind == FaultKind::kFlipBit ? request_covering(requests, f.byte_offset) != nullptr
                                              : !requests.empty();
    }
    if (!matches) {
      ++it;
      continue;
    }
    ++it->n_seen;
    if (fired || it->n_seen <= f.skip) {
      ++it;
      continue;
    }
    fired = f;
    ++n_fired_;
    it = f.sticky ? it + 1 : armed_.erase(it);
  }
  return fired;
}

}  // namespace leoam
