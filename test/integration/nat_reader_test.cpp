// SPDX-License-Identifier: Apache-2.0
// Other tables' NAT, read back from the real kernel: the rules kubelet, Docker, upstream's
// ip-masq-agent and kube-proxy write (with the real iptables-nft and nft), the reader's
// model of them, the evaluator's verdicts, and the renderer's text against nft's listing.
#include <catch2/catch.hpp>

#include <map>
#include <regex>
#include <sstream>

#include <linux/netfilter.h>

#include "agent_process.h"
#include "nat_components.h"
#include "netns.h"

using namespace ipmasq;
using namespace ipmasq::test;

namespace {

// The node: one link to the outside (a dummy interface: no packets leave).
class Node
{
public:
	Node()
	{
		flushRuleset();
		run("ip link del n0 2>/dev/null");
		runOrFail("ip link add n0 type veth peer name n0-peer && ip addr add 203.0.113.1/24 dev n0 && "
			  "ip addr add 2001:db8:2::1/64 dev n0 nodad && ip link set n0 up && "
			  "ip link set n0-peer up");
	}
	~Node()
	{
		run("ip link del n0 2>/dev/null");
		run("nft flush ruleset");
	}
	Node(const Node &) = delete;
	Node &operator=(const Node &) = delete;

	static nat::NodeAddresses addresses()
	{
		const auto a = [](const char *text) { return *parseAddress(text); };
		return {{{a("127.0.0.1"), 8}, {a("::1"), 128}, {a("203.0.113.1"), 24},
			 {a("2001:db8:2::1"), 64}},
			true};
	}
};

nat::Packet fromPod(const std::string &source, const std::string &destination)
{
	nat::Packet p;
	p.source = *parseAddress(source);
	p.destination = *parseAddress(destination);
	p.outputInterface = "n0";
	p.inputInterface = "veth-pod";
	p.l4proto = 6;
	p.destinationPort = 8080;
	return p;
}

// The agent exempts the destination: its own decision is "not masqueraded".
nat::NatVerdict evaluateFor(const nat::NatRuleset &ruleset, const nat::Packet &packet)
{
	nat::AgentPlacement agent; // inet ip-masq-agent at srcnat + 10
	agent.masquerades = false;
	return nat::evaluate(ruleset, packet, Node::addresses(), agent);
}

// Each rule of `nft -a list table FAMILY NAME` by handle: the text before "# handle N".
std::map<uint64_t, std::string> nftRules(const std::string &family, const std::string &name)
{
	const std::string listing = runOrFail("nft -a list table " + family + " " + name);
	std::map<uint64_t, std::string> rules;
	std::istringstream in(listing);
	std::string line;
	const std::regex handle(R"(^\s*(.*\S)\s+# handle (\d+)$)");
	std::smatch m;
	const auto startsWith = [](const std::string &s, const char *prefix) {
		return s.rfind(prefix, 0) == 0;
	};
	while (std::getline(in, line))
		if (std::regex_match(line, m, handle) && !startsWith(m[1], "chain ") &&
		    !startsWith(m[1], "table ") && !startsWith(m[1], "set ") && !startsWith(m[1], "map "))
			rules[std::stoull(m[2])] = m[1];
	return rules;
}

const nat::Table &requireTable(const nat::NatRuleset &ruleset, nat::TableFamily family,
			       const std::string &name)
{
	const nat::Table *t = findTable(ruleset, family, name);
	INFO("table " << nat::tableFamilyName(family) << " " << name);
	REQUIRE(t != nullptr);
	return *t;
}

// Every rule the reader read prints as nft lists it, but for the documented differences:
// `nft` 1.0.6 translates some xtables matches (statistic) that we print as "xt match", and
// prints nothing for an xtables comment, which we print.
void requireNftText(const nat::NatRuleset &ruleset, nat::TableFamily family, const std::string &name)
{
	const nat::Table &table = requireTable(ruleset, family, name);
	const auto listed = nftRules(nat::tableFamilyName(family), name);
	// One space between words: nft leaves two where an xtables comment was.
	const auto spaced = [](const std::string &s) {
		return std::regex_replace(std::regex_replace(s, std::regex("  +"), " "),
					  std::regex("^ | $"), "");
	};
	size_t compared = 0;
	for (const nat::Chain &chain : table.chains)
		for (const nat::Rule &rule : chain.rules) {
			const std::string ours = nat::ruleText(table, rule);
			const auto it = listed.find(rule.handle);
			INFO("rule handle " << rule.handle << ": ours \"" << ours << "\"");
			REQUIRE(it != listed.end());
			INFO("nft's \"" << it->second << "\"");
			compared++;
			if (ours.find("xt match statistic") != std::string::npos) {
				CHECK(it->second.find("meta random") != std::string::npos);
				continue;
			}
			bool xtComment = false;
			for (const nat::Expression &e : rule.expressions)
				if (const auto *m = std::get_if<nat::CompatMatch>(&e))
					xtComment = xtComment || m->name == "comment";
			if (xtComment) {
				// nft 1.0.6 prints nothing for an xtables comment; we print it.
				CHECK(spaced(std::regex_replace(ours, std::regex("comment \"[^\"]*\""), "")) ==
				      spaced(it->second));
				continue;
			}
			CHECK(ours == it->second);
		}
	CHECK(compared > 0);
}

bool hasAction(const nat::NatVerdict &v, nat::NatAction action)
{
	for (const nat::Outcome &o : v.outcomes)
		if (o.action == action)
			return true;
	return false;
}

} // namespace

TEST_CASE("a clean node: nothing to read, nobody NATs")
{
	Node node;
	const nat::NatRuleset ruleset = readNat();
	CHECK(ruleset.tables.empty());
	const nat::NatVerdict v = evaluateFor(ruleset, fromPod("198.51.100.2", "192.0.2.2"));
	CHECK(v.certain());
	CHECK(v.decision().action == nat::NatAction::none);
	// No legacy iptables nat table in a fresh namespace.
	const auto legacy = netlink::legacyNatTables();
	REQUIRE(legacy);
	CHECK_FALSE(legacy->ipv4);
	CHECK_FALSE(legacy->ipv6);
}

TEST_CASE("kubelet's rule masquerades what the agent exempts (192.168.0.0/16)")
{
	Node node;
	runOrFail(kubeletRule());
	const nat::NatRuleset ruleset = readNat();
	const nat::Table &table = requireTable(ruleset, nat::TableFamily::ip, "nat");
	const nat::Chain *post = table.findChain("POSTROUTING");
	REQUIRE(post);
	REQUIRE(post->base);
	CHECK(post->base->priority == 100);
	REQUIRE(post->rules.size() == 1);
	// iptables-nft 1.8.9: payload + cmp for the prefix, xtables addrtype rev 1, counter,
	// xtables MASQUERADE.
	const auto &e = post->rules[0].expressions;
	REQUIRE(e.size() == 5);
	CHECK(std::holds_alternative<nat::PayloadLoad>(e[0]));
	CHECK(std::holds_alternative<nat::Cmp>(e[1]));
	REQUIRE(std::holds_alternative<nat::CompatMatch>(e[2]));
	CHECK(std::get<nat::CompatMatch>(e[2]).name == "addrtype");
	CHECK(std::get<nat::CompatMatch>(e[2]).revision == 1);
	CHECK(std::holds_alternative<nat::CompatTarget>(e[4]));

	const nat::NatVerdict v = evaluateFor(ruleset, fromPod("198.51.100.2", "192.168.1.5"));
	INFO(explainVerdict(ruleset, v));
	REQUIRE(v.certain());
	CHECK(v.decision().action == nat::NatAction::masquerade);
	CHECK(v.decision().placement == nat::Placement::beforeAgent);
	REQUIRE(v.decision().rule);
	CHECK(v.decision().rule->handle == post->rules[0].handle);
	CHECK(nat::describeOutcome(v.decision()) ==
	      fmt::format("table ip nat chain POSTROUTING (priority srcnat, before the agent) "
			  "masquerades it: rule handle {}", post->rules[0].handle));
	CHECK(decidingRuleText(ruleset, v.decision()) ==
	      "ip daddr != 10.0.0.0/8 fib daddr type != local counter packets 0 bytes 0 masquerade");

	CHECK(evaluateFor(ruleset, fromPod("198.51.100.2", "10.1.2.3")).decision().action ==
	      nat::NatAction::none);
	CHECK(evaluateFor(ruleset, fromPod("198.51.100.2", "203.0.113.1")).decision().action ==
	      nat::NatAction::none);
	requireNftText(ruleset, nat::TableFamily::ip, "nat");
}

TEST_CASE("ip6tables' kubelet rule, for IPv6")
{
	Node node;
	runOrFail(kubeletRule("ip6tables-nft", "fd00::/8"));
	const nat::NatRuleset ruleset = readNat();
	const nat::NatVerdict v = evaluateFor(ruleset, fromPod("2001:db8:1::2", "2001:db8:2::2"));
	INFO(explainVerdict(ruleset, v));
	CHECK(v.certain());
	CHECK(v.decision().action == nat::NatAction::masquerade);
	// The ip6 table does not touch IPv4.
	CHECK(evaluateFor(ruleset, fromPod("198.51.100.2", "192.0.2.2")).decision().action ==
	      nat::NatAction::none);
	requireNftText(ruleset, nat::TableFamily::ip6, "nat");
}

TEST_CASE("Docker's rule: not for a pod outside its subnet, yes for one inside")
{
	Node node;
	runOrFail(dockerRule());
	const nat::NatRuleset ruleset = readNat();
	const nat::NatVerdict outside = evaluateFor(ruleset, fromPod("198.51.100.2", "192.0.2.2"));
	INFO(explainVerdict(ruleset, outside));
	CHECK(outside.certain());
	CHECK(outside.decision().action == nat::NatAction::none);
	const nat::NatVerdict inside = evaluateFor(ruleset, fromPod("172.17.0.2", "192.0.2.2"));
	INFO(explainVerdict(ruleset, inside));
	CHECK(inside.certain());
	CHECK(inside.decision().action == nat::NatAction::masquerade);
	CHECK(decidingRuleText(ruleset, inside.decision()) ==
	      "oifname != \"docker0\" ip saddr 172.17.0.0/16 counter packets 0 bytes 0 masquerade");
	requireNftText(ruleset, nat::TableFamily::ip, "nat");
}

TEST_CASE("upstream ip-masq-agent's leftover chain")
{
	Node node;
	runAll(upstreamAgentRules({"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"}));
	const nat::NatRuleset ruleset = readNat();
	const nat::Table &table = requireTable(ruleset, nat::TableFamily::ip, "nat");
	REQUIRE(table.findChain("IP-MASQ-AGENT"));
	CHECK(table.findChain("IP-MASQ-AGENT")->rules.size() == 5);
	// Exempt by upstream's defaults too: not masqueraded, and nothing to report.
	const nat::NatVerdict exempt = evaluateFor(ruleset, fromPod("198.51.100.2", "172.20.0.1"));
	CHECK(exempt.certain());
	CHECK(exempt.decision().action == nat::NatAction::none);
	// Exempt by the new agent only (say, 192.0.2.0/24 in its config): upstream's chain
	// masquerades it before the agent's runs.
	const nat::NatVerdict v = evaluateFor(ruleset, fromPod("198.51.100.2", "192.0.2.2"));
	INFO(explainVerdict(ruleset, v));
	REQUIRE(v.certain());
	CHECK(v.decision().action == nat::NatAction::masquerade);
	CHECK(v.decision().rule->chain == "IP-MASQ-AGENT");
	CHECK(v.decision().base->chain == "POSTROUTING");
	requireNftText(ruleset, nat::TableFamily::ip, "nat");
}

TEST_CASE("kube-proxy's marks, in its nftables table and in iptables: unmarked is not reported")
{
	Node node;
	TempDir dir;
	dir.write("kube-proxy.nft", kubeProxyTable() + kubeProxyMarkTable());
	runOrFail("nft -f " + dir.file("kube-proxy.nft"));
	runOrFail(kubeProxyIptablesRule());
	const nat::NatRuleset ruleset = readNat();
	CHECK(ruleset.tables.size() == 3);
	nat::Packet p = fromPod("198.51.100.2", "192.0.2.2");
	const nat::NatVerdict unmarked = evaluateFor(ruleset, p);
	INFO(explainVerdict(ruleset, unmarked));
	CHECK(unmarked.certain());
	CHECK(unmarked.decision().action == nat::NatAction::none);
	// All three at srcnat: their order is not known, and it does not matter here.
	CHECK(unmarked.tiedChains.size() == 3);
	CHECK_FALSE(unmarked.orderMatters);
	p.mark = 0x4000;
	const nat::NatVerdict marked = evaluateFor(ruleset, p);
	INFO(explainVerdict(ruleset, marked));
	CHECK(marked.certain());
	CHECK(marked.decision().action == nat::NatAction::masquerade);
	CHECK(decidingRuleText(ruleset, marked.decision()).find("masquerade") != std::string::npos);
	requireNftText(ruleset, nat::TableFamily::ip, "kube-proxy");
	requireNftText(ruleset, nat::TableFamily::ip, "kube-proxy-mark");
	requireNftText(ruleset, nat::TableFamily::ip, "nat");
}

TEST_CASE("kube-proxy's iptables mode: KUBE-POSTROUTING with its MARK target")
{
	Node node;
	runAll(kubeProxyIptablesChain());
	const nat::NatRuleset ruleset = readNat();
	nat::Packet p = fromPod("198.51.100.2", "192.0.2.2");
	const nat::NatVerdict unmarked = evaluateFor(ruleset, p);
	INFO(explainVerdict(ruleset, unmarked));
	CHECK(unmarked.certain());
	CHECK(unmarked.decision().action == nat::NatAction::none);
	p.mark = 0x4000;
	const nat::NatVerdict marked = evaluateFor(ruleset, p);
	INFO(explainVerdict(ruleset, marked));
	CHECK(marked.certain());
	CHECK(marked.decision().action == nat::NatAction::masquerade);
	CHECK(marked.decision().rule->chain == "KUBE-POSTROUTING");
	requireNftText(ruleset, nat::TableFamily::ip, "nat");
}

TEST_CASE("matches the evaluator does not know: may")
{
	for (const std::string &rule : {statisticRule(), stringRule()}) {
		Node node;
		INFO(rule);
		runOrFail(rule);
		const nat::NatRuleset ruleset = readNat();
		const nat::NatVerdict v = evaluateFor(ruleset, fromPod("198.51.100.2", "192.0.2.2"));
		INFO(explainVerdict(ruleset, v));
		CHECK_FALSE(v.certain());
		CHECK(hasAction(v, nat::NatAction::masquerade));
		CHECK(hasAction(v, nat::NatAction::none));
		REQUIRE(v.mayPoints.size() == 1);
		CHECK(v.mayPoints[0].reason.find("is not understood") != std::string::npos);
		requireNftText(ruleset, nat::TableFamily::ip, "nat");
	}
}

TEST_CASE("the agent's own table alone: skipped, and read right when it is not")
{
	Node node;
	runOrFail(fmt::format("{} --dry-run --config /nonexistent/ip-masq-agent | nft -f -", AGENT_BINARY));
	const nat::NatRuleset ruleset = readNat();
	requireTable(ruleset, nat::TableFamily::inet, "ip-masq-agent");
	// Placed by its decision: with "not masqueraded", nobody NATs.
	const nat::NatVerdict v = evaluateFor(ruleset, fromPod("198.51.100.2", "10.1.2.3"));
	CHECK(v.certain());
	CHECK(v.decision().action == nat::NatAction::none);
	// Evaluated as anyone else's table, the agent's real rules give its own decisions:
	// 10.0.0.0/8 is exempt by default, 192.0.2.2 is masqueraded.
	nat::AgentPlacement elsewhere;
	elsewhere.table = "not-the-agent";
	const auto asOther = [&](const char *destination) {
		return nat::evaluate(ruleset, fromPod("198.51.100.2", destination), Node::addresses(),
				     elsewhere);
	};
	const nat::NatVerdict exempt = asOther("10.1.2.3");
	INFO(explainVerdict(ruleset, exempt));
	CHECK(exempt.certain());
	CHECK(exempt.decision().action == nat::NatAction::none);
	const nat::NatVerdict masq = asOther("192.0.2.2");
	INFO(explainVerdict(ruleset, masq));
	CHECK(masq.certain());
	CHECK(masq.decision().action == nat::NatAction::masquerade);
	requireNftText(ruleset, nat::TableFamily::inet, "ip-masq-agent");

	// The daemon's check and --explain leave it unread: its sets may be large.
	runOrFail(kubeletRule());
	auto socket = netlink::Socket::open();
	REQUIRE(socket);
	netlink::NatReadLimits skip;
	skip.skipInetTable = "ip-masq-agent";
	auto skipped = netlink::readNatRuleset(*socket, skip);
	REQUIRE(skipped);
	CHECK_FALSE(findTable(*skipped, nat::TableFamily::inet, "ip-masq-agent"));
	CHECK(findTable(*skipped, nat::TableFamily::ip, "nat"));
}

TEST_CASE("the reader's limits: a clear error, and sets beyond the element budget are may")
{
	Node node;
	runAll(upstreamAgentRules({"10.0.0.0/8", "172.16.0.0/12"}));
	auto socket = netlink::Socket::open();
	REQUIRE(socket);
	netlink::NatReadLimits tight;
	tight.maxRules = 2;
	const auto tooMany = netlink::readNatRuleset(*socket, tight);
	REQUIRE_FALSE(tooMany);
	CHECK(tooMany.error().errnum == E2BIG);
	CHECK(tooMany.error().message.find("more than 2 rules") != std::string::npos);

	flushRuleset();
	TempDir dir;
	dir.write("sets.nft", R"(table ip s {
	set exempt { type ipv4_addr; flags interval; elements = { 192.0.2.0/24, 198.18.0.0/15 } }
	chain post {
		type nat hook postrouting priority srcnat; policy accept;
		ip daddr @exempt return
		masquerade
	}
}
)");
	runOrFail("nft -f " + dir.file("sets.nft"));
	const nat::NatRuleset whole = readNat();
	const nat::NatVerdict exempt = evaluateFor(whole, fromPod("198.51.100.2", "192.0.2.2"));
	CHECK(exempt.certain());
	CHECK(exempt.decision().action == nat::NatAction::none);
	CHECK(evaluateFor(whole, fromPod("198.51.100.2", "203.0.113.2")).decision().action ==
	      nat::NatAction::masquerade);
	netlink::NatReadLimits few;
	few.maxElements = 2;
	const auto partial = netlink::readNatRuleset(*socket, few);
	REQUIRE(partial);
	const nat::NatVerdict may = evaluateFor(*partial, fromPod("198.51.100.2", "192.0.2.2"));
	CHECK_FALSE(may.certain());
	requireNftText(whole, nat::TableFamily::ip, "s");
}
