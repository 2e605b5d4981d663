// SPDX-License-Identifier: Apache-2.0
// Test support: configs as the parser leaves them for one file, with each entry's line,
// and parsing a config text as that file.
#pragma once

#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "ip-masq-agent/model/cidr.h"
#include "ip-masq-agent/config/config.h"

namespace ipmasq::test {

inline const std::string kConfigFile = "/etc/config/ip-masq-agent";

// A prefix written on `line` of kConfigFile.
inline Prefix entry(const char *text, uint32_t line)
{
	auto prefix = parsePrefix(text);
	INFO(text);
	REQUIRE(prefix);
	prefix->origin = Origin{0, line};
	return *prefix;
}

// A config as the parser leaves it for a file that lists nonMasqueradeCIDRs.
inline Config fileConfig(std::vector<Prefix> nonMasquerade, std::vector<Prefix> masquerade = {},
			 std::vector<Prefix> sources = {})
{
	Config config;
	config.nonMasqueradeCIDRs = std::move(nonMasquerade);
	config.nonMasqueradeCIDRsGiven = true;
	config.masqueradeCIDRs = std::move(masquerade);
	config.masqueradeSourceCIDRs = std::move(sources);
	config.files = {kConfigFile};
	return config;
}

// The config `text` parses, as if read from kConfigFile; the test fails otherwise.
inline LoadedConfig parseOk(const std::string &text, ConfigFlags flags = {})
{
	auto loaded = parseConfig(text, kConfigFile, flags);
	INFO("config:\n" << text << "\nerror: " << (loaded ? "" : loaded.error().message));
	REQUIRE(loaded);
	return *loaded;
}

// The error `text` gets, as if read from kConfigFile; the test fails if it parses.
inline std::string parseError(const std::string &text, ConfigFlags flags = {})
{
	auto loaded = parseConfig(text, kConfigFile, flags);
	INFO("config:\n" << text);
	REQUIRE_FALSE(loaded);
	return loaded.error().message;
}

} // namespace ipmasq::test
