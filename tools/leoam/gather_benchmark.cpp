#include "gather_benchmark.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iterator>
#include <memory>
#include <random>
#include <span>

#include "io/aligned_buffer.h"
#include "io/file.h"
#include "kv/kv_codec.h"
#include "kv/tiered_kv_cache.h"

namespace leoam {
namespace {

using Clock = std::chrono::steady_clock;

// 2 MiB: the f32 K (and V) of one fill batch; large enough that the per-append overhead vanishes.
constexpr uint64_t kFillBatchBytes = uint64_t{2} << 20;

// One (shape, chunk size) to measure, checked before anything is written.
struct Config {
  TieredKvCacheOptions store;
  size_t slot_bytes = 0;
  int64_t n_chunks = 0;  // chunks written
  std::string name;      // "32x128, 8-token chunks"
};

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string mib_text(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

// Without O_DIRECT the reads would be served from the page cache; dropping the file's pages
// before each rep makes both readers go to the device.
Status drop_page_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error(path + ": cannot open to drop its page cache: " + std::strerror(errno));
  const int err = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  if (err != 0) return io_error(path + ": posix_fadvise(DONTNEED) failed: " + std::strerror(err));
  return Status::ok();
}

Result<std::vector<Config>> plan_configs(const GatherBenchOptions& o) {
  if (o.dir.empty()) return invalid_argument("KV gather benchmark: a directory for the chunk files is needed (--kv-dir)");
  if (o.chunk_tokens.empty() || o.shapes.empty()) return invalid_argument("KV gather benchmark: no chunk size or no shape");
  if (!(o.select_fraction > 0.0 && o.select_fraction <= 1.0)) {
    return invalid_argument("KV gather benchmark: the fraction of chunks read must be in (0, 1], got " +
                            std::to_string(o.select_fraction));
  }
  if (o.n_reps < 1 || o.queue_depth < 1 || o.gather_batch_bytes == 0 || o.file_bytes == 0) {
    return invalid_argument("KV gather benchmark: repetitions, queue depth, gather batch and file size must be positive");
  }
  std::vector<Config> configs;
  for (const auto& [n_kv_heads, head_dim] : o.shapes) {
    if (n_kv_heads <= 0 || head_dim <= 0) {
      return invalid_argument("KV gather benchmark: bad shape " + std::to_string(n_kv_heads) + "x" +
                              std::to_string(head_dim) + " (KV heads x head dim, both positive)");
    }
    for (int c : o.chunk_tokens) {
      if (c < kMinChunkTokens || c > kMaxChunkTokens) {
        return invalid_argument("KV gather benchmark: chunk size must be in [" + std::to_string(kMinChunkTokens) + ", " +
                                std::to_string(kMaxChunkTokens) + "] tokens, got " + std::to_string(c));
      }
      Config cfg;
      cfg.name = std::to_string(n_kv_heads) + "x" + std::to_string(head_dim) + ", " + std::to_string(c) + "-token chunks";
      TieredKvCacheOptions& s = cfg.store;
      s.dtype = KvDtype::kF16;
      s.chunk_tokens = c;
      s.host_budget_bytes = 0;
      s.dir = o.dir;
      s.n_sink_tokens = 0;
      s.n_recent_tokens = c;
      s.gather_batch_bytes = o.gather_batch_bytes;
      s.file_options.queue_depth = o.queue_depth;
      s.visible_files = true;  // the raw reads open the chunk file by its path
      s.shape = {1, n_kv_heads, head_dim, 0};
      const ChunkGeometry g{n_kv_heads, head_dim, c, KvDtype::kF16};
      cfg.slot_bytes = align_up(encoded_chunk_bytes(g, KvCodec::kNone), kDirectIoAlignment);
      cfg.n_chunks = static_cast<int64_t>(o.file_bytes / cfg.slot_bytes);
      s.shape.n_ctx = cfg.n_chunks * c;
      s.device_budget_bytes = TieredKvCache::min_device_budget_bytes(s);
      const int64_t n_device_chunks =
          static_cast<int64_t>(s.device_budget_bytes / TieredKvCache::chunk_budget_bytes(s, Tier::kDevice));
      if (cfg.n_chunks <= n_device_chunks) {
        const uint64_t least_mib = ((n_device_chunks + 1) * cfg.slot_bytes + (1 << 20) - 1) >> 20;
        return invalid_argument("KV gather benchmark: " + mib_text(o.file_bytes) + " of KV holds " +
                                std::to_string(cfg.n_chunks) + " chunks of " + cfg.name +
                                ", which all fit on the device (" + std::to_string(n_device_chunks) +
                                "); raise the file size (--file-mb) to at least " + std::to_string(least_mib) + " MiB");
      }
      configs.push_back(std::move(cfg));
    }
  }
  return configs;
}

// Appends n_chunks full chunks of random KV to layer 0.
Status fill(TieredKvCache& cache, const Config& cfg, std::mt19937_64& rng, const GatherBenchOptions& o) {
  const int64_t row_elements = cfg.store.shape.row_elements();
  const int64_t n_total = cfg.store.shape.n_ctx;
  const int64_t n_batch = std::max<int64_t>(1, static_cast<int64_t>(kFillBatchBytes / (row_elements * sizeof(float))));
  std::vector<float> k(static_cast<size_t>(n_batch * row_elements));  // [n_batch][n_kv_heads][head_dim]
  std::vector<float> v(k.size());
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  int last_percent = -1;
  for (int64_t pos = 0; pos < n_total; pos += n_batch) {
    const int64_t n = std::min(n_batch, n_total - pos);
    for (size_t i = 0; i < static_cast<size_t>(n * row_elements); ++i) {
      k[i] = dist(rng);
      v[i] = dist(rng);
    }
    LEOAM_RETURN_IF_ERROR(cache.append(0, pos, n, k.data(), v.data()));
    const int percent = static_cast<int>(100 * (pos + n) / n_total);
    if (o.progress && percent != last_percent) {
      o.progress(cfg.name + ": writing " + mib_text(static_cast<uint64_t>(cfg.n_chunks) * cfg.slot_bytes) + " of KV, " +
                 std::to_string(percent) + "%");
      last_percent = percent;
    }
  }
  return Status::ok();
}

// A fresh random set of select_fraction of the chunks now on disk, ascending (std::sample keeps
// the order of a forward range).
std::vector<int64_t> select_disk_chunks(const TieredKvCache& cache, double fraction, std::mt19937_64& rng) {
  std::vector<int64_t> on_disk;
  cache.residency().for_each_chunk([&](ChunkKey key, const ChunkResidency& r) {
    if (r.tier == Tier::kDisk) on_disk.push_back(key.index);
  });
  const auto n = std::max<int64_t>(1, std::llround(fraction * static_cast<double>(on_disk.size())));
  std::vector<int64_t> chosen;
  std::sample(on_disk.begin(), on_disk.end(), std::back_inserter(chosen), n, rng);
  return chosen;
}

// Reads `chunks` through the store; returns the disk bytes read per second.
Result<double> time_gather(TieredKvCache& cache, const Config& cfg, std::span<const int64_t> chunks) {
  const int64_t c = cfg.store.chunk_tokens;
  std::vector<TokenRange> ranges;
  ranges.reserve(chunks.size());
  for (int64_t i : chunks) ranges.push_back({i * c, (i + 1) * c});
  volatile uint8_t sink = 0;  // one byte per segment: the views must really be there
  const auto visit = [&sink](const KvView& view) {
    for (const KvSegment& s : view.segments()) sink = *static_cast<const uint8_t*>(s.k);
    return Status::ok();
  };
  const uint64_t bytes0 = cache.stats()[Tier::kDisk].bytes_read;
  const Clock::time_point t0 = Clock::now();
  LEOAM_RETURN_IF_ERROR(cache.for_each_view(0, ranges, visit));
  const double seconds = seconds_since(t0);
  const uint64_t n_bytes = cache.stats()[Tier::kDisk].bytes_read - bytes0;
  if (n_bytes != chunks.size() * cfg.slot_bytes) {
    return internal_error("KV gather benchmark, " + cfg.name + ": the store read " + std::to_string(n_bytes) +
                          " bytes from disk for " + std::to_string(chunks.size()) + " disk chunks of " +
                          std::to_string(cfg.slot_bytes) + " bytes");
  }
  return static_cast<double>(n_bytes) / seconds;
}

// Reads the slots of `chunks` with the file interface alone, one read() per gather batch's worth,
// into `buffer` (one gather batch); returns bytes per second.
Result<double> time_raw(RandomAccessFile& file, AlignedBuffer& buffer, const Config& cfg,
                        std::span<const int64_t> chunks) {
  const size_t n_per_batch = buffer.size() / cfg.slot_bytes;
  std::vector<ReadRequest> requests;
  requests.reserve(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    requests.push_back({static_cast<uint64_t>(chunks[i]) * cfg.slot_bytes, cfg.slot_bytes,
                        buffer.data() + (i % n_per_batch) * cfg.slot_bytes});
  }
  const std::span<const ReadRequest> all(requests);
  const Clock::time_point t0 = Clock::now();
  for (size_t i = 0; i < all.size(); i += n_per_batch) {
    LEOAM_RETURN_IF_ERROR(file.read(all.subspan(i, std::min(n_per_batch, all.size() - i))));
  }
  const double seconds = seconds_since(t0);
  return static_cast<double>(chunks.size() * cfg.slot_bytes) / seconds;
}

Result<GatherBenchRow> run_config(const Config& cfg, const GatherBenchOptions& o) {
  const KvCacheShape& shape = cfg.store.shape;
  std::seed_seq seq{o.seed, static_cast<uint32_t>(shape.n_kv_heads), static_cast<uint32_t>(shape.head_dim),
                    static_cast<uint32_t>(cfg.store.chunk_tokens)};
  std::mt19937_64 rng(seq);
  LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<TieredKvCache> cache, TieredKvCache::create(cfg.store));
  // The raw reads' buffer: as many slots as the store's scratch holds per gather batch (no codec:
  // no decode space), allocated right after that scratch. The physical layout of a destination
  // changes DMA throughput on a virtual disk (a 32 MiB buffer allocated before a 512 MiB fill
  // lay in 7611 runs of 8192 pages, one allocated after it in 4096, and read 25% faster), so
  // both readers get buffers of the same age.
  const uint64_t n_per_batch = std::max<uint64_t>(1, o.gather_batch_bytes / cfg.slot_bytes);
  LEOAM_ASSIGN_OR_RETURN(AlignedBuffer buffer, AlignedBuffer::allocate(n_per_batch * cfg.slot_bytes));
  LEOAM_RETURN_IF_ERROR(fill(*cache, cfg, rng, o));

  const std::string path = cache->disk().chunk_path(0);
  FileOpenOptions raw_options;
  raw_options.read_only = true;
  raw_options.queue_depth = o.queue_depth;
  LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> raw, posix_file_system().open(path, raw_options));
  const bool buffered = !raw->io_info().direct;

  GatherBenchRow row;
  row.n_kv_heads = shape.n_kv_heads;
  row.head_dim = shape.head_dim;
  row.chunk_tokens = cfg.store.chunk_tokens;
  row.slot_bytes = cfg.slot_bytes;
  row.io_mode = cache->disk().io_mode() + (buffered ? "; page cache dropped before each rep" : "");
  std::vector<double> ratios;
  for (int rep = 0; rep < o.n_reps; ++rep) {
    if (o.progress) o.progress(cfg.name + ": rep " + std::to_string(rep + 1) + "/" + std::to_string(o.n_reps));
    const std::vector<int64_t> chunks = select_disk_chunks(*cache, o.select_fraction, rng);
    row.n_chunks_read = static_cast<int64_t>(chunks.size());
    if (buffered) LEOAM_RETURN_IF_ERROR(drop_page_cache(path));
    LEOAM_ASSIGN_OR_RETURN(double gather, time_gather(*cache, cfg, chunks));
    if (buffered) LEOAM_RETURN_IF_ERROR(drop_page_cache(path));
    LEOAM_ASSIGN_OR_RETURN(double raw_rate, time_raw(*raw, buffer, cfg, chunks));
    row.gather_samples_mb_per_s.push_back(gather * 1e-6);
    row.raw_samples_mb_per_s.push_back(raw_rate * 1e-6);
    ratios.push_back(row.gather_samples_mb_per_s.back() / row.raw_samples_mb_per_s.back());
  }
  row.gather_mb_per_s = median(row.gather_samples_mb_per_s);
  row.raw_mb_per_s = median(row.raw_samples_mb_per_s);
  row.fraction = median(ratios);
  return row;  // the raw file closes, then the store deletes its files
}

}  // namespace

Result<std::vector<GatherBenchRow>> run_gather_benchmark(const GatherBenchOptions& options) {
  LEOAM_ASSIGN_OR_RETURN(std::vector<Config> configs, plan_configs(options));
  std::vector<GatherBenchRow> rows;
  for (const Config& cfg : configs) {
    LEOAM_ASSIGN_OR_RETURN(GatherBenchRow row, run_config(cfg, options));
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace leoam
