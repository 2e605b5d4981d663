// SPDX-License-Identifier: Apache-2.0
// Catch2 main for integration tests: enter a private network namespace first, or skip
// (Catch2's implementation: test/common/catch_runner.cpp, compiled once).

#include <cstdio>

#include "../common/catch_runner.h"
#include "netns.h"

int main(int argc, char *argv[])
{
	const std::string why = ipmasq::test::enterPrivateNetns();
	if (!why.empty()) {
		std::fprintf(stderr, "SKIP: %s\n", why.c_str());
		return 77; // meson's "skipped"
	}
	return ipmasq::test::runCatchSession(argc, argv);
}
