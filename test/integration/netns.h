// SPDX-License-Identifier: Apache-2.0
// Test support: run the whole test process inside a network namespace of its own.
#pragma once

#include <string>

namespace ipmasq::test {

// Moves this process into a new, empty network namespace (unshare(CLONE_NEWNET)),
// brings its loopback up and checks that it really is not the namespace we started
// in. Everything the test then does to netfilter, and every child it runs (nft, ip),
// stays inside. Returns an empty string on success, or why it could not.
std::string enterPrivateNetns();

// Runs `command` with /bin/sh, returns its exit status and fills `output` with
// its stdout (stderr is appended when `withStderr`).
int run(const std::string &command, std::string *output = nullptr, bool withStderr = false);

// Runs `command` and returns its stdout; fails the current test if it exits non-zero.
std::string runOrFail(const std::string &command);

} // namespace ipmasq::test
