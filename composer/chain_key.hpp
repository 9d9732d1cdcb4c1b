#pragma once
// A post-op chain and compose options as bytes: every field, floats by their
// bits (-0.0 and 0.0 differ), so equal keys mean equal inputs to compose().
// plugin's LayerBuildCache compares a layer's chain with the one its fusion
// check composed by this key.

#include <string>

#include "composer/composer.hpp"

namespace qfuse::composer {

std::string chain_key(const PostOpChain& chain, const ComposeOptions& options = {});

}  // namespace qfuse::composer
