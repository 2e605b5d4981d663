// SPDX-License-Identifier: Apache-2.0
// Catch2's session, for the test executables' mains: its implementation (runner, reporters,
// matchers) is compiled once, in catch_runner.cpp, and Catch2 declares Session only where
// it is compiled.
#pragma once

namespace ipmasq::test {

// Runs the test cases the command line selects, as Catch2's own main does; its exit status.
int runCatchSession(int argc, char *argv[]);

} // namespace ipmasq::test
