// SPDX-License-Identifier: Apache-2.0
// Catch2's implementation, without a main(): the benchmark reuses the integration tests'
// netns support (netns.cpp), whose test helpers refer to Catch even where unused.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
