// SPDX-License-Identifier: Apache-2.0
// The unit tests' main, shared by every unit test executable: Catch2's session with the
// command line (Catch2's implementation: test/common/catch_runner.cpp, compiled once).
#include "../common/catch_runner.h"

int main(int argc, char *argv[])
{
	return ipmasq::test::runCatchSession(argc, argv);
}
