#include "gguf/gguf_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "gguf/gguf_file.h"
#include "kernels/cpu/quant.h"

namespace leoam {

namespace {

class ByteSink {
 public:
  explicit ByteSink(uint32_t version) : version_(version) {}

  template <typename T>
  void put(T v) {
    const size_t at = out_.size();
    out_.resize(at + sizeof(T));
    std::memcpy(out_.data() + at, &v, sizeof(T));  // little-endian host
  }
  // Counts, lengths and dims: u32 in v1, u64 from v2 on.
  void put_size(uint64_t v) {
    if (version_ == 1) {
      put(static_cast<uint32_t>(v));
    } else {
      put(v);
    }
  }
  void put_string(const std::string& s) {
    put_size(s.size());
    out_.insert(out_.end(), s.begin(), s.end());
  }
  void put_bytes(const std::vector<uint8_t>& b) { out_.insert(out_.end(), b.begin(), b.end()); }
  void pad_to(uint64_t alignment) {
    const uint64_t rem = out_.size() % alignment;
    if (rem != 0) out_.resize(out_.size() + (alignment - rem), 0);
  }
  std::vector<uint8_t>& bytes() { return out_; }

 private:
  uint32_t version_;
  std::vector<uint8_t> out_;
};

void put_value(ByteSink& out, const GgufValue& v) {
  out.put(static_cast<uint32_t>(v.type()));
  if (v.is_array()) {
    out.put(static_cast<uint32_t>(v.elem_type()));
    out.put_size(v.size());
    if (v.elem_type() == GgufValueType::kString) {
      for (const std::string& s : *v.as_strings()) out.put_string(s);
    } else {
      out.put_bytes(v.raw());
    }
    return;
  }
  if (v.elem_type() == GgufValueType::kString) {
    out.put_string(*v.as_string());
  } else {
    out.put_bytes(v.raw());
  }
}

uint64_t pad_up(uint64_t n, uint64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

std::string dims_list(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

}  // namespace

GgufWriter::GgufWriter(uint32_t version) : version_(version) {}

void GgufWriter::set(std::string key, GgufValue value) {
  for (auto& [k, v] : kv_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  kv_.emplace_back(std::move(key), std::move(value));
}

Status GgufWriter::add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne, std::vector<uint8_t> data) {
  const std::string what = "GGUF writer: tensor '" + name + "'";
  for (const Tensor& t : tensors_) {
    if (t.name == name) return invalid_argument(what + " was already added");
  }
  const uint32_t type_id = static_cast<uint32_t>(type);
  if (!ggml_type_supported(type_id)) {
    return unsupported(what + ": type " + ggml_type_name(type_id) + " is not supported; supported: " +
                       std::string(supported_types_list()));
  }
  if (ne.empty() || ne.size() > static_cast<size_t>(4)) {
    return invalid_argument(what + " has " + std::to_string(ne.size()) + " dimensions; 1 to 4 are allowed");
  }
  for (int64_t d : ne) {
    if (d < 0) return invalid_argument(what + " has a negative dimension " + dims_list(ne));
  }
  const int64_t block = ggml_block_size(type);
  if (ne[0] % block != 0) {
    return invalid_argument(what + ": ne[0] = " + std::to_string(ne[0]) + " is not a multiple of " +
                            ggml_type_name(type_id) + "'s block size " + std::to_string(block));
  }
  uint64_t expected_bytes = ggml_row_size(type, ne[0]);
  for (size_t i = 1; i < ne.size(); ++i) {
    if (__builtin_mul_overflow(expected_bytes, static_cast<uint64_t>(ne[i]), &expected_bytes)) {
      return invalid_argument(what + ": dimensions " + dims_list(ne) + " overflow");
    }
  }
  if (data.size() != expected_bytes) {
    return invalid_argument(what + " of type " + ggml_type_name(type_id) + " and dims " + dims_list(ne) + " needs " +
                            std::to_string(expected_bytes) + " bytes, got " + std::to_string(data.size()));
  }
  tensors_.push_back(Tensor{std::move(name), type, std::move(ne), std::move(data)});
  return Status::ok();
}

Status GgufWriter::add_tensor_f32(std::string name, GgmlType type, std::vector<int64_t> ne,
                                  const std::vector<float>& values) {
  const std::string what = "GGUF writer: tensor '" + name + "'";
  const uint32_t type_id = static_cast<uint32_t>(type);
  if (!ggml_type_supported(type_id)) {
    return unsupported(what + ": type " + ggml_type_name(type_id) + " is not supported; supported: " +
                       std::string(supported_types_list()));
  }
  if (ne.empty() || ne.size() > 4) {
    return invalid_argument(what + " has " + std::to_string(ne.size()) + " dimensions; 1 to 4 are allowed");
  }
  uint64_t n_elements = 1;
  for (int64_t d : ne) {
    if (d < 0 || __builtin_mul_overflow(n_elements, static_cast<uint64_t>(d), &n_elements)) {
      return invalid_argument(what + " has invalid dimensions " + dims_list(ne));
    }
  }
  if (values.size() != n_elements) {
    return invalid_argument(what + " with dims " + dims_list(ne) + " needs " + std::to_string(n_elements) +
                            " values, got " + std::to_string(values.size()));
  }
  const int64_t ne0 = ne[0];
  if (ne0 % ggml_block_size(type) != 0) {
    return invalid_argument(what + ": ne[0] = " + std::to_string(ne0) + " is not a multiple of " +
                            ggml_type_name(type_id) + "'s block size " + std::to_string(ggml_block_size(type)));
  }
  const size_t row_bytes = ggml_row_size(type, ne0);
  const uint64_t n_rows = ne0 == 0 ? 0 : n_elements / static_cast<uint64_t>(ne0);
  std::vector<uint8_t> data(row_bytes * n_rows);
  for (uint64_t r = 0; r < n_rows; ++r) {
    kernels::quantize_row(type, values.data() + r * static_cast<uint64_t>(ne0), data.data() + r * row_bytes, ne0);
  }
  return add_tensor(std::move(name), type, std::move(ne), std::move(data));
}

std::vector<uint8_t> GgufWriter::to_bytes() const& { return serialize(nullptr); }

std::vector<uint8_t> GgufWriter::to_bytes() && { return serialize(&tensors_); }

std::vector<uint8_t> GgufWriter::header(uint64_t* alignment, uint64_t* data_bytes) const {
  *alignment = kGgufDefaultAlignment;
  for (const auto& [k, v] : kv_) {
    if (k == "general.alignment") {
      // Only a valid u32 power of two changes the layout; write() rejects anything else.
      const auto a = v.as_uint();
      if (!v.is_array() && v.elem_type() == GgufValueType::kU32 && a && *a != 0 && (*a & (*a - 1)) == 0) *alignment = *a;
    }
  }
  ByteSink out(version_);
  out.put(kGgufMagic);
  out.put(version_);
  out.put_size(tensors_.size());
  out.put_size(kv_.size());
  for (const auto& [k, v] : kv_) {
    out.put_string(k);
    put_value(out, v);
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    out.put_string(t.name);
    out.put(static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) out.put_size(static_cast<uint64_t>(d));
    out.put(static_cast<uint32_t>(t.type));
    out.put(offset);
    offset = pad_up(offset + t.data.size(), *alignment);
  }
  out.pad_to(*alignment);
  *data_bytes = offset;
  return std::move(out.bytes());
}

std::vector<uint8_t> GgufWriter::serialize(std::vector<Tensor>* release) const {
  uint64_t alignment = 0;
  uint64_t data_bytes = 0;
  std::vector<uint8_t> bytes = header(&alignment, &data_bytes);
  // One allocation for the image: a growing vector would hold two copies while it moves.
  bytes.reserve(bytes.size() + data_bytes);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const std::vector<uint8_t>& data = tensors_[i].data;
    bytes.insert(bytes.end(), data.begin(), data.end());
    bytes.resize(pad_up(bytes.size(), alignment), 0);
    if (release != nullptr) std::vector<uint8_t>().swap((*release)[i].data);
  }
  return bytes;
}

Status GgufWriter::write(const std::string& path) const {
  if (version_ < 1 || version_ > 3) {
    return invalid_argument(path + ": cannot write GGUF version " + std::to_string(version_) + " (supported: 1, 2, 3)");
  }
  for (const auto& [k, v] : kv_) {
    if (k != "general.alignment") continue;
    const auto a = v.as_uint();
    if (v.is_array() || v.elem_type() != GgufValueType::kU32 || !a || *a == 0 || (*a & (*a - 1)) != 0) {
      return invalid_argument(path + ": general.alignment must be a u32 nonzero power of two, got " +
                              v.to_display_string());
    }
  }
  uint64_t alignment = 0;
  uint64_t data_bytes = 0;
  const std::vector<uint8_t> head = header(&alignment, &data_bytes);

  // Write beside the target and rename, so readers never see a half-written model.
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) return io_error(path + ": cannot create temporary file " + tmp + ": " + std::strerror(errno));
  auto fail = [&](const char* what) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return io_error(path + ": " + what + " " + tmp + ": " + std::strerror(err));
  };
  // The header, then each tensor and its padding: no second copy of the weights in memory.
  auto write_all = [fd](const uint8_t* data, size_t size) {
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::write(fd, data + done, size - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        return false;
      }
      done += static_cast<size_t>(n);
    }
    return true;
  };
  if (!write_all(head.data(), head.size())) return fail("cannot write");
  const std::vector<uint8_t> zeros(alignment, 0);
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    const uint64_t padded = pad_up(offset + t.data.size(), alignment);
    if (!write_all(t.data.data(), t.data.size()) || !write_all(zeros.data(), padded - offset - t.data.size())) {
      return fail("cannot write");
    }
    offset = padded;
  }
  // mkstemp creates 0600; a model file is meant to be shared like any other data file.
  if (::fchmod(fd, 0644) != 0) return fail("cannot chmod");
  if (::fsync(fd) != 0) return fail("cannot fsync");
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return io_error(path + ": cannot close " + tmp + ": " + std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return io_error(path + ": cannot rename " + tmp + " into place: " + std::strerror(err));
  }
  return Status::ok();
}

}  // namespace leoam
