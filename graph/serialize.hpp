#pragma once
// A graph as bytes and back: what the compiled-model cache stores of a model
// after its fusion passes. The writer keeps the live nodes (in topological
// order) and the values they read and write, renumbered; each constant's
// bytes start 64-byte aligned in the stream, so that a reader over a mapped
// file hands them to the graph in place (no copy).
//
// The format is qfuse's own and changes with the IR: kFormatVersion counts
// its changes, and any change to an op's attributes, to the composer's chain
// or to the layout below bumps it (a cache entry of another version is
// compiled afresh).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "composer/composer.hpp"
#include "graph/graph.hpp"

namespace qfuse::graph {

inline constexpr std::uint32_t kSerializedGraphVersion = 7;  // 7: GeluDynamicQuantize nodes

// Where the writer puts bytes; `offset` counts those written so far (the
// alignment of constants is relative to the start of the stream).
class ByteSink {
 public:
  virtual ~ByteSink() = default;
  virtual void write(const void* data, std::size_t size) = 0;
  std::uint64_t offset() const { return offset_; }

 protected:
  std::uint64_t offset_ = 0;
};

// Bytes being read, with bounds checks: running past the end, or a count no
// stream this size could hold, throws GraphError (a truncated or damaged
// stream is never read beyond its end).
class ByteSource {
 public:
  explicit ByteSource(std::span<const std::byte> bytes) : bytes_(bytes) {}
  const std::byte* take(std::size_t size);
  void align(std::size_t alignment);
  std::size_t remaining() const { return bytes_.size() - at_; }
  std::size_t position() const { return at_; }

 private:
  std::span<const std::byte> bytes_;
  std::size_t at_ = 0;
};

// Returns each value's number in the stream (by ValueId index), or
// kNotWritten for a value no live node reads or writes.
inline constexpr std::uint32_t kNotWritten = 0xffffffffu;
std::vector<std::uint32_t> write_graph(ByteSink& out, const Graph& graph);
// `owner` keeps the bytes alive: the constants read are views of them that
// share its lifetime. Throws GraphError on a stream that is not a graph.
Graph read_graph(ByteSource& in, std::shared_ptr<const void> owner);

// The composer's results by chain key (LayerBuildCache's compositions).
using Compositions = std::map<std::string, composer::ComposeResult>;
void write_compositions(ByteSink& out, const Compositions& compositions);
Compositions read_compositions(ByteSource& in);

// Strings and string lists, for what a stream carries beside the graph.
void write_string(ByteSink& out, const std::string& s);
std::string read_string(ByteSource& in);
void write_u64(ByteSink& out, std::uint64_t v);
std::uint64_t read_u64(ByteSource& in);
// Raw bytes starting at a multiple of 64 in the stream (zeros before them).
void write_aligned(ByteSink& out, const void* data, std::size_t size);
const std::byte* read_aligned(ByteSource& in, std::size_t size);

}  // namespace qfuse::graph
