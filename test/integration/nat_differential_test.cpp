// SPDX-License-Identifier: Apache-2.0
// The differential test of --explain's whole-node clause against the kernel: generated
// rulesets in other tables (iptables-nft and nft syntax: kubelet's rule, Docker's, Calico's
// natOutgoing, kube-proxy's marks in both modes, upstream's chain, NETMAP, SNAT, `snat
// prefix to`, `snat to ip saddr map`, `snat ip prefix to ip saddr map`, a range map, a
// verdict map with a jump and a goto, marks set and tested, a chain tied with the agent's
// priority registered before or after the agent's table, a chain after it, -m statistic),
// each with an outputAddress form (none: masquerade; an address; a range; a subnet that
// holds an address of the node), the agent's table applied with --once. For each case ONE
// real connection from the pod through the node to the external host, the source the host
// saw, and `ip-masq-agent --explain=DEST --explain-source=POD --explain-interface=to-ext
// [--explain-port=PORT/tcp]` for the same packet (a TCP connection to port 8080 or 443, the
// port given to --explain or not, drawn per case):
//   - a certain claim must equal what the host saw: "no other table's NAT undoes that"
//     means the host saw what the agent's rules alone give (the line's first verdict);
//     "but <rule> masquerades it / rewrites its source to X" means it saw that;
//   - "may" (and "other tables' NAT may undo that") is accepted only where the generator
//     marks the case undecidable, with its reason: equal-priority chains whose order (by
//     registration, which a dump does not tell) decides differently; -m statistic; a
//     masquerade against the agent's SNAT to an address of the node (which address a
//     masquerade picks depends on routing, which the evaluator does not model); a rule
//     that matches a protocol and port when --explain was given no port;
//   - every rule loaded prints as `nft -a list table` lists it (nat_components.h);
//   - the generator's own model of the rules (kept small and obvious) agrees with the
//     host, so its "undecidable" marks can be trusted.
//
// Environment (docs/development.md, "The NAT differential test"):
//   IPMASQ_DIFF_SEED=N   the generator's seed (default: the fixed CI seed below); every
//                        failure names the seed and the case.
//   IPMASQ_DIFF_CASES=N  generated cases (200, the default, to 2000), besides the fixed ones.
//   IPMASQ_DIFF_ONLY=I   run only generated case I of the seed (no fixed cases, no coverage
//                        check: one case cannot cover the generator).
//   IPMASQ_DIFF_AGENT=P  the agent binary for --once and --explain (default: this build's),
//                        e.g. an older build, to show that it fails.
// Every generated case runs, however long it takes (meson's timeout is for a hang), and the
// run checks that its cases covered every component, form and order the generator has.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <regex>
#include <set>
#include <sys/socket.h>

#include <fmt/format.h>

#include "agent_process.h"
#include "nat_components.h"
#include "traffic_support.h"

using namespace ipmasq;
using namespace ipmasq::test;
using namespace std::chrono_literals;

namespace {

constexpr uint64_t kCiSeed = 20261127;
constexpr uint16_t kHttpsPort = 443; // the connection's other port (kServerPort the first)
// About 0.1 s a case here: the default count takes some 20 s (30 s on a busy machine).
constexpr size_t kDefaultCases = 200;
constexpr size_t kMaxCases = 2000;
// How often each thing the generator can make must occur in a run.
constexpr size_t kCoveredAtLeast = 3;

// ---- Where a packet's source ends up ----

struct Fate {
	enum class Kind { unchanged, masquerade, snat };
	Kind kind = Kind::unchanged;
	AddressRange range = {}; // for snat

	bool operator==(const Fate &) const = default;
	std::string toString() const
	{
		switch (kind) {
		case Kind::unchanged: return "no NAT";
		case Kind::masquerade: return "masquerade";
		case Kind::snat: return "SNAT to " + range.toString();
		}
		return "?";
	}
};

Address address(const std::string &text)
{
	const auto parsed = parseAddress(text);
	REQUIRE(parsed);
	return *parsed;
}

Fate snatTo(const std::string &first, const std::string &last = {})
{
	return {Fate::Kind::snat, {address(first), address(last.empty() ? first : last)}};
}

const Fate kMasquerade{Fate::Kind::masquerade};

// The node's addresses: its link to the pod, its uplink's (which a masquerade picks on the
// way to the external host) and the address it has in the outputAddress subnet.
const std::string kNodeSubnetAddress = "198.18.200.1";

// Whether the external host seeing `seen` shows `fate`.
bool shows(const Fate &fate, const std::string &seen)
{
	switch (fate.kind) {
	case Fate::Kind::unchanged: return seen == kPodV4;
	case Fate::Kind::masquerade: return seen == kNodeV4;
	case Fate::Kind::snat: {
		const auto a = parseAddress(seen);
		return a && fate.range.first <= *a && *a <= fate.range.last;
	}
	}
	return false;
}

// ---- The generator's model of a ruleset ----

// The packet as a chain sees it: its mark changes on the way. `randomMatches`: what
// -m statistic --mode random does to it (the model walks both).
struct ModelPacket {
	std::string destination;
	uint32_t mark = 0;
	bool randomMatches = false;
	uint16_t port = kServerPort; // TCP's destination port
	bool portGiven = true; // to --explain
};

// What one component's rules do to the packet, in its chain: nothing (the walk goes on,
// maybe with a new mark), or NAT it. `undecidable` gets why the evaluator cannot know.
using Effect = std::function<std::optional<Fate>(ModelPacket &, std::vector<std::string> &undecidable)>;

struct Component {
	std::string description;
	std::vector<std::string> iptables; // commands, appended to table ip nat in order
	std::string nft; // a table of its own, for nft -f
	std::string table = "ip nat"; // its table: the same ones run in one chain, in order
	int priority = 100;
	bool registeredAfterAgent = false; // loaded after the agent's table is applied
	Effect effect;
};

// A base chain in the hook, as the model walks it.
struct Stage {
	std::string table;
	int priority = 0;
	std::vector<const Component *> components; // empty: the agent's
};

struct Case {
	std::string name;
	std::string destination;
	std::string config; // the agent's
	Fate agentAlone; // what the agent's rules alone do with the packet
	uint16_t port = kServerPort; // the connection's, TCP
	bool portGiven = true; // --explain-port=PORT/tcp
	std::vector<Component> components;
	std::vector<std::string> covers = {}; // what it exercises, for the run's coverage check
};

// The model's answer: the fate, or why the evaluator cannot tell.
struct ModelVerdict {
	std::optional<Fate> fate; // nullopt: it depends on something no evaluator can know
	std::vector<std::string> undecidable;
};

std::optional<Fate> walk(const Case &c, const std::vector<Stage> &order, bool randomMatches,
			 std::vector<std::string> &undecidable)
{
	ModelPacket packet{c.destination, 0, randomMatches, c.port, c.portGiven};
	for (const Stage &stage : order) {
		if (stage.components.empty()) {
			if (c.agentAlone.kind != Fate::Kind::unchanged)
				return c.agentAlone;
			continue;
		}
		for (const Component *component : stage.components)
			if (auto fate = component->effect(packet, undecidable))
				return fate;
	}
	return Fate{};
}

ModelVerdict model(const Case &c)
{
	std::vector<Stage> stages{{"inet ip-masq-agent", 110, {}}};
	for (const Component &component : c.components) {
		auto it = std::find_if(stages.begin(), stages.end(),
				       [&](const Stage &s) { return s.table == component.table; });
		if (it == stages.end())
			it = stages.insert(stages.end(), {component.table, component.priority, {}});
		it->components.push_back(&component);
	}
	std::sort(stages.begin(), stages.end(), [](const Stage &a, const Stage &b) {
		return std::tie(a.priority, a.table) < std::tie(b.priority, b.table);
	});
	// Equal priorities run in the order the kernel registered them, which no dump tells:
	// every order of each group.
	std::vector<std::vector<Stage>> orders{stages};
	for (size_t start = 0, end; start < stages.size(); start = end) {
		for (end = start + 1; end < stages.size() && stages[end].priority == stages[start].priority;)
			end++;
		std::vector<std::vector<Stage>> grown;
		for (const auto &order : orders) {
			std::vector<Stage> group(order.begin() + long(start), order.begin() + long(end));
			std::sort(group.begin(), group.end(), [](const Stage &a, const Stage &b) { return a.table < b.table; });
			do {
				auto next = order;
				std::copy(group.begin(), group.end(), next.begin() + long(start));
				grown.push_back(std::move(next));
			} while (std::next_permutation(group.begin(), group.end(),
						       [](const Stage &a, const Stage &b) { return a.table < b.table; }));
		}
		orders = std::move(grown);
	}
	ModelVerdict verdict;
	std::set<std::string> fates;
	for (const auto &order : orders)
		for (const bool randomMatches : {false, true}) {
			verdict.fate = walk(c, order, randomMatches, verdict.undecidable);
			fates.insert(verdict.fate->toString());
		}
	if (fates.size() > 1) {
		verdict.undecidable.push_back(fmt::format(
			"the fate depends on the order of chains of equal priority (by registration, "
			"which a dump does not tell) or on -m statistic: {}", fmt::join(fates, " / ")));
		verdict.fate.reset();
		return verdict;
	}
	// Which of the node's addresses a masquerade picks depends on the route: against the
	// agent's SNAT to an address of the node the evaluator says "may".
	const bool agentSnatsToNode = c.agentAlone.kind == Fate::Kind::snat &&
				      c.agentAlone.range.first == address(kNodeSubnetAddress);
	if (agentSnatsToNode && verdict.fate && verdict.fate->kind == Fate::Kind::masquerade)
		verdict.undecidable.push_back("a masquerade against the agent's SNAT to an address of "
					      "the node (which address it picks is the route's choice)");
	return verdict;
}

// ---- The components, as their owners write them ----

using Rng = std::mt19937_64;

bool coin(Rng &rng)
{
	return std::uniform_int_distribution<int>(0, 1)(rng) == 1;
}

size_t pick(Rng &rng, size_t n)
{
	return std::uniform_int_distribution<size_t>(0, n - 1)(rng);
}

// The other external destination: a rule that names it does not match the packet.
std::string otherDestination(const std::string &destination)
{
	return destination == kServerV4 ? kOtherServerV4 : kServerV4;
}

std::string slash24(const std::string &destination)
{
	return destination.substr(0, destination.rfind('.')) + ".0/24";
}

Component kubelet(Rng &rng, const std::string &d)
{
	const bool covers = coin(rng);
	const std::string cluster = covers ? slash24(d) : "198.18.0.0/15";
	return {fmt::format("kubelet's rule, cluster CIDR {}", cluster), {kubeletRule("iptables-nft", cluster)},
		{}, "ip nat", 100, false,
		[covers](ModelPacket &, std::vector<std::string> &) -> std::optional<Fate> {
			return covers ? std::nullopt : std::optional(kMasquerade);
		}};
}

Component docker(Rng &rng, const std::string &)
{
	const bool inside = coin(rng);
	const std::string subnet = inside ? "198.51.100.0/24" : "172.17.0.0/16";
	return {fmt::format("Docker's rule for {}", subnet), {dockerRule(subnet)}, {}, "ip nat", 100, false,
		[inside](ModelPacket &, std::vector<std::string> &) -> std::optional<Fate> {
			return inside ? std::optional(kMasquerade) : std::nullopt;
		}};
}

Component calico(Rng &rng, const std::string &d)
{
	const bool poolHoldsPod = coin(rng), poolsHoldDestination = coin(rng);
	const std::string pool = poolHoldsPod ? "198.51.100.0/24" : "172.30.0.0/16";
	const std::string other = poolsHoldDestination ? slash24(d) : "10.96.0.0/12";
	return {fmt::format("Calico natOutgoing, pool {}, all pools also {}", pool, other), {},
		fmt::format(R"(table ip calico {{
	set masq-ipam-pools {{ type ipv4_addr; flags interval; elements = {{ {0} }} }}
	set all-ipam-pools {{ type ipv4_addr; flags interval; elements = {{ {0}, {1} }} }}
	chain nat-postrouting {{
		type nat hook postrouting priority srcnat; policy accept;
		jump cali-nat-outgoing
	}}
	chain cali-nat-outgoing {{
		ip saddr @masq-ipam-pools ip daddr != @all-ipam-pools masquerade fully-random
	}}
}}
)", pool, other),
		"ip calico", 100, false,
		[=](ModelPacket &, std::vector<std::string> &) -> std::optional<Fate> {
			return poolHoldsPod && !poolsHoldDestination ? std::optional(kMasquerade) : std::nullopt;
		}};
}

// kube-proxy masquerades what a Service chain marked with 0x4000; here a rule of its own
// table (nft mode) or of POSTROUTING (iptables mode) marks one destination or none.
std::optional<Fate> kubeProxyMasquerade(ModelPacket &p, bool marks)
{
	if (marks)
		p.mark |= 0x4000;
	if (!(p.mark & 0x4000))
		return std::nullopt;
	p.mark ^= 0x4000;
	return kMasquerade;
}

Component kubeProxyNft(Rng &rng, const std::string &d)
{
	const size_t marker = pick(rng, 3); // none, this destination, the other
	const std::string markRule =
		marker == 0 ? "" : fmt::format("\t\tip daddr {} meta mark set meta mark | 0x4000\n",
					       marker == 1 ? d : otherDestination(d));
	return {fmt::format("kube-proxy (nftables), marking {}", marker == 0 ? "nothing" : marker == 1 ? "it" : "another"),
		{},
		fmt::format(R"(table ip kube-proxy {{
	chain nat-postrouting {{
		type nat hook postrouting priority srcnat; policy accept;
		jump mark-for-masquerade
		jump masquerading
	}}
	chain mark-for-masquerade {{
{}	}}
	chain masquerading {{
		meta mark & 0x4000 == 0 return
		meta mark set meta mark ^ 0x4000
		masquerade fully-random
	}}
}}
)", markRule),
		"ip kube-proxy", 100, false,
		[marker](ModelPacket &p, std::vector<std::string> &) { return kubeProxyMasquerade(p, marker == 1); }};
}

Component kubeProxyIptables(Rng &rng, const std::string &d)
{
	const size_t marker = pick(rng, 3);
	std::vector<std::string> commands;
	if (marker != 0)
		commands.push_back(fmt::format("iptables-nft -w -t nat -A POSTROUTING -d {}/32 -j MARK --or-mark 0x4000",
					       marker == 1 ? d : otherDestination(d)));
	for (const std::string &c : kubeProxyIptablesChain())
		commands.push_back(c);
	return {fmt::format("kube-proxy (iptables), marking {}", marker == 0 ? "nothing" : marker == 1 ? "it" : "another"),
		commands, {}, "ip nat", 100, false,
		[marker](ModelPacket &p, std::vector<std::string> &) { return kubeProxyMasquerade(p, marker == 1); }};
}

Component upstream(Rng &rng, const std::string &d)
{
	const bool exempts = coin(rng);
	const std::vector<std::string> cidrs = exempts ? std::vector<std::string>{"10.0.0.0/8", slash24(d)}
						       : std::vector<std::string>{"10.0.0.0/8", "172.16.0.0/12"};
	return {fmt::format("upstream's chain, exempting {}", fmt::join(cidrs, ", ")), upstreamAgentRules(cidrs),
		{}, "ip nat", 100, false,
		[exempts](ModelPacket &, std::vector<std::string> &) -> std::optional<Fate> {
			return exempts ? std::nullopt : std::optional(kMasquerade);
		}};
}

Component netmap(Rng &rng, const std::string &)
{
	const bool matches = coin(rng);
	const std::string source = matches ? "198.51.100.0/24" : "172.17.0.0/16";
	return {fmt::format("iptables NETMAP of {} to 198.18.50.0/24", source),
		{netmapRule(source, "198.18.50.0/24")}, {}, "ip nat", 100, false,
		[matches](ModelPacket &, std::vector<std::string> &) -> std::optional<Fate> {
			return matches ? std::optional(snatTo("198.18.50.2")) : std::nullopt;
		}};
}

Component iptablesSnat(Rng &rng, const std::string &d)
{
	const bool matches = coin(rng);
	const std::string to = matches ? d : otherDestination(d);
	return {fmt::format("iptables SNAT of traffic to {} to 198.18.62.1", to),
		{fmt::format("iptables-nft -w -t nat -A POSTROUTING -d {}/32 -j SNAT --to-source 198.18.62.1", to)},
		{}, "ip nat", 100, false,
		[matches](ModelPacket &, std::vector<std::string> &) -> std::optional<Fate> {
			return matches ? std::optional(snatTo("198.18.62.1")) : std::nullopt;
		}};
}

Component statistic(Rng &, const std::string &)
{
	return {"-m statistic --mode random, masquerade", {statisticRule()}, {}, "ip nat", 100, false,
		[](ModelPacket &p, std::vector<std::string> &) -> std::optional<Fate> {
			return p.randomMatches ? std::optional(kMasquerade) : std::nullopt;
		}};
}

// An nft table of one base chain at `priority` (nft's expression), with `body`'s rules.
std::string nftTable(const std::string &name, const std::string &priority, const std::string &body,
		     const std::string &more = {})
{
	return fmt::format("table ip {} {{\n\tchain post {{\n\t\ttype nat hook postrouting priority {}; "
			   "policy accept;\n{}\t}}\n{}}}\n", name, priority, body, more);
}

Component snatPrefix(Rng &rng, const std::string &d)
{
	const bool matches = coin(rng);
	const std::string to = matches ? d : otherDestination(d);
	return {fmt::format("snat prefix to 198.18.51.0/24 for traffic to {}", to), {},
		nftTable("prefixsnat", "srcnat - 3",
			 fmt::format("\t\tip saddr 198.51.100.0/24 ip daddr {} snat prefix to 198.18.51.0/24\n", to)),
		"ip prefixsnat", 97, false,
		[matches](ModelPacket &, std::vector<std::string> &) -> std::optional<Fate> {
			return matches ? std::optional(snatTo("198.18.51.2")) : std::nullopt;
		}};
}

// `snat ... to ip saddr map { KEY : VALUE }`: no element for the pod's source breaks the
// rule, as in the kernel.
Component sourceMap(Rng &rng, const std::string &, size_t kind)
{
	const bool keyHoldsPod = coin(rng);
	const std::string key = keyHoldsPod ? "198.51.100.0/24" : "172.17.0.0/16";
	static constexpr const char *kStatements[] = {"snat to ip saddr map {{ {} : 198.18.55.9 }}",
						      "snat ip prefix to ip saddr map {{ {} : 198.18.53.0/24 }}",
						      "snat ip to ip saddr map {{ {} : 198.18.56.9-198.18.56.11 }}"};
	static constexpr const char *kTables[] = {"addrmap", "prefixmap", "rangemap"};
	static constexpr int kPriorities[] = {98, 96, 94};
	const Fate fates[] = {snatTo("198.18.55.9"), snatTo("198.18.53.2"), snatTo("198.18.56.9", "198.18.56.11")};
	const std::string statement = fmt::format(fmt::runtime(kStatements[kind]), key);
	return {fmt::format("{} (table {})", statement, kTables[kind]), {},
		nftTable(kTables[kind], fmt::format("srcnat - {}", 100 - kPriorities[kind]), "\t\t" + statement + "\n"),
		std::string("ip ") + kTables[kind], kPriorities[kind], false,
		[keyHoldsPod, fate = fates[kind]](ModelPacket &, std::vector<std::string> &) -> std::optional<Fate> {
			return keyHoldsPod ? std::optional(fate) : std::nullopt;
		}};
}

Component verdictMap(Rng &rng, const std::string &d)
{
	static constexpr const char *kVerdicts[] = {"jump masq", "goto snatc", "return", ""};
	const size_t verdict = pick(rng, 4);
	const std::string element = kVerdicts[verdict][0] ? fmt::format("{} : {}, ", d, kVerdicts[verdict]) : "";
	return {fmt::format("a verdict map: {}", kVerdicts[verdict][0] ? kVerdicts[verdict] : "no element for it"), {},
		nftTable("vmaps", "srcnat - 1",
			 fmt::format("\t\tip daddr vmap {{ {}{} : jump masq }}\n", element, otherDestination(d)),
			 "\tchain masq {\n\t\tmasquerade\n\t}\n\tchain snatc {\n\t\tsnat to 198.18.58.1\n\t}\n"),
		"ip vmaps", 99, false,
		[verdict](ModelPacket &, std::vector<std::string> &) -> std::optional<Fate> {
			if (verdict == 0)
				return kMasquerade;
			if (verdict == 1)
				return snatTo("198.18.58.1");
			return std::nullopt;
		}};
}

Component marks(Rng &rng, const std::string &d)
{
	const uint32_t mark = coin(rng) ? 0x10 : 0x20;
	return {fmt::format("mark {:#x} set, then tested for 0x10 in a jumped-to chain", mark), {},
		nftTable("marks", "srcnat - 5", fmt::format("\t\tmeta mark set meta mark | {:#x}\n\t\tjump check\n", mark),
			 fmt::format("\tchain check {{\n\t\tmeta mark & 0x10 == 0x10 ip daddr {} snat to 198.18.61.1\n\t}}\n", d)),
		"ip marks", 95, false,
		[mark](ModelPacket &p, std::vector<std::string> &) -> std::optional<Fate> {
			p.mark |= mark;
			return (p.mark & 0x10) ? std::optional(snatTo("198.18.61.1")) : std::nullopt;
		}};
}

// At the agent's own priority (srcnat + 10), or after it (srcnat + 20).
Component atPriority(Rng &rng, const std::string &d, bool tied)
{
	const size_t action = pick(rng, 3); // masquerade, snat, another destination only
	const bool after = coin(rng);
	const std::string statement = action == 0 ? fmt::format("ip daddr {} masquerade", d)
				      : action == 1 ? fmt::format("ip daddr {} snat to {}", d, tied ? "198.18.59.1" : "198.18.60.1")
						    : fmt::format("ip daddr {} masquerade", otherDestination(d));
	const std::string name = tied ? "tied" : "after";
	return {fmt::format("{} (priority srcnat + {}, registered {} the agent's table)", statement, tied ? 10 : 20,
			    after ? "after" : "before"),
		{}, nftTable(name, tied ? "srcnat + 10" : "srcnat + 20", "\t\t" + statement + "\n"),
		"ip " + name, tied ? 110 : 120, after,
		[action, tied](ModelPacket &, std::vector<std::string> &) -> std::optional<Fate> {
			if (action == 0)
				return kMasquerade;
			if (action == 1)
				return snatTo(tied ? "198.18.59.1" : "198.18.60.1");
			return std::nullopt;
		}};
}

// A rule that matches a protocol and a destination port, in nft or iptables syntax: decided
// when --explain is given the connection's port and protocol.
Component portRule(Rng &rng, const std::string &d)
{
	const std::string protocol = coin(rng) ? "tcp" : "udp";
	const uint16_t port = coin(rng) ? kHttpsPort : kServerPort;
	const bool masquerade = coin(rng);
	const bool iptables = coin(rng);
	const auto matches = [=](ModelPacket &p, std::vector<std::string> &undecidable) -> std::optional<Fate> {
		if (!p.portGiven)
			undecidable.push_back("a rule matches a protocol and port, and --explain was given none");
		if (protocol != "tcp" || port != p.port)
			return std::nullopt;
		return masquerade ? kMasquerade : snatTo("198.18.63.1");
	};
	const std::string description = fmt::format("{} dport {}: {} ({})", protocol, port,
						    masquerade ? "masquerade" : "SNAT to 198.18.63.1",
						    iptables ? "iptables" : "nft");
	if (iptables)
		return {description,
			{fmt::format("iptables-nft -w -t nat -A POSTROUTING -d {}/32 -p {} --dport {} -j {}", d, protocol,
				     port, masquerade ? "MASQUERADE" : "SNAT --to-source 198.18.63.1")},
			{}, "ip nat", 100, false, matches};
	return {description, {},
		nftTable("ports", "srcnat - 7",
			 fmt::format("\t\tip daddr {} {} dport {} {}\n", d, protocol, port,
				     masquerade ? "masquerade" : "snat to 198.18.63.1")),
		"ip ports", 93, false, matches};
}

using Maker = std::function<Component(Rng &, const std::string &)>;

const std::vector<Maker> &makers()
{
	static const std::vector<Maker> all{
		kubelet, docker, calico, kubeProxyNft, kubeProxyIptables, upstream, netmap, iptablesSnat,
		snatPrefix,
		[](Rng &r, const std::string &d) { return sourceMap(r, d, 0); },
		[](Rng &r, const std::string &d) { return sourceMap(r, d, 1); },
		[](Rng &r, const std::string &d) { return sourceMap(r, d, 2); },
		verdictMap, marks,
		[](Rng &r, const std::string &d) { return atPriority(r, d, true); },
		[](Rng &r, const std::string &d) { return atPriority(r, d, false); },
		statistic, portRule,
	};
	return all;
}

// The agent's config and what its rules alone do with the packet.
struct AgentForm {
	std::string outputAddress; // "" for masquerade
	Fate fate;
};

AgentForm agentForm(size_t form)
{
	switch (form) {
	case 0: return {"", kMasquerade};
	case 1: return {"198.18.100.7", snatTo("198.18.100.7")};
	case 2: return {"198.18.100.10-198.18.100.12", snatTo("198.18.100.10", "198.18.100.12")};
	default: return {"198.18.200.0/24", snatTo(kNodeSubnetAddress)};
	}
}

Case makeCase(const std::string &name, const std::string &destination, size_t form, bool exempt)
{
	Case c;
	c.name = name;
	c.destination = destination;
	const AgentForm agent = agentForm(form);
	c.config = fmt::format("nonMasqueradeCIDRs: [198.18.0.0/15{}]\n", exempt ? ", " + slash24(destination) : "");
	if (!agent.outputAddress.empty())
		c.config += "outputAddress: " + agent.outputAddress + "\n";
	c.agentAlone = exempt ? Fate{} : agent.fate;
	return c;
}

// Case `index` of `seed`: its own generator, so one case can be run alone.
Case generated(uint64_t seed, size_t index)
{
	Rng rng(seed * 0x9e3779b97f4a7c15ULL + index);
	const std::string destination = coin(rng) ? kServerV4 : kOtherServerV4;
	const size_t form = pick(rng, 4);
	const bool exempt = pick(rng, 3) == 0;
	Case c = makeCase(fmt::format("generated case {} of seed {}", index, seed), destination, form, exempt);
	std::vector<size_t> kinds(makers().size());
	std::iota(kinds.begin(), kinds.end(), 0);
	std::shuffle(kinds.begin(), kinds.end(), rng);
	const size_t count = 1 + pick(rng, 3);
	std::sort(kinds.begin(), kinds.begin() + long(count)); // iptables rules in a fixed order
	c.covers = {fmt::format("form {}", form), exempt ? "exempt" : "not exempt"};
	for (size_t i = 0; i < count; i++) {
		c.components.push_back(makers()[kinds[i]](rng, destination));
		c.covers.push_back(fmt::format("component {}", kinds[i]));
		if (c.components.back().registeredAfterAgent)
			c.covers.push_back("registered after the agent");
	}
	c.port = coin(rng) ? kHttpsPort : kServerPort;
	c.portGiven = pick(rng, 4) != 0;
	c.covers.push_back(c.portGiven ? "port given" : "no port given");
	return c;
}

// The issue's four cases, each a rule before the agent that undoes its decision and that
// today's main says nothing of (or the wrong address).
std::vector<Case> fixedCases()
{
	std::vector<Case> cases;
	{
		Case c = makeCase("issue 1: kubelet's masquerade before the agent's SNAT to 198.18.100.7", kOtherServerV4, 1, false);
		c.components.push_back({"kubelet's rule, cluster CIDR 198.18.0.0/15", {kubeletRule("iptables-nft", "198.18.0.0/15")},
					{}, "ip nat", 100, false,
					[](ModelPacket &, std::vector<std::string> &) -> std::optional<Fate> { return kMasquerade; }});
		cases.push_back(std::move(c));
	}
	{
		Case c = makeCase("issue 2: an SNAT into the outputAddress subnet to 198.18.200.9, which this node did not pick",
				  kOtherServerV4, 3, false);
		c.components.push_back({"snat to 198.18.200.9", {},
					nftTable("other", "srcnat", fmt::format("\t\tip daddr {} snat to 198.18.200.9\n", kOtherServerV4)),
					"ip other", 100, false,
					[](ModelPacket &, std::vector<std::string> &) -> std::optional<Fate> { return snatTo("198.18.200.9"); }});
		cases.push_back(std::move(c));
	}
	for (const size_t form : {0, 1}) {
		Case c = makeCase(fmt::format("issue 3: iptables NETMAP before the agent ({})", form == 0 ? "masquerade" : "outputAddress"),
				  kServerV4, form, false);
		c.components.push_back({"NETMAP of 198.51.100.0/24 to 198.18.50.0/24", {netmapRule("198.51.100.0/24", "198.18.50.0/24")},
					{}, "ip nat", 100, false,
					[](ModelPacket &, std::vector<std::string> &) -> std::optional<Fate> { return snatTo("198.18.50.2"); }});
		cases.push_back(std::move(c));
	}
	{
		Case c = makeCase("issue 4: snat ip prefix to ip saddr map, before the agent's masquerade", kServerV4, 0, false);
		c.components.push_back({"snat ip prefix to ip saddr map { 198.51.100.0/24 : 198.18.53.0/24 }", {},
					nftTable("prefixmap", "srcnat - 4", "\t\tsnat ip prefix to ip saddr map { 198.51.100.0/24 : 198.18.53.0/24 }\n"),
					"ip prefixmap", 96, false,
					[](ModelPacket &, std::vector<std::string> &) -> std::optional<Fate> { return snatTo("198.18.53.2"); }});
		cases.push_back(std::move(c));
	}
	{
		Case c = makeCase("issue 4: snat prefix to 198.18.51.0/24, before the agent's exemption", kServerV4, 0, true);
		c.components.push_back({"snat prefix to 198.18.51.0/24", {},
					nftTable("prefixsnat", "srcnat - 3", "\t\tip saddr 198.51.100.0/24 snat prefix to 198.18.51.0/24\n"),
					"ip prefixsnat", 97, false,
					[](ModelPacket &, std::vector<std::string> &) -> std::optional<Fate> { return snatTo("198.18.51.2"); }});
		cases.push_back(std::move(c));
	}
	return cases;
}

// ---- --explain's line, read back ----

// One claim of the line's node-wide clause.
struct Claim {
	bool certain = false;
	std::optional<Fate> fate; // for a certain claim: what the host must have seen
	std::string text;
};

struct ExplainedLine {
	std::optional<Fate> agentAlone; // from the line's verdict
	bool kernelAgrees = false;
	std::vector<Claim> claims;
};

std::optional<AddressRange> rangeOf(const std::string &text)
{
	if (const size_t dash = text.find('-'); dash != std::string::npos) {
		const auto first = parseAddress(text.substr(0, dash)), last = parseAddress(text.substr(dash + 1));
		if (first && last)
			return AddressRange{*first, *last};
		return std::nullopt;
	}
	if (text.find('/') != std::string::npos) {
		const auto prefix = parsePrefix(text);
		if (!prefix)
			return std::nullopt;
		return AddressRange{prefix->first(), prefix->last()};
	}
	const auto a = parseAddress(text);
	return a ? std::optional(AddressRange{*a, *a}) : std::nullopt;
}

// "masquerades it", "rewrites its source to X" (certain), anything with "may" or "cannot
// be evaluated" (not certain).
Claim claimOf(const std::string &clause)
{
	Claim claim{false, std::nullopt, clause};
	static const std::regex outcome(R"(^table \S+ \S+ chain \S+ \(priority [^)]*\) (.*)$)");
	std::smatch m;
	if (!std::regex_match(clause, m, outcome))
		return claim;
	const std::string action = m[1];
	static const std::regex rewrites(R"(^rewrites its source to (\S+?)(:|,| \(|$).*)");
	if (action.rfind("masquerades it", 0) == 0) {
		claim.certain = true;
		claim.fate = kMasquerade;
	} else if (std::regex_match(action, m, rewrites)) {
		claim.certain = true;
		if (const auto range = rangeOf(m[1]))
			claim.fate = Fate{Fate::Kind::snat, *range};
	}
	return claim;
}

ExplainedLine readLine(const std::string &line, const std::string &destination)
{
	ExplainedLine out;
	const std::string prefix = destination + ": ";
	if (line.rfind(prefix, 0) != 0)
		return out;
	const std::string rest = line.substr(prefix.size());
	std::smatch m;
	if (rest.rfind("not masqueraded", 0) == 0)
		out.agentAlone = Fate{};
	else if (rest.rfind("masqueraded", 0) == 0)
		out.agentAlone = kMasquerade;
	else if (std::regex_search(rest, m, std::regex(R"(^SNAT to ([^ ,]+))")))
		if (const auto range = rangeOf(m[1]))
			out.agentAlone = Fate{Fate::Kind::snat, *range};
	const std::string agrees = "; the kernel agrees";
	const size_t at = rest.find(agrees);
	out.kernelAgrees = at != std::string::npos;
	if (!out.kernelAgrees)
		return out;
	std::string clause = rest.substr(at + agrees.size());
	// The SNAT usage toward the destination, when conntrack has some, ends the line: what
	// the node's connections use now, no claim about what a packet's source becomes.
	clause = clause.substr(0, clause.find("; SNAT ports in use toward it now: "));
	if (clause == "; no other table's NAT undoes that") {
		out.claims.push_back({true, out.agentAlone, clause});
		return out;
	}
	// "; but <outcome>[, before the agent ...]" for each conflict, "; other tables' NAT may
	// undo that: <outcome>" for an undetermined one.
	static const std::regex clauses(R"(; (but |other tables' NAT may undo that: ))");
	std::vector<size_t> starts;
	for (auto it = std::sregex_iterator(clause.begin(), clause.end(), clauses); it != std::sregex_iterator(); ++it)
		starts.push_back(size_t(it->position()));
	for (size_t i = 0; i < starts.size(); i++) {
		const std::string text = clause.substr(starts[i], (i + 1 < starts.size() ? starts[i + 1] : clause.size()) - starts[i]);
		if (text.rfind("; but ", 0) == 0)
			out.claims.push_back(claimOf(text.substr(6)));
		else
			out.claims.push_back({false, std::nullopt, text});
	}
	if (starts.empty() || starts.front() != 0)
		out.claims.push_back({false, std::nullopt, "unrecognised: " + clause});
	return out;
}

// ---- Running a case ----

std::string agentUnderTest()
{
	const char *other = std::getenv("IPMASQ_DIFF_AGENT");
	return other && *other ? other : agentBinary();
}

std::string describe(const Case &c)
{
	std::string out = fmt::format("{}: to {} port {}/tcp ({}), config: {}", c.name, c.destination, c.port,
				      c.portGiven ? "given to --explain" : "not given to --explain", c.config);
	for (const Component &component : c.components)
		out += "  + " + component.description + "\n";
	return out;
}

struct Tally {
	size_t cases = 0, certain = 0, undecidable = 0, conflicts = 0;
	size_t decidedAnyway = 0; // undecidable by the model, certain (and right) by --explain
	std::map<std::string, size_t> covered;
	NftParity parity;
};

void loadComponents(const Case &c, bool afterAgent, const TempDir &dir)
{
	for (const Component &component : c.components) {
		if (component.registeredAfterAgent != afterAgent)
			continue;
		runAll(component.iptables);
		if (!component.nft.empty()) {
			dir.write("rules.nft", component.nft);
			runOrFail("nft -f " + dir.file("rules.nft"));
		}
	}
}

void runCase(const Topology &net, const Case &c, Tally &tally)
{
	INFO(describe(c));
	flushRuleset();
	TempDir dir;
	dir.write("config", c.config);
	loadComponents(c, false, dir);
	const std::string agent = agentUnderTest();
	std::string output;
	const int once = run(fmt::format("timeout 60 {} --once --config={} 2>&1", agent, dir.file("config")), &output);
	INFO("--once:\n" << output);
	REQUIRE(once == 0);
	loadComponents(c, true, dir);

	const Observation seen = connectFromPod(net, AF_INET, c.destination, c.port);
	std::string explained;
	const std::string port = c.portGiven ? fmt::format(" --explain-port={}/tcp", c.port) : "";
	const int status = run(fmt::format("timeout 60 {} --config={} --explain={} --explain-source={} "
					   "--explain-interface=to-ext{} 2>/dev/null",
					   agent, dir.file("config"), c.destination, kPodV4, port),
			       &explained);
	const std::string ruleset = runOrFail("nft list ruleset");
	const ModelVerdict expected = model(c);
	INFO("the host saw: " << seen << "\n--explain: " << explained << "the model: "
			      << (expected.fate ? expected.fate->toString() : "undecidable") << "\n"
			      << fmt::format("{}", fmt::join(expected.undecidable, "\n")) << "\nnft list ruleset:\n"
			      << ruleset);
	REQUIRE(seen.ok());
	REQUIRE(status == 0);
	REQUIRE(!explained.empty());
	explained.pop_back(); // the newline
	const ExplainedLine line = readLine(explained, c.destination);
	REQUIRE(line.kernelAgrees);
	REQUIRE(line.agentAlone);
	CHECK(*line.agentAlone == c.agentAlone);
	REQUIRE(!line.claims.empty());
	tally.cases++;
	for (const std::string &what : c.covers)
		tally.covered[what]++;
	// The generator's model must agree with the kernel, or its undecidable marks mean nothing.
	if (expected.fate)
		CHECK(shows(*expected.fate, seen.address));
	bool undecided = false;
	for (const Claim &claim : line.claims) {
		INFO("claim: " << claim.text);
		if (claim.certain) {
			REQUIRE(claim.fate);
			CHECK(shows(*claim.fate, seen.address));
		} else {
			undecided = true;
			// "may" only where the evaluator cannot know.
			CHECK(!expected.undecidable.empty());
		}
	}
	tally.certain += undecided ? 0 : 1;
	tally.decidedAnyway += !undecided && !expected.undecidable.empty() ? 1 : 0;
	tally.undecidable += expected.undecidable.empty() ? 0 : 1;
	tally.conflicts += line.claims.front().text.rfind("; no other", 0) == 0 ? 0 : 1;
	// Every rule loaded, as the reader reads it, prints as nft lists it.
	const NftParity parity = requireNftText(readNat());
	tally.parity.rules += parity.rules;
	for (const auto &[which, count] : parity.documented)
		tally.parity.documented[which] += count;
}

} // namespace

TEST_CASE("--explain's whole-node clause against the source the external host sees, for generated "
	  "rulesets in other tables and each outputAddress form")
{
	const uint64_t seed = envNumber("IPMASQ_DIFF_SEED", kCiSeed);
	const size_t count = envNumber("IPMASQ_DIFF_CASES", kDefaultCases);
	{
		INFO("IPMASQ_DIFF_CASES: from " << kDefaultCases << " (fewer cannot cover the generator) to "
						<< kMaxCases);
		REQUIRE((kDefaultCases <= count && count <= kMaxCases));
	}
	const char *onlyText = std::getenv("IPMASQ_DIFF_ONLY");
	const bool only = onlyText && *onlyText;
	CAPTURE(seed);
	INFO("reproduce with IPMASQ_DIFF_SEED=" << seed << " (IPMASQ_DIFF_ONLY=<case> for one case), agent "
						<< agentUnderTest());

	Topology net;
	SourceEchoServer server(net.external);
	SourceEchoServer https(net.external, kHttpsPort);
	// The external host routes what the rules SNAT to back through the node; the node has
	// an address in the outputAddress subnet 198.18.200.0/24.
	net.external.runOrFail("ip route add 198.18.0.0/15 via 203.0.113.1");
	runOrFail(fmt::format("ip addr add {}/24 dev to-ext", kNodeSubnetAddress));

	Tally tally;
	const auto started = std::chrono::steady_clock::now();
	if (!only)
		for (const Case &c : fixedCases()) {
			INFO("a fixed case");
			runCase(net, c, tally);
		}
	const size_t first = only ? envNumber("IPMASQ_DIFF_ONLY", 0) : 0;
	const size_t last = only ? first + 1 : count;
	size_t ran = 0;
	for (size_t i = first; i < last; i++) {
		CAPTURE(i);
		runCase(net, generated(seed, i), tally);
		ran++;
	}
	flushRuleset();
	std::string documented;
	for (const auto &[which, n] : tally.parity.documented)
		documented += fmt::format("\n  {}: {}", which, n);
	WARN(fmt::format("seed {}: {} cases ({} generated) in {:.1f} s; {} certain, {} the model marks "
			 "undecidable ({} of them decided by --explain all the same), {} with a conflict; {} "
			 "rules compared with nft's listing, documented differences:{}",
			 seed, tally.cases, ran,
			 std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
			 tally.certain, tally.undecidable, tally.decidedAnyway, tally.conflicts,
			 tally.parity.rules, documented));
	CHECK(tally.cases == ran + (only ? 0 : fixedCases().size()));
	if (only)
		return; // one case by hand, to reproduce it
	// The run exercised every component, every outputAddress form, both decisions of the
	// agent and both registration orders (the CI seed does).
	CHECK(ran == count);
	std::vector<std::string> expected{"exempt", "not exempt", "registered after the agent", "port given",
					  "no port given"};
	for (size_t form = 0; form < 4; form++)
		expected.push_back(fmt::format("form {}", form));
	for (size_t kind = 0; kind < makers().size(); kind++)
		expected.push_back(fmt::format("component {}", kind));
	for (const std::string &what : expected) {
		INFO(what);
		CHECK(tally.covered[what] >= kCoveredAtLeast);
	}
}
