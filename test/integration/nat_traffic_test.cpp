// SPDX-License-Identifier: Apache-2.0
// The NAT evaluator against real traffic: other components' rules in the node (written
// with the real iptables-nft and nft), no agent table (other tables alone: what the node
// does with what the agent exempts), and a connection from the pod to the external
// server for every verdict. A certain "masquerade" must show the node's address at the
// server, a certain "no NAT" the pod's, a certain SNAT an address of its range; a "may"
// must show one of the outcomes it lists.
#include <catch2/catch.hpp>

#include <sys/socket.h>

#include <fmt/format.h>

#include "agent_process.h"
#include "nat_components.h"
#include "traffic_support.h"

using namespace ipmasq;
using namespace ipmasq::test;

namespace {

// The node's addresses in traffic_support.h's topology.
NodeAddresses nodeAddresses()
{
	const auto a = [](const std::string &text) { return *parseAddress(text); };
	return {{{a("127.0.0.1"), 8},
		 {a("::1"), 128},
		 {a("198.51.100.1"), 24},
		 {a("2001:db8:1::1"), 64},
		 {a(kNodeV4), 24},
		 {a(kNodeV6), 64}},
		true};
}

// The first packet of a TCP connection from the pod to `destination`, as it reaches the
// node's nat postrouting: in from the pod's link, out to the external host.
nat::Packet podPacket(const std::string &destination, std::optional<uint32_t> mark = 0)
{
	nat::Packet p;
	const bool v4 = destination.find(':') == std::string::npos;
	p.source = *parseAddress(v4 ? kPodV4 : kPodV6);
	p.destination = *parseAddress(destination);
	p.inputInterface = "to-pod";
	p.outputInterface = "to-ext";
	p.l4proto = 6;
	p.destinationPort = kServerPort;
	p.mark = mark;
	return p;
}

// Whether the server saw what `o` does: the pod's address for no NAT, the node's for a
// masquerade, an address of the range for an SNAT.
bool shows(const Observation &seen, const nat::Outcome &o, bool v4)
{
	switch (o.action) {
	case nat::NatAction::none:
		return seen.address == (v4 ? kPodV4 : kPodV6);
	case nat::NatAction::masquerade:
		return seen.address == (v4 ? kNodeV4 : kNodeV6);
	case nat::NatAction::snat: {
		const auto address = parseAddress(seen.address);
		return o.addresses && address && o.addresses->first <= *address && *address <= o.addresses->last;
	}
	case nat::NatAction::dnat:
	case nat::NatAction::redirect:
	case nat::NatAction::dropped:
	case nat::NatAction::undetermined:
		break;
	}
	return false;
}

// Evaluates (other tables alone: the agent's table is not there), connects, and checks
// that the server saw what the verdict says; every rule read prints as nft lists it.
// Returns the verdict for further checks.
nat::NatVerdict checkAgainstTraffic(const Topology &net, const std::string &destination,
				    std::optional<uint32_t> mark = 0)
{
	const nft::NatRuleset ruleset = readNat();
	requireNftText(ruleset);
	const nat::NatVerdict v = nat::evaluate(ruleset, nullptr, podPacket(destination, mark), nodeAddresses());
	const bool v4 = destination.find(':') == std::string::npos;
	const Observation seen = connectFromPod(net, v4 ? AF_INET : AF_INET6, destination, kServerPort);
	INFO("to " << destination << ": " << seen << "\n" << explainVerdict(ruleset, v)
		   << runOrFail("nft list ruleset"));
	REQUIRE(seen.ok());
	if (v.certain()) {
		CHECK(shows(seen, v.decision(), v4));
	} else {
		bool any = false;
		for (const nat::Outcome &o : v.outcomes)
			any = any || shows(seen, o, v4);
		CHECK(any);
	}
	return v;
}

// Rules of other components in the node; the whole ruleset goes again at the end.
class Rules
{
public:
	explicit Rules(const std::vector<std::string> &commands) { runAll(commands); }
	~Rules() { run("nft flush ruleset"); }
	Rules(const Rules &) = delete;
	Rules &operator=(const Rules &) = delete;
};

} // namespace

TEST_CASE("every verdict against what the external server sees")
{
	Topology net;
	SourceEchoServer server(net.external);
	flushRuleset();

	SECTION("a clean node: no NAT")
	{
		const auto v = checkAgainstTraffic(net, kServerV4);
		CHECK(v.certain());
		CHECK(v.decision().action == nat::NatAction::none);
	}
	SECTION("kubelet's rule: masqueraded although the agent exempts it")
	{
		Rules rules({kubeletRule(), kubeletRule("ip6tables-nft", "fd00::/8")});
		for (const std::string &to : {kServerV4, kOtherServerV4, kServerV6}) {
			const auto v = checkAgainstTraffic(net, to);
			CHECK(v.certain());
			CHECK(v.decision().action == nat::NatAction::masquerade);
			CHECK(v.decision().placement == nat::Placement::beforeAgent);
		}
	}
	SECTION("Docker's rule: not for the pod's subnet; the same rule for it: yes")
	{
		{
			Rules rules({dockerRule()});
			const auto v = checkAgainstTraffic(net, kServerV4);
			CHECK(v.certain());
			CHECK(v.decision().action == nat::NatAction::none);
		}
		Rules rules({dockerRule("198.51.100.0/24")});
		const auto v = checkAgainstTraffic(net, kServerV4);
		CHECK(v.certain());
		CHECK(v.decision().action == nat::NatAction::masquerade);
	}
	SECTION("upstream's leftover chain: its exemptions hold, the rest is masqueraded")
	{
		Rules rules(upstreamAgentRules({"10.0.0.0/8", "192.0.2.0/24"}));
		const auto exempt = checkAgainstTraffic(net, kOtherServerV4);
		CHECK(exempt.certain());
		CHECK(exempt.decision().action == nat::NatAction::none);
		const auto masq = checkAgainstTraffic(net, kServerV4);
		CHECK(masq.certain());
		CHECK(masq.decision().action == nat::NatAction::masquerade);
	}
	SECTION("kube-proxy's marks: unmarked traffic is not NATed, marked traffic is")
	{
		TempDir dir;
		// A prerouting rule marks connections to the second server as a Service chain
		// would (kube-proxy's mark-for-masquerade).
		dir.write("rules.nft", kubeProxyTable() + kubeProxyMarkTable() + fmt::format(R"(table ip marker {{
	chain prerouting {{
		type filter hook prerouting priority mangle; policy accept;
		ip daddr {} meta mark set 0x4000
	}}
}}
)", kOtherServerV4));
		std::vector<std::string> commands{"nft -f " + dir.file("rules.nft"), kubeProxyIptablesRule()};
		for (const std::string &c : kubeProxyIptablesChain())
			commands.push_back(c);
		Rules rules(commands);
		const auto unmarked = checkAgainstTraffic(net, kServerV4);
		CHECK(unmarked.certain());
		CHECK(unmarked.decision().action == nat::NatAction::none);
		const auto marked = checkAgainstTraffic(net, kOtherServerV4, 0x4000);
		CHECK(marked.certain());
		CHECK(marked.decision().action == nat::NatAction::masquerade);
	}
	SECTION("computed addresses: NETMAP, snat prefix and maps keyed on the source, as the kernel maps them")
	{
		// The external host routes what the rules SNAT to back through the node.
		net.external.runOrFail("ip route add 198.18.0.0/15 via 203.0.113.1");
		TempDir dir;
		dir.write("maps.nft", fmt::format(R"(table ip computed {{
	chain post {{
		type nat hook postrouting priority srcnat - 5; policy accept;
		ip daddr {} snat ip prefix to ip saddr map {{ 198.51.100.0/24 : 198.18.52.0/24 }}
		ip daddr {} snat to ip saddr map {{ 198.51.100.0/24 : 198.18.55.9 }}
	}}
}}
)", kServerV4, kOtherServerV4));
		{
			Rules rules({"nft -f " + dir.file("maps.nft")});
			const auto prefix = checkAgainstTraffic(net, kServerV4);
			CHECK(prefix.certain());
			CHECK(prefix.decision().action == nat::NatAction::snat);
			// The pod's host bits in the map's prefix, not the prefix's network address.
			CHECK(prefix.decision().addresses->toString() == "198.18.52.2");
			const auto address = checkAgainstTraffic(net, kOtherServerV4);
			CHECK(address.certain());
			CHECK(address.decision().addresses->toString() == "198.18.55.9");
		}
		{
			Rules rules({netmapRule("198.51.100.0/24", "198.18.50.0/24")});
			const auto netmap = checkAgainstTraffic(net, kServerV4);
			CHECK(netmap.certain());
			CHECK(netmap.decision().addresses->toString() == "198.18.50.2");
		}
		Rules rules({"nft add table ip prefix", "nft 'add chain ip prefix post { type nat hook "
			     "postrouting priority srcnat; }'",
			     "nft add rule ip prefix post ip saddr 198.51.100.0/24 snat prefix to 198.18.51.0/24"});
		const auto prefix = checkAgainstTraffic(net, kServerV4);
		CHECK(prefix.certain());
		CHECK(prefix.decision().addresses->toString() == "198.18.51.2");
	}
	SECTION("a match the evaluator does not know: may, and traffic shows one of its outcomes")
	{
		Rules rules({statisticRule()});
		for (int i = 0; i < 4; i++) {
			const auto v = checkAgainstTraffic(net, kServerV4);
			CHECK_FALSE(v.certain());
		}
	}
}
