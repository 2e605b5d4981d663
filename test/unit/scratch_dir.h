// SPDX-License-Identifier: Apache-2.0
// A directory under /tmp for one test, removed with everything in it when the test ends.
#pragma once

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

namespace ipmasq::test {

class ScratchDir
{
public:
	ScratchDir()
	{
		char tmpl[] = "/tmp/ipmasq-test-XXXXXX";
		REQUIRE(mkdtemp(tmpl) != nullptr);
		path = tmpl;
	}
	~ScratchDir()
	{
		std::error_code ignored; // a test that failed half-way may leave anything here
		std::filesystem::remove_all(path, ignored);
	}
	ScratchDir(const ScratchDir &) = delete;
	ScratchDir &operator=(const ScratchDir &) = delete;

	std::string file(const std::string &name) const { return (path / name).string(); }
	void write(const std::string &name, const std::string &text) const
	{
		std::ofstream(path / name) << text;
	}

	std::filesystem::path path;
};

} // namespace ipmasq::test
