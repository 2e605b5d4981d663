// SPDX-License-Identifier: Apache-2.0
// Catch2's implementation without a main, compiled once for every test executable (about
// 11 s of CPU each time, the slowest file of the tests' build): the unit tests' main
// (test/unit/catch_main.cpp), the integration tests' (test/integration/netns_main.cpp) and
// prometheus_test.cpp's call it.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "catch_runner.h"

namespace ipmasq::test {

int runCatchSession(int argc, char *argv[])
{
	return Catch::Session().run(argc, argv);
}

} // namespace ipmasq::test
