#pragma once
// compose() results kept for one compilation. The passes ask the backend
// whether a layer with a given chain runs as one primitive, and the compiler
// builds the accepted layer again: the same chain is composed two or three
// times, and its tie-hazard analysis is the costly part. Chains and options
// are compared bit for bit (-0.0 and 0.0 are different keys), so a hit
// returns exactly what compose() would. Safe to use from several threads.

#include <cstddef>
#include <mutex>
#include <string>
#include <unordered_map>

#include "composer/composer.hpp"

namespace qfuse::composer {

// Every field of the chain and the options as bytes: equal keys, equal
// inputs to compose().
std::string chain_key(const PostOpChain& chain, const ComposeOptions& options = {});

class ComposeMemo {
 public:
  ComposeResult compose(const PostOpChain& chain, const ComposeOptions& options = {});

  std::size_t hits() const;
  std::size_t misses() const;

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::string, ComposeResult> results_;
  std::size_t hits_ = 0, misses_ = 0;
};

}  // namespace qfuse::composer
