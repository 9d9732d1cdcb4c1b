#pragma once
// The compiled-model cache (CompileOptions::cache_dir, QFUSE_CACHE_DIR).
//
// An entry holds a model as its fusion passes left it: the graph with its
// weights already quantized, the fusion log and the refusals, each int8
// layer's weights in its primitive's layout, and the composer's results. Loading one
// maps the file and hands the constants to the graph in place; no import,
// shape inference or pass runs, only the planning and the primitives.
//
// Entries are named by a 128-bit XXH3 hash of the model's bytes (every file
// it reads, external data included), the import and compile options, qfuse's
// version and entry format, oneDNN's version and the CPU's ISA. Each carries
// an XXH3 checksum of its contents: a truncated or damaged entry is compiled
// afresh and replaced. Hashing a BERT-base's model file and entry takes most
// of a warm start, so digests are remembered in DIR/digests, each with its
// file's stamp (device, inode, size, mtime, ctime), on local file systems
// that keep ctime: while a file keeps its stamp it is not read again. A
// write() changes the stamp, so a file changed or damaged through the file
// system is read and checked as before. Not caught: bytes that change below
// the file system (the disk), or through a shared mapping's page that is
// already dirty (its mtime moves at the first write fault only). Entries are written to a temporary file
// and renamed into place, so processes filling one entry at once each leave a
// whole one. A cache directory that cannot be written is a warning.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "composer/composer.hpp"
#include "graph/graph.hpp"
#include "plugin/execution.hpp"
#include "qfuse/qfuse.hpp"

namespace qfuse::plugin {

// What a compile stores of a model: the graph its passes left, the fusion
// log and refusals, and the constants its ops hold in their own layouts
// (int8 weights reordered for their primitives), by value of that graph.
struct FusedGraph {
  graph::Graph graph;
  std::vector<std::string> fusion_log;
  std::vector<FusionRefusal> refusals;
  HeldConstants held;
  // The layers' compositions by chain key (LayerBuildCache::compositions).
  std::map<std::string, composer::ComposeResult> compositions;
  std::shared_ptr<const void> entry;  // what `held` and the constants point into
};

// Called once the model is built, with the graph as the passes left it;
// returns what the cache did with it (CompileTimes::cache).
using FusedObserver = std::function<std::string(const FusedGraph& fused)>;

// compiler.cpp: a compile from a cache entry (no shapes, no passes) and one
// of a graph it takes over (no copy) that hands its fused graph to
// `observer` (if any). `cache` and `cache_ms` go into
// CompileTimes.
CompiledModel compile_fused(FusedGraph fused, const CompileOptions& options,
                            const std::string& cache, double cache_ms);
CompiledModel compile_observed(graph::Graph graph, const CompileOptions& options,
                               const FusedObserver& observer, double cache_ms);

// Whether the cache remembers the digests of files on the file system that
// holds `path` (a local one that keeps ctime: ext4, XFS, btrfs, tmpfs,
// overlayfs, F2FS).
bool remembers_digests_on(const std::filesystem::path& path);

// The cache directory: options.cache_dir, else QFUSE_CACHE_DIR, else none.
std::filesystem::path cache_dir_of(const CompileOptions& options);

// A model given as files. `files`: the model file first, then what it is
// known to read besides (OpenVINO's .bin); `import_key` spells the import
// options. `import` imports it, calling `read_file` with each further file
// it reads (ONNX external data), whose bytes the entry then checks.
struct ModelFiles {
  std::vector<std::filesystem::path> files;
  std::string import_key;
  std::function<graph::Graph(const std::function<void(const std::filesystem::path&)>& read_file)>
      import;
};

// Imports and compiles `model`, through the cache when one is set.
CompiledModel compile_files(const ModelFiles& model, const CompileOptions& options);

struct CacheEntryInfo {
  std::filesystem::path file;
  std::uintmax_t bytes = 0;
  std::string model;  // the model file it was compiled from
  std::string key;    // what it was compiled with (versions, ISA, options)
  std::string problem;  // empty, or why it cannot be used
};
// The entries in `dir` (none when it does not exist), newest first.
std::vector<CacheEntryInfo> list_cache(const std::filesystem::path& dir);
// Removes the entries, left-over temporary files and remembered digests in
// `dir`; returns how many entries and temporary files.
std::size_t clear_cache(const std::filesystem::path& dir);

}  // namespace qfuse::plugin
