// A FileSystem that wraps another one and injects faults on command, for tests of everything
// that does disk I/O (RocksDB's FaultInjectionTestFS is the model). Faults are armed per path
// suffix ("" matches every file) and fire on the n-th matching operation after arming: read()
// calls for the read faults (for kFlipBit, only the reads that cover `byte_offset`), write()
// calls for the write faults, each fault counting its own. A fault fires once (then disarms)
// unless `sticky`; when several would fire on one operation, the one armed first does, and the
// others wait for the next. A failed operation does not call the base file. The messages read
// like the real ones, with " (injected)" appended.
// Thread-safe (one mutex); wraps the files it opens, which keep a pointer to this object, so it
// must outlive them.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "io/file.h"

namespace leoam {

// kShortRead: a read request returns fewer bytes than asked (read() fails "short read");
// kReadEio: read() fails with EIO; kWriteEio: write() fails with EIO; kNoSpace: write() fails with
// ENOSPC; kFlipBit: read() succeeds but the bit `bit` at file offset `byte_offset` of the first
// request covering it is flipped.
enum class FaultKind : uint8_t { kShortRead, kReadEio, kWriteEio, kNoSpace, kFlipBit };

struct Fault {
  FaultKind kind = FaultKind::kReadEio;
  std::string path_suffix;   // files whose path ends with this; "" = all
  int skip = 0;              // matching operations to let pass before firing
  bool sticky = false;       // keep firing after the first time
  uint64_t byte_offset = 0;  // kFlipBit: file offset of the byte to corrupt
  int bit = 0;               // kFlipBit: bit 0..7 of that byte
};

class FaultInjectionFileSystem final : public FileSystem {
 public:
  explicit FaultInjectionFileSystem(FileSystem& base) : base_(base) {}

  void arm(const Fault& fault);
  void disarm_all();
  // Faults that have fired since construction.
  int n_fired() const;

  Result<std::unique_ptr<RandomAccessFile>> open(const std::string& path, const FileOpenOptions& options) override;
  Status remove(const std::string& path) override { return base_.remove(path); }
  Status create_dirs(const std::string& path) override { return base_.create_dirs(path); }
  bool exists(const std::string& path) override { return base_.exists(path); }

 private:
  friend class FaultInjectionFile;
  struct Armed {
    Fault fault;
    int n_seen = 0;  // matching operations so far, the firing ones included
  };
  // Called by the wrapped files before each operation: counts it for every armed fault it
  // matches and returns the fault that fires, if any.
  std::optional<Fault> fault_for_read(const std::string& path, std::span<const ReadRequest> requests);
  std::optional<Fault> fault_for_write(const std::string& path);
  std::optional<Fault> fire_matching(const std::string& path, bool is_read, std::span<const ReadRequest> requests);

  FileSystem& base_;
  mutable std::mutex mu_;
  std::vector<Armed> armed_;
  int n_fired_ = 0;
};

}  // namespace leoam
