#include "kv/kv_session.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "io/aligned_buffer.h"
#include "io/checksum.h"
#include "kv/disk_tier.h"

namespace leoam {
namespace {

constexpr const char* kFormat = "leoam-kv-session";
constexpr const char* kSessionName = "session";
constexpr int kLoadBatchChunks = 16;

std::string header_path(const std::string& dir) { return dir + "/session.json"; }

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, v);
  return buf;
}

uint64_t json_checksum(const nlohmann::json& body) {
  const std::string text = body.dump();
  return checksum64(text.data(), text.size());
}

DiskTierOptions tier_options(const std::string& dir, const KvCache& kv, int chunk_tokens,
                             const std::vector<int>& group_chunks, FileSystem* fs) {
  DiskTierOptions d;
  d.abstract_group_chunks = group_chunks;
  d.dir = dir;
  d.session = kSessionName;
  d.n_layer = kv.shape().n_layer;
  d.geometry = {kv.shape().n_kv_heads, kv.shape().head_dim, chunk_tokens, kv.dtype()};
  d.codec = KvCodec::kNone;
  d.keep_files = true;
  d.file_system = fs;
  return d;
}

Status write_whole_file(FileSystem& fs, const std::string& path, const std::string& text) {
  FileOpenOptions o;
  o.create = true;
  o.truncate = true;
  o.direct = false;
  o.uring = false;
  LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> f, fs.open(path, o));
  LEOAM_RETURN_IF_ERROR(f->write(0, text.data(), text.size()));
  return f->sync();
}

Result<std::string> read_whole_file(FileSystem& fs, const std::string& path) {
  FileOpenOptions o;
  o.read_only = true;
  o.direct = false;
  o.uring = false;
  LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> f, fs.open(path, o));
  LEOAM_ASSIGN_OR_RETURN(uint64_t size, f->size());
  std::string text(size, '\0');
  const ReadRequest req{0, text.size(), text.data()};
  if (size > 0) LEOAM_RETURN_IF_ERROR(f->read({&req, 1}));
  return text;
}

}  // namespace

Status save_kv_session(KvCache& kv, const KvSession& session, const std::string& dir, const KvSessionIoOptions& options) {
  FileSystem& fs = options.file_system != nullptr ? *options.file_system : posix_file_system();
  if (session.n_kv < 0 || session.n_kv > kv.n_tokens() || session.n_kv > static_cast<int64_t>(session.tokens.size())) {
    return invalid_argument("KV session: " + std::to_string(session.n_kv) + " positions to save, but the cache holds " +
                            std::to_string(kv.n_tokens()) + " and the sequence " +
                            std::to_string(session.tokens.size()) + " tokens");
  }
  LEOAM_RETURN_IF_ERROR(fs.create_dirs(dir).with_context("session directory '" + dir + "'").about(Setting::kKvSaveDir));
  // No header while the chunks are rewritten: a half-written session must never load.
  LEOAM_RETURN_IF_ERROR(fs.remove(header_path(dir)));

  const int chunk_tokens = options.chunk_tokens;
  std::vector<int> group_chunks;
  for (const int tokens : options.abstract_tokens) {
    if (tokens <= 0 || tokens % chunk_tokens != 0) {
      return invalid_argument("KV session: an abstract record covers a multiple of the chunk (" +
                              std::to_string(chunk_tokens) + " tokens), not " + std::to_string(tokens));
    }
    group_chunks.push_back(tokens / chunk_tokens);
  }
  group_chunks.resize(static_cast<size_t>(kv.shape().n_layer), 1);
  LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<DiskTier> tier,
                         DiskTier::create(tier_options(dir, kv, chunk_tokens, group_chunks, &fs)));
  const ChunkGeometry& g = tier->geometry();
  LEOAM_ASSIGN_OR_RETURN(AlignedBuffer chunk, AlignedBuffer::allocate(tier->slot_bytes()));
  std::vector<float> abstract(static_cast<size_t>(g.abstract_floats()));
  const size_t row_bytes = g.row_bytes();

  for (int il = 0; il < kv.shape().n_layer; ++il) {
    int64_t index = 0, filled = 0;
    auto flush = [&]() -> Status {
      reset_abstract(g, abstract.data());
      update_abstract(g, chunk.data(), 0, filled, abstract.data());
      LEOAM_RETURN_IF_ERROR(tier->write_chunk(il, {index, chunk.data(), filled, abstract.data()}));
      std::memset(chunk.data(), 0, chunk.size());
      ++index;
      filled = 0;
      return Status::ok();
    };
    const TokenRange all{0, session.n_kv};
    LEOAM_RETURN_IF_ERROR(kv.for_each_view(il, {&all, 1}, [&](const KvView& view) -> Status {
      for (const KvSegment& s : view.segments()) {
        for (int64_t t = 0; t < s.n_tokens; ++t) {
          std::memcpy(chunk.data() + filled * row_bytes, s.k_row(t), row_bytes);
          std::memcpy(chunk.data() + g.k_bytes() + filled * row_bytes, s.v_row(t), row_bytes);
          if (++filled == chunk_tokens) LEOAM_RETURN_IF_ERROR(flush());
        }
      }
      return Status::ok();
    }));
    if (filled > 0) LEOAM_RETURN_IF_ERROR(flush());
  }
  LEOAM_RETURN_IF_ERROR(tier->sync());

  nlohmann::json body;
  body["format"] = kFormat;
  body["version"] = kKvSessionVersion;
  body["model_hash"] = hex(session.model_hash);
  body["n_layer"] = kv.shape().n_layer;
  body["n_kv_heads"] = kv.shape().n_kv_heads;
  body["head_dim"] = kv.shape().head_dim;
  body["dtype"] = kv_dtype_name(kv.dtype());
  body["chunk_tokens"] = chunk_tokens;
  body["abstract_group_chunks"] = group_chunks;
  body["n_kv"] = session.n_kv;
  body["tokens"] = session.tokens;
  body["sampler_state"] = session.sampler_state;
  nlohmann::json header = body;
  header["checksum"] = hex(json_checksum(body));
  return write_whole_file(fs, header_path(dir), header.dump(1) + "\n");
}

namespace {

// A session's header, checked, and the KV geometry it was saved with.
struct Header {
  KvSession session;
  int chunk_tokens = 0;
  std::vector<int> group_chunks;  // per layer
  KvCacheShape shape;  // n_ctx unused
  std::string dtype;
};

Result<Header> read_header(FileSystem& fs, const std::string& dir, uint64_t model_hash) {
  const std::string path = header_path(dir);
  if (!fs.exists(path)) return not_found("no KV session in '" + dir + "' (" + path + " is missing)");
  LEOAM_ASSIGN_OR_RETURN(std::string text, read_whole_file(fs, path));

  Header h;
  KvSession& session = h.session;
  try {
    nlohmann::json header = nlohmann::json::parse(text);
    if (!header.is_object() || header.value("format", "") != kFormat) {
      return corrupt(path + ": not a leoam KV session");
    }
    const int version = header.at("version").get<int>();
    if (version > kKvSessionVersion) {
      return unsupported(path + ": saved by a newer leoam (format version " + std::to_string(version) +
                         "; this build reads up to " + std::to_string(kKvSessionVersion) + ")");
    }
    if (version < 5) {
      return unsupported(path + ": saved by an older leoam (format version " + std::to_string(version) +
                         ", whose abstract records this build no longer reads); save the session again");
    }
    const std::string checksum = header.at("checksum").get<std::string>();
    nlohmann::json body = header;
    body.erase("checksum");
    if (checksum != hex(json_checksum(body))) return corrupt(path + ": checksum mismatch: the session header is corrupt");
    if (header.at("model_hash").get<std::string>() != hex(model_hash)) {
      return invalid_argument(path + ": the session was saved with another model (hash " +
                              header.at("model_hash").get<std::string>() + "; this model's is " + hex(model_hash) +
                              "); load it with the model it was saved with");
    }
    h.chunk_tokens = header.at("chunk_tokens").get<int>();
    h.group_chunks = header.at("abstract_group_chunks").get<std::vector<int>>();
    h.shape.n_layer = header.at("n_layer").get<int>();
    h.shape.n_kv_heads = header.at("n_kv_heads").get<int>();
    h.shape.head_dim = header.at("head_dim").get<int>();
    h.dtype = header.at("dtype").get<std::string>();
    session.model_hash = model_hash;
    session.n_kv = header.at("n_kv").get<int64_t>();
    session.tokens = header.at("tokens").get<std::vector<int32_t>>();
    session.sampler_state = header.at("sampler_state").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    return corrupt(path + ": not a valid KV session header (" + e.what() + ")");
  }
  if (h.chunk_tokens <= 0 || session.n_kv < 0 || session.n_kv > static_cast<int64_t>(session.tokens.size()) ||
      static_cast<int>(h.group_chunks.size()) > h.shape.n_layer ||
      std::any_of(h.group_chunks.begin(), h.group_chunks.end(), [](int g) { return g < 1 || g > 4096; })) {
    return corrupt(path + ": inconsistent chunk size or token counts");
  }
  return h;
}

}  // namespace

Result<KvSession> read_kv_session(const std::string& dir, uint64_t model_hash, const KvSessionIoOptions& options) {
  FileSystem& fs = options.file_system != nullptr ? *options.file_system : posix_file_system();
  LEOAM_ASSIGN_OR_RETURN(Header h, read_header(fs, dir, model_hash));
  return std::move(h.session);
}

namespace {

// The session in `dir` and its KV files, opened read-only and checked against the running
// model's hash and the geometry of `kv`.
struct OpenedSession {
  Header header;
  std::unique_ptr<DiskTier> tier;
};

Result<OpenedSession> open_session(FileSystem& fs, const std::string& dir, uint64_t model_hash, const KvCache& kv) {
  const std::string path = header_path(dir);
  OpenedSession opened;
  LEOAM_ASSIGN_OR_RETURN(opened.header, read_header(fs, dir, model_hash));
  const Header& h = opened.header;
  const KvCacheShape& s = kv.shape();
  if (h.shape.n_layer != s.n_layer || h.shape.n_kv_heads != s.n_kv_heads || h.shape.head_dim != s.head_dim ||
      h.dtype != kv_dtype_name(kv.dtype())) {
    return invalid_argument(path + ": the session's KV geometry differs from this cache's");
  }
  if (h.session.n_kv > kv.n_ctx() || static_cast<int64_t>(h.session.tokens.size()) > kv.n_ctx()) {
    return invalid_argument(path + ": the session holds " + std::to_string(h.session.tokens.size()) +
                            " tokens, more than the context size of " + std::to_string(kv.n_ctx()))
        .about(Setting::kContextSize);
  }
  const int64_t n_chunks = (h.session.n_kv + h.chunk_tokens - 1) / h.chunk_tokens;
  const std::vector<int64_t> counts(static_cast<size_t>(s.n_layer), n_chunks);
  LEOAM_ASSIGN_OR_RETURN(opened.tier,
                         DiskTier::open_existing(tier_options(dir, kv, h.chunk_tokens, h.group_chunks, &fs), counts));
  // Every chunk holds the rows its place in the sequence says.
  for (int il = 0; il < s.n_layer; ++il) {
    for (int64_t i = 0; i < n_chunks; ++i) {
      const int64_t rows = std::min<int64_t>(h.chunk_tokens, h.session.n_kv - i * h.chunk_tokens);
      if (opened.tier->n_tokens_of(il, i) != rows) {
        return corrupt(path + ": layer " + std::to_string(il) + " chunk " + std::to_string(i) + " holds " +
                       std::to_string(opened.tier->n_tokens_of(il, i)) + " positions, " + std::to_string(rows) +
                       " expected");
      }
    }
  }
  return opened;
}

}  // namespace

Status load_kv_session_tier(DiskTier& tier, int64_t first, int64_t n, KvCache& kv) {
  const ChunkGeometry& g = tier.geometry();
  const int64_t c = g.chunk_tokens;
  if (first < 0 || first > n || kv.n_tokens() != first) {
    return invalid_argument("a KV session's positions [" + std::to_string(first) + ", " + std::to_string(n) +
                            ") load into a cache holding the positions before them only");
  }
  const int64_t i_first = first / c;
  const int64_t n_chunks = (n + c - 1) / c;
  for (int il = 0; il < kv.shape().n_layer; ++il) {
    if (n > 0 && tier.n_tokens_of(il, n_chunks - 1) < n - (n_chunks - 1) * c) {
      return invalid_argument("KV session '" + tier.session() + "': layer " + std::to_string(il) + " holds fewer than " +
                              std::to_string(n) + " positions");
    }
  }
  const int64_t batch = std::min<int64_t>(kLoadBatchChunks, std::max<int64_t>(n_chunks - i_first, 1));
  LEOAM_ASSIGN_OR_RETURN(AlignedBuffer buffer, AlignedBuffer::allocate(static_cast<size_t>(batch) * tier.slot_bytes()));
  std::vector<float> k(static_cast<size_t>(c * g.row_elements()));
  std::vector<float> v(k.size());
  for (int il = 0; il < kv.shape().n_layer; ++il) {
    for (int64_t i0 = i_first; i0 < n_chunks; i0 += batch) {
      const int64_t i1 = std::min(n_chunks, i0 + batch);
      std::vector<DiskChunkRead> reads;
      for (int64_t i = i0; i < i1; ++i) reads.push_back({i, buffer.data() + (i - i0) * tier.slot_bytes()});
      LEOAM_RETURN_IF_ERROR(tier.read_chunks_serialised(il, reads));
      for (int64_t i = i0; i < i1; ++i) {
        const uint8_t* chunk = buffer.data() + (i - i0) * tier.slot_bytes();
        const int64_t row0 = std::max<int64_t>(0, first - i * c);
        const int64_t row1 = std::min<int64_t>(c, n - i * c);
        const size_t skip = static_cast<size_t>(row0) * g.row_bytes();
        load_kv_values(g.dtype, chunk + skip, (row1 - row0) * g.row_elements(), k.data());
        load_kv_values(g.dtype, chunk + g.k_bytes() + skip, (row1 - row0) * g.row_elements(), v.data());
        LEOAM_RETURN_IF_ERROR(kv.append(il, i * c + row0, row1 - row0, k.data(), v.data()));
      }
    }
  }
  return Status::ok();
}

Result<KvSession> load_kv_session(const std::string& dir, uint64_t model_hash, KvCache& kv,
                                  const KvSessionIoOptions& options) {
  FileSystem& fs = options.file_system != nullptr ? *options.file_system : posix_file_system();
  if (kv.n_tokens() != 0) return invalid_argument("a KV session loads into an empty cache only");
  LEOAM_ASSIGN_OR_RETURN(OpenedSession opened, open_session(fs, dir, model_hash, kv));
  KvSession& session = opened.header.session;
  const int64_t n_load = options.max_positions >= 0 ? std::min(session.n_kv, options.max_positions) : session.n_kv;
  LEOAM_RETURN_IF_ERROR(load_kv_session_tier(*opened.tier, 0, n_load, kv));
  session.n_kv = n_load;
  return std::move(session);
}

Result<std::shared_ptr<const KeptKvFiles>> open_kv_session_tier(const std::string& dir, uint64_t model_hash,
                                                                const KvCache& kv, const KvSessionIoOptions& options) {
  FileSystem& fs = options.file_system != nullptr ? *options.file_system : posix_file_system();
  LEOAM_ASSIGN_OR_RETURN(OpenedSession opened, open_session(fs, dir, model_hash, kv));
  DiskTier& tier = *opened.tier;
  const int64_t n_chunks = (opened.header.session.n_kv + opened.header.chunk_tokens - 1) / opened.header.chunk_tokens;
  const int64_t batch = std::clamp<int64_t>((int64_t{8} << 20) / static_cast<int64_t>(tier.slot_bytes()), 1, 256);
  LEOAM_ASSIGN_OR_RETURN(AlignedBuffer buffer, AlignedBuffer::allocate(static_cast<size_t>(batch) * tier.slot_bytes()));
  for (int il = 0; il < kv.shape().n_layer; ++il) {
    for (int64_t i0 = 0; i0 < n_chunks; i0 += batch) {
      std::vector<DiskChunkRead> reads;
      for (int64_t i = i0; i < std::min(n_chunks, i0 + batch); ++i) {
        reads.push_back({i, buffer.data() + (i - i0) * tier.slot_bytes()});
      }
      LEOAM_RETURN_IF_ERROR(tier.read_chunks(il, reads));  // checks each against its checksum
    }
  }
  return std::make_shared<const KeptKvFiles>(std::shared_ptr<DiskTier>(std::move(opened.tier)));
}

}  // namespace leoam
