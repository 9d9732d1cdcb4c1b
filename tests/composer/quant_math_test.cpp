#include "composer/quant_math.hpp"

#include <gtest/gtest.h>

namespace qfuse::composer {
namespace {
TEST(QuantMath, Placeholder) { EXPECT_EQ(round_half_to_even(2.5), 2.0); }
}  // namespace
}  // namespace qfuse::composer
