// SPDX-License-Identifier: Apache-2.0
// The fast scanner for plain block YAML sends exactly yaml-cpp's events, or none at all.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "ip-masq-agent/config/config.h"
#include "ip-masq-agent/config/plain_yaml.h"

using namespace ipmasq;

namespace {

// Every event as one line of text, marks included.
class Recorder final : public YAML::EventHandler
{
public:
	std::vector<std::string> events;

	void OnDocumentStart(const YAML::Mark &m) override { add("document", m); }
	void OnDocumentEnd() override { events.push_back("end document"); }
	void OnNull(const YAML::Mark &m, YAML::anchor_t a) override { add(fmt::format("null &{}", a), m); }
	void OnAlias(const YAML::Mark &m, YAML::anchor_t a) override { add(fmt::format("alias *{}", a), m); }
	void OnScalar(const YAML::Mark &m, const std::string &tag, YAML::anchor_t a,
		      const std::string &value) override
	{
		add(fmt::format("scalar {} &{} [{}]", tag, a, value), m);
	}
	void OnSequenceStart(const YAML::Mark &m, const std::string &tag, YAML::anchor_t a,
			     YAML::EmitterStyle::value style) override
	{
		add(fmt::format("list {} &{} style {}", tag, a, int(style)), m);
	}
	void OnSequenceEnd() override { events.push_back("end list"); }
	void OnMapStart(const YAML::Mark &m, const std::string &tag, YAML::anchor_t a,
			YAML::EmitterStyle::value style) override
	{
		add(fmt::format("map {} &{} style {}", tag, a, int(style)), m);
	}
	void OnMapEnd() override { events.push_back("end map"); }

private:
	void add(const std::string &what, const YAML::Mark &m)
	{
		events.push_back(fmt::format("{} at {} {}:{}", what, m.pos, m.line, m.column));
	}
};

std::vector<std::string> yamlCppEvents(const std::string &text)
{
	std::istringstream stream(text);
	YAML::Parser parser(stream);
	Recorder recorder;
	while (parser.HandleNextDocument(recorder)) {
	}
	return recorder.events;
}

} // namespace

TEST_CASE("plain block YAML: the same events as yaml-cpp, marks included")
{
	const std::vector<std::string> texts{
		"nonMasqueradeCIDRs:\n- 10.0.0.0/8\n- 192.168.0.0/16\n",
		"cidrLimit: 100\nnonMasqueradeCIDRs:\n  - 10.0.0.0/8\n\n  # a comment\n  - 2001:db8::/32\n"
		"masqLinkLocal: true\nresyncInterval: 1m30s",
		"# leading comment\n\n   \nnonMasqueradeCIDRs:\n\n    - ::/0\n# c\n    - ::1/128\n"
		"unknownKey: value\nnonmasqueradecidrs:\n- 10.0.0.0/8\n",
		"resyncInterval:     60s\ncidrLimit: 1:2\n",
		"a: b\n",
	};
	for (const std::string &text : texts) {
		INFO(text);
		Recorder fast;
		REQUIRE(scanPlainYaml(text, fast));
		CHECK(fast.events == yamlCppEvents(text));
	}
}

TEST_CASE("plain block YAML: anything else is left to yaml-cpp, with no event sent")
{
	const std::vector<std::string> texts{
		"",
		"# only a comment\n",
		"nonMasqueradeCIDRs: [10.0.0.0/8]\n",            // flow list
		"nonMasqueradeCIDRs:\n- \"10.0.0.0/8\"\n",        // quoted
		"nonMasqueradeCIDRs:\n- 10.0.0.0/8 # trailing\n", // trailing comment
		"nonMasqueradeCIDRs:\n- 10.0.0.0/8 \n",           // trailing space
		"nonMasqueradeCIDRs:\r\n- 10.0.0.0/8\r\n",        // CRLF
		"nonMasqueradeCIDRs:\n\t- 10.0.0.0/8\n",          // tab
		"nonMasqueradeCIDRs:\n- 10.0.0.0/8\n  - 10.1.0.0/16\n", // two indentations
		"nonMasqueradeCIDRs:\ncidrLimit: 5\n",           // a null value
		"nonMasqueradeCIDRs:\n",                         // a null value at the end
		"cidrLimit: null\n",                             // yaml-cpp sends OnNull
		"cidrLimit: 5\n  - 10.0.0.0/8\n",                // a list after a scalar
		"- 10.0.0.0/8\n",                                // a list at the root
		"---\ncidrLimit: 5\n",                           // a document marker
		"nonMasqueradeCIDRs:\n- 2001:db8::\n",           // ends with ':' (a key)
		"nonMasqueradeCIDRs:\n-10.0.0.0/8\n",            // no space after '-'
		"cidrLimit:5\n",                                 // no space after ':'
		"  cidrLimit: 5\n",                              // an indented key
		"cidrLimit: -5\n",                               // a sign
		"masqLinkLocal: caf\xc3\xa9\n",                  // non-ASCII
		"key: &a x\n",                                   // an anchor
		"nonMasqueradeCIDRs:\n  sub: x\n",               // a nested mapping
	};
	for (const std::string &text : texts) {
		INFO(text);
		Recorder fast;
		CHECK_FALSE(scanPlainYaml(text, fast));
		CHECK(fast.events.empty());
	}
}

TEST_CASE("plain block YAML: parseConfig gives what yaml-cpp alone gives, errors included")
{
	const std::vector<std::string> texts{
		"cidrLimit: 1000\nnonMasqueradeCIDRs:\n- 10.0.0.0/8\n- 10.0.0.1/8\n",
		"nonMasqueradeCIDRs:\n  - 10.0.0.0/8\n  - 2001:db8::/32\n",
		"NonMasqueradeCIDRs:\n- 10.0.0.0/8\nfoo: bar\nresyncInterval: 0s\n",
		"cidrLimit: 1\nnonMasqueradeCIDRs:\n- 10.0.0.0/8\n- 11.0.0.0/8\n",
		"cidrLimit: 5\ncidrLimit: 6\n",
	};
	for (const std::string &text : texts) {
		INFO(text);
		const auto fast = parseConfig(text, "f.yaml", {});
		const auto reference = parseConfigWithYamlCpp(text, "f.yaml", {});
		REQUIRE(fast.has_value() == reference.has_value());
		if (!fast) {
			CHECK(fast.error().message == reference.error().message);
			continue;
		}
		CHECK(fast->config == reference->config);
		CHECK(fast->warnings == reference->warnings);
	}
}
