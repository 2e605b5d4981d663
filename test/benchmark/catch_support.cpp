// SPDX-License-Identifier: Apache-2.0
// Catch2's implementation, without a main(): the benchmark reuses the integration tests'
// netns support (netns.cpp), whose test helpers refer to Catch even where unused, and runs
// its section 10 (responsiveness.cpp) as a hidden test case, where they work.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

namespace ipmasq::bench {

// Runs the test cases `argv` selects (Catch2's command line); Session is declared only here.
int runCatchSession(int argc, const char *const argv[])
{
	Catch::Session session;
	const int bad = session.applyCommandLine(argc, argv);
	return bad != 0 ? bad : session.run();
}

} // namespace ipmasq::bench
