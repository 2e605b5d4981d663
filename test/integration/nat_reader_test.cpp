// SPDX-License-Identifier: Apache-2.0
// Other tables' NAT, read back from the real kernel: the rules kubelet, Docker, upstream's
// ip-masq-agent and kube-proxy write (with the real iptables-nft and nft), the reader's
// model of them, the evaluator's verdicts, and the renderer's text against nft's listing.
// Without an agent table the walk is other tables' alone: what the node does with a
// packet the agent exempts.
#include <catch2/catch.hpp>

#include <linux/netfilter.h>
#include <linux/rtnetlink.h>

#include "agent_process.h"
#include "ip-masq-agent/config/config_location.h"
#include "ip-masq-agent/compile/desired_state.h"
#include "ip-masq-agent/nft/agent_table.h"
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

	static NodeAddresses addresses()
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

// Other tables alone, as for a destination the agent exempts: its table is not in the
// walk (placement is then relative to its default priority, srcnat + 10).
nat::NatVerdict evaluateFor(const nft::NatRuleset &ruleset, const nat::Packet &packet)
{
	return nat::evaluate(ruleset, nullptr, packet, Node::addresses());
}

const nft::Table &requireTable(const nft::NatRuleset &ruleset, nft::TableFamily family,
			       const std::string &name)
{
	const nft::Table *t = findTable(ruleset, family, name);
	INFO("table " << nft::tableFamilyName(family) << " " << name);
	REQUIRE(t != nullptr);
	return *t;
}

template<typename T>
const T *findStatement(const nft::Rule &rule)
{
	for (const nft::Statement &s : rule.statements)
		if (const auto *found = std::get_if<T>(&s))
			return found;
	return nullptr;
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
	const nft::NatRuleset ruleset = readNat();
	CHECK(ruleset.tables.empty());
	const nat::NatVerdict v = evaluateFor(ruleset, fromPod("198.51.100.2", "192.0.2.2"));
	CHECK(v.certain());
	CHECK(v.decision().action == nat::NatAction::none);
	// No legacy iptables nat table in a fresh namespace.
	const auto legacy = legacyNatTables();
	REQUIRE(legacy);
	CHECK_FALSE(legacy->ipv4);
	CHECK_FALSE(legacy->ipv6);
}

TEST_CASE("kubelet's rule masquerades what the agent exempts (192.168.0.0/16)")
{
	Node node;
	runOrFail(kubeletRule());
	const nft::NatRuleset ruleset = readNat();
	const nft::Table &table = requireTable(ruleset, nft::TableFamily::ip, "nat");
	const nft::Chain *post = table.findChain("POSTROUTING");
	REQUIRE(post);
	REQUIRE(post->base);
	CHECK(post->base->priority == 100);
	REQUIRE(post->rules.size() == 1);
	// iptables-nft 1.8.9 writes payload + cmp for the prefix, xtables addrtype revision 1,
	// a counter and xtables MASQUERADE; decoded once, the xtables parts are statements
	// like the native ones, and nothing is left undecodable.
	const nft::Rule &rule = post->rules[0];
	const auto *cmp = findStatement<nft::Compare>(rule);
	REQUIRE(cmp);
	CHECK(cmp->op == nft::CmpOp::neq);
	CHECK(cmp->data == nft::Bytes{10});
	const auto *addrtype = findStatement<nft::AddressTypeMatch>(rule);
	REQUIRE(addrtype);
	CHECK(addrtype->destination == 1u << RTN_LOCAL);
	CHECK(addrtype->invertDestination);
	CHECK(addrtype->source == 0);
	const auto *masquerade = findStatement<nft::NatStatement>(rule);
	REQUIRE(masquerade);
	CHECK(masquerade->kind == nft::NatKind::masquerade);
	CHECK(findStatement<nft::CounterStatement>(rule));
	CHECK_FALSE(findStatement<nft::Other>(rule));

	const nat::NatVerdict v = evaluateFor(ruleset, fromPod("198.51.100.2", "192.168.1.5"));
	INFO(explainVerdict(ruleset, v));
	REQUIRE(v.certain());
	CHECK(v.decision().action == nat::NatAction::masquerade);
	CHECK(v.decision().placement == nat::Placement::beforeAgent);
	REQUIRE(v.decision().rule);
	CHECK(v.decision().rule->handle == post->rules[0].handle);
	CHECK(describeOutcome(v.decision()) ==
	      fmt::format("table ip nat chain POSTROUTING (priority srcnat, before the agent) "
			  "masquerades it: rule handle {}", post->rules[0].handle));
	CHECK(decidingRuleText(ruleset, v.decision()) ==
	      "ip daddr != 10.0.0.0/8 fib daddr type != local counter packets 0 bytes 0 masquerade");

	CHECK(evaluateFor(ruleset, fromPod("198.51.100.2", "10.1.2.3")).decision().action ==
	      nat::NatAction::none);
	CHECK(evaluateFor(ruleset, fromPod("198.51.100.2", "203.0.113.1")).decision().action ==
	      nat::NatAction::none);
	requireNftText(requireTable(ruleset, nft::TableFamily::ip, "nat"));
}

TEST_CASE("ip6tables' kubelet rule, for IPv6")
{
	Node node;
	runOrFail(kubeletRule("ip6tables-nft", "fd00::/8"));
	const nft::NatRuleset ruleset = readNat();
	const nat::NatVerdict v = evaluateFor(ruleset, fromPod("2001:db8:1::2", "2001:db8:2::2"));
	INFO(explainVerdict(ruleset, v));
	CHECK(v.certain());
	CHECK(v.decision().action == nat::NatAction::masquerade);
	// The ip6 table does not touch IPv4.
	CHECK(evaluateFor(ruleset, fromPod("198.51.100.2", "192.0.2.2")).decision().action ==
	      nat::NatAction::none);
	requireNftText(requireTable(ruleset, nft::TableFamily::ip6, "nat"));
}

TEST_CASE("Docker's rule: not for a pod outside its subnet, yes for one inside")
{
	Node node;
	runOrFail(dockerRule());
	const nft::NatRuleset ruleset = readNat();
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
	requireNftText(requireTable(ruleset, nft::TableFamily::ip, "nat"));
}

TEST_CASE("upstream ip-masq-agent's leftover chain")
{
	Node node;
	runAll(upstreamAgentRules({"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"}));
	const nft::NatRuleset ruleset = readNat();
	const nft::Table &table = requireTable(ruleset, nft::TableFamily::ip, "nat");
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
	requireNftText(requireTable(ruleset, nft::TableFamily::ip, "nat"));
}

TEST_CASE("kube-proxy's marks, in its nftables table and in iptables: unmarked is not reported")
{
	Node node;
	TempDir dir;
	dir.write("kube-proxy.nft", kubeProxyTable() + kubeProxyMarkTable());
	runOrFail("nft -f " + dir.file("kube-proxy.nft"));
	runOrFail(kubeProxyIptablesRule());
	const nft::NatRuleset ruleset = readNat();
	CHECK(ruleset.tables.size() == 3);
	nat::Packet p = fromPod("198.51.100.2", "192.0.2.2");
	const nat::NatVerdict unmarked = evaluateFor(ruleset, p);
	INFO(explainVerdict(ruleset, unmarked));
	CHECK(unmarked.certain());
	CHECK(unmarked.decision().action == nat::NatAction::none);
	// All three at srcnat: their order is not known, and it does not matter here.
	p.mark = 0x4000;
	const nat::NatVerdict marked = evaluateFor(ruleset, p);
	INFO(explainVerdict(ruleset, marked));
	CHECK(marked.certain());
	CHECK(marked.decision().action == nat::NatAction::masquerade);
	CHECK(decidingRuleText(ruleset, marked.decision()).find("masquerade") != std::string::npos);
	requireNftText(requireTable(ruleset, nft::TableFamily::ip, "kube-proxy"));
	requireNftText(requireTable(ruleset, nft::TableFamily::ip, "kube-proxy-mark"));
	requireNftText(requireTable(ruleset, nft::TableFamily::ip, "nat"));
}

TEST_CASE("kube-proxy's iptables mode: KUBE-POSTROUTING with its MARK target")
{
	Node node;
	runAll(kubeProxyIptablesChain());
	const nft::NatRuleset ruleset = readNat();
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
	requireNftText(requireTable(ruleset, nft::TableFamily::ip, "nat"));
}

TEST_CASE("matches the evaluator does not know: may")
{
	for (const std::string &rule : {statisticRule(), stringRule()}) {
		Node node;
		INFO(rule);
		runOrFail(rule);
		const nft::NatRuleset ruleset = readNat();
		const nat::NatVerdict v = evaluateFor(ruleset, fromPod("198.51.100.2", "192.0.2.2"));
		INFO(explainVerdict(ruleset, v));
		CHECK_FALSE(v.certain());
		CHECK(hasAction(v, nat::NatAction::masquerade));
		CHECK(hasAction(v, nat::NatAction::none));
		REQUIRE(v.mayPoints.size() == 1);
		CHECK(v.mayPoints[0].reason.find("is not understood") != std::string::npos);
		requireNftText(requireTable(ruleset, nft::TableFamily::ip, "nat"));
	}
}

TEST_CASE("the agent's own table: read from the kernel like any other, and linearized from "
	  "the desired ruleset into the same rules")
{
	Node node;
	TempDir dir;
	dir.write("config", "nonMasqueradeCIDRs: [10.0.0.0/8, 198.18.0.0/15]\noutputAddress: 198.18.100.7\n");
	runOrFail(fmt::format("{} --dry-run --config {} | nft -f -", AGENT_BINARY, dir.file("config")));
	const nft::NatRuleset ruleset = readNat();
	const nft::Table &kernel = requireTable(ruleset, nft::TableFamily::inet, "ip-masq-agent");
	requireNftText(kernel);
	// Walked as anyone else's table (no agent table given), its rules give its decisions:
	// 10.0.0.0/8 is exempt, 192.0.2.2 is SNATed to the outputAddress.
	const nat::NatVerdict exempt = evaluateFor(ruleset, fromPod("198.51.100.2", "10.1.2.3"));
	INFO(explainVerdict(ruleset, exempt));
	CHECK(exempt.certain());
	CHECK(exempt.decision().action == nat::NatAction::none);
	const nat::NatVerdict snat = evaluateFor(ruleset, fromPod("198.51.100.2", "192.0.2.2"));
	INFO(explainVerdict(ruleset, snat));
	CHECK(snat.certain());
	CHECK(snat.decision().action == nat::NatAction::snat);
	CHECK(snat.decision().decider == nat::Decider::rule);
	CHECK(snat.decision().addresses == AddressRange{*parseAddress("198.18.100.7"), *parseAddress("198.18.100.7")});

	// The desired ruleset of the same config, encoded by the backend's encoder and decoded
	// by the same decoder (what the daemon and --explain walk), is the kernel's table rule
	// for rule, and walked as the agent's it decides the same.
	const auto desired = desiredFromLocation(ConfigLocation::file(dir.file("config")), {}, {},
						 Result<std::vector<NodeAddress>>(std::vector<NodeAddress>{}));
	INFO((desired ? "" : desired.error().message));
	REQUIRE(desired);
	const auto agent = nft::agentTable(desired->ruleset);
	INFO((agent ? "" : agent.error().message));
	REQUIRE(agent);
	REQUIRE(agent->chains.size() == kernel.chains.size());
	for (size_t c = 0; c < kernel.chains.size(); c++) {
		const nft::Chain &ours = agent->chains[c], &theirs = kernel.chains[c];
		INFO("chain " << theirs.name);
		CHECK(ours.name == theirs.name);
		CHECK((ours.base ? ours.base->priority : -1) == (theirs.base ? theirs.base->priority : -1));
		REQUIRE(ours.rules.size() == theirs.rules.size());
		for (size_t r = 0; r < ours.rules.size(); r++)
			CHECK(nft::ruleText(*agent, ours.rules[r]) == nft::ruleText(kernel, theirs.rules[r]));
	}
	const nft::NatRuleset none;
	for (const char *destination : {"10.1.2.3", "192.0.2.2"}) {
		const nat::NatVerdict asAgent = nat::evaluate(none, &*agent, fromPod("198.51.100.2", destination),
							      Node::addresses());
		const nat::NatVerdict asOther = evaluateFor(ruleset, fromPod("198.51.100.2", destination));
		INFO(destination << "\n" << explainVerdict(none, asAgent, &*agent));
		CHECK(asAgent.certain());
		CHECK(asAgent.decision().action == asOther.decision().action);
		CHECK(asAgent.decision().addresses == asOther.decision().addresses);
		if (asAgent.decision().action != nat::NatAction::none)
			CHECK(asAgent.decision().decider == nat::Decider::agent);
	}

	// The daemon's check and --explain leave the kernel's copy unread (its sets may be
	// large): they walk the desired one.
	runOrFail(kubeletRule());
	nft::NatReadLimits skip;
	skip.skipInetTable = "ip-masq-agent";
	const nft::NatRuleset skipped = readNat(skip);
	CHECK_FALSE(findTable(skipped, nft::TableFamily::inet, "ip-masq-agent"));
	CHECK(findTable(skipped, nft::TableFamily::ip, "nat"));
}

TEST_CASE("the reader's limits: a table beyond them is unreadable (may), the others are read as "
	  "usual; sets beyond the element budget are may")
{
	Node node;
	// Upstream's chain (4 rules in table ip nat, read first), and a small table that runs
	// before it.
	runAll(upstreamAgentRules({"10.0.0.0/8", "172.16.0.0/12"}));
	TempDir dir;
	dir.write("small.nft", R"(table ip small {
	chain post {
		type nat hook postrouting priority srcnat - 10; policy accept;
		ip daddr 203.0.113.0/24 masquerade
	}
}
)");
	runOrFail("nft -f " + dir.file("small.nft"));
	nft::NatReadLimits tight;
	tight.maxRules = 2;
	const nft::NatRuleset limited = readNat(tight);
	const nft::Table &nat = requireTable(limited, nft::TableFamily::ip, "nat");
	CHECK_THAT(nat.unreadable, Catch::Contains("table ip nat could not be read: it holds more than "
						   "2 rules to read (the check's limit)"));
	// Kept with its base chain only, where it runs (srcnat), without rules or sets.
	REQUIRE(nat.chains.size() == 1);
	CHECK(nat.chains[0].name == "POSTROUTING");
	CHECK(nat.chains[0].rules.empty());
	CHECK(nat.sets.empty());
	// What the unreadable table had counted is given back: the small one is read whole.
	const nft::Table &small = requireTable(limited, nft::TableFamily::ip, "small");
	CHECK(small.unreadable == "");
	requireNftText(small);
	const nat::NatVerdict first = evaluateFor(limited, fromPod("198.51.100.2", "203.0.113.2"));
	INFO(explainVerdict(limited, first));
	CHECK(first.certain());
	CHECK(first.decision().action == nat::NatAction::masquerade);
	CHECK(first.decision().base->table == "small");
	// Past the small table, the unreadable one may do anything: never "nothing".
	const nat::NatVerdict beyond = evaluateFor(limited, fromPod("198.51.100.2", "192.0.2.2"));
	INFO(explainVerdict(limited, beyond));
	CHECK_FALSE(beyond.certain());
	CHECK(hasAction(beyond, nat::NatAction::undetermined));
	CHECK_THAT(beyond.decision().reason, Catch::Contains("more than 2 rules"));

	flushRuleset();
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
	const nft::NatRuleset whole = readNat();
	const nat::NatVerdict exempt = evaluateFor(whole, fromPod("198.51.100.2", "192.0.2.2"));
	CHECK(exempt.certain());
	CHECK(exempt.decision().action == nat::NatAction::none);
	CHECK(evaluateFor(whole, fromPod("198.51.100.2", "203.0.113.2")).decision().action ==
	      nat::NatAction::masquerade);
	nft::NatReadLimits few;
	few.maxElements = 2;
	const nft::NatRuleset partial = readNat(few);
	const nat::NatVerdict may = evaluateFor(partial, fromPod("198.51.100.2", "192.0.2.2"));
	INFO(explainVerdict(partial, may));
	CHECK_FALSE(may.certain());
	CHECK(may.mayPoints.size() == 1);
	CHECK_THAT(may.mayPoints.front().reason, Catch::Contains("set exempt was not read whole"));
	requireNftText(requireTable(whole, nft::TableFamily::ip, "s"));
}

TEST_CASE("rule-text parity: every kind of rule the NAT tests load, as nft lists it and as the "
	  "reader reads it")
{
	Node node;
	runAll({kubeletRule(), kubeletRule("ip6tables-nft", "fd00::/8"), dockerRule(), statisticRule(),
		stringRule(), netmapRule("198.51.100.0/24", "198.18.50.0/24"), kubeProxyIptablesRule()});
	runAll(upstreamAgentRules({"10.0.0.0/8", "172.16.0.0/12"}));
	runAll(kubeProxyIptablesChain());
	TempDir dir;
	dir.write("rules.nft", kubeProxyTable() + kubeProxyMarkTable() + natMapsTable());
	runOrFail("nft -f " + dir.file("rules.nft"));
	runOrFail(fmt::format("{} --dry-run --enable-ipv6 --config /nonexistent/ip-masq-agent | nft -f -",
			      AGENT_BINARY));
	dir.write("egress", "nonMasqueradeCIDRs: [10.0.0.0/8]\noutputAddress: 198.18.100.7\n"
			    "outputAddressIPv6: 2001:db8:9::1-2001:db8:9::3\n");
	runOrFail(fmt::format("{} --dry-run --enable-ipv6 --table=egress --config {} | nft -f -",
			      AGENT_BINARY, dir.file("egress")));
	const nft::NatRuleset ruleset = readNat();
	// ip nat, ip6 nat, kube-proxy, kube-proxy-mark, snatmaps, both, the agent's two.
	CHECK(ruleset.tables.size() == 8);
	const NftParity parity = requireNftText(ruleset);
	std::string tally;
	for (const auto &[which, count] : parity.documented)
		tally += fmt::format("{}: {}\n", which, count);
	INFO("rules compared: " << parity.rules << "\ndocumented differences:\n" << tally);
	CHECK(parity.rules >= 40);
	// Comments and -m statistic print as nft lists them; -m string is not translated.
	CHECK(parity.documented == std::map<std::string, size_t>{{"[unknown: xt match string]", 1}});
}
