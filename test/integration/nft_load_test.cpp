// SPDX-License-Identifier: Apache-2.0
// The dry-run text against the real kernel: `nft -f` loads it, and the kernel then holds
// exactly the intended intervals, chains and rules. Runs in a private network namespace.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "ip-masq-agent/model/egress.h"
#include "ip-masq-agent/nft/nft_text.h"
#include "ip-masq-agent/compile/ruleset_mapping.h"
#include "../common/ruleset_cases.h"
#include "netns.h"

using namespace ipmasq;
using ipmasq::test::run;
using ipmasq::test::runOrFail;

namespace {

// nft wraps set elements by width; join them onto one line so listings compare exactly.
std::string unwrapElements(const std::string &text)
{
	std::istringstream in(text);
	std::string line, out;
	bool inElements = false;
	while (std::getline(in, line)) {
		if (inElements) {
			out += ' ';
			out += line.substr(line.find_first_not_of(" \t"));
		} else {
			if (!out.empty())
				out += "\n";
			out += line;
		}
		if (line.find("elements = {") != std::string::npos)
			inElements = true;
		if (inElements && line.find('}') != std::string::npos)
			inElements = false;
	}
	return out + "\n";
}

std::string writeTemp(const std::string &content)
{
	char path[] = "/tmp/ipmasq-nft-XXXXXX";
	const int fd = mkstemp(path);
	REQUIRE(fd >= 0);
	close(fd);
	std::ofstream(path) << content;
	return path;
}

Address parseAddress(const std::string &text)
{
	const bool v6 = text.find(':') != std::string::npos;
	return parsePrefix(text + (v6 ? "/128" : "/32")).value().network;
}

// The elements of one set as the kernel holds them, from `nft -j list table`.
std::vector<AddressRange> kernelElements(const YAML::Node &set)
{
	std::vector<AddressRange> out;
	for (const YAML::Node &elem : set["elem"]) {
		if (elem.IsScalar()) {
			const Address a = parseAddress(elem.as<std::string>());
			out.push_back({a, a});
		} else if (elem["prefix"]) {
			const auto p = parsePrefix(fmt::format("{}/{}", elem["prefix"]["addr"].as<std::string>(),
							       elem["prefix"]["len"].as<int>()));
			REQUIRE(p);
			out.push_back({p->first(), p->last()});
		} else if (elem["range"]) {
			out.push_back({parseAddress(elem["range"][0].as<std::string>()),
				       parseAddress(elem["range"][1].as<std::string>())});
		} else {
			FAIL("unexpected set element in nft -j output");
		}
	}
	return out;
}

// Load the rendered script and check what the kernel holds against the model.
void loadAndVerify(const Ruleset &ruleset)
{
	const auto rendered = renderNftScript(ruleset);
	REQUIRE(rendered);
	const std::string script = writeTemp(*rendered);
	runOrFail("nft -f " + script);
	// Loading again replaces the table in place: the script works whether or not it exists.
	runOrFail("nft -f " + script);
	std::remove(script.c_str());

	const std::string listing = runOrFail("nft list table inet " + ruleset.table);
	const auto table = renderTable(ruleset);
	REQUIRE(table);
	CHECK(unwrapElements(listing) == unwrapElements(*table));
	CHECK(listing.find("unknown") == std::string::npos);
	CHECK(listing.find("[invalid") == std::string::npos);

	const YAML::Node json = YAML::Load(runOrFail("nft -j list table inet " + ruleset.table));
	size_t sets = 0, dynamicSets = 0, chains = 0;
	std::map<std::string, std::vector<std::string>> comments;
	for (const YAML::Node &item : json["nftables"]) {
		if (item["set"]) {
			const YAML::Node set = item["set"];
			const std::string name = set["name"].as<std::string>();
			INFO("set " << name);
			// A dynamic set (the guard's): its concatenated key, and nothing in it yet.
			const auto dynamic = std::find_if(ruleset.dynamicSets.begin(), ruleset.dynamicSets.end(),
							  [&](const DynamicSet &d) { return d.name == name; });
			if (dynamic != ruleset.dynamicSets.end()) {
				const std::string address = dynamic->family == Family::ipv4 ? "ipv4_addr" : "ipv6_addr";
				CHECK(set["type"].as<std::vector<std::string>>() ==
				      std::vector<std::string>{address, address, "inet_proto", "inet_service"});
				CHECK(set["size"].as<uint32_t>() == dynamic->size);
				CHECK_FALSE(set["elem"]);
				dynamicSets++;
				continue;
			}
			const AddressSet *model = nullptr;
			for (const AddressSet &s : ruleset.sets)
				if (s.name == name)
					model = &s;
			REQUIRE(model);
			if (model->interfaceNames) {
				// Names as nft reads them back, against the names the model's
				// ranges are made of.
				CHECK(set["type"].as<std::string>() == "ifname");
				std::vector<std::string> inKernel, inModel;
				for (const YAML::Node &elem : set["elem"])
					inKernel.push_back(elem.as<std::string>());
				for (const AddressRange &range : model->elements.ranges())
					for (const InterfacePattern &pattern : interfacePatternsOf(range))
						inModel.push_back(pattern.toString());
				CHECK(inKernel == inModel);
			} else {
				CHECK(set["type"].as<std::string>() ==
				      (model->family() == Family::ipv4 ? "ipv4_addr" : "ipv6_addr"));
				CHECK(kernelElements(set) == model->elements.ranges());
			}
			sets++;
		} else if (item["chain"]) {
			const YAML::Node chain = item["chain"];
			const std::string name = chain["name"].as<std::string>();
			for (const Chain &c : ruleset.chains)
				if (c.name == name) {
					CHECK(bool(chain["hook"]) == bool(c.hook));
					if (c.hook) {
						CHECK(chain["type"].as<std::string>() == "nat");
						CHECK(chain["hook"].as<std::string>() == "postrouting");
						CHECK(chain["prio"].as<int>() == c.hook->priority);
					}
					chains++;
				}
		} else if (item["rule"]) {
			const YAML::Node rule = item["rule"];
			comments[rule["chain"].as<std::string>()].push_back(rule["comment"].as<std::string>());
		}
	}
	CHECK(sets == ruleset.sets.size());
	CHECK(dynamicSets == ruleset.dynamicSets.size());
	CHECK(chains == ruleset.chains.size());
	for (const Chain &c : ruleset.chains) {
		std::vector<std::string> expected;
		for (const Rule &rule : c.rules)
			expected.push_back(rule.comment);
		CHECK(comments[c.name] == expected);
	}
}

} // namespace

TEST_CASE("every named config loads with nft -f and the kernel holds exactly the model")
{
	for (const ipmasq::test::RulesetCase &c : ipmasq::test::rulesetCases()) {
		auto ruleset = ipmasq::test::buildCase(c);
		INFO("case " << c.name);
		REQUIRE(ruleset);
		loadAndVerify(*ruleset);
		runOrFail("nft delete table inet " + ruleset->table);
	}
}

TEST_CASE("10,000 CIDRs load as one interval set")
{
	std::string text = "cidrLimit: 10000\nnonMasqueradeCIDRs:\n";
	// /24s two apart, so none merge: 10,000 elements in the kernel.
	for (int i = 0; i < 10000; i++)
		text += fmt::format("  - 100.{}.{}.0/24\n", 64 + (2 * i) / 256, (2 * i) % 256);
	auto loaded = parseConfig(text, "10k", {});
	REQUIRE(loaded);
	const Ruleset ruleset = buildRuleset(loaded->config, RulesetOptions{});
	REQUIRE(ruleset.sets[0].elements.size() == 10001); // + link-local
	loadAndVerify(ruleset);
	runOrFail("nft delete table inet ip-masq-agent");
}

TEST_CASE("the script replaces only the agent's table")
{
	runOrFail("nft add table inet bystander && nft add chain inet bystander c "
		  "'{ type nat hook postrouting priority srcnat; }' && "
		  "nft add rule inet bystander c ip daddr 192.0.2.1 masquerade comment '\"not ours\"'");
	const std::string before = runOrFail("nft list table inet bystander");
	loadAndVerify(buildRuleset(defaultConfig({}), RulesetOptions{}));
	CHECK(runOrFail("nft list table inet bystander") == before);
	runOrFail("nft delete table inet ip-masq-agent && nft delete table inet bystander");
}

TEST_CASE("the binary's --dry-run output with built-in defaults loads with nft -f")
{
	const std::string out = runOrFail(fmt::format(
		"{} --dry-run --config /nonexistent/ip-masq-agent | nft -f - && nft list tables",
		AGENT_BINARY));
	CHECK_THAT(out, Catch::Contains("table inet ip-masq-agent"));
	// An invalid config: an error on stderr, non-zero exit, nothing on stdout.
	const std::string bad = writeTemp("nonMasqueradeCIDRs: [10.0.0.1/8]\n");
	std::string stdoutOnly;
	CHECK(run(fmt::format("{} --dry-run --config {} 2>/dev/null", AGENT_BINARY, bad), &stdoutOnly) != 0);
	CHECK(stdoutOnly.empty());
	std::string both;
	run(fmt::format("{} --dry-run --config {}", AGENT_BINARY, bad), &both, true);
	CHECK_THAT(both, Catch::Contains(bad + ":1:") && Catch::Contains("10.0.0.0/8"));
	std::remove(bad.c_str());
	runOrFail("nft delete table inet ip-masq-agent");
}

TEST_CASE("--dry-run with the longest names and extreme flags is accepted by nft; one more is refused")
{
	const std::string table(255, 't'), chain(94, 'C');
	for (const std::string &extra : {std::string("--priority=2147483647 --to-ports=1-2,3-65535"),
					 std::string("--priority=-199 --random-fully=false")}) {
		INFO(extra);
		const std::string flags =
			fmt::format("--dry-run --config /nonexistent/ip-masq-agent --enable-ipv6 "
				    "--table={} --masq-chain={} {}", table, chain, extra);
		std::string script;
		REQUIRE(run(fmt::format("{} {}", AGENT_BINARY, flags), &script, true) == 0);
		const std::string path = writeTemp(script);
		runOrFail("nft -c -f " + path);
		// And for real: the kernel takes it, and lists the names back.
		runOrFail("nft -f " + path);
		std::remove(path.c_str());
		CHECK_THAT(runOrFail("nft list table inet " + table), Catch::Contains("chain " + chain));
		runOrFail("nft delete table inet " + table);
	}

	std::string error;
	CHECK(run(fmt::format("{} --dry-run --config /nonexistent/ip-masq-agent --masq-chain={}C",
			      AGENT_BINARY, chain), &error, true) == 2);
	CHECK_THAT(error, Catch::Contains("at most 94 characters") && Catch::Contains("128"));
	CHECK(error.find("table inet") == std::string::npos);
	error.clear();
	CHECK(run(fmt::format("{} --dry-run --config /nonexistent/ip-masq-agent --table={}t",
			      AGENT_BINARY, table), &error, true) == 2);
	CHECK_THAT(error, Catch::Contains("at most 255"));
	CHECK(error.find("table inet") == std::string::npos);
}
