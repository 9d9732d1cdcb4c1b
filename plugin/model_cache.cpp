// The compiled-model cache (see model_cache.hpp).

#include "plugin/model_cache.hpp"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <optional>
#include <sstream>
#include <type_traits>
#include <utility>

#include <omp.h>
#include <spdlog/spdlog.h>
#include <xxhash.h>
#include <oneapi/dnnl/dnnl.hpp>

#include "graph/serialize.hpp"

namespace qfuse::plugin {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// Changes whenever an entry's layout (below or the graph's) changes.
constexpr std::uint32_t kEntryFormat = 3;
constexpr std::array<char, 8> kMagic{'Q', 'F', 'U', 'S', 'E', 'C', 'M', '\n'};
constexpr const char* kEntrySuffix = ".qfc";
constexpr const char* kTemporaryMarker = ".qfc.tmp.";
constexpr const char* kDigestFolder = "digests";
constexpr const char* kDigestSuffix = ".qfd";

// The first 64 bytes of an entry; the contents follow.
struct EntryHeader {
  std::array<char, 8> magic = kMagic;
  std::uint32_t format = kEntryFormat;
  std::uint32_t header_bytes = sizeof(EntryHeader);
  std::uint64_t contents_bytes = 0;
  std::uint64_t contents_hash = 0;  // XXH3-64 of the contents
  std::uint64_t key_low = 0, key_high = 0;
  std::array<std::uint8_t, 16> reserved{};
};
static_assert(sizeof(EntryHeader) == 64);

std::string errno_text() { return std::strerror(errno); }

// How the cache names a file: absolute and normalized (a relative path or
// one through ".." names the same file from any working directory).
std::string absolute_of(const fs::path& path) {
  std::error_code ec;
  return fs::absolute(path, ec).lexically_normal().string();
}

// A name beside `file` for writing it before it is renamed into place,
// unique to this process and call (clear_cache() knows them by the marker).
fs::path temporary_beside(const fs::path& file) {
  static std::atomic<unsigned> counter{0};
  return file.parent_path() / (file.stem().string() + kTemporaryMarker + std::to_string(::getpid()) +
                               "." + std::to_string(counter++));
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// Hashes are XXH3-128 trees: each 8 MiB chunk hashed on its own (on the
// OpenMP team), then the chunks' digests and the length hashed together.
// Two cores check a BERT-base's 180 MB file and entry in half the time.
constexpr std::size_t kHashChunk = std::size_t{8} << 20;

XXH128_hash_t tree_digest(const std::vector<XXH128_hash_t>& chunks, std::uint64_t bytes) {
  const std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(),
                                                                      &XXH3_freeState);
  XXH3_128bits_reset(state.get());
  XXH3_128bits_update(state.get(), chunks.data(), chunks.size() * sizeof(XXH128_hash_t));
  XXH3_128bits_update(state.get(), &bytes, sizeof bytes);
  return XXH3_128bits_digest(state.get());
}

// The tree hash of `size` bytes of `fd` from `offset`, read with pread into
// a buffer per chunk (not mapped: the bytes checked do not stay in the
// process's memory). False when a read fails.
bool hash_file_range(int fd, std::uint64_t offset, std::uint64_t size, XXH128_hash_t& out) {
  const std::size_t n = static_cast<std::size_t>((size + kHashChunk - 1) / kHashChunk);
  std::vector<XXH128_hash_t> chunks(n);
  bool ok = true;
  // A buffer per thread of at most one chunk (no team for one chunk).
  const auto buffer_size = static_cast<std::size_t>(std::min<std::uint64_t>(kHashChunk, size));
#pragma omp parallel if (n > 1)
  {
    const auto buffer = std::make_unique_for_overwrite<char[]>(std::max<std::size_t>(buffer_size, 1));
#pragma omp for schedule(static)
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t at = offset + i * kHashChunk;
      const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(kHashChunk, offset + size - at));
      std::size_t got = 0;
      while (got < want) {
        const ssize_t r = ::pread(fd, buffer.get() + got, want - got, static_cast<off_t>(at + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += static_cast<std::size_t>(r);
      }
      if (got != want) {
#pragma omp atomic write
        ok = false;
        continue;
      }
      chunks[i] = XXH3_128bits(buffer.get(), want);
    }
  }
  out = tree_digest(chunks, size);
  return ok;
}

struct FileHash {
  std::uint64_t bytes = 0;
  std::uint64_t low = 0, high = 0;
  bool operator==(const FileHash&) const = default;
};

// A file as its inode describes it. On the local file systems below, a
// write() changes mtime and ctime, a replacement changes the inode, and no
// call sets a ctime back: while the stamp holds, so do the bytes written
// through the file system.
struct FileStamp {
  std::uint64_t device = 0, inode = 0, bytes = 0;
  std::int64_t mtime_s = 0, mtime_ns = 0, ctime_s = 0, ctime_ns = 0;
  bool operator==(const FileStamp&) const = default;
};

FileStamp stamp_of(const struct stat& st) {
  return {static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
          static_cast<std::uint64_t>(st.st_size), st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
          st.st_ctim.tv_sec, st.st_ctim.tv_nsec};
}

// A file's stamp taken before its bytes are read, and whether its digest may
// be remembered: the file is on a local file system that keeps ctime (FUSE
// and network mounts may make one up) and was last changed more than
// kSettleSeconds before the stamp was taken (two writes within one tick of
// the file system's clock could leave one stamp; the clock is read before
// the stamp, so a write during the hashing counts as recent).
struct Stamped {
  static constexpr std::int64_t kSettleSeconds = 2;
  FileStamp stamp;
  bool rememberable = false;
};

bool keeps_ctime(int fd) {
  struct statfs fs {};
  if (::fstatfs(fd, &fs) != 0) return false;
  switch (static_cast<unsigned long>(fs.f_type)) {
    case EXT4_SUPER_MAGIC:  // ext2, ext3 and ext4 share it
    case XFS_SUPER_MAGIC:
    case BTRFS_SUPER_MAGIC:
    case TMPFS_MAGIC:
    case OVERLAYFS_SUPER_MAGIC:
    case F2FS_SUPER_MAGIC:
      return true;
    default:
      return false;
  }
}

// False when the file cannot be stat'ed.
bool take_stamp(int fd, Stamped& out) {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return false;
  out.stamp = stamp_of(st);
  // The later of mtime and ctime; nanoseconds subtracted only once the
  // seconds are close (no overflow for any time a file system stores).
  const FileStamp& f = out.stamp;
  const auto [changed_s, changed_ns] =
      std::max(std::pair{f.mtime_s, f.mtime_ns}, std::pair{f.ctime_s, f.ctime_ns});
  constexpr std::int64_t kSettle = Stamped::kSettleSeconds;
  const bool settled =
      changed_s < now.tv_sec - kSettle - 1 ||
      (changed_s <= now.tv_sec &&
       (now.tv_sec - changed_s) * 1'000'000'000 + (now.tv_nsec - changed_ns) >= kSettle * 1'000'000'000);
  out.rememberable = settled && keeps_ctime(fd);
  return true;
}

// True when the open file still has the stamp `s` took.
bool unchanged(int fd, const Stamped& s) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 && stamp_of(st) == s.stamp;
}

// Digests of files remembered across processes, in the cache's `digests`
// folder: a record per file (named by the hash of its absolute path) with the
// file's stamp and digest. A warm start then reads the stamps of the model's
// files and of the entry, not their bytes. A record stands while its file
// keeps the stamp. Records are removed by clear_cache(), not pruned.
class Digests {
 public:
  explicit Digests(const fs::path& cache_dir)
      : dir_(cache_dir.empty() ? fs::path() : cache_dir / kDigestFolder) {}

  std::optional<FileHash> recall(const std::string& path, const FileStamp& stamp) const {
    if (dir_.empty()) return std::nullopt;
    const Fd fd(::open(record_of(path).c_str(), O_RDONLY | O_CLOEXEC));
    Record r;
    if (fd.get() < 0 || ::pread(fd.get(), &r, sizeof r, 0) != static_cast<ssize_t>(sizeof r) ||
        r.magic != kRecordMagic || r.check != checksum(r) ||
        r.path_hash != XXH3_64bits(path.data(), path.size()) || !(r.stamp == stamp)) {
      return std::nullopt;
    }
    return r.hash;
  }

  // Records `hash` for `path`, whose file had `stamp` (rememberable) before
  // and after it was hashed; a failure to write is not an error.
  void remember(const std::string& path, const FileStamp& stamp, const FileHash& hash) const {
    if (dir_.empty()) return;
    std::error_code ec;
    fs::create_directories(dir_, ec);
    Record r;
    r.path_hash = XXH3_64bits(path.data(), path.size());
    r.stamp = stamp;
    r.hash = hash;
    r.check = checksum(r);
    const fs::path file = record_of(path);
    const fs::path temporary = temporary_beside(file);
    const Fd fd(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    const bool written =
        fd.get() >= 0 && ::write(fd.get(), &r, sizeof r) == static_cast<ssize_t>(sizeof r);
    if (!written || std::rename(temporary.c_str(), file.c_str()) != 0) {
      spdlog::debug("cache: cannot record the digest of {} in {} ({})", path, dir_.string(),
                    errno_text());
      fs::remove(temporary, ec);
    }
  }

 private:
  static constexpr std::array<char, 8> kRecordMagic{'Q', 'F', 'U', 'S', 'E', 'D', 'G', '1'};
  struct Record {
    std::array<char, 8> magic = kRecordMagic;
    std::uint64_t path_hash = 0;
    FileStamp stamp;
    FileHash hash;
    std::uint64_t check = 0;  // XXH3-64 of the bytes before it
  };
  static_assert(std::is_trivially_copyable_v<Record> && sizeof(Record) == 104);

  // Of the bytes before `check`, seeded with the hash's chunk size: a record
  // of a build that hashes files otherwise fails it.
  static std::uint64_t checksum(const Record& r) {
    return XXH3_64bits_withSeed(&r, offsetof(Record, check), kHashChunk);
  }

  fs::path record_of(const std::string& path) const {
    const XXH128_hash_t h = XXH3_128bits(path.data(), path.size());
    char name[40];
    std::snprintf(name, sizeof name, "%016llx%016llx%s", static_cast<unsigned long long>(h.high64),
                  static_cast<unsigned long long>(h.low64), kDigestSuffix);
    return dir_ / name;
  }

  fs::path dir_;
};

// A whole file mapped read-only (constants are never written: the graph
// holds them as const); unmapped when the last constant reading it goes.
class Mapping {
  struct Private {};  // only open() makes one

 public:
  Mapping(Private, void* data, std::size_t size) : data_(data), size_(size) {}
  // Null when the file cannot be opened or mapped. Pages are read as they
  // are touched.
  static std::shared_ptr<const Mapping> open(const fs::path& path) {
    const Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    struct stat st {};
    if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0) return nullptr;
    return map(fd.get(), static_cast<std::size_t>(st.st_size));
  }
  // The first `size` bytes of the open file `fd`.
  static std::shared_ptr<const Mapping> map(int fd, std::size_t size) {
    if (size == 0) return std::make_shared<const Mapping>(Private{}, nullptr, 0);
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) return nullptr;
    return std::make_shared<const Mapping>(Private{}, p, size);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (data_ != nullptr) ::munmap(data_, size_);
  }
  std::span<const std::byte> bytes() const {
    return {static_cast<const std::byte*>(data_), size_};
  }

 private:
  void* data_;
  std::size_t size_;
};

// How many files a cache lookup checked by their remembered digests, and
// how many it read.
struct Checked {
  int remembered = 0, read = 0;
};

// The file's hash: remembered by `digests` while the file is unchanged, else
// read (and remembered). IoError when the file cannot be read.
FileHash hash_file(const fs::path& path, const Digests& digests, Checked& checked) {
  const std::string absolute = absolute_of(path);
  const Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  Stamped before;
  if (fd.get() < 0 || !take_stamp(fd.get(), before)) {
    throw IoError("cache: cannot read '" + path.string() + "': " + errno_text());
  }
  if (const std::optional<FileHash> known = digests.recall(absolute, before.stamp)) {
    ++checked.remembered;
    return *known;
  }
  ++checked.read;
  XXH128_hash_t h{};
  if (!hash_file_range(fd.get(), 0, before.stamp.bytes, h)) {
    throw IoError("cache: cannot read '" + path.string() + "': " + errno_text());
  }
  const FileHash hash{before.stamp.bytes, h.low64, h.high64};
  if (before.rememberable && unchanged(fd.get(), before)) digests.remember(absolute, before.stamp, hash);
  return hash;
}

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch) + " " + v->hash;
}

// What the entry depends on besides the files' bytes, as text.
std::string key_text(const ModelFiles& model, const CompileOptions& options) {
  std::ostringstream k;
  k << "qfuse " << QFUSE_VERSION_STRING << ", entry format " << kEntryFormat << ", graph format "
    << graph::kSerializedGraphVersion << "\n";
  k << "oneDNN " << onednn_version() << ", ISA "
    << static_cast<unsigned>(dnnl::get_effective_cpu_isa()) << "\n";
  char eta[64];
  std::snprintf(eta, sizeof eta, "%a", options.integer_eta);
  k << "compile: fuse " << options.fuse << ", residual round drop "
    << options.allow_residual_round_drop << ", threads "
    << (options.threads > 0 ? options.threads : omp_get_max_threads()) << ", integer only "
    << options.integer_only << ", integer eta " << eta << "\n";
  k << "import: " << model.import_key << "\n";
  return k.str();
}

std::string hex(std::uint64_t high, std::uint64_t low) {
  char s[33];
  std::snprintf(s, sizeof s, "%016llx%016llx", static_cast<unsigned long long>(high),
                static_cast<unsigned long long>(low));
  return s;
}

// Writes to a FILE, hashing what it writes as hash_file_range() does.
class FileSink : public graph::ByteSink {
 public:
  explicit FileSink(std::FILE* f) : f_(f), state_(XXH3_createState(), &XXH3_freeState) {
    XXH3_128bits_reset(state_.get());
  }
  void write(const void* data, std::size_t size) override {
    if (size == 0) return;
    if (std::fwrite(data, 1, size, f_) != size) throw IoError(errno_text());
    const auto* p = static_cast<const char*>(data);
    while (size > 0) {
      const std::size_t n = std::min(size, kHashChunk - in_chunk_);
      XXH3_128bits_update(state_.get(), p, n);
      in_chunk_ += n;
      p += n;
      size -= n;
      offset_ += n;
      if (in_chunk_ == kHashChunk) end_chunk();
    }
  }
  XXH128_hash_t digest() {
    if (in_chunk_ > 0) end_chunk();
    return tree_digest(chunks_, offset_);
  }

 private:
  void end_chunk() {
    chunks_.push_back(XXH3_128bits_digest(state_.get()));
    XXH3_128bits_reset(state_.get());
    in_chunk_ = 0;
  }
  std::FILE* f_;
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state_;
  std::vector<XXH128_hash_t> chunks_;
  std::size_t in_chunk_ = 0;
};

struct Dependency {
  std::string path;
  FileHash hash;
};

// The contents before the graph.
struct EntryPreamble {
  std::string key;
  std::string model;
  std::vector<Dependency> dependencies;
  std::vector<std::string> fusion_log;
  std::vector<FusionRefusal> refusals;
};

void write_strings(graph::ByteSink& out, const std::vector<std::string>& strings) {
  graph::write_u64(out, strings.size());
  for (const std::string& s : strings) graph::write_string(out, s);
}

std::vector<std::string> read_strings(graph::ByteSource& in) {
  const std::uint64_t n = graph::read_u64(in);
  if (n > in.remaining() / 8) throw GraphError("a list of " + std::to_string(n) + " strings");
  std::vector<std::string> strings;
  for (std::uint64_t i = 0; i < n; ++i) strings.push_back(graph::read_string(in));
  return strings;
}

void write_preamble(graph::ByteSink& out, const EntryPreamble& p) {
  graph::write_string(out, p.key);
  graph::write_string(out, p.model);
  graph::write_u64(out, p.dependencies.size());
  for (const Dependency& d : p.dependencies) {
    graph::write_string(out, d.path);
    graph::write_u64(out, d.hash.bytes);
    graph::write_u64(out, d.hash.low);
    graph::write_u64(out, d.hash.high);
  }
  write_strings(out, p.fusion_log);
  graph::write_u64(out, p.refusals.size());
  for (const FusionRefusal& r : p.refusals) write_strings(out, {r.pass, r.node, r.reason});
}

EntryPreamble read_preamble(graph::ByteSource& in) {
  EntryPreamble p;
  p.key = graph::read_string(in);
  p.model = graph::read_string(in);
  const std::uint64_t deps = graph::read_u64(in);
  if (deps > in.remaining() / 32) throw GraphError("a list of " + std::to_string(deps) + " files");
  for (std::uint64_t i = 0; i < deps; ++i) {
    Dependency d;
    d.path = graph::read_string(in);
    d.hash.bytes = graph::read_u64(in);
    d.hash.low = graph::read_u64(in);
    d.hash.high = graph::read_u64(in);
    p.dependencies.push_back(std::move(d));
  }
  p.fusion_log = read_strings(in);
  const std::uint64_t refusals = graph::read_u64(in);
  if (refusals > in.remaining() / 24) throw GraphError("a list of " + std::to_string(refusals) + " refusals");
  for (std::uint64_t i = 0; i < refusals; ++i) {
    std::vector<std::string> r = read_strings(in);
    if (r.size() != 3) throw GraphError("a refusal of " + std::to_string(r.size()) + " fields");
    p.refusals.push_back({std::move(r[0]), std::move(r[1]), std::move(r[2])});
  }
  return p;
}

// After the graph: each constant an op holds in its own layout, by its
// number in the stream, with its oneDNN descriptor and bytes.
void write_held(graph::ByteSink& out, const std::vector<std::uint32_t>& numbers,
                const HeldConstants& held) {
  std::vector<std::pair<std::uint32_t, const HeldConstant*>> rows;
  for (const auto& [value, h] : held) {
    if (value < numbers.size() && numbers[value] != graph::kNotWritten) {
      rows.emplace_back(numbers[value], &h);
    }
  }
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  graph::write_u64(out, rows.size());
  for (const auto& [number, h] : rows) {
    graph::write_u64(out, number);
    out.write(&h->desc.data, sizeof h->desc.data);
    const std::size_t bytes = h->desc.get_size();
    graph::write_u64(out, bytes);
    graph::write_aligned(out, h->data, bytes);
  }
}

HeldConstants read_held(graph::ByteSource& in) {
  HeldConstants held;
  const std::uint64_t n = graph::read_u64(in);
  if (n > in.remaining() / sizeof(dnnl_memory_desc_t)) {
    throw GraphError("a list of " + std::to_string(n) + " held constants");
  }
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint64_t number = graph::read_u64(in);
    dnnl_memory_desc_t desc;
    std::memcpy(&desc, in.take(sizeof desc), sizeof desc);
    const std::uint64_t bytes = graph::read_u64(in);
    const dnnl::memory::desc md(desc);
    if (bytes != md.get_size()) {
      throw GraphError("a held constant of " + std::to_string(bytes) + " bytes whose layout takes " +
                       std::to_string(md.get_size()));
    }
    const std::byte* data = graph::read_aligned(in, static_cast<std::size_t>(bytes));
    held.emplace(static_cast<std::uint32_t>(number), HeldConstant{md, data});
  }
  return held;
}

// An entry's file checked against its header: the contents, or why not.
struct CheckedEntry {
  std::shared_ptr<const Mapping> mapping;
  std::span<const std::byte> contents;
  EntryHeader header;
  std::string problem;
};

// `digests`: null to read the header only, else the contents are checked
// against the checksum, unless `digests` remembers it for the file as it is.
CheckedEntry check_entry(const fs::path& file, const Digests* digests, Checked& checked) {
  CheckedEntry e;
  const Fd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  Stamped before;
  if (fd.get() >= 0 && take_stamp(fd.get(), before)) {
    e.mapping = Mapping::map(fd.get(), static_cast<std::size_t>(before.stamp.bytes));
  }
  if (e.mapping == nullptr) {
    e.problem = "cannot be mapped";
    return e;
  }
  const std::span<const std::byte> bytes = e.mapping->bytes();
  if (bytes.size() < sizeof(EntryHeader)) {
    e.problem = "is " + std::to_string(bytes.size()) + " bytes, shorter than its header";
    return e;
  }
  std::memcpy(&e.header, bytes.data(), sizeof e.header);
  if (e.header.magic != kMagic) {
    e.problem = "is not a qfuse cache entry";
  } else if (e.header.format != kEntryFormat || e.header.header_bytes != sizeof(EntryHeader)) {
    e.problem = "has format " + std::to_string(e.header.format) + " (this build writes " +
                std::to_string(kEntryFormat) + ")";
  } else if (e.header.contents_bytes != bytes.size() - sizeof(EntryHeader)) {
    e.problem = "holds " + std::to_string(bytes.size() - sizeof(EntryHeader)) +
                " bytes after its header, its header says " +
                std::to_string(e.header.contents_bytes) + " (truncated?)";
  } else {
    e.contents = bytes.subspan(sizeof(EntryHeader));
    if (digests == nullptr) return e;
    const std::string absolute = absolute_of(file);
    const std::optional<FileHash> known = digests->recall(absolute, before.stamp);
    if (known && known->bytes == e.contents.size() && known->low == e.header.contents_hash) {
      ++checked.remembered;
      return e;
    }
    ++checked.read;
    XXH128_hash_t h{};
    if (!hash_file_range(fd.get(), sizeof(EntryHeader), e.contents.size(), h)) {
      e.problem = "cannot be read: " + errno_text();
      e.contents = {};
    } else if (h.low64 != e.header.contents_hash) {
      e.problem = "fails its checksum (damaged)";
      e.contents = {};
    } else if (before.rememberable && unchanged(fd.get(), before)) {
      digests->remember(absolute, before.stamp, {e.contents.size(), h.low64, h.high64});
    }
  }
  return e;
}

// The fused graph in `file`, or nullopt with `why` (a miss when the file is
// absent: `why` stays empty).
// `hashed`: files hashed already (the key's).
std::optional<FusedGraph> load_entry(const fs::path& file, const std::string& key,
                                     const std::vector<Dependency>& hashed, const Digests& digests,
                                     Checked& checked, std::string& why) {
  std::error_code ec;
  if (!fs::exists(file, ec)) return std::nullopt;
  CheckedEntry e = check_entry(file, &digests, checked);
  if (!e.problem.empty()) {
    why = "entry " + file.string() + " " + e.problem;
    return std::nullopt;
  }
  try {
    graph::ByteSource in(e.contents);
    EntryPreamble p = read_preamble(in);
    if (p.key != key) {
      why = "entry " + file.string() + " was compiled with other options (a hash collision)";
      return std::nullopt;
    }
    for (const Dependency& d : p.dependencies) {
      const auto known = std::find_if(hashed.begin(), hashed.end(),
                                      [&d](const Dependency& h) { return h.path == d.path; });
      FileHash now;
      try {
        now = known != hashed.end() ? known->hash : hash_file(d.path, digests, checked);
      } catch (const IoError&) {
        why = "the model's file " + d.path + " is gone";
        return std::nullopt;
      }
      if (now != d.hash) {
        why = "the model's file " + d.path + " changed since the entry was written";
        return std::nullopt;
      }
    }
    FusedGraph fused{graph::read_graph(in, e.mapping), std::move(p.fusion_log),
                     std::move(p.refusals), read_held(in), {}, e.mapping};
    fused.compositions = graph::read_compositions(in);
    if (in.remaining() != 0) throw GraphError(std::to_string(in.remaining()) + " bytes after the graph");
    return fused;
  } catch (const Error& error) {
    why = "entry " + file.string() + " cannot be read (" + error.what() + ")";
    return std::nullopt;
  }
}

// Writes the entry next to `file` and renames it into place. Returns what
// happened, for CompileTimes::cache; a failure is a warning.
std::string store_entry(const fs::path& file, const std::uint64_t key_low,
                        const std::uint64_t key_high, const EntryPreamble& preamble,
                        const FusedGraph& fused) {
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  const fs::path temporary = temporary_beside(file);
  std::FILE* f = std::fopen(temporary.c_str(), "wbx");
  if (f == nullptr) {
    const std::string reason = errno_text();
    spdlog::warn("cache: cannot write in {} ({}); the model is compiled but not cached",
                 file.parent_path().string(), reason);
    return "miss, not stored (" + reason + ")";
  }
  std::string failure;
  try {
    EntryHeader header;
    if (std::fwrite(&header, 1, sizeof header, f) != sizeof header) throw IoError(errno_text());
    FileSink sink(f);
    write_preamble(sink, preamble);
    write_held(sink, graph::write_graph(sink, fused.graph), fused.held);
    graph::write_compositions(sink, fused.compositions);
    header.contents_bytes = sink.offset();
    header.contents_hash = sink.digest().low64;
    header.key_low = key_low;
    header.key_high = key_high;
    if (std::fseek(f, 0, SEEK_SET) != 0 || std::fwrite(&header, 1, sizeof header, f) != sizeof header ||
        std::fflush(f) != 0) {
      throw IoError(errno_text());
    }
  } catch (const Error& e) {
    failure = e.what();
  }
  if (std::fclose(f) != 0 && failure.empty()) failure = errno_text();
  if (failure.empty() && std::rename(temporary.c_str(), file.c_str()) != 0) failure = errno_text();
  if (!failure.empty()) {
    fs::remove(temporary, ec);
    spdlog::warn("cache: cannot write {} ({}); the model is compiled but not cached",
                 file.string(), failure);
    return "miss, not stored (" + failure + ")";
  }
  spdlog::info("cache: stored {}", file.string());
  return "miss, stored " + file.string();
}

}  // namespace

bool remembers_digests_on(const fs::path& path) {
  const Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  return fd.get() >= 0 && keeps_ctime(fd.get());
}

fs::path cache_dir_of(const CompileOptions& options) {
  if (!options.cache_dir.empty()) return options.cache_dir;
  const char* env = std::getenv("QFUSE_CACHE_DIR");
  return env != nullptr ? fs::path(env) : fs::path();
}

CompiledModel compile_files(const ModelFiles& model, const CompileOptions& options) {
  // The cache's lines obey QFUSE_LOG_LEVEL as the compile's do (they came
  // before the first compile set the level, and so showed at info).
  init_logging();
  const fs::path dir = cache_dir_of(options);
  if (dir.empty()) return compile_observed(model.import(nullptr), options, nullptr, 0.0);

  const auto start = Clock::now();
  const std::string key = key_text(model, options);
  EntryPreamble preamble;
  preamble.key = key;
  preamble.model = absolute_of(model.files.front());
  // The key: the text, then each file's hash (which the entry keeps too, by
  // absolute path, to check the file on every load from any directory).
  const Digests digests(dir);
  Checked checked;
  std::string keyed = key;
  for (const fs::path& file : model.files) {
    const FileHash hash = hash_file(file, digests, checked);
    keyed.append(reinterpret_cast<const char*>(&hash), sizeof hash);
    preamble.dependencies.push_back({absolute_of(file), hash});
  }
  const XXH128_hash_t h = XXH3_128bits(keyed.data(), keyed.size());
  const fs::path file = dir / (hex(h.high64, h.low64) + kEntrySuffix);

  std::string why;
  std::optional<FusedGraph> fused =
      load_entry(file, key, preamble.dependencies, digests, checked, why);
  if (fused) {
    const double ms = ms_since(start);
    const std::string digests_used = std::to_string(checked.remembered) + " of " +
                                     std::to_string(checked.remembered + checked.read) +
                                     " files checked by remembered digests";
    spdlog::info("cache: hit {} ({:.1f} ms to check and map; {})", file.string(), ms, digests_used);
    return compile_fused(std::move(*fused), options, "hit " + file.string() + "; " + digests_used,
                         ms);
  }
  if (why.empty()) {
    spdlog::info("cache: miss {}", file.string());
  } else {
    spdlog::warn("cache: {}; compiling afresh", why);
  }
  const double lookup_ms = ms_since(start);
  // The files the import reads besides: the entry checks them on every load.
  const auto read_file = [&](const fs::path& path) {
    const std::string absolute = absolute_of(path);
    for (const Dependency& d : preamble.dependencies) {
      if (d.path == absolute) return;
    }
    preamble.dependencies.push_back({absolute, hash_file(path, digests, checked)});
  };
  const FusedObserver store = [&](const FusedGraph& built) {
    preamble.fusion_log = built.fusion_log;
    preamble.refusals = built.refusals;
    return store_entry(file, h.low64, h.high64, preamble, built);
  };
  return compile_observed(model.import(read_file), options, store, lookup_ms);
}

std::vector<CacheEntryInfo> list_cache(const fs::path& dir) {
  std::vector<std::pair<fs::file_time_type, CacheEntryInfo>> found;
  std::error_code ec;
  for (const fs::directory_entry& f : fs::directory_iterator(dir, ec)) {
    if (!f.is_regular_file(ec) || f.path().extension() != kEntrySuffix) continue;
    CacheEntryInfo info;
    info.file = f.path();
    info.bytes = f.file_size(ec);
    Checked unused;
    CheckedEntry e = check_entry(f.path(), nullptr, unused);
    info.problem = e.problem;
    if (e.problem.empty()) {
      try {
        graph::ByteSource in(e.contents);
        info.key = graph::read_string(in);
        info.model = graph::read_string(in);
      } catch (const Error& error) {
        info.problem = std::string("cannot be read (") + error.what() + ")";
      }
    }
    found.emplace_back(f.last_write_time(ec), std::move(info));
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<CacheEntryInfo> entries;
  for (auto& [time, info] : found) entries.push_back(std::move(info));
  return entries;
}

std::size_t clear_cache(const fs::path& dir) {
  std::size_t removed = 0;
  std::error_code ec;
  for (const fs::directory_entry& f : fs::directory_iterator(dir, ec)) {
    const std::string name = f.path().filename().string();
    const bool entry = f.path().extension() == kEntrySuffix;
    const bool temporary = name.find(kTemporaryMarker) != std::string::npos;
    if (f.is_regular_file(ec) && (entry || temporary) && fs::remove(f.path(), ec)) ++removed;
  }
  // The remembered digests go too (not counted: they are not entries).
  for (const fs::directory_entry& f : fs::directory_iterator(dir / kDigestFolder, ec)) {
    const std::string name = f.path().filename().string();
    if (f.path().extension() == kDigestSuffix || name.find(kTemporaryMarker) != std::string::npos) {
      fs::remove(f.path(), ec);
    }
  }
  fs::remove(dir / kDigestFolder, ec);  // when empty
  return removed;
}

}  // namespace qfuse::plugin
