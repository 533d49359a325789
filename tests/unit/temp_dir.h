// A scratch directory for tests that write files: unique (mkdtemp), removed with its contents at
// scope exit. Shared by the io and kv tests.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

namespace leoam::testing_util {

// A fresh directory (mkdtemp) under `parent`, removed with everything in it at scope exit.
class TempDir {
 public:
  explicit TempDir(const std::string& parent = std::filesystem::temp_directory_path().string()) {
    std::string pattern = parent + "/leoam-test-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp " << pattern << ": " << std::strerror(errno);
      return;
    }
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace leoam::testing_util
