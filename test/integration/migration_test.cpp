// SPDX-License-Identifier: Apache-2.0
// Switching from upstream: a node that ran kubernetes-sigs/ip-masq-agent keeps its iptables
// chain after the switch. This test leaves upstream's rules behind with iptables-nft, runs
// the new agent, then runs the removal steps exactly as docs/kubernetes.md gives them, and
// checks real traffic and that nothing of upstream's is left.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <sys/socket.h>
#include <vector>

#include <fmt/format.h>

#include "agent_process.h"
#include "netns.h"
#include "traffic_support.h"

using namespace ipmasq::test;

namespace {

const std::string kJumpComment = "ip-masq-agent: ensure nat POSTROUTING directs all non-LOCAL "
				 "destination traffic to our custom IP-MASQ-AGENT chain";

// Upstream's rules for its default config (RFC 1918 and link-local not masqueraded), as
// upstream's syncMasqRules writes them through `iptables-restore`. `quotedComment` is the
// spelling of v2.10.0 to v2.12.1, whose comments carry literal double quotes.
std::vector<std::string> upstreamRules(const std::string &iptables, bool quotedComment)
{
	const bool v4 = iptables.find("ip6") == std::string::npos;
	const auto comment = [&](const std::string &text) {
		return quotedComment ? "'\"" + text + "\"'" : "\"" + text + "\"";
	};
	std::vector<std::string> cidrs = v4 ? std::vector<std::string>{"10.0.0.0/8", "172.16.0.0/12",
								   "192.168.0.0/16", "169.254.0.0/16"}
					    : std::vector<std::string>{"fe80::/10"};
	std::vector<std::string> rules{iptables + " -w -t nat -N IP-MASQ-AGENT"};
	for (const std::string &cidr : cidrs)
		rules.push_back(fmt::format(
			"{} -w -t nat -A IP-MASQ-AGENT -d {} -m comment --comment {} -j RETURN", iptables,
			cidr, comment("ip-masq-agent: local traffic is not subject to MASQUERADE")));
	rules.push_back(fmt::format(
		"{} -w -t nat -A IP-MASQ-AGENT -m comment --comment {} -j MASQUERADE", iptables,
		comment("ip-masq-agent: outbound traffic is subject to MASQUERADE (must be last in "
			"chain)")));
	rules.push_back(fmt::format("{} -w -t nat -A POSTROUTING -m comment --comment {} "
				    "-m addrtype ! --dst-type LOCAL -j IP-MASQ-AGENT",
				    iptables, comment(kJumpComment)));
	return rules;
}

void leaveUpstreamRules(bool quotedComment)
{
	for (const char *iptables : {"iptables-nft", "ip6tables-nft"})
		for (const std::string &rule : upstreamRules(iptables, quotedComment))
			runOrFail(rule);
	const std::string rules = runOrFail("iptables-nft -w -t nat -S");
	INFO("iptables-nft -t nat -S:\n" << rules);
	REQUIRE(countOf(rules, "-A IP-MASQ-AGENT ") == 4 + 1);
	REQUIRE(countOf(rules, "-j IP-MASQ-AGENT") == 1);
}

// The shell blocks (```sh ... ```) of the section of docs/kubernetes.md headed `heading`.
std::vector<std::string> docShellBlocks(const std::string &heading)
{
	std::ifstream in(DOCS_DIR "/kubernetes.md");
	INFO("reading " DOCS_DIR "/kubernetes.md");
	REQUIRE(in.good());
	std::vector<std::string> blocks;
	std::string line, block;
	bool inSection = false, inBlock = false;
	for (int lines = 0; lines < 10000 && std::getline(in, line); lines++) {
		if (line.rfind("#", 0) == 0 && !inBlock) {
			inSection = line == heading;
			continue;
		}
		if (!inSection)
			continue;
		if (!inBlock && line == "```sh") {
			inBlock = true;
			block.clear();
		} else if (inBlock && line == "```") {
			inBlock = false;
			blocks.push_back(block);
		} else if (inBlock) {
			block += line + "\n";
		}
	}
	INFO("section \"" << heading << "\" of docs/kubernetes.md");
	REQUIRE(!blocks.empty());
	return blocks;
}

const std::string kRemovalSection = "### Remove upstream's iptables chain, once per node";

// Runs doc text as root on the node would, with the node's iptables back end being nft:
// `iptables` and `ip6tables` are iptables-nft and ip6tables-nft.
void runDocSteps(const std::string &script)
{
	TempDir bin;
	runOrFail(fmt::format("ln -s \"$(command -v iptables-nft)\" {0}/iptables && "
			      "ln -s \"$(command -v ip6tables-nft)\" {0}/ip6tables",
			      bin.path()));
	bin.write("steps.sh", script);
	std::string output;
	const int status =
		run(fmt::format("PATH={}:$PATH sh -eu {}", bin.path(), bin.file("steps.sh")), &output,
		    true);
	INFO("the doc's steps:\n" << script << "\noutput:\n" << output);
	REQUIRE(status == 0);
}

// The `-F` and `-X` lines of the doc's first block ("then -F and -X as above").
std::string flushAndDeleteLines(const std::string &firstBlock)
{
	std::istringstream in(firstBlock);
	std::string line, out;
	while (std::getline(in, line))
		if (line.find(" -F IP-MASQ-AGENT") != std::string::npos ||
		    line.find(" -X IP-MASQ-AGENT") != std::string::npos)
			out += line + "\n";
	REQUIRE(countOf(out, "\n") == 4);
	return out;
}

// The new agent's config: the external server's subnets keep the pod's address, which
// upstream's old default rules would masquerade.
const std::string kNewConfig = "nonMasqueradeCIDRs: [203.0.113.0/24, \"2001:db8:2::/64\"]\n";

void requireNothingOfUpstreamLeft(const Topology &net, const Agent &agent)
{
	for (const char *iptables : {"iptables-nft", "ip6tables-nft"}) {
		const std::string rules = runOrFail(fmt::format("{} -w -t nat -S", iptables));
		INFO(iptables << " -t nat -S:\n" << rules);
		CHECK(rules.find("IP-MASQ-AGENT") == std::string::npos);
	}
	const std::string ruleset = runOrFail("nft list ruleset");
	INFO("nft list ruleset:\n" << ruleset);
	CHECK(countOf(ruleset, "IP-MASQ-AGENT") == countOf(tableListing(), "IP-MASQ-AGENT"));
	// Traffic follows the new config alone.
	requireSource(net, agent, AF_INET, kPodV4);
	requireSource(net, agent, AF_INET6, kPodV6);
	requireSource(net, agent, AF_INET, kOtherServerV4, kServerPort, kNodeV4);
}

// iptables-nft's tables in the node, deleted whatever way the test case ends.
struct IptablesNftTables {
	IptablesNftTables() { remove(); }
	~IptablesNftTables() { remove(); }
	static void remove()
	{
		run("nft delete table ip nat 2>/dev/null; nft delete table ip6 nat 2>/dev/null");
	}
};

} // namespace

TEST_CASE("upstream's leftover chain goes with the steps in docs/kubernetes.md")
{
	Topology net;
	SourceEchoServer server(net.external);
	IptablesNftTables iptablesTables;
	const std::vector<std::string> steps = docShellBlocks(kRemovalSection);
	REQUIRE(steps.size() >= 3);

	SECTION("upstream up to v2.9.x, with --enable-ipv6: the first block as it stands")
	{
		leaveUpstreamRules(false);
		Agent agent(kNewConfig, {"--enable-ipv6"});
		// While upstream's frozen chain is there, it masquerades what the new config
		// no longer does (it runs first, at srcnat), and the agent says so.
		agent.expectNatConflicts();
		requireSource(net, agent, AF_INET, kNodeV4);
		requireSource(net, agent, AF_INET6, kNodeV6);
		requireWithin([&] { return agent.log().find("NAT conflict: ") != std::string::npos; },
			      std::chrono::seconds(60), agent.process(), "the conflict reported");

		runDocSteps(steps[0]);
		requireNothingOfUpstreamLeft(net, agent);
		requireWithin([&] { return agent.log().find("NAT conflict resolved: ") != std::string::npos; },
			      std::chrono::seconds(60), agent.process(), "the conflict resolved");
	}
	SECTION("upstream v2.10.0 to v2.12.1 (quoted comment): its -D line, then -F and -X")
	{
		leaveUpstreamRules(true);
		Agent agent(kNewConfig, {"--enable-ipv6"});
		agent.expectNatConflicts();
		requireSource(net, agent, AF_INET, kNodeV4);

		// "(and the same with ip6tables)"
		std::string deleteJump = steps[1];
		std::string deleteJump6 = deleteJump;
		for (size_t at = deleteJump6.find("iptables "); at != std::string::npos;
		     at = deleteJump6.find("iptables ", at + 10))
			deleteJump6.replace(at, 8, "ip6tables");
		runDocSteps(deleteJump + deleteJump6 + flushAndDeleteLines(steps[0]));
		requireNothingOfUpstreamLeft(net, agent);
	}
	SECTION("any version: the loop over `iptables -S`, then -F and -X")
	{
		leaveUpstreamRules(true);
		Agent agent(kNewConfig, {"--enable-ipv6"});
		agent.expectNatConflicts();
		requireSource(net, agent, AF_INET, kNodeV4);

		runDocSteps(steps[2] + flushAndDeleteLines(steps[0]));
		requireNothingOfUpstreamLeft(net, agent);
	}
}
