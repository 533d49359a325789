#include "cli_common.h"

#include "core/ggml_type.h"
#include "core/thread_pool.h"
#include "progress_bar.h"
#include "io/checksum.h"
#include "io/mapped_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

namespace leoam::cli {

void print_error(std::string_view message) {
  std::string line(message);
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  std::cout.flush();
  std::cerr << "leoam: error: " << line << std::endl;
}

std::string flag_for(Setting setting) {
  switch (setting) {
    case Setting::kNone: return "";
    case Setting::kContextSize: return "-c";
    case Setting::kBatchSize: return "-b";
    case Setting::kParallel: return "--parallel";
    case Setting::kBos: return "--no-bos";
    case Setting::kKvDir: return "--kv-dir";
    case Setting::kKvDeviceBudget: return "--kv-device-mb";
    case Setting::kKvHostCodec: return "--kv-host-codec";
    case Setting::kKvCompress: return "--kv-compress";
    case Setting::kKvMetaBudget: return "--kv-meta-mb";
    case Setting::kKvSwaFull: return "--kv-swa-full";
    case Setting::kKvSaveDir: return "--kv-save";
    case Setting::kPrefillWorkingSet: return "--prefill-mb";
    case Setting::kListenAddress: return "--host, --port";
    case Setting::kListenBacklog: return "--backlog";
    case Setting::kAllowedHosts: return "--allowed-hosts";
    case Setting::kCorsOrigin: return "--cors-origin";
    case Setting::kApiKey: return "--api-key";
    case Setting::kMaxBody: return "--max-body-mb";
    case Setting::kModelAlias: return "--alias";
    case Setting::kChatTemplate: return "--chat-template";
  }
  return "";
}

std::string error_text(const Status& status) {
  const std::string flag = flag_for(status.setting());
  return flag.empty() ? status.message() : status.message() + " (" + flag + ")";
}

int fail(const Status& status) {
  print_error(error_text(status));
  return kExitFailure;
}

CLI::Validator readable_file() {
  return CLI::Validator(
      [](std::string& path) -> std::string {
        struct stat st {};
        if (::stat(path.c_str(), &st) != 0) return "cannot read '" + path + "': " + std::strerror(errno);
        if (S_ISDIR(st.st_mode)) return "cannot read '" + path + "': it is a directory";
        std::ifstream in(path, std::ios::binary);
        if (!in) return "cannot read '" + path + "': " + std::strerror(errno);
        return {};
      },
      "");
}

CLI::Validator writable_dir() {
  return CLI::Validator(
      [](std::string& path) -> std::string {
        const std::string what_to_do = "; give a directory you can write to";
        // The nearest existing directory on the way to `path`: files are made there.
        std::string dir = path;
        struct stat st {};
        while (::stat(dir.c_str(), &st) != 0) {
          // ENOTDIR: a file on the way, which the walk up then finds.
          if (errno != ENOENT && errno != ENOTDIR) return "cannot use '" + dir + "': " + std::strerror(errno) + what_to_do;
          while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
          const size_t slash = dir.rfind('/');
          dir = slash == std::string::npos ? "." : slash == 0 ? "/" : dir.substr(0, slash);
        }
        if (!S_ISDIR(st.st_mode)) {
          return "'" + dir + "' is a file, not a directory" + (dir == path ? "" : " (on the way to '" + path + "')") +
                 what_to_do;
        }
        // access(W_OK) says yes to root in /proc, where no file can be made: making one is the test.
        std::string probe = dir + "/.leoam-probe-XXXXXX";
        const int fd = ::mkstemp(probe.data());
        if (fd < 0) {
          // ENOENT from a directory that exists: a filesystem that takes no new files (/proc, /sys).
          const std::string why = errno == ENOENT ? "its filesystem takes no new files" : std::strerror(errno);
          return "cannot create files in '" + dir + "': " + why + what_to_do;
        }
        ::close(fd);
        ::unlink(probe.c_str());
        return {};
      },
      "");
}

CLI::Validator writable_file() {
  return CLI::Validator(
      [](std::string& path) -> std::string {
        const std::string what_to_do = "; give a file you can write";
        const auto cannot = [&] { return "cannot write '" + path + "': " + std::strerror(errno) + what_to_do; };
        struct stat st {};
        if (::stat(path.c_str(), &st) == 0) {
          if (S_ISDIR(st.st_mode)) return "cannot write '" + path + "': it is a directory" + what_to_do;
          const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);  // writes nothing
          if (fd < 0) return cannot();
          ::close(fd);
          return {};
        }
        // Made and removed: a run that fails before it writes the file leaves none behind.
        const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0) return cannot();
        ::close(fd);
        ::unlink(path.c_str());
        return {};
      },
      "");
}

Status named(const Status& st, const std::string& path) {
  return st.message().find(path) == std::string::npos ? st.with_context(path) : st;
}

CLI::Validator readable_model() {
  return CLI::Validator(
      [file = readable_file()](std::string& path) mutable {
        return is_model_folder(path) ? std::string() : file(path);
      },
      "");
}

HfImportOptions ModelSource::import_options() const {
  HfImportOptions options;
  if (!type.empty()) options.type = supported_type_by_name(type);  // checked by weight_type()
  // A folder's import copies every weight: minutes for a large model, so say how far it is.
  auto line = std::make_shared<StatusLine>(::isatty(STDERR_FILENO) != 0, "leoam: importing " + path);
  options.progress = [line](int64_t done, int64_t total) {
    if (done < total) {
      line->show(std::to_string(done) + "/" + std::to_string(total) + " tensors");
    } else {
      line->clear();
    }
  };
  return options;
}

CLI::Option* add_model_options(CLI::App& cmd, ModelSource& model) {
  CLI::Option* m =
      cmd.add_option("-m,--model", model.path, "model: a GGUF file, or a Hugging Face checkpoint folder")
          ->check(readable_model())
          ->type_name("PATH");
  cmd.add_option("--type", model.type,
                 "load a folder's matrices as this type (default: as stored); one of: " + supported_type_names())
      ->check(weight_type())
      ->type_name("TYPE");
  return m;
}

CLI::Validator weight_type() {
  return CLI::Validator(
      [](std::string& name) {
        return supported_type_by_name(name) ? std::string()
                                            : "weight type '" + name + "' is not one a model can be loaded as; "
                                              "choose one of: " + supported_type_names();
      },
      "");
}

Result<uint64_t> hash_model_file(const ModelSource& model) {
  if (!is_model_folder(model.path)) {
    LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::open(model.path));
    return checksum64(file->data(), file->size());
  }
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(model.path, ec)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  if (ec) return io_error(model.path + ": cannot list the folder: " + ec.message());
  std::sort(files.begin(), files.end());
  // The type as its canonical name, so that q8_0 and Q8_0 hash alike.
  const std::string type =
      model.type.empty() ? std::string() : ggml_type_name(static_cast<uint32_t>(*supported_type_by_name(model.type)));
  uint64_t hash = checksum64(type.data(), type.size());
  for (const std::filesystem::path& path : files) {
    const std::string name = path.filename().string();
    hash = checksum64_seeded(name.data(), name.size(), hash);
    LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::open(path.string()));
    hash = checksum64_seeded(file->data(), file->size(), hash);
  }
  return hash;
}

void add_threads_option(CLI::App& cmd, int& n_threads) {
  // More threads than the machine runs at once only wait on each other, far slower.
  const int most = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  cmd.add_option("-t,--threads", n_threads,
                 "threads (0: the physical cores, " + std::to_string(ThreadPool::default_thread_count()) + " here)")
      ->capture_default_str()
      ->check(non_negative<int>())
      ->check(detail::number_check<int>([most](int x) { return x <= most; },
                                        "in [0, " + std::to_string(most) + "]: this machine runs " +
                                            std::to_string(most) + " threads at once, and more only slow it down",
                                        ""));
}

Result<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("cannot read '" + path + "': " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return io_error("error reading '" + path + "'");
  return text.str();
}

void add_prompt_options(CLI::App& cmd, std::string& prompt, std::string& prompt_file, std::vector<std::string> unless) {
  CLI::Option* p = cmd.add_option("-p,--prompt", prompt, "prompt text (\"\" is allowed: start from BOS alone)");
  CLI::Option* f =
      cmd.add_option("-f,--file", prompt_file, "read the prompt from FILE, '-' for stdin (one trailing newline is dropped)")
          ->check(CLI::Validator(
              [file = readable_file()](std::string& path) mutable { return path == "-" ? std::string() : file(path); },
              ""))
          ->type_name("FILE");
  p->excludes(f);
  f->excludes(p);
  // "one of them is required" is checked when the subcommand's parse completes, so that it is a
  // parse error like any other (exit status 2).
  cmd.parse_complete_callback([&cmd, p, f, unless] {
    for (const std::string& name : unless) {
      if (cmd.get_option(name)->count() > 0) return;
    }
    if (p->count() == 0 && f->count() == 0) throw CLI::RequiredError("a prompt (-p TEXT or -f FILE)");
  });
}

Result<std::string> resolve_prompt(const std::string& prompt, const std::string& prompt_file) {
  if (prompt_file.empty()) return prompt;
  LEOAM_ASSIGN_OR_RETURN(std::string text, read_text_file(prompt_file == "-" ? "/dev/stdin" : prompt_file));
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

}  // namespace leoam::cli
