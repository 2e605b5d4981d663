// SPDX-License-Identifier: Apache-2.0
// Catch2 main for integration tests: enter a private network namespace first, or skip.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "netns.h"

int main(int argc, char *argv[])
{
	const std::string why = ipmasq::test::enterPrivateNetns();
	if (!why.empty()) {
		std::fprintf(stderr, "SKIP: %s\n", why.c_str());
		return 77; // meson's "skipped"
	}
	return Catch::Session().run(argc, argv);
}
