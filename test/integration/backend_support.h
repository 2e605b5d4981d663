// SPDX-License-Identifier: Apache-2.0
// Test support: a netlink backend on an empty ruleset, for tests that drive it directly.
#pragma once

#include <memory>

#include <catch2/catch.hpp>

#include "ip-masq-agent/nft/backend.h"
#include "netns.h"

namespace ipmasq::test {

// Every test starts from an empty ruleset: the test cases of one executable share its
// private namespace.
inline std::unique_ptr<NetlinkBackend> freshBackend()
{
	runOrFail("nft flush ruleset");
	auto backend = NetlinkBackend::open();
	INFO((backend ? "" : backend.error().message));
	REQUIRE(backend);
	return std::move(*backend);
}

} // namespace ipmasq::test
